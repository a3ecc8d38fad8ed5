/* tests/bench_attention.c — speed and memory of the CPU flash attention (not a test).
 *
 * For each sequence length T: forward and backward time of attention/flash_cpu.c with and without
 * dropout, the achieved GFLOP/s as a fraction of this machine's measured fp32 FMA peak
 * (cpu/peak.h, /pk) and, as a second reference, of its OpenBLAS sgemm rate (/sg), both measured in
 * the same run, the bytes the caller allocates (qkv, out, lse, dout, dqkv, backward scratch), and the
 * same for a naive fp32 attention that materialises the T x T probabilities and runs its products
 * through sgemm (where it fits). Prints a table and one JSON line per row.
 *
 * FLOPs are the usual nominal counts: forward 4 B NH T^2 HD (QK^T and PV), backward 2.5 times
 * that, both halved for the causal mask. The flash backward really does more (it recomputes the
 * scores and do.v once for dK/dV and once for dQ, 7 tile products against the nominal 5), and the
 * naive one computes the full T x T products; both are still charged the nominal count, so the
 * numbers compare time for the same job.
 *
 * usage: bench_attention [T ...]     (default 256 1024 4096 8192; threads from OMP_NUM_THREADS)
 * Times are wall clock, best of a few runs; on a shared machine compare the /pk and /sg columns,
 * which divide by rates measured under the same conditions just before.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <cblas.h>
#include "attention/attention.h"
#include "cpu/peak.h"

/* bench configuration: a GPT-2 small layer */
#define BENCH_B 1
#define BENCH_NH 12
#define BENCH_NKV 12
#define BENCH_HD 64
#define BENCH_NAIVE_MAX_T 4096   /* the naive attention keeps B*NH*T*T floats */

static float* bench_alloc(size_t n, size_t* total) {
    float* p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) { fprintf(stderr, "bench_attention: out of memory allocating %zu floats\n", n); exit(1); }
    *total += n * sizeof(float);
    return p;
}

static void bench_fill(float* x, size_t n, unsigned long long seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* ---- sgemm rate ------------------------------------------------------------------------------ */

static double sgemm_gflops(int n) {
    float* a = malloc(sizeof(float) * n * n);
    float* b = malloc(sizeof(float) * n * n);
    float* c = malloc(sizeof(float) * n * n);
    bench_fill(a, (size_t)n * n, 1);
    bench_fill(b, (size_t)n * n, 2);
    double best = 1e30;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = omp_get_wtime();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = omp_get_wtime() - t0;
        if (rep > 0 && t < best) best = t;   /* rep 0 warms up */
    }
    free(a); free(b); free(c);
    return 2.0 * n * n * (double)n / best * 1e-9;
}

/* ---- naive attention: T x T probabilities, sgemm products ------------------------------------ */

/* Fills keep[j] (1 or 0, j < n) for query row i, one Philox call per four keys. */
static void naive_keep_row(float* keep, int n, uint64_t seed, uint32_t g, uint32_t h, uint32_t i,
                           uint32_t thr) {
    for (int base = 0; base < n; base += 32)
        for (int lo = 0; lo < 8; lo++) {
            uint32_t draw[4];
            philox_attn_draw4(seed, g, h, i, (uint32_t)(base >> 5), (uint32_t)lo, draw);
            for (int w = 0; w < 4; w++) {
                int j = base + 8 * w + lo;
                if (j < n) keep[j] = draw[w] >= thr ? 1.0f : 0.0f;
            }
        }
}

/* The naive attention runs one (sequence, head) per OpenMP thread with single-threaded sgemm
 * calls (openblas_set_num_threads(1) around it), each thread with its own T x T buffers: the
 * fastest arrangement of this algorithm on a few cores, and no two thread pools spinning at once. */
typedef struct {
    float* P;   /* (B, NH, T, T) softmax probabilities, kept for the backward */
    float* W;   /* (nthreads, T, T) per-thread scratch: dropped probabilities, then dP */
    float* W2;  /* (nthreads, T, T) per-thread scratch: m scale, the keep factors of one head */
} NaiveBufs;

