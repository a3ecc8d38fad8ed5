/* dist/dist_mpi.c — dist/dist.h over MPI (`make mpi`: ./train_mpi, compiled with mpicc).
 *
 * Host memory (the CPU backend): the gradient block reduce-scattered in rank order, then
 * all-gathered (ZeRO-1 gathers the updated weights instead, model/zero.h). Device memory
 * (CUDA, built with SEEDGPT_NCCL): the same rank-order reduce-scatter and all-gather on the
 * device pointers, the bytes moved by NCCL (dist/dist_nccl.cu); MPI only carries the NCCL id
 * from rank 0 to the others.
 *
 * Determinism: on host memory every sum over the ranks is added in rank order by seedgpt itself,
 * x_0 + x_1 + ... + x_{R-1}: the gradients by a reduce-scatter over point-to-point transfers (the
 * owner of each shard receives the others' pieces and adds them in rank order), the scalars by a
 * gather and a sum on every rank. MPI only moves bytes (send, receive, broadcast, gather), so the
 * bits do not depend on the collective algorithms MPI would pick, and plain data parallelism and
 * ZeRO-1 (which share the reduce-scatter) agree bit for bit. Against one process with the same
 * global batch the results agree to rounding (the partial sums are grouped differently), not bit
 * for bit. Device memory is summed in the same order, by dist/dist_nccl.cu.
 */
#include "dist/dist.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>   /* on_exit: glibc, _GNU_SOURCE (the Makefile's CFLAGS) */
#include <string.h>

static int world_rank = 0, world_size = 1, local_rank = 0, local_size = 1;
static int cp_size = 1, cp_rank = 0;
static size_t* even_bounds;   /* (world_size + 1) plain data parallelism's shards of the gradients */
static double* gathered;      /* (world_size) dist_sum's values */
static MPI_Comm cp_comm = MPI_COMM_NULL;   /* this rank's context-parallel group */
#ifdef SEEDGPT_NCCL
static int nccl_ready = 0;
static int model_on_device = 0;   /* the model's arrays (gradients, weights, the ring's buffers)
                                     * are device memory: NCCL moves them */
#endif

/* a process leaving with status 0 finalizes MPI (mpirun counts a process that did not as failed) */
static void finalize_on_exit(int status, void* arg) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (status == 0 && initialized && !finalized) MPI_Finalize();
}

static void die_mpi(const char* what, int code) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    fprintf(stderr, "seedgpt: rank %d: %s failed: %s\n", world_rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int dist_init(int* argc, char*** argv, char err[256]) {
    int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) {
        snprintf(err, 256, "MPI_Init failed (error %d)", rc);
        return -1;
    }
    on_exit(finalize_on_exit, NULL);
    /* errors come back to us, so that the message names the call */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL,
                            &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &local_rank);
        MPI_Comm_size(local, &local_size);
        MPI_Comm_free(&local);
    }
    even_bounds = calloc((size_t)world_size + 1, sizeof(size_t));
    gathered = calloc((size_t)world_size, sizeof(double));
    if (even_bounds == NULL || gathered == NULL) {
        snprintf(err, 256, "rank %d: out of memory for %d ranks' tables", world_rank, world_size);
        return -1;
    }
    if (world_rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        snprintf(err, 256, "rank %d: cannot send standard output to /dev/null", world_rank);
        return -1;
    }
    return 0;
}

int dist_rank(void) { return world_rank; }
int dist_size(void) { return world_size; }
int dist_local_size(void) { return local_size; }
int dist_local_rank(void) { return local_rank; }

const char* dist_kind(void) {
#ifdef SEEDGPT_NCCL
    return "mpi+nccl";
#else
    return "mpi";
#endif
}

int dist_stop_grace_s(void) {
    if (getenv("OMPI_COMM_WORLD_SIZE") == NULL) return -1;   /* not started by Open MPI */
    const char* v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    char* end;
    long s = v != NULL && *v != '\0' ? strtol(v, &end, 10) : 1;   /* Open MPI's default: 1 s */
    if (v != NULL && *v != '\0' && (*end != '\0' || s < 0)) return 1;
    return s > 1000000 ? 1000000 : (int)s;
}

