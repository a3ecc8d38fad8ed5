/* cuda/mma.h — tensor-core instructions and the data movement that feeds them (ldmatrix,
 * cp.async; at the end), each behind one small wrapper that has two bodies:
 * inline PTX for nvcc, and in the emulation (-DSG_EMU) a CPU twin written from the PTX ISA's
 * fragment layouts, so a kernel built on these wrappers runs against its CPU reference in CI and,
 * on a GPU, the real instruction can be held to the emulated one (tests/cuda/test_cuda_mma.cu).
 *
 * sg_mma_m16n8k16_bf16_f32(d, a, b, c): D = A B + C for one warp, A 16x16 bf16 (row-major), B
 * 16x8 bf16 (column-major), C and D 16x8 fp32. PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.
 * bf16.f32. A warp collective: all 32 lanes of the warp call it together, with the same
 * instruction (no divergence, no partial warps). d may be c.
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"). With
 * g = lane >> 2 (groupID) and t = lane % 4 (threadID_in_group), a lane holds:
 *   A, four registers of two bf16 each, the lower-indexed element in the low half:
 *     a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
 *     a[2] = A[g    ][2t+8, 2t+9]    a[3] = A[g + 8][2t+8, 2t+9]
 *   B, two registers (rows k, column n):
 *     b[0] = B[2t, 2t+1][g]          b[1] = B[2t+8, 2t+9][g]
 *   C and D, four floats:
 *     c[0], c[1] = C[g][2t, 2t+1]    c[2], c[3] = C[g + 8][2t, 2t+1]
 * (element i of A: row g + 8 for i in {2,3,6,7}, column 2t + (i & 1) + 8 for i >= 4; element i
 * of B: row 2t + (i & 1) + 8 for i >= 2; element i of C: row g + 8 for i >= 2, column 2t + (i & 1).)
 *
 * Arithmetic. The products of two bf16 are exact in fp32 (8 + 8 significant bits). The emulation
 * adds them to c[i] in k order, 0 to 15, rounding to fp32 after each addition. A tensor core's
 * internal order, width and rounding of that 16-term sum are not specified to the bit by NVIDIA,
 * so the GPU agrees with the emulation to a tolerance, not bit for bit: per element of D,
 *   |d_gpu - d_emu| <= (K + 1) 2^-22 (|c| + sum_k |a_k b_k|),  K = 16 terms per instruction
 * (twice the worst-case error of any fp32 summation order of K + 1 terms, with truncation as well
 * as rounding allowed); a chain of n instructions accumulating through c uses K = 16 n.
 * sg_mma_tolerance() computes it; tests/cuda/test_cuda_mma.cu uses it against float64.
 *
 * sg_mma_m16n8k8_f16_f32(d, a, b, c): the Turing shape, D = A B + C with A 16x8 fp16 (row-major),
 * B 8x8 fp16 (column-major), C and D 16x8 fp32. PTX: mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.
 * f32, sm_75 and newer (the fp16 tensor cores of T4 / RTX 20; sm_80 runs it too). A warp
 * collective, as above. Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8", .f16), with g and
 * t as above:
 *   A, two registers of two fp16 each, the lower-indexed element in the low half:
 *     a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
 *   B, one register (rows k, column n):
 *     b[0] = B[2t, 2t+1][g]
 *   C and D, four floats, as for m16n8k16:
 *     c[0], c[1] = C[g][2t, 2t+1]    c[2], c[3] = C[g + 8][2t, 2t+1]
 * (element i of A: row g + 8 for i >= 2, column 2t + (i & 1); element i of B: row 2t + i.) It is
 * the first half (k 0..7) of m16n8k16's fragments: two of them, the second on a[2], a[3] and b[1]
 * of an m16n8k16 fragment, make one m16n8k16 in fp16. Products of two fp16 are exact in fp32
 * (11 + 11 significant bits, denormals included); the emulation adds them to c in k order, 0 to 7,
 * rounding to fp32 after each, and the GPU is held to it within sg_mma_tolerance(8, ...).
 */
#ifndef SEEDGPT_MMA_H
#define SEEDGPT_MMA_H

#include "cuda/device.h"
#include "util/bf16.h"
#include "util/fp16.h"

