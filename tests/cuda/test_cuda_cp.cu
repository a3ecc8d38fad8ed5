/* tests/cuda/test_cuda_cp.cu — a context-parallel model on the CUDA backend (DESIGN §9) against
 * one process on the CPU, in one process: N = 2 and 3 ranks, each a host thread with its own
 * model (gpt_build_cp on the CUDA backend), joined by a ring in host memory that copies device
 * buffers (cudaMemcpy). The ranks take turns holding one lock, so one host thread launches at a
 * time (what the emulation allows); a rank lets go of it only inside a ring call, where it waits
 * for the others.
 *   - with dropout 0.1 at every site, the mean of the ranks' losses equals the CPU's loss to
 *     1e-5 relative, and the sum of the ranks' gradients equals the CPU's to 1e-4 per tensor (a
 *     single keep bit at the wrong coordinate would move them far more);
 *   - --recompute layer gives the same bits as none on each rank;
 *   - under --precision bf16 the build refuses context parallelism in one line.
 * The ring here is a test double: it moves the same buffers at the same points as the NCCL ring
 * of ./train_mpi_cuda, which needs several GPUs and has not run.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/device.h"
#include "model/gpt.h"
#include "model/backend.h"
#include "tests/test.h"

#define NT NUM_PARAMETER_TENSORS
#define P_DROP 0.1
#define MAX_RANKS 3

/* ---- the ring: one lock held by the rank that computes ------------------------------------ */

static pthread_mutex_t turn = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static int ring_N, ring_waiting;
static unsigned ring_generation;
static const float* ring_send[MAX_RANKS];
static float* ring_recv[MAX_RANKS];
static size_t ring_n[MAX_RANKS];
static __thread int my_rank;

/* every rank deposits its buffers; the last to arrive moves rank r's send to rank r+1's recv */
static void ring_start(const float* send, float* recv, size_t n) {
    ring_send[my_rank] = send;
    ring_recv[my_rank] = recv;
    ring_n[my_rank] = n;
    unsigned gen = ring_generation;
    if (++ring_waiting == ring_N) {
        for (int r = 0; r < ring_N; r++) {
            int next = (r + 1) % ring_N;
            if (ring_n[next] != ring_n[r]) {
                fprintf(stderr, "test_cuda_cp: ring sizes differ (%zu, %zu)\n", ring_n[r], ring_n[next]);
                exit(1);
            }
            SG_CHECK(cudaMemcpy(ring_recv[next], ring_send[r], ring_n[r] * sizeof(float),
                                cudaMemcpyDeviceToDevice));
        }
        ring_waiting = 0;
        ring_generation++;
        pthread_cond_broadcast(&arrived);
    } else {
        while (gen == ring_generation) pthread_cond_wait(&arrived, &turn);
    }
}
static void ring_wait(void) {}

/* ---- one step ------------------------------------------------------------------------------ */

typedef struct {
    GPTConfig c;
    int B, T, N;
    int* in;
    int* tg;
} Case;

typedef struct {
    const Case* k;
    int rank, every;
    float loss;
    float* grads;   /* host copy of the rank's gradients */
} Rank;

/* rank r's rows of a (B, T) window, in the model's chunk-major layout (train.c's cp_local) */
static void local_rows(const GPT* m, int* local, const int* window, int B, int T, int N) {
    int Tl = T / N;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            int k = t / (Tl / 2), tc = t % (Tl / 2);
            local[((size_t)k * B + b) * (Tl / 2) + tc] = window[(size_t)b * T + gpt_cp_position(m, t)];
        }
}

static void* rank_main(void* arg) {
    Rank* R = (Rank*)arg;
    const Case* k = R->k;
    my_rank = R->rank;
    pthread_mutex_lock(&turn);
    GPT m;
    char err[256];
    RecomputePolicy p = {R->every, 0, R->every > 0 ? CHECK_WARN : CHECK_OFF, 0};
    ContextParallel cp = {k->N, R->rank, ring_start, ring_start, ring_wait};
    if (gpt_build_cp(&m, &k->c, k->B, k->T, &p, backend_by_name("cuda"), &cp, err) != 0) {
        fprintf(stderr, "test_cuda_cp: rank %d: %s\n", R->rank, err);
        exit(1);
    }
    gpt_init_weights(&m, 1234);
    gpt_set_dropout(&m, 99, P_DROP, P_DROP, P_DROP);
    int Tl = k->T / k->N;
    int* in = (int*)malloc(sizeof(int) * k->B * Tl);
    int* tg = (int*)malloc(sizeof(int) * k->B * Tl);
    local_rows(&m, in, k->in, k->B, k->T, k->N);
    local_rows(&m, tg, k->tg, k->B, k->T, k->N);
    gpt_zero_grad(&m);
    R->loss = gpt_forward(&m, in, tg, k->B, Tl, 0, 3, 1);
    gpt_backward(&m, 1.0f / (k->B * k->T));
    R->grads = (float*)malloc(m.num_parameters * sizeof(float));
    m.be->to_host(R->grads, m.grads_memory, m.num_parameters * sizeof(float));
    gpt_free(&m);
    free(in);
    free(tg);
    pthread_mutex_unlock(&turn);
    return NULL;
}