int dist_use_backend(const Backend* be, char err[256]) {
    if (be->host_memory || world_size == 1) return 0;
#ifdef SEEDGPT_NCCL
    if (nccl_ready) { model_on_device = 1; return 0; }
    size_t n = dist_nccl_id_bytes();
    char* id = calloc(1, n);
    int ok = id != NULL && (world_rank != 0 || dist_nccl_make_id(id, err) == 0);
    if (id == NULL) snprintf(err, 256, "out of memory for the NCCL id");
    /* every rank takes part in the broadcast, so that none waits for a rank that failed */
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (ok) snprintf(err, 256, "rank 0 could not create the NCCL id");
        free(id);
        return -1;
    }
    int rc = MPI_Bcast(id, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) die_mpi("MPI_Bcast of the NCCL id", rc);
    rc = dist_nccl_init(id, world_rank, world_size, local_rank, err);
    free(id);
    if (rc != 0) return -1;
    nccl_ready = 1;
    model_on_device = 1;
    return 0;
#else
    snprintf(err, 256, "--device %s across %d processes: this build sums gradients in host memory "
             "only; build the NCCL path with `make mpi-cuda`", be->name, world_size);
    return -1;
#endif
}

void dist_allreduce_grads(GPT* m) {
    if (world_size == 1) return;
    size_t span = dist_grad_span(m);
    if (!m->be->host_memory) {
#ifdef SEEDGPT_NCCL
        char err[256];
        m->be->synchronize();   /* the backward's kernels have written every gradient */
        if (!nccl_ready || dist_nccl_allreduce_sum(m->grads_memory, span, err) != 0) {
            fprintf(stderr, "seedgpt: rank %d: %s\n", world_rank,
                    nccl_ready ? err : "NCCL is not set up (dist_use_backend was not called)");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        return;
#else
        fprintf(stderr, "seedgpt: rank %d: gradients in %s memory and no NCCL in this build\n",
                world_rank, m->be->name);
        MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    }
    for (int s = 0; s <= world_size; s++)
        even_bounds[s] = (size_t)((double)span * s / world_size);
    even_bounds[world_size] = span;
    dist_reduce_scatter(m->grads_memory, even_bounds);
    dist_allgather_floats(m->grads_memory, even_bounds);
}

double dist_sum(double x) {
    if (world_size == 1) return x;
    int rc = MPI_Allgather(&x, 1, MPI_DOUBLE, gathered, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) die_mpi("MPI_Allgather of a sum", rc);
    double y = gathered[0];
    for (int q = 1; q < world_size; q++) y += gathered[q];
    return y;
}

/* ---- sums in rank order, shards ----------------------------------------------------------- */

#define RS_CHUNK ((size_t)1 << 18)   /* floats per transfer of the reduce-scatter */
#define RS_TAG 31
static float *rs_recv, *rs_acc;      /* (rs_cap) the piece received, the running sum */
static size_t rs_cap;
static MPI_Request* rs_req;          /* (world_size) the sends of one round */

/* Round c moves chunk c of every shard: each rank first starts the sends of its pieces of the
 * others' shards (MPI_Isend: nobody blocks before every send of the round is posted), then, as
 * owner, receives its own shard's pieces from ranks 0, 1, ... in turn and adds them in that
 * order, its own piece in its place; the round ends when its sends are done. Messages between
 * two ranks with one tag arrive in the order sent, one per round: receive c is send c. */
#ifdef SEEDGPT_NCCL
static void die_nccl(const char* what, const char* err) {
    fprintf(stderr, "seedgpt: rank %d: %s: %s\n", world_rank, what, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#endif

void dist_reduce_scatter(float* x, const size_t* bounds) {
    if (world_size == 1) return;
#ifdef SEEDGPT_NCCL
    if (model_on_device) {
        char err[256];
        if (dist_nccl_reduce_scatter(x, bounds, err) != 0) die_nccl("the reduce-scatter", err);
        return;
    }
#endif
    size_t largest = 0;
    for (int s = 0; s < world_size; s++)
        if (bounds[s + 1] - bounds[s] > largest) largest = bounds[s + 1] - bounds[s];
    size_t need = largest < RS_CHUNK ? largest : RS_CHUNK;
    if (need > rs_cap || rs_req == NULL) {
        free(rs_recv);
        free(rs_acc);
        free(rs_req);
        rs_recv = malloc((need ? need : 1) * sizeof(float));
        rs_acc = malloc((need ? need : 1) * sizeof(float));
        rs_req = malloc((size_t)world_size * sizeof(MPI_Request));
        if (rs_recv == NULL || rs_acc == NULL || rs_req == NULL) {
            fprintf(stderr, "seedgpt: rank %d: out of memory for the reduce-scatter's buffers "
                    "(%zu floats)\n", world_rank, need);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        rs_cap = need;
    }
    for (size_t c = 0; c * RS_CHUNK < largest; c++) {
        int nreq = 0;
        for (int s = 0; s < world_size; s++) {
            size_t lo = bounds[s] + c * RS_CHUNK;
            if (s == world_rank || lo >= bounds[s + 1]) continue;
            size_t n = bounds[s + 1] - lo < RS_CHUNK ? bounds[s + 1] - lo : RS_CHUNK;
            int rc = MPI_Isend(x + lo, (int)n, MPI_FLOAT, s, RS_TAG, MPI_COMM_WORLD, &rs_req[nreq++]);
            if (rc != MPI_SUCCESS) die_mpi("MPI_Isend of the reduce-scatter", rc);
        }
        size_t lo = bounds[world_rank] + c * RS_CHUNK;
        if (lo < bounds[world_rank + 1]) {
            size_t n = bounds[world_rank + 1] - lo < RS_CHUNK ? bounds[world_rank + 1] - lo : RS_CHUNK;
            for (int q = 0; q < world_size; q++) {
                const float* piece = x + lo;
                if (q != world_rank) {
                    int rc = MPI_Recv(rs_recv, (int)n, MPI_FLOAT, q, RS_TAG, MPI_COMM_WORLD,
                                      MPI_STATUS_IGNORE);
                    if (rc != MPI_SUCCESS) die_mpi("MPI_Recv of the reduce-scatter", rc);
                    piece = rs_recv;
                }
                if (q == 0) memcpy(rs_acc, piece, n * sizeof(float));
                else
                    for (size_t i = 0; i < n; i++) rs_acc[i] += piece[i];
            }
            memcpy(x + lo, rs_acc, n * sizeof(float));
        }
        int rc = MPI_Waitall(nreq, rs_req, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) die_mpi("MPI_Waitall of the reduce-scatter", rc);
    }
}

/* shard s of x (elements of `bytes` bytes) broadcast from rank s, in chunks of 2^30 bytes */
static void allgather_bytes(char* x, const size_t* bounds, size_t bytes) {
    if (world_size == 1) return;
    const size_t chunk = (size_t)1 << 30;
    for (int s = 0; s < world_size; s++) {
        size_t lo = bounds[s] * bytes, hi = bounds[s + 1] * bytes;
        for (size_t off = lo; off < hi; off += chunk) {
            size_t n = hi - off < chunk ? hi - off : chunk;
            int rc = MPI_Bcast(x + off, (int)n, MPI_BYTE, s, MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS) die_mpi("MPI_Bcast of a shard", rc);
        }
    }
}

/* the model's arrays: on the device, through NCCL */
static void allgather_model(char* x, const size_t* bounds, size_t bytes) {
#ifdef SEEDGPT_NCCL
    if (model_on_device) {
        char err[256];
        if (world_size > 1 && dist_nccl_allgather(x, bounds, bytes, err) != 0)
            die_nccl("the all-gather", err);
        return;
    }
#endif
    allgather_bytes(x, bounds, bytes);
}

void dist_allgather_floats(float* x, const size_t* bounds) {
    allgather_model((char*)x, bounds, sizeof(float));
}

void dist_allgather_doubles(double* x, const size_t* bounds) {
    allgather_bytes((char*)x, bounds, sizeof(double));
}

void dist_allgather_elems(void* x, const size_t* bounds, size_t elem_bytes) {
    allgather_model((char*)x, bounds, elem_bytes);
}

#define P2P_TAG 41
void dist_send_floats(const float* x, size_t n, int to) {
    const size_t chunk = (size_t)1 << 30;
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        int rc = MPI_Send(x + off, (int)k, MPI_FLOAT, to, P2P_TAG, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) die_mpi("MPI_Send", rc);
    }
}

void dist_recv_floats(float* x, size_t n, int from) {
    const size_t chunk = (size_t)1 << 30;
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        int rc = MPI_Recv(x + off, (int)k, MPI_FLOAT, from, P2P_TAG, MPI_COMM_WORLD,
                          MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) die_mpi("MPI_Recv", rc);
    }
}

int dist_max(int x) {
    int y = x;
    int rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) die_mpi("MPI_Allreduce of a maximum", rc);
    return y;
}

/* ---- context parallelism ------------------------------------------------------------------ */

int dist_cp_init(int N, char err[256]) {
    if (N < 1 || world_size % N != 0) {
        snprintf(err, 256, "--context-parallel %d does not divide the %d ranks of this run "
                 "(ranks = data-parallel x context-parallel)", N, world_size);
        return -1;
    }
    cp_size = N;
    cp_rank = world_rank % N;
    if (N == 1) return 0;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, world_rank / N, cp_rank, &cp_comm);
    if (rc != MPI_SUCCESS) die_mpi("MPI_Comm_split of the context-parallel groups", rc);
    MPI_Comm_set_errhandler(cp_comm, MPI_ERRORS_RETURN);
    return 0;
}

