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
 *   4. the data movement wrappers (cuda/mma.h), which move bits and so are held bit for bit on a
 *      GPU too: ldmatrix x4, plain and .trans, four warps each reading four 8 x 8 matrices placed
 *      anywhere in a padded shared tile, against the PTX ISA's table written out on the host; the
 *      64 x 64 x 64 GEMM of 3 with its A and B fragments built by ldmatrix (B plain from B^T's rows,
 *      and .trans from B's rows) equals the one built by frag_load_* bit for bit; cp.async, 16
 *      bytes (rows past a count zero-filled) and 4 bytes (a source only 4-byte aligned), in two
 *      groups of which wait<1> lands the older and wait<0> the newer.
 *      In the emulation, also: a copy read before its wait is the poison, not stale data; and a
 *      thread that leaves with copies never waited for, or never committed, an ldmatrix row that
 *      is not 16-byte aligned and a cp.async into global memory are each refused in one line.
 * Builds two ways: nvcc (make test-cuda) and C++ against the emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "util/bf16.h"
#include "cuda/mma.h"
#include "tests/test.h"
#include "tests/cuda/mma_check.h"
#include "tests/cuda/refusal.h"

/* ---- fragment loads and stores, written out from the PTX ISA tables --------------------------
 * lane = 4 g + t. A (16 x 16, row-major, lda): a[0] = rows g, cols 2t..2t+1; a[1] = row g+8, same
 * cols; a[2] = row g, cols 2t+8..2t+9; a[3] = row g+8, cols 2t+8..2t+9; lower column in the low
 * half. B given transposed, Bt (8 x 16, row n = column n of B, ldb): b[0] = B rows 2t..2t+1 of
 * column g; b[1] = rows 2t+8..2t+9. C/D: frag_load_c, frag_store_d (tests/cuda/mma_check.h). */
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

/* ---- 4: ldmatrix and cp.async ----------------------------------------------------------------- */
/* a 32 x 32 tile of bf16 in shared memory, rows padded to LM_LD; warp w's matrix m sits at rows
 * 8 ((w + m) % 4) and columns 8 ((w + 2m + 1) % 4) */
#define LM_N 32
#define LM_LD (LM_N + 8)
static __host__ __device__ int lm_row0(int w, int m) { return 8 * ((w + m) % 4); }
static __host__ __device__ int lm_col0(int w, int m) { return 8 * ((w + 2 * m + 1) % 4); }
__global__ void ldmatrix_kernel(uint32_t* out, const uint16_t* src, int trans) {
    SG_SHARED(uint16_t, tile, LM_N * LM_LD);
    for (int e = threadIdx.x; e < LM_N * LM_N; e += blockDim.x) tile[(e / LM_N) * LM_LD + e % LM_N] = src[e];
    __syncthreads();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, m = lane >> 3, r = lane & 7;
    const uint16_t* row = &tile[(lm_row0(w, m) + r) * LM_LD + lm_col0(w, m)];
    uint32_t v[4];
    if (trans) sg_ldmatrix_x4_trans(v, row);
    else sg_ldmatrix_x4(v, row);
    for (int k = 0; k < 4; k++) out[(size_t)threadIdx.x * 4 + k] = v[k];
}

static void test_ldmatrix(int trans) {
    test_rng_state = 0x1d3a0000ull + (uint64_t)trans;
    const int warps = 4, n_out = warps * 32 * 4;
    uint16_t src[LM_N * LM_N];
    for (int e = 0; e < LM_N * LM_N; e++) src[e] = rand_bf16();
    uint16_t* d_src = (uint16_t*)dev_copy(src, sizeof(src));
    uint32_t* d_out;
    SG_CHECK(cudaMalloc((void**)&d_out, n_out * sizeof(uint32_t)));
    SG_CHECK(cudaMemset(d_out, 0xff, n_out * sizeof(uint32_t)));
    SG_LAUNCH(ldmatrix_kernel, 1, 32 * warps, 0, d_out, d_src, trans);
    SG_CHECK_LAUNCH();
    uint32_t out[4 * 32 * 4];
    SG_CHECK(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost));
    int bad = 0, first = -1;
    for (int w = 0; w < warps; w++)
        for (int lane = 0; lane < 32; lane++)
            for (int m = 0; m < 4; m++) {
                /* the PTX ISA's table: plain, row g, columns 2t, 2t + 1; .trans, column g, rows 2t, 2t + 1 */
                const int g = lane / 4, t = lane % 4, r0 = lm_row0(w, m), c0 = lm_col0(w, m);
                const uint32_t lo = trans ? src[(r0 + 2 * t) * LM_N + c0 + g] : src[(r0 + g) * LM_N + c0 + 2 * t];
                const uint32_t hi = trans ? src[(r0 + 2 * t + 1) * LM_N + c0 + g] : src[(r0 + g) * LM_N + c0 + 2 * t + 1];
                const int i = (w * 32 + lane) * 4 + m;
                if (out[i] != (lo | hi << 16)) { bad++; if (first < 0) first = i; }
            }
    expect(bad == 0, trans ? "ldmatrix_x4_trans_follows_the_ptx_table" : "ldmatrix_x4_follows_the_ptx_table",
           "4 warps x 32 lanes x 4 registers: %d differ from the table (first: warp %d lane %d register %d, got "
           "0x%08x)", bad, first < 0 ? 0 : first / 128, first < 0 ? 0 : first / 4 % 32, first < 0 ? 0 : first % 4,
           first < 0 ? 0u : out[first]);
    SG_CHECK(cudaFree(d_src)); SG_CHECK(cudaFree(d_out));
}

