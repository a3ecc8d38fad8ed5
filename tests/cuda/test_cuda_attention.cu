/* tests/cuda/test_cuda_attention.cu — the CUDA flash attention (attention/flash_cuda.cu) against
 * its CPU twin (attention/flash_cpu.c), which tests/test_attention.c holds to the float64
 * reference:
 *   1. forward: out and lse agree with the CPU's to 1e-5 (max |diff| / max |cpu|) at odd T, head
 *      dims 16 to 128, grouped-query heads, B > 1 with g0 != 0, dropout 0, 0.1 and 0.5. With
 *      dropout on, a single keep bit different from the CPU's would show as an error of the
 *      order of the dropped weight, far above the tolerance;
 *   2. backward: dqkv (every element) agrees with the CPU's to the same tolerance, from the
 *      CUDA forward's own out and lse, as the model runs it;
 *   3. a second run gives the same bits (no float atomics: DESIGN §5), on a few of the cases;
 *   4. a head dim above 128 is refused with one line and a non-zero exit (forward and backward),
 *      and so is a T whose tiles of 64 do not fit the grid's 65535 blocks in y (T > 4194240).
 * Every device output is poisoned with NaN before each launch, so an element a kernel does not
 * write fails the comparison. SEEDGPT_TINY=1 runs one tiny case only (for compute-sanitizer).
 * Builds two ways: nvcc (make test-cuda) and C++ against the emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "attention/attention.h"
#include "attention/attention_cuda.h"
#include "tests/test.h"
#include "tests/cuda/refusal.h"

#define TOL 1e-5
#define SEED 0x5eed0f00d1234567ULL

typedef struct {
    int B, T, NH, NKV, HD;
    double p;
    uint32_t g0;
} Shape;

/* max |a - ref| / max |ref|; a non-finite element of a counts as a failure through *bad. */
static double max_rel_err(const float* a, const float* ref, size_t n, size_t* bad) {
    double num = 0, den = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) { (*bad)++; continue; }
        double d = fabs((double)a[i] - (double)ref[i]);
        if (d > num) num = d;
        if (fabs((double)ref[i]) > den) den = fabs((double)ref[i]);
    }
    return den > 0 ? num / den : num;
}

