/* cuda/ops_cuda.cu — the CUDA twins of cpu/ops_cpu.c (declared in cuda/ops_cuda.h): the same
 * signatures and contracts, every pointer device memory. Attention lives in attention/.
 *
 * Each op reads as its CPU twin, one thread (or warp, or block) per piece of the CPU loop:
 *   - elementwise ops: one thread per element (grid-stride);
 *   - dropout: one thread per four channels 4q..4q+3 of a (b, t) row, one Philox call for the four
 *     (philox_elem_draw4, the counters of the CPU's dropout_row), so masks are the CPU's bits;
 *   - layernorm: one warp per row; its parameter gradients and the matmul's bias gradient are column
 *     sums done in two fixed passes (partials over fixed chunks of rows, then the chunks in order;
 *     the chunks are grid-strided in y, which the device limits to 65535 blocks);
 *   - embedding gradients: the rows of each token (bucketed on the host, in row order) and the rows
 *     of each position, summed by one thread per channel in row order: the CPU's order exactly;
 *   - RoPE: one thread per (row, q or k head, pair), reading the host-built cos/sin table;
 *   - stochastic depth: one thread per element, each drawing its sequence's one keep bit;
 *   - cross-entropy: one block per row, the softmax sums in double like the CPU's;
 *   - dense products: cuBLAS SGEMM in plain fp32 (no TF32).
 * No float atomics anywhere: every reduction has one fixed order, so results do not depend on the
 * launch and the recompute reproduces the forward's bits (DESIGN §4). Kernels use only the subset
 * of cuda/device.h, so this file also builds against the CPU emulation.
 */
#include "cuda/device.h"
#include <math.h>
#include <string.h>
#include "cuda/ops_cuda.h"
#include "cuda/ops_bf16_cuda.h"
#include "cuda/act.h"
#include "model/adamw.h"
#include "model/ops.h"   /* ROPE_NEOX, ROPE_GPTJ */

/* threads per block of the elementwise kernels; grid-stride loops above EW_MAX_BLOCKS blocks */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 4096
/* rows per partial in the two-pass column sums (layernorm parameters, matmul bias) */
#define COLSUM_ROWS 32
#define COLSUM_THREADS 128
/* elements per block of sum_squares' first pass (the CPU's NORM_BLOCK) */
#define NORM_BLOCK 16384
#define NORM_THREADS 256
/* most threads of a cross-entropy row block (a power of two: tree reductions) */
#define CE_THREADS 256
#define LN_ROWS_PER_BLOCK 8   /* one warp per row */

