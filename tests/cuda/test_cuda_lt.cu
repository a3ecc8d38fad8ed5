/* tests/cuda/test_cuda_lt.cu — the bf16 matmuls of cuda/ops_bf16_cuda.h (cuBLASLt) against a
 * float64 reference on the same bf16-rounded operands, and against the fp32 matmuls of
 * cuda/ops_cuda.h.
 *   - tolerance, per element: the products of two bf16 are exact, so the only error is the fp32
 *     sum of its T terms (K products, plus the bias or the accumulated gradient) in an order the
 *     GPU does not specify: sg_mma_tolerance(T, sum |term|) = (T + 1) 2^-22 sum |term|
 *     (cuda/mma.h: twice the worst case of any fp32 order, truncation allowed);
 *   - against the fp32 ops: each product moves by at most (2^-7 + 2^-16) |a b| when both operands
 *     are rounded to bf16 (8 significant bits each), plus both sides' fp32 tolerances;
 *   - shapes with odd N, C, OC (not multiples of 8 or 16: the operand copies are zero-padded),
 *     N = 1, aligned ones, C = 0 (out = bias); written outputs NaN-filled before the call, dweight and dbias
 *     accumulating onto random values (twice), NULL dinp / dbias / bias;
 *   - the bias gradient bit for bit equal to matmul_backward_cuda's (same two-pass column sum);
 *   - determinism: the same call twice gives the same bits;
 *   - split-K (a problem of few tiles and a long k in slices of a strided batch, then their
 *     ordered sum): within the same tolerance, the same bits run again, in as many slices as
 *     cuda/ops_bf16_cuda.cu says, and none under SEEDGPT_KERNELS=baseline;
 *   - the workspace and the operand copies counted in the device peak;
 *   - in the emulation only: its defined arithmetic (fp32 sum in ascending k, bit for bit) and its
 *     refusal of what it does not implement;
 *   - in the emulation only, cuBLASLt refusing a problem (SG_EMU_LT_REFUSE: the heuristic finds no
 *     algorithm, or cublasLtMatmul says NOT_SUPPORTED, or a library that needs 16-byte alignment
 *     meets odd C and OC or a misaligned bias): each refused product equals the fp32 op's bit for
 *     bit, the others stay bf16, and stderr gets one line per refused problem, not per call.
 * It builds two ways (tests/cuda/): with nvcc for a GPU (make test-cuda) and as C++ against the
 * emulation (make test-cuda-emu), so the sizes stay small.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>   /* dup, dup2: the refusal notes are read back from stderr */
#include "model/ops.h"
#include "cuda/ops_cuda.h"
#include "cuda/ops_bf16_cuda.h"
#include "cuda/device.h"
#include "cuda/mma.h"   /* sg_mma_tolerance; util/bf16.h */
#include "tests/test.h"

/* ---- host <-> device helpers -------------------------------------------------------------- */

static float* hrand(size_t n, double scale) {
    float* h = (float*)malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) h[i] = (float)(scale * test_normal());
    return h;
}
static float* up(const float* h, size_t n) {
    float* d = (float*)device_alloc_cuda(n * sizeof(float) + 4);
    device_to_backend_cuda(d, h, n * sizeof(float));
    return d;
}
static float* down(const float* d, size_t n) {
    float* h = (float*)malloc(n * sizeof(float) + 1);
    device_to_host_cuda(h, d, n * sizeof(float));
    return h;
}
static float* dpoison(size_t n) {
    float* d = (float*)device_alloc_cuda(n * sizeof(float) + 4);
    device_fill_cuda(d, n, NAN);
    return d;
}
static int same_bits(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }
static double r16(float x) { return (double)sg_bf16_round(x); }

/* ---- the float64 reference ---------------------------------------------------------------- */

/* One element of a reference: the exact value of the sum on bf16 operands, sum |term| of it
 * (bf16 terms, for the fp32 tolerance), sum |term| of the unrounded terms (for the bf16 one), and
 * the number of terms. */
typedef struct {
    double* val;
    double* mag;
    double* mag32;
    int terms;
} Ref;

static Ref ref_alloc(size_t n, int terms) {
    Ref r = {(double*)calloc(n, sizeof(double)), (double*)calloc(n, sizeof(double)),
             (double*)calloc(n, sizeof(double)), terms};
    return r;
}
static void ref_free(Ref r) { free(r.val); free(r.mag); free(r.mag32); }