static void naive_forward(NaiveBufs* nb, float* out, float* lse, const float* qkv, int B, int T,
                          int NH, int NKV, int HD, uint64_t seed, Dropout drop) {
    const int QKV = (NH + 2 * NKV) * HD, C = NH * HD, G = NH / NKV;
    const float sigma = 1.0f / sqrtf((float)HD);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        float* P = nb->P + (size_t)bh * T * T;
        float* W = nb->W + (size_t)omp_get_thread_num() * T * T;
        const float* q = qkv + (size_t)b * T * QKV + (size_t)h * HD;
        const float* k = qkv + (size_t)b * T * QKV + (size_t)(NH + h / G) * HD;
        const float* v = qkv + (size_t)b * T * QKV + (size_t)(NH + NKV + h / G) * HD;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, sigma, q, QKV, k, QKV,
                    0.0f, P, T);
        for (int i = 0; i < T; i++) {
            float* p = P + (size_t)i * T;
            float* w = W + (size_t)i * T;
            float mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= i; j++) mx = p[j] > mx ? p[j] : mx;
            for (int j = 0; j <= i; j++) { p[j] = expf(p[j] - mx); sum += p[j]; }
            for (int j = 0; j <= i; j++) p[j] /= sum;
            for (int j = i + 1; j < T; j++) p[j] = 0.0f;
            lse[(size_t)bh * T + i] = mx + logf(sum);
            if (dropout_active(drop)) {
                naive_keep_row(w, i + 1, seed, (uint32_t)b, (uint32_t)h, (uint32_t)i, drop.thr);
                for (int j = 0; j <= i; j++) w[j] = w[j] * drop.scale * p[j];
            } else {
                for (int j = 0; j <= i; j++) w[j] = p[j];
            }
            for (int j = i + 1; j < T; j++) w[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, 1.0f, W, T, v, QKV,
                    0.0f, out + (size_t)b * T * C + (size_t)h * HD, C);
    }
}

/* dV and dK of a kv head sum over the G query heads of its group: the group is one work item. */
static void naive_backward(NaiveBufs* nb, float* dqkv, const float* dout, const float* qkv,
                           int B, int T, int NH, int NKV, int HD, uint64_t seed, Dropout drop) {
    const int QKV = (NH + 2 * NKV) * HD, C = NH * HD, G = NH / NKV;
    const float sigma = 1.0f / sqrtf((float)HD);
    memset(dqkv, 0, sizeof(float) * (size_t)B * T * QKV);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bk = 0; bk < B * NKV; bk++) {
        const int b = bk / NKV, kvh = bk % NKV;
        float* W = nb->W + (size_t)omp_get_thread_num() * T * T;
        float* W2 = nb->W2 + (size_t)omp_get_thread_num() * T * T;
        const size_t base = (size_t)b * T * QKV;
        for (int h = kvh * G; h < (kvh + 1) * G; h++) {
            const float* P = nb->P + ((size_t)b * NH + h) * T * T;
            const float* dO = dout + (size_t)b * T * C + (size_t)h * HD;
            /* W = m scale P; dV += W^T dO */
            for (int i = 0; i < T; i++) {
                float* ms = W2 + (size_t)i * T;
                if (dropout_active(drop)) {
                    naive_keep_row(ms, i + 1, seed, (uint32_t)b, (uint32_t)h, (uint32_t)i, drop.thr);
                    for (int j = 0; j <= i; j++) ms[j] *= drop.scale;
                } else {
                    for (int j = 0; j <= i; j++) ms[j] = 1.0f;
                }
                for (int j = i + 1; j < T; j++) ms[j] = 0.0f;
                for (int j = 0; j < T; j++) W[(size_t)i * T + j] = ms[j] * P[(size_t)i * T + j];
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, 1.0f, W, T, dO, C,
                        1.0f, dqkv + base + (size_t)(NH + NKV + kvh) * HD, QKV);
            /* dW = dO V^T; dP = m scale dW; dS = P (dP - rowsum(P dP)) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HD, 1.0f, dO, C,
                        qkv + base + (size_t)(NH + NKV + kvh) * HD, QKV, 0.0f, W, T);
            for (int i = 0; i < T; i++) {
                float* w = W + (size_t)i * T;
                const float* ms = W2 + (size_t)i * T;
                const float* p = P + (size_t)i * T;
                float D = 0.0f;
                for (int j = 0; j <= i; j++) { w[j] *= ms[j]; D += p[j] * w[j]; }
                for (int j = 0; j < T; j++) w[j] = p[j] * (w[j] - D);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HD, T, sigma, W, T,
                        qkv + base + (size_t)(NH + kvh) * HD, QKV, 0.0f,
                        dqkv + base + (size_t)h * HD, QKV);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HD, T, sigma, W, T,
                        qkv + base + (size_t)h * HD, QKV, 1.0f,
                        dqkv + base + (size_t)(NH + kvh) * HD, QKV);
        }
    }
}

/* ---- timing ---------------------------------------------------------------------------------- */

typedef struct { double fwd_s, bwd_s; size_t bytes; } BenchResult;

/* Extra runs after the first (the best is kept): up to 5 while they fit in about 0.6 s, one
 * more for runs up to 2 s, none beyond. The machine may be shared, and the best of a few is the
 * least disturbed. */
static int bench_reps(double first_s) {
    if (first_s > 2.0) return 0;
    int reps = (int)(0.6 / (first_s + 1e-9));
    return reps < 1 ? 1 : reps > 5 ? 5 : reps;
}

static BenchResult bench_flash(int T, double p, int nthreads) {
    const int B = BENCH_B, NH = BENCH_NH, NKV = BENCH_NKV, HD = BENCH_HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    BenchResult r = {0, 0, 0};
    float* qkv = bench_alloc((size_t)B * T * QKV, &r.bytes);
    float* out = bench_alloc((size_t)B * T * C, &r.bytes);
    float* lse = bench_alloc((size_t)B * NH * T, &r.bytes);
    float* dout = bench_alloc((size_t)B * T * C, &r.bytes);
    float* dqkv = bench_alloc((size_t)B * T * QKV, &r.bytes);
    float* scratch = bench_alloc(attention_backward_scratch_floats(B, T, NH, NKV, HD, nthreads), &r.bytes);
    bench_fill(qkv, (size_t)B * T * QKV, 3);
    bench_fill(dout, (size_t)B * T * C, 4);
    Dropout drop = dropout_make(p);
    const uint64_t seed = 0x5eed;

    double t0 = omp_get_wtime();
    attention_forward(out, lse, qkv, B, T, NH, NKV, HD, 0, seed, drop);
    r.fwd_s = omp_get_wtime() - t0;
    for (int rep = bench_reps(r.fwd_s); rep > 0; rep--) {
        t0 = omp_get_wtime();
        attention_forward(out, lse, qkv, B, T, NH, NKV, HD, 0, seed, drop);
        double t = omp_get_wtime() - t0;
        if (t < r.fwd_s) r.fwd_s = t;
    }
    t0 = omp_get_wtime();
    attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, 0, seed, drop);
    r.bwd_s = omp_get_wtime() - t0;
    for (int rep = bench_reps(r.bwd_s); rep > 0; rep--) {
        t0 = omp_get_wtime();
        attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, 0, seed, drop);
        double t = omp_get_wtime() - t0;
        if (t < r.bwd_s) r.bwd_s = t;
    }
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(scratch);
    return r;
}

