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
 * Shapes: head dims 64 and 128, grouped-query heads, T not a multiple of the 64 tile, B > 1 with
 * g0 != 0 (the keep-bit check). Outputs are poisoned with NaN before each launch, so an unwritten
 * element fails.
 * Builds two ways: nvcc (make test-cuda) and C++ against the emulation (make test-cuda-emu).
 */
#include "attention/device.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "attention/attention.h"
#include "attention/bf16.h"
#include "attention/flash_tc.h"
#include "tests/test.h"

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

static void run_shape(const Shape* s, uint64_t data_seed) {
    test_rng_state = data_seed;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HD = s->HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, n_qkv = (size_t)B * T * QKV;
    const size_t n_out = (size_t)B * T * NH * HD, n_lse = (size_t)B * NH * T;
    /* random qkv rounded to bf16: the bits for the device, their exact values for the CPU */
    uint16_t* bits = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
    float* qkv = (float*)malloc(n_qkv * sizeof(float));
    for (size_t e = 0; e < n_qkv; e++) {
        bits[e] = sg_bf16_from_float((float)(4.0 * test_uniform() - 2.0));
        qkv[e] = sg_bf16_to_float(bits[e]);
    }
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

    const double ps[] = {0.0, 0.1, 0.5};
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

int main(void) {
    const Shape shapes[] = {
        {1, 133, 4, 2, 64, 7},    /* GPT-2's head size, two query heads per kv head, odd T, g0 != 0 */
        {1, 197, 2, 1, 128, 0},   /* the largest head size, both query heads on one kv head */
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) run_shape(&shapes[i], 0x7c0a5000ull + i);
    run_mask(2, 127, 4, 2, 128, 3, 0.5);   /* keys up to 126: two key tiles, four Philox blocks */
    run_mask(1, 61, 2, 1, 64, 0, 0.1);
    return test_finish();
}
