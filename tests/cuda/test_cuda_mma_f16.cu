/* tests/cuda/test_cuda_mma_f16.cu — the Turing tensor-core wrapper sg_mma_m16n8k8_f16_f32
 * (cuda/mma.h), in the form of tests/cuda/test_cuda_mma.cu's m16n8k16 checks:
 *   1. one instruction per warp on random fp16 tiles (magnitudes 2^-4 to 2^4, and a wide draw from
 *      2^-20, fp16 denormals, to 2^12), a nonzero C, four warps to a block and several blocks,
 *      against a plain float64 matrix product within sg_mma_tolerance(8, ...); and against the CPU
 *      twin sg_mma_m16n8k8_ref: bit for bit in the emulation, within the same tolerance on a GPU;
 *   2. d may be c: accumulating in place gives the same as into a fresh array;
 *   3. a 32 x 32 x 64 GEMM tiled out of m16n8k8 instructions (eight k-steps per fragment), against
 *      float64 and against the host's chain of sg_mma_dot8_f16_f32;
 *   4. the layout helpers cover each element of A (16 x 8), B (8 x 8) and C once.
 * The kernels load and store fragments with their own transcription of the PTX ISA's m16n8k8
 * table (frag_* below), not with cuda/mma.h's helpers, and the float64 product indexes plain
 * row-major matrices, so a wrong row or column in the twin's table is caught in the emulation.
 * Builds two ways: nvcc (make test-cuda; sm_75 and newer) and C++ against the emulation.
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "util/fp16.h"
#include "cuda/mma.h"
#include "tests/test.h"
#include "tests/cuda/mma_check.h"

/* ---- fragments, from the PTX ISA's m16n8k8 .f16 table ----------------------------------------
 * lane = 4 g + t. A (16 x 8, row-major, lda): a[0] = row g, cols 2t..2t+1; a[1] = row g+8, same
 * cols; lower column in the low half. B given transposed, Bt (8 x 8, row n = column n of B, ldb):
 * b[0] = B rows 2t..2t+1 of column g. C/D: frag_load_c, frag_store_d (tests/cuda/mma_check.h). */
static __device__ uint32_t pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
static __device__ void frag_load_a(uint32_t a[2], const uint16_t* A, int lda, int lane) {
    int g = lane / 4, t = lane % 4;
    a[0] = pack2(A[g * lda + 2 * t], A[g * lda + 2 * t + 1]);
    a[1] = pack2(A[(g + 8) * lda + 2 * t], A[(g + 8) * lda + 2 * t + 1]);
}
static __device__ void frag_load_b(uint32_t b[1], const uint16_t* Bt, int ldb, int lane) {
    int g = lane / 4, t = lane % 4;
    b[0] = pack2(Bt[g * ldb + 2 * t], Bt[g * ldb + 2 * t + 1]);
}

/* ---- kernels -------------------------------------------------------------------------------- */
/* one instruction per warp: tile w of A (16x8), Bt (8x8), C, D (16x8); in_place: d is c */
__global__ void mma_k8_tiles(float* D, const uint16_t* A, const uint16_t* Bt, const float* C, int in_place) {
    int lane = threadIdx.x % 32;
    int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    uint32_t a[2], b[1];
    float c[4], d[4];
    frag_load_a(a, A + w * 128, 8, lane);
    frag_load_b(b, Bt + w * 64, 8, lane);
    frag_load_c(c, C + w * 128, 8, lane);
    if (in_place) {
        sg_mma_m16n8k8_f16_f32(c, a, b, c);
        frag_store_d(D + w * 128, 8, c, lane);
    } else {
        sg_mma_m16n8k8_f16_f32(d, a, b, c);
        frag_store_d(D + w * 128, 8, d, lane);
    }
}

/* D (M x N) = A (M x K) B + C, B given as Bt (N x K); each warp of a block of four owns one
 * 16 x 8 tile of a 32 x 16 block tile, accumulated over K / 8 instructions in k order */
__global__ void mma_k8_gemm(float* D, const uint16_t* A, const uint16_t* Bt, const float* C, int M, int N, int K) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int m0 = blockIdx.y * 32 + 16 * (w / 2), n0 = blockIdx.x * 16 + 8 * (w % 2);
    if (m0 >= M || n0 >= N) return;
    float acc[4];
    frag_load_c(acc, C + m0 * N + n0, N, lane);
    for (int k = 0; k < K; k += 8) {
        uint32_t a[2], b[1];
        frag_load_a(a, A + m0 * K + k, K, lane);
        frag_load_b(b, Bt + n0 * K + k, K, lane);
        sg_mma_m16n8k8_f16_f32(acc, a, b, acc);
    }
    frag_store_d(D + m0 * N + n0, N, acc, lane);
}

