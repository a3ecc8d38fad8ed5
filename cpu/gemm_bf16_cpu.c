/* cpu/gemm_bf16_cpu.c — seedgpt's bf16 matrix product on the CPU: bf16 operands, fp32
 * accumulation, with AVX512_BF16's VDPBF16PS where the CPU has it and runs it fast, the bf16
 * widened to fp32 FMAs on AVX-512 CPUs where it is slow (Intel's) or absent, and a portable C
 * twin; all three give the same bits.
 *
 * The order, fixed (the instruction's own): k is taken in pairs (2p, 2p+1), and output element
 * (i, j) is one chain over p = 0, 1, ..., ceil(K/2)-1,
 *     acc = ftz(fma(A[i,2p+1], B[2p+1,j], acc));  acc = ftz(fma(A[i,2p], B[2p,j], acc))
 * the odd element of a pair first. fma is the exact product added with one rounding to nearest
 * even (the product of two bf16 is never rounded, and never overflows on its own), operands that
 * are bf16 denormals count as zero, and a result below FLT_MIN in magnitude becomes a zero of its
 * sign. The chain starts at 0 (written) or at the element's old value, a denormal of which counts
 * as zero (accumulated); an odd K's missing element K is zero in both operands. This is what
 * VDPBF16PS does: measured against the instruction on random operands over the whole exponent
 * range, denormals, zeros and infinities included, the model above gives its bits every time
 * (tests/test_gemm.c keeps that check). So the two paths give the same bits, and like the fp32
 * product (cpu/gemm_cpu.c) an element's bits depend only on its row of A and column of B: not
 * on M, N, the blocking or the thread count.
 *
 * Layout: A is packed into panels of MR rows, one 32-bit word per (pair, row) holding A[i,2p] in
 * its low half and A[i,2p+1] in its high half; B into panels of NR columns, one word per (pair,
 * column) the same way; on the widened path (kernel_avx512f) each word is two floats instead, a
 * panel's odd elements and then its even ones per pair. A micro-kernel keeps an MR x NR block of
 * fp32 accumulators, over KPC pairs at a time; on AVX-512 a row's word is broadcast and VDPBF16PS
 * takes 16 columns' words at once.
 * The driver is gemm_f32's (cpu/gemm_cpu.c): of the two operands, the one with fewer panels is
 * packed whole, per pair chunk as long as PACK_WORDS allows, into a buffer the threads share; the
 * other is cut into blocks, as many as a multiple of the thread count, and the thread that takes a
 * block packs it KPC pairs at a time into a buffer of its own right before it runs that slice's
 * products against all of the shared operand, so a packed slice is used while it is in L2. A bf16
 * result (Cb) is rounded once, at the end of its chain: its K is packed in one chunk, and a
 * block's sums are kept in fp32 beside the thread's slice until the block's last slice is done.
 */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cpu/gemm_cpu.h"
#include "util/bf16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BF16_X86 1
#include "util/transpose16.h"
#else
#define BF16_X86 0
#endif

#define KPC 128        /* k pairs per packed slice: a B micro-panel (16 or 32 KiB) stays in L1 */
#define BLOCK_PANELS 16 /* at most this many panels in one thread's block of the blocked operand */
#define MC_PANELS 8    /* shared A panels walked per B panel (in L2) */
#define PACK_WORDS ((size_t)8 << 20)   /* the shared operand's words of one pair chunk: 32 MiB */
#ifdef SEEDGPT_TEST_BUILD
static size_t pack_limit = PACK_WORDS;   /* gemm_bf16_test_pack_limit */
void gemm_bf16_test_pack_limit(size_t words) { pack_limit = words ? words : PACK_WORDS; }
#define PACK_LIMIT pack_limit
static unsigned rows_run;                /* gemm_bf16_test_rows_kernels_run */
unsigned gemm_bf16_test_rows_kernels_run(void) {
    return __atomic_exchange_n(&rows_run, 0u, __ATOMIC_RELAXED);
}
#else
#define PACK_LIMIT PACK_WORDS
#endif
#define MR_MAX 12
#define NR_MAX 32

/* c (MR, NR; rows ldc apart) = [c +] ap (kp pairs, MR) . bp (kp pairs, NR), both packed */
typedef void (*Bf16Kernel)(int kp, const uint32_t* ap, const uint32_t* bp, float* c, size_t ldc,
                           int load_c);

/* ---- the arithmetic, spelled out ----------------------------------------------------------- */

static inline float flush(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

static inline float bf16_operand(uint32_t bits16) {
    uint32_t u = bits16 << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return flush(f);   /* a denormal operand counts as zero */
}

/* one pair of the chain: the odd element, then the even one (acc as the instruction reads it: a
 * denormal counts as zero; inside a chain acc is never one) */
static inline float pair_step(float acc, uint32_t a, uint32_t b) {
    acc = flush(fmaf(bf16_operand(a >> 16), bf16_operand(b >> 16), flush(acc)));
    return flush(fmaf(bf16_operand(a & 0xffffu), bf16_operand(b & 0xffffu), acc));
}

float gemm_bf16_pair_step(float acc, uint32_t a_pair, uint32_t b_pair) {
    return pair_step(acc, a_pair, b_pair);
}

/* ---- micro-kernels ------------------------------------------------------------------------- */

static void kernel_portable(int kp, const uint32_t* ap, const uint32_t* bp, float* c, size_t ldc,
                            int load_c) {
    enum { MR = 4, NR = 16 };
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) acc[r][j] = load_c ? flush(c[r * ldc + j]) : 0.0f;
    for (int p = 0; p < kp; p++) {
        const uint32_t* a = ap + (size_t)p * MR;
        const uint32_t* b = bp + (size_t)p * NR;
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r][j] = pair_step(acc[r][j], a[r], b[j]);
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) c[r * ldc + j] = acc[r][j];
}

