/* dist/dist_nccl.cu — the device half of dist/dist.h: gradients in CUDA memory summed over the
 * ranks, one GPU per rank (GPU local_rank on each machine), and the context-parallel ring's
 * shifts of device buffers (ncclSend/ncclRecv). The NCCL id is made by rank 0 and carried to the
 * others over MPI by dist/dist_mpi.c, or through a file by dist/dist_nccl_file.c (which also
 * gathers host numbers here), and they call everything here.
 *
 * Sums in rank order, as on host memory (dist/dist_mpi.c): NCCL only moves bytes (ncclSend,
 * ncclRecv, ncclAllGather), and the owner of each shard adds the ranks' pieces itself, x_0 + x_1,
 * then + x_2, ..., in one kernel. So the bits do not depend on the algorithms and protocols NCCL
 * would pick for an ncclAllReduce, and plain data parallelism (the reduce-scatter, then the
 * shards all-gathered) and a sharded optimizer (the reduce-scatter alone) share one sum.
 *
 * Built by `make mpi-cuda` and `make cuda-nccl` (SEEDGPT_NCCL), and against the emulation
 * (-DSG_EMU: cuda/emu/nccl_emu.h, ranks as processes of one machine), where make test runs it.
 * Not yet run on a machine with several GPUs.
 */
#if SEEDGPT_NCCL
#include "cuda/device.h"
#ifdef SG_EMU
#include "cuda/emu/nccl_emu.h"
#else
#include <nccl.h>
#endif
#include "dist/dist.h"

static ncclComm_t comm;
static cudaStream_t stream;
static int comm_rank, comm_size;
static char* gather_buf;        /* device: dist_nccl_allgather_host's gather_cap bytes (size slots) */
static size_t gather_cap;
static char* shards_buf;        /* device: dist_nccl_allgather_host_shards's (shards_cap) bytes */
static size_t shards_cap;

/* A device buffer asked for every step (a loss, a flag, the norm's partials): it grows to the
 * largest size asked, once, then stays. */
static cudaError_t device_grow(char** buf, size_t* cap, size_t bytes) {
    if (bytes <= *cap) return cudaSuccess;
    if (*buf != NULL) cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    cudaError_t ce = cudaMalloc((void**)buf, bytes);
    if (ce == cudaSuccess) *cap = bytes;
    return ce;
}

extern "C" size_t dist_nccl_id_bytes(void) { return sizeof(ncclUniqueId); }

extern "C" int dist_nccl_make_id(void* id, char err[256]) {
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId*)id);
    if (r != ncclSuccess) {
        snprintf(err, 256, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        return -1;
    }
    return 0;
}

extern "C" int dist_nccl_init(const void* id, int rank, int size, int local_rank, char err[256]) {
    int gpus = 0;
    cudaError_t ce = cudaGetDeviceCount(&gpus);
    if (ce != cudaSuccess || gpus == 0) {
        snprintf(err, 256, "rank %d: no CUDA device (%s)", rank,
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return -1;
    }
    /* one GPU per rank: two ranks of one machine on one GPU is refused by NCCL itself */
    ce = cudaSetDevice(local_rank % gpus);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        snprintf(err, 256, "rank %d: GPU %d: %s", rank, local_rank % gpus, cudaGetErrorString(ce));
        return -1;
    }
    ncclUniqueId uid = *(const ncclUniqueId*)id;
    ncclResult_t r = ncclCommInitRank(&comm, size, uid, rank);
    if (r != ncclSuccess) {
        snprintf(err, 256, "rank %d: ncclCommInitRank (%d ranks): %s", rank, size,
                 ncclGetErrorString(r));
        return -1;
    }
    comm_rank = rank;
    comm_size = size;
    return 0;
}

/* A host value of every rank: into this rank's slot of a device buffer, ncclAllGather in place,
 * back to the host. The buffer grows once to the largest value asked (a few bytes: a loss, a
 * flag). */
