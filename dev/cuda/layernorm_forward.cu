/* dev/cuda/layernorm_forward.cu — layernorm forward: out (N,C) = (x - mean) * rstd * w + b, with
 * mean (N) and rstd (N) saved for the backward; eps 1e-5, the variance around the mean (two
 * passes, as cpu/ops_cpu.c does it).
 *
 * Variants (./layernorm_forward K; no K: all):
 *   1. one thread per row: the CPU loop moved onto the GPU as it is. Neighbouring threads read
 *      addresses C floats apart, so no load is coalesced, and N rows are only N threads.
 *   2. one warp per row, one warp per block: lane l reads channels l, l + 32, ... (coalesced),
 *      the sums are warp shuffles. Blocks of 32 threads cap an SM at its block limit, well below
 *      its warp limit.
 *   3. the production kernel, layernorm_forward_cuda of cuda/ops_cuda.cu (linked, not copied):
 *      variant 2 with 8 warps per block. It reads x three times (mean, variance, output); the
 *      second and third should come from the L1/L2 caches (a row is 4 C bytes).
 *   4. float4: variant 3's layout, but the lane keeps its part of the row in registers (C/128
 *      float4 each, C <= 1024) and reads and writes 16 bytes at a time: x is read from memory
 *      once, and a quarter of the load instructions. Needs C % 4 == 0.
 * Bytes moved (the GB/s column): x read and out written (2 N C floats), mean and rstd written
 * (2 N), w and b read (2 C).
 *
 *   build/dev_cuda/layernorm_forward [K] [--validate] [--reps N] [--B 16] [--T 1024] [--C 768]
 */
#include "dev/cuda/common.h"
#include "cuda/ops_cuda.h"

#define OP "layernorm_forward"
#define NVARIANTS 4
#define LN_EPS 1e-5f
#define LN1_THREADS 128
#define LN_WARPS 8        /* rows per block of variant 4 (one warp each), as the production kernel */
#define LN4_MAX 8         /* float4 registers per lane in variant 4: C <= 32 * 4 * LN4_MAX */

static const char* NAMES[NVARIANTS + 1] = {
    NULL, "thread per row", "warp per row, 1 warp/block", "production (cuda/ops_cuda.cu)",
    "warp per row, float4, row in regs"};

/* ---- CPU reference ------------------------------------------------------------------------- */

static void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + LN_EPS);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (s * (x[c] - m)) * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* ---- variant 1: one thread per row --------------------------------------------------------- */

__global__ void layernorm_forward_kernel1(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* x = inp + (size_t)n * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
    v /= C;
    float s = 1.0f / sqrtf(v + LN_EPS);
    float* o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) o[c] = (s * (x[c] - m)) * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
}

/* ---- variant 2: one warp per row, one warp per block ------------------------------------------ */

__global__ void layernorm_forward_kernel2(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    int lane = threadIdx.x;   /* blockDim.x == 32 */
    int n = blockIdx.x;
    const float* x = inp + (size_t)n * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float m = dev_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = x[c] - m; v += d * d; }
    v = dev_warp_sum(v) / C;
    float r = 1.0f / sqrtf(v + LN_EPS);
    float* o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) o[c] = (r * (x[c] - m)) * weight[c] + bias[c];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

/* ---- variant 4: one warp per row, float4, the row in registers ------------------------------- */

