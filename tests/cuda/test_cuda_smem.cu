/* tests/cuda/test_cuda_smem.cu — every fp32 kernel that takes more than 48 KiB of shared memory
 * runs on every GPU the backend supports, with the bits it has on an H100. The emulated device's
 * opt-in limit follows SG_EMU_CC (cuda/emu/cuda_emu.cpp: 96 KiB on sm_70, 64 KiB on sm_75, 99 KiB
 * on sm_86, 227 KiB on sm_90) and a launch above it fails as on the card; this test changes
 * SG_EMU_CC between calls (the emulation and sg_smem_optin read it at every query):
 *   1. the limit: sg_smem_optin() and cudaDevAttrMaxSharedMemoryPerBlockOptin report each
 *      architecture's, and on sm_75 an opt-in or a launch of 65 KiB is refused;
 *   2. the attention (attention/flash_cuda.cu), forward and backward, whole-sequence and the
 *      context-parallel block kernels, with dropout and grouped-query heads, at head dims 64
 *      (68/102/85 KiB in the full layout), 100 (a part chunk) and 128 (116/170/149 KiB): under
 *      sm_86, sm_75 and sm_70 the kernels that do not fit take their LEAN instances, whose sums
 *      keep their terms and order, so every output equals sm_90's bit for bit;
 *   3. the bf16 tensor-core attention at HD 128, whose pipelined backward takes 104 KiB: on
 *      sm_86 (99 KiB) it runs the baseline kernels, whose bits the pipelined ones have;
 *   4. layernorm_backward_cuda at C = 2048 (the one-pass kernel takes 88 KiB): on sm_75 it takes
 *      the two-kernel path and agrees with sm_90's result to 1e-5; at C = 1024 (44 KiB) the same
 *      kernel runs everywhere and the bits are equal.
 * Without the bound (tests/mutants) the sm_75 launches fail and the test stops there.
 * Builds two ways: nvcc (make test-cuda: on a real GPU the limit is the card's own, so part 1
 * checks only that the limit is at least 64 KiB and parts 2 and 3 compare the card with itself)
 * and C++ against the emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "attention/attention_cuda.h"
#include "attention/flash_tc.h"
#include "cuda/ops_cuda.h"
#include "random/philox.h"
#include "tests/test.h"
#include "util/bf16.h"

#define SEED 0x5eed5eedf00dULL

static uint64_t rng = 0x1234567ULL;
static float urand(void) {   /* in [-1, 1) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static float* dev_rand(size_t n, float scale) {
    float* h = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = scale * urand();
    float* d = NULL;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}
static float* dev_nan(size_t n) {
    float* d = NULL;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    SG_CHECK(cudaMemset(d, 0xff, n * sizeof(float)));
    return d;
}
static float* down(const float* d, size_t n) {
    float* h = (float*)malloc(n * sizeof(float));
    SG_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void set_cc(int cc) {
    char v[8];
    snprintf(v, sizeof(v), "%d", cc);
    setenv("SG_EMU_CC", v, 1);
}

/* ---- 1. the limit --------------------------------------------------------------------------- */

__global__ void touch_smem(float* out, int n) {
    SG_DYN_SHARED(float, s);
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = s[n - 1];
}

static void test_limits(void) {
#ifdef SG_EMU
    const int ccs[5] = {70, 75, 80, 86, 90};
    const int kib[5] = {96, 64, 163, 99, 227};
    for (int c = 0; c < 5; c++) {
        set_cc(ccs[c]);
        int attr = 0;
        SG_CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
        char name[96];
        snprintf(name, sizeof(name), "smem_optin_limit_follows_sm_%d", ccs[c]);
        expect(sg_smem_optin() == (size_t)kib[c] * 1024 && attr == kib[c] * 1024, name,
               "sg_smem_optin %zu, attribute %d, expected %d KiB", sg_smem_optin(), attr, kib[c]);
    }
    set_cc(75);
    float* d = dev_nan(1);
    cudaError_t e = cudaFuncSetAttribute(touch_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 65 * 1024);
    (void)cudaGetLastError();
    expect(e != cudaSuccess, "sm_75_refuses_an_opt_in_of_65KiB", "cudaFuncSetAttribute: %s", cudaGetErrorString(e));
    set_cc(90);
    SG_CHECK(cudaFuncSetAttribute(touch_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 65 * 1024));
    set_cc(75);   /* an opt-in made on sm_90 does not hold on sm_75 */
    SG_LAUNCH(touch_smem, 1, 128, 65 * 1024, d, 65 * 256);
    e = cudaGetLastError();
    expect(e != cudaSuccess, "sm_75_refuses_a_launch_of_65KiB", "launch: %s", cudaGetErrorString(e));
    SG_LAUNCH(touch_smem, 1, 128, 64 * 1024, d, 64 * 256);
    e = cudaGetLastError();
    float* h = down(d, 1);
    expect(e == cudaSuccess && h[0] == 64 * 256 - 1, "sm_75_runs_a_launch_of_64KiB", "launch: %s, wrote %g",
           cudaGetErrorString(e), h[0]);
    free(h);
    SG_CHECK(cudaFree(d));
    set_cc(90);
#else
    expect(sg_smem_optin() >= 64 * 1024, "smem_optin_limit_at_least_64KiB", "%zu bytes", sg_smem_optin());
#endif
}

