/* tests/cuda/test_cuda_flash_f16.cu — the sm_75 tensor-core attention (attention/flash_tc.cu:
 * attention_forward_tc_f16_cuda, attention_backward_tc_f16_cuda; the baseline kernels with fp16
 * operands through two mma.sync m16n8k8) against attention/flash_cpu.c run on the same fp16
 * values as fp32. In the emulation the device is a T4 (SG_EMU_CC=75, set here: 64 KiB of shared
 * memory a block, which every launch must fit).
 *   1. keep bits, exactly: one-hot values (v_j = e_j, T <= HD), so o_id = m_id p_id scale / l_i
 *      is zero exactly where key d is dropped; the zero pattern must equal the CPU's and
 *      philox_attn_draw's bit for bit (B > 1, g0 != 0, grouped-query heads, p = 0.1 and 0.5);
 *   2. forward: LSE within 1e-5 (|diff| / max(1, |lse|): fp32 sums of the same exact fp16
 *      products, in another order); o element by element within (2^-11 + 2^-11) scale
 *      sum_j p_ij |v_jd|: P is rounded to fp16 before P V (11 significant bits, a relative error
 *      of at most 2^-11), and 2^-11 covers the fp32 parts both share up to order, as in
 *      test_cuda_flash_tc.cu (there 2^-8 + 2^-11 for bf16's 8 bits). A kernel that rounded P to
 *      bf16 instead errs by up to 2^-8 and fails;
 *   3. backward: every element of dqkv within (2^-11 + 2^-10) times the float64 sums of
 *      magnitudes test_cuda_flash_tc.cu derives (pd = m p scale and ds rounded to fp16; dout holds
 *      fp16 values, so dO is exact), from the CPU forward's o and LSE; two runs bit for bit;
 *   4. controls: the kernel with another seed (p = 0.5) is far outside the forward's tolerance,
 *      and at HD 128 (the backward's 69 KiB do not fit sm_75's 64) the entry refuses in one line;
 *   5. the fp16 table's entries (attention_forward_fp16_act_cuda, attention_backward_fp16_act_cuda:
 *      fp16 o stored) bit for bit the kernels above with o rounded once, and on the fallback path
 *      (no fp16 tensor cores) the fp32 kernels' on the widened values.
 * Head dims 16, 32 and 64, T = 1, T not a multiple of 64, MHA and GQA (under ThreadSanitizer two
 * shapes at p = 0.1: races, not values). Outputs are poisoned with
 * NaN before each launch. Builds two ways: nvcc (make test-cuda, on a GPU of sm_75 or newer) and
 * C++ against the emulation (make test-cuda-emu).
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
#include "attention/flash_tc.h"
#include "random/philox.h"
#include "tests/test.h"
#include "tests/cuda/refusal.h"
#include "tests/cuda/flash_check.h"
#include "util/fp16.h"

#define SEED 0x5eed0f16d1234567ULL
#define FWD_TOL (0x1p-11 + 0x1p-11)
#define BWD_TOL (0x1p-11 + 0x1p-10)

typedef struct {
    int B, T, NH, NKV, HD;
    uint32_t g0;
} Shape;


/* n values in [-2, 2) rounded to fp16: bits for the device, values for the CPU */
static void random_f16(size_t n, uint16_t* bits, float* vals, double lo, double hi) {
    for (size_t e = 0; e < n; e++) {
        bits[e] = sg_fp16_from_float((float)(lo + (hi - lo) * test_uniform()));
        vals[e] = sg_fp16_to_float(bits[e]);
    }
}

/* qkv in [-2, 2) and dout in [-1, 1), fp16 values (so dO is exact as an operand): the bits and
 * their values, malloc'd */
static void random_inputs(size_t n_qkv, size_t n_out, uint16_t** bits, float** qkv, uint16_t** dbits, float** dout) {
    *bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    *qkv = (float*)malloc(n_qkv * sizeof(float));
    random_f16(n_qkv, *bits, *qkv, -2.0, 2.0);
    *dbits = (uint16_t*)malloc(n_out * sizeof(uint16_t));
    *dout = (float*)malloc(n_out * sizeof(float));
    random_f16(n_out, *dbits, *dout, -1.0, 1.0);
}