/* lane l holds float4 number l + 32 k of the row, k < LN4_MAX */
__global__ void layernorm_forward_kernel4(float* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    if (n >= N) return;   /* the whole warp */
    int C4 = C / 4;
    const float4* x4 = reinterpret_cast<const float4*>(inp + (size_t)n * C);
    float4 xr[LN4_MAX];
    float s = 0.0f;
    #pragma unroll
    for (int k = 0; k < LN4_MAX; k++) {
        int i = lane + 32 * k;
        if (i < C4) {
            xr[k] = x4[i];
            s += (xr[k].x + xr[k].y) + (xr[k].z + xr[k].w);
        }
    }
    float m = dev_warp_sum(s) / C;
    float v = 0.0f;
    #pragma unroll
    for (int k = 0; k < LN4_MAX; k++) {
        if (lane + 32 * k < C4) {
            float a = xr[k].x - m, b = xr[k].y - m, c = xr[k].z - m, d = xr[k].w - m;
            v += (a * a + b * b) + (c * c + d * d);
        }
    }
    v = dev_warp_sum(v) / C;
    float r = 1.0f / sqrtf(v + LN_EPS);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* o4 = reinterpret_cast<float4*>(out + (size_t)n * C);
    #pragma unroll
    for (int k = 0; k < LN4_MAX; k++) {
        int i = lane + 32 * k;
        if (i < C4) {
            float4 w = w4[i], b = b4[i], o;
            o.x = (r * (xr[k].x - m)) * w.x + b.x;
            o.y = (r * (xr[k].y - m)) * w.y + b.y;
            o.z = (r * (xr[k].z - m)) * w.z + b.z;
            o.w = (r * (xr[k].w - m)) * w.w + b.w;
            o4[i] = o;
        }
    }
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

/* ---- the variants behind one call ------------------------------------------------------------ */

static int supported(int k, int N, int C) {
    if (k == 4) return C % 4 == 0 && C <= 32 * 4 * LN4_MAX;
    return 1;
}

static void layernorm_forward_variant(int k, float* out, float* mean, float* rstd, const float* inp,
                                      const float* weight, const float* bias, int N, int C) {
    switch (k) {
    case 1:
        SG_LAUNCH(layernorm_forward_kernel1, sg_ceil_div((size_t)N, LN1_THREADS), LN1_THREADS, 0,
                  out, mean, rstd, inp, weight, bias, N, C);
        SG_CHECK_LAUNCH();
        break;
    case 2:
        SG_LAUNCH(layernorm_forward_kernel2, N, 32, 0, out, mean, rstd, inp, weight, bias, N, C);
        SG_CHECK_LAUNCH();
        break;
    case 3:
        layernorm_forward_cuda(out, mean, rstd, inp, weight, bias, N, C);
        break;
    case 4:
        SG_LAUNCH(layernorm_forward_kernel4, sg_ceil_div((size_t)N, LN_WARPS), 32 * LN_WARPS, 0,
                  out, mean, rstd, inp, weight, bias, N, C);
        SG_CHECK_LAUNCH();
        break;
    }
}

/* ---- one shape: inputs, the reference, each variant's check ---------------------------------- */

typedef struct {
    int N, C;
    float *x, *w, *b;              /* host inputs */
    float *out, *mean, *rstd;      /* host reference */
    float *dx, *dw, *db;           /* device inputs */
} Case;

static Case case_make(int N, int C, uint64_t seed) {
    Case c;
    c.N = N;
    c.C = C;
    size_t n = (size_t)N * C;
    c.x = dev_host_uniform(n, seed, -2.0f, 2.0f);
    for (int r = 0; r < N; r++)   /* rows with their own offset: the mean matters */
        for (int j = 0; j < C; j++) c.x[(size_t)r * C + j] += 0.25f * (float)(r % 7);
    c.w = dev_host_uniform((size_t)C, seed + 1, 0.5f, 1.5f);
    c.b = dev_host_uniform((size_t)C, seed + 2, -0.5f, 0.5f);
    c.out = (float*)malloc(n * sizeof(float));
    c.mean = (float*)malloc((size_t)N * sizeof(float));
    c.rstd = (float*)malloc((size_t)N * sizeof(float));
    layernorm_forward_cpu(c.out, c.mean, c.rstd, c.x, c.w, c.b, N, C);
    c.dx = dev_upload(c.x, n);
    c.dw = dev_upload(c.w, (size_t)C);
    c.db = dev_upload(c.b, (size_t)C);
    return c;
}

static void case_free(Case* c) {
    free(c->x); free(c->w); free(c->b); free(c->out); free(c->mean); free(c->rstd);
    SG_CHECK(cudaFree(c->dx)); SG_CHECK(cudaFree(c->dw)); SG_CHECK(cudaFree(c->db));
}

/* fp32 sums in another order than the CPU's: a few ulps of the row's scale */
#define TOL_ABS 1e-5
#define TOL_REL 1e-5

/* the worst error ratio of variant k on this case (> 1 fails) */
static double case_error(int k, const Case* c) {
    size_t n = (size_t)c->N * c->C;
    float *out = dev_poison(n), *mean = dev_poison((size_t)c->N), *rstd = dev_poison((size_t)c->N);
    layernorm_forward_variant(k, out, mean, rstd, c->dx, c->dw, c->db, c->N, c->C);
    SG_CHECK(cudaDeviceSynchronize());
    float *ho = dev_download(out, n), *hm = dev_download(mean, (size_t)c->N);
    float* hr = dev_download(rstd, (size_t)c->N);
    double e = dev_err_ratio(ho, c->out, n, TOL_ABS, TOL_REL);
    double em = dev_err_ratio(hm, c->mean, (size_t)c->N, TOL_ABS, TOL_REL);
    double er = dev_err_ratio(hr, c->rstd, (size_t)c->N, TOL_ABS, TOL_REL);
    free(ho); free(hm); free(hr);
    SG_CHECK(cudaFree(out)); SG_CHECK(cudaFree(mean)); SG_CHECK(cudaFree(rstd));
    return fmax(e, fmax(em, er));
}

int main(int argc, char** argv) {
    int B = 16, T = 1024, C = 768;
#ifdef SG_EMU
    B = 2; T = 19; C = 256;   /* the emulation runs a thread per CUDA thread: tiny shapes */
#endif
    DevFlag flags[] = {{"--B", &B}, {"--T", &T}, {"--C", &C}};
    DevArgs args = dev_parse(argc, argv, "layernorm_forward", NVARIANTS, flags, 3);
    int N = B * T;

    /* validation: an awkward small shape (C not a multiple of 4 or 32, N not of 8), then the
     * shape that is timed */
    Case cases[2] = {case_make(37, 67, 1), case_make(N, C, 2)};
    int valid[NVARIANTS + 1] = {0};
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k)) continue;
        double worst = 0.0;
        char shapes[96] = "";
        for (int i = 0; i < 2; i++) {
            if (!supported(k, cases[i].N, cases[i].C)) continue;
            worst = fmax(worst, case_error(k, &cases[i]));
            snprintf(shapes + strlen(shapes), sizeof(shapes) - strlen(shapes), "%s%dx%d",
                     shapes[0] ? ", " : "", cases[i].N, cases[i].C);
        }
        if (!supported(k, N, C)) {
            dev_skip(OP, k, "needs C % 4 == 0 and C <= 1024");
            continue;
        }
        valid[k] = dev_check(worst <= 1.0, OP, k, "%s: N x C %s, worst err %.2g of tol (abs %.0e + rel %.0e)",
                  NAMES[k], shapes, worst, TOL_ABS, TOL_REL);
    }
    case_free(&cases[0]);
    (void)valid;   /* read by the timing only, which the emulation leaves out */
    if (args.validate_only) {
        case_free(&cases[1]);
        return dev_finish();
    }

#ifndef SG_EMU
    printf("%s, B %d T %d C %d (N %d), %d reps\n", OP, B, T, C, N, args.reps);
    char shape[64];
    snprintf(shape, sizeof(shape), "B%d_T%d_C%d", B, T, C);
    float *out = dev_poison((size_t)N * C), *mean = dev_poison((size_t)N), *rstd = dev_poison((size_t)N);
    const Case* c = &cases[1];
    double bytes = 4.0 * (2.0 * N * C + 2.0 * N + 2.0 * C);
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k) || !valid[k]) continue;
        double ms = dev_time_ms(args.reps, [&]() {
            layernorm_forward_variant(k, out, mean, rstd, c->dx, c->dw, c->db, N, C);
        });
        dev_report(OP, k, NAMES[k], shape, ms, bytes / (ms * 1e-3) / 1e9, "GB/s");
    }
    SG_CHECK(cudaFree(out)); SG_CHECK(cudaFree(mean)); SG_CHECK(cudaFree(rstd));
#endif
    case_free(&cases[1]);
    return dev_finish();
}
