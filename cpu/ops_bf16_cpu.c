/* cpu/ops_bf16_cpu.c — the CPU ops of --precision bf16 whose operands or outputs are bf16
 * activations (cpu/ops_bf16_cpu.h); the products through gemm_bf16 (cpu/gemm_bf16_cpu.c). The
 * arithmetic is cpu/ops_cpu.c's in fp32 on the bf16 values read; a bf16 output is rounded once,
 * to nearest even (util/bf16.h's conversion, CUDA's __float2bfloat16_rn). The determinism of
 * cpu/ops_cpu.c carries over: per-row work split over rows, column sums over fixed blocks.
 */
#include <math.h>
#include <string.h>
#include "cpu/ops_bf16_cpu.h"
#include "model/backend.h"
#include "cpu/gemm_cpu.h"
#include "model/ops.h"
#include "util/bf16.h"
#include "util/vexp.h"
#include "model/adamw.h"
#include "cpu/ln_rows.h"

#define COL_BLOCK 64

void round_to_bf16_cpu(void* dst, const float* src, size_t n) {
    uint16_t* d = dst;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = sg_bf16_from_float(src[i]);
}

void adamw_update_bf16(float* params, void* params_act, const float* grads, float grad_scale,
                       float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t);   /* as adamw_update (cpu/ops_cpu.c) */
    float bc2 = 1.0f - powf(beta2, (float)t);
    uint16_t* pa = params_act;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        adamw_element(&params[i], grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                      weight_decay, bc1, bc2);
        pa[i] = sg_bf16_from_float(params[i]);
    }
}

void layernorm_forward_bf16(void* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
    uint16_t* ob = out;
    #pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 16) {   /* as layernorm_forward: 16 rows' statistics at once */
        const int rows = N - n0 < 16 ? N - n0 : 16;
        ln_stats_rows(inp, n0, rows, C, mean, rstd);
        for (int n = n0; n < n0 + rows; n++) {
            const float* x = inp + (size_t)n * C;
            const float m = mean[n], s = rstd[n];
            uint16_t* o = ob + (size_t)n * C;
            for (int c = 0; c < C; c++) o[c] = sg_bf16_from_float((s * (x[c] - m)) * weight[c] + bias[c]);
        }
    }
}

void matmul_forward_bf16(void* out, int out_dtype, const void* inp, const void* weight,
                         const float* bias, int N, int C, int OC) {
    /* out (N,OC) = inp (N,C) . weight (OC,C)^T: B's element (k, j) is weight[j*C + k] */
    if (out_dtype == DT_BF16) {
        gemm_bf16_ex(N, OC, C, inp, 0, C, 1, weight, 1, C, 0, NULL, OC, out, bias);
        return;
    }
    float* o32 = out;
    gemm_bf16(N, OC, C, inp, C, 1, weight, 1, C, 0, o32, OC);
    if (bias != NULL) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float* o = o32 + (size_t)n * OC;
            for (int k = 0; k < OC; k++) o[k] += bias[k];
        }
    }
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const void* inp, const void* weight, int N, int C, int OC) {
    /* in the forward, out = inp . weight^T + bias, so:
     * dinp (N,C) = dout (N,OC) . weight (OC,C); dweight (OC,C) += dout^T . inp; dbias += colsum.
     * dout is the fp32 gradient; the products take it rounded to bf16 as they pack it */
    if (dinp != NULL) gemm_bf16_ex(N, C, OC, dout, 1, OC, 1, weight, C, 1, 0, dinp, C, NULL, NULL);
    gemm_bf16_ex(OC, C, N, dout, 1, 1, OC, inp, C, 1, 1, dweight, C, NULL, NULL);
    if (dbias != NULL) {
        int nblocks = (OC + COL_BLOCK - 1) / COL_BLOCK;
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblocks; blk++) {
            int k0 = blk * COL_BLOCK, k1 = k0 + COL_BLOCK < OC ? k0 + COL_BLOCK : OC;
            float acc[COL_BLOCK];
            for (int k = 0; k < k1 - k0; k++) acc[k] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float* d = dout + (size_t)n * OC;
                for (int k = k0; k < k1; k++) acc[k - k0] += d[k];
            }
            for (int k = k0; k < k1; k++) dbias[k] += acc[k - k0];
        }
    }
}

/* GELU (tanh approximation), as cpu/ops_cpu.c computes it */
#define GELU_SCALING_FACTOR 0.7978845608028654f  /* sqrt(2 / pi) */
static inline float gelu_tanh(float u) { return 1.0f - 2.0f / (1.0f + vexpf(2.0f * u)); }

void gelu_forward_bf16(void* out, const void* inp, size_t n) {
    uint16_t* o = out;
    const uint16_t* in = inp;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = sg_bf16_to_float(in[i]);
        float cube = 0.044715f * x * x * x;
        o[i] = sg_bf16_from_float(0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube))));
    }
}

void gelu_backward_bf16(float* dinp, const void* inp, const float* dout, size_t n) {
    const uint16_t* in = inp;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = sg_bf16_to_float(in[i]);
        float cube = 0.044715f * x * x * x;
        float th = gelu_tanh(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th)
                    + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

void rope_forward_bf16(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                       int NKV, int HD, int layout, int pos0) {
    int H2 = HD / 2, heads = NH + NKV;   /* the q heads, then the k heads: contiguous */
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    uint16_t* q = qkv;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float* cs = cos + (size_t)(pos0 + t) * H2;
        const float* sn = sin + (size_t)(pos0 + t) * H2;
        uint16_t* row = q + (size_t)bt * QKV;
        for (int h = 0; h < heads; h++) {
            uint16_t* x = row + (size_t)h * HD;
            for (int d = 0; d < H2; d++) {
                int i0 = layout == ROPE_GPTJ ? 2 * d : d;
                int i1 = layout == ROPE_GPTJ ? 2 * d + 1 : d + H2;
                float c = cs[d], s = sn[d];
                float x0 = sg_bf16_to_float(x[i0]), x1 = sg_bf16_to_float(x[i1]);
                x[i0] = sg_bf16_from_float(x0 * c - x1 * s);
                x[i1] = sg_bf16_from_float(x0 * s + x1 * c);
            }
        }
    }
}
