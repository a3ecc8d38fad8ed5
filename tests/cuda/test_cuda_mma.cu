/* tests/cuda/test_cuda_mma.cu — the tensor-core wrapper sg_mma_m16n8k16_bf16_f32 (cuda/mma.h):
 *   1. one instruction per warp on random bf16 tiles (several seeds, magnitudes spread over 2^-4
 *      to 2^4, a nonzero C, four warps to a block and several blocks), against a float64 GEMM
 *      within sg_mma_tolerance; and against the CPU twin sg_mma_m16n8k16_ref: bit for bit in the
 *      emulation, within the same tolerance on a GPU (the real instruction against the emulated);
 *   2. d may be c: accumulating in place gives the same as into a fresh array;
 *   3. a 64 x 64 x 64 GEMM tiled out of m16n8k16 instructions (2 x 2 blocks of four warps, each warp
 *      a 16 x 16 tile over four k-steps, A row-major and B given as B^T row-major: the layout of
 *      Q K^T in attention), against float64 and against the host's chain of the CPU twin.
 * On a GPU the tolerance is an assumption: NVIDIA does not document in which order or at which
 * width a tensor core adds its products (Hopper's included), and the bound assumes fp32 rounding or
 * truncation after each addition. A failure's message therefore prints the measured ratio and says
 * whether it looks like the accumulation (under 1000x the bound) or like a layout error (far
 * beyond); each check reports on its own, so one failure does not hide the others, and
 * scripts/gpu_check.sh makes it a FAIL row of its table and goes on.
 * The kernels load and store fragments with their own transcription of the PTX ISA's layout
 * (frag_* below), not with cuda/mma.h's helpers, so in the emulation the two transcriptions
 * are held to each other; on a GPU the hardware judges both.
 * Builds two ways: nvcc (make test-cuda) and C++ against the emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "util/bf16.h"
#include "cuda/mma.h"
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

/* ---- fragment loads and stores, written out from the PTX ISA tables --------------------------
 * lane = 4 g + t. A (16 x 16, row-major, lda): a[0] = rows g, cols 2t..2t+1; a[1] = row g+8, same
 * cols; a[2] = row g, cols 2t+8..2t+9; a[3] = row g+8, cols 2t+8..2t+9; lower column in the low
 * half. B given transposed, Bt (8 x 16, row n = column n of B, ldb): b[0] = B rows 2t..2t+1 of
 * column g; b[1] = rows 2t+8..2t+9. C/D (16 x 8, ldc): c[0..1] = row g, cols 2t..2t+1; c[2..3] =
 * row g+8. */
static __device__ void frag_load_a(uint32_t a[4], const __nv_bfloat16* A, int lda, int lane) {
    int g = lane / 4, t = lane % 4;
    const __nv_bfloat16* r0 = A + g * lda;
    const __nv_bfloat16* r8 = A + (g + 8) * lda;
    a[0] = sg_pack_bf16x2(r0[2 * t], r0[2 * t + 1]);
    a[1] = sg_pack_bf16x2(r8[2 * t], r8[2 * t + 1]);
    a[2] = sg_pack_bf16x2(r0[2 * t + 8], r0[2 * t + 9]);
    a[3] = sg_pack_bf16x2(r8[2 * t + 8], r8[2 * t + 9]);
}
static __device__ void frag_load_b(uint32_t b[2], const __nv_bfloat16* Bt, int ldb, int lane) {
    int g = lane / 4, t = lane % 4;
    const __nv_bfloat16* col = Bt + g * ldb;
    b[0] = sg_pack_bf16x2(col[2 * t], col[2 * t + 1]);
    b[1] = sg_pack_bf16x2(col[2 * t + 8], col[2 * t + 9]);
}
static __device__ void frag_load_c(float c[4], const float* C, int ldc, int lane) {
    int g = lane / 4, t = lane % 4;
    c[0] = C[g * ldc + 2 * t];
    c[1] = C[g * ldc + 2 * t + 1];
    c[2] = C[(g + 8) * ldc + 2 * t];
    c[3] = C[(g + 8) * ldc + 2 * t + 1];
}
static __device__ void frag_store_d(float* D, int ldc, const float d[4], int lane) {
    int g = lane / 4, t = lane % 4;
    D[g * ldc + 2 * t] = d[0];
    D[g * ldc + 2 * t + 1] = d[1];
    D[(g + 8) * ldc + 2 * t] = d[2];
    D[(g + 8) * ldc + 2 * t + 1] = d[3];
}