static unsigned ew_blocks(size_t n) {
    unsigned b = sg_ceil_div(n, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

/* ---- scratch ------------------------------------------------------------------------------- */

/* One device scratch shared by the ops (partials, token buckets): ops run one after another on
 * the default stream, so a kernel never sees another op's use. It grows on first need and then
 * stays, so steps after the first allocate nothing; it is counted in the backend's peak. */
static void* scratch_mem = NULL;
static size_t scratch_cap = 0;
static void* ops_scratch(size_t bytes) {
    if (bytes > scratch_cap) {
        if (scratch_mem != NULL) device_free_cuda(scratch_mem);
        scratch_mem = device_alloc_cuda(bytes);
        scratch_cap = bytes;
    }
    return scratch_mem;
}

/* ---- warp and block reductions ---------------------------------------------------------------- */

/* butterfly sum over the 32 lanes: every lane ends with the same bits (each level adds the same
 * two numbers on both sides) */
static __device__ inline float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* tree reductions over a power-of-two block through shared memory red[blockDim.x]; every thread
 * gets the result. Ends with a barrier, so red can be reused at once. */
static __device__ inline float block_max(float v, float* red) {
    int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = red[tid + s] > red[tid] ? red[tid + s] : red[tid];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

static __device__ inline double block_sum_double(double v, double* red) {
    int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = red[tid] + red[tid + s];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

/* ---- dropout of four channels --------------------------------------------------------------- */

/* v[w] = v[w] * keep(g, t, 4q + w) * scale for the nc valid channels of quad q, exactly as the
 * CPU's dropout_row: thr == 0 skips the generator (scale is then 1). */
static __device__ inline void dropout_quad(float v[4], int nc, uint64_t seed, uint32_t g,
                                           uint32_t t, uint32_t q, Dropout drop) {
    if (!dropout_active(drop)) {
        #pragma unroll
        for (int w = 0; w < 4; w++) v[w] = v[w] * drop.scale;
        return;
    }
    uint32_t r[4];
    philox_elem_draw4(seed, g, t, q, r);
    #pragma unroll
    for (int w = 0; w < 4; w++) {
        if (w < nc) v[w] = r[w] >= drop.thr ? v[w] * drop.scale : 0.0f;
    }
}

/* threads of a row kernel: one per quad of channels, a multiple of 32, at most 256 */
static unsigned quad_threads(int C) {
    unsigned q = sg_ceil_div((size_t)C, 4);
    unsigned t = (q + 31) / 32 * 32;
    return t < 256 ? t : 256;
}

/* ---- embedding ---------------------------------------------------------------------------- */

/* one block per (b, t) row, one thread per quad of channels */
__global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte,
                                       const float* wpe, int T, int t0, int C, uint32_t g0,
                                       uint64_t seed, Dropout drop) {
    int bt = blockIdx.x;
    int b = bt / T, t = t0 + bt % T;   /* t: the global position (t0 = 0 but under context parallelism) */
    float* o = out + (size_t)bt * C;
    const float* e = wte + (size_t)inp[bt] * C;
    const float* p = wpe != NULL ? wpe + (size_t)t * C : NULL;   /* NULL: no learned positions */
    int Q = (C + 3) / 4;
    for (int q = threadIdx.x; q < Q; q += blockDim.x) {
        int c0 = 4 * q, nc = C - c0 < 4 ? C - c0 : 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int w = 0; w < 4; w++) if (w < nc) v[w] = p != NULL ? e[c0 + w] + p[c0 + w] : e[c0 + w];
        dropout_quad(v, nc, seed, g0 + (uint32_t)b, (uint32_t)t, (uint32_t)q, drop);
        #pragma unroll
        for (int w = 0; w < 4; w++) if (w < nc) o[c0 + w] = v[w];
    }
}

void encoder_forward_at_cuda(float* out, const int* inp, const float* wte, const float* wpe,
                             int B, int T, int t0, int C, uint32_t g0, uint64_t embd_seed,
                             Dropout drop) {
    if (B * T == 0 || C == 0) return;
    SG_LAUNCH(encoder_forward_kernel, B * T, quad_threads(C), 0, out, inp, wte, wpe, T, t0, C, g0,
              embd_seed, drop);
    SG_CHECK_LAUNCH();
}

void encoder_forward_cuda(float* out, const int* inp, const float* wte, const float* wpe,
                          int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop) {
    encoder_forward_at_cuda(out, inp, wte, wpe, B, T, 0, C, g0, embd_seed, drop);
}

/* dwte rows of token tok[u]: one thread per channel adds the rows pos[start[u] .. start[u+1])
 * in that (ascending row) order to the accumulated gradient, the CPU's order exactly.
 * grid (distinct tokens, channel chunks). */
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* tok,
                                            const int* start, const int* pos, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* dw = dwte + (size_t)tok[u] * C;
    float acc = dw[c];
    for (int k = start[u]; k < start[u + 1]; k++) acc += dout[(size_t)pos[k] * C + c];
    dw[c] = acc;
}

/* dwpe[t] += the B rows of position t in b order; grid (T, channel chunks) */
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    int t = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float* dw = dwpe + (size_t)t * C;
    float acc = dw[c];
    for (int b = 0; b < B; b++) acc += dout[((size_t)b * T + t) * C + c];
    dw[c] = acc;
}

/* host buffers of the token bucketing, grown on need */
static int* bucket_host = NULL;      /* the N tokens, then the upload: tok[U], start[U+1], pos[N] */
static size_t bucket_host_cap = 0;
static int* bucket_count = NULL;     /* per token id: rows, then the next free slot */
static size_t bucket_count_cap = 0;

static void* grow(void* p, size_t* cap, size_t want, size_t elem) {
    if (want <= *cap) return p;
    void* q = realloc(p, want * elem);
    if (q == NULL) {
        fprintf(stderr, "seedgpt: encoder_backward_cuda: out of host memory (%zu bytes)\n",
                want * elem);
        exit(1);
    }
    *cap = want;
    return q;
}

