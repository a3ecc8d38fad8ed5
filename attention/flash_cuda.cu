/* attention/flash_cuda.cu — the CUDA twin of attention/flash_cpu.c: causal multi-head attention
 * with grouped-query heads and dropout on the attention probabilities, forward and backward,
 * fused (DESIGN §5). Same signatures, layouts and keep bits as the CPU kernel
 * (attention/attention_cuda.h); every pointer is device memory.
 *
 * Owns: the CUDA tiling, the online softmax on the GPU and the deterministic partitioning of its
 * backward. Every keep bit comes from random/philox.h (philox_attn_draw4, the same counters
 * the CPU uses), so the masks are bit-identical to the CPU's. Uses only what cuda/device.h
 * names, so it also builds as C++ against the emulation (make test-cuda-emu).
 *
 * Per head (sigma = 1/sqrt(HD), causal j <= i, keep bit m_ij, scale = 1/(1-p)):
 *   s_ij = sigma q_i.k_j    LSE_i = log sum_j exp(s_ij)    p_ij = exp(s_ij - LSE_i)
 *   o_i  = sum_j (m_ij p_ij scale) v_j
 *   dv_j = sum_i (m p scale)_ij do_i     dp_ij = m_ij scale do_i.v_j     ds_ij = p_ij (dp_ij - D_i)
 *   dq_i = sigma sum_j ds_ij k_j          dk_j  = sigma sum_i ds_ij q_i   D_i = do_i.o_i
 *
 * Tiles of BQ = 64 queries by BK = 64 keys, one block of 256 threads per tile of work, all fp32.
 * Every block uses one thread layout, ty = thread / 16 (0..15), tx = thread % 16:
 *   - score phase: thread (ty, tx) computes the 4 x 4 scores of queries 4 ty + a (a = 0..3) and
 *     keys key_of(tx, k) (k = 0..3) = 32 (tx / 8) + tx % 8 + 8 k. Those four keys are j, j+8,
 *     j+16, j+24 of one aligned block of 32, which is what one Philox call covers: one call per
 *     query row gives the thread its four keep bits. A query row's 64 keys sit in the 16 threads
 *     of one half warp, so the row max and row sum are half-warp shuffles.
 *   - product phase: thread (ty, tx) owns 4 rows (queries, or the keys of slots 4 ty .. 4 ty + 3
 *     in the dK/dV pass) by the head dims 4 tx + 64 m + x (m < NDM, x < 4): NDM = 1 for HD <= 64,
 *     2 for HD <= 128. HD above 128 is refused.
 * Q, K, V and dO tiles sit in shared memory row-major with a row stride of ld = HD rounded up to
 * 8, plus 4 floats (rows 4 banks apart: the 16-byte loads of a quarter warp hit distinct banks),
 * zero-filled past HD and past T, so padding contributes exact zeros.
 *
 * Backward: a pass for D_i = do_i.o_i, a dK/dV pass partitioned over (sequence, query head, key
 * tile) and a dQ pass over (sequence, query head, query tile). With grouped-query heads the dK/dV
 * pass leaves one partial sum per query head in the scratch and a last small kernel adds a group's
 * partials in ascending head order (one block per kv head would leave a GQA model with a fraction
 * of the blocks the GPU can run at once).
 *
 * Determinism (DESIGN §5): no float atomics. Every output element is written by one thread, which
 * sums its terms in a fixed order: the scores over d ascending, o and dq over the key tiles and
 * the keys ascending, dk and dv over the query tiles and the queries ascending, then over the
 * group's query heads ascending. Results are identical run to run; they differ from the CPU's in
 * the last bits (expf, the order of the row sums and of the GQA group sum), never in a keep bit.
 */
#include "cuda/device.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include "attention/attention_cuda.h"
#include "cuda/act.h"

#define FBQ 64                  /* queries per tile */
#define FBK 64                  /* keys per tile (a multiple of 32: whole Philox blocks) */
#define FTHREADS 256            /* threads per block: 16 x 16 */
#define FLASH_MAX_HD 128        /* the largest head dim the product phase holds (NDM = 2) */
#define FLASH_LDP (FBQ + 4)     /* row stride of the probability tiles (BQ = BK) */
#define FULL_MASK 0xffffffffu

/* Register bounds for nvcc (the emulation has no registers to bound): a kernel whose shared memory
 * lets two blocks share an SM is held to 128 registers a thread so that they do. */
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

/* Row stride of the shared memory tiles: HD rounded up to 8 floats, plus 4. */
#define FLASH_LD(HD) ((((HD) + 7) & ~7) + 4)

/* Four floats moved as one 16-byte shared memory access. */
struct alignas(16) F4 {
    float x, y, z, w;
};
__device__ __forceinline__ F4 ld4(const float* p) { return *reinterpret_cast<const F4*>(p); }
__device__ __forceinline__ void st4(float* p, float x, float y, float z, float w) {
    F4 v = {x, y, z, w};
    *reinterpret_cast<F4*>(p) = v;
}
__device__ __forceinline__ float f4_at(const F4& v, int x) {
    return x == 0 ? v.x : x == 1 ? v.y : x == 2 ? v.z : v.w;
}

/* Key (within its tile) of the k-th score column of thread tx: one aligned block of 32, 8 apart. */
__device__ __forceinline__ int key_of(int tx, int k) { return ((tx >> 3) << 5) + (tx & 7) + (k << 3); }

/* acc[0..3] += w * v, one fused multiply-add per element */
__device__ __forceinline__ void fma4(float* acc, float w, const F4& v) {
    acc[0] = fmaf(w, v.x, acc[0]);
    acc[1] = fmaf(w, v.y, acc[1]);
    acc[2] = fmaf(w, v.z, acc[2]);
    acc[3] = fmaf(w, v.w, acc[3]);
}

/* The product phase: acc[a][4 m + x] += sum over rows c < n, ascending, of W[c][4 ty + a] times
 * X[c][4 tx + 64 m + x], for the head dims below width. W is a transposed weight tile (row stride
 * FLASH_LDP), X a Q/K/V/dO tile (row stride ld). */
template <int NDM>
__device__ __forceinline__ void tile_mac(float (&acc)[4][4 * NDM], const float* W, const float* X,
                                         int ld, int n, int width, int tx, int ty) {
    for (int m = 0; m < NDM; m++) {
        const int d0 = 4 * tx + 64 * m;
        if (d0 >= width) continue;
        for (int c = 0; c < n; c++) {
            const F4 w = ld4(W + c * FLASH_LDP + 4 * ty);
            const F4 x = ld4(X + c * ld + d0);
            for (int a = 0; a < 4; a++) fma4(&acc[a][4 * m], f4_at(w, a), x);
        }
    }
}

/* Max and sum over the 16 threads of a half warp that hold one query row. The butterfly gives all
 * 16 the same bits (each step adds the same two numbers, in either order). */
