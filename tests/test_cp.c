/* tests/test_cp.c — context parallelism's build (model/gpt.h, DESIGN §9) in one process: what a
 * rank holds, and what the build refuses. The runs across processes are tests/test_cp.sh's.
 *
 * The memory figure of issue "long sequences across processes": at T = 8192 (1 layer, C = 64,
 * 4 heads, the byte vocabulary), each of 2 ranks' activation memory (kept activations, recompute
 * scratch, gradient and attention scratch, the ring's buffers: everything but the weights,
 * gradients, AdamW moments and token ids) is at most 0.6x one process's.
 */
#include <omp.h>
#include "model/gpt.h"
#include "tests/test.h"

static void no_ring(const float* send, float* recv, size_t n) { (void)send; (void)recv; (void)n; }
static void no_wait(void) {}

static size_t activation_bytes(const GPT* m) {
    GPTMemory mem = gpt_memory(m);
    return mem.activations + mem.recompute + mem.scratch + mem.cp;
}

static void test_rank_activation_peak(const char* policy_name, RecomputePolicy policy) {
    GPTConfig c = {8192, 257, gpt_pad_vocab(257), 1, 4, 4, 64, 0, 0, 0, 0};
    char err[256], name[96];
    GPT one, rank[2];
    int rc = gpt_build_on(&one, &c, 1, 8192, &policy, &backend_cpu, err);
    size_t single = rc == 0 ? activation_bytes(&one) : 0, worst = 0;
    for (int r = 0; r < 2 && rc == 0; r++) {
        ContextParallel cp = {2, r, no_ring, no_ring, no_wait};
        rc = gpt_build_cp(&rank[r], &c, 1, 8192, &policy, &backend_cpu, &cp, err);
        if (rc != 0) break;
        size_t b = activation_bytes(&rank[r]);
        if (b > worst) worst = b;
    }
    double ratio = single ? (double)worst / single : 0.0;
    snprintf(name, sizeof(name), "cp2_rank_activation_peak_at_most_0.6x_one_process_%s", policy_name);
    expect(rc == 0 && ratio <= 0.6, name,
           "T 8192, L1 C64 NH4: one process %.2f MiB, the larger rank %.2f MiB (of it the ring's "
           "backward buffers %.2f MiB): %.3fx (bound 0.6)%s%s", single / 1048576.0,
           worst / 1048576.0, rc == 0 ? gpt_memory(&rank[0]).cp / 1048576.0 : 0.0, ratio,
           rc ? "; " : "", rc ? err : "");
    if (rc == 0) { gpt_free(&one); gpt_free(&rank[0]); gpt_free(&rank[1]); }
}

static void test_build_refuses_uneven_chunks(void) {
    GPTConfig c = {64, 257, gpt_pad_vocab(257), 1, 2, 2, 16, 0, 0, 0, 0};
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    ContextParallel cp = {3, 0, no_ring, no_ring, no_wait};
    GPT m;
    char err[256] = "";
    int rc = gpt_build_cp(&m, &c, 1, 64, &none, &backend_cpu, &cp, err);
    expect(rc != 0 && strstr(err, "multiple of 2 x 3 = 6") != NULL,
           "cp_build_refuses_T_not_a_multiple_of_2N", "T 64, N 3: rc %d, \"%s\"", rc, err);
    if (rc == 0) gpt_free(&m);
}

static void test_positions_are_the_zigzag_chunks(void) {
    GPTConfig c = {48, 257, gpt_pad_vocab(257), 1, 2, 2, 16, 0, 0, 0, 0};
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    int seen[48] = {0}, wrong = 0;
    char err[256];
    for (int r = 0; r < 3; r++) {
        ContextParallel cp = {3, r, no_ring, no_ring, no_wait};
        GPT m;
        if (gpt_build_cp(&m, &c, 1, 48, &none, &backend_cpu, &cp, err) != 0) { wrong++; continue; }
        for (int t = 0; t < m.T; t++) {
            int g = gpt_cp_position(&m, t), chunk = g / 8;
            seen[g]++;
            wrong += chunk != (t < 8 ? r : 5 - r);
        }
        gpt_free(&m);
    }
    int once = 1;
    for (int t = 0; t < 48; t++) once &= seen[t] == 1;
    expect(wrong == 0 && once, "cp3_ranks_hold_chunks_r_and_2N_minus_1_minus_r",
           "T 48, N 3 (chunks of 8): %d misplaced positions, every position held once: %s", wrong,
           once ? "yes" : "no");
}

int main(void) {
    omp_set_num_threads(1);
    RecomputePolicy none = {0, 0, CHECK_OFF, 0}, layer = {1, 0, CHECK_OFF, 0};
    test_rank_activation_peak("none", none);
    test_rank_activation_peak("layer", layer);
    test_build_refuses_uneven_chunks();
    test_positions_are_the_zigzag_chunks();
    return test_finish();
}
