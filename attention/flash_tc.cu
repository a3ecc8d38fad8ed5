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
 * Two versions of each kernel, with the same arithmetic and so the same bits: the pipelined
 * kernels (flash_tc_forward_kernel, flash_tc_dkdv_kernel, flash_tc_dq_kernel and the D pass
 * flash_tc_dot_kernel; fragments by ldmatrix, tiles by cp.async two stages deep, the causal
 * compare only across the diagonal, 128-query blocks where the registers allow), which the entry
 * points run, and the *_baseline kernels, the first version, which they run under
 * SEEDGPT_KERNELS=baseline (tc_baseline below), so that one GPU run can time both and the tests
 * can hold the pipelined ones to them bit for bit. What follows describes the arithmetic both
 * share and the baseline's tiling; the pipelined kernels' section says what they change.
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
#include <string.h>
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

/* The operand type of the baseline kernels below, a template parameter so that one source serves
 * two architectures (the pipelined kernels further down are bf16 only):
 *   TcBf16  bf16 operands, mma.sync m16n8k16 (sm_80 and newer): the --precision bf16 kernels;
 *   TcF16   fp16 operands, two mma.sync m16n8k8 (sm_75, Turing, which has neither bf16 mma nor
 *           cp.async): attention_forward_tc_f16_cuda / attention_backward_tc_f16_cuda.
 * An m16n8k16 fragment is two m16n8k8 fragments side by side in k (cuda/mma.h): registers a[0],
 * a[1], b[0] hold k 0..7 and a[2], a[3], b[1] k 8..15, so the same fragment loads feed either.
 * bits(x) is x rounded to the operand type (nearest even), pack(lo, hi) two of them as one
 * fragment register; mma(d, a, b, c) is D = A B + C over 16 k, in fp32. */
struct TcBf16 {
    static __device__ __forceinline__ uint16_t bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        return sg_pack_bf16x2(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
    }
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
        sg_mma_m16n8k16_bf16_f32(d, a, b, c);
    }
};
struct TcF16 {
    static __device__ __forceinline__ uint16_t bits(float x) { return sg_f16_bits_rn(x); }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        return (uint32_t)sg_f16_bits_rn(lo) | (uint32_t)sg_f16_bits_rn(hi) << 16;
    }
    static __device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
        const uint32_t lo[2] = {a[0], a[1]}, hi[2] = {a[2], a[3]};
        float t[4];
        sg_mma_m16n8k8_f16_f32(t, lo, &b[0], c);    /* k 0..7 */
        sg_mma_m16n8k8_f16_f32(d, hi, &b[1], t);    /* k 8..15 */
    }
};

/* Block (b * NH + h, query tile): the last query tiles (the longest rows) get the first indices.
 * o is written as OutT (cuda/act.h): fp32, or bf16 rounded once (the bf16 table's activation). */
