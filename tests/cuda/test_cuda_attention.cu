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

/* ---- context parallelism: blocks at global positions (attention/attention.h, §9) -------------
 * A zigzag split of T = 2 N Tc positions: chunk c holds global positions c Tc .. c Tc + Tc - 1,
 * laid out (B, Tc) rows of QKV floats as a rank holds them. For every query chunk qc and every
 * key chunk kc <= qc (the pairs a rank computes):
 *   - block forward: out and lse equal the CPU block's to TOL, with lse -inf (and a zero row) at
 *     exactly the CPU's rows;
 *   - merge: the CUDA merge of the CPU blocks equals the CPU merge to TOL after each block, and
 *     the CUDA chain (CUDA blocks, CUDA merge) over the chunk's key chunks equals the rows of the
 *     whole-sequence CPU attention_forward to TOL;
 *   - block backward, from the merged out and lse, dq, dk, dv starting from random values (the
 *     contract is +=): equal the CPU block backward's to TOL;
 * and the keep bits: with V one-hot (key j of the block has v_j = e_(j - jk0)), out_i[j - jk0] is
 * zero exactly where the keep bit of the global (g, h, i, j) is 0 (scores kept small, so no
 * visible weight underflows): compared bit for bit with philox_attn_draw and with the CPU. */

typedef struct {
    int N, B, Tc, NH, NKV, HD;
    double p;
    uint32_t g0;
} CpShape;

/* max |a - ref| / max |ref| where ref is finite; a -inf in either must be a -inf in both */
static double lse_err(const float* a, const float* ref, size_t n, size_t* bad) {
    double num = 0, den = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (ref[i] == -INFINITY || a[i] == -INFINITY) {
            *bad += !(ref[i] == -INFINITY && a[i] == -INFINITY);
            continue;
        }
        if (!isfinite(a[i])) { (*bad)++; continue; }
        const double d = fabs((double)a[i] - (double)ref[i]);
        if (d > num) num = d;
        if (fabs((double)ref[i]) > den) den = fabs((double)ref[i]);
    }
    return den > 0 ? num / den : num;
}

