/* attention/flash_tc.cu — the forward of the fused causal attention (DESIGN §5) on tensor cores:
 * q, k, v in bf16, both products (Q K^T and P V) through sg_mma_m16n8k16_bf16_f32 with fp32
 * accumulators, the online softmax in fp32 registers, dropout on the probabilities inside the
 * kernel with the keep bits of attention/philox.h (DESIGN §3), bit-identical to flash_cpu.c's.
 * Not used by the trainer yet (attention/flash_tc.h); tests/cuda/test_cuda_flash_tc.cu holds it
 * to attention/flash_cpu.c run on the same bf16 values. Uses only what attention/device.h names,
 * so it also builds as C++ against the emulation (make test-cuda-emu).
 *
 * Per head (sigma = 1/sqrt(HD), causal j <= i, keep bit m_ij, scale = 1/(1-p)):
 *   s_ij = sigma q_i.k_j    LSE_i = log sum_j exp(s_ij)    p_ij = exp(s_ij - LSE_i)
 *   o_i  = sum_j (m_ij p_ij scale) v_j
 * Outputs: o in fp32 (B, T, NH*HD), LSE in fp32 (B, NH, T), as attention_forward writes them.
 *
 * Tiling. A block of 4 warps takes 64 queries of one (sequence, query head); warp w owns query
 * rows 16 w .. 16 w + 15 of the tile and walks the key tiles of 64 from the left. Q, K and V tiles
 * sit in shared memory as bf16 bits, row-major with a row stride of HD + 8 (rows 4 banks apart, so
 * the 8 rows a fragment load touches hit distinct banks), zero past T.
 *
 * The accumulator fragment (attention/mma.h): with g = lane / 4 and t = lane % 4, lane holds of
 * each 16 x 8 tile c0, c1 at (row g, columns 2t, 2t+1) and c2, c3 at (row g + 8, the same
 * columns). So of the warp's 16 x 64 score tile (8 fragments nf = 0..7, key j0 + 8 nf + 2t + e) a
 * lane holds two query rows, g and g + 8, and 16 keys of each; a row is spread over the 4 lanes of
 * one group, so its max and sum are two xor-shuffles (1, 2).
 *
 * Keep bits: for key j = j0 + 8 nf + 2t + e, j & 7 = 2t + e and (j >> 3) & 3 = nf & 3 (j0 is a
 * multiple of 32). So one philox_attn_draw4 call, counter (i, (jblock32 << 3) | (2t + e), h, g),
 * gives the lane exactly the four keys of fragments nf = 4 blk .. 4 blk + 3 in one column e:
 * 2 rows x 2 blocks of 32 x 2 columns = 8 calls for the lane's 32 scores of a tile.
 *
 * P V. The probabilities p = exp(s - m_running) are summed in fp32 (the LSE is before dropout),
 * then the dropped ones set to 0, and the rest rounded to bf16 for the product: this is the one
 * rounding the tensor-core forward adds to flash_cpu.c's (8 significant bits, to nearest: a
 * relative error of at most 2^-8 per weight, while the normaliser l_i keeps the unrounded fp32
 * sum; the test derives its tolerance from it). The score accumulator is already the A
 * fragment of P V: the A registers of keys 16 kk .. 16 kk + 15 are the c0 c1 / c2 c3 pairs of
 * score fragments 2 kk and 2 kk + 1, so P never leaves the registers. o_i = acc * scale / l_i.
 *
 * Determinism: no atomics; each output element is one lane's fp32 chain over the key tiles in
 * ascending order.
 */
#include "attention/device.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include "attention/mma.h"
#include "attention/flash_tc.h"

#define TC_BQ 64          /* queries per block: 16 per warp */
#define TC_BK 64          /* keys per tile (a multiple of 32: whole Philox blocks) */
#define TC_THREADS 128    /* 4 warps */
#define TC_FULL 0xffffffffu

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

/* two consecutive bf16 of a shared memory row as one fragment register (lower index low) */
__device__ __forceinline__ uint32_t tc_pair(const uint16_t* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 16;
}

/* dst (TC_BQ or TC_BK rows, HD + 8) = n_valid rows of HD bf16 at src (row stride `stride`), zero
 * past n_valid; consecutive threads take consecutive elements of a row. */