#if BF16_X86
/* A starting value as the instruction would read it: a denormal counts as zero. */
__attribute__((target("avx512f")))
static inline __m512 load_acc(const float* c) {
    __m512 v = _mm512_loadu_ps(c);
    __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(FLT_MIN), _CMP_LT_OQ);
    /* where the value is below FLT_MIN keep only its sign bit */
    __m512i bits = _mm512_castps_si512(v);
    __m512i sign = _mm512_and_epi32(bits, _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(bits, tiny, sign));
}

/* kernel_avx512bf16 over the first R rows of a panel (its words MR = 12 apart per pair): R < 12
 * for the last panel of an M that 12 does not divide (256 rows: 21 panels and 4 rows), the same
 * chains without the work on zero rows or a copy of the tile */
__attribute__((target("avx512f,avx512bf16"), always_inline))
static inline void dpbf16_rows(int R, int kp, const uint32_t* ap, const uint32_t* bp, float* c,
                               size_t ldc, int load_c) {
    enum { MR = 12 };
    __m512 acc[MR][2];
    #pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        acc[r][0] = load_c ? load_acc(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = load_c ? load_acc(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)(bp + (size_t)p * 32));
        __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void*)(bp + (size_t)p * 32 + 16));
        const uint32_t* a = ap + (size_t)p * MR;
        #pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
        }
    }
    #pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

#define KERNEL_AVX512BF16(NAME, R)                                                                \
    __attribute__((target("avx512f,avx512bf16"), noinline)) static void NAME(                   \
        int kp, const uint32_t* ap, const uint32_t* bp, float* c, size_t ldc, int load_c) {      \
        dpbf16_rows(R, kp, ap, bp, c, ldc, load_c);                                              \
    }
KERNEL_AVX512BF16(kernel_avx512bf16, 12)
KERNEL_AVX512BF16(kernel_avx512bf16_1, 1) KERNEL_AVX512BF16(kernel_avx512bf16_2, 2)
KERNEL_AVX512BF16(kernel_avx512bf16_3, 3) KERNEL_AVX512BF16(kernel_avx512bf16_4, 4)
KERNEL_AVX512BF16(kernel_avx512bf16_5, 5) KERNEL_AVX512BF16(kernel_avx512bf16_6, 6)
KERNEL_AVX512BF16(kernel_avx512bf16_7, 7) KERNEL_AVX512BF16(kernel_avx512bf16_8, 8)
KERNEL_AVX512BF16(kernel_avx512bf16_9, 9) KERNEL_AVX512BF16(kernel_avx512bf16_10, 10)
KERNEL_AVX512BF16(kernel_avx512bf16_11, 11)

static const Bf16Kernel kernel_avx512bf16_rows[12] = {
    NULL, kernel_avx512bf16_1, kernel_avx512bf16_2, kernel_avx512bf16_3, kernel_avx512bf16_4,
    kernel_avx512bf16_5, kernel_avx512bf16_6, kernel_avx512bf16_7, kernel_avx512bf16_8,
    kernel_avx512bf16_9, kernel_avx512bf16_10, kernel_avx512bf16_11};
#endif

#if BF16_X86
/* The same chains with fp32 FMAs, for CPUs where VDPBF16PS is slow or absent (on Intel's server
 * cores it issues on one port, so it does 32 FLOPs a cycle against the two FMA ports' 64). A's
 * and B's panels come widened (put_word): per pair, MR (NR) floats of the odd elements, then MR
 * (NR) of the even ones, each a bf16 shifted up into an fp32. A bf16 times a bf16 is exact in
 * fp32, so the FMA adds the exact product with one rounding, as the instruction does; the
 * instruction's zeroing of denormal inputs and tiny results is the MXCSR's DAZ and FTZ, which
 * the caller sets around the call (enter_ftz_daz). Each element's chain: odd, then even, pair
 * by pair: the bits of the other paths (tests/test_gemm_bf16.c checks them over the whole
 * exponent range). */
__attribute__((target("avx512f"), always_inline))
static inline void wide_rows(int R, int kp, const uint32_t* ap, const uint32_t* bp, float* c,
                             size_t ldc, int load_c) {
    enum { MR = 12 };
    const float* a = (const float*)ap;
    const float* b = (const float*)bp;
    __m512 acc[MR][2];
    #pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        acc[r][0] = load_c ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = load_c ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int p = 0; p < kp; p++) {
        const __m512 o0 = _mm512_loadu_ps(b + (size_t)p * 64);
        const __m512 o1 = _mm512_loadu_ps(b + (size_t)p * 64 + 16);
        const __m512 e0 = _mm512_loadu_ps(b + (size_t)p * 64 + 32);
        const __m512 e1 = _mm512_loadu_ps(b + (size_t)p * 64 + 48);
        const float* ar = a + (size_t)p * 2 * MR;
        #pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(ar[r]);
            acc[r][0] = _mm512_fmadd_ps(x, o0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, o1, acc[r][1]);
        }
        #pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(ar[MR + r]);
            acc[r][0] = _mm512_fmadd_ps(x, e0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, e1, acc[r][1]);
        }
    }
    #pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
    }
}

/* the kernel over all 12 rows, and over the first R < 12 (as kernel_avx512bf16_R) */
#define KERNEL_AVX512F(NAME, R)                                                                   \
    __attribute__((target("avx512f"), noinline)) static void NAME(                               \
        int kp, const uint32_t* ap, const uint32_t* bp, float* c, size_t ldc, int load_c) {      \
        wide_rows(R, kp, ap, bp, c, ldc, load_c);                                                \
    }
