/* attention/flash_tc.cu — the fused causal attention (DESIGN §5) on tensor cores, forward and
 * backward: q, k, v in bf16, every product through sg_mma_m16n8k16_bf16_f32 with fp32
 * accumulators, the softmax in fp32 registers, dropout on the probabilities inside the kernels
 * with the keep bits of random/philox.h (DESIGN §3), bit-identical to flash_cpu.c's. The
 * fp32-interface wrappers at the end (attention/flash_tc.h) are drop-ins for flash_cuda.cu's
 * attention_forward_cuda / attention_backward_cuda: the trainer's bf16 precision.
 * tests/cuda/test_cuda_flash_tc.cu holds it to attention/flash_cpu.c run on the same bf16 values.
 * Uses only what cuda/device.h names, so it also builds as C++ against the emulation (make
 * test-cuda-emu).
 *
 * Per head (sigma = 1/sqrt(HD), causal j <= i, keep bit m_ij, scale = 1/(1-p)):
 *   s_ij = sigma q_i.k_j    LSE_i = log sum_j exp(s_ij)    p_ij = exp(s_ij - LSE_i)
 *   o_i  = sum_j (m_ij p_ij scale) v_j
 *   dv_j = sum_i (m p scale)_ij do_i     dp_ij = m_ij scale do_i.v_j     ds_ij = p_ij (dp_ij - D_i)
 *   dq_i = sigma sum_j ds_ij k_j          dk_j  = sigma sum_i ds_ij q_i   D_i = do_i.o_i
 * Outputs: o (B, T, NH*HD) in fp32, or in bf16 for the bf16 table (rounded once), LSE in fp32
 * (B, NH, T), dqkv in fp32 (B, T, (NH+2NKV) HD), as attention_forward / attention_backward write
 * them. Head dims 16, 32, 64, 128 (k-steps of 16).
 *
 * Tiling (forward). A block of 4 warps takes 64 queries of one (sequence, query head); warp w owns query
 * rows 16 w .. 16 w + 15 of the tile and walks the key tiles of 64 from the left. Q, K and V tiles
 * sit in shared memory as bf16 bits, row-major with a row stride of HD + 8 (rows 4 banks apart for
 * HD 64 and 128, 12 and 20 for HD 16 and 32: either way the 8 rows a fragment load touches hit
 * distinct banks), zero past T.
 *
 * The accumulator fragment (cuda/mma.h): with g = lane / 4 and t = lane % 4, lane holds of
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
 * Backward: the passes of flash_cuda.cu. Pass 0, D_i = do_i.o_i in fp32 (one warp a row). Pass 1,
 * dK and dV: a block takes 64 keys of one (sequence, query head), warp w key rows 16 w .. + 15,
 * and walks the query tiles from the diagonal down; S^T = K Q^T and dP^T = V dO^T come out in the
 * accumulator layout with the keys as rows, so m p scale and ds, rounded to bf16, are the A
 * fragments of dV += Pd^T dO and dK += dS^T Q as P is in the forward. Pass 2, dQ: a block takes
 * 64 queries, warp w query rows 16 w .. + 15, walking the key tiles as the forward does:
 * S = Q K^T, dP = dO V^T, then dQ += dS K. dO (fp32 in) is rounded to bf16 as it is loaded, for
 * the products only; D_i, p and ds are fp32 until ds becomes an mma operand. With grouped-query
 * heads pass 1 leaves a partial sum per query head and a small kernel adds a group's partials
 * in ascending head order, as in flash_cuda.cu. Roundings the backward adds to flash_cpu.c's:
 * m p scale, ds and dO to bf16 (each at most 2^-8 relative; the test derives its tolerance).
 *
 * Keep bits in the backward: the lanes of pass 1 hold key rows and query columns, two keys a
 * lane, so a philox_attn_draw4 call (four keys of one query) would serve half its words. Both
 * passes instead build the tile's 64 x 64 mask once in shared memory: thread x takes query row
 * x / 2 and the block of 32 keys x % 2, eight draw4 calls (jlow3 = 0..7) fill one 32-bit word,
 * bit j & 31 (tc_keep_words); the lanes read their bits from there. The same counters as the
 * forward's and the CPU's, one call per four keep bits.
 *
 * Convergence: mma.sync.aligned is undefined unless all 32 lanes of the warp execute it together.
 * Each tile's first products (S, dP) come straight after a __syncthreads, with no branch between;
 * the second ones (P V, dV and dK, dQ) come after element-wise code that branches on each lane's
 * own rows and keys, so a __syncwarp() makes the warp meet before them (one WARPSYNC per tile).
 *
 * Determinism: no atomics; each output element is one lane's fp32 chain: o and dq over the key
 * tiles in ascending order, dk and dv over the query tiles in ascending order, then over the
 * group's query heads in ascending order. Two runs give the same bits; a GPU's mma adds its 16
 * products in an order of its own, so the bits differ from the emulation's within
 * sg_mma_tolerance (cuda/mma.h), never in a keep bit.
 */
#include "cuda/device.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include "cuda/mma.h"
#include "cuda/act.h"
#include "attention/attention_cuda.h"
#include "attention/flash_tc.h"
#include "cuda/device_memory.h"   /* device_alloc_cuda, device_free_cuda: the counted allocator */

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

/* Sixteen bytes (eight bf16) moved as one access. */
struct alignas(16) TcU4 {
    uint32_t x, y, z, w;
};

