/* cuda/device_memory.cu — the CUDA backend's memory (declared in cuda/device_memory.h): counted
 * allocations (zeroed, 256-byte aligned as cudaMalloc gives them), copies between host and device,
 * fill, the bitwise comparison of the recompute value check, and synchronisation.
 *
 * The counting mirrors model/mem.c: live bytes are the requested sizes of the blocks not yet
 * freed, and the peak is their high-water mark (what the step JSON reports). A host-side table
 * remembers each block's size; the backend holds a handful of blocks (one arena per model and
 * the ops' scratch), so a linear table is enough.
 */
#include "cuda/device.h"
#include <stdint.h>
#include <string.h>
#include "cuda/device_memory.h"

typedef struct {
    void* ptr;
    size_t bytes;
} DeviceBlock;

static DeviceBlock* blocks = NULL;
static size_t n_blocks = 0, cap_blocks = 0;
static size_t live_bytes = 0, peak_bytes = 0;

void* device_alloc_cuda(size_t bytes) {
    void* p = NULL;
    size_t request = bytes > 0 ? bytes : 1;   /* a distinct, freeable pointer even for 0 bytes */
    cudaError_t err = cudaMalloc(&p, request);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();   /* clear the sticky error of the failed allocation */
        cudaMemGetInfo(&free_b, &total_b);
        fprintf(stderr, "seedgpt: cannot allocate %zu bytes on the GPU (%zu of %zu bytes free): %s\n",
                bytes, free_b, total_b, cudaGetErrorString(err));
        exit(1);
    }
    SG_CHECK(cudaMemset(p, 0, request));
    if (n_blocks == cap_blocks) {
        size_t cap = cap_blocks ? 2 * cap_blocks : 16;
        DeviceBlock* t = (DeviceBlock*)realloc(blocks, cap * sizeof(DeviceBlock));
        if (t == NULL) {
            fprintf(stderr, "seedgpt: out of host memory for the GPU allocation table\n");
            exit(1);
        }
        blocks = t;
        cap_blocks = cap;
    }
    blocks[n_blocks].ptr = p;
    blocks[n_blocks].bytes = bytes;
    n_blocks++;
    live_bytes += bytes;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    return p;
}

void device_free_cuda(void* p) {
    if (p == NULL) return;
    for (size_t i = 0; i < n_blocks; i++) {
        if (blocks[i].ptr == p) {
            live_bytes -= blocks[i].bytes;
            blocks[i] = blocks[n_blocks - 1];
            n_blocks--;
            SG_CHECK(cudaFree(p));
            return;
        }
    }
    fprintf(stderr, "seedgpt: device_free_cuda: %p was not allocated by device_alloc_cuda\n", p);
    exit(1);
}

void device_to_backend_cuda(void* dst, const void* host_src, size_t bytes) {
    if (bytes == 0) return;
    SG_CHECK(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice));
}

void device_to_host_cuda(void* host_dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    SG_CHECK(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost));
}

#define FILL_THREADS 256
#define MAX_BLOCKS 1024

static unsigned grid_for(size_t n) {
    unsigned b = sg_ceil_div(n, FILL_THREADS);
    return b < MAX_BLOCKS ? b : MAX_BLOCKS;
}

__global__ void fill_kernel(float* x, size_t n, float value) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        x[i] = value;
    }
}

void device_fill_cuda(float* x, size_t n, float value) {
    if (n == 0) return;
    SG_LAUNCH(fill_kernel, grid_for(n), FILL_THREADS, 0, x, n, value);
    SG_CHECK_LAUNCH();
}

/* per block: how many elements of its grid-stride share differ in their bits (NaN == NaN when
 * the bits agree, +0 != -0); the host adds the blocks' counts. Integers only, so the count is
 * exact and needs no atomics. */
__global__ void count_differ_kernel(unsigned* counts, const float* a, const float* b, size_t n) {
    SG_SHARED(unsigned, red, FILL_THREADS);
    unsigned k = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        k += __float_as_uint(a[i]) != __float_as_uint(b[i]);
    }
    int tid = threadIdx.x;
    red[tid] = k;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    if (tid == 0) counts[blockIdx.x] = red[0];
}

static unsigned* differ_counts = NULL;   /* MAX_BLOCKS counts: reserved by a build, else at first use */

size_t device_differ_scratch_bytes_cuda(void) { return MAX_BLOCKS * sizeof(unsigned); }

void device_reserve_differ_cuda(void) {
    if (differ_counts == NULL) differ_counts = (unsigned*)device_alloc_cuda(device_differ_scratch_bytes_cuda());
}

size_t device_count_differ_cuda(const float* a, const float* b, size_t n) {
    if (n == 0) return 0;
    device_reserve_differ_cuda();
    unsigned nb = grid_for(n);
    SG_LAUNCH(count_differ_kernel, nb, FILL_THREADS, 0, differ_counts, a, b, n);
    SG_CHECK_LAUNCH();
    unsigned h[MAX_BLOCKS];
    device_to_host_cuda(h, differ_counts, nb * sizeof(unsigned));
    size_t total = 0;
    for (unsigned i = 0; i < nb; i++) total += h[i];
    return total;
}

size_t device_peak_bytes_cuda(void) { return peak_bytes; }
size_t device_live_bytes_cuda(void) { return live_bytes; }

void device_synchronize_cuda(void) { SG_CHECK(cudaDeviceSynchronize()); }