KERNEL_AVX512F(kernel_avx512f, 12)
KERNEL_AVX512F(kernel_avx512f_1, 1) KERNEL_AVX512F(kernel_avx512f_2, 2)
KERNEL_AVX512F(kernel_avx512f_3, 3) KERNEL_AVX512F(kernel_avx512f_4, 4)
KERNEL_AVX512F(kernel_avx512f_5, 5) KERNEL_AVX512F(kernel_avx512f_6, 6)
KERNEL_AVX512F(kernel_avx512f_7, 7) KERNEL_AVX512F(kernel_avx512f_8, 8)
KERNEL_AVX512F(kernel_avx512f_9, 9) KERNEL_AVX512F(kernel_avx512f_10, 10)
KERNEL_AVX512F(kernel_avx512f_11, 11)

static const Bf16Kernel kernel_avx512f_rows[12] = {
    NULL, kernel_avx512f_1, kernel_avx512f_2, kernel_avx512f_3, kernel_avx512f_4,
    kernel_avx512f_5, kernel_avx512f_6, kernel_avx512f_7, kernel_avx512f_8, kernel_avx512f_9,
    kernel_avx512f_10, kernel_avx512f_11};
#endif

/* MXCSR with DAZ (bit 6) and FTZ (bit 15) set for kernel_avx512f and its fewer-row twins; returns
 * the old value for leave_ftz_daz. The kernels are never inlined (and are called through a
 * pointer), so their arithmetic stays between the two. */
static unsigned enter_ftz_daz(void) {
#if BF16_X86
    unsigned old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);
    return old;
#else
    return 0;
#endif
}
static void leave_ftz_daz(unsigned old) {
#if BF16_X86
    _mm_setcsr(old);
#else
    (void)old;
#endif
}

/* ---- paths --------------------------------------------------------------------------------- */

typedef struct {
    int mr, nr;
    Bf16Kernel kernel;
    const Bf16Kernel* rows;   /* rows[r], r < mr: the kernel over r rows of a panel, or NULL */
    int wide;                 /* A's panels widened to fp32 (kernel_avx512f), under DAZ/FTZ */
} Bf16PathDesc;

static Bf16PathDesc path_desc(GemmBf16Path p) {
#if BF16_X86
    if (p == GEMM_BF16_AVX512BF16)
        return (Bf16PathDesc){12, 32, kernel_avx512bf16, kernel_avx512bf16_rows, 0};
    if (p == GEMM_BF16_AVX512F)
        return (Bf16PathDesc){12, 32, kernel_avx512f, kernel_avx512f_rows, 1};
#endif
    (void)p;
    return (Bf16PathDesc){4, 16, kernel_portable, NULL, 0};
}

const char* gemm_bf16_path_name(GemmBf16Path p) {
    return p == GEMM_BF16_AVX512BF16 ? "avx512bf16" : p == GEMM_BF16_AVX512F ? "avx512f" : "portable";
}

int gemm_bf16_path_supported(GemmBf16Path p) {
    if (p == GEMM_BF16_PORTABLE) return 1;
#if BF16_X86
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
    if (p == GEMM_BF16_AVX512BF16) return avx512 && __builtin_cpu_supports("avx512bf16");
    if (p == GEMM_BF16_AVX512F) return avx512;
#endif
    return 0;
}

GemmBf16Path gemm_bf16_path_selected(void) {
    const char* s = getenv("SEEDGPT_GEMM_BF16");
    if (s == NULL || s[0] == '\0') {
#if BF16_X86
        /* VDPBF16PS does twice an FMA's work per instruction, but Intel's cores issue it on one
         * port (half the FMA rate in FLOPs): there the widened FMAs are faster */
        if (gemm_bf16_path_supported(GEMM_BF16_AVX512BF16) && !__builtin_cpu_is("intel"))
            return GEMM_BF16_AVX512BF16;
        if (gemm_bf16_path_supported(GEMM_BF16_AVX512F)) return GEMM_BF16_AVX512F;
#endif
        return GEMM_BF16_PORTABLE;
    }
    for (GemmBf16Path p = GEMM_BF16_PORTABLE; p <= GEMM_BF16_LAST; p++) {
        if (strcmp(s, gemm_bf16_path_name(p)) != 0) continue;
        if (!gemm_bf16_path_supported(p)) {
            fprintf(stderr, "SEEDGPT_GEMM_BF16=%s: this CPU does not support that path\n", s);
            exit(1);
        }
        return p;
    }
    fprintf(stderr, "SEEDGPT_GEMM_BF16=%s: expected portable, avx512bf16 or avx512f\n", s);
    exit(1);
}

/* ---- packing ------------------------------------------------------------------------------- */

/* the word of elements k and k+1 of a strided bf16 vector (k+1 == K: zero) */
static inline uint32_t pair_word(const uint16_t* x, size_t stride, int k, int K) {
    uint32_t lo = x[(size_t)k * stride];
    uint32_t hi = k + 1 < K ? x[(size_t)(k + 1) * stride] : 0u;
    return lo | hi << 16;
}

/* the same of a strided fp32 vector, each element rounded to bf16 (nearest even) */
static inline uint32_t pair_word_f32(const float* x, size_t stride, int k, int K) {
    uint32_t lo = sg_bf16_from_float(x[(size_t)k * stride]);
    uint32_t hi = k + 1 < K ? sg_bf16_from_float(x[(size_t)(k + 1) * stride]) : 0u;
    return lo | hi << 16;
}

/* A packed panel holds, per pair, one slot per line (a row of A, a column of B) in one of two
 * forms: the word (as the portable and VDPBF16PS kernels read it), or, for kernel_avx512f
 * (eo > 0: "widened"), the odd element's bf16 as an fp32 in the line's slot and the even one's eo
 * slots further (eo = MR, or NR: a pair takes two rows of slots). The widened floats are written
 * as floats, as the kernel reads them. */