void encoder_backward_cuda(float* dwte, float* dwpe, const float* dout, const int* inp,
                           int B, int T, int C) {
    int N = B * T;
    if (N == 0 || C == 0) return;
    /* Bucket the rows by token on the host with a stable counting sort, so rows keep ascending
     * order within a token: N ints down and at most 3N + 1 up, and the sums below are the CPU's,
     * in the CPU's order, without atomics. */
    bucket_host = (int*)grow(bucket_host, &bucket_host_cap, (size_t)4 * N + 1, sizeof(int));
    int* h_inp = bucket_host;
    device_to_host_cuda(h_inp, inp, (size_t)N * sizeof(int));
    int vmax = 0;
    for (int i = 0; i < N; i++) {
        if (h_inp[i] < 0) {
            fprintf(stderr, "seedgpt: encoder_backward_cuda: negative token id %d at row %d\n",
                    h_inp[i], i);
            exit(1);
        }
        if (h_inp[i] + 1 > vmax) vmax = h_inp[i] + 1;
    }
    bucket_count = (int*)grow(bucket_count, &bucket_count_cap, (size_t)vmax, sizeof(int));
    memset(bucket_count, 0, (size_t)vmax * sizeof(int));
    for (int i = 0; i < N; i++) bucket_count[h_inp[i]]++;
    int U = 0;   /* distinct tokens */
    for (int v = 0; v < vmax; v++) U += bucket_count[v] > 0;
    int* tok = bucket_host + N;
    int* start = tok + U;
    int* pos = start + U + 1;
    int u = 0, next = 0;
    for (int v = 0; v < vmax; v++) {
        if (bucket_count[v] == 0) continue;
        tok[u] = v;
        start[u] = next;
        next += bucket_count[v];
        bucket_count[v] = start[u];
        u++;
    }
    start[U] = N;
    for (int i = 0; i < N; i++) pos[bucket_count[h_inp[i]]++] = i;
    size_t bytes = sizeof(int) * ((size_t)2 * U + 1 + N);
    int* d = (int*)ops_scratch(bytes);
    device_to_backend_cuda(d, tok, bytes);

    dim3 grid_wte((unsigned)U, sg_ceil_div((size_t)C, 128));
    SG_LAUNCH(encoder_backward_wte_kernel, grid_wte, 128, 0, dwte, dout, d, d + U, d + 2 * U + 1, C);
    SG_CHECK_LAUNCH();
    if (dwpe == NULL) return;   /* no learned positions */
    dim3 grid_wpe((unsigned)T, sg_ceil_div((size_t)C, 128));
    SG_LAUNCH(encoder_backward_wpe_kernel, grid_wpe, 128, 0, dwpe, dout, B, T, C);
    SG_CHECK_LAUNCH();
}

/* ---- column sums in two fixed passes ---------------------------------------------------------- */

/* The most blocks a grid may have along y: 65535 on every CUDA GPU so far, so a y that counts
 * chunks of rows of the batch (N = B T tokens) would overflow above 65535 x 32 = 2.1M tokens a
 * step. Asked of the device (an attribute: cheap, unlike cudaGetDeviceProperties), so that the
 * emulation can model a smaller limit and tests run the strided path at small N. */
static unsigned grid_y_limit(void) {
    int dev = 0, v = 0;
    SG_CHECK(cudaGetDevice(&dev));
    SG_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxGridDimY, dev));
    return (unsigned)v;
}

static int colsum_chunks(int N) { return (N + COLSUM_ROWS - 1) / COLSUM_ROWS; }

/* The first pass's grid: x over blocks of COLSUM_THREADS channels, y over the chunks of
 * COLSUM_ROWS rows, at most grid_y_limit() blocks; block y takes chunks y, y + gridDim.y, ...
 * (grid-stride). A chunk's partial is its rows added in order whichever block takes it, and the
 * second pass adds the chunks in order, so the sums have the same bits for every grid.y. */
static dim3 colsum_grid(int N, int C) {
    const unsigned chunks = (unsigned)colsum_chunks(N), ymax = grid_y_limit();
    return dim3(sg_ceil_div((size_t)C, COLSUM_THREADS), chunks < ymax ? chunks : ymax);
}

/* partial[k][c] = sum of x[n][c] over the rows n of chunk k (COLSUM_ROWS rows, in order), for
 * the chunks k = blockIdx.y + j gridDim.y; grid colsum_grid(N, C) */
__global__ void column_sum_partials_kernel(float* partial, const float* x, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int nchunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    for (int k = blockIdx.y; k < nchunks; k += gridDim.y) {
        int n0 = k * COLSUM_ROWS, n1 = n0 + COLSUM_ROWS < N ? n0 + COLSUM_ROWS : N;
        float acc = 0.0f;
        for (int n = n0; n < n1; n++) acc += x[(size_t)n * C + c];
        partial[(size_t)k * C + c] = acc;
    }
}

/* dst[c] += the chunks' partials in chunk order */
__global__ void column_sum_finish_kernel(float* dst, const float* partial, int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < nchunks; k++) acc += partial[(size_t)k * C + c];
    dst[c] += acc;
}

/* ---- layernorm ---------------------------------------------------------------------------- */

/* one warp per row: mean, then the variance around it (two passes, as the CPU); out is an
 * operand activation (cuda/act.h: fp32, or bf16 rounded once from the same fp32 value) */
template <typename ActT>
__global__ void layernorm_forward_kernel(ActT* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (n >= N) return;   /* the whole warp */
    const float eps = 1e-5f;
    const float* x = inp + (size_t)n * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = x[c] - m; v += d * d; }
    v = warp_sum(v) / C;
    float r = 1.0f / sqrtf(v + eps);
    ActT* o = out + (size_t)n * C;
    for (int c = lane; c < C; c += 32) act_store(o, c, (r * (x[c] - m)) * weight[c] + bias[c]);
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
    }
}

void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
    if (N == 0 || C == 0) return;
    SG_LAUNCH(layernorm_forward_kernel<float>, sg_ceil_div((size_t)N, LN_ROWS_PER_BLOCK),
              32 * LN_ROWS_PER_BLOCK, 0, out, mean, rstd, inp, weight, bias, N, C);
    SG_CHECK_LAUNCH();
}