/* the GEMM of mma_gemm (64 x 64 x 64, the same warps and chains), with A and B staged in shared
 * memory (rows padded by 8) and the fragments built by ldmatrix: A plain; B plain from Bt's rows
 * (b_from_rows 0) or .trans from the rows of B = Bt^T (b_from_rows 1, B row-major in global) */
#define GM 64
#define GLD (GM + 8)
__global__ void mma_gemm_ldmatrix(float* D, const __nv_bfloat16* A, const __nv_bfloat16* Bsrc, const float* C,
                                  int b_trans) {
    SG_DYN_SHARED(uint16_t, sm);
    uint16_t* As = sm;
    uint16_t* Bs = sm + GM * GLD;
    for (int e = threadIdx.x; e < GM * GM; e += blockDim.x) {
        As[(e / GM) * GLD + e % GM] = __bfloat16_as_ushort(A[e]);
        Bs[(e / GM) * GLD + e % GM] = __bfloat16_as_ushort(Bsrc[e]);
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int m0 = blockIdx.y * 32 + 16 * (w / 2), n0 = blockIdx.x * 32 + 16 * (w % 2);
    const int arow = (lane & 7) + 8 * ((lane >> 3) & 1), acol = 8 * (lane >> 4);   /* A, and B .trans */
    const int brow = (lane & 7) + 8 * (lane >> 4), bcol = 8 * ((lane >> 3) & 1);   /* B plain */
    float acc[2][4];
    for (int half = 0; half < 2; half++) frag_load_c(acc[half], C + m0 * GM + n0 + 8 * half, GM, lane);
    for (int k = 0; k < GM; k += 16) {
        uint32_t a[4], b[4];
        sg_ldmatrix_x4(a, &As[(m0 + arow) * GLD + k + acol]);
        if (b_trans) sg_ldmatrix_x4_trans(b, &Bs[(k + arow) * GLD + n0 + acol]);
        else sg_ldmatrix_x4(b, &Bs[(n0 + brow) * GLD + k + bcol]);
        /* plain: b[0], b[1] column n0 + g, b[2], b[3] column n0 + 8 + g; .trans: b[0] (k 0-7) and
         * b[1] (k 8-15) of column n0 + g, b[2], b[3] of n0 + 8 + g, in matrix order (k lo, k hi) */
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        sg_mma_m16n8k16_bf16_f32(acc[0], a, b0, acc[0]);
        sg_mma_m16n8k16_bf16_f32(acc[1], a, b1, acc[1]);
    }
    for (int half = 0; half < 2; half++) frag_store_d(D + m0 * GM + n0 + 8 * half, GM, acc[half], lane);
}

static void test_gemm_ldmatrix(uint64_t seed, int b_trans) {
    test_rng_state = seed;
    uint16_t *A = (uint16_t*)malloc(GM * GM * 2), *Bt = (uint16_t*)malloc(GM * GM * 2), *B = (uint16_t*)malloc(GM * GM * 2);
    float* C = (float*)malloc(GM * GM * sizeof(float));
    for (int i = 0; i < GM * GM; i++) A[i] = rand_bf16();
    for (int i = 0; i < GM * GM; i++) Bt[i] = rand_bf16();
    for (int i = 0; i < GM * GM; i++) C[i] = rand_c();
    for (int k = 0; k < GM; k++)
        for (int n = 0; n < GM; n++) B[k * GM + n] = Bt[n * GM + k];
    __nv_bfloat16* dA = (__nv_bfloat16*)dev_copy(A, GM * GM * 2);
    __nv_bfloat16* dBt = (__nv_bfloat16*)dev_copy(Bt, GM * GM * 2);
    __nv_bfloat16* dB = (__nv_bfloat16*)dev_copy(B, GM * GM * 2);
    float* dC = (float*)dev_copy(C, GM * GM * sizeof(float));
    float *dD = dev_nan(GM * GM), *dL = dev_nan(GM * GM);
    SG_LAUNCH(mma_gemm, dim3(GM / 32, GM / 32), 128, 0, dD, dA, dBt, dC, GM, GM, GM);
    SG_CHECK_LAUNCH();
    SG_LAUNCH(mma_gemm_ldmatrix, dim3(GM / 32, GM / 32), 128, 2 * GM * GLD * sizeof(uint16_t), dL, dA,
              b_trans ? dB : dBt, dC, b_trans);
    SG_CHECK_LAUNCH();
    float *D = (float*)malloc(GM * GM * sizeof(float)), *L = (float*)malloc(GM * GM * sizeof(float));
    SG_CHECK(cudaMemcpy(D, dD, GM * GM * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(L, dL, GM * GM * sizeof(float), cudaMemcpyDeviceToHost));
    int differ = 0, nonfinite = 0;
    for (int i = 0; i < GM * GM; i++) {
        differ += memcmp(&D[i], &L[i], 4) != 0;
        nonfinite += !isfinite(L[i]);
    }
    char name[96];
    snprintf(name, sizeof(name), "mma_gemm_with_ldmatrix%s_fragments_equals_plain_loads_bitwise",
             b_trans ? "_trans" : "");
    expect(differ == 0 && nonfinite == 0, name, "64x64x64, B %s: %d of %d elements differ in any bit from the "
           "GEMM whose fragments are built by frag_load_*, %d non-finite", b_trans ? "from B's rows (.trans)" :
           "from B^T's rows (plain)", differ, GM * GM, nonfinite);
    free(A); free(Bt); free(B); free(C); free(D); free(L);
    SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dBt)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC));
    SG_CHECK(cudaFree(dD)); SG_CHECK(cudaFree(dL));
}

