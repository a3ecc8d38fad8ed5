/* tests/cuda/test_cuda_bf16_ops.cu — the CUDA bf16 table's ops (cuda/ops_bf16_cuda.h), which
 * read and write the operand activations as bf16, against two references:
 *   - the CUDA fp32 op on the same values (the bf16 inputs widened to fp32), its output rounded to
 *     bf16 on the host: the bf16 op computes that op's fp32 arithmetic and rounds once where the
 *     CPU bf16 table rounds, so the bits must be equal (round_to_act, LayerNorm, GELU forward and
 *     backward, RoPE). A rounding moved (none, or an extra one on an input) shows here;
 *   - the CPU bf16 table's op (cpu/ops_bf16_cpu.h) on the same bf16 inputs. The CUDA and CPU
 *     kernels sum in other orders (warp butterflies, expf against vexpf), so their fp32 values
 *     differ in the last bits, and after the one rounding a bf16 output may land on the
 *     neighbouring bf16: every element equal or one bf16 step apart, at most FLIP_FRAC of them
 *     apart. fp32 outputs (GELU backward, the products) within a bound derived below.
 * The products (cuBLASLt on the stored bf16 operands, or seedgpt's own kernel where cuBLASLt
 * refuses) against the CPU's gemm_bf16: both add the same exact products (8 x 8 significant
 * bits fit fp32) in fp32, in other orders. A sum of k terms in any order is within (k - 1) u
 * sum |terms| of the exact one (u = 2^-24), so two orders differ by at most 2 (k - 1) u sum |terms|;
 * the bias adds one more rounding on each side: bound 2 k u (sum |x w| + |bias|), computed in
 * float64 per element. The bf16 outputs (qkv, fch) must in addition be the fp32 output rounded
 * (bit for bit in the emulation, where both go through the same sum). C = 64 reads the operands
 * where they lie; C = 36 (not a multiple of 8) copies them padded; both with the bias in the
 * epilogue, and again with cuBLASLt refusing every problem (emulation only: SG_EMU_LT_REFUSE),
 * which must give the same bits through the own kernel. The backward's scratch, reserved from the
 * calls, does not grow when they run.
 * Builds two ways: nvcc (make test-cuda) and C++ against the emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "util/bf16.h"
#include "util/fp16.h"
#include "model/backend.h"
#include "model/ops.h"
#include "cuda/ops_cuda.h"
#include "cuda/ops_bf16_cuda.h"
#include "cpu/ops_bf16_cpu.h"
#include "tests/test.h"
#include "tests/cuda/kernels_ab.h"

/* The 16-bit type under test: bf16 here; fp16 where tests/cuda/test_cuda_fp16_ops.cu includes this
 * file with OPS16_FP16 (the fp16 table's ops against the CPU fp16 table: the same checks). */
#ifdef OPS16_FP16
#define PREC "fp16"
#define CUDA16(op) op##_fp16_cuda
#define ACT16(op) op##_fp16_act_cuda
#define CPU16(op) op##_fp16
#define ROUND_CPU round_to_fp16_cpu
#define H16_FROM sg_fp16_from_float
#define H16_TO sg_fp16_to_float
#define H16_ROUND sg_fp16_round
#define DT16 DT_FP16
#else
#define PREC "bf16"
#define CUDA16(op) op##_bf16_cuda
#define ACT16(op) op##_bf16_act_cuda
#define CPU16(op) op##_bf16
#define ROUND_CPU round_to_bf16_cpu
#define H16_FROM sg_bf16_from_float
#define H16_TO sg_bf16_to_float
#define H16_ROUND sg_bf16_round
#define DT16 DT_BF16
#endif

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

#define FLIP_FRAC 0.01
#define U32 0x1p-24

static void* dev_upload(const void* h, size_t bytes) {
    void* d;
    SG_CHECK(cudaMalloc(&d, bytes > 0 ? bytes : 1));
    if (h != NULL && bytes > 0) SG_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void download(void* h, const void* d, size_t bytes) {
    SG_CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* n random bf16 of N(0, s) */
static uint16_t* random16(size_t n, double s) {
    uint16_t* b = (uint16_t*)malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) b[i] = H16_FROM((float)(s * test_normal()));
    return b;
}
static float* widen(const uint16_t* b, size_t n) {
    float* f = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = H16_TO(b[i]);
    return f;
}

/* bf16 elements whose bits differ, and of those the ones more than one " PREC " step apart */
typedef struct {
    size_t differ, far;
} Steps;
static Steps steps16(const uint16_t* a, const uint16_t* b, size_t n) {
    Steps s = {0, 0};
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        s.differ++;
        /* ordered integers of the two: adjacent bf16 values differ by one */
        long x = a[i] & 0x8000 ? -(long)(a[i] & 0x7fff) : (long)a[i];
        long y = b[i] & 0x8000 ? -(long)(b[i] & 0x7fff) : (long)b[i];
        if (labs(x - y) > 1) s.far++;
    }
    return s;
}
static size_t bits_differ(const void* a, const void* b, size_t n, size_t elem) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp((const char*)a + i * elem, (const char*)b + i * elem, elem) != 0;
    return d;
}
static void expect_twin(const char* name, const uint16_t* cuda, const uint16_t* cpu, size_t n) {
    Steps s = steps16(cuda, cpu, n);
    expect(s.far == 0 && s.differ <= FLIP_FRAC * n, name, "%zu of %zu " PREC " outputs differ from the CPU " PREC " "
           "op's (at most %.0f%% allowed), %zu by more than one " PREC " step", s.differ, n, 100 * FLIP_FRAC, s.far);
}