/* forward: out[n][o] = sum_c x[n][c] w[o][c] + bias[o] */
static Ref ref_forward(const float* x, const float* w, const float* bias, int N, int C, int OC) {
    Ref r = ref_alloc((size_t)N * OC, C + (bias != NULL));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = 0, m = 0, m32 = 0;
            for (int c = 0; c < C; c++) {
                double p = r16(x[(size_t)n * C + c]) * r16(w[(size_t)o * C + c]);
                s += p;
                m += fabs(p);
                m32 += fabs((double)x[(size_t)n * C + c] * w[(size_t)o * C + c]);
            }
            if (bias) { s += bias[o]; m += fabs(bias[o]); m32 += fabs(bias[o]); }
            size_t i = (size_t)n * OC + o;
            r.val[i] = s; r.mag[i] = m; r.mag32[i] = m32;
        }
    return r;
}

/* dinp[n][c] = sum_o dout[n][o] w[o][c] */
static Ref ref_dinp(const float* dout, const float* w, int N, int C, int OC) {
    Ref r = ref_alloc((size_t)N * C, OC);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0, m = 0, m32 = 0;
            for (int o = 0; o < OC; o++) {
                double p = r16(dout[(size_t)n * OC + o]) * r16(w[(size_t)o * C + c]);
                s += p;
                m += fabs(p);
                m32 += fabs((double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c]);
            }
            size_t i = (size_t)n * C + c;
            r.val[i] = s; r.mag[i] = m; r.mag32[i] = m32;
        }
    return r;
}

/* dweight[o][c] = dw0[o][c] + times * sum_n dout[n][o] x[n][c] (times calls accumulating) */
static Ref ref_dweight(const float* dw0, const float* dout, const float* x, int N, int C, int OC, int times) {
    Ref r = ref_alloc((size_t)OC * C, times * (N + 1));
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double s = 0, m = 0, m32 = 0;
            for (int n = 0; n < N; n++) {
                double p = r16(dout[(size_t)n * OC + o]) * r16(x[(size_t)n * C + c]);
                s += p;
                m += fabs(p);
                m32 += fabs((double)dout[(size_t)n * OC + o] * x[(size_t)n * C + c]);
            }
            size_t i = (size_t)o * C + c;
            double d0 = dw0[i];
            r.val[i] = d0 + times * s;
            r.mag[i] = fabs(d0) + times * m;
            r.mag32[i] = fabs(d0) + times * m32;
        }
    return r;
}

/* every element within sg_mma_tolerance(terms, mag) of the bf16 reference; prints the worst
 * error in units of its tolerance */
static void expect_ref(const char* name, const float* got, Ref r, size_t n) {
    double worst = 0, worst_err = 0;
    size_t bad = 0, nans = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i])) { nans++; continue; }
        double err = fabs((double)got[i] - r.val[i]);
        double tol = sg_mma_tolerance(r.terms, r.mag[i]);
        double q = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (q > 1) bad++;
        if (q > worst) { worst = q; worst_err = err; }
    }
    expect(bad == 0 && nans == 0, name,
           "%zu elements, %zu beyond tolerance, %zu NaN; worst |err| %.3g = %.3f x its tolerance "
           "((T + 1) 2^-22 sum|term|, T = %d terms)", n, bad, nans, worst_err, worst, r.terms);
}

/* the bf16 result against the fp32 op's: (2^-7 + 2^-16) sum |ab| for the rounding of the
 * operands, plus both sides' fp32 summation tolerances */
static void expect_near_fp32(const char* name, const float* got16, const float* got32, Ref r, size_t n) {
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = (0x1p-7 + 0x1p-16) * r.mag32[i] + sg_mma_tolerance(r.terms, r.mag[i]) +
                     sg_mma_tolerance(r.terms, r.mag32[i]);
        double err = fabs((double)got16[i] - (double)got32[i]);
        double q = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (!(q <= 1)) bad++;
        if (q > worst || isnan(q)) worst = q;
    }
    expect(bad == 0, name, "%zu elements, %zu beyond the bf16 tolerance; worst %.3f x tolerance "
           "((2^-7 + 2^-16) sum|ab| + fp32 sums)", n, bad, worst);
}

/* ---- memory ------------------------------------------------------------------------------- */

/* the first bf16 call allocates the workspace and the operand copies through device_alloc_cuda */
static void test_peak_counts_workspace(void) {
    int N = 5, C = 12, OC = 7, Cp = 16;
    float *x = hrand((size_t)N * C, 1.0), *w = hrand((size_t)OC * C, 0.3);
    float *dx = up(x, (size_t)N * C), *dw = up(w, (size_t)OC * C), *d_o = dpoison((size_t)N * OC);
    size_t p0 = device_peak_bytes_cuda();
    matmul_forward_bf16_cuda(d_o, dx, dw, NULL, N, C, OC);
    size_t p1 = device_peak_bytes_cuda();
    size_t want = SG_LT_WORKSPACE_BYTES + 2 * (size_t)(N + OC) * Cp;
    expect(p1 >= p0 + want, "bf16_workspace_and_operand_copies_are_counted_in_peak",
           "peak %zu before the first call, %zu after (+%zu; at least %zu MiB workspace + %zu bytes "
           "of bf16 copies expected)", p0, p1, p1 - p0, SG_LT_WORKSPACE_BYTES >> 20, want - SG_LT_WORKSPACE_BYTES);
    free(x); free(w);
    device_free_cuda(dx); device_free_cuda(dw); device_free_cuda(d_o);
}

