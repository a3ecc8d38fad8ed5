/* cpu/gemm_cpu.c — seedgpt's own fp32 GEMM, used by the CPU matmul op (cpu/ops_cpu.c).
 *
 * Why not OpenBLAS (DESIGN §1 routes dense products through it; this is a deliberate departure):
 * DESIGN §4 needs results bitwise independent of the thread count and of how a batch is split
 * into micro-batches. OpenBLAS (0.3.x, the Haswell and SkylakeX kernels) picks its K blocking and
 * its kernels by thread count and by M, so the same output element is summed in another order at
 * 1 and 2 threads, or when its row is computed in a batch of another size. Cutting K into fixed
 * blocks outside it was not enough.
 *
 * The order, fixed: output element (i, j) is one chain acc = fmaf(A[i,k], B[k,j], acc) over
 * k = 0, 1, ..., K-1, started at 0 (written) or at C[i,j] (accumulated). Nothing else enters its
 * sum, so its bits depend only on row i of A and column j of B. Cache blocking over k stores the
 * chain's float into C and reloads it, which rounds nothing. Micro-batches accumulating into a
 * weight gradient continue the same chain, so one call over all rows equals several calls over
 * consecutive pieces of them.
 *
 * How it is fast: A is packed into panels of MR rows ([k][MR]) and B into panels of NR columns
 * ([k][NR]), zero-padded at the edges; a micro-kernel keeps an MR x NR block of accumulators in
 * registers, lanes along j (each lane its own element's chain), over KC values of k at a time.
 * Of the two operands, the one with fewer panels (at GPT-2 shapes the activations' rows) is packed
 * whole, per k chunk as long as PACK_FLOATS allows, into a buffer the threads share. The other
 * (the weight) is cut into blocks, as many as a multiple of the thread count; the thread that
 * takes a block packs it KC values of k at a time into a buffer of its own, right before it runs
 * that slice's products against all of the shared operand, so a packed slice is used while it is
 * in L2 and never goes back to memory. At most DIRECT_MAX_ROWS rows skip the packing.
 * Paths:
 * AVX-512 (MR 12, NR 32), AVX2+FMA (MR 6, NR 16) and portable C (MR 4, NR 16, fmaf), chosen at run
 * time; all compute the same chains, so they give the same bits (tests/test_gemm.c).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/gemm_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_X86 1
#include "util/transpose16.h"
#else
#define GEMM_X86 0
#endif

#define KC 256         /* k values per packed slice: a B micro-panel (KC x 32 floats) fills L1 */
#define BLOCK_PANELS 16 /* at most this many panels in one thread's block of the blocked operand */
#define MC_PANELS 8    /* shared A panels walked per B panel (96 rows on AVX-512: ~100 KB, in L2) */
#define PACK_FLOATS ((size_t)8 << 20)  /* the shared operand's panels of one k chunk: 32 MiB at most */
#ifdef SEEDGPT_TEST_BUILD
static size_t pack_limit = PACK_FLOATS;   /* gemm_test_pack_limit */
void gemm_test_pack_limit(size_t floats) { pack_limit = floats ? floats : PACK_FLOATS; }
#define PACK_LIMIT pack_limit
static unsigned rows_run;                 /* gemm_test_rows_kernels_run */
unsigned gemm_test_rows_kernels_run(void) {
    return __atomic_exchange_n(&rows_run, 0u, __ATOMIC_RELAXED);
}
#else
#define PACK_LIMIT PACK_FLOATS
#endif
#define MR_MAX 12
#define NR_MAX 32

/* One micro-kernel call: c (MR, NR; rows ldc apart) = [c +] ap (kc, MR)^T-packed . bp (kc, NR). */
typedef void (*GemmKernel)(int kc, const float* ap, const float* bp, float* c, size_t ldc,
                           int load_c);

/* ---- micro-kernels ------------------------------------------------------------------------- */

