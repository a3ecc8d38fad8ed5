/* attention/flash_cpu.c — the CPU flash attention: causal multi-head attention with grouped-query
 * heads and dropout on the attention probabilities, forward and backward, fused (DESIGN §5).
 *
 * Owns: the tiling, the online softmax, the deterministic partitioning of the backward, the tile
 * products and the exponential they use. Every keep bit comes from random/philox.h; this file
 * computes no Philox counter of its own. It allocates nothing: the forward's tile buffers live on
 * each thread's stack, the backward's in the caller's scratch. Memory is O(T) per head: no T x T
 * matrix exists, not even for one head.
 *
 * Per head (sigma = 1/sqrt(HD), causal j <= i, keep bit m_ij, scale = 1/(1-p)):
 *   s_ij = sigma q_i.k_j    LSE_i = log sum_j exp(s_ij)    p_ij = exp(s_ij - LSE_i)
 *   o_i  = sum_j (m_ij p_ij scale) v_j
 * Forward: for a tile of BQ query rows, walk the key tiles of BK keys left to right keeping a
 * running max m_i and a running sum l_i of the un-dropped weights exp(s_ij - m_i); the weights
 * that reach the P.V accumulation are multiplied by the keep bit; o_i = acc_i * scale / l_i at the
 * end. Dropping the unnormalised weight and dividing by the undropped sum is the same as dropping
 * the normalised p_ij.
 * Backward: D_i = do_i.o_i first; then p_ij is recomputed tile by tile from s_ij and LSE_i and the
 * same keep bits are drawn again.
 *   dv_j = sum_i (m p scale)_ij do_i     dp_ij = m_ij scale do_i.v_j     ds_ij = p_ij (dp_ij - D_i)
 *   dq_i = sigma sum_j ds_ij k_j          dk_j  = sigma sum_i ds_ij q_i
 *
 * Determinism (DESIGN §4): every output element is written by one work item, which sums its terms
 * in an order fixed by the tile sizes alone: no float atomics, no OpenMP reductions. dK and dV are
 * owned by (sequence, kv head, key tile) items that sum over the group's query heads, then the
 * query tiles, in ascending order; dQ by (sequence, query head, query tile) items that sum over
 * the key tiles in ascending order. The price is that the backward computes s and do.v, and draws
 * the keep bits, once in each pass.
 * Results are bitwise identical for any thread count and any OpenMP schedule; they do depend on
 * FLASH_BQ / FLASH_BK (the order of the online softmax and of the tile sums).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "attention/attention.h"
#include "random/philox_x16.h"
#if PHILOX_X16
#include "util/transpose16.h"
#endif
#include "util/vexp.h"

/* The element of qkv and out. This file is also compiled as attention/flash_bf16_cpu.c with
 * FLASH_BF16 defined, and as attention/flash_fp16_cpu.c with FLASH_FP16: qkv and out in that
 * 16-bit type, every name below the _bf16 (_fp16) twin's, and the roundings of
 * attention/flash_tc.cu added (OPERAND: a value rounded to the 16-bit type as it becomes a
 * product's operand): P after dropout before P.V, and in the backward dO, m p scale and ds.
 * Everything else (scores, softmax statistics, the tile sums) stays the fp32 arithmetic below;
 * 16-bit values read into fp32 are exact. */
#if defined(FLASH_BF16) || defined(FLASH_FP16)
typedef uint16_t qkv_t;
#ifdef FLASH_BF16
#include "util/bf16.h"
static inline float qkv_ld(qkv_t x) { return sg_bf16_to_float(x); }
static inline qkv_t out_st(float x) { return sg_bf16_from_float(x); }
#define OPERAND(x) sg_bf16_round(x)
#define FLASH_NAME(n) n##_bf16
#else
#include "util/fp16.h"
static inline float qkv_ld(qkv_t x) { return sg_fp16_to_float(x); }
static inline qkv_t out_st(float x) { return sg_fp16_from_float(x); }
#define OPERAND(x) sg_fp16_round(x)
#define FLASH_NAME(n) n##_fp16
#endif
#define FLASH_ROWBUFS 1
#define QKV_ARG const void*   /* the exported signatures: cpu/ops_bf16_cpu.h's */
#define OUT_ARG void*
#define OUT_CARG const void*
#else
typedef float qkv_t;
static inline float qkv_ld(qkv_t x) { return x; }
static inline qkv_t out_st(float x) { return x; }
#define OPERAND(x) (x)
#define FLASH_NAME(n) n
#define FLASH_ROWBUFS 0
#define QKV_ARG const float*   /* the exported signatures: attention/attention.h's */
#define OUT_ARG float*
#define OUT_CARG const float*
#endif

/* Tile sizes: BQ query rows by BK keys. Any positive values work (tests build the kernel with
 * others). Multiples of 8 keep the tile products in whole register blocks; BK a multiple of 64
 * draws no keep bit it does not use below the diagonal (one Philox call covers four keys spread
 * over 32; keep_tile draws two blocks of 32 at a time). One
 * thread's tiles take 2 (BQ + BK) HD + 2 BQ BK floats in the forward (on its stack: 64 KB at
 * 64 x 64, HD = 64; raise OMP_STACKSIZE for head dims in the thousands) and tiles_floats(HD) in
 * the backward (scratch: 128 KB at the same sizes). */
#ifndef FLASH_BQ
#define FLASH_BQ 64
#endif
#ifndef FLASH_BK
#define FLASH_BK 64
#endif
#define BQ FLASH_BQ
#define BK FLASH_BK

/* a * b + c. With hardware FMA, one rounding (fmaf compiles to a vector FMA); otherwise two. ISO C
 * mode (-std=c11) never contracts a * b + c on its own, so this macro and the AVX-512 block below
 * are the only places FMA enters. Either way a result depends on the machine's instruction set and
 * the tile sizes, never on threads. */
#if defined(__FMA__)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* The tile product has two implementations of one contract: an AVX-512 register block where the
 * machine has it (8 x 32 floats in 16 zmm registers; gcc -O2 vectorises plain C with 256-bit
 * vectors on such machines, and the products are most of the work: about 1.6x), and plain C
 * loops everywhere else. -DFLASH_PORTABLE forces the plain C one (tests/test_attention_tiles.c
 * builds it that way). With FMA both compute every element as the same chain of fused
 * multiply-adds, so they agree bitwise. */
#if defined(__AVX512F__) && defined(__FMA__) && !defined(FLASH_PORTABLE)
#define FLASH_AVX512 1
#include <immintrin.h>
#else
#define FLASH_AVX512 0
#endif

/* Rounds n up to a multiple of 16 floats, so every scratch buffer starts 64-byte aligned when the
 * scratch does. */
static size_t flash_round16(size_t n) { return (n + 15) & ~(size_t)15; }

#if FLASH_ROWBUFS
/* x[0..n) = OPERAND(x[i]): each value rounded to the 16-bit type (nearest even, NaN to its one
 * NaN) and kept as the fp32 it now equals. In bf16 the AVX-512 lanes compute sg_bf16_round's bits
 * (attention/attention.h exports it as attention_round_operands_bf16 for test_bf16; the fp16
 * twin's is attention_round_operands_fp16, plain C). */
#define ROUND_OPERANDS FLASH_NAME(attention_round_operands)
void ROUND_OPERANDS(float* restrict x, size_t n) {
    size_t i = 0;
#if FLASH_AVX512 && defined(FLASH_BF16)
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u), abs = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000), nan = _mm512_set1_epi32((int)(SG_BF16_NAN << 16));
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i r = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, half), lsb), hi);
        __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_mask_mov_epi32(r, isnan, nan)));
    }
#endif
    for (; i < n; i++) x[i] = OPERAND(x[i]);
}

