/* tests/cuda/test_cuda_flash_tc.cu — the bf16 tensor-core attention forward (attention/flash_tc.cu)
 * against attention/flash_cpu.c's forward run on the same q, k, v (the bf16 values, as fp32):
 *   1. LSE: |lse_tc - lse_cpu| / max(1, |lse_cpu|) <= 1e-5 (both are fp32 sums of exp of the same
 *      scores; the scores differ only in the order of fp32 additions);
 *   2. o, element by element: |o_tc - o_cpu| <= (2^-8 + 2^-11) scale sum_j p_ij |v_jd|, with
 *      p_ij = exp(s_ij - LSE_i) from the bf16 inputs in float64. The kernel rounds each kept weight
 *      to bf16 before P V (8 significant bits, round to nearest: a relative error of at most 2^-8,
 *      so at most 2^-8 scale sum_j p_ij |v_jd| in o_id; the normaliser l_i is the unrounded fp32
 *      sum). The 2^-11 covers the fp32 parts both kernels share up to order: the score sums
 *      (at most HD 2^-24 sigma sum_d |q_d k_d| < 2^-13 here, a relative error of p), expf, and
 *      the sums over T keys (T 2^-24 < 2^-16);
 *   3. with dropout p = 0.1 and 0.5 the same checks hold. Since a single wrong keep bit of a small
 *      weight can hide under that tolerance, the keep bits are also checked exactly: with
 *      one-hot values (v_j = e_j, T <= HD) o_id is (m_id p_id scale / l_i), zero exactly where key
 *      d is dropped, so the zero pattern of o is the mask; it must equal the CPU's zero pattern
 *      and philox_attn_draw's bit for bit. Controls: against the CPU's forward with another seed
 *      (p = 0.5) the worst error is far above the tolerance (> 10x), and the p = 0.5 output is far
 *      from the p = 0 one.
 * Shapes: head dims 16, 64 and 128, grouped-query heads, T not a multiple of the 64 tile, B > 1
 * with g0 != 0 (the keep-bit check). Outputs are poisoned with NaN before each launch, so an
 * unwritten element fails.
 * The backward (attention_backward_tc_cuda) against flash_cpu.c's backward on the same bf16 q, k,
 * v, dout holding bf16 values, and the CPU forward's o and LSE: every element of dqkv within
 * (2^-8 + 2^-10) times a float64 sum of magnitudes (derived above backward_magnitudes), at head
 * dims 16, 32, 64, 128, MHA and GQA, T = 1 and T not a multiple of 64, p = 0, 0.1, 0.5; two runs
 * bit for bit; and the control: the kernel with another seed (p = 0.5) fails that tolerance by
 * more than 10x, so a mask that differs from the CPU's cannot pass.
 * The fp32-interface wrappers (attention_forward_bf16_cuda, attention_backward_bf16_cuda) on fp32
 * qkv and dout: bit for bit the kernel they wrap on qkv rounded on the host, within tolerance of
 * the CPU on the rounded values, deterministic, the forward's copy counted in the peak; at a head
 * dim the tensor cores take (32) and one they do not (24: the fp32 kernels on bf16 values).
 * The CPU bf16 twin (attention/flash_bf16_cpu.c: bf16 q, k, v and o, P rounded before P V, dO,
 * m p scale and ds rounded as operands): the kernel's arithmetic, so only the order of fp32 sums
 * differs (relative 2^-24 per term, seen after the kernel's output is rounded to bf16 as a flip of
 * a rounding now and then). Forward: the kernel's o rounded to bf16 against the twin's bf16 o,
 * every element within one bf16 step and at most TWIN_FLIPS of them not equal, LSE within 1e-5;
 * backward (the kernel given the twin's o and LSE): ||dqkv_tc - dqkv_twin|| / ||dqkv|| at most
 * TWIN_BWD_REL, an order below one bf16 rounding of P (2^-9): a twin that left out a rounding
 * (P, dO, m p scale or ds) differs by about that much and fails.
 * The bf16 table's entries (attention_forward_bf16_act_cuda, attention_backward_bf16_act_cuda: qkv
 * and o stored in bf16): the forward's o is the kernel's rounded once, bit for bit (so the same
 * keep bits and LSE), and within the twin bound above of the twin's stored o; the backward on the
 * twin's bf16 o is the kernel on the same values, bit for bit, and within TWIN_BWD_REL of the
 * twin's. At head dim 24 (no tensor cores) they are the fp32 kernels on the widened values, bit
 * for bit, their reserved scratch not growing.
 * A T whose tiles of 64 do not fit the grid's 65535 blocks in y (T > 4194240) is refused with one
 * line and a non-zero exit, by the kernels' entry points and by the wrappers (child processes).
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
#include "util/bf16.h"
#include "attention/flash_tc.h"
#include "tests/test.h"
#include "tests/cuda/refusal.h"
#include "tests/cuda/flash_check.h"

/* The dropout probabilities each shape runs at. Under ThreadSanitizer (the emulation's race
 * check, make test-cuda-emu-tsan) races rather than values are the point, and the kernels take
 * the same paths at every p > 0 (p = 0 skips the mask: a subset of them), so there each shape
 * runs at p = 0.1 only, a third of the time. */
#if defined(__SANITIZE_THREAD__)
#define TEST_PS {0.1}
#else
#define TEST_PS {0.0, 0.1, 0.5}
#endif

/* the backend's counted peak (cuda/device_memory.cu, linked for the wrappers' allocator); declared
 * here, since a test that includes a model header is linked with the whole model by the Makefile */
#ifdef __cplusplus
extern "C"
#endif
size_t device_peak_bytes_cuda(void);
#ifdef __cplusplus
extern "C"
#endif
size_t device_live_bytes_cuda(void);

#define LSE_TOL 1e-5
#define O_TOL_FACTOR (0x1p-8 + 0x1p-11)
#define SEED 0x5eed7c0ffee12345ULL

typedef struct {
    int B, T, NH, NKV, HD;
    uint32_t g0;
} Shape;

typedef struct {
    double worst_ratio;   /* max |o - ref| / tol over the elements */
    double worst_abs;
    size_t nonfinite;
} OErr;

/* o against ref, each element within O_TOL_FACTOR * scale * mag[e] (mag = sum_j p_ij |v_jd|) */
static OErr o_error(const float* o, const float* ref, const double* mag, size_t n, float scale) {
    OErr r = {0, 0, 0};
    for (size_t e = 0; e < n; e++) {
        if (!isfinite(o[e])) { r.nonfinite++; continue; }
        const double d = fabs((double)o[e] - (double)ref[e]);
        const double tol = O_TOL_FACTOR * scale * mag[e] + 1e-30;
        if (d > r.worst_abs) r.worst_abs = d;
        if (d / tol > r.worst_ratio) r.worst_ratio = d / tol;
    }
    return r;
}

static double lse_error(const float* lse, const float* ref, size_t n, size_t* nonfinite) {
    double worst = 0;
    *nonfinite = 0;
    for (size_t e = 0; e < n; e++) {
        if (!isfinite(lse[e])) { (*nonfinite)++; continue; }
        const double d = fabs((double)lse[e] - (double)ref[e]) / fmax(1.0, fabs((double)ref[e]));
        if (d > worst) worst = d;
    }
    return worst;
}

/* n random qkv values in [-2, 2) rounded to bf16 (test_uniform's stream): bits for the device and,
 * unless vals is NULL, their exact values for the CPU */
static void random_bf16_qkv(size_t n, uint16_t* bits, float* vals) {
    for (size_t e = 0; e < n; e++) {
        bits[e] = sg_bf16_from_float((float)(4.0 * test_uniform() - 2.0));
        if (vals != NULL) vals[e] = sg_bf16_to_float(bits[e]);
    }
}

