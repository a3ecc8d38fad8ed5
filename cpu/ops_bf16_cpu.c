/* cpu/ops_bf16_cpu.c — the CPU ops of --precision bf16 and fp16 whose operands or outputs are
 * 16-bit activations (cpu/ops_bf16_cpu.h). The arithmetic is cpu/ops_cpu.c's in fp32 on the
 * 16-bit values read; a 16-bit output is rounded once, to nearest even (util/bf16.h's or
 * util/fp16.h's conversion: CUDA's __float2bfloat16_rn, __float2half_rn). The determinism of
 * cpu/ops_cpu.c carries over: per-row work split over rows, column sums over fixed blocks.
 *
 * One source, two tables: compiled as it is, the bf16 ops (names ending _bf16, the products
 * through gemm_bf16, cpu/gemm_bf16_cpu.c); compiled with OPS16_FP16 (cpu/ops_fp16_cpu.c), the
 * fp16 ops (names ending _fp16). Only the conversions and the products differ: an fp16 product
 * widens its fp16 operands to fp32 (exact) and runs gemm_f32 (cpu/gemm_cpu.c); the product of
 * two fp16 values is exact in fp32 (11 + 11 significant bits), so each element is one chain of
 * fp32 FMAs over exact products, fp32 accumulation as on a tensor core.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/ops_bf16_cpu.h"
#include "model/backend.h"
#include "cpu/gemm_cpu.h"
#include "model/ops.h"
#include "util/bf16.h"
#include "util/fp16.h"
#include <stdio.h>
#include "util/vexp.h"
#include "model/adamw.h"
#include "cpu/ln_rows.h"

#ifdef OPS16_FP16
#define ACT_FROM(x) sg_fp16_from_float(x)
#define ACT_TO(x) sg_fp16_to_float(x)
#define OPS16(n) n##_fp16
#define DT_ACT DT_FP16
#define ROUND_TO_ACT round_to_fp16_cpu
#else
#define ACT_FROM(x) sg_bf16_from_float(x)
#define ACT_TO(x) sg_bf16_to_float(x)
#define OPS16(n) n##_bf16
#define DT_ACT DT_BF16
#define ROUND_TO_ACT round_to_bf16_cpu
#endif

#define COL_BLOCK 64

void ROUND_TO_ACT(void* dst, const float* src, size_t n) {
    uint16_t* d = dst;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = ACT_FROM(src[i]);
}

void OPS16(adamw_update)(float* params, void* params_act, const float* grads, float grad_scale,
                       float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t);   /* as adamw_update (cpu/ops_cpu.c) */
    float bc2 = 1.0f - powf(beta2, (float)t);
    uint16_t* pa = params_act;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        adamw_element(&params[i], grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                      weight_decay, bc1, bc2);
        pa[i] = ACT_FROM(params[i]);
    }
}

void OPS16(layernorm_forward)(void* out, float* mean, float* rstd, const float* inp,
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
            for (int c = 0; c < C; c++) o[c] = ACT_FROM((s * (x[c] - m)) * weight[c] + bias[c]);
        }
    }
}

#ifdef OPS16_FP16
/* The fp16 products' operands as fp32: each in its own grow-only buffer (kept, as gemm_f32 keeps
 * its packing buffer: plain malloc, no memory counter sees it) */
enum { OPND_A, OPND_B, OPND_C, OPND_SLOTS };
static float* opnd_buf[OPND_SLOTS];
static size_t opnd_cap[OPND_SLOTS];
static float* opnd(int slot, size_t n) {
    if (n > opnd_cap[slot]) {
        free(opnd_buf[slot]);
        opnd_buf[slot] = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
        if (opnd_buf[slot] == NULL) {
            fprintf(stderr, "matmul_fp16: out of memory for %zu bytes of operands\n", n * sizeof(float));
            exit(1);
        }
        opnd_cap[slot] = n;
    }
    return opnd_buf[slot];
}
/* n fp16 values widened (exact) */
static const float* widened(int slot, const void* src, size_t n) {
    float* d = opnd(slot, n);
    const uint16_t* h = src;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = ACT_TO(h[i]);
    return d;
}
/* n fp32 values rounded to fp16 (a gradient's operand; it stays fp32 in memory) */
static const float* rounded(int slot, const float* src, size_t n) {
    float* d = opnd(slot, n);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] = sg_fp16_round(src[i]);
    return d;
}
#endif