static uint16_t* up16(const uint16_t* h, size_t n) {
    uint16_t* d = NULL;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(uint16_t)));
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    return d;
}
static float* upf(const float* h, size_t n) {
    float* d = NULL;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    if (h) SG_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    else SG_CHECK(cudaMemset(d, 0xff, n * sizeof(float)));
    return d;
}
static void down(float* h, const float* d, size_t n) {
    SG_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

/* ---- 1. keep bits --------------------------------------------------------------------------- */

static void run_mask(int B, int T, int NH, int NKV, int HD, uint32_t g0, double p) {
    test_rng_state = 0x16a5c000ull + (uint64_t)T;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    float* qkv = (float*)malloc(n_qkv * sizeof(float));
    const size_t v0 = (size_t)(NH + NKV) * HD;   /* the value heads */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (size_t c = 0; c < QKV; c++) {
                const size_t e = ((size_t)b * T + t) * QKV + c;
                const int one_hot = c >= v0 && (int)((c - v0) % HD) == t;
                const float x = c < v0 ? (float)(4.0 * test_uniform() - 2.0) : (one_hot ? 1.0f : 0.0f);
                bits[e] = sg_fp16_from_float(x);
                qkv[e] = sg_fp16_to_float(bits[e]);
            }
    float *o_tc = (float*)malloc(n_out * sizeof(float)), *o_cpu = (float*)malloc(n_out * sizeof(float));
    float* lse = (float*)malloc(n_lse * sizeof(float));
    uint16_t* d_qkv = up16(bits, n_qkv);
    float *d_out = upf(NULL, n_out), *d_lse = upf(NULL, n_lse);
    const Dropout drop = dropout_make(p);
    attention_forward_tc_f16_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, g0, SEED, drop);
    down(o_tc, d_out, n_out);
    attention_forward(o_cpu, lse, qkv, B, T, NH, NKV, HD, g0, SEED, drop);

    size_t checked = 0, dropped = 0, vs_cpu = 0, vs_philox = 0, nonfinite = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int h = 0; h < NH; h++)
                for (int d = 0; d <= i; d++) {
                    const size_t e = ((size_t)b * T + i) * NH * HD + (size_t)h * HD + d;
                    if (!isfinite(o_tc[e])) { nonfinite++; continue; }
                    const int kept_tc = o_tc[e] != 0.0f, kept_cpu = o_cpu[e] != 0.0f;
                    const int kept = philox_attn_draw(SEED, g0 + (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)d) >=
                                     drop.thr;
                    checked++;
                    dropped += !kept_tc;
                    vs_cpu += kept_tc != kept_cpu;
                    vs_philox += kept_tc != kept;
                }
    char name[128];
    snprintf(name, sizeof(name), "flash_f16_keep_bits_equal_cpu_hd%d_p%g", HD, p);
    expect(checked > 0 && dropped > 0 && nonfinite == 0 && vs_cpu == 0 && vs_philox == 0, name,
           "B %d T %d NH %d NKV %d g0 %u, one-hot v: %zu keep bits (%zu dropped, %.3f); %zu differ from the CPU's, "
           "%zu from philox_attn_draw; %zu non-finite", B, T, NH, NKV, (unsigned)g0, checked, dropped,
           checked ? (double)dropped / checked : 0.0, vs_cpu, vs_philox, nonfinite);
    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse));
    free(bits); free(qkv); free(o_tc); free(o_cpu); free(lse);
}

/* ---- 2. forward ----------------------------------------------------------------------------- */

