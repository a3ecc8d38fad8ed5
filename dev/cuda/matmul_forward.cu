/* dev/cuda/matmul_forward.cu — the linear layer's forward: out (N,OC) = inp (N,C) . weight^T + bias,
 * weight (OC,C) row-major as the trainer stores it (the llm.c layout). 2 N C OC flop; at GPT-2
 * 124M's shapes it is most of the step's arithmetic, so this is where TFLOP/s matter.
 *
 * Variants:
 *   1. one thread per output element, the dot product over C straight from global memory. A
 *      warp's 32 threads take 32 consecutive outputs of a row: they share the inp row (one
 *      broadcast) but read 32 weight rows C floats apart (no coalescing), and every input is
 *      read from memory again by each output that needs it.
 *   2. shared-memory tiles: a block of 32 x 32 threads computes a 32 x 32 tile of out, walking C
 *      in steps of 32; each step loads one 32 x 32 tile of inp and of weight with coalesced reads
 *      (consecutive threads, consecutive k) into shared memory (rows padded to 33 floats: the
 *      column reads hit 32 distinct banks), then every thread does 32 FMAs from shared memory.
 *      Each input is read from global memory N/32 or OC/32 times instead of N or OC times.
 *   3. the production call, matmul_forward_cuda of cuda/ops_cuda.cu (linked): cuBLAS SGEMM in
 *      plain fp32 (CUBLAS_DEFAULT_MATH), then a bias kernel. Register blocking, double buffering
 *      and the rest of the tuning cuBLAS has.
 *   4. the same SGEMM with CUBLAS_TF32_TENSOR_OP_MATH: the inputs rounded to TF32 (10-bit
 *      mantissa) and multiplied on the tensor cores, accumulated in fp32. Faster, and no longer
 *      within fp32 tolerance of the CPU, which is why the trainer does not use it (cuda/ops_cuda.cu).
 *   5. matmul_forward_bf16_cuda of cuda/ops_bf16_cuda.cu (linked), the fp32-interface bf16
 *      product: both operands rounded to bf16 (to nearest even) into zero-padded copies, one
 *      cuBLASLt GEMM on the tensor cores with fp32 accumulation and output, the fp32 bias added in
 *      its epilogue. The time includes the two rounding copies. (The trainer's bf16 table stores
 *      its operands in bf16 and calls matmul_forward_bf16_act_cuda, the same GEMM without them.)
 * Validation against a float64 reference, elementwise, with the standard bound for a dot product
 * of length C plus the bias: |out - ref| <= tol (sum_k |inp_k weight_k| + |bias|), tol = (C + 2)
 * 2^-24 for fp32 and 2^-9 + (C + 2) 2^-24 for TF32 (each of the two inputs rounded by up to
 * 2^-10 relative, if the rounding truncates). The emulation computes every cuBLAS call in fp32,
 * so there the TF32 variant is checked for its layout and its call only. Variant 5 is held to the
 * float64 sum of the bf16-rounded operands (products of two bf16 are exact; the bias is fp32):
 * sg_mma_tolerance(C + 1, sum_k |a_k w_k| + |bias|) = (C + 2) 2^-22 of the same magnitude, twice the
 * worst case of any fp32 summation order of C + 1 terms, truncation allowed (cuda/mma.h,
 * tests/cuda/test_cuda_lt.cu). The emulation implements that cuBLASLt call (ascending k in fp32).
 *
 *   build/dev_cuda/matmul_forward [K] [--validate] [--reps N] [--B 16] [--T 1024] [--C 768] [--OC 2304]
 */
#include "dev/cuda/common.h"
#include "cuda/ops_cuda.h"
#include "cuda/ops_bf16_cuda.h"
#include "cuda/mma.h"   /* sg_mma_tolerance; util/bf16.h */

#define OP "matmul_forward"
#define NVARIANTS 5
#define MM_TILE 32
#define MM1_THREADS 256

static const char* NAMES[NVARIANTS + 1] = {NULL, "thread per output", "32x32 shared-memory tiles",
                                           "production: cuBLAS fp32", "cuBLAS TF32 tensor cores",
                                           "bf16: cuBLASLt, rounding incl."};

/* ---- reference: float64, with the magnitudes the tolerance scales with ---------------------- */

/* bf16: the products of inp and weight rounded to bf16 (variant 5's operands), else as given */
static void matmul_forward_ref(double* out, double* mag, const float* inp, const float* weight,
                               const float* bias, int N, int C, int OC, int bf16) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = bias[o], m = fabs((double)bias[o]);
            for (int k = 0; k < C; k++) {
                float a = inp[(size_t)n * C + k], w = weight[(size_t)o * C + k];
                if (bf16) {
                    a = sg_bf16_round(a);
                    w = sg_bf16_round(w);
                }
                double p = (double)a * w;
                s += p;
                m += fabs(p);
            }
            out[(size_t)n * OC + o] = s;
            mag[(size_t)n * OC + o] = m;
        }
    }
}

