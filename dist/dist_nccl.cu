/* dist/dist_nccl.cu — the device half of dist/dist.h: gradients in CUDA memory summed over the
 * ranks by ncclAllReduce, one GPU per rank (GPU local_rank on each machine), and the
 * context-parallel ring's shifts of device buffers (ncclSend/ncclRecv). The NCCL id is made
 * by rank 0 and carried to the others over MPI by dist/dist_mpi.c, or through a file by
 * dist/dist_nccl_file.c (which also gathers host numbers here), and they call everything here.
 *
 * Built only by `make mpi-cuda` / `make mpi-cuda-check` (SEEDGPT_NCCL). Compiled in CI; not yet
 * run on a machine with several GPUs.
 */
#if SEEDGPT_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include "dist/dist.h"

static ncclComm_t comm;
static cudaStream_t stream;
static int comm_rank, comm_size;
static char* gather_buf;        /* device: dist_nccl_allgather_host's (size x gather_cap) bytes */
static size_t gather_cap;

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
    cudaError_t ce = cudaSuccess;
    if (bytes > gather_cap) {
        if (gather_buf != NULL) cudaFree(gather_buf);
        gather_buf = NULL;
        ce = cudaMalloc((void**)&gather_buf, bytes * (size_t)comm_size);
        gather_cap = ce == cudaSuccess ? bytes : 0;
    }
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

/* The caller has synchronized the backend; the sum runs on a stream of its own and is finished
 * when this returns, so the clip and AdamW that follow read summed gradients. */
extern "C" int dist_nccl_allreduce_sum(float* x, size_t n, char err[256]) {
    ncclResult_t r = ncclAllReduce(x, x, n, ncclFloat, ncclSum, comm, stream);
    if (r != ncclSuccess) {
        snprintf(err, 256, "ncclAllReduce of %zu floats: %s", n, ncclGetErrorString(r));
        return -1;
    }
    cudaError_t ce = cudaStreamSynchronize(stream);
    if (ce != cudaSuccess) {
        snprintf(err, 256, "ncclAllReduce of %zu floats: %s", n, cudaGetErrorString(ce));
        return -1;
    }
    return 0;
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
