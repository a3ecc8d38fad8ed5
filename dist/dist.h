/* dist/dist.h — data parallelism across processes: R ranks (mpirun -np R ./train_mpi), each
 * with its own copy of the model, each running the forward and backward of its own rows of the
 * step's global batch; the gradients are summed over the ranks before the clip and AdamW, so
 * every rank applies the same update and the weights stay equal on all of them.
 *
 * Three builds of this one interface:
 *   dist/dist_none.c   the single-process build (./train): rank 0 of 1, every reduction is
 *                       the identity. No MPI anywhere.
 *   dist/dist_mpi.c    `make mpi` (./train_mpi, built with mpicc): sums in rank order over
 *                       point-to-point transfers on host memory, for backends whose memory is
 *                       host memory (the CPU backend); ZeRO-1's shards (model/zero.h).
 *   + dist/dist_nccl.cu with SEEDGPT_NCCL (`make mpi-cuda`): gradients in device memory are
 *                       summed in rank order by seedgpt over NCCL's point-to-point transfers;
 *                       the NCCL id travels over MPI. Run here against the emulation (ranks as
 *                       processes, cuda/emu/nccl_emu.h); not yet on several GPUs.
 *   dist/dist_nccl_file.c + dist/dist_nccl.cu (`make cuda-nccl`: ./train_cuda_nccl): GPU ranks
 *                       started by any launcher with --rank, --world and --init-file PATH; the
 *                       NCCL id travels through the file (dist/init_file.h), every reduction
 *                       through NCCL. Run here against the emulation only.
 *
 * What each rank computes is fixed by the global sequence index (DESIGN §2): with A micro-batches
 * of B sequences per rank, rank r's micro-batch a holds g = r*A*B + a*B + b, and the dropout
 * masks are keyed by g, so they do not depend on how the global batch is split into ranks.
 * The caller scales each rank's loss gradient by 1 / (R*A*B*T), so the sum over ranks is the
 * mean over the global batch.
 *
 * Errors: dist_init and dist_use_backend return -1 with one line in err; a failing MPI or NCCL
 * call inside a reduction prints one line and aborts every rank (a rank cannot continue alone).
 */
#ifndef SEEDGPT_DIST_H
#define SEEDGPT_DIST_H

#include <string.h>
#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the process group (MPI_Init in the MPI build). Call first thing in main. On ranks
 * other than 0 standard output is sent to /dev/null: only rank 0 prints progress; errors still
 * reach standard error from every rank. 0, or -1 with err. */
int dist_init(int* argc, char*** argv, char err[256]);

int dist_rank(void);          /* 0 .. dist_size()-1 */
int dist_size(void);          /* R: 1 in the single-process build */
int dist_local_size(void);    /* ranks on this machine (to share its cores and GPUs) */
int dist_local_rank(void);    /* this rank's index among them */
const char* dist_kind(void);  /* "none", "mpi" or "mpi+nccl" */

/* The launcher's grace on a stop: the seconds between the SIGTERM it sends every rank when it is
 * itself stopped (SIGTERM or SIGINT to mpirun) and the SIGKILL that follows. Open MPI's mpirun
 * sends SIGCONT, waits odls_base_sigkill_timeout seconds, sends SIGTERM, waits as long again,
 * then SIGKILL; `--mca odls_base_sigkill_timeout S` puts S in every rank's environment, and the
 * default is 1. -1 when no such launcher started this process (one process of ./train). */
int dist_stop_grace_s(void);

/* Prepares the reductions for the backend a model is about to be built on: on CUDA (with NCCL)
 * binds this rank to GPU local_rank and creates the NCCL communicator, so call it before
 * gpt_build_on. Refuses a backend this build cannot reduce (CUDA memory without NCCL) when there
 * are several ranks. 0, or -1 with err. */
int dist_use_backend(const Backend* be, char err[256]);

/* Sums m's parameter gradients over the ranks, in place, on every rank: a rank-order
 * reduce-scatter over even shards of the block, then the shards gathered, so every element is
 * g_0 + g_1 + ... + g_{R-1} whichever algorithms MPI or NCCL would choose (host memory: below,
 * over MPI; device memory: dist_nccl_allreduce_sum, over NCCL). All ranks must call it at the
 * same point. */
void dist_allreduce_grads(GPT* m);

/* The floats of m's gradient block that the sum covers: from its start to the end of its last
 * tensor (tensors start 64-byte aligned; the gaps between them are zeros and travel along). */
static inline size_t dist_grad_span(const GPT* m) {
    float* g[NUM_PARAMETER_TENSORS];
    memcpy(g, &m->grads, sizeof(g));
    size_t span = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t end = (size_t)(g[k] - m->grads_memory) + m->param_sizes[k];
        if (m->param_sizes[k] > 0 && end > span) span = end;
    }
    return span;
}

/* ---- shards, for sums in rank order and ZeRO-1 (model/zero.h) ----------------------------------
 * bounds: dist_size() + 1 offsets (host memory), the same on every rank; rank s's shard is
 * [bounds[s], bounds[s+1]) (in elements of the array). All ranks call each at the same point with
 * the same bounds. The model's arrays (dist_reduce_scatter, dist_allgather_floats,
 * dist_allgather_elems) are in the memory of the backend dist_use_backend was given: host
 * memory, moved by MPI, or device memory, moved by NCCL (dist/dist_nccl.cu). Everything else
 * (dist_allgather_doubles, dist_send_floats, dist_recv_floats) is host memory. */