static float* dev_alloc(size_t n) {
    float* p = NULL;
    SG_CHECK(cudaMalloc((void**)&p, (n ? n : 1) * sizeof(float)));
    return p;
}
/* all bits set: a NaN in every float */
static void dev_poison(float* p, size_t n) { SG_CHECK(cudaMemset(p, 0xff, n * sizeof(float))); }
static void to_dev(float* d, const float* h, size_t n) {
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
}
static void to_host(float* h, const float* d, size_t n) {
    SG_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

typedef struct {
    float *qkv, *dout, *out, *lse, *dqkv, *scratch;
} DevBufs;

/* forward, then backward from the forward's own out and lse, every output poisoned first */
static void run_cuda(const DevBufs* d, const Shape* s, Dropout drop, size_t n_out, size_t n_lse,
                     size_t n_qkv, size_t n_scratch) {
    dev_poison(d->out, n_out);
    dev_poison(d->lse, n_lse);
    attention_forward_cuda(d->out, d->lse, d->qkv, s->B, s->T, s->NH, s->NKV, s->HD, s->g0, SEED,
                           drop);
    dev_poison(d->dqkv, n_qkv);
    dev_poison(d->scratch, n_scratch);
    attention_backward_cuda(d->dqkv, d->scratch, d->dout, d->qkv, d->out, d->lse, s->B, s->T,
                            s->NH, s->NKV, s->HD, s->g0, SEED, drop);
    SG_CHECK(cudaDeviceSynchronize());
}

static void test_case(const Shape* s, int check_determinism) {
    const size_t QKV = (size_t)(s->NH + 2 * s->NKV) * s->HD;
    const size_t n_qkv = (size_t)s->B * s->T * QKV;
    const size_t n_out = (size_t)s->B * s->T * s->NH * s->HD;
    const size_t n_lse = (size_t)s->B * s->NH * s->T;
    const Dropout drop = dropout_make(s->p);
    char tag[96];
    snprintf(tag, sizeof(tag), "B%d_T%d_NH%d_NKV%d_HD%d_p%g_g0_%u", s->B, s->T, s->NH, s->NKV, s->HD,
             s->p, s->g0);

    float* qkv = (float*)malloc(n_qkv * sizeof(float));
    float* dout = (float*)malloc(n_out * sizeof(float));
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = (float)test_normal();
    for (size_t i = 0; i < n_out; i++) dout[i] = (float)test_normal();

    /* the CPU twin */
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    float* out_c = (float*)malloc(n_out * sizeof(float));
    float* lse_c = (float*)malloc(n_lse * sizeof(float));
    float* dqkv_c = (float*)malloc(n_qkv * sizeof(float));
    float* scratch_c = (float*)malloc(
        attention_backward_scratch_floats(s->B, s->T, s->NH, s->NKV, s->HD, nthreads) * sizeof(float));
    attention_forward(out_c, lse_c, qkv, s->B, s->T, s->NH, s->NKV, s->HD, s->g0, SEED, drop);
    attention_backward(dqkv_c, scratch_c, dout, qkv, out_c, lse_c, s->B, s->T, s->NH, s->NKV, s->HD,
                       s->g0, SEED, drop);

    /* the CUDA kernel */
    const size_t n_scratch = attention_backward_scratch_floats_cuda(s->B, s->T, s->NH, s->NKV, s->HD, 1);
    DevBufs d = {dev_alloc(n_qkv), dev_alloc(n_out), dev_alloc(n_out), dev_alloc(n_lse),
                 dev_alloc(n_qkv), dev_alloc(n_scratch)};
    to_dev(d.qkv, qkv, n_qkv);
    to_dev(d.dout, dout, n_out);
    run_cuda(&d, s, drop, n_out, n_lse, n_qkv, n_scratch);
    float* out_g = (float*)malloc(n_out * sizeof(float));
    float* lse_g = (float*)malloc(n_lse * sizeof(float));
    float* dqkv_g = (float*)malloc(n_qkv * sizeof(float));
    to_host(out_g, d.out, n_out);
    to_host(lse_g, d.lse, n_lse);
    to_host(dqkv_g, d.dqkv, n_qkv);

    char name[160];
    size_t bad_o, bad_l, bad_d;
    const double eo = max_rel_err(out_g, out_c, n_out, &bad_o);
    const double el = max_rel_err(lse_g, lse_c, n_lse, &bad_l);
    snprintf(name, sizeof(name), "forward_matches_cpu_%s", tag);
    expect(eo <= TOL && el <= TOL && bad_o == 0 && bad_l == 0, name,
           "out rel err %.2e, lse rel err %.2e (tol %.0e); non-finite: %zu out, %zu lse", eo, el, TOL,
           bad_o, bad_l);
    const double ed = max_rel_err(dqkv_g, dqkv_c, n_qkv, &bad_d);
    /* the worst of dq, dk, dv separately, for the message */
    double eq = 0, ek = 0, ev = 0;
    for (size_t r = 0; r < (size_t)s->B * s->T; r++) {
        const size_t nq = (size_t)s->NH * s->HD, nkv = (size_t)s->NKV * s->HD;
        for (size_t x = 0; x < QKV; x++) {
            const double e = fabs((double)dqkv_g[r * QKV + x] - dqkv_c[r * QKV + x]);
            double* w = x < nq ? &eq : x < nq + nkv ? &ek : &ev;
            if (e > *w) *w = e;
        }
    }
    snprintf(name, sizeof(name), "backward_matches_cpu_%s", tag);
    expect(ed <= TOL && bad_d == 0, name,
           "dqkv rel err %.2e (tol %.0e; max abs diff dq %.1e dk %.1e dv %.1e); %zu non-finite", ed,
           TOL, eq, ek, ev, bad_d);

    if (check_determinism) {
        float* out_2 = (float*)malloc(n_out * sizeof(float));
        float* lse_2 = (float*)malloc(n_lse * sizeof(float));
        float* dqkv_2 = (float*)malloc(n_qkv * sizeof(float));
        run_cuda(&d, s, drop, n_out, n_lse, n_qkv, n_scratch);
        to_host(out_2, d.out, n_out);
        to_host(lse_2, d.lse, n_lse);
        to_host(dqkv_2, d.dqkv, n_qkv);
        size_t differ = 0;
        for (size_t i = 0; i < n_out; i++) differ += memcmp(&out_2[i], &out_g[i], sizeof(float)) != 0;
        for (size_t i = 0; i < n_lse; i++) differ += memcmp(&lse_2[i], &lse_g[i], sizeof(float)) != 0;
        for (size_t i = 0; i < n_qkv; i++) differ += memcmp(&dqkv_2[i], &dqkv_g[i], sizeof(float)) != 0;
        snprintf(name, sizeof(name), "rerun_bitwise_identical_%s", tag);
        expect(differ == 0, name, "%zu of %zu floats of out, lse, dqkv differ between two runs",
               differ, n_out + n_lse + n_qkv);
        free(out_2); free(lse_2); free(dqkv_2);
    }

    SG_CHECK(cudaFree(d.qkv)); SG_CHECK(cudaFree(d.dout)); SG_CHECK(cudaFree(d.out));
    SG_CHECK(cudaFree(d.lse)); SG_CHECK(cudaFree(d.dqkv)); SG_CHECK(cudaFree(d.scratch));
    free(qkv); free(dout); free(out_c); free(lse_c); free(dqkv_c); free(scratch_c);
    free(out_g); free(lse_g); free(dqkv_g);
}

/* Run as a child (`self --refuse forward|backward`): call the kernel with head dim 160. The
 * refusal happens before any device pointer is touched, so NULL pointers are fine; returning
 * means it was not refused. */
static int refuse_child(const char* which) {
    const Dropout drop = dropout_make(0.0);
    /* T one past the grid's 65535 tiles of 64 in y: refused before a pointer is touched */
    const int T_big = 65535 * 64 + 1;
    if (strcmp(which, "forward") == 0)
        attention_forward_cuda(NULL, NULL, NULL, 1, 8, 2, 1, 160, 0, SEED, drop);
    else if (strcmp(which, "backward") == 0)
        attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 8, 2, 1, 160, 0, SEED, drop);
    else if (strcmp(which, "forward_T") == 0)
        attention_forward_cuda(NULL, NULL, NULL, 1, T_big, 2, 1, 16, 0, SEED, drop);
    else if (strcmp(which, "backward_T") == 0)
        attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, T_big, 2, 1, 16, 0, SEED, drop);
    return 0;
}