/* ---- round_to_act ------------------------------------------------------------------------------ */
static void test_round_to_act(void) {
    const size_t n = 4099;
    float* x = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(test_normal() * 3.0);
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                0x7fc00000u, 0x00000001u, 0x80000000u, 0x3f80ffffu, 0x3f807fffu};
    for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) memcpy(&x[i], &special[i], 4);
    /* fp16's edges: 65504 (the largest), 65519.996 (rounds down to it), 65520 (the tie: to infinity),
     * 2^-24 (the smallest denormal), 2^-25 (the tie: to +0), 3 2^-26 (up to 2^-24), 2^-14 - 2^-25 */
    const uint32_t special16[] = {0x477fe000u, 0x477fefffu, 0x477ff000u, 0x33800000u, 0x33000000u, 0x33400000u,
                                  0x387fc000u, 0xc77ff000u};
    for (size_t i = 0; i < sizeof(special16) / sizeof(special16[0]); i++) memcpy(&x[16 + i], &special16[i], 4);
    uint16_t *got = (uint16_t*)malloc(n * 2), *want = (uint16_t*)malloc(n * 2);
    float* dx = (float*)dev_upload(x, n * sizeof(float));
    void* dy = dev_upload(NULL, n * 2);
    CUDA16(round_to)(dy, dx, n);
    download(got, dy, n * 2);
    ROUND_CPU(want, x, n);
    expect(bits_differ(got, want, n, 2) == 0, "cuda_round_to_act_equals_cpu_round_to_" PREC,
           "%zu of %zu weights' " PREC " copies differ (ties, overflow, infinities, NaN, denormals included)",
           bits_differ(got, want, n, 2), n);
    SG_CHECK(cudaFree(dx)); SG_CHECK(cudaFree(dy));
    free(x); free(got); free(want);
}

/* ---- LayerNorm --------------------------------------------------------------------------------- */
static void test_layernorm(int N, int C) {
    float* x = (float*)malloc((size_t)N * C * sizeof(float));
    float *w = (float*)malloc(C * sizeof(float)), *b = (float*)malloc(C * sizeof(float));
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] = (float)(test_normal() * 2.0 + 0.3);
    for (int c = 0; c < C; c++) { w[c] = (float)(1.0 + 0.3 * test_normal()); b[c] = (float)(0.2 * test_normal()); }
    const size_t n = (size_t)N * C;
    float *dx = (float*)dev_upload(x, n * 4), *dw = (float*)dev_upload(w, C * 4), *db = (float*)dev_upload(b, C * 4);
    float *dout32 = (float*)dev_upload(NULL, n * 4), *dm = (float*)dev_upload(NULL, N * 4), *dr = (float*)dev_upload(NULL, N * 4);
    float *dm2 = (float*)dev_upload(NULL, N * 4), *dr2 = (float*)dev_upload(NULL, N * 4);
    void* dout16 = dev_upload(NULL, n * 2);
    layernorm_forward_cuda(dout32, dm, dr, dx, dw, db, N, C);
    CUDA16(layernorm_forward)(dout16, dm2, dr2, dx, dw, db, N, C);
    float *o32 = (float*)malloc(n * 4), *m1 = (float*)malloc(N * 4), *r1 = (float*)malloc(N * 4);
    float *m2 = (float*)malloc(N * 4), *r2 = (float*)malloc(N * 4), *mc = (float*)malloc(N * 4), *rc = (float*)malloc(N * 4);
    uint16_t *o16 = (uint16_t*)malloc(n * 2), *want = (uint16_t*)malloc(n * 2), *cpu = (uint16_t*)malloc(n * 2);
    download(o32, dout32, n * 4); download(o16, dout16, n * 2);
    download(m1, dm, N * 4); download(r1, dr, N * 4); download(m2, dm2, N * 4); download(r2, dr2, N * 4);
    for (size_t i = 0; i < n; i++) want[i] = H16_FROM(o32[i]);
    char name[128];
    snprintf(name, sizeof(name), "cuda_" PREC "_layernorm_is_the_fp32_op_rounded_once_C%d", C);
    expect(bits_differ(o16, want, n, 2) == 0 && bits_differ(m1, m2, N, 4) == 0 && bits_differ(r1, r2, N, 4) == 0,
           name, "N %d: %zu of %zu outputs differ from layernorm_forward_cuda's rounded; mean %zu, rstd %zu rows differ",
           N, bits_differ(o16, want, n, 2), n, bits_differ(m1, m2, N, 4), bits_differ(r1, r2, N, 4));
    CPU16(layernorm_forward)(cpu, mc, rc, x, w, b, N, C);
    snprintf(name, sizeof(name), "cuda_" PREC "_layernorm_matches_cpu_" PREC "_C%d", C);
    expect_twin(name, o16, cpu, n);
    snprintf(name, sizeof(name), "cuda_" PREC "_layernorm_stats_match_cpu_C%d", C);
    double em = rel_err_ff(m2, mc, N), er = rel_err_ff(r2, rc, N);
    expect(em <= 1e-5 && er <= 1e-5, name, "mean rel %.2e, rstd rel %.2e (<= 1e-5: fp32 sums in two orders)", em, er);
    SG_CHECK(cudaFree(dx)); SG_CHECK(cudaFree(dw)); SG_CHECK(cudaFree(db)); SG_CHECK(cudaFree(dout32));
    SG_CHECK(cudaFree(dm)); SG_CHECK(cudaFree(dr)); SG_CHECK(cudaFree(dm2)); SG_CHECK(cudaFree(dr2));
    SG_CHECK(cudaFree(dout16));
    free(x); free(w); free(b); free(o32); free(m1); free(r1); free(m2); free(r2); free(mc); free(rc);
    free(o16); free(want); free(cpu);
}

