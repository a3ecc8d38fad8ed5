/* dist/dist_nccl_file.c — dist/dist.h for GPU ranks started without MPI (`make cuda-nccl`:
 * ./train_cuda_nccl): any launcher (slurm, a shell loop) starts one process per GPU with
 *     --rank R --world W --init-file PATH [--init-timeout S]
 * on a file system every rank sees. Rank 0 makes the NCCL unique id and publishes it at PATH
 * (dist/init_file.h: written beside it, then linked into place; never over an existing file);
 * the others wait for it up to S seconds (default 300) and refuse a file that is not one. Once
 * the communicator stands, rank 0 removes the file. The
 * communicator is made in dist_init, so every reduction after it, host or device, goes through
 * NCCL: the gradients by a rank-order sum on the device (dist/dist_nccl.cu), a host number by an all-gather of every
 * rank's value, added in rank order on each rank (so the loss and the stop flag agree bit for bit
 * on all ranks). Without the three flags the process is one rank, as ./train_cuda.
 *
 * The GPU: SLURM_LOCALID or LOCAL_RANK when set, else the rank, modulo the GPUs visible. CPU
 * memory is not reduced here (the CPU trainer uses mpirun); ZeRO-1's shards are, on the device
 * (its norm's partials and a save's pieces, host numbers, go through a device buffer). A rank
 * that fails after the start leaves the others waiting in NCCL: the launcher ends the job.
 *
 * Run in CI against the emulation (make test-nccl-emu: ranks as processes of one machine, each
 * with an emulated GPU); not yet run on several GPUs.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dist/dist.h"
#include "dist/init_file.h"

static int world_rank = 0, world_size = 1, local_rank = 0, local_size = 1;

/* "--flag VALUE" removed from argv; the value, or NULL when the flag is absent. -1: no value. */
static int take_flag(int* argc, char** argv, const char* flag, const char** value) {
    *value = NULL;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], flag) != 0) continue;
        if (i + 1 >= *argc) return -1;
        *value = argv[i + 1];
        memmove(&argv[i], &argv[i + 2], (size_t)(*argc - i - 2 + 1) * sizeof(char*));
        *argc -= 2;
        return 0;
    }
    return 0;
}