static void test_refuses(const char* self, const char* which, const char* property, const char* words) {
    char name[96];
    snprintf(name, sizeof(name), "%s_%s", which, property);
    expect_refusal(name, self, "--refuse", which, words);
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "--refuse") == 0) return refuse_child(argv[2]);

    if (getenv("SEEDGPT_TINY") && atoi(getenv("SEEDGPT_TINY")) != 0) {
        const Shape tiny = {1, 33, 2, 1, 16, 0.1, 1};
        test_case(&tiny, 0);
        return test_finish();
    }

    test_refuses(argv[0], "forward", "refuses_head_dim_160", "head dim 160");
    test_refuses(argv[0], "backward", "refuses_head_dim_160", "head dim 160");
    /* the grids' y holds T / 64 tiles, at most 65535 on a GPU: a longer T is one clear line */
    test_refuses(argv[0], "forward_T", "refuses_T_above_the_grid_limit", "T at most 4194240");
    test_refuses(argv[0], "backward_T", "refuses_T_above_the_grid_limit", "T at most 4194240");

    /* B, T, NH, NKV, HD, p, g0; rerun: also check that a second run gives the same bits (kept to
     * a few cases: the emulation pays per block and barrier) */
    const struct { Shape s; int rerun; } cases[] = {
        {{1, 1, 1, 1, 16, 0.0, 0}, 0},
        {{2, 7, 2, 2, 16, 0.1, 5}, 0},
        {{2, 33, 4, 2, 64, 0.5, 3}, 1},
        {{1, 65, 2, 1, 64, 0.1, 11}, 0},
        {{1, 100, 4, 1, 16, 0.0, 0}, 1},
        {{1, 100, 2, 2, 64, 0.5, 7}, 1},
        {{1, 65, 2, 1, 20, 0.1, 2}, 0},    /* a head dim that is not a multiple of 8 */
        {{1, 130, 2, 1, 16, 0.5, 9}, 0},   /* three tiles each way */
        {{1, 100, 2, 1, 128, 0.1, 1}, 1},
        {{1, 33, 1, 1, 100, 0.5, 4}, 0},   /* two strips of head dims, the second partial */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) test_case(&cases[c].s, cases[c].rerun);
    return test_finish();
}