/* dst (TC_BQ or TC_BK rows, HD + 8) = n_valid rows of HD bf16 at src (row stride `stride`), zero
 * past n_valid, eight bf16 a thread as one 16-byte load and store; consecutive threads take
 * consecutive pieces of a row. Aligned: qkv starts on 16 bytes (the host checks it), and HD, the
 * row stride (NH + 2 NKV) HD, the head offsets and the tile stride HD + 8 are multiples of 8. */
template <int HD>
__device__ __forceinline__ void tc_load_tile(uint16_t* dst, const uint16_t* src, size_t stride, int n_valid) {
    constexpr int V = HD / 8;   /* 16-byte pieces a row */
    for (int e = threadIdx.x; e < 64 * V; e += TC_THREADS) {
        const int r = e / V, c = e % V;
        TcU4 v = {0u, 0u, 0u, 0u};
        if (r < n_valid) v = *reinterpret_cast<const TcU4*>(src + (size_t)r * stride + 8 * c);
        *reinterpret_cast<TcU4*>(dst + r * (HD + 8) + 8 * c) = v;
    }
}

/* Block (b * NH + h, query tile): the last query tiles (the longest rows) get the first indices.
 * o is written as OutT (cuda/act.h): fp32, or bf16 rounded once (the bf16 table's activation). */
template <int HD, typename OutT>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_forward_kernel(OutT* out, float* lse, const uint16_t* qkv,
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
        /* mma.sync.aligned needs all 32 lanes converged, and the softmax above branched on each
         * lane's own rows and keys (rows past T, blocks above the diagonal, dropped keys): the
         * warp meets here rather than trusting the compiler to have reconverged it */
        __syncwarp();
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
        OutT* orow = out + ((size_t)b * T + i) * C + (size_t)h * HD;
        #pragma unroll
        for (int nd = 0; nd < NDT; nd++)
            #pragma unroll
            for (int e = 0; e < 2; e++) act_store(orow, 8 * nd + 2 * tq + e, o[nd][2 * rr + e] * rs);
        if (tq == 0) lse[((size_t)b * NH + h) * T + i] = mrun[rr] + logf(lrun[rr]);
    }
}

/* ---- backward -------------------------------------------------------------------------------- */

/* dst (64 rows, HD + 8) = n_valid rows of HD fp32 at src (row stride `stride`) rounded to bf16
 * (to nearest even), zero past n_valid: dO as the products' operand. */
template <int HD>
__device__ __forceinline__ void tc_load_tile_f32(uint16_t* dst, const float* src, size_t stride, int n_valid) {
    for (int e = threadIdx.x; e < 64 * HD; e += TC_THREADS) {
        const int r = e / HD, d = e % HD;
        dst[r * (HD + 8) + d] =
            r < n_valid ? __bfloat16_as_ushort(__float2bfloat16_rn(src[(size_t)r * stride + d])) : (uint16_t)0;
    }
}

/* The keep bits of the 64 x 64 tile of queries i0 + r against keys j0 + c (j0 a multiple of 32),
 * into Mw[2 r + (c >> 5)] bit c & 31: thread x takes query row r = x / 2 and the block of 32 keys
 * x % 2, eight philox_attn_draw4 calls (jlow3 = l: word w is key 32 blk + 8 w + l), one whole
 * word. Rows past T and blocks wholly above the diagonal are skipped (no p reaches them). */
__device__ __forceinline__ void tc_keep_words(uint32_t* Mw, uint64_t seed, uint32_t g, uint32_t h, int i0, int j0,
                                              int T, uint32_t thr) {
    const int r = threadIdx.x >> 1, blk = threadIdx.x & 1, i = i0 + r;
    uint32_t word = 0xffffffffu;
    if (i < T && j0 + 32 * blk <= i) {
        word = 0;
        for (int l = 0; l < 8; l++) {
            uint32_t draw[4];
            philox_attn_draw4(seed, g, h, (uint32_t)i, (uint32_t)((j0 >> 5) + blk), (uint32_t)l, draw);
            for (int w = 0; w < 4; w++)
                if (draw[w] >= thr) word |= 1u << (8 * w + l);
        }
    }
    Mw[2 * r + blk] = word;
}

/* m_ij scale for query i0 + r, key j0 + c of the tile whose keep words are Mw */
__device__ __forceinline__ float tc_keep_scale(const uint32_t* Mw, int r, int c, uint32_t thr, float scale) {
    if (thr == 0) return scale;
    return (Mw[2 * r + (c >> 5)] >> (c & 31)) & 1u ? scale : 0.0f;
}

/* Pass 0, D_i = do_i . o_i in fp32, and the grouped-query sums of the dK/dV partials are the fp32
 * backward's own (attention_backward_dot_cuda, attention_group_sum_cuda in flash_cuda.cu). */

/* Pass 1: dK, dV of one query head's 64 keys. Block (b * NH + h, key tile), the first key tiles
 * (the longest columns) first; warp w owns key rows 16 w .. 16 w + 15 of the tile and walks the
 * query tiles from the diagonal down. Per query tile, in the accumulator layout (a lane holds key
 * rows r0, r0 + 8 and queries 8 nf + 2t + e):
 *   S^T = K Q^T and dP^T = V dO^T (dO rounded to bf16), p_ij = exp(sigma s_ij - LSE_i) (0 where
 *   the query does not see the key), then the weight the forward applied, pd = m p scale, and
 *   ds = p (m scale dp - D_i); both rounded to bf16 are the A fragments of
 *   dV += Pd^T dO  and  dK += dS^T Q  (B from the dO and Q tiles, queries as the k index).
 * Writes (dk k_scale, dv) of its keys to row b * T + j of dk_out, dv_out (row stride out_stride,
 * head column h * HD): straight into dqkv (k_scale = sigma) when each kv head has one query head,
 * else into per-query-head partial sums that attention_group_sum_cuda adds up. */