template <int HD, typename OutT, typename Op = TcBf16>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_forward_kernel_baseline(OutT* out, float* lse, const uint16_t* qkv,
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
                Op::mma(s[nf], a, bb, s[nf]);
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
                Op::pack(s[2 * kk][0], s[2 * kk][1]),
                Op::pack(s[2 * kk][2], s[2 * kk][3]),
                Op::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                Op::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const uint16_t* vb = Vs + (16 * kk + 2 * tq) * LD + gq;   /* B = V: rows keys, column dim */
            #pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                const uint16_t* v = vb + 8 * nd;
                const uint32_t bb[2] = {(uint32_t)v[0] | (uint32_t)v[LD] << 16,
                                        (uint32_t)v[8 * LD] | (uint32_t)v[9 * LD] << 16};
                Op::mma(o[nd], pa, bb, o[nd]);
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
template <int HD, typename Op = TcBf16>
__device__ __forceinline__ void tc_load_tile_f32(uint16_t* dst, const float* src, size_t stride, int n_valid) {
    for (int e = threadIdx.x; e < 64 * HD; e += TC_THREADS) {
        const int r = e / HD, d = e % HD;
        dst[r * (HD + 8) + d] =
            r < n_valid ? Op::bits(src[(size_t)r * stride + d]) : (uint16_t)0;
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
template <int HD, typename Op = TcBf16>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_dkdv_kernel_baseline(float* dk_out, float* dv_out, size_t out_stride,
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
        tc_load_tile_f32<HD, Op>(dOs, dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, nq);
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
                Op::mma(s[nf], ak, bq, s[nf]);
                Op::mma(dp[nf], av, bo, dp[nf]);
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
                Op::pack(s[2 * kk][0], s[2 * kk][1]),
                Op::pack(s[2 * kk][2], s[2 * kk][3]),
                Op::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                Op::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
            const uint32_t da[4] = {
                Op::pack(dp[2 * kk][0], dp[2 * kk][1]),
                Op::pack(dp[2 * kk][2], dp[2 * kk][3]),
                Op::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                Op::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
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
                Op::mma(dv[nd], pa, bo, dv[nd]);
                Op::mma(dk[nd], da, bq, dk[nd]);
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
template <int HD, typename Op = TcBf16>
__global__ void __launch_bounds__(TC_THREADS) flash_tc_dq_kernel_baseline(float* dqkv, const float* dout, const uint16_t* qkv,
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
    tc_load_tile_f32<HD, Op>(dOs, dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, nq);
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
                Op::mma(s[nf], aq, bk, s[nf]);
                Op::mma(dp[nf], ao, bv, dp[nf]);
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
                Op::pack(dp[2 * kk][0], dp[2 * kk][1]),
                Op::pack(dp[2 * kk][2], dp[2 * kk][3]),
                Op::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                Op::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
            const uint16_t* kb = Ks + (16 * kk + 2 * tq) * LD + gq;   /* B = K: rows keys, column dim */
            #pragma unroll
            for (int nd = 0; nd < NDT; nd++) {
                const uint16_t* k = kb + 8 * nd;
                const uint32_t bb[2] = {(uint32_t)k[0] | (uint32_t)k[LD] << 16,
                                        (uint32_t)k[8 * LD] | (uint32_t)k[9 * LD] << 16};
                Op::mma(acc[nd], da, bb, acc[nd]);
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

/* ==== the pipelined kernels: the same arithmetic, the data moved by ldmatrix and cp.async ========
 * These are the kernels the entry points run; the ones above (the *_baseline kernels) are the
 * first version, kept callable with SEEDGPT_KERNELS=baseline so that one GPU run can time the two,
 * and so that the tests can hold these to those bit for bit. What changed, and why the bits did
 * not:
 *   - Fragments come from ldmatrix x4 (cuda/mma.h) instead of pairs of 16-bit shared loads: the
 *     same bf16 bits land in the same registers (test_cuda_mma holds ldmatrix to the PTX table).
 *   - Tiles arrive by cp.async, two stages deep: tile t + 1 is in flight while tile t is used.
 *     One loop step: issue tile t + 1 (one commit group), [the keep words of tile t], wait until
 *     at most one group is in flight (tile t has landed), __syncthreads, the products, and
 *     __syncthreads again (every warp is done with the stage before tile t + 2 refills it). Rows
 *     past T are zero-filled by the copy (src_bytes 0), as the plain loads stored zeros.
 *   - The fragments that do not change along a block's loop (Q in the forward, Q and dO in dQ)
 *     are loaded once, before it, where the registers allow (TcShape: head dims 16 and 32); at 64
 *     and 128 holding them would cost spills or a block a multiprocessor, so the warp reads them
 *     again by ldmatrix in each tile (4 or 8 instructions of some 1300 to 2000).
 *   - The causal compare, and the check for rows past T, run only where they can change
 *     something: on the tiles that cross the diagonal and on the block that holds rows past T
 *     (the bodies with MASKED = true). Elsewhere every key of the tile is visible to every row, so
 *     the compare would always pass and the values are the same.
 *   - The forward and dQ take 16 NW queries a block (NW warps, TcShape below): the key tiles are
 *     shared by more queries. In the tiles that cross the diagonal a warp whose rows all come
 *     before the tile's keys skips it: every weight would be exactly 0, so the products would
 *     leave its sums unchanged (corr = exp(0) = 1; o + 0 = o, o never being -0).
 *   - dO is rounded to bf16 once, by the D pass (flash_tc_dot_kernel), instead of in every tile
 *     load of dK/dV and dQ: the same rounding of the same values.
 * Each output element is still one lane's fp32 chain in the same order: the products of one tile
 * k-step by k-step (head dims, then keys or queries, ascending), the tiles ascending. */

/* ldmatrix x4 row patterns (lane l gives row l % 8 of matrix l / 8):
 *   A pattern: the matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) of a
 *     16 x 16 block: plain, an A fragment (rows, k); .trans, the B fragments of k = the block's
 *     rows and n = its columns 0-7 (registers 0, 1) and 8-15 (registers 2, 3);
 *   B pattern: (rows 0-7, cols 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15): plain, the B
 *     fragments of n = the block's rows 0-7 (registers 0, 1) and 8-15 (2, 3), k = its columns. */
__device__ __forceinline__ int tc_lm_a_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
__device__ __forceinline__ int tc_lm_a_col(int lane) { return 8 * (lane >> 4); }
__device__ __forceinline__ int tc_lm_b_row(int lane) { return (lane & 7) + 8 * (lane >> 4); }
__device__ __forceinline__ int tc_lm_b_col(int lane) { return 8 * ((lane >> 3) & 1); }

/* The shapes that registers and shared memory allow, per head dim (ptxas's report, checked by
 * tests/check_kernels.sh: no spills):
 *   fwd_nw, dq_nw     warps a block of the forward and of dQ, 16 queries each: more warps share
 *                     each key tile;
 *   fwd_hold, dq_hold whether the warp's Q (and dO) fragments stay in registers across the key
 *                     tiles, or are read again by ldmatrix in each tile;
 *   *_minb            blocks a multiprocessor must hold (__launch_bounds__'s second argument,
 *                     which caps the registers at 65536 / (threads x blocks), at most 255):
 *                     without it ptxas hoists loads until one block takes every register. */
template <int HD>
struct TcShape {
    static constexpr int fwd_nw = HD == 128 ? 4 : 8, fwd_minb = HD == 128 ? 3 : 2;
    static constexpr bool fwd_hold = HD <= 32;
    static constexpr int dkdv_minb = HD == 128 ? 2 : 3;
    static constexpr int bwd_minb = HD == 128 || HD == 64 ? 2 : 3;
    static constexpr int dq_nw = HD <= 32 ? 8 : 4, dq_minb = HD == 128 ? 2 : HD == 64 ? 3 : 2;
    static constexpr bool dq_hold = HD <= 32;
};

/* cp.async of ROWS rows of HD bf16 at src (row stride `stride`) into dst (row stride HD + 8), rows
 * at or past n_valid zero-filled; the NT threads take consecutive 16-byte pieces of a row. */
template <int HD, int ROWS, int NT>
__device__ __forceinline__ void tc_issue_tile(uint16_t* dst, const uint16_t* src, size_t stride, int n_valid) {
    constexpr int V = HD / 8, N = ROWS * V;
    #pragma unroll
    for (int k = 0; k < (N + NT - 1) / NT; k++) {
        const int e = (int)threadIdx.x + k * NT;
        if (N % NT == 0 || e < N) {
            const int r = e / V, c = e % V;
            const bool in = r < n_valid;
            sg_cp_async16(dst + r * (HD + 8) + 8 * c, src + (size_t)(in ? r : 0) * stride + 8 * c, in ? 16 : 0);
        }
    }
}

/* One stage of the forward's and dQ's pipeline: the K and V tiles of key tile t into stage t & 1
 * (K at KVs + (t & 1) 2 BK LD, V after it), then a commit (an empty group past the last tile, so
 * that every step waits the same way). */
template <int HD, int NT>
__device__ __forceinline__ void tc_stage_kv(uint16_t* KVs, int t, int n_tiles, const uint16_t* k_src,
                                            const uint16_t* v_src, size_t QKV, int T) {
    constexpr int LD = HD + 8;
    if (t < n_tiles) {
        const int j0 = t * TC_BK, nk = min(TC_BK, T - j0);
        uint16_t* Ks = KVs + (t & 1) * 2 * TC_BK * LD;
        tc_issue_tile<HD, TC_BK, NT>(Ks, k_src + (size_t)j0 * QKV, QKV, nk);
        tc_issue_tile<HD, TC_BK, NT>(Ks + TC_BK * LD, v_src + (size_t)j0 * QKV, QKV, nk);
    }
    sg_cp_async_commit();
}

/* ---- forward ---- */

/* One key tile of the forward for one warp: S = Q K^T, the online softmax of the lane's two rows,
 * dropout, o = o corr + P V; the baseline kernel's tile step (above) with ldmatrix fragments.
 * MASKED: the causal compare and the rows past T (the tiles that cross the diagonal, the block
 * with rows past T); otherwise every key of the tile is visible to both rows. */
template <int HD, bool MASKED, bool HOLD>
__device__ __forceinline__ void tc_fwd_tile(float (&o)[HD / 8][4], float (&mrun)[2], float (&lrun)[2],
                                            const uint32_t (&qf)[HOLD ? HD / 16 : 1][4], const uint16_t* Qs,
                                            const uint16_t* Ks, const uint16_t* Vs, int j0, const int (&row_i)[2],
                                            int T, uint64_t seed, uint32_t g, uint32_t h, uint32_t thr,
                                            float sigma) {
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, NKT = TC_BK / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tq = lane & 3;
    /* S = Q K^T: fragment nf holds keys j0 + 8 nf .. + 7; each element sums d ascending */
    float s[NKT][4];
    #pragma unroll
    for (int nf = 0; nf < NKT; nf++)
        #pragma unroll
        for (int c = 0; c < 4; c++) s[nf][c] = 0.0f;
    const uint16_t* kb0 = Ks + tc_lm_b_row(lane) * LD + tc_lm_b_col(lane);
    #pragma unroll
    for (int ks = 0; ks < NKS; ks++) {
        uint32_t lq[4];
        if (!HOLD) sg_ldmatrix_x4(lq, Qs + (16 * warp + tc_lm_a_row(lane)) * LD + 16 * ks + tc_lm_a_col(lane));
        const uint32_t* q = HOLD ? qf[HOLD ? ks : 0] : lq;
        #pragma unroll
        for (int nf = 0; nf < NKT; nf += 2) {
            uint32_t kb[4];   /* B = K^T of keys 8 nf .. + 15, dims 16 ks .. + 15 */
            sg_ldmatrix_x4(kb, kb0 + 8 * nf * LD + 16 * ks);
            const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
            sg_mma_m16n8k16_bf16_f32(s[nf], q, b0, s[nf]);
            sg_mma_m16n8k16_bf16_f32(s[nf + 1], q, b1, s[nf + 1]);
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
                /* __fmul_rn: the product rounded on its own, never fused into the exponent's
                 * subtraction below (the baseline's select between it and -inf keeps it apart) */
                float v = __fmul_rn(s[nf][2 * rr + e], sigma);
                if (MASKED) {
                    const int j = j0 + 8 * nf + 2 * tq + e;
                    v = (j <= i && i < T) ? v : -INFINITY;
                }
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
        if (thr != 0 && (!MASKED || i < T))
            #pragma unroll
            for (int blk = 0; blk < TC_BK / 32; blk++) {
                if (MASKED && j0 + 32 * blk > i) continue;   /* no key of this block is seen */
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    uint32_t draw[4];   /* keys j0 + 32 blk + 8 w + 2t + e, w = 0..3 */
                    philox_attn_draw4(seed, g, h, (uint32_t)i, (uint32_t)((j0 >> 5) + blk), (uint32_t)(2 * tq + e),
                                      draw);
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
    __syncwarp();   /* the softmax branched on the lane's rows and keys: meet before ldmatrix and mma */
    const uint16_t* vb0 = Vs + tc_lm_a_row(lane) * LD + tc_lm_a_col(lane);
    #pragma unroll
    for (int kk = 0; kk < TC_BK / 16; kk++) {
        const uint32_t pa[4] = {
            sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk][0]), __float2bfloat16_rn(s[2 * kk][1])),
            sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk][2]), __float2bfloat16_rn(s[2 * kk][3])),
            sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk + 1][0]), __float2bfloat16_rn(s[2 * kk + 1][1])),
            sg_pack_bf16x2(__float2bfloat16_rn(s[2 * kk + 1][2]), __float2bfloat16_rn(s[2 * kk + 1][3]))};
        #pragma unroll
        for (int nd = 0; nd < NDT; nd += 2) {
            uint32_t vb[4];   /* B = V of keys 16 kk .. + 15, dims 8 nd .. + 15 (.trans) */
            sg_ldmatrix_x4_trans(vb, vb0 + 16 * kk * LD + 8 * nd);
            const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
            sg_mma_m16n8k16_bf16_f32(o[nd], pa, b0, o[nd]);
            sg_mma_m16n8k16_bf16_f32(o[nd + 1], pa, b1, o[nd + 1]);
        }
    }
}

/* The forward. Block (b * NH + h, query tile of BQ = 16 NW), the last query tiles first; warp w
 * owns query rows 16 w .. 16 w + 15. Shared: Q (BQ, LD), then two stages of K and V (BK, LD each).
 * The key tiles below the block's first query (the "clean" tiles) run the unmasked body; the rest
 * (those that cross the diagonal, and every tile of a block with rows past T) the masked one. */
template <int HD, int NW, typename OutT>
__global__ void __launch_bounds__(32 * NW, TcShape<HD>::fwd_minb) flash_tc_forward_kernel(OutT* out, float* lse, const uint16_t* qkv, int T,
                                                                   int NH, int NKV, uint32_t g0, uint64_t seed,
                                                                   uint32_t thr, float scale, float sigma) {
    SG_DYN_SHARED(uint16_t, smem);
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, BQ = 16 * NW, NT = 32 * NW;
    uint16_t* Qs = smem;              /* (BQ, LD) queries */
    uint16_t* KVs = Qs + BQ * LD;     /* 2 stages of (BK, LD) keys then (BK, LD) values */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int i0 = (gridDim.y - 1 - blockIdx.y) * BQ, nq = min(BQ, T - i0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const uint16_t* qkv_b = qkv + (size_t)b * T * QKV;
    const uint16_t* k_src = qkv_b + (size_t)(NH + kvh) * HD;
    const uint16_t* v_src = qkv_b + (size_t)(NH + NKV + kvh) * HD;
    const uint32_t g = g0 + (uint32_t)b;
    const int r0 = 16 * warp + gq;                 /* the lane's rows of the tile: r0, r0 + 8 */
    const int row_i[2] = {i0 + r0, i0 + r0 + 8};   /* their query positions */
    const int iw = i0 + 16 * warp;                 /* the warp's first query */
    const int n_tiles = (i0 + nq + TC_BK - 1) / TC_BK;
    const int n_clean = i0 + BQ <= T ? i0 / TC_BK : 0;

    /* Q (its own group), then key tile 0; once Q has landed, the warp's Q fragments */
    tc_issue_tile<HD, BQ, NT>(Qs, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq);
    sg_cp_async_commit();
    tc_stage_kv<HD, NT>(KVs, 0, n_tiles, k_src, v_src, QKV, T);
    sg_cp_async_wait<1>();
    __syncthreads();
    constexpr bool HOLD = TcShape<HD>::fwd_hold;
    uint32_t qf[HOLD ? NKS : 1][4];   /* A = Q: rows 16 w .., dims 16 ks .. (held, or read per tile) */
    if (HOLD)
        #pragma unroll
        for (int ks = 0; ks < (HOLD ? NKS : 0); ks++)
            sg_ldmatrix_x4(qf[ks], Qs + (16 * warp + tc_lm_a_row(lane)) * LD + 16 * ks + tc_lm_a_col(lane));

    float o[NDT][4];   /* o fragments: dims 8 nd + 2t + e of rows r0 (e), r0 + 8 (2 + e) */
    #pragma unroll
    for (int nd = 0; nd < NDT; nd++)
        #pragma unroll
        for (int c = 0; c < 4; c++) o[nd][c] = 0.0f;
    /* -FLT_MAX, not -inf: padding rows see no key and must rescale by exp(0) = 1 */
    float mrun[2] = {-FLT_MAX, -FLT_MAX}, lrun[2] = {0.0f, 0.0f};

    int t = 0;
    for (; t < n_clean; t++) {   /* the main loop: every key below every row of the block */
        tc_stage_kv<HD, NT>(KVs, t + 1, n_tiles, k_src, v_src, QKV, T);
        sg_cp_async_wait<1>();   /* tile t has landed */
        __syncthreads();
        const uint16_t* Ks = KVs + (t & 1) * 2 * TC_BK * LD;
        tc_fwd_tile<HD, false, HOLD>(o, mrun, lrun, qf, Qs, Ks, Ks + TC_BK * LD, t * TC_BK, row_i, T, seed, g,
                                     (uint32_t)h, thr, sigma);
        __syncthreads();         /* the stage is free for tile t + 2 */
    }
    for (; t < n_tiles; t++) {   /* the tiles that cross the diagonal, or a block with rows past T */
        tc_stage_kv<HD, NT>(KVs, t + 1, n_tiles, k_src, v_src, QKV, T);
        sg_cp_async_wait<1>();
        __syncthreads();
        const int j0 = t * TC_BK;
        if (iw + 15 >= j0 && iw < T) {   /* the warp sees a key of the tile (warp-uniform) */
            const uint16_t* Ks = KVs + (t & 1) * 2 * TC_BK * LD;
            tc_fwd_tile<HD, true, HOLD>(o, mrun, lrun, qf, Qs, Ks, Ks + TC_BK * LD, j0, row_i, T, seed, g,
                                        (uint32_t)h, thr, sigma);
        }
        __syncthreads();
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

/* ---- backward ---- */

/* Pass 0: D_i = do_i . o_i, flash_dot_kernel's arithmetic (one warp a row, the lanes' fmaf chains
 * over d = lane, lane + 32, .., then a butterfly: the same bits), and dO rounded to bf16 once, the
 * operand of dK/dV and dQ: do_(b, i, h) at dob + (b T + i) dob_stride + 2 h HD (the host puts it
 * in the first half of dq (b, i, h)'s bytes in dqkv, see tc_dob). */
template <typename OutT>
__global__ void flash_tc_dot_kernel(float* D, uint16_t* dob, size_t dob_stride, const float* dout, const OutT* out,
                                    int B, int T, int NH, int HD) {
    const int lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const long rows = (long)B * NH * T;
    float s = 0.0f;
    if (row < rows) {
        const long bh = row / T, i = row % T, b = bh / NH, h = bh % NH;
        const size_t at = ((size_t)b * T + (size_t)i) * NH * HD + (size_t)h * HD;
        uint16_t* dorow = dob + ((size_t)b * T + (size_t)i) * dob_stride + (size_t)h * 2 * HD;
        for (int d = lane; d < HD; d += 32) {
            const float x = dout[at + d];
            s = fmaf(x, act_load(out, at + d), s);
            dorow[d] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
        }
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(TC_FULL, s, off);
    if (row < rows && lane == 0) D[row] = s;
}

/* The one-kernel backward's dQ share (SEEDGPT_ATTN_BACKWARD=fused; unset, up to head dim 64): the
 * query tile's dS (64 x 64, bf16, stored transposed in dSs by every warp's tc_dkdv_tile) times the block's K,
 * dQ_part = dS K, without sigma, each element an fp32 chain over the block's 64 keys in ascending
 * order of 16 (as the split dQ kernel's tile) started from 0. Warp w takes queries 16 w .. + 15,
 * every head dim; dq_part (64 rows of HD floats) is the slice this block owns for this query tile
 * (flash_tc_dq_sum_kernel adds the slices). A = dS by ldmatrix .trans of dS^T with the B pattern
 * (matrix m: keys 8 (m >> 1) .., queries 8 (m & 1) ..: the A fragment's order); B = K by
 * ldmatrix .trans (keys as k, dims as n), as in dQ's tile. */
/* The slices: per (b, h), one 64 x HD tile of fp32 for each pair of query tile qt and key tile
 * kb <= qt (the pairs the causal mask leaves), query tile by query tile, key tiles ascending:
 * the tile of (qt, kb) is number qt (qt + 1) / 2 + kb, and a head has tc_dq_slice_tile(nqt, 0). */
static inline __host__ __device__ size_t tc_dq_slice_tile(int qt, int kb) { return (size_t)qt * (qt + 1) / 2 + kb; }
#define TC_DS_LD (TC_BQ + 8)   /* dS^T's row stride in bf16: rows 4 banks apart */
/* two floats p[0], p[1] (p 8-byte aligned) in one access */
__device__ __forceinline__ void tc_st_f2(float* p, float a, float b) {
    sg_u2 q;
    q.x = __float_as_uint(a);
    q.y = __float_as_uint(b);
    sg_st<sg_u2>(p, q);
}
template <int HD>
__device__ __forceinline__ void tc_dq_part(float* dq_part, const uint16_t* dSs, const uint16_t* Ks) {
    constexpr int LD = HD + 8, NDT = HD / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    __syncthreads();   /* every warp's dS^T rows are in */
    const uint16_t* sa0 = dSs + tc_lm_b_row(lane) * TC_DS_LD + 16 * warp + tc_lm_b_col(lane);
    const int t_off = tc_lm_a_row(lane) * LD + tc_lm_a_col(lane);
    float* row0 = dq_part + (size_t)(16 * warp + gq) * HD + 2 * tq;
    #pragma unroll(HD == 128 ? 1 : NDT / 2)   /* rolled at 128: unrolled, ptxas hoists loads into spills */
    for (int nd = 0; nd < NDT; nd += 2) {
        float a0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, a1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int kk = 0; kk < TC_BK / 16; kk++) {
            uint32_t sa[4], kb[4];   /* A = dS: queries 16 w .., keys 16 kk ..; B = K: rows keys 16 kk
                                      * .. + 15, dims 8 nd .. + 15 (.trans) */
            sg_ldmatrix_x4_trans(sa, sa0 + 16 * kk * TC_DS_LD);
            sg_ldmatrix_x4_trans(kb, Ks + t_off + 16 * kk * LD + 8 * nd);
            const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
            sg_mma_m16n8k16_bf16_f32(a0, sa, k0, a0);
            sg_mma_m16n8k16_bf16_f32(a1, sa, k1, a1);
        }
        tc_st_f2(row0 + 8 * nd, a0[0], a0[1]);
        tc_st_f2(row0 + 8 * HD + 8 * nd, a0[2], a0[3]);
        tc_st_f2(row0 + 8 * nd + 8, a1[0], a1[1]);
        tc_st_f2(row0 + 8 * HD + 8 * nd + 8, a1[2], a1[3]);
    }
}

/* One query tile of dK/dV for one warp: S^T = K Q^T, dP^T = V dO^T, the softmax backward, then
 * dV += Pd^T dO and dK += dS^T Q; the baseline kernel's tile step with ldmatrix fragments and the
 * bf16 operands packed as soon as they are known (the same rounding, fewer registers). Qs, dOs,
 * Ls, Ds: the tile's stage; Mw its keep words. MASKED: the causal compare and the rows past T. */
template <int HD, bool MASKED, bool DQ>
__device__ __forceinline__ void tc_dkdv_tile(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4], const uint16_t* Ks,
                                             const uint16_t* Vs, const uint16_t* Qs, const uint16_t* dOs,
                                             const float* Ls, const float* Ds, const uint32_t* Mw, uint16_t* dSs,
                                             float* dq_part, int i0, int j0, const int (&col_j)[2], int T,
                                             uint32_t thr, float scale, float sigma) {
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, NQT = TC_BQ / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tq = lane & 3;
    /* S^T = K Q^T and dP^T = V dO^T: fragment nf holds queries i0 + 8 nf .. + 7, d ascending */
    float s[NQT][4], dp[NQT][4];
    #pragma unroll
    for (int nf = 0; nf < NQT; nf++)
        #pragma unroll
        for (int c = 0; c < 4; c++) s[nf][c] = dp[nf][c] = 0.0f;
    const int a_off = (16 * warp + tc_lm_a_row(lane)) * LD + tc_lm_a_col(lane);
    const int b_off = tc_lm_b_row(lane) * LD + tc_lm_b_col(lane);
    #pragma unroll
    for (int ks = 0; ks < NKS; ks++) {
        uint32_t ak[4], av[4];   /* A = K, V: key rows 16 w .., dims 16 ks .. */
        sg_ldmatrix_x4(ak, Ks + a_off + 16 * ks);
        sg_ldmatrix_x4(av, Vs + a_off + 16 * ks);
        #pragma unroll
        for (int nf = 0; nf < NQT; nf += 2) {
            uint32_t qb[4], ob[4];   /* B = Q^T, dO^T of queries 8 nf .. + 15 */
            sg_ldmatrix_x4(qb, Qs + b_off + 8 * nf * LD + 16 * ks);
            sg_ldmatrix_x4(ob, dOs + b_off + 8 * nf * LD + 16 * ks);
            const uint32_t q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]};
            const uint32_t o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]};
            sg_mma_m16n8k16_bf16_f32(s[nf], ak, q0, s[nf]);
            sg_mma_m16n8k16_bf16_f32(dp[nf], av, o0, dp[nf]);
            sg_mma_m16n8k16_bf16_f32(s[nf + 1], ak, q1, s[nf + 1]);
            sg_mma_m16n8k16_bf16_f32(dp[nf + 1], av, o1, dp[nf + 1]);
        }
    }

    /* the softmax backward, element by element: m p scale and ds, rounded to bf16 as operands */
    uint32_t pa[TC_BQ / 16][4], da[TC_BQ / 16][4];
    #pragma unroll
    for (int nf = 0; nf < NQT; nf++)
        #pragma unroll
        for (int c = 0; c < 4; c += 2) {
            float pd[2], ds[2];
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int ci = 8 * nf + 2 * tq + e, i = i0 + ci, j = col_j[c >> 1];
                const float p = (!MASKED || (j <= i && i < T)) ? expf(s[nf][c + e] * sigma - Ls[ci]) : 0.0f;
                const float ms = tc_keep_scale(Mw, ci, j - j0, thr, scale);
                pd[e] = p * ms;
                ds[e] = p * (dp[nf][c + e] * ms - Ds[ci]);
            }
            /* fragment nf, registers c, c + 1 are A register (nf & 1) * 2 + (c >> 1) of k-step nf / 2 */
            pa[nf >> 1][2 * (nf & 1) + (c >> 1)] =
                sg_pack_bf16x2(__float2bfloat16_rn(pd[0]), __float2bfloat16_rn(pd[1]));
            da[nf >> 1][2 * (nf & 1) + (c >> 1)] =
                sg_pack_bf16x2(__float2bfloat16_rn(ds[0]), __float2bfloat16_rn(ds[1]));
        }

    /* the one-kernel backward: dS^T (keys as rows, queries as columns, bf16) into shared memory for
     * dQ's products below; da[kk][r] holds key r0 + 8 (r & 1), queries 16 kk + 8 (r >> 1) + 2t, +1 */
    if (DQ)
        #pragma unroll
        for (int kk = 0; kk < TC_BQ / 16; kk++)
            #pragma unroll
            for (int r = 0; r < 4; r++)
                *reinterpret_cast<uint32_t*>(dSs + (16 * warp + (lane >> 2) + 8 * (r & 1)) * TC_DS_LD + 16 * kk +
                                             8 * (r >> 1) + 2 * tq) = da[kk][r];

    /* dV += Pd^T dO, dK += dS^T Q; queries in ascending order of 16. The warp meets first: the
     * loop above branched on each lane's own queries and keys. */
    __syncwarp();
    const int t_off = tc_lm_a_row(lane) * LD + tc_lm_a_col(lane);
    #pragma unroll
    for (int kk = 0; kk < TC_BQ / 16; kk++)
        #pragma unroll
        for (int nd = 0; nd < NDT; nd += 2) {
            uint32_t ob[4], qb[4];   /* B = dO, Q: rows queries 16 kk .. + 15, dims 8 nd .. + 15 (.trans) */
            sg_ldmatrix_x4_trans(ob, dOs + t_off + 16 * kk * LD + 8 * nd);
            sg_ldmatrix_x4_trans(qb, Qs + t_off + 16 * kk * LD + 8 * nd);
            const uint32_t o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]};
            const uint32_t q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]};
            sg_mma_m16n8k16_bf16_f32(dv[nd], pa[kk], o0, dv[nd]);
            sg_mma_m16n8k16_bf16_f32(dk[nd], da[kk], q0, dk[nd]);
            sg_mma_m16n8k16_bf16_f32(dv[nd + 1], pa[kk], o1, dv[nd + 1]);
            sg_mma_m16n8k16_bf16_f32(dk[nd + 1], da[kk], q1, dk[nd + 1]);
        }
    if (DQ) tc_dq_part<HD>(dq_part, dSs, Ks);
}