void layernorm_forward_bf16_cuda(void* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C) {
    if (N == 0 || C == 0) return;
    SG_LAUNCH(layernorm_forward_kernel<uint16_t>, sg_ceil_div((size_t)N, LN_ROWS_PER_BLOCK),
              32 * LN_ROWS_PER_BLOCK, 0, (uint16_t*)out, mean, rstd, inp, weight, bias, N, C);
    SG_CHECK_LAUNCH();
}

/* dinp (accumulated), one warp per row. In the forward out = norm * w + b with
 * norm = (x - mean) * rstd, so dnorm = dout * w and
 * dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)). */
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (n >= N) return;
    const float* x = inp + (size_t)n * C;
    const float* d = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float a = 0.0f, an = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * s;
        float dnorm = weight[c] * d[c];
        a += dnorm;
        an += dnorm * norm;
    }
    float dnorm_mean = warp_sum(a) / C;
    float dnorm_norm_mean = warp_sum(an) / C;
    float* dx = dinp + (size_t)n * C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * s;
        float dnorm = weight[c] * d[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

/* dweight and dbias partials over chunks of rows: pw[k][c] = sum dout * norm, pb[k][c] = sum dout;
 * chunks k = blockIdx.y + j gridDim.y, grid colsum_grid(N, C), as column_sum_partials_kernel */
__global__ void layernorm_param_partials_kernel(float* pw, float* pb, const float* dout,
                                                const float* inp, const float* mean,
                                                const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int nchunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    for (int k = blockIdx.y; k < nchunks; k += gridDim.y) {
        int n0 = k * COLSUM_ROWS, n1 = n0 + COLSUM_ROWS < N ? n0 + COLSUM_ROWS : N;
        float aw = 0.0f, ab = 0.0f;
        for (int n = n0; n < n1; n++) {
            float d = dout[(size_t)n * C + c];
            aw += d * ((inp[(size_t)n * C + c] - mean[n]) * rstd[n]);
            ab += d;
        }
        pw[(size_t)k * C + c] = aw;
        pb[(size_t)k * C + c] = ab;
    }
}

void layernorm_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int N, int C) {
    if (N == 0 || C == 0) return;
    SG_LAUNCH(layernorm_backward_dinp_kernel, sg_ceil_div((size_t)N, LN_ROWS_PER_BLOCK),
              32 * LN_ROWS_PER_BLOCK, 0, dinp, dout, inp, weight, mean, rstd, N, C);
    SG_CHECK_LAUNCH();
    int nchunks = colsum_chunks(N);
    float* pw = (float*)ops_scratch(sizeof(float) * 2 * (size_t)nchunks * C);
    float* pb = pw + (size_t)nchunks * C;
    SG_LAUNCH(layernorm_param_partials_kernel, colsum_grid(N, C), COLSUM_THREADS, 0, pw, pb, dout, inp, mean,
              rstd, N, C);
    SG_CHECK_LAUNCH();
    unsigned cblocks = sg_ceil_div((size_t)C, COLSUM_THREADS);
    SG_LAUNCH(column_sum_finish_kernel, cblocks, COLSUM_THREADS, 0, dweight, pw, nchunks, C);
    SG_CHECK_LAUNCH();
    SG_LAUNCH(column_sum_finish_kernel, cblocks, COLSUM_THREADS, 0, dbias, pb, nchunks, C);
    SG_CHECK_LAUNCH();
}

/* ---- matmul ------------------------------------------------------------------------------- */

/* cuBLAS is column-major: a row-major (R, S) matrix is the column-major (S, R) one with the same
 * leading dimension S. So the row-major product Y = X . W^T is asked for as Y^T = W . X^T. */
static cublasHandle_t blas(void) {
    static cublasHandle_t handle;
    static int ready = 0;
    if (!ready) {
        SG_CUBLAS_CHECK(cublasCreate(&handle));
        /* plain fp32 arithmetic: no TF32 tensor-core rounding, so results stay within fp32
         * tolerance of the CPU's */
        SG_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
        ready = 1;
    }
    return handle;
}

/* out (N,OC) += bias (OC): one block per row */
__global__ void add_bias_kernel(float* out, const float* bias, int OC) {
    float* o = out + (size_t)blockIdx.x * OC;
    for (int k = threadIdx.x; k < OC; k += blockDim.x) o[k] += bias[k];
}

void matmul_forward_cuda(float* out, const float* inp, const float* weight, const float* bias,
                         int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    const float one = 1.0f, zero = 0.0f;
    /* out^T (OC,N) = weight (OC,C) . inp^T (C,N): weight is stored column-major as (C,OC) */
    SG_CUBLAS_CHECK(cublasSgemm(blas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C,
                                inp, C, &zero, out, OC));
    if (bias != NULL) {
        SG_LAUNCH(add_bias_kernel, N, EW_THREADS, 0, out, bias, OC);
        SG_CHECK_LAUNCH();
    }
}