static void kernel_portable(int kc, const float* ap, const float* bp, float* c, size_t ldc,
                            int load_c) {
    enum { MR = 4, NR = 16 };
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = load_c ? c[r * ldc + j] : 0.0f;
    for (int k = 0; k < kc; k++) {
        const float* a = ap + (size_t)k * MR;
        const float* b = bp + (size_t)k * NR;
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r][j] = fmaf(a[r], b[j], acc[r][j]);
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) c[r * ldc + j] = acc[r][j];
}

#if GEMM_X86
__attribute__((target("avx2,fma")))
static void kernel_avx2(int kc, const float* ap, const float* bp, float* c, size_t ldc,
                        int load_c) {
    enum { MR = 6 };
    __m256 acc[MR][2];
    #pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = load_c ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = load_c ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(bp + (size_t)k * 16);
        __m256 b1 = _mm256_loadu_ps(bp + (size_t)k * 16 + 8);
        #pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 a = _mm256_broadcast_ss(ap + (size_t)k * MR + r);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    #pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

/* Rows 0 .. R-1 of a 12-row A panel (its rows 12 floats apart) against a 32-column B panel: the
 * AVX-512 micro-kernel, R = 12 for whole panels, R < 12 for the last panel of an M that 12 does
 * not divide (256 rows: 21 panels and 4 rows), the same chains without work on zero rows or a
 * copy of the tile. R is a constant at each instantiation, so the accumulators stay in registers. */
__attribute__((target("avx512f"), always_inline))
static inline void fma_rows_avx512(const int R, int kc, const float* ap, const float* bp, float* c,
                                   size_t ldc, int load_c) {
    enum { MR = 12 };
    __m512 acc[MR][2];
    #pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        acc[r][0] = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(bp + (size_t)k * 32);
        __m512 b1 = _mm512_loadu_ps(bp + (size_t)k * 32 + 16);
        #pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(ap[(size_t)k * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    #pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

#define KERNEL_AVX512(NAME, R)                                                                    \
    __attribute__((target("avx512f"))) static void NAME(                                        \
        int kc, const float* ap, const float* bp, float* c, size_t ldc, int load_c) {            \
        fma_rows_avx512(R, kc, ap, bp, c, ldc, load_c);                                          \
    }
KERNEL_AVX512(kernel_avx512, 12)
KERNEL_AVX512(kernel_avx512_1, 1) KERNEL_AVX512(kernel_avx512_2, 2)
KERNEL_AVX512(kernel_avx512_3, 3) KERNEL_AVX512(kernel_avx512_4, 4)
KERNEL_AVX512(kernel_avx512_5, 5) KERNEL_AVX512(kernel_avx512_6, 6)
KERNEL_AVX512(kernel_avx512_7, 7) KERNEL_AVX512(kernel_avx512_8, 8)
KERNEL_AVX512(kernel_avx512_9, 9) KERNEL_AVX512(kernel_avx512_10, 10)
KERNEL_AVX512(kernel_avx512_11, 11)

static const GemmKernel kernel_avx512_rows[12] = {
    NULL, kernel_avx512_1, kernel_avx512_2, kernel_avx512_3, kernel_avx512_4, kernel_avx512_5,
    kernel_avx512_6, kernel_avx512_7, kernel_avx512_8, kernel_avx512_9, kernel_avx512_10,
    kernel_avx512_11};
#endif

/* ---- paths --------------------------------------------------------------------------------- */

typedef struct {
    int mr, nr;
    GemmKernel kernel;
    const GemmKernel* rows;   /* rows[r], r < mr: the kernel over r rows of a panel, or NULL */
} PathDesc;

static PathDesc path_desc(GemmPath p) {
#if GEMM_X86
    if (p == GEMM_AVX512) return (PathDesc){12, 32, kernel_avx512, kernel_avx512_rows};
    if (p == GEMM_AVX2) return (PathDesc){6, 16, kernel_avx2, NULL};
#endif
    (void)p;
    return (PathDesc){4, 16, kernel_portable, NULL};
}

const char* gemm_path_name(GemmPath p) {
    return p == GEMM_AVX512 ? "avx512" : p == GEMM_AVX2 ? "avx2" : "portable";
}

int gemm_path_supported(GemmPath p) {
    if (p == GEMM_PORTABLE) return 1;
#if GEMM_X86
    __builtin_cpu_init();
    if (p == GEMM_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (p == GEMM_AVX512) return __builtin_cpu_supports("avx512f");
#endif
    return 0;
}

GemmPath gemm_path_selected(void) {
    const char* s = getenv("SEEDGPT_GEMM");
    if (s == NULL || s[0] == '\0') {
        if (gemm_path_supported(GEMM_AVX512)) return GEMM_AVX512;
        if (gemm_path_supported(GEMM_AVX2)) return GEMM_AVX2;
        return GEMM_PORTABLE;
    }
    for (GemmPath p = GEMM_PORTABLE; p <= GEMM_AVX512; p++) {
        if (strcmp(s, gemm_path_name(p)) != 0) continue;
        if (!gemm_path_supported(p)) {
            fprintf(stderr, "SEEDGPT_GEMM=%s: this CPU does not support that path\n", s);
            exit(1);
        }
        return p;
    }
    fprintf(stderr, "SEEDGPT_GEMM=%s: expected portable, avx2 or avx512\n", s);
    exit(1);
}

/* ---- packing ------------------------------------------------------------------------------- */

/* dst (kc, MR) = rows [i0, i0+mr) of A, k in [k0, k0+kc); rows mr..MR-1 zero. */
static void pack_a_scalar(float* dst, const float* A, size_t rsa, size_t csa, int i0, int mr, int k0,
                          int kc, int MR) {
    if (mr < MR) memset(dst, 0, sizeof(float) * (size_t)kc * MR);
    if (csa == 1) {
        for (int r = 0; r < mr; r++) {
            const float* src = A + (size_t)(i0 + r) * rsa + k0;
            for (int k = 0; k < kc; k++) dst[(size_t)k * MR + r] = src[k];
        }
    } else {
        for (int k = 0; k < kc; k++) {
            const float* src = A + (size_t)(k0 + k) * csa + (size_t)i0 * rsa;
            for (int r = 0; r < mr; r++) dst[(size_t)k * MR + r] = src[r * rsa];
        }
    }
}

/* dst (kc, NR) = columns [j0, j0+nr) of B, k in [k0, k0+kc); columns nr..NR-1 zero. */
static void pack_b_scalar(float* dst, const float* B, size_t rsb, size_t csb, int j0, int nr, int k0,
                          int kc, int NR) {
    if (nr < NR) memset(dst, 0, sizeof(float) * (size_t)kc * NR);
    if (csb == 1) {
        for (int k = 0; k < kc; k++)
            memcpy(dst + (size_t)k * NR, B + (size_t)(k0 + k) * rsb + j0, sizeof(float) * nr);
    } else {
        for (int j = 0; j < nr; j++) {
            const float* src = B + (size_t)(j0 + j) * csb + (size_t)k0 * rsb;
            for (int k = 0; k < kc; k++) dst[(size_t)k * NR + j] = src[k * rsb];
        }
    }
}

#if GEMM_X86
/* Where a panel's lines (rows of A, columns of B) each run along k with a unit stride, the scalar
 * packing writes one float per cache line it touches. Here 16 lines x 16 k are loaded as 16
 * vectors and transposed in registers: dst[k * ld + l] = line l's element k, l < nl <= 16, for
 * the first `full` k (a multiple of 16); lanes nl..w-1 of each stored row zero. Copies only:
 * the packed floats, and so the product's bits, are the scalar packing's. */
__attribute__((target("avx512f")))
static void pack_lines_avx512(float* dst, size_t ld, int w, const float* base, size_t ls, int nl,
                              int full) {
    const __mmask16 keep = (__mmask16)((1u << w) - 1u);
    for (int k = 0; k < full; k += 16) {
        __m512i r[16];
        for (int l = 0; l < 16; l++)
            r[l] = l < nl ? _mm512_loadu_si512(base + (size_t)l * ls + k) : _mm512_setzero_si512();
        transpose16(r);
        for (int t = 0; t < 16; t++) _mm512_mask_storeu_epi32(dst + (size_t)(k + t) * ld, keep, r[t]);
    }
}
#endif

#if GEMM_X86
/* element k of every A panel (kn k values each, MR rows) from one line of A that holds the M
 * rows adjacent: a masked copy of MR floats per panel, zeros past row M */
__attribute__((target("avx512f")))
static void pack_a_line(float* Ap, size_t a_ld, const float* line, int k, int M, int mp, int MR) {
    const __mmask16 full = (__mmask16)((1u << MR) - 1u);
    for (int p = 0; p < mp; p++) {
        const int mr = M - p * MR < MR ? M - p * MR : MR;
        const __mmask16 m = mr == MR ? full : (__mmask16)((1u << mr) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, line + (size_t)p * MR);
        _mm512_mask_storeu_ps(Ap + (size_t)p * a_ld + (size_t)k * MR, full, v);
    }
}
#else
static void pack_a_line(float* Ap, size_t a_ld, const float* line, int k, int M, int mp, int MR) {
    (void)Ap; (void)a_ld; (void)line; (void)k; (void)M; (void)mp; (void)MR;   /* AVX-512 only */
}
#endif

/* the packing of a panel: 16 x 16 transposes where the path is AVX-512 and the lines run along
 * k, the scalar loops for the rest (both write every float of the panel) */
static void pack_a(float* dst, const float* A, size_t rsa, size_t csa, int i0, int mr, int k0,
                   int kc, int MR, int fast) {
#if GEMM_X86
    if (fast && csa == 1 && MR <= 16) {
        const int full = kc / 16 * 16;
        pack_lines_avx512(dst, (size_t)MR, MR, A + (size_t)i0 * rsa + k0, rsa, mr, full);
        /* the last kc % 16 k: a panel's k rows are contiguous, so they are a panel of their own */
        pack_a_scalar(dst + (size_t)full * MR, A, rsa, csa, i0, mr, k0 + full, kc - full, MR);
        return;
    }
#endif
    (void)fast;
    pack_a_scalar(dst, A, rsa, csa, i0, mr, k0, kc, MR);
}

#if GEMM_X86
/* a whole 32-column panel of B whose rows run along j (csb 1): two vector copies per k */
__attribute__((target("avx512f")))
static void pack_b_rows32(float* dst, const float* B, size_t rsb, int j0, int k0, int kc) {
    const float* src = B + (size_t)k0 * rsb + j0;
    for (int k = 0; k < kc; k++) {
        _mm512_storeu_ps(dst + (size_t)k * 32, _mm512_loadu_ps(src + (size_t)k * rsb));
        _mm512_storeu_ps(dst + (size_t)k * 32 + 16, _mm512_loadu_ps(src + (size_t)k * rsb + 16));
    }
}
#endif

static void pack_b(float* dst, const float* B, size_t rsb, size_t csb, int j0, int nr, int k0,
                   int kc, int NR, int fast) {
#if GEMM_X86
    if (fast && csb == 1 && NR == 32 && nr == 32) {
        pack_b_rows32(dst, B, rsb, j0, k0, kc);
        return;
    }
    if (fast && rsb == 1 && csb != 1 && NR % 16 == 0) {
        const int full = kc / 16 * 16;
        for (int h = 0; h < NR; h += 16) {
            const int n = nr - h < 16 ? (nr - h > 0 ? nr - h : 0) : 16;
            pack_lines_avx512(dst + h, (size_t)NR, 16, B + (size_t)(j0 + h) * csb + k0, csb, n, full);
        }
        pack_b_scalar(dst + (size_t)full * NR, B, rsb, csb, j0, nr, k0 + full, kc - full, NR);
        return;
    }
#endif
    (void)fast;
    pack_b_scalar(dst, B, rsb, csb, j0, nr, k0, kc, NR);
}

/* ---- driver -------------------------------------------------------------------------------- */

/* A few rows (sampling feeds one): packing B would cost more than the product itself, so the
 * chains are walked straight from A and B, DIRECT_NJ columns at a time. Same chains, same bits. */
#define DIRECT_MAX_ROWS 4
#define DIRECT_NJ 8
static void gemm_direct(int M, int N, int K, const float* A, size_t rsa, size_t csa,
                        const float* B, size_t rsb, size_t csb, int accumulate, float* C,
                        size_t ldc) {
    const int nblocks = (N + DIRECT_NJ - 1) / DIRECT_NJ;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        const int j0 = blk * DIRECT_NJ, nj = N - j0 < DIRECT_NJ ? N - j0 : DIRECT_NJ;
        const float* b0 = B + (size_t)j0 * csb;
        for (int i = 0; i < M; i++) {
            const float* a = A + (size_t)i * rsa;
            float* c = C + (size_t)i * ldc + j0;
            float acc[DIRECT_NJ];
            for (int j = 0; j < DIRECT_NJ; j++) acc[j] = accumulate && j < nj ? c[j] : 0.0f;
            if (nj == DIRECT_NJ) {
                for (int k = 0; k < K; k++) {
                    const float av = a[(size_t)k * csa], *b = b0 + (size_t)k * rsb;
                    for (int j = 0; j < DIRECT_NJ; j++) acc[j] = fmaf(av, b[j * csb], acc[j]);
                }
            } else {
                for (int k = 0; k < K; k++) {
                    const float av = a[(size_t)k * csa], *b = b0 + (size_t)k * rsb;
                    for (int j = 0; j < nj; j++) acc[j] = fmaf(av, b[j * csb], acc[j]);
                }
            }
            for (int j = 0; j < nj; j++) c[j] = acc[j];
        }
    }
}

/* The packing buffer: the shared operand's panels of one k chunk, then each thread's slice of
 * its block; grown to the largest call seen and kept (64-byte aligned). */
static float* pack_buf = NULL;
static size_t pack_cap = 0;

static float* pack_buffer(size_t nfloats) {
    if (nfloats > pack_cap) {
        free(pack_buf);
        size_t bytes = (nfloats * sizeof(float) + 63) & ~(size_t)63;
        pack_buf = aligned_alloc(64, bytes);
        if (pack_buf == NULL) {
            fprintf(stderr, "gemm_f32: out of memory for %zu bytes of packed panels\n", bytes);
            exit(1);
        }
        pack_cap = nfloats;
    }
    return pack_buf;
}

/* panels per block when n panels are cut into blocks of at most BLOCK_PANELS, as many blocks as
 * a multiple of the threads (so that they share them evenly) */
static int block_panels(int n, int threads) {
    const int blocks = threads * ((n + threads * BLOCK_PANELS - 1) / (threads * BLOCK_PANELS));
    return (n + blocks - 1) / blocks;
}

/* One call's shape, operands and packing, as the parallel region's helpers see them. */
typedef struct {
    int M, N, K, accumulate, fast, a_by_k;
    const float *A, *B;
    size_t rsa, csa, rsb, csb, ldc;
    float* C;
    PathDesc pd;
    int mp, np;        /* panels of A (MR rows) and of B (NR columns) */
    int blk;           /* panels per block of the blocked operand */
    size_t a_ld;       /* floats between the shared A's panels */
} Gemm;

static int rows_of(const Gemm* g, int p) {
    return g->M - p * g->pd.mr < g->pd.mr ? g->M - p * g->pd.mr : g->pd.mr;
}
static int cols_of(const Gemm* g, int q) {
    return g->N - q * g->pd.nr < g->pd.nr ? g->N - q * g->pd.nr : g->pd.nr;
}

/* c (mr x nr of C) = [c +] ap . bp over kc: the path's kernel, its kernel over fewer rows, or
 * (an N edge, or a path without those) through a full-size copy, so nothing outside C is touched */
static void tile(const Gemm* g, int kc, const float* ap, const float* bp, float* c, int mr, int nr,
                 int load_c) {
    const int MR = g->pd.mr, NR = g->pd.nr;
    if (nr == NR && (mr == MR || g->pd.rows != NULL)) {
#ifdef SEEDGPT_TEST_BUILD
        if (mr < MR) __atomic_fetch_or(&rows_run, 1u << mr, __ATOMIC_RELAXED);
#endif
        (mr == MR ? g->pd.kernel : g->pd.rows[mr])(kc, ap, bp, c, g->ldc, load_c);
        return;
    }
    float tmp[MR_MAX * NR_MAX] = {0};
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) tmp[r * NR + j] = c[r * g->ldc + j];
    g->pd.kernel(kc, ap, bp, tmp, (size_t)NR, load_c);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * g->ldc + j] = tmp[r * NR + j];
}