/* dst[0..n) = the fp32 values of 16-bit src[0..n) (exact) */
static void widen_act(float* restrict dst, const uint16_t* restrict src, size_t n) {
    size_t i = 0;
#if FLASH_AVX512 && defined(FLASH_BF16)
    for (; i + 16 <= n; i += 16) {   /* bf16: the bits shifted up */
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#endif
    for (; i < n; i++) dst[i] = qkv_ld(src[i]);
}
#endif

/* ---- tile product ---------------------------------------------------------------------------- */

/* C (M x N, row stride ldc) = (accumulate ? C : 0) + sum_k A(m, k) B(k, n), with
 *   A(m, k) = A[m * a_rs + k * a_ks]   (a row-major tile, or a transposed view of one)
 *   B(k, n) = B[k * ldb + n]           (rows contiguous over n)
 * Every element sums its K terms in ascending k, one multiply-add each, whichever path computes
 * it, so a score the backward recomputes is bitwise the forward's. */
#if FLASH_AVX512

/* Rows m .. m + MRB - 1, columns n .. n + w - 1 (w <= 32) of C: MRB x 2 zmm accumulators; the
 * columns past w are masked off in every load and store. MRB is a constant at each call and the
 * row loops are unrolled (gcc -O2 would not), so the accumulators live in registers. */
static inline __attribute__((always_inline)) void
mm_block_avx512(const int MRB, float* restrict C, int ldc, int accumulate,
                const float* restrict A, int a_rs, int a_ks, const float* restrict B, int ldb,
                int m, int n, int w, int K) {
    const __mmask16 k0 = w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1);
    const __mmask16 k1 = w >= 32 ? (__mmask16)0xffff : w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
    __m512 c0[8], c1[8];
    #pragma GCC unroll 8
    for (int r = 0; r < MRB; r++) {
        float* crow = C + (size_t)(m + r) * ldc + n;
        c0[r] = accumulate ? _mm512_maskz_loadu_ps(k0, crow) : _mm512_setzero_ps();
        c1[r] = accumulate ? _mm512_maskz_loadu_ps(k1, crow + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < K; k++) {
        const float* brow = B + (size_t)k * ldb + n;
        const __m512 b0 = _mm512_maskz_loadu_ps(k0, brow);
        const __m512 b1 = _mm512_maskz_loadu_ps(k1, brow + 16);
        #pragma GCC unroll 8
        for (int r = 0; r < MRB; r++) {
            const __m512 a = _mm512_set1_ps(A[(size_t)(m + r) * a_rs + (size_t)k * a_ks]);
            c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < MRB; r++) {
        float* crow = C + (size_t)(m + r) * ldc + n;
        _mm512_mask_storeu_ps(crow, k0, c0[r]);
        _mm512_mask_storeu_ps(crow + 16, k1, c1[r]);
    }
}

static void tile_mm(float* restrict C, int ldc, int accumulate,
                    const float* restrict A, int a_rs, int a_ks,
                    const float* restrict B, int ldb, int M, int N, int K) {
    int m = 0;
    for (; m + 8 <= M; m += 8)
        for (int n = 0; n < N; n += 32)
            mm_block_avx512(8, C, ldc, accumulate, A, a_rs, a_ks, B, ldb, m, n,
                            N - n < 32 ? N - n : 32, K);
    for (; m < M; m++)                           /* row tail, one row at a time */
        for (int n = 0; n < N; n += 32)
            mm_block_avx512(1, C, ldc, accumulate, A, a_rs, a_ks, B, ldb, m, n,
                            N - n < 32 ? N - n : 32, K);
}

#else /* plain C */

/* A block of MR rows by NR columns: gcc vectorises the loops over x (fixed trip count) and, with
 * the row loop unrolled, keeps the block in vector registers. */
#define FLASH_MR 8
#define FLASH_NR 16

static void tile_mm(float* restrict C, int ldc, int accumulate,
                    const float* restrict A, int a_rs, int a_ks,
                    const float* restrict B, int ldb, int M, int N, int K) {
    int m = 0;
    for (; m + FLASH_MR <= M; m += FLASH_MR) {
        int n = 0;
        for (; n + FLASH_NR <= N; n += FLASH_NR) {
            float c[FLASH_MR][FLASH_NR];
            for (int r = 0; r < FLASH_MR; r++)
                for (int x = 0; x < FLASH_NR; x++)
                    c[r][x] = accumulate ? C[(size_t)(m + r) * ldc + n + x] : 0.0f;
            for (int k = 0; k < K; k++) {
                const float* b = B + (size_t)k * ldb + n;
                #pragma GCC unroll 8
                for (int r = 0; r < FLASH_MR; r++) {
                    const float a = A[(size_t)(m + r) * a_rs + (size_t)k * a_ks];
                    for (int x = 0; x < FLASH_NR; x++) c[r][x] = MADD(a, b[x], c[r][x]);
                }
            }
            for (int r = 0; r < FLASH_MR; r++)
                for (int x = 0; x < FLASH_NR; x++) C[(size_t)(m + r) * ldc + n + x] = c[r][x];
        }
        for (; n < N; n++)                       /* column tail */
            for (int r = 0; r < FLASH_MR; r++) {
                float c = accumulate ? C[(size_t)(m + r) * ldc + n] : 0.0f;
                for (int k = 0; k < K; k++)
                    c = MADD(A[(size_t)(m + r) * a_rs + (size_t)k * a_ks], B[(size_t)k * ldb + n], c);
                C[(size_t)(m + r) * ldc + n] = c;
            }
    }
    for (; m < M; m++)                           /* row tail */
        for (int n = 0; n < N; n++) {
            float c = accumulate ? C[(size_t)m * ldc + n] : 0.0f;
            for (int k = 0; k < K; k++)
                c = MADD(A[(size_t)m * a_rs + (size_t)k * a_ks], B[(size_t)k * ldb + n], c);
            C[(size_t)m * ldc + n] = c;
        }
}

#endif

/* ---- tile helpers ---------------------------------------------------------------------------- */

/* dst (HD, width) = the transpose of n source rows of HD floats (row stride ld); columns
 * n .. width-1 are zero, so a tile product can always run the full width. Each pass transposes the
 * operand it keeps fixed once per work item, so no product ever needs a transposed copy of the
 * operand that changes from tile to tile. */
static void transpose_rows(float* restrict dst, int width, const float* restrict src, size_t ld,
                           int n, int HD) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < HD; d++) dst[(size_t)d * width + j] = src[(size_t)j * ld + d];
    for (int d = 0; d < HD; d++)
        for (int j = n; j < width; j++) dst[(size_t)d * width + j] = 0.0f;
}

/* The same from rows of qkv (bf16 or fp32) */
static void transpose_qkv(float* restrict dst, int width, const qkv_t* restrict src, size_t ld,
                          int n, int HD) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < HD; d++) dst[(size_t)d * width + j] = qkv_ld(src[(size_t)j * ld + d]);
    for (int d = 0; d < HD; d++)
        for (int j = n; j < width; j++) dst[(size_t)d * width + j] = 0.0f;
}

/* n rows of HD values of qkv (row stride ld) as fp32 rows for a tile product: in fp32 the rows
 * themselves (*ld_out = ld); in bf16 their values copied to buf (*ld_out = HD). op_round: the
 * values rounded to bf16 as operands (fp32 sources such as dO in the bf16 twin) */
static const float* rows_f32(float* restrict buf, const qkv_t* src, size_t ld, int n, int HD,
                             int* ld_out) {
#if FLASH_ROWBUFS
    for (int j = 0; j < n; j++) widen_act(buf + (size_t)j * HD, src + (size_t)j * ld, (size_t)HD);
    *ld_out = HD;
    return buf;
#else
    (void)buf; (void)n; (void)HD;
    *ld_out = (int)ld;
    return (const float*)src;
#endif
}

/* n rows of HD fp32 values (row stride ld) as product operands: in bf16 rounded into buf */
static const float* operand_rows(float* restrict buf, const float* src, size_t ld, int n, int HD,
                                 int* ld_out) {
#if FLASH_ROWBUFS
    for (int j = 0; j < n; j++) {
        memcpy(buf + (size_t)j * HD, src + (size_t)j * ld, sizeof(float) * (size_t)HD);
        ROUND_OPERANDS(buf + (size_t)j * HD, (size_t)HD);
    }
    *ld_out = HD;
    return buf;
#else
    (void)buf; (void)n; (void)HD;
    *ld_out = (int)ld;
    return src;
#endif
}