/* ---- host ----------------------------------------------------------------------------------- */
/* a random fp16: uniform in [-1, 1) times 2^e, e uniform in [lo, hi] */
static uint16_t rand_f16(int lo, int hi) {
    double u = 2.0 * test_uniform() - 1.0;
    int e = lo + (int)(test_uniform() * (hi - lo + 1));
    return sg_fp16_from_float((float)ldexp(u, e));
}

/* 1 and 2 */
static void test_tiles(uint64_t seed, int blocks, int warps_per_block, int in_place, int elo, int ehi) {
    test_rng_state = seed;
    int tiles = blocks * warps_per_block;
    size_t na = (size_t)tiles * 128, nb = (size_t)tiles * 64, nc = (size_t)tiles * 128;
    uint16_t* A = (uint16_t*)malloc(na * 2);
    uint16_t* Bt = (uint16_t*)malloc(nb * 2);
    float* C = (float*)malloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++) A[i] = rand_f16(elo, ehi);
    for (size_t i = 0; i < nb; i++) Bt[i] = rand_f16(elo, ehi);
    for (size_t i = 0; i < nc; i++) C[i] = rand_c();
    uint16_t* dA = (uint16_t*)dev_copy(A, na * 2);
    uint16_t* dB = (uint16_t*)dev_copy(Bt, nb * 2);
    float* dC = (float*)dev_copy(C, nc * sizeof(float));
    float* dD = in_place ? dC : dev_nan(nc);
    SG_LAUNCH(mma_k8_tiles, blocks, 32 * warps_per_block, 0, dD, dA, dB, dC, in_place);
    SG_CHECK_LAUNCH();
    float* D = (float*)malloc(nc * sizeof(float));
    SG_CHECK(cudaMemcpy(D, dD, nc * sizeof(float), cudaMemcpyDeviceToHost));

    Err vs64 = {0, 0, 0}, vstwin = {0, 0, 0};
    size_t twin_bits_differ = 0;
    float twin[128];
    for (int w = 0; w < tiles; w++) {
        const uint16_t* a = A + (size_t)w * 128;
        const uint16_t* bt = Bt + (size_t)w * 64;
        const float* c = C + (size_t)w * 128;
        sg_mma_m16n8k8_ref(twin, a, bt, c);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = c[m * 8 + n], mag = fabs((double)c[m * 8 + n]);
                for (int k = 0; k < 8; k++) {   /* the plain matrix product, A[m][k] B[k][n] */
                    double p = (double)sg_fp16_to_float(a[m * 8 + k]) * (double)sg_fp16_to_float(bt[n * 8 + k]);
                    ref += p;
                    mag += fabs(p);
                }
                float d = D[(size_t)w * 128 + m * 8 + n];
                double tol = sg_mma_tolerance(8, mag);
                err_add(&vs64, d, ref, tol);
                err_add(&vstwin, d, (double)twin[m * 8 + n], tol);
                if (memcmp(&d, &twin[m * 8 + n], 4) != 0) twin_bits_differ++;
            }
    }
    char name[112];
    snprintf(name, sizeof(name), "mma_m16n8k8_f16_matches_float64_seed%llx%s", (unsigned long long)seed,
             in_place ? "_in_place" : "");
    expect(err_ok(&vs64), name, "%d tiles (%d blocks x %d warps), magnitudes 2^%d..2^%d: worst |d - ref| %.3g = "
           "%.3f of the tolerance (K + 1) 2^-22 (|c| + sum |ab|), K = 8, %d non-finite", tiles, blocks,
           warps_per_block, elo, ehi, vs64.worst_abs, vs64.worst_ratio, vs64.nonfinite);
    snprintf(name, sizeof(name), "mma_m16n8k8_f16_matches_cpu_twin_seed%llx%s", (unsigned long long)seed,
             in_place ? "_in_place" : "");
    if (EMU_ONLY)
        expect(twin_bits_differ == 0 && vstwin.nonfinite == 0, name, "%zu of %zu elements differ in bits from "
               "sg_mma_m16n8k8_ref (the emulation is that function)", twin_bits_differ, nc);
    else
        expect(err_ok(&vstwin), name, "worst |d_gpu - d_twin| %.3g = %.3f of the tolerance; %zu of %zu elements "
               "differ in bits (the tensor core's summation order)", vstwin.worst_abs, vstwin.worst_ratio,
               twin_bits_differ, nc);
    free(A); free(Bt); free(C); free(D);
    SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC));
    if (!in_place) SG_CHECK(cudaFree(dD));
}