static inline float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}
static inline void put_word(uint32_t* d, int eo, uint32_t w) {
    if (eo == 0) {
        *d = w;
        return;
    }
    float* f = (float*)d;
    f[0] = bits_float(w & 0xffff0000u);
    f[eo] = bits_float(w << 16);
}

/* dst (kp pairs, MR lines; widened if eo) = rows [i0, i0+mr) of A (bf16, or fp32 rounded as
 * packed), pairs [p0, p0+kp); rows mr..MR-1 zero */
static void pack_a_scalar(uint32_t* dst, const void* A, int a_f32, size_t rsa, size_t csa, int i0,
                          int mr, int p0, int kp, int K, int MR, int eo) {
    const size_t sp = eo ? 2 * (size_t)MR : (size_t)MR;   /* slots per pair */
    for (int p = 0; p < kp; p++) {
        uint32_t* d = dst + (size_t)p * sp;
        int k = 2 * (p0 + p);
        for (int r = 0; r < mr; r++)
            put_word(d + r, eo,
                     a_f32 ? pair_word_f32((const float*)A + (size_t)(i0 + r) * rsa, csa, k, K)
                           : pair_word((const uint16_t*)A + (size_t)(i0 + r) * rsa, csa, k, K));
        for (int r = mr; r < MR; r++) put_word(d + r, eo, 0u);
    }
}

/* dst (kp pairs, NR lines; widened if eo) = columns [j0, j0+nr) of B, pairs [p0, p0+kp);
 * columns nr..NR-1 zero */
static void pack_b_scalar(uint32_t* dst, const uint16_t* B, size_t rsb, size_t csb, int j0, int nr,
                          int p0, int kp, int K, int NR, int eo) {
    const size_t sp = eo ? 2 * (size_t)NR : (size_t)NR;
    for (int p = 0; p < kp; p++) {
        uint32_t* d = dst + (size_t)p * sp;
        int k = 2 * (p0 + p);
        for (int j = 0; j < nr; j++) put_word(d + j, eo, pair_word(B + (size_t)(j0 + j) * csb, rsb, k, K));
        for (int j = nr; j < NR; j++) put_word(d + j, eo, 0u);
    }
}

#if BF16_X86
/* ---- packing with AVX-512: the words of pack_a_scalar / pack_b_scalar, 16 at a time ------------
 * Where the pairs of a line (a row of A, a column of B) are adjacent in memory (a unit stride
 * along k), 16 lines' words are loaded as 16 vectors of 16 pairs and transposed in registers.
 * Where the lines are adjacent instead (a unit stride along the panel), the two halves of a pair
 * come from two rows of memory and are interleaved lane by lane. Pairs that run past K, and
 * every other stride, take the scalar path. The words are the same bits either way (the fp32
 * rounding below is sg_bf16_from_float's, lane by lane), so neither the path nor the result
 * depends on which packing ran. */
#define AVX512_PACK __attribute__((target("avx512f,avx512bw,avx512vl")))

/* 16 fp32 rounded to bf16 (nearest even; NaN to SG_BF16_NAN), each in the low half of its lane */
AVX512_PACK static inline __m512i round16(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(SG_BF16_NAN));
}

/* the 16 words of pairs 0..15 of a line with adjacent pairs: bf16 as they are, fp32 rounded */
AVX512_PACK static inline __m512i line_words(const void* x, int f32) {
    if (!f32) return _mm512_loadu_si512(x);
    const float* f = x;
    __m256i lo = _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(f)));
    __m256i hi = _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(f + 16)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* lanes 0..w-1 of 16 lines' words of one pair into their slots at d, as put_word */
AVX512_PACK static inline void put_words16(uint32_t* d, int w, int eo, __m512i v) {
    const __mmask16 keep = (__mmask16)((1u << w) - 1u);
    if (eo == 0) {
        _mm512_mask_storeu_epi32(d, keep, v);
        return;
    }
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    _mm512_mask_storeu_ps((float*)d, keep, _mm512_castsi512_ps(_mm512_and_si512(v, hi)));
    _mm512_mask_storeu_ps((float*)d + eo, keep, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
}

/* the slots at dst + p * ld of word p of line l, l < nl <= 16, for the first `full` pairs (a
 * multiple of 16) of lines with adjacent pairs (line l at base + l * ls elements; esize 2 or 4);
 * lanes nl..w-1 (w = 16, or 12 and less for A's panels) zero */
AVX512_PACK static void pack_adjacent_pairs(uint32_t* dst, size_t ld, int w, int eo,
                                            const char* base, size_t ls, int esize, int nl,
                                            int full) {
    for (int p = 0; p < full; p += 16) {
        __m512i r[16];
        for (int l = 0; l < 16; l++)
            r[l] = l < nl ? line_words(base + ((size_t)l * ls + 2 * (size_t)p) * esize, esize == 4)
                          : _mm512_setzero_si512();
        transpose16(r);
        for (int t = 0; t < 16; t++) put_words16(dst + (size_t)(p + t) * ld, w, eo, r[t]);
    }
}

/* elements x[0..n) (bf16, or fp32 rounded) as bf16 bits in the low halves of 16 lanes, lanes
 * n..15 zero */
AVX512_PACK static inline __m512i bf16_lanes(const void* x, int f32, int n) {
    const __mmask16 m = (__mmask16)((1u << n) - 1u);
    if (f32) return _mm512_maskz_mov_epi32(m, round16(_mm512_maskz_loadu_ps(m, x)));
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x));
}

/* the 16-lane words of pair (k, k+1) of lines adjacent in memory: elements lo[0..n), hi[0..n)
 * (bf16, or fp32 rounded), lanes n..15 zero */