template <int HD>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_dkdv_kernel(float* dk_out, float* dv_out, size_t out_stride,
                                                                    float k_scale, const float* dout,
                                                                    const uint16_t* qkv, const float* lse,
                                                                    const float* D, int T, int NH, int NKV,
                                                                    uint32_t g0, uint64_t seed, uint32_t thr,
                                                                    float scale, float sigma) {
    SG_DYN_SHARED(uint16_t, smem);
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, NQT = TC_BQ / 8;
    uint16_t* Ks = smem;                  /* (BK, LD) keys */
    uint16_t* Vs = Ks + TC_BK * LD;       /* (BK, LD) values */
    uint16_t* Qs = Vs + TC_BK * LD;       /* (BQ, LD) queries */
    uint16_t* dOs = Qs + TC_BQ * LD;      /* (BQ, LD) do, rounded to bf16 */
    float* Ls = reinterpret_cast<float*>(dOs + TC_BQ * LD);   /* (BQ) LSE of the tile's queries */
    float* Ds = Ls + TC_BQ;                                   /* (BQ) D of the tile's queries */
    uint32_t* Mw = reinterpret_cast<uint32_t*>(Ds + TC_BQ);   /* (BQ, 2) keep words */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int j0 = blockIdx.y * TC_BK, nk = min(TC_BK, T - j0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const uint16_t* qkv_b = qkv + (size_t)b * T * QKV;
    const uint32_t g = g0 + (uint32_t)b;
    const int r0 = 16 * warp + gq;                 /* the lane's key rows of the tile: r0, r0 + 8 */
    const int col_j[2] = {j0 + r0, j0 + r0 + 8};   /* their key positions */

    tc_load_tile<HD>(Ks, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, nk);
    tc_load_tile<HD>(Vs, qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, nk);

    float dk[NDT][4], dv[NDT][4];   /* dims 8 nd + 2t + e of key rows r0 (e), r0 + 8 (2 + e) */
    #pragma unroll
    for (int nd = 0; nd < NDT; nd++)
        #pragma unroll
        for (int c = 0; c < 4; c++) dk[nd][c] = dv[nd][c] = 0.0f;

    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* D_bh = D + ((size_t)b * NH + h) * T;
    for (int i0 = j0; i0 < T; i0 += TC_BQ) {   /* BQ = BK: queries before j0 see no key here */
        const int nq = min(TC_BQ, T - i0);
        __syncthreads();   /* the last tile's products are done with Qs, dOs, Ls, Ds, Mw */
        tc_load_tile<HD>(Qs, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq);
        tc_load_tile_f32<HD>(dOs, dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, nq);
        if (threadIdx.x < TC_BQ) {
            const int i = i0 + threadIdx.x;
            Ls[threadIdx.x] = i < T ? lse_bh[i] : 0.0f;
            Ds[threadIdx.x] = i < T ? D_bh[i] : 0.0f;
        }
        if (thr != 0) tc_keep_words(Mw, seed, g, (uint32_t)h, i0, j0, T, thr);
        __syncthreads();

        /* S^T = K Q^T and dP^T = V dO^T: fragment nf holds queries i0 + 8 nf .. + 7, d ascending */
        float s[NQT][4], dp[NQT][4];
        #pragma unroll
        for (int nf = 0; nf < NQT; nf++)
            #pragma unroll
            for (int c = 0; c < 4; c++) s[nf][c] = dp[nf][c] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            const uint16_t* ka = Ks + r0 * LD + 16 * ks + 2 * tq;
            const uint16_t* va = Vs + r0 * LD + 16 * ks + 2 * tq;
            const uint32_t ak[4] = {tc_pair(ka), tc_pair(ka + 8 * LD), tc_pair(ka + 8), tc_pair(ka + 8 * LD + 8)};
            const uint32_t av[4] = {tc_pair(va), tc_pair(va + 8 * LD), tc_pair(va + 8), tc_pair(va + 8 * LD + 8)};
            #pragma unroll
            for (int nf = 0; nf < NQT; nf++) {
                /* B = Q^T (dO^T): column n is query 8 nf + n, rows d */
                const uint16_t* qb = Qs + (8 * nf + gq) * LD + 16 * ks + 2 * tq;
                const uint16_t* ob = dOs + (8 * nf + gq) * LD + 16 * ks + 2 * tq;
                const uint32_t bq[2] = {tc_pair(qb), tc_pair(qb + 8)};
                const uint32_t bo[2] = {tc_pair(ob), tc_pair(ob + 8)};
                sg_mma_m16n8k16_bf16_f32(s[nf], ak, bq, s[nf]);
                sg_mma_m16n8k16_bf16_f32(dp[nf], av, bo, dp[nf]);
            }
        }

        /* the softmax backward, element by element: s <- m p scale, dp <- ds */
        #pragma unroll
        for (int nf = 0; nf < NQT; nf++)
            #pragma unroll
            for (int c = 0; c < 4; c++) {
                const int ci = 8 * nf + 2 * tq + (c & 1), i = i0 + ci, j = col_j[c >> 1];
                const float p = (j <= i && i < T) ? expf(s[nf][c] * sigma - Ls[ci]) : 0.0f;
                const float ms = tc_keep_scale(Mw, ci, j - j0, thr, scale);
                s[nf][c] = p * ms;
                dp[nf][c] = p * (dp[nf][c] * ms - Ds[ci]);
            }

        /* dV += Pd^T dO, dK += dS^T Q, both rounded to bf16; queries in ascending order of 16.
         * The warp meets first: the loop above branched on each lane's own queries and keys, and
         * mma.sync.aligned needs all 32 lanes converged. */
        __syncwarp();
        #pragma unroll
        for (int kk = 0; kk < TC_BQ / 16; kk++) {
            const uint32_t pa[4] = {
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk][0]), __float2bfloat16_rn(s[2 * kk][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk][2]), __float2bfloat16_rn(s[2 * kk][3])),
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk + 1][0]), __float2bfloat16_rn(s[2 * kk + 1][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk + 1][2]), __float2bfloat16_rn(s[2 * kk + 1][3]))};
            const uint32_t da[4] = {
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk][0]), __float2bfloat16_rn(dp[2 * kk][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk][2]), __float2bfloat16_rn(dp[2 * kk][3])),
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk + 1][0]), __float2bfloat16_rn(dp[2 * kk + 1][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk + 1][2]), __float2bfloat16_rn(dp[2 * kk + 1][3]))};
            /* B = dO (Q): rows queries 16 kk + 2t (+1, +8, +9), column dim 8 nd + g */
            const uint16_t* ob = dOs + (16 * kk + 2 * tq) * LD + gq;
            const uint16_t* qb = Qs + (16 * kk + 2 * tq) * LD + gq;
            #pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                const uint16_t* o = ob + 8 * nd;
                const uint16_t* q = qb + 8 * nd;
                const uint32_t bo[2] = {(uint32_t)o[0] | (uint32_t)o[LD] << 16,
                                        (uint32_t)o[8 * LD] | (uint32_t)o[9 * LD] << 16};
                const uint32_t bq[2] = {(uint32_t)q[0] | (uint32_t)q[LD] << 16,
                                        (uint32_t)q[8 * LD] | (uint32_t)q[9 * LD] << 16};
                sg_mma_m16n8k16_bf16_f32(dv[nd], pa, bo, dv[nd]);
                sg_mma_m16n8k16_bf16_f32(dk[nd], da, bq, dk[nd]);
            }
        }
    }

    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int j = col_j[rr];
        if (j >= T) continue;
        float* dkr = dk_out + ((size_t)b * T + j) * out_stride + (size_t)h * HD;
        float* dvr = dv_out + ((size_t)b * T + j) * out_stride + (size_t)h * HD;
        #pragma unroll
        for (int nd = 0; nd < NDT; nd++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                dkr[8 * nd + 2 * tq + e] = dk[nd][2 * rr + e] * k_scale;
                dvr[8 * nd + 2 * tq + e] = dv[nd][2 * rr + e];
            }
    }
}