__device__ __forceinline__ float row_max16(float v) {
    for (int off = 8; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}
__device__ __forceinline__ float row_sum16(float v) {
    for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

/* dst (rows, ld) = n_valid rows of HD floats at src (row stride `stride`), zero past HD (up to the
 * rounded width <= 128) and past n_valid. The block reads blockDim / width whole rows at a time,
 * one float a thread (consecutive threads, consecutive floats). */
__device__ __forceinline__ void load_tile(float* dst, int ld, const float* src, size_t stride,
                                          int n_valid, int rows, int HD) {
    const int width = (HD + 7) & ~7, rows_per_pass = blockDim.x / width;
    const int r0 = threadIdx.x / width, d = threadIdx.x - r0 * width;
    if (r0 >= rows_per_pass) return;
    for (int r = r0; r < rows; r += rows_per_pass)
        dst[r * ld + d] = (r < n_valid && d < HD) ? src[(size_t)r * stride + d] : 0.0f;
}

/* s[a][k] = q(4 ty + a) . k(key_of(tx, k)) over d ascending, one fused multiply-add each (the
 * CPU's chain). A: (BQ, ld) rows of queries; Bm: (BK, ld) rows of keys. */
__device__ __forceinline__ void score_zero(float s[4][4]) {
    for (int a = 0; a < 4; a++)
        for (int k = 0; k < 4; k++) s[a][k] = 0.0f;
}
/* s[a][k] += the terms of head dims 0 .. width-1 of A and Bm, d ascending */
__device__ __forceinline__ void score_acc(float s[4][4], const float* A, const float* Bm, int ld,
                                          int width, int ty, int tx) {
    for (int d = 0; d < width; d += 4) {
        F4 qa[4], kb[4];
        for (int a = 0; a < 4; a++) qa[a] = ld4(A + (4 * ty + a) * ld + d);
        for (int k = 0; k < 4; k++) kb[k] = ld4(Bm + key_of(tx, k) * ld + d);
        for (int a = 0; a < 4; a++)
            for (int k = 0; k < 4; k++) {
                s[a][k] = fmaf(qa[a].x, kb[k].x, s[a][k]);
                s[a][k] = fmaf(qa[a].y, kb[k].y, s[a][k]);
                s[a][k] = fmaf(qa[a].z, kb[k].z, s[a][k]);
                s[a][k] = fmaf(qa[a].w, kb[k].w, s[a][k]);
            }
    }
}
__device__ __forceinline__ void score_tile(float s[4][4], const float* A, const float* Bm, int ld,
                                           int width, int ty, int tx) {
    score_zero(s);
    score_acc(s, A, Bm, ld, width, ty, tx);
}

/* The four keep bits of query i against keys key_of(tx, 0..3) of the tile at j0: one Philox call
 * (DESIGN §3: counter (i, (jblock32 << 3) | (j & 7), h, g), word (j >> 3) & 3 = k). */
__device__ __forceinline__ void keep4(int keep[4], uint64_t seed, uint32_t g, uint32_t h, int i,
                                      int j0, int tx, uint32_t thr) {
    uint32_t draw[4];
    philox_attn_draw4(seed, g, h, (uint32_t)i, (uint32_t)((j0 >> 5) + (tx >> 3)), (uint32_t)(tx & 7),
                      draw);
    for (int k = 0; k < 4; k++) keep[k] = draw[k] >= thr;
}

/* ---- the lean layout: every tile streamed through shared memory 64 columns at a time ----------
 * The layout above holds whole rows of Q, K, V and dO: 68 KiB (forward), 102 KiB (dK/dV) and 85
 * KiB (dQ) at HD = 64, up to 170 KiB at HD = 128, more than a T4 (64 KiB a block) or a V100 (96
 * KiB) lets a block take. Where the device's limit (sg_smem_optin) is below a kernel's need, the
 * host launches its LEAN instance: two (64, FLASH_LDC) buffers for the row tiles and one
 * (64, FLASH_LDP) tile of weights, 51 KiB whatever HD is. The score phase streams both operands
 * through the two buffers one chunk of 64 head dims at a time, carrying the 4 x 4 sums in
 * registers, so each score is the same chain of fused multiply-adds over d ascending; the product
 * phase loads the chunk of V (K, Q, dO) whose head dims 64 m .. 64 m + 63 it multiplies. Every
 * sum keeps its terms and its order, so the LEAN instances give the bits of the others (the tiles
 * are re-read from global memory per chunk instead: slower, never different). */
#define FLASH_LDC (64 + 4)      /* row stride of a 64-column chunk */

/* The rows first .. first + rows - 1 of a (n, stride) array, those outside 0 .. n-1 read as zero:
 * a tile of load_tile (first 0, n the valid rows) or of load_window. */
struct FlashRows {
    const float* src;
    size_t stride;
    int first, n;
};
__device__ __forceinline__ FlashRows flash_rows(const float* src, size_t stride, int first, int n) {
    FlashRows r = {src, stride, first, n};
    return r;
}

/* dst (64, FLASH_LDC) = head dims c0 .. c0 + 63 of 64 rows of x, zero past HD (up to the rounded
 * width) and outside the rows. One float a thread, consecutive threads on consecutive floats. */
__device__ __forceinline__ void load_chunk(float* dst, FlashRows x, int HD, int c0) {
    const int width = (HD + 7) & ~7, cw = min(64, width - c0), rows_per_pass = blockDim.x / cw;
    const int r0 = threadIdx.x / cw, d = threadIdx.x - r0 * cw;
    if (r0 >= rows_per_pass) return;
    for (int r = r0; r < 64; r += rows_per_pass) {
        const int row = x.first + r, col = c0 + d;
        dst[r * FLASH_LDC + d] = (row >= 0 && row < x.n && col < HD) ? x.src[(size_t)row * x.stride + col] : 0.0f;
    }
}

/* score_tile with its operands streamed: s = a . b over d ascending, a and b each passing through
 * its buffer 64 head dims at a time. Starts with a barrier (the buffers' last readers are done);
 * every thread of the block calls it. */
__device__ __forceinline__ void score_tile_lean(float s[4][4], float* bufa, FlashRows a, float* bufb,
                                                FlashRows b, int HD, int ty, int tx) {
    const int width = (HD + 7) & ~7;
    score_zero(s);
    for (int c0 = 0; c0 < width; c0 += 64) {
        __syncthreads();
        load_chunk(bufa, a, HD, c0);
        load_chunk(bufb, b, HD, c0);
        __syncthreads();
        score_acc(s, bufa, bufb, FLASH_LDC, min(64, width - c0), ty, tx);
    }
}

/* tile_mac with X streamed: for each m, X's head dims 64 m .. 64 m + 63 pass through buf, then
 * acc[a][4 m + x] += sum over rows c < n, ascending, of W[c][4 ty + a] X[c][4 tx + 64 m + x] (the
 * same terms in the same order). W's rows have stride wld and its 4 ty columns at W + 4 ty;
 * tile_mac's W is key-major (wld FLASH_LDP), the dK/dV pass's slot-order tiles too. Starts with a
 * barrier; every thread of the block calls it. */
template <int NDM>
__device__ __forceinline__ void tile_mac_lean(float (&acc)[4][4 * NDM], const float* W, float* buf,
                                              FlashRows x, int n, int HD, int tx, int ty) {
    const int width = (HD + 7) & ~7;
    #pragma unroll
    for (int m = 0; m < NDM; m++) {
        if (64 * m < width) {   /* the same for every thread */
            __syncthreads();
            load_chunk(buf, x, HD, 64 * m);
            __syncthreads();
            if (4 * tx + 64 * m < width)
                for (int c = 0; c < n; c++) {
                    const F4 w = ld4(W + c * FLASH_LDP + 4 * ty);
                    const F4 xv = ld4(buf + c * FLASH_LDC + 4 * tx);
                    for (int a = 0; a < 4; a++) fma4(&acc[a][4 * m], f4_at(w, a), xv);
                }
        }
    }
}

/* ---- forward --------------------------------------------------------------------------------- */

/* Block (b * NH + h, query tile): the last query tiles (the longest rows) get the first block
 * indices. Walks the key tiles left to right with a running max and a running sum of the
 * undropped weights per query; the weights that reach v lose the dropped keys. */
template <int NDM, bool LEAN>
__global__ void flash_forward_kernel(float* out, float* lse, const float* qkv, int T, int NH,
                                     int NKV, int HD, uint32_t g0, uint64_t seed, uint32_t thr,
                                     float scale, float sigma) {
    SG_DYN_SHARED(float, smem);
    const int ld = LEAN ? FLASH_LDC : FLASH_LD(HD), width = (HD + 7) & ~7;
    float* Qs = smem;                 /* (BQ, ld) queries (LEAN: a chunk of them) */
    float* Ks = Qs + FBQ * ld;        /* (BK, ld) keys */
    float* Vs = LEAN ? Ks : Ks + FBK * ld;   /* (BK, ld) values (LEAN: a chunk, where Ks was) */
    float* Wt = Vs + FBK * ld;        /* (BK, LDP) weights, key-major: Wt[c * LDP + r] */

    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int i0 = (gridDim.y - 1 - blockIdx.y) * FBQ, nq = min(FBQ, T - i0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const float* qkv_b = qkv + (size_t)b * T * QKV;
    const uint32_t g = g0 + (uint32_t)b;

    const FlashRows qrows = flash_rows(qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, 0, nq);
    if (!LEAN) load_tile(Qs, ld, qrows.src, QKV, nq, FBQ, HD);

    float acc[4][4 * NDM];
    float mrun[4], lrun[4];
    for (int a = 0; a < 4; a++) {
        /* -FLT_MAX, not -inf: padding queries see no key and must rescale by exp(0) = 1 */
        mrun[a] = -FLT_MAX;
        lrun[a] = 0.0f;
        for (int x = 0; x < 4 * NDM; x++) acc[a][x] = 0.0f;
    }

    for (int j0 = 0; j0 < i0 + nq; j0 += FBK) {
        const int nk = min(FBK, T - j0);
        const FlashRows krows = flash_rows(qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, 0, nk);
        const FlashRows vrows = flash_rows(qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, 0, nk);
        __syncthreads();   /* the last tile's products are done with Ks, Vs, Wt */
        if (!LEAN) {
            load_tile(Ks, ld, krows.src, QKV, nk, FBK, HD);
            load_tile(Vs, ld, vrows.src, QKV, nk, FBK, HD);
        }
        __syncthreads();

        float s[4][4], corr[4];
        if (LEAN) score_tile_lean(s, Qs, qrows, Ks, krows, HD, ty, tx);
        else score_tile(s, Qs, Ks, ld, width, ty, tx);
        for (int a = 0; a < 4; a++) {
            const int i = i0 + 4 * ty + a;
            for (int k = 0; k < 4; k++) {
                const int j = j0 + key_of(tx, k);
                const float sc = s[a][k] * sigma;
                s[a][k] = (j <= i && i < T) ? sc : -INFINITY;
            }
            const float mx = row_max16(fmaxf(fmaxf(s[a][0], s[a][1]), fmaxf(s[a][2], s[a][3])));
            const float mnew = fmaxf(mrun[a], mx);
            corr[a] = expf(mrun[a] - mnew);
            float tsum = 0.0f;
            for (int k = 0; k < 4; k++) {
                const float w = expf(s[a][k] - mnew);
                s[a][k] = w;
                tsum += w;
            }
            lrun[a] = lrun[a] * corr[a] + row_sum16(tsum);
            mrun[a] = mnew;
            /* dropout: only the weights that reach v lose the dropped keys */
            if (thr != 0 && i < T && i >= j0 + key_of(tx, 0)) {
                int keep[4];
                keep4(keep, seed, g, (uint32_t)h, i, j0, tx, thr);
                for (int k = 0; k < 4; k++) s[a][k] = keep[k] ? s[a][k] : 0.0f;
            }
        }
        for (int k = 0; k < 4; k++)
            st4(Wt + key_of(tx, k) * FLASH_LDP + 4 * ty, s[0][k], s[1][k], s[2][k], s[3][k]);
        __syncthreads();

        /* acc = acc * corr + W V, the keys in ascending order */
        for (int a = 0; a < 4; a++)
            for (int x = 0; x < 4 * NDM; x++) acc[a][x] *= corr[a];
        if (LEAN) tile_mac_lean<NDM>(acc, Wt, Vs, vrows, nk, HD, tx, ty);
        else tile_mac<NDM>(acc, Wt, Vs, ld, nk, width, tx, ty);
    }

    for (int a = 0; a < 4; a++) {
        const int i = i0 + 4 * ty + a;
        if (i >= T) continue;
        const float rs = scale / lrun[a];
        float* o = out + ((size_t)b * T + i) * C + (size_t)h * HD;
        for (int m = 0; m < NDM; m++)
            for (int x = 0; x < 4; x++) {
                const int d = 4 * tx + 64 * m + x;
                if (d < HD) o[d] = acc[a][4 * m + x] * rs;
            }
        if (tx == 0) lse[((size_t)b * NH + h) * T + i] = mrun[a] + logf(lrun[a]);
    }
}

/* ---- backward -------------------------------------------------------------------------------- */

/* Pass 0: D_i = do_i . o_i for every row (b, h, i) of D (B, NH, T); one warp a row, the lanes'
 * partial sums over d = lane, lane + 32, ... then a butterfly, a fixed order. o is fp32, or the
 * bf16 (fp16) o of the bf16 (fp16) table (cuda/act.h: read exactly). */
template <typename OutT>
__global__ void flash_dot_kernel(float* D, const float* dout, const OutT* out, int B, int T, int NH,
                                 int HD) {
    const int lane = threadIdx.x & 31;
    const long row = (long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const long rows = (long)B * NH * T;
    float s = 0.0f;
    if (row < rows) {
        const long bh = row / T, i = row % T, b = bh / NH, h = bh % NH;
        const size_t at = ((size_t)b * T + (size_t)i) * NH * HD + (size_t)h * HD;
        for (int d = lane; d < HD; d += 32) s = fmaf(dout[at + d], act_load(out, at + d), s);
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(FULL_MASK, s, off);
    if (row < rows && lane == 0) D[row] = s;
}

/* The softmax backward of thread (ty, tx)'s 4 x 4 tile of queries i0 + 4 ty + a against keys
 * j0 + key_of(tx, k). On entry s = q.k and dp = do.v; on exit
 *   s  = m_ij p_ij scale      (the weight the forward applied to v_j)
 *   dp = ds_ij = p_ij (m_ij scale do_i.v_j - D_i)
 * with p = 0 where the query does not see the key. L, Di: the LSE and D of the 4 queries. */
__device__ __forceinline__ void softmax_grad(float s[4][4], float dp[4][4], const float L[4],
                                             const float Di[4], int i0, int j0, int T, int ty,
                                             int tx, float sigma, float scale, uint64_t seed,
                                             uint32_t g, uint32_t h, uint32_t thr) {
    for (int a = 0; a < 4; a++) {
        const int i = i0 + 4 * ty + a;
        int keep[4] = {1, 1, 1, 1};
        if (thr != 0 && i < T && i >= j0 + key_of(tx, 0)) keep4(keep, seed, g, h, i, j0, tx, thr);
        for (int k = 0; k < 4; k++) {
            const int j = j0 + key_of(tx, k);
            const float e = expf(s[a][k] * sigma - L[a]);
            const float p = (j <= i && i < T) ? e : 0.0f;
            const float ms = keep[k] ? scale : 0.0f;   /* m_ij scale */
            s[a][k] = p * ms;
            dp[a][k] = p * (dp[a][k] * ms - Di[a]);
        }
    }
}

/* Pass 1: dK, dV of one query head. Block (b * NH + h, key tile), the first key tiles (the longest
 * columns) first. It sums over the query tiles from the diagonal down, then over the queries of a
 * tile, in that fixed order, and writes (dk * k_scale, dv) of its keys to row b * T + j of dk_out
 * and dv_out (row stride out_stride, head column h * HD): straight into dqkv (k_scale = sigma)
 * when every kv head has one query head, else into per-query-head partial sums that
 * flash_group_sum_kernel adds up. The score phase leaves the weights and ds in
 * "slot" order, query-major: slot 4 tx + k of a row holds key key_of(tx, k), so that in the
 * product phase thread (ty, tx) reads its four keys key_of(ty, 0..3) as one 16-byte load. */
template <int NDM, bool LEAN>
__global__ void __launch_bounds__(FTHREADS, NDM == 1 ? 2 : 1) flash_dkdv_kernel(float* dk_out, float* dv_out, size_t out_stride, float k_scale,
                                  const float* dout, const float* qkv, const float* lse,
                                  const float* D, int T, int NH, int NKV, int HD, uint32_t g0,
                                  uint64_t seed, uint32_t thr, float scale, float sigma) {
    SG_DYN_SHARED(float, smem);
    /* LEAN: bufa (Q, dO chunks), bufb (K, V chunks) and one weight tile Pd, which holds m p scale
     * for the dV product and then ds for the dK product */
    const int ld = LEAN ? FLASH_LDC : FLASH_LD(HD), width = (HD + 7) & ~7;
    float* Ks = smem;                 /* (BK, ld) keys */
    float* Vs = LEAN ? Ks : Ks + FBK * ld;   /* (BK, ld) values */
    float* Qs = Vs + FBK * ld;        /* (BQ, ld) queries */
    float* dOs = LEAN ? Qs : Qs + FBQ * ld;  /* (BQ, ld) do */
    float* Pd = dOs + FBQ * ld;       /* (BQ, LDP) m p scale, slot order */
    float* dS = LEAN ? Pd : Pd + FBQ * FLASH_LDP; /* (BQ, LDP) ds, slot order */

    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int j0 = blockIdx.y * FBK, nk = min(FBK, T - j0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const float* qkv_b = qkv + (size_t)b * T * QKV;
    const uint32_t g = g0 + (uint32_t)b;

    const FlashRows krows = flash_rows(qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, 0, nk);
    const FlashRows vrows = flash_rows(qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, 0, nk);
    if (!LEAN) {
        load_tile(Ks, ld, krows.src, QKV, nk, FBK, HD);
        load_tile(Vs, ld, vrows.src, QKV, nk, FBK, HD);
    }

    float dk[4][4 * NDM], dv[4][4 * NDM];   /* keys key_of(ty, k), dims 4 tx + 64 m + x */
    for (int k = 0; k < 4; k++)
        for (int x = 0; x < 4 * NDM; x++) dk[k][x] = dv[k][x] = 0.0f;

    const float* lse_bh = lse + ((size_t)b * NH + h) * T;
    const float* D_bh = D + ((size_t)b * NH + h) * T;
    for (int i0 = (j0 / FBQ) * FBQ; i0 < T; i0 += FBQ) {
        const int nq = min(FBQ, T - i0);
        const FlashRows qrows = flash_rows(qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, 0, nq);
        const FlashRows orows = flash_rows(dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, 0, nq);
        __syncthreads();   /* the last tile's products are done with Qs, dOs, Pd, dS */
        if (!LEAN) {
            load_tile(Qs, ld, qrows.src, QKV, nq, FBQ, HD);
            load_tile(dOs, ld, orows.src, C, nq, FBQ, HD);
        }
        float L[4], Di[4];
        for (int a = 0; a < 4; a++) {
            const int i = i0 + 4 * ty + a;
            L[a] = i < T ? lse_bh[i] : 0.0f;
            Di[a] = i < T ? D_bh[i] : 0.0f;
        }
        __syncthreads();

        float s[4][4], dp[4][4];
        if (LEAN) {
            score_tile_lean(s, Qs, qrows, Ks, krows, HD, ty, tx);
            score_tile_lean(dp, dOs, orows, Vs, vrows, HD, ty, tx);
            softmax_grad(s, dp, L, Di, i0, j0, T, ty, tx, sigma, scale, seed, g, (uint32_t)h, thr);
            /* dV += Pd^T dO, then dK += dS^T Q through the one weight tile: each sum keeps its
             * order (the queries ascending) */
            for (int a = 0; a < 4; a++)
                st4(Pd + (4 * ty + a) * FLASH_LDP + 4 * tx, s[a][0], s[a][1], s[a][2], s[a][3]);
            tile_mac_lean<NDM>(dv, Pd, dOs, orows, nq, HD, tx, ty);
            __syncthreads();   /* the dV product is done with Pd */
            for (int a = 0; a < 4; a++)
                st4(dS + (4 * ty + a) * FLASH_LDP + 4 * tx, dp[a][0], dp[a][1], dp[a][2], dp[a][3]);
            tile_mac_lean<NDM>(dk, dS, Qs, qrows, nq, HD, tx, ty);
            continue;
        }
        score_tile(s, Qs, Ks, ld, width, ty, tx);     /* Q K^T */
        score_tile(dp, dOs, Vs, ld, width, ty, tx);   /* dO V^T */
        softmax_grad(s, dp, L, Di, i0, j0, T, ty, tx, sigma, scale, seed, g, (uint32_t)h, thr);
        for (int a = 0; a < 4; a++) {
            st4(Pd + (4 * ty + a) * FLASH_LDP + 4 * tx, s[a][0], s[a][1], s[a][2], s[a][3]);
            st4(dS + (4 * ty + a) * FLASH_LDP + 4 * tx, dp[a][0], dp[a][1], dp[a][2], dp[a][3]);
        }
        __syncthreads();

        /* dV += Pd^T dO, dK += dS^T Q, the queries in ascending order */
        for (int m = 0; m < NDM; m++) {
            const int d0 = 4 * tx + 64 * m;
            if (d0 >= width) continue;
            for (int r = 0; r < nq; r++) {
                const F4 pw = ld4(Pd + r * FLASH_LDP + 4 * ty);
                const F4 ds = ld4(dS + r * FLASH_LDP + 4 * ty);
                const F4 o = ld4(dOs + r * ld + d0);
                const F4 q = ld4(Qs + r * ld + d0);
                for (int k = 0; k < 4; k++) {
                    fma4(&dv[k][4 * m], f4_at(pw, k), o);
                    fma4(&dk[k][4 * m], f4_at(ds, k), q);
                }
            }
        }
    }

    for (int k = 0; k < 4; k++) {
        const int j = j0 + key_of(ty, k);
        if (j >= T) continue;
        float* dkr = dk_out + ((size_t)b * T + j) * out_stride + (size_t)h * HD;
        float* dvr = dv_out + ((size_t)b * T + j) * out_stride + (size_t)h * HD;
        for (int m = 0; m < NDM; m++)
            for (int x = 0; x < 4; x++) {
                const int d = 4 * tx + 64 * m + x;
                if (d < HD) {
                    dkr[d] = dk[k][4 * m + x] * k_scale;
                    dvr[d] = dv[k][4 * m + x];
                }
            }
    }
}

/* Grouped-query heads: dk (B, T, NKV, HD) of kv head kvh = sigma times the sum of the partial sums
 * dKp (B, T, NH, HD) of its G query heads, added in ascending head order; dv likewise from dVp,
 * without sigma. One thread an element. */
__global__ void flash_group_sum_kernel(float* dqkv, const float* dKp, const float* dVp, int B, int T,
                                       int NH, int NKV, int HD, float sigma) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)B * T * NKV * HD) return;
    const int G = NH / NKV, d = (int)(e % HD), kvh = (int)(e / HD % NKV);
    const size_t bt = e / HD / NKV;
    const float* pk = dKp + bt * NH * HD + (size_t)kvh * G * HD + d;
    const float* pv = dVp + bt * NH * HD + (size_t)kvh * G * HD + d;
    float sk = 0.0f, sv = 0.0f;
    for (int x = 0; x < G; x++) {
        sk += pk[(size_t)x * HD];
        sv += pv[(size_t)x * HD];
    }
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    dqkv[bt * QKV + (size_t)(NH + kvh) * HD + d] = sk * sigma;
    dqkv[bt * QKV + (size_t)(NH + NKV + kvh) * HD + d] = sv;
}

/* Pass 0 and the grouped-query sum as calls of their own, shared with the tensor-core backward
 * (attention/flash_tc.cu), whose D and group sums are these, fp32 (attention/attention_cuda.h). */
extern "C" void attention_backward_dot_cuda(float* D, const float* dout, const float* out, int B, int T,
                                            int NH, int HD) {
    const long rows = (long)B * NH * T;
    if (rows <= 0) return;
    SG_LAUNCH(flash_dot_kernel<float>, dim3(sg_ceil_div((size_t)rows, 8)), dim3(256), 0, D, dout, out, B, T,
              NH, HD);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_backward_dot_bf16_cuda(float* D, const float* dout, const void* out, int B, int T,
                                                 int NH, int HD) {
    const long rows = (long)B * NH * T;
    if (rows <= 0) return;
    SG_LAUNCH(flash_dot_kernel<uint16_t>, dim3(sg_ceil_div((size_t)rows, 8)), dim3(256), 0, D, dout,
              (const uint16_t*)out, B, T, NH, HD);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_backward_dot_fp16_cuda(float* D, const float* dout, const void* out, int B, int T,
                                                 int NH, int HD) {
    const long rows = (long)B * NH * T;
    if (rows <= 0) return;
    SG_LAUNCH(flash_dot_kernel<sg_h16>, dim3(sg_ceil_div((size_t)rows, 8)), dim3(256), 0, D, dout,
              (const sg_h16*)out, B, T, NH, HD);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_group_sum_cuda(float* dqkv, const float* dKp, const float* dVp, int B, int T,
                                         int NH, int NKV, int HD, float sigma) {
    const size_t n = (size_t)B * T * NKV * HD;
    if (n == 0) return;
    SG_LAUNCH(flash_group_sum_kernel, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dqkv, dKp, dVp, B, T,
              NH, NKV, HD, sigma);
    SG_CHECK_LAUNCH();
}

/* Pass 2: dQ. Block (b * NH + h, query tile), the last query tiles (the longest rows) first; it
 * sums over the key tiles and the keys in ascending order. */
template <int NDM, bool LEAN>
__global__ void __launch_bounds__(FTHREADS, NDM == 1 ? 2 : 1) flash_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                const float* D, int T, int NH, int NKV, int HD, uint32_t g0,
                                uint64_t seed, uint32_t thr, float scale, float sigma) {
    SG_DYN_SHARED(float, smem);
    const int ld = LEAN ? FLASH_LDC : FLASH_LD(HD), width = (HD + 7) & ~7;
    float* Qs = smem;                 /* (BQ, ld) queries */
    float* dOs = LEAN ? Qs : Qs + FBQ * ld;  /* (BQ, ld) do */
    float* Ks = dOs + FBQ * ld;       /* (BK, ld) keys */
    float* Vs = LEAN ? Ks : Ks + FBK * ld;   /* (BK, ld) values */
    float* dSt = Vs + FBK * ld;       /* (BK, LDP) ds, key-major: dSt[c * LDP + r] */

    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int i0 = (gridDim.y - 1 - blockIdx.y) * FBQ, nq = min(FBQ, T - i0);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const float* qkv_b = qkv + (size_t)b * T * QKV;
    const uint32_t g = g0 + (uint32_t)b;

    const FlashRows qrows = flash_rows(qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, 0, nq);
    const FlashRows orows = flash_rows(dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, 0, nq);
    if (!LEAN) {
        load_tile(Qs, ld, qrows.src, QKV, nq, FBQ, HD);
        load_tile(dOs, ld, orows.src, C, nq, FBQ, HD);
    }
    float L[4], Di[4];
    for (int a = 0; a < 4; a++) {
        const int i = i0 + 4 * ty + a;
        L[a] = i < T ? lse[((size_t)b * NH + h) * T + i] : 0.0f;
        Di[a] = i < T ? D[((size_t)b * NH + h) * T + i] : 0.0f;
    }
    float acc[4][4 * NDM];
    for (int a = 0; a < 4; a++)
        for (int x = 0; x < 4 * NDM; x++) acc[a][x] = 0.0f;

    for (int j0 = 0; j0 < i0 + nq; j0 += FBK) {
        const int nk = min(FBK, T - j0);
        const FlashRows krows = flash_rows(qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, 0, nk);
        const FlashRows vrows = flash_rows(qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, 0, nk);
        __syncthreads();   /* the last tile's products are done with Ks, Vs, dSt */
        if (!LEAN) {
            load_tile(Ks, ld, krows.src, QKV, nk, FBK, HD);
            load_tile(Vs, ld, vrows.src, QKV, nk, FBK, HD);
        }
        __syncthreads();

        float s[4][4], dp[4][4];
        if (LEAN) {
            score_tile_lean(s, Qs, qrows, Ks, krows, HD, ty, tx);
            score_tile_lean(dp, dOs, orows, Vs, vrows, HD, ty, tx);
        } else {
            score_tile(s, Qs, Ks, ld, width, ty, tx);     /* Q K^T */
            score_tile(dp, dOs, Vs, ld, width, ty, tx);   /* dO V^T */
        }
        softmax_grad(s, dp, L, Di, i0, j0, T, ty, tx, sigma, scale, seed, g, (uint32_t)h, thr);
        for (int k = 0; k < 4; k++)
            st4(dSt + key_of(tx, k) * FLASH_LDP + 4 * ty, dp[0][k], dp[1][k], dp[2][k], dp[3][k]);
        __syncthreads();

        /* dQ += dS K, the keys in ascending order */
        if (LEAN) tile_mac_lean<NDM>(acc, dSt, Ks, krows, nk, HD, tx, ty);
        else tile_mac<NDM>(acc, dSt, Ks, ld, nk, width, tx, ty);
    }

    for (int a = 0; a < 4; a++) {
        const int i = i0 + 4 * ty + a;
        if (i >= T) continue;
        float* dq = dqkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
        for (int m = 0; m < NDM; m++)
            for (int x = 0; x < 4; x++) {
                const int d = 4 * tx + 64 * m + x;
                if (d < HD) dq[d] = acc[a][4 * m + x] * sigma;
            }
    }
}

/* ---- host side ------------------------------------------------------------------------------- */

/* One line naming the call and what is wrong, then exit (user input: the model's shapes). */
static void flash_check_shapes(const char* fn, int NH, int NKV, int HD) {
    if (HD < 1 || HD > FLASH_MAX_HD) {
        fprintf(stderr, "seedgpt: %s: head dim %d not supported (the CUDA attention takes 1..%d)\n",
                fn, HD, FLASH_MAX_HD);
        exit(1);
    }
    if (NH < 1 || NKV < 1 || NH % NKV != 0) {
        fprintf(stderr, "seedgpt: %s: n_kv_head %d must divide n_head %d\n", fn, NKV, NH);
        exit(1);
    }
}

/* The kernels' grids are (B NH, tiles of 64 positions): the tiles along y, at most the device's
 * limit (asked of the device, so the emulation can model a smaller one). */
extern "C" int attention_cuda_max_T(void) {
    int dev = 0, ymax = 0;
    SG_CHECK(cudaGetDevice(&dev));
    SG_CHECK(cudaDeviceGetAttribute(&ymax, cudaDevAttrMaxGridDimY, dev));
    const long long t = (long long)ymax * FBQ;   /* FBQ = FBK */
    return t < 2147483647LL ? (int)t : 2147483647;
}

/* One line and exit for a T whose tiles do not fit the grid's y (a failed launch would only say
 * "invalid configuration argument"); the tensor-core kernels (flash_tc.cu) call it too */
extern "C" void attention_cuda_check_T(const char* fn, int T) {
    const int tmax = attention_cuda_max_T();
    if (T > tmax) {
        fprintf(stderr, "seedgpt: %s: T %d needs %d tiles of %d positions along the grid's y, above the "
                "device's limit of %d blocks (T at most %d)\n", fn, T, (int)sg_ceil_div((size_t)T, FBQ), FBQ,
                tmax / FBQ, tmax);
        exit(1);
    }
}

static size_t flash_forward_smem(int HD) {
    return sizeof(float) * ((size_t)(FBQ + 2 * FBK) * FLASH_LD(HD) + (size_t)FBK * FLASH_LDP);
}
static size_t flash_dkdv_smem(int HD) {
    return sizeof(float) * ((size_t)(2 * FBK + 2 * FBQ) * FLASH_LD(HD) + (size_t)2 * FBQ * FLASH_LDP);
}
static size_t flash_dq_smem(int HD) {
    return sizeof(float) * ((size_t)(2 * FBQ + 2 * FBK) * FLASH_LD(HD) + (size_t)FBK * FLASH_LDP);
}

/* The LEAN instances' shared memory, whatever HD is: two (64, FLASH_LDC) chunk buffers and one
 * (64, FLASH_LDP) weight tile, 51 KiB. */
static size_t flash_lean_smem(void) {
    return sizeof(float) * ((size_t)(FBQ + FBK) * FLASH_LDC + (size_t)FBK * FLASH_LDP);
}

/* The instance a kernel runs: the full layout where its `*bytes` fit the device's opt-in limit
 * (sg_smem_optin), else the LEAN one (returns 1, *bytes set to its size). Every GPU the backend
 * runs on (sm_70 and newer, 64 KiB or more) holds the LEAN instance; a device that does not gets
 * one line and exit. */
static int flash_take_lean(const char* fn, size_t* bytes) {
    const size_t limit = sg_smem_optin();
    if (*bytes <= limit) return 0;
    if (flash_lean_smem() > limit) {
        fprintf(stderr, "seedgpt: %s: the fp32 attention needs %zu bytes of shared memory a block and "
                "this device allows %zu\n", fn, flash_lean_smem(), limit);
        exit(1);
    }
    *bytes = flash_lean_smem();
    return 1;
}

/* Dynamic shared memory above 48 KiB needs the kernel's opt-in. */
template <typename Kernel>
static void flash_allow_smem(Kernel kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        SG_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int NDM>
static void flash_forward_launch(float* out, float* lse, const float* qkv, int B, int T, int NH,
                                 int NKV, int HD, uint32_t g0, uint64_t seed, Dropout drop,
                                 float sigma) {
    size_t smem = flash_forward_smem(HD);
    auto* flash_forward = flash_take_lean("attention_forward_cuda", &smem) ? flash_forward_kernel<NDM, true>
                                                                           : flash_forward_kernel<NDM, false>;
    flash_allow_smem(flash_forward, smem);
    dim3 grid((unsigned)(B * NH), sg_ceil_div((size_t)T, FBQ));
    SG_LAUNCH(flash_forward, grid, dim3(FTHREADS), smem, out, lse, qkv, T, NH, NKV, HD,
              g0, seed, drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_forward_cuda(float* out, float* lse, const float* qkv,
                                       int B, int T, int NH, int NKV, int HD,
                                       uint32_t g0, uint64_t attn_seed, Dropout drop) {
    flash_check_shapes("attention_forward_cuda", NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_forward_cuda", T);
    const float sigma = 1.0f / sqrtf((float)HD);
    if (HD <= 64)
        flash_forward_launch<1>(out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop, sigma);
    else
        flash_forward_launch<2>(out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop, sigma);
}

static size_t flash_round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The scratch: D (B, NH, T); with grouped-query heads (NKV < NH) also the per-query-head partial
 * sums of dK and dV, (B, T, NH, HD) each, that pass 1 leaves for flash_group_sum_kernel. */
extern "C" size_t attention_backward_scratch_floats_cuda(int B, int T, int NH, int NKV, int HD,
                                                          int nthreads) {
    const size_t partial = NKV < NH ? 2 * flash_round16((size_t)B * T * NH * HD) : 0;
    return flash_round16((size_t)B * NH * T) + partial;
}

template <int NDM>
static void flash_backward_launch(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* lse, int B, int T, int NH, int NKV, int HD,
                                  uint32_t g0, uint64_t seed, Dropout drop, float sigma) {
    size_t smem1 = flash_dkdv_smem(HD), smem2 = flash_dq_smem(HD);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const float* D = scratch;
    auto* flash_dkdv = flash_take_lean("attention_backward_cuda", &smem1) ? flash_dkdv_kernel<NDM, true>
                                                                          : flash_dkdv_kernel<NDM, false>;
    auto* flash_dq = flash_take_lean("attention_backward_cuda", &smem2) ? flash_dq_kernel<NDM, true>
                                                                        : flash_dq_kernel<NDM, false>;
    flash_allow_smem(flash_dkdv, smem1);
    flash_allow_smem(flash_dq, smem2);
    dim3 grid1((unsigned)(B * NH), sg_ceil_div((size_t)T, FBK));
    if (NKV == NH) {   /* one query head per kv head: straight into dqkv */
        SG_LAUNCH(flash_dkdv, grid1, dim3(FTHREADS), smem1, dqkv + (size_t)NH * HD,
                  dqkv + (size_t)(NH + NKV) * HD, QKV, sigma, dout, qkv, lse, D, T, NH, NKV, HD, g0,
                  seed, drop.thr, drop.scale, sigma);
        SG_CHECK_LAUNCH();
    } else {           /* partial sums per query head, then the group's sum in a fixed order */
        float* dKp = scratch + flash_round16((size_t)B * NH * T);
        float* dVp = dKp + flash_round16((size_t)B * T * NH * HD);
        SG_LAUNCH(flash_dkdv, grid1, dim3(FTHREADS), smem1, dKp, dVp, (size_t)NH * HD,
                  1.0f, dout, qkv, lse, D, T, NH, NKV, HD, g0, seed, drop.thr, drop.scale, sigma);
        SG_CHECK_LAUNCH();
        attention_group_sum_cuda(dqkv, dKp, dVp, B, T, NH, NKV, HD, sigma);
    }
    dim3 grid2((unsigned)(B * NH), sg_ceil_div((size_t)T, FBQ));
    SG_LAUNCH(flash_dq, grid2, dim3(FTHREADS), smem2, dqkv, dout, qkv, lse, D, T, NH,
              NKV, HD, g0, seed, drop.thr, drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_backward_cuda(float* dqkv, float* scratch, const float* dout,
                                        const float* qkv, const float* out, const float* lse,
                                        int B, int T, int NH, int NKV, int HD,
                                        uint32_t g0, uint64_t attn_seed, Dropout drop) {
    flash_check_shapes("attention_backward_cuda", NH, NKV, HD);
    if (B <= 0 || T <= 0) return;
    attention_cuda_check_T("attention_backward_cuda", T);
    const float sigma = 1.0f / sqrtf((float)HD);
    float* D = scratch;   /* (B, NH, T) */
    attention_backward_dot_cuda(D, dout, out, B, T, NH, HD);
    if (HD <= 64)
        flash_backward_launch<1>(dqkv, scratch, dout, qkv, lse, B, T, NH, NKV, HD, g0, attn_seed, drop,
                                 sigma);
    else
        flash_backward_launch<2>(dqkv, scratch, dout, qkv, lse, B, T, NH, NKV, HD, g0, attn_seed, drop,
                                 sigma);
}

/* ---- context parallelism: a block of queries against a block of keys (DESIGN §9) ------------
 * The CUDA twins of attention/flash_cpu.c's attention_block_forward, attention_block_backward and
 * attention_merge (attention/attention.h has the contract). Queries sit at global positions
 * iq0 .. iq0+Tq-1, keys at jk0 .. jk0+Tk-1, each in rows of its own stride.
 *
 * The key tiles are aligned to the global positions, not to the block: tile jt covers global keys
 * jt .. jt+63 with jt a multiple of 64, and only the rows jk0 <= j < jk0+Tk are loaded (the rest
 * zero and masked out). So a tile's keys are whole aligned blocks of 32, which is what keep4 and
 * key_of assume, whatever jk0 is (a zigzag chunk need not be a multiple of 32 long): the keep bits
 * are philox_attn_draw4's at the global (g, h, i, j), the single-process run's. Query tiles are
 * local (a query's position enters only as the counter's i). */

/* dst (rows, ld) = rows first .. first+rows-1 of src (row stride `stride`), those in 0 .. n-1;
 * zero elsewhere and past HD. first may be negative (a key tile starting before the block). */
__device__ __forceinline__ void load_window(float* dst, int ld, const float* src, size_t stride,
                                            int first, int n, int rows, int HD) {
    const int width = (HD + 7) & ~7, rows_per_pass = blockDim.x / width;
    const int r0 = threadIdx.x / width, d = threadIdx.x - r0 * width;
    if (r0 >= rows_per_pass) return;
    for (int r = r0; r < rows; r += rows_per_pass) {
        const int row = first + r;
        dst[r * ld + d] = (row >= 0 && row < n && d < HD) ? src[(size_t)row * stride + d] : 0.0f;
    }
}

/* softmax_grad with the block's masks: query i (global) is real when i < iend, key j when
 * jlo <= j < jhi, and visible when j <= i. lse is the whole row's (merged over every key block). */
__device__ __forceinline__ void softmax_grad_block(float s[4][4], float dp[4][4], const float L[4],
                                                   const float Di[4], int i0, int iend, int jt,
                                                   int jlo, int jhi, int ty, int tx, float sigma,
                                                   float scale, uint64_t seed, uint32_t g,
                                                   uint32_t h, uint32_t thr) {
    for (int a = 0; a < 4; a++) {
        const int i = i0 + 4 * ty + a;
        int keep[4] = {1, 1, 1, 1};
        if (thr != 0 && i < iend && i >= jt + key_of(tx, 0)) keep4(keep, seed, g, h, i, jt, tx, thr);
        for (int k = 0; k < 4; k++) {
            const int j = jt + key_of(tx, k);
            const float e = expf(s[a][k] * sigma - L[a]);
            const float p = (j <= i && i < iend && j >= jlo && j < jhi) ? e : 0.0f;
            const float ms = keep[k] ? scale : 0.0f;
            s[a][k] = p * ms;
            dp[a][k] = p * (dp[a][k] * ms - Di[a]);
        }
    }
}

/* Forward. Block (b * NH + h, local query tile), the last tiles first; the key tiles left to right
 * as in flash_forward_kernel. A query that sees no key of the block gets lse = -inf and a zero
 * row (the CPU's convention: the merge then leaves the running result alone). */
template <int NDM, bool LEAN>
__global__ void flash_block_forward_kernel(float* out, float* lse, const float* q, size_t q_stride,
                                           int Tq, int iq0, const float* k, const float* v,
                                           size_t kv_stride, int Tk, int jk0, int NH, int NKV,
                                           int HD, uint32_t g0, uint64_t seed, uint32_t thr,
                                           float scale, float sigma) {
    SG_DYN_SHARED(float, smem);
    const int ld = LEAN ? FLASH_LDC : FLASH_LD(HD), width = (HD + 7) & ~7;
    float* Qs = smem;                 /* (BQ, ld) queries */
    float* Ks = Qs + FBQ * ld;        /* (BK, ld) keys */
    float* Vs = LEAN ? Ks : Ks + FBK * ld;   /* (BK, ld) values */
    float* Wt = Vs + FBK * ld;        /* (BK, LDP) weights, key-major */

    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int r0 = (gridDim.y - 1 - blockIdx.y) * FBQ, nq = min(FBQ, Tq - r0);
    const int i0 = iq0 + r0, iend = iq0 + Tq, jend = jk0 + Tk;
    const size_t C = (size_t)NH * HD;
    const float* k_b = k + (size_t)b * Tk * kv_stride + (size_t)kvh * HD;
    const float* v_b = v + (size_t)b * Tk * kv_stride + (size_t)kvh * HD;
    const uint32_t g = g0 + (uint32_t)b;

    const FlashRows qrows = flash_rows(q + ((size_t)b * Tq + r0) * q_stride + (size_t)h * HD, q_stride, 0, nq);
    if (!LEAN) load_tile(Qs, ld, qrows.src, q_stride, nq, FBQ, HD);

    float acc[4][4 * NDM];
    float mrun[4], lrun[4];
    for (int a = 0; a < 4; a++) {
        mrun[a] = -FLT_MAX;
        lrun[a] = 0.0f;
        for (int x = 0; x < 4 * NDM; x++) acc[a][x] = 0.0f;
    }

    for (int jt = (jk0 / FBK) * FBK; jt < jend && jt <= i0 + nq - 1; jt += FBK) {
        const int nk = min(FBK, jend - jt);   /* rows of the tile up to the block's last key */
        __syncthreads();
        if (!LEAN) {
            load_window(Ks, ld, k_b, kv_stride, jt - jk0, Tk, FBK, HD);
            load_window(Vs, ld, v_b, kv_stride, jt - jk0, Tk, FBK, HD);
        }
        __syncthreads();

        float s[4][4], corr[4];
        if (LEAN) score_tile_lean(s, Qs, qrows, Ks, flash_rows(k_b, kv_stride, jt - jk0, Tk), HD, ty, tx);
        else score_tile(s, Qs, Ks, ld, width, ty, tx);
        for (int a = 0; a < 4; a++) {
            const int i = i0 + 4 * ty + a;
            for (int kk = 0; kk < 4; kk++) {
                const int j = jt + key_of(tx, kk);
                const float sc = s[a][kk] * sigma;
                s[a][kk] = (j <= i && i < iend && j >= jk0 && j < jend) ? sc : -INFINITY;
            }
            const float mx = row_max16(fmaxf(fmaxf(s[a][0], s[a][1]), fmaxf(s[a][2], s[a][3])));
            const float mnew = fmaxf(mrun[a], mx);
            corr[a] = expf(mrun[a] - mnew);
            float tsum = 0.0f;
            for (int kk = 0; kk < 4; kk++) {
                const float w = expf(s[a][kk] - mnew);
                s[a][kk] = w;
                tsum += w;
            }
            lrun[a] = lrun[a] * corr[a] + row_sum16(tsum);
            mrun[a] = mnew;
            if (thr != 0 && i < iend && i >= jt + key_of(tx, 0)) {
                int keep[4];
                keep4(keep, seed, g, (uint32_t)h, i, jt, tx, thr);   /* the global (g, h, i, j) */
                for (int kk = 0; kk < 4; kk++) s[a][kk] = keep[kk] ? s[a][kk] : 0.0f;
            }
        }
        for (int kk = 0; kk < 4; kk++)
            st4(Wt + key_of(tx, kk) * FLASH_LDP + 4 * ty, s[0][kk], s[1][kk], s[2][kk], s[3][kk]);
        __syncthreads();

        for (int a = 0; a < 4; a++)
            for (int x = 0; x < 4 * NDM; x++) acc[a][x] *= corr[a];
        if (LEAN) tile_mac_lean<NDM>(acc, Wt, Vs, flash_rows(v_b, kv_stride, jt - jk0, Tk), nk, HD, tx, ty);
        else tile_mac<NDM>(acc, Wt, Vs, ld, nk, width, tx, ty);
    }

    for (int a = 0; a < 4; a++) {
        const int r = r0 + 4 * ty + a;
        if (r >= Tq) continue;
        const int none = lrun[a] == 0.0f;   /* no key of this block is visible to the query */
        const float rs = none ? 0.0f : scale / lrun[a];
        float* o = out + ((size_t)b * Tq + r) * C + (size_t)h * HD;
        for (int m = 0; m < NDM; m++)
            for (int x = 0; x < 4; x++) {
                const int d = 4 * tx + 64 * m + x;
                if (d < HD) o[d] = none ? 0.0f : acc[a][4 * m + x] * rs;
            }
        if (tx == 0) lse[((size_t)b * NH + h) * Tq + r] = none ? -INFINITY : mrun[a] + logf(lrun[a]);
    }
}

/* dK, dV of one query head against one key tile of the block: block (b * NH + h, key tile). The
 * query tiles in ascending order, then their queries. With accumulate (one query head per kv
 * head) it adds (dk * k_scale, dv) to the block's rows of dk_out, dv_out (column h * HD); else it
 * writes the per-query-head partials that flash_block_group_sum_kernel adds up. */
template <int NDM, bool LEAN>
__global__ void __launch_bounds__(FTHREADS, NDM == 1 ? 2 : 1)
flash_block_dkdv_kernel(float* dk_out, float* dv_out, size_t out_stride, float k_scale,
                        int accumulate, const float* dout, const float* lse, const float* D,
                        const float* q, size_t q_stride, int Tq, int iq0, const float* k,
                        const float* v, size_t kv_stride, int Tk, int jk0, int NH, int NKV, int HD,
                        uint32_t g0, uint64_t seed, uint32_t thr, float scale, float sigma) {
    SG_DYN_SHARED(float, smem);
    const int ld = LEAN ? FLASH_LDC : FLASH_LD(HD), width = (HD + 7) & ~7;
    float* Ks = smem;                 /* the layout of flash_dkdv_kernel */
    float* Vs = LEAN ? Ks : Ks + FBK * ld;
    float* Qs = Vs + FBK * ld;
    float* dOs = LEAN ? Qs : Qs + FBQ * ld;
    float* Pd = dOs + FBQ * ld;       /* (BQ, LDP) m p scale, slot order */
    float* dS = LEAN ? Pd : Pd + FBQ * FLASH_LDP; /* (BQ, LDP) ds, slot order */

    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int jt = (jk0 / FBK) * FBK + blockIdx.y * FBK;
    const int iend = iq0 + Tq, jend = jk0 + Tk, jfirst = jt > jk0 ? jt : jk0;
    const size_t C = (size_t)NH * HD;
    const uint32_t g = g0 + (uint32_t)b;

    const FlashRows krows = flash_rows(k + (size_t)b * Tk * kv_stride + (size_t)kvh * HD, kv_stride, jt - jk0, Tk);
    const FlashRows vrows = flash_rows(v + (size_t)b * Tk * kv_stride + (size_t)kvh * HD, kv_stride, jt - jk0, Tk);
    if (!LEAN) {
        load_window(Ks, ld, krows.src, kv_stride, jt - jk0, Tk, FBK, HD);
        load_window(Vs, ld, vrows.src, kv_stride, jt - jk0, Tk, FBK, HD);
    }

    float dk[4][4 * NDM], dv[4][4 * NDM];
    for (int kk = 0; kk < 4; kk++)
        for (int x = 0; x < 4 * NDM; x++) dk[kk][x] = dv[kk][x] = 0.0f;

    const float* lse_bh = lse + ((size_t)b * NH + h) * Tq;
    const float* D_bh = D + ((size_t)b * NH + h) * Tq;
    for (int r0 = 0; r0 < Tq; r0 += FBQ) {
        const int nq = min(FBQ, Tq - r0), i0 = iq0 + r0;
        if (i0 + nq - 1 < jfirst) continue;   /* every query before the tile's first key */
        const FlashRows qrows = flash_rows(q + ((size_t)b * Tq + r0) * q_stride + (size_t)h * HD, q_stride, 0, nq);
        const FlashRows orows = flash_rows(dout + ((size_t)b * Tq + r0) * C + (size_t)h * HD, C, 0, nq);
        __syncthreads();
        if (!LEAN) {
            load_tile(Qs, ld, qrows.src, q_stride, nq, FBQ, HD);
            load_tile(dOs, ld, orows.src, C, nq, FBQ, HD);
        }
        float L[4], Di[4];
        for (int a = 0; a < 4; a++) {
            const int r = r0 + 4 * ty + a;
            L[a] = r < Tq ? lse_bh[r] : 0.0f;
            Di[a] = r < Tq ? D_bh[r] : 0.0f;
        }
        __syncthreads();

        float s[4][4], dp[4][4];
        if (LEAN) {   /* as in flash_dkdv_kernel */
            score_tile_lean(s, Qs, qrows, Ks, krows, HD, ty, tx);
            score_tile_lean(dp, dOs, orows, Vs, vrows, HD, ty, tx);
            softmax_grad_block(s, dp, L, Di, i0, iend, jt, jk0, jend, ty, tx, sigma, scale, seed, g,
                               (uint32_t)h, thr);
            for (int a = 0; a < 4; a++)
                st4(Pd + (4 * ty + a) * FLASH_LDP + 4 * tx, s[a][0], s[a][1], s[a][2], s[a][3]);
            tile_mac_lean<NDM>(dv, Pd, dOs, orows, nq, HD, tx, ty);
            __syncthreads();
            for (int a = 0; a < 4; a++)
                st4(dS + (4 * ty + a) * FLASH_LDP + 4 * tx, dp[a][0], dp[a][1], dp[a][2], dp[a][3]);
            tile_mac_lean<NDM>(dk, dS, Qs, qrows, nq, HD, tx, ty);
            continue;
        }
        score_tile(s, Qs, Ks, ld, width, ty, tx);
        score_tile(dp, dOs, Vs, ld, width, ty, tx);
        softmax_grad_block(s, dp, L, Di, i0, iend, jt, jk0, jend, ty, tx, sigma, scale, seed, g,
                           (uint32_t)h, thr);
        for (int a = 0; a < 4; a++) {
            st4(Pd + (4 * ty + a) * FLASH_LDP + 4 * tx, s[a][0], s[a][1], s[a][2], s[a][3]);
            st4(dS + (4 * ty + a) * FLASH_LDP + 4 * tx, dp[a][0], dp[a][1], dp[a][2], dp[a][3]);
        }
        __syncthreads();

        for (int m = 0; m < NDM; m++) {
            const int d0 = 4 * tx + 64 * m;
            if (d0 >= width) continue;
            for (int r = 0; r < nq; r++) {
                const F4 pw = ld4(Pd + r * FLASH_LDP + 4 * ty);
                const F4 ds = ld4(dS + r * FLASH_LDP + 4 * ty);
                const F4 o = ld4(dOs + r * ld + d0);
                const F4 qq = ld4(Qs + r * ld + d0);
                for (int kk = 0; kk < 4; kk++) {
                    fma4(&dv[kk][4 * m], f4_at(pw, kk), o);
                    fma4(&dk[kk][4 * m], f4_at(ds, kk), qq);
                }
            }
        }
    }

    for (int kk = 0; kk < 4; kk++) {
        const int j = jt + key_of(ty, kk);
        if (j < jk0 || j >= jend) continue;
        float* dkr = dk_out + ((size_t)b * Tk + (j - jk0)) * out_stride + (size_t)h * HD;
        float* dvr = dv_out + ((size_t)b * Tk + (j - jk0)) * out_stride + (size_t)h * HD;
        for (int m = 0; m < NDM; m++)
            for (int x = 0; x < 4; x++) {
                const int d = 4 * tx + 64 * m + x;
                if (d >= HD) continue;
                const float kd = dk[kk][4 * m + x] * k_scale, vd = dv[kk][4 * m + x];
                dkr[d] = accumulate ? dkr[d] + kd : kd;
                dvr[d] = accumulate ? dvr[d] + vd : vd;
            }
    }
}

/* Grouped-query heads: adds to the block's dk, dv (rows of dkv_stride, kv head at kvh * HD) sigma
 * times the sum of the group's partials dKp (B, Tk, NH, HD), in ascending head order, and the
 * sum of dVp. One thread an element. */
__global__ void flash_block_group_sum_kernel(float* dk, float* dv, size_t dkv_stride,
                                             const float* dKp, const float* dVp, int B, int Tk,
                                             int NH, int NKV, int HD, float sigma) {
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)B * Tk * NKV * HD) return;
    const int G = NH / NKV, d = (int)(e % HD), kvh = (int)(e / HD % NKV);
    const size_t bt = e / HD / NKV;
    const float* pk = dKp + bt * NH * HD + (size_t)kvh * G * HD + d;
    const float* pv = dVp + bt * NH * HD + (size_t)kvh * G * HD + d;
    float sk = 0.0f, sv = 0.0f;
    for (int x = 0; x < G; x++) {
        sk += pk[(size_t)x * HD];
        sv += pv[(size_t)x * HD];
    }
    dk[bt * dkv_stride + (size_t)kvh * HD + d] += sk * sigma;
    dv[bt * dkv_stride + (size_t)kvh * HD + d] += sv;
}

/* dQ of one query tile against the block's key tiles: block (b * NH + h, local query tile), the
 * last tiles first; the key tiles and their keys in ascending order; dq += sigma * the sum. */
template <int NDM, bool LEAN>
__global__ void __launch_bounds__(FTHREADS, NDM == 1 ? 2 : 1)
flash_block_dq_kernel(float* dq, size_t dq_stride, const float* dout, const float* lse,
                      const float* D, const float* q, size_t q_stride, int Tq, int iq0,
                      const float* k, const float* v, size_t kv_stride, int Tk, int jk0, int NH,
                      int NKV, int HD, uint32_t g0, uint64_t seed, uint32_t thr, float scale,
                      float sigma) {
    SG_DYN_SHARED(float, smem);
    const int ld = LEAN ? FLASH_LDC : FLASH_LD(HD), width = (HD + 7) & ~7;
    float* Qs = smem;                 /* the layout of flash_dq_kernel */
    float* dOs = LEAN ? Qs : Qs + FBQ * ld;
    float* Ks = dOs + FBQ * ld;
    float* Vs = LEAN ? Ks : Ks + FBK * ld;
    float* dSt = Vs + FBK * ld;       /* (BK, LDP) ds, key-major */

    const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH, kvh = h / (NH / NKV);
    const int r0 = (gridDim.y - 1 - blockIdx.y) * FBQ, nq = min(FBQ, Tq - r0);
    const int i0 = iq0 + r0, iend = iq0 + Tq, jend = jk0 + Tk;
    const size_t C = (size_t)NH * HD;
    const float* k_b = k + (size_t)b * Tk * kv_stride + (size_t)kvh * HD;
    const float* v_b = v + (size_t)b * Tk * kv_stride + (size_t)kvh * HD;
    const uint32_t g = g0 + (uint32_t)b;

    const FlashRows qrows = flash_rows(q + ((size_t)b * Tq + r0) * q_stride + (size_t)h * HD, q_stride, 0, nq);
    const FlashRows orows = flash_rows(dout + ((size_t)b * Tq + r0) * C + (size_t)h * HD, C, 0, nq);
    if (!LEAN) {
        load_tile(Qs, ld, qrows.src, q_stride, nq, FBQ, HD);
        load_tile(dOs, ld, orows.src, C, nq, FBQ, HD);
    }
    float L[4], Di[4];
    for (int a = 0; a < 4; a++) {
        const int r = r0 + 4 * ty + a;
        L[a] = r < Tq ? lse[((size_t)b * NH + h) * Tq + r] : 0.0f;
        Di[a] = r < Tq ? D[((size_t)b * NH + h) * Tq + r] : 0.0f;
    }
    float acc[4][4 * NDM];
    for (int a = 0; a < 4; a++)
        for (int x = 0; x < 4 * NDM; x++) acc[a][x] = 0.0f;

    for (int jt = (jk0 / FBK) * FBK; jt < jend && jt <= i0 + nq - 1; jt += FBK) {
        const int nk = min(FBK, jend - jt);
        const FlashRows krows = flash_rows(k_b, kv_stride, jt - jk0, Tk);
        const FlashRows vrows = flash_rows(v_b, kv_stride, jt - jk0, Tk);
        __syncthreads();
        if (!LEAN) {
            load_window(Ks, ld, k_b, kv_stride, jt - jk0, Tk, FBK, HD);
            load_window(Vs, ld, v_b, kv_stride, jt - jk0, Tk, FBK, HD);
        }
        __syncthreads();

        float s[4][4], dp[4][4];
        if (LEAN) {
            score_tile_lean(s, Qs, qrows, Ks, krows, HD, ty, tx);
            score_tile_lean(dp, dOs, orows, Vs, vrows, HD, ty, tx);
        } else {
            score_tile(s, Qs, Ks, ld, width, ty, tx);
            score_tile(dp, dOs, Vs, ld, width, ty, tx);
        }
        softmax_grad_block(s, dp, L, Di, i0, iend, jt, jk0, jend, ty, tx, sigma, scale, seed, g,
                           (uint32_t)h, thr);
        for (int kk = 0; kk < 4; kk++)
            st4(dSt + key_of(tx, kk) * FLASH_LDP + 4 * ty, dp[0][kk], dp[1][kk], dp[2][kk], dp[3][kk]);
        __syncthreads();
        if (LEAN) tile_mac_lean<NDM>(acc, dSt, Ks, krows, nk, HD, tx, ty);
        else tile_mac<NDM>(acc, dSt, Ks, ld, nk, width, tx, ty);
    }

    for (int a = 0; a < 4; a++) {
        const int r = r0 + 4 * ty + a;
        if (r >= Tq) continue;
        float* dqr = dq + ((size_t)b * Tq + r) * dq_stride + (size_t)h * HD;
        for (int m = 0; m < NDM; m++)
            for (int x = 0; x < 4; x++) {
                const int d = 4 * tx + 64 * m + x;
                if (d < HD) dqr[d] += acc[a][4 * m + x] * sigma;
            }
    }
}

/* The merge: one thread a row (b, h, i), the CPU's formulas in the same order. */
__global__ void flash_merge_kernel(float* acc, float* lse_acc, const float* blk,
                                   const float* lse_blk, int B, int T, int NH, int HD) {
    const size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= (size_t)B * NH * T) return;
    const size_t bh = row / T, i = row % T, b = bh / NH, h = bh % NH;
    float* la = lse_acc + row;
    const float lb = lse_blk[row];
    if (lb == -INFINITY) return;
    const size_t at = (b * T + i) * NH * HD + h * HD;
    float* o = acc + at;
    const float* ob = blk + at;
    if (*la == -INFINITY) {
        for (int d = 0; d < HD; d++) o[d] = ob[d];
        *la = lb;
        return;
    }
    const float mx = *la > lb ? *la : lb;
    const float L = mx + logf(expf(*la - mx) + expf(lb - mx));
    const float wa = expf(*la - L), wb = expf(lb - L);
    for (int d = 0; d < HD; d++) o[d] = wa * o[d] + wb * ob[d];
    *la = L;
}

template <int NDM>
static void flash_block_forward_launch(float* out, float* lse, const float* q, size_t q_stride,
                                       int Tq, int iq0, const float* k, const float* v,
                                       size_t kv_stride, int Tk, int jk0, int B, int NH, int NKV,
                                       int HD, uint32_t g0, uint64_t seed, Dropout drop,
                                       float sigma) {
    size_t smem = flash_forward_smem(HD);
    auto* flash_block_forward = flash_take_lean("attention_block_forward_cuda", &smem)
                                    ? flash_block_forward_kernel<NDM, true>
                                    : flash_block_forward_kernel<NDM, false>;
    flash_allow_smem(flash_block_forward, smem);
    dim3 grid((unsigned)(B * NH), sg_ceil_div((size_t)Tq, FBQ));
    SG_LAUNCH(flash_block_forward, grid, dim3(FTHREADS), smem, out, lse, q, q_stride,
              Tq, iq0, k, v, kv_stride, Tk, jk0, NH, NKV, HD, g0, seed, drop.thr, drop.scale,
              sigma);
    SG_CHECK_LAUNCH();
}

extern "C" void attention_block_forward_cuda(float* out, float* lse, const float* q,
                                             size_t q_stride, int Tq, int iq0, const float* k,
                                             const float* v, size_t kv_stride, int Tk, int jk0,
                                             int B, int NH, int NKV, int HD, uint32_t g0,
                                             uint64_t attn_seed, Dropout drop) {
    flash_check_shapes("attention_block_forward_cuda", NH, NKV, HD);
    if (B <= 0 || Tq <= 0) return;
    attention_cuda_check_T("attention_block_forward_cuda", Tq);
    const float sigma = 1.0f / sqrtf((float)HD);
    if (HD <= 64)
        flash_block_forward_launch<1>(out, lse, q, q_stride, Tq, iq0, k, v, kv_stride, Tk, jk0, B,
                                      NH, NKV, HD, g0, attn_seed, drop, sigma);
    else
        flash_block_forward_launch<2>(out, lse, q, q_stride, Tq, iq0, k, v, kv_stride, Tk, jk0, B,
                                      NH, NKV, HD, g0, attn_seed, drop, sigma);
}

template <int NDM>
static void flash_block_backward_launch(float* dq, size_t dq_stride, float* dk, float* dv,
                                        size_t dkv_stride, float* scratch, const float* dout,
                                        const float* lse, const float* q, size_t q_stride, int Tq,
                                        int iq0, const float* k, const float* v, size_t kv_stride,
                                        int Tk, int jk0, int B, int NH, int NKV, int HD,
                                        uint32_t g0, uint64_t seed, Dropout drop, float sigma) {
    size_t smem1 = flash_dkdv_smem(HD), smem2 = flash_dq_smem(HD);
    const float* D = scratch;
    auto* flash_block_dkdv = flash_take_lean("attention_block_backward_cuda", &smem1)
                                 ? flash_block_dkdv_kernel<NDM, true>
                                 : flash_block_dkdv_kernel<NDM, false>;
    auto* flash_block_dq = flash_take_lean("attention_block_backward_cuda", &smem2)
                               ? flash_block_dq_kernel<NDM, true>
                               : flash_block_dq_kernel<NDM, false>;
    flash_allow_smem(flash_block_dkdv, smem1);
    flash_allow_smem(flash_block_dq, smem2);
    const int jbase = (jk0 / FBK) * FBK;
    dim3 grid1((unsigned)(B * NH), sg_ceil_div((size_t)(jk0 + Tk - jbase), FBK));
    if (NKV == NH) {   /* one query head per kv head: added straight into dk, dv */
        SG_LAUNCH(flash_block_dkdv, grid1, dim3(FTHREADS), smem1, dk, dv, dkv_stride,
                  sigma, 1, dout, lse, D, q, q_stride, Tq, iq0, k, v, kv_stride, Tk, jk0, NH, NKV,
                  HD, g0, seed, drop.thr, drop.scale, sigma);
        SG_CHECK_LAUNCH();
    } else {           /* partial sums per query head, then the group's sum in a fixed order */
        float* dKp = scratch + flash_round16((size_t)B * NH * Tq);
        float* dVp = dKp + flash_round16((size_t)B * Tk * NH * HD);
        SG_LAUNCH(flash_block_dkdv, grid1, dim3(FTHREADS), smem1, dKp, dVp,
                  (size_t)NH * HD, 1.0f, 0, dout, lse, D, q, q_stride, Tq, iq0, k, v, kv_stride,
                  Tk, jk0, NH, NKV, HD, g0, seed, drop.thr, drop.scale, sigma);
        SG_CHECK_LAUNCH();
        const size_t n = (size_t)B * Tk * NKV * HD;
        SG_LAUNCH(flash_block_group_sum_kernel, dim3(sg_ceil_div(n, 256)), dim3(256), 0, dk, dv,
                  dkv_stride, dKp, dVp, B, Tk, NH, NKV, HD, sigma);
        SG_CHECK_LAUNCH();
    }
    dim3 grid2((unsigned)(B * NH), sg_ceil_div((size_t)Tq, FBQ));
    SG_LAUNCH(flash_block_dq, grid2, dim3(FTHREADS), smem2, dq, dq_stride, dout, lse, D,
              q, q_stride, Tq, iq0, k, v, kv_stride, Tk, jk0, NH, NKV, HD, g0, seed, drop.thr,
              drop.scale, sigma);
    SG_CHECK_LAUNCH();
}

/* scratch: attention_backward_scratch_floats_cuda(B, T, ...) with T >= Tq and T >= Tk (D takes
 * B NH Tq floats; with grouped-query heads the partials take (B, Tk, NH, HD) each) */
extern "C" void attention_block_backward_cuda(float* dq, size_t dq_stride, float* dk, float* dv,
                                              size_t dkv_stride, float* scratch, const float* dout,
                                              const float* out, const float* lse, const float* q,
                                              size_t q_stride, int Tq, int iq0, const float* k,
                                              const float* v, size_t kv_stride, int Tk, int jk0,
                                              int B, int NH, int NKV, int HD, uint32_t g0,
                                              uint64_t attn_seed, Dropout drop) {
    flash_check_shapes("attention_block_backward_cuda", NH, NKV, HD);
    if (B <= 0 || Tq <= 0 || Tk <= 0) return;
    attention_cuda_check_T("attention_block_backward_cuda", Tq > Tk ? Tq : Tk + FBK);
    const float sigma = 1.0f / sqrtf((float)HD);
    attention_backward_dot_cuda(scratch, dout, out, B, Tq, NH, HD);   /* D (B, NH, Tq) */
    if (HD <= 64)
        flash_block_backward_launch<1>(dq, dq_stride, dk, dv, dkv_stride, scratch, dout, lse, q,
                                       q_stride, Tq, iq0, k, v, kv_stride, Tk, jk0, B, NH, NKV, HD,
                                       g0, attn_seed, drop, sigma);
    else
        flash_block_backward_launch<2>(dq, dq_stride, dk, dv, dkv_stride, scratch, dout, lse, q,
                                       q_stride, Tq, iq0, k, v, kv_stride, Tk, jk0, B, NH, NKV, HD,
                                       g0, attn_seed, drop, sigma);
}

extern "C" void attention_merge_cuda(float* acc, float* lse_acc, const float* blk,
                                     const float* lse_blk, int B, int T, int NH, int HD) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    SG_LAUNCH(flash_merge_kernel, dim3(sg_ceil_div(rows, 128)), dim3(128), 0, acc, lse_acc, blk,
              lse_blk, B, T, NH, HD);
    SG_CHECK_LAUNCH();
}
