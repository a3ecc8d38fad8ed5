/* dev/cuda/common.h — the harness every dev/cuda program shares: command line, random inputs,
 * device buffers, the check lines, and the timer.
 *
 * A dev/cuda program is one op: a CPU reference, numbered kernel variants (1 the simplest, higher
 * numbers later ideas, one of them the production kernel the trainer runs), each validated
 * against the reference and then timed. `./prog` runs every variant, `./prog K` variant K only.
 *
 * Two builds of the same source (Makefile: make dev-cuda, make dev-cuda-emu):
 *   - nvcc: validation at the given shapes, then timing with cudaEvent (DEV_WARMUP launches, then
 *     the mean over --reps launches), printed as a table row and one JSON line per variant;
 *   - C++ with -DSG_EMU against cuda/emu/cuda_emu.h: the kernels run on the CPU, so only the
 *     validation runs, at tiny shapes (the emulation has no events and no notion of speed).
 *     `--validate` does the same on a GPU build, at the shapes given.
 * Each validated variant prints one line "ok   dev_cuda_<op>_v<k>: ..." or "FAIL ...", which
 * tests/run.sh counts; a variant that fails its validation is not timed, and the program exits 1.
 *
 * Only what cuda/device.h names is used in kernels, plus float4, defined below for the
 * emulation (a 16-byte aligned struct: what a vectorised load reads on a GPU).
 */
#ifndef SEEDGPT_DEV_CUDA_COMMON_H
#define SEEDGPT_DEV_CUDA_COMMON_H

#include "cuda/device.h"
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SG_EMU
struct __align__(16) float4 {
    float x, y, z, w;
};
#endif

#define DEV_WARMUP 5      /* untimed launches before the timed ones: clocks, caches, attributes */
#define DEV_REPS 20       /* timed launches, averaged (--reps) */

/* ---- command line ------------------------------------------------------------------------- */

/* one integer flag a program takes (--B 16): its name and where it goes */
typedef struct {
    const char* flag;
    int* value;
} DevFlag;

typedef struct {
    int variant;        /* 0: every variant */
    int validate_only;  /* --validate, and always under the emulation */
    int reps;
} DevArgs;

/* usage: prog [K] [--validate] [--reps N] [--flag N]...; one line and exit 2 on a bad word */
static inline DevArgs dev_parse(int argc, char** argv, const char* prog, int nvariants,
                                const DevFlag* flags, int nflags) {
    DevArgs a = {0, 0, DEV_REPS};
#ifdef SG_EMU
    a.validate_only = 1;
#endif
    for (int i = 1; i < argc; i++) {
        const char* w = argv[i];
        char* end;
        if (w[0] != '-') {
            long k = strtol(w, &end, 10);
            if (*end || k < 1 || k > nvariants) {
                fprintf(stderr, "%s: the variant is a number from 1 to %d, got '%s'\n", prog,
                        nvariants, w);
                exit(2);
            }
            a.variant = (int)k;
            continue;
        }
        if (!strcmp(w, "--validate")) { a.validate_only = 1; continue; }
        int* dst = NULL;
        if (!strcmp(w, "--reps")) dst = &a.reps;
        for (int f = 0; f < nflags && dst == NULL; f++)
            if (!strcmp(w, flags[f].flag)) dst = flags[f].value;
        if (dst == NULL) {
            fprintf(stderr, "%s: unknown flag %s (usage: %s [variant 1..%d] [--validate] [--reps N]",
                    prog, w, prog, nvariants);
            for (int f = 0; f < nflags; f++) fprintf(stderr, " [%s N]", flags[f].flag);
            fprintf(stderr, ")\n");
            exit(2);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", prog, w);
            exit(2);
        }
        long v = strtol(argv[++i], &end, 10);
        if (*end || v < 1 || v > (1L << 30)) {
            fprintf(stderr, "%s: %s wants a positive integer, got '%s'\n", prog, w, argv[i]);
            exit(2);
        }
        *dst = (int)v;
    }
    return a;
}

static inline int dev_selected(const DevArgs* a, int k) { return a->variant == 0 || a->variant == k; }

/* ---- inputs and buffers ------------------------------------------------------------------- */