/* cp.async: 16 rows of 8 floats (two 16-byte pieces a row) in two groups, rows 0-7 into stage 0
 * and 8-15 into stage 1, rows at or past n_valid zero-filled; then 32 floats from src + 3 (4-byte
 * aligned only) by 4-byte copies, in the second group. wait<1> lands stage 0, wait<0> the rest. */
__global__ void cp_async_kernel(float* out, const float* src, int n_valid) {
    SG_SHARED(float, stage, 2 * 8 * 8 + 32);
    const int x = threadIdx.x;   /* 16 threads: row x / 2 of a stage, piece x % 2; 2 floats of the 4-byte part */
    const int r = x / 2, c = 4 * (x % 2);
    sg_cp_async16(&stage[r * 8 + c], src + (size_t)(r < n_valid ? r : 0) * 8 + c, r < n_valid ? 16 : 0);
    sg_cp_async_commit();
    sg_cp_async16(&stage[64 + r * 8 + c], src + (size_t)(r + 8 < n_valid ? r + 8 : 0) * 8 + c,
                  r + 8 < n_valid ? 16 : 0);
    for (int k = 0; k < 2; k++) sg_cp_async4(&stage[128 + 2 * x + k], src + 3 + 2 * x + k, 4);
    sg_cp_async_commit();
    sg_cp_async_wait<1>();
    __syncthreads();
    for (int e = x; e < 64; e += 16) out[e] = stage[e];
    sg_cp_async_wait<0>();
    __syncthreads();
    for (int e = 64 + x; e < 160; e += 16) out[e] = stage[e];
}