/* How many keys of the tile j0 .. j0 + nk - 1 query i sees (causal j <= i): 0 .. nk. */
static int visible_keys(int i, int j0, int nk) {
    int nv = i - j0 + 1;
    return nv < 0 ? 0 : (nv > nk ? nk : nv);
}

/* The keep bits of a tile: queries i0 + r (r < nq) against keys j0 + c (c < nk) of head h in
 * sequence g. keep[r * rs + c * cs] = 1.0f if kept (draw >= thr), else 0.0f; every entry of the
 * rows x cols tile is written (0 for the future j > i, where nothing is drawn, and for padding
 * r >= nq or c >= nk), so the loops that read it need no branch. One Philox call gives keys j,
 * j+8, j+16, j+24 of an aligned block of 32, and keys are drawn two blocks (sixteen calls) at a
 * time: in the lanes of AVX-512 registers where the CPU has them (random/philox_x16.h, the same
 * draws; the bits are then set eight lanes at a time, a row at a time, and a tile stored by
 * columns is transposed 16 x 16), else call by call. */

/* row r's keep bits, one float each, kr[c * cs] for c < cols, the scalar way */
static void keep_row_scalar(float* restrict kr, int cs, int cols, int i, int j0, int nv,
                            uint64_t seed, uint32_t g, uint32_t h, uint32_t thr) {
    for (int c = nv; c < cols; c++) kr[(size_t)c * cs] = 0.0f;
    if (nv == 0) return;
    for (int blk = j0 >> 5; blk <= (j0 + nv - 1) >> 5; blk += 2) {
        uint32_t draw[4][16];   /* draw[w][8 half + lo]: key 32 (blk + half) + 8 w + lo */
        for (int k = 0; k < 16; k++) {
            uint32_t d4[4];
            philox_attn_draw4(seed, g, h, (uint32_t)i, (uint32_t)(blk + (k >> 3)), (uint32_t)(k & 7), d4);
            for (int w = 0; w < 4; w++) draw[w][k] = d4[w];
        }
        for (int half = 0; half < 2; half++) {
            const int cb = ((blk + half) << 5) - j0;   /* tile column of the block's key 0 */
            for (int w = 0; w < 4; w++)
                for (int lo = 0; lo < 8; lo++) {
                    const int c = cb + 8 * w + lo;
                    if (c >= 0 && c < nv) kr[(size_t)c * cs] = draw[w][8 * half + lo] >= thr ? 1.0f : 0.0f;
                }
        }
    }
}

#if PHILOX_X16
/* keep[r * rs + c * cs] = rowm[r * ld + c] for r < rows, c < cols: 16 x 16 blocks in registers
 * where whole, the rest one by one */
__attribute__((target("avx512f")))
static void keep_transpose(float* restrict keep, int rs, int cs, const float* restrict rowm, int ld,
                           int rows, int cols) {
    const int rw = rows / 16 * 16, cw = cols / 16 * 16;
    for (int r0 = 0; r0 < rw; r0 += 16)
        for (int c0 = 0; c0 < cw; c0 += 16) {
            __m512i v[16];
            for (int r = 0; r < 16; r++) v[r] = _mm512_loadu_si512(rowm + (size_t)(r0 + r) * ld + c0);
            transpose16(v);   /* v[c] lane r: row r0 + r, column c0 + c */
            if (rs == 1)
                for (int c = 0; c < 16; c++) _mm512_storeu_si512(keep + (size_t)(c0 + c) * cs + r0, v[c]);
            else
                for (int c = 0; c < 16; c++) {
                    float t[16];
                    _mm512_storeu_si512(t, v[c]);
                    for (int r = 0; r < 16; r++) keep[(size_t)(r0 + r) * rs + (size_t)(c0 + c) * cs] = t[r];
                }
        }
    for (int r = 0; r < rows; r++)
        for (int c = r < rw ? cw : 0; c < cols; c++)
            keep[(size_t)r * rs + (size_t)c * cs] = rowm[(size_t)r * ld + c];
}

/* the same row, contiguous (kr[c], c < cols), with philox_x16.h's sixteen calls at a time */
__attribute__((target("avx512f,avx512vl")))
static void keep_row_x16(float* restrict kr, int cols, int i, int j0, int nv, uint64_t seed,
                         uint32_t g, uint32_t h, uint32_t thr) {
    for (int c = nv; c < cols; c++) kr[c] = 0.0f;
    if (nv == 0) return;
    const __m512i vthr = _mm512_set1_epi32((int)thr);
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int blk = j0 >> 5; blk <= (j0 + nv - 1) >> 5; blk += 2) {
        uint32_t draw[4][16];
        philox_attn_draw64_x16(seed, g, h, (uint32_t)i, (uint32_t)blk, draw);
        for (int half = 0; half < 2; half++) {
            const int cb = ((blk + half) << 5) - j0;
            if (cb >= nv) break;
            if (cb < 0 || cb + 32 > cols) {            /* a block cut by the tile: key by key */
                for (int w = 0; w < 4; w++)
                    for (int lo = 0; lo < 8; lo++) {
                        const int c = cb + 8 * w + lo;
                        if (c >= 0 && c < nv) kr[c] = draw[w][8 * half + lo] >= thr ? 1.0f : 0.0f;
                    }
                continue;
            }
            for (int w = 0; w < 4; w++) {
                const int c0 = cb + 8 * w;             /* keys c0 .. c0 + 7: lanes 8 half .. */
                if (c0 >= nv) break;
                const __mmask16 kept = _mm512_cmpge_epu32_mask(_mm512_loadu_si512(draw[w]), vthr);
                const int nvis = nv - c0 < 8 ? nv - c0 : 8;
                const __mmask8 m = (__mmask8)((kept >> (8 * half)) & ((1u << nvis) - 1u));
                _mm256_storeu_ps(kr + c0, _mm256_maskz_mov_ps(m, one));   /* 0 past nv, as it was */
            }
        }
    }
}
#endif

static void keep_tile(float* restrict keep, int rs, int cs, int rows, int cols,
                      int i0, int nq, int j0, int nk,
                      uint64_t seed, uint32_t g, uint32_t h, uint32_t thr) {
    (void)nk;
#if PHILOX_X16
    if (philox_x16_supported()) {
        if (cs == 1) {
            for (int r = 0; r < rows; r++)
                keep_row_x16(keep + (size_t)r * rs, cols, i0 + r, j0,
                             r < nq ? visible_keys(i0 + r, j0, nk) : 0, seed, g, h, thr);
            return;
        }
        /* stored by columns: the rows here, then transposed (16 x 16 where whole); a tile
         * larger than the buffer (the tests' odd shapes only) goes the scalar way */
        enum { ROWM = 64 * 64 };
        if ((size_t)rows * cols <= ROWM) {
            float rowm[ROWM] __attribute__((aligned(64)));
            for (int r = 0; r < rows; r++)
                keep_row_x16(rowm + (size_t)r * cols, cols, i0 + r, j0,
                             r < nq ? visible_keys(i0 + r, j0, nk) : 0, seed, g, h, thr);
            keep_transpose(keep, rs, cs, rowm, cols, rows, cols);
            return;
        }
    }
#endif
    for (int r = 0; r < rows; r++)
        keep_row_scalar(keep + (size_t)r * rs, cs, cols, i0 + r, j0,
                        r < nq ? visible_keys(i0 + r, j0, nk) : 0, seed, g, h, thr);
}

#ifdef SEEDGPT_TEST_BUILD
#if !FLASH_ROWBUFS   /* one hook for all twins: the fp32 compilation defines it */
void (*attention_keep_hook)(uint32_t g, int h, int i, int j, int kept) = NULL;
#endif

/* Test builds tell the hook every keep bit a forward tile used: (g, h, i, j) global. */
static void report_keep_bits(const float* keep, int rs, int cs, int i0, int nq, int j0, int nk,
                             uint32_t g, int h) {
    if (attention_keep_hook == NULL) return;
    for (int r = 0; r < nq; r++) {
        const int nv = visible_keys(i0 + r, j0, nk);
        for (int c = 0; c < nv; c++)
            attention_keep_hook(g, h, i0 + r, j0 + c, keep[(size_t)r * rs + (size_t)c * cs] != 0.0f);
    }
}
#endif