AVX512_PACK static inline __m512i interleave_words(const void* lo, const void* hi, int f32, int n) {
    return _mm512_or_si512(bf16_lanes(lo, f32, n), _mm512_slli_epi32(bf16_lanes(hi, f32, n), 16));
}

/* the slots at dst + p * ld of the word of pair p0 + p of line l (l < nl; lanes nl..w-1 zero),
 * for kp pairs that all lie below K, of lines adjacent in memory (element k of line l at base +
 * k * pair_stride + l) */
AVX512_PACK static void pack_adjacent_lines(uint32_t* dst, size_t ld, int w, int eo,
                                            const char* base, size_t pair_stride, int esize, int nl,
                                            int p0, int kp, int K) {
    for (int p = 0; p < kp; p++) {
        int k = 2 * (p0 + p);
        const char* lo = base + (size_t)k * pair_stride * esize;
        const char* hi = lo + pair_stride * esize;
        for (int l0 = 0; l0 < w; l0 += 16) {
            int n = nl - l0 < 16 ? (nl - l0 > 0 ? nl - l0 : 0) : 16;
            int wn = w - l0 < 16 ? w - l0 : 16;
            __m512i v = interleave_words(lo + (size_t)l0 * esize, hi + (size_t)l0 * esize, esize == 4, n);
            put_words16(dst + (size_t)p * ld + l0, wn, eo, v);
        }
    }
}
#endif

#if BF16_X86
/* one pair of `panels` A panels (rows in all, the panels MR rows each and ld slots apart, the
 * pair's slots at dst; widened if eo) from two lines of A that hold the rows adjacent (elements 2p
 * and 2p + 1 of each row, both below K): one interleave per panel, the words of pack_a_scalar */
AVX512_PACK static void pack_a_pairline(uint32_t* dst, size_t ld, int eo, const char* lo,
                                        const char* hi, int esize, int rows, int panels, int MR) {
    for (int i = 0; i < panels; i++) {
        const int mr = rows - i * MR < MR ? rows - i * MR : MR;
        put_words16(dst + (size_t)i * ld, MR, eo,
                    interleave_words(lo + (size_t)i * MR * esize, hi + (size_t)i * MR * esize,
                                     esize == 4, mr));
    }
}
#endif

/* the packing routines: a fast path where the layout allows one (AVX-512 machines), else the
 * scalar words; both write every slot of the panel (eo: as put_word) */
static void pack_a(uint32_t* dst, const void* A, int a_f32, size_t rsa, size_t csa, int i0, int mr,
                   int p0, int kp, int K, int MR, int fast, int eo) {
    const size_t sp = eo ? 2 * (size_t)MR : (size_t)MR;   /* slots per pair */
#if BF16_X86
    const int esize = a_f32 ? 4 : 2;
    if (fast && MR <= 16 && csa == 1) {           /* rows with adjacent pairs */
        int full = 0;
        while (full + 16 <= kp && 2 * (p0 + full + 16) <= K) full += 16;
        pack_adjacent_pairs(dst, sp, MR, eo,
                            (const char*)A + ((size_t)i0 * rsa + 2 * (size_t)p0) * esize, rsa,
                            esize, mr, full);
        pack_a_scalar(dst + (size_t)full * sp, A, a_f32, rsa, csa, i0, mr, p0 + full, kp - full, K,
                      MR, eo);
        return;
    }
    if (fast && MR <= 16 && rsa == 1) {           /* rows adjacent, pairs csa apart */
        int done = K / 2 - p0 < kp ? (K / 2 - p0 > 0 ? K / 2 - p0 : 0) : kp;
        pack_adjacent_lines(dst, sp, MR, eo, (const char*)A + (size_t)i0 * esize, csa, esize, mr,
                            p0, done, K);
        pack_a_scalar(dst + (size_t)done * sp, A, a_f32, rsa, csa, i0, mr, p0 + done, kp - done, K,
                      MR, eo);
        return;
    }
#endif
    (void)fast;
    pack_a_scalar(dst, A, a_f32, rsa, csa, i0, mr, p0, kp, K, MR, eo);
}

static void pack_b(uint32_t* dst, const uint16_t* B, size_t rsb, size_t csb, int j0, int nr,
                   int p0, int kp, int K, int NR, int fast, int eo) {
    const size_t sp = eo ? 2 * (size_t)NR : (size_t)NR;
#if BF16_X86
    if (fast && NR % 16 == 0 && rsb == 1) {       /* columns with adjacent pairs */
        int full = 0;
        while (full + 16 <= kp && 2 * (p0 + full + 16) <= K) full += 16;
        for (int h = 0; h < NR; h += 16) {
            int n = nr - h < 16 ? (nr - h > 0 ? nr - h : 0) : 16;
            pack_adjacent_pairs(dst + h, sp, 16, eo,
                                (const char*)(B + (size_t)(j0 + h) * csb + 2 * (size_t)p0), csb, 2,
                                n, full);
        }
        pack_b_scalar(dst + (size_t)full * sp, B, rsb, csb, j0, nr, p0 + full, kp - full, K, NR, eo);
        return;
    }
    if (fast && NR % 16 == 0 && csb == 1) {       /* columns adjacent, pairs rsb apart */
        int done = K / 2 - p0 < kp ? (K / 2 - p0 > 0 ? K / 2 - p0 : 0) : kp;
        pack_adjacent_lines(dst, sp, NR, eo, (const char*)(B + j0), rsb, 2, nr, p0, done, K);
        pack_b_scalar(dst + (size_t)done * sp, B, rsb, csb, j0, nr, p0 + done, kp - done, K, NR, eo);
        return;
    }
#endif
    (void)fast;
    pack_b_scalar(dst, B, rsb, csb, j0, nr, p0, kp, K, NR, eo);
}

/* The packing buffer: the shared operand's panels of one pair chunk, then each thread's slice of
 * its block (and, for a bf16 result, its block's fp32 sums); grown to the largest call seen and
 * kept (64-byte aligned). */