static void test_cp_async(int n_valid) {
    test_rng_state = 0xc0a5ull + (uint64_t)n_valid;
    float src[16 * 8 + 8], want[160];
    for (int e = 0; e < 16 * 8 + 8; e++) src[e] = rand_c();
    for (int e = 0; e < 128; e++) want[e] = e / 8 < n_valid ? src[e] : 0.0f;
    for (int e = 0; e < 32; e++) want[128 + e] = src[3 + e];
    float* d_src = (float*)dev_copy(src, sizeof(src));
    float* d_out = dev_nan(160);
    SG_LAUNCH(cp_async_kernel, 1, 16, 0, d_out, d_src, n_valid);
    SG_CHECK_LAUNCH();
    float out[160];
    SG_CHECK(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost));
    int differ = 0;
    for (int e = 0; e < 160; e++) differ += memcmp(&out[e], &want[e], 4) != 0;
    char name[96];
    snprintf(name, sizeof(name), "cp_async_two_groups_land_in_order_valid_rows%d", n_valid);
    expect(differ == 0, name, "16 rows (%d read, the rest zero-filled) in two groups and 32 floats by 4-byte "
           "copies: %d of 160 floats differ in any bit", n_valid, differ);
    SG_CHECK(cudaFree(d_src)); SG_CHECK(cudaFree(d_out));
}

/* emulation only: a copy's destination read before the wait holds the poison (on a GPU it is
 * undefined: stale or new bytes) */
__global__ void cp_async_early_read_kernel(float* before, float* after, const float* src) {
    SG_SHARED(float, stage, 32 * 4);
    const int x = threadIdx.x;
    sg_cp_async16(&stage[4 * x], src + 4 * x, 16);
    sg_cp_async_commit();
    for (int k = 0; k < 4; k++) before[4 * x + k] = stage[4 * x + k];   /* no wait: the bug */
    sg_cp_async_wait<0>();
    for (int k = 0; k < 4; k++) after[4 * x + k] = stage[4 * x + k];
}

