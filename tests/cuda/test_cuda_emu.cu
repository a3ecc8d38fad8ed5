/* tests/cuda/test_cuda_emu.cu — the CUDA subset of cuda/device.h, as the kernels see it:
 * barriers and shared memory (block reductions over many blocks), every warp shuffle and vote
 * against values worked out independently on the host, integer atomics, launch validation, device
 * memory and cuBLAS's strided-batched GEMM.
 * In the emulation (make test-cuda-emu) it also checks what only the emulation can promise: a
 * divergent barrier, a bad warp mask or a tensor-core instruction called by part of a warp is
 * reported with the kernel's name (each such kernel runs in a child process, this binary re-run
 * with --case NAME), shared and device memory start poisoned, unknown frees are refused; and in
 * the ThreadSanitizer build (make test-cuda-emu-tsan) that a cross-block race and a missing
 * barrier are caught. With nvcc the same file runs the portable checks on a GPU and reports the
 * emulation-only ones as SKIP.
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "cuda/mma.h"
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TSAN_BUILD 1
#else
#define TSAN_BUILD 0
#endif

#define FULL 0xffffffffu

/* ---- kernels -------------------------------------------------------------------------------- */

/* out[b] = sum of x over block b's 256-element chunk (tree in static shared memory) */
__global__ void block_sum_static(int* out, const int* x, int n) {
    SG_SHARED(int, buf, 256);
    int i = blockIdx.x * 256 + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}

/* the same in dynamic shared memory, blockDim.x a power of two, 2-D grid */
__global__ void block_sum_dynamic(int* out, const int* x, int n) {
    SG_DYN_SHARED(int, buf);
    int b = blockIdx.y * gridDim.x + blockIdx.x;
    int i = b * blockDim.x + threadIdx.x;
    buf[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[b] = buf[0];
}

/* the usual block sum: each warp reduces with shuffles right after a barrier, warp totals meet in
 * shared memory; blockDim.x a multiple of 32 */
__global__ void block_sum_warps(int* out, const int* x, int n) {
    SG_SHARED(int, part, 32);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (threadIdx.x < 32) part[threadIdx.x] = 0;
    __syncthreads();
    int v = i < n ? x[i] : 0;
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(FULL, v, m);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = part[lane];
        for (int m = 16; m > 0; m >>= 1) v += __shfl_down_sync(FULL, v, m);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

#ifdef SG_EMU
static int no_params_ran = 0;
#else
__device__ int no_params_ran = 0;
#endif

/* every thread of a 3-D grid of 3-D blocks writes its flat global id once */
__global__ void write_ids(int* out, int* hits) {
    int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int g = bid * blockDim.x * blockDim.y * blockDim.z + tid;
    out[g] = g;
    atomicAdd(&hits[g], 1);
}

/* what a thread reads from shared memory it has not written (then it writes it) */
__global__ void read_smem_first(unsigned* out_static, unsigned* out_dyn) {
    SG_SHARED(float, s, 64);
    SG_DYN_SHARED(float, d);
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    out_static[g] = __float_as_uint(s[threadIdx.x]);
    out_dyn[g] = __float_as_uint(d[threadIdx.x]);
    __syncthreads();
    s[threadIdx.x] = 1.0f;
    d[threadIdx.x] = 2.0f;
}

#define NSHFL 13
/* warp collectives over 2 warps; out[(w*32 + lane) * NSHFL + k] for collective k */
__global__ void shuffles(int* out, float* fout) {
    int t = threadIdx.x, lane = t & 31;
    int v = 1 + 3 * t + 100 * (t >> 5);
    int* o = out + t * NSHFL;
    o[0] = __shfl_sync(FULL, v, (lane * 7) % 32);
    o[1] = __shfl_xor_sync(FULL, v, 5);
    o[2] = __shfl_down_sync(FULL, v, 3);
    o[3] = __shfl_up_sync(FULL, v, 3);
    o[4] = __shfl_sync(FULL, v, 3, 8);
    o[5] = __shfl_down_sync(FULL, v, 2, 8);
    o[6] = __shfl_up_sync(FULL, v, 5, 16);
    o[7] = __shfl_xor_sync(FULL, v, 1, 16);
    o[8] = (int)__ballot_sync(FULL, lane % 3 == 0);
    o[9] = __all_sync(FULL, v > 0);
    o[10] = __all_sync(FULL, lane != 7);
    o[11] = __any_sync(FULL, lane == 17 && t < 32);
    /* two half-warps at once, each with its own mask */
    unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    o[12] = __shfl_sync(half, v, 15 - (lane & 15), 16);
    __syncwarp(FULL);
    __syncwarp();   /* the default mask: the full warp */
    /* a float butterfly sum: every lane ends with the warp's total */
    float f = 0.25f * (float)(t + 1);
    for (int m = 16; m > 0; m >>= 1) f += __shfl_xor_sync(FULL, f, m);
    fout[t] = f;
}

/* lanes of a partial mask read a lane outside it: undefined on a GPU, the poison here */
__global__ void shuffle_outside_mask(int* out) {
    int lane = threadIdx.x & 31;
    if (lane < 8) out[lane] = __shfl_down_sync(0xffu, lane + 1, 4);
}

__global__ void atomics(int* count, unsigned* umax, int* cas_sum, unsigned* wrap) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(count, 1);
    atomicMax(umax, (unsigned)g * 2654435761u);
    int old = 0, seen;   /* a guess: the loop corrects it */
    while ((seen = atomicCAS(cas_sum, old, old + g)) != old) old = seen;
    atomicAdd(wrap, 0x40000000u);
}

__global__ void touch_all_smem(int* flag, int bytes) {
    SG_DYN_SHARED(unsigned char, s);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) s[i] = (unsigned char)i;
    __syncthreads();
    if (threadIdx.x == 0) {
        int ok = 1;
        for (int i = 0; i < bytes; i++) ok &= s[i] == (unsigned char)i;
        *flag = ok ? 1 : -1;
    }
}

/* a kernel without parameters */
__global__ void no_params(void) {
    if (threadIdx.x == 0 && blockIdx.x == 0) no_params_ran = 1;
}

