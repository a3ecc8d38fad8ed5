/* cpu/peak.h — this machine's real arithmetic peak, measured: the yardstick MFU is read against
 * when no other rate is given, and the ceiling the benchmark tables quote.
 *
 * Each OpenMP thread runs independent chains of fused multiply-adds on registers only (no load,
 * no store inside the loop), enough chains to hide the instruction's latency on every port that
 * can issue it, in timed repeats of about 10 ms; the best repeat wins. FLOPs are counted as two per
 * product (the multiply and its add): an fp32 FMA lane is 2 FLOPs, one VDPBF16PS lane (two bf16
 * products added into an fp32 accumulator) is 4. No other work enters the loop, so the rate is
 * an upper bound that a real kernel approaches, not a throughput it can be expected to reach.
 *
 * Paths are picked at run time from CPUID, widest first; every path can also be asked for by
 * name (the tests run them all).
 */
#ifndef SEEDGPT_PEAK_H
#define SEEDGPT_PEAK_H

typedef enum {
    PEAK_PORTABLE = 0,     /* fp32, C fmaf: 16 scalar chains */
    PEAK_AVX2 = 1,         /* fp32, _mm256_fmadd_ps: 12 chains x 8 lanes (16 ymm registers) */
    PEAK_AVX512 = 2,       /* fp32, _mm512_fmadd_ps: 16 chains x 16 lanes */
    PEAK_AVX512_BF16 = 3,  /* bf16 products, fp32 sums, _mm512_dpbf16_ps: 24 chains x 16 lanes */
} PeakPath;

/* The fp32 FMA rate in GFLOP/s at `threads` OpenMP threads (<= 0: omp_get_max_threads()),
 * measured for about `seconds` (<= 0: 0.2) on the widest fp32 path this CPU runs. Call it from
 * outside a parallel region (inside one, OpenMP gives the probe a team of one). */
double peak_fp32_gflops(int threads, double seconds);

/* The AVX512_BF16 dot-product rate in GFLOP/s (4 FLOPs per lane per VDPBF16PS), or exactly 0 where
 * the CPU (or this build) lacks avx512bf16. */
double peak_bf16_gflops(int threads, double seconds);

/* The same measurement on any one path; 0 where the path cannot run here. */
double peak_path_gflops(PeakPath p, int threads, double seconds);

int peak_path_supported(PeakPath p);     /* 1 if this CPU and this build can run p */
PeakPath peak_fp32_path(void);           /* the path peak_fp32_gflops takes */
const char* peak_path_name(PeakPath p);  /* "portable", "avx2", "avx512", "avx512bf16" */

/* The kernel behind the rates, exposed so that its FLOP count can be checked. One thread runs
 * `iters` iterations of path p with every chain starting at 0; an fp32 step is acc = acc*x + y,
 * a bf16 step adds x*y + x*y (both bf16 pairs of a lane hold x and y; x, y are rounded to bf16).
 * It returns the sum of all the accumulators' lanes, in double. With x = y = 1 every product adds
 * exactly 1, so the result is the number of products executed (exact while a lane stays below
 * 2^24), and twice that is the FLOP count, which must equal peak_path_flops(p, iters).
 * Returns 0 on a path that cannot run here. */
double peak_path_run(PeakPath p, long iters, float x, float y);

/* The FLOPs one thread executes in `iters` iterations of path p: iters x chains x lanes x 2
 * (fp32) or x 4 (bf16). The timed rates divide exactly this by the elapsed time. */
double peak_path_flops(PeakPath p, long iters);

#endif