/* in the forward, out = inp . weight^T + bias, so:
 * dinp (N,C) = dout (N,OC) . weight (OC,C), asked as dinp^T (C,N) = weight^T (C,OC) . dout^T */
void matmul_backward_dinp_cuda(float* dinp, const float* dout, const float* weight, int N, int C, int OC) {
    if (N == 0 || C == 0 || OC == 0) return;
    const float one = 1.0f, zero = 0.0f;
    SG_CUBLAS_CHECK(cublasSgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C,
                                dout, OC, &zero, dinp, C));
}

/* dweight (OC,C) += dout^T (OC,N) . inp (N,C), asked as dweight^T (C,OC) += inp^T . dout */
void matmul_backward_dweight_cuda(float* dweight, const float* dout, const float* inp, int N, int C, int OC) {
    if (N == 0 || C == 0 || OC == 0) return;
    const float one = 1.0f;
    SG_CUBLAS_CHECK(cublasSgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C,
                                dout, OC, &one, dweight, C));
}

void matmul_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int C, int OC) {
    if (N == 0 || C == 0 || OC == 0) return;
    if (dinp != NULL) matmul_backward_dinp_cuda(dinp, dout, weight, N, C, OC);
    matmul_backward_dweight_cuda(dweight, dout, inp, N, C, OC);
    /* dbias += the column sums of dout */
    if (dbias != NULL) bias_backward_cuda(dbias, dout, N, OC);
}

void bias_backward_cuda(float* dbias, const float* dout, int N, int OC) {
    if (N == 0 || OC == 0) return;
    int nchunks = colsum_chunks(N);
    float* partial = (float*)ops_scratch(sizeof(float) * (size_t)nchunks * OC);
    SG_LAUNCH(column_sum_partials_kernel, colsum_grid(N, OC), COLSUM_THREADS, 0, partial, dout, N, OC);
    SG_CHECK_LAUNCH();
    SG_LAUNCH(column_sum_finish_kernel, sg_ceil_div((size_t)OC, COLSUM_THREADS),
              COLSUM_THREADS, 0, dbias, partial, nchunks, OC);
    SG_CHECK_LAUNCH();
}

/* ---- GELU (tanh approximation) ------------------------------------------------------------ */

#define GELU_SCALING_FACTOR 0.7978845608028654f  /* sqrt(2 / pi) */

/* the CPU's formula: tanh(u) = 1 - 2 / (1 + e^(2u)); saturates to +-1 at both ends */
static __device__ inline float gelu_tanh(float u) { return 1.0f - 2.0f / (1.0f + expf(2.0f * u)); }

/* inp and out are operand activations (cuda/act.h): the fp32 arithmetic on the value read, the
 * output rounded once under bf16 */
template <typename ActT>
__global__ void gelu_forward_kernel(ActT* out, const ActT* inp, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = act_load(inp, i);
        float cube = 0.044715f * x * x * x;
        act_store(out, i, 0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube))));
    }
}

template <typename ActT>
__global__ void gelu_backward_kernel(float* dinp, const ActT* inp, const float* dout, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = act_load(inp, i);
        float cube = 0.044715f * x * x * x;
        float th = gelu_tanh(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th)
                    + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

void gelu_forward_cuda(float* out, const float* inp, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(gelu_forward_kernel<float>, ew_blocks(n), EW_THREADS, 0, out, inp, n);
    SG_CHECK_LAUNCH();
}

void gelu_backward_cuda(float* dinp, const float* inp, const float* dout, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(gelu_backward_kernel<float>, ew_blocks(n), EW_THREADS, 0, dinp, inp, dout, n);
    SG_CHECK_LAUNCH();
}

void gelu_forward_bf16_cuda(void* out, const void* inp, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(gelu_forward_kernel<uint16_t>, ew_blocks(n), EW_THREADS, 0, (uint16_t*)out,
              (const uint16_t*)inp, n);
    SG_CHECK_LAUNCH();
}

void gelu_backward_bf16_cuda(float* dinp, const void* inp, const float* dout, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(gelu_backward_kernel<uint16_t>, ew_blocks(n), EW_THREADS, 0, dinp,
              (const uint16_t*)inp, dout, n);
    SG_CHECK_LAUNCH();
}

/* ---- the weights' bf16 operand copy --------------------------------------------------------- */

__global__ void round_to_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        act_store(dst, i, src[i]);
}

void round_to_bf16_cuda(void* dst, const float* src, size_t n) {
    if (n == 0) return;
    SG_LAUNCH(round_to_bf16_kernel, ew_blocks(n), EW_THREADS, 0, (uint16_t*)dst, src, n);
    SG_CHECK_LAUNCH();
}

/* ---- residual + dropout ------------------------------------------------------------------- */