/* a whole decimal number in [lo, hi], or -1 */
static long whole(const char* s, long lo, long hi) {
    char* end;
    long v = s != NULL ? strtol(s, &end, 10) : -1;
    if (s == NULL || *s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    return v;
}

/* the leading number of an environment variable ("4(x2)" in slurm's task counts), or fallback */
static int env_int(const char* a, const char* b, int fallback) {
    const char* s = getenv(a);
    if (s == NULL || *s == '\0') s = getenv(b);
    if (s == NULL || *s == '\0') return fallback;
    int v = atoi(s);
    return v >= 0 ? v : fallback;
}

int dist_init(int* argc, char*** argv, char err[256]) {
    const char *rank_s, *world_s, *path, *timeout_s;
    if (take_flag(argc, *argv, "--rank", &rank_s) || take_flag(argc, *argv, "--world", &world_s) ||
        take_flag(argc, *argv, "--init-file", &path) ||
        take_flag(argc, *argv, "--init-timeout", &timeout_s)) {
        snprintf(err, 256, "--rank, --world, --init-file and --init-timeout each take a value");
        return -1;
    }
    if (rank_s == NULL && world_s == NULL && path == NULL) return 0;   /* one process */
    long world = whole(world_s, 1, 1 << 20);
    long rank = world < 0 ? -1 : whole(rank_s, 0, world - 1);
    double timeout = timeout_s != NULL ? atof(timeout_s) : 300.0;
    if (world < 0 || rank < 0 || (world > 1 && path == NULL) || !(timeout > 0.0)) {
        snprintf(err, 256, "a start without MPI takes --rank R --world W --init-file PATH (W >= 1, "
                 "0 <= R < W; --init-timeout S > 0 seconds); got --rank %s --world %s "
                 "--init-file %s", rank_s ? rank_s : "(none)", world_s ? world_s : "(none)",
                 path ? path : "(none)");
        return -1;
    }
    world_rank = (int)rank;
    world_size = (int)world;
    local_rank = env_int("SLURM_LOCALID", "LOCAL_RANK", world_rank);
    local_size = env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", 1);
    if (local_size < 1) local_size = 1;
    if (world_size == 1) return 0;
    size_t n = dist_nccl_id_bytes();
    unsigned char id[1024];
    if (n > sizeof(id)) {
        snprintf(err, 256, "the NCCL id has %zu bytes, more than %zu", n, sizeof(id));
        return -1;
    }
    if (world_rank == 0) {
        if (dist_nccl_make_id(id, err) != 0 || init_file_publish(path, id, n, world_size, err) != 0)
            return -1;
    } else if (init_file_wait(path, id, n, world_size, timeout, err) != 0) {
        return -1;
    }
    if (dist_nccl_init(id, world_rank, world_size, local_rank, err) != 0) return -1;
    /* every rank has joined the communicator, so every rank has read the file: the next job may
     * use the path again (after a failed start it stays, and rank 0 refuses it, naming it) */
    if (world_rank == 0) unlink(path);
    if (world_rank != 0) {   /* as under mpirun: rank 0 alone prints progress */
        fflush(stdout);
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
    }
    return 0;
}

int dist_rank(void) { return world_rank; }
int dist_size(void) { return world_size; }
int dist_local_size(void) { return local_size; }
int dist_local_rank(void) { return local_rank; }
const char* dist_kind(void) { return "nccl, --init-file"; }
int dist_stop_grace_s(void) { return -1; }

int dist_use_backend(const Backend* be, char err[256]) {
    if (world_size == 1 || !be->host_memory) return 0;
    snprintf(err, 256, "--device %s across %d ranks started with --init-file: these ranks sum "
             "gradients in GPU memory (--device cuda); the CPU trainer runs under mpirun "
             "(./train_mpi)", be->name, world_size);
    return -1;
}

static void die(const char* what, const char* err) {
    fprintf(stderr, "seedgpt: rank %d: %s: %s\n", world_rank, what, err);
    exit(1);
}

void dist_allreduce_grads(GPT* m) {
    if (world_size == 1) return;
    char err[256];
    size_t span = dist_grad_span(m);
    m->be->synchronize();   /* the backward's kernels have written every gradient */
    if (dist_nccl_allreduce_sum(m->grads_memory, span, err) != 0) die("the gradients' sum", err);
}

/* every rank's `bytes` bytes of x, in rank order, into all (world_size * bytes) */
static void gather(const void* x, void* all, size_t bytes) {
    char err[256];
    if (dist_nccl_allgather_host(x, all, bytes, err) != 0) die("an all-gather", err);
}

double dist_sum(double x) {
    if (world_size == 1) return x;
    double all[world_size];
    gather(&x, all, sizeof(double));
    double s = all[0];
    for (int r = 1; r < world_size; r++) s += all[r];
    return s;
}

int dist_max(int x) {
    if (world_size == 1) return x;
    int all[world_size];
    gather(&x, all, sizeof(int));
    int m = all[0];
    for (int r = 1; r < world_size; r++)
        if (all[r] > m) m = all[r];
    return m;
}

/* ZeRO-1's shards: the model's arrays on the device, the rest (the norm's partials, a save's
 * pieces) host memory staged through the device */
void dist_reduce_scatter(float* x, const size_t* bounds) {
    char err[256];
    if (world_size > 1 && dist_nccl_reduce_scatter(x, bounds, err) != 0) die("the reduce-scatter", err);
}
void dist_allgather_floats(float* x, const size_t* bounds) {
    dist_allgather_elems(x, bounds, sizeof(float));
}
void dist_allgather_elems(void* x, const size_t* bounds, size_t elem_bytes) {
    char err[256];
    if (world_size > 1 && dist_nccl_allgather(x, bounds, elem_bytes, err) != 0) die("the all-gather", err);
}
void dist_allgather_doubles(double* x, const size_t* bounds) {
    char err[256];
    if (world_size > 1 && dist_nccl_allgather_host_shards(x, bounds, sizeof(double), err) != 0)
        die("an all-gather", err);
}
void dist_send_floats(const float* x, size_t n, int to) {
    char err[256];
    if (dist_nccl_send_host(x, n, to, err) != 0) die("a send", err);
}
void dist_recv_floats(float* x, size_t n, int from) {
    char err[256];
    if (dist_nccl_recv_host(x, n, from, err) != 0) die("a receive", err);
}

int dist_cp_init(int N, char err[256]) {
    if (N == 1) return 0;
    snprintf(err, 256, "--context-parallel %d: not available to ranks started with --init-file "
             "(run ./train_mpi_cuda under mpirun)", N);
    return -1;
}
int dist_cp_size(void) { return 1; }
int dist_cp_rank(void) { return 0; }
int dist_dp_size(void) { return world_size; }
int dist_dp_rank(void) { return world_rank; }
void dist_cp_ring_shift(const float* send, float* recv, size_t n) {}
void dist_cp_ring_start(const float* send, float* recv, size_t n) {}
void dist_cp_ring_wait(void) {}
ContextParallel dist_context_parallel(void) {
    ContextParallel cp = {1, 0, NULL, NULL, NULL};
    return cp;
}