/* ---- 2. the attention ------------------------------------------------------------------------ */

typedef struct {
    float* h[10];
    size_t n[10];
    int count;
} Outs;

static void outs_add(Outs* o, const float* d, size_t n) {
    o->h[o->count] = down(d, n);
    o->n[o->count] = n;
    o->count++;
}
static void outs_free(Outs* o) {
    for (int i = 0; i < o->count; i++) free(o->h[i]);
    o->count = 0;
}

/* forward and backward, whole-sequence and one context-parallel block, outputs copied to o */
static void run_attention(Outs* o, int B, int T, int NH, int NKV, int HD, double p,
                          const float* qkv, const float* dout) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const Dropout drop = dropout_make(p);
    const size_t nsc = attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1);
    float *out = dev_nan((size_t)B * T * C), *lse = dev_nan((size_t)B * NH * T);
    float *dqkv = dev_nan((size_t)B * T * QKV), *scratch = dev_nan(nsc);
    attention_forward_cuda(out, lse, qkv, B, T, NH, NKV, HD, 3u, SEED, drop);
    attention_backward_cuda(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, 3u, SEED, drop);
    outs_add(o, out, (size_t)B * T * C);
    outs_add(o, lse, (size_t)B * NH * T);
    outs_add(o, dqkv, (size_t)B * T * QKV);

    /* queries iq0 .. iq0+Tq-1 against keys jk0 .. jk0+Tk-1 of the same qkv (rows of stride QKV) */
    const int iq0 = T - 70, Tq = 70, jk0 = 20, Tk = T - 40;
    const float* q = qkv + (size_t)iq0 * QKV;
    const float* k = qkv + (size_t)jk0 * QKV + (size_t)NH * HD;
    const float* v = k + (size_t)NKV * HD;
    /* one sequence (B = 1): the block's rows are those of qkv */
    float *bo = dev_nan((size_t)Tq * C), *bl = dev_nan((size_t)NH * Tq);
    attention_block_forward_cuda(bo, bl, q, QKV, Tq, iq0, k, v, QKV, Tk, jk0, 1, NH, NKV, HD, 3u, SEED, drop);
    float* bdq = dev_nan((size_t)Tq * QKV);   /* the block backward adds to dq, dk, dv */
    float* bdk = dev_nan((size_t)Tk * QKV);
    SG_CHECK(cudaMemset(bdq, 0, (size_t)Tq * QKV * sizeof(float)));
    SG_CHECK(cudaMemset(bdk, 0, (size_t)Tk * QKV * sizeof(float)));
    float* bdv = bdk + (size_t)NKV * HD;
    float* bsc = dev_nan(attention_backward_scratch_floats_cuda(1, T, NH, NKV, HD, 1));
    attention_block_backward_cuda(bdq, QKV, bdk, bdv, QKV, bsc, dout + (size_t)iq0 * C, bo, bl, q, QKV, Tq, iq0, k,
                                  v, QKV, Tk, jk0, 1, NH, NKV, HD, 3u, SEED, drop);
    outs_add(o, bo, (size_t)Tq * C);
    outs_add(o, bl, (size_t)NH * Tq);
    outs_add(o, bdq, (size_t)Tq * QKV);
    outs_add(o, bdk, (size_t)Tk * QKV);
    SG_CHECK(cudaFree(out)); SG_CHECK(cudaFree(lse)); SG_CHECK(cudaFree(dqkv)); SG_CHECK(cudaFree(scratch));
    SG_CHECK(cudaFree(bo)); SG_CHECK(cudaFree(bl)); SG_CHECK(cudaFree(bdq)); SG_CHECK(cudaFree(bdk));
    SG_CHECK(cudaFree(bsc));
}

#ifdef SG_EMU
static const char* OUT_NAMES[7] = {"out", "lse", "dqkv", "block_out", "block_lse", "block_dq", "block_dkv"};