static BenchResult bench_naive(int T, double p, int nthreads) {
    const int B = BENCH_B, NH = BENCH_NH, NKV = BENCH_NKV, HD = BENCH_HD;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    BenchResult r = {0, 0, 0};
    float* qkv = bench_alloc((size_t)B * T * QKV, &r.bytes);
    float* out = bench_alloc((size_t)B * T * C, &r.bytes);
    float* lse = bench_alloc((size_t)B * NH * T, &r.bytes);
    float* dout = bench_alloc((size_t)B * T * C, &r.bytes);
    float* dqkv = bench_alloc((size_t)B * T * QKV, &r.bytes);
    NaiveBufs nb;
    nb.P = bench_alloc((size_t)B * NH * T * T, &r.bytes);
    nb.W = bench_alloc((size_t)nthreads * T * T, &r.bytes);
    nb.W2 = bench_alloc((size_t)nthreads * T * T, &r.bytes);
    bench_fill(qkv, (size_t)B * T * QKV, 3);
    bench_fill(dout, (size_t)B * T * C, 4);
    Dropout drop = dropout_make(p);
    const uint64_t seed = 0x5eed;
    r.fwd_s = r.bwd_s = 1e30;
    int reps = T >= 4096 ? 1 : 3;
    openblas_set_num_threads(1);
    for (int rep = 0; rep < reps; rep++) {
        double t0 = omp_get_wtime();
        naive_forward(&nb, out, lse, qkv, B, T, NH, NKV, HD, seed, drop);
        double t1 = omp_get_wtime();
        naive_backward(&nb, dqkv, dout, qkv, B, T, NH, NKV, HD, seed, drop);
        double t2 = omp_get_wtime();
        if (t1 - t0 < r.fwd_s) r.fwd_s = t1 - t0;
        if (t2 - t1 < r.bwd_s) r.bwd_s = t2 - t1;
    }
    openblas_set_num_threads(nthreads);
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(nb.P); free(nb.W); free(nb.W2);
    return r;
}