/* ---- GELU -------------------------------------------------------------------------------------- */
static void test_gelu(size_t n) {
    uint16_t* in = random16(n, 2.5);
    float* in32 = widen(in, n);
    float* g = (float*)malloc(n * 4);
    for (size_t i = 0; i < n; i++) g[i] = (float)test_normal();
    void* din = dev_upload(in, n * 2);
    float *din32 = (float*)dev_upload(in32, n * 4), *dg = (float*)dev_upload(g, n * 4);
    void* dout16 = dev_upload(NULL, n * 2);
    float *dout32 = (float*)dev_upload(NULL, n * 4), *dd16 = (float*)dev_upload(NULL, n * 4),
          *dd32 = (float*)dev_upload(NULL, n * 4);
    CUDA16(gelu_forward)(dout16, din, n);
    gelu_forward_cuda(dout32, din32, n);
    CUDA16(gelu_backward)(dd16, din, dg, n);
    gelu_backward_cuda(dd32, din32, dg, n);
    uint16_t *o16 = (uint16_t*)malloc(n * 2), *want = (uint16_t*)malloc(n * 2), *cpu = (uint16_t*)malloc(n * 2);
    float *o32 = (float*)malloc(n * 4), *d16 = (float*)malloc(n * 4), *d32 = (float*)malloc(n * 4),
          *dcpu = (float*)malloc(n * 4);
    download(o16, dout16, n * 2); download(o32, dout32, n * 4); download(d16, dd16, n * 4); download(d32, dd32, n * 4);
    for (size_t i = 0; i < n; i++) want[i] = H16_FROM(o32[i]);
    expect(bits_differ(o16, want, n, 2) == 0, "cuda_" PREC "_gelu_forward_is_the_fp32_op_rounded_once",
           "%zu of %zu outputs differ from gelu_forward_cuda's on the widened inputs, rounded", bits_differ(o16, want, n, 2), n);
    expect(bits_differ(d16, d32, n, 4) == 0, "cuda_" PREC "_gelu_backward_is_the_fp32_op_on_the_" PREC "_input",
           "%zu of %zu gradients differ from gelu_backward_cuda's on the widened inputs", bits_differ(d16, d32, n, 4), n);
    CPU16(gelu_forward)(cpu, in, n);
    expect_twin("cuda_" PREC "_gelu_forward_matches_cpu_" PREC, o16, cpu, n);
    CPU16(gelu_backward)(dcpu, in, g, n);
    double e = rel_err_ff(d16, dcpu, n);
    expect(e <= 1e-6, "cuda_" PREC "_gelu_backward_matches_cpu_" PREC, "||diff|| / ||dinp|| %.2e (<= 1e-6: expf against "
           "the CPU's vexpf, a few fp32 ulps)", e);
    SG_CHECK(cudaFree(din)); SG_CHECK(cudaFree(din32)); SG_CHECK(cudaFree(dg)); SG_CHECK(cudaFree(dout16));
    SG_CHECK(cudaFree(dout32)); SG_CHECK(cudaFree(dd16)); SG_CHECK(cudaFree(dd32));
    free(in); free(in32); free(g); free(o16); free(want); free(cpu); free(o32); free(d16); free(d32); free(dcpu);
}

/* ---- RoPE -------------------------------------------------------------------------------------- */
static void test_rope(int layout) {
    const int B = 2, T = 11, NH = 4, NKV = 2, HD = 16, H2 = HD / 2, pos0 = 3, maxT = 16;
    const size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    float *cs = (float*)malloc(maxT * H2 * 4), *sn = (float*)malloc(maxT * H2 * 4);
    for (int t = 0; t < maxT; t++)
        for (int d = 0; d < H2; d++) {
            double a = t * pow(10000.0, -2.0 * d / HD);
            cs[t * H2 + d] = (float)cos(a);
            sn[t * H2 + d] = (float)sin(a);
        }
    uint16_t* q = random16(n, 1.0);
    float* q32 = widen(q, n);
    void* dq = dev_upload(q, n * 2);
    float *dq32 = (float*)dev_upload(q32, n * 4), *dc = (float*)dev_upload(cs, maxT * H2 * 4),
          *ds = (float*)dev_upload(sn, maxT * H2 * 4);
    CUDA16(rope_forward)(dq, dc, ds, B, T, NH, NKV, HD, layout, pos0);
    rope_forward_cuda(dq32, dc, ds, B, T, NH, NKV, HD, layout, pos0);
    uint16_t *got = (uint16_t*)malloc(n * 2), *want = (uint16_t*)malloc(n * 2);
    download(got, dq, n * 2);
    download(q32, dq32, n * 4);
    for (size_t i = 0; i < n; i++) want[i] = H16_FROM(q32[i]);
    char name[128];
    snprintf(name, sizeof(name), "cuda_" PREC "_rope_is_the_fp32_op_rounded_after_the_rotation_%s",
             layout == ROPE_GPTJ ? "gptj" : "neox");
    expect(bits_differ(got, want, n, 2) == 0, name, "%zu of %zu q, k, v elements differ", bits_differ(got, want, n, 2), n);
    CPU16(rope_forward)(q, cs, sn, B, T, NH, NKV, HD, layout, pos0);
    snprintf(name, sizeof(name), "cuda_" PREC "_rope_matches_cpu_" PREC "_%s", layout == ROPE_GPTJ ? "gptj" : "neox");
    expect_twin(name, got, q, n);
    SG_CHECK(cudaFree(dq)); SG_CHECK(cudaFree(dq32)); SG_CHECK(cudaFree(dc)); SG_CHECK(cudaFree(ds));
    free(cs); free(sn); free(q); free(q32); free(got); free(want);
}

/* ---- products ---------------------------------------------------------------------------------- */

/* |got - ref| <= 2 k u (mag + |bias|) element by element (the header's bound); returns the worst
 * ratio of |diff| to the bound */
static double worst_ratio(const float* got, const float* ref, const double* bound, size_t n, size_t* nonfinite) {
    double w = 0;
    *nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) { (*nonfinite)++; continue; }
        double r = fabs((double)got[i] - ref[i]) / (bound[i] + 1e-38);
        if (r > w) w = r;
    }
    return w;
}