int dist_cp_size(void) { return cp_size; }
int dist_cp_rank(void) { return cp_rank; }
int dist_dp_size(void) { return world_size / cp_size; }
int dist_dp_rank(void) { return world_rank / cp_size; }

#ifdef SEEDGPT_NCCL
/* world ranks of this rank's ring neighbours (NCCL's communicator is the world's) */
static void ring_neighbours(int* next, int* prev) {
    int base = world_rank - cp_rank;
    *next = base + (cp_rank + 1) % cp_size;
    *prev = base + (cp_rank + cp_size - 1) % cp_size;
}

static void die_nccl_ring(int rc, const char* err) {
    if (rc == 0) return;
    fprintf(stderr, "seedgpt: rank %d: %s\n", world_rank, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#endif

void dist_cp_ring_shift(const float* send, float* recv, size_t n) {
#ifdef SEEDGPT_NCCL
    if (model_on_device) {
        char err[256];
        int next, prev;
        ring_neighbours(&next, &prev);
        die_nccl_ring(dist_nccl_ring_start(send, recv, n, next, prev, err), err);
        die_nccl_ring(dist_nccl_ring_wait(err), err);
        return;
    }
#endif
    int next = (cp_rank + 1) % cp_size, prev = (cp_rank + cp_size - 1) % cp_size;
    const size_t chunk = (size_t)1 << 30;   /* MPI counts are int */
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        int rc = MPI_Sendrecv(send + off, (int)k, MPI_FLOAT, next, 23, recv + off, (int)k,
                              MPI_FLOAT, prev, 23, cp_comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) die_mpi("MPI_Sendrecv of the context-parallel ring", rc);
    }
}

/* The split shift: one send and one receive in flight (a shift longer than MPI's int count goes
 * whole in dist_cp_ring_start instead, and the wait has nothing to do). */
static MPI_Request ring_req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

void dist_cp_ring_start(const float* send, float* recv, size_t n) {
#ifdef SEEDGPT_NCCL
    if (model_on_device) {
        char err[256];
        int next, prev;
        ring_neighbours(&next, &prev);
        die_nccl_ring(dist_nccl_ring_start(send, recv, n, next, prev, err), err);
        return;
    }
#endif
    if (n > ((size_t)1 << 30)) { dist_cp_ring_shift(send, recv, n); return; }
    int next = (cp_rank + 1) % cp_size, prev = (cp_rank + cp_size - 1) % cp_size;
    int rc = MPI_Irecv(recv, (int)n, MPI_FLOAT, prev, 24, cp_comm, &ring_req[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(send, (int)n, MPI_FLOAT, next, 24, cp_comm, &ring_req[1]);
    if (rc != MPI_SUCCESS) die_mpi("MPI_Isend/MPI_Irecv of the context-parallel ring", rc);
}

void dist_cp_ring_wait(void) {
#ifdef SEEDGPT_NCCL
    if (model_on_device) {
        char err[256];
        die_nccl_ring(dist_nccl_ring_wait(err), err);
        return;
    }
#endif
    int rc = MPI_Waitall(2, ring_req, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) die_mpi("MPI_Waitall of the context-parallel ring", rc);
}

ContextParallel dist_context_parallel(void) {
    ContextParallel cp = {cp_size, cp_rank, NULL, NULL, NULL};
    if (cp_size > 1) {
        cp.ring_shift = dist_cp_ring_shift;
        cp.ring_start = dist_cp_ring_start;
        cp.ring_wait = dist_cp_ring_wait;
    }
    return cp;
}