/* out = x + drop(branch); one block per (b, t) row, one thread per quad; out may alias branch */
__global__ void residual_dropout_forward_kernel(float* out, const float* x, const float* branch,
                                                int T, int t0, int C, uint32_t g0, uint64_t seed,
                                                Dropout drop) {
    int bt = blockIdx.x;
    int b = bt / T, t = t0 + bt % T;
    size_t row = (size_t)bt * C;
    int Q = (C + 3) / 4;
    for (int q = threadIdx.x; q < Q; q += blockDim.x) {
        int c0 = 4 * q, nc = C - c0 < 4 ? C - c0 : 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int w = 0; w < 4; w++) if (w < nc) v[w] = branch[row + c0 + w];
        dropout_quad(v, nc, seed, g0 + (uint32_t)b, (uint32_t)t, (uint32_t)q, drop);
        #pragma unroll
        for (int w = 0; w < 4; w++) if (w < nc) out[row + c0 + w] = x[row + c0 + w] + v[w];
    }
}

void residual_dropout_forward_at_cuda(float* out, const float* x, const float* branch, int B,
                                      int T, int t0, int C, uint32_t g0, uint64_t seed,
                                      Dropout drop) {
    if (B * T == 0 || C == 0) return;
    SG_LAUNCH(residual_dropout_forward_kernel, B * T, quad_threads(C), 0, out, x, branch, T, t0, C,
              g0, seed, drop);
    SG_CHECK_LAUNCH();
}

void residual_dropout_forward_cuda(float* out, const float* x, const float* branch,
                                   int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop) {
    residual_dropout_forward_at_cuda(out, x, branch, B, T, 0, C, g0, seed, drop);
}

/* in the forward y = x * keep * scale, so dx = dout * keep * scale: the same mask, redrawn */
__global__ void dropout_backward_kernel(float* dy, const float* dout, int T, int t0, int C,
                                        uint32_t g0, uint64_t seed, Dropout drop) {
    int bt = blockIdx.x;
    int b = bt / T, t = t0 + bt % T;
    size_t row = (size_t)bt * C;
    int Q = (C + 3) / 4;
    for (int q = threadIdx.x; q < Q; q += blockDim.x) {
        int c0 = 4 * q, nc = C - c0 < 4 ? C - c0 : 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int w = 0; w < 4; w++) if (w < nc) v[w] = dout[row + c0 + w];
        dropout_quad(v, nc, seed, g0 + (uint32_t)b, (uint32_t)t, (uint32_t)q, drop);
        #pragma unroll
        for (int w = 0; w < 4; w++) if (w < nc) dy[row + c0 + w] = v[w];
    }
}

void dropout_backward_at_cuda(float* dy, const float* dout, int B, int T, int t0, int C,
                              uint32_t g0, uint64_t seed, Dropout drop) {
    if (B * T == 0 || C == 0) return;
    SG_LAUNCH(dropout_backward_kernel, B * T, quad_threads(C), 0, dy, dout, T, t0, C, g0, seed,
              drop);
    SG_CHECK_LAUNCH();
}

void dropout_backward_cuda(float* dy, const float* dout, int B, int T, int C, uint32_t g0,
                           uint64_t seed, Dropout drop) {
    dropout_backward_at_cuda(dy, dout, B, T, 0, C, g0, seed, drop);
}

/* ---- context parallelism: strided row copies (DESIGN §9) --------------------------------- */

/* dst row r = src row r, width floats; one thread an element (a copy has no order to keep) */
__global__ void copy_rows_kernel(float* dst, size_t dst_stride, const float* src,
                                 size_t src_stride, size_t rows, size_t width) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= rows * width) return;
    size_t r = e / width, c = e % width;
    dst[r * dst_stride + c] = src[r * src_stride + c];
}

void copy_rows_cuda(float* dst, size_t dst_stride, const float* src, size_t src_stride,
                    size_t rows, size_t width) {
    if (rows * width == 0) return;
    SG_LAUNCH(copy_rows_kernel, ew_blocks(rows * width), EW_THREADS, 0, dst, dst_stride, src,
              src_stride, rows, width);
    SG_CHECK_LAUNCH();
}

/* ---- rotary position embedding ----------------------------------------------------------- */

/* one thread per (row, q-or-k head, pair): the CPU's rope_rotate, pair for pair; sign = +1 the
 * forward, -1 the backward (the inverse rotation). qkv is an operand activation in the forward
 * (cuda/act.h: under bf16 each rotated value is rounded again), the fp32 dqkv in the backward. */
template <typename ActT>
__global__ void rope_rotate_kernel(ActT* qkv, const float* cos, const float* sin, int T,
                                   int heads, int QKV, int HD, int layout, int pos0, float sign,
                                   size_t n) {
    int H2 = HD / 2;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % (size_t)H2);
        int h = (int)((i / (size_t)H2) % (size_t)heads);
        size_t bt = i / ((size_t)H2 * heads);
        int t = (int)(bt % (size_t)T);
        ActT* x = qkv + bt * (size_t)QKV + (size_t)h * HD;
        int i0 = layout == ROPE_GPTJ ? 2 * d : d;
        int i1 = layout == ROPE_GPTJ ? 2 * d + 1 : d + H2;
        float c = cos[(size_t)(pos0 + t) * H2 + d], s = sign * sin[(size_t)(pos0 + t) * H2 + d];
        float x0 = act_load(x, i0), x1 = act_load(x, i1);
        act_store(x, i0, x0 * c - x1 * s);
        act_store(x, i1, x0 * s + x1 * c);
    }
}