static void run_ranks(const Case* k, int every, Rank* R) {
    pthread_t th[MAX_RANKS];
    ring_N = k->N;
    ring_waiting = 0;
    for (int r = 0; r < k->N; r++) {
        R[r].k = k;
        R[r].rank = r;
        R[r].every = every;
        R[r].grads = NULL;
        if (pthread_create(&th[r], NULL, rank_main, &R[r]) != 0) {
            fprintf(stderr, "test_cuda_cp: pthread_create failed\n");
            exit(1);
        }
    }
    for (int r = 0; r < k->N; r++) pthread_join(th[r], NULL);
}

static void test_cp_on_cuda(int N, int L, int NH, int NKV, int C, int V, int B, int T) {
    Case k;
    GPTConfig c = {T, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};
    k.c = c;
    k.B = B;
    k.T = T;
    k.N = N;
    k.in = (int*)malloc(sizeof(int) * B * T);
    k.tg = (int*)malloc(sizeof(int) * B * T);
    for (int j = 0; j < B * T; j++) {
        k.in[j] = (int)(test_uniform() * V) % V;
        k.tg[j] = (int)(test_uniform() * V) % V;
    }

    /* one process on the CPU */
    GPT one;
    char err[256], name[160];
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    if (gpt_build_on(&one, &c, B, T, &none, &backend_cpu, err) != 0) {
        fprintf(stderr, "test_cuda_cp: %s\n", err);
        exit(1);
    }
    gpt_init_weights(&one, 1234);
    gpt_set_dropout(&one, 99, P_DROP, P_DROP, P_DROP);
    gpt_zero_grad(&one);
    float loss1 = gpt_forward(&one, k.in, k.tg, B, T, 0, 3, 1);
    gpt_backward(&one, 1.0f / (B * T));

    Rank R[MAX_RANKS], Rr[MAX_RANKS];
    run_ranks(&k, 0, R);
    run_ranks(&k, 1, Rr);

    double loss = 0;
    for (int r = 0; r < N; r++) loss += R[r].loss;
    loss /= N;
    float* sum = (float*)calloc(one.num_parameters, sizeof(float));
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < one.num_parameters; i++) sum[i] += R[r].grads[i];
    const float* t[NT];
    memcpy(t, &one.params, sizeof(t));
    double worst = 0;
    const char* which = "";
    for (int i = 0; i < NT; i++) {
        size_t off = (size_t)(t[i] - one.params_memory);
        double e = rel_err_ff(sum + off, one.grads_memory + off, one.param_sizes[i]);
        if (!(e <= worst)) { worst = e; which = gpt_param_names[i]; }
    }
    const double lerr = fabs(loss - loss1) / fabs((double)loss1);
    snprintf(name, sizeof(name), "cp%d_cuda_step_matches_one_cpu_process_with_dropout_L%d_NH%d_NKV%d_T%d",
             N, L, NH, NKV, T);
    expect(lerr <= 1e-5 && worst <= 1e-4, name,
           "loss %.8f (mean of %d CUDA ranks) vs %.8f (one CPU process), rel %.2e; worst gradient "
           "tensor %s (sum over the ranks) rel err %.2e (tol 1e-5, 1e-4)", loss, N, loss1, lerr,
           which, worst);

    size_t differ = 0;
    for (int r = 0; r < N; r++) {
        differ += memcmp(&R[r].loss, &Rr[r].loss, sizeof(float)) != 0;
        for (size_t i = 0; i < one.num_parameters; i++)
            differ += memcmp(&R[r].grads[i], &Rr[r].grads[i], sizeof(float)) != 0;
    }
    snprintf(name, sizeof(name), "cp%d_cuda_recompute_layer_bitwise_none_L%d_T%d", N, L, T);
    expect(differ == 0, name, "%zu of %zu floats (losses and gradients of %d ranks) differ", differ,
           (size_t)N * (one.num_parameters + 1), N);

    for (int r = 0; r < N; r++) { free(R[r].grads); free(Rr[r].grads); }
    free(sum);
    free(k.in);
    free(k.tg);
    gpt_free(&one);
}

/* bf16 on CUDA has no block kernels: gpt_build_cp refuses it in one line naming the precision */
static void test_bf16_refused(void) {
    const Backend* bf16 = backend_lookup("cuda", "bf16");
    GPTConfig c = {16, 67, gpt_pad_vocab(67), 1, 2, 2, 32, 0, 0, 0, 0};
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    ContextParallel cp = {2, 0, ring_start, ring_start, ring_wait};
    GPT m;
    char err[256] = "";
    int rc = bf16 ? gpt_build_cp(&m, &c, 1, 16, &none, bf16, &cp, err) : -1;
    expect(bf16 != NULL && rc != 0 && strstr(err, "bf16") != NULL && strchr(err, '\n') == NULL,
           "cp_build_refuses_cuda_bf16_in_one_line", "rc %d, \"%s\"", rc, err);
    if (rc == 0) gpt_free(&m);
}

int main(void) {
    if (backend_by_name("cuda") == NULL) {
        printf("SKIP test_cuda_cp: this build has no CUDA backend\n");
        return 0;
    }
    test_bf16_refused();
    test_cp_on_cuda(2, 2, 2, 1, 32, 67, 2, 16);   /* grouped-query heads; chunks of 4 */
    test_cp_on_cuda(3, 1, 2, 2, 32, 67, 1, 12);   /* chunks of 2 */
    return test_finish();
}