/* ---- one shape ---------------------------------------------------------------------------- */

#ifdef SG_EMU
/* element (n, o) of out = bf16(x) . bf16(w)^T + bias in the emulation's order: the bf16 path ran */
static size_t differ_from_emulated_lt_forward(const float* got, const float* x, const float* w, const float* bias,
                                              int N, int C, int OC) {
    size_t differ = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            float acc = 0.0f;
            for (int c = 0; c < C; c++)
                acc = acc + sg_bf16_round(x[(size_t)n * C + c]) * sg_bf16_round(w[(size_t)o * C + c]);
            if (bias) acc = acc + bias[o];
            differ += memcmp(&acc, &got[(size_t)n * OC + o], 4) != 0;
        }
    return differ;
}
#endif

static void test_shape(int N, int C, int OC, int with_bias, int with_dinp) {
    char name[200], tag[64];
    snprintf(tag, sizeof(tag), "N%d_C%d_OC%d%s%s", N, C, OC, with_bias ? "" : "_nobias",
             with_dinp ? "" : "_nodinp");
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = hrand(ni, 1.0), *w = hrand(nw, 0.3), *bias = hrand(OC, 1.0);
    float *dx = up(x, ni), *dw = up(w, nw), *db = up(bias, OC);
    const float* hb = with_bias ? bias : NULL;
    float* dbias_in = with_bias ? db : NULL;

    /* forward */
    float *d_o = dpoison(no), *d_o32 = dpoison(no);
    matmul_forward_bf16_cuda(d_o, dx, dw, dbias_in, N, C, OC);
    matmul_forward_cuda(d_o32, dx, dw, dbias_in, N, C, OC);
    float *go = down(d_o, no), *go32 = down(d_o32, no);
    Ref rf = ref_forward(x, w, hb, N, C, OC);
    snprintf(name, sizeof(name), "matmul_forward_bf16_matches_float64_on_bf16_operands_%s", tag);
    expect_ref(name, go, rf, no);
    snprintf(name, sizeof(name), "matmul_forward_bf16_near_fp32_op_%s", tag);
    expect_near_fp32(name, go, go32, rf, no);
    matmul_forward_bf16_cuda(d_o, dx, dw, dbias_in, N, C, OC);
    float* go2 = down(d_o, no);
    snprintf(name, sizeof(name), "matmul_forward_bf16_deterministic_%s", tag);
    expect(same_bits(go, go2, no), name, "two calls: %s", same_bits(go, go2, no) ? "same bits" : "BITS DIFFER");

#ifdef SG_EMU
    {   /* the emulation's defined arithmetic: fp32, products exact, ascending k, then + bias */
        size_t differ = differ_from_emulated_lt_forward(go, x, w, hb, N, C, OC);
        snprintf(name, sizeof(name), "emulated_forward_is_fp32_sum_in_ascending_k_bitwise_%s", tag);
        expect(differ == 0, name, "%zu of %zu elements differ from the host's ascending fp32 sum", differ, no);
    }
#endif

    /* backward: dinp written (NaN before), dweight and dbias accumulate onto random values */
    float *dout = hrand(no, 1.0), *dw0 = hrand(nw, 1.0), *db0 = hrand(OC, 1.0);
    float *d_dout = up(dout, no), *d_di = dpoison(ni), *d_dw = up(dw0, nw), *d_db = up(db0, OC);
    float *d_di32 = dpoison(ni), *d_dw32 = up(dw0, nw), *d_db32 = up(db0, OC);
    float* dbias_out = with_bias ? d_db : NULL;
    matmul_backward_bf16_cuda(with_dinp ? d_di : NULL, d_dw, dbias_out, d_dout, dx, dw, N, C, OC);
    matmul_backward_cuda(with_dinp ? d_di32 : NULL, d_dw32, with_bias ? d_db32 : NULL, d_dout, dx, dw, N, C, OC);
    float *gi = down(d_di, ni), *gw = down(d_dw, nw), *gb = down(d_db, OC);
    float *gi32 = down(d_di32, ni), *gw32 = down(d_dw32, nw), *gb32 = down(d_db32, OC);
    Ref rw = ref_dweight(dw0, dout, x, N, C, OC, 1);
    if (with_dinp) {
        Ref ri = ref_dinp(dout, w, N, C, OC);
        snprintf(name, sizeof(name), "matmul_backward_bf16_dinp_matches_float64_%s", tag);
        expect_ref(name, gi, ri, ni);
        snprintf(name, sizeof(name), "matmul_backward_bf16_dinp_near_fp32_op_%s", tag);
        expect_near_fp32(name, gi, gi32, ri, ni);
        ref_free(ri);
    } else {
        int untouched = 1;
        for (size_t i = 0; i < ni; i++) untouched &= isnan(gi[i]) != 0;
        snprintf(name, sizeof(name), "matmul_backward_bf16_null_dinp_is_skipped_%s", tag);
        expect(untouched, name, "the (NaN-filled) buffer %s", untouched ? "untouched" : "WRITTEN");
    }
    snprintf(name, sizeof(name), "matmul_backward_bf16_dweight_accumulates_matches_float64_%s", tag);
    expect_ref(name, gw, rw, nw);
    snprintf(name, sizeof(name), "matmul_backward_bf16_dweight_near_fp32_op_%s", tag);
    expect_near_fp32(name, gw, gw32, rw, nw);
#ifdef SG_EMU
    {   /* dweight = the ascending fp32 sum over the rows, then + dw0 (beta = 1) */
        size_t differ = 0;
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int n = 0; n < N; n++)
                    acc = acc + sg_bf16_round(dout[(size_t)n * OC + o]) * sg_bf16_round(x[(size_t)n * C + c]);
                acc = acc + dw0[(size_t)o * C + c];
                differ += memcmp(&acc, &gw[(size_t)o * C + c], 4) != 0;
            }
        snprintf(name, sizeof(name), "emulated_dweight_is_fp32_sum_in_ascending_k_plus_beta_c_bitwise_%s", tag);
        expect(differ == 0, name, "%zu of %zu elements differ from the host's ascending fp32 sum", differ, nw);
    }