#endif

static void test_attention(int T, int NH, int NKV, int HD, double p) {
    const int B = 1;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    float* qkv = dev_rand((size_t)B * T * QKV, 1.0f);
    float* dout = dev_rand((size_t)B * T * C, 1.0f);
    Outs ref = {}, got = {};
    set_cc(90);
    run_attention(&ref, B, T, NH, NKV, HD, p, qkv, dout);
#ifdef SG_EMU
    /* under ThreadSanitizer (make test-cuda-emu-tsan: the barriers of the LEAN instances) sm_75
     * alone, which takes every LEAN instance, at a twentieth of the cost */
#if defined(__SANITIZE_THREAD__)
    const int ccs[1] = {75}, nccs = 1;
#else
    const int ccs[3] = {86, 75, 70}, nccs = 3;
#endif
    for (int c = 0; c < nccs; c++) {
        set_cc(ccs[c]);
        run_attention(&got, B, T, NH, NKV, HD, p, qkv, dout);
        size_t first = 0;
        int which = -1, nonfinite = 0;
        for (int i = 0; i < ref.count && which < 0; i++) {
            if (memcmp(ref.h[i], got.h[i], ref.n[i] * sizeof(float)) != 0) {
                which = i;
                while (memcmp(ref.h[i] + first, got.h[i] + first, sizeof(float)) == 0) first++;
            }
        }
        for (int i = 0; i < got.count; i++)
            for (size_t e = 0; e < got.n[i]; e++) nonfinite += i != 1 && i != 4 && !isfinite(got.h[i][e]);
        char name[160];
        snprintf(name, sizeof(name), "attention_on_sm_%d_equals_sm_90_bitwise_T%d_NH%d_NKV%d_HD%d_p%g", ccs[c], T, NH,
                 NKV, HD, p);
        if (which < 0)
            expect(nonfinite == 0, name, "7 outputs equal; %d non-finite", nonfinite);
        else
            expect(0, name, "%s differs first at %zu: %.9g vs %.9g", OUT_NAMES[which], first, got.h[which][first],
                   ref.h[which][first]);
        outs_free(&got);
    }
    set_cc(90);
#else
    run_attention(&got, B, T, NH, NKV, HD, p, qkv, dout);
    int same = 1;
    for (int i = 0; i < ref.count; i++) same &= memcmp(ref.h[i], got.h[i], ref.n[i] * sizeof(float)) == 0;
    expect(same, "attention_repeats_bitwise_on_this_gpu", "HD %d", HD);
    outs_free(&got);
#endif
    outs_free(&ref);
    SG_CHECK(cudaFree(qkv));
    SG_CHECK(cudaFree(dout));
}

#ifdef SG_EMU   /* parts 3 and 4 change the emulated GPU between calls */
/* ---- 3. the bf16 tensor-core attention ----------------------------------------------------- */

static void run_tc(Outs* o, int T, int NH, int HD, const uint16_t* qkv, const float* dout) {
    const size_t QKV = (size_t)3 * NH * HD, C = (size_t)NH * HD;
    const Dropout drop = dropout_make(0.1);
    float *out = dev_nan((size_t)T * C), *lse = dev_nan((size_t)NH * T), *dqkv = dev_nan((size_t)T * QKV);
    float* scratch = dev_nan(attention_backward_tc_scratch_floats(1, T, NH, NH, HD));
    attention_forward_tc_cuda(out, lse, qkv, 1, T, NH, NH, HD, 5u, SEED, drop);
    attention_backward_tc_cuda(dqkv, scratch, dout, qkv, out, lse, 1, T, NH, NH, HD, 5u, SEED, drop);
    outs_add(o, out, (size_t)T * C);
    outs_add(o, lse, (size_t)NH * T);
    outs_add(o, dqkv, (size_t)T * QKV);
    SG_CHECK(cudaFree(out)); SG_CHECK(cudaFree(lse)); SG_CHECK(cudaFree(dqkv)); SG_CHECK(cudaFree(scratch));
}

