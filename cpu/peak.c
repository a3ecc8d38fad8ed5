/* cpu/peak.c — the CPU's measured FMA peak (cpu/peak.h). Owns nothing but its kernels and
 * their timing; it reads no tensor and touches no other module.
 *
 * A kernel keeps C accumulators ("chains") in registers and updates each once per iteration:
 * C independent dependency chains, so C instructions can be in flight at once. A core with P FMA
 * pipes of latency L needs C >= P x L to issue every cycle (fp32 FMA on recent x86: P = 2, L = 4,
 * so 8; VDPBF16PS has a longer latency); the kernels keep more, as many as the register file holds
 * with the two operands beside them. The operands are function arguments, so nothing folds at compile time, and the
 * chains' sum is returned and stored, so nothing is dead. The project compiles in ISO C mode,
 * where gcc contracts no a*b+c into an FMA by itself: every FMA here is written out (fmaf or an
 * intrinsic). The values stay normal floats (no denormal slow path): an fp32 chain converges to 1
 * (x = 1 - 2^-12, y = 2^-12), a bf16 chain grows by 2^-15 a step until it stops changing.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include "cpu/peak.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PEAK_X86 1
#else
#define PEAK_X86 0
#endif

enum {
    PORTABLE_CHAINS = 16,
    AVX2_CHAINS = 12,     /* + x, y: 14 of the 16 ymm registers */
    AVX512_CHAINS = 16,
    BF16_CHAINS = 24,     /* + x, y: 26 of the 32 zmm registers */
};

/* ---- kernels -----------------------------------------------------------------------------------
 * iters steps of every chain; returned: the sum over all lanes of (final value - start value).
 * Chain c starts at c: chains that started equal would be one computation to the compiler, which
 * keeps one of them (gcc does). */

__attribute__((noinline))
static double kernel_portable(long iters, float x, float y) {
    float acc[PORTABLE_CHAINS];
    for (int c = 0; c < PORTABLE_CHAINS; c++) acc[c] = (float)c;
    for (long i = 0; i < iters; i++) {
        #pragma GCC unroll 16
        for (int c = 0; c < PORTABLE_CHAINS; c++) acc[c] = fmaf(acc[c], x, y);
    }
    double sum = 0;
    for (int c = 0; c < PORTABLE_CHAINS; c++) sum += (double)acc[c] - c;
    return sum;
}

#if PEAK_X86
__attribute__((target("avx2,fma"), noinline))
static double kernel_avx2(long iters, float x, float y) {
    __m256 vx = _mm256_set1_ps(x), vy = _mm256_set1_ps(y);
    __m256 acc[AVX2_CHAINS];
    #pragma GCC unroll 12
    for (int c = 0; c < AVX2_CHAINS; c++) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; i++) {
        #pragma GCC unroll 12
        for (int c = 0; c < AVX2_CHAINS; c++) acc[c] = _mm256_fmadd_ps(acc[c], vx, vy);
    }
    float lanes[8];
    double sum = 0;
    for (int c = 0; c < AVX2_CHAINS; c++) {
        _mm256_storeu_ps(lanes, acc[c]);
        for (int l = 0; l < 8; l++) sum += (double)lanes[l] - c;
    }
    return sum;
}

__attribute__((target("avx512f"), noinline))
static double kernel_avx512(long iters, float x, float y) {
    __m512 vx = _mm512_set1_ps(x), vy = _mm512_set1_ps(y);
    __m512 acc[AVX512_CHAINS];
    #pragma GCC unroll 16
    for (int c = 0; c < AVX512_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++) {
        #pragma GCC unroll 16
        for (int c = 0; c < AVX512_CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], vx, vy);
    }
    float lanes[16];
    double sum = 0;
    for (int c = 0; c < AVX512_CHAINS; c++) {
        _mm512_storeu_ps(lanes, acc[c]);
        for (int l = 0; l < 16; l++) sum += (double)lanes[l] - c;
    }
    return sum;
}

/* VDPBF16PS: fp32 lane l += a[2l]*b[2l] + a[2l+1]*b[2l+1], the a and b halves bf16. Every bf16 of
 * a is x and every one of b is y (rounded to nearest even), so a lane adds 2xy per step. */
__attribute__((target("avx512f,avx512bf16"), noinline))
static double kernel_avx512_bf16(long iters, float x, float y) {
    __m512bh va = _mm512_cvtne2ps_pbh(_mm512_set1_ps(x), _mm512_set1_ps(x));
    __m512bh vb = _mm512_cvtne2ps_pbh(_mm512_set1_ps(y), _mm512_set1_ps(y));
    __m512 acc[BF16_CHAINS];
    #pragma GCC unroll 24
    for (int c = 0; c < BF16_CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++) {
        #pragma GCC unroll 24
        for (int c = 0; c < BF16_CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], va, vb);
    }
    float lanes[16];
    double sum = 0;
    for (int c = 0; c < BF16_CHAINS; c++) {
        _mm512_storeu_ps(lanes, acc[c]);
        for (int l = 0; l < 16; l++) sum += (double)lanes[l] - c;
    }
    return sum;
}
#endif

/* ---- paths ------------------------------------------------------------------------------------ */

typedef double (*PeakKernel)(long iters, float x, float y);