/* ---- kernels -------------------------------------------------------------------------------- */
/* one instruction per warp: tile w (global warp index) of A (16x16), Bt (8x16), C, D (16x8);
 * in_place: d and c are the same array */
__global__ void mma_tiles(float* D, const __nv_bfloat16* A, const __nv_bfloat16* Bt, const float* C, int in_place) {
    int lane = threadIdx.x % 32;
    int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    uint32_t a[4], b[2];
    float c[4], d[4];
    frag_load_a(a, A + w * 256, 16, lane);
    frag_load_b(b, Bt + w * 128, 16, lane);
    frag_load_c(c, C + w * 128, 8, lane);
    if (in_place) {
        sg_mma_m16n8k16_bf16_f32(c, a, b, c);
        frag_store_d(D + w * 128, 8, c, lane);
    } else {
        sg_mma_m16n8k16_bf16_f32(d, a, b, c);
        frag_store_d(D + w * 128, 8, d, lane);
    }
}

/* D (M x N) = A (M x K, row-major) B + C, B given as Bt (N x K, row-major); blocks of four warps
 * own 32 x 32 tiles, warp w of a block the 16 x 16 tile at rows 16 (w / 2), cols 16 (w % 2): two
 * n8 fragments, each accumulated over K / 16 instructions in k order */
__global__ void mma_gemm(float* D, const __nv_bfloat16* A, const __nv_bfloat16* Bt, const float* C, int M, int N,
                         int K) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int m0 = blockIdx.y * 32 + 16 * (w / 2), n0 = blockIdx.x * 32 + 16 * (w % 2);
    if (m0 >= M || n0 >= N) return;   /* whole warps only (M, N multiples of 16) */
    for (int half = 0; half < 2; half++) {
        int n = n0 + 8 * half;
        float acc[4];
        frag_load_c(acc, C + m0 * N + n, N, lane);
        for (int k = 0; k < K; k += 16) {
            uint32_t a[4], b[2];
            frag_load_a(a, A + m0 * K + k, K, lane);
            frag_load_b(b, Bt + n * K + k, K, lane);
            sg_mma_m16n8k16_bf16_f32(acc, a, b, acc);
        }
        frag_store_d(D + m0 * N + n, N, acc, lane);
    }
}

/* ---- host ----------------------------------------------------------------------------------- */
/* a random bf16: uniform in [-1, 1) times 2^e, e uniform in [-4, 4] */
static uint16_t rand_bf16(void) {
    double u = 2.0 * test_uniform() - 1.0;
    int e = (int)(test_uniform() * 9.0) - 4;
    return sg_bf16_from_float((float)ldexp(u, e));
}
static float rand_c(void) { return (float)(8.0 * test_uniform() - 4.0); }