extern "C" int dist_nccl_allgather_host(const void* x, void* all, size_t bytes, char err[256]) {
    cudaError_t ce = device_grow(&gather_buf, &gather_cap, bytes * (size_t)comm_size);
    char* mine = gather_buf + bytes * (size_t)comm_rank;
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(mine, x, bytes, cudaMemcpyHostToDevice, stream);
    if (ce != cudaSuccess) {
        snprintf(err, 256, "all-gather of %zu bytes: %s", bytes, cudaGetErrorString(ce));
        return -1;
    }
    ncclResult_t r = ncclAllGather(mine, gather_buf, bytes, ncclChar, comm, stream);
    if (r != ncclSuccess) {
        snprintf(err, 256, "ncclAllGather of %zu bytes: %s", bytes, ncclGetErrorString(r));
        return -1;
    }
    ce = cudaMemcpyAsync(all, gather_buf, bytes * (size_t)comm_size, cudaMemcpyDeviceToHost, stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(stream);
    if (ce != cudaSuccess) {
        snprintf(err, 256, "all-gather of %zu bytes: %s", bytes, cudaGetErrorString(ce));
        return -1;
    }
    return 0;
}

/* ---- sums in rank order over shards of device memory -------------------------------------- */

#define RS_CHUNK ((size_t)1 << 20)   /* floats of one shard's piece per round */
static float* rs_pieces;            /* device: comm_size x RS_CHUNK, rank q's piece at q x RS_CHUNK */
static size_t* even_bounds;         /* (comm_size + 1) dist_nccl_allreduce_sum's shards */

/* x[i] = piece_0[i] + piece_1[i] + ... in rank order, this rank's own piece being x itself */
__global__ void rank_order_sum_kernel(float* x, const float* pieces, size_t stride, int rank,
                                      int ranks, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = rank == 0 ? x[i] : pieces[i];
        for (int q = 1; q < ranks; q++) s += q == rank ? x[i] : pieces[(size_t)q * stride + i];
        x[i] = s;
    }
}

static int cuda_failed(cudaError_t ce, const char* what, char err[256]) {
    if (ce == cudaSuccess) return 0;
    snprintf(err, 256, "%s: %s", what, cudaGetErrorString(ce));
    return -1;
}

static int nccl_failed(ncclResult_t r, const char* what, char err[256]) {
    if (r == ncclSuccess) return 0;
    snprintf(err, 256, "%s: %s", what, ncclGetErrorString(r));
    return -1;
}

/* Round c moves chunk c of every shard: in one group this rank sends its piece of each other
 * shard to that shard's owner and receives the others' pieces of its own shard; then its kernel
 * adds them in rank order. The sends read x outside this rank's shard, the kernel writes inside
 * it, and the device is idle between rounds, so a round never reads what another wrote. */
extern "C" int dist_nccl_reduce_scatter(float* x, const size_t* bounds, char err[256]) {
    if (comm_size == 1) return 0;
    if (rs_pieces == NULL &&
        cuda_failed(cudaMalloc((void**)&rs_pieces, (size_t)comm_size * RS_CHUNK * sizeof(float)),
                    "the reduce-scatter's buffer", err))
        return -1;
    if (cuda_failed(cudaDeviceSynchronize(), "before the reduce-scatter", err)) return -1;
    size_t largest = 0;
    for (int s = 0; s < comm_size; s++)
        if (bounds[s + 1] - bounds[s] > largest) largest = bounds[s + 1] - bounds[s];
    const int me = comm_rank;
    for (size_t c = 0; c * RS_CHUNK < largest; c++) {
        size_t lo = bounds[me] + c * RS_CHUNK;
        size_t n = lo < bounds[me + 1] ? bounds[me + 1] - lo : 0;
        if (n > RS_CHUNK) n = RS_CHUNK;
        ncclResult_t r = ncclGroupStart();
        for (int s = 0; s < comm_size && r == ncclSuccess; s++) {
            if (s == me) continue;
            size_t slo = bounds[s] + c * RS_CHUNK;
            if (slo < bounds[s + 1]) {
                size_t sn = bounds[s + 1] - slo < RS_CHUNK ? bounds[s + 1] - slo : RS_CHUNK;
                r = ncclSend(x + slo, sn, ncclFloat, s, comm, stream);
            }
            if (r == ncclSuccess && n > 0)
                r = ncclRecv(rs_pieces + (size_t)s * RS_CHUNK, n, ncclFloat, s, comm, stream);
        }
        ncclResult_t r2 = ncclGroupEnd();
        if (nccl_failed(r != ncclSuccess ? r : r2, "the reduce-scatter (ncclSend/ncclRecv)", err))
            return -1;
        if (cuda_failed(cudaStreamSynchronize(stream), "the reduce-scatter", err)) return -1;
        if (n > 0) {
            unsigned blocks = sg_ceil_div(n, 256);
            SG_LAUNCH(rank_order_sum_kernel, blocks < 1024 ? blocks : 1024, 256, 0, x + lo, rs_pieces,
                      RS_CHUNK, me, comm_size, n);
            if (cuda_failed(cudaGetLastError(), "the reduce-scatter's sum", err) ||
                cuda_failed(cudaDeviceSynchronize(), "the reduce-scatter's sum", err))
                return -1;
        }
    }
    return 0;
}

