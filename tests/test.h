/* tests/test.h — the tiny test vocabulary every C test uses.
 *
 * A check prints one line: "ok   name: measured numbers" or "FAIL name: measured numbers", or
 * "SKIP name: why". tests/run.sh counts those lines across targets and prints the final
 * "N passed, N failed" line. A test binary exits non-zero when any of its checks failed.
 */
#ifndef SEEDGPT_TEST_H
#define SEEDGPT_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* TEST_SANITIZED is 1 in make test-asan's build (ASan + UBSan), where every step runs 20-30x
 * slower. A few checks whose cost is repetition, not coverage, repeat less there: that pass looks
 * for memory errors and undefined behaviour, which the first repetitions show, while the plain
 * pass of make test keeps the full counts and so the full guarantee. TEST_FD_STRIDE: the central
 * differences of the float64 references visit every coordinate in the plain pass, every 13th of
 * each tensor (its first included) under the sanitizers. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif
#define TEST_FD_STRIDE (TEST_SANITIZED ? 13 : 1)

static int test_n_passed = 0, test_n_failed = 0, test_n_skipped = 0;

/* expect(cond, name, fmt, ...): the name states the property, the message the measured numbers. */
static inline void expect(int cond, const char* name, const char* fmt, ...) {
    va_list ap;
    printf("%s %s: ", cond ? "ok  " : "FAIL", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    if (cond) test_n_passed++; else test_n_failed++;
}

static inline void skip(const char* name, const char* why) {
    printf("SKIP %s: %s\n", name, why);
    fflush(stdout);
    test_n_skipped++;
}

static inline int test_finish(void) {
    printf("# %d passed, %d failed, %d skipped\n", test_n_passed, test_n_failed, test_n_skipped);
    return test_n_failed ? 1 : 0;
}

/* ||a - b|| / ||b|| over n floats against a double reference. */
static inline double rel_err_fd(const float* a, const double* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

static inline double rel_err_dd(const double* a, const double* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

static inline double rel_err_ff(const float* a, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

/* Deterministic test data: a small LCG, so tests need no library RNG. */
static unsigned long long test_rng_state = 0x9e3779b97f4a7c15ULL;
static inline double test_uniform(void) {  /* [0, 1) */
    test_rng_state = test_rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(test_rng_state >> 11) / 9007199254740992.0;
}
static inline double test_normal(void) {
    double u1 = test_uniform(), u2 = test_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