static void bench_print(const char* impl, int T, double p, BenchResult r, double sgemm,
                        double peak, double dropout_cost_pct) {
    const int B = BENCH_B, NH = BENCH_NH, HD = BENCH_HD;
    const double fwd_flop = 4.0 * B * NH * (double)T * T * HD / 2.0, bwd_flop = 2.5 * fwd_flop;
    const double fwd_gf = fwd_flop / r.fwd_s * 1e-9, bwd_gf = bwd_flop / r.bwd_s * 1e-9;
    char cost[32] = "";
    if (dropout_cost_pct == dropout_cost_pct) snprintf(cost, sizeof cost, "%+.1f%%", dropout_cost_pct);
    printf("%-6s %5d %4.2f %10.2f %10.2f %8.1f %8.1f %6.3f %6.3f %6.3f %6.3f %10.1f %9s %8.1f %8.1f\n",
           impl, T, p, r.fwd_s * 1e3, r.bwd_s * 1e3, fwd_gf, bwd_gf, fwd_gf / peak, bwd_gf / peak,
           fwd_gf / sgemm, bwd_gf / sgemm, (double)r.bytes / (1 << 20), cost, peak, sgemm);
    printf("{\"bench\":\"attention\",\"impl\":\"%s\",\"B\":%d,\"T\":%d,\"NH\":%d,\"NKV\":%d,\"HD\":%d,"
           "\"p\":%.2f,\"threads\":%d,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"fwd_gflops\":%.2f,"
           "\"bwd_gflops\":%.2f,\"fwd_frac_sgemm\":%.4f,\"bwd_frac_sgemm\":%.4f,\"sgemm_gflops\":%.2f,"
           "\"mem_bytes\":%zu,\"peak_gflops\":%.2f,\"fwd_frac_peak\":%.4f,\"bwd_frac_peak\":%.4f",
           impl, B, T, NH, BENCH_NKV, HD, p, omp_get_max_threads(), r.fwd_s * 1e3, r.bwd_s * 1e3,
           fwd_gf, bwd_gf, fwd_gf / sgemm, bwd_gf / sgemm, sgemm, r.bytes, peak, fwd_gf / peak,
           bwd_gf / peak);
    if (dropout_cost_pct == dropout_cost_pct) printf(",\"dropout_cost_pct\":%.2f", dropout_cost_pct);
    printf("}\n");
    fflush(stdout);
}

int main(int argc, char** argv) {
    int Ts[16], nT = 0;
    for (int a = 1; a < argc && nT < 16; a++) Ts[nT++] = atoi(argv[a]);
    if (nT == 0) { Ts[0] = 256; Ts[1] = 1024; Ts[2] = 4096; Ts[3] = 8192; nT = 4; }
    const int nthreads = omp_get_max_threads();
    openblas_set_num_threads(nthreads);

    double load = -1;
    FILE* f = fopen("/proc/loadavg", "r");
    if (f) { if (fscanf(f, "%lf", &load) != 1) load = -1; fclose(f); }
    printf("# attention fwd+bwd, B=%d NH=%d NKV=%d HD=%d, %d threads, load average %.2f at start\n",
           BENCH_B, BENCH_NH, BENCH_NKV, BENCH_HD, nthreads, load);
    printf("# GFLOP/s on the nominal causal counts (fwd 2 B NH T^2 HD, bwd 2.5x); /pk = fraction of\n"
           "# the fp32 FMA peak (cpu/peak.h; peak column), /sg of OpenBLAS sgemm 1024^3 (a second\n"
           "# reference; sgemm column), both measured just before each T; mem = bytes the caller\n"
           "# allocates (flash: qkv out lse dout dqkv scratch; naive adds the (B, NH, T, T)\n"
           "# probabilities and two T x T buffers per thread); dropout = fwd+bwd time of p=0.1 vs 0\n");
    printf("%-6s %5s %4s %10s %10s %8s %8s %6s %6s %6s %6s %10s %9s %8s %8s\n", "impl", "T", "p",
           "fwd ms", "bwd ms", "fwd GF/s", "bwd GF/s", "fwd/pk", "bwd/pk", "fwd/sg", "bwd/sg",
           "mem MiB", "dropout", "peak", "sgemm");
    for (int t = 0; t < nT; t++) {
        const int T = Ts[t];
        const double sgemm = sgemm_gflops(1024);
        const double peak = peak_fp32_gflops(nthreads, 0.2);
        BenchResult f0 = bench_flash(T, 0.0, nthreads);
        bench_print("flash", T, 0.0, f0, sgemm, peak, NAN);
        BenchResult f1 = bench_flash(T, 0.1, nthreads);
        bench_print("flash", T, 0.1, f1, sgemm, peak,
                    100.0 * ((f1.fwd_s + f1.bwd_s) / (f0.fwd_s + f0.bwd_s) - 1.0));
        if (T <= BENCH_NAIVE_MAX_T) {
            BenchResult n0 = bench_naive(T, 0.0, nthreads);
            bench_print("naive", T, 0.0, n0, sgemm, peak, NAN);
            BenchResult n1 = bench_naive(T, 0.1, nthreads);
            bench_print("naive", T, 0.1, n1, sgemm, peak,
                        100.0 * ((n1.fwd_s + n1.bwd_s) / (n0.fwd_s + n0.bwd_s) - 1.0));
        }
    }
    return 0;
}