/* ---- the documented layout, element by element (host and device) ----------------------------- */
/* A (16 x 16): element i (0..7) of lane `lane`; register i / 2, half i % 2 */
static inline __host__ __device__ int sg_mma_a_row(int lane, int i) {
    return (lane >> 2) + ((i & 2) ? 8 : 0);
}
static inline __host__ __device__ int sg_mma_a_col(int lane, int i) {
    return 2 * (lane & 3) + (i & 1) + (i >= 4 ? 8 : 0);
}
/* B (16 x 8, k x n): element i (0..3) of lane `lane`; register i / 2, half i % 2 */
static inline __host__ __device__ int sg_mma_b_row(int lane, int i) {
    return 2 * (lane & 3) + (i & 1) + (i >= 2 ? 8 : 0);
}
static inline __host__ __device__ int sg_mma_b_col(int lane, int i) {
    (void)i;
    return lane >> 2;
}
/* C and D (16 x 8): element i (0..3) of lane `lane` */
static inline __host__ __device__ int sg_mma_c_row(int lane, int i) { return (lane >> 2) + (i >= 2 ? 8 : 0); }
static inline __host__ __device__ int sg_mma_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }

/* ---- the CPU twin's arithmetic (host) ---------------------------------------------------------- */
/* one element of D: c + sum_k a_row[k] b_col[k], in fp32, k = 0..15 in order (bf16 bits in) */
static inline float sg_mma_dot16_bf16_f32(float c, const uint16_t a_row[16], const uint16_t b_col[16]) {
    float acc = c;
    for (int k = 0; k < 16; k++) {
        float p = sg_bf16_to_float(a_row[k]) * sg_bf16_to_float(b_col[k]);   /* exact */
        acc = acc + p;
    }
    return acc;
}

/* D = A B + C for whole matrices, as the emulated instruction computes it: A (16, 16) row-major,
 * Bt (8, 16) = B transposed (each column of B contiguous, as .col names it), C, D (16, 8)
 * row-major. The reference a GPU result is held to, within sg_mma_tolerance. */
static inline void sg_mma_m16n8k16_ref(float D[16 * 8], const uint16_t A[16 * 16], const uint16_t Bt[8 * 16],
                                       const float C[16 * 8]) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) D[m * 8 + n] = sg_mma_dot16_bf16_f32(C[m * 8 + n], &A[m * 16], &Bt[n * 16]);
}

/* the GPU check's tolerance for one element of D (see the header comment): k_terms products */
static inline double sg_mma_tolerance(int k_terms, double abs_c_plus_abs_products) {
    return (k_terms + 1) * 0x1p-22 * abs_c_plus_abs_products;
}

/* m16n8k8 in fp16 (the Turing shape). A (16 x 8): element i (0..3) of lane `lane`; register i / 2,
 * half i % 2 */
static inline __host__ __device__ int sg_mma_k8_a_row(int lane, int i) { return (lane >> 2) + (i >= 2 ? 8 : 0); }
static inline __host__ __device__ int sg_mma_k8_a_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
/* B (8 x 8, k x n): element i (0..1) of lane `lane`, in its one register, half i */
static inline __host__ __device__ int sg_mma_k8_b_row(int lane, int i) { return 2 * (lane & 3) + i; }
static inline __host__ __device__ int sg_mma_k8_b_col(int lane, int i) {
    (void)i;
    return lane >> 2;
}
/* C and D: sg_mma_c_row, sg_mma_c_col above */

/* one element of D: c + sum_k a_row[k] b_col[k], in fp32, k = 0..7 in order (fp16 bits in) */
static inline float sg_mma_dot8_f16_f32(float c, const uint16_t a_row[8], const uint16_t b_col[8]) {
    float acc = c;
    for (int k = 0; k < 8; k++) {
        float p = sg_fp16_to_float(a_row[k]) * sg_fp16_to_float(b_col[k]);   /* exact */
        acc = acc + p;
    }
    return acc;
}

/* D = A B + C for whole matrices, as the emulated m16n8k8 computes it: A (16, 8) row-major, Bt
 * (8, 8) = B transposed (each column of B contiguous), C, D (16, 8) row-major, fp16 bits in. */