/* A shared (all of its panels, k in [k0, k0+kn), at Ap), B blocked: each thread packs a block of
 * B's panels KC values of k at a time into `mine` and runs them against every A panel. */
static void run_b_blocks(const Gemm* g, const float* Ap, float* mine, int k0, int kn) {
    const int MR = g->pd.mr, NR = g->pd.nr, nb = (g->np + g->blk - 1) / g->blk;
    #pragma omp for schedule(dynamic)
    for (int qb = 0; qb < nb; qb++) {
        const int q0 = qb * g->blk, q1 = q0 + g->blk < g->np ? q0 + g->blk : g->np;
        for (int kk = 0; kk < kn; kk += KC) {
            const int kc = kn - kk < KC ? kn - kk : KC;
            const int load_c = g->accumulate || k0 + kk > 0;
            for (int q = q0; q < q1; q++)
                pack_b(mine + (size_t)(q - q0) * NR * kc, g->B, g->rsb, g->csb, q * NR,
                       cols_of(g, q), k0 + kk, kc, NR, g->fast);
            /* MC_PANELS of A (in L2) against each B panel of the block (in L1) in turn */
            for (int pc = 0; pc < g->mp; pc += MC_PANELS) {
                const int pe = pc + MC_PANELS < g->mp ? pc + MC_PANELS : g->mp;
                for (int q = q0; q < q1; q++) {
                    const float* bp = mine + (size_t)(q - q0) * NR * kc;
                    for (int p = pc; p < pe; p++)
                        tile(g, kc, Ap + (size_t)p * g->a_ld + (size_t)kk * MR, bp,
                             g->C + (size_t)p * MR * g->ldc + (size_t)q * NR, rows_of(g, p),
                             cols_of(g, q), load_c);
                }
            }
        }
    }
}