static uint32_t* pack_buf = NULL;
static size_t pack_cap = 0;

static uint32_t* pack_buffer(size_t words) {
    if (words > pack_cap) {
        free(pack_buf);
        size_t bytes = (words * sizeof(uint32_t) + 63) & ~(size_t)63;
        pack_buf = aligned_alloc(64, bytes);
        if (pack_buf == NULL) {
            fprintf(stderr, "gemm_bf16: out of memory for %zu bytes of packed panels\n", bytes);
            exit(1);
        }
        pack_cap = words;
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
    int M, N, K, KP, accumulate, a_f32, fast, a_by_pair;
    const void* A;
    const uint16_t* B;
    size_t rsa, csa, rsb, csb, ldc, esize;   /* esize: bytes of one element of A */
    float* C;
    uint16_t* Cb;
    const float* bias;
    Bf16PathDesc pd;
    int as, bs;        /* 32-bit slots per pair of a packed A (B) panel: MR (NR) words, or (wide)
                        * 2MR (2NR) floats */
    int mp, np;        /* panels of A (MR rows) and of B (NR columns) */
    int blk;           /* panels per block of the blocked operand */
    size_t a_ld;       /* slots between the shared A's panels */
} Gemm;

static int rows_of(const Gemm* g, int p) {
    return g->M - p * g->pd.mr < g->pd.mr ? g->M - p * g->pd.mr : g->pd.mr;
}
static int cols_of(const Gemm* g, int q) {
    return g->N - q * g->pd.nr < g->pd.nr ? g->N - q * g->pd.nr : g->pd.nr;
}

/* A panel p's and B panel q's pairs [p0, p0+kp) at dst as the kernel reads them */
static void pack_a_panel(const Gemm* g, uint32_t* dst, int p, int p0, int kp) {
    pack_a(dst, g->A, g->a_f32, g->rsa, g->csa, p * g->pd.mr, rows_of(g, p), p0, kp, g->K,
           g->pd.mr, g->fast, g->pd.wide ? g->pd.mr : 0);
}
static void pack_b_panel(const Gemm* g, uint32_t* dst, int q, int p0, int kp) {
    pack_b(dst, g->B, g->rsb, g->csb, q * g->pd.nr, cols_of(g, q), p0, kp, g->K, g->pd.nr,
           g->fast, g->pd.wide ? g->pd.nr : 0);
}

/* pairs [p0, p0+kp) of A panels [i0, i1) of an A whose rows are adjacent and k strided (a_by_pair:
 * dout^T of a weight gradient), as the kernel reads them: panel i's pair p0 + t at
 * dst + (i - i0) * ld + t * as. Each pair's two lines of A are read once, left to right, and cut
 * into the panels. */
static void pack_a_by_pairs(const Gemm* g, uint32_t* dst, size_t ld, int i0, int i1, int p0,
                            int kp) {
    const int MR = g->pd.mr, eo = g->pd.wide ? MR : 0;
    for (int t = 0; t < kp; t++) {
        const int k = 2 * (p0 + t);
#if BF16_X86
        if (k + 1 < g->K) {
            const char* lo = (const char*)g->A + ((size_t)k * g->csa + (size_t)i0 * MR) * g->esize;
            pack_a_pairline(dst + (size_t)t * g->as, ld, eo, lo, lo + g->csa * g->esize,
                            (int)g->esize, g->M - i0 * MR, i1 - i0, MR);
            continue;
        }
#endif
        for (int i = i0; i < i1; i++)   /* the last pair of an odd K */
            pack_a_scalar(dst + (size_t)(i - i0) * ld + (size_t)t * g->as, g->A, g->a_f32, g->rsa,
                          g->csa, i * MR, rows_of(g, i), p0 + t, 1, g->K, MR, eo);
    }
}

/* c (mr x nr, rows ldc apart) = [c +] ap . bp over kp pairs: the path's kernel, its kernel over
 * fewer rows, or (an N edge, or a path without those) through a full-size copy, so nothing outside
 * C is touched. room: c has room for a whole MR x NR tile (a bf16 result's sums), written as is. */
static void tile(const Gemm* g, int kp, const uint32_t* ap, const uint32_t* bp, float* c,
                 size_t ldc, int mr, int nr, int load_c, int room) {
    const int MR = g->pd.mr, NR = g->pd.nr;
    const Bf16Kernel k = mr == MR ? g->pd.kernel
                       : g->pd.rows != NULL ? g->pd.rows[mr]
                       : room ? g->pd.kernel : NULL;
    if (k != NULL && (nr == NR || room)) {
#ifdef SEEDGPT_TEST_BUILD
        if (mr < MR && g->pd.rows != NULL) __atomic_fetch_or(&rows_run, 1u << mr, __ATOMIC_RELAXED);
#endif
        k(kp, ap, bp, c, ldc, load_c);
        return;
    }
    float tmp[MR_MAX * NR_MAX] = {0};
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) tmp[r * NR + j] = c[r * ldc + j];
    g->pd.kernel(kp, ap, bp, tmp, (size_t)NR, load_c);
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[r * ldc + j] = tmp[r * NR + j];
}

/* rows [r0, r1) x columns [j0, j1) of a bf16 result from their chains' fp32 sums (element (r, j)
 * at sums[(r - r0) * ld + j - j0]): plus the bias, rounded once. Outside the DAZ/FTZ window: the
 * addition must not flush. */
static void round_out(const Gemm* g, const float* sums, size_t ld, int r0, int r1, int j0, int j1) {
    for (int r = r0; r < r1; r++) {
        const float* t = sums + (size_t)(r - r0) * ld;
        uint16_t* o = g->Cb + (size_t)r * g->ldc;
        for (int j = j0; j < j1; j++)
            o[j] = sg_bf16_from_float(g->bias != NULL ? t[j - j0] + g->bias[j] : t[j - j0]);
    }
}

