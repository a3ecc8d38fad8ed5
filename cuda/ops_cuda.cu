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
 *
 * Two generations of kernels live side by side until a GPU has timed both (DESIGN §10): the
 * baseline ones above, one element (or a quad of scalar accesses) a thread, and the ones named
 * *_vec_kernel and the fused ones (residual_layernorm_forward_kernel, column_sum_partials_round_kernel,
 * round_gelu_bf16_vec_kernel, adamw_tensors_kernel, sum_squares_tensors_*), which move 16 bytes
 * per access (cuda/act.h) and fuse passes where one read can serve two: the same arithmetic
 * element by element and the same summation orders, so the same bits (tests/cuda/kernels_ab.h).
 * An op takes the new kernels where its rows are whole 16-byte pieces and the switch
 * (kernels_baseline_cuda, SEEDGPT_KERNELS=baseline) does not ask for the old ones.
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

/* ---- the A/B switch (cuda/ops_cuda.h) ------------------------------------------------------- */

int kernels_baseline_cuda(void) { return sg_kernels_baseline(); }

/* launches of the kernels the switch's "new" side adds (a test reads it: the A/B comparison
 * is between two paths only if the new one ran) */
static unsigned long long new_launches = 0;
unsigned long long kernels_new_launches_cuda(void) { return new_launches; }