/* uniform in [lo, hi), from a 64-bit LCG: reproducible, and independent of the RNG under test */
static inline float* dev_host_uniform(size_t n, uint64_t seed, float lo, float hi) {
    float* h = (float*)malloc(n * sizeof(float) + 1);
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = lo + (hi - lo) * (float)((double)(s >> 11) / 9007199254740992.0);
    }
    return h;
}

static inline void* dev_malloc(size_t bytes) {
    void* d = NULL;
    SG_CHECK(cudaMalloc(&d, bytes > 0 ? bytes : 1));
    return d;
}

static inline float* dev_upload(const float* h, size_t n) {
    float* d = (float*)dev_malloc(n * sizeof(float));
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

/* a device buffer filled with NaN, so an element a kernel forgets to write fails the check */
static inline float* dev_poison(size_t n) {
    float* d = (float*)dev_malloc(n * sizeof(float));
    SG_CHECK(cudaMemset(d, 0xff, n * sizeof(float)));
    return d;
}

static inline float* dev_download(const float* d, size_t n) {
    float* h = (float*)malloc(n * sizeof(float) + 1);
    SG_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* ---- checks -------------------------------------------------------------------------------- */

static int dev_n_failed = 0;

/* One validation line per variant: "ok   dev_cuda_<op>_v<k>: <message>" or "FAIL ...". */
static inline int dev_check(int ok, const char* op, int k, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int dev_check(int ok, const char* op, int k, const char* fmt, ...) {
    va_list ap;
    printf("%s dev_cuda_%s_v%d: ", ok ? "ok  " : "FAIL", op, k);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (!ok) dev_n_failed++;
    return ok;
}

static inline void dev_skip(const char* op, int k, const char* why) {
    printf("SKIP dev_cuda_%s_v%d: %s\n", op, k, why);
    fflush(stdout);
}

/* worst |a - ref| / (atol + rtol |ref|) over n elements; a non-finite a counts as infinitely bad */
static inline double dev_err_ratio(const float* a, const float* ref, size_t n, double atol, double rtol) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - (double)ref[i]) / (atol + rtol * fabs((double)ref[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

static inline int dev_finish(void) { return dev_n_failed ? 1 : 0; }

/* ---- timing ---------------------------------------------------------------------------------- */

/* The table: one row per timed variant, then one JSON line a script can read. rate is GB/s for
 * memory-bound ops (unit "GB/s"), TFLOP/s for the products (unit "TFLOP/s"). */
static inline void dev_report(const char* op, int k, const char* name, const char* shape, double ms,
                              double rate, const char* unit) {
    printf("  %-22s v%d  %-34s %10.4f ms  %9.2f %s\n", op, k, name, ms, rate, unit);
    printf("{\"bench\":\"dev_cuda\",\"op\":\"%s\",\"variant\":%d,\"name\":\"%s\",\"shape\":\"%s\","
           "\"ms\":%.5f,\"%s\":%.3f}\n",
           op, k, name, shape, ms, !strcmp(unit, "GB/s") ? "gbps" : "tflops", rate);
    fflush(stdout);
}

#ifndef SG_EMU
/* mean milliseconds of one call of f() over reps calls, after DEV_WARMUP untimed ones; the events
 * bracket the launches on the default stream, so host overhead between launches is included
 * only where it stalls the GPU (as in the trainer's step) */
template <class F>
static double dev_time_ms(int reps, F&& f) {
    for (int i = 0; i < DEV_WARMUP; i++) f();
    SG_CHECK(cudaDeviceSynchronize());
    cudaEvent_t t0, t1;
    SG_CHECK(cudaEventCreate(&t0));
    SG_CHECK(cudaEventCreate(&t1));
    SG_CHECK(cudaEventRecord(t0));
    for (int i = 0; i < reps; i++) f();
    SG_CHECK(cudaEventRecord(t1));
    SG_CHECK(cudaEventSynchronize(t1));
    SG_CHECK_LAUNCH();
    float ms = 0.0f;
    SG_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    SG_CHECK(cudaEventDestroy(t0));
    SG_CHECK(cudaEventDestroy(t1));
    return (double)ms / reps;
}
#endif

/* ---- device helpers ---------------------------------------------------------------------------- */

/* butterfly sum over the 32 lanes of a warp: every lane ends with the same bits */
static __device__ inline float dev_warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

#endif