/* Pass 2: dQ. Block (b * NH + h, query tile), the last query tiles (the longest rows) first; warp
 * w owns query rows 16 w .. 16 w + 15 and walks the key tiles from the left, as the forward does:
 * S = Q K^T and dP = dO V^T (dO rounded to bf16), ds = p (m scale dp - D_i) rounded to bf16 is
 * the A fragment of dQ += dS K (B from the K tile, keys as the k index); dq = sigma acc. */
template <int HD>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_dq_kernel(float* dqkv, const float* dout, const uint16_t* qkv,
                                                                  const float* lse, const float* D, int T, int NH,
                                                                  int NKV, uint32_t g0, uint64_t seed, uint32_t thr,
                                                                  float scale, float sigma) {
    SG_DYN_SHARED(uint16_t, smem);
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, NKT = TC_BK / 8;
    uint16_t* Qs = smem;                 /* (BQ, LD) queries */
    uint16_t* dOs = Qs + TC_BQ * LD;     /* (BQ, LD) do, rounded to bf16 */
    uint16_t* Ks = dOs + TC_BQ * LD;     /* (BK, LD) keys */
    uint16_t* Vs = Ks + TC_BK * LD;      /* (BK, LD) values */
    uint32_t* Mw = reinterpret_cast<uint32_t*>(Vs + TC_BK * LD);   /* (BQ, 2) keep words */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int i0 = (gridDim.y - 1 - blockIdx.y) * TC_BQ, nq = min(TC_BQ, T - i0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const uint16_t* qkv_b = qkv + (size_t)b * T * QKV;
    const uint32_t g = g0 + (uint32_t)b;
    const int r0 = 16 * warp + gq;                 /* the lane's query rows of the tile: r0, r0 + 8 */
    const int row_i[2] = {i0 + r0, i0 + r0 + 8};   /* their query positions */

    tc_load_tile<HD>(Qs, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq);
    tc_load_tile_f32<HD>(dOs, dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, nq);
    float L[2], Di[2];
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = row_i[rr];
        L[rr] = i < T ? lse[((size_t)b * NH + h) * T + i] : 0.0f;
        Di[rr] = i < T ? D[((size_t)b * NH + h) * T + i] : 0.0f;
    }
    float acc[NDT][4];   /* dq fragments: dims 8 nd + 2t + e of rows r0 (e), r0 + 8 (2 + e) */
    #pragma unroll
    for (int nd = 0; nd < NDT; nd++)
        #pragma unroll
        for (int c = 0; c < 4; c++) acc[nd][c] = 0.0f;

    for (int j0 = 0; j0 < i0 + nq; j0 += TC_BK) {
        const int nk = min(TC_BK, T - j0);
        __syncthreads();   /* the last tile's products are done with Ks, Vs, Mw */
        tc_load_tile<HD>(Ks, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, nk);
        tc_load_tile<HD>(Vs, qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, nk);
        if (thr != 0) tc_keep_words(Mw, seed, g, (uint32_t)h, i0, j0, T, thr);
        __syncthreads();

        /* S = Q K^T and dP = dO V^T: fragment nf holds keys j0 + 8 nf .. + 7, d ascending */
        float s[NKT][4], dp[NKT][4];
        #pragma unroll
        for (int nf = 0; nf < NKT; nf++)
            #pragma unroll
            for (int c = 0; c < 4; c++) s[nf][c] = dp[nf][c] = 0.0f;
        #pragma unroll
        for (int ks = 0; ks < NKS; ks++) {
            const uint16_t* qa = Qs + r0 * LD + 16 * ks + 2 * tq;
            const uint16_t* oa = dOs + r0 * LD + 16 * ks + 2 * tq;
            const uint32_t aq[4] = {tc_pair(qa), tc_pair(qa + 8 * LD), tc_pair(qa + 8), tc_pair(qa + 8 * LD + 8)};
            const uint32_t ao[4] = {tc_pair(oa), tc_pair(oa + 8 * LD), tc_pair(oa + 8), tc_pair(oa + 8 * LD + 8)};
            #pragma unroll
            for (int nf = 0; nf < NKT; nf++) {
                /* B = K^T (V^T): column n is key 8 nf + n, rows d */
                const uint16_t* kb = Ks + (8 * nf + gq) * LD + 16 * ks + 2 * tq;
                const uint16_t* vb = Vs + (8 * nf + gq) * LD + 16 * ks + 2 * tq;
                const uint32_t bk[2] = {tc_pair(kb), tc_pair(kb + 8)};
                const uint32_t bv[2] = {tc_pair(vb), tc_pair(vb + 8)};
                sg_mma_m16n8k16_bf16_f32(s[nf], aq, bk, s[nf]);
                sg_mma_m16n8k16_bf16_f32(dp[nf], ao, bv, dp[nf]);
            }
        }

        /* ds = p (m scale dp - D_i), 0 where the query does not see the key */
        #pragma unroll
        for (int nf = 0; nf < NKT; nf++)
            #pragma unroll
            for (int c = 0; c < 4; c++) {
                const int rr = c >> 1, cj = 8 * nf + 2 * tq + (c & 1), j = j0 + cj, i = row_i[rr];
                const float p = (j <= i && i < T) ? expf(s[nf][c] * sigma - L[rr]) : 0.0f;
                const float ms = tc_keep_scale(Mw, r0 + 8 * rr, cj, thr, scale);
                dp[nf][c] = p * (dp[nf][c] * ms - Di[rr]);
            }

        /* dQ += dS K, dS rounded to bf16; keys in ascending order of 16. The warp meets first:
         * the loop above branched on each lane's own queries and keys, and mma.sync.aligned needs
         * all 32 lanes converged. */
        __syncwarp();
        #pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            const uint32_t da[4] = {
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk][0]), __float2bfloat16_rn(dp[2 * kk][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk][2]), __float2bfloat16_rn(dp[2 * kk][3])),
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk + 1][0]), __float2bfloat16_rn(dp[2 * kk + 1][1])),
                sg_pack_bf16x2(__float2bfloat16_rn(dp[2 * kk + 1][2]), __float2bfloat16_rn(dp[2 * kk + 1][3]))};
            const uint16_t* kb = Ks + (16 * kk + 2 * tq) * LD + gq;   /* B = K: rows keys, column dim */
            #pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                const uint16_t* k = kb + 8 * nd;
                const uint32_t bb[2] = {(uint32_t)k[0] | (uint32_t)k[LD] << 16,
                                        (uint32_t)k[8 * LD] | (uint32_t)k[9 * LD] << 16};
                sg_mma_m16n8k16_bf16_f32(acc[nd], da, bb, acc[nd]);
            }
        }
    }

    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = row_i[rr];
        if (i >= T) continue;
        float* dq = dqkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
        #pragma unroll
        for (int nd = 0; nd < NDT; nd++)
            #pragma unroll
            for (int e = 0; e < 2; e++) dq[8 * nd + 2 * tq + e] = acc[nd][2 * rr + e] * sigma;
    }
}