/* Each rank's shard of x (elements of elem_bytes) to every other rank, in one group. */
extern "C" int dist_nccl_allgather(void* x, const size_t* bounds, size_t elem_bytes, char err[256]) {
    if (comm_size == 1) return 0;
    if (cuda_failed(cudaDeviceSynchronize(), "before the all-gather", err)) return -1;
    char* b = (char*)x;
    const int me = comm_rank;
    size_t mine = (bounds[me + 1] - bounds[me]) * elem_bytes;
    ncclResult_t r = ncclGroupStart();
    for (int s = 0; s < comm_size && r == ncclSuccess; s++) {
        if (s == me) continue;
        size_t theirs = (bounds[s + 1] - bounds[s]) * elem_bytes;
        if (mine > 0) r = ncclSend(b + bounds[me] * elem_bytes, mine, ncclChar, s, comm, stream);
        if (r == ncclSuccess && theirs > 0)
            r = ncclRecv(b + bounds[s] * elem_bytes, theirs, ncclChar, s, comm, stream);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (nccl_failed(r != ncclSuccess ? r : r2, "the all-gather (ncclSend/ncclRecv)", err)) return -1;
    return cuda_failed(cudaStreamSynchronize(stream), "the all-gather", err);
}

/* ---- host memory through the device (ranks without MPI) -------------------------------------- */

#define STAGE_FLOATS ((size_t)1 << 20)
static float* stage;   /* device: STAGE_FLOATS, for one piece of a host send or receive */

static int stage_ready(char err[256]) {
    if (stage != NULL) return 0;
    return cuda_failed(cudaMalloc((void**)&stage, STAGE_FLOATS * sizeof(float)),
                       "the host transfers' device buffer", err);
}

extern "C" int dist_nccl_allgather_host_shards(void* x, const size_t* bounds, size_t elem_bytes,
                                               char err[256]) {
    if (comm_size == 1) return 0;
    size_t total = bounds[comm_size] * elem_bytes;
    size_t lo = bounds[comm_rank] * elem_bytes, mine = bounds[comm_rank + 1] * elem_bytes - lo;
    if (total == 0) return 0;
    if (cuda_failed(device_grow(&shards_buf, &shards_cap, total), "a host all-gather's buffer", err))
        return -1;
    char* d = shards_buf;
    int rc = cuda_failed(cudaMemcpy(d + lo, (const char*)x + lo, mine, cudaMemcpyHostToDevice),
                         "a host all-gather", err);
    if (rc == 0) rc = dist_nccl_allgather(d, bounds, elem_bytes, err);
    if (rc == 0) rc = cuda_failed(cudaMemcpy(x, d, total, cudaMemcpyDeviceToHost), "a host all-gather", err);
    return rc;
}

/* pieces of STAGE_FLOATS: a send and its receive of the same n cut them alike */
extern "C" int dist_nccl_send_host(const float* x, size_t n, int to, char err[256]) {
    if (stage_ready(err) != 0) return -1;
    for (size_t off = 0; off < n; off += STAGE_FLOATS) {
        size_t k = n - off < STAGE_FLOATS ? n - off : STAGE_FLOATS;
        if (cuda_failed(cudaMemcpy(stage, x + off, k * sizeof(float), cudaMemcpyHostToDevice),
                        "a host send", err) ||
            nccl_failed(ncclSend(stage, k, ncclFloat, to, comm, stream), "a host send (ncclSend)", err) ||
            cuda_failed(cudaStreamSynchronize(stream), "a host send", err))
            return -1;
    }
    return 0;
}

extern "C" int dist_nccl_recv_host(float* x, size_t n, int from, char err[256]) {
    if (stage_ready(err) != 0) return -1;
    for (size_t off = 0; off < n; off += STAGE_FLOATS) {
        size_t k = n - off < STAGE_FLOATS ? n - off : STAGE_FLOATS;
        if (nccl_failed(ncclRecv(stage, k, ncclFloat, from, comm, stream), "a host receive (ncclRecv)", err) ||
            cuda_failed(cudaStreamSynchronize(stream), "a host receive", err) ||
            cuda_failed(cudaMemcpy(x + off, stage, k * sizeof(float), cudaMemcpyDeviceToHost),
                        "a host receive", err))
            return -1;
    }
    return 0;
}

/* The caller has synchronized the backend. The gradients cut into even shards (dist_mpi.c's),
 * each summed in rank order by its owner, then the shards gathered: every element is
 * g_0 + g_1 + ... + g_{R-1} on every rank. Finished when this returns. */
extern "C" int dist_nccl_allreduce_sum(float* x, size_t n, char err[256]) {
    if (even_bounds == NULL) {
        even_bounds = (size_t*)malloc((size_t)(comm_size + 1) * sizeof(size_t));
        if (even_bounds == NULL) {
            snprintf(err, 256, "out of memory for %d shard bounds", comm_size);
            return -1;
        }
    }
    for (int s = 0; s < comm_size; s++) even_bounds[s] = (size_t)((double)n * s / comm_size);
    even_bounds[comm_size] = n;
    if (dist_nccl_reduce_scatter(x, even_bounds, err) != 0) return -1;
    return dist_nccl_allgather(x, even_bounds, sizeof(float), err);
}

/* ---- the context-parallel ring on device memory (DESIGN §9) --------------------------------
 * One shift: n floats of send to world rank next, n floats from world rank prev into recv, as an
 * ncclSend and an ncclRecv in one group on this file's stream. The start first waits for the
 * device (cudaDeviceSynchronize): the kernels that wrote send, and those that read the previous
 * contents of recv, are queued on the backend's stream, which this stream does not follow. The
 * kernels launched after the start overlap the transfer; the wait blocks the host until recv is
 * filled, so the kernels launched after it read the received block. */
extern "C" int dist_nccl_ring_start(const float* send, float* recv, size_t n, int next, int prev,
                                    char err[256]) {
    cudaError_t ce = cudaDeviceSynchronize();
    if (ce != cudaSuccess) {
        snprintf(err, 256, "context-parallel ring: %s", cudaGetErrorString(ce));
        return -1;
    }
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) r = ncclRecv(recv, n, ncclFloat, prev, comm, stream);
    if (r == ncclSuccess) r = ncclSend(send, n, ncclFloat, next, comm, stream);
    ncclResult_t r2 = ncclGroupEnd();
    if (r == ncclSuccess) r = r2;
    if (r != ncclSuccess) {
        snprintf(err, 256, "context-parallel ring (ncclSend/ncclRecv of %zu floats): %s", n,
                 ncclGetErrorString(r));
        return -1;
    }
    return 0;
}

extern "C" int dist_nccl_ring_wait(char err[256]) {
    cudaError_t ce = cudaStreamSynchronize(stream);
    if (ce != cudaSuccess) {
        snprintf(err, 256, "context-parallel ring: %s", cudaGetErrorString(ce));
        return -1;
    }
    return 0;
}
#endif