static unsigned ew_blocks(size_t n) {
    unsigned b = sg_ceil_div(n, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

/* rows of C floats the 16-byte kernels take: C a multiple of 4, every row 16-byte aligned */
static int rows_vec4(int C, const void* a, const void* b, const void* c) {
    return C % 4 == 0 && aligned16(a) && aligned16(b) && (c == NULL || aligned16(c));
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

/* The same arithmetic with 16-byte accesses. The sums must add the same elements in the same
 * order as the kernel above (lane l adds x[l], x[l + 32], ...), but a lane's 16-byte load holds
 * four neighbouring elements, which belong to four lanes. So the warp first copies its row into
 * shared memory with 16-byte loads, then sums from there in the baseline's order; the outputs go
 * out 16 bytes at a time (4 fp32 or 8 bf16), each computed by the baseline's expression. */
template <typename ActT>
static __device__ inline void layernorm_row_smem(ActT* o, float* mean_n, float* rstd_n,
                                                 const float* xs, const float* weight,
                                                 const float* bias, int C, int lane) {
    const float eps = 1e-5f;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += xs[c];
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = xs[c] - m; v += d * d; }
    v = warp_sum(v) / C;
    float r = 1.0f / sqrtf(v + eps);
    const int E = ACT_VEC(ActT);
    for (int c = lane * E; c < C; c += 32 * E) {
        float x[E], w[E], b[E], y[E];
        #pragma unroll
        for (int k = 0; k < E; k += 4) {
            ld_f4(xs + c + k, x + k);
            ld_f4(weight + c + k, w + k);
            ld_f4(bias + c + k, b + k);
        }
        #pragma unroll
        for (int k = 0; k < E; k++) y[k] = (r * (x[k] - m)) * w[k] + b[k];
        act_store16(o, c, y);
    }
    if (lane == 0) {
        *mean_n = m;
        *rstd_n = r;
    }
}

/* one warp per row, rows_per_block warps; the dynamic shared memory holds one row per warp */
template <typename ActT>
__global__ void layernorm_forward_vec_kernel(ActT* out, float* mean, float* rstd, const float* inp,
                                             const float* weight, const float* bias, int N, int C) {
    SG_DYN_SHARED(float, rows);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int n = blockIdx.x * (blockDim.x / 32) + warp;
    if (n >= N) return;   /* the whole warp; the block has no barrier */
    float* xs = rows + (size_t)warp * C;
    const float* x = inp + (size_t)n * C;
    for (int c = 4 * lane; c < C; c += 128) {
        float v[4];
        ld_f4(x + c, v);
        st_f4(xs + c, v);
    }
    __syncwarp(0xffffffffu);   /* every lane's part of the row is in xs */
    layernorm_row_smem(out + (size_t)n * C, mean + n, rstd + n, xs, weight, bias, C, lane);
}

/* residual_dropout_forward then layernorm_forward of its output in one pass: the warp of row n
 * writes out = x + drop(branch) (the same Philox call per quad, dropout_quad) and keeps the row
 * in shared memory for the LayerNorm, which is layernorm_forward_vec_kernel's. out may alias
 * branch. */
template <typename ActT>
__global__ void residual_layernorm_forward_kernel(float* out, const float* x, const float* branch,
                                                  int T, int C, uint32_t g0, uint64_t seed,
                                                  Dropout drop, ActT* ln_out, float* mean,
                                                  float* rstd, const float* weight,
                                                  const float* bias, int N) {
    SG_DYN_SHARED(float, rows);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int n = blockIdx.x * (blockDim.x / 32) + warp;
    if (n >= N) return;
    int b = n / T, t = n % T;
    float* xs = rows + (size_t)warp * C;
    size_t row = (size_t)n * C;
    for (int q = lane; q < C / 4; q += 32) {
        size_t i = row + 4 * (size_t)q;
        float v[4], xi[4];
        ld_f4(branch + i, v);
        ld_f4(x + i, xi);
        dropout_quad(v, 4, seed, g0 + (uint32_t)b, (uint32_t)t, (uint32_t)q, drop);
        #pragma unroll
        for (int w = 0; w < 4; w++) v[w] = xi[w] + v[w];
        st_f4(out + i, v);
        st_f4(xs + 4 * q, v);
    }
    __syncwarp(0xffffffffu);
    layernorm_row_smem(ln_out + row, mean + n, rstd + n, xs, weight, bias, C, lane);
}

/* rows a block of the row-in-shared-memory kernels takes: 8, fewer for a wide row (48 KiB of
 * shared memory at most); 0 when one row does not fit (the baseline kernel runs) */
static int ln_smem_rows(int C) {
    int r = LN_ROWS_PER_BLOCK;
    while (r > 0 && (size_t)r * C * sizeof(float) > 48 * 1024) r /= 2;
    return r;
}

template <typename ActT>
static int ln_vec_ok(int C, const void* out, const float* inp, const float* w, const float* b) {
    return !kernels_baseline_cuda() && C % ACT_VEC(ActT) == 0 && ln_smem_rows(C) > 0 &&
           aligned16(out) && aligned16(inp) && aligned16(w) && aligned16(b);
}

template <typename ActT>
static void layernorm_forward_any(ActT* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C) {
    if (N == 0 || C == 0) return;
    if (ln_vec_ok<ActT>(C, out, inp, weight, bias)) {
        int r = ln_smem_rows(C);
        new_launches++;
        SG_LAUNCH(layernorm_forward_vec_kernel<ActT>, sg_ceil_div((size_t)N, r), 32 * r,
                  (size_t)r * C * sizeof(float), out, mean, rstd, inp, weight, bias, N, C);
    } else {
        SG_LAUNCH(layernorm_forward_kernel<ActT>, sg_ceil_div((size_t)N, LN_ROWS_PER_BLOCK),
                  32 * LN_ROWS_PER_BLOCK, 0, out, mean, rstd, inp, weight, bias, N, C);
    }
    SG_CHECK_LAUNCH();
}

void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
    layernorm_forward_any(out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_forward_bf16_cuda(void* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C) {
    layernorm_forward_any((uint16_t*)out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_forward_fp16_cuda(void* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C) {
    layernorm_forward_any((sg_h16*)out, mean, rstd, inp, weight, bias, N, C);
}

template <typename ActT>
static void residual_layernorm_forward_any(float* out, const float* x, const float* branch, int B,
                                           int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                           ActT* ln_out, float* mean, float* rstd,
                                           const float* weight, const float* bias) {
    int N = B * T;
    if (N == 0 || C == 0) return;
    if (ln_vec_ok<ActT>(C, ln_out, out, weight, bias) && rows_vec4(C, out, x, branch)) {
        int r = ln_smem_rows(C);
        new_launches++;
        SG_LAUNCH(residual_layernorm_forward_kernel<ActT>, sg_ceil_div((size_t)N, r), 32 * r,
                  (size_t)r * C * sizeof(float), out, x, branch, T, C, g0, seed, drop, ln_out, mean,
                  rstd, weight, bias, N);
        SG_CHECK_LAUNCH();
        return;
    }
    /* the two ops, as the orchestrator would call them (the baseline's kernels under the switch) */
    residual_dropout_forward_cuda(out, x, branch, B, T, C, g0, seed, drop);
    layernorm_forward_any(ln_out, mean, rstd, out, weight, bias, N, C);
}

void residual_layernorm_forward_cuda(float* out, const float* x, const float* branch, int B,
                                     int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                     void* ln_out, float* mean, float* rstd, const float* weight,
                                     const float* bias) {
    residual_layernorm_forward_any(out, x, branch, B, T, C, g0, seed, drop, (float*)ln_out, mean,
                                   rstd, weight, bias);
}

void residual_layernorm_forward_bf16_cuda(float* out, const float* x, const float* branch, int B,
                                          int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                          void* ln_out, float* mean, float* rstd,
                                          const float* weight, const float* bias) {
    residual_layernorm_forward_any(out, x, branch, B, T, C, g0, seed, drop, (uint16_t*)ln_out, mean,
                                   rstd, weight, bias);
}

void residual_layernorm_forward_fp16_cuda(float* out, const float* x, const float* branch, int B,
                                          int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                          void* ln_out, float* mean, float* rstd,
                                          const float* weight, const float* bias) {
    residual_layernorm_forward_any(out, x, branch, B, T, C, g0, seed, drop, (sg_h16*)ln_out, mean,
                                   rstd, weight, bias);
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

/* The backward in one pass over dout and inp. One block takes chunk k of COLSUM_ROWS rows (the
 * chunks of the baseline's parameter partials), LNB_WARPS rows at a time, one warp a row. The
 * warp copies its row's dout and norm = (x - mean) rstd into shared memory with 16-byte loads,
 * sums dnorm and dnorm norm from there in the baseline's lane order, and adds its dinp 16 bytes
 * at a time. Then each thread adds the rows' dout norm and dout to its columns' running partials,
 * in row order, so the chunk's partial is the baseline's sum of its rows in order from 0. The
 * partials are added over the chunks by column_sum_finish_kernel as before: the same bits, with
 * dout and inp read from memory once. Shared memory: weight, the two partials, and LNB_WARPS rows
 * of dout and of norm. */
#define LNB_WARPS 4
static size_t lnb_smem_bytes(int C) { return sizeof(float) * (3 + 2 * LNB_WARPS) * (size_t)C; }

__global__ void layernorm_backward_vec_kernel(float* dinp, float* pw, float* pb, const float* dout,
                                              const float* inp, const float* weight,
                                              const float* mean, const float* rstd, int N, int C) {
    SG_DYN_SHARED(float, sm);
    float* ws = sm;               /* weight (C) */
    float* aw = ws + C;           /* the chunk's partials of dweight and dbias (C each) */
    float* ab = aw + C;
    float* ds = ab + C;           /* LNB_WARPS rows of dout */
    float* ns = ds + (size_t)LNB_WARPS * C;   /* and of norm */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int k = blockIdx.x;
    int n0 = k * COLSUM_ROWS, n1 = n0 + COLSUM_ROWS < N ? n0 + COLSUM_ROWS : N;
    for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
        float w[4], z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        ld_f4(weight + c, w);
        st_f4(ws + c, w);
        st_f4(aw + c, z);
        st_f4(ab + c, z);
    }
    __syncthreads();
    float* dsw = ds + (size_t)warp * C;
    float* nsw = ns + (size_t)warp * C;
    for (int r0 = n0; r0 < n1; r0 += LNB_WARPS) {
        int n = r0 + warp;
        if (n < n1) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = 4 * lane; c < C; c += 128) {
                float xv[4], dv[4], nv[4];
                ld_f4(x + c, xv);
                ld_f4(d + c, dv);
                #pragma unroll
                for (int w = 0; w < 4; w++) nv[w] = (xv[w] - m) * s;
                st_f4(nsw + c, nv);
                st_f4(dsw + c, dv);
            }
            __syncwarp(0xffffffffu);
            float a = 0.0f, an = 0.0f;
            for (int c = lane; c < C; c += 32) {
                float norm = nsw[c];
                float dnorm = ws[c] * dsw[c];
                a += dnorm;
                an += dnorm * norm;
            }
            float dnorm_mean = warp_sum(a) / C;
            float dnorm_norm_mean = warp_sum(an) / C;
            float* dx = dinp + (size_t)n * C;
            for (int c = 4 * lane; c < C; c += 128) {
                float g[4];
                ld_f4(dx + c, g);
                #pragma unroll
                for (int w = 0; w < 4; w++) {
                    float norm = nsw[c + w];
                    float dnorm = ws[c + w] * dsw[c + w];
                    g[w] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
                }
                st_f4(dx + c, g);
            }
        }
        __syncthreads();   /* the round's rows are in ds and ns */
        int rows = n1 - r0 < LNB_WARPS ? n1 - r0 : LNB_WARPS;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float accw = aw[c], accb = ab[c];
            for (int w = 0; w < rows; w++) {
                float dv = ds[(size_t)w * C + c];
                accw += dv * ns[(size_t)w * C + c];
                accb += dv;
            }
            aw[c] = accw;
            ab[c] = accb;
        }
        __syncthreads();   /* before the next round overwrites ds and ns */
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        pw[(size_t)k * C + c] = aw[c];
        pb[(size_t)k * C + c] = ab[c];
    }
}

/* the one-pass kernel's conditions: 16-byte rows and its shared memory within what this device
 * lets a block take (sg_smem_optin: C up to 1489 on sm_75, 2234 on sm_70, 5282 on sm_90); past it
 * the two-kernel path, which needs none */
static int lnb_vec_ok(int C, const float* dinp, const float* dout, const float* inp,
                      const float* weight) {
    return !kernels_baseline_cuda() && C % 4 == 0 && aligned16(dinp) && aligned16(dout) &&
           aligned16(inp) && aligned16(weight) && lnb_smem_bytes(C) <= sg_smem_optin();
}

void layernorm_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int N, int C) {
    if (N == 0 || C == 0) return;
    int nchunks = colsum_chunks(N);
    float* pw = (float*)ops_scratch(sizeof(float) * 2 * (size_t)nchunks * C);
    float* pb = pw + (size_t)nchunks * C;
    if (lnb_vec_ok(C, dinp, dout, inp, weight)) {
        size_t smem = lnb_smem_bytes(C);
        if (smem > 48 * 1024)
            SG_CHECK(cudaFuncSetAttribute(layernorm_backward_vec_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        new_launches++;
        SG_LAUNCH(layernorm_backward_vec_kernel, (unsigned)nchunks, 32 * LNB_WARPS, smem, dinp, pw,
                  pb, dout, inp, weight, mean, rstd, N, C);
        SG_CHECK_LAUNCH();
    } else {
        SG_LAUNCH(layernorm_backward_dinp_kernel, sg_ceil_div((size_t)N, LN_ROWS_PER_BLOCK),
                  32 * LN_ROWS_PER_BLOCK, 0, dinp, dout, inp, weight, mean, rstd, N, C);
        SG_CHECK_LAUNCH();
        SG_LAUNCH(layernorm_param_partials_kernel, colsum_grid(N, C), COLSUM_THREADS, 0, pw, pb,
                  dout, inp, mean, rstd, N, C);
        SG_CHECK_LAUNCH();
    }
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

/* column_sum_partials_kernel over four columns a thread (16-byte loads), writing on the way the
 * bf16 copy of x (N, C), each element rounded once: the bias gradient's partials and the
 * backward products' bf16 dout from one read of the fp32 dout. Each column adds its chunk's rows
 * in order from 0, as the baseline. grid (quads of columns / COLSUM_THREADS, chunks strided) */
__global__ void column_sum_partials_round_kernel(float* partial, uint16_t* x16, const float* x, int N,
                                                 int C) {
    int c = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= C) return;
    const int nchunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    for (int k = blockIdx.y; k < nchunks; k += gridDim.y) {
        int n0 = k * COLSUM_ROWS, n1 = n0 + COLSUM_ROWS < N ? n0 + COLSUM_ROWS : N;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int n = n0; n < n1; n++) {
            float v[4];
            ld_f4(x + (size_t)n * C + c, v);
            #pragma unroll
            for (int w = 0; w < 4; w++) acc[w] += v[w];
            bf16_store4(x16, (size_t)n * C + c, v);
        }
        st_f4(partial + (size_t)k * C + c, acc);
    }
}

int bias_backward_round_bf16_cuda(float* dbias, void* dout16, const float* dout, int N, int OC) {
    if (kernels_baseline_cuda() || OC % 4 != 0 || !aligned16(dout) || !aligned16(dout16)) return 0;
    if (N == 0 || OC == 0) return 1;
    int nchunks = colsum_chunks(N);
    float* partial = (float*)ops_scratch(sizeof(float) * (size_t)nchunks * OC);
    dim3 grid(sg_ceil_div((size_t)OC / 4, COLSUM_THREADS), colsum_grid(N, OC).y);
    new_launches++;
    SG_LAUNCH(column_sum_partials_round_kernel, grid, COLSUM_THREADS, 0, partial, (uint16_t*)dout16,
              dout, N, OC);
    SG_CHECK_LAUNCH();
    SG_LAUNCH(column_sum_finish_kernel, sg_ceil_div((size_t)OC, COLSUM_THREADS),
              COLSUM_THREADS, 0, dbias, partial, nchunks, OC);
    SG_CHECK_LAUNCH();
    return 1;
}

/* ---- GELU (tanh approximation) ------------------------------------------------------------ */

#define GELU_SCALING_FACTOR 0.7978845608028654f  /* sqrt(2 / pi) */

/* the CPU's formula: tanh(u) = 1 - 2 / (1 + e^(2u)); saturates to +-1 at both ends */
static __device__ inline float gelu_tanh(float u) { return 1.0f - 2.0f / (1.0f + expf(2.0f * u)); }

/* the element's arithmetic, shared by the kernels below so that every one computes the same
 * bits: the forward's value, and the backward's local derivative */
static __device__ inline float gelu_value(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube)));
}
static __device__ inline float gelu_local_grad(float x) {
    float cube = 0.044715f * x * x * x;
    float th = gelu_tanh(GELU_SCALING_FACTOR * (x + cube));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th)
         + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
}