/* ---- kernels that must fail (run in a child process) ---------------------------------------- */
__global__ void barrier_after_early_exit(int* x) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    x[threadIdx.x] = 1;
}

__global__ void barrier_at_two_sites(int* x) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1;
}

__global__ void mask_without_caller(int* x) {
    unsigned mask = threadIdx.x < 16 ? FULL : 0x0000ffffu;
    x[threadIdx.x] = __shfl_sync(mask, (int)threadIdx.x, 0);
}

__global__ void mismatched_masks(int* x) {
    /* the upper half's mask names lane 0, which is in the full-warp group: neither can meet */
    unsigned mask = threadIdx.x < 16 ? FULL : 0xffff0001u;
    x[threadIdx.x] = __shfl_xor_sync(mask, (int)threadIdx.x, 1);
}

__global__ void shuffle_with_exited_lane(int* x) {
    if (threadIdx.x == 31) return;
    x[threadIdx.x] = __shfl_sync(FULL, (int)threadIdx.x, 0);
}

/* the tensor-core wrapper is a warp collective: a block of 16 threads is half a warp */
__global__ void mma_in_half_warp(float* x) {
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    sg_mma_m16n8k16_bf16_f32(d, a, b, c);
    x[threadIdx.x] = d[0];
}

/* ... and a lane that has left cannot take part */
__global__ void mma_with_exited_lane(float* x) {
    if (threadIdx.x == 3) return;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0}, d[4];
    sg_mma_m16n8k16_bf16_f32(d, a, b, c);
    x[threadIdx.x] = d[0];
}

/* The tensor-core attention's pattern (attention/flash_tc.cu): the lanes of a warp branch on their
 * own data, meet at __syncwarp(), then run an mma, which needs the whole warp. Here each lane
 * prepares the A fragment words of lane 31 - lane with a data-dependent amount of work, leaves
 * them in shared memory, and after __syncwarp() reads its own from there: the barrier must order the
 * lanes' shared memory (ThreadSanitizer checks it in the TSan build) as well as bring them
 * together for the mma. wa: 4 words per thread; bt: the B fragments, 2 per thread; D: 4 per
 * thread, c = 0. */
/* a lane's data-dependent work: lanes with w0 odd swap the halves of w1, (w2 & 7) times */
static __host__ __device__ uint32_t lane_work(uint32_t w0, uint32_t w1, uint32_t w2) {
    if (w0 & 1u)
        for (uint32_t k = 0; k < (w2 & 7u); k++) w1 = w1 << 16 | w1 >> 16;
    return w1;
}

__global__ void diverge_syncwarp_mma(float* D, const uint32_t* wa, const uint32_t* bt) {
    SG_SHARED(uint32_t, frag, 64 * 4);
    const int t = threadIdx.x, lane = t & 31, mirror = (t & ~31) + 31 - lane;
    uint32_t w[4];
    for (int i = 0; i < 4; i++) w[i] = wa[4 * mirror + i];
    w[1] = lane_work(w[0], w[1], w[2]);
    for (int i = 0; i < 4; i++) frag[4 * mirror + i] = w[i];   /* for lane `mirror` */
    __syncwarp();
    uint32_t a[4], b[2] = {bt[2 * t], bt[2 * t + 1]};
    for (int i = 0; i < 4; i++) a[i] = frag[4 * t + i];
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4];
    sg_mma_m16n8k16_bf16_f32(d, a, b, c);
    for (int i = 0; i < 4; i++) D[4 * t + i] = d[i];
}

/* the same exchange without the __syncwarp: lanes read words other lanes write (a race) */
__global__ void missing_syncwarp(int* out) {
    SG_SHARED(int, s, 32);
    s[31 - threadIdx.x] = (int)threadIdx.x;
    out[threadIdx.x] = s[threadIdx.x];
}

/* a lane that has left the kernel never reaches the __syncwarp the others wait at */
__global__ void syncwarp_with_exited_lane(int* x) {
    if (threadIdx.x == 5) return;
    x[threadIdx.x] = 1;
    __syncwarp();
    x[threadIdx.x] = 2;
}

/* every block adds into x[0] without an atomic: a cross-block race */
__global__ void cross_block_race(int* x) {
    if (threadIdx.x == 0) x[0] += 1;
}

/* thread 0 reads what thread 1 wrote to shared memory with no barrier between */
__global__ void missing_barrier(int* out) {
    SG_SHARED(int, s, 32);
    s[threadIdx.x] = (int)threadIdx.x;
    if (threadIdx.x == 0) out[0] = s[1];
}

static int run_case(const char* name) {
    int* d;
    SG_CHECK(cudaMalloc((void**)&d, 4096));
    if (!strcmp(name, "barrier_after_early_exit")) SG_LAUNCH(barrier_after_early_exit, 1, 64, 0, d);
    else if (!strcmp(name, "barrier_at_two_sites")) SG_LAUNCH(barrier_at_two_sites, 2, 64, 0, d);
    else if (!strcmp(name, "mask_without_caller")) SG_LAUNCH(mask_without_caller, 1, 32, 0, d);
    else if (!strcmp(name, "mismatched_masks")) SG_LAUNCH(mismatched_masks, 1, 32, 0, d);
    else if (!strcmp(name, "shuffle_with_exited_lane")) SG_LAUNCH(shuffle_with_exited_lane, 1, 32, 0, d);
    else if (!strcmp(name, "mma_in_half_warp")) SG_LAUNCH(mma_in_half_warp, 1, 16, 0, (float*)d);
    else if (!strcmp(name, "mma_with_exited_lane")) SG_LAUNCH(mma_with_exited_lane, 1, 32, 0, (float*)d);
    else if (!strcmp(name, "cross_block_race")) SG_LAUNCH(cross_block_race, 8, 32, 0, d);
    else if (!strcmp(name, "missing_barrier")) SG_LAUNCH(missing_barrier, 1, 32, 0, d);
    else if (!strcmp(name, "missing_syncwarp")) SG_LAUNCH(missing_syncwarp, 1, 32, 0, d);
    else if (!strcmp(name, "syncwarp_with_exited_lane")) SG_LAUNCH(syncwarp_with_exited_lane, 1, 32, 0, d);
    else {
        fprintf(stderr, "test_cuda_emu: --case %s: no such case\n", name);
        return 2;
    }
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaDeviceSynchronize());
    SG_CHECK(cudaFree(d));
    return 0;
}

