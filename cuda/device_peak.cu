/* cuda/device_peak.cu — the GPU's documented dense peak (cuda/device_peak.h): the runtime's SM
 * count, clock and compute capability times the per-SM throughput NVIDIA publishes for the
 * architecture. Host code only: no kernel, and no error that outlives the call.
 *
 * The clock is cudaDevAttrClockRate (CUDA 13 removed cudaDeviceProp::clockRate): the SM boost
 * clock the device reports, so the rates are the ceiling at that clock. NVIDIA's published figures
 * do not all use one clock: the H100 SXM's fp32 figure (66.9 TFLOP/s) works out to the 1980 MHz
 * the runtime reports, its dense bf16 figure (989.4 TFLOP/s) to 1830 MHz, so at the reported
 * clock this file's bf16 rate for that part is 8% above the quoted number.
 */
#include "cuda/device.h"
#include <string.h>
#include "cuda/device_peak.h"

/* Per-SM throughput by compute capability, dense (no 2:4 sparsity), fp16 and bf16 tensor cores
 * with fp32 sums. The per-SM figures are those of NVIDIA's architecture whitepapers; each is
 * checked against a product the paper (or its datasheet) lists: published TFLOP/s = per-SM
 * FLOPs/clock x SMs x boost clock (tests/cuda/test_cuda_peak.cu reproduces every product named).
 *   sm_70  V100 (NVIDIA Tesla V100 GPU Architecture): 64 FP32 lanes per SM; 8 tensor cores of 64
 *          FP16 FMA a clock = 1024 FLOPs per SM; no bf16. V100 SXM2, 80 SMs at 1530 MHz:
 *          15.7 TFLOP/s fp32, 125 fp16 tensor.
 *   sm_75  T4 / RTX 20 (NVIDIA Turing GPU Architecture; Tesla T4 datasheet): 64 FP32 lanes; 8
 *          tensor cores of 64 FP16 FMA = 1024 FLOPs per SM; no bf16. T4, 40 SMs at 1590 MHz: 8.1
 *          fp32, 65 fp16 tensor. GeForce RTX 20 parts sum fp16 products in fp32 at half that rate.
 *   sm_80  A100 (NVIDIA A100 Tensor Core GPU Architecture): 64 FP32 lanes per SM; 4 tensor
 *          cores of 256 FP16/BF16 FMA a clock = 2048 FLOPs per SM. A100 SXM, 108 SMs at
 *          1410 MHz: 19.5 TFLOP/s fp32, 312 fp16 and bf16.
 *   sm_86  GA10x (NVIDIA Ampere GA102 GPU Architecture): 128 FP32 lanes per SM (both datapaths
 *          of 64 run FP32); 1024 fp16/bf16 FLOPs per SM at the full rate. A40, 84 SMs at 1740 MHz:
 *          37.4 fp32, 149.7 bf16; A10 (datasheet), 72 SMs at 1695 MHz: 31.2 fp32, 125 bf16.
 *          GeForce RTX 30 parts sum fp16/bf16 products in fp32 at half that rate: RTX 3090, 82
 *          SMs at 1695 MHz: 35.6 fp32, 71 bf16.
 *   sm_89  AD10x (NVIDIA Ada GPU Architecture): as sm_86, 128 lanes and 1024 at the full rate
 *          (RTX 6000 Ada, 142 SMs at 2505 MHz: 91.1 fp32, 364.2 bf16; L4 (datasheet), 58 SMs at
 *          2040 MHz: 30.3 fp32, 121 fp16/bf16), half on GeForce RTX 40 (RTX 4090, 128 SMs at
 *          2520 MHz: 82.6 fp32, 165.2 bf16).
 *   sm_90  H100 / H200 (NVIDIA H100 Tensor Core GPU Architecture; H200 datasheet): 128 FP32
 *          lanes per SM; 4 tensor cores of 512 dense fp16/bf16 FMA a clock = 4096 FLOPs per SM.
 *          H100 SXM and H200 SXM, 132 SMs: 66.9 fp32 at 1980 MHz, 989.4 bf16 at 1830 MHz (see
 *          the top of the file).
 * Other products of the same compute capability may ship with a reduced rate: the datasheet has
 * the last word, and a caller can always be given its rate by hand. */
typedef struct {
    int major, minor;
    int fp32_lanes_per_sm;
    int bf16_flops_per_clk_sm;
    int fp16_flops_per_clk_sm;
    int geforce_tc_half;        /* GeForce parts: fp16/bf16 with fp32 sums at half the rate */
} ArchPeak;

static const ArchPeak ARCH_TABLE[] = {
    {7, 0, 64, 0, 1024, 0},
    {7, 5, 64, 0, 1024, 1},
    {8, 0, 64, 2048, 2048, 0},
    {8, 6, 128, 1024, 1024, 1},
    {8, 9, 128, 1024, 1024, 1},
    {9, 0, 128, 4096, 4096, 0},
};

