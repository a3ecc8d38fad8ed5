/* tests/cuda/kernels_ab.h — new kernels against the baseline (SEEDGPT_KERNELS=baseline), for the
 * CUDA op tests (test_cuda_ops, test_cuda_bf16_ops).
 *
 * An op whose kernels were rewritten for speed runs once under SEEDGPT_KERNELS=baseline (the
 * kernels it had before) and once with the switch unset (the new ones), from the same inputs into
 * NaN-filled outputs (accumulated outputs from the same random values): the bits must be equal,
 * since a wider access or a fused pass changes no arithmetic. Each comparison also checks which
 * side ran (cuda/ops_cuda.h, kernels_new_launches_cuda): no new kernel under baseline, and at
 * least one with the switch unset where the new kernels apply (16-byte rows), none where they do
 * not (odd shapes keep the baseline kernels). Include after tests/test.h and cuda/ops_cuda.h.
 */
#ifndef SEEDGPT_TESTS_KERNELS_AB_H
#define SEEDGPT_TESTS_KERNELS_AB_H

#include <stdlib.h>
#include <string.h>

static void use_kernels(const char* side) {
    if (side != NULL) setenv("SEEDGPT_KERNELS", side, 1);
    else unsetenv("SEEDGPT_KERNELS");
}

typedef struct {
    unsigned long long base, fresh;   /* new-side launches during the baseline run, the new run */
} Launches;

/* runs body_base under baseline, then body_new with the switch unset, counting the new side's
 * launches during each */
#define AB_RUN(launches, body_base, body_new) do {                                   \
        unsigned long long c0_ = kernels_new_launches_cuda();                        \
        use_kernels("baseline");                                                     \
        body_base;                                                                   \
        unsigned long long c1_ = kernels_new_launches_cuda();                        \
        use_kernels(NULL);                                                           \
        body_new;                                                                    \
        (launches).base = c1_ - c0_;                                                 \
        (launches).fresh = kernels_new_launches_cuda() - c1_;                        \
    } while (0)

/* the n elements of `elem` bytes of the new run against the baseline's, and which side ran */
static void expect_ab(const char* name, const void* fresh, const void* base, size_t n, size_t elem,
                      Launches l, int want_new) {
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += memcmp((const char*)fresh + i * elem, (const char*)base + i * elem, elem) != 0;
    int ran = want_new ? l.fresh > 0 : l.fresh == 0;
    expect(differ == 0 && l.base == 0 && ran, name,
           "%zu of %zu outputs differ in bits from the baseline kernels'; new kernels launched %llu "
           "times under baseline (want 0), %llu with the switch unset (want %s)", differ, n, l.base,
           l.fresh, want_new ? "> 0" : "0: odd shape, baseline kernels");
}

#endif