void OPS16(matmul_forward)(void* out, int out_dtype, const void* inp, const void* weight,
                           const float* bias, int N, int C, int OC) {
    /* out (N,OC) = inp (N,C) . weight (OC,C)^T: B's element (k, j) is weight[j*C + k] */
#ifdef OPS16_FP16
    const float* a = widened(OPND_A, inp, (size_t)N * C);
    const float* w = widened(OPND_B, weight, (size_t)OC * C);
    float* o32 = out_dtype == DT_ACT ? opnd(OPND_C, (size_t)N * OC) : out;
    gemm_f32(N, OC, C, a, C, 1, w, 1, C, 0, o32, OC);
    if (out_dtype == DT_ACT) {   /* the bias added, then one rounding */
        uint16_t* ob = out;
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int k = 0; k < OC; k++) {
                size_t i = (size_t)n * OC + k;
                ob[i] = ACT_FROM(bias != NULL ? o32[i] + bias[k] : o32[i]);
            }
        return;
    }
#else
    if (out_dtype == DT_ACT) {
        gemm_bf16_ex(N, OC, C, inp, 0, C, 1, weight, 1, C, 0, NULL, OC, out, bias);
        return;
    }
    float* o32 = out;
    gemm_bf16(N, OC, C, inp, C, 1, weight, 1, C, 0, o32, OC);
#endif
    if (bias != NULL) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float* o = o32 + (size_t)n * OC;
            for (int k = 0; k < OC; k++) o[k] += bias[k];
        }
    }
}

void OPS16(matmul_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                            const void* inp, const void* weight, int N, int C, int OC) {
    /* in the forward, out = inp . weight^T + bias, so:
     * dinp (N,C) = dout (N,OC) . weight (OC,C); dweight (OC,C) += dout^T . inp; dbias += colsum.
     * dout is the fp32 gradient; the products take it rounded to the 16-bit type */
#ifdef OPS16_FP16
    const float* d = rounded(OPND_C, dout, (size_t)N * OC);
    if (dinp != NULL) {
        const float* w = widened(OPND_B, weight, (size_t)OC * C);
        gemm_f32(N, C, OC, d, OC, 1, w, C, 1, 0, dinp, C);
    }
    const float* a = widened(OPND_A, inp, (size_t)N * C);
    gemm_f32(OC, C, N, d, 1, OC, a, C, 1, 1, dweight, C);
#else
    if (dinp != NULL) gemm_bf16_ex(N, C, OC, dout, 1, OC, 1, weight, C, 1, 0, dinp, C, NULL, NULL);
    gemm_bf16_ex(OC, C, N, dout, 1, 1, OC, inp, C, 1, 1, dweight, C, NULL, NULL);
#endif
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

void OPS16(gelu_forward)(void* out, const void* inp, size_t n) {
    uint16_t* o = out;
    const uint16_t* in = inp;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = ACT_TO(in[i]);
        float cube = 0.044715f * x * x * x;
        o[i] = ACT_FROM(0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube))));
    }
}

void OPS16(gelu_backward)(float* dinp, const void* inp, const float* dout, size_t n) {
    const uint16_t* in = inp;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = ACT_TO(in[i]);
        float cube = 0.044715f * x * x * x;
        float th = gelu_tanh(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th)
                    + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

void OPS16(rope_forward)(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
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
                float x0 = ACT_TO(x[i0]), x1 = ACT_TO(x[i1]);
                x[i0] = ACT_FROM(x0 * c - x1 * s);
                x[i1] = ACT_FROM(x0 * s + x1 * c);
            }
        }
    }
}