/* One stage of dK/dV's pipeline: the Q and dO tiles (bf16; rows QKV and dob_stride apart) and the
 * LSE and D of query tile t (queries i0 = j0 + 64 t) into stage t & 1, then a commit (empty past
 * the last tile). A stage: Q (BQ, LD), dO (BQ, LD), LSE (BQ), D (BQ); rows past T zero-filled. */
template <int HD>
__device__ __forceinline__ void tc_stage_qdo(uint16_t* St, int t, int n_tiles, int j0, const uint16_t* q_src,
                                             const uint16_t* do_src, size_t QKV, size_t dob_stride, const float* lse_bh,
                                             const float* D_bh, int T) {
    constexpr int LD = HD + 8, STAGE = 2 * TC_BQ * LD + 4 * TC_BQ;   /* in uint16_t */
    if (t < n_tiles) {
        const int i0 = j0 + t * TC_BQ, nq = min(TC_BQ, T - i0);
        uint16_t* Qs = St + (t & 1) * STAGE;
        tc_issue_tile<HD, TC_BQ, TC_THREADS>(Qs, q_src + (size_t)i0 * QKV, QKV, nq);
        tc_issue_tile<HD, TC_BQ, TC_THREADS>(Qs + TC_BQ * LD, do_src + (size_t)i0 * dob_stride, dob_stride, nq);
        float* Ls = reinterpret_cast<float*>(Qs + 2 * TC_BQ * LD);
        const int x = threadIdx.x & (TC_BQ - 1), in = i0 + x < T;   /* threads 0-63: LSE, 64-127: D */
        const float* src = threadIdx.x < TC_BQ ? lse_bh : D_bh;
        sg_cp_async4(Ls + threadIdx.x, src + (in ? i0 + x : 0), in ? 4 : 0);
    }
    sg_cp_async_commit();
}