#endif
    if (with_bias) {
        snprintf(name, sizeof(name), "matmul_backward_bf16_dbias_equals_fp32_op_bitwise_%s", tag);
        expect(same_bits(gb, gb32, OC), name, "the fp32 column sum of dout: %s",
               same_bits(gb, gb32, OC) ? "same bits" : "BITS DIFFER");
    } else {
        snprintf(name, sizeof(name), "matmul_backward_bf16_null_dbias_is_skipped_%s", tag);
        expect(same_bits(gb, db0, OC), name, "the bias gradient buffer %s",
               same_bits(gb, db0, OC) ? "untouched" : "WRITTEN");
    }

    /* determinism from the same start, then a second accumulation */
    device_to_backend_cuda(d_dw, dw0, nw * sizeof(float));
    device_to_backend_cuda(d_db, db0, OC * sizeof(float));
    matmul_backward_bf16_cuda(with_dinp ? d_di : NULL, d_dw, dbias_out, d_dout, dx, dw, N, C, OC);
    float *ri2 = down(d_di, ni), *rw2 = down(d_dw, nw), *rb2 = down(d_db, OC);
    int det = same_bits(ri2, gi, ni) && same_bits(rw2, gw, nw) && same_bits(rb2, gb, OC);
    snprintf(name, sizeof(name), "matmul_backward_bf16_deterministic_%s", tag);
    expect(det, name, "two runs from the same values: %s", det ? "same bits" : "BITS DIFFER");
    matmul_backward_bf16_cuda(with_dinp ? d_di : NULL, d_dw, dbias_out, d_dout, dx, dw, N, C, OC);
    matmul_backward_cuda(with_dinp ? d_di32 : NULL, d_dw32, with_bias ? d_db32 : NULL, d_dout, dx, dw, N, C, OC);
    float *rw3 = down(d_dw, nw), *rb3 = down(d_db, OC), *rb32 = down(d_db32, OC);
    Ref rw_twice = ref_dweight(dw0, dout, x, N, C, OC, 2);
    snprintf(name, sizeof(name), "matmul_backward_bf16_dweight_accumulates_twice_%s", tag);
    expect_ref(name, rw3, rw_twice, nw);
    snprintf(name, sizeof(name), "matmul_backward_bf16_dbias_accumulates_twice_as_fp32_op_%s", tag);
    expect(same_bits(rb3, with_bias ? rb32 : db0, OC), name, "after two calls: %s",
           same_bits(rb3, with_bias ? rb32 : db0, OC) ? "same bits" : "BITS DIFFER");

    ref_free(rf); ref_free(rw); ref_free(rw_twice);
    free(x); free(w); free(bias); free(go); free(go32); free(go2);
    free(dout); free(dw0); free(db0); free(gi); free(gw); free(gb); free(gi32);
    free(gw32); free(gb32); free(ri2); free(rw2); free(rb2); free(rw3); free(rb3); free(rb32);
    float* dev[] = {dx, dw, db, d_o, d_o32, d_dout, d_di, d_dw, d_db,
                    d_di32, d_dw32, d_db32};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) device_free_cuda(dev[i]);
}