static void test_cp_blocks(const CpShape* s) {
    const int N = s->N, B = s->B, Tc = s->Tc, NH = s->NH, NKV = s->NKV, HD = s->HD, T = 2 * N * Tc;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const size_t n_cq = (size_t)B * Tc * QKV, n_co = (size_t)B * Tc * C, n_cl = (size_t)B * NH * Tc;
    const Dropout drop = dropout_make(s->p);
    char tag[96], name[200];
    snprintf(tag, sizeof(tag), "N%d_B%d_Tc%d_NH%d_NKV%d_HD%d_p%g_g0_%u", N, B, Tc, NH, NKV, HD, s->p,
             s->g0);
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif

    /* the whole sequence, and its chunks */
    float* qkv = (float*)malloc((size_t)B * T * QKV * sizeof(float));
    for (size_t i = 0; i < (size_t)B * T * QKV; i++) qkv[i] = (float)test_normal();
    float* whole_out = (float*)malloc((size_t)B * T * C * sizeof(float));
    float* whole_lse = (float*)malloc((size_t)B * NH * T * sizeof(float));
    attention_forward(whole_out, whole_lse, qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    float** chunk = (float**)malloc(2 * N * sizeof(float*));
    float** d_chunk = (float**)malloc(2 * N * sizeof(float*));
    for (int c = 0; c < 2 * N; c++) {
        chunk[c] = (float*)malloc(n_cq * sizeof(float));
        for (int b = 0; b < B; b++)
            memcpy(chunk[c] + (size_t)b * Tc * QKV, qkv + ((size_t)b * T + (size_t)c * Tc) * QKV,
                   Tc * QKV * sizeof(float));
        d_chunk[c] = dev_alloc(n_cq);
        to_dev(d_chunk[c], chunk[c], n_cq);
    }

    const size_t n_cs = attention_backward_scratch_floats(B, Tc, NH, NKV, HD, nthreads);
    const size_t n_gs = attention_backward_scratch_floats_cuda(B, Tc, NH, NKV, HD, 1);
    float* scr_c = (float*)malloc(n_cs * sizeof(float));
    float *d_out = dev_alloc(n_co), *d_lse = dev_alloc(n_cl), *d_acc = dev_alloc(n_co);
    float *d_lacc = dev_alloc(n_cl), *d_acc2 = dev_alloc(n_co), *d_lacc2 = dev_alloc(n_cl);
    float *d_dout = dev_alloc(n_co), *d_mo = dev_alloc(n_co), *d_ml = dev_alloc(n_cl);
    float *d_dq = dev_alloc(n_cq), *d_dkv = dev_alloc(n_cq), *d_scr = dev_alloc(n_gs);
    float *o_c = (float*)malloc(n_co * sizeof(float)), *l_c = (float*)malloc(n_cl * sizeof(float));
    float *o_g = (float*)malloc(n_co * sizeof(float)), *l_g = (float*)malloc(n_cl * sizeof(float));
    float *acc_c = (float*)malloc(n_co * sizeof(float)), *lacc_c = (float*)malloc(n_cl * sizeof(float));
    float* ninf = (float*)malloc(n_cl * sizeof(float));
    for (size_t i = 0; i < n_cl; i++) ninf[i] = -INFINITY;
    float* dout = (float*)malloc(n_co * sizeof(float));
    float* dq0 = (float*)malloc(n_cq * sizeof(float));
    float* dkv0 = (float*)malloc(n_cq * sizeof(float));

    double e_fo = 0, e_fl = 0, e_m = 0, e_w = 0, e_dq = 0, e_dk = 0, e_dv = 0;
    size_t bad_f = 0, bad_m = 0, bad_w = 0, bad_b = 0, n_blocks = 0, n_none = 0;
    for (int qc = 0; qc < 2 * N; qc++) {
        /* merged: CPU blocks by the CPU merge (acc_c), CPU blocks by the CUDA merge (d_acc), CUDA
         * blocks by the CUDA merge (d_acc2) */
        memset(acc_c, 0, n_co * sizeof(float));
        memcpy(lacc_c, ninf, n_cl * sizeof(float));
        SG_CHECK(cudaMemset(d_acc, 0, n_co * sizeof(float)));
        SG_CHECK(cudaMemset(d_acc2, 0, n_co * sizeof(float)));
        to_dev(d_lacc, ninf, n_cl);
        to_dev(d_lacc2, ninf, n_cl);
        const float* q = chunk[qc];
        for (int kc = 0; kc <= qc; kc++) {
            const float* k = chunk[kc] + (size_t)NH * HD;
            const float* v = k + (size_t)NKV * HD;
            attention_block_forward(o_c, l_c, q, QKV, Tc, qc * Tc, k, v, QKV, Tc, kc * Tc, B, NH, NKV,
                                    HD, s->g0, SEED, drop);
            dev_poison(d_out, n_co);
            dev_poison(d_lse, n_cl);
            attention_block_forward_cuda(d_out, d_lse, d_chunk[qc], QKV, Tc, qc * Tc,
                                         d_chunk[kc] + (size_t)NH * HD,
                                         d_chunk[kc] + (size_t)(NH + NKV) * HD, QKV, Tc, kc * Tc, B,
                                         NH, NKV, HD, s->g0, SEED, drop);
            to_host(o_g, d_out, n_co);
            to_host(l_g, d_lse, n_cl);
            size_t b1, b2;
            double e = max_rel_err(o_g, o_c, n_co, &b1);
            e_fo = e > e_fo ? e : e_fo;
            e = lse_err(l_g, l_c, n_cl, &b2);
            e_fl = e > e_fl ? e : e_fl;
            bad_f += b1 + b2;
            n_blocks++;

            /* the CUDA chain */
            attention_merge_cuda(d_acc2, d_lacc2, d_out, d_lse, B, Tc, NH, HD);
            /* the CUDA merge of the CPU block against the CPU merge */
            to_dev(d_out, o_c, n_co);
            to_dev(d_lse, l_c, n_cl);
            attention_merge_cuda(d_acc, d_lacc, d_out, d_lse, B, Tc, NH, HD);
            attention_merge(acc_c, lacc_c, o_c, l_c, B, Tc, NH, HD);
            to_host(o_g, d_acc, n_co);
            to_host(l_g, d_lacc, n_cl);
            e = max_rel_err(o_g, acc_c, n_co, &b1);
            e_m = e > e_m ? e : e_m;
            e = lse_err(l_g, lacc_c, n_cl, &b2);
            e_m = e > e_m ? e : e_m;
            bad_m += b1 + b2;
        }
        /* a block whose keys start mid-chunk (jk0 = qc Tc + Tc/2 + 1): the queries before it see
         * none of its keys and must get lse -inf and a zero row, as on the CPU */
        {
            const int jk0 = qc * Tc + Tc / 2 + 1;
            attention_block_forward(o_c, l_c, q, QKV, Tc, qc * Tc, q + C, q + C + (size_t)NKV * HD,
                                    QKV, Tc, jk0, B, NH, NKV, HD, s->g0, SEED, drop);
            dev_poison(d_out, n_co);
            dev_poison(d_lse, n_cl);
            attention_block_forward_cuda(d_out, d_lse, d_chunk[qc], QKV, Tc, qc * Tc,
                                         d_chunk[qc] + C, d_chunk[qc] + C + (size_t)NKV * HD, QKV, Tc,
                                         jk0, B, NH, NKV, HD, s->g0, SEED, drop);
            to_host(o_g, d_out, n_co);
            to_host(l_g, d_lse, n_cl);
            size_t b1, b2;
            double e = max_rel_err(o_g, o_c, n_co, &b1);
            e_fo = e > e_fo ? e : e_fo;
            e = lse_err(l_g, l_c, n_cl, &b2);
            e_fl = e > e_fl ? e : e_fl;
            bad_f += b1 + b2;
            for (size_t i = 0; i < n_cl; i++) n_none += l_g[i] == -INFINITY;
            n_blocks++;
        }
        /* the CUDA chain against the whole sequence's rows */
        to_host(o_g, d_acc2, n_co);
        to_host(l_g, d_lacc2, n_cl);
        float* wo = (float*)malloc(n_co * sizeof(float));
        float* wl = (float*)malloc(n_cl * sizeof(float));
        for (int b = 0; b < B; b++) {
            memcpy(wo + (size_t)b * Tc * C, whole_out + ((size_t)b * T + (size_t)qc * Tc) * C,
                   Tc * C * sizeof(float));
            for (int h = 0; h < NH; h++)
                memcpy(wl + ((size_t)b * NH + h) * Tc, whole_lse + ((size_t)b * NH + h) * T + (size_t)qc * Tc,
                       Tc * sizeof(float));
        }
        size_t b1, b2;
        double e = max_rel_err(o_g, wo, n_co, &b1);
        e_w = e > e_w ? e : e_w;
        e = lse_err(l_g, wl, n_cl, &b2);
        e_w = e > e_w ? e : e_w;
        bad_w += b1 + b2;
        free(wo); free(wl);

        /* the backward of every block of this query chunk, from the CPU's merged out and lse */
        for (size_t i = 0; i < n_co; i++) dout[i] = (float)test_normal();
        to_dev(d_dout, dout, n_co);
        to_dev(d_mo, acc_c, n_co);
        to_dev(d_ml, lacc_c, n_cl);
        for (int kc = 0; kc <= qc; kc++) {
            const float* k = chunk[kc] + (size_t)NH * HD;
            const float* v = k + (size_t)NKV * HD;
            for (size_t i = 0; i < n_cq; i++) dq0[i] = (float)test_normal();
            for (size_t i = 0; i < n_cq; i++) dkv0[i] = (float)test_normal();
            to_dev(d_dq, dq0, n_cq);
            to_dev(d_dkv, dkv0, n_cq);
            dev_poison(d_scr, n_gs);
            /* dq in the q rows' own columns, dk and dv in the k and v columns of a qkv-shaped buffer */
            attention_block_backward(dq0, QKV, dkv0 + (size_t)NH * HD, dkv0 + (size_t)(NH + NKV) * HD,
                                     QKV, scr_c, dout, acc_c, lacc_c, q, QKV, Tc, qc * Tc, k, v, QKV,
                                     Tc, kc * Tc, B, NH, NKV, HD, s->g0, SEED, drop);
            attention_block_backward_cuda(d_dq, QKV, d_dkv + (size_t)NH * HD,
                                          d_dkv + (size_t)(NH + NKV) * HD, QKV, d_scr, d_dout, d_mo,
                                          d_ml, d_chunk[qc], QKV, Tc, qc * Tc,
                                          d_chunk[kc] + (size_t)NH * HD,
                                          d_chunk[kc] + (size_t)(NH + NKV) * HD, QKV, Tc, kc * Tc, B,
                                          NH, NKV, HD, s->g0, SEED, drop);
            float* dq_g = (float*)malloc(n_cq * sizeof(float));
            float* dkv_g = (float*)malloc(n_cq * sizeof(float));
            to_host(dq_g, d_dq, n_cq);
            to_host(dkv_g, d_dkv, n_cq);
            /* per part: the q columns of dq, the k and v columns of dkv */
            double num[3] = {0, 0, 0}, den[3] = {0, 0, 0};
            for (size_t r = 0; r < (size_t)B * Tc; r++)
                for (size_t x = 0; x < QKV; x++) {
                    const int part = x < C ? 0 : x < C + (size_t)NKV * HD ? 1 : 2;
                    const float* g = part == 0 ? dq_g : dkv_g;
                    const float* c = part == 0 ? dq0 : dkv0;
                    const float gv = g[r * QKV + x], cv = c[r * QKV + x];
                    if (!isfinite(gv)) { bad_b++; continue; }
                    const double d = fabs((double)gv - cv);
                    num[part] = d > num[part] ? d : num[part];
                    den[part] = fabs((double)cv) > den[part] ? fabs((double)cv) : den[part];
                }
            e_dq = fmax(e_dq, num[0] / den[0]);
            e_dk = fmax(e_dk, num[1] / den[1]);
            e_dv = fmax(e_dv, num[2] / den[2]);
            free(dq_g); free(dkv_g);
        }
    }
    snprintf(name, sizeof(name), "block_forward_matches_cpu_at_global_positions_%s", tag);
    expect(e_fo <= TOL && e_fl <= TOL && bad_f == 0 && n_none > 0, name,
           "%zu blocks: out rel err %.2e, lse rel err %.2e (tol %.0e); %zu non-finite or -inf "
           "rows unlike the CPU's; %zu rows that see no key (lse -inf)", n_blocks, e_fo, e_fl, TOL,
           bad_f, n_none);
    snprintf(name, sizeof(name), "merge_matches_cpu_%s", tag);
    expect(e_m <= TOL && bad_m == 0, name, "out and lse rel err %.2e (tol %.0e); %zu bad", e_m, TOL,
           bad_m);
    snprintf(name, sizeof(name), "merged_blocks_equal_whole_sequence_attention_%s", tag);
    expect(e_w <= TOL && bad_w == 0, name,
           "the chunks' merged CUDA blocks against the CPU's whole-sequence rows: rel err %.2e (tol "
           "%.0e); %zu bad", e_w, TOL, bad_w);
    snprintf(name, sizeof(name), "block_backward_accumulates_as_cpu_%s", tag);
    expect(e_dq <= TOL && e_dk <= TOL && e_dv <= TOL && bad_b == 0, name,
           "rel err dq %.2e dk %.2e dv %.2e (tol %.0e); %zu non-finite", e_dq, e_dk, e_dv, TOL, bad_b);

    for (int c = 0; c < 2 * N; c++) { free(chunk[c]); SG_CHECK(cudaFree(d_chunk[c])); }
    free(chunk); free(d_chunk); free(qkv); free(whole_out); free(whole_lse); free(scr_c);
    float* dev[] = {d_out, d_lse, d_acc, d_lacc, d_acc2, d_lacc2, d_dout, d_mo, d_ml, d_dq, d_dkv, d_scr};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) SG_CHECK(cudaFree(dev[i]));
    free(o_c); free(l_c); free(o_g); free(l_g); free(acc_c); free(lacc_c); free(ninf); free(dout);
    free(dq0); free(dkv0);
}