/* worst |o_tc - o_cpu| / (tol scale sum_j p_ij |v_jd|), p from the CPU's LSE in float64 */
static double forward_ratio(const float* o_tc, const float* o_cpu, const float* lse, const float* qkv,
                            const Shape* s, double scale, double tol, size_t* nonfinite) {
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const double sigma = 1.0 / sqrt((double)HD);
    double worst = 0;
    double* mag = (double*)malloc((size_t)HD * sizeof(double));
    *nonfinite = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / NKV);
            for (int i = 0; i < T; i++) {
                const float* q = qkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                const double L = lse[((size_t)b * NH + h) * T + i];
                for (int d = 0; d < HD; d++) mag[d] = 0;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HD;
                    const float* v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                    double dot = 0;
                    for (int d = 0; d < HD; d++) dot += (double)q[d] * (double)k[d];
                    const double pij = exp(sigma * dot - L);
                    for (int d = 0; d < HD; d++) mag[d] += scale * pij * fabs((double)v[d]);
                }
                for (int d = 0; d < HD; d++) {
                    const size_t e = ((size_t)b * T + i) * C + (size_t)h * HD + d;
                    if (!isfinite(o_tc[e])) { (*nonfinite)++; continue; }
                    const double r = fabs((double)o_tc[e] - (double)o_cpu[e]) / (tol * mag[d] + 1e-30);
                    if (r > worst) worst = r;
                }
            }
        }
    free(mag);
    return worst;
}

static double lse_err(const float* a, const float* ref, size_t n) {
    double worst = 0;
    for (size_t e = 0; e < n; e++) {
        const double d = fabs((double)a[e] - (double)ref[e]) / fmax(1.0, fabs((double)ref[e]));
        if (!(d <= worst)) worst = d;   /* a NaN makes it NaN */
    }
    return worst;
}

/* ---- 3. backward: the sums of magnitudes of tests/cuda/flash_check.h -------------------------- */

