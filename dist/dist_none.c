/* dist/dist_none.c — dist/dist.h for the single-process build: one rank, reductions are the
 * identity. `make mpi` links dist/dist_mpi.c instead. */
#include <stdio.h>
#include <string.h>
#include "dist/dist.h"

int dist_init(int* argc, char*** argv, char err[256]) {
    for (int i = 1; i < *argc; i++)
        if (!strcmp((*argv)[i], "--init-file") || !strcmp((*argv)[i], "--world") ||
            !strcmp((*argv)[i], "--rank")) {
            snprintf(err, 256, "%s: this build runs one process; GPU ranks started without MPI "
                     "(--rank, --world, --init-file) run ./train_cuda_nccl (make cuda-nccl)",
                     (*argv)[i]);
            return -1;
        }
    return 0;
}
int dist_rank(void) { return 0; }
int dist_size(void) { return 1; }
int dist_local_size(void) { return 1; }
int dist_local_rank(void) { return 0; }
const char* dist_kind(void) { return "none"; }
int dist_stop_grace_s(void) { return -1; }
int dist_use_backend(const Backend* be, char err[256]) { return 0; }
void dist_allreduce_grads(GPT* m) {}
double dist_sum(double x) { return x; }
void dist_reduce_scatter(float* x, const size_t* bounds) {}
void dist_allgather_floats(float* x, const size_t* bounds) {}
void dist_allgather_doubles(double* x, const size_t* bounds) {}
void dist_allgather_elems(void* x, const size_t* bounds, size_t elem_bytes) {}
void dist_send_floats(const float* x, size_t n, int to) {}
void dist_recv_floats(float* x, size_t n, int from) {}
int dist_max(int x) { return x; }

int dist_cp_init(int N, char err[256]) {
    if (N == 1) return 0;
    snprintf(err, 256, "--context-parallel %d: this build runs one process (no MPI); build the "
             "MPI trainer with `make mpi` and run mpirun -np R ./train_mpi --context-parallel %d", N, N);
    return -1;
}
int dist_cp_size(void) { return 1; }
int dist_cp_rank(void) { return 0; }
int dist_dp_size(void) { return 1; }
int dist_dp_rank(void) { return 0; }
void dist_cp_ring_shift(const float* send, float* recv, size_t n) {}
void dist_cp_ring_start(const float* send, float* recv, size_t n) {}
void dist_cp_ring_wait(void) {}
ContextParallel dist_context_parallel(void) {
    ContextParallel cp = {1, 0, NULL, NULL, NULL};
    return cp;
}
