/* tests/test_peak.c — the CPU peak probe (cpu/peak.c): its FLOP count is the formula's, every
 * path this CPU has runs and gives a positive finite rate, and the bf16 rate is 0 exactly where
 * the CPU lacks avx512bf16. Nothing here asserts a speed: the machine may be shared.
 */
#include <omp.h>
#include <string.h>
#include "tests/test.h"
#include "cpu/peak.h"

static const PeakPath ALL[] = {PEAK_PORTABLE, PEAK_AVX2, PEAK_AVX512, PEAK_AVX512_BF16};
enum { N_PATHS = sizeof ALL / sizeof ALL[0] };

/* With x = y = 1 every product adds exactly 1 to its lane, so the kernel's returned sum is the
 * number of products it executed; twice that must be the FLOPs the rates are computed from. */
static void flop_count_matches_formula(void) {
    static const long iters[] = {1, 7, 1000, 65537};
    for (int i = 0; i < N_PATHS; i++) {
        PeakPath p = ALL[i];
        char name[96];
        snprintf(name, sizeof name, "flop_count_matches_formula_%s", peak_path_name(p));
        if (!peak_path_supported(p)) { skip(name, "this CPU lacks the path"); continue; }
        int ok = peak_path_run(p, 0, 1.0f, 1.0f) == 0.0;
        double worst = 0, counted = 0, formula = 0;
        for (size_t k = 0; k < sizeof iters / sizeof iters[0]; k++) {
            counted = 2.0 * peak_path_run(p, iters[k], 1.0f, 1.0f);
            formula = peak_path_flops(p, iters[k]);
            if (counted != formula) { ok = 0; worst = counted - formula; }
        }
        /* per iteration: chains x lanes x 2 (fp32 FMA) or x 4 (VDPBF16PS: two products a lane) */
        double per_iter = peak_path_flops(p, 1);
        double expect_per_iter = p == PEAK_PORTABLE ? 16 * 1 * 2 : p == PEAK_AVX2 ? 12 * 8 * 2
                               : p == PEAK_AVX512 ? 16 * 16 * 2 : 24 * 16 * 4;
        ok = ok && per_iter == expect_per_iter;
        expect(ok, name, "%.0f FLOPs counted at %ld iterations, formula %.0f (%.0f per iteration, "
               "expected %.0f; worst difference %.0f)", counted, iters[3], formula, per_iter,
               expect_per_iter, worst);
    }
}

/* The products really are x*y: with x = 3, y = 0.5 (exact in bf16) a bf16 lane adds 2 * 1.5 per
 * step, an fp32 lane goes acc*3 + 0.5 (from start c: the sum is checked in closed form below). */
static void kernel_computes_its_formula(void) {
    if (peak_path_supported(PEAK_AVX512_BF16)) {
        double got = peak_path_run(PEAK_AVX512_BF16, 100, 3.0f, 0.5f);
        double want = 100 * 3.0 * 24 * 16;   /* 100 steps x 2 products x 1.5 x 384 lanes */
        expect(got == want, "bf16_kernel_adds_two_products_per_lane", "sum %.1f, expected %.1f", got, want);
    } else {
        skip("bf16_kernel_adds_two_products_per_lane", "this CPU lacks avx512bf16");
    }
    /* fp32: acc_{n+1} = 0.5 acc_n + 1 from acc_0 = c converges to 2; after 30 steps a lane holds
     * 2 + (c - 2) 2^-30. Every path must agree with that to float rounding. */
    for (int i = 0; i < 3; i++) {
        PeakPath p = ALL[i];
        if (!peak_path_supported(p)) continue;
        int chains = p == PEAK_PORTABLE ? 16 : p == PEAK_AVX2 ? 12 : 16;
        int lanes = p == PEAK_PORTABLE ? 1 : p == PEAK_AVX2 ? 8 : 16;
        double want = 0;
        for (int c = 0; c < chains; c++) want += lanes * ((2.0 + (c - 2) * ldexp(1.0, -30)) - c);
        double got = peak_path_run(p, 30, 0.5f, 1.0f);
        char name[96];
        snprintf(name, sizeof name, "fp32_kernel_is_fma_chain_%s", peak_path_name(p));
        expect(fabs(got - want) < 1e-4 * chains * lanes, name, "sum %.6f, expected %.6f", got, want);
    }
}

static int finite_positive(double r) { return isfinite(r) && r > 0; }

static void every_path_gives_a_rate(void) {
    for (int i = 0; i < N_PATHS; i++) {
        PeakPath p = ALL[i];
        char name[96];
        snprintf(name, sizeof name, "rate_positive_finite_%s", peak_path_name(p));
        double r = peak_path_gflops(p, 1, 0.05);
        if (peak_path_supported(p))
            expect(finite_positive(r), name, "%.1f GFLOP/s at 1 thread", r);
        else
            expect(r == 0 && peak_path_run(p, 10, 1, 1) == 0, name,
                   "not on this CPU: rate %g and kernel sum %g (both must be 0)", r,
                   peak_path_run(p, 10, 1, 1));
    }
    /* the portable path always runs, and the widest fp32 path is the one peak_fp32_gflops takes */
    PeakPath w = peak_fp32_path();
    expect(peak_path_supported(PEAK_PORTABLE) && peak_path_supported(w) && w != PEAK_AVX512_BF16,
           "fp32_path_is_supported", "widest fp32 path: %s", peak_path_name(w));
    int threads = omp_get_max_threads() < 2 ? omp_get_max_threads() : 2;
    double f = peak_fp32_gflops(threads, 0.1);
    expect(finite_positive(f), "fp32_rate_positive_finite", "%.1f GFLOP/s at %d threads (%s)", f,
           threads, peak_path_name(w));
}

/* The oracle for avx512bf16: the kernel's own flag list where Linux publishes it, else CPUID */
static int cpu_has_bf16(const char** source) {
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[8192];
        int has = -1;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "flags", 5) != 0) continue;
            has = strstr(line, " avx512_bf16") != NULL;
            break;
        }
        fclose(f);
        if (has >= 0) { *source = "/proc/cpuinfo flags"; return has; }
    }
    *source = "CPUID";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

static void bf16_zero_exactly_without_the_flag(void) {
    const char* source;
    int has = cpu_has_bf16(&source);
    int threads = omp_get_max_threads() < 2 ? omp_get_max_threads() : 2;
    double r = peak_bf16_gflops(threads, 0.1);
    expect(has ? finite_positive(r) : r == 0, "bf16_rate_zero_exactly_without_avx512bf16",
           "%s %s avx512_bf16; %.1f GFLOP/s at %d threads", source, has ? "lists" : "lacks", r, threads);
}

static void path_names_distinct(void) {
    int ok = 1;
    for (int i = 0; i < N_PATHS; i++)
        for (int j = i + 1; j < N_PATHS; j++)
            if (strcmp(peak_path_name(ALL[i]), peak_path_name(ALL[j])) == 0) ok = 0;
    expect(ok, "path_names_distinct", "%s %s %s %s", peak_path_name(ALL[0]), peak_path_name(ALL[1]),
           peak_path_name(ALL[2]), peak_path_name(ALL[3]));
}

int main(void) {
    flop_count_matches_formula();
    kernel_computes_its_formula();
    every_path_gives_a_rate();
    bf16_zero_exactly_without_the_flag();
    path_names_distinct();
    return test_finish();
}