/* ---- variant 1: one thread per output ----------------------------------------------------- */

__global__ void matmul_forward_kernel1(float* out, const float* inp, const float* weight,
                                       const float* bias, int N, int C, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) return;
    int n = (int)(i / OC), o = (int)(i % OC);
    const float* a = inp + (size_t)n * C;
    const float* w = weight + (size_t)o * C;
    float s = 0.0f;
    for (int k = 0; k < C; k++) s += a[k] * w[k];
    out[i] = s + bias[o];
}

/* ---- variant 2: 32 x 32 tiles through shared memory ------------------------------------------ */

/* block (32, 32): thread (tx, ty) computes out[n0 + ty][o0 + tx] */
__global__ void matmul_forward_kernel2(float* out, const float* inp, const float* weight,
                                       const float* bias, int N, int C, int OC) {
    SG_SHARED(float, as, MM_TILE * (MM_TILE + 1));   /* as[r * 33 + k] = inp[n0 + r][k0 + k] */
    SG_SHARED(float, ws, MM_TILE * (MM_TILE + 1));   /* ws[r * 33 + k] = weight[o0 + r][k0 + k] */
    int tx = threadIdx.x, ty = threadIdx.y;
    int n0 = blockIdx.y * MM_TILE, o0 = blockIdx.x * MM_TILE;
    float s = 0.0f;
    for (int k0 = 0; k0 < C; k0 += MM_TILE) {
        int k = k0 + tx;
        as[ty * (MM_TILE + 1) + tx] = n0 + ty < N && k < C ? inp[(size_t)(n0 + ty) * C + k] : 0.0f;
        ws[ty * (MM_TILE + 1) + tx] = o0 + ty < OC && k < C ? weight[(size_t)(o0 + ty) * C + k] : 0.0f;
        __syncthreads();
        #pragma unroll 8
        for (int kk = 0; kk < MM_TILE; kk++)
            s += as[ty * (MM_TILE + 1) + kk] * ws[tx * (MM_TILE + 1) + kk];
        __syncthreads();
    }
    if (n0 + ty < N && o0 + tx < OC) out[(size_t)(n0 + ty) * OC + o0 + tx] = s + bias[o0 + tx];
}

/* ---- variant 4: cuBLAS in TF32 mode ------------------------------------------------------------ */

/* out (N,OC) += bias: one block per row (the production bias kernel's layout) */
__global__ void add_bias_kernel4(float* out, const float* bias, int OC) {
    float* o = out + (size_t)blockIdx.x * OC;
    for (int k = threadIdx.x; k < OC; k += blockDim.x) o[k] += bias[k];
}

static cublasHandle_t tf32_handle(void) {
    static cublasHandle_t h;
    static int ready = 0;
    if (!ready) {
        SG_CUBLAS_CHECK(cublasCreate(&h));
        SG_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
        ready = 1;
    }
    return h;
}

/* the production call's arithmetic: column-major out^T (OC,N) = weight (OC,C) . inp^T (C,N) */
static void matmul_forward_tf32(float* out, const float* inp, const float* weight, const float* bias,
                                int N, int C, int OC) {
    const float one = 1.0f, zero = 0.0f;
    SG_CUBLAS_CHECK(cublasSgemm(tf32_handle(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C,
                                inp, C, &zero, out, OC));
    SG_LAUNCH(add_bias_kernel4, N, 256, 0, out, bias, OC);
    SG_CHECK_LAUNCH();
}

/* ---- the variants behind one call ------------------------------------------------------------ */

static void matmul_forward_variant(int k, float* out, const float* inp, const float* weight,
                                   const float* bias, int N, int C, int OC) {
    switch (k) {
    case 1:
        SG_LAUNCH(matmul_forward_kernel1, sg_ceil_div((size_t)N * OC, MM1_THREADS), MM1_THREADS, 0,
                  out, inp, weight, bias, N, C, OC);
        SG_CHECK_LAUNCH();
        break;
    case 2: {
        dim3 grid(sg_ceil_div((size_t)OC, MM_TILE), sg_ceil_div((size_t)N, MM_TILE));
        SG_LAUNCH(matmul_forward_kernel2, grid, dim3(MM_TILE, MM_TILE), 0, out, inp, weight, bias,
                  N, C, OC);
        SG_CHECK_LAUNCH();
        break;
    }
    case 3:
        matmul_forward_cuda(out, inp, weight, bias, N, C, OC);
        break;
    case 4:
        matmul_forward_tf32(out, inp, weight, bias, N, C, OC);
        break;
    case 5:
        matmul_forward_bf16_cuda(out, inp, weight, bias, N, C, OC);
        break;
    }
}

/* ---- validation ----------------------------------------------------------------------------- */

/* the worst |out - ref| / (tol mag) of variant k at (N, C, OC) */
static double validate(int k, int N, int C, int OC, uint64_t seed) {
    float* inp = dev_host_uniform((size_t)N * C, seed, -1.0f, 1.0f);
    float* weight = dev_host_uniform((size_t)OC * C, seed + 1, -1.0f, 1.0f);
    float* bias = dev_host_uniform((size_t)OC, seed + 2, -1.0f, 1.0f);
    size_t n = (size_t)N * OC;
    double* ref = (double*)malloc(n * sizeof(double));
    double* mag = (double*)malloc(n * sizeof(double));
    matmul_forward_ref(ref, mag, inp, weight, bias, N, C, OC, k == 5);
    float *d_inp = dev_upload(inp, (size_t)N * C), *d_w = dev_upload(weight, (size_t)OC * C);
    float *d_b = dev_upload(bias, (size_t)OC), *d_out = dev_poison(n);
    matmul_forward_variant(k, d_out, d_inp, d_w, d_b, N, C, OC);
    SG_CHECK(cudaDeviceSynchronize());
    float* out = dev_download(d_out, n);
    double tol = k == 5 ? sg_mma_tolerance(C + 1, 1.0) : (C + 2) * 0x1p-24 + (k == 4 ? 0x1p-9 : 0.0);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = isfinite(out[i]) ? fabs((double)out[i] - ref[i]) / (tol * mag[i] + 1e-30) : INFINITY;
        worst = fmax(worst, r);
    }
    free(inp); free(weight); free(bias); free(ref); free(mag); free(out);
    SG_CHECK(cudaFree(d_inp)); SG_CHECK(cudaFree(d_w)); SG_CHECK(cudaFree(d_b)); SG_CHECK(cudaFree(d_out));
    return worst;
}