template <typename ActT>
static void rope_rotate_cuda(ActT* qkv, const float* cos, const float* sin, int B, int T, int NH,
                             int NKV, int HD, int layout, int pos0, float sign) {
    size_t n = (size_t)B * T * (NH + NKV) * (HD / 2);
    if (n == 0) return;
    SG_LAUNCH(rope_rotate_kernel<ActT>, ew_blocks(n), EW_THREADS, 0, qkv, cos, sin, T, NH + NKV,
              (NH + 2 * NKV) * HD, HD, layout, pos0, sign, n);
    SG_CHECK_LAUNCH();
}

void rope_forward_bf16_cuda(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int HD, int layout, int pos0) {
    rope_rotate_cuda((uint16_t*)qkv, cos, sin, B, T, NH, NKV, HD, layout, pos0, 1.0f);
}

void rope_forward_cuda(float* qkv, const float* cos, const float* sin, int B, int T, int NH,
                       int NKV, int HD, int layout, int pos0) {
    rope_rotate_cuda(qkv, cos, sin, B, T, NH, NKV, HD, layout, pos0, 1.0f);
}

void rope_backward_cuda(float* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                        int NKV, int HD, int layout, int pos0) {
    rope_rotate_cuda(dqkv, cos, sin, B, T, NH, NKV, HD, layout, pos0, -1.0f);
}

/* ---- stochastic depth --------------------------------------------------------------------- */

/* one thread per element; each draws its sequence's keep bit (the same word for the whole
 * sequence, as the CPU's one draw) */
__global__ void drop_path_kernel(float* y, const float* x, size_t per_seq, size_t n, uint32_t g0,
                                 uint64_t seed, Dropout drop) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t b = (uint32_t)(i / per_seq);
        float f = drop.scale;
        if (dropout_active(drop) && philox_depth_draw(seed, g0 + b) < drop.thr) f = 0.0f;
        y[i] = f == 0.0f ? 0.0f : x[i] * f;
    }
}

void drop_path_cuda(float* y, const float* x, int B, int T, int C, uint32_t g0, uint64_t seed,
                    Dropout drop) {
    size_t per_seq = (size_t)T * C, n = (size_t)B * per_seq;
    if (n == 0) return;
    SG_LAUNCH(drop_path_kernel, ew_blocks(n), EW_THREADS, 0, y, x, per_seq, n, g0, seed, drop);
    SG_CHECK_LAUNCH();
}

/* ---- cross-entropy over the real vocabulary ----------------------------------------------- */

/* one block per row n: the max over the real vocabulary, then sum exp(l - max) in double, each
 * thread over a fixed stride of columns, the threads' sums added in a fixed tree. The padded
 * columns [V, Vp) are never read. */
__global__ void crossentropy_forward_kernel(float* losses, const float* logits, const int* targets,
                                            int V, int Vp) {
    SG_SHARED(float, red_f, CE_THREADS);
    SG_SHARED(double, red_d, CE_THREADS);
    int n = blockIdx.x;
    const float* l = logits + (size_t)n * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = l[v] > mx ? l[v] : mx;
    float maxv = block_max(mx, red_f);
    double s = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += exp((double)(l[v] - maxv));
    double sum = block_sum_double(s, red_d);
    if (threadIdx.x == 0) {
        /* cpu/ops_cpu.c's xent_loss: the difference of two floats first, exact at any scale */
        losses[n] = (float)(((double)maxv - (double)l[targets[n]]) + log(sum));
    }
}

/* in place: logits become dloss * (softmax - onehot) on [0, V), +0 on [V, Vp). Each thread
 * writes only the columns it read itself, after the block's reductions are complete. */
__global__ void crossentropy_backward_kernel(float* logits, const int* targets, float dloss,
                                             int V, int Vp) {
    SG_SHARED(float, red_f, CE_THREADS);
    SG_SHARED(double, red_d, CE_THREADS);
    int n = blockIdx.x;
    float* l = logits + (size_t)n * Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = l[v] > mx ? l[v] : mx;
    float maxv = block_max(mx, red_f);
    double s = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += exp((double)(l[v] - maxv));
    double inv = 1.0 / block_sum_double(s, red_d);
    int target = targets[n];
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float p = (float)(exp((double)(l[v] - maxv)) * inv);
        l[v] = (p - (v == target ? 1.0f : 0.0f)) * dloss;
    }
    for (int v = V + threadIdx.x; v < Vp; v += blockDim.x) l[v] = 0.0f;
}

/* a power of two from 32 to CE_THREADS, at least 8 columns a thread: a small vocabulary gets a
 * small block */