/* A shared (all of its panels, pairs [p0, p0+pn), at Ap), B blocked: each thread packs a block of
 * B's panels KPC pairs at a time into `mine` and runs them against every A panel. A bf16 result's
 * block (all M rows) is summed in `sums`, rows blk * NR floats long, and rounded at its end. */
static void run_b_blocks(const Gemm* g, const uint32_t* Ap, uint32_t* mine, float* sums, int p0,
                         int pn) {
    const int MR = g->pd.mr, NR = g->pd.nr, nb = (g->np + g->blk - 1) / g->blk;
    const size_t ld = g->Cb != NULL ? (size_t)g->blk * NR : g->ldc;
    #pragma omp for schedule(dynamic)
    for (int qb = 0; qb < nb; qb++) {
        const int q0 = qb * g->blk, q1 = q0 + g->blk < g->np ? q0 + g->blk : g->np;
        float* out = g->Cb != NULL ? sums : g->C + (size_t)q0 * NR;
        for (int pp = 0; pp < pn; pp += KPC) {
            const int kp = pn - pp < KPC ? pn - pp : KPC;
            const int load_c = g->accumulate || p0 + pp > 0;
            for (int q = q0; q < q1; q++)
                pack_b_panel(g, mine + (size_t)(q - q0) * g->bs * kp, q, p0 + pp, kp);
            const unsigned csr = g->pd.wide ? enter_ftz_daz() : 0u;
            /* MC_PANELS of A (in L2) against each B panel of the block (in L1) in turn */
            for (int pc = 0; pc < g->mp; pc += MC_PANELS) {
                const int pe = pc + MC_PANELS < g->mp ? pc + MC_PANELS : g->mp;
                for (int q = q0; q < q1; q++) {
                    const uint32_t* bp = mine + (size_t)(q - q0) * g->bs * kp;
                    for (int p = pc; p < pe; p++)
                        tile(g, kp, Ap + (size_t)p * g->a_ld + (size_t)pp * g->as, bp,
                             out + (size_t)p * MR * ld + (size_t)(q - q0) * NR, ld, rows_of(g, p),
                             cols_of(g, q), load_c, g->Cb != NULL);
                }
            }
            if (g->pd.wide) leave_ftz_daz(csr);
        }
        if (g->Cb != NULL)
            round_out(g, sums, ld, 0, g->M, q0 * NR, q1 * NR < g->N ? q1 * NR : g->N);
    }
}

/* B shared (all of its panels, pairs [p0, p0+pn), at Bp), A blocked: each thread packs a block of
 * A's panels KPC pairs at a time into `mine` and runs them against every B panel. A bf16 result's
 * block (all N columns) is summed in `sums`, rows np * NR floats long, and rounded at its end. */
static void run_a_blocks(const Gemm* g, const uint32_t* Bp, uint32_t* mine, float* sums, int p0,
                         int pn) {
    const int MR = g->pd.mr, NR = g->pd.nr, mb = (g->mp + g->blk - 1) / g->blk;
    const size_t a_ld = (size_t)g->as * KPC + 16;   /* as g->a_ld: not a power of two */
    const size_t ld = g->Cb != NULL ? (size_t)g->np * NR : g->ldc;
    #pragma omp for schedule(dynamic)
    for (int pb = 0; pb < mb; pb++) {
        const int i0 = pb * g->blk, i1 = i0 + g->blk < g->mp ? i0 + g->blk : g->mp;
        float* out = g->Cb != NULL ? sums : g->C + (size_t)i0 * MR * g->ldc;
        for (int pp = 0; pp < pn; pp += KPC) {
            const int kp = pn - pp < KPC ? pn - pp : KPC;
            const int load_c = g->accumulate || p0 + pp > 0;
            if (g->a_by_pair) {
                pack_a_by_pairs(g, mine, a_ld, i0, i1, p0 + pp, kp);
            } else {
                for (int i = i0; i < i1; i++)
                    pack_a_panel(g, mine + (size_t)(i - i0) * a_ld, i, p0 + pp, kp);
            }
            const unsigned csr = g->pd.wide ? enter_ftz_daz() : 0u;
            for (int q = 0; q < g->np; q++) {
                const uint32_t* bp = Bp + (size_t)q * g->bs * pn + (size_t)pp * g->bs;
                for (int i = i0; i < i1; i++)
                    tile(g, kp, mine + (size_t)(i - i0) * a_ld, bp,
                         out + (size_t)(i - i0) * MR * ld + (size_t)q * NR, ld, rows_of(g, i),
                         cols_of(g, q), load_c, g->Cb != NULL);
            }
            if (g->pd.wide) leave_ftz_daz(csr);
        }
        if (g->Cb != NULL)
            round_out(g, sums, ld, i0 * MR, i1 * MR < g->M ? i1 * MR : g->M, 0, g->N);
    }
}

static GemmPacking last_packing;
GemmPacking gemm_bf16_last_packing(void) { return last_packing; }