/* The keep bits of every block of a zigzag split, read off a one-hot V (HD >= Tc). */
static void test_cp_keep_bits(int N, int Tc, int NH, int HD, double p, uint32_t g0) {
    const int B = 2, NKV = 1, T = 2 * N * Tc;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const size_t n_cq = (size_t)B * Tc * QKV, n_co = (size_t)B * Tc * C, n_cl = (size_t)B * NH * Tc;
    const Dropout drop = dropout_make(p);
    float* q = (float*)malloc(n_cq * sizeof(float));
    float* kv = (float*)calloc(n_cq, sizeof(float));
    float *o_c = (float*)malloc(n_co * sizeof(float)), *o_g = (float*)malloc(n_co * sizeof(float));
    float* l_c = (float*)malloc(n_cl * sizeof(float));
    float *d_q = dev_alloc(n_cq), *d_kv = dev_alloc(n_cq), *d_out = dev_alloc(n_co), *d_lse = dev_alloc(n_cl);
    size_t cells = 0, dropped = 0, bad_g = 0, bad_c = 0;
    for (int qc = 0; qc < 2 * N; qc++)
        for (int kc = 0; kc <= qc; kc++) {
            /* small scores: every visible weight is far from underflow */
            for (size_t i = 0; i < n_cq; i++) q[i] = (float)(0.3 * test_normal());
            memset(kv, 0, n_cq * sizeof(float));
            for (int b = 0; b < B; b++)
                for (int j = 0; j < Tc; j++) {
                    float* row = kv + ((size_t)b * Tc + j) * QKV;
                    for (int d = 0; d < HD; d++) row[C + d] = (float)(0.3 * test_normal());
                    row[C + (size_t)NKV * HD + j] = 1.0f;   /* v_j = e_j */
                }
            to_dev(d_q, q, n_cq);
            to_dev(d_kv, kv, n_cq);
            attention_block_forward(o_c, l_c, q, QKV, Tc, qc * Tc, kv + C, kv + C + (size_t)NKV * HD,
                                    QKV, Tc, kc * Tc, B, NH, NKV, HD, g0, SEED, drop);
            dev_poison(d_out, n_co);
            attention_block_forward_cuda(d_out, d_lse, d_q, QKV, Tc, qc * Tc, d_kv + C,
                                         d_kv + C + (size_t)NKV * HD, QKV, Tc, kc * Tc, B, NH, NKV,
                                         HD, g0, SEED, drop);
            to_host(o_g, d_out, n_co);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++)
                    for (int r = 0; r < Tc; r++)
                        for (int c = 0; c < Tc; c++) {
                            const int i = qc * Tc + r, j = kc * Tc + c;
                            if (j > i) continue;
                            const int keep = !dropout_active(drop) ||
                                             philox_attn_draw(SEED, g0 + (uint32_t)b, (uint32_t)h,
                                                              (uint32_t)i, (uint32_t)j) >= drop.thr;
                            const size_t at = ((size_t)b * Tc + r) * C + (size_t)h * HD + c;
                            cells++;
                            dropped += !keep;
                            bad_g += (o_g[at] != 0.0f) != keep;
                            bad_c += (o_c[at] != 0.0f) != keep;
                        }
        }
    char name[160];
    snprintf(name, sizeof(name), "block_keep_bits_are_global_philox_and_cpu_N%d_T%d_HD%d_p%g", N, T, HD, p);
    expect(cells > 0 && bad_g == 0 && bad_c == 0 && (p == 0 || dropped > 0), name,
           "%zu visible (i, j) cells, %zu dropped: CUDA keep bits differ from philox_attn_draw at "
           "%zu, the CPU's at %zu", cells, dropped, bad_g, bad_c);
    free(q); free(kv); free(o_c); free(o_g); free(l_c);
    SG_CHECK(cudaFree(d_q)); SG_CHECK(cudaFree(d_kv)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse));
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

    /* context parallelism: zigzag splits of 2 and 3 (N, B, Tc, NH, NKV, HD, p, g0); chunks of 5
     * and 3 start off the Philox blocks of 32, chunks of 40 cross the key tiles of 64 */
    const CpShape cp[] = {
        {2, 2, 5, 2, 1, 16, 0.1, 3},    /* grouped-query heads */
        {3, 1, 3, 2, 2, 16, 0.5, 0},
        {2, 1, 40, 2, 2, 16, 0.1, 7},
        {3, 1, 4, 1, 1, 100, 0.0, 1},   /* two strips of head dims, no dropout */
    };
    for (size_t c = 0; c < sizeof(cp) / sizeof(cp[0]); c++) test_cp_blocks(&cp[c]);
    test_cp_keep_bits(3, 6, 2, 16, 0.5, 4);    /* keys up to 35: two Philox blocks of 32 */
    test_cp_keep_bits(2, 40, 1, 64, 0.1, 2);   /* keys up to 159: three key tiles of 64 */
    return test_finish();
}