/* inp and out are operand activations (cuda/act.h): the fp32 arithmetic on the value read, the
 * output rounded once under bf16. The baseline kernels: one element a thread. */
template <typename ActT>
__global__ void gelu_forward_kernel(ActT* out, const ActT* inp, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        act_store(out, i, gelu_value(act_load(inp, i)));
    }
}

template <typename ActT>
__global__ void gelu_backward_kernel(float* dinp, const ActT* inp, const float* dout, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        dinp[i] = gelu_local_grad(act_load(inp, i)) * dout[i];
    }
}

/* The same, 16 bytes of the activation a thread (4 fp32 or 8 bf16: ACT_VEC), nv = n / ACT_VEC
 * vectors; n a multiple of ACT_VEC and the tensors 16-byte aligned. dinp may alias dout. */
template <typename ActT>
__global__ void gelu_forward_vec_kernel(ActT* out, const ActT* inp, size_t nv) {
    const int E = ACT_VEC(ActT);
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < nv;
         j += (size_t)gridDim.x * blockDim.x) {
        float v[E];
        act_load16(inp, j * E, v);
        #pragma unroll
        for (int k = 0; k < E; k++) v[k] = gelu_value(v[k]);
        act_store16(out, j * E, v);
    }
}

template <typename ActT>
__global__ void gelu_backward_vec_kernel(float* dinp, const ActT* inp, const float* dout, size_t nv) {
    const int E = ACT_VEC(ActT);
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < nv;
         j += (size_t)gridDim.x * blockDim.x) {
        float x[E], d[E];
        act_load16(inp, j * E, x);
        #pragma unroll
        for (int k = 0; k < E; k += 4) ld_f4(dout + j * E + k, d + k);
        #pragma unroll
        for (int k = 0; k < E; k++) d[k] = gelu_local_grad(x[k]) * d[k];
        #pragma unroll
        for (int k = 0; k < E; k += 4) st_f4(dinp + j * E + k, d + k);
    }
}

