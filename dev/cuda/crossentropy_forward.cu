/* dev/cuda/crossentropy_forward.cu — the loss of each position over the real vocabulary:
 * losses[n] = log sum_v exp(l_nv) - l_n,target = max + log sum_v exp(l_nv - max) - l_n,target,
 * logits (N, Vp) of which the first V columns are real (the padded ones are never read). At GPT-2's
 * V = 50257 each row is 200 KB read for one float written: memory-bound, if the exponentials keep up.
 *   1. one thread per row, the CPU loop (cpu/ops_cpu.c): the max, then the sum of exp in double.
 *      N threads for the whole tensor, and a warp's reads are Vp floats apart.
 *   2. the production kernel, crossentropy_forward_cuda of cuda/ops_cuda.cu (linked): a block per
 *      row, the threads striding the row (coalesced), max and sum through shared-memory trees,
 *      exp and the sum in double as the CPU does them.
 *   3. variant 2 in fp32: expf and float sums, reductions by warp shuffles then one shared-memory
 *      step. Double exp is a long software routine on any GPU (and double arithmetic a fraction of
 *      fp32's rate on most); the price is the last bits of the loss.
 *   4. one pass (online softmax): each thread keeps a running max and a sum rescaled whenever the
 *      max grows, and the (max, sum) pairs merge in the reductions, so the row is read once
 *      instead of twice.
 * Validation against the CPU formula in double: |loss - ref| <= 1e-5 + 1e-5 |ref| (fp32 sums of
 * ~50000 terms in another order, a relative error of a few 1e-7 in the sum, is ~1e-6 in the loss).
 *
 *   build/dev_cuda/crossentropy_forward [K] [--validate] [--reps N] [--B 8] [--T 1024] [--V 50257]
 *                                       [--Vp 50304]
 */
#include "dev/cuda/common.h"
#include "cuda/ops_cuda.h"

#define OP "crossentropy_forward"
#define NVARIANTS 4
#define CE1_THREADS 128
#define CE_THREADS 256      /* variants 3 and 4: a block per row */
#define VALID_ROWS 256      /* rows of the validation block; the timed tensor repeats it */
#define TOL_ABS 1e-5
#define TOL_REL 1e-5

static const char* NAMES[NVARIANTS + 1] = {NULL, "thread per row (double)", "production: block per row (double)",
                                           "block per row, fp32", "block per row, fp32, one pass"};

/* ---- CPU reference: cpu/ops_cpu.c's loop ------------------------------------------------- */

static void crossentropy_forward_cpu(float* losses, const float* logits, const int* targets, int N,
                                     int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float maxv = -INFINITY;
        for (int v = 0; v < V; v++) maxv = l[v] > maxv ? l[v] : maxv;
        double sum = 0.0;
        for (int v = 0; v < V; v++) sum += exp((double)(l[v] - maxv));
        losses[n] = (float)((double)maxv + log(sum) - (double)l[targets[n]]);
    }
}

/* ---- variant 1: one thread per row ------------------------------------------------------------ */

__global__ void crossentropy_forward_kernel1(float* losses, const float* logits, const int* targets,
                                             int N, int V, int Vp) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* l = logits + (size_t)n * Vp;
    float maxv = -INFINITY;
    for (int v = 0; v < V; v++) maxv = l[v] > maxv ? l[v] : maxv;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)(l[v] - maxv));
    losses[n] = (float)((double)maxv + log(sum) - (double)l[targets[n]]);
}

/* ---- block reductions through warp shuffles (blockDim.x a multiple of 32, at most 1024) -------- */

static __device__ inline float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* every thread gets the block's sum; sh[32] is free again on return */
static __device__ inline float block_sum32(float v, float* sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = dev_warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = dev_warp_sum(lane < nw ? sh[lane] : 0.0f);
    __syncthreads();
    return v;
}

static __device__ inline float block_max32(float v, float* sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = warp_max(lane < nw ? sh[lane] : -INFINITY);
    __syncthreads();
    return v;
}

/* ---- variant 3: block per row, fp32 ---------------------------------------------------------- */

