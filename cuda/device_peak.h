/* cuda/device_peak.h — the GPU's documented dense peak (cuda/device_peak.cu): what the runtime
 * says the device is (name, SMs, clock, compute capability) times NVIDIA's published per-SM
 * throughput for its architecture. The yardstick MFU is read against on a GPU; nothing is
 * measured. Plain C: gcc-built callers (train.c under SEEDGPT_CUDA, the benchmarks) link it from
 * a CUDA build only.
 */
#ifndef SEEDGPT_DEVICE_PEAK_H
#define SEEDGPT_DEVICE_PEAK_H

#include <stddef.h>
#include <stdio.h>
#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];              /* the runtime's device name */
    int device;                  /* the ordinal queried: the current device */
    int sm_count;                /* streaming multiprocessors */
    int clock_khz;               /* the SM clock the runtime reports (cudaDevAttrClockRate, kHz) */
    int cc_major, cc_minor;      /* compute capability */
    int fp32_lanes_per_sm;       /* FP32 FMA lanes per SM (table; 0 where unknown) */
    int bf16_flops_per_clk_sm;   /* dense bf16 tensor-core FLOPs per SM per clock, fp32 sums
                                    (table; 0 where unknown) */
    int fp16_flops_per_clk_sm;   /* dense fp16 tensor-core FLOPs per SM per clock, fp32 sums
                                    (table; 0 where unknown) */
    double fp32_gflops;          /* fp32_lanes_per_sm x 2 x sm_count x clock, GFLOP/s */
    double bf16_gflops;          /* bf16_flops_per_clk_sm x sm_count x clock, GFLOP/s (0 below
                                    sm_80: no bf16 tensor cores) */
    double fp16_gflops;          /* fp16_flops_per_clk_sm x sm_count x clock, GFLOP/s */
    int rates_known;             /* 1: the rates above are the table's; 0: not in the table (or
                                    the emulation), both rates 0 */
    int emulated;                /* 1: the CPU emulation (cuda/emu/cuda_emu.h), not a GPU */
} DevicePeak;

/* Fills *out for the current device. Returns 0, or -1 where there is no device (out zeroed, its
 * name the runtime's reason); never exits and leaves no CUDA error pending. In the emulation the
 * device is the sm_90 it imitates, with emulated = 1 and no rates. */
int device_peak_cuda(DevicePeak* out);

/* The table arithmetic alone, no device needed (the tests; a machine described by hand): fills
 * *out from a compute capability, an SM count and a clock. The name matters only for GeForce parts
 * of sm_75, sm_86 and sm_89, whose tensor-core rates with fp32 sums are half the table's. Returns
 * rates_known. */
int device_peak_from_table(const char* name, int cc_major, int cc_minor, int sm_count, int clock_khz,
                           DevicePeak* out);

/* What the CUDA tables say of themselves (model/backend.h: Backend.peak_gflops, .peak_report).
 * peak_gflops_cuda: the device's documented dense rate at be's precision (bf16 tensor cores or
 * fp32), with the line that says so; 0 where the table has no rate for it (and the emulation).
 * peak_report_cuda: ./train peak's GPU row on f; it adds no JSON field. */
double peak_gflops_cuda(const Backend* be, int threads, char* line, size_t cap);
void peak_report_cuda(FILE* f, int threads, double seconds, char* json, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