static void run_shape(const Shape* s, double p) {
    test_rng_state = 0xf16f16ull + (uint64_t)s->T * 131 + (uint64_t)s->HD;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    uint16_t *bits, *dbits;
    float *qkv, *dout;
    random_inputs(n_qkv, n_out, &bits, &qkv, &dbits, &dout);
    float *o_cpu = (float*)malloc(n_out * sizeof(float)), *lse_cpu = (float*)malloc(n_lse * sizeof(float));
    float *o_tc = (float*)malloc(n_out * sizeof(float)), *lse_tc = (float*)malloc(n_lse * sizeof(float));
    float *g_cpu = (float*)malloc(n_qkv * sizeof(float)), *g_tc = (float*)malloc(n_qkv * sizeof(float));
    float* g_again = (float*)malloc(n_qkv * sizeof(float));
    double* mag = (double*)malloc(n_qkv * sizeof(double));
    const Dropout drop = dropout_make(p);
    char name[160], shape[96];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d g0 %u p %g", B, T, NH, NKV, HD, (unsigned)s->g0, p);

    attention_forward(o_cpu, lse_cpu, qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    float* scratch = (float*)malloc(attention_backward_scratch_floats(B, T, NH, NKV, HD, cpu_threads()) * sizeof(float));
    attention_backward(g_cpu, scratch, dout, qkv, o_cpu, lse_cpu, B, T, NH, NKV, HD, s->g0, SEED, drop);
    free(scratch);

    uint16_t* d_qkv = up16(bits, n_qkv);
    float *d_out = upf(NULL, n_out), *d_lse = upf(NULL, n_lse), *d_dout = upf(dout, n_out);
    const size_t n_scratch = attention_backward_tc_scratch_floats(B, T, NH, NKV, HD);
    float *d_dqkv = upf(NULL, n_qkv), *d_scratch = upf(NULL, n_scratch);

    /* forward */
    attention_forward_tc_f16_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    down(o_tc, d_out, n_out);
    down(lse_tc, d_lse, n_lse);
    size_t nf = 0;
    const double fr = forward_ratio(o_tc, o_cpu, lse_cpu, qkv, s, drop.scale, FWD_TOL, &nf);
    const double le = lse_err(lse_tc, lse_cpu, n_lse);
    snprintf(name, sizeof(name), "flash_f16_forward_matches_cpu_hd%d_gqa%d_T%d_p%g", HD, NH / NKV, T, p);
    expect(nf == 0 && fr <= 1.0 && le <= 1e-5, name, "%s: o worst %.3f of (2^-11 + 2^-11) scale sum p |v|; LSE "
           "worst %.2e; %zu non-finite", shape, fr, le, nf);

    /* backward, from the CPU forward's o and LSE */
    SG_CHECK(cudaMemcpy(d_out, o_cpu, n_out * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_lse, lse_cpu, n_lse * sizeof(float), cudaMemcpyHostToDevice));
    attention_backward_tc_f16_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                   drop);
    down(g_tc, d_dqkv, n_qkv);
    backward_magnitudes(mag, qkv, dout, o_cpu, lse_cpu, s->B, s->T, s->NH, s->NKV, s->HD, drop.scale);
    double worst = 0;
    size_t bad = 0;
    for (size_t e = 0; e < n_qkv; e++) {
        if (!isfinite(g_tc[e])) { bad++; continue; }
        const double r = fabs((double)g_tc[e] - (double)g_cpu[e]) / (BWD_TOL * mag[e] + 1e-30);
        if (r > worst) worst = r;
    }
    snprintf(name, sizeof(name), "flash_f16_backward_matches_cpu_hd%d_gqa%d_T%d_p%g", HD, NH / NKV, T, p);
    expect(bad == 0 && worst <= 1.0, name, "%s: dqkv worst %.3f of (2^-11 + 2^-10) x the sums of magnitudes; "
           "%zu non-finite", shape, worst, bad);

    SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
    attention_backward_tc_f16_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                   drop);
    down(g_again, d_dqkv, n_qkv);
    snprintf(name, sizeof(name), "flash_f16_backward_deterministic_hd%d_T%d_p%g", HD, T, p);
    expect(memcmp(g_tc, g_again, n_qkv * sizeof(float)) == 0, name, "%s: two runs", shape);

    /* the control: another seed's mask is far outside the forward's tolerance */
    if (p == 0.5 && T > 8) {
        attention_forward_tc_f16_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED ^ 1, drop);
        down(o_tc, d_out, n_out);
        const double cr = forward_ratio(o_tc, o_cpu, lse_cpu, qkv, s, drop.scale, FWD_TOL, &nf);
        snprintf(name, sizeof(name), "flash_f16_forward_another_seed_fails_tolerance_hd%d_T%d", HD, T);
        expect(cr > 10.0, name, "%s: another seed's o is %.1f times the tolerance", shape, cr);
    }

    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse)); SG_CHECK(cudaFree(d_dout));
    SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    free(bits); free(qkv); free(dbits); free(dout); free(o_cpu); free(lse_cpu); free(o_tc); free(lse_tc);
    free(g_cpu); free(g_tc); free(g_again); free(mag);
}

/* ---- 5. the fp16 table's entries: fp16 o stored ------------------------------------------------ */
/* attention_forward_fp16_act_cuda / attention_backward_fp16_act_cuda, as --precision fp16 calls
 * them. With tensor cores: the forward's fp16 o must be attention_forward_tc_f16_cuda's fp32 o
 * rounded once, the LSE the same bits, and the backward from that stored o the fp32-interface
 * kernel's from the same values widened (D from the fp16 o read exactly), bit for bit. Without
 * (sm_70, tensor_cores 0): the fp32 kernels' outputs on the widened values, o rounded once, the
 * same bits. A table that took the other path, or rounded o elsewhere, fails here. */