/* ---- forward --------------------------------------------------------------------------------- */

/* Work item (b, h, query tile of BQ rows). Its scores are held key-major, St[c * BQ + r] =
 * s(i0 + r, j0 + c), so that every softmax step runs along a key row with one lane per query:
 * the running max, the rescale and the running sum of each query are vector operations, and each
 * query sums its keys in ascending order. */
static void flash_forward(qkv_t* out, float* lse, const qkv_t* qkv, int B, int T, int NH, int NKV,
                          int HD, uint32_t g0, uint64_t attn_seed, Dropout drop, float* stats) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;  /* qkv row stride */
    const size_t C = (size_t)NH * HD;                 /* out row stride */
    const int G = NH / NKV;                           /* query heads per kv head */
    const int nqt = (T + BQ - 1) / BQ;
    const float sigma = 1.0f / sqrtf((float)HD);
    const long n_items = (long)B * NH * nqt;

    #pragma omp parallel
    {
        /* This thread's tiles, on its stack: */
        float Qt[HD * BQ] __attribute__((aligned(64)));    /* (HD, BQ) queries, transposed */
        float St[BK * BQ] __attribute__((aligned(64)));    /* (BK, BQ) scores, then weights */
        float keep[BK * BQ] __attribute__((aligned(64)));  /* (BK, BQ) keep bits */
        float acc[BQ * HD] __attribute__((aligned(64)));   /* (BQ, HD) sum of weight * v */
#if FLASH_ROWBUFS
        float Kb[BK * HD] __attribute__((aligned(64)));    /* (BK, HD) keys as fp32 */
        float Vb[BK * HD] __attribute__((aligned(64)));    /* (BK, HD) values as fp32 */
#else
        float *Kb = NULL, *Vb = NULL;
#endif
        float mrun[BQ], lrun[BQ];   /* running max; running sum of the undropped weights */
        float corr[BQ], tsum[BQ];   /* this key tile: rescale of the old sums; sum of its weights */
        /* --log-attn-stats: this thread's max |s| over the scores it computed, min and max LSE */
        float smax = 0.0f, lmin = INFINITY, lmax = -INFINITY;

        /* The longest rows (the last query tiles) first, to balance the load. The schedule cannot
         * change a result: each item owns its outputs. */
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < n_items; item++) {
            const int qt = nqt - 1 - (int)(item / ((long)B * NH));
            const int bh = (int)(item % ((long)B * NH));
            const int b = bh / NH, h = bh % NH, kvh = h / G;
            const int i0 = qt * BQ, nq = T - i0 < BQ ? T - i0 : BQ;
            const qkv_t* qkv_b = qkv + (size_t)b * T * QKV;

            transpose_qkv(Qt, BQ, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq, HD);
            memset(acc, 0, sizeof(float) * (size_t)nq * HD);
            /* -FLT_MAX, not -inf: the padding queries r >= nq see no key, and must rescale by
             * exp(0) = 1 rather than by exp(-inf + inf) = NaN. A real query sees key 0 in the first
             * tile, where its factor exp(-FLT_MAX - m) is 0. */
            for (int r = 0; r < BQ; r++) { mrun[r] = -FLT_MAX; lrun[r] = 0.0f; }

            for (int j0 = 0; j0 < i0 + nq; j0 += BK) {      /* key tiles up to the last query */
                const int nk = i0 + nq - j0 < BK ? i0 + nq - j0 : BK;
                int ldk, ldv;
                const float* k_rows = rows_f32(Kb, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD,
                                               QKV, nk, HD, &ldk);
                const float* v_rows = rows_f32(Vb, qkv_b + (size_t)j0 * QKV +
                                                   (size_t)(NH + NKV + kvh) * HD, QKV, nk, HD, &ldv);
                tile_mm(St, BQ, 0, k_rows, ldk, 1, Qt, BQ, nk, BQ, HD);  /* (nk, BQ) K Q^T */

                /* s = sigma q.k where the query sees the key, -inf elsewhere (and for padding) */
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < BQ; r++) {
                        const float sc = St[c * BQ + r] * sigma;
                        St[c * BQ + r] = ((j0 + c <= i0 + r) & (r < nq)) ? sc : -INFINITY;
                    }
                if (stats != NULL)   /* the scores as they are: -inf where not seen */
                    for (int c = 0; c < nk; c++)
                        for (int r = 0; r < nq; r++)
                            if (j0 + c <= i0 + r) smax = fmaxf(smax, fabsf(St[c * BQ + r]));
                for (int r = 0; r < BQ; r++) corr[r] = mrun[r];
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < BQ; r++)
                        mrun[r] = St[c * BQ + r] > mrun[r] ? St[c * BQ + r] : mrun[r];
                for (int r = 0; r < BQ; r++) { corr[r] = vexpf(corr[r] - mrun[r]); tsum[r] = 0.0f; }
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < BQ; r++) {
                        const float w = vexpf(St[c * BQ + r] - mrun[r]);
                        St[c * BQ + r] = w;
                        tsum[r] += w;
                    }
                for (int r = 0; r < BQ; r++) lrun[r] = lrun[r] * corr[r] + tsum[r];

                /* dropout: only the weights that reach v lose the dropped keys */
                if (dropout_active(drop)) {
                    keep_tile(keep, 1, BQ, BQ, nk, i0, nq, j0, nk, attn_seed, g0 + (uint32_t)b,
                              (uint32_t)h, drop.thr);
#ifdef SEEDGPT_TEST_BUILD
                    report_keep_bits(keep, 1, BQ, i0, nq, j0, nk, g0 + (uint32_t)b, h);
#endif
                    for (int c = 0; c < nk; c++)
                        for (int r = 0; r < BQ; r++)
                            St[c * BQ + r] = keep[c * BQ + r] != 0.0f ? St[c * BQ + r] : 0.0f;
                }
#if FLASH_ROWBUFS
                /* the weights as P.V's operands: rounded after the sum and the dropout */
                ROUND_OPERANDS(St, (size_t)nk * BQ);
#endif
                for (int r = 0; r < nq; r++) {
                    float* a = acc + (size_t)r * HD;
                    #pragma omp simd
                    for (int d = 0; d < HD; d++) a[d] *= corr[r];
                }
                /* acc += W V: A(r, c) = St[c * BQ + r] */
                tile_mm(acc, HD, 1, St, 1, BQ, v_rows, ldv, nq, HD, nk);
            }

            for (int r = 0; r < nq; r++) {
                const int i = i0 + r;
                const float rs = drop.scale / lrun[r];
                qkv_t* o = out + ((size_t)b * T + i) * C + (size_t)h * HD;
                #pragma omp simd
                for (int d = 0; d < HD; d++) o[d] = out_st(acc[(size_t)r * HD + d] * rs);
                lse[((size_t)b * NH + h) * T + i] = mrun[r] + logf(lrun[r]);
                if (stats != NULL) {
                    lmin = fminf(lmin, lse[((size_t)b * NH + h) * T + i]);
                    lmax = fmaxf(lmax, lse[((size_t)b * NH + h) * T + i]);
                }
            }
        }
        if (stats != NULL) {
            /* max and min are exact in any order: the threads' parts in any order are the same */
            #pragma omp critical
            {
                stats[0] = fmaxf(stats[0], smax);
                stats[1] = fminf(stats[1], lmin);
                stats[2] = fmaxf(stats[2], lmax);
            }
        }
    }
}

void FLASH_NAME(attention_forward)(OUT_ARG out, float* lse, QKV_ARG qkv,
                                   int B, int T, int NH, int NKV, int HD,
                                   uint32_t g0, uint64_t attn_seed, Dropout drop) {
    flash_forward(out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop, NULL);
}

void FLASH_NAME(attention_forward_stats)(OUT_ARG out, float* lse, QKV_ARG qkv,
                                         int B, int T, int NH, int NKV, int HD,
                                         uint32_t g0, uint64_t attn_seed, Dropout drop,
                                         float stats[3]) {
    stats[0] = 0.0f;
    stats[1] = INFINITY;
    stats[2] = -INFINITY;
    flash_forward(out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop, stats);
}