static void test_matmul(int N, int C, int OC, int refuse) {
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    uint16_t *x = random16(nx, 1.0), *w = random16(nw, 0.5);
    float *xf = widen(x, nx), *wf = widen(w, nw);
    float* bias = (float*)malloc(OC * 4);
    for (int o = 0; o < OC; o++) bias[o] = (float)(0.1 * test_normal());
    float* dout = (float*)malloc(no * 4);
    for (size_t i = 0; i < no; i++) dout[i] = (float)test_normal();
    float* dw0 = (float*)malloc(nw * 4);   /* dweight accumulates onto this */
    for (size_t i = 0; i < nw; i++) dw0[i] = (float)(0.01 * test_normal());
    char tag[64], name[160];
    snprintf(tag, sizeof(tag), "N%d_C%d_OC%d%s", N, C, OC, refuse ? "_lt_refused" : "");

    /* the scratch, reserved from the calls as a model's build does, must not grow */
    OpCalls calls;
    memset(&calls, 0, sizeof(calls));
    calls.n_matmul = 1;
    calls.matmul[0].N = N; calls.matmul[0].C = C; calls.matmul[0].OC = OC;
    calls.matmul[0].bias = 1; calls.matmul[0].dinp = 1;
    calls.B = 1; calls.T = N; calls.C = C; calls.V = 1;
    ops_reserve_scratch_cuda(&calls);   /* the bias gradient's partials */
    matmul_act_reserve_scratch_bf16_cuda(&calls);
    /* "matmul": the library refuses at the call, so a problem already planned is refused too */
    if (refuse) setenv("SG_EMU_LT_REFUSE", "matmul", 1);

    void *dx = dev_upload(x, nx * 2), *dwt = dev_upload(w, nw * 2);
    float *db = (float*)dev_upload(bias, OC * 4), *dgo = (float*)dev_upload(dout, no * 4);
    float *dy32 = (float*)dev_upload(NULL, no * 4), *ddi = (float*)dev_upload(NULL, nx * 4);
    float *ddw = (float*)dev_upload(dw0, nw * 4), *ddb = (float*)dev_upload(NULL, OC * 4);
    void* dy16 = dev_upload(NULL, no * 2);
    SG_CHECK(cudaMemset(ddb, 0, OC * 4));
    size_t live0 = device_live_bytes_cuda();
    ACT16(matmul_forward)(dy32, DT_FP32, dx, dwt, db, N, C, OC);
    ACT16(matmul_forward)(dy16, DT16, dx, dwt, db, N, C, OC);
    ACT16(matmul_backward)(ddi, ddw, ddb, dgo, dx, dwt, N, C, OC);
    size_t grown = device_live_bytes_cuda() - live0;
    if (refuse) unsetenv("SG_EMU_LT_REFUSE");

    float *y32 = (float*)malloc(no * 4), *di = (float*)malloc(nx * 4), *dwg = (float*)malloc(nw * 4),
          *dbg = (float*)malloc(OC * 4);
    uint16_t* y16 = (uint16_t*)malloc(no * 2);
    download(y32, dy32, no * 4); download(y16, dy16, no * 2); download(di, ddi, nx * 4);
    download(dwg, ddw, nw * 4); download(dbg, ddb, OC * 4);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_scratch_reserved_from_the_calls_does_not_grow_%s", tag);
    expect(grown == 0, name, "device memory grew by %zu B during the calls", grown);

    /* the CPU bf16 table's products on the same bf16 operands */
    float *ry = (float*)malloc(no * 4), *rdi = (float*)malloc(nx * 4), *rdw = (float*)malloc(nw * 4),
          *rdb = (float*)calloc(OC, 4);
    uint16_t* ry16 = (uint16_t*)malloc(no * 2);
    memcpy(rdw, dw0, nw * 4);
    CPU16(matmul_forward)(ry, DT_FP32, x, w, bias, N, C, OC);
    CPU16(matmul_forward)(ry16, DT16, x, w, bias, N, C, OC);
    CPU16(matmul_backward)(rdi, rdw, rdb, dout, x, w, N, C, OC);

    /* the bounds, from the magnitudes of the exact products */
    double *by = (double*)malloc(no * 8), *bdi = (double*)malloc(nx * 8), *bdw = (double*)malloc(nw * 8);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double m = 0;
            for (int c = 0; c < C; c++) m += fabs((double)xf[(size_t)n * C + c] * wf[(size_t)o * C + c]);
            by[(size_t)n * OC + o] = 2.0 * (C + 1) * U32 * (m + fabs((double)bias[o]));
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double m = 0;
            for (int o = 0; o < OC; o++)
                m += fabs((double)H16_ROUND(dout[(size_t)n * OC + o]) * wf[(size_t)o * C + c]);
            bdi[(size_t)n * C + c] = 2.0 * (OC + 1) * U32 * m;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double m = 0;
            for (int n = 0; n < N; n++) m += fabs((double)H16_ROUND(dout[(size_t)n * OC + o]) * xf[(size_t)n * C + c]);
            bdw[(size_t)o * C + c] = 2.0 * (N + 2) * U32 * (m + fabs((double)dw0[(size_t)o * C + c]));
        }
    size_t nf1, nf2, nf3;
    double ry_r = worst_ratio(y32, ry, by, no, &nf1), rdi_r = worst_ratio(di, rdi, bdi, nx, &nf2),
           rdw_r = worst_ratio(dwg, rdw, bdw, nw, &nf3);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_forward_fp32_out_matches_cpu_gemm_" PREC "_%s", tag);
    expect(nf1 == 0 && ry_r <= 1.0, name, "worst |diff| = %.3f of the bound 2 k u (sum |x w| + |bias|); %zu non-finite",
           ry_r, nf1);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_backward_matches_cpu_gemm_" PREC "_%s", tag);
    expect(nf2 == 0 && nf3 == 0 && rdi_r <= 1.0 && rdw_r <= 1.0, name, "dinp worst %.3f, dweight worst %.3f of the "
           "bound (dout rounded to " PREC " on both); %zu non-finite", rdi_r, rdw_r, nf2 + nf3);
    double eb = rel_err_ff(dbg, rdb, OC);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_dbias_matches_cpu_%s", tag);
    expect(eb <= 1e-5, name, "||diff|| / ||dbias|| %.2e (fp32 column sums of the fp32 dout, two orders)", eb);
    uint16_t* y32r = (uint16_t*)malloc(no * 2);
    for (size_t i = 0; i < no; i++) y32r[i] = H16_FROM(y32[i]);
    Steps own = steps16(y16, y32r, no);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_" PREC "_out_is_its_fp32_out_rounded_once_%s", tag);
    expect(own.far == 0 && (!EMU_ONLY || own.differ == 0), name, "%zu of %zu " PREC " outputs differ from the fp32 "
           "output rounded (%zu by more than one step; the emulation sums both the same way: none may differ)",
           own.differ, no, own.far);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_" PREC "_out_matches_cpu_" PREC "_%s", tag);
    expect_twin(name, y16, ry16, no);

    SG_CHECK(cudaFree(dx)); SG_CHECK(cudaFree(dwt)); SG_CHECK(cudaFree(db)); SG_CHECK(cudaFree(dgo));
    SG_CHECK(cudaFree(dy32)); SG_CHECK(cudaFree(ddi)); SG_CHECK(cudaFree(ddw)); SG_CHECK(cudaFree(ddb));
    SG_CHECK(cudaFree(dy16));
    free(x); free(w); free(xf); free(wf); free(bias); free(dout); free(dw0); free(y32); free(di); free(dwg);
    free(dbg); free(y16); free(ry); free(rdi); free(rdw); free(rdb); free(ry16); free(by); free(bdi); free(bdw);
    free(y32r);
}

/* In the emulation, cuBLASLt refusing every problem sends each product through seedgpt's own
 * kernel, which sums in the emulated library's order: the same bits as the accepted run. */