/* the 16-byte kernels take n whole vectors on 16-byte aligned tensors, unless the switch asks for
 * the baseline */
template <typename ActT>
static int gelu_vec_ok(size_t n, const void* a, const void* b, const void* c) {
    return !kernels_baseline_cuda() && n % ACT_VEC(ActT) == 0 && aligned16(a) && aligned16(b) &&
           (c == NULL || aligned16(c));
}

template <typename ActT>
static void gelu_forward_any(ActT* out, const ActT* inp, size_t n) {
    if (n == 0) return;
    if (gelu_vec_ok<ActT>(n, out, inp, NULL)) {
        size_t nv = n / ACT_VEC(ActT);
        new_launches++;
        SG_LAUNCH(gelu_forward_vec_kernel<ActT>, ew_blocks(nv), EW_THREADS, 0, out, inp, nv);
    } else {
        SG_LAUNCH(gelu_forward_kernel<ActT>, ew_blocks(n), EW_THREADS, 0, out, inp, n);
    }
    SG_CHECK_LAUNCH();
}

template <typename ActT>
static void gelu_backward_any(float* dinp, const ActT* inp, const float* dout, size_t n) {
    if (n == 0) return;
    if (gelu_vec_ok<ActT>(n, dinp, inp, dout)) {
        size_t nv = n / ACT_VEC(ActT);
        new_launches++;
        SG_LAUNCH(gelu_backward_vec_kernel<ActT>, ew_blocks(nv), EW_THREADS, 0, dinp, inp, dout, nv);
    } else {
        SG_LAUNCH(gelu_backward_kernel<ActT>, ew_blocks(n), EW_THREADS, 0, dinp, inp, dout, n);
    }
    SG_CHECK_LAUNCH();
}

void gelu_forward_cuda(float* out, const float* inp, size_t n) { gelu_forward_any(out, inp, n); }

void gelu_backward_cuda(float* dinp, const float* inp, const float* dout, size_t n) {
    gelu_backward_any(dinp, inp, dout, n);
}