/* B shared (all of its panels, k in [k0, k0+kn), at Bp), A blocked: each thread packs a block of
 * A's panels KC values of k at a time into `mine` and runs them against every B panel. */
static void run_a_blocks(const Gemm* g, const float* Bp, float* mine, int k0, int kn) {
    const int MR = g->pd.mr, NR = g->pd.nr, mb = (g->mp + g->blk - 1) / g->blk;
    const size_t ld = (size_t)MR * KC + 16;   /* as a_ld: not a power of two */
    #pragma omp for schedule(dynamic)
    for (int pb = 0; pb < mb; pb++) {
        const int p0 = pb * g->blk, p1 = p0 + g->blk < g->mp ? p0 + g->blk : g->mp;
        for (int kk = 0; kk < kn; kk += KC) {
            const int kc = kn - kk < KC ? kn - kk : KC;
            const int load_c = g->accumulate || k0 + kk > 0;
            if (g->a_by_k) {
                for (int k = 0; k < kc; k++)
                    pack_a_line(mine, ld, g->A + (size_t)(k0 + kk + k) * g->csa + (size_t)p0 * MR,
                                k, g->M - p0 * MR, p1 - p0, MR);
            } else {
                for (int p = p0; p < p1; p++)
                    pack_a(mine + (size_t)(p - p0) * ld, g->A, g->rsa, g->csa, p * MR,
                           rows_of(g, p), k0 + kk, kc, MR, g->fast);
            }
            for (int q = 0; q < g->np; q++) {
                const float* bp = Bp + (size_t)q * NR * kn + (size_t)kk * NR;
                for (int p = p0; p < p1; p++)
                    tile(g, kc, mine + (size_t)(p - p0) * ld, bp,
                         g->C + (size_t)p * MR * g->ldc + (size_t)q * NR, rows_of(g, p),
                         cols_of(g, q), load_c);
            }
        }
    }
}