/* qkv (fp32) rounded to bf16, to nearest even: the bits, or their values as fp32 (the fallback) */
__global__ void flash_tc_round_bits_kernel(uint16_t* dst, const float* src, size_t n) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) dst[e] = __bfloat16_as_ushort(__float2bfloat16_rn(src[e]));
}
__global__ void flash_tc_round_f32_kernel(float* dst, const float* src, size_t n) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) dst[e] = __bfloat162float(__float2bfloat16_rn(src[e]));
}

/* ---- host side ------------------------------------------------------------------------------- */

/* One line naming the call and what is wrong, then exit (user input: the model's shapes). */
static void tc_check_shapes(const char* fn, const uint16_t* qkv_bf16, int NH, int NKV, int HD) {
    if ((uintptr_t)qkv_bf16 % 16 != 0) {
        fprintf(stderr, "seedgpt: %s: qkv_bf16 %p must be 16-byte aligned (the tiles load 16 bytes at a time)\n",
                fn, (const void*)qkv_bf16);
        exit(1);
    }
    if (!attention_tc_supports_hd(HD)) {
        fprintf(stderr, "seedgpt: %s: head dim %d not supported (16, 32, 64 or 128)\n", fn, HD);
        exit(1);
    }
    if (NH < 1 || NKV < 1 || NH % NKV != 0) {
        fprintf(stderr, "seedgpt: %s: n_kv_head %d must divide n_head %d\n", fn, NKV, NH);
        exit(1);
    }
}