static void run_shape(const Shape* s, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    /* random qkv rounded to bf16: the bits for the device, their exact values for the CPU */
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    float* qkv = (float*)malloc(n_qkv * sizeof(float));
    random_bf16_qkv(n_qkv, bits, qkv);
    float *o_tc = (float*)malloc(n_out * sizeof(float)), *o_cpu = (float*)malloc(n_out * sizeof(float));
    float *o_off = (float*)malloc(n_out * sizeof(float)), *o_other = (float*)malloc(n_out * sizeof(float));
    float *l_tc = (float*)malloc(n_lse * sizeof(float)), *l_cpu = (float*)malloc(n_lse * sizeof(float));
    double* mag = (double*)calloc(n_out, sizeof(double));

    /* mag[b, i, h, d] = sum_{j <= i} p_ij |v_jd| in float64, from the no-dropout LSE */
    {
        attention_forward(o_cpu, l_cpu, qkv, B, T, NH, NKV, HD, s->g0, SEED, dropout_make(0.0));
        const double sigma = 1.0 / sqrt((double)HD);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const int kvh = h / (NH / NKV);
                for (int i = 0; i < T; i++) {
                    const float* q = qkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                    const double L = l_cpu[((size_t)b * NH + h) * T + i];
                    double* m = mag + ((size_t)b * T + i) * NH * HD + (size_t)h * HD;
                    for (int j = 0; j <= i; j++) {
                        const float* k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HD;
                        const float* v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                        double dot = 0;
                        for (int d = 0; d < HD; d++) dot += (double)q[d] * (double)k[d];
                        const double p = exp(sigma * dot - L);
                        for (int d = 0; d < HD; d++) m[d] += p * fabs((double)v[d]);
                    }
                }
            }
    }

    uint16_t* d_qkv;
    float *d_out, *d_lse;
    SG_CHECK(cudaMalloc((void**)&d_qkv, n_qkv * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));

    const double ps[] = TEST_PS;
    char name[160], shape[96];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d g0 %u", B, T, NH, NKV, HD, (unsigned)s->g0);
    for (size_t pi = 0; pi < sizeof(ps) / sizeof(ps[0]); pi++) {
        const Dropout drop = dropout_make(ps[pi]);
        SG_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(float)));   /* NaN: unwritten fails */
        SG_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
        attention_forward_tc_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
        SG_CHECK(cudaMemcpy(o_tc, d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
        SG_CHECK(cudaMemcpy(l_tc, d_lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
        attention_forward(o_cpu, l_cpu, qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);

        size_t lbad;
        const double le = lse_error(l_tc, l_cpu, n_lse, &lbad);
        snprintf(name, sizeof(name), "flash_tc_lse_matches_cpu_hd%d_gqa%d_p%g", HD, NH / NKV, ps[pi]);
        expect(lbad == 0 && le <= LSE_TOL, name, "%s: worst |diff| / max(1, |lse|) %.3g (tolerance %.0e), "
               "%zu non-finite", shape, le, LSE_TOL, lbad);

        const OErr oe = o_error(o_tc, o_cpu, mag, n_out, drop.scale);
        const double norm = rel_err_ff(o_tc, o_cpu, n_out);
        snprintf(name, sizeof(name), "flash_tc_out_matches_cpu_hd%d_gqa%d_p%g", HD, NH / NKV, ps[pi]);
        expect(oe.nonfinite == 0 && oe.worst_ratio <= 1.0, name, "%s: worst |diff| %.3g = %.3f of the tolerance "
               "(2^-8 + 2^-11) scale sum_j p|v|; ||diff|| / ||o|| %.3g; %zu non-finite", shape, oe.worst_abs,
               oe.worst_ratio, norm, oe.nonfinite);

        if (ps[pi] == 0.0) memcpy(o_off, o_tc, n_out * sizeof(float));
        if (ps[pi] == 0.5) {
            /* controls: the CPU with another seed, and the output without dropout, must be far off */
            attention_forward(o_other, l_cpu, qkv, B, T, NH, NKV, HD, s->g0, SEED ^ 1, drop);
            const OErr we = o_error(o_tc, o_other, mag, n_out, drop.scale);
            snprintf(name, sizeof(name), "flash_tc_other_seed_control_fails_hd%d_gqa%d", HD, NH / NKV);
            expect(we.worst_ratio > 10.0, name, "%s: against the CPU with seed ^ 1 (p 0.5) the worst |diff| is %.3g = "
                   "%.1f x the tolerance (must be > 10x: a wrong keep bit cannot pass)", shape, we.worst_abs,
                   we.worst_ratio);
            const OErr fe = o_error(o_tc, o_off, mag, n_out, drop.scale);
            snprintf(name, sizeof(name), "flash_tc_dropout_changes_out_hd%d_gqa%d", HD, NH / NKV);
            expect(fe.worst_ratio > 10.0, name, "%s: p 0.5 against p 0: worst |diff| %.3g = %.1f x the tolerance, "
                   "||diff|| / ||o|| %.3g", shape, fe.worst_abs, fe.worst_ratio, rel_err_ff(o_tc, o_off, n_out));
        }
    }

    SG_CHECK(cudaFree(d_qkv));
    SG_CHECK(cudaFree(d_out));
    SG_CHECK(cudaFree(d_lse));
    free(bits); free(qkv); free(o_tc); free(o_cpu); free(o_off); free(o_other); free(l_tc); free(l_cpu); free(mag);
}

/* The keep bits, exactly: v_j = e_j (one-hot in dim j, T <= HD), so o_id = m_id p_id scale / l_i
 * for d <= i (p_id > 0) and 0 for d > i. A zero o_id is a dropped key. */
static void run_mask(int B, int T, int NH, int NKV, int HD, uint32_t g0, double p) {
    test_rng_state = 0x3a5c0000ull + (uint64_t)T;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    float* qkv = (float*)malloc(n_qkv * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (size_t c = 0; c < QKV; c++) {
                const size_t e = ((size_t)b * T + t) * QKV + c;
                const size_t v0 = (size_t)(NH + NKV) * HD;   /* the value heads */
                const int one_hot = (int)((c - v0) % HD) == t;
                const float x = c < v0 ? (float)(4.0 * test_uniform() - 2.0) : (one_hot ? 1.0f : 0.0f);
                bits[e] = sg_bf16_from_float(x);
                qkv[e] = sg_bf16_to_float(bits[e]);
            }
    float *o_tc = (float*)malloc(n_out * sizeof(float)), *o_cpu = (float*)malloc(n_out * sizeof(float));
    float* lse = (float*)malloc(n_lse * sizeof(float));
    uint16_t* d_qkv;
    float *d_out, *d_lse;
    SG_CHECK(cudaMalloc((void**)&d_qkv, n_qkv * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(float)));
    const Dropout drop = dropout_make(p);
    attention_forward_tc_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, g0, SEED, drop);
    SG_CHECK(cudaMemcpy(o_tc, d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
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
    snprintf(name, sizeof(name), "flash_tc_keep_bits_equal_cpu_hd%d_p%g", HD, p);
    expect(checked > 0 && nonfinite == 0 && vs_cpu == 0 && vs_philox == 0, name, "B %d T %d NH %d NKV %d g0 %u, "
           "one-hot v: %zu keep bits (%zu dropped, %.3f); %zu differ from the CPU's, %zu from philox_attn_draw; "
           "%zu non-finite", B, T, NH, NKV, (unsigned)g0, checked, dropped, checked ? (double)dropped / checked : 0.0,
           vs_cpu, vs_philox, nonfinite);
    SG_CHECK(cudaFree(d_qkv));
    SG_CHECK(cudaFree(d_out));
    SG_CHECK(cudaFree(d_lse));
    free(bits); free(qkv); free(o_tc); free(o_cpu); free(lse);
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* The tolerance of the backward, element by element, against flash_cpu.c's backward on the same
 * bf16 q, k, v, the same dout and the same o, LSE (the CPU forward's). The kernel rounds three
 * operands to bf16 before a product (8 significant bits, to nearest: relative error <= 2^-8 each):
 *   - the weights pd = m p scale in dV += Pd^T dO:  |err dv_jd| <= 2^-8 scale sum_i p_ij |do_id|;
 *   - ds = p (m scale dp - D) in dQ += dS K and dK += dS^T Q, with |ds_ij| <= a_ij where
 *     a_ij = p_ij (scale sum_d |do_id v_jd| + |D_i|):  |err dq_id| <= 2^-8 sigma sum_j a_ij |k_jd|,
 *     |err dk_jd| <= 2^-8 sigma sum_i a_ij |q_id| (over the group's query heads too);
 *   - dO in dP = dO V^T and dV: exact when dout holds bf16 values (the kernel tests); for any fp32
 *     dout (the wrapper tests) another 2^-8 on dp (|err| <= 2^-8 scale sum_d |do v| <= 2^-8 a / p)
 *     and on dv's products: the factor becomes 2^-7.
 * The 2^-10 covers the fp32 parts both share up to order: the scores (a relative error of p below
 * 2^-11 here, as in the forward's tolerance), expf, D_i, and the sums over T (T 2^-24 < 2^-16).
 * Every bound above sums magnitudes (no masks: m <= 1), computed in float64. */
#define BWD_TOL_EXACT_DO (0x1p-8 + 0x1p-10)
#define BWD_TOL_FP32_DO (0x1p-7 + 0x1p-10)


/* dqkv against ref, each element within factor * mag[e] */
static OErr grad_error(const float* g, const float* ref, const double* mag, size_t n, double factor) {
    OErr r = {0, 0, 0};
    for (size_t e = 0; e < n; e++) {
        if (!isfinite(g[e])) { r.nonfinite++; continue; }
        const double d = fabs((double)g[e] - (double)ref[e]);
        const double tol = factor * mag[e] + 1e-30;
        if (d > r.worst_abs) r.worst_abs = d;
        if (d / tol > r.worst_ratio) r.worst_ratio = d / tol;
    }
    return r;
}


/* The CPU's forward and backward on the host values qkv (already bf16 values), dout */
static void cpu_forward_backward(float* out, float* lse, float* dqkv, const float* qkv, const float* dout,
                                 const Shape* s, uint64_t seed, Dropout drop) {
    attention_forward(out, lse, qkv, s->B, s->T, s->NH, s->NKV, s->HD, s->g0, seed, drop);
    float* scratch = (float*)malloc(
        attention_backward_scratch_floats(s->B, s->T, s->NH, s->NKV, s->HD, cpu_threads()) * sizeof(float));
    attention_backward(dqkv, scratch, dout, qkv, out, lse, s->B, s->T, s->NH, s->NKV, s->HD, s->g0, seed, drop);
    free(scratch);
}

static void run_backward(const Shape* s, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    /* qkv and dout hold bf16 values: the kernel's only roundings are then those of P and dS */
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    float* qkv = (float*)malloc(n_qkv * sizeof(float));
    random_bf16_qkv(n_qkv, bits, qkv);
    float* dout = (float*)malloc(n_out * sizeof(float));
    for (size_t e = 0; e < n_out; e++) dout[e] = sg_bf16_round((float)(2.0 * test_uniform() - 1.0));
    float *out = (float*)malloc(n_out * sizeof(float)), *lse = (float*)malloc(n_lse * sizeof(float));
    float *g_cpu = (float*)malloc(n_qkv * sizeof(float)), *g_tc = (float*)malloc(n_qkv * sizeof(float));
    float* g_again = (float*)malloc(n_qkv * sizeof(float));
    double* mag = (double*)malloc(n_qkv * sizeof(double));

    const size_t n_scratch = attention_backward_tc_scratch_floats(B, T, NH, NKV, HD);
    uint16_t* d_qkv;
    float *d_dout, *d_out, *d_lse, *d_dqkv, *d_scratch;
    SG_CHECK(cudaMalloc((void**)&d_qkv, n_qkv * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_dout, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_dqkv, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_scratch, n_scratch * sizeof(float)));
    SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_dout, dout, n_out * sizeof(float), cudaMemcpyHostToDevice));

    const double ps[] = TEST_PS;
    char name[160], shape[96];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d g0 %u", B, T, NH, NKV, HD, (unsigned)s->g0);
    for (size_t pi = 0; pi < sizeof(ps) / sizeof(ps[0]); pi++) {
        const Dropout drop = dropout_make(ps[pi]);
        cpu_forward_backward(out, lse, g_cpu, qkv, dout, s, SEED, drop);
        backward_magnitudes(mag, qkv, dout, out, lse, B, T, NH, NKV, HD, drop.scale);
        SG_CHECK(cudaMemcpy(d_out, out, n_out * sizeof(float), cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemcpy(d_lse, lse, n_lse * sizeof(float), cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));   /* NaN: unwritten fails */
        SG_CHECK(cudaMemset(d_scratch, 0xff, n_scratch * sizeof(float)));
        attention_backward_tc_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                   drop);
        SG_CHECK(cudaMemcpy(g_tc, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));

        const OErr ge = grad_error(g_tc, g_cpu, mag, n_qkv, BWD_TOL_EXACT_DO);
        snprintf(name, sizeof(name), "flash_tc_backward_matches_cpu_hd%d_gqa%d_T%d_p%g", HD, NH / NKV, T, ps[pi]);
        expect(ge.nonfinite == 0 && ge.worst_ratio <= 1.0, name, "%s: dqkv worst |diff| %.3g = %.3f of the "
               "tolerance (2^-8 + 2^-10) x the sums of magnitudes; ||diff|| / ||dqkv|| %.3g; %zu non-finite", shape,
               ge.worst_abs, ge.worst_ratio, rel_err_ff(g_tc, g_cpu, n_qkv), ge.nonfinite);

        if (pi == 1) {   /* two runs, bit for bit (the scratch poisoned again in between) */
            SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
            SG_CHECK(cudaMemset(d_scratch, 0xff, n_scratch * sizeof(float)));
            attention_backward_tc_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0,
                                       SEED, drop);
            SG_CHECK(cudaMemcpy(g_again, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
            size_t differ = 0;
            for (size_t e = 0; e < n_qkv; e++) differ += memcmp(&g_tc[e], &g_again[e], sizeof(float)) != 0;
            snprintf(name, sizeof(name), "flash_tc_backward_deterministic_hd%d_gqa%d_T%d", HD, NH / NKV, T);
            expect(differ == 0, name, "%s, p %g: two runs, %zu of %zu elements of dqkv differ in any bit", shape,
                   ps[pi], differ, n_qkv);
        }
        if (ps[pi] == 0.5 && T >= 32) {
            /* control: the kernel with another seed must fail the same tolerance by far */
            attention_backward_tc_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0,
                                       SEED ^ 1, drop);
            SG_CHECK(cudaMemcpy(g_again, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
            const OErr we = grad_error(g_again, g_cpu, mag, n_qkv, BWD_TOL_EXACT_DO);
            snprintf(name, sizeof(name), "flash_tc_backward_other_seed_control_fails_hd%d_gqa%d", HD, NH / NKV);
            expect(we.worst_ratio > 10.0, name, "%s: the kernel with seed ^ 1 (p 0.5) against the CPU: worst |diff| "
                   "%.3g = %.1f x the tolerance (must be > 10x: the masks are compared)", shape, we.worst_abs,
                   we.worst_ratio);
        }
    }

    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_dout)); SG_CHECK(cudaFree(d_out));
    SG_CHECK(cudaFree(d_lse)); SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    free(bits); free(qkv); free(dout); free(out); free(lse); free(g_cpu); free(g_tc); free(g_again); free(mag);
}

/* ---- the fp32 interface ------------------------------------------------------------------------- */

/* count of elements whose bits differ */
static size_t bits_differ(const float* a, const float* b, size_t n) {
    size_t differ = 0;
    for (size_t e = 0; e < n; e++) differ += memcmp(&a[e], &b[e], sizeof(float)) != 0;
    return differ;
}

/* attention_forward_bf16_cuda / attention_backward_bf16_cuda on fp32 qkv and dout (not bf16
 * values):
 *   - bit for bit what the kernel they wrap gives on qkv rounded to bf16 on the host
 *     (sg_bf16_from_float, to nearest even): the tensor-core kernels for a head dim they take,
 *     attention_forward_cuda / attention_backward_cuda on the rounded values as fp32 otherwise;
 *   - against the CPU on the rounded values: the forward within the forward's tolerance, the
 *     backward within BWD_TOL_FP32_DO (dout is rounded inside the tensor-core backward);
 *   - the forward's bf16 copy is counted in the backend's peak memory. */
static void run_wrappers(const Shape* s, double p, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const int tc = attention_tc_supports_hd(HD);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    const Dropout drop = dropout_make(p);
    float *qkv = (float*)malloc(n_qkv * sizeof(float)), *qkv_r = (float*)malloc(n_qkv * sizeof(float));
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    for (size_t e = 0; e < n_qkv; e++) {
        qkv[e] = (float)(4.0 * test_uniform() - 2.0);
        bits[e] = sg_bf16_from_float(qkv[e]);
        qkv_r[e] = sg_bf16_to_float(bits[e]);
    }
    float* dout = (float*)malloc(n_out * sizeof(float));
    for (size_t e = 0; e < n_out; e++) dout[e] = (float)(2.0 * test_uniform() - 1.0);
    float *o_w = (float*)malloc(n_out * sizeof(float)), *o_k = (float*)malloc(n_out * sizeof(float));
    float *o_cpu = (float*)malloc(n_out * sizeof(float)), *l_cpu = (float*)malloc(n_lse * sizeof(float));
    float *l_w = (float*)malloc(n_lse * sizeof(float)), *l_k = (float*)malloc(n_lse * sizeof(float));
    float *g_w = (float*)malloc(n_qkv * sizeof(float)), *g_k = (float*)malloc(n_qkv * sizeof(float));
    float* g_cpu = (float*)malloc(n_qkv * sizeof(float));
    double* mag = (double*)malloc(n_qkv * sizeof(double));

    const size_t n_scratch = attention_backward_scratch_floats_bf16_cuda(B, T, NH, NKV, HD, 1);
    const size_t n_kscratch = tc ? attention_backward_tc_scratch_floats(B, T, NH, NKV, HD)
                                 : attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1);
    float *d_qkv, *d_qkv_r, *d_dout, *d_out, *d_lse, *d_dqkv, *d_scratch;
    uint16_t* d_bits;
    SG_CHECK(cudaMalloc((void**)&d_qkv, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_qkv_r, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_bits, n_qkv * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_dout, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_dqkv, n_qkv * sizeof(float)));
    /* one float more: the second backward run gets the scratch 4 bytes off a 16-byte boundary */
    SG_CHECK(cudaMalloc((void**)&d_scratch, ((n_scratch > n_kscratch ? n_scratch : n_kscratch) + 1) * sizeof(float)));
    SG_CHECK(cudaMemcpy(d_qkv, qkv, n_qkv * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_qkv_r, qkv_r, n_qkv * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_bits, bits, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_dout, dout, n_out * sizeof(float), cudaMemcpyHostToDevice));

    char name[160], shape[128];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d g0 %u p %g (%s)", B, T, NH, NKV, HD,
             (unsigned)s->g0, p, tc ? "tensor cores" : "fallback: fp32 kernels on bf16 values");

    /* forward: the wrapper, then the kernel on the host-rounded input */
    const size_t peak0 = device_peak_bytes_cuda();
    SG_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(float)));
    SG_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
    attention_forward_bf16_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    const size_t peak1 = device_peak_bytes_cuda();
    SG_CHECK(cudaMemcpy(o_w, d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(l_w, d_lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(float)));
    SG_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
    if (tc) attention_forward_tc_cuda(d_out, d_lse, d_bits, B, T, NH, NKV, HD, s->g0, SEED, drop);
    else attention_forward_cuda(d_out, d_lse, d_qkv_r, B, T, NH, NKV, HD, s->g0, SEED, drop);
    SG_CHECK(cudaMemcpy(o_k, d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(l_k, d_lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
    const size_t fo = bits_differ(o_w, o_k, n_out), fl = bits_differ(l_w, l_k, n_lse);
    snprintf(name, sizeof(name), "flash_bf16_forward_wrapper_is_kernel_on_rounded_qkv_hd%d", HD);
    expect(fo == 0 && fl == 0, name, "%s: %zu of %zu outputs and %zu of %zu LSEs differ in any bit", shape, fo, n_out,
           fl, n_lse);
    const size_t need = n_qkv * (tc ? sizeof(uint16_t) : sizeof(float));
    snprintf(name, sizeof(name), "flash_bf16_forward_copy_counted_in_peak_hd%d", HD);
    expect(peak1 >= need, name, "%s: device peak %zu bytes before, %zu after the forward (its copy of qkv: %zu)",
           shape, peak0, peak1, need);

    /* the CPU on the rounded values: o, LSE, dqkv */
    cpu_forward_backward(o_cpu, l_cpu, g_cpu, qkv_r, dout, s, SEED, drop);
    size_t lbad;
    const double le = lse_error(l_w, l_cpu, n_lse, &lbad);
    double* omag = (double*)calloc(n_out, sizeof(double));
    {
        /* sum_j p_ij |v_jd| from the CPU's LSE (the same for every p: the LSE is before dropout) */
        const double sigma = 1.0 / sqrt((double)HD);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++) {
                    const int kvh = h / (NH / NKV);
                    const float* q = qkv_r + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                    double* m = omag + ((size_t)b * T + i) * NH * HD + (size_t)h * HD;
                    for (int j = 0; j <= i; j++) {
                        const float* k = qkv_r + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HD;
                        const float* v = qkv_r + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                        double dot = 0;
                        for (int d = 0; d < HD; d++) dot += (double)q[d] * (double)k[d];
                        const double pij = exp(sigma * dot - l_cpu[((size_t)b * NH + h) * T + i]);
                        for (int d = 0; d < HD; d++) m[d] += pij * fabs((double)v[d]);
                    }
                }
    }
    const OErr oe = o_error(o_w, o_cpu, omag, n_out, drop.scale);
    snprintf(name, sizeof(name), "flash_bf16_forward_wrapper_matches_cpu_hd%d", HD);
    expect(lbad == 0 && le <= LSE_TOL && oe.nonfinite == 0 && oe.worst_ratio <= 1.0, name, "%s: LSE worst %.3g "
           "(tolerance %.0e); o worst |diff| %.3g = %.3f of the tolerance; %zu non-finite", shape, le, LSE_TOL,
           oe.worst_abs, oe.worst_ratio, lbad + oe.nonfinite);

    /* backward on the CPU's o and LSE: the wrapper twice, then the kernel on the rounded input */
    SG_CHECK(cudaMemcpy(d_out, o_cpu, n_out * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_lse, l_cpu, n_lse * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
    SG_CHECK(cudaMemset(d_scratch, 0xff, n_scratch * sizeof(float)));
    attention_backward_bf16_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                 drop);
    SG_CHECK(cudaMemcpy(g_w, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
    SG_CHECK(cudaMemset(d_scratch, 0xff, (n_scratch + 1) * sizeof(float)));
    attention_backward_bf16_cuda(d_dqkv, d_scratch + 1, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                 drop);
    SG_CHECK(cudaMemcpy(g_k, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
    const size_t fd = bits_differ(g_w, g_k, n_qkv);
    snprintf(name, sizeof(name), "flash_bf16_backward_wrapper_deterministic_hd%d", HD);
    expect(fd == 0, name, "%s: two runs (the second with the scratch 4 bytes off 16-byte alignment), %zu of %zu "
           "elements of dqkv differ in any bit", shape, fd, n_qkv);
    SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
    if (tc)
        attention_backward_tc_cuda(d_dqkv, d_scratch, d_dout, d_bits, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                   drop);
    else
        attention_backward_cuda(d_dqkv, d_scratch, d_dout, d_qkv_r, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                drop);
    SG_CHECK(cudaMemcpy(g_k, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
    const size_t fk = bits_differ(g_w, g_k, n_qkv);
    snprintf(name, sizeof(name), "flash_bf16_backward_wrapper_is_kernel_on_rounded_qkv_hd%d", HD);
    expect(fk == 0, name, "%s: %zu of %zu elements of dqkv differ in any bit", shape, fk, n_qkv);
    backward_magnitudes(mag, qkv_r, dout, o_cpu, l_cpu, B, T, NH, NKV, HD, drop.scale);
    const OErr ge = grad_error(g_w, g_cpu, mag, n_qkv, BWD_TOL_FP32_DO);
    snprintf(name, sizeof(name), "flash_bf16_backward_wrapper_matches_cpu_hd%d", HD);
    expect(ge.nonfinite == 0 && ge.worst_ratio <= 1.0, name, "%s: dqkv worst |diff| %.3g = %.3f of the tolerance "
           "(2^-7 + 2^-10) x the sums of magnitudes; ||diff|| / ||dqkv|| %.3g; %zu non-finite", shape, ge.worst_abs,
           ge.worst_ratio, rel_err_ff(g_w, g_cpu, n_qkv), ge.nonfinite);

    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_qkv_r)); SG_CHECK(cudaFree(d_bits)); SG_CHECK(cudaFree(d_dout));
    SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse)); SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    free(qkv); free(qkv_r); free(bits); free(dout); free(o_w); free(o_k); free(o_cpu); free(l_cpu); free(l_w);
    free(l_k); free(g_w); free(g_k); free(g_cpu); free(mag); free(omag);
}

/* Run as a child (`self --refuse-T WHICH`): T one past the grid's 65535 tiles of 64 in y. The
 * refusal comes before any pointer is touched or anything allocated, so NULL pointers are fine;
 * returning means it was not refused. */
/* ---- the CPU bf16 twin -------------------------------------------------------------------------- */

#define TWIN_FLIPS 0.01
#define TWIN_BWD_REL 0x1p-13

static void run_twin(const Shape* s, double p, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    random_bf16_qkv(n_qkv, bits, NULL);
    float* dout = (float*)malloc(n_out * sizeof(float));
    for (size_t e = 0; e < n_out; e++) dout[e] = (float)(2.0 * test_uniform() - 1.0);
    uint16_t* o16 = (uint16_t*)malloc(n_out * sizeof(uint16_t));
    float *o_tc = (float*)malloc(n_out * sizeof(float)), *o_vals = (float*)malloc(n_out * sizeof(float));
    float *l_tc = (float*)malloc(n_lse * sizeof(float)), *l_cpu = (float*)malloc(n_lse * sizeof(float));
    float *g_tc = (float*)malloc(n_qkv * sizeof(float)), *g_cpu = (float*)malloc(n_qkv * sizeof(float));
    const Dropout drop = dropout_make(p);
    char name[160], shape[96];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d p %g", B, T, NH, NKV, HD, p);

    attention_forward_bf16(o16, l_cpu, bits, B, T, NH, NKV, HD, s->g0, SEED, drop);
    float* scratch = (float*)malloc(
        attention_backward_scratch_floats_bf16(B, T, NH, NKV, HD, cpu_threads()) * sizeof(float));
    attention_backward_bf16(g_cpu, scratch, dout, bits, o16, l_cpu, B, T, NH, NKV, HD, s->g0, SEED, drop);
    free(scratch);
    for (size_t e = 0; e < n_out; e++) o_vals[e] = sg_bf16_to_float(o16[e]);

    const size_t n_scratch = attention_backward_tc_scratch_floats(B, T, NH, NKV, HD);
    uint16_t* d_qkv;
    float *d_out, *d_lse, *d_dout, *d_dqkv, *d_scratch;
    SG_CHECK(cudaMalloc((void**)&d_qkv, n_qkv * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_dout, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_dqkv, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_scratch, n_scratch * sizeof(float)));
    SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_dout, dout, n_out * sizeof(float), cudaMemcpyHostToDevice));
    attention_forward_tc_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    SG_CHECK(cudaMemcpy(o_tc, d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(l_tc, d_lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
    size_t flips = 0, far = 0, nonfinite = 0;
    for (size_t e = 0; e < n_out; e++) {
        const uint16_t a = sg_bf16_from_float(o_tc[e]), b = o16[e];
        if (!isfinite(o_tc[e])) { nonfinite++; continue; }
        if (a == b) continue;
        flips++;
        const int d = (int)(a & 0x7fff) - (int)(b & 0x7fff);
        if ((a ^ b) & 0x8000 ? (a & 0x7fff) + (b & 0x7fff) > 1 : (d > 1 || d < -1)) far++;
    }
    const double le = lse_error(l_tc, l_cpu, n_lse, &nonfinite);
    snprintf(name, sizeof(name), "flash_bf16_cpu_twin_forward_matches_tc_hd%d_p%g", HD, p);
    expect(nonfinite == 0 && far == 0 && flips <= TWIN_FLIPS * n_out && le <= LSE_TOL, name,
           "%s: the kernel's o rounded to bf16 differs from the twin's in %zu of %zu elements (at most "
           "%.0f%%), %zu by more than one bf16 step; LSE rel %.2e", shape, flips, n_out,
           100 * TWIN_FLIPS, far, le);

    /* the backward, the kernel given the twin's o (its bf16 values) and LSE */
    SG_CHECK(cudaMemcpy(d_out, o_vals, n_out * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_lse, l_cpu, n_lse * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
    attention_backward_tc_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                               drop);
    SG_CHECK(cudaMemcpy(g_tc, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
    const double ge = rel_err_ff(g_tc, g_cpu, n_qkv);
    snprintf(name, sizeof(name), "flash_bf16_cpu_twin_backward_matches_tc_hd%d_p%g", HD, p);
    expect(ge <= TWIN_BWD_REL, name, "%s: ||dqkv_tc - dqkv_twin|| / ||dqkv|| = %.2e (bound 2^-13 = %.2e)",
           shape, ge, TWIN_BWD_REL);

    /* The bf16 table's entries (qkv read where it lies, o stored in bf16): the forward is the
     * kernel above with its output rounded once (the same keep bits, the same LSE, bit for bit),
     * so against the twin it stands as the kernel does; the backward given the twin's bf16 o is the
     * kernel given the same o as fp32 values, bit for bit. */
    uint16_t *d_o16, *o16_act = (uint16_t*)malloc(n_out * sizeof(uint16_t));
    float *l_act = (float*)malloc(n_lse * sizeof(float)), *g_act = (float*)malloc(n_qkv * sizeof(float));
    SG_CHECK(cudaMalloc((void**)&d_o16, n_out * sizeof(uint16_t)));
    SG_CHECK(cudaMemset(d_o16, 0xff, n_out * sizeof(uint16_t)));   /* NaN: unwritten fails */
    SG_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
    attention_forward_bf16_act_cuda(d_o16, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
    SG_CHECK(cudaMemcpy(o16_act, d_o16, n_out * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(l_act, d_lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
    size_t rounded_differ = 0, act_flips = 0, act_far = 0;
    for (size_t e = 0; e < n_out; e++) {
        const uint16_t a = o16_act[e], b = o16[e];
        rounded_differ += a != sg_bf16_from_float(o_tc[e]);
        if (a == b) continue;
        act_flips++;
        const int d = (int)(a & 0x7fff) - (int)(b & 0x7fff);
        if ((a ^ b) & 0x8000 ? (a & 0x7fff) + (b & 0x7fff) > 1 : (d > 1 || d < -1)) act_far++;
    }
    const size_t lse_differ = bits_differ(l_act, l_tc, n_lse);
    snprintf(name, sizeof(name), "flash_bf16_act_forward_is_the_tc_kernel_rounded_once_hd%d_p%g", HD, p);
    expect(rounded_differ == 0 && lse_differ == 0, name, "%s: %zu of %zu bf16 outputs differ from the fp32-output "
           "kernel's rounded, %zu of %zu LSEs differ", shape, rounded_differ, n_out, lse_differ, n_lse);
    snprintf(name, sizeof(name), "flash_bf16_act_forward_matches_cpu_twin_hd%d_p%g", HD, p);
    expect(act_far == 0 && act_flips <= TWIN_FLIPS * n_out, name, "%s: the stored bf16 o differs from the twin's "
           "in %zu of %zu elements (at most %.0f%%), %zu by more than one bf16 step", shape, act_flips, n_out,
           100 * TWIN_FLIPS, act_far);
    SG_CHECK(cudaMemcpy(d_o16, o16, n_out * sizeof(uint16_t), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_lse, l_cpu, n_lse * sizeof(float), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
    attention_backward_bf16_act_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_o16, d_lse, B, T, NH, NKV, HD, s->g0,
                                     SEED, drop);
    SG_CHECK(cudaMemcpy(g_act, d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
    const size_t gd = bits_differ(g_act, g_tc, n_qkv);
    const double gae = rel_err_ff(g_act, g_cpu, n_qkv);
    snprintf(name, sizeof(name), "flash_bf16_act_backward_is_the_tc_kernel_on_the_bf16_o_hd%d_p%g", HD, p);
    expect(gd == 0, name, "%s: %zu of %zu elements of dqkv differ in any bit", shape, gd, n_qkv);
    snprintf(name, sizeof(name), "flash_bf16_act_backward_matches_cpu_twin_hd%d_p%g", HD, p);
    expect(gae <= TWIN_BWD_REL, name, "%s: ||dqkv - dqkv_twin|| / ||dqkv|| = %.2e (bound 2^-13 = %.2e)", shape, gae,
           TWIN_BWD_REL);
    SG_CHECK(cudaFree(d_o16));
    free(o16_act); free(l_act); free(g_act);

    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_dout));
    SG_CHECK(cudaFree(d_lse)); SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    free(bits); free(dout); free(o16); free(o_tc); free(o_vals); free(l_tc); free(l_cpu); free(g_tc); free(g_cpu);
}

/* The bf16 table's entries at a head dim the tensor cores do not take (24): the fp32 kernels on
 * the stored bf16 values widened, the forward's o rounded into the bf16 output. Bit for bit
 * attention_forward_cuda / attention_backward_cuda on the widened values, the forward's scratch
 * reserved beforehand (nothing grows), and the output within the wrappers' forward tolerance of
 * the CPU twin's in norm (the fp32 kernels do not round P: about 2^-9 of o). */
static void run_act_fallback(const Shape* s, double p, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    const Dropout drop = dropout_make(p);
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    float* vals = (float*)malloc(n_qkv * sizeof(float));
    random_bf16_qkv(n_qkv, bits, vals);
    float* dout = (float*)malloc(n_out * sizeof(float));
    for (size_t e = 0; e < n_out; e++) dout[e] = (float)(2.0 * test_uniform() - 1.0);
    uint16_t *o16 = (uint16_t*)malloc(n_out * 2), *o_twin = (uint16_t*)malloc(n_out * 2);
    float *o32 = (float*)malloc(n_out * 4), *o16v = (float*)malloc(n_out * 4), *otv = (float*)malloc(n_out * 4);
    float *l16 = (float*)malloc(n_lse * 4), *l32 = (float*)malloc(n_lse * 4), *lt = (float*)malloc(n_lse * 4);
    float *g16 = (float*)malloc(n_qkv * 4), *g32 = (float*)malloc(n_qkv * 4);
    uint16_t *d_bits, *d_o16;
    float *d_vals, *d_o32, *d_lse, *d_dout, *d_dqkv, *d_scratch;
    const size_t n_scratch = attention_backward_act_scratch_floats_bf16_cuda(B, T, NH, NKV, HD, 1);
    SG_CHECK(cudaMalloc((void**)&d_bits, n_qkv * 2));
    SG_CHECK(cudaMalloc((void**)&d_o16, n_out * 2));
    SG_CHECK(cudaMalloc((void**)&d_vals, n_qkv * 4));
    SG_CHECK(cudaMalloc((void**)&d_o32, n_out * 4));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * 4));
    SG_CHECK(cudaMalloc((void**)&d_dout, n_out * 4));
    SG_CHECK(cudaMalloc((void**)&d_dqkv, n_qkv * 4));
    SG_CHECK(cudaMalloc((void**)&d_scratch, n_scratch * 4));
    SG_CHECK(cudaMemcpy(d_bits, bits, n_qkv * 2, cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_vals, vals, n_qkv * 4, cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_dout, dout, n_out * 4, cudaMemcpyHostToDevice));
    char name[160], shape[96];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d p %g", B, T, NH, NKV, HD, p);

    attention_reserve_forward_act_scratch_bf16_cuda(B, T, NH, NKV, HD);
    const size_t live0 = device_live_bytes_cuda();
    attention_forward_bf16_act_cuda(d_o16, d_lse, d_bits, B, T, NH, NKV, HD, s->g0, SEED, drop);
    const size_t grown = device_live_bytes_cuda() - live0;
    SG_CHECK(cudaMemcpy(o16, d_o16, n_out * 2, cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(l16, d_lse, n_lse * 4, cudaMemcpyDeviceToHost));
    attention_forward_cuda(d_o32, d_lse, d_vals, B, T, NH, NKV, HD, s->g0, SEED, drop);
    SG_CHECK(cudaMemcpy(o32, d_o32, n_out * 4, cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(l32, d_lse, n_lse * 4, cudaMemcpyDeviceToHost));
    size_t od = 0;
    for (size_t e = 0; e < n_out; e++) od += o16[e] != sg_bf16_from_float(o32[e]);
    snprintf(name, sizeof(name), "flash_bf16_act_fallback_forward_is_the_fp32_kernel_rounded_hd%d", HD);
    expect(od == 0 && bits_differ(l16, l32, n_lse) == 0 && grown == 0, name, "%s: %zu of %zu outputs, %zu LSEs "
           "differ; device memory grew by %zu B past the reserved scratch", shape, od, n_out,
           bits_differ(l16, l32, n_lse), grown);
    attention_forward_bf16(o_twin, lt, bits, B, T, NH, NKV, HD, s->g0, SEED, drop);
    for (size_t e = 0; e < n_out; e++) { o16v[e] = sg_bf16_to_float(o16[e]); otv[e] = sg_bf16_to_float(o_twin[e]); }
    const double oe = rel_err_ff(o16v, otv, n_out);
    snprintf(name, sizeof(name), "flash_bf16_act_fallback_forward_near_cpu_twin_hd%d", HD);
    expect(oe <= 0x1p-7, name, "%s: ||o - o_twin|| / ||o|| %.2e (<= 2^-7: P unrounded against rounded)", shape, oe);

    /* the backward on the stored o: the fp32 kernel on the widened o and qkv */
    SG_CHECK(cudaMemcpy(d_lse, l16, n_lse * 4, cudaMemcpyHostToDevice));
    attention_backward_bf16_act_cuda(d_dqkv, d_scratch, d_dout, d_bits, d_o16, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                     drop);
    SG_CHECK(cudaMemcpy(g16, d_dqkv, n_qkv * 4, cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(d_o32, o16v, n_out * 4, cudaMemcpyHostToDevice));
    attention_backward_cuda(d_dqkv, d_scratch, d_dout, d_vals, d_o32, d_lse, B, T, NH, NKV, HD, s->g0, SEED, drop);
    SG_CHECK(cudaMemcpy(g32, d_dqkv, n_qkv * 4, cudaMemcpyDeviceToHost));
    snprintf(name, sizeof(name), "flash_bf16_act_fallback_backward_is_the_fp32_kernel_on_bf16_values_hd%d", HD);
    expect(bits_differ(g16, g32, n_qkv) == 0, name, "%s: %zu of %zu elements of dqkv differ", shape,
           bits_differ(g16, g32, n_qkv), n_qkv);
    SG_CHECK(cudaFree(d_bits)); SG_CHECK(cudaFree(d_o16)); SG_CHECK(cudaFree(d_vals)); SG_CHECK(cudaFree(d_o32));
    SG_CHECK(cudaFree(d_lse)); SG_CHECK(cudaFree(d_dout)); SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    free(bits); free(vals); free(dout); free(o16); free(o_twin); free(o32); free(o16v); free(otv); free(l16);
    free(l32); free(lt); free(g16); free(g32);
}

/* ---- the pipelined kernels against the baseline kernels ---------------------------------------
 * The entry points run the pipelined kernels (ldmatrix, cp.async, the causal compare only where
 * a tile crosses the diagonal, 128-query blocks); SEEDGPT_KERNELS=baseline runs the first
 * version. Same arithmetic, so the same bits: the forward's o (fp32, and the bf16 table's bf16 o)
 * and LSE, and the split backward's dqkv (SEEDGPT_ATTN_BACKWARD=split; fp32 dout, so the D pass's
 * rounding of dO is in play; the bf16 table's entry too, on a bf16 o), every output poisoned with
 * NaN before each launch. The shapes reach every path: blocks with and without rows past T, tiles
 * below the diagonal (the unmasked bodies), query blocks whose first warps skip the last key tile,
 * dK/dV's diagonal, middle and padded last tiles, grouped-query heads, each head dim's shape
 * (TcShape).
 * The fused backward (SEEDGPT_ATTN_BACKWARD=fused; unset: fused up to head dim 64, split at 128)
 * does dK/dV's arithmetic and sums dQ per key tile, then the
 * tiles in ascending order: its dK and dV are the split kernels' bit for bit, its dq within
 * FUSED_DQ_REL of theirs in norm (the fp32 sums grouped otherwise: about 2^-24 a term; a wrong
 * slice or a tile left out moves it by O(1)), equal to itself run again, and equal bit for bit
 * when the heads run in chunks (attention_tc_dq_chunking: one head a chunk, and three heads a
 * chunk: four heads end with a short one). */
#define FUSED_DQ_REL 0x1p-18

static void set_kernels(const char* which) {
    if (which) setenv("SEEDGPT_KERNELS", which, 1);
    else unsetenv("SEEDGPT_KERNELS");
}
static void set_backward(const char* which) {
    if (which) setenv("SEEDGPT_ATTN_BACKWARD", which, 1);
    else unsetenv("SEEDGPT_ATTN_BACKWARD");
}

/* dq's columns of dqkv against another's: (elements differing in any bit, ||a - b|| / ||b||) over
 * dq, and the elements of dk and dv differing in any bit */
typedef struct { size_t dq_bits, dkv_bits; double dq_rel; } DqkvDiff;
static DqkvDiff dqkv_diff(const float* a, const float* b, int B, int T, int NH, int NKV, int HD) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    DqkvDiff d = {0, 0, 0.0};
    double num = 0.0, den = 0.0;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (size_t c = 0; c < QKV; c++) {
            const float x = a[r * QKV + c], y = b[r * QKV + c];
            const int differ = memcmp(&x, &y, sizeof x) != 0;
            if (c < C) {
                d.dq_bits += differ;
                num += ((double)x - y) * ((double)x - y);
                den += (double)y * y;
            } else d.dkv_bits += differ;
        }
    d.dq_rel = den > 0 ? sqrt(num / den) : sqrt(num);
    return d;
}

static void run_new_vs_baseline(const Shape* s, double p, int act, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    const Dropout drop = dropout_make(p);
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    random_bf16_qkv(n_qkv, bits, NULL);
    float* dout = (float*)malloc(n_out * sizeof(float));
    for (size_t e = 0; e < n_out; e++) dout[e] = (float)(2.0 * test_uniform() - 1.0);   /* not bf16 values */
    const size_t n_scratch = attention_backward_tc_scratch_floats(B, T, NH, NKV, HD);
    uint16_t *d_qkv, *d_o16;
    float *d_out, *d_lse, *d_dout, *d_dqkv, *d_scratch;
    SG_CHECK(cudaMalloc((void**)&d_qkv, n_qkv * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_o16, n_out * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_dout, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_dqkv, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_scratch, n_scratch * sizeof(float)));
    SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(d_dout, dout, n_out * sizeof(float), cudaMemcpyHostToDevice));
    /* the sides: 0 baseline, 1 split, 2 fused, 3 fused again, 4 fused a head a chunk, 5 fused three
     * heads a chunk (the forward runs on sides 0 and 1 only: the backward switch leaves it alone) */
    enum { NSIDE = 6 };
#if defined(__SANITIZE_THREAD__)
    const int nside = 3;   /* races, not values: the runs again and in chunks are the same launches */
#else
    const int nside = HD == 64 ? NSIDE : 3;   /* the chunks' arithmetic is the head dim's: once is enough */
#endif
    float *o[2], *l[2], *g[NSIDE], *ga[NSIDE];
    uint16_t* o16[2];
    const char* kern[NSIDE] = {"baseline", NULL, NULL, NULL, NULL, NULL};
    const char* bwd[NSIDE] = {NULL, "split", "fused", "fused", "fused", "fused"};
    const size_t dflt = ATTENTION_TC_DQ_BUDGET;   /* one chunk at these shapes */
    const size_t budget[NSIDE] = {dflt, dflt, dflt, dflt, 0,   /* 0: one head a chunk */
                                  (size_t)3 * ((size_t)(T + 63) / 64) * ((T + 63) / 64 + 1) / 2 * 64 * HD};
    char kernels[NSIDE][16], ran[NSIDE][16];
    for (int k = 0; k < nside; k++) {
        g[k] = (float*)malloc(n_qkv * sizeof(float));
        ga[k] = (float*)malloc(n_qkv * sizeof(float));
        set_kernels(kern[k]);
        set_backward(bwd[k]);
        attention_tc_dq_chunking(budget[k], k < 4 ? ATTENTION_TC_DQ_MIN_BLOCKS : 0);
        snprintf(kernels[k], sizeof(kernels[k]), "%s", attention_tc_kernels());
        snprintf(ran[k], sizeof(ran[k]), "%s", attention_tc_backward_kernels(HD));
        if (k < 2) {
            o[k] = (float*)malloc(n_out * sizeof(float));
            l[k] = (float*)malloc(n_lse * sizeof(float));
            o16[k] = (uint16_t*)malloc(n_out * sizeof(uint16_t));
            SG_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(float)));   /* NaN: unwritten fails */
            SG_CHECK(cudaMemset(d_lse, 0xff, n_lse * sizeof(float)));
            attention_forward_tc_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
            SG_CHECK(cudaMemcpy(o[k], d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost));
            SG_CHECK(cudaMemcpy(l[k], d_lse, n_lse * sizeof(float), cudaMemcpyDeviceToHost));
            SG_CHECK(cudaMemset(d_o16, 0xff, n_out * sizeof(uint16_t)));
            if (act) attention_forward_bf16_act_cuda(d_o16, d_lse, d_qkv, B, T, NH, NKV, HD, s->g0, SEED, drop);
            SG_CHECK(cudaMemcpy(o16[k], d_o16, n_out * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        }
        /* the backward on the baseline forward's o and LSE, every time */
        SG_CHECK(cudaMemcpy(d_out, o[0], n_out * sizeof(float), cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemcpy(d_lse, l[0], n_lse * sizeof(float), cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemcpy(d_o16, o16[0], n_out * sizeof(uint16_t), cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
        SG_CHECK(cudaMemset(d_scratch, 0xff, n_scratch * sizeof(float)));
        attention_backward_tc_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, s->g0, SEED,
                                   drop);
        SG_CHECK(cudaMemcpy(g[k], d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
        SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv * sizeof(float)));
        SG_CHECK(cudaMemset(d_scratch, 0xff, n_scratch * sizeof(float)));
        if (act && k < 3)   /* the runs again and in chunks: the fp32-o entry is enough */
            attention_backward_bf16_act_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_o16, d_lse, B, T, NH, NKV, HD, s->g0,
                                             SEED, drop);
        SG_CHECK(cudaMemcpy(ga[k], d_dqkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
    }
    set_kernels(NULL);
    set_backward(NULL);
    attention_tc_dq_chunking(ATTENTION_TC_DQ_BUDGET, ATTENTION_TC_DQ_MIN_BLOCKS);
    char unset[16];   /* what runs with SEEDGPT_ATTN_BACKWARD unset: fused up to head dim 64 */
    snprintf(unset, sizeof(unset), "%s", attention_tc_backward_kernels(HD));
    size_t o16d = 0, nonfinite = 0, g_nonfinite = 0;
    for (size_t e = 0; e < n_out; e++) o16d += o16[0][e] != o16[1][e];
    for (size_t e = 0; e < n_out; e++) nonfinite += !isfinite(o[1][e]);
    for (int k = 1; k < nside; k++)
        for (size_t e = 0; e < n_qkv; e++) g_nonfinite += !isfinite(g[k][e]) + (act && k < 3 && !isfinite(ga[k][e]));
    char name[160], shape[112];
    snprintf(shape, sizeof(shape), "B %d T %d NH %d NKV %d HD %d g0 %u p %g", B, T, NH, NKV, HD, (unsigned)s->g0, p);
    snprintf(name, sizeof(name), "flash_tc_pipelined_forward_equals_baseline_bitwise_hd%d_T%d_gqa%d_p%g", HD, T,
             NH / NKV, p);
    expect(!strcmp(kernels[0], "baseline") && !strcmp(kernels[1], "new") && bits_differ(o[0], o[1], n_out) == 0 &&
           bits_differ(l[0], l[1], n_lse) == 0 && (!act || o16d == 0) && nonfinite == 0, name,
           "%s: kernels '%s' then '%s'; %zu of %zu o, %zu of %zu LSE, %zu of %zu bf16 o%s differ in any bit; %zu "
           "non-finite outputs of the pipelined kernels", shape, kernels[0], kernels[1],
           bits_differ(o[0], o[1], n_out), n_out, bits_differ(l[0], l[1], n_lse), n_lse, o16d, n_out,
           act ? "" : " (not run)", nonfinite);
    snprintf(name, sizeof(name), "flash_tc_pipelined_backward_equals_baseline_bitwise_hd%d_T%d_gqa%d_p%g", HD, T,
             NH / NKV, p);
    expect(!strcmp(ran[0], "baseline") && !strcmp(ran[1], "split") && bits_differ(g[0], g[1], n_qkv) == 0 &&
           (!act || bits_differ(ga[0], ga[1], n_qkv) == 0) && g_nonfinite == 0, name,
           "%s: backward '%s' then '%s'; %zu of %zu dqkv (fp32 o), %zu (the bf16 table's o%s) differ in any bit; "
           "%zu non-finite", shape, ran[0], ran[1], bits_differ(g[0], g[1], n_qkv), n_qkv,
           bits_differ(ga[0], ga[1], n_qkv), act ? "" : ": not run", g_nonfinite);
    const DqkvDiff none = {0, 0, 0.0};
    const DqkvDiff fs = dqkv_diff(g[2], g[1], B, T, NH, NKV, HD);
    const DqkvDiff fsa = act ? dqkv_diff(ga[2], ga[1], B, T, NH, NKV, HD) : none;
    snprintf(name, sizeof(name), "flash_tc_fused_backward_dkdv_bitwise_dq_near_split_hd%d_T%d_gqa%d_p%g", HD, T,
             NH / NKV, p);
    expect(!strcmp(ran[2], "fused") && fs.dkv_bits == 0 && fs.dq_rel <= FUSED_DQ_REL &&
           (!act || (fsa.dkv_bits == 0 && fsa.dq_rel <= FUSED_DQ_REL)) && g_nonfinite == 0, name,
           "%s: backward '%s' against the split one: %zu dk, dv differ in any bit; dq ||diff|| / ||dq|| %.2e (bound "
           "%.2e; %zu elements differ); the bf16 table's entry: %zu dk, dv differ, dq %.2e%s", shape, ran[2],
           fs.dkv_bits, fs.dq_rel, FUSED_DQ_REL, fs.dq_bits, fsa.dkv_bits, fsa.dq_rel, act ? "" : " (not run)");
    size_t again = 0, chunked = 0;
    for (int k = 3; k < nside; k++) {
        const size_t d = bits_differ(g[k], g[2], n_qkv);
        if (k == 3) again += d; else chunked += d;
    }
    snprintf(name, sizeof(name), "flash_tc_fused_backward_deterministic_and_chunked_bitwise_hd%d_T%d_gqa%d_p%g", HD,
             T, NH / NKV, p);
    if (nside == NSIDE) {
        expect(!strcmp(ran[3], "fused") && !strcmp(ran[4], "fused") && !strcmp(ran[5], "fused") && again == 0 &&
               chunked == 0 && !strcmp(unset, HD <= 64 ? "fused" : "split"), name, "%s: run again %zu elements "
               "differ; %d heads in chunks of 1 and of 3: %zu differ from the run in one chunk; "
               "SEEDGPT_ATTN_BACKWARD unset runs '%s' (want %s)", shape, again, B * NH, chunked, unset,
               HD <= 64 ? "fused" : "split");
    } else {
        snprintf(name, sizeof(name), "flash_tc_attn_backward_unset_runs_%s_hd%d", HD <= 64 ? "fused" : "split", HD);
        expect(!strcmp(unset, HD <= 64 ? "fused" : "split"), name, "SEEDGPT_ATTN_BACKWARD unset runs '%s'", unset);
    }
    for (int k = 0; k < 2; k++) { free(o[k]); free(l[k]); free(o16[k]); }
    for (int k = 0; k < nside; k++) { free(g[k]); free(ga[k]); }
    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_o16)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse));
    SG_CHECK(cudaFree(d_dout)); SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    free(bits); free(dout);
}

static int refuse_kernels_child(void) {
    setenv("SEEDGPT_KERNELS", "fastest", 1);
    const Dropout drop = dropout_make(0.0);
    uint16_t* d_qkv;
    float *d_out, *d_lse;
    SG_CHECK(cudaMalloc((void**)&d_qkv, 3 * 16 * sizeof(uint16_t)));
    SG_CHECK(cudaMalloc((void**)&d_out, 16 * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&d_lse, sizeof(float)));
    attention_forward_tc_cuda(d_out, d_lse, d_qkv, 1, 1, 1, 1, 16, 0, 1, drop);
    return 0;
}

static int refuse_backward_child(void) {
    setenv("SEEDGPT_ATTN_BACKWARD", "both", 1);
    (void)attention_tc_backward_kernels(64);
    return 0;
}

static int refuse_T_child(const char* which) {
    const Dropout drop = dropout_make(0.0);
    const int T = 65535 * 64 + 1;
    if (!strcmp(which, "forward_tc"))
        attention_forward_tc_cuda(NULL, NULL, NULL, 1, T, 2, 1, 64, 0, 1, drop);
    else if (!strcmp(which, "backward_tc"))
        attention_backward_tc_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, T, 2, 1, 64, 0, 1, drop);
    else if (!strcmp(which, "forward_bf16"))
        attention_forward_bf16_cuda(NULL, NULL, NULL, 1, T, 2, 1, 64, 0, 1, drop);
    else if (!strcmp(which, "backward_bf16"))
        attention_backward_bf16_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, T, 2, 1, 64, 0, 1, drop);
    else if (!strcmp(which, "forward_bf16_act"))
        attention_forward_bf16_act_cuda(NULL, NULL, NULL, 1, T, 2, 1, 64, 0, 1, drop);
    else if (!strcmp(which, "backward_bf16_act"))
        attention_backward_bf16_act_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, T, 2, 1, 64, 0, 1, drop);
    return 0;
}

static void test_refuses_T(const char* which) {
    char name[96];
    snprintf(name, sizeof(name), "%s_refuses_T_above_the_grid_limit", which);
    expect_refusal(name, "test_cuda_flash_tc", "--refuse-T", which, "T at most 4194240");
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "--refuse-T")) return refuse_T_child(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--refuse-kernels")) return refuse_kernels_child();
    if (argc == 3 && !strcmp(argv[1], "--refuse-backward")) return refuse_backward_child();
    set_kernels(NULL);   /* the pipelined kernels, whatever the caller's environment says */
    set_backward(NULL);  /* and the fused backward */
    test_refuses_T("forward_tc");
    test_refuses_T("backward_tc");
    test_refuses_T("forward_bf16");
    test_refuses_T("backward_bf16");
    test_refuses_T("forward_bf16_act");
    test_refuses_T("backward_bf16_act");

    expect_refusal("seedgpt_kernels_refuses_an_unknown_value", "test_cuda_flash_tc", "--refuse-kernels", "x",
                   "SEEDGPT_KERNELS=fastest");
    expect_refusal("seedgpt_attn_backward_refuses_an_unknown_value", "test_cuda_flash_tc", "--refuse-backward", "x",
                   "SEEDGPT_ATTN_BACKWARD=both: expected fused or split");

    /* the pipelined kernels bit for bit the baseline ones (the CPU comparisons below run the
     * pipelined ones) */
    const Shape nvb[] = {
        {2, 100, 2, 2, 64, 7},    /* B > 1, MHA (dK, dV straight into dqkv), one block of rows past T; two key
                                   * tiles (under ThreadSanitizer the fused backward reuses its dS^T); four
                                   * heads: the fused backward's chunks of three end short */
        {1, 260, 1, 1, 64, 3},    /* BQ 128: a padded block (256..), one with 2 clean tiles, dK/dV middle tiles */
        {1, 140, 2, 1, 128, 0},   /* BQ 64 at HD 128: a clean tile, padded last block, a dK/dV middle tile */
        {1, 200, 2, 1, 32, 1},    /* the HD 32 shape (Q, dO fragments held), dQ with BQ 128 */
    };
    /* the first shape also at p 0.5 and through the bf16 table's entries; under ThreadSanitizer
     * (races, not values) the first shape only */
    for (size_t i = 0; i < sizeof(nvb) / sizeof(nvb[0]); i++) {
#if defined(__SANITIZE_THREAD__)
        if (i != 0) continue;
#endif
        run_new_vs_baseline(&nvb[i], 0.1, i == 0, 0x9e0b0000ull + i);
        if (i == 0) run_new_vs_baseline(&nvb[i], 0.5, 1, 0x9e0b1000ull + i);
    }

    const Shape shapes[] = {
        {1, 133, 4, 2, 64, 7},    /* GPT-2's head size, two query heads per kv head, odd T, g0 != 0 */
        {1, 197, 2, 1, 128, 0},   /* the largest head size, both query heads on one kv head */
        {1, 40, 2, 1, 16, 1},     /* the smallest head size the tensor cores take (one k-step) */
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) run_shape(&shapes[i], 0x7c0a5000ull + i);
    run_mask(2, 127, 4, 2, 128, 3, 0.5);   /* keys up to 126: two key tiles, four Philox blocks */
    run_mask(1, 61, 2, 1, 64, 0, 0.1);

    const Shape bwd[] = {
        {2, 70, 2, 1, 16, 9},    /* the smallest head dim, two query heads on one kv head, two tiles, B > 1 */
        {2, 1, 2, 2, 32, 5},     /* T = 1: one key, one tile of padding, B > 1 with g0 != 0 */
        {1, 67, 2, 2, 64, 3},    /* every kv head its own query head: dK, dV straight into dqkv */
        {1, 45, 4, 2, 128, 0},   /* the largest head dim, grouped heads, one tile */
    };
    for (size_t i = 0; i < sizeof(bwd) / sizeof(bwd[0]); i++) run_backward(&bwd[i], 0xb0c0a000ull + i);

    const Shape wrap_tc = {1, 37, 2, 1, 32, 2}, wrap_fallback = {1, 37, 2, 1, 24, 2};
    run_wrappers(&wrap_tc, 0.1, 0x3a9f0001ull);
    run_wrappers(&wrap_fallback, 0.1, 0x3a9f0002ull);

    const Shape twin[] = {{2, 70, 4, 2, 16, 5}, {1, 67, 2, 2, 64, 3}};
    run_twin(&twin[0], 0.2, 0x7e1a0001ull);
    run_twin(&twin[1], 0.0, 0x7e1a0002ull);
    const Shape act_fallback = {1, 37, 2, 1, 24, 2};
    run_act_fallback(&act_fallback, 0.1, 0x7e1a0003ull);
    return test_finish();
}