static inline void sg_mma_m16n8k8_ref(float D[16 * 8], const uint16_t A[16 * 8], const uint16_t Bt[8 * 8],
                                      const float C[16 * 8]) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) D[m * 8 + n] = sg_mma_dot8_f16_f32(C[m * 8 + n], &A[m * 8], &Bt[n * 8]);
}

/* ---- the wrapper ------------------------------------------------------------------------------- */
/* SG_MMA_SM80: the device pass being compiled has sm_80's instructions (mma.m16n8k16 in bf16,
 * cp.async; ldmatrix is sm_75's, kept with them as the fragments it feeds are bf16). `make cuda`
 * builds every .cu for sm_75 as well (Makefile: CUDA_ARCHS); there the wrappers below compile to
 * __trap(), which no run reaches: the backend takes the bf16 tensor-core paths only on a device of
 * compute capability 8.0 or more (cuda/arch.h) and refuses --precision bf16 below it. The host
 * pass and the emulation see no __CUDA_ARCH__ and keep the real bodies. */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define SG_MMA_SM80 1
#else
#define SG_MMA_SM80 0
#endif

#ifndef SG_EMU
static __device__ __forceinline__ void sg_mma_m16n8k16_bf16_f32(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                                const float c[4]) {
#if !SG_MMA_SM80
    (void)a; (void)b; (void)c;
    d[0] = d[1] = d[2] = d[3] = 0.0f;
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}
#else
/* The warp's 32 register sets meet in one warp collective (all 32 lanes, full mask: a partial
 * warp, a divergent call or a lane that has left is reported as for __shfl_sync); each lane then
 * rebuilds A, B and C from the documented layout and computes its own four elements of D. */
static inline void sg_mma_m16n8k16_bf16_f32_emu(::sg_emu::Site site, float d[4], const uint32_t a[4],
                                                const uint32_t b[2], const float c[4]) {
    enum { WORDS = 10 };   /* a[4], b[2], c[4] */
    uint32_t mine[WORDS] = {a[0], a[1], a[2], a[3], b[0], b[1],
                            __float_as_uint(c[0]), __float_as_uint(c[1]), __float_as_uint(c[2]), __float_as_uint(c[3])};
    uint32_t all[32 * WORDS];
    ::sg_emu::warp_gather(site, "sg_mma_m16n8k16_bf16_f32 (mma.sync.m16n8k16)", 0xffffffffu, mine, WORDS, all);
    uint16_t A[16 * 16], Bt[8 * 16];
    float C[16 * 8];
    for (int l = 0; l < 32; l++) {
        const uint32_t* w = &all[l * WORDS];
        for (int i = 0; i < 8; i++) A[sg_mma_a_row(l, i) * 16 + sg_mma_a_col(l, i)] = (uint16_t)(w[i / 2] >> (16 * (i & 1)));
        for (int i = 0; i < 4; i++)
            Bt[sg_mma_b_col(l, i) * 16 + sg_mma_b_row(l, i)] = (uint16_t)(w[4 + i / 2] >> (16 * (i & 1)));
        for (int i = 0; i < 4; i++) C[sg_mma_c_row(l, i) * 8 + sg_mma_c_col(l, i)] = __uint_as_float(w[6 + i]);
    }
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
    for (int i = 0; i < 4; i++) {
        int m = sg_mma_c_row(lane, i), n = sg_mma_c_col(lane, i);
        d[i] = sg_mma_dot16_bf16_f32(C[m * 8 + n], &A[m * 16], &Bt[n * 16]);
    }
}
#define sg_mma_m16n8k16_bf16_f32(d, a, b, c) sg_mma_m16n8k16_bf16_f32_emu(SG_EMU_SITE, (d), (a), (b), (c))
#endif

/* SG_MMA_SM75: the device pass has sm_75's mma.m16n8k8 in fp16 (below it, a CUDA 12 build's sm_70
 * pass, the wrapper compiles to __trap(), which no run reaches: cuda/arch.h) */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 750
#define SG_MMA_SM75 1
#else
#define SG_MMA_SM75 0
#endif