/* ---- backward -------------------------------------------------------------------------------- */

/* One thread's backward tiles, carved out of the scratch. Pass 1 holds its tiles query-major,
 * X[r * BK + c]; pass 2 key-major, X[c * BQ + r]. */
typedef struct {
    float* X1;    /* (HD, max(BQ, BK)) pass 1: keys, transposed; pass 2: queries, transposed */
    float* X2;    /* (HD, max(BQ, BK)) pass 1: values, transposed; pass 2: do, transposed */
    float* P;     /* (BQ, BK) s, then p */
    float* dS;    /* (BQ, BK) do.v, then ds */
    float* Pd;    /* (BQ, BK) m p scale: the weights the forward applied to v (pass 1) */
    float* keep;  /* (BQ, BK) keep bits */
    float* acc1;  /* (max(BQ, BK), HD) pass 1: dK before sigma; pass 2: dQ before sigma */
    float* acc2;  /* (BK, HD) pass 1: dV */
    float* Lt;    /* (BQ) pass 2: LSE of the tile's queries, 0 for padding */
    float* Dt;    /* (BQ) pass 2: D of the tile's queries, 0 for padding */
    float* R1;    /* (max(BQ, BK), HD) bf16 twin: rows of q (pass 1) or k (pass 2) as fp32 */
    float* R2;    /* (max(BQ, BK), HD) bf16 twin: rows of v (pass 2) */
    float* R3;    /* (max(BQ, BK), HD) bf16 twin: rows of dO rounded to bf16 (pass 1), a key tile's
                   * share of dQ (pass 2) */
} ThreadTiles;

#define FLASH_BQK (BQ > BK ? BQ : BK)

static size_t tiles_floats(int HD) {
    return 2 * flash_round16((size_t)HD * FLASH_BQK) + 4 * flash_round16((size_t)BQ * BK)
         + flash_round16((size_t)FLASH_BQK * HD) + flash_round16((size_t)BK * HD)
         + 2 * flash_round16(BQ)
         + (FLASH_ROWBUFS ? 3 * flash_round16((size_t)FLASH_BQK * HD) : 0);
}

static ThreadTiles tiles_at(float* base, int HD) {
    ThreadTiles t;
    t.X1 = base;   base += flash_round16((size_t)HD * FLASH_BQK);
    t.X2 = base;   base += flash_round16((size_t)HD * FLASH_BQK);
    t.P = base;    base += flash_round16((size_t)BQ * BK);
    t.dS = base;   base += flash_round16((size_t)BQ * BK);
    t.Pd = base;   base += flash_round16((size_t)BQ * BK);
    t.keep = base; base += flash_round16((size_t)BQ * BK);
    t.acc1 = base; base += flash_round16((size_t)FLASH_BQK * HD);
    t.acc2 = base; base += flash_round16((size_t)BK * HD);
    t.Lt = base;   base += flash_round16(BQ);
    t.Dt = base;   base += flash_round16(BQ);
    t.R1 = t.R2 = t.R3 = NULL;
#if FLASH_ROWBUFS
    t.R1 = base;   base += flash_round16((size_t)FLASH_BQK * HD);
    t.R2 = base;   base += flash_round16((size_t)FLASH_BQK * HD);
    t.R3 = base;
#endif
    return t;
}

size_t FLASH_NAME(attention_backward_scratch_floats)(int B, int T, int NH, int NKV, int HD,
                                                    int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return flash_round16((size_t)B * NH * T)            /* D_i = do_i . o_i */
         + (size_t)nthreads * tiles_floats(HD);
}

/* The softmax backward of one row of a tile. On entry p holds q.k and ds holds do.v; on exit
 *   p  = p_ij = exp(sigma q.k - LSE_i)   (0 where the query does not see the key, or padding)
 *   pd = m_ij p_ij scale                  (the weight the forward applied to v_j)
 *   ds = p_ij (m_ij scale do_i.v_j - D_i)
 * keep == NULL: no dropout (m = 1). The exponential is computed everywhere and then selected, so
 * the loops have no branch and vectorise. */

/* Pass 1: query row i against the BK keys j0 + c of a query-major tile (nk real). */
static void grad_query_row(float* restrict p, float* restrict pd, float* restrict ds,
                           const float* restrict keep, int i, int j0, int nk, float sigma,
                           float L, float Di, float scale) {
    for (int c = 0; c < BK; c++) {
        const float e = vexpf(p[c] * sigma - L);
        p[c] = ((j0 + c <= i) & (c < nk)) ? e : 0.0f;
    }
    if (keep)
        for (int c = 0; c < BK; c++) {
            const float ms = keep[c] != 0.0f ? scale : 0.0f;   /* m_ij scale */
            pd[c] = p[c] * ms;
            ds[c] = p[c] * (ds[c] * ms - Di);
        }
    else
        for (int c = 0; c < BK; c++) {
            pd[c] = p[c] * scale;
            ds[c] = p[c] * (ds[c] * scale - Di);
        }
}

/* Pass 2: key row j against the BQ queries i0 + r of a key-major tile (nq real); L and Di per
 * query in Lt, Dt. pd is not needed there. */
static void grad_key_row(float* restrict p, float* restrict ds, const float* restrict keep,
                         const float* restrict Lt, const float* restrict Dt, int j, int i0, int nq,
                         float sigma, float scale) {
    for (int r = 0; r < BQ; r++) {
        const float e = vexpf(p[r] * sigma - Lt[r]);
        p[r] = ((j <= i0 + r) & (r < nq)) ? e : 0.0f;
    }
    if (keep)
        for (int r = 0; r < BQ; r++) {
            const float ms = keep[r] != 0.0f ? scale : 0.0f;
            ds[r] = p[r] * (ds[r] * ms - Dt[r]);
        }
    else
        for (int r = 0; r < BQ; r++) ds[r] = p[r] * (ds[r] * scale - Dt[r]);
}

/* In the forward pass o_i = sum_j m_ij p_ij scale v_j with p_ij = exp(s_ij - LSE_i), so now:
 *   dv_j += m_ij p_ij scale do_i      dp_ij = m_ij scale do_i.v_j      ds_ij = p_ij (dp_ij - D_i)
 *   dk_j += sigma ds_ij q_i           dq_i += sigma ds_ij k_j
 * The scores come from the same tile product as the forward's (every element the same chain of
 * multiply-adds over d), so each p_ij is recomputed from bitwise the forward's s_ij. */