static void* dev_copy(const void* h, size_t bytes) {
    void* d;
    SG_CHECK(cudaMalloc(&d, bytes));
    SG_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static float* dev_nan(size_t n) {
    float* d;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    SG_CHECK(cudaMemset(d, 0xff, n * sizeof(float)));   /* NaN: an element not written fails */
    return d;
}

/* D against float64: worst |d - ref| / tolerance over the elements (<= 1 passes), NaN counted */
typedef struct {
    double worst_ratio, worst_abs;
    int nonfinite;
} Err;
static void err_add(Err* e, float d, double ref, double tol) {
    if (!isfinite(d)) { e->nonfinite++; return; }
    double diff = fabs((double)d - ref);
    if (diff > e->worst_abs) e->worst_abs = diff;
    double r = tol > 0 ? diff / tol : (diff > 0 ? INFINITY : 0.0);
    if (r > e->worst_ratio) e->worst_ratio = r;
}
static int err_ok(const Err* e) { return e->nonfinite == 0 && e->worst_ratio <= 1.0; }

/* What a GPU failure against the bound means, for its message. The bound (K + 1) 2^-22 (|c| +
 * sum |ab|) assumes the tensor core adds the K products to c in fp32, rounding or truncating after
 * each addition, in some order. NVIDIA does not document the order, the width or the rounding of
 * that sum (Hopper's included), so the bound is an assumption about the hardware, not a property
 * it promises: a few times over it says the accumulation is narrower or otherwise ordered than
 * assumed, while a wrong fragment layout or register gives errors of the size of the values,
 * about 10^5 to 10^6 times the bound. The message says which the measurement looks like. */
static const char* bound_verdict(const Err* e) {
    if (err_ok(e)) return "within the bound";
    if (e->nonfinite > 0) return "NON-FINITE results: not an accumulation order (inputs are finite)";
    if (e->worst_ratio < 1e3)
        return "BEYOND the bound, which assumes an fp32 accumulation (rounded or truncated after each add, any "
               "order) that NVIDIA does not document for the tensor cores; under 1000x the bound looks like that "
               "accumulation, not like a fragment-layout error (~1e5-1e6x)";
    return "FAR beyond the bound (>= 1000x): no accumulation order explains it; a fragment layout or register "
           "error does";
}

/* 1 and 2: `tiles` independent tiles, one per warp */
static void test_tiles(uint64_t seed, int blocks, int warps_per_block, int in_place) {
    test_rng_state = seed;
    int tiles = blocks * warps_per_block;
    size_t na = (size_t)tiles * 256, nb = (size_t)tiles * 128, nc = (size_t)tiles * 128;
    uint16_t* A = (uint16_t*)malloc(na * 2);
    uint16_t* Bt = (uint16_t*)malloc(nb * 2);
    float* C = (float*)malloc(nc * sizeof(float));
    for (size_t i = 0; i < na; i++) A[i] = rand_bf16();
    for (size_t i = 0; i < nb; i++) Bt[i] = rand_bf16();
    for (size_t i = 0; i < nc; i++) C[i] = rand_c();
    __nv_bfloat16* dA = (__nv_bfloat16*)dev_copy(A, na * 2);
    __nv_bfloat16* dB = (__nv_bfloat16*)dev_copy(Bt, nb * 2);
    float* dC = (float*)dev_copy(C, nc * sizeof(float));
    float* dD = in_place ? dC : dev_nan(nc);
    SG_LAUNCH(mma_tiles, blocks, 32 * warps_per_block, 0, dD, dA, dB, dC, in_place);
    SG_CHECK_LAUNCH();
    float* D = (float*)malloc(nc * sizeof(float));
    SG_CHECK(cudaMemcpy(D, dD, nc * sizeof(float), cudaMemcpyDeviceToHost));

    Err vs64 = {0, 0, 0}, vstwin = {0, 0, 0};
    size_t twin_bits_differ = 0;
    float twin[128];
    for (int w = 0; w < tiles; w++) {
        const uint16_t* a = A + (size_t)w * 256;
        const uint16_t* bt = Bt + (size_t)w * 128;
        const float* c = C + (size_t)w * 128;
        sg_mma_m16n8k16_ref(twin, a, bt, c);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = c[m * 8 + n], mag = fabs((double)c[m * 8 + n]);
                for (int k = 0; k < 16; k++) {
                    double p = (double)sg_bf16_to_float(a[m * 16 + k]) * (double)sg_bf16_to_float(bt[n * 16 + k]);
                    ref += p;
                    mag += fabs(p);
                }
                float d = D[(size_t)w * 128 + m * 8 + n];
                double tol = sg_mma_tolerance(16, mag);
                err_add(&vs64, d, ref, tol);
                err_add(&vstwin, d, (double)twin[m * 8 + n], tol);
                if (memcmp(&d, &twin[m * 8 + n], 4) != 0) twin_bits_differ++;
            }
    }
    char name[96];
    snprintf(name, sizeof(name), "mma_m16n8k16_matches_float64_seed%llx%s", (unsigned long long)seed,
             in_place ? "_in_place" : "");
    expect(err_ok(&vs64), name, "%d tiles (%d blocks x %d warps): worst |d - ref| %.3g = %.3f of the tolerance "
           "(K + 1) 2^-22 (|c| + sum |ab|), K = 16, %d non-finite: %s", tiles, blocks, warps_per_block,
           vs64.worst_abs, vs64.worst_ratio, vs64.nonfinite, bound_verdict(&vs64));
    snprintf(name, sizeof(name), "mma_m16n8k16_matches_cpu_twin_seed%llx%s", (unsigned long long)seed,
             in_place ? "_in_place" : "");
    if (EMU_ONLY)
        expect(twin_bits_differ == 0 && vstwin.nonfinite == 0, name, "%zu of %zu elements differ in bits from "
               "sg_mma_m16n8k16_ref (the emulation is that function)", twin_bits_differ, nc);
    else
        expect(err_ok(&vstwin), name, "worst |d_gpu - d_twin| %.3g = %.3f of the tolerance; %zu of %zu elements "
               "differ in bits (the tensor core's summation order): %s", vstwin.worst_abs, vstwin.worst_ratio,
               twin_bits_differ, nc, bound_verdict(&vstwin));
    free(A); free(Bt); free(C); free(D);
    SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC));
    if (!in_place) SG_CHECK(cudaFree(dD));
}

