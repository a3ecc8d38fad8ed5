/* scripts/probe/mpi.c — the Makefile's probe for MPI: mpicc must compile and link this. Never part
 * of seedgpt. */
#include <mpi.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    return MPI_Finalize();
}