extern "C" int attention_tc_supports_hd(int HD) { return HD == 16 || HD == 32 || HD == 64 || HD == 128; }

/* attention_cuda_check_T (flash_cuda.cu) refuses a T whose tiles of 64 do not fit the grid's y */
static_assert(TC_BQ == 64 && TC_BK == 64, "attention_cuda_check_T counts tiles of 64 positions");

template <int HD, typename OutT>
static void flash_tc_launch(OutT* out, float* lse, const uint16_t* qkv, int B, int T, int NH, int NKV,
                            uint32_t g0, uint64_t seed, Dropout drop) {
    /* through a pointer: a template-id with two arguments would split SG_LAUNCH's arguments */
    void (*kernel)(OutT*, float*, const uint16_t*, int, int, int, uint32_t, uint64_t, uint32_t, float, float) =
        flash_tc_forward_kernel<HD, OutT>;
    const size_t smem = (size_t)(TC_BQ + 2 * TC_BK) * (HD + 8) * sizeof(uint16_t);
    if (smem > 48 * 1024)
        SG_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const float sigma = 1.0f / sqrtf((float)HD);
    dim3 grid((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BQ));
    SG_LAUNCH(kernel, grid, dim3(TC_THREADS), smem, out, lse, qkv, T, NH, NKV, g0, seed, drop.thr, drop.scale,
              sigma);
    SG_CHECK_LAUNCH();
}

