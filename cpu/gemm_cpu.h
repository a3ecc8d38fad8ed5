/* cpu/gemm_cpu.h — seedgpt's own fp32 matrix product for the CPU matmul op (cpu/ops_cpu.c).
 *
 * Every output element is one fused multiply-add chain over k = 0, 1, ..., K-1 in that order,
 * started at 0 (written) or at the element's old value (accumulated). Its bits therefore depend
 * only on the element's own row of A and column of B: not on M, N, the blocking, the thread
 * count, or the instruction set path. See the top of cpu/gemm_cpu.c for why.
 */
#ifndef SEEDGPT_GEMM_CPU_H
#define SEEDGPT_GEMM_CPU_H

#include <stddef.h>
#include <stdint.h>

/* C (M,N) = A (M,K) . B (K,N), written (accumulate 0) or added to (accumulate 1: each element's
 * chain starts at its old value, so accumulating rows [0,K1) then [K1,K) equals one call over
 * [0,K)). A's element (i,k) is A[i*rsa + k*csa], B's element (k,j) is B[k*rsb + j*csb]; C's rows
 * are ldc apart. Runs over the OpenMP threads; call it from outside a parallel region (it keeps
 * one grow-only packing buffer, so it is not reentrant). */
void gemm_f32(int M, int N, int K, const float* A, size_t rsa, size_t csa,
              const float* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc);

/* The instruction-set paths; all give the same bits. SEEDGPT_GEMM=portable|avx2|avx512 forces
 * one (read at each call); unset, the widest the CPU supports runs. */
typedef enum { GEMM_PORTABLE = 0, GEMM_AVX2 = 1, GEMM_AVX512 = 2 } GemmPath;
int gemm_path_supported(GemmPath p);   /* 1 if this CPU (and this build) can run p */
GemmPath gemm_path_selected(void);     /* the path the next call takes */
const char* gemm_path_name(GemmPath p);

/* ---- bf16 operands, fp32 accumulation (cpu/gemm_bf16_cpu.c) ------------------------------
 * C (M,N) = A (M,K) . B (K,N) with A and B in bf16 (uint16_t bits) and C in fp32; strides and
 * accumulate as gemm_f32. Each output element is one chain over the k pairs (2p, 2p+1), the odd
 * element first, each step an exact product added with one rounding (fmaf), bf16 denormal
 * operands read as zero and results below FLT_MIN flushed to a zero of their sign: the arithmetic
 * of AVX512_BF16's VDPBF16PS, which the portable path reproduces bit for bit. An accumulated
 * element that is a denormal starts its chain at zero. */
void gemm_bf16(int M, int N, int K, const uint16_t* A, size_t rsa, size_t csa,
               const uint16_t* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc);

/* gemm_bf16 with the two options the model's bf16 ops need. a_f32: A is const float*, each
 * element rounded to bf16 (nearest even) as it is packed, the rounded value the operand (a
 * gradient's bf16 operand, with no bf16 copy of it anywhere). Cb != NULL: the result is written
 * to Cb (bf16, rows ldc apart; C unused, accumulate must be 0) as acc + bias[j] (bias may be
 * NULL) rounded once to nearest even: the same bits as the fp32 result, plus the bias, rounded.
 * Either way the chain of every element is gemm_bf16's. */
void gemm_bf16_ex(int M, int N, int K, const void* A, int a_f32, size_t rsa, size_t csa,
                  const uint16_t* B, size_t rsb, size_t csb, int accumulate, float* C, size_t ldc,
                  uint16_t* Cb, const float* bias);

/* One step of that chain, as the portable path computes it: acc, then A[2p+1]*B[2p+1], then
 * A[2p]*B[2p], with a_pair = A[2p] | A[2p+1] << 16 and b_pair likewise (for the tests). */
float gemm_bf16_pair_step(float acc, uint32_t a_pair, uint32_t b_pair);

/* SEEDGPT_GEMM_BF16=portable|avx512bf16|avx512f forces a path (read at each call); unset, the
 * CPU's best: avx512f (the bf16 widened to fp32, FMAs) on Intel CPUs and on AVX-512 CPUs without
 * AVX512_BF16, avx512bf16 (VDPBF16PS) on the others that have it, else portable. The three give
 * the same bits. */
typedef enum { GEMM_BF16_PORTABLE = 0, GEMM_BF16_AVX512BF16 = 1, GEMM_BF16_AVX512F = 2 } GemmBf16Path;
#define GEMM_BF16_LAST GEMM_BF16_AVX512F
int gemm_bf16_path_supported(GemmBf16Path p);
GemmBf16Path gemm_bf16_path_selected(void);
const char* gemm_bf16_path_name(GemmBf16Path p);

/* ---- what a call packed ------------------------------------------------------------------
 * The packing buffer of each GEMM (one for gemm_f32, one for gemm_bf16_ex) is plain malloc, grown
 * to the largest call seen and kept: no memory counter sees it. The last call's figures, for the
 * benchmark's table (build/bench_gemm --packing) and the tests: the buffer it asked for is
 * shared_bytes + threads * thread_bytes. A bf16 result cut into row blocks reports its first
 * (largest) block, and the number of blocks. */
typedef enum { GEMM_DIRECT = 0, GEMM_A_BLOCKED = 1, GEMM_B_BLOCKED = 2 } GemmDriver;
typedef struct {
    GemmDriver driver;     /* direct (no packing; gemm_f32 only), or which operand was blocked */
    size_t shared_bytes;   /* the shared operand's panels of one k chunk */
    size_t thread_bytes;   /* each thread's own: its slice of a block, a bf16 result's fp32 sums */
    int threads;
    int chunks;            /* k chunks the shared operand was packed in */
    int row_blocks;        /* a bf16 result cut into blocks of rows; 1: not cut */
} GemmPacking;
GemmPacking gemm_f32_last_packing(void);
GemmPacking gemm_bf16_last_packing(void);

#ifdef SEEDGPT_TEST_BUILD
/* Test builds only, so that small products take the paths of large ones. pack_limit: the shared
 * operand's floats (gemm_f32) or words (gemm_bf16_ex) per k chunk, 8 Mi by default, here any
 * (0 restores the default): a small limit packs K in chunks of KC values (KPC pairs), and cuts a
 * B-blocked bf16 result into row blocks. rows_kernels_run: a mask, bit r set when the kernel over
 * r rows of a panel (the last panel of an M that MR does not divide) ran since the last read. */
void gemm_test_pack_limit(size_t floats);
void gemm_bf16_test_pack_limit(size_t words);
unsigned gemm_test_rows_kernels_run(void);
unsigned gemm_bf16_test_rows_kernels_run(void);
#endif

#endif