extern "C" int device_peak_from_table(const char* name, int cc_major, int cc_minor, int sm_count,
                                      int clock_khz, DevicePeak* out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", name ? name : "");
    out->sm_count = sm_count;
    out->clock_khz = clock_khz;
    out->cc_major = cc_major;
    out->cc_minor = cc_minor;
    if (sm_count <= 0 || clock_khz <= 0) return 0;
    for (size_t i = 0; i < sizeof(ARCH_TABLE) / sizeof(ARCH_TABLE[0]); i++) {
        const ArchPeak* a = &ARCH_TABLE[i];
        if (a->major != cc_major || a->minor != cc_minor) continue;
        int bf16 = a->bf16_flops_per_clk_sm, fp16 = a->fp16_flops_per_clk_sm;
        if (a->geforce_tc_half && name && strstr(name, "GeForce")) {
            bf16 /= 2;
            fp16 /= 2;
        }
        double clocks_g = (double)sm_count * clock_khz * 1e-6;   /* SM-clocks a second, x 1e9 */
        out->fp32_lanes_per_sm = a->fp32_lanes_per_sm;
        out->bf16_flops_per_clk_sm = bf16;
        out->fp32_gflops = 2.0 * a->fp32_lanes_per_sm * clocks_g;
        out->bf16_gflops = (double)bf16 * clocks_g;
        out->fp16_flops_per_clk_sm = fp16;
        out->fp16_gflops = (double)fp16 * clocks_g;
        out->rates_known = 1;
        return 1;
    }
    return 0;
}

/* no device, or a query failed: out zeroed, the reason as its name, the sticky error cleared */
static int no_device(DevicePeak* out, const char* what, cudaError_t err) {
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "no CUDA device: %s: %s", what, cudaGetErrorString(err));
    (void)cudaGetLastError();
    return -1;
}

extern "C" int device_peak_cuda(DevicePeak* out) {
    int count = 0, dev = 0, sms = 0, clock_khz = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return no_device(out, "cudaGetDeviceCount", err);
    if (count == 0) {
        memset(out, 0, sizeof(*out));
        snprintf(out->name, sizeof(out->name), "no CUDA device: the runtime counts none");
        return -1;
    }
    if ((err = cudaGetDevice(&dev)) != cudaSuccess) return no_device(out, "cudaGetDevice", err);
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess)
        return no_device(out, "cudaDeviceGetAttribute", err);
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        return no_device(out, "cudaGetDeviceProperties", err);
    device_peak_from_table(prop.name, major, minor, sms, clock_khz, out);
    out->device = dev;
#ifdef SG_EMU
    /* the emulation imitates an sm_90's limits on the CPU: it has no tensor cores and no
     * documented rate; its speed is the CPU's (cpu/peak.h) */
    out->emulated = 1;
    out->fp32_lanes_per_sm = 0;
    out->bf16_flops_per_clk_sm = 0;
    out->fp16_flops_per_clk_sm = 0;
    out->fp32_gflops = 0;
    out->bf16_gflops = 0;
    out->fp16_gflops = 0;
    out->rates_known = 0;
#endif
    return 0;
}

extern "C" double peak_gflops_cuda(const Backend* be, int threads, char* line, size_t cap) {
    (void)threads;
    DevicePeak d;
    int bf16 = strcmp(be->precision, "bf16") == 0;
    double g = 0;
    if (device_peak_cuda(&d) == 0 && d.rates_known) g = bf16 ? d.bf16_gflops : d.fp32_gflops;
    if (g > 0) {
        snprintf(line, cap, "peak: %s %.1f TFLOP/s dense %s, documented for %s (%d SMs at %d MHz; MFU is "
                 "against it; --peak-gflops X to set)", bf16 ? "bf16 tensor-core" : "fp32", g / 1e3,
                 bf16 ? "bf16" : "fp32", d.name, d.sm_count, d.clock_khz / 1000);
        return g;
    }
    snprintf(line, cap, "peak: no documented rate for %s (no MFU; --peak-gflops X to set)", d.name);
    return 0;
}

extern "C" void peak_report_cuda(FILE* f, int threads, double seconds, char* json, size_t cap) {
    (void)threads; (void)seconds; (void)json; (void)cap;
    DevicePeak d;
    if (device_peak_cuda(&d) == 0 && d.rates_known)
        fprintf(f, "  GPU %s: fp32 %.1f TFLOP/s, tensor-core fp16 %.1f, bf16 %.1f TFLOP/s dense "
                "(documented; %d SMs at %d MHz)\n", d.name, d.fp32_gflops / 1e3, d.fp16_gflops / 1e3,
                d.bf16_gflops / 1e3, d.sm_count, d.clock_khz / 1000);
    else
        fprintf(f, "  GPU: %s (no documented rate)\n", d.name[0] ? d.name : "none");
}