/* 3: the 64 x 64 x 64 GEMM */
static void test_gemm(uint64_t seed) {
    const int M = 64, N = 64, K = 64;
    test_rng_state = seed;
    uint16_t* A = (uint16_t*)malloc((size_t)M * K * 2);
    uint16_t* Bt = (uint16_t*)malloc((size_t)N * K * 2);
    float* C = (float*)malloc((size_t)M * N * sizeof(float));
    for (int i = 0; i < M * K; i++) A[i] = rand_bf16();
    for (int i = 0; i < N * K; i++) Bt[i] = rand_bf16();
    for (int i = 0; i < M * N; i++) C[i] = rand_c();
    __nv_bfloat16* dA = (__nv_bfloat16*)dev_copy(A, (size_t)M * K * 2);
    __nv_bfloat16* dB = (__nv_bfloat16*)dev_copy(Bt, (size_t)N * K * 2);
    float* dC = (float*)dev_copy(C, (size_t)M * N * sizeof(float));
    float* dD = dev_nan((size_t)M * N);
    SG_LAUNCH(mma_gemm, dim3(N / 32, M / 32), 128, 0, dD, dA, dB, dC, M, N, K);
    SG_CHECK_LAUNCH();
    float* D = (float*)malloc((size_t)M * N * sizeof(float));
    SG_CHECK(cudaMemcpy(D, dD, (size_t)M * N * sizeof(float), cudaMemcpyDeviceToHost));

    Err vs64 = {0, 0, 0}, vstwin = {0, 0, 0};
    int twin_bits_differ = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = C[m * N + n], mag = fabs((double)C[m * N + n]);
            float twin = C[m * N + n];   /* the CPU twin's chain: one 16-term step per instruction */
            for (int k0 = 0; k0 < K; k0 += 16) twin = sg_mma_dot16_bf16_f32(twin, &A[m * K + k0], &Bt[n * K + k0]);
            for (int k = 0; k < K; k++) {
                double p = (double)sg_bf16_to_float(A[m * K + k]) * (double)sg_bf16_to_float(Bt[n * K + k]);
                ref += p;
                mag += fabs(p);
            }
            float d = D[m * N + n];
            double tol = sg_mma_tolerance(K, mag);
            err_add(&vs64, d, ref, tol);
            err_add(&vstwin, d, (double)twin, tol);
            if (memcmp(&d, &twin, 4) != 0) twin_bits_differ++;
        }
    char name[96];
    snprintf(name, sizeof(name), "mma_gemm_64x64x64_matches_float64_seed%llx", (unsigned long long)seed);
    expect(err_ok(&vs64), name, "2x2 blocks of 4 warps, 4 k-steps: worst |d - ref| %.3g = %.3f of the tolerance "
           "(K + 1) 2^-22 (|c| + sum |ab|) with K = 64, %d non-finite: %s", vs64.worst_abs, vs64.worst_ratio,
           vs64.nonfinite, bound_verdict(&vs64));
    snprintf(name, sizeof(name), "mma_gemm_64x64x64_matches_cpu_twin_seed%llx", (unsigned long long)seed);
    if (EMU_ONLY)
        expect(twin_bits_differ == 0 && vstwin.nonfinite == 0, name, "%d of %d elements differ in bits from the "
               "host's chain of sg_mma_dot16_bf16_f32", twin_bits_differ, M * N);
    else
        expect(err_ok(&vstwin), name, "worst |d_gpu - d_twin| %.3g = %.3f of the tolerance; %d of %d elements differ "
               "in bits: %s", vstwin.worst_abs, vstwin.worst_ratio, twin_bits_differ, M * N, bound_verdict(&vstwin));
    free(A); free(Bt); free(C); free(D);
    SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC)); SG_CHECK(cudaFree(dD));
}