void FLASH_NAME(attention_backward)(float* dqkv, float* scratch, const float* dout,
                                    QKV_ARG qkv_, OUT_CARG out_, const float* lse,
                                    int B, int T, int NH, int NKV, int HD,
                                    uint32_t g0, uint64_t attn_seed, Dropout drop) {
    const qkv_t* qkv = qkv_;
    const qkv_t* out = out_;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const size_t C = (size_t)NH * HD;
    const int G = NH / NKV;
    const int nqt = (T + BQ - 1) / BQ, nkt = (T + BK - 1) / BK;
    const float sigma = 1.0f / sqrtf((float)HD);
    const int dropping = dropout_active(drop);
    float* D = scratch;                                   /* (B, NH, T) */
    float* tiles_base = scratch + flash_round16((size_t)B * NH * T);
    const size_t per_thread = tiles_floats(HD);

#ifdef SEEDGPT_TEST_BUILD
    /* Test builds poison the scratch: a read of anything this call did not write shows as NaN. */
    {
        int nt = 1;
#ifdef _OPENMP
        nt = omp_get_max_threads();
#endif
        const size_t n = flash_round16((size_t)B * NH * T) + (size_t)nt * per_thread;
        for (size_t x = 0; x < n; x++) scratch[x] = NAN;
    }
#endif

    #pragma omp parallel
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        ThreadTiles t = tiles_at(tiles_base + (size_t)tid * per_thread, HD);

        /* Pass 0: D_i = do_i . o_i for every (b, h, i); o is the forward's output, after dropout. */
        #pragma omp for schedule(static)
        for (long bh = 0; bh < (long)B * NH; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            for (int i = 0; i < T; i++) {
                const qkv_t* o = out + ((size_t)b * T + i) * C + (size_t)h * HD;
                const float* dO = dout + ((size_t)b * T + i) * C + (size_t)h * HD;
                float s = 0.0f;   /* the chain of multiply-adds the tile products use */
                for (int d = 0; d < HD; d++) s = MADD(dO[d], qkv_ld(o[d]), s);
                D[(size_t)bh * T + i] = s;
            }
        }
        /* (the barrier at the end of omp for: pass 1 reads every D) */

        /* Pass 1: dK, dV. Item (b, kv head, key tile), the longest columns (first tiles) first.
         * It sums over its group's query heads, then over the query tiles from the diagonal down,
         * in that fixed order. Tiles query-major: P[r * BK + c]. */
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < (long)B * NKV * nkt; item++) {
            const int kt = (int)(item / ((long)B * NKV));
            const int bk = (int)(item % ((long)B * NKV));
            const int b = bk / NKV, kvh = bk % NKV;
            const int j0 = kt * BK, nk = T - j0 < BK ? T - j0 : BK;
            const uint32_t g = g0 + (uint32_t)b;
            const qkv_t* qkv_b = qkv + (size_t)b * T * QKV;
            float* Kt = t.X1;   /* (HD, BK) */
            float* Vt = t.X2;   /* (HD, BK) */
            transpose_qkv(Kt, BK, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD, QKV, nk, HD);
            transpose_qkv(Vt, BK, qkv_b + (size_t)j0 * QKV + (size_t)(NH + NKV + kvh) * HD, QKV, nk, HD);
            memset(t.acc1, 0, sizeof(float) * (size_t)nk * HD);
            memset(t.acc2, 0, sizeof(float) * (size_t)nk * HD);
            for (int h = kvh * G; h < (kvh + 1) * G; h++) {
                const float* lse_bh = lse + ((size_t)b * NH + h) * T;
                const float* D_bh = D + ((size_t)b * NH + h) * T;
                for (int i0 = (j0 / BQ) * BQ; i0 < T; i0 += BQ) {
                    const int nq = T - i0 < BQ ? T - i0 : BQ;
                    int ldq, ldo;
                    const float* q_rows = rows_f32(t.R1, qkv_b + (size_t)i0 * QKV + (size_t)h * HD,
                                                   QKV, nq, HD, &ldq);
                    const float* do_rows = operand_rows(t.R3, dout + ((size_t)b * T + i0) * C +
                                                                  (size_t)h * HD, C, nq, HD, &ldo);
                    tile_mm(t.P, BK, 0, q_rows, ldq, 1, Kt, BK, nq, BK, HD);    /* Q K^T */
                    tile_mm(t.dS, BK, 0, do_rows, ldo, 1, Vt, BK, nq, BK, HD);  /* dO V^T */
                    if (dropping)
                        keep_tile(t.keep, BK, 1, nq, BK, i0, nq, j0, nk, attn_seed, g, (uint32_t)h,
                                  drop.thr);
                    for (int r = 0; r < nq; r++)
                        grad_query_row(t.P + (size_t)r * BK, t.Pd + (size_t)r * BK,
                                       t.dS + (size_t)r * BK, dropping ? t.keep + (size_t)r * BK : NULL,
                                       i0 + r, j0, nk, sigma, lse_bh[i0 + r], D_bh[i0 + r], drop.scale);
#if FLASH_ROWBUFS
                    /* m p scale and ds as operands */
                    ROUND_OPERANDS(t.Pd, (size_t)nq * BK);
                    ROUND_OPERANDS(t.dS, (size_t)nq * BK);
#endif
                    /* dK += dS^T Q, dV += Pd^T dO: A(c, r) = X[r * BK + c] */
                    tile_mm(t.acc1, HD, 1, t.dS, 1, BK, q_rows, ldq, nk, HD, nq);
                    tile_mm(t.acc2, HD, 1, t.Pd, 1, BK, do_rows, ldo, nk, HD, nq);
                }
            }
            for (int j = 0; j < nk; j++) {
                float* dk = dqkv + ((size_t)b * T + j0 + j) * QKV + (size_t)(NH + kvh) * HD;
                float* dv = dqkv + ((size_t)b * T + j0 + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                #pragma omp simd
                for (int d = 0; d < HD; d++) {
                    dk[d] = t.acc1[(size_t)j * HD + d] * sigma;
                    dv[d] = t.acc2[(size_t)j * HD + d];
                }
            }
        }

        /* Pass 2: dQ. Item (b, query head, query tile), the longest rows first; it sums over the
         * key tiles in ascending order. Tiles key-major: P[c * BQ + r]. */
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < (long)B * NH * nqt; item++) {
            const int qt = nqt - 1 - (int)(item / ((long)B * NH));
            const int bh = (int)(item % ((long)B * NH));
            const int b = bh / NH, h = bh % NH, kvh = h / G;
            const int i0 = qt * BQ, nq = T - i0 < BQ ? T - i0 : BQ;
            const uint32_t g = g0 + (uint32_t)b;
            const qkv_t* qkv_b = qkv + (size_t)b * T * QKV;
            float* Qt = t.X1;    /* (HD, BQ) */
            float* dOt = t.X2;   /* (HD, BQ) */
            transpose_qkv(Qt, BQ, qkv_b + (size_t)i0 * QKV + (size_t)h * HD, QKV, nq, HD);
            transpose_rows(dOt, BQ, dout + ((size_t)b * T + i0) * C + (size_t)h * HD, C, nq, HD);
#if FLASH_ROWBUFS
            ROUND_OPERANDS(dOt, (size_t)HD * BQ);   /* dO as an operand */
#endif
            for (int r = 0; r < BQ; r++) {
                t.Lt[r] = r < nq ? lse[(size_t)bh * T + i0 + r] : 0.0f;
                t.Dt[r] = r < nq ? D[(size_t)bh * T + i0 + r] : 0.0f;
            }
            memset(t.acc1, 0, sizeof(float) * (size_t)nq * HD);
            for (int j0 = 0; j0 < i0 + nq; j0 += BK) {
                const int nk = i0 + nq - j0 < BK ? i0 + nq - j0 : BK;
                int ldk, ldv;
                const float* k_rows = rows_f32(t.R1, qkv_b + (size_t)j0 * QKV + (size_t)(NH + kvh) * HD,
                                               QKV, nk, HD, &ldk);
                const float* v_rows = rows_f32(t.R2, qkv_b + (size_t)j0 * QKV +
                                                     (size_t)(NH + NKV + kvh) * HD, QKV, nk, HD, &ldv);
                tile_mm(t.P, BQ, 0, k_rows, ldk, 1, Qt, BQ, nk, BQ, HD);    /* K Q^T */
                tile_mm(t.dS, BQ, 0, v_rows, ldv, 1, dOt, BQ, nk, BQ, HD);  /* V dO^T */
                if (dropping)
                    keep_tile(t.keep, 1, BQ, BQ, nk, i0, nq, j0, nk, attn_seed, g, (uint32_t)h,
                              drop.thr);
                for (int c = 0; c < nk; c++)
                    grad_key_row(t.P + (size_t)c * BQ, t.dS + (size_t)c * BQ,
                                 dropping ? t.keep + (size_t)c * BQ : NULL, t.Lt, t.Dt,
                                 j0 + c, i0, nq, sigma, drop.scale);
#if FLASH_ROWBUFS
                ROUND_OPERANDS(t.dS, (size_t)nk * BQ);   /* ds as an operand */
#endif
#ifdef FLASH_BF16
                /* dQ += dS K a key tile at a time: the tile's products summed from 0 (into R3, free
                 * in this pass), then added to the rows' sums, tiles ascending: the grouping of
                 * the fused tensor-core backward's dQ slices (attention/flash_tc.cu) */
                tile_mm(t.R3, HD, 0, t.dS, 1, BQ, k_rows, ldk, nq, HD, nk);
                for (size_t e = 0; e < (size_t)nq * HD; e++) t.acc1[e] += t.R3[e];
#else
                /* dQ += dS K: A(r, c) = dS[c * BQ + r] */
                tile_mm(t.acc1, HD, 1, t.dS, 1, BQ, k_rows, ldk, nq, HD, nk);
#endif
            }
            for (int r = 0; r < nq; r++) {
                float* dq = dqkv + ((size_t)b * T + i0 + r) * QKV + (size_t)h * HD;
                #pragma omp simd
                for (int d = 0; d < HD; d++) dq[d] = t.acc1[(size_t)r * HD + d] * sigma;
            }
        }
    }
}