static void test_cp_async_read_before_wait_sees_poison(void) {
#ifndef SG_EMU
    skip("cp_async_read_before_wait_sees_poison", "emulation only (undefined on a GPU)");
#else
    float src[128];
    for (int e = 0; e < 128; e++) src[e] = (float)e;
    float* d_src = (float*)dev_copy(src, sizeof(src));
    float *d_before = dev_nan(128), *d_after = dev_nan(128);
    SG_CHECK(cudaMemset(d_before, 0, 128 * sizeof(float)));
    SG_LAUNCH(cp_async_early_read_kernel, 1, 32, 0, d_before, d_after, d_src);
    SG_CHECK_LAUNCH();
    float before[128], after[128];
    SG_CHECK(cudaMemcpy(before, d_before, sizeof(before), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(after, d_after, sizeof(after), cudaMemcpyDeviceToHost));
    int poisoned = 0, landed = 0;
    for (int e = 0; e < 128; e++) {
        uint32_t u;
        memcpy(&u, &before[e], 4);
        poisoned += u == 0xffffffffu;
        landed += after[e] == src[e];
    }
    expect(poisoned == 128 && landed == 128, "cp_async_read_before_wait_sees_poison", "%d of 128 floats read "
           "before the wait are the poison (NaN), %d of 128 read after it are the source", poisoned, landed);
    SG_CHECK(cudaFree(d_src)); SG_CHECK(cudaFree(d_before)); SG_CHECK(cudaFree(d_after));
#endif
}

/* emulation only: mistakes the emulation reports (children: the report ends the process) */
__global__ void emu_mistake_kernel(float* g, const float* src, int which) {
    SG_SHARED(float, stage, 4 * 32);
    SG_SHARED(uint16_t, tile, 8 * 16 + 8);
    const int x = threadIdx.x;
    if (which == 0) {                 /* committed, never waited for */
        sg_cp_async16(&stage[4 * x], src + 4 * (x % 16), 16);
        sg_cp_async_commit();
    } else if (which == 1) {          /* waited for, never committed */
        sg_cp_async16(&stage[4 * x], src + 4 * (x % 16), 16);
        sg_cp_async_wait<0>();
    } else if (which == 2) {          /* into global memory */
        sg_cp_async16(g + 4 * (x % 16), src + 4 * (x % 16), 16);
        sg_cp_async_wait_all();
    } else {                          /* an ldmatrix row 2 bytes off */
        for (int e = x; e < 8 * 16 + 8; e += 32) tile[e] = 0;
        __syncthreads();
        uint32_t v[4];
        sg_ldmatrix_x4(v, &tile[(x & 7) * 16 + 1]);
        g[x] = (float)v[0];
    }
}

static const char* const emu_mistakes[] = {"cp_async_never_waited", "cp_async_never_committed",
                                           "cp_async_into_global", "ldmatrix_unaligned"};
static const char* const emu_mistake_words[] = {"never waited for", "never waited for",
                                                "not inside the block's shared memory", "not 16-byte aligned"};
static int emu_mistake_child(const char* which) {
    for (int k = 0; k < 4; k++)
        if (!strcmp(which, emu_mistakes[k])) {
            float* d_src = dev_nan(64);
            float* d_g = dev_nan(64);
            SG_LAUNCH(emu_mistake_kernel, 1, 32, 0, d_g, d_src, k);
            SG_CHECK_LAUNCH();
            return 0;   /* not reported: the parent's check fails */
        }
    return 3;
}

static void test_emu_reports_mistakes(void) {
    for (int k = 0; k < 4; k++) {
        char name[96];
        snprintf(name, sizeof(name), "emulation_reports_%s", emu_mistakes[k]);
        if (!EMU_ONLY) { skip(name, "emulation only"); continue; }
        expect_refusal(name, "test_cuda_mma", "--emu-mistake", emu_mistakes[k], emu_mistake_words[k]);
    }
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "--emu-mistake")) return emu_mistake_child(argv[2]);
    test_layout_helpers();
    test_tiles(0x5eed0001ull, 3, 4, 0);
    test_tiles(0x5eed0002ull, 2, 1, 0);
    test_tiles(0x5eed0003ull, 1, 2, 0);
    test_tiles(0x5eed0004ull, 2, 2, 1);
    test_gemm(0x5eed0101ull);
    test_gemm(0x5eed0102ull);
    test_ldmatrix(0);
    test_ldmatrix(1);
    test_gemm_ldmatrix(0x5eed0201ull, 0);
    test_gemm_ldmatrix(0x5eed0202ull, 1);
    test_cp_async(16);
    test_cp_async(11);
    test_cp_async(3);
    test_cp_async_read_before_wait_sees_poison();
    test_emu_reports_mistakes();
    return test_finish();
}