__global__ void crossentropy_forward_kernel3(float* losses, const float* logits, const int* targets,
                                             int V, int Vp) {
    SG_SHARED(float, sh, 32);
    int n = blockIdx.x;
    const float* l = logits + (size_t)n * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, l[v]);
    float maxv = block_max32(mx, sh);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(l[v] - maxv);
    float sum = block_sum32(s, sh);
    if (threadIdx.x == 0) losses[n] = (float)((double)maxv + log((double)sum) - (double)l[targets[n]]);
}

/* ---- variant 4: block per row, one pass ----------------------------------------------------------- */

/* (m, s) := the merge of (m, s) and (m2, s2): sum_v exp(l_v - m) over both parts. An empty part
 * has m = -inf and s = 0 and contributes nothing (exp(-inf - -inf) would be NaN). */
static __device__ inline void online_merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    float a = m == -INFINITY ? 0.0f : s * expf(m - mm);
    float b = m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm);
    m = mm;
    s = a + b;
}

__global__ void crossentropy_forward_kernel4(float* losses, const float* logits, const int* targets,
                                             int V, int Vp) {
    SG_SHARED(float, shm, 32);
    SG_SHARED(float, shs, 32);
    int n = blockIdx.x, lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    const float* l = logits + (size_t)n * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float x = l[v];
        if (x > m) {   /* a new max: rescale what was summed so far */
            s = s * expf(m - x) + 1.0f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        online_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        shm[w] = m;
        shs[w] = s;
    }
    __syncthreads();
    if (w == 0) {
        m = lane < nw ? shm[lane] : -INFINITY;
        s = lane < nw ? shs[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            online_merge(m, s, m2, s2);
        }
        if (lane == 0) losses[n] = (float)((double)m + log((double)s) - (double)l[targets[n]]);
    }
}

/* ---- the variants behind one call ------------------------------------------------------------ */

static void crossentropy_forward_variant(int k, float* losses, const float* logits, const int* targets,
                                         int N, int V, int Vp) {
    switch (k) {
    case 1:
        SG_LAUNCH(crossentropy_forward_kernel1, sg_ceil_div((size_t)N, CE1_THREADS), CE1_THREADS, 0,
                  losses, logits, targets, N, V, Vp);
        SG_CHECK_LAUNCH();
        break;
    case 2:
        crossentropy_forward_cuda(losses, logits, targets, N, V, Vp);
        break;
    case 3:
        SG_LAUNCH(crossentropy_forward_kernel3, N, CE_THREADS, 0, losses, logits, targets, V, Vp);
        SG_CHECK_LAUNCH();
        break;
    case 4:
        SG_LAUNCH(crossentropy_forward_kernel4, N, CE_THREADS, 0, losses, logits, targets, V, Vp);
        SG_CHECK_LAUNCH();
        break;
    }
}

/* ---- one shape: rows of logits, targets, the reference ----------------------------------------- */

typedef struct {
    int N, V, Vp;
    float *logits, *ref;    /* host */
    int* targets;
    float* d_logits;        /* device */
    int* d_targets;
} Case;