/* Each rank's shard of x becomes the sum over the ranks of their x on it, added in rank order
 * (x_0 + x_1, then + x_2, ...) by the shard's owner from the others' point-to-point transfers;
 * the rest of x is left as it is. Moves chunks of at most 2^18 floats through two buffers
 * (malloc'ed on first use, kept: not counted by model/mem.h; on the device, 2^20 floats a rank). */
void dist_reduce_scatter(float* x, const size_t* bounds);
/* Every rank's shard of x copied from its owner to every rank (no arithmetic). */
void dist_allgather_floats(float* x, const size_t* bounds);
void dist_allgather_doubles(double* x, const size_t* bounds);
/* The same for elements of elem_bytes bytes (ZeRO-1's bf16 operand copy: 2). */
void dist_allgather_elems(void* x, const size_t* bounds, size_t elem_bytes);
/* n floats from this rank to rank `to`, and from rank `from` into x (blocking point-to-point, in
 * pieces the transport's counts allow; each send is matched by one receive of the same n). */
void dist_send_floats(const float* x, size_t n, int to);
void dist_recv_floats(float* x, size_t n, int from);

/* The sum of x over the ranks, returned on every rank: x_0 + x_1 + ... + x_{R-1}, in rank
 * order whatever algorithm MPI would pick (the values are gathered, every rank adds them). */
double dist_sum(double x);
/* The largest x over the ranks, returned on every rank. */
int dist_max(int x);

/* ---- context parallelism (DESIGN §9) ----------------------------------------------------------
 * The R ranks form R / N groups of N consecutive ranks; each group shares its sequences (world
 * rank w is rank w % N of group w / N, and the group is data-parallel rank w / N of R / N). */

/* Sets the groups up (N = 1: data parallelism alone). -1 with one line in err when N does not
 * divide the rank count, or when this build has no MPI and N > 1. Call before the other dist_cp_
 * and dist_dp_ functions (before it they say N = 1). */
int dist_cp_init(int N, char err[256]);
int dist_cp_size(void);       /* N */
int dist_cp_rank(void);       /* this rank's place in its group */
int dist_dp_size(void);       /* R / N: the data-parallel width */
int dist_dp_rank(void);       /* this rank's group */
/* The ring step of this rank's group: sends n floats of send to the next rank ((rank + 1) % N),
 * receives n floats from the previous one into recv (MPI_Sendrecv on host memory; ncclSend and
 * ncclRecv on device memory, in the NCCL build, once dist_use_backend was given a device
 * backend). All ranks of the group call it at the same point. */
void dist_cp_ring_shift(const float* send, float* recv, size_t n);
/* The same in two halves (MPI_Isend, MPI_Irecv, then MPI_Waitall): start it, compute, wait. One
 * shift at a time; send must not be written and recv not read before dist_cp_ring_wait. */
void dist_cp_ring_start(const float* send, float* recv, size_t n);
void dist_cp_ring_wait(void);
/* The model's view of it (model/gpt.h): size, rank and the ring functions. */
ContextParallel dist_context_parallel(void);

/* The end of the process group needs no call: a process that exits with status 0 finalizes MPI
 * on its way out (an exit handler registered by dist_init); one that fails leaves without it, and
 * mpirun ends the other ranks, which may be waiting for it in a reduction. */

/* Between dist/dist_mpi.c or dist/dist_nccl_file.c and dist/dist_nccl.cu (SEEDGPT_NCCL builds
 * only). */
size_t dist_nccl_id_bytes(void);
int dist_nccl_make_id(void* id, char err[256]);
/* Binds this process to GPU local_rank (modulo the GPUs visible) and joins the communicator. */
int dist_nccl_init(const void* id, int rank, int size, int local_rank, char err[256]);
/* In-place sum of n floats of device memory over the ranks, in rank order on every element
 * (the reduce-scatter below over even shards, then the all-gather); 0, or -1 with err. */
int dist_nccl_allreduce_sum(float* x, size_t n, char err[256]);
/* dist_reduce_scatter's and dist_allgather_elems' contracts on device memory (bounds in host
 * memory): the owner of each shard adds the ranks' pieces in rank order in a kernel of its own;
 * NCCL moves the bytes (ncclSend, ncclRecv). Keeps a device buffer of R x 2^20 floats from the
 * first call on. 0, or -1 with err. */
int dist_nccl_reduce_scatter(float* x, const size_t* bounds, char err[256]);
int dist_nccl_allgather(void* x, const size_t* bounds, size_t elem_bytes, char err[256]);
/* The same all-gather of host memory, and blocking sends and receives of host memory, through a
 * device buffer of 2^20 floats (ranks started with --init-file, which have no MPI). 0, or -1. */
int dist_nccl_allgather_host_shards(void* x, const size_t* bounds, size_t elem_bytes, char err[256]);
int dist_nccl_send_host(const float* x, size_t n, int to, char err[256]);
int dist_nccl_recv_host(float* x, size_t n, int from, char err[256]);
/* Every rank's `bytes` bytes of host memory at x, in rank order, into all (size x bytes) on every
 * rank, through device memory (ncclAllGather); 0, or -1 with err. */
int dist_nccl_allgather_host(const void* x, void* all, size_t bytes, char err[256]);
/* The context-parallel ring on device memory: n floats of send to world rank next and n floats
 * from world rank prev into recv (ncclSend and ncclRecv in one group); the wait returns once recv
 * is filled. 0, or -1 with err. */
int dist_nccl_ring_start(const float* send, float* recv, size_t n, int next, int prev,
                         char err[256]);
int dist_nccl_ring_wait(char err[256]);

#ifdef __cplusplus
}
#endif
#endif