#ifndef SG_EMU
static __device__ __forceinline__ void sg_mma_m16n8k8_f16_f32(float d[4], const uint32_t a[2], const uint32_t b[1],
                                                              const float c[4]) {
#if !SG_MMA_SM75
    (void)a; (void)b; (void)c;
    d[0] = d[1] = d[2] = d[3] = 0.0f;
    __trap();
#else
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}
#else
/* as the m16n8k16 twin: one warp collective, then each lane rebuilds A, B and C from the documented
 * layout and computes its own four elements of D */
static inline void sg_mma_m16n8k8_f16_f32_emu(::sg_emu::Site site, float d[4], const uint32_t a[2],
                                              const uint32_t b[1], const float c[4]) {
    enum { WORDS = 7 };   /* a[2], b[1], c[4] */
    uint32_t mine[WORDS] = {a[0], a[1], b[0], __float_as_uint(c[0]), __float_as_uint(c[1]), __float_as_uint(c[2]),
                            __float_as_uint(c[3])};
    uint32_t all[32 * WORDS];
    ::sg_emu::warp_gather(site, "sg_mma_m16n8k8_f16_f32 (mma.sync.m16n8k8)", 0xffffffffu, mine, WORDS, all);
    uint16_t A[16 * 8], Bt[8 * 8];
    float C[16 * 8];
    for (int l = 0; l < 32; l++) {
        const uint32_t* w = &all[l * WORDS];
        for (int i = 0; i < 4; i++)
            A[sg_mma_k8_a_row(l, i) * 8 + sg_mma_k8_a_col(l, i)] = (uint16_t)(w[i / 2] >> (16 * (i & 1)));
        for (int i = 0; i < 2; i++) Bt[sg_mma_k8_b_col(l, i) * 8 + sg_mma_k8_b_row(l, i)] = (uint16_t)(w[2] >> (16 * i));
        for (int i = 0; i < 4; i++) C[sg_mma_c_row(l, i) * 8 + sg_mma_c_col(l, i)] = __uint_as_float(w[3 + i]);
    }
    int lane = (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
    for (int i = 0; i < 4; i++) {
        int m = sg_mma_c_row(lane, i), n = sg_mma_c_col(lane, i);
        d[i] = sg_mma_dot8_f16_f32(C[m * 8 + n], &A[m * 8], &Bt[n * 8]);
    }
}
#define sg_mma_m16n8k8_f16_f32(d, a, b, c) sg_mma_m16n8k8_f16_f32_emu(SG_EMU_SITE, (d), (a), (b), (c))
#endif

/* ---- data movement: ldmatrix and cp.async ------------------------------------------------------
 * Both move bf16 bits without touching them, so a kernel that builds its fragments with ldmatrix
 * and fills its tiles with cp.async computes the same bits as one that does it with plain loads.
 *
 * sg_ldmatrix_x4(r, row) / sg_ldmatrix_x4_trans(r, row): PTX ldmatrix.sync.aligned.m8n8.x4
 * [.trans].shared.b16, a warp collective (all 32 lanes, converged). Four 8 x 8 matrices of 16-bit
 * elements are read from shared memory: lane l gives the address of one 16-byte row, row l % 8 of
 * matrix l / 8 (16-byte aligned). With g = lane / 4 and t = lane % 4, lane l receives in r[m]:
 *   plain:  matrix m's row g, columns 2t (low half) and 2t + 1 (high half);
 *   .trans: matrix m's column g, rows 2t (low half) and 2t + 1 (high half).
 * So an A fragment of mma.m16n8k16 (16 x 16, row-major in shared memory) is one plain x4 with
 * matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15); a B
 * fragment whose column n is a row of shared memory (K of Q K^T) is a plain load, two B fragments
 * a x4; a B fragment whose row k is a row of shared memory (V of P V) is a .trans load.
 *
 * sg_cp_async16(dst, src, src_bytes) / sg_cp_async4: PTX cp.async.cg (16 bytes) / cp.async.ca (4
 * bytes) .shared.global: an asynchronous copy from global memory to shared memory, both aligned
 * to the size; src_bytes (0 or the size) are read and the rest of dst is filled with zeros (rows
 * past T: src_bytes 0). The copy belongs to the thread that issued it. sg_cp_async_commit() closes
 * the thread's copies issued since the last commit into a group; sg_cp_async_wait<N>() waits until
 * at most the N newest groups of the thread are still in flight; sg_cp_async_wait_all() commits
 * and waits until none is. Until its group has been waited for, dst holds undefined bytes; other threads see it
 * only after the waiting thread meets them at a barrier (__syncthreads).
 *
 * The emulation's twins (-DSG_EMU, cuda/emu/cuda_emu.cpp): ldmatrix gathers the 32 addresses in a
 * warp collective and each lane reads its elements as the table above says (an unaligned row, or
 * one outside shared memory, is reported); cp.async fills dst with the poison bytes at the issue
 * and copies at the wait, so reading a tile before its wait sees NaN rather than last tile's data;
 * a thread that leaves the kernel with copies never waited for is reported. */
#ifndef SG_EMU
static __device__ __forceinline__ uint32_t sg_smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
#if !SG_MMA_SM80
/* below sm_80 (see SG_MMA_SM80 above): compiled, never run */
static __device__ __forceinline__ void sg_ldmatrix_x4(uint32_t r[4], const void* row) {
    (void)row; r[0] = r[1] = r[2] = r[3] = 0; __trap();
}
static __device__ __forceinline__ void sg_ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    (void)row; r[0] = r[1] = r[2] = r[3] = 0; __trap();
}
static __device__ __forceinline__ void sg_cp_async16(void* dst, const void* src, int src_bytes) {
    (void)dst; (void)src; (void)src_bytes; __trap();
}
static __device__ __forceinline__ void sg_cp_async4(void* dst, const void* src, int src_bytes) {
    (void)dst; (void)src; (void)src_bytes; __trap();
}
static __device__ __forceinline__ void sg_cp_async_commit(void) { __trap(); }
template <int N>
static __device__ __forceinline__ void sg_cp_async_wait(void) { __trap(); }
static __device__ __forceinline__ void sg_cp_async_wait_all(void) { __trap(); }
#else
static __device__ __forceinline__ void sg_ldmatrix_x4(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sg_smem_addr(row))
                 : "memory");
}
static __device__ __forceinline__ void sg_ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sg_smem_addr(row))
                 : "memory");
}
static __device__ __forceinline__ void sg_cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sg_smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void sg_cp_async4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sg_smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void sg_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void sg_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void sg_cp_async_wait_all(void) {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}
#endif
#else
#define sg_ldmatrix_x4(r, row) \
    ::sg_emu::ldmatrix(SG_EMU_SITE, "sg_ldmatrix_x4 (ldmatrix.m8n8.x4)", 4, 0, (row), (r))