static Case case_make(int N, int V, int Vp, uint64_t seed) {
    Case c;
    c.N = N; c.V = V; c.Vp = Vp;
    c.logits = dev_host_uniform((size_t)N * Vp, seed, -4.0f, 4.0f);
    for (int n = 0; n < N; n++) {
        c.logits[(size_t)n * Vp + (size_t)(n * 7919) % V] = 12.0f;   /* a confident row max */
        for (int v = V; v < Vp; v++) c.logits[(size_t)n * Vp + v] = NAN;   /* padding: never read */
    }
    c.targets = (int*)malloc((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) c.targets[n] = (int)(((uint64_t)n * 2654435761u + seed) % (uint64_t)V);
    c.ref = (float*)malloc((size_t)N * sizeof(float));
    crossentropy_forward_cpu(c.ref, c.logits, c.targets, N, V, Vp);
    c.d_logits = dev_upload(c.logits, (size_t)N * Vp);
    c.d_targets = (int*)dev_malloc((size_t)N * sizeof(int));
    SG_CHECK(cudaMemcpy(c.d_targets, c.targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    return c;
}

static void case_free(Case* c) {
    free(c->logits); free(c->targets); free(c->ref);
    SG_CHECK(cudaFree(c->d_logits)); SG_CHECK(cudaFree(c->d_targets));
}

static double case_error(int k, const Case* c) {
    float* d = dev_poison((size_t)c->N);
    crossentropy_forward_variant(k, d, c->d_logits, c->d_targets, c->N, c->V, c->Vp);
    SG_CHECK(cudaDeviceSynchronize());
    float* h = dev_download(d, (size_t)c->N);
    double e = dev_err_ratio(h, c->ref, (size_t)c->N, TOL_ABS, TOL_REL);
    free(h);
    SG_CHECK(cudaFree(d));
    return e;
}

int main(int argc, char** argv) {
    int B = 8, T = 1024, V = 50257, Vp = 50304;
#ifdef SG_EMU
    B = 1; T = 4; V = 1000; Vp = 1024;
#endif
    DevFlag flags[] = {{"--B", &B}, {"--T", &T}, {"--V", &V}, {"--Vp", &Vp}};
    DevArgs args = dev_parse(argc, argv, "crossentropy_forward", NVARIANTS, flags, 4);
    if (Vp < V) {
        fprintf(stderr, "crossentropy_forward: --Vp %d must be at least --V %d\n", Vp, V);
        return 2;
    }
    int N = B * T, vrows = N < VALID_ROWS ? N : VALID_ROWS;
    /* validation: a vocabulary smaller than a block (threads without a column), then the timed
     * V with up to VALID_ROWS rows */
    Case cases[2] = {case_make(3, 37, 128, 1), case_make(vrows, V, Vp, 2)};
    int valid[NVARIANTS + 1] = {0};
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k)) continue;
        double e = fmax(case_error(k, &cases[0]), case_error(k, &cases[1]));
        valid[k] = dev_check(e <= 1.0, OP, k, "%s: N x V 3x37, %dx%d: worst err %.3f of tol (abs %.0e + rel %.0e)",
                             NAMES[k], vrows, V, e, TOL_ABS, TOL_REL);
    }
    case_free(&cases[0]);
    (void)valid;   /* read by the timing only, which the emulation leaves out */
    if (args.validate_only) {
        case_free(&cases[1]);
        return dev_finish();
    }

#ifndef SG_EMU
    printf("%s, N %d (B %d T %d) V %d Vp %d, %d reps\n", OP, N, B, T, V, Vp, args.reps);
    char shape[64];
    snprintf(shape, sizeof(shape), "N%d_V%d", N, V);
    /* the timed logits: the validation rows repeated (the values do not matter to the time) */
    const Case* c = &cases[1];
    size_t row_bytes = (size_t)Vp * sizeof(float);
    float* logits = (float*)dev_malloc((size_t)N * row_bytes);
    int* targets = (int*)dev_malloc((size_t)N * sizeof(int));
    for (int n0 = 0; n0 < N; n0 += vrows) {
        int rows = N - n0 < vrows ? N - n0 : vrows;
        SG_CHECK(cudaMemcpy(logits + (size_t)n0 * Vp, c->d_logits, rows * row_bytes, cudaMemcpyDeviceToDevice));
        SG_CHECK(cudaMemcpy(targets + n0, c->d_targets, rows * sizeof(int), cudaMemcpyDeviceToDevice));
    }
    float* losses = dev_poison((size_t)N);
    double bytes = 4.0 * ((double)N * V + 2.0 * N);
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k) || !valid[k]) continue;
        int reps = k == 1 ? (args.reps + 3) / 4 : args.reps;   /* the thread-per-row kernel is slow */
        double ms = dev_time_ms(reps, [&]() { crossentropy_forward_variant(k, losses, logits, targets, N, V, Vp); });
        dev_report(OP, k, NAMES[k], shape, ms, bytes / (ms * 1e-3) / 1e9, "GB/s");
    }
    SG_CHECK(cudaFree(logits)); SG_CHECK(cudaFree(targets)); SG_CHECK(cudaFree(losses));
#endif
    case_free(&cases[1]);
    return dev_finish();
}