void gelu_forward_bf16_cuda(void* out, const void* inp, size_t n) {
    gelu_forward_any((uint16_t*)out, (const uint16_t*)inp, n);
}

void gelu_backward_bf16_cuda(float* dinp, const void* inp, const float* dout, size_t n) {
    gelu_backward_any(dinp, (const uint16_t*)inp, dout, n);
}

void gelu_forward_fp16_cuda(void* out, const void* inp, size_t n) {
    gelu_forward_any((sg_h16*)out, (const sg_h16*)inp, n);
}

void gelu_backward_fp16_cuda(float* dinp, const void* inp, const float* dout, size_t n) {
    gelu_backward_any(dinp, (const sg_h16*)inp, dout, n);
}

/* ---- the weights' 16-bit operand copy ------------------------------------------------------- */

/* dst (n) = src rounded once to the 16-bit element ActT (uint16_t bf16, sg_h16 fp16) */
template <typename ActT>
__global__ void round_to_act16_kernel(ActT* dst, const float* src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        act_store(dst, i, src[i]);
}

/* the same, eight elements a thread: two 16-byte loads, one 16-byte store (nv = n / 8) */
template <typename ActT>
__global__ void round_to_act16_vec_kernel(ActT* dst, const float* src, size_t nv) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < nv;
         j += (size_t)gridDim.x * blockDim.x) {
        float v[8];
        ld_f4(src + 8 * j, v);
        ld_f4(src + 8 * j + 4, v + 4);
        act_store16(dst, 8 * j, v);
    }
}

template <typename ActT>
static void round_to_act16(ActT* dst, const float* src, size_t n) {
    if (n == 0) return;
    if (!kernels_baseline_cuda() && n % 8 == 0 && aligned16(dst) && aligned16(src)) {
        new_launches++;
        SG_LAUNCH(round_to_act16_vec_kernel<ActT>, ew_blocks(n / 8), EW_THREADS, 0, dst, src, n / 8);
    } else {
        SG_LAUNCH(round_to_act16_kernel<ActT>, ew_blocks(n), EW_THREADS, 0, dst, src, n);
    }
    SG_CHECK_LAUNCH();
}

void round_to_bf16_cuda(void* dst, const float* src, size_t n) { round_to_act16((uint16_t*)dst, src, n); }

void round_to_fp16_cuda(void* dst, const float* src, size_t n) { round_to_act16((sg_h16*)dst, src, n); }

/* The bf16 MLP's first product, after its GEMM: pre (n) = src rounded once (the bf16 fch, what
 * round_to_bf16 gives), act = GELU of that rounded value, rounded (what gelu_forward_bf16 gives
 * reading pre): both from one read of the fp32 src, eight elements a thread. */
__global__ void round_gelu_bf16_vec_kernel(uint16_t* pre, uint16_t* act, const float* src, size_t nv) {
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < nv;
         j += (size_t)gridDim.x * blockDim.x) {
        float v[8];
        ld_f4(src + 8 * j, v);
        ld_f4(src + 8 * j + 4, v + 4);
        #pragma unroll   /* the rounded values, as gelu_forward would read them back */
        for (int k = 0; k < 8; k++) v[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
        act_store16(pre, 8 * j, v);   /* exact: v holds bf16 values */
        #pragma unroll
        for (int k = 0; k < 8; k++) v[k] = gelu_value(v[k]);
        act_store16(act, 8 * j, v);
    }
}

