/* tests/ref_attention.c — the float64 naive attention (see tests/ref_attention.h).
 *
 * Per head, sigma = 1/sqrt(HD), causal j <= i, keep bit m_ij, scale = drop.scale:
 *   s_ij = sigma q_i.k_j;  lse_i = log sum_j exp(s_ij);  p_ij = exp(s_ij - lse_i)
 *   o_i = sum_j m_ij p_ij scale v_j
 * and its backward, written from the chain rule one row at a time. Every name is prefixed
 * ref_attention_ because every tests/ref_*.c is linked into every test binary.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/ref_attention.h"

int ref_attention_keep(uint64_t seed, uint32_t g, uint32_t h, uint32_t i, uint32_t j, Dropout drop) {
    if (drop.thr == 0) return 1;
    return philox_attn_draw(seed, g, h, i, j) >= drop.thr;
}

/* Row i of head h in sequence b: p[j] = p_ij and w[j] = m_ij p_ij scale for j <= i; returns lse_i. */
static double ref_attention_row(double* p, double* w, const double* qkv, int b, int T, int NH,
                                int NKV, int HD, int h, int i, uint32_t g0, uint64_t seed,
                                Dropout drop) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const int kvh = h / (NH / NKV);
    const double sigma = 1.0 / sqrt((double)HD);
    const double* q = qkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
    double mx = -INFINITY;
    for (int j = 0; j <= i; j++) {
        const double* k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HD;
        double s = 0;
        for (int d = 0; d < HD; d++) s += q[d] * k[d];
        p[j] = sigma * s;
        if (p[j] > mx) mx = p[j];
    }
    double sum = 0;
    for (int j = 0; j <= i; j++) sum += exp(p[j] - mx);
    const double lse = mx + log(sum);
    for (int j = 0; j <= i; j++) {
        p[j] = exp(p[j] - lse);
        int keep = ref_attention_keep(seed, g0 + (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j, drop);
        w[j] = keep ? p[j] * (double)drop.scale : 0.0;
    }
    return lse;
}

void ref_attention_forward(double* out, double* lse, const double* qkv,
                           int B, int T, int NH, int NKV, int HD,
                           uint32_t g0, uint64_t seed, Dropout drop) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const int kvh_of = NH / NKV;
    double* p = malloc(sizeof(double) * (size_t)T);
    double* w = malloc(sizeof(double) * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                lse[((size_t)b * NH + h) * T + i] =
                    ref_attention_row(p, w, qkv, b, T, NH, NKV, HD, h, i, g0, seed, drop);
                double* o = out + ((size_t)b * T + i) * C + (size_t)h * HD;
                for (int d = 0; d < HD; d++) o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    const double* v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + h / kvh_of) * HD;
                    for (int d = 0; d < HD; d++) o[d] += w[j] * v[d];
                }
            }
    free(p);
    free(w);
}

void ref_attention_backward(double* dqkv, const double* dout, const double* qkv,
                            int B, int T, int NH, int NKV, int HD,
                            uint32_t g0, uint64_t seed, Dropout drop) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const int kvh_of = NH / NKV;
    const double sigma = 1.0 / sqrt((double)HD);
    double* p = malloc(sizeof(double) * (size_t)T);
    double* w = malloc(sizeof(double) * (size_t)T);
    double* o = malloc(sizeof(double) * (size_t)HD);
    memset(dqkv, 0, sizeof(double) * (size_t)B * T * QKV);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / kvh_of;
            for (int i = 0; i < T; i++) {
                ref_attention_row(p, w, qkv, b, T, NH, NKV, HD, h, i, g0, seed, drop);
                const double* q = qkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                const double* dO = dout + ((size_t)b * T + i) * C + (size_t)h * HD;
                double* dq = dqkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                /* the forward's o_i (after dropout), then D_i = do_i . o_i */
                for (int d = 0; d < HD; d++) o[d] = 0;
                for (int j = 0; j <= i; j++) {
                    const double* v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                    for (int d = 0; d < HD; d++) o[d] += w[j] * v[d];
                }
                double D = 0;
                for (int d = 0; d < HD; d++) D += dO[d] * o[d];
                for (int j = 0; j <= i; j++) {
                    const size_t row = ((size_t)b * T + j) * QKV;
                    const double* k = qkv + row + (size_t)(NH + kvh) * HD;
                    const double* v = qkv + row + (size_t)(NH + NKV + kvh) * HD;
                    double* dk = dqkv + row + (size_t)(NH + kvh) * HD;
                    double* dv = dqkv + row + (size_t)(NH + NKV + kvh) * HD;
                    /* o_i = sum_j w_ij v_j, w_ij = m_ij p_ij scale: dv_j += w_ij do_i, and
                     * dL/dp_ij = m_ij scale do_i.v_j; softmax: ds_ij = p_ij (dp_ij - D_i) */
                    double do_v = 0;
                    for (int d = 0; d < HD; d++) do_v += dO[d] * v[d];
                    const int keep = ref_attention_keep(seed, g0 + (uint32_t)b, (uint32_t)h, (uint32_t)i,
                                                        (uint32_t)j, drop);
                    const double dpij = keep ? (double)drop.scale * do_v : 0.0;
                    const double ds = p[j] * (dpij - D);
                    for (int d = 0; d < HD; d++) {
                        dv[d] += w[j] * dO[d];
                        dq[d] += sigma * ds * k[d];
                        dk[d] += sigma * ds * q[d];
                    }
                }
            }
        }
    free(p);
    free(w);
    free(o);
}