#ifdef SG_EMU
/* re-runs this binary with --case NAME; returns its exit status, its stderr in err */
static int run_child(const char* name, const char* concurrent, char* err, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (concurrent) setenv("SG_EMU_CONCURRENT_BLOCKS", concurrent, 1);
        execl("/proc/self/exe", "test_cuda_emu", "--case", name, (char*)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    char sink[4096];
    while ((r = read(fds[0], n + 1 < cap ? err + n : sink, n + 1 < cap ? cap - 1 - n : sizeof(sink))) > 0)
        if (n + 1 < cap) n += (size_t)r;
    err[n] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void first_line(const char* s, char* out, size_t cap) {
    size_t i = 0;
    while (s[i] && s[i] != '\n' && i + 1 < cap) { out[i] = s[i]; i++; }
    out[i] = 0;
}

/* the child fails with status 1 and one line naming the kernel and the fault */
static void expect_fault(const char* kernel, const char* words) {
    char err[8192], line[600], name[128];
    int st = run_child(kernel, NULL, err, sizeof(err));
    first_line(err, line, sizeof(line));
    int named = strstr(line, kernel) != NULL && strstr(line, words) != NULL;
    int one_line = strchr(err, '\n') == err + strlen(line);
    snprintf(name, sizeof(name), "%s_is_reported", kernel);
    expect(st == 1 && named && one_line, name, "exit status %d, stderr \"%s\"%s", st, line,
           one_line ? "" : " (and more lines)");
}
#endif

#if defined(__SANITIZE_THREAD__)
static void expect_tsan_race(const char* kernel) {
    char err[65536], name[128];
    int st = run_child(kernel, "2", err, sizeof(err));
    int race = strstr(err, "ThreadSanitizer: data race") != NULL;
    const char* where = strstr(err, kernel);
    snprintf(name, sizeof(name), "tsan_reports_%s", kernel);
    expect(race && where && st != 0, name, "exit status %d, %s, %s", st,
           race ? "a data race reported" : "NO data race reported",
           where ? "the kernel in the report" : "the kernel NOT in the report");
}
#endif

/* ---- checks --------------------------------------------------------------------------------- */
static int* to_device_int(const int* h, size_t n) {
    int* d;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(int)));
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

static void check_block_reductions(const char* label) {
    const int n = 37 * 256 - 11;
    int* x = (int*)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) x[i] = (int)(test_uniform() * 2001) - 1000;
    int* dx = to_device_int(x, n);
    int *dout, got[64];
    SG_CHECK(cudaMalloc((void**)&dout, 64 * sizeof(int)));
    /* static shared memory, 37 blocks of 256 */
    SG_LAUNCH(block_sum_static, 37, 256, 0, dout, dx, n);
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaMemcpy(got, dout, 37 * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0, first = -1;
    for (int b = 0; b < 37; b++) {
        long want = 0;
        for (int i = b * 256; i < (b + 1) * 256 && i < n; i++) want += x[i];
        if (got[b] != want) { bad++; if (first < 0) first = b; }
    }
    char name[128];
    snprintf(name, sizeof(name), "block_sum_static_shared_37x256_exact%s", label);
    expect(bad == 0, name, "%d of 37 block sums wrong (first: block %d)", bad, first);
    /* dynamic shared memory, a 2-D grid 5 x 3 of blocks of 128 */
    int nd = 15 * 128 - 5;
    SG_LAUNCH(block_sum_dynamic, dim3(5, 3), 128, 128 * sizeof(int), dout, dx, nd);
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaMemcpy(got, dout, 15 * sizeof(int), cudaMemcpyDeviceToHost));
    bad = 0; first = -1;
    for (int b = 0; b < 15; b++) {
        long want = 0;
        for (int i = b * 128; i < (b + 1) * 128 && i < nd; i++) want += x[i];
        if (got[b] != want) { bad++; if (first < 0) first = b; }
    }
    snprintf(name, sizeof(name), "block_sum_dynamic_shared_5x3_grid_exact%s", label);
    expect(bad == 0, name, "%d of 15 block sums wrong (first: block %d)", bad, first);
    /* warp shuffles between barriers, 29 blocks of 320 */
    int nw = 29 * 320 - 17;
    SG_LAUNCH(block_sum_warps, 29, 320, 0, dout, dx, nw);
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaMemcpy(got, dout, 29 * sizeof(int), cudaMemcpyDeviceToHost));
    bad = 0; first = -1;
    for (int b = 0; b < 29; b++) {
        long want = 0;
        for (int i = b * 320; i < (b + 1) * 320 && i < nw; i++) want += x[i];
        if (got[b] != want) { bad++; if (first < 0) first = b; }
    }
    snprintf(name, sizeof(name), "block_sum_warp_shuffles_between_barriers_exact%s", label);
    expect(bad == 0, name, "%d of 29 block sums wrong (first: block %d)", bad, first);
    SG_CHECK(cudaFree(dx)); SG_CHECK(cudaFree(dout));
    free(x);
}