/* One step of dK/dV's pipeline: query tile t + 1 issued, tile t's keep words computed while the
 * copies fly, tile t waited for, its products, and the barrier that frees its stage. */
template <int HD, bool MASKED, bool DQ>
__device__ __forceinline__ void tc_dkdv_step(float (&dk)[HD / 8][4], float (&dv)[HD / 8][4], int t, int n_tiles,
                                             const uint16_t* Ks, const uint16_t* Vs, uint16_t* St, uint32_t* Mw,
                                             uint16_t* dSs, float* dq_slices, int j0, const int (&col_j)[2],
                                             const uint16_t* q_src, const uint16_t* do_src, size_t QKV,
                                             size_t dob_stride, const float* lse_bh, const float* D_bh, int T,
                                             uint64_t seed, uint32_t g, uint32_t h, uint32_t thr, float scale,
                                             float sigma) {
    constexpr int LD = HD + 8, STAGE = 2 * TC_BQ * LD + 4 * TC_BQ;
    const int i0 = j0 + t * TC_BQ;
    /* this block's dQ slice of query tile qt (tc_dq_slice_tile): the chunk's head blockIdx.x, from
     * the kernel's parameters at each tile (a pointer kept across the loop would cost registers) */
    float* dq_part = DQ ? dq_slices + ((size_t)blockIdx.x * tc_dq_slice_tile((T + TC_BQ - 1) / TC_BQ, 0) +
                                       tc_dq_slice_tile(j0 / TC_BQ + t, j0 / TC_BK)) * TC_BQ * HD
                        : nullptr;
    tc_stage_qdo<HD>(St, t + 1, n_tiles, j0, q_src, do_src, QKV, dob_stride, lse_bh, D_bh, T);
    if (thr != 0) tc_keep_words(Mw, seed, g, h, i0, j0, T, thr);   /* while the copies fly */
    sg_cp_async_wait<1>();   /* query tile t (and K, V) have landed */
    __syncthreads();
    const uint16_t* Qs = St + (t & 1) * STAGE;
    const float* Ls = reinterpret_cast<const float*>(Qs + 2 * TC_BQ * LD);
    tc_dkdv_tile<HD, MASKED, DQ>(dk, dv, Ks, Vs, Qs, Qs + TC_BQ * LD, Ls, Ls + TC_BQ, Mw, dSs, dq_part, i0, j0,
                                 col_j, T, thr, scale, sigma);
    __syncthreads();         /* the stage and Mw are free for the next tiles */
}

/* Pass 1: dK, dV of one query head's 64 keys (the baseline kernel's blocks and warps). Shared: K
 * and V (BK, LD) once, then two stages of (Q, dO, LSE, D) of a query tile, and the tile's keep
 * words. The query tiles walk from the diagonal down: the diagonal tile and a last tile with rows
 * past T run the masked body, the tiles between them (the main loop) the unmasked one. The body
 * of the split backward's dK/dV kernel and of the fused one (DQ: each tile's dQ share too). */
template <int HD, bool DQ>
__device__ __forceinline__ void tc_dkdv_block(float* dk_out, float* dv_out, size_t out_stride, float k_scale,
                                              const uint16_t* dob, size_t dob_stride, const uint16_t* qkv,
                                              const float* lse, const float* D, int T, int NH, int NKV, uint32_t g0,
                                              uint64_t seed, uint32_t thr, float scale, float sigma,
                                              float* dq_slices, int bh0) {
    SG_DYN_SHARED(uint16_t, smem);
    constexpr int LD = HD + 8, NDT = HD / 8, STAGE = 2 * TC_BQ * LD + 4 * TC_BQ;
    static_assert(TC_BQ == TC_BK, "the query tiles start at the key tile's first key");
    uint16_t* Ks = smem;                  /* (BK, LD) keys */
    uint16_t* Vs = Ks + TC_BK * LD;       /* (BK, LD) values */
    uint16_t* St = Vs + TC_BK * LD;       /* 2 stages of Q, dO, LSE, D */
    uint32_t* Mw = reinterpret_cast<uint32_t*>(St + 2 * STAGE);   /* (BQ, 2) keep words */
    uint16_t* dSs = reinterpret_cast<uint16_t*>(Mw + 2 * TC_BQ);   /* DQ: (BK, TC_DS_LD) dS^T of a tile */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int bh = (int)blockIdx.x + (DQ ? bh0 : 0);   /* DQ: launched a chunk of (b, h) at a time */
    const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    const int j0 = blockIdx.y * TC_BK, nk = min(TC_BK, T - j0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const uint16_t* qkv_b = qkv + (size_t)b * T * QKV;
    const uint16_t* q_src = qkv_b + (size_t)h * HD;
    const uint16_t* do_src = dob + (size_t)b * T * dob_stride + (size_t)h * 2 * HD;
    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* D_bh = D + ((size_t)b * NH + h) * T;
    const uint32_t g = g0 + (uint32_t)b;
    const int r0 = 16 * warp + gq;                 /* the lane's key rows of the tile: r0, r0 + 8 */
    const int col_j[2] = {j0 + r0, j0 + r0 + 8};   /* their key positions */
    const int n_tiles = (T - j0 + TC_BQ - 1) / TC_BQ;   /* query tiles i0 = j0, j0 + 64, .. (BQ = BK) */
    const int last_masked = n_tiles > 1 && j0 + n_tiles * TC_BQ > T;   /* a last tile with rows past T */

    /* K and V (a group), then query tile 0 */
    tc_issue_tile<HD, TC_BK, TC_THREADS>(Ks, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, nk);
    tc_issue_tile<HD, TC_BK, TC_THREADS>(Vs, qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, nk);
    sg_cp_async_commit();
    tc_stage_qdo<HD>(St, 0, n_tiles, j0, q_src, do_src, QKV, dob_stride, lse_bh, D_bh, T);

    float dk[NDT][4], dv[NDT][4];   /* dims 8 nd + 2t + e of key rows r0 (e), r0 + 8 (2 + e) */
    #pragma unroll
    for (int nd = 0; nd < NDT; nd++)
        #pragma unroll
        for (int c = 0; c < 4; c++) dk[nd][c] = dv[nd][c] = 0.0f;

    /* the diagonal tile; the main loop over the tiles below it, where every query sees every key;
     * a last tile with rows past T */
    tc_dkdv_step<HD, true, DQ>(dk, dv, 0, n_tiles, Ks, Vs, St, Mw, dSs, dq_slices, j0, col_j, q_src, do_src, QKV,
                               dob_stride, lse_bh, D_bh, T, seed, g, (uint32_t)h, thr, scale, sigma);
    for (int t = 1; t < n_tiles - last_masked; t++)
        tc_dkdv_step<HD, false, DQ>(dk, dv, t, n_tiles, Ks, Vs, St, Mw, dSs, dq_slices, j0, col_j, q_src, do_src, QKV,
                                    dob_stride, lse_bh, D_bh, T, seed, g, (uint32_t)h, thr, scale, sigma);
    if (last_masked)
        tc_dkdv_step<HD, true, DQ>(dk, dv, n_tiles - 1, n_tiles, Ks, Vs, St, Mw, dSs, dq_slices, j0, col_j, q_src, do_src,
                                   QKV, dob_stride, lse_bh, D_bh, T, seed, g, (uint32_t)h, thr, scale, sigma);

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

/* The split backward's pass 1 (SEEDGPT_ATTN_BACKWARD=split, or unset at head dim 128): dK, dV only;
 * flash_tc_dq_kernel computes dQ after it. Two kernels of one body, so that each has its own name
 * and launch bounds (tests/check_kernels.sh reads them apart). */
template <int HD>
__global__ void __launch_bounds__(TC_THREADS, TcShape<HD>::dkdv_minb) flash_tc_dkdv_kernel(float* dk_out, float* dv_out, size_t out_stride,
                                                                    float k_scale, const uint16_t* dob,
                                                                    size_t dob_stride, const uint16_t* qkv,
                                                                    const float* lse,
                                                                    const float* D, int T, int NH, int NKV,
                                                                    uint32_t g0, uint64_t seed, uint32_t thr,
                                                                    float scale, float sigma) {
    tc_dkdv_block<HD, false>(dk_out, dv_out, out_stride, k_scale, dob, dob_stride, qkv, lse, D, T, NH, NKV, g0, seed,
                             thr, scale, sigma, nullptr, 0);
}

/* The one-kernel backward (SEEDGPT_ATTN_BACKWARD=fused, or unset up to head dim 64): pass 1's
 * blocks, each also writing its share of dQ for every query tile it walks (tc_dq_part) into its
 * own slice, for the chunk of heads bh0 .. bh0 + gridDim.x - 1; flash_tc_dq_sum_kernel then adds
 * the slices. dQ's products need no second S and dP, and the keep bits are drawn once here
 * instead of again in a dQ pass: twice a step with the forward's, not three times. Shared: pass
 * 1's, then dS^T. */
template <int HD>
__global__ void __launch_bounds__(TC_THREADS, TcShape<HD>::bwd_minb) flash_tc_bwd_kernel(float* dk_out, float* dv_out, size_t out_stride,
                                                                   float k_scale, const uint16_t* dob,
                                                                   size_t dob_stride, const uint16_t* qkv,
                                                                   const float* lse,
                                                                   const float* D, int T, int NH, int NKV,
                                                                   uint32_t g0, uint64_t seed, uint32_t thr,
                                                                   float scale, float sigma, float* dq_slices,
                                                                   int bh0) {
    tc_dkdv_block<HD, true>(dk_out, dv_out, out_stride, k_scale, dob, dob_stride, qkv, lse, D, T, NH, NKV, g0, seed,
                            thr, scale, sigma, dq_slices, bh0);
}

/* One key tile of dQ for one warp: S = Q K^T, dP = dO V^T, ds = p (m scale dp - D_i), then
 * dQ += dS K; the baseline kernel's tile step with ldmatrix fragments. aq, ao: the warp's Q and dO
 * fragments (held, or loaded here from Qs, dOs when HOLD is false). */
template <int HD, bool MASKED, bool HOLD>
__device__ __forceinline__ void tc_dq_tile(float (&acc)[HD / 8][4], const uint32_t (&aq)[HOLD ? HD / 16 : 1][4],
                                           const uint32_t (&ao)[HOLD ? HD / 16 : 1][4], const uint16_t* Qs,
                                           const uint16_t* dOs, const uint16_t* Ks, const uint16_t* Vs,
                                           const uint32_t* Mw, int j0, const int (&row_i)[2], const float (&L)[2],
                                           const float (&Di)[2], int T, uint32_t thr, float scale, float sigma) {
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, NKT = TC_BK / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int r0 = 16 * warp + gq;
    float s[NKT][4], dp[NKT][4];
    #pragma unroll
    for (int nf = 0; nf < NKT; nf++)
        #pragma unroll
        for (int c = 0; c < 4; c++) s[nf][c] = dp[nf][c] = 0.0f;
    const int a_off = (16 * warp + tc_lm_a_row(lane)) * LD + tc_lm_a_col(lane);
    const int b_off = tc_lm_b_row(lane) * LD + tc_lm_b_col(lane);
    #pragma unroll
    for (int ks = 0; ks < NKS; ks++) {
        uint32_t lq[4], lo[4];
        if (!HOLD) {
            sg_ldmatrix_x4(lq, Qs + a_off + 16 * ks);
            sg_ldmatrix_x4(lo, dOs + a_off + 16 * ks);
        }
        const uint32_t* q = HOLD ? aq[HOLD ? ks : 0] : lq;
        const uint32_t* od = HOLD ? ao[HOLD ? ks : 0] : lo;
        #pragma unroll
        for (int nf = 0; nf < NKT; nf += 2) {
            uint32_t kb[4], vb[4];   /* B = K^T, V^T of keys 8 nf .. + 15 */
            sg_ldmatrix_x4(kb, Ks + b_off + 8 * nf * LD + 16 * ks);
            sg_ldmatrix_x4(vb, Vs + b_off + 8 * nf * LD + 16 * ks);
            const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
            const uint32_t v0[2] = {vb[0], vb[1]}, v1[2] = {vb[2], vb[3]};
            sg_mma_m16n8k16_bf16_f32(s[nf], q, k0, s[nf]);
            sg_mma_m16n8k16_bf16_f32(dp[nf], od, v0, dp[nf]);
            sg_mma_m16n8k16_bf16_f32(s[nf + 1], q, k1, s[nf + 1]);
            sg_mma_m16n8k16_bf16_f32(dp[nf + 1], od, v1, dp[nf + 1]);
        }
    }

    /* ds = p (m scale dp - D_i), rounded to bf16 as the A fragments of dS K */
    uint32_t da[TC_BK / 16][4];
    #pragma unroll
    for (int nf = 0; nf < NKT; nf++)
        #pragma unroll
        for (int c = 0; c < 4; c += 2) {
            float ds[2];
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                const int rr = c >> 1, cj = 8 * nf + 2 * tq + e, j = j0 + cj, i = row_i[rr];
                const float p = (!MASKED || (j <= i && i < T)) ? expf(s[nf][c + e] * sigma - L[rr]) : 0.0f;
                const float ms = tc_keep_scale(Mw, r0 + 8 * rr, cj, thr, scale);
                ds[e] = p * (dp[nf][c + e] * ms - Di[rr]);
            }
            da[nf >> 1][2 * (nf & 1) + (c >> 1)] =
                sg_pack_bf16x2(__float2bfloat16_rn(ds[0]), __float2bfloat16_rn(ds[1]));
        }

    /* dQ += dS K; keys in ascending order of 16. The warp meets first. */
    __syncwarp();
    const int t_off = tc_lm_a_row(lane) * LD + tc_lm_a_col(lane);
    #pragma unroll
    for (int kk = 0; kk < TC_BK / 16; kk++)
        #pragma unroll
        for (int nd = 0; nd < NDT; nd += 2) {
            uint32_t kb[4];   /* B = K: rows keys 16 kk .. + 15, dims 8 nd .. + 15 (.trans) */
            sg_ldmatrix_x4_trans(kb, Ks + t_off + 16 * kk * LD + 8 * nd);
            const uint32_t k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]};
            sg_mma_m16n8k16_bf16_f32(acc[nd], da[kk], k0, acc[nd]);
            sg_mma_m16n8k16_bf16_f32(acc[nd + 1], da[kk], k1, acc[nd + 1]);
        }
}