int main(int argc, char** argv) {
    int B = 16, T = 1024, C = 768, OC = 2304;   /* GPT-2 124M's qkv projection */
#ifdef SG_EMU
    B = 1; T = 40; C = 64; OC = 96;
#endif
    DevFlag flags[] = {{"--B", &B}, {"--T", &T}, {"--C", &C}, {"--OC", &OC}};
    DevArgs args = dev_parse(argc, argv, "matmul_forward", NVARIANTS, flags, 4);
    int N = B * T;
    /* validation: an awkward small shape (nothing a multiple of 32), then the timed C and OC
     * with at most 256 rows (the float64 reference costs N C OC) */
    int vN = N < 256 ? N : 256;
    int valid[NVARIANTS + 1] = {0};
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k)) continue;
        double e = fmax(validate(k, 37, 29, 45, 1), validate(k, vN, C, OC, 2));
        valid[k] = dev_check(e <= 1.0, OP, k, "%s: N x C x OC 37x29x45, %dx%dx%d: worst err %.3f of "
                             "tol %s sum_k |a_k w_k|%s", NAMES[k], vN, C, OC, e,
                             k == 4 ? "(2^-9 + (C + 2) 2^-24)"
                             : k == 5 ? "(C + 2) 2^-22, a and w rounded to bf16," : "(C + 2) 2^-24",
#ifdef SG_EMU
                             k == 4 ? " (emulated in fp32)" : ""
#else
                             ""
#endif
                             );
    }
    (void)valid;   /* read by the timing only, which the emulation leaves out */
    if (args.validate_only) return dev_finish();

#ifndef SG_EMU
    printf("%s, N %d (B %d T %d) C %d OC %d, %d reps\n", OP, N, B, T, C, OC, args.reps);
    char shape[64];
    snprintf(shape, sizeof(shape), "N%d_C%d_OC%d", N, C, OC);
    float* h = dev_host_uniform((size_t)N * C + (size_t)OC * C + OC, 3, -1.0f, 1.0f);
    float* d_inp = dev_upload(h, (size_t)N * C);
    float* d_w = dev_upload(h + (size_t)N * C, (size_t)OC * C);
    float* d_b = dev_upload(h + (size_t)N * C + (size_t)OC * C, (size_t)OC);
    float* d_out = dev_poison((size_t)N * OC);
    double flop = 2.0 * N * (double)C * OC;
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k) || !valid[k]) continue;
        int reps = k == 1 ? (args.reps + 3) / 4 : args.reps;   /* the naive kernel is slow */
        double ms = dev_time_ms(reps, [&]() { matmul_forward_variant(k, d_out, d_inp, d_w, d_b, N, C, OC); });
        dev_report(OP, k, NAMES[k], shape, ms, flop / (ms * 1e-3) / 1e12, "TFLOP/s");
    }
    free(h);
    SG_CHECK(cudaFree(d_inp)); SG_CHECK(cudaFree(d_w)); SG_CHECK(cudaFree(d_b)); SG_CHECK(cudaFree(d_out));
#endif
    return dev_finish();
}