/* C = 0: an empty product (k padded to 8 zeros), so out = bias exactly */
static void test_forward_empty_product(void) {
    int N = 3, OC = 5;
    float* bias = hrand(OC, 1.0);
    float *dx = up(NULL, 0), *dw = up(NULL, 0), *db = up(bias, OC), *d_o = dpoison((size_t)N * OC);
    matmul_forward_bf16_cuda(d_o, dx, dw, db, N, 0, OC);
    float* go = down(d_o, (size_t)N * OC);
    size_t differ = 0;
    for (int n = 0; n < N; n++) differ += !same_bits(&go[(size_t)n * OC], bias, OC);
    expect(differ == 0, "matmul_forward_bf16_empty_product_gives_bias",
           "C = 0: %zu of %d rows differ from the bias in their bits", differ, N);
    free(bias); free(go);
    device_free_cuda(dx); device_free_cuda(dw); device_free_cuda(db); device_free_cuda(d_o);
}

/* ---- the emulation's refusals ------------------------------------------------------------- */

#ifdef SG_EMU
static void test_emulation_refuses(void) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a16, a32, b16, d32;
    SG_CUBLAS_CHECK(cublasLtCreate(&h));
    SG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a16, CUDA_R_16BF, 8, 8, 8));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a32, CUDA_R_32F, 8, 8, 8));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b16, CUDA_R_16BF, 8, 8, 8));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d32, CUDA_R_32F, 8, 8, 8));
    void* buf = device_alloc_cuda(8 * 8 * 4);
    float* out = (float*)device_alloc_cuda(8 * 8 * 4);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t fp32_in = cublasLtMatmul(h, desc, &one, buf, a32, buf, b16, &zero, out, d32, out, d32, NULL,
                                            NULL, 0, 0);
    uint32_t gelu = CUBLASLT_EPILOGUE_GELU_BIAS;
    SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof(gelu)));
    cublasStatus_t gelu_epi = cublasLtMatmul(h, desc, &one, buf, a16, buf, b16, &zero, out, d32, out, d32, NULL,
                                             NULL, 0, 0);
    uint32_t bias_epi = CUBLASLT_EPILOGUE_BIAS;
    SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias_epi,
                                                   sizeof(bias_epi)));
    cublasStatus_t no_bias = cublasLtMatmul(h, desc, &one, buf, a16, buf, b16, &zero, out, d32, out, d32, NULL,
                                            NULL, 0, 0);
    float host[64];
    cublasStatus_t host_ptr = CUBLAS_STATUS_SUCCESS;
    {
        cublasLtMatmulDesc_t plain;
        SG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plain, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        host_ptr = cublasLtMatmul(h, plain, &one, buf, a16, buf, b16, &zero, host, d32, host, d32, NULL, NULL,
                                  0, 0);
        SG_CUBLAS_CHECK(cublasLtMatmulDescDestroy(plain));
    }
    expect(fp32_in == CUBLAS_STATUS_NOT_SUPPORTED && gelu_epi == CUBLAS_STATUS_NOT_SUPPORTED &&
           no_bias == CUBLAS_STATUS_INVALID_VALUE && host_ptr == CUBLAS_STATUS_INVALID_VALUE,
           "emulated_cublaslt_refuses_what_it_does_not_implement",
           "fp32 A: status %d, GELU epilogue: %d (want %d); BIAS without a pointer: %d, a host D: %d "
           "(want %d)", (int)fp32_in, (int)gelu_epi, (int)CUBLAS_STATUS_NOT_SUPPORTED, (int)no_bias,
           (int)host_ptr, (int)CUBLAS_STATUS_INVALID_VALUE);
    device_free_cuda(buf);
    device_free_cuda(out);
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a16));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a32));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b16));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(d32));
    SG_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    SG_CUBLAS_CHECK(cublasLtDestroy(h));
}
#endif

/* ---- cuBLASLt refusing a problem (emulation: SG_EMU_LT_REFUSE) ----------------------------- */