/* 3 */
static void test_gemm(uint64_t seed) {
    const int M = 32, N = 32, K = 64;
    test_rng_state = seed;
    uint16_t* A = (uint16_t*)malloc((size_t)M * K * 2);
    uint16_t* Bt = (uint16_t*)malloc((size_t)N * K * 2);
    float* C = (float*)malloc((size_t)M * N * sizeof(float));
    for (int i = 0; i < M * K; i++) A[i] = rand_f16(-4, 4);
    for (int i = 0; i < N * K; i++) Bt[i] = rand_f16(-4, 4);
    for (int i = 0; i < M * N; i++) C[i] = rand_c();
    uint16_t* dA = (uint16_t*)dev_copy(A, (size_t)M * K * 2);
    uint16_t* dB = (uint16_t*)dev_copy(Bt, (size_t)N * K * 2);
    float* dC = (float*)dev_copy(C, (size_t)M * N * sizeof(float));
    float* dD = dev_nan((size_t)M * N);
    SG_LAUNCH(mma_k8_gemm, dim3(N / 16, M / 32), 128, 0, dD, dA, dB, dC, M, N, K);
    SG_CHECK_LAUNCH();
    float* D = (float*)malloc((size_t)M * N * sizeof(float));
    SG_CHECK(cudaMemcpy(D, dD, (size_t)M * N * sizeof(float), cudaMemcpyDeviceToHost));
    Err vs64 = {0, 0, 0}, vstwin = {0, 0, 0};
    int twin_bits_differ = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = C[m * N + n], mag = fabs((double)C[m * N + n]);
            float twin = C[m * N + n];   /* one 8-term step per instruction */
            for (int k0 = 0; k0 < K; k0 += 8) twin = sg_mma_dot8_f16_f32(twin, &A[m * K + k0], &Bt[n * K + k0]);
            for (int k = 0; k < K; k++) {
                double p = (double)sg_fp16_to_float(A[m * K + k]) * (double)sg_fp16_to_float(Bt[n * K + k]);
                ref += p;
                mag += fabs(p);
            }
            float d = D[m * N + n];
            double tol = sg_mma_tolerance(K, mag);
            err_add(&vs64, d, ref, tol);
            err_add(&vstwin, d, (double)twin, tol);
            if (memcmp(&d, &twin, 4) != 0) twin_bits_differ++;
        }
    expect(err_ok(&vs64), "mma_m16n8k8_gemm_32x32x64_matches_float64", "8 k-steps: worst |d - ref| %.3g = %.3f of "
           "the tolerance with K = 64, %d non-finite", vs64.worst_abs, vs64.worst_ratio, vs64.nonfinite);
    if (EMU_ONLY)
        expect(twin_bits_differ == 0 && vstwin.nonfinite == 0, "mma_m16n8k8_gemm_32x32x64_matches_cpu_twin",
               "%d of %d elements differ in bits from the host's chain of sg_mma_dot8_f16_f32", twin_bits_differ,
               M * N);
    else
        expect(err_ok(&vstwin), "mma_m16n8k8_gemm_32x32x64_matches_cpu_twin", "worst |d_gpu - d_twin| %.3g = %.3f "
               "of the tolerance; %d of %d elements differ in bits", vstwin.worst_abs, vstwin.worst_ratio,
               twin_bits_differ, M * N);
    free(A); free(Bt); free(C); free(D);
    SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC)); SG_CHECK(cudaFree(dD));
}

/* 4 */
static void test_layout_helpers(void) {
    int a_hits[128] = {0}, b_hits[64] = {0}, c_hits[128] = {0};
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < 4; i++) a_hits[sg_mma_k8_a_row(lane, i) * 8 + sg_mma_k8_a_col(lane, i)]++;
        for (int i = 0; i < 2; i++) b_hits[sg_mma_k8_b_row(lane, i) * 8 + sg_mma_k8_b_col(lane, i)]++;
        for (int i = 0; i < 4; i++) c_hits[sg_mma_c_row(lane, i) * 8 + sg_mma_c_col(lane, i)]++;
    }
    int bad = 0;
    for (int i = 0; i < 128; i++) bad += a_hits[i] != 1;
    for (int i = 0; i < 64; i++) bad += b_hits[i] != 1;
    for (int i = 0; i < 128; i++) bad += c_hits[i] != 1;
    expect(bad == 0, "mma_k8_layout_covers_each_element_once", "%d elements of A (16x8), B (8x8), C (16x8) not "
           "held by exactly one (lane, element)", bad);
}

int main(void) {
    test_layout_helpers();
    test_tiles(0x75a1, 3, 4, 0, -4, 4);
    test_tiles(0x75a2, 2, 4, 0, -20, 12);
    test_tiles(0x75a3, 2, 4, 1, -4, 4);
    test_gemm(0x75b1);
    return test_finish();
}