#define sg_ldmatrix_x4_trans(r, row) \
    ::sg_emu::ldmatrix(SG_EMU_SITE, "sg_ldmatrix_x4_trans (ldmatrix.m8n8.x4.trans)", 4, 1, (row), (r))
#define sg_cp_async16(dst, src, src_bytes) ::sg_emu::cp_async(SG_EMU_SITE, (dst), (src), 16, (src_bytes))
#define sg_cp_async4(dst, src, src_bytes) ::sg_emu::cp_async(SG_EMU_SITE, (dst), (src), 4, (src_bytes))
#define sg_cp_async_commit() ::sg_emu::cp_async_commit(SG_EMU_SITE)
template <int N>
static inline void sg_cp_async_wait_emu(::sg_emu::Site site) {
    static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0 to 7");
    ::sg_emu::cp_async_wait(site, N);
}
/* sg_cp_async_wait<N>() reads as on nvcc: the call site, then the template */
#define sg_cp_async_wait sg_cp_async_wait_site(SG_EMU_SITE).wait
struct sg_cp_async_wait_site {
    ::sg_emu::Site site;
    explicit sg_cp_async_wait_site(::sg_emu::Site s) : site(s) {}
    template <int N>
    void wait() const { sg_cp_async_wait_emu<N>(site); }
};
/* as in PTX, wait_all is commit_group then wait_group 0 */
#define sg_cp_async_wait_all() (::sg_emu::cp_async_commit(SG_EMU_SITE), ::sg_emu::cp_async_wait(SG_EMU_SITE, 0))
#endif

#endif