static unsigned ce_threads(int V) {
    unsigned t = 32;
    while (t < CE_THREADS && (size_t)t * 8 < (size_t)V) t *= 2;
    return t;
}

void crossentropy_forward_cuda(float* losses, const float* logits, const int* targets,
                               int N, int V, int Vp) {
    if (N == 0) return;
    SG_LAUNCH(crossentropy_forward_kernel, N, ce_threads(V), 0, losses, logits, targets, V, Vp);
    SG_CHECK_LAUNCH();
}

void crossentropy_backward_cuda(float* logits, const int* targets, float dloss, int N, int V,
                                int Vp) {
    if (N == 0) return;
    SG_LAUNCH(crossentropy_backward_kernel, N, ce_threads(V), 0, logits, targets, dloss, V, Vp);
    SG_CHECK_LAUNCH();
}

/* ---- norms and the optimizer -------------------------------------------------------------- */

/* first pass: partial[k] = sum of squares (double) of block k of NORM_BLOCK elements */
__global__ void sum_squares_partials_kernel(double* partial, const float* x, size_t n) {
    SG_SHARED(double, red, NORM_THREADS);
    size_t i0 = (size_t)blockIdx.x * NORM_BLOCK;
    size_t i1 = i0 + NORM_BLOCK < n ? i0 + NORM_BLOCK : n;
    double acc = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    double s = block_sum_double(acc, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* second pass, one block: each thread a fixed stride of partials, then the tree */
__global__ void sum_squares_finish_kernel(double* total, const double* partial, size_t nblocks) {
    SG_SHARED(double, red, NORM_THREADS);
    double acc = 0.0;
    for (size_t k = threadIdx.x; k < nblocks; k += blockDim.x) acc += partial[k];
    double s = block_sum_double(acc, red);
    if (threadIdx.x == 0) *total = s;
}

double sum_squares_cuda(const float* x, size_t n) {
    if (n == 0) return 0.0;
    size_t nblocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double* partial = (double*)ops_scratch(sizeof(double) * (nblocks + 1));
    double* total = partial + nblocks;
    SG_LAUNCH(sum_squares_partials_kernel, (unsigned)nblocks, NORM_THREADS, 0, partial, x, n);
    SG_CHECK_LAUNCH();
    SG_LAUNCH(sum_squares_finish_kernel, 1, NORM_THREADS, 0, total, partial, nblocks);
    SG_CHECK_LAUNCH();
    double result;
    device_to_host_cuda(&result, total, sizeof(double));
    return result;
}

__global__ void scale_inplace_kernel(float* x, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        x[i] *= s;
    }
}

void scale_inplace_cuda(float* x, size_t n, float s) {
    if (n == 0) return;
    SG_LAUNCH(scale_inplace_kernel, ew_blocks(n), EW_THREADS, 0, x, n, s);
    SG_CHECK_LAUNCH();
}

/* model/adamw.h, the CPU's formula; bc1, bc2 computed on the host as the CPU does */
__global__ void adamw_kernel(float* params, const float* grads, float grad_scale, float* m, float* v,
                             size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                             float bc1, float bc2) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        adamw_element(&params[i], grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                      weight_decay, bc1, bc2);
    }
}

void adamw_update_cuda(float* params, const float* grads, float grad_scale, float* m, float* v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    if (n == 0) return;
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    SG_LAUNCH(adamw_kernel, ew_blocks(n), EW_THREADS, 0, params, grads, grad_scale, m, v, n, lr, beta1, beta2,
              eps, weight_decay, bc1, bc2);
    SG_CHECK_LAUNCH();
}

/* ---- the scratch a model's calls need --------------------------------------------------------- */

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* The most each user of ops_scratch asks for over the calls (the sizes written where they ask) */
size_t ops_scratch_bytes_cuda(const OpCalls* k) {
    const size_t N = (size_t)k->B * k->T;
    /* encoder_backward: U distinct tokens (at most min(N, V)), their starts (U + 1), positions (N) */
    const size_t U = N < (size_t)k->V ? N : (size_t)k->V;
    size_t need = sizeof(int) * (2 * U + 1 + N);
    /* layernorm_backward on the stream's rows: dweight's and dbias's partials */
    need = max_size(need, sizeof(float) * 2 * (size_t)colsum_chunks((int)N) * k->C);
    /* the dense products' dbias partials */
    for (int i = 0; i < k->n_matmul; i++) {
        const MatmulCall* c = &k->matmul[i];
        if (c->bias) need = max_size(need, sizeof(float) * (size_t)colsum_chunks(c->N) * c->OC);
    }
    /* sum_squares, one tensor at a time */
    const size_t nblocks = (k->largest_tensor + NORM_BLOCK - 1) / NORM_BLOCK;
    return max_size(need, sizeof(double) * (nblocks + 1));
}

void ops_reserve_scratch_cuda(const OpCalls* k) { (void)ops_scratch(ops_scratch_bytes_cuda(k)); }