template <int HD>
__device__ __forceinline__ void tc_load_tile(uint16_t* dst, const uint16_t* src, size_t stride, int n_valid) {
    for (int e = threadIdx.x; e < 64 * HD; e += TC_THREADS) {
        const int r = e / HD, d = e % HD;
        dst[r * (HD + 8) + d] = r < n_valid ? src[(size_t)r * stride + d] : (uint16_t)0;
    }
}

/* Block (b * NH + h, query tile): the last query tiles (the longest rows) get the first indices. */
template <int HD>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_forward_kernel(float* out, float* lse, const uint16_t* qkv,
                                                                       int T, int NH, int NKV, uint32_t g0,
                                                                       uint64_t seed, uint32_t thr, float scale,
                                                                       float sigma) {
    SG_DYN_SHARED(uint16_t, smem);
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, NKT = TC_BK / 8;
    uint16_t* Qs = smem;              /* (BQ, LD) queries */
    uint16_t* Ks = Qs + TC_BQ * LD;   /* (BK, LD) keys */
    uint16_t* Vs = Ks + TC_BK * LD;   /* (BK, LD) values */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int i0 = (gridDim.y - 1 - blockIdx.y) * TC_BQ, nq = min(TC_BQ, T - i0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const uint16_t* qkv_b = qkv + (size_t)b * T * QKV;
    const uint32_t g = g0 + (uint32_t)b;
    const int r0 = 16 * warp + gq;                 /* the lane's rows of the tile: r0, r0 + 8 */
    const int row_i[2] = {i0 + r0, i0 + r0 + 8};   /* their query positions */

    tc_load_tile<HD>(Qs, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq);

    float o[NDT][4];   /* o fragments: dims 8 nd + 2t + e of rows r0 (e), r0 + 8 (2 + e) */
    #pragma unroll
    for (int nd = 0; nd < NDT; nd++)
        #pragma unroll
        for (int c = 0; c < 4; c++) o[nd][c] = 0.0f;
    /* -FLT_MAX, not -inf: padding rows see no key and must rescale by exp(0) = 1 */
    float mrun[2] = {-FLT_MAX, -FLT_MAX}, lrun[2] = {0.0f, 0.0f};

    for (int j0 = 0; j0 < i0 + nq; j0 += TC_BK) {
        const int nk = min(TC_BK, T - j0);
        __syncthreads();   /* the last tile's products are done with Ks, Vs */
        tc_load_tile<HD>(Ks, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, nk);
        tc_load_tile<HD>(Vs, qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, nk);
        __syncthreads();

        /* S = Q K^T: fragment nf holds keys j0 + 8 nf .. + 7; each element sums d ascending */
        float s[NKT][4];
        #pragma unroll
        for (int nf = 0; nf < NKT; nf++)
            #pragma unroll
            for (int c = 0; c < 4; c++) s[nf][c] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            const uint16_t* qa = Qs + r0 * LD + 16 * ks + 2 * tq;
            const uint32_t a[4] = {tc_pair(qa), tc_pair(qa + 8 * LD), tc_pair(qa + 8), tc_pair(qa + 8 * LD + 8)};
            #pragma unroll
            for (int nf = 0; nf < NKT; nf++) {
                /* B = K^T: column n is key 8 nf + n, rows d */
                const uint16_t* kb = Ks + (8 * nf + gq) * LD + 16 * ks + 2 * tq;
                const uint32_t bb[2] = {tc_pair(kb), tc_pair(kb + 8)};
                sg_mma_m16n8k16_bf16_f32(s[nf], a, bb, s[nf]);
            }
        }

        /* the online softmax of the lane's two rows; dropout after the sums */
        float corr[2];
        #pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int i = row_i[rr];
            float mx = -INFINITY;
            #pragma unroll
            for (int nf = 0; nf < NKT; nf++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = j0 + 8 * nf + 2 * tq + e;
                    const float v = (j <= i && i < T) ? s[nf][2 * rr + e] * sigma : -INFINITY;
                    s[nf][2 * rr + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(TC_FULL, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(TC_FULL, mx, 2));
            const float mnew = fmaxf(mrun[rr], mx);
            corr[rr] = expf(mrun[rr] - mnew);
            float tsum = 0.0f;
            #pragma unroll
            for (int nf = 0; nf < NKT; nf++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float w = expf(s[nf][2 * rr + e] - mnew);
                    s[nf][2 * rr + e] = w;
                    tsum += w;
                }
            tsum += __shfl_xor_sync(TC_FULL, tsum, 1);
            tsum += __shfl_xor_sync(TC_FULL, tsum, 2);
            lrun[rr] = lrun[rr] * corr[rr] + tsum;
            mrun[rr] = mnew;
            if (thr != 0 && i < T)
                #pragma unroll
                for (int blk = 0; blk < TC_BK / 32; blk++) {
                    if (j0 + 32 * blk > i) continue;   /* no key of this block is seen */
                    #pragma unroll
                    for (int e = 0; e < 2; e++) {
                        uint32_t draw[4];   /* keys j0 + 32 blk + 8 w + 2t + e, w = 0..3 */
                        philox_attn_draw4(seed, g, (uint32_t)h, (uint32_t)i, (uint32_t)((j0 >> 5) + blk),
                                          (uint32_t)(2 * tq + e), draw);
                        #pragma unroll
                        for (int w = 0; w < 4; w++)
                            if (draw[w] < thr) s[4 * blk + w][2 * rr + e] = 0.0f;
                    }
                }
        }

        /* o = o corr + P V, P rounded to bf16; keys in ascending order of 16 */
        #pragma unroll
        for (int nd = 0; nd < NDT; nd++)
            #pragma unroll
            for (int c = 0; c < 4; c++) o[nd][c] *= corr[c >> 1];
        #pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            const uint32_t pa[4] = {
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk][0]), __float2bfloat16_rn(s[2 * kk][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk][2]), __float2bfloat16_rn(s[2 * kk][3])),
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk + 1][0]), __float2bfloat16_rn(s[2 * kk + 1][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk + 1][2]), __float2bfloat16_rn(s[2 * kk + 1][3]))};
            const uint16_t* vb = Vs + (16 * kk + 2 * tq) * LD + gq;   /* B = V: rows keys, column dim */
            #pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                const uint16_t* v = vb + 8 * nd;
                const uint32_t bb[2] = {(uint32_t)v[0] | (uint32_t)v[LD] << 16,
                                        (uint32_t)v[8 * LD] | (uint32_t)v[9 * LD] << 16};
                sg_mma_m16n8k16_bf16_f32(o[nd], pa, bb, o[nd]);
            }
        }
    }

    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = row_i[rr];
        if (i >= T) continue;
        const float rs = scale / lrun[rr];
        float* orow = out + ((size_t)b * T + i) * C + (size_t)h * HD;
        #pragma unroll
        for (int nd = 0; nd < NDT; nd++)
            #pragma unroll
            for (int e = 0; e < 2; e++) orow[8 * nd + 2 * tq + e] = o[nd][2 * rr + e] * rs;
        if (tq == 0) lse[((size_t)b * NH + h) * T + i] = mrun[rr] + logf(lrun[rr]);
    }
}