/* Pass 2: dQ. Block (b * NH + h, query tile of BQ = 16 NW), the last query tiles first; warp w
 * owns query rows 16 w .. 16 w + 15 and walks the key tiles from the left, as the forward does.
 * Shared: Q and dO (BQ, LD each), two stages of K and V (BK, LD each), the tile's keep words. */
template <int HD, int NW>
__global__ void __launch_bounds__(32 * NW, TcShape<HD>::dq_minb) flash_tc_dq_kernel(float* dqkv, const uint16_t* dob, size_t dob_stride, const uint16_t* qkv,
                                                              const float* lse, const float* D, int T, int NH,
                                                              int NKV, uint32_t g0, uint64_t seed, uint32_t thr,
                                                              float scale, float sigma) {
    SG_DYN_SHARED(uint16_t, smem);
    constexpr int LD = HD + 8, NKS = HD / 16, NDT = HD / 8, BQ = 16 * NW, NT = 32 * NW;
    constexpr bool HOLD = TcShape<HD>::dq_hold;   /* Q and dO fragments in registers across the key tiles */
    uint16_t* Qs = smem;                 /* (BQ, LD) queries */
    uint16_t* dOs = Qs + BQ * LD;        /* (BQ, LD) do, bf16 */
    uint16_t* KVs = dOs + BQ * LD;       /* 2 stages of (BK, LD) keys then (BK, LD) values */
    uint32_t* Mw = reinterpret_cast<uint32_t*>(KVs + 4 * TC_BK * LD);   /* (BQ, 2) keep words */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int i0 = (gridDim.y - 1 - blockIdx.y) * BQ, nq = min(BQ, T - i0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const uint16_t* qkv_b = qkv + (size_t)b * T * QKV;
    const uint16_t* k_src = qkv_b + (size_t)(NH + kvh) * HD;
    const uint16_t* v_src = qkv_b + (size_t)(NH + NKV + kvh) * HD;
    const uint32_t g = g0 + (uint32_t)b;
    const int r0 = 16 * warp + gq;                 /* the lane's query rows of the tile: r0, r0 + 8 */
    const int row_i[2] = {i0 + r0, i0 + r0 + 8};   /* their query positions */
    const int iw = i0 + 16 * warp;
    const int n_tiles = (i0 + nq + TC_BK - 1) / TC_BK;
    const int n_clean = i0 + BQ <= T ? i0 / TC_BK : 0;

    tc_issue_tile<HD, BQ, NT>(Qs, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq);
    /* dO lives in the block's own dq slots of dqkv (see flash_tc_backward_launch): read here, in
     * full, long before the block writes its dq there at the end */
    tc_issue_tile<HD, BQ, NT>(dOs, dob + ((size_t)b * T + i0) * dob_stride + (size_t)h * 2 * HD, dob_stride, nq);
    sg_cp_async_commit();
    tc_stage_kv<HD, NT>(KVs, 0, n_tiles, k_src, v_src, QKV, T);
    float L[2], Di[2];
    #pragma unroll
    for (int rr = 0; rr < 2; rr++) {
        const int i = row_i[rr];
        L[rr] = i < T ? lse[((size_t)b * NH + h) * T + i] : 0.0f;
        Di[rr] = i < T ? D[((size_t)b * NH + h) * T + i] : 0.0f;
    }
    sg_cp_async_wait<1>();   /* Q and dO have landed */
    __syncthreads();
    uint32_t aq[HOLD ? NKS : 1][4], ao[HOLD ? NKS : 1][4];
    if (HOLD)
        #pragma unroll
        for (int ks = 0; ks < (HOLD ? NKS : 0); ks++) {
            const int off = (16 * warp + tc_lm_a_row(lane)) * LD + 16 * ks + tc_lm_a_col(lane);
            sg_ldmatrix_x4(aq[ks], Qs + off);
            sg_ldmatrix_x4(ao[ks], dOs + off);
        }
    float acc[NDT][4];   /* dq fragments: dims 8 nd + 2t + e of rows r0 (e), r0 + 8 (2 + e) */
    #pragma unroll
    for (int nd = 0; nd < NDT; nd++)
        #pragma unroll
        for (int c = 0; c < 4; c++) acc[nd][c] = 0.0f;

    int t = 0;
    for (; t < n_clean; t++) {   /* the main loop: every key below every row of the block */
        tc_stage_kv<HD, NT>(KVs, t + 1, n_tiles, k_src, v_src, QKV, T);
        if (thr != 0) tc_keep_words(Mw, seed, g, (uint32_t)h, i0, t * TC_BK, T, thr);
        sg_cp_async_wait<1>();
        __syncthreads();
        const uint16_t* Ks = KVs + (t & 1) * 2 * TC_BK * LD;
        tc_dq_tile<HD, false, HOLD>(acc, aq, ao, Qs, dOs, Ks, Ks + TC_BK * LD, Mw, t * TC_BK, row_i, L, Di, T, thr,
                                    scale, sigma);
        __syncthreads();
    }
    for (; t < n_tiles; t++) {   /* the tiles that cross the diagonal, or a block with rows past T */
        const int j0 = t * TC_BK;
        tc_stage_kv<HD, NT>(KVs, t + 1, n_tiles, k_src, v_src, QKV, T);
        if (thr != 0) tc_keep_words(Mw, seed, g, (uint32_t)h, i0, j0, T, thr);
        sg_cp_async_wait<1>();
        __syncthreads();
        if (iw + 15 >= j0 && iw < T) {
            const uint16_t* Ks = KVs + (t & 1) * 2 * TC_BK * LD;
            tc_dq_tile<HD, true, HOLD>(acc, aq, ao, Qs, dOs, Ks, Ks + TC_BK * LD, Mw, j0, row_i, L, Di, T, thr, scale,
                                       sigma);
        }
        __syncthreads();
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

/* The one-kernel backward's second kernel: dq (b, i, h) = sigma (0 + the slices of key tiles
 * kb = 0, 1, .., i / 64 in that order), for the chunk's n_bh heads (b, h) = bh0 + x; four dims a
 * thread, 16-byte accesses. A fixed order, so the same bits every run; it writes over the bf16 dO
 * in dq's columns (tc_dob), which the dK/dV kernel before it has finished reading. */
template <int HD>
__global__ void flash_tc_dq_sum_kernel(float* dqkv, const float* dq_slices, int bh0, int n_bh, int T, int NH, int NKV,
                                       float sigma) {
    constexpr int V = HD / 4;
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)n_bh * T * V) return;
    const int c = (int)(e % V);
    const size_t row = e / V;
    const int i = (int)(row % (size_t)T), x = (int)(row / (size_t)T);
    const int bh = bh0 + x, b = bh / NH, h = bh % NH, qt = i / TC_BQ;
    const size_t tile = (size_t)TC_BQ * HD;
    const float* src = dq_slices + (size_t)x * tc_dq_slice_tile((T + TC_BQ - 1) / TC_BQ, 0) * tile +
                       tc_dq_slice_tile(qt, 0) * tile + (size_t)(i % TC_BQ) * HD + 4 * c;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int kb = 0; kb <= qt; kb++) {
        float v[4];
        ld_f4(src + kb * tile, v);
        #pragma unroll
        for (int w = 0; w < 4; w++) acc[w] += v[w];
    }
    #pragma unroll
    for (int w = 0; w < 4; w++) acc[w] *= sigma;
    st_f4(dqkv + ((size_t)b * T + i) * (size_t)(NH + 2 * NKV) * HD + (size_t)h * HD + 4 * c, acc);
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

/* attention_cuda_check_T (flash_cuda.cu) refuses a T whose tiles of 64 do not fit the grid's y;
 * the pipelined forward and dQ take 64 or more queries a block, so fewer tiles along y */
static_assert(TC_BQ == 64 && TC_BK == 64, "attention_cuda_check_T counts tiles of 64 positions");

/* The runtime switch (cuda/device.h, sg_kernels_baseline): SEEDGPT_KERNELS=baseline runs the
 * *_baseline kernels (the first version, kept so that one GPU run times both and the tests hold
 * the new ones to them bit for bit); unset, empty or "new", the pipelined ones. */
static int tc_baseline(void) { return sg_kernels_baseline(); }

extern "C" const char* attention_tc_kernels(void) { return tc_baseline() ? "baseline" : "new"; }

static int tc_fused_fits(int HD);
static int tc_backward_fits(int HD);
/* the fused backward, where SEEDGPT_ATTN_BACKWARD and the device's shared memory allow it: by
 * default at head dims up to 64 (at 128 its kernel spills 4 bytes, tests/check_kernels.sh) */
static int tc_use_fused(int HD) {
    const int mode = sg_attn_backward_mode();
    if (mode == SG_ATTN_BWD_SPLIT || (mode == SG_ATTN_BWD_AUTO && HD > 64)) return 0;
    return tc_fused_fits(HD);
}
extern "C" const char* attention_tc_backward_kernels(int HD) {
    const int fused = tc_use_fused(HD);   /* first: a wrong SEEDGPT_ATTN_BACKWARD is refused whatever runs */
    if (tc_baseline() || !tc_backward_fits(HD)) return "baseline";
    return fused ? "fused" : "split";
}

/* a kernel's dynamic shared memory above the default 48 KiB needs the opt-in */
template <typename K>
static void tc_smem_optin(K* kernel, size_t smem) {
    if (smem > 48 * 1024)
        SG_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
}

/* The pipelined kernels' shared memory. Above the device's opt-in limit (sg_smem_optin: at HD 128
 * the backward's 104 KiB passes exceed sm_86's and sm_89's 99 KiB) the launchers take the
 * *_baseline kernels instead, which need less (69 KiB) and give the same bits (the tests hold the
 * pipelined kernels to them bit for bit). */
template <int HD> static size_t tc_forward_smem(void) {
    return (size_t)(16 * TcShape<HD>::fwd_nw + 4 * TC_BK) * (HD + 8) * sizeof(uint16_t);   /* Q, 2 stages of K, V */
}
template <int HD> static size_t tc_dkdv_smem(void) {   /* K, V, two stages of (Q, dO, LSE, D), keep words */
    return (size_t)(2 * TC_BK + 4 * TC_BQ) * (HD + 8) * sizeof(uint16_t) + (size_t)2 * 2 * TC_BQ * sizeof(float) +
           (size_t)TC_BQ * 2 * sizeof(uint32_t);
}
template <int HD> static size_t tc_fused_smem(void) {  /* dK/dV's, then dS^T (BK, TC_DS_LD) bf16 */
    return tc_dkdv_smem<HD>() + (size_t)TC_BK * TC_DS_LD * sizeof(uint16_t);
}
template <int HD> static size_t tc_dq_smem(void) {     /* Q, dO, two stages of K, V, keep words */
    constexpr int BQ = 16 * TcShape<HD>::dq_nw;
    return (size_t)(2 * BQ + 4 * TC_BK) * (HD + 8) * sizeof(uint16_t) + (size_t)BQ * 2 * sizeof(uint32_t);
}
static int tc_fused_fits(int HD) {
    const size_t limit = sg_smem_optin();
    switch (HD) {
    case 16: return tc_fused_smem<16>() <= limit;
    case 32: return tc_fused_smem<32>() <= limit;
    case 64: return tc_fused_smem<64>() <= limit;
    default: return tc_fused_smem<128>() <= limit;
    }
}
static int tc_backward_fits(int HD) {
    const size_t limit = sg_smem_optin();
    switch (HD) {
    case 16: return tc_dkdv_smem<16>() <= limit && tc_dq_smem<16>() <= limit;
    case 32: return tc_dkdv_smem<32>() <= limit && tc_dq_smem<32>() <= limit;
    case 64: return tc_dkdv_smem<64>() <= limit && tc_dq_smem<64>() <= limit;
    default: return tc_dkdv_smem<128>() <= limit && tc_dq_smem<128>() <= limit;
    }
}

/* The baseline kernels' shared memory: Q, K, V (forward); K, V, Q, dO, LSE, D and keep words
 * (dK/dV); Q, dO, K, V and keep words (dQ). At HD 128 the backward's 69 KiB exceed sm_75's 64. */
template <int HD> static size_t tc_forward_smem_baseline(void) {
    return (size_t)(TC_BQ + 2 * TC_BK) * (HD + 8) * sizeof(uint16_t);
}
template <int HD> static size_t tc_dkdv_smem_baseline(void) {
    return (size_t)(2 * TC_BK + 2 * TC_BQ) * (HD + 8) * sizeof(uint16_t) +
           (size_t)TC_BQ * (2 * sizeof(float) + 2 * sizeof(uint32_t));
}
template <int HD> static size_t tc_dq_smem_baseline(void) {
    return (size_t)(2 * TC_BQ + 2 * TC_BK) * (HD + 8) * sizeof(uint16_t) + (size_t)TC_BQ * 2 * sizeof(uint32_t);
}

/* The baseline forward with operands Op (TcBf16, TcF16) */
template <int HD, typename OutT, typename Op>
static void tc_forward_baseline_launch(OutT* out, float* lse, const uint16_t* qkv, int B, int T, int NH, int NKV,
                                       uint32_t g0, uint64_t seed, Dropout drop) {
    const float sigma = 1.0f / sqrtf((float)HD);
    /* through a pointer: a template-id with two arguments would split SG_LAUNCH's arguments */
    void (*kernel)(OutT*, float*, const uint16_t*, int, int, int, uint32_t, uint64_t, uint32_t, float, float) =
        flash_tc_forward_kernel_baseline<HD, OutT, Op>;
    const size_t smem = tc_forward_smem_baseline<HD>();
    tc_smem_optin(kernel, smem);
    dim3 grid((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BQ));
    SG_LAUNCH(kernel, grid, dim3(TC_THREADS), smem, out, lse, qkv, T, NH, NKV, g0, seed, drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

template <int HD, typename OutT>
static void flash_tc_launch(OutT* out, float* lse, const uint16_t* qkv, int B, int T, int NH, int NKV,
                            uint32_t g0, uint64_t seed, Dropout drop) {
    const float sigma = 1.0f / sqrtf((float)HD);
    void (*kernel)(OutT*, float*, const uint16_t*, int, int, int, uint32_t, uint64_t, uint32_t, float, float);
    if (tc_baseline() || tc_forward_smem<HD>() > sg_smem_optin()) {
        tc_forward_baseline_launch<HD, OutT, TcBf16>(out, lse, qkv, B, T, NH, NKV, g0, seed, drop);
        return;
    }
    constexpr int NW = TcShape<HD>::fwd_nw, BQ = 16 * NW;
    kernel = flash_tc_forward_kernel<HD, NW, OutT>;
    const size_t smem = tc_forward_smem<HD>();
    tc_smem_optin(kernel, smem);
    dim3 grid((unsigned)(B * NH), sg_ceil_div((size_t)T, BQ));
    SG_LAUNCH(kernel, grid, dim3(32 * NW), smem, out, lse, qkv, T, NH, NKV, g0, seed, drop.thr, drop.scale, sigma);
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

/* The scratch of the split and baseline backward: D (B, NH, T); with grouped-query heads (NKV < NH)
 * also the per-query-head partial sums of dK and dV, (B, T, NH, HD) each, that pass 1 leaves for
 * attention_group_sum_cuda. */
static size_t tc_split_scratch_floats(int B, int T, int NH, int NKV, int HD) {
    const size_t partial = NKV < NH ? 2 * tc_round16((size_t)B * T * NH * HD) : 0;
    return tc_round16((size_t)B * NH * T) + partial;
}

/* The one-kernel backward's dQ slices (tc_dq_slice_tile): a head's take nqt (nqt + 1) / 2 tiles of
 * 64 x HD floats (2.2 MB at T 1024, HD 64). The kernel runs on a chunk of heads at a time: as many
 * as the budget's floats hold, but never fewer than make min_blocks blocks (key tiles x heads: a
 * launch of a few heads would leave most multiprocessors idle), at least one. By default 128 MiB
 * and 1024 blocks: GPT-2 124M's B16 T1024 step runs 64 heads a launch (142 MB of slices, three
 * launches), T 4096 D64 16 heads (545 MB). The tests change both to run several chunks. */
static size_t tc_dq_budget = ATTENTION_TC_DQ_BUDGET;
static int tc_dq_min_blocks = ATTENTION_TC_DQ_MIN_BLOCKS;
extern "C" void attention_tc_dq_chunking(size_t budget_floats, int min_blocks) {
    tc_dq_budget = budget_floats;
    tc_dq_min_blocks = min_blocks;
}
static size_t tc_dq_head_floats(int T, int HD) {
    return tc_dq_slice_tile((T + TC_BQ - 1) / TC_BQ, 0) * TC_BQ * (size_t)HD;
}
static int tc_dq_chunk(int B, int T, int NH, int HD) {
    const size_t nkt = (size_t)(T + TC_BK - 1) / TC_BK, n_bh = (size_t)B * NH;
    size_t chunk = tc_dq_budget / tc_dq_head_floats(T, HD);
    const size_t least = ((size_t)(tc_dq_min_blocks > 0 ? tc_dq_min_blocks : 0) + nkt - 1) / nkt;
    if (chunk < least) chunk = least;
    return (int)(chunk < 1 ? 1 : chunk > n_bh ? n_bh : chunk);
}

/* The scratch: the split one, then the dQ slices of one chunk of heads (counted whatever
 * SEEDGPT_ATTN_BACKWARD says, since it is read at every call). */
extern "C" size_t attention_backward_tc_scratch_floats(int B, int T, int NH, int NKV, int HD) {
    const size_t split = tc_split_scratch_floats(B, T, NH, NKV, HD);
    if (B <= 0 || T <= 0 || !attention_tc_supports_hd(HD)) return split;
    return split + tc_round16((size_t)tc_dq_chunk(B, T, NH, HD) * tc_dq_head_floats(T, HD));
}

/* Where the pipelined backward keeps dO rounded to bf16: in dqkv's dq columns, which nothing reads
 * or writes before dQ's pass writes them. The bf16 dO of (b, i, h) takes the first half of the
 * bytes of dq (b, i, h): dob + (b T + i) dob_stride + 2 h HD with dob = (uint16_t*)dqkv,
 * dob_stride = 2 QKV. The D pass writes it; dK/dV's pass reads it (and writes only dk, dv or the scratch);
 * each dQ block reads the dO rows of its own queries and heads into shared memory first, and
 * overwrites those same slots with their dq last, and no other block touches them. So the
 * backward needs no memory beyond today's scratch. */
static uint16_t* tc_dob(float* dqkv) { return (uint16_t*)dqkv; }
static size_t tc_dob_stride(int NH, int NKV, int HD) { return 2 * (size_t)(NH + 2 * NKV) * HD; }

/* The baseline backward's passes 1 and 2 with operands Op (pass 0, D, is the caller's) */
template <int HD, typename Op>
static void tc_backward_baseline_launch(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv,
                                        const float* lse, int B, int T, int NH, int NKV, uint32_t g0, uint64_t seed,
                                        Dropout drop) {
    const float sigma = 1.0f / sqrtf((float)HD);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const float* D = scratch;
    float* dKp = scratch + tc_round16((size_t)B * NH * T);
    float* dVp = dKp + tc_round16((size_t)B * T * NH * HD);
    dim3 grid1((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BK));
    float* dk_out = NKV == NH ? dqkv + (size_t)NH * HD : dKp;
    float* dv_out = NKV == NH ? dqkv + (size_t)(NH + NKV) * HD : dVp;
    const size_t out_stride = NKV == NH ? QKV : (size_t)NH * HD;
    const float k_scale = NKV == NH ? sigma : 1.0f;
    const size_t smem1 = tc_dkdv_smem_baseline<HD>(), smem2 = tc_dq_smem_baseline<HD>();
    tc_smem_optin(flash_tc_dkdv_kernel_baseline<HD, Op>, smem1);
    tc_smem_optin(flash_tc_dq_kernel_baseline<HD, Op>, smem2);
    void (*dkdv)(float*, float*, size_t, float, const float*, const uint16_t*, const float*, const float*, int, int,
                 int, uint32_t, uint64_t, uint32_t, float, float) = flash_tc_dkdv_kernel_baseline<HD, Op>;
    SG_LAUNCH(dkdv, grid1, dim3(TC_THREADS), smem1, dk_out, dv_out, out_stride, k_scale, dout, qkv, lse, D, T, NH,
              NKV, g0, seed, drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
    if (NKV != NH) attention_group_sum_cuda(dqkv, dKp, dVp, B, T, NH, NKV, HD, sigma);
    dim3 grid2((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BQ));
    void (*dq)(float*, const float*, const uint16_t*, const float*, const float*, int, int, int, uint32_t, uint64_t,
               uint32_t, float, float) = flash_tc_dq_kernel_baseline<HD, Op>;
    SG_LAUNCH(dq, grid2, dim3(TC_THREADS), smem2, dqkv, dout, qkv, lse, D, T, NH, NKV, g0, seed, drop.thr, drop.scale,
              sigma);
    SG_CHECK_LAUNCH();
}

template <int HD>
static void flash_tc_backward_launch(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv,
                                     const float* lse, int B, int T, int NH, int NKV, uint32_t g0, uint64_t seed,
                                     Dropout drop, int baseline) {
    const float sigma = 1.0f / sqrtf((float)HD);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const float* D = scratch;
    const uint16_t* dob = tc_dob(dqkv);
    const size_t dob_stride = tc_dob_stride(NH, NKV, HD);
    float* dKp = scratch + tc_round16((size_t)B * NH * T);
    float* dVp = dKp + tc_round16((size_t)B * T * NH * HD);
    dim3 grid1((unsigned)(B * NH), sg_ceil_div((size_t)T, TC_BK));
    /* one query head per kv head: dK, dV straight into dqkv; else partial sums per query head,
     * then the group's sum in a fixed order */
    float* dk_out = NKV == NH ? dqkv + (size_t)NH * HD : dKp;
    float* dv_out = NKV == NH ? dqkv + (size_t)(NH + NKV) * HD : dVp;
    const size_t out_stride = NKV == NH ? QKV : (size_t)NH * HD;
    const float k_scale = NKV == NH ? sigma : 1.0f;
    if (baseline) {
        tc_backward_baseline_launch<HD, TcBf16>(dqkv, scratch, dout, qkv, lse, B, T, NH, NKV, g0, seed, drop);
        return;
    }
    if (tc_use_fused(HD)) {
        /* one kernel: dK, dV and the dQ slices of a chunk of heads, then the slices summed */
        float* slices = scratch + tc_split_scratch_floats(B, T, NH, NKV, HD);
        const int n_bh = B * NH, chunk = tc_dq_chunk(B, T, NH, HD);
        const size_t smem = tc_fused_smem<HD>();
        tc_smem_optin(flash_tc_bwd_kernel<HD>, smem);
        for (int bh0 = 0; bh0 < n_bh; bh0 += chunk) {
            const int n = min(chunk, n_bh - bh0);
            SG_LAUNCH(flash_tc_bwd_kernel<HD>, dim3((unsigned)n, grid1.y), dim3(TC_THREADS), smem, dk_out, dv_out,
                      out_stride, k_scale, dob, dob_stride, qkv, lse, D, T, NH, NKV, g0, seed, drop.thr, drop.scale,
                      sigma, slices, bh0);
            SG_CHECK_LAUNCH();
            const size_t threads = (size_t)n * T * (HD / 4);
            SG_LAUNCH(flash_tc_dq_sum_kernel<HD>, dim3(sg_ceil_div(threads, 256)), dim3(256), 0, dqkv, slices, bh0, n,
                      T, NH, NKV, sigma);
            SG_CHECK_LAUNCH();
        }
        if (NKV != NH) attention_group_sum_cuda(dqkv, dKp, dVp, B, T, NH, NKV, HD, sigma);
        return;
    }
    /* split: dK/dV (K, V, two stages of (Q, dO: (BQ, LD) bf16 each; LSE, D: BQ floats each), keep
     * words), then dQ */
    const size_t smem1 = tc_dkdv_smem<HD>();
    tc_smem_optin(flash_tc_dkdv_kernel<HD>, smem1);
    SG_LAUNCH(flash_tc_dkdv_kernel<HD>, grid1, dim3(TC_THREADS), smem1, dk_out, dv_out, out_stride, k_scale, dob,
              dob_stride, qkv, lse, D, T, NH, NKV, g0, seed, drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
    if (NKV != NH) attention_group_sum_cuda(dqkv, dKp, dVp, B, T, NH, NKV, HD, sigma);
    /* dQ: Q, dO (BQ, LD) each, two stages of K, V, keep words */
    constexpr int NW = TcShape<HD>::dq_nw, BQ = 16 * NW;
    void (*dq)(float*, const uint16_t*, size_t, const uint16_t*, const float*, const float*, int, int, int,
               uint32_t, uint64_t, uint32_t, float, float) = flash_tc_dq_kernel<HD, NW>;
    const size_t smem2 = tc_dq_smem<HD>();
    tc_smem_optin(dq, smem2);
    dim3 grid2((unsigned)(B * NH), sg_ceil_div((size_t)T, BQ));
    SG_LAUNCH(dq, grid2, dim3(32 * NW), smem2, dqkv, dob, dob_stride, qkv, lse, D, T, NH, NKV, g0, seed, drop.thr,
              drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

/* Pass 0: D into the scratch, and for the pipelined kernels dO in bf16 into dqkv's dq columns
 * (tc_dob); out: the forward's o, fp32 or the bf16 table's bits. */
static void tc_dot(int baseline, float* dqkv, float* scratch, const float* dout, const float* out, int B, int T,
                   int NH, int NKV, int HD) {
    if (baseline) { attention_backward_dot_cuda(scratch, dout, out, B, T, NH, HD); return; }
    SG_LAUNCH(flash_tc_dot_kernel<float>, dim3(sg_ceil_div((size_t)B * NH * T, 8)), dim3(256), 0, scratch,
              tc_dob(dqkv), tc_dob_stride(NH, NKV, HD), dout, out, B, T, NH, HD);
    SG_CHECK_LAUNCH();
}
static void tc_dot(int baseline, float* dqkv, float* scratch, const float* dout, const uint16_t* out, int B, int T,
                   int NH, int NKV, int HD) {
    if (baseline) { attention_backward_dot_bf16_cuda(scratch, dout, out, B, T, NH, HD); return; }
    SG_LAUNCH(flash_tc_dot_kernel<uint16_t>, dim3(sg_ceil_div((size_t)B * NH * T, 8)), dim3(256), 0, scratch,
              tc_dob(dqkv), tc_dob_stride(NH, NKV, HD), dout, out, B, T, NH, HD);
    SG_CHECK_LAUNCH();
}
/* pass 0, then passes 1 and 2 */
template <typename OutT>
static void flash_tc_backward(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_bf16, const OutT* out,
                              const float* lse, int B, int T, int NH, int NKV, int HD, uint32_t g0,
                              uint64_t attn_seed, Dropout drop) {
    const int baseline = tc_baseline() || !tc_backward_fits(HD);
    if ((uintptr_t)dqkv % 16 != 0) {   /* it holds the bf16 dO, read 16 bytes at a time */
        fprintf(stderr, "seedgpt: attention backward (tensor cores): dqkv %p must be 16-byte aligned\n", (void*)dqkv);
        exit(1);
    }
    tc_dot(baseline, dqkv, scratch, dout, out, B, T, NH, NKV, HD);
    switch (HD) {
    case 16: flash_tc_backward_launch<16>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop, baseline); break;
    case 32: flash_tc_backward_launch<32>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop, baseline); break;
    case 64: flash_tc_backward_launch<64>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop, baseline); break;
    default: flash_tc_backward_launch<128>(dqkv, scratch, dout, qkv_bf16, lse, B, T, NH, NKV, g0, attn_seed, drop, baseline); break;
    }
}

extern "C" void attention_backward_tc_cuda(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_bf16,
                                           const float* out, const float* lse, int B, int T, int NH, int NKV, int HD,
                                           uint32_t g0, uint64_t attn_seed, Dropout drop) {
    tc_check_shapes("attention_backward_tc_cuda", qkv_bf16, NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_backward_tc_cuda", T);
    flash_tc_backward(dqkv, scratch, dout, qkv_bf16, out, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

/* ---- sm_75: the baseline kernels with fp16 operands (TcF16) ----------------------------------
 * Turing has mma.sync m16n8k8 in fp16 but no bf16 mma and no cp.async, so it takes the baseline
 * kernels (plain shared-memory loads) with TcF16: q, k, v in fp16, P, dO, m p scale and ds rounded
 * to fp16 where the bf16 kernels round to bf16, everything else (scores, softmax, LSE, D, the
 * tile sums) the same fp32 arithmetic, and the same keep bits (philox_attn_draw4 at the same
 * coordinates). Their shared memory must fit the device (sg_smem_optin): on sm_75's 64 KiB every
 * head dim but 128, whose backward takes 69 KiB. */
static int tc_f16_fits(int HD) {
    const size_t limit = sg_smem_optin();
    switch (HD) {
    case 16: return tc_dkdv_smem_baseline<16>() <= limit && tc_dq_smem_baseline<16>() <= limit;
    case 32: return tc_dkdv_smem_baseline<32>() <= limit && tc_dq_smem_baseline<32>() <= limit;
    case 64: return tc_dkdv_smem_baseline<64>() <= limit && tc_dq_smem_baseline<64>() <= limit;
    case 128: return tc_dkdv_smem_baseline<128>() <= limit && tc_dq_smem_baseline<128>() <= limit;
    default: return 0;
    }
}

extern "C" int attention_tc_f16_supports_hd(int HD) { return tc_f16_fits(HD); }

static void tc_f16_check(const char* fn, const uint16_t* qkv_f16, int NH, int NKV, int HD) {
    tc_check_shapes(fn, qkv_f16, NH, NKV, HD);
    if (!tc_f16_fits(HD)) {
        fprintf(stderr, "seedgpt: %s: head dim %d: the fp16 tensor-core kernels need %zu bytes of shared memory a "
                "block and this device allows %zu (head dims 16, 32, 64 fit sm_75)\n", fn, HD,
                HD == 128 ? tc_dkdv_smem_baseline<128>() : (size_t)0, sg_smem_optin());
        exit(1);
    }
}

extern "C" void attention_forward_tc_f16_cuda(float* out, float* lse, const uint16_t* qkv_f16, int B, int T, int NH,
                                              int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    tc_f16_check("attention_forward_tc_f16_cuda", qkv_f16, NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_forward_tc_f16_cuda", T);
    switch (HD) {
    case 16: tc_forward_baseline_launch<16, float, TcF16>(out, lse, qkv_f16, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 32: tc_forward_baseline_launch<32, float, TcF16>(out, lse, qkv_f16, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 64: tc_forward_baseline_launch<64, float, TcF16>(out, lse, qkv_f16, B, T, NH, NKV, g0, attn_seed, drop); break;
    default: tc_forward_baseline_launch<128, float, TcF16>(out, lse, qkv_f16, B, T, NH, NKV, g0, attn_seed, drop); break;
    }
}

extern "C" void attention_backward_tc_f16_cuda(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_f16,
                                               const float* out, const float* lse, int B, int T, int NH, int NKV,
                                               int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    tc_f16_check("attention_backward_tc_f16_cuda", qkv_f16, NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_backward_tc_f16_cuda", T);
    attention_backward_dot_cuda(scratch, dout, out, B, T, NH, HD);   /* D, fp32 */
    switch (HD) {
    case 16: tc_backward_baseline_launch<16, TcF16>(dqkv, scratch, dout, qkv_f16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 32: tc_backward_baseline_launch<32, TcF16>(dqkv, scratch, dout, qkv_f16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    case 64: tc_backward_baseline_launch<64, TcF16>(dqkv, scratch, dout, qkv_f16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    default: tc_backward_baseline_launch<128, TcF16>(dqkv, scratch, dout, qkv_f16, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
    }
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
 * and the forward writes o rounded once to bf16 (flash_tc_forward_kernel<HD, NW, uint16_t>; the
 * same arithmetic as the fp32-output kernel, only the store rounds). The backward reads that bf16
 * o for D_i = do_i . o_i (flash_tc_dot_kernel<uint16_t>, or attention_backward_dot_bf16_cuda for
 * the baseline kernels) and qkv for its tiles. The CPU's twin is
 * attention/flash_bf16_cpu.c, which stores the same way.
 * A head dim the tensor-core kernels do not take goes through the fp32 kernels on the bf16 values,
 * widened to fp32 into scratch (the forward's grow-only block, reserved at build; the backward's
 * part of its `scratch`), the forward's fp32 o rounded into out: the same stored bf16 inputs and
 * outputs, fp32 products (P is not rounded before P V there). */

/* dst (n) fp32 = the 16-bit elements src (n), exact: ActT uint16_t (bf16) or sg_h16 (fp16) */
template <typename ActT>
__global__ void flash_tc_widen_kernel(float* dst, const ActT* src, size_t n) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) dst[e] = act_load(src, e);
}
__global__ void flash_tc_round_f16_kernel(uint16_t* dst, const float* src, size_t n) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) dst[e] = sg_f16_bits_rn(src[e]);
}
/* dst (n) fp32 = src's 16-bit elements: fp16 when f16, else bf16 */
static void tc_widen(int f16, float* dst, const void* src, size_t n) {
    if (n == 0) return;
    if (f16)
        SG_LAUNCH(flash_tc_widen_kernel<sg_h16>, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dst, (const sg_h16*)src, n);
    else
        SG_LAUNCH(flash_tc_widen_kernel<uint16_t>, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dst, (const uint16_t*)src,
                  n);
    SG_CHECK_LAUNCH();
}

/* The 16-bit tables' fallback (a head dim, or for fp16 a device, the tensor-core kernels do not
 * take): the fp32 kernels on the stored values widened into scratch, the forward's fp32 o rounded
 * once into out. Forward scratch (bytes, the grow-only block): [qkv as fp32][o as fp32]; backward
 * scratch (floats, the caller's): [the fp32 kernel's scratch][qkv as fp32][o as fp32]. */
static size_t act_fallback_forward_bytes(int B, int T, int NH, int NKV, int HD) {
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    return (tc_round16(n_qkv) + tc_round16(n_out)) * sizeof(float);
}
static size_t act_fallback_backward_floats(int B, int T, int NH, int NKV, int HD) {
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    return tc_round16(attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1)) + tc_round16(n_qkv) +
           tc_round16(n_out);
}
static void act_fallback_forward(int f16, const char* fn, void* out, float* lse, const void* qkv, int B, int T, int NH,
                                 int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T(fn, T);   /* before the scratch */
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    float* q32 = (float*)tc_forward_scratch(act_fallback_forward_bytes(B, T, NH, NKV, HD));
    float* o32 = q32 + tc_round16(n_qkv);
    tc_widen(f16, q32, qkv, n_qkv);
    attention_forward_cuda(o32, lse, q32, B, T, NH, NKV, HD, g0, attn_seed, drop);
    if (!f16) { tc_round_bits((uint16_t*)out, o32, n_out); return; }
    if (n_out == 0) return;
    SG_LAUNCH(flash_tc_round_f16_kernel, dim3(sg_ceil_div(n_out, 256)), dim3(256), 0, (uint16_t*)out, o32, n_out);
    SG_CHECK_LAUNCH();
}
static void act_fallback_backward(int f16, const char* fn, float* dqkv, float* scratch, const float* dout,
                                  const void* qkv, const void* out, const float* lse, int B, int T, int NH, int NKV,
                                  int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T(fn, T);
    const size_t n_qkv = (size_t)B * T * (NH + 2 * NKV) * HD, n_out = (size_t)B * T * NH * HD;
    float* q32 = scratch + tc_round16(attention_backward_scratch_floats_cuda(B, T, NH, NKV, HD, 1));
    float* o32 = q32 + tc_round16(n_qkv);
    tc_widen(f16, q32, qkv, n_qkv);
    tc_widen(f16, o32, out, n_out);
    attention_backward_cuda(dqkv, scratch, dout, q32, o32, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

extern "C" size_t attention_forward_act_scratch_bytes_bf16_cuda(int B, int T, int NH, int NKV, int HD) {
    if (B <= 0 || T <= 0 || attention_tc_supports_hd(HD)) return 0;
    return act_fallback_forward_bytes(B, T, NH, NKV, HD);
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
    act_fallback_forward(0, "attention_forward_bf16_act_cuda", out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

/* tensor-core path: the tc scratch; fallback: [the fp32 kernel's scratch][qkv as fp32][o as fp32] */
extern "C" size_t attention_backward_act_scratch_floats_bf16_cuda(int B, int T, int NH, int NKV, int HD,
                                                                  int nthreads) {
    (void)nthreads;   /* no per-thread tiles on the GPU */
    if (attention_tc_supports_hd(HD)) return attention_backward_tc_scratch_floats(B, T, NH, NKV, HD);
    return act_fallback_backward_floats(B, T, NH, NKV, HD);
}

extern "C" void attention_backward_bf16_act_cuda(float* dqkv, float* scratch, const float* dout, const void* qkv,
                                                 const void* out, const float* lse, int B, int T, int NH, int NKV,
                                                 int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    const char* fn = "attention_backward_bf16_act_cuda";
    if (attention_tc_supports_hd(HD)) {
        tc_check_shapes(fn, (const uint16_t*)qkv, NH, NKV, HD);
        if (B <= 0 || T <= 0) return;
        attention_cuda_check_T(fn, T);
        flash_tc_backward(dqkv, scratch, dout, (const uint16_t*)qkv, (const uint16_t*)out, lse, B, T, NH, NKV, HD, g0,
                          attn_seed, drop);
        return;
    }
    act_fallback_backward(0, fn, dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

/* ---- the fp16 table's attention: q, k, v and o stored in fp16 ----------------------------------- */
/* Under --precision fp16 the CUDA table stores qkv and o in fp16 (cuda/act.h's sg_h16). Where the
 * device has fp16 tensor cores (sm_75 and newer, with code for them: cuda/arch.h's
 * fp16_tensor_cores, which the table passes as tensor_cores) and the head dim's kernels fit its
 * shared memory (attention_tc_f16_supports_hd), the sm_75 kernels above (TcF16: two mma.sync
 * m16n8k8) read qkv in place and write o rounded once to fp16; the backward reads that o for D
 * (attention_backward_dot_fp16_cuda) and rounds dO, m p scale and ds to fp16 as they become mma
 * operands. The CPU's twin is attention/flash_fp16_cpu.c, which rounds at the same sites.
 * Elsewhere (sm_70, a head dim they do not take): the fp32 kernels on the fp16 values widened into
 * scratch, the forward's o rounded into out, as the bf16 table's fallback. */

static int tc_f16_path(int tensor_cores, int HD) { return tensor_cores && tc_f16_fits(HD); }

extern "C" size_t attention_forward_act_scratch_bytes_fp16_cuda(int tensor_cores, int B, int T, int NH, int NKV,
                                                                int HD) {
    if (B <= 0 || T <= 0 || tc_f16_path(tensor_cores, HD)) return 0;
    return act_fallback_forward_bytes(B, T, NH, NKV, HD);
}

extern "C" void attention_reserve_forward_act_scratch_fp16_cuda(int tensor_cores, int B, int T, int NH, int NKV,
                                                                int HD) {
    const size_t bytes = attention_forward_act_scratch_bytes_fp16_cuda(tensor_cores, B, T, NH, NKV, HD);
    if (bytes > 0) (void)tc_forward_scratch(bytes);
}

extern "C" void attention_forward_fp16_act_cuda(int tensor_cores, void* out, float* lse, const void* qkv, int B,
                                                int T, int NH, int NKV, int HD, uint32_t g0, uint64_t attn_seed,
                                                Dropout drop) {
    const char* fn = "attention_forward_fp16_act_cuda";
    if (tc_f16_path(tensor_cores, HD)) {
        tc_f16_check(fn, (const uint16_t*)qkv, NH, NKV, HD);
        if (B <= 0 || T <= 0) return;
        attention_cuda_check_T(fn, T);
        const uint16_t* q = (const uint16_t*)qkv;
        sg_h16* o = (sg_h16*)out;
        switch (HD) {
        case 16: tc_forward_baseline_launch<16, sg_h16, TcF16>(o, lse, q, B, T, NH, NKV, g0, attn_seed, drop); break;
        case 32: tc_forward_baseline_launch<32, sg_h16, TcF16>(o, lse, q, B, T, NH, NKV, g0, attn_seed, drop); break;
        case 64: tc_forward_baseline_launch<64, sg_h16, TcF16>(o, lse, q, B, T, NH, NKV, g0, attn_seed, drop); break;
        default: tc_forward_baseline_launch<128, sg_h16, TcF16>(o, lse, q, B, T, NH, NKV, g0, attn_seed, drop); break;
        }
        return;
    }
    act_fallback_forward(1, fn, out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop);
}

/* tensor-core path: the tc scratch; fallback: [the fp32 kernel's scratch][qkv as fp32][o as fp32] */
extern "C" size_t attention_backward_act_scratch_floats_fp16_cuda(int tensor_cores, int B, int T, int NH, int NKV,
                                                                  int HD, int nthreads) {
    (void)nthreads;   /* no per-thread tiles on the GPU */
    if (tc_f16_path(tensor_cores, HD)) return tc_split_scratch_floats(B, T, NH, NKV, HD);   /* baseline kernels */
    return act_fallback_backward_floats(B, T, NH, NKV, HD);
}

extern "C" void attention_backward_fp16_act_cuda(int tensor_cores, float* dqkv, float* scratch, const float* dout,
                                                 const void* qkv, const void* out, const float* lse, int B, int T,
                                                 int NH, int NKV, int HD, uint32_t g0, uint64_t attn_seed,
                                                 Dropout drop) {
    const char* fn = "attention_backward_fp16_act_cuda";
    if (tc_f16_path(tensor_cores, HD)) {
        tc_f16_check(fn, (const uint16_t*)qkv, NH, NKV, HD);
        if (B <= 0 || T <= 0) return;
        attention_cuda_check_T(fn, T);
        const uint16_t* q = (const uint16_t*)qkv;
        attention_backward_dot_fp16_cuda(scratch, dout, out, B, T, NH, HD);   /* D, from the fp16 o */
        switch (HD) {
        case 16: tc_backward_baseline_launch<16, TcF16>(dqkv, scratch, dout, q, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
        case 32: tc_backward_baseline_launch<32, TcF16>(dqkv, scratch, dout, q, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
        case 64: tc_backward_baseline_launch<64, TcF16>(dqkv, scratch, dout, q, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
        default: tc_backward_baseline_launch<128, TcF16>(dqkv, scratch, dout, q, lse, B, T, NH, NKV, g0, attn_seed, drop); break;
        }
        return;
    }
    act_fallback_backward(1, fn, dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, g0, attn_seed, drop);
}
