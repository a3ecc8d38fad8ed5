/* cpu/backend_cpu.h — what the CPU backend's tables (model/backend.c) hold besides the ops of
 * model/ops.h and cpu/ops_bf16_cpu.h: the memory ops of host memory, and what the backend says of
 * itself (the rate MFU reads against, ./train peak's rows, the bf16 GEMM path a run takes).
 */
#ifndef SEEDGPT_BACKEND_CPU_H
#define SEEDGPT_BACKEND_CPU_H

#include <stddef.h>
#include <stdio.h>
#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory: the CPU's memory is host memory (model/mem.h allocates it) ---- */
/* dst = src (bytes); a no-op when they are the same buffer */
void copy_cpu(void* dst, const void* src, size_t bytes);
/* x (n) = value, on every thread past 64 Ki floats and with non-temporal stores past 64 MiB */
void fill_cpu(float* x, size_t n, float value);
/* the elements of a and b (n) whose bits differ (the recompute value check) */
size_t count_differ_cpu(const float* a, const float* b, size_t n);
/* rows x width floats from src (rows src_stride apart) to dst (rows dst_stride apart) */
void copy_rows_cpu(float* dst, size_t dst_stride, const float* src, size_t src_stride,
                   size_t rows, size_t width);

/* ---- what the backend says of itself (Backend.peak_gflops, .peak_report, .describe) ---- */
/* the fp32 FMA peak measured at `threads` (cpu/peak.h), whatever be's precision: the products
 * of both CPU tables run at most at the FMA rate; line says so, with OpenBLAS's sgemm beside it */
double peak_gflops_cpu(const Backend* be, int threads, char* line, size_t cap);
/* ./train peak: the fp32 FMA and bf16 dot-product rates and OpenBLAS's sgemm as table rows on f;
 * their JSON fields appended to json */
void peak_report_cpu(FILE* f, int threads, double seconds, char* json, size_t cap);
/* the bf16 table's line: the path gemm_bf16 takes on this CPU (cpu/gemm_cpu.h) */
void describe_bf16_cpu(char* line, size_t cap);
/* the same for --precision fp16 (the fp32 GEMM path its products take) */
void describe_fp16_cpu(char* line, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