typedef struct {
    PeakKernel kernel;     /* NULL: not in this build */
    int chains, lanes;
    int flops_per_lane;    /* per instruction: 2 (one FMA) or 4 (two products and their sums) */
    float x, y;            /* the timed operands */
} PathDesc;

static PathDesc path_desc(PeakPath p) {
    switch (p) {
    case PEAK_PORTABLE: return (PathDesc){kernel_portable, PORTABLE_CHAINS, 1, 2, 1.0f - 0x1p-12f, 0x1p-12f};
#if PEAK_X86
    case PEAK_AVX2: return (PathDesc){kernel_avx2, AVX2_CHAINS, 8, 2, 1.0f - 0x1p-12f, 0x1p-12f};
    case PEAK_AVX512: return (PathDesc){kernel_avx512, AVX512_CHAINS, 16, 2, 1.0f - 0x1p-12f, 0x1p-12f};
    case PEAK_AVX512_BF16: return (PathDesc){kernel_avx512_bf16, BF16_CHAINS, 16, 4, 0x1p-8f, 0x1p-8f};
#else
    case PEAK_AVX2: return (PathDesc){NULL, AVX2_CHAINS, 8, 2, 0, 0};
    case PEAK_AVX512: return (PathDesc){NULL, AVX512_CHAINS, 16, 2, 0, 0};
    case PEAK_AVX512_BF16: return (PathDesc){NULL, BF16_CHAINS, 16, 4, 0, 0};
#endif
    }
    return (PathDesc){NULL, 0, 0, 0, 0, 0};
}

const char* peak_path_name(PeakPath p) {
    switch (p) {
    case PEAK_PORTABLE: return "portable";
    case PEAK_AVX2: return "avx2";
    case PEAK_AVX512: return "avx512";
    case PEAK_AVX512_BF16: return "avx512bf16";
    }
    return "unknown";
}

int peak_path_supported(PeakPath p) {
    if (path_desc(p).kernel == NULL) return 0;
    if (p == PEAK_PORTABLE) return 1;
#if PEAK_X86
    /* libgcc's CPUID reading also checks that the OS saves the vector registers (XGETBV) */
    __builtin_cpu_init();
    if (p == PEAK_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (p == PEAK_AVX512) return __builtin_cpu_supports("avx512f");
    if (p == PEAK_AVX512_BF16)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#endif
    return 0;
}

PeakPath peak_fp32_path(void) {
    if (peak_path_supported(PEAK_AVX512)) return PEAK_AVX512;
    if (peak_path_supported(PEAK_AVX2)) return PEAK_AVX2;
    return PEAK_PORTABLE;
}

double peak_path_flops(PeakPath p, long iters) {
    PathDesc d = path_desc(p);
    return (double)iters * d.chains * d.lanes * d.flops_per_lane;
}

double peak_path_run(PeakPath p, long iters, float x, float y) {
    if (!peak_path_supported(p) || iters <= 0) return 0;
    return path_desc(p).kernel(iters, x, y);
}

/* ---- timing ----------------------------------------------------------------------------------- */

static volatile double peak_sink;   /* every kernel's result lands here: none is dead code */

/* A repeat lasts about REPEAT_SECONDS: short enough that some repeat runs inside one scheduler
 * time slice on a shared machine, long enough that the barriers and the clock are noise */
#define REPEAT_SECONDS 0.01

double peak_path_gflops(PeakPath p, int threads, double seconds) {
    if (!peak_path_supported(p)) return 0;
    PathDesc d = path_desc(p);
    if (threads <= 0) threads = omp_get_max_threads();
    if (!(seconds > 0)) seconds = 0.2;
    double repeat_s = seconds < 3 * REPEAT_SECONDS ? seconds / 3 : REPEAT_SECONDS;
    int repeats = (int)(seconds / repeat_s + 0.5);
    /* calibrate on this thread: grow the iteration count until one run takes a millisecond */
    long iters = 256;
    double t = 0;
    for (;;) {
        double t0 = omp_get_wtime();
        peak_sink = d.kernel(iters, d.x, d.y);
        t = omp_get_wtime() - t0;
        if (t >= 1e-3 || iters >= (1L << 40)) break;
        iters *= 4;
    }
    double want = iters * repeat_s / (t > 0 ? t : 1e-3);
    long n = want < 1 ? 1 : want > 1e15 ? (long)1e15 : (long)want;
    /* the timed repeats, every thread running n iterations between two barriers; the best wins
     * (a repeat is slowed by anything else on the core, never sped up) */
    double best = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = 0, t1 = 0;
        int team = 1;
        #pragma omp parallel num_threads(threads)
        {
            #pragma omp master
            {
                team = omp_get_num_threads();   /* the team may be smaller than asked */
                t0 = omp_get_wtime();
            }
            #pragma omp barrier
            double s = d.kernel(n, d.x, d.y);
            #pragma omp barrier
            #pragma omp master
            t1 = omp_get_wtime();
            #pragma omp critical
            peak_sink = peak_sink + s;
        }
        double dt = t1 - t0;
        if (dt <= 0) continue;
        double rate = team * peak_path_flops(p, n) / dt / 1e9;
        if (rate > best) best = rate;
    }
    return best;
}

double peak_fp32_gflops(int threads, double seconds) {
    return peak_path_gflops(peak_fp32_path(), threads, seconds);
}

double peak_bf16_gflops(int threads, double seconds) {
    return peak_path_gflops(PEAK_AVX512_BF16, threads, seconds);
}