static void test_refusal_gives_the_same_bits(int N, int C, int OC) {
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    uint16_t *x = random16(nx, 1.0), *w = random16(nw, 0.5);
    float* bias = (float*)malloc(OC * 4);
    for (int o = 0; o < OC; o++) bias[o] = (float)(0.1 * test_normal());
    float* dout = (float*)malloc(no * 4);
    for (size_t i = 0; i < no; i++) dout[i] = (float)test_normal();
    void *dx = dev_upload(x, nx * 2), *dwt = dev_upload(w, nw * 2);
    float *db = (float*)dev_upload(bias, OC * 4), *dgo = (float*)dev_upload(dout, no * 4);
    float* out[2][3];
    uint16_t* out16[2];
    for (int r = 0; r < 2; r++) {
        if (r) setenv("SG_EMU_LT_REFUSE", "matmul", 1);
        float *dy = (float*)dev_upload(NULL, no * 4), *ddi = (float*)dev_upload(NULL, nx * 4),
              *ddw = (float*)dev_upload(NULL, nw * 4);
        void* dy16 = dev_upload(NULL, no * 2);
        SG_CHECK(cudaMemset(ddw, 0, nw * 4));
        ACT16(matmul_forward)(dy, DT_FP32, dx, dwt, db, N, C, OC);
        ACT16(matmul_forward)(dy16, DT16, dx, dwt, db, N, C, OC);
        ACT16(matmul_backward)(ddi, ddw, NULL, dgo, dx, dwt, N, C, OC);
        out[r][0] = (float*)malloc(no * 4); out[r][1] = (float*)malloc(nx * 4); out[r][2] = (float*)malloc(nw * 4);
        out16[r] = (uint16_t*)malloc(no * 2);
        download(out[r][0], dy, no * 4); download(out[r][1], ddi, nx * 4); download(out[r][2], ddw, nw * 4);
        download(out16[r], dy16, no * 2);
        SG_CHECK(cudaFree(dy)); SG_CHECK(cudaFree(ddi)); SG_CHECK(cudaFree(ddw)); SG_CHECK(cudaFree(dy16));
        if (r) unsetenv("SG_EMU_LT_REFUSE");
    }
    size_t d = bits_differ(out[0][0], out[1][0], no, 4) + bits_differ(out[0][1], out[1][1], nx, 4) +
               bits_differ(out[0][2], out[1][2], nw, 4) + bits_differ(out16[0], out16[1], no, 2);
    char name[128];
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_refused_by_cublaslt_gives_the_same_bits_C%d", C);
    expect(d == 0, name, "%zu elements of out (fp32, " PREC "), dinp, dweight differ between cuBLASLt and the own kernel", d);
    for (int r = 0; r < 2; r++) { free(out[r][0]); free(out[r][1]); free(out[r][2]); free(out16[r]); }
    SG_CHECK(cudaFree(dx)); SG_CHECK(cudaFree(dwt)); SG_CHECK(cudaFree(db)); SG_CHECK(cudaFree(dgo));
    free(x); free(w); free(bias); free(dout);
}

/* ---- the new kernels against the baseline (SEEDGPT_KERNELS=baseline; tests/cuda/kernels_ab.h) -- */

static void* dev_poison(size_t bytes) {
    void* d = dev_upload(NULL, bytes);
    SG_CHECK(cudaMemset(d, 0xff, bytes));   /* NaN as fp32 and as bf16 */
    return d;
}
static void* host_of(const void* d, size_t bytes) {
    void* h = malloc(bytes);
    download(h, d, bytes);
    return h;
}

/* the element-wise bf16 ops: LayerNorm (alone and after the residual add), GELU forward and
 * backward, round_to_act */
