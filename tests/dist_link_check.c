/* tests/dist_link_check.c — `make mpi-cuda-check`: dist/dist_mpi.c with SEEDGPT_NCCL and
 * dist/dist_nccl.cu compile and link against MPI, NCCL and the CUDA runtime, without the rest of
 * the CUDA build. Run under mpirun where one GPU per rank exists, it sets up NCCL through the
 * same call the trainer makes and sums one number over the ranks; elsewhere it only links. */
#include <stdio.h>
#include "dist/dist.h"

int main(int argc, char** argv) {
    char err[256] = "";
    if (dist_init(&argc, &argv, err) != 0) { fprintf(stderr, "dist_link_check: %s\n", err); return 1; }
    Backend device = {.name = "cuda", .host_memory = 0};   /* only what dist_use_backend reads */
    if (dist_use_backend(&device, err) != 0) {
        fprintf(stderr, "dist_link_check: rank %d: %s\n", dist_rank(), err);
        return 1;
    }
    double ranks = dist_sum(1.0);
    printf("dist_link_check: %s, rank %d of %d (sum over ranks %g)\n", dist_kind(), dist_rank(),
           dist_size(), ranks);
    return ranks == dist_size() ? 0 : 1;
}