#if !FLASH_ROWBUFS   /* context parallelism runs on fp32 activations: no 16-bit twin of these */
/* ---- context parallelism: a block of queries against a block of keys (DESIGN §9) ------------ */


/* The forward of attention_forward's work items, with queries and keys at global positions: item
 * (b, h, query tile) walks the block's key tiles left to right with the same online softmax; a
 * query that sees no key of the block gets lse = -inf and a zero output row, so that merging it
 * changes nothing. */
void attention_block_forward(float* out, float* lse, const float* q, size_t q_stride, int Tq,
                             int iq0, const float* k, const float* v, size_t kv_stride, int Tk,
                             int jk0, int B, int NH, int NKV, int HD, uint32_t g0,
                             uint64_t attn_seed, Dropout drop) {
    const size_t C = (size_t)NH * HD;
    const int G = NH / NKV;
    const int nqt = (Tq + BQ - 1) / BQ;
    const float sigma = 1.0f / sqrtf((float)HD);
    const long n_items = (long)B * NH * nqt;

    #pragma omp parallel
    {
        float Qt[HD * BQ] __attribute__((aligned(64)));
        float St[BK * BQ] __attribute__((aligned(64)));
        float keep[BK * BQ] __attribute__((aligned(64)));
        float acc[BQ * HD] __attribute__((aligned(64)));
        float mrun[BQ], lrun[BQ], corr[BQ], tsum[BQ];

        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < n_items; item++) {
            const int qt = nqt - 1 - (int)(item / ((long)B * NH));
            const int bh = (int)(item % ((long)B * NH));
            const int b = bh / NH, h = bh % NH, kvh = h / G;
            const int r0 = qt * BQ, nq = Tq - r0 < BQ ? Tq - r0 : BQ;
            const int i0 = iq0 + r0;                      /* global position of the tile's row 0 */
            const float* q_b = q + (size_t)b * Tq * q_stride;
            const float* k_b = k + (size_t)b * Tk * kv_stride + (size_t)kvh * HD;
            const float* v_b = v + (size_t)b * Tk * kv_stride + (size_t)kvh * HD;

            transpose_rows(Qt, BQ, q_b + (size_t)r0 * q_stride + (size_t)h * HD, q_stride, nq, HD);
            memset(acc, 0, sizeof(float) * (size_t)nq * HD);
            for (int r = 0; r < BQ; r++) { mrun[r] = -FLT_MAX; lrun[r] = 0.0f; }

            for (int c0 = 0; c0 < Tk && jk0 + c0 <= i0 + nq - 1; c0 += BK) {
                const int nk = Tk - c0 < BK ? Tk - c0 : BK;
                const int j0 = jk0 + c0;                  /* global position of the tile's key 0 */
                const float* k_rows = k_b + (size_t)c0 * kv_stride;
                const float* v_rows = v_b + (size_t)c0 * kv_stride;
                tile_mm(St, BQ, 0, k_rows, (int)kv_stride, 1, Qt, BQ, nk, BQ, HD);

                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < BQ; r++) {
                        const float sc = St[c * BQ + r] * sigma;
                        St[c * BQ + r] = ((j0 + c <= i0 + r) & (r < nq)) ? sc : -INFINITY;
                    }
                for (int r = 0; r < BQ; r++) corr[r] = mrun[r];
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < BQ; r++)
                        mrun[r] = St[c * BQ + r] > mrun[r] ? St[c * BQ + r] : mrun[r];
                for (int r = 0; r < BQ; r++) { corr[r] = vexpf(corr[r] - mrun[r]); tsum[r] = 0.0f; }
                for (int c = 0; c < nk; c++)
                    for (int r = 0; r < BQ; r++) {
                        const float w = vexpf(St[c * BQ + r] - mrun[r]);
                        St[c * BQ + r] = w;
                        tsum[r] += w;
                    }
                for (int r = 0; r < BQ; r++) lrun[r] = lrun[r] * corr[r] + tsum[r];

                if (dropout_active(drop)) {
                    /* the keep bits of the global (g, h, i, j): the single-process run's bits */
                    keep_tile(keep, 1, BQ, BQ, nk, i0, nq, j0, nk, attn_seed, g0 + (uint32_t)b,
                              (uint32_t)h, drop.thr);
#ifdef SEEDGPT_TEST_BUILD
                    report_keep_bits(keep, 1, BQ, i0, nq, j0, nk, g0 + (uint32_t)b, h);
#endif
                    for (int c = 0; c < nk; c++)
                        for (int r = 0; r < BQ; r++)
                            St[c * BQ + r] = keep[c * BQ + r] != 0.0f ? St[c * BQ + r] : 0.0f;
                }
                for (int r = 0; r < nq; r++) {
                    float* a = acc + (size_t)r * HD;
                    #pragma omp simd
                    for (int d = 0; d < HD; d++) a[d] *= corr[r];
                }
                tile_mm(acc, HD, 1, St, 1, BQ, v_rows, (int)kv_stride, nq, HD, nk);
            }

            for (int r = 0; r < nq; r++) {
                float* o = out + ((size_t)b * Tq + r0 + r) * C + (size_t)h * HD;
                float* l = lse + ((size_t)b * NH + h) * Tq + r0 + r;
                if (lrun[r] == 0.0f) {   /* no key of this block is visible to the query */
                    for (int d = 0; d < HD; d++) o[d] = 0.0f;
                    *l = -INFINITY;
                    continue;
                }
                const float rs = drop.scale / lrun[r];
                #pragma omp simd
                for (int d = 0; d < HD; d++) o[d] = acc[(size_t)r * HD + d] * rs;
                *l = mrun[r] + logf(lrun[r]);
            }
        }
    }
}

/* The backward of one block: attention_backward's two passes with global positions, the whole
 * row's lse (merged over every key block) and the whole output o (for D_i = do_i.o_i), and the
 * gradients accumulated (+=), since every key block adds to dq and every query block to dk, dv. */
