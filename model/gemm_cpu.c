/* model/gemm_cpu.c — seedgpt's own fp32 GEMM, used by the CPU matmul op (model/ops_cpu.c).
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
 * ([k][NR]), zero-padded at the edges, over all of K at once where that fits; the output is cut
 * into tiles of MC_PANELS x NC_PANELS panels shared over the OpenMP threads, each walked in blocks
 * of KC values of k; a micro-kernel keeps an MR x NR block of accumulators in registers, lanes
 * along j (each lane its own element's chain). At most DIRECT_MAX_ROWS rows skip the packing.
 * Paths:
 * AVX-512 (MR 12, NR 32), AVX2+FMA (MR 6, NR 16) and portable C (MR 4, NR 16, fmaf), chosen at run
 * time; all compute the same chains, so they give the same bits (tests/test_gemm.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/gemm_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_X86 1
#include "util/transpose16.h"
#else
#define GEMM_X86 0
#endif

#define KC 256         /* k values per packed block: a B micro-panel (KC x 32 floats) fills L1 */
#define MC_PANELS 8    /* A panels per output tile (96 rows on AVX-512: ~100 KB packed, in L2) */
#define NC_PANELS 4    /* B panels per output tile */
#define PACK_FLOATS ((size_t)8 << 20)  /* packed panels of one k chunk: 32 MiB at most */
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

__attribute__((target("avx512f")))
static void kernel_avx512(int kc, const float* ap, const float* bp, float* c, size_t ldc,
                          int load_c) {
    enum { MR = 12 };
    __m512 acc[MR][2];
    #pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        acc[r][0] = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(bp + (size_t)k * 32);
        __m512 b1 = _mm512_loadu_ps(bp + (size_t)k * 32 + 16);
        #pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            __m512 a = _mm512_set1_ps(ap[(size_t)k * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    #pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}
#endif

/* ---- paths --------------------------------------------------------------------------------- */

typedef struct { int mr, nr; GemmKernel kernel; } PathDesc;

static PathDesc path_desc(GemmPath p) {
#if GEMM_X86
    if (p == GEMM_AVX512) return (PathDesc){12, 32, kernel_avx512};
    if (p == GEMM_AVX2) return (PathDesc){6, 16, kernel_avx2};
#endif
    (void)p;
    return (PathDesc){4, 16, kernel_portable};
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

static void pack_b(float* dst, const float* B, size_t rsb, size_t csb, int j0, int nr, int k0,
                   int kc, int NR, int fast) {
#if GEMM_X86
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

/* Packed panels of one k block, grown to the largest call seen and kept (64-byte aligned). */
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

void gemm_f32(int M, int N, int K, const float* A, size_t rsa, size_t csa,
              const float* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc) {
    if (M <= 0 || N <= 0) return;
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
    const int fast = path == GEMM_AVX512;
    PathDesc pd = path_desc(path);
    const int MR = pd.mr, NR = pd.nr;
    const int mp = (M + MR - 1) / MR, np = (N + NR - 1) / NR;
    /* k is packed in chunks as long as PACK_FLOATS allows (whole K at GPT-2 shapes): each chunk
     * costs the threads two barriers, which are dear on a loaded machine. */
    const size_t per_k = (size_t)mp * MR + (size_t)np * NR;
    int kchunk = (int)(PACK_FLOATS / per_k) / KC * KC;
    if (kchunk < KC) kchunk = KC;
    if (kchunk > K) kchunk = K;
    /* A's panels a_ld floats apart: MR * kchunk and 16 more, so that the same k of successive
     * panels does not fall in one L1 set (a power-of-two stride did: its writes by line missed) */
    const size_t a_ld = (((size_t)MR * kchunk + 15) & ~(size_t)15) + 16;
    const size_t a_floats = (size_t)mp * a_ld;
    float* Ap = pack_buffer(a_floats + (size_t)np * NR * kchunk);
    float* Bp = Ap + a_floats;
    const int mb = (mp + MC_PANELS - 1) / MC_PANELS, nb = (np + NC_PANELS - 1) / NC_PANELS;
    const int rows_fast = nb > mb;
    const int a_by_k = fast && rsa == 1 && csa != 1 && MR <= 16;

    #pragma omp parallel
    for (int k0 = 0; k0 < K; k0 += kchunk) {
        const int kn = K - k0 < kchunk ? K - k0 : kchunk;
        if (a_by_k) {
            /* A's rows adjacent, k strided (dout^T of a weight gradient): each k's line of A is
             * read once, left to right, and cut into the panels' k slots */
            #pragma omp for schedule(static) nowait
            for (int k = 0; k < kn; k++) pack_a_line(Ap, a_ld, A + (size_t)(k0 + k) * csa, k, M, mp, MR);
        } else {
            #pragma omp for schedule(dynamic) nowait
            for (int p = 0; p < mp; p++) {
                int mr = M - p * MR < MR ? M - p * MR : MR;
                pack_a(Ap + (size_t)p * a_ld, A, rsa, csa, p * MR, mr, k0, kn, MR, fast);
            }
        }
        #pragma omp for schedule(dynamic)
        for (int q = 0; q < np; q++) {
            int nr = N - q * NR < NR ? N - q * NR : NR;
            pack_b(Bp + (size_t)q * NR * kn, B, rsb, csb, q * NR, nr, k0, kn, NR, fast);
        }
        /* tiles in any order on any thread: each output element's chain is walked by one call */
        #pragma omp for schedule(dynamic)
        for (int t = 0; t < mb * nb; t++) {
            /* consecutive tiles share the operand with more blocks: a wide B (the LM head's
             * wte^T) is walked a column block at a time over all row blocks, while it is hot */
            const int pb = rows_fast ? t % mb : t / nb, qb = rows_fast ? t / mb : t % nb;
            const int p0 = pb * MC_PANELS, q0 = qb * NC_PANELS;
            const int p1 = p0 + MC_PANELS < mp ? p0 + MC_PANELS : mp;
            const int q1 = q0 + NC_PANELS < np ? q0 + NC_PANELS : np;
            for (int kk = 0; kk < kn; kk += KC) {
                const int kc = kn - kk < KC ? kn - kk : KC;
                const int load_c = accumulate || k0 + kk > 0;
                for (int q = q0; q < q1; q++) {
                    const float* bp = Bp + (size_t)q * NR * kn + (size_t)kk * NR;
                    const int nr = N - q * NR < NR ? N - q * NR : NR;
                    for (int p = p0; p < p1; p++) {
                        const float* ap = Ap + (size_t)p * a_ld + (size_t)kk * MR;
                        const int mr = M - p * MR < MR ? M - p * MR : MR;
                        float* c = C + (size_t)p * MR * ldc + (size_t)q * NR;
                        if (mr == MR && nr == NR) {
                            pd.kernel(kc, ap, bp, c, ldc, load_c);
                            continue;
                        }
                        /* edge tile: through a full-size copy, so nothing outside C is touched */
                        float tmp[MR_MAX * NR_MAX] = {0};
                        for (int r = 0; r < mr; r++)
                            for (int j = 0; j < nr; j++) tmp[r * NR + j] = c[r * ldc + j];
                        pd.kernel(kc, ap, bp, tmp, (size_t)NR, load_c);
                        for (int r = 0; r < mr; r++)
                            for (int j = 0; j < nr; j++) c[r * ldc + j] = tmp[r * NR + j];
                    }
                }
            }
        }
    }
}