static void test_ab_elementwise(int B, int T, int C, double p) {
    char name[160];
    const int N = B * T;
    const size_t n = (size_t)N * C, n4 = 4 * n;
    const int vec = C % 8 == 0;   /* bf16 rows of whole 16-byte pieces */
    float* x = (float*)malloc(n * 4);
    float *w = (float*)malloc(C * 4), *b = (float*)malloc(C * 4), *br = (float*)malloc(n * 4);
    for (size_t i = 0; i < n; i++) { x[i] = (float)(2.0 * test_normal() + 0.3); br[i] = (float)test_normal(); }
    for (int c = 0; c < C; c++) { w[c] = (float)(1.0 + 0.3 * test_normal()); b[c] = (float)(0.2 * test_normal()); }
    float *dx = (float*)dev_upload(x, n * 4), *dw = (float*)dev_upload(w, C * 4), *db = (float*)dev_upload(b, C * 4);
    void *ob = dev_poison(n * 2), *on = dev_poison(n * 2);
    float *mb = (float*)dev_poison(N * 4), *mn = (float*)dev_poison(N * 4), *rb = (float*)dev_poison(N * 4),
          *rn = (float*)dev_poison(N * 4);
    Launches l;
    AB_RUN(l, CUDA16(layernorm_forward)(ob, mb, rb, dx, dw, db, N, C),
           CUDA16(layernorm_forward)(on, mn, rn, dx, dw, db, N, C));
    void *hb = host_of(ob, n * 2), *hn = host_of(on, n * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_layernorm_new_equals_baseline_N%d_C%d", N, C);
    expect_ab(name, hn, hb, n, 2, l, vec);
    free(hb); free(hn);
    hb = host_of(rb, N * 4); hn = host_of(rn, N * 4);
    snprintf(name, sizeof(name), "cuda_" PREC "_layernorm_rstd_new_equals_baseline_N%d_C%d", N, C);
    expect_ab(name, hn, hb, N, 4, l, vec);
    free(hb); free(hn);

    Dropout d = dropout_make(p);
    uint64_t seed = philox_site_seed(0x5eedull, 2, 1, 2, 0);
    float *resb = (float*)dev_upload(br, n * 4), *resn = (float*)dev_upload(br, n * 4);
    SG_CHECK(cudaMemset(ob, 0xff, n * 2)); SG_CHECK(cudaMemset(on, 0xff, n * 2));
    AB_RUN(l, CUDA16(residual_layernorm_forward)(resb, dx, resb, B, T, C, 3u, seed, d, ob, mb, rb, dw, db),
           CUDA16(residual_layernorm_forward)(resn, dx, resn, B, T, C, 3u, seed, d, on, mn, rn, dw, db));
    hb = host_of(resb, n * 4); hn = host_of(resn, n * 4);
    snprintf(name, sizeof(name), "cuda_" PREC "_residual_layernorm_residual_new_equals_baseline_N%d_C%d_p%g", N, C, p);
    expect_ab(name, hn, hb, n, 4, l, C % 4 == 0);   /* fused, or the residual's own new kernel */
    free(hb); free(hn);
    hb = host_of(ob, n * 2); hn = host_of(on, n * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_residual_layernorm_norm_new_equals_baseline_N%d_C%d_p%g", N, C, p);
    expect_ab(name, hn, hb, n, 2, l, C % 4 == 0);
    free(hb); free(hn);

    /* GELU on the MLP's width: bf16 in, bf16 out; the backward in place on dout */
    uint16_t* g16 = random16(n4, 2.5);
    float* dg = (float*)malloc(n4 * 4);
    for (size_t i = 0; i < n4; i++) dg[i] = (float)test_normal();
    void *dgin = dev_upload(g16, n4 * 2), *gb = dev_poison(n4 * 2), *gn = dev_poison(n4 * 2);
    AB_RUN(l, CUDA16(gelu_forward)(gb, dgin, n4), CUDA16(gelu_forward)(gn, dgin, n4));
    hb = host_of(gb, n4 * 2); hn = host_of(gn, n4 * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_gelu_forward_new_equals_baseline_n%zu", n4);
    expect_ab(name, hn, hb, n4, 2, l, n4 % 8 == 0);
    free(hb); free(hn);
    float *bb = (float*)dev_upload(dg, n4 * 4), *bn = (float*)dev_upload(dg, n4 * 4);
    AB_RUN(l, CUDA16(gelu_backward)(bb, dgin, bb, n4), CUDA16(gelu_backward)(bn, dgin, bn, n4));
    hb = host_of(bb, n4 * 4); hn = host_of(bn, n4 * 4);
    snprintf(name, sizeof(name), "cuda_" PREC "_gelu_backward_new_equals_baseline_n%zu", n4);
    expect_ab(name, hn, hb, n4, 4, l, n4 % 8 == 0);
    free(hb); free(hn);

    SG_CHECK(cudaMemset(ob, 0xff, n * 2)); SG_CHECK(cudaMemset(on, 0xff, n * 2));
    AB_RUN(l, CUDA16(round_to)(ob, dx, n), CUDA16(round_to)(on, dx, n));
    hb = host_of(ob, n * 2); hn = host_of(on, n * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_round_to_act_new_equals_baseline_n%zu", n);
    expect_ab(name, hn, hb, n, 2, l, n % 8 == 0);
    free(hb); free(hn);

    void* dev[] = {dx, dw, db, ob, on, mb, mn, rb, rn, resb, resn, dgin, gb, gn, bb, bn};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) SG_CHECK(cudaFree(dev[i]));
    free(x); free(w); free(b); free(br); free(g16); free(dg);
}

/* the products: the forward with a bf16 result and a bias (the staged sum rounded in 16-byte
 * accesses), the MLP's product with its GELU in one op against the two ops under baseline, and the
 * backward with dout rounded once (with the bias gradient's column sums, or alone) */
static void test_ab_products(int N, int C, int OC) {
    char name[160];
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    const int vec = OC % 8 == 0, vec_out = no % 8 == 0;   /* the dout's rounding; the result's */
    uint16_t *x = random16(nx, 1.0), *w = random16(nw, 0.5);
    float* bias = (float*)malloc(OC * 4);
    for (int o = 0; o < OC; o++) bias[o] = (float)(0.3 * test_normal());
    float* dout = (float*)malloc(no * 4);
    for (size_t i = 0; i < no; i++) dout[i] = (float)test_normal();
    void *dx = dev_upload(x, nx * 2), *dwt = dev_upload(w, nw * 2);
    float *db = (float*)dev_upload(bias, OC * 4), *dgo = (float*)dev_upload(dout, no * 4);
    void *yb = dev_poison(no * 2), *yn = dev_poison(no * 2), *gb = dev_poison(no * 2), *gn = dev_poison(no * 2);
    Launches l;
    AB_RUN(l, ACT16(matmul_forward)(yb, DT16, dx, dwt, db, N, C, OC),
           ACT16(matmul_forward)(yn, DT16, dx, dwt, db, N, C, OC));
    void *hb = host_of(yb, no * 2), *hn = host_of(yn, no * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_forward_" PREC "_bias_new_equals_baseline_N%d_C%d_OC%d", N, C, OC);
    expect_ab(name, hn, hb, no, 2, l, vec_out);
    free(hb); free(hn);
    SG_CHECK(cudaMemset(yb, 0xff, no * 2)); SG_CHECK(cudaMemset(yn, 0xff, no * 2));
    AB_RUN(l, (ACT16(matmul_forward)(yb, DT16, dx, dwt, db, N, C, OC),
               CUDA16(gelu_forward)(gb, yb, no)),
           ACT16(matmul_forward_gelu)(yn, gn, dx, dwt, db, N, C, OC));
    hb = host_of(yb, no * 2); hn = host_of(yn, no * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_forward_gelu_pre_new_equals_baseline_N%d_C%d_OC%d", N, C, OC);
    expect_ab(name, hn, hb, no, 2, l, vec_out);
    free(hb); free(hn);
    hb = host_of(gb, no * 2); hn = host_of(gn, no * 2);
    snprintf(name, sizeof(name), "cuda_" PREC "_matmul_forward_gelu_act_new_equals_baseline_N%d_C%d_OC%d", N, C, OC);
    expect_ab(name, hn, hb, no, 2, l, vec_out);
    free(hb); free(hn);

    for (int with_bias = 1; with_bias >= 0; with_bias--) {
        float* dw0 = (float*)malloc(nw * 4);
        float* db0 = (float*)malloc(OC * 4);
        for (size_t i = 0; i < nw; i++) dw0[i] = (float)(0.1 * test_normal());
        for (int o = 0; o < OC; o++) db0[o] = (float)(0.1 * test_normal());
        float *ib = (float*)dev_poison(nx * 4), *in = (float*)dev_poison(nx * 4);
        float *wb = (float*)dev_upload(dw0, nw * 4), *wn = (float*)dev_upload(dw0, nw * 4);
        float *bb = (float*)dev_upload(db0, OC * 4), *bn = (float*)dev_upload(db0, OC * 4);
        AB_RUN(l, ACT16(matmul_backward)(ib, wb, with_bias ? bb : NULL, dgo, dx, dwt, N, C, OC),
               ACT16(matmul_backward)(in, wn, with_bias ? bn : NULL, dgo, dx, dwt, N, C, OC));
        const char* tag = with_bias ? "bias" : "nobias";
        hb = host_of(ib, nx * 4); hn = host_of(in, nx * 4);
        snprintf(name, sizeof(name), "cuda_" PREC "_matmul_backward_dinp_new_equals_baseline_%s_N%d_C%d_OC%d", tag, N, C, OC);
        expect_ab(name, hn, hb, nx, 4, l, vec);
        free(hb); free(hn);
        hb = host_of(wb, nw * 4); hn = host_of(wn, nw * 4);
        snprintf(name, sizeof(name), "cuda_" PREC "_matmul_backward_dweight_new_equals_baseline_%s_N%d_C%d_OC%d", tag, N, C, OC);
        expect_ab(name, hn, hb, nw, 4, l, vec);
        free(hb); free(hn);
        hb = host_of(bb, OC * 4); hn = host_of(bn, OC * 4);
        snprintf(name, sizeof(name), "cuda_" PREC "_matmul_backward_dbias_new_equals_baseline_%s_N%d_C%d_OC%d", tag, N, C, OC);
        expect_ab(name, hn, hb, OC, 4, l, vec);
        free(hb); free(hn);
        SG_CHECK(cudaFree(ib)); SG_CHECK(cudaFree(in)); SG_CHECK(cudaFree(wb)); SG_CHECK(cudaFree(wn));
        SG_CHECK(cudaFree(bb)); SG_CHECK(cudaFree(bn));
        free(dw0); free(db0);
    }
    void* dev[] = {dx, dwt, db, dgo, yb, yn, gb, gn};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) SG_CHECK(cudaFree(dev[i]));
    free(x); free(w); free(bias); free(dout);
}

#ifndef OPS16_FP16   /* the fp16 table runs the fp32 cross-entropy: no twin of this op */
/* ---- the classifier's cross-entropy in one pass (bf16 dlogits, fp32 exponentials) ------------ */
/* Against the CPU's fp32 op (model/ops.h crossentropy_forward_backward: double exponentials) on
 * the same logits: the losses within 1e-5 relative (an fp32 sum of V exponentials is within about
 * (V / threads + log2 threads) 2^-24 relative of the double one, and __expf within a few 2^-23);
 * every bf16 dlogit equal to the CPU's fp32 dlogit rounded once, or one " PREC " step from it (the
 * fp32 value lies within ~1e-6 relative of the reference, so it can land on the other side of a
 * rounding boundary), at most FLIP_FRAC of them; the padded columns +0; the values where the op's
 * contract puts them (row n's Vp bf16 values at the start of fp32 row n). The baseline side
 * (SEEDGPT_KERNELS=baseline: the fp32 kernels, then the rounding) must be the CUDA fp32 op's
 * dlogits rounded, bit for bit. Then the head's product on that dout against the product on the
 * same values in fp32 (which rounds them to themselves). */
static void test_crossentropy(int N, int V, int Vp, int C) {
    char name[160];
    const size_t nl = (size_t)N * Vp;
    float* logits = (float*)malloc(nl * 4);
    for (size_t i = 0; i < nl; i++) logits[i] = (float)(3.0 * test_normal());
    int* tg = (int*)malloc(N * sizeof(int));
    for (int n = 0; n < N; n++) tg[n] = (int)(test_uniform() * V) % V;
    const float dloss = 1.0f / 37.0f;
    float *cl = (float*)malloc(nl * 4), *closs = (float*)malloc(N * 4);
    memcpy(cl, logits, nl * 4);
    crossentropy_forward_backward(closs, cl, tg, dloss, N, V, Vp);   /* the CPU's, fp32 out */
    int* dtg = (int*)dev_upload(tg, N * sizeof(int));
    float *dl = (float*)dev_upload(logits, nl * 4), *dloss_n = (float*)dev_poison(N * 4);
    Launches l;
    float *dlb = (float*)dev_upload(logits, nl * 4), *dloss_b = (float*)dev_poison(N * 4);
    AB_RUN(l, crossentropy_forward_backward_bf16_cuda(dloss_b, dlb, dtg, dloss, N, V, Vp),
           crossentropy_forward_backward_bf16_cuda(dloss_n, dl, dtg, dloss, N, V, Vp));
    float *gl = (float*)malloc(nl * 4), *gloss = (float*)malloc(N * 4), *bl = (float*)malloc(nl * 4);
    download(gl, dl, nl * 4); download(gloss, dloss_n, N * 4); download(bl, dlb, nl * 4);
    /* the bf16 dlogits: row n's Vp values at the start of fp32 row n */
    uint16_t *got = (uint16_t*)malloc(nl * 2), *want = (uint16_t*)malloc(nl * 2), *base = (uint16_t*)malloc(nl * 2);
    for (int n = 0; n < N; n++) {
        memcpy(got + (size_t)n * Vp, gl + (size_t)n * Vp, (size_t)Vp * 2);
        memcpy(base + (size_t)n * Vp, bl + (size_t)n * Vp, (size_t)Vp * 2);
        for (int v = 0; v < Vp; v++) want[(size_t)n * Vp + v] = H16_FROM(cl[(size_t)n * Vp + v]);
    }
    double worst = 0;
    for (int n = 0; n < N; n++) {
        double e = fabs((double)gloss[n] - closs[n]) / fmax(1.0, fabs((double)closs[n]));
        if (!(e <= worst)) worst = e;   /* NaN stays */
    }
    snprintf(name, sizeof(name), "cuda_" PREC "_crossentropy_losses_match_cpu_N%d_V%d", N, V);
    expect(worst <= 1e-5, name, "worst |loss - cpu| / max(1, |cpu|) = %.2e over %d rows (<= 1e-5: fp32 "
           "exponentials and sums)", worst, N);
    Steps st = steps16(got, want, nl);
    size_t pad_bad = 0;
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) pad_bad += got[(size_t)n * Vp + v] != 0;
    snprintf(name, sizeof(name), "cuda_" PREC "_crossentropy_dlogits_are_cpu_rounded_N%d_V%d", N, V);
    expect(st.far == 0 && st.differ <= FLIP_FRAC * nl && pad_bad == 0, name,
           "%zu of %zu bf16 dlogits one step from the CPU's fp32 dlogit rounded (at most %.0f%%), %zu further; "
           "%zu padded columns not +0", st.differ, nl, 100 * FLIP_FRAC, st.far, pad_bad);
    /* the baseline side: the CUDA fp32 op's dlogits rounded once */
    float* d32 = (float*)dev_upload(logits, nl * 4);
    float* dlo32 = (float*)dev_poison(N * 4);
    crossentropy_forward_cuda(dlo32, d32, dtg, N, V, Vp);
    crossentropy_backward_cuda(d32, dtg, dloss, N, V, Vp);
    float* f32 = (float*)malloc(nl * 4);
    download(f32, d32, nl * 4);
    for (size_t i = 0; i < nl; i++) want[i] = H16_FROM(f32[i]);
    snprintf(name, sizeof(name), "cuda_" PREC "_crossentropy_baseline_is_the_fp32_op_rounded_N%d_V%d", N, V);
    expect(bits_differ(base, want, nl, 2) == 0 && l.base == 0 && l.fresh > 0, name,
           "%zu of %zu baseline dlogits differ from the fp32 kernels' rounded; new kernel launched %llu times "
           "under baseline (want 0), %llu unset (want > 0)", bits_differ(base, want, nl, 2), nl, l.base, l.fresh);
    /* two runs: the same bits */
    float *dl2 = (float*)dev_upload(logits, nl * 4), *dloss2 = (float*)dev_poison(N * 4);
    crossentropy_forward_backward_bf16_cuda(dloss2, dl2, dtg, dloss, N, V, Vp);
    float *gl2 = (float*)malloc(nl * 4), *gloss2 = (float*)malloc(N * 4);
    download(gl2, dl2, nl * 4); download(gloss2, dloss2, N * 4);
    int det = 1;
    for (int n = 0; n < N; n++) det = det && memcmp(gl + (size_t)n * Vp, gl2 + (size_t)n * Vp, (size_t)Vp * 2) == 0;
    det = det && memcmp(gloss, gloss2, N * 4) == 0;
    snprintf(name, sizeof(name), "cuda_" PREC "_crossentropy_deterministic_N%d_V%d", N, V);
    expect(det, name, "two runs: %s", det ? "the same bits" : "BITS DIFFER");

    /* the head's product on the bf16 dout where it lies (rows 2 Vp apart) against the product on
     * the same values in fp32 */
    const size_t nx = (size_t)N * C, nw = (size_t)Vp * C;
    uint16_t *x = random16(nx, 1.0), *w = random16(nw, 0.5);
    void *dx = dev_upload(x, nx * 2), *dw = dev_upload(w, nw * 2);
    float* g32 = (float*)malloc(nl * 4);
    for (size_t i = 0; i < nl; i++) g32[i] = H16_TO(got[i]);
    float* dg32 = (float*)dev_upload(g32, nl * 4);
    float *di_a = (float*)dev_poison(nx * 4), *di_b = (float*)dev_poison(nx * 4);
    float *dw_a = (float*)dev_upload(NULL, nw * 4), *dw_b = (float*)dev_upload(NULL, nw * 4);
    SG_CHECK(cudaMemset(dw_a, 0, nw * 4)); SG_CHECK(cudaMemset(dw_b, 0, nw * 4));
    matmul_backward_dout_bf16_act_cuda(di_a, dw_a, NULL, dl, 2 * Vp, dx, dw, N, C, Vp);
    ACT16(matmul_backward)(di_b, dw_b, NULL, dg32, dx, dw, N, C, Vp);
    float *ha = (float*)malloc(nx * 4), *hb = (float*)malloc(nx * 4), *wa = (float*)malloc(nw * 4), *wb = (float*)malloc(nw * 4);
    download(ha, di_a, nx * 4); download(hb, di_b, nx * 4); download(wa, dw_a, nw * 4); download(wb, dw_b, nw * 4);
    double ei = rel_err_ff(ha, hb, nx), ew = rel_err_ff(wa, wb, nw);
    size_t bi = bits_differ(ha, hb, nx, 4), bw = bits_differ(wa, wb, nw, 4);
    snprintf(name, sizeof(name), "cuda_" PREC "_head_product_reads_the_bf16_dlogits_in_place_N%d_C%d", N, C);
    /* in the emulation the same sums: bit for bit; on a GPU another leading dimension may pick
     * another algorithm: fp32 rounding */
    expect(EMU_ONLY ? bi == 0 && bw == 0 : ei <= 1e-5 && ew <= 1e-5, name,
           "dinp: %zu of %zu differ in bits (rel %.2e), dweight: %zu of %zu (rel %.2e)", bi, nx, ei, bw, nw, ew);
    void* dev[] = {dtg, dl, dloss_n, dlb, dloss_b, d32, dlo32, dl2, dloss2, dx, dw, dg32, di_a, di_b, dw_a, dw_b};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) SG_CHECK(cudaFree(dev[i]));
    free(logits); free(tg); free(cl); free(closs); free(gl); free(gloss); free(bl); free(got); free(want);
    free(base); free(f32); free(gl2); free(gloss2); free(x); free(w); free(g32); free(ha); free(hb); free(wa); free(wb);
}

#endif

int main(void) {
    test_rng_state = 0xbf16ac7ull;
    test_round_to_act();
    test_layernorm(37, 64);
    test_layernorm(5, 200);
    test_gelu(5000);
    test_rope(ROPE_NEOX);
    test_rope(ROPE_GPTJ);
    test_matmul(19, 64, 40, 0);    /* the operands used where they lie */
    test_matmul(13, 36, 21, 0);    /* C not a multiple of 8: padded copies; OC odd */
    if (EMU_ONLY) {
        test_matmul(13, 36, 21, 1);
        /* shapes of their own: a refusal is remembered with its problem */
        test_refusal_gives_the_same_bits(17, 64, 24);
        test_refusal_gives_the_same_bits(9, 20, 13);
    } else {
        skip("cuda_" PREC "_matmul_refused_by_cublaslt", "refusals are forced only in the emulation");
    }
    test_ab_elementwise(2, 9, 64, 0.1);
    test_ab_elementwise(1, 3, 36, 0.5);   /* C not a multiple of 8: the baseline kernels */
    test_ab_products(19, 64, 48);
    test_ab_products(13, 64, 20);         /* OC not a multiple of 8: the padded dout */
#ifndef OPS16_FP16
    test_crossentropy(5, 200, 256, 64);    /* a block of 32 threads, one piece a row */
    test_crossentropy(3, 3000, 3072, 40);  /* two pieces of 2048 a row; C not a multiple of 8 */
#endif
    return test_finish();
}