void attention_block_backward(float* dq, size_t dq_stride, float* dk, float* dv,
                              size_t dkv_stride, float* scratch, const float* dout,
                              const float* out, const float* lse, const float* q, size_t q_stride,
                              int Tq, int iq0, const float* k, const float* v, size_t kv_stride,
                              int Tk, int jk0, int B, int NH, int NKV, int HD, uint32_t g0,
                              uint64_t attn_seed, Dropout drop) {
    const size_t C = (size_t)NH * HD;
    const int G = NH / NKV;
    const int nqt = (Tq + BQ - 1) / BQ, nkt = (Tk + BK - 1) / BK;
    const float sigma = 1.0f / sqrtf((float)HD);
    const int dropping = dropout_active(drop);
    float* D = scratch;                                   /* (B, NH, Tq) */
    float* tiles_base = scratch + flash_round16((size_t)B * NH * Tq);
    const size_t per_thread = tiles_floats(HD);

    #pragma omp parallel
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        ThreadTiles t = tiles_at(tiles_base + (size_t)tid * per_thread, HD);

        #pragma omp for schedule(static)
        for (long bh = 0; bh < (long)B * NH; bh++) {
            const int b = (int)(bh / NH), h = (int)(bh % NH);
            for (int i = 0; i < Tq; i++) {
                const float* o = out + ((size_t)b * Tq + i) * C + (size_t)h * HD;
                const float* dO = dout + ((size_t)b * Tq + i) * C + (size_t)h * HD;
                float s = 0.0f;
                for (int d = 0; d < HD; d++) s = MADD(dO[d], o[d], s);
                D[(size_t)bh * Tq + i] = s;
            }
        }

        /* dK, dV: item (b, kv head, key tile); query heads of the group, then query tiles */
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < (long)B * NKV * nkt; item++) {
            const int kt = (int)(item / ((long)B * NKV));
            const int bk = (int)(item % ((long)B * NKV));
            const int b = bk / NKV, kvh = bk % NKV;
            const int c0 = kt * BK, nk = Tk - c0 < BK ? Tk - c0 : BK;
            const int j0 = jk0 + c0;
            const uint32_t g = g0 + (uint32_t)b;
            const float* q_b = q + (size_t)b * Tq * q_stride;
            const float* k_rows = k + ((size_t)b * Tk + c0) * kv_stride + (size_t)kvh * HD;
            const float* v_rows = v + ((size_t)b * Tk + c0) * kv_stride + (size_t)kvh * HD;
            float* Kt = t.X1;
            float* Vt = t.X2;
            transpose_rows(Kt, BK, k_rows, kv_stride, nk, HD);
            transpose_rows(Vt, BK, v_rows, kv_stride, nk, HD);
            memset(t.acc1, 0, sizeof(float) * (size_t)nk * HD);
            memset(t.acc2, 0, sizeof(float) * (size_t)nk * HD);
            for (int h = kvh * G; h < (kvh + 1) * G; h++) {
                const float* lse_bh = lse + ((size_t)b * NH + h) * Tq;
                const float* D_bh = D + ((size_t)b * NH + h) * Tq;
                for (int r0 = 0; r0 < Tq; r0 += BQ) {
                    const int nq = Tq - r0 < BQ ? Tq - r0 : BQ;
                    const int i0 = iq0 + r0;
                    if (i0 + nq - 1 < j0) continue;   /* every query before the tile's first key */
                    const float* q_rows = q_b + (size_t)r0 * q_stride + (size_t)h * HD;
                    const float* do_rows = dout + ((size_t)b * Tq + r0) * C + (size_t)h * HD;
                    tile_mm(t.P, BK, 0, q_rows, (int)q_stride, 1, Kt, BK, nq, BK, HD);
                    tile_mm(t.dS, BK, 0, do_rows, (int)C, 1, Vt, BK, nq, BK, HD);
                    if (dropping)
                        keep_tile(t.keep, BK, 1, nq, BK, i0, nq, j0, nk, attn_seed, g, (uint32_t)h,
                                  drop.thr);
                    for (int r = 0; r < nq; r++)
                        grad_query_row(t.P + (size_t)r * BK, t.Pd + (size_t)r * BK,
                                       t.dS + (size_t)r * BK, dropping ? t.keep + (size_t)r * BK : NULL,
                                       i0 + r, j0, nk, sigma, lse_bh[r0 + r], D_bh[r0 + r], drop.scale);
                    tile_mm(t.acc1, HD, 1, t.dS, 1, BK, q_rows, (int)q_stride, nk, HD, nq);
                    tile_mm(t.acc2, HD, 1, t.Pd, 1, BK, do_rows, (int)C, nk, HD, nq);
                }
            }
            for (int j = 0; j < nk; j++) {
                float* dkr = dk + ((size_t)b * Tk + c0 + j) * dkv_stride + (size_t)kvh * HD;
                float* dvr = dv + ((size_t)b * Tk + c0 + j) * dkv_stride + (size_t)kvh * HD;
                #pragma omp simd
                for (int d = 0; d < HD; d++) {
                    dkr[d] += t.acc1[(size_t)j * HD + d] * sigma;
                    dvr[d] += t.acc2[(size_t)j * HD + d];
                }
            }
        }

        /* dQ: item (b, query head, query tile); key tiles in ascending order */
        #pragma omp for schedule(dynamic, 1)
        for (long item = 0; item < (long)B * NH * nqt; item++) {
            const int qt = nqt - 1 - (int)(item / ((long)B * NH));
            const int bh = (int)(item % ((long)B * NH));
            const int b = bh / NH, h = bh % NH, kvh = h / G;
            const int r0 = qt * BQ, nq = Tq - r0 < BQ ? Tq - r0 : BQ;
            const int i0 = iq0 + r0;
            const uint32_t g = g0 + (uint32_t)b;
            const float* q_b = q + (size_t)b * Tq * q_stride;
            float* Qt = t.X1;
            float* dOt = t.X2;
            transpose_rows(Qt, BQ, q_b + (size_t)r0 * q_stride + (size_t)h * HD, q_stride, nq, HD);
            transpose_rows(dOt, BQ, dout + ((size_t)b * Tq + r0) * C + (size_t)h * HD, C, nq, HD);
            for (int r = 0; r < BQ; r++) {
                t.Lt[r] = r < nq ? lse[(size_t)bh * Tq + r0 + r] : 0.0f;
                t.Dt[r] = r < nq ? D[(size_t)bh * Tq + r0 + r] : 0.0f;
            }
            memset(t.acc1, 0, sizeof(float) * (size_t)nq * HD);
            for (int c0 = 0; c0 < Tk && jk0 + c0 <= i0 + nq - 1; c0 += BK) {
                const int nk = Tk - c0 < BK ? Tk - c0 : BK;
                const int j0 = jk0 + c0;
                const float* k_rows = k + ((size_t)b * Tk + c0) * kv_stride + (size_t)kvh * HD;
                const float* v_rows = v + ((size_t)b * Tk + c0) * kv_stride + (size_t)kvh * HD;
                tile_mm(t.P, BQ, 0, k_rows, (int)kv_stride, 1, Qt, BQ, nk, BQ, HD);
                tile_mm(t.dS, BQ, 0, v_rows, (int)kv_stride, 1, dOt, BQ, nk, BQ, HD);
                if (dropping)
                    keep_tile(t.keep, 1, BQ, BQ, nk, i0, nq, j0, nk, attn_seed, g, (uint32_t)h,
                              drop.thr);
                for (int c = 0; c < nk; c++)
                    grad_key_row(t.P + (size_t)c * BQ, t.dS + (size_t)c * BQ,
                                 dropping ? t.keep + (size_t)c * BQ : NULL, t.Lt, t.Dt,
                                 j0 + c, i0, nq, sigma, drop.scale);
                tile_mm(t.acc1, HD, 1, t.dS, 1, BQ, k_rows, (int)kv_stride, nq, HD, nk);
            }
            for (int r = 0; r < nq; r++) {
                float* dqr = dq + ((size_t)b * Tq + r0 + r) * dq_stride + (size_t)h * HD;
                #pragma omp simd
                for (int d = 0; d < HD; d++) dqr[d] += t.acc1[(size_t)r * HD + d] * sigma;
            }
        }
    }
}

/* Merges a block's partial output into the running one by their log-sum-exps, in fp32:
 *   L = log(exp(L_acc) + exp(L_blk)),  o = exp(L_acc - L) o_acc + exp(L_blk - L) o_blk.
 * acc (B, T, NH*HD) and lse_acc (B, NH, T) updated in place; -inf is "no key yet". */
void attention_merge(float* acc, float* lse_acc, const float* blk, const float* lse_blk,
                     int B, int T, int NH, int HD) {
    const size_t C = (size_t)NH * HD;
    #pragma omp parallel for schedule(static)
    for (long bh = 0; bh < (long)B * NH; bh++) {
        const int b = (int)(bh / NH), h = (int)(bh % NH);
        for (int i = 0; i < T; i++) {
            float* la = lse_acc + (size_t)bh * T + i;
            const float lb = lse_blk[(size_t)bh * T + i];
            if (lb == -INFINITY) continue;
            float* o = acc + ((size_t)b * T + i) * C + (size_t)h * HD;
            const float* ob = blk + ((size_t)b * T + i) * C + (size_t)h * HD;
            if (*la == -INFINITY) {
                for (int d = 0; d < HD; d++) o[d] = ob[d];
                *la = lb;
                continue;
            }
            const float mx = *la > lb ? *la : lb;
            const float L = mx + logf(expf(*la - mx) + expf(lb - mx));
            const float wa = expf(*la - L), wb = expf(lb - L);
            for (int d = 0; d < HD; d++) o[d] = wa * o[d] + wb * ob[d];
            *la = L;
        }
    }
}
#endif   /* !FLASH_ROWBUFS */