template <int HD>
static void flash_tc_launch(float* out, float* lse, const uint16_t* qkv, int B, int T, int NH, int NKV,
                            uint32_t g0, uint64_t seed, Dropout drop) {
    const size_t smem = (size_t)(TC_BQ + 2 * TC_BK) * (HD + 8) * sizeof(uint16_t);
    if (smem > 48 * 1024)
        SG_CHECK(cudaFuncSetAttribute(flash_tc_forward_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
    const float sigma = 1.0f / sqrtf((float)HD);
    dim3 grid((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BQ));
    SG_LAUNCH(flash_tc_forward_kernel<HD>, grid, dim3(TC_THREADS), smem, out, lse, qkv, T, NH, NKV, g0, seed,
              drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_forward_tc_cuda(float* out, float* lse, const uint16_t* qkv_bf16,
                                          int B, int T, int NH, int NKV, int HD,
                                          uint32_t g0, uint64_t attn_seed, Dropout drop) {
    if (HD != 64 && HD != 128) {
        fprintf(stderr, "seedgpt: attention_forward_tc_cuda: head dim %d not supported (64 or 128)\n", HD);
        exit(1);
    }
    if (NH < 1 || NKV < 1 || NH % NKV != 0) {
        fprintf(stderr, "seedgpt: attention_forward_tc_cuda: n_kv_head %d must divide n_head %d\n", NKV, NH);
        exit(1);
    }
    if (B <= 0 || T <= 0) return;
    if (HD == 64)
        flash_tc_launch<64>(out, lse, qkv_bf16, B, T, NH, NKV, g0, attn_seed, drop);
    else
        flash_tc_launch<128>(out, lse, qkv_bf16, B, T, NH, NKV, g0, attn_seed, drop);
}