/* the layout helpers of cuda/mma.h cover each element of A, B and C exactly once */
static void test_layout_helpers(void) {
    int a_hits[256] = {0}, b_hits[128] = {0}, c_hits[128] = {0};
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < 8; i++) a_hits[sg_mma_a_row(lane, i) * 16 + sg_mma_a_col(lane, i)]++;
        for (int i = 0; i < 4; i++) b_hits[sg_mma_b_row(lane, i) * 8 + sg_mma_b_col(lane, i)]++;
        for (int i = 0; i < 4; i++) c_hits[sg_mma_c_row(lane, i) * 8 + sg_mma_c_col(lane, i)]++;
    }
    int bad = 0;
    for (int i = 0; i < 256; i++) bad += a_hits[i] != 1;
    for (int i = 0; i < 128; i++) bad += (b_hits[i] != 1) + (c_hits[i] != 1);
    /* spot values from the PTX ISA tables: lane 5 (g 1, t 1) */
    int spots = sg_mma_a_row(5, 0) == 1 && sg_mma_a_col(5, 0) == 2 && sg_mma_a_row(5, 3) == 9 &&
                sg_mma_a_col(5, 3) == 3 && sg_mma_a_row(5, 4) == 1 && sg_mma_a_col(5, 4) == 10 &&
                sg_mma_a_row(5, 7) == 9 && sg_mma_a_col(5, 7) == 11 && sg_mma_b_row(5, 1) == 3 &&
                sg_mma_b_row(5, 2) == 10 && sg_mma_b_col(5, 3) == 1 && sg_mma_c_row(5, 2) == 9 &&
                sg_mma_c_col(5, 3) == 3;
    expect(bad == 0 && spots, "mma_layout_covers_each_element_once", "%d elements of A, B, C not held by exactly "
           "one (lane, index); lane 5's coordinates %s the PTX ISA tables", bad, spots ? "match" : "DO NOT match");
}

int main(void) {
    test_layout_helpers();
    test_tiles(0x5eed0001ull, 3, 4, 0);
    test_tiles(0x5eed0002ull, 2, 1, 0);
    test_tiles(0x5eed0003ull, 1, 2, 0);
    test_tiles(0x5eed0004ull, 2, 2, 1);
    test_gemm(0x5eed0101ull);
    test_gemm(0x5eed0102ull);
    return test_finish();
}