#ifdef SG_EMU
/* stderr goes to a temporary file between the two calls; stderr_end returns what was written */
static int saved_stderr = -1;
static FILE* captured = NULL;
static void stderr_begin(void) {
    fflush(stderr);
    captured = tmpfile();
    saved_stderr = dup(2);
    dup2(fileno(captured), 2);
}
static char* stderr_end(void) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    long n = ftell(captured);
    char* text = (char*)calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(captured);
    if (n > 0 && fread(text, 1, (size_t)n, captured) != (size_t)n) text[0] = 0;
    fclose(captured);
    return text;
}
static int count_lines_with(const char* text, const char* a, const char* b) {
    int n = 0;
    for (const char* line = text; *line;) {
        const char* nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof(buf), "%.*s", (int)(len < sizeof(buf) - 1 ? len : sizeof(buf) - 1), line);
        n += strstr(buf, a) != NULL && (b == NULL || strstr(buf, b) != NULL);
        line += len + (nl != NULL);
    }
    return n;
}


/* Under SG_EMU_LT_REFUSE=mode, the forward (with a bias at bias_offset floats from a 16-byte
 * boundary) and the backward, each called twice: which products cuBLASLt refused must equal the
 * fp32 op's bits (lt_* = 0) and the rest the emulated bf16 sums (lt_* = 1); the notes on stderr
 * come once per refused problem. */
static void test_refusal(const char* mode, int N, int C, int OC, int bias_offset, int lt_fwd, int lt_dinp,
                         int lt_dweight) {
    char name[200], tag[96];
    snprintf(tag, sizeof(tag), "%s_N%d_C%d_OC%d%s", mode, N, C, OC, bias_offset ? "_bias_misaligned" : "");
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = hrand(ni, 1.0), *w = hrand(nw, 0.3), *bias = hrand(OC, 1.0), *dout = hrand(no, 1.0);
    float *dw0 = hrand(nw, 1.0), *db0 = hrand(OC, 1.0);
    float *dx = up(x, ni), *dw = up(w, nw), *d_dout = up(dout, no);
    float* db_block = (float*)device_alloc_cuda((OC + 4) * sizeof(float));
    float* db = db_block + bias_offset;
    device_to_backend_cuda(db, bias, OC * sizeof(float));
    float *d_o = dpoison(no), *d_o32 = dpoison(no), *d_di = dpoison(ni), *d_di32 = dpoison(ni);
    float *d_dw = up(dw0, nw), *d_dw32 = up(dw0, nw), *d_db = up(db0, OC), *d_db32 = up(db0, OC);

    setenv("SG_EMU_LT_REFUSE", mode, 1);
    stderr_begin();
    for (int call = 0; call < 2; call++) {
        matmul_forward_bf16_cuda(d_o, dx, dw, db, N, C, OC);
        matmul_backward_bf16_cuda(d_di, d_dw, d_db, d_dout, dx, dw, N, C, OC);
    }
    char* notes = stderr_end();
    unsetenv("SG_EMU_LT_REFUSE");
    for (int call = 0; call < 2; call++) {
        matmul_forward_cuda(d_o32, dx, dw, db, N, C, OC);
        matmul_backward_cuda(d_di32, d_dw32, d_db32, d_dout, dx, dw, N, C, OC);
    }
    float *go = down(d_o, no), *go32 = down(d_o32, no), *gi = down(d_di, ni), *gi32 = down(d_di32, ni);
    float *gw = down(d_dw, nw), *gw32 = down(d_dw32, nw), *gb = down(d_db, OC), *gb32 = down(d_db32, OC);

    if (lt_fwd) {
        size_t differ = differ_from_emulated_lt_forward(go, x, w, bias, N, C, OC);
        snprintf(name, sizeof(name), "lt_accepted_forward_stays_bf16_%s", tag);
        expect(differ == 0, name, "%zu of %zu elements differ from the emulated bf16 sum", differ, no);
    } else {
        snprintf(name, sizeof(name), "lt_refused_forward_equals_fp32_op_bitwise_%s", tag);
        expect(same_bits(go, go32, no), name, "out after two calls: %s",
               same_bits(go, go32, no) ? "the fp32 op's bits" : "BITS DIFFER");
    }
    if (lt_dinp) {
        Ref ri = ref_dinp(dout, w, N, C, OC);
        snprintf(name, sizeof(name), "lt_accepted_dinp_stays_bf16_%s", tag);
        expect_ref(name, gi, ri, ni);
        ref_free(ri);
    } else {
        snprintf(name, sizeof(name), "lt_refused_dinp_equals_fp32_op_bitwise_%s", tag);
        expect(same_bits(gi, gi32, ni), name, "dinp: %s", same_bits(gi, gi32, ni) ? "the fp32 op's bits" : "BITS DIFFER");
    }
    if (lt_dweight) {
        Ref rw = ref_dweight(dw0, dout, x, N, C, OC, 2);
        snprintf(name, sizeof(name), "lt_accepted_dweight_stays_bf16_%s", tag);
        expect_ref(name, gw, rw, nw);
        ref_free(rw);
    } else {
        snprintf(name, sizeof(name), "lt_refused_dweight_accumulates_as_fp32_op_bitwise_%s", tag);
        expect(same_bits(gw, gw32, nw), name, "dweight after two accumulating calls: %s",
               same_bits(gw, gw32, nw) ? "the fp32 op's bits" : "BITS DIFFER");
    }
    snprintf(name, sizeof(name), "lt_refusal_leaves_dbias_the_fp32_op_bits_%s", tag);
    expect(same_bits(gb, gb32, OC), name, "dbias after two calls: %s", same_bits(gb, gb32, OC) ? "same bits" : "BITS DIFFER");

    /* one note per refused problem (three problems, each called twice), naming it */
    const int want_f = !lt_fwd, want_i = !lt_dinp, want_w = !lt_dweight;
    const int got_f = count_lines_with(notes, "bf16 forward GEMM", "runs in fp32");
    const int got_i = count_lines_with(notes, "bf16 dinp GEMM", "runs in fp32");
    const int got_w = count_lines_with(notes, "bf16 dweight GEMM", "runs in fp32");
    const int lines = count_lines_with(notes, "", NULL);
    snprintf(name, sizeof(name), "lt_refusal_noted_once_per_problem_%s", tag);
    char first[161];
    snprintf(first, sizeof(first), "%s", notes);
    char* nl = strchr(first, '\n');
    if (nl) *nl = 0;
    expect(got_f == want_f && got_i == want_i && got_w == want_w && lines == want_f + want_i + want_w, name,
           "notes on stderr over two calls: forward %d (want %d), dinp %d (want %d), dweight %d (want %d), "
           "%d lines in all; first: \"%s\"", got_f, want_f, got_i, want_i, got_w, want_w, lines, first);

    free(notes);
    free(x); free(w); free(bias); free(dout); free(dw0); free(db0);
    free(go); free(go32); free(gi); free(gi32); free(gw); free(gw32); free(gb); free(gb32);
    float* dev[] = {dx, dw, d_dout, db_block, d_o, d_o32, d_di, d_di32, d_dw, d_dw32, d_db, d_db32};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) device_free_cuda(dev[i]);
}
#endif