static void test_tc_backward_on_sm86(int T, int NH, int HD) {
    const size_t n = (size_t)T * 3 * NH * HD;
    uint16_t* h = (uint16_t*)malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) h[i] = sg_bf16_from_float(urand());
    uint16_t* qkv = NULL;
    SG_CHECK(cudaMalloc((void**)&qkv, n * sizeof(uint16_t)));
    SG_CHECK(cudaMemcpy(qkv, h, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    float* dout = dev_rand((size_t)T * NH * HD, 1.0f);
    Outs ref = {}, got = {};
    set_cc(90);
    run_tc(&ref, T, NH, HD, qkv, dout);
    set_cc(86);
    run_tc(&got, T, NH, HD, qkv, dout);
    set_cc(90);
    int same = 1;
    for (int i = 0; i < 3; i++) same &= memcmp(ref.h[i], got.h[i], ref.n[i] * sizeof(float)) == 0;
    char name[128];
    snprintf(name, sizeof(name), "tc_attention_on_sm_86_equals_sm_90_bitwise_T%d_HD%d", T, HD);
    expect(same, name, "o, lse, dqkv %s", same ? "equal" : "differ");
    outs_free(&ref);
    outs_free(&got);
    free(h);
    SG_CHECK(cudaFree(qkv));
    SG_CHECK(cudaFree(dout));
}

/* ---- 4. layernorm backward ----------------------------------------------------------------- */

static void run_lnb(Outs* o, int N, int C, const float* dout, const float* x, const float* w, const float* m,
                    const float* r) {
    float *di = dev_nan((size_t)N * C), *dw = dev_nan(C), *db = dev_nan(C);
    SG_CHECK(cudaMemset(di, 0, (size_t)N * C * sizeof(float)));
    SG_CHECK(cudaMemset(dw, 0, C * sizeof(float)));
    SG_CHECK(cudaMemset(db, 0, C * sizeof(float)));
    layernorm_backward_cuda(di, dw, db, dout, x, w, m, r, N, C);
    outs_add(o, di, (size_t)N * C);
    outs_add(o, dw, C);
    outs_add(o, db, C);
    SG_CHECK(cudaFree(di)); SG_CHECK(cudaFree(dw)); SG_CHECK(cudaFree(db));
}

static void test_layernorm_backward(int N, int C, int cc, int bitwise) {
    float *x = dev_rand((size_t)N * C, 1.0f), *w = dev_rand(C, 1.0f), *bias = dev_rand(C, 1.0f);
    float *dout = dev_rand((size_t)N * C, 1.0f), *y = dev_nan((size_t)N * C), *m = dev_nan(N), *r = dev_nan(N);
    set_cc(90);
    layernorm_forward_cuda(y, m, r, x, w, bias, N, C);
    Outs ref = {}, got = {};
    run_lnb(&ref, N, C, dout, x, w, m, r);
    set_cc(cc);
    run_lnb(&got, N, C, dout, x, w, m, r);
    set_cc(90);
    double worst = 0;
    int same = 1, finite = 1;
    for (int i = 0; i < 3; i++) {
        double num = 0, den = 0;
        for (size_t e = 0; e < ref.n[i]; e++) {
            finite &= isfinite(got.h[i][e]) != 0;
            num = fmax(num, fabs((double)got.h[i][e] - ref.h[i][e]));
            den = fmax(den, fabs((double)ref.h[i][e]));
        }
        worst = fmax(worst, den > 0 ? num / den : num);
        same &= memcmp(ref.h[i], got.h[i], ref.n[i] * sizeof(float)) == 0;
    }
    char name[128];
    snprintf(name, sizeof(name), "layernorm_backward_on_sm_%d_%s_sm_90_N%d_C%d", cc,
             bitwise ? "equals" : "agrees_with", N, C);
    expect(finite && (bitwise ? same : worst <= 1e-5), name, "max rel err %.2e, bitwise %s", worst,
           same ? "equal" : "different");
    outs_free(&ref);
    outs_free(&got);
    SG_CHECK(cudaFree(x)); SG_CHECK(cudaFree(w)); SG_CHECK(cudaFree(bias)); SG_CHECK(cudaFree(dout));
    SG_CHECK(cudaFree(y)); SG_CHECK(cudaFree(m)); SG_CHECK(cudaFree(r));
}

#endif

int main(void) {
    test_limits();
    test_attention(150, 2, 1, 64, 0.1);    /* GQA, dropout: every kernel of sm_90's full layout */
    test_attention(150, 2, 2, 128, 0.1);   /* two chunks of 64 head dims */
#if !defined(__SANITIZE_THREAD__)
    test_attention(130, 2, 1, 100, 0.0);   /* a chunk of 40 (104 rounded) */
#endif
#ifdef SG_EMU
    test_tc_backward_on_sm86(80, 1, 128);
    test_layernorm_backward(9, 2048, 75, 0);
    test_layernorm_backward(9, 2048, 70, 1);   /* 88 KiB fits sm_70's 96 */
    test_layernorm_backward(9, 1024, 75, 1);
#endif
    return test_finish();
}