static void run_act(const Shape* s, double p, int tensor_cores) {
    test_rng_state = 0xac716ull + (uint64_t)s->T * 7 + (uint64_t)tensor_cores;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    uint16_t *bits, *dbits;
    float *qkv, *dout;
    random_inputs(n_qkv, n_out, &bits, &qkv, &dbits, &dout);
    const Dropout drop = dropout_make(p);
    const char* path = tensor_cores ? "tc" : "fallback";
    char name[160], shape[96];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d p %g", B, T, NH, NKV, HD, p);

    uint16_t* d_qkv = up16(bits, n_qkv);
    float *d_q32 = upf(qkv, n_qkv), *d_dout = upf(dout, n_out);
    float *d_o32 = upf(NULL, n_out), *d_lse_ref = upf(NULL, n_lse), *d_lse = upf(NULL, n_lse);
    uint16_t* d_o16 = NULL;
    SG_CHECK(cudaMalloc((void**)&d_o16, n_out * sizeof(uint16_t)));
    SG_CHECK(cudaMemset(d_o16, 0xff, n_out * sizeof(uint16_t)));
    if (tensor_cores) attention_forward_tc_f16_cuda(d_o32, d_lse_ref, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    else attention_forward_cuda(d_o32, d_lse_ref, d_q32, B, T, NH, NKV, HD, s->g0, SEED, drop);
    attention_forward_fp16_act_cuda(tensor_cores, d_o16, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    float *o32 = (float*)malloc(n_out * sizeof(float)), *lse_ref = (float*)malloc(n_lse * sizeof(float)),
          *lse = (float*)malloc(n_lse * sizeof(float)), *o16w = (float*)malloc(n_out * sizeof(float));
    uint16_t* o16 = (uint16_t*)malloc(n_out * sizeof(uint16_t));
    down(o32, d_o32, n_out); down(lse_ref, d_lse_ref, n_lse); down(lse, d_lse, n_lse);
    SG_CHECK(cudaMemcpy(o16, d_o16, n_out * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    size_t od = 0;
    for (size_t e = 0; e < n_out; e++) {
        od += o16[e] != sg_fp16_from_float(o32[e]);
        o16w[e] = sg_fp16_to_float(o16[e]);
    }
    const size_t ld = memcmp(lse, lse_ref, n_lse * sizeof(float)) != 0;
    snprintf(name, sizeof(name), "flash_f16_act_%s_forward_is_the_fp32_out_rounded_once_hd%d_T%d_p%g", path, HD, T, p);
    expect(od == 0 && ld == 0, name, "%s: %zu of %zu fp16 o differ from the %s forward's o rounded; LSE %s", shape,
           od, n_out, tensor_cores ? "attention_forward_tc_f16_cuda" : "fp32 kernels'", ld ? "differs" : "equal");

    /* the backward from the stored fp16 o, against the reference kernel from its values widened */
    float* d_o16w = upf(o16w, n_out);
    const size_t n_ref = tensor_cores ? attention_backward_tc_scratch_floats(B, T, NH, NKV, HD)
                                      : attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1);
    const size_t n_act = attention_backward_act_scratch_floats_fp16_cuda(tensor_cores, B, T, NH, NKV, HD, 1);
    float *d_s1 = upf(NULL, n_ref), *d_s2 = upf(NULL, n_act), *d_g1 = upf(NULL, n_qkv), *d_g2 = upf(NULL, n_qkv);
    if (tensor_cores)
        attention_backward_tc_f16_cuda(d_g1, d_s1, d_dout, d_qkv, d_o16w, d_lse, B, T, NH, NKV, HD, s->g0, SEED, drop);
    else
        attention_backward_cuda(d_g1, d_s1, d_dout, d_q32, d_o16w, d_lse, B, T, NH, NKV, HD, s->g0, SEED, drop);
    attention_backward_fp16_act_cuda(tensor_cores, d_g2, d_s2, d_dout, d_qkv, d_o16, d_lse, B, T, NH, NKV, HD, s->g0,
                                     SEED, drop);
    float *g1 = (float*)malloc(n_qkv * sizeof(float)), *g2 = (float*)malloc(n_qkv * sizeof(float));
    down(g1, d_g1, n_qkv); down(g2, d_g2, n_qkv);
    size_t gd = 0, nf = 0;
    for (size_t e = 0; e < n_qkv; e++) {
        gd += memcmp(&g1[e], &g2[e], sizeof(float)) != 0;
        nf += !isfinite(g2[e]);
    }
    snprintf(name, sizeof(name), "flash_f16_act_%s_backward_from_the_stored_o_hd%d_T%d_p%g", path, HD, T, p);
    expect(gd == 0 && nf == 0, name, "%s: %zu of %zu dqkv differ from the %s backward's on the widened o; %zu "
           "non-finite", shape, gd, n_qkv, tensor_cores ? "fp32-interface fp16" : "fp32", nf);

    void* dev[] = {d_qkv, d_q32, d_dout, d_o32, d_lse_ref, d_lse, d_o16, d_o16w, d_s1, d_s2, d_g1, d_g2};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) SG_CHECK(cudaFree(dev[i]));
    free(bits); free(qkv); free(dbits); free(dout); free(o32); free(lse_ref); free(lse); free(o16w); free(o16);
    free(g1); free(g2);
}

/* ---- 4. a head dim whose backward does not fit ---------------------------------------------- */

static void hd128_child(void) {
    uint16_t* q = NULL;
    float *o = NULL, *l = NULL;
    SG_CHECK(cudaMalloc((void**)&q, 64 * 3 * 128 * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&o, 64 * 128 * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&l, 64 * sizeof(float)));
    attention_forward_tc_f16_cuda(o, l, q, 1, 64, 1, 1, 128, 0u, SEED, dropout_make(0.0));
    _exit(0);
}

static void refuse_hd128(const char* argv0) {
    if (attention_tc_f16_supports_hd(128)) {
        skip("flash_f16_hd128_refused_where_it_does_not_fit", "this device's shared memory holds HD 128");
        return;
    }
    expect_refusal("flash_f16_hd128_refused_where_it_does_not_fit", argv0, "--refuse", "hd128", "head dim 128");
}

int main(int argc, char** argv) {
#ifdef SG_EMU
    setenv("SG_EMU_CC", "75", 0);   /* a T4 (SG_EMU_CC set outside wins) */
#endif
    if (argc == 3 && strcmp(argv[1], "--refuse") == 0) hd128_child();
    int maj = 0, min = 0;
    SG_CHECK(cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, 0));
    SG_CHECK(cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, 0));
    printf("# device sm_%d%d, %zu KiB of shared memory a block\n", maj, min, sg_smem_optin() / 1024);

    run_mask(2, 60, 2, 1, 64, 5u, 0.1);
#if !defined(__SANITIZE_THREAD__)   /* ThreadSanitizer: races, not values; p = 0.1 takes every path */
    run_mask(2, 60, 2, 1, 64, 5u, 0.5);
#endif
    const Shape shapes[] = {
        {1, 1, 1, 1, 16, 0u},      /* one position */
        {2, 37, 2, 1, 32, 3u},     /* GQA, B > 1, T inside one tile */
        {1, 130, 2, 2, 64, 7u},    /* three tiles, the last partial */
        {1, 70, 4, 2, 16, 1u},
    };
    const double ps[] = {0.0, 0.1, 0.5};
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        for (size_t pi = 0; pi < 3; pi++) {
#if defined(__SANITIZE_THREAD__)
            if (pi != 1 || k == 0 || k == 3) continue;   /* two shapes (GQA, three tiles) at p = 0.1 */
#endif
            run_shape(&shapes[k], ps[pi]);
        }
    /* the fp16 table's entries, on both paths (GQA, B > 1, a partial tile); under ThreadSanitizer
     * the tensor-core path at a smaller shape (the fallback is the fp32 kernels, which
     * test_cuda_attention runs under it) */
#if defined(__SANITIZE_THREAD__)
    const Shape act = {1, 37, 2, 1, 32, 3u};
    run_act(&act, 0.1, 1);
#else
    const Shape act = {2, 70, 4, 2, 32, 3u};
    run_act(&act, 0.1, 1);
    run_act(&act, 0.1, 0);
#endif
    refuse_hd128(argv[0]);
    return test_finish();
}
