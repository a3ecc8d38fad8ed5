/* tests/cuda/test_cuda_peak.cu — the documented GPU peak (cuda/device_peak.cu): the table times
 * SMs times clock gives NVIDIA's published figures for the products its comment names, an
 * architecture outside the table gives no rate and says so, and the device the runtime reports
 * is described as what it is: the emulation as the emulation (no rate), a GPU with its own SM
 * count, clock and compute capability. Nothing launches a kernel.
 *
 * The implementation is included, so this test links only the runtime (Makefile: tests of
 * tests/cuda/ that include no model/ header).
 */
#include "cuda/device_peak.cu"
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

static double rel(double got, double want) { return fabs(got - want) / want; }

/* one product: its name, compute capability, SMs, clocks (fp32's, tensor cores') and published
 * TFLOP/s (fp32, bf16 and fp16 tensor cores with fp32 sums, dense; 0: the part has none) */
typedef struct {
    const char* test;
    const char* name;
    int major, minor, sms, fp32_khz, tc_khz;
    double fp32_tflops, bf16_tflops, fp16_tflops;
} Published;

/* got within 1% of want, or both 0 */
static int near(double got, double want) { return want == 0 ? got == 0 : rel(got, want) < 0.01; }

static void table_gives_published_rates(void) {
    static const Published P[] = {
        /* H100 SXM: the fp32 figure is at the 1980 MHz the runtime reports, bf16's at 1830 */
        {"sm90_h100_sxm_published_rates", "NVIDIA H100 80GB HBM3", 9, 0, 132, 1980000, 1830000, 66.9, 989.4, 989.4},
        {"sm90_h200_sxm_published_rates", "NVIDIA H200", 9, 0, 132, 1980000, 1830000, 66.9, 989.4, 989.4},
        {"sm80_a100_sxm_published_rates", "NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410000, 1410000, 19.5, 312.0, 312.0},
        {"sm86_a40_published_rates", "NVIDIA A40", 8, 6, 84, 1740000, 1740000, 37.4, 149.7, 149.7},
        {"sm86_a10_published_rates", "NVIDIA A10", 8, 6, 72, 1695000, 1695000, 31.2, 125.0, 125.0},
        {"sm86_geforce_rtx3090_tc_half_rate", "NVIDIA GeForce RTX 3090", 8, 6, 82, 1695000, 1695000, 35.6, 71.0, 71.0},
        {"sm89_rtx6000_ada_published_rates", "NVIDIA RTX 6000 Ada Generation", 8, 9, 142, 2505000, 2505000, 91.1, 364.2, 364.2},
        {"sm89_l4_published_rates", "NVIDIA L4", 8, 9, 58, 2040000, 2040000, 30.3, 121.0, 121.0},
        {"sm89_geforce_rtx4090_tc_half_rate", "NVIDIA GeForce RTX 4090", 8, 9, 128, 2520000, 2520000, 82.6, 165.2, 165.2},
        /* Turing and Volta: fp16 tensor cores, no bf16 */
        {"sm75_t4_published_rates", "Tesla T4", 7, 5, 40, 1590000, 1590000, 8.1, 0, 65.0},
        {"sm70_v100_sxm2_published_rates", "Tesla V100-SXM2-16GB", 7, 0, 80, 1530000, 1530000, 15.7, 0, 125.0},
    };
    for (size_t i = 0; i < sizeof(P) / sizeof(P[0]); i++) {
        const Published* p = &P[i];
        DevicePeak a, b;
        int ka = device_peak_from_table(p->name, p->major, p->minor, p->sms, p->fp32_khz, &a);
        int kb = device_peak_from_table(p->name, p->major, p->minor, p->sms, p->tc_khz, &b);
        expect(ka && kb && a.rates_known && near(a.fp32_gflops, p->fp32_tflops * 1000) &&
               near(b.bf16_gflops, p->bf16_tflops * 1000) && near(b.fp16_gflops, p->fp16_tflops * 1000) &&
               a.sm_count == p->sms && a.clock_khz == p->fp32_khz && a.cc_major == p->major &&
               a.cc_minor == p->minor && !a.emulated, p->test,
               "%s, %d SMs: fp32 %.1f TFLOP/s at %d MHz (published %.1f), at %d MHz bf16 %.1f (published %.1f), "
               "fp16 %.1f (published %.1f); %d lanes, %d bf16 and %d fp16 FLOPs/clk/SM", p->name, p->sms,
               a.fp32_gflops / 1000, p->fp32_khz / 1000, p->fp32_tflops, p->tc_khz / 1000, b.bf16_gflops / 1000,
               p->bf16_tflops, b.fp16_gflops / 1000, p->fp16_tflops, a.fp32_lanes_per_sm,
               b.bf16_flops_per_clk_sm, b.fp16_flops_per_clk_sm);
    }
}

static void unknown_arch_gives_no_rate(void) {
    static const int cc[][2] = {{6, 1}, {8, 7}, {12, 0}};
    int ok = 1;
    char seen[256] = "";
    for (size_t i = 0; i < sizeof(cc) / sizeof(cc[0]); i++) {
        DevicePeak d;
        int k = device_peak_from_table("some future GPU", cc[i][0], cc[i][1], 40, 1500000, &d);
        ok = ok && k == 0 && d.rates_known == 0 && d.fp32_gflops == 0 && d.bf16_gflops == 0 && d.fp16_gflops == 0 &&
             d.fp32_lanes_per_sm == 0 && d.bf16_flops_per_clk_sm == 0 && d.sm_count == 40 &&
             d.clock_khz == 1500000 && d.cc_major == cc[i][0] && d.cc_minor == cc[i][1];
        size_t n = strlen(seen);
        snprintf(seen + n, sizeof(seen) - n, "%ssm_%d%d: known %d, fp32 %g, bf16 %g", i ? "; " : "",
                 cc[i][0], cc[i][1], d.rates_known, d.fp32_gflops, d.bf16_gflops);
    }
    expect(ok, "unknown_arch_gives_zero_rates_and_flag", "%s (SM count and clock kept)", seen);
    DevicePeak z;
    int k = device_peak_from_table("NVIDIA H100 80GB HBM3", 9, 0, 0, 1980000, &z);
    expect(k == 0 && z.rates_known == 0 && z.bf16_gflops == 0, "zero_sm_count_gives_no_rate",
           "known %d, bf16 %g", z.rates_known, z.bf16_gflops);
}

static void device_reported_as_itself(void) {
    DevicePeak d;
    int rc = device_peak_cuda(&d);
    cudaError_t pending = cudaGetLastError();
    if (rc != 0) {
        expect(!EMU_ONLY && pending == cudaSuccess, "device_reported_as_itself",
               "rc %d: %s (pending error: %s)", rc, d.name, cudaGetErrorString(pending));
        return;
    }
    cudaDeviceProp p;
    SG_CHECK(cudaGetDeviceProperties(&p, d.device));
    int common = pending == cudaSuccess && d.sm_count == p.multiProcessorCount && d.cc_major == p.major &&
                 d.cc_minor == p.minor && d.clock_khz > 0 && strcmp(d.name, p.name) == 0;
    if (EMU_ONLY)
        expect(common && d.emulated == 1 && d.rates_known == 0 && d.fp32_gflops == 0 && d.bf16_gflops == 0 &&
               strstr(d.name, "emulation") != NULL && d.cc_major == 9 && d.cc_minor == 0,
               "emulated_device_reported_as_emulation",
               "\"%s\": sm_%d%d, %d SMs at %d MHz, emulated %d, rates known %d (fp32 %g, bf16 %g)", d.name,
               d.cc_major, d.cc_minor, d.sm_count, d.clock_khz / 1000, d.emulated, d.rates_known,
               d.fp32_gflops, d.bf16_gflops);
    else
        expect(common && d.emulated == 0 && (d.rates_known ? d.fp32_gflops > 0 && d.bf16_gflops > 0
                                                            : d.fp32_gflops == 0 && d.bf16_gflops == 0),
               "gpu_reported_with_its_documented_peak",
               "\"%s\": sm_%d%d, %d SMs at %d MHz: fp32 %.1f TFLOP/s, dense bf16 %.1f TFLOP/s%s", d.name,
               d.cc_major, d.cc_minor, d.sm_count, d.clock_khz / 1000, d.fp32_gflops / 1000,
               d.bf16_gflops / 1000, d.rates_known ? "" : " (not in the table)");
    /* an ordinal past the last device is refused */
    int count = 0, v = -7;
    SG_CHECK(cudaGetDeviceCount(&count));
    cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, count);
    (void)cudaGetLastError();
    expect(e == cudaErrorInvalidDevice, "attribute_of_missing_device_refused", "device %d: \"%s\"", count,
           cudaGetErrorString(e));
}

int main(void) {
    table_gives_published_rates();
    unknown_arch_gives_no_rate();
    device_reported_as_itself();
    return test_finish();
}