template <typename OutT>
static void flash_tc_forward(const char* fn, OutT* out, float* lse, const uint16_t* qkv_bf16, int B, int T,
                             int NH, int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    tc_check_shapes(fn, qkv_bf16, NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T(fn, T);
    switch (HD) {
    case 16: flash_tc_launch<16>(out, lse, qkv_bf16, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 32: flash_tc_launch<32>(out, lse, qkv_bf16, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 64: flash_tc_launch<64>(out, lse, qkv_bf16, B, T, NH, NKV, g0, attn_seed, drop); break;
    default: flash_tc_launch<128>(out, lse, qkv_bf16, B, T, NH, NKV, g0, attn_seed, drop); break;
    }
}

extern "C" void attention_forward_tc_cuda(float* out, float* lse, const uint16_t* qkv_bf16,
                                          int B, int T, int NH, int NKV, int HD,
                                          uint32_t g0, uint64_t attn_seed, Dropout drop) {
    flash_tc_forward("attention_forward_tc_cuda", out, lse, qkv_bf16, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

static size_t tc_round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The scratch: D (B, NH, T); with grouped-query heads (NKV < NH) also the per-query-head partial
 * sums of dK and dV, (B, T, NH, HD) each, that pass 1 leaves for attention_group_sum_cuda. */
extern "C" size_t attention_backward_tc_scratch_floats(int B, int T, int NH, int NKV, int HD) {
    const size_t partial = NKV < NH ? 2 * tc_round16((size_t)B * T * NH * HD) : 0;
    return tc_round16((size_t)B * NH * T) + partial;
}

template <int HD>
static void flash_tc_backward_launch(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv,
                                     const float* lse, int B, int T, int NH, int NKV, uint32_t g0, uint64_t seed,
                                     Dropout drop) {
    const size_t smem1 = (size_t)(2 * TC_BK + 2 * TC_BQ) * (HD + 8) * sizeof(uint16_t) +
                         (size_t)TC_BQ * (2 * sizeof(float) + 2 * sizeof(uint32_t));
    const size_t smem2 = (size_t)(2 * TC_BQ + 2 * TC_BK) * (HD + 8) * sizeof(uint16_t) +
                         (size_t)TC_BQ * 2 * sizeof(uint32_t);
    if (smem1 > 48 * 1024)
        SG_CHECK(cudaFuncSetAttribute(flash_tc_dkdv_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem1));
    if (smem2 > 48 * 1024)
        SG_CHECK(cudaFuncSetAttribute(flash_tc_dq_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem2));
    const float sigma = 1.0f / sqrtf((float)HD);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const float* D = scratch;
    dim3 grid1((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BK));
    if (NKV == NH) {   /* one query head per kv head: straight into dqkv */
        SG_LAUNCH(flash_tc_dkdv_kernel<HD>, grid1, dim3(TC_THREADS), smem1, dqkv + (size_t)NH * HD,
                  dqkv + (size_t)(NH + NKV) * HD, QKV, sigma, dout, qkv, lse, D, T, NH, NKV, g0, seed, drop.thr,
                  drop.scale, sigma);
        SG_CHECK_LAUNCH();
    } else {           /* partial sums per query head, then the group's sum in a fixed order */
        float* dKp = scratch + tc_round16((size_t)B * NH * T);
        float* dVp = dKp + tc_round16((size_t)B * T * NH * HD);
        SG_LAUNCH(flash_tc_dkdv_kernel<HD>, grid1, dim3(TC_THREADS), smem1, dKp, dVp, (size_t)NH * HD, 1.0f, dout,
                  qkv, lse, D, T, NH, NKV, g0, seed, drop.thr, drop.scale, sigma);
        SG_CHECK_LAUNCH();
        attention_group_sum_cuda(dqkv, dKp, dVp, B, T, NH, NKV, HD, sigma);
    }
    dim3 grid2((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BQ));
    SG_LAUNCH(flash_tc_dq_kernel<HD>, grid2, dim3(TC_THREADS), smem2, dqkv, dout, qkv, lse, D, T, NH, NKV, g0, seed,
              drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

/* passes 1 and 2, after pass 0 has left D at the start of the scratch */
static void flash_tc_backward_passes(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_bf16,
                                     const float* lse, int B, int T, int NH, int NKV, int HD, uint32_t g0,
                                     uint64_t attn_seed, Dropout drop) {
    switch (HD) {
    case 16: flash_tc_backward_launch<16>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 32: flash_tc_backward_launch<32>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 64: flash_tc_backward_launch<64>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    default: flash_tc_backward_launch<128>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    }
}

extern "C" void attention_backward_tc_cuda(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_bf16,
                                           const float* out, const float* lse, int B, int T, int NH, int NKV, int HD,
                                           uint32_t g0, uint64_t attn_seed, Dropout drop) {
    tc_check_shapes("attention_backward_tc_cuda", qkv_bf16, NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_backward_tc_cuda", T);
    attention_backward_dot_cuda(scratch, dout, out, B, T, NH, HD);
    flash_tc_backward_passes(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

/* ---- the fp32 interface (attention/attention_cuda.h's signatures) ---------------------------- */
/* qkv arrives in fp32 (the trainer's activations) and is rounded to bf16 by a kernel before the
 * tensor-core kernels run on it; the forward's o and LSE and the backward's dqkv are fp32 as ever.
 * A head dim the tensor-core kernels do not take (not 16, 32, 64 or 128) still works: qkv rounded
 * to bf16 and kept as fp32 goes through attention_forward_cuda / attention_backward_cuda, so the
 * inputs are the same bf16 values and only the products stay fp32 (HD up to 128, their limit). */

/* qkv rounded to bf16: the bits (tensor-core path) or their values as fp32 (fallback path) */
static void tc_round_bits(uint16_t* dst, const float* src, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(flash_tc_round_bits_kernel, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dst, src, n);
    SG_CHECK_LAUNCH();
}
static void tc_round_f32(float* dst, const float* src, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(flash_tc_round_f32_kernel, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dst, src, n);
    SG_CHECK_LAUNCH();
}

/* The forward's bf16 copy of qkv: one grow-only device block from the backend's counted
 * allocator (cuda/device_memory.cu), so it shows in the peak memory; calls run one after another
 * on the default stream, so one block serves them all. */
static void* tc_fwd_scratch = NULL;
static size_t tc_fwd_scratch_bytes = 0;
static void* tc_forward_scratch(size_t bytes) {
    if (bytes > tc_fwd_scratch_bytes) {
        if (tc_fwd_scratch != NULL) device_free_cuda(tc_fwd_scratch);
        tc_fwd_scratch = device_alloc_cuda(bytes);
        tc_fwd_scratch_bytes = bytes;
    }
    return tc_fwd_scratch;
}

extern "C" size_t attention_forward_scratch_bytes_bf16_cuda(int B, int T, int NH, int NKV, int HD) {
    if (B <= 0 || T <= 0) return 0;
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD;
    return n_qkv * (attention_tc_supports_hd(HD) ? sizeof(uint16_t) : sizeof(float));
}

extern "C" void attention_reserve_forward_scratch_bf16_cuda(int B, int T, int NH, int NKV, int HD) {
    (void)tc_forward_scratch(attention_forward_scratch_bytes_bf16_cuda(B, T, NH, NKV, HD));
}

extern "C" void attention_forward_bf16_cuda(float* out, float* lse, const float* qkv, int B, int T, int NH, int NKV,
                                            int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_forward_bf16_cuda", T);   /* before the scratch and the rounding */
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD;
    if (attention_tc_supports_hd(HD)) {
        uint16_t* bits = (uint16_t*)tc_forward_scratch(attention_forward_scratch_bytes_bf16_cuda(B, T, NH, NKV, HD));
        tc_round_bits(bits, qkv, n_qkv);
        attention_forward_tc_cuda(out, lse, bits, B, T, NH, NKV, HD, g0, attn_seed, drop);
    } else {
        float* rounded = (float*)tc_forward_scratch(attention_forward_scratch_bytes_bf16_cuda(B, T, NH, NKV, HD));
        tc_round_f32(rounded, qkv, n_qkv);
        attention_forward_cuda(out, lse, rounded, B, T, NH, NKV, HD, g0, attn_seed, drop);
    }
}

/* tensor-core path: [the tc scratch][the bf16 bits of qkv, from the first 16-byte boundary: 4
 * floats of slack]; fallback: [the fp32 kernel's scratch][qkv rounded to bf16, as fp32] */
extern "C" size_t attention_backward_scratch_floats_bf16_cuda(int B, int T, int NH, int NKV, int HD, int nthreads) {
    (void)nthreads;   /* as in attention_backward_scratch_floats_cuda: no per-thread tiles on the GPU */
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD;
    if (attention_tc_supports_hd(HD))
        return attention_backward_tc_scratch_floats(B, T, NH, NKV, HD) + tc_round16((n_qkv + 1) / 2 + 4);
    return tc_round16(attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1)) + tc_round16(n_qkv);
}

extern "C" void attention_backward_bf16_cuda(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                             const float* out, const float* lse, int B, int T, int NH, int NKV,
                                             int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_backward_bf16_cuda", T);   /* before the rounding */
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD;
    if (attention_tc_supports_hd(HD)) {
        const uintptr_t at = (uintptr_t)(scratch + attention_backward_tc_scratch_floats(B, T, NH, NKV, HD));
        uint16_t* bits = (uint16_t*)((at + 15) & ~(uintptr_t)15);
        tc_round_bits(bits, qkv, n_qkv);
        attention_backward_tc_cuda(dqkv, scratch, dout, bits, out, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
    } else {
        float* rounded = scratch + tc_round16(attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1));
        tc_round_f32(rounded, qkv, n_qkv);
        attention_backward_cuda(dqkv, scratch, dout, rounded, out, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
    }
}

/* ---- the bf16 table's attention: q, k, v and o stored in bf16 ----------------------------------- */
/* Under --precision bf16 the CUDA table stores qkv and the attention's output in bf16
 * (model/backend.h's act_dtype), so the tensor-core kernels read qkv where it lies, with no copy,
 * and the forward writes o rounded once to bf16 (flash_tc_forward_kernel<HD, uint16_t>; the same
 * arithmetic as the fp32-output kernel, only the store rounds). The backward reads that bf16 o for
 * D_i = do_i . o_i (attention_backward_dot_bf16_cuda) and qkv for its tiles. The CPU's twin is
 * attention/flash_bf16_cpu.c, which stores the same way.
 * A head dim the tensor-core kernels do not take goes through the fp32 kernels on the bf16 values,
 * widened to fp32 into scratch (the forward's grow-only block, reserved at build; the backward's
 * part of its `scratch`), the forward's fp32 o rounded into out: the same stored bf16 inputs and
 * outputs, fp32 products (P is not rounded before P V there). */

__global__ void flash_tc_widen_kernel(float* dst, const uint16_t* src, size_t n) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) dst[e] = act_load(src, e);
}
static void tc_widen(float* dst, const void* src, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(flash_tc_widen_kernel, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dst, (const uint16_t*)src, n);
    SG_CHECK_LAUNCH();
}

extern "C" size_t attention_forward_act_scratch_bytes_bf16_cuda(int B, int T, int NH, int NKV, int HD) {
    if (B <= 0 || T <= 0 || attention_tc_supports_hd(HD)) return 0;
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    return (tc_round16(n_qkv) + tc_round16(n_out)) * sizeof(float);
}

extern "C" void attention_reserve_forward_act_scratch_bf16_cuda(int B, int T, int NH, int NKV, int HD) {
    const size_t bytes = attention_forward_act_scratch_bytes_bf16_cuda(B, T, NH, NKV, HD);
    if (bytes > 0) (void)tc_forward_scratch(bytes);
}

extern "C" void attention_forward_bf16_act_cuda(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                                int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    if (attention_tc_supports_hd(HD)) {
        flash_tc_forward("attention_forward_bf16_act_cuda", (uint16_t*)out, lse, (const uint16_t*)qkv, B, T, NH,
                         NKV, HD, g0, attn_seed, drop);
        return;
    }
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_forward_bf16_act_cuda", T);   /* before the scratch */
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    float* q32 = (float*)tc_forward_scratch(attention_forward_act_scratch_bytes_bf16_cuda(B, T, NH, NKV, HD));
    float* o32 = q32 + tc_round16(n_qkv);
    tc_widen(q32, qkv, n_qkv);
    attention_forward_cuda(o32, lse, q32, B, T, NH, NKV, HD, g0, attn_seed, drop);
    tc_round_bits((uint16_t*)out, o32, n_out);
}

/* tensor-core path: the tc scratch; fallback: [the fp32 kernel's scratch][qkv as fp32][o as fp32] */
extern "C" size_t attention_backward_act_scratch_floats_bf16_cuda(int B, int T, int NH, int NKV, int HD,
                                                                  int nthreads) {
    (void)nthreads;   /* no per-thread tiles on the GPU */
    if (attention_tc_supports_hd(HD)) return attention_backward_tc_scratch_floats(B, T, NH, NKV, HD);
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    return tc_round16(attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1)) + tc_round16(n_qkv) +
           tc_round16(n_out);
}

extern "C" void attention_backward_bf16_act_cuda(float* dqkv, float* scratch, const float* dout, const void* qkv,
                                                 const void* out, const float* lse, int B, int T, int NH, int NKV,
                                                 int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    const char* fn = "attention_backward_bf16_act_cuda";
    if (attention_tc_supports_hd(HD)) {
        tc_check_shapes(fn, (const uint16_t*)qkv, NH, NKV, HD);
        if (B <= 0 || T <= 0) return;
        attention_cuda_check_T(fn, T);
        attention_backward_dot_bf16_cuda(scratch, dout, out, B, T, NH, HD);
        flash_tc_backward_passes(dqkv, scratch, dout, (const uint16_t*)qkv, lse, B, T, NH, NKV, HD, g0, attn_seed,
                                 drop);
        return;
    }
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T(fn, T);
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    float* q32 = scratch + tc_round16(attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1));
    float* o32 = q32 + tc_round16(n_qkv);
    tc_widen(q32, qkv, n_qkv);
    tc_widen(o32, out, n_out);
    attention_backward_cuda(dqkv, scratch, dout, q32, o32, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
}