static GemmPacking last_packing;
GemmPacking gemm_f32_last_packing(void) { return last_packing; }

void gemm_f32(int M, int N, int K, const float* A, size_t rsa, size_t csa,
              const float* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc) {
    if (M <= 0 || N <= 0) return;
    last_packing = (GemmPacking){.driver = GEMM_DIRECT, .threads = omp_get_max_threads(),
                                 .row_blocks = 1};
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    if (M <= DIRECT_MAX_ROWS) {
        gemm_direct(M, N, K, A, rsa, csa, B, rsb, csb, accumulate, C, ldc);
        return;
    }
    const GemmPath path = gemm_path_selected();
    Gemm g = {.M = M, .N = N, .K = K, .accumulate = accumulate, .A = A, .B = B, .rsa = rsa,
              .csa = csa, .rsb = rsb, .csb = csb, .ldc = ldc, .C = C, .pd = path_desc(path)};
    const int MR = g.pd.mr, NR = g.pd.nr, threads = omp_get_max_threads();
    g.fast = path == GEMM_AVX512;
    g.a_by_k = g.fast && rsa == 1 && csa != 1 && MR <= 16;
    g.mp = (M + MR - 1) / MR;
    g.np = (N + NR - 1) / NR;
    const int b_blocked = g.np >= g.mp;   /* B has the more panels: it is the blocked one */
    g.blk = block_panels(b_blocked ? g.np : g.mp, threads);
    /* the shared operand is packed in k chunks as long as PACK_FLOATS allows (all of K at GPT-2
     * shapes): each chunk costs the threads two barriers, which are dear on a loaded machine */
    const size_t per_k = b_blocked ? (size_t)g.mp * MR : (size_t)g.np * NR;
    int kchunk = (int)(PACK_LIMIT / per_k) / KC * KC;
    if (kchunk < KC) kchunk = KC;
    if (kchunk > K) kchunk = K;
    /* A's panels a_ld floats apart: MR * kchunk and 16 more, so that the same k of successive
     * panels does not fall in one L1 set (a power-of-two stride did: its writes by line missed) */
    g.a_ld = (((size_t)MR * kchunk + 15) & ~(size_t)15) + 16;
    const size_t shared = b_blocked ? (size_t)g.mp * g.a_ld : (size_t)g.np * NR * kchunk;
    const size_t mine = b_blocked ? (size_t)g.blk * NR * KC : (size_t)g.blk * ((size_t)MR * KC + 16);
    float* buf = pack_buffer(shared + mine * (size_t)threads);
    last_packing = (GemmPacking){b_blocked ? GEMM_B_BLOCKED : GEMM_A_BLOCKED, shared * sizeof(float),
                                 mine * sizeof(float), threads, (K + kchunk - 1) / kchunk, 1};

    #pragma omp parallel
    {
        float* own = buf + shared + mine * (size_t)omp_get_thread_num();
        for (int k0 = 0; k0 < K; k0 += kchunk) {
            const int kn = K - k0 < kchunk ? K - k0 : kchunk;
            if (b_blocked) {
                if (g.a_by_k) {
                    /* A's rows adjacent, k strided (dout^T of a weight gradient): each k's line
                     * of A is read once, left to right, and cut into the panels' k slots */
                    #pragma omp for schedule(static)
                    for (int k = 0; k < kn; k++)
                        pack_a_line(buf, g.a_ld, A + (size_t)(k0 + k) * csa, k, M, g.mp, MR);
                } else {
                    #pragma omp for schedule(dynamic)
                    for (int p = 0; p < g.mp; p++)
                        pack_a(buf + (size_t)p * g.a_ld, A, rsa, csa, p * MR, rows_of(&g, p), k0,
                               kn, MR, g.fast);
                }
                run_b_blocks(&g, buf, own, k0, kn);
            } else {
                #pragma omp for schedule(dynamic)
                for (int q = 0; q < g.np; q++)
                    pack_b(buf + (size_t)q * NR * kn, B, rsb, csb, q * NR, cols_of(&g, q), k0, kn,
                           NR, g.fast);
                run_a_blocks(&g, buf, own, k0, kn);
            }
        }
    }
}