int round_gelu_bf16_cuda(void* pre, void* act, const float* src, size_t n) {
    if (kernels_baseline_cuda() || n % 8 != 0 || !aligned16(pre) || !aligned16(act) || !aligned16(src))
        return 0;
    if (n == 0) return 1;
    new_launches++;
    SG_LAUNCH(round_gelu_bf16_vec_kernel, ew_blocks(n / 8), EW_THREADS, 0, (uint16_t*)pre,
              (uint16_t*)act, src, n / 8);
    SG_CHECK_LAUNCH();
    return 1;
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

/* The same, each tensor's quad in one 16-byte access (C % 4 == 0, rows 16-byte aligned): the
 * same Philox call per quad and the same arithmetic per element, so the same bits */
__global__ void residual_dropout_forward_vec_kernel(float* out, const float* x, const float* branch,
                                                    int T, int t0, int C, uint32_t g0, uint64_t seed,
                                                    Dropout drop) {
    int bt = blockIdx.x;
    int b = bt / T, t = t0 + bt % T;
    size_t row = (size_t)bt * C;
    int Q = C / 4;
    for (int q = threadIdx.x; q < Q; q += blockDim.x) {
        size_t i = row + 4 * (size_t)q;
        float v[4], xi[4];
        ld_f4(branch + i, v);
        ld_f4(x + i, xi);
        dropout_quad(v, 4, seed, g0 + (uint32_t)b, (uint32_t)t, (uint32_t)q, drop);
        #pragma unroll
        for (int w = 0; w < 4; w++) v[w] = xi[w] + v[w];
        st_f4(out + i, v);
    }
}

void residual_dropout_forward_at_cuda(float* out, const float* x, const float* branch, int B,
                                      int T, int t0, int C, uint32_t g0, uint64_t seed,
                                      Dropout drop) {
    if (B * T == 0 || C == 0) return;
    if (!kernels_baseline_cuda() && rows_vec4(C, out, x, branch)) {
        new_launches++;
        SG_LAUNCH(residual_dropout_forward_vec_kernel, B * T, quad_threads(C), 0, out, x, branch, T,
                  t0, C, g0, seed, drop);
    } else {
        SG_LAUNCH(residual_dropout_forward_kernel, B * T, quad_threads(C), 0, out, x, branch, T, t0,
                  C, g0, seed, drop);
    }
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

/* the same, 16-byte accesses (C % 4 == 0, rows 16-byte aligned); dy may alias dout */
__global__ void dropout_backward_vec_kernel(float* dy, const float* dout, int T, int t0, int C,
                                            uint32_t g0, uint64_t seed, Dropout drop) {
    int bt = blockIdx.x;
    int b = bt / T, t = t0 + bt % T;
    size_t row = (size_t)bt * C;
    int Q = C / 4;
    for (int q = threadIdx.x; q < Q; q += blockDim.x) {
        size_t i = row + 4 * (size_t)q;
        float v[4];
        ld_f4(dout + i, v);
        dropout_quad(v, 4, seed, g0 + (uint32_t)b, (uint32_t)t, (uint32_t)q, drop);
        st_f4(dy + i, v);
    }
}

void dropout_backward_at_cuda(float* dy, const float* dout, int B, int T, int t0, int C,
                              uint32_t g0, uint64_t seed, Dropout drop) {
    if (B * T == 0 || C == 0) return;
    if (!kernels_baseline_cuda() && rows_vec4(C, dy, dout, NULL)) {
        new_launches++;
        SG_LAUNCH(dropout_backward_vec_kernel, B * T, quad_threads(C), 0, dy, dout, T, t0, C, g0,
                  seed, drop);
    } else {
        SG_LAUNCH(dropout_backward_kernel, B * T, quad_threads(C), 0, dy, dout, T, t0, C, g0, seed,
                  drop);
    }
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

void rope_forward_fp16_cuda(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int HD, int layout, int pos0) {
    rope_rotate_cuda((sg_h16*)qkv, cos, sin, B, T, NH, NKV, HD, layout, pos0, 1.0f);
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

/* ---- the classifier's cross-entropy under bf16 operands, in one pass ---------------------- */
/* Row n of the chunk, one block: the logits l[0, V) read once for an online max and sum of
 * exponentials (fp32, __expf; each thread over its own 8-element pieces, then the threads'
 * (max, sum) pairs combined in a fixed butterfly and warp order), the loss
 * (maxv - l[target]) + log(sum), then dlogits = dloss (softmax - onehot) rounded once to bf16,
 * +0 on [V, Vp), written over the logits' own memory: the row's Vp bf16 values at the start of its
 * fp32 row (model/backend.h, crossentropy_forward_backward_act), where the classifier's backward
 * product reads them. The second pass reads the row again (from L2: a block's row was read just
 * before) a piece of 8 elements a thread at a time; its bf16 writes for piece k land on the fp32
 * elements [k S / 2, (k + 1) S / 2) (S = 8 threads), which the block has read by then, so a
 * barrier between each piece's reads and its writes is all the order there is to keep.
 * fp32 exponentials move bits against the fp32 kernels above (double): docs/cuda.md gives the
 * bound test_cuda_bf16_ops holds them to. */
static __device__ inline void ms_combine(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    float a = m == -INFINITY ? 0.0f : s * __expf(m - mm);
    float b = m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - mm);
    m = mm;
    s = a + b;   /* the same bits whichever side is which */
}

__global__ void crossentropy_bf16_kernel(float* losses, float* logits, const int* targets, float dloss,
                                         int V, int Vp) {
    SG_SHARED(float, red_m, 32);
    SG_SHARED(float, red_s, 32);
    int n = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    float* l = logits + (size_t)n * Vp;
    const int S = 8 * blockDim.x;   /* elements a piece */
    float m = -INFINITY, s = 0.0f;
    for (int p0 = 0; p0 < V; p0 += S) {
        int v0 = p0 + 8 * tid;
        if (v0 >= V) continue;
        float x[8];
        ld_f4(l + v0, x);
        ld_f4(l + v0 + 4, x + 4);
        #pragma unroll
        for (int w = 0; w < 8; w++) {
            if (v0 + w >= V) break;
            if (x[w] > m) {
                s = s * __expf(m - x[w]) + 1.0f;
                m = x[w];
            } else {
                s += __expf(x[w] - m);
            }
        }
    }
    for (int off = 16; off > 0; off >>= 1)
        ms_combine(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    int nwarps = blockDim.x / 32;
    if (warp == 0) {
        m = lane < nwarps ? red_m[lane] : -INFINITY;
        s = lane < nwarps ? red_s[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1)
            ms_combine(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) { red_m[0] = m; red_s[0] = s; }
    }
    __syncthreads();
    const float maxv = red_m[0], sum = red_s[0], inv = 1.0f / sum;
    const int target = targets[n];
    if (tid == 0 && losses != NULL) losses[n] = (maxv - l[target]) + logf(sum);   /* before any write */
    uint16_t* d = (uint16_t*)l;   /* the row's bf16 dlogits, over its first 2 Vp bytes */
    for (int p0 = 0; p0 < Vp; p0 += S) {
        int v0 = p0 + 8 * tid;
        float g[8];
        if (v0 < Vp) {
            float x[8];
            ld_f4(l + v0, x);
            ld_f4(l + v0 + 4, x + 4);
            #pragma unroll
            for (int w = 0; w < 8; w++) {
                int v = v0 + w;
                float pr = __expf(x[w] - maxv) * inv;
                /* the target's (p - 1) dloss as one expression, as the CPU's */
                g[w] = v >= V ? 0.0f : (v == target ? (pr - 1.0f) * dloss : pr * dloss);
            }
        }
        __syncthreads();   /* every read of this piece (and of the row before it) is done */
        if (v0 < Vp) act_store16(d, v0, g);
    }
}

/* the baseline's dlogits (fp32, in place) moved into the bf16 form above: the rounding pass the
 * product made before, one block a row, in pieces ordered as above */
__global__ void dlogits_to_bf16_kernel(float* logits, int Vp) {
    float* l = logits + (size_t)blockIdx.x * Vp;
    uint16_t* d = (uint16_t*)l;
    for (int v0 = 0; v0 < Vp; v0 += blockDim.x) {
        int v = v0 + threadIdx.x;
        float x = v < Vp ? l[v] : 0.0f;
        __syncthreads();
        if (v < Vp) act_store(d, v, x);
    }
}

void crossentropy_forward_backward_bf16_cuda(float* losses, float* logits, const int* targets,
                                             float dloss, int N, int V, int Vp) {
    if (N == 0) return;
    if (Vp % 8 != 0 || !aligned16(logits)) {
        fprintf(stderr, "seedgpt: crossentropy_forward_backward_bf16_cuda: the padded vocabulary (%d) must be a "
                "multiple of 8 and the logits 16-byte aligned\n", Vp);
        exit(1);
    }
    if (kernels_baseline_cuda()) {   /* the two fp32 kernels, then the product's rounding pass */
        crossentropy_forward_cuda(losses, logits, targets, N, V, Vp);
        crossentropy_backward_cuda(logits, targets, dloss, N, V, Vp);
        SG_LAUNCH(dlogits_to_bf16_kernel, N, 256, 0, logits, Vp);
        SG_CHECK_LAUNCH();
        return;
    }
    unsigned t = 32;   /* a power of two, 8 elements a thread a piece, at most 1024 threads */
    while (t < 1024 && (size_t)t * 8 < (size_t)Vp) t *= 2;
    new_launches++;
    SG_LAUNCH(crossentropy_bf16_kernel, N, t, 0, losses, logits, targets, dloss, V, Vp);
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

void sum_squares_blocks_cuda(double* out, const float* x, size_t n) {
    if (n == 0) return;
    size_t nblocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double* partial = (double*)ops_scratch(sizeof(double) * nblocks);
    SG_LAUNCH(sum_squares_partials_kernel, (unsigned)nblocks, NORM_THREADS, 0, partial, x, n);
    SG_CHECK_LAUNCH();
    device_to_host_cuda(out, partial, sizeof(double) * nblocks);
}

double sum_partials_cuda(const double* partials, size_t n) {
    if (n == 0) return 0.0;
    double* partial = (double*)ops_scratch(sizeof(double) * (n + 1));
    double* total = partial + n;
    device_to_backend_cuda(partial, partials, sizeof(double) * n);
    SG_LAUNCH(sum_squares_finish_kernel, 1, NORM_THREADS, 0, total, partial, n);
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

/* ---- every parameter tensor in one call -------------------------------------------------- */

/* The tensors of one call, passed by value: tensor k is [off[k], off[k] + size[k]) of the
 * parameter block; its first quad (4 elements) is number q0[k] of the call's quads, q0[n] the
 * total; wd[k] its weight decay. */
#define TENSORS_MAX 32
typedef struct {
    int n;
    unsigned long long off[TENSORS_MAX], size[TENSORS_MAX], q0[TENSORS_MAX + 1];
    float wd[TENSORS_MAX];
} TensorList;

/* the list of tensors first .. first + n - 1 (n <= TENSORS_MAX), each cut in quads */
static TensorList tensor_list(int n, const size_t* off, const size_t* size, const float* wd) {
    TensorList l;
    memset(&l, 0, sizeof l);
    l.n = n;
    unsigned long long q = 0;
    for (int k = 0; k < n; k++) {
        l.off[k] = off[k];
        l.size[k] = size[k];
        l.wd[k] = wd != NULL ? wd[k] : 0.0f;
        l.q0[k] = q;
        q += (size[k] + 3) / 4;
    }
    l.q0[n] = q;
    return l;
}

/* the tensor whose quads hold quad j (j < q0[n]) */
static __device__ inline int tensor_of_quad(const TensorList& l, unsigned long long j) {
    int k = 0;
    while (k + 1 < l.n && j >= l.q0[k + 1]) k++;
    return k;
}

/* AdamW over every tensor of the list, a quad of elements a thread (16-byte accesses; the quad
 * past a tensor's end only where its elements are), each element adamw_kernel's arithmetic, and
 * with act != NULL the updated parameter rounded once into the bf16 operand copy (what
 * round_to_bf16 writes after the update). */
__global__ void adamw_tensors_kernel(float* params, uint16_t* act, const float* grads,
                                     float grad_scale, float* m, float* v, TensorList l, float lr,
                                     float beta1, float beta2, float eps, float bc1, float bc2) {
    for (unsigned long long j = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         j < l.q0[l.n]; j += (unsigned long long)gridDim.x * blockDim.x) {
        int k = tensor_of_quad(l, j);
        size_t i = l.off[k] + 4 * (j - l.q0[k]);
        size_t end = l.off[k] + l.size[k];
        float wd = l.wd[k];
        if (i + 4 <= end) {
            float p[4], g[4], mm[4], vv[4];
            ld_f4(params + i, p);
            ld_f4(grads + i, g);
            ld_f4(m + i, mm);
            ld_f4(v + i, vv);
            #pragma unroll
            for (int w = 0; w < 4; w++)
                adamw_element(&p[w], g[w] * grad_scale, &mm[w], &vv[w], lr, beta1, beta2, eps, wd,
                              bc1, bc2);
            st_f4(params + i, p);
            st_f4(m + i, mm);
            st_f4(v + i, vv);
            if (act != NULL) bf16_store4(act, i, p);
        } else {
            for (size_t e = i; e < end; e++) {
                adamw_element(&params[e], grads[e] * grad_scale, &m[e], &v[e], lr, beta1, beta2,
                              eps, wd, bc1, bc2);
                if (act != NULL) act_store(act, e, params[e]);
            }
        }
    }
}

void adamw_update_tensors_cuda(float* params, void* params_act, const float* grads,
                               float grad_scale, float* m, float* v, int ntensors,
                               const size_t* offset, const size_t* size, const float* wd, float lr,
                               float beta1, float beta2, float eps, int t) {
    int vec = !kernels_baseline_cuda() && aligned16(params) && aligned16(grads) && aligned16(m) &&
              aligned16(v) && (params_act == NULL || ((uintptr_t)params_act & 7u) == 0);
    for (int k = 0; k < ntensors; k++) vec = vec && offset[k] % 4 == 0;
    if (!vec) {   /* tensor by tensor, then the operand copy (the baseline's calls) */
        for (int k = 0; k < ntensors; k++)
            adamw_update_cuda(params + offset[k], grads + offset[k], grad_scale, m + offset[k],
                              v + offset[k], size[k], lr, beta1, beta2, eps, wd[k], t);
        if (params_act != NULL)
            for (int k = 0; k < ntensors; k++)
                round_to_bf16_cuda((uint16_t*)params_act + offset[k], params + offset[k], size[k]);
        return;
    }
    float bc1 = 1.0f - powf(beta1, (float)t);   /* as adamw_update_cuda */
    float bc2 = 1.0f - powf(beta2, (float)t);
    for (int k0 = 0; k0 < ntensors; k0 += TENSORS_MAX) {
        int n = ntensors - k0 < TENSORS_MAX ? ntensors - k0 : TENSORS_MAX;
        TensorList l = tensor_list(n, offset + k0, size + k0, wd + k0);
        if (l.q0[n] == 0) continue;
        new_launches++;
        SG_LAUNCH(adamw_tensors_kernel, ew_blocks(l.q0[n]), EW_THREADS, 0, params,
                  (uint16_t*)params_act, grads, grad_scale, m, v, l, lr, beta1, beta2, eps, bc1, bc2);
        SG_CHECK_LAUNCH();
    }
}

/* sum_squares_cuda over every tensor of the list in two launches and one copy: block b of the
 * first pass is block b - bstart[k] of tensor k (its NORM_BLOCK elements, the same sum as
 * sum_squares_partials_kernel's); the second pass sums tensor k's partials with
 * sum_squares_finish_kernel's strides and tree, one block a tensor. The blocks of the tensors are
 * counted in q0 here (in blocks, not quads). */
__global__ void sum_squares_tensors_partials_kernel(double* partial, const float* base, TensorList l) {
    SG_SHARED(double, red, NORM_THREADS);
    int k = tensor_of_quad(l, blockIdx.x);
    const float* x = base + l.off[k];
    size_t n = l.size[k];
    size_t i0 = (size_t)(blockIdx.x - l.q0[k]) * NORM_BLOCK;
    size_t i1 = i0 + NORM_BLOCK < n ? i0 + NORM_BLOCK : n;
    double acc = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    double s = block_sum_double(acc, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_tensors_finish_kernel(double* total, const double* partial, TensorList l) {
    SG_SHARED(double, red, NORM_THREADS);
    int k = blockIdx.x;
    const double* p = partial + l.q0[k];
    size_t nblocks = l.q0[k + 1] - l.q0[k];
    double acc = 0.0;
    for (size_t b = threadIdx.x; b < nblocks; b += blockDim.x) acc += p[b];
    double s = block_sum_double(acc, red);
    if (threadIdx.x == 0) total[k] = s;
}

void sum_squares_tensors_cuda(double* out, const float* x, int ntensors, const size_t* offset,
                              const size_t* size) {
    if (kernels_baseline_cuda()) {
        for (int k = 0; k < ntensors; k++) out[k] = sum_squares_cuda(x + offset[k], size[k]);
        return;
    }
    for (int k0 = 0; k0 < ntensors; k0 += TENSORS_MAX) {
        int n = ntensors - k0 < TENSORS_MAX ? ntensors - k0 : TENSORS_MAX;
        TensorList l = tensor_list(n, offset + k0, size + k0, NULL);
        unsigned long long b = 0;   /* q0 in blocks of NORM_BLOCK elements */
        for (int k = 0; k < n; k++) {
            l.q0[k] = b;
            b += (size[k0 + k] + NORM_BLOCK - 1) / NORM_BLOCK;
        }
        l.q0[n] = b;
        double* partial = (double*)ops_scratch(sizeof(double) * (b + TENSORS_MAX));
        double* total = partial + b;
        if (b > 0) {
            SG_LAUNCH(sum_squares_tensors_partials_kernel, (unsigned)b, NORM_THREADS, 0, partial, x, l);
            SG_CHECK_LAUNCH();
        }
        new_launches++;
        SG_LAUNCH(sum_squares_tensors_finish_kernel, (unsigned)n, NORM_THREADS, 0, total, partial, l);
        SG_CHECK_LAUNCH();
        device_to_host_cuda(out + k0, total, sizeof(double) * n);
    }
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
    need = max_size(need, sizeof(double) * (nblocks + 1));
    /* sum_squares_tensors: every tensor's blocks (at most one more each than the whole count's
     * share), then the totals */
    const size_t all = k->all_parameters / NORM_BLOCK + (size_t)k->n_tensors + TENSORS_MAX;
    return max_size(need, sizeof(double) * all);
}

void ops_reserve_scratch_cuda(const OpCalls* k) { (void)ops_scratch(ops_scratch_bytes_cuda(k)); }