/* ---- split-K where the tiles are scarce (lt_split in cuda/ops_bf16_cuda.cu) ----------------------
 * The bf16 table's backward (matmul_backward_bf16_act_cuda, inp and weight stored in bf16) on a
 * problem with one output tile and a long k: dweight (C, OC, k N) when N is long, dinp (C, N,
 * k OC) when OC is. The split product is within the float64 reference's fp32 tolerance (any order
 * of the sums: dweight accumulating onto random values), its bits are the same run again, the
 * dweight plan says into how many slices it ran, and under SEEDGPT_KERNELS=baseline (one product,
 * no split) the bits differ (the sums grouped otherwise) while staying within the same tolerance. */
static void test_split_k(int N, int C, int OC, int want_slices) {
    char name[128];
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, nd = (size_t)N * OC;
    float *x = hrand(nx, 1.0), *w = hrand(nw, 0.3), *dout = hrand(nd, 1.0), *dw0 = hrand(nw, 1.0);
    uint16_t *x16 = (uint16_t*)malloc(nx * 2), *w16 = (uint16_t*)malloc(nw * 2);
    for (size_t i = 0; i < nx; i++) { x16[i] = sg_bf16_from_float(x[i]); x[i] = sg_bf16_to_float(x16[i]); }
    for (size_t i = 0; i < nw; i++) { w16[i] = sg_bf16_from_float(w[i]); w[i] = sg_bf16_to_float(w16[i]); }
    void* dx = device_alloc_cuda(nx * 2);
    void* dw = device_alloc_cuda(nw * 2);
    device_to_backend_cuda(dx, x16, nx * 2);
    device_to_backend_cuda(dw, w16, nw * 2);
    float* ddout = up(dout, nd);
    float *gw[3], *gi[3];
    char plan[3][200];
    const char* side[3] = {NULL, NULL, "baseline"};
    for (int k = 0; k < 3; k++) {
        if (side[k]) setenv("SEEDGPT_KERNELS", side[k], 1);
        else unsetenv("SEEDGPT_KERNELS");
        float* ddw = up(dw0, nw);
        float* ddi = dpoison(nx);
        matmul_backward_bf16_act_cuda(ddi, ddw, NULL, ddout, dx, dw, N, C, OC);
        gemm_bf16_describe_last_cuda(plan[k], sizeof(plan[k]));
        gw[k] = down(ddw, nw);
        gi[k] = down(ddi, nx);
        device_free_cuda(ddw);
        device_free_cuda(ddi);
    }
    unsetenv("SEEDGPT_KERNELS");
    Ref rw = ref_dweight(dw0, dout, x, N, C, OC, 1), ri = ref_dinp(dout, w, N, C, OC);
    const char* which = want_slices > 0 ? "dweight" : "dinp";
    snprintf(name, sizeof(name), "lt_split_k_%s_N%d_C%d_OC%d_dweight_within_tolerance", which, N, C, OC);
    expect_ref(name, gw[0], rw, nw);
    snprintf(name, sizeof(name), "lt_split_k_%s_N%d_C%d_OC%d_dinp_within_tolerance", which, N, C, OC);
    expect_ref(name, gi[0], ri, nx);
    snprintf(name, sizeof(name), "lt_split_k_%s_N%d_C%d_OC%d_baseline_unsplit_within_tolerance", which, N, C, OC);
    expect_ref(name, want_slices > 0 ? gw[2] : gi[2], want_slices > 0 ? rw : ri, want_slices > 0 ? nw : nx);
    const int again = same_bits(gw[0], gw[1], nw) && same_bits(gi[0], gi[1], nx);
    const int moved = want_slices > 0 ? !same_bits(gw[0], gw[2], nw) : !same_bits(gi[0], gi[2], nx);
    char want[64] = "";
    if (want_slices > 0) snprintf(want, sizeof(want), "into %d slices", want_slices);
    const int plan_ok = want_slices > 0 ? strstr(plan[0], want) != NULL && strstr(plan[2], "slices") == NULL
                                        : strstr(plan[0], "slices") == NULL;
    snprintf(name, sizeof(name), "lt_split_k_%s_N%d_C%d_OC%d_deterministic_and_split", which, N, C, OC);
    expect(again && moved && plan_ok, name, "run again: %s; bits %s the unsplit product's (SEEDGPT_KERNELS="
           "baseline); dweight's plan: \"%s\", baseline's \"%s\" (want %s)", again ? "same bits" : "DIFFERENT bits",
           moved ? "differ from" : "EQUAL to", plan[0], plan[2], want_slices > 0 ? want : "no split");
    ref_free(rw); ref_free(ri);
    for (int k = 0; k < 3; k++) { free(gw[k]); free(gi[k]); }
    device_free_cuda(dx); device_free_cuda(dw); device_free_cuda(ddout);
    free(x); free(w); free(dout); free(dw0); free(x16); free(w16);
}