void gemm_bf16_ex(int M, int N, int K, const void* A, int a_f32, size_t rsa, size_t csa,
                  const uint16_t* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc,
                  uint16_t* Cb, const float* bias) {
    if (M <= 0 || N <= 0) return;
    last_packing = (GemmPacking){.driver = GEMM_DIRECT, .threads = omp_get_max_threads(),
                                 .row_blocks = 1};
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                if (Cb != NULL) {
                    Cb[(size_t)i * ldc + j] = sg_bf16_from_float(bias ? bias[j] : 0.0f);
                    continue;
                }
                C[(size_t)i * ldc + j] = accumulate ? flush(C[(size_t)i * ldc + j]) : 0.0f;
            }
        return;
    }
    const GemmBf16Path path = gemm_bf16_path_selected();
    Gemm g = {.M = M, .N = N, .K = K, .KP = (K + 1) / 2, .accumulate = accumulate, .a_f32 = a_f32,
              .A = A, .B = B, .rsa = rsa, .csa = csa, .rsb = rsb, .csb = csb, .ldc = ldc,
              .esize = a_f32 ? sizeof(float) : sizeof(uint16_t), .C = C, .Cb = Cb, .bias = bias,
              .pd = path_desc(path)};
    const int MR = g.pd.mr, NR = g.pd.nr, KP = g.KP, threads = omp_get_max_threads();
    g.fast = path != GEMM_BF16_PORTABLE;   /* the AVX-512 packing (same words) */
    g.a_by_pair = g.fast && rsa == 1 && csa != 1 && MR <= 16;
    g.as = g.pd.wide ? 2 * MR : MR;
    g.bs = g.pd.wide ? 2 * NR : NR;
    g.mp = (M + MR - 1) / MR;
    g.np = (N + NR - 1) / NR;
    const int b_blocked = g.np >= g.mp;   /* B has the more panels: it is the blocked one */
    const size_t per_pair = b_blocked ? (size_t)g.mp * g.as : (size_t)g.np * g.bs;
    if (Cb != NULL && b_blocked && per_pair * KP > PACK_LIMIT && g.mp > MC_PANELS) {
        /* a bf16 result packs the whole K at once: rows in blocks whose A panels fit PACK_WORDS
         * (every row's chains are its own, so the bits are the same) */
        size_t rows = PACK_LIMIT / ((size_t)KP * (g.as / MR));
        rows = rows / ((size_t)MR * MC_PANELS) * ((size_t)MR * MC_PANELS);
        if (rows < (size_t)MR * MC_PANELS) rows = (size_t)MR * MC_PANELS;
        GemmPacking first = {0};
        int blocks = 0;
        for (size_t i0 = 0; i0 < (size_t)M; i0 += rows) {
            const int m = (int)((size_t)M - i0 < rows ? (size_t)M - i0 : rows);
            gemm_bf16_ex(m, N, K, (const char*)A + i0 * rsa * g.esize, a_f32, rsa, csa, B, rsb,
                         csb, 0, NULL, ldc, Cb + i0 * ldc, bias);
            if (blocks++ == 0) first = last_packing;
        }
        last_packing = first;
        last_packing.row_blocks = blocks;
        return;
    }
    g.blk = block_panels(b_blocked ? g.np : g.mp, threads);
    /* the shared operand is packed in pair chunks as long as PACK_WORDS allows (all of K at GPT-2
     * shapes): each chunk costs the threads two barriers, which are dear on a loaded machine. A
     * bf16 result is rounded once, at the end of its chain: all of K in one chunk, its sums in
     * fp32 beside the thread's slice, a block's output at a time */
    int pchunk = (int)(PACK_LIMIT / per_pair) / KPC * KPC;
    if (pchunk < KPC) pchunk = KPC;
    if (pchunk > KP || Cb != NULL) pchunk = KP;
    /* A's panels a_ld slots apart, 16 more than they hold (as gemm_f32's: a power-of-two stride
     * puts the same pair of every panel in one L1 set) */
    g.a_ld = (((size_t)g.as * pchunk + 15) & ~(size_t)15) + 16;
    const size_t shared = b_blocked ? (size_t)g.mp * g.a_ld : (size_t)g.np * g.bs * pchunk;
    const size_t slice = b_blocked ? (size_t)g.blk * g.bs * KPC
                                   : (size_t)g.blk * ((size_t)g.as * KPC + 16);
    const size_t sums = Cb == NULL ? 0
                      : b_blocked ? (size_t)g.mp * MR * g.blk * NR : (size_t)g.blk * MR * g.np * NR;
    uint32_t* buf = pack_buffer(shared + (slice + sums) * (size_t)threads);
    last_packing = (GemmPacking){b_blocked ? GEMM_B_BLOCKED : GEMM_A_BLOCKED,
                                 shared * sizeof(uint32_t), (slice + sums) * sizeof(uint32_t),
                                 threads, (KP + pchunk - 1) / pchunk, 1};

    #pragma omp parallel
    {
        uint32_t* own = buf + shared + (slice + sums) * (size_t)omp_get_thread_num();
        float* own_sums = (float*)(own + slice);
        for (int p0 = 0; p0 < KP; p0 += pchunk) {
            const int pn = KP - p0 < pchunk ? KP - p0 : pchunk;
            if (b_blocked) {
                if (g.a_by_pair) {
                    #pragma omp for schedule(static)
                    for (int p = 0; p < pn; p++)
                        pack_a_by_pairs(&g, buf + (size_t)p * g.as, g.a_ld, 0, g.mp, p0 + p, 1);
                } else {
                    #pragma omp for schedule(dynamic)
                    for (int i = 0; i < g.mp; i++)
                        pack_a_panel(&g, buf + (size_t)i * g.a_ld, i, p0, pn);
                }
                run_b_blocks(&g, buf, own, own_sums, p0, pn);
            } else {
                #pragma omp for schedule(dynamic)
                for (int q = 0; q < g.np; q++)
                    pack_b_panel(&g, buf + (size_t)q * g.bs * pn, q, p0, pn);
                run_a_blocks(&g, buf, own, own_sums, p0, pn);
            }
        }
    }
}

void gemm_bf16(int M, int N, int K, const uint16_t* A, size_t rsa, size_t csa,
               const uint16_t* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc) {
    gemm_bf16_ex(M, N, K, A, 0, rsa, csa, B, rsb, csb, accumulate, C, ldc, NULL, NULL);
}