static void check_index_coverage(void) {
    dim3 grid(3, 2, 2), block(8, 4, 2);
    int n = 12 * 64;
    int *dout, *dhits;
    SG_CHECK(cudaMalloc((void**)&dout, n * sizeof(int)));
    SG_CHECK(cudaMalloc((void**)&dhits, n * sizeof(int)));
    SG_CHECK(cudaMemset(dhits, 0, n * sizeof(int)));
    SG_LAUNCH(write_ids, grid, block, 0, dout, dhits);
    SG_CHECK_LAUNCH();
    int* out = (int*)malloc(n * sizeof(int));
    int* hits = (int*)malloc(n * sizeof(int));
    SG_CHECK(cudaMemcpy(out, dout, n * sizeof(int), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(hits, dhits, n * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += out[i] != i || hits[i] != 1;
    expect(bad == 0, "every_thread_of_3d_grid_and_block_runs_once", "%d of %d ids wrong", bad, n);
    SG_LAUNCH(no_params, 2, 32, 0);
    cudaError_t e = cudaGetLastError();
    SG_CHECK(cudaDeviceSynchronize());
#ifdef SG_EMU
    int ran = no_params_ran;
#else
    int ran = 1;   /* reading a __device__ variable takes cudaMemcpyFromSymbol, outside the subset */
#endif
    expect(e == cudaSuccess && ran, "kernel_without_parameters_launches", "cudaGetLastError \"%s\", %s",
           cudaGetErrorString(e), ran ? "ran" : "did NOT run");
    SG_CHECK(cudaFree(dout)); SG_CHECK(cudaFree(dhits));
    free(out); free(hits);
}

/* Events on the default stream, as the profiler uses them (cuda/profile_cuda.cu): the time from
 * a record before a launch to one after it is finite and not negative, and an event never
 * recorded is refused with cudaErrorInvalidResourceHandle, as CUDA does. */
static void check_events(void) {
    cudaEvent_t a, b, never;
    SG_CHECK(cudaEventCreate(&a));
    SG_CHECK(cudaEventCreate(&b));
    SG_CHECK(cudaEventCreate(&never));
    SG_CHECK(cudaEventRecord(a, 0));
    SG_LAUNCH(no_params, 4, 64, 0);
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaEventRecord(b, 0));
    SG_CHECK(cudaEventSynchronize(b));
    float ms = -1.0f, ms2 = 0.0f;
    SG_CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaError_t e = cudaEventElapsedTime(&ms2, a, never);
    cudaError_t cleared = cudaGetLastError();
    (void)cleared;
    expect(isfinite(ms) && ms >= 0 && e == cudaErrorInvalidResourceHandle && cudaGetLastError() == cudaSuccess,
           "events_time_a_launch_and_refuse_an_unrecorded_one",
           "%.4f ms around a launch; elapsed to a never-recorded event: \"%s\"", ms, cudaGetErrorString(e));
    SG_CHECK(cudaEventDestroy(a));
    SG_CHECK(cudaEventDestroy(b));
    SG_CHECK(cudaEventDestroy(never));
}

static void check_smem_poison(void) {
#ifndef SG_EMU
    skip("shared_memory_poisoned_at_every_block_start", "emulation only");
#else
    unsigned *ds, *dd, hs[192], hd[192];
    SG_CHECK(cudaMalloc((void**)&ds, sizeof(hs)));
    SG_CHECK(cudaMalloc((void**)&dd, sizeof(hd)));
    SG_LAUNCH(read_smem_first, 3, 64, 64 * sizeof(float), ds, dd);
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaMemcpy(hs, ds, sizeof(hs), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(hd, dd, sizeof(hd), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < 192; i++) bad += hs[i] != 0xffffffffu || hd[i] != 0xffffffffu;
    expect(bad == 0, "shared_memory_poisoned_at_every_block_start",
           "%d of 192 reads (3 blocks, static and dynamic) not the NaN pattern; block 2 read 0x%08x",
           bad, hs[128]);
    SG_CHECK(cudaFree(ds)); SG_CHECK(cudaFree(dd));
#endif
}

static void check_shuffles(void) {
    int *dout, out[64 * NSHFL];
    float *dfout, fout[64];
    SG_CHECK(cudaMalloc((void**)&dout, sizeof(out)));
    SG_CHECK(cudaMalloc((void**)&dfout, sizeof(fout)));
    SG_LAUNCH(shuffles, 1, 64, 0, dout, dfout);
    SG_CHECK_LAUNCH();
    SG_CHECK(cudaMemcpy(out, dout, sizeof(out), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(fout, dfout, sizeof(fout), cudaMemcpyDeviceToHost));
    static const char* names[NSHFL] = {
        "shfl_sync_index", "shfl_xor_sync_5", "shfl_down_sync_3", "shfl_up_sync_3",
        "shfl_sync_width8", "shfl_down_sync_width8", "shfl_up_sync_width16", "shfl_xor_sync_width16",
        "ballot_sync", "all_sync_true", "all_sync_false", "any_sync", "shfl_sync_two_half_warp_masks"};
    /* the expected values, written from the CUDA documentation's lane rules */
    for (int k = 0; k < NSHFL; k++) {
        int bad = 0, first = -1, fw = 0, fg = 0;
        for (int t = 0; t < 64; t++) {
            int lane = t % 32, w = t / 32;
            int base = 32 * w;
#define V(l) (1 + 3 * (base + (l)) + 100 * w)
            int want;
            switch (k) {
            case 0: want = V((lane * 7) % 32); break;
            case 1: want = V(lane ^ 5); break;
            case 2: want = lane + 3 <= 31 ? V(lane + 3) : V(lane); break;
            case 3: want = lane >= 3 ? V(lane - 3) : V(lane); break;
            case 4: want = V((lane / 8) * 8 + 3); break;
            case 5: want = lane % 8 + 2 < 8 ? V(lane + 2) : V(lane); break;
            case 6: want = lane % 16 >= 5 ? V(lane - 5) : V(lane); break;
            case 7: want = V(lane ^ 1); break;
            case 8: want = 0; for (int l = 0; l < 32; l += 3) want |= 1 << l; break;
            case 9: want = 1; break;
            case 10: want = 0; break;
            case 11: want = w == 0; break;
            default: want = V((lane / 16) * 16 + 15 - lane % 16); break;
            }
#undef V
            if (out[t * NSHFL + k] != want) {
                if (first < 0) { first = t; fw = want; fg = out[t * NSHFL + k]; }
                bad++;
            }
        }
        expect(bad == 0, names[k], "%d of 64 lanes wrong (first: thread %d want %d got %d)", bad,
               first, fw, fg);
    }
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        double want = 0;
        for (int l = 0; l < 32; l++) want += 0.25 * (32 * (t / 32) + l + 1);
        bad += fabs(fout[t] - want) > 1e-6 * want;
    }
    expect(bad == 0, "shfl_xor_butterfly_float_sum", "%d of 64 lanes off (lane 0: %.6f)", bad, fout[0]);
    if (EMU_ONLY) {
        int got[8];
        SG_LAUNCH(shuffle_outside_mask, 1, 32, 0, dout);
        SG_CHECK_LAUNCH();
        SG_CHECK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
        int ok = 1;
        for (int l = 0; l < 8; l++) ok &= got[l] == (l < 4 ? l + 5 : -1);
        expect(ok, "shfl_from_lane_outside_mask_reads_poison", "lanes 0..7 got %d %d %d %d %d %d %d %d "
               "(want 5 6 7 8 then -1)", got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7]);
    } else {
        skip("shfl_from_lane_outside_mask_reads_poison", "emulation only");
    }
    SG_CHECK(cudaFree(dout)); SG_CHECK(cudaFree(dfout));
}

/* lanes diverge on their data, meet at __syncwarp, exchange fragments through shared memory,
 * then run an mma: D equals sg_mma_m16n8k16_ref on the exchanged fragments, bit for bit in the
 * emulation (within sg_mma_tolerance on a GPU) */
static void check_diverge_syncwarp_mma(void) {
    const int nt = 64;
    uint32_t wa[64 * 4], bt[64 * 2];
    for (int i = 0; i < nt * 4; i++)
        wa[i] = (uint32_t)sg_bf16_from_float((float)(test_uniform() - 0.5)) |
                (uint32_t)sg_bf16_from_float((float)(test_uniform() - 0.5)) << 16;
    for (int i = 0; i < nt * 2; i++)
        bt[i] = (uint32_t)sg_bf16_from_float((float)(2 * test_uniform() - 1)) |
                (uint32_t)sg_bf16_from_float((float)(2 * test_uniform() - 1)) << 16;
    uint32_t *dwa, *dbt;
    float* dD;
    SG_CHECK(cudaMalloc((void**)&dwa, sizeof(wa)));
    SG_CHECK(cudaMalloc((void**)&dbt, sizeof(bt)));
    SG_CHECK(cudaMalloc((void**)&dD, nt * 4 * sizeof(float)));
    SG_CHECK(cudaMemcpy(dwa, wa, sizeof(wa), cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(dbt, bt, sizeof(bt), cudaMemcpyHostToDevice));
    SG_LAUNCH(diverge_syncwarp_mma, 1, nt, 0, dD, dwa, dbt);
    SG_CHECK_LAUNCH();
    float D[64 * 4];
    SG_CHECK(cudaMemcpy(D, dD, sizeof(D), cudaMemcpyDeviceToHost));
    int bad = 0;
    double worst = 0;
    for (int w = 0; w < 2; w++) {
        /* the matrices the warp's lanes hold after the exchange: lane l has its own words, w1
         * changed by lane_work (prepared by lane 31 - l) */
        uint16_t A[256], Bt[128];
        float C[128] = {0}, ref[128];
        for (int l = 0; l < 32; l++) {
            const uint32_t* own = &wa[4 * (32 * w + l)];
            const uint32_t a[4] = {own[0], lane_work(own[0], own[1], own[2]), own[2], own[3]};
            const uint32_t* b = &bt[2 * (32 * w + l)];
            for (int i = 0; i < 8; i++)
                A[sg_mma_a_row(l, i) * 16 + sg_mma_a_col(l, i)] = (uint16_t)(a[i / 2] >> (16 * (i & 1)));
            for (int i = 0; i < 4; i++)
                Bt[sg_mma_b_col(l, i) * 16 + sg_mma_b_row(l, i)] = (uint16_t)(b[i / 2] >> (16 * (i & 1)));
        }
        sg_mma_m16n8k16_ref(ref, A, Bt, C);
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                const int m = sg_mma_c_row(l, i), n = sg_mma_c_col(l, i);
                const float got = D[4 * (32 * w + l) + i], want = ref[m * 8 + n];
                double mag = 0;
                for (int k = 0; k < 16; k++)
                    mag += fabs((double)sg_bf16_to_float(A[m * 16 + k]) * sg_bf16_to_float(Bt[n * 16 + k]));
                const double q = fabs((double)got - want) / fmax(sg_mma_tolerance(16, mag), 1e-30);
                if (q > worst) worst = q;
                bad += EMU_ONLY ? memcmp(&got, &want, 4) != 0 : !(q <= 1.0);
            }
    }
    expect(bad == 0, "diverged_lanes_meet_at_syncwarp_then_mma", "2 warps, lanes branching on their data, "
           "fragments exchanged through shared memory across __syncwarp: %d of 256 elements of D off (%s; "
           "worst %.3g x sg_mma_tolerance)", bad, EMU_ONLY ? "bit for bit" : "within sg_mma_tolerance", worst);
    SG_CHECK(cudaFree(dwa)); SG_CHECK(cudaFree(dbt)); SG_CHECK(cudaFree(dD));
}

static void check_atomics(const char* label) {
    int *dcount, *dcas;
    unsigned *dmax, *dwrap;
    SG_CHECK(cudaMalloc((void**)&dcount, 4)); SG_CHECK(cudaMalloc((void**)&dcas, 4));
    SG_CHECK(cudaMalloc((void**)&dmax, 4)); SG_CHECK(cudaMalloc((void**)&dwrap, 4));
    SG_CHECK(cudaMemset(dcount, 0, 4)); SG_CHECK(cudaMemset(dcas, 0, 4));
    SG_CHECK(cudaMemset(dmax, 0, 4)); SG_CHECK(cudaMemset(dwrap, 0, 4));
    const int blocks = 24, threads = 96, n = blocks * threads;
    SG_LAUNCH(atomics, blocks, threads, 0, dcount, dmax, dcas, dwrap);
    SG_CHECK_LAUNCH();
    int count, cas;
    unsigned mx, wrap;
    SG_CHECK(cudaMemcpy(&count, dcount, 4, cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(&cas, dcas, 4, cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(&mx, dmax, 4, cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(&wrap, dwrap, 4, cudaMemcpyDeviceToHost));
    unsigned want_max = 0, want_wrap = 0;
    for (int g = 0; g < n; g++) {
        unsigned h = (unsigned)g * 2654435761u;
        if (h > want_max) want_max = h;
        want_wrap += 0x40000000u;
    }
    char name[128];
    snprintf(name, sizeof(name), "integer_atomics_exact%s", label);
    expect(count == n && cas == n * (n - 1) / 2 && mx == want_max && wrap == want_wrap, name,
           "atomicAdd %d (want %d), atomicCAS sum %d (want %d), atomicMax 0x%08x (want 0x%08x), "
           "unsigned wrap 0x%08x (want 0x%08x)", count, n, cas, n * (n - 1) / 2, mx, want_max, wrap, want_wrap);
    SG_CHECK(cudaFree(dcount)); SG_CHECK(cudaFree(dcas)); SG_CHECK(cudaFree(dmax)); SG_CHECK(cudaFree(dwrap));
}

static void check_launch_validation(void) {
    int* dflag;
    int flag;
    SG_CHECK(cudaMalloc((void**)&dflag, 4));
    (void)cudaGetLastError();
    struct { dim3 grid, block; const char* what; } bad[] = {
        {dim3(1), dim3(1025), "1025 threads"},
        {dim3(1), dim3(32, 33), "32x33 threads"},
        {dim3(1), dim3(1, 1, 65), "block z 65"},
        {dim3(1, 65536), dim3(32), "grid y 65536"},
        {dim3(0), dim3(32), "grid x 0"},
    };
    for (int i = 0; i < 5; i++) {
        SG_CHECK(cudaMemset(dflag, 0, 4));
        SG_LAUNCH(touch_all_smem, bad[i].grid, bad[i].block, 64, dflag, 64);
        cudaError_t e = cudaGetLastError(), after = cudaGetLastError();
        SG_CHECK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
        char name[128];
        snprintf(name, sizeof(name), "launch_of_%s_is_refused", bad[i].what);
        for (char* c = name; *c; c++) if (*c == ' ') *c = '_';
        expect(e != cudaSuccess && after == cudaSuccess && flag == 0, name,
               "cudaGetLastError: \"%s\", then \"%s\"; kernel %s", cudaGetErrorString(e),
               cudaGetErrorString(after), flag ? "RAN" : "did not run");
    }
    /* the device's grid limits, as cudaDeviceGetAttribute gives them to code that bounds its grids */
    int gx = 0, gy = 0, gz = 0;
    SG_CHECK(cudaDeviceGetAttribute(&gx, cudaDevAttrMaxGridDimX, 0));
    SG_CHECK(cudaDeviceGetAttribute(&gy, cudaDevAttrMaxGridDimY, 0));
    SG_CHECK(cudaDeviceGetAttribute(&gz, cudaDevAttrMaxGridDimZ, 0));
    expect(gx == 2147483647 && gy == 65535 && gz == 65535, "device_grid_limits_are_cudas",
           "cudaDeviceGetAttribute: max grid %d x %d x %d (want 2^31-1 x 65535 x 65535)", gx, gy, gz);
    if (EMU_ONLY) {
        /* SG_EMU_MAX_GRID_YZ: a smaller device, reported and enforced */
        setenv("SG_EMU_MAX_GRID_YZ", "3", 1);
        cudaDeviceProp p;
        SG_CHECK(cudaGetDeviceProperties(&p, 0));
        SG_CHECK(cudaDeviceGetAttribute(&gy, cudaDevAttrMaxGridDimY, 0));
        SG_CHECK(cudaMemset(dflag, 0, 4));
        SG_LAUNCH(touch_all_smem, dim3(1, 4), 32, 64, dflag, 64);
        cudaError_t e4 = cudaGetLastError();
        SG_CHECK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
        const int ran4 = flag;
        SG_LAUNCH(touch_all_smem, dim3(1, 1, 3), 32, 64, dflag, 64);
        cudaError_t e3 = cudaGetLastError();
        SG_CHECK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
        unsetenv("SG_EMU_MAX_GRID_YZ");
        expect(gy == 3 && p.maxGridSize[1] == 3 && p.maxGridSize[2] == 3 && e4 != cudaSuccess && !ran4 &&
               e3 == cudaSuccess && flag == 1, "emulated_grid_limit_lowered_is_reported_and_enforced",
               "SG_EMU_MAX_GRID_YZ=3: attribute %d, properties %d x %d; grid y 4: \"%s\" (%s); grid z 3: \"%s\" "
               "(flag %d)", gy, p.maxGridSize[1], p.maxGridSize[2], cudaGetErrorString(e4),
               ran4 ? "RAN" : "did not run", cudaGetErrorString(e3), flag);
    }

    SG_CHECK(cudaMemset(dflag, 0, 4));
    SG_LAUNCH(touch_all_smem, 1, 1024, 48 * 1024, dflag, 48 * 1024);
    cudaError_t e = cudaGetLastError();
    SG_CHECK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
    expect(e == cudaSuccess && flag == 1, "launch_of_1024_threads_48KiB_dynamic_smem_runs",
           "cudaGetLastError \"%s\", kernel flag %d", cudaGetErrorString(e), flag);

    SG_CHECK(cudaMemset(dflag, 0, 4));
    SG_LAUNCH(touch_all_smem, 1, 128, 49 * 1024, dflag, 49 * 1024);
    e = cudaGetLastError();
    SG_CHECK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
    expect(e != cudaSuccess && flag == 0, "launch_of_49KiB_dynamic_smem_without_opt_in_is_refused",
           "cudaGetLastError \"%s\", kernel %s", cudaGetErrorString(e), flag ? "RAN" : "did not run");

    SG_CHECK(cudaFuncSetAttribute(touch_all_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    SG_CHECK(cudaMemset(dflag, 0, 4));
    SG_LAUNCH(touch_all_smem, 1, 128, 100 * 1024, dflag, 100 * 1024);
    e = cudaGetLastError();
    SG_CHECK(cudaMemcpy(&flag, dflag, 4, cudaMemcpyDeviceToHost));
    expect(e == cudaSuccess && flag == 1, "launch_of_100KiB_dynamic_smem_after_opt_in_runs",
           "cudaGetLastError \"%s\", kernel flag %d", cudaGetErrorString(e), flag);

    SG_LAUNCH(touch_all_smem, 1, 128, 101 * 1024, dflag, 64);
    e = cudaGetLastError();
    expect(e != cudaSuccess, "launch_above_the_opted_in_size_is_refused", "cudaGetLastError \"%s\"",
           cudaGetErrorString(e));
    cudaError_t big = cudaFuncSetAttribute(touch_all_smem, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           228 * 1024);
    (void)cudaGetLastError();
    expect(big != cudaSuccess, "opt_in_above_227KiB_is_refused", "cudaFuncSetAttribute: \"%s\"",
           cudaGetErrorString(big));
    SG_CHECK(cudaFree(dflag));
}

static void check_memory(void) {
    const size_t n = 1000;
    unsigned char *h = (unsigned char*)malloc(n), *back = (unsigned char*)malloc(n);
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7 + 3);
    unsigned char *a, *b;
    size_t free0, total, free1;
    SG_CHECK(cudaMemGetInfo(&free0, &total));
    SG_CHECK(cudaMalloc((void**)&a, n));
    SG_CHECK(cudaMalloc((void**)&b, n));
    SG_CHECK(cudaMemGetInfo(&free1, &total));
    if (EMU_ONLY) {
        SG_CHECK(cudaMemcpy(back, a, n, cudaMemcpyDeviceToHost));
        int poisoned = 1;
        for (size_t i = 0; i < n; i++) poisoned &= back[i] == 0xFF;
        expect(poisoned && free0 - free1 == 2 * n && total >= free0, "cudaMalloc_memory_poisoned_and_counted",
               "fresh memory %s, cudaMemGetInfo free fell by %zu for %zu bytes allocated",
               poisoned ? "all 0xFF" : "NOT poisoned", free0 - free1, 2 * n);
    }
    SG_CHECK(cudaMemcpy(a, h, n, cudaMemcpyHostToDevice));
    SG_CHECK(cudaMemcpy(b + 10, a, n - 10, cudaMemcpyDeviceToDevice));
    SG_CHECK(cudaMemset(b, 0x5A, 10));
    SG_CHECK(cudaMemcpy(back, b, n, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += back[i] != (i < 10 ? 0x5A : h[i - 10]);
    expect(bad == 0, "memcpy_h2d_d2d_d2h_and_memset_roundtrip", "%d of %zu bytes wrong", bad, n);
    if (EMU_ONLY) {
        cudaError_t e1 = cudaMemcpy(h, a, n, cudaMemcpyHostToDevice);   /* h is not device memory */
        cudaError_t e2 = cudaMemcpy(back, a + 1, n, cudaMemcpyDeviceToHost);   /* runs past a */
        cudaError_t e3 = cudaMemset(h, 0, n);
        (void)cudaGetLastError();
        expect(e1 != cudaSuccess && e2 != cudaSuccess && e3 != cudaSuccess,
               "memcpy_memset_outside_device_allocations_refused", "H2D into host: \"%s\", D2H past the end: "
               "\"%s\", memset of host: \"%s\"", cudaGetErrorString(e1), cudaGetErrorString(e2),
               cudaGetErrorString(e3));
        cudaError_t f1 = cudaFree(h), f2 = cudaFree(a + 4);
        (void)cudaGetLastError();
        SG_CHECK(cudaFree(a));
        cudaError_t f3 = cudaFree(a);
        (void)cudaGetLastError();
        expect(f1 != cudaSuccess && f2 != cudaSuccess && f3 != cudaSuccess, "free_of_unknown_pointer_refused",
               "host pointer: \"%s\", interior pointer: \"%s\", double free: \"%s\"", cudaGetErrorString(f1),
               cudaGetErrorString(f2), cudaGetErrorString(f3));
    } else {
        skip("memcpy_memset_outside_device_allocations_refused", "emulation only");
        skip("free_of_unknown_pointer_refused", "emulation only");
        SG_CHECK(cudaFree(a));
    }
    SG_CHECK(cudaFree(b));
    cudaDeviceProp p;
    SG_CHECK(cudaGetDeviceProperties(&p, 0));
    expect(p.maxThreadsPerBlock == 1024 && p.warpSize == 32 && p.sharedMemPerBlock == 48 * 1024 &&
           p.sharedMemPerBlockOptin >= 48 * 1024, "device_properties_plausible",
           "%s: sm_%d%d, %d SMs, %.0f GiB, %zu B smem/block (%zu opt-in)", p.name, p.major, p.minor,
           p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, (size_t)p.sharedMemPerBlock,
           (size_t)p.sharedMemPerBlockOptin);
    free(h); free(back);
}

/* strided-batched: batch b is C_b = alpha op(A_b) op(B_b) + beta C_b, column-major */
static void check_strided_batched(void) {
    cublasHandle_t h;
    SG_CUBLAS_CHECK(cublasCreate(&h));
    SG_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    const int m = 13, n = 9, k = 21, batches = 3;
    for (int combo = 0; combo < 4; combo++) {
        int ta = combo & 1, tb = combo >> 1;
        int arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
        int lda = arows + 2, ldb = brows + 1, ldc = m + 3;
        long long sa = (long long)lda * acols + 5, sb = (long long)ldb * bcols + 7, sc = (long long)ldc * n + 1;
        size_t na = sa * batches, nb = sb * batches, nc = sc * batches;
        float *A = (float*)malloc(na * 4), *B = (float*)malloc(nb * 4), *C = (float*)malloc(nc * 4);
        for (size_t i = 0; i < na; i++) A[i] = (float)(test_uniform() - 0.5);
        for (size_t i = 0; i < nb; i++) B[i] = (float)(test_uniform() - 0.5);
        for (size_t i = 0; i < nc; i++) C[i] = (float)(test_uniform() - 0.5);
        float alpha = 0.75f, beta = combo == 3 ? 0.0f : 0.5f;
        if (beta == 0.0f) for (size_t i = 0; i < nc; i++) C[i] = NAN;   /* beta 0: C is not read */
        float *dA, *dB, *dC;
        SG_CHECK(cudaMalloc((void**)&dA, na * 4)); SG_CHECK(cudaMalloc((void**)&dB, nb * 4));
        SG_CHECK(cudaMalloc((void**)&dC, nc * 4));
        SG_CHECK(cudaMemcpy(dA, A, na * 4, cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemcpy(dB, B, nb * 4, cudaMemcpyHostToDevice));
        SG_CHECK(cudaMemcpy(dC, C, nc * 4, cudaMemcpyHostToDevice));
        SG_CUBLAS_CHECK(cublasSgemmStridedBatched(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                  m, n, k, &alpha, dA, lda, sa, dB, ldb, sb, &beta, dC, ldc, sc,
                                                  batches));
        float* got = (float*)malloc(nc * 4);
        SG_CHECK(cudaMemcpy(got, dC, nc * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        int untouched_ok = 1;
        for (int bt = 0; bt < batches; bt++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < ldc; i++) {
                    size_t x = bt * sc + i + (size_t)j * ldc;
                    if (i >= m) { untouched_ok &= memcmp(&got[x], &C[x], 4) == 0; continue; }
                    double s = 0;
                    for (int p = 0; p < k; p++) {
                        double a = ta ? A[bt * sa + p + (size_t)i * lda] : A[bt * sa + i + (size_t)p * lda];
                        double b = tb ? B[bt * sb + j + (size_t)p * ldb] : B[bt * sb + p + (size_t)j * ldb];
                        s += a * b;
                    }
                    double want = alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C[x]);
                    num += (got[x] - want) * (got[x] - want);
                    den += want * want;
                }
        double err = sqrt(num / den);
        char name[96];
        snprintf(name, sizeof(name), "cublas_sgemm_strided_batched_%s%s_beta%g_matches_float64", ta ? "T" : "N",
                 tb ? "T" : "N", beta);
        expect(err <= 1e-6 && untouched_ok, name, "rel err %.2e over %d batches, padding %s", err, batches,
               untouched_ok ? "untouched" : "WRITTEN");
        SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC));
        free(A); free(B); free(C); free(got);
    }
    float one = 1.0f;
    float* d;
    SG_CHECK(cudaMalloc((void**)&d, 64 * 4));
    cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 3, d, 4, &one, d, 4);
    expect(st == CUBLAS_STATUS_INVALID_VALUE, "cublas_sgemm_lda_below_rows_is_invalid", "status %d", (int)st);
    SG_CHECK(cudaFree(d));
    SG_CUBLAS_CHECK(cublasDestroy(h));
}

/* a child made by fork() (no exec) has none of the parent's pooled threads, yet launches */
static void check_fork(void) {
#ifdef SG_EMU
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);   /* a child waiting for the parent's threads would wait forever */
        int h[64], *d, *dh;
        for (int i = 0; i < 64; i++) h[i] = -1;
        SG_CHECK(cudaMalloc((void**)&d, sizeof(h)));
        SG_CHECK(cudaMalloc((void**)&dh, sizeof(h)));
        SG_CHECK(cudaMemset(dh, 0, sizeof(h)));
        SG_LAUNCH(write_ids, 2, 32, 0, d, dh);
        SG_CHECK_LAUNCH();
        SG_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
        int ok = 1;
        for (int i = 0; i < 64; i++) ok &= h[i] == i;
        _exit(ok ? 0 : 3);
    }
    int status;
    waitpid(pid, &status, 0);
    int st = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    expect(st == 0, "launch_in_forked_child_runs", "child exit status %d (0: ids right, 3: wrong, 142: hung)", st);
#endif
}

static void check_faults(void) {
#ifndef SG_EMU
    skip("divergent_barrier_and_mask_faults_reported", "emulation only (a GPU hangs or misbehaves)");
#else
    expect_fault("barrier_after_early_exit", "divergent barrier");
    expect_fault("barrier_at_two_sites", "divergent barrier");
    expect_fault("mask_without_caller", "does not name the caller");
    expect_fault("mismatched_masks", "mismatched masks");
    expect_fault("shuffle_with_exited_lane", "left the kernel");
    expect_fault("mma_in_half_warp", "names lanes beyond the block");
    expect_fault("mma_with_exited_lane", "left the kernel");
    expect_fault("syncwarp_with_exited_lane", "left the kernel");
#endif
}

int main(int argc, char** argv) {
    if (argc == 3 && !strcmp(argv[1], "--case")) return run_case(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_cuda_emu (or --case NAME, a kernel that must fail)\n");
        return 2;
    }
    check_block_reductions("");
    check_index_coverage();
    check_smem_poison();
    check_shuffles();
    check_diverge_syncwarp_mma();
    check_atomics("");
    if (TSAN_BUILD) {
        /* ThreadSanitizer is there for the kernels; the host API and the faults (child processes
         * of 60+ threads each) are the plain build's, which keeps this run short */
        skip("host_api_cublas_and_fault_checks", "run by the plain build (make test-cuda-emu)");
    } else {
        check_launch_validation();
        check_events();
        check_memory();
        check_strided_batched();
        check_faults();
        check_fork();
    }
    if (EMU_ONLY && !TSAN_BUILD) {
        /* the same kernels with blocks running at the same time (the TSan run always has 2) */
        const char* outer = getenv("SG_EMU_CONCURRENT_BLOCKS");
        char saved[32];
        snprintf(saved, sizeof(saved), "%s", outer ? outer : "");
        setenv("SG_EMU_CONCURRENT_BLOCKS", "4", 1);
        check_block_reductions("_4_blocks_concurrently");
        check_atomics("_4_blocks_concurrently");
        if (outer) setenv("SG_EMU_CONCURRENT_BLOCKS", saved, 1);
        else unsetenv("SG_EMU_CONCURRENT_BLOCKS");
    }
#if defined(__SANITIZE_THREAD__)
    expect_tsan_race("cross_block_race");
    expect_tsan_race("missing_barrier");
    expect_tsan_race("missing_syncwarp");
#else
    skip("tsan_reports_races", "not a ThreadSanitizer build (make test-cuda-emu-tsan)");
#endif
    return test_finish();
}