int main(void) {
    test_peak_counts_workspace();   /* first: the first bf16 call allocates */
    test_shape(1, 37, 29, 1, 1);    /* one row; C, OC odd */
    test_shape(19, 67, 45, 0, 1);   /* no bias */
    test_shape(70, 33, 50, 1, 1);   /* three column-sum chunks; N not a multiple of 8 */
    test_shape(9, 20, 12, 1, 0);    /* NULL dinp */
    test_shape(32, 64, 48, 1, 1);   /* every dimension a multiple of 16 */
    test_shape(16, 96, 288, 1, 1);  /* a small model's MLP: C to 3C */
    test_forward_empty_product();
    /* one output tile, long k: dweight's k (N 4096) in min(8, 264 tiles, 4096 / 1024) = 4 slices;
     * dinp's k (OC 3072) in 3 (dweight's k, N 64, too short to split) */
    test_split_k(4096, 64, 48, 4);
    test_split_k(64, 40, 3072, 0);
#ifdef SG_EMU
    test_emulation_refuses();
    /* last, on shapes of their own: a refusal is cached with its problem. N, C, OC, bias offset
     * (floats), then which products cuBLASLt accepts: forward, dinp, dweight */
    test_refusal("heuristic", 11, 21, 13, 0, 0, 0, 0);   /* no algorithm at all */
    test_refusal("matmul", 12, 22, 14, 0, 0, 0, 0);      /* the heuristic offers, the matmul refuses */
    /* a library that needs 16 bytes: odd C and OC make every fp32 output 4-byte aligned ... */
    test_refusal("align16", 13, 23, 15, 0, 0, 0, 0);
    /* ... OC a multiple of 4 keeps the forward (and its aligned bias) on cuBLASLt, C odd does not */
    test_refusal("align16", 14, 25, 16, 0, 1, 0, 0);
    /* ... and a bias 4 bytes off a 16-byte boundary: the heuristic cannot see it, cublasLtMatmul refuses */
    test_refusal("align16", 15, 24, 16, 1, 0, 1, 1);
#else
    skip("lt_refusal_falls_back_to_fp32_op", "emulation only (SG_EMU_LT_REFUSE): a GPU refuses on its own terms");
#endif
    return test_finish();
}
