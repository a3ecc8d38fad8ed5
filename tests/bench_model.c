/* tests/bench_model.c — speed and memory of whole training steps (a benchmark, not a test: it
 * asserts nothing).
 *
 * Each row builds a model in memory (gpt_init_weights, random tokens: no data files), runs
 * warm-up steps, then times full training steps exactly as train.c runs them: forward, zero_grad,
 * backward, clip, AdamW. It reports the median ms/step (and its forward / backward / clip+AdamW
 * parts), tokens/s, the whole-step FLOP rate as a share of this machine's measured fp32 FMA peak
 * (cpu/peak.h, the yardstick MFU uses; %peak) and, as a second reference, of OpenBLAS's sgemm
 * rate (%sgemm), both measured in the same run with the same thread count, and memory: the
 * allocator's high-water mark (mem_stats().peak_bytes after the steps) and the planned activation
 * bytes (kept + recompute scratch, gpt_memory()). The timed steps run under the per-op profiler
 * (model/profile.h, as ./train --profile), and a second table shows where each row's step goes.
 *
 * Every row runs in a fresh process (this program re-executes itself with --row), so each row's
 * peak is its own and not the largest of the rows before it.
 *
 * FLOPs (nominal, the usual 6N rule, counted per token of the B*T in a step):
 *   N_blk   = L (QKV C + C^2 + 8 C^2)            matmul weights of the blocks (QKV = (NH+2NKV) HD)
 *   N       = N_blk + Vp C                        plus the LM head, padded vocab as computed
 *   FLOPs/token = 6 N + 6 L T C                   6LTC = the 12LTC of full T x T attention halved
 *                                                  for the causal mask; T = the training length
 * Biases, LayerNorm, GELU, dropout, softmax, cross-entropy and AdamW are not counted.
 * Recompute floor: every recompute policy (layer, every:K) recomputes the forward of every block
 * exactly once per step (each segment once, before its backward), so the arithmetic floor of
 * time(policy) / time(none) is
 *   1 + (2 N_blk + 2 L T C) / (6 N + 6 L T C)
 * (2 N_blk + 2LTC: the blocks' matmul forwards plus the causal attention forward, 4TC/2 per layer).
 * It is a floor only if every FLOP ran at one speed; the forward's products run faster than the
 * backward's here, so a measured ratio can fall below it. The table also shows the measured
 * reference 1 + forward ms / step ms of the none row.
 *
 * Thread diagnostics: each row reports its CPU system time share (getrusage), and the header and
 * JSON name OpenBLAS's threading build and the wait-policy environment variables that were set.
 *
 * usage: bench_model [--threads N] [--blas-threads N] [--steps N] [--warmup N] [config...]
 *   config: 124m | small | recompute | classifier | a row spec such as
 *           L=8,H=4,KV=4,C=256,V=257,maxT=256,B=8,T=256,p=0.1,recompute=every:2
 *           (chunk=N: the classifier in chunks of N rows; B*T: the whole logits at once;
 *           prec=bf16: the CPU's --precision bf16 table)
 *   124m, small and recompute run each row in fp32 and again in bf16 (prec=bf16); a bf16 row's
 *   %peak divides by the bf16 dot-product peak where the CPU has one, and the bf16 section sets it
 *   beside its fp32 twin and beside PyTorch's torch.autocast("cpu", dtype=torch.bfloat16).
 *   default: 124m small recompute. Prints a table and one JSON line per row ({"bench":"model",..}),
 *   plus one {"bench":"sgemm",...} line.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <omp.h>
#include <cblas.h>
#include "model/gpt.h"
#include "model/mem.h"
#include "cpu/peak.h"
#include "model/profile.h"
#include "cpu/gemm_cpu.h"

/* OpenBLAS's own; not in every cblas.h */
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void);    /* 0 sequential, 1 pthreads, 2 OpenMP */
char* openblas_get_config(void);

static const char* blas_parallel_name(void) {
    int p = openblas_get_parallel();
    return p == 0 ? "sequential" : p == 1 ? "pthreads" : p == 2 ? "openmp" : "unknown";
}

#define BENCH_MAX_ROWS 64

/* One row: a model shape, a batch, a dropout probability (all sites) and a recompute policy. */
typedef struct {
    char group[32];        /* the named config it belongs to: "124m", "small", "recompute", "custom" */
    GPTConfig cfg;
    int B, T;
    double p;
    char policy[32];       /* none | layer | every:K | selective[+...] */
    int chunk;             /* classifier rows per chunk; 0: gpt_classifier_rows's (B*T: the
                              whole logits at once) */
    char prec[8];          /* fp32 | bf16 (the CPU's --precision bf16 table, backend_cpu_bf16) */
} RowSpec;
static PeakPath row_peak_path(const RowSpec* r);

/* What a row's process measures. */
typedef struct {
    double median_ms, min_ms, max_ms;     /* whole step */
    double fwd_ms, bwd_ms, opt_ms;        /* medians of zero_grad+forward (with the classifier's
                                             gradient), backward, clip+AdamW */
    double user_s, sys_s;                 /* CPU time per timed step (getrusage) */
    double loss;                          /* of the last step */
    double peak_bytes, live_bytes;        /* mem_stats() after the steps */
    double act_bytes, recompute_bytes;    /* gpt_memory(): kept activations, recompute scratch */
    double params;                        /* parameters, padded vocab rows included */
    double allocs_after_step0;            /* mem_alloc calls after the first step (should be 0) */
    double check_mismatches;              /* recompute value check failures over all steps */
    double peak_rss;                      /* the process's peak resident set (ru_maxrss), bytes */
    double sgemm;                         /* GFLOP/s of the sgemm reference, in this process
                                             right after its steps (the row's % of sgemm) */
    double peak;                          /* GFLOP/s of the peak of the row's precision
                                             (cpu/peak.h: the fp32 FMA, or the bf16 dot product
                                             where the CPU has one), in this process right after
                                             its steps (the row's % of peak) */
    double prof_step_ms;                  /* the profiler's ms per timed step */
    double prof_ms[NUM_PROF_CLASSES];     /* ms per timed step of each op class */
    double prof_flops[NUM_PROF_CLASSES];  /* FLOPs per step of each class (0: not defined) */
} RowResult;
#define ROW_FIELDS (sizeof(RowResult) / sizeof(double))

/* ---- small helpers ------------------------------------------------------------------------ */

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static double median(double* x, int n) {
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static long parse_int(const char* flag, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "bench_model: %s %s: expected an integer in [%ld, %ld]\n", flag,
                s ? s : "(missing)", lo, hi);
        exit(2);
    }
    return v;
}

static RowSpec row_make(const char* group, int L, int H, int C, int V, int maxT, int B, int T,
                        double p, const char* policy) {
    RowSpec r;
    memset(&r, 0, sizeof(r));
    snprintf(r.group, sizeof(r.group), "%s", group);
    r.cfg.max_seq_len = maxT;
    r.cfg.vocab_size = V;
    r.cfg.padded_vocab_size = gpt_pad_vocab(V);
    r.cfg.num_layers = L;
    r.cfg.num_heads = H;
    r.cfg.num_kv_heads = H;
    r.cfg.channels = C;
    r.B = B;
    r.T = T;
    r.p = p;
    snprintf(r.policy, sizeof(r.policy), "%s", policy);
    snprintf(r.prec, sizeof(r.prec), "fp32");
    return r;
}

/* The row r in bf16. */
static RowSpec row_bf16(RowSpec r) {
    snprintf(r.prec, sizeof(r.prec), "bf16");
    return r;
}

static int row_is_bf16(const RowSpec* r) { return strcmp(r->prec, "bf16") == 0; }

/* The row spec as a string, the form --row and the config argument read. */
static void row_format(const RowSpec* r, char* buf, size_t n) {
    int w = snprintf(buf, n, "L=%d,H=%d,KV=%d,C=%d,V=%d,maxT=%d,B=%d,T=%d,p=%.17g,recompute=%s",
                     r->cfg.num_layers, r->cfg.num_heads, r->cfg.num_kv_heads, r->cfg.channels,
                     r->cfg.vocab_size, r->cfg.max_seq_len, r->B, r->T, r->p, r->policy);
    if (r->chunk > 0 && w > 0 && (size_t)w < n) w += snprintf(buf + w, n - (size_t)w, ",chunk=%d", r->chunk);
    if (row_is_bf16(r) && w > 0 && (size_t)w < n) snprintf(buf + w, n - (size_t)w, ",prec=bf16");
}

/* Parses "L=8,H=4,...". Returns 0, or -1 with one line in err. */
static int row_parse(const char* s, RowSpec* r, char err[256]) {
    *r = row_make("custom", 4, 4, 256, 257, 256, 8, 256, 0.0, "none");
    int kv = 0;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char* save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char* eq = strchr(tok, '=');
        if (eq == NULL) { snprintf(err, 256, "'%s': expected KEY=VALUE", tok); return -1; }
        *eq = '\0';
        const char *key = tok, *val = eq + 1;
        if (!strcmp(key, "recompute")) {
            RecomputePolicy pol;
            if (recompute_parse(val, &pol, err) != 0) return -1;
            snprintf(r->policy, sizeof(r->policy), "%s", val);
            continue;
        }
        if (!strcmp(key, "prec")) {
            if (strcmp(val, "fp32") != 0 && strcmp(val, "bf16") != 0) {
                snprintf(err, 256, "prec=%s: expected fp32 or bf16", val);
                return -1;
            }
            snprintf(r->prec, sizeof(r->prec), "%s", val);
            continue;
        }
        char* end;
        errno = 0;
        double v = strtod(val, &end);
        if (*val == '\0' || *end != '\0' || errno != 0) {
            snprintf(err, 256, "%s=%s: expected a number", key, val);
            return -1;
        }
        if (!strcmp(key, "p")) {
            if (!(v >= 0.0 && v < 1.0)) { snprintf(err, 256, "p=%s: expected [0, 1)", val); return -1; }
            r->p = v;
            continue;
        }
        if (v != floor(v) || v < 1 || v > 1 << 24) {
            snprintf(err, 256, "%s=%s: expected a positive integer", key, val);
            return -1;
        }
        int iv = (int)v;
        if (!strcmp(key, "L")) r->cfg.num_layers = iv;
        else if (!strcmp(key, "H")) r->cfg.num_heads = iv;
        else if (!strcmp(key, "KV")) kv = iv;
        else if (!strcmp(key, "C")) r->cfg.channels = iv;
        else if (!strcmp(key, "V")) r->cfg.vocab_size = iv;
        else if (!strcmp(key, "maxT")) r->cfg.max_seq_len = iv;
        else if (!strcmp(key, "B")) r->B = iv;
        else if (!strcmp(key, "T")) r->T = iv;
        else if (!strcmp(key, "chunk")) r->chunk = iv;
        else { snprintf(err, 256, "unknown key '%s' (L H KV C V maxT B T p recompute chunk prec)", key); return -1; }
    }
    r->cfg.num_kv_heads = kv ? kv : r->cfg.num_heads;
    r->cfg.padded_vocab_size = gpt_pad_vocab(r->cfg.vocab_size);
    const char* problem = gpt_config_problem(&r->cfg);
    if (problem != NULL) { snprintf(err, 256, "%s", problem); return -1; }
    if (r->T > r->cfg.max_seq_len) {
        snprintf(err, 256, "T=%d exceeds maxT=%d", r->T, r->cfg.max_seq_len);
        return -1;
    }
    return 0;
}

/* ---- FLOP counts (see the file header) ---------------------------------------------------- */

typedef struct {
    double n_blocks;        /* matmul weights of the L blocks */
    double n;               /* n_blocks + the LM head (Vp C) */
    double per_token;       /* 6 N + 6 L T C */
    double recompute_per_token;   /* 2 N_blk + 2 L T C: the forward of every block */
} Flops;

static Flops flops_of(const RowSpec* r) {
    const GPTConfig* c = &r->cfg;
    double L = c->num_layers, C = c->channels, QKV = gpt_qkv_channels(c), T = r->T;
    Flops f;
    f.n_blocks = L * (QKV * C + C * C + 8.0 * C * C);
    f.n = f.n_blocks + (double)c->padded_vocab_size * C;
    f.per_token = 6.0 * f.n + 6.0 * L * T * C;
    f.recompute_per_token = 2.0 * f.n_blocks + 2.0 * L * T * C;
    return f;
}

/* ---- one row, in its own process ---------------------------------------------------------- */

/* Tokens in [0, V): a 64-bit LCG, fresh for every step (the embedding gather touches new rows). */
static void random_tokens(int* x, int n, int V, uint64_t* state) {
    for (int i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (int)((*state >> 33) % (uint64_t)V);
    }
}

static double cpu_seconds(int sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct timeval tv = sys ? ru.ru_stime : ru.ru_utime;
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

static double sgemm_gflops(void);

static int run_row(const char* spec, int warmup, int steps) {
    char err[256];
    RowSpec r;
    if (row_parse(spec, &r, err) != 0) { fprintf(stderr, "bench_model: --row %s: %s\n", spec, err); return 2; }
    RecomputePolicy pol;
    if (recompute_parse(r.policy, &pol, err) != 0) { fprintf(stderr, "bench_model: %s\n", err); return 2; }
    pol.check = CHECK_WARN;   /* train.c's default: the check is a memcmp per segment */

    const Backend* be = backend_lookup("cpu", r.prec);
    GPT m;
    if (gpt_build_rows(&m, &r.cfg, r.B, r.T, &pol, be, r.chunk, err) != 0) {
        fprintf(stderr, "bench_model: %s\n", err);
        return 2;
    }
    const uint64_t seed = 1337;
    gpt_init_weights(&m, seed);
    gpt_set_dropout(&m, seed, r.p, r.p, r.p);
    GPTMemory gm = gpt_memory(&m);
    m.be = profile_wrap(m.be, NULL);   /* only the timed steps are counted (profile_step_*) */

    int n = r.B * r.T;
    int* inputs = malloc((size_t)n * sizeof(int));    /* not mem_alloc: the peak is the model's */
    int* targets = malloc((size_t)n * sizeof(int));
    double* step_ms = malloc((size_t)steps * sizeof(double));
    double* fwd_ms = malloc((size_t)steps * sizeof(double));
    double* bwd_ms = malloc((size_t)steps * sizeof(double));
    double* opt_ms = malloc((size_t)steps * sizeof(double));
    if (!inputs || !targets || !step_ms || !fwd_ms || !bwd_ms || !opt_ms) {
        fprintf(stderr, "bench_model: out of memory\n");
        return 1;
    }
    uint64_t tok_state = 42;
    size_t allocs_after_step0 = 0;
    int mismatches = 0;
    float loss = 0.0f;
    double user0 = 0.0, sys0 = 0.0;
    for (int s = 0; s < warmup + steps; s++) {
        random_tokens(inputs, n, r.cfg.vocab_size, &tok_state);
        random_tokens(targets, n, r.cfg.vocab_size, &tok_state);
        if (s == warmup) { user0 = cpu_seconds(0); sys0 = cpu_seconds(1); }
        if (s >= warmup) profile_step_begin();
        double t0 = omp_get_wtime();
        gpt_zero_grad(&m);   /* before the forward: it writes the classifier's gradient */
        gpt_set_loss_scale(&m, 1.0f / n);   /* as ./train: the classifier's gradient in the forward */
        loss = gpt_forward(&m, inputs, targets, r.B, r.T, 0, (uint32_t)s, 1);
        double t1 = omp_get_wtime();
        mismatches += gpt_backward(&m, 1.0f / n);
        double t2 = omp_get_wtime();
        gpt_clip_grads(&m, 1.0f);
        gpt_adamw(&m, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
        double t3 = omp_get_wtime();
        profile_step_end();
        if (s == 0) allocs_after_step0 = mem_stats().allocations;
        if (s >= warmup) {
            int k = s - warmup;
            step_ms[k] = (t3 - t0) * 1e3;
            fwd_ms[k] = (t1 - t0) * 1e3;
            bwd_ms[k] = (t2 - t1) * 1e3;
            opt_ms[k] = (t3 - t2) * 1e3;
        }
    }
    RowResult res;
    res.user_s = (cpu_seconds(0) - user0) / steps;
    res.sys_s = (cpu_seconds(1) - sys0) / steps;
    res.median_ms = median(step_ms, steps);        /* sorts step_ms */
    res.min_ms = step_ms[0];
    res.max_ms = step_ms[steps - 1];
    res.fwd_ms = median(fwd_ms, steps);
    res.bwd_ms = median(bwd_ms, steps);
    res.opt_ms = median(opt_ms, steps);
    res.loss = loss;
    MemStats ms = mem_stats();
    res.peak_bytes = (double)ms.peak_bytes;
    res.live_bytes = (double)ms.live_bytes;
    res.act_bytes = (double)gm.activations;
    res.recompute_bytes = (double)gm.recompute;
    res.params = (double)m.num_parameters;
    res.allocs_after_step0 = (double)(ms.allocations - allocs_after_step0);
    res.check_mismatches = mismatches;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    res.peak_rss = (double)ru.ru_maxrss * 1024.0;
    res.sgemm = sgemm_gflops();   /* after getrusage: its buffers are not the row's peak */
    res.peak = row_peak_path(&r) == PEAK_AVX512_BF16
                   ? peak_bf16_gflops(omp_get_max_threads(), 0.2)
                   : peak_fp32_gflops(omp_get_max_threads(), 0.2);
    ProfileTotals pt = profile_totals();
    res.prof_step_ms = pt.step_ms / (pt.steps > 0 ? pt.steps : 1);
    for (int c = 0; c < NUM_PROF_CLASSES; c++) {
        res.prof_ms[c] = pt.ms[c] / (pt.steps > 0 ? pt.steps : 1);
        res.prof_flops[c] = pt.flops[c] / (pt.steps > 0 ? pt.steps : 1);
    }

    const double* f = (const double*)&res;
    printf("ROW");
    for (size_t i = 0; i < ROW_FIELDS; i++) printf(" %.17g", f[i]);
    printf("\n");
    gpt_free(&m);
    free(inputs); free(targets); free(step_ms); free(fwd_ms); free(bwd_ms); free(opt_ms);
    return 0;
}

/* Runs one row in a fresh process: this program with --row, its stdout read through a pipe.
 * Returns 0 and fills res, or -1. */
static int spawn_row(const char* exe, const RowSpec* r, int threads, int blas_threads, int warmup,
                     int steps, RowResult* res) {
    char spec[512], th[16], bt[16], wu[16], st[16];
    row_format(r, spec, sizeof(spec));
    snprintf(th, sizeof(th), "%d", threads);
    snprintf(bt, sizeof(bt), "%d", blas_threads);
    snprintf(wu, sizeof(wu), "%d", warmup);
    snprintf(st, sizeof(st), "%d", steps);
    char* args[] = {(char*)exe, "--threads", th, "--blas-threads", bt, "--warmup", wu, "--steps", st, "--row", spec, NULL};
    fflush(stdout);
    int fd[2];
    if (pipe(fd) != 0) { perror("bench_model: pipe"); return -1; }
    pid_t pid = fork();
    if (pid < 0) { perror("bench_model: fork"); return -1; }
    if (pid == 0) {   /* the child: only exec from here (the parent may have BLAS threads) */
        close(fd[0]);
        dup2(fd[1], STDOUT_FILENO);
        close(fd[1]);
        execv(exe, args);
        _exit(127);
    }
    close(fd[1]);
    FILE* pf = fdopen(fd[0], "r");
    char line[4096];
    int got = 0;
    while (pf != NULL && fgets(line, sizeof(line), pf) != NULL) {
        if (strncmp(line, "ROW ", 4) != 0) { fputs(line, stdout); continue; }
        double* f = (double*)res;
        char* p = line + 4;
        size_t i = 0;
        for (; i < ROW_FIELDS; i++) {
            char* end;
            f[i] = strtod(p, &end);
            if (end == p) break;
            p = end;
        }
        got = i == ROW_FIELDS;
    }
    if (pf != NULL) fclose(pf); else close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_model: row %s failed (exit status %d)\n", spec,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return -1;
    }
    return 0;
}

/* ---- the PyTorch side ----------------------------------------------------------------------- */

/* What tools/torch_bench.py measures for the same row (its TORCH_ROW line, in this order). */
typedef struct {
    double median_ms, min_ms, max_ms, fwd_ms, bwd_ms, opt_ms;
    double peak_rss;     /* ru_maxrss at the end, bytes */
    double base_rss;     /* RSS after importing torch, before the model existed */
    double loss, params;
} TorchResult;
#define TORCH_FIELDS (sizeof(TorchResult) / sizeof(double))

/* What the last torch process said of its BLAS (its TORCH_BLAS line): the OpenBLAS kernel family
 * it ran and the pinning variables in its environment ("none": it ran without them). */
static char torch_blas_core[64] = "", torch_blas_pins[128] = "", torch_blas_chosen[128] = "";

/* The value of "key=" among the words of line, into out[cap] ("" if absent). */
static void word_value(const char* line, const char* key, char* out, size_t cap) {
    out[0] = '\0';
    size_t k = strlen(key);
    for (const char* p = line; (p = strstr(p, key)) != NULL; p += k) {
        if ((p == line || p[-1] == ' ') && p[k] == '=') {
            size_t n = strcspn(p + k + 1, " \n");
            snprintf(out, cap, "%.*s", (int)n, p + k + 1);
            return;
        }
    }
}

/* Runs one row through `torch_cmd` (e.g. "/usr/bin/python3 tools/torch_bench.py") in a fresh
 * process with OMP_WAIT_POLICY=passive. Returns 0 and fills res, 1 when the script says torch is
 * missing (TORCH_SKIP), -1 on failure. */
static int spawn_torch(const char* torch_cmd, const RowSpec* r, int threads, int warmup, int steps,
                       TorchResult* res) {
    char spec[512], cmd[2048];
    row_format(r, spec, sizeof(spec));
    snprintf(cmd, sizeof(cmd), "OMP_WAIT_POLICY=passive %s --threads %d --warmup %d --steps %d --row '%s'",
             torch_cmd, threads, warmup, steps, spec);
    fflush(stdout);
    FILE* pf = popen(cmd, "r");
    if (pf == NULL) { perror("bench_model: popen"); return -1; }
    char line[4096];
    int got = 0, skip = 0;
    while (fgets(line, sizeof(line), pf) != NULL) {
        if (!strncmp(line, "TORCH_SKIP", 10)) { skip = 1; printf("# torch: %s", line + 11); continue; }
        if (!strncmp(line, "TORCH_BLAS ", 11)) {
            char core[64];
            word_value(line, "core", core, sizeof(core));
            if (strcmp(core, torch_blas_core) != 0) printf("# torch BLAS: %s", line + 11);
            snprintf(torch_blas_core, sizeof(torch_blas_core), "%s", core);
            word_value(line, "pins", torch_blas_pins, sizeof(torch_blas_pins));
            word_value(line, "chosen", torch_blas_chosen, sizeof(torch_blas_chosen));
            continue;
        }
        if (strncmp(line, "TORCH_ROW ", 10) != 0) { fputs(line, stdout); continue; }
        double* f = (double*)res;
        char* p = line + 10;
        size_t i = 0;
        for (; i < TORCH_FIELDS; i++) {
            char* end;
            f[i] = strtod(p, &end);
            if (end == p) break;
            p = end;
        }
        got = i == TORCH_FIELDS;
    }
    int status = pclose(pf);
    if (skip) return 1;
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_model: torch row %s failed (exit status %d)\n", spec,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return -1;
    }
    return 0;
}

/* Field-wise medians of n structs of doubles (each `fields` long), into out. */
static void fieldwise_median(const double* reps, int n, size_t fields, double* out) {
    double x[64];
    for (size_t f = 0; f < fields; f++) {
        for (int i = 0; i < n; i++) x[i] = reps[(size_t)i * fields + f];
        out[f] = median(x, n);
    }
}

/* ---- the sgemm reference ------------------------------------------------------------------ */

/* A GPT-shaped product, the MLP's first linear at GPT-2 small with 1024 rows:
 * out (1024, 3072) = x (1024, 768) . W (3072, 768)^T. Median GFLOP/s of 7 after one warm-up. */
#define SG_M 1024
#define SG_N 3072
#define SG_K 768
static double sgemm_gflops(void) {
    float* a = malloc(sizeof(float) * SG_M * SG_K);
    float* b = malloc(sizeof(float) * SG_N * SG_K);
    float* c = malloc(sizeof(float) * SG_M * SG_N);
    if (!a || !b || !c) { fprintf(stderr, "bench_model: out of memory\n"); exit(1); }
    uint64_t s = 7;
    for (size_t i = 0; i < (size_t)SG_M * SG_K; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        a[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    for (size_t i = 0; i < (size_t)SG_N * SG_K; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        b[i] = (float)((double)(s >> 40) / 16777216.0 - 0.5);
    }
    enum { REPS = 7 };
    double rate[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        double t0 = omp_get_wtime();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, SG_M, SG_N, SG_K, 1.0f, a, SG_K, b,
                    SG_K, 0.0f, c, SG_N);
        double t = omp_get_wtime() - t0;
        if (rep >= 0) rate[rep] = 2.0 * SG_M * SG_N * SG_K / t * 1e-9;
    }
    free(a); free(b); free(c);
    return median(rate, REPS);
}

/* ---- output ------------------------------------------------------------------------------- */

typedef struct {
    RowSpec spec;
    RowResult res;
    int ok;
    TorchResult tres;   /* the same row in PyTorch */
    int tok;            /* tres is valid */
} Row;

/* The two references for a recompute row's time ratio to none: the arithmetic floor
 * 1 + recomputed FLOPs / step FLOPs, and the measured 1 + forward ms / step ms of the none row (the
 * ratio if the recompute ran at the forward's own speed; a little high, since the forward also
 * holds the embedding, LM head and loss, which are not recomputed). Both 1 for none. */
static void recompute_refs(const Row* row, const Row* none, double* flop_floor, double* fwd_ref) {
    RecomputePolicy pol;
    char err[256];
    *flop_floor = *fwd_ref = 1.0;
    if (recompute_parse(row->spec.policy, &pol, err) != 0 || !ckpt_recomputes(&pol)) return;
    Flops f = flops_of(&row->spec);
    *flop_floor = 1.0 + f.recompute_per_token / f.per_token;
    *fwd_ref = 1.0 + none->res.fwd_ms / none->res.median_ms;
}

static double loadavg1(void) {
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    return load[0];
}

/* The environment knobs that change how the threads wait, as "NAME=value ..." (empty if none). */
static const char* thread_env(void) {
    static char buf[512];
    static const char* names[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND",
                                  "OPENBLAS_NUM_THREADS", "OPENBLAS_THREAD_TIMEOUT"};
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char* v = getenv(names[i]);
        if (v == NULL) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, sizeof(buf) - n, "%s%s=%s", n ? " " : "", names[i], v);
    }
    return buf;
}

/* The row's peak path: the bf16 dot product for a bf16 row whose products run VDPBF16PS, else
 * the fp32 FMA (an fp32 row, or a bf16 row on the widened or portable path) */
static PeakPath row_peak_path(const RowSpec* r) {
    return row_is_bf16(r) && peak_path_supported(PEAK_AVX512_BF16) &&
                   gemm_bf16_path_selected() == GEMM_BF16_AVX512BF16
               ? PEAK_AVX512_BF16
               : peak_fp32_path();
}

/* Two rows that differ in their precision alone. */
static int same_but_precision(const RowSpec* a, const RowSpec* b) {
    RowSpec x = *a, y = *b;
    char fx[512], fy[512];
    snprintf(x.prec, sizeof(x.prec), "fp32");
    snprintf(y.prec, sizeof(y.prec), "fp32");
    row_format(&x, fx, sizeof(fx));
    row_format(&y, fy, sizeof(fy));
    return strcmp(fx, fy) == 0 && strcmp(a->group, b->group) == 0;
}

/* print_json: none, the same group's none row of the same precision (recompute rows only);
 * fp32, the fp32 twin of a bf16 row (NULL if there is none). */
static void print_json(const Row* row, const Row* none, const Row* fp32, int threads,
                       int blas_threads, int warmup, int steps, int reps, double sgemm,
                       double peak_start, double load1) {
    const RowSpec* r = &row->spec;
    const RowResult* x = &row->res;
    Flops f = flops_of(r);
    double tokens = (double)r->B * r->T;
    double gflops = f.per_token * tokens / (x->median_ms * 1e-3) * 1e-9;
    double sgemm_start = sgemm;
    sgemm = x->sgemm;   /* the row's own reference, measured in its processes */
    printf("{\"bench\":\"model\",\"config\":\"%s\",\"L\":%d,\"NH\":%d,\"NKV\":%d,\"C\":%d,\"V\":%d,"
           "\"Vp\":%d,\"maxT\":%d,\"B\":%d,\"T\":%d,\"dropout\":%g,\"recompute\":\"%s\","
           "\"threads\":%d,\"blas_threads\":%d,\"blas_parallel\":\"%s\",\"thread_env\":\"%s\","
           "\"warmup\":%d,\"steps\":%d,"
           "\"params\":%.0f,"
           "\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,"
           "\"clip_adamw_ms\":%.3f,\"cpu_user_s_per_step\":%.4f,\"cpu_sys_s_per_step\":%.4f,"
           "\"tokens_per_s\":%.1f,\"flops_per_token\":%.0f,"
           "\"flops_formula\":\"6*N + 6*L*T*C, N = L*(QKV*C + 9*C*C) + Vp*C\","
           "\"gflops\":%.3f,\"sgemm_gflops\":%.3f,\"pct_of_sgemm\":%.2f,"
           "\"peak_bytes\":%.0f,\"act_bytes\":%.0f,\"recompute_bytes\":%.0f,"
           "\"allocs_after_step0\":%.0f,\"check_mismatches\":%.0f,\"loss\":%.6f,\"loadavg1\":%.2f",
           r->group, r->cfg.num_layers, r->cfg.num_heads, r->cfg.num_kv_heads, r->cfg.channels,
           r->cfg.vocab_size, r->cfg.padded_vocab_size, r->cfg.max_seq_len, r->B, r->T, r->p,
           r->policy, threads, blas_threads, blas_parallel_name(), thread_env(), warmup, steps,
           x->params, x->median_ms, x->min_ms, x->max_ms,
           x->fwd_ms, x->bwd_ms, x->opt_ms, x->user_s, x->sys_s, tokens / (x->median_ms * 1e-3),
           f.per_token, gflops, sgemm, 100.0 * gflops / sgemm, x->peak_bytes, x->act_bytes,
           x->recompute_bytes, x->allocs_after_step0, x->check_mismatches, x->loss, load1);
    printf(",\"classifier_rows\":%d", r->chunk > 0 ? r->chunk : gpt_classifier_rows(&r->cfg, r->B, r->T));
    printf(",\"precision\":\"%s\"", r->prec);
    if (fp32 != NULL && fp32->ok)
        printf(",\"fp32_median_ms\":%.3f,\"bf16_speedup_vs_fp32\":%.4f,\"fp32_peak_bytes\":%.0f,"
               "\"bf16_peak_ratio_to_fp32\":%.4f,\"bf16_act_ratio_to_fp32\":%.4f",
               fp32->res.median_ms, fp32->res.median_ms / x->median_ms, fp32->res.peak_bytes,
               x->peak_bytes / fp32->res.peak_bytes,
               (x->act_bytes + x->recompute_bytes) / (fp32->res.act_bytes + fp32->res.recompute_bytes));
    printf(",\"reps\":%d,\"peak_rss\":%.0f,\"loadavg1_end\":%.2f,\"sgemm_gflops_start\":%.3f", reps,
           x->peak_rss, loadavg1(), sgemm_start);
    printf(",\"peak_gflops\":%.3f,\"pct_of_peak\":%.3f,\"peak_gflops_start\":%.3f,\"peak_path\":\"%s\"",
           x->peak, x->peak > 0 ? 100.0 * gflops / x->peak : 0.0, peak_start,
           peak_path_name(row_peak_path(r)));
    if (row->tok) {
        const TorchResult* t = &row->tres;
        double tg = f.per_token * tokens / (t->median_ms * 1e-3) * 1e-9;
        printf(",\"torch_median_ms\":%.3f,\"torch_min_ms\":%.3f,\"torch_max_ms\":%.3f,"
               "\"torch_fwd_ms\":%.3f,\"torch_bwd_ms\":%.3f,\"torch_opt_ms\":%.3f,"
               "\"torch_tokens_per_s\":%.1f,\"torch_gflops\":%.3f,\"torch_peak_rss\":%.0f,"
               "\"torch_base_rss\":%.0f,\"torch_params\":%.0f,\"torch_loss\":%.6f,"
               "\"speedup_vs_torch\":%.4f,\"torch_env\":\"OMP_WAIT_POLICY=passive\","
               "\"torch_blas_core\":\"%s\",\"torch_blas_pins\":\"%s\",\"torch_blas_chosen\":\"%s\"",
               t->median_ms, t->min_ms, t->max_ms, t->fwd_ms, t->bwd_ms, t->opt_ms,
               tokens / (t->median_ms * 1e-3), tg, t->peak_rss, t->base_rss, t->params, t->loss,
               t->median_ms / x->median_ms, torch_blas_core[0] ? torch_blas_core : "unknown",
               torch_blas_pins[0] ? torch_blas_pins : "unknown",
               torch_blas_chosen[0] ? torch_blas_chosen : "none");
        if (none != NULL && none->tok)
            printf(",\"torch_time_ratio_to_none\":%.4f,\"torch_peak_rss_ratio_to_none\":%.4f",
                   t->median_ms / none->tres.median_ms, t->peak_rss / none->tres.peak_rss);
    }
    if (none != NULL && none->ok) {
        double flop_floor, fwd_ref;
        recompute_refs(row, none, &flop_floor, &fwd_ref);
        printf(",\"time_ratio_to_none\":%.4f,\"time_floor\":%.4f,\"time_fwd_ref\":%.4f,"
               "\"peak_ratio_to_none\":%.4f,\"act_ratio_to_none\":%.4f,"
               "\"floor_formula\":\"1 + (2*N_blk + 2*L*T*C) / (6*N + 6*L*T*C), N_blk = L*(QKV*C + 9*C*C)\","
               "\"fwd_ref_formula\":\"1 + fwd_ms(none) / step_ms(none)\"",
               x->median_ms / none->res.median_ms, flop_floor, fwd_ref,
               x->peak_bytes / none->res.peak_bytes,
               (x->act_bytes + x->recompute_bytes) /
                   (none->res.act_bytes + none->res.recompute_bytes));
    }
    printf("}\n");
}

static void usage(FILE* f) {
    fprintf(f,
"usage: bench_model [--threads N] [--steps N] [--warmup N] [config...]\n"
"  --threads N   OpenMP and OpenBLAS threads (default: OMP_NUM_THREADS or all cores)\n"
"  --blas-threads N  OpenBLAS threads, if they should differ (an experiment; default --threads)\n"
"  --steps N     timed steps per row, the median is reported (default 7)\n"
"  --warmup N    untimed steps first (default 1)\n"
"  --reps N      processes per row (and per side), alternating; medians over them (default 1)\n"
"  --torch CMD   also run every row through CMD (tools/torch_bench.py under a Python with\n"
"                torch), alternating with seedgpt's processes; adds the x torch column\n"
"  config        124m       L12 H12 C768 V50257 maxT1024, B4 T64\n"
"                small      L4 H4 C256 V257 maxT256, B8 T256, dropout 0 and 0.1, and 0.1 with\n"
"                           recompute=layer\n"
"                recompute  L8 H4 C256 V257 maxT256, B8 T256, dropout 0.1, every policy of\n"
"                           ./train plan (none, layer, every:2, every:4, selective and its\n"
"                           combinations)\n"
"                           (124m, small and recompute: each row in fp32 and in bf16)\n"
"                classifier 124M at B4 T1024 and T64: the chunked classifier against the\n"
"                           whole logits (not in the default; ~10 min)\n"
"                L=..,H=..,KV=..,C=..,V=..,maxT=..,B=..,T=..,p=..,recompute=..[,chunk=N][,prec=bf16]\n"
"                           one row\n"
"                (default: 124m small recompute)\n");
}

int main(int argc, char** argv) {
    int threads = 0, blas_threads = 0, steps = 7, warmup = 1, reps = 1;
    const char* row_spec = NULL;
    const char* torch_cmd = NULL;
    const char* configs[BENCH_MAX_ROWS];
    int nconfigs = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--threads")) { threads = parse_int(a, v, 1, 1024); i++; }
        else if (!strcmp(a, "--blas-threads")) { blas_threads = parse_int(a, v, 1, 1024); i++; }
        else if (!strcmp(a, "--steps")) { steps = parse_int(a, v, 1, 100000); i++; }
        else if (!strcmp(a, "--warmup")) { warmup = parse_int(a, v, 0, 100000); i++; }
        else if (!strcmp(a, "--reps")) { reps = parse_int(a, v, 1, 64); i++; }
        else if (!strcmp(a, "--torch")) {
            if (v == NULL || *v == '\0') { fprintf(stderr, "bench_model: --torch: expected a command\n"); return 2; }
            torch_cmd = v;
            i++;
        }
        else if (!strcmp(a, "--row")) {   /* internal: one row in this process */
            if (v == NULL) { fprintf(stderr, "bench_model: --row: expected a row spec\n"); return 2; }
            row_spec = v;
            i++;
        }
        else if (a[0] == '-') { fprintf(stderr, "bench_model: unknown flag %s\n", a); usage(stderr); return 2; }
        else if (nconfigs < BENCH_MAX_ROWS) configs[nconfigs++] = a;
    }
    if (threads > 0) omp_set_num_threads(threads);
    threads = omp_get_max_threads();
    if (blas_threads == 0) blas_threads = threads;
    openblas_set_num_threads(blas_threads);
    if (row_spec != NULL) return run_row(row_spec, warmup, steps);

    /* the rows */
    static const char* default_configs[] = {"124m", "small", "recompute"};
    if (nconfigs == 0) {
        for (int i = 0; i < 3; i++) configs[i] = default_configs[i];
        nconfigs = 3;
    }
    static Row rows[BENCH_MAX_ROWS];
    int nrows = 0;
    for (int i = 0; i < nconfigs; i++) {
        const char* c = configs[i];
        if (nrows + 16 > BENCH_MAX_ROWS) break;
        if (!strcmp(c, "124m")) {
            /* each fp32 row is followed by its bf16 twin */
            rows[nrows++].spec = row_make("124m", 12, 12, 768, 50257, 1024, 4, 64, 0.0, "none");
            rows[nrows].spec = row_bf16(rows[nrows - 1].spec); nrows++;
        } else if (!strcmp(c, "small")) {
            static const double ps[] = {0.0, 0.1, 0.1};
            static const char* pols[] = {"none", "none", "layer"};
            for (int k = 0; k < 3; k++) {
                rows[nrows++].spec = row_make("small", 4, 4, 256, 257, 256, 8, 256, ps[k], pols[k]);
                rows[nrows].spec = row_bf16(rows[nrows - 1].spec); nrows++;
            }
        } else if (!strcmp(c, "recompute")) {
            /* the memory/time frontier: every policy of ./train plan at this shape, fp32 then bf16 */
            static const char* pols[] = {"none", "layer", "every:2", "every:4", "selective",
                                         "selective+layer", "selective+every:2",
                                         "selective+every:4"};
            for (int k = 0; k < 8; k++)
                rows[nrows++].spec = row_make("recompute", 8, 4, 256, 257, 256, 8, 256, 0.1, pols[k]);
            for (int k = 0; k < 8; k++) { rows[nrows].spec = row_bf16(rows[nrows - 8].spec); nrows++; }
        } else if (!strcmp(c, "classifier")) {
            /* the chunked classifier against the whole logits at 124M: at T 1024 the planner's
             * chunk (1024 of the 4096 rows) against chunk=4096; at T 64 the planner takes the
             * whole 256 rows, so chunk=64 shows what chunking costs there */
            rows[nrows].spec = row_make("classifier", 12, 12, 768, 50257, 1024, 4, 1024, 0.0, "none");
            rows[nrows++].spec.chunk = 4096;
            rows[nrows].spec = row_make("classifier", 12, 12, 768, 50257, 1024, 4, 1024, 0.0, "none");
            nrows++;
            rows[nrows].spec = row_make("classifier", 12, 12, 768, 50257, 1024, 4, 64, 0.0, "none");
            rows[nrows++].spec.chunk = 256;
            rows[nrows].spec = row_make("classifier", 12, 12, 768, 50257, 1024, 4, 64, 0.0, "none");
            rows[nrows++].spec.chunk = 64;
        } else {
            char err[256];
            if (row_parse(c, &rows[nrows].spec, err) != 0) {
                fprintf(stderr, "bench_model: config '%s': %s\n", c, err);
                usage(stderr);
                return 2;
            }
            nrows++;
        }
    }

    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) snprintf(exe, sizeof(exe), "%s", argv[0]);
    else exe[len] = '\0';

    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    double sgemm = sgemm_gflops();
    PeakPath ppath = peak_fp32_path();
    double peak = peak_fp32_gflops(threads, 0.2);
    int has_bf16 = peak_path_supported(PEAK_AVX512_BF16);
    double peak_bf16 = has_bf16 ? peak_bf16_gflops(threads, 0.2) : 0.0;
    printf("# bench_model: %d threads (OpenBLAS %d), %d warm-up + %d timed steps per row (median), "
           "each row in its own process; load average %.2f at start%s%s\n", threads, blas_threads,
           warmup, steps, load[0], thread_env()[0] ? "; " : "", thread_env());
    char bf16_text[64];
    if (has_bf16) snprintf(bf16_text, sizeof(bf16_text), "%.1f GFLOP/s (VDPBF16PS)", peak_bf16);
    else snprintf(bf16_text, sizeof(bf16_text), "- (no AVX512_BF16)");
    printf("# measured peak (cpu/peak.h, ./train peak), %d threads: fp32 FMA %.1f GFLOP/s (%s), bf16\n"
           "#   dot product %s; each row's %%peak divides by the peak of the instruction its products\n"
           "#   run (a bf16 row's by the bf16 one when they run VDPBF16PS; bf16 path here: %s),\n"
           "#   measured in the row's own processes right after their steps\n", threads, peak,
           peak_path_name(ppath), bf16_text, gemm_bf16_path_name(gemm_bf16_path_selected()));
    printf("{\"bench\":\"peak\",\"threads\":%d,\"fp32_path\":\"%s\",\"fp32_gflops\":%.3f,"
           "\"bf16_gflops\":%.3f,\"loadavg1\":%.2f}\n", threads, peak_path_name(ppath), peak, peak_bf16,
           load[0]);
    printf("# OpenBLAS sgemm (%d x %d x %d, NT, median of 7), a second reference: %.1f GFLOP/s now; each\n"
           "#   row's %%sgemm divides by the same sgemm measured in the row's own processes after its steps\n"
           "# OpenBLAS threading: %s (%s)\n",
           SG_M, SG_N, SG_K, sgemm, blas_parallel_name(), openblas_get_config());
    printf("# FLOPs/token = 6 N + 6 L T C, N = L (QKV C + 9 C^2) + Vp C (matmul weights incl. the LM\n"
           "#   head); 6LTC = causal half of 12LTC attention; biases, norms, GELU, dropout, softmax,\n"
           "#   loss and AdamW not counted. step = zero_grad + forward + backward + clip + AdamW;\n"
           "#   fwd (zero_grad + forward, the classifier's gradient chunk by chunk included), bwd\n"
           "#   (the rest of the backward), opt (clip + AdamW): medians of the parts;\n"
           "#   sys%% = system share of the step's CPU time (threads that yield instead of working)\n");
    printf("{\"bench\":\"sgemm\",\"M\":%d,\"N\":%d,\"K\":%d,\"threads\":%d,\"blas_threads\":%d,"
           "\"blas_parallel\":\"%s\",\"thread_env\":\"%s\",\"gflops\":%.3f,\"loadavg1\":%.2f}\n",
           SG_M, SG_N, SG_K, threads, blas_threads, blas_parallel_name(), thread_env(), sgemm, load[0]);
    if (torch_cmd != NULL)
        printf("# torch: the same row in PyTorch (%s, OMP_WAIT_POLICY=passive, %d threads), its process\n"
               "#   alternating with seedgpt's, %d of each per row; every time is the median over the\n"
               "#   processes of each one's median step; x torch = torch ms / seedgpt ms; RSS = ru_maxrss\n",
               torch_cmd, threads, reps);
    printf("%-10s %-24s %4s %-4s %-17s %8s %7s %7s %6s %8s %7s %6s %6s %5s %8s %8s", "config", "shape",
           "p", "prec", "recomp", "ms/step", "fwd", "bwd", "opt", "tok/s", "GFLOP/s", "%peak", "%sgemm", "sys%",
           "peak MiB", "RSS MiB");
    if (torch_cmd != NULL) printf(" %9s %8s %7s", "torch ms", "torchRSS", "x torch");
    printf("\n");
    fflush(stdout);

    int failures = 0, torch_missing = 0;
    for (int i = 0; i < nrows; i++) {
        Row* row = &rows[i];
        /* reps processes of each, alternating which goes first: s t t s s t ... */
        double rres[64 * ROW_FIELDS], tres[64 * TORCH_FIELDS];
        int nr = 0, nt = 0;
        row->ok = 1;
        for (int k = 0; k < reps && row->ok; k++) {
            for (int side = 0; side < 2; side++) {
                int torch_turn = (k % 2 == 0) == (side == 1);
                if (!torch_turn) {
                    if (spawn_row(exe, &row->spec, threads, blas_threads, warmup, steps,
                                  (RowResult*)&rres[nr * ROW_FIELDS]) == 0) nr++;
                    else row->ok = 0;
                } else if (torch_cmd != NULL && !torch_missing && row->spec.chunk == 0 &&
                           strncmp(row->spec.policy, "selective", 9) != 0) {   /* no torch twin */
                    int rc = spawn_torch(torch_cmd, &row->spec, threads, warmup, steps,
                                         (TorchResult*)&tres[nt * TORCH_FIELDS]);
                    if (rc == 0) nt++;
                    else if (rc == 1) torch_missing = 1;
                }
            }
        }
        if (!row->ok) { failures++; continue; }
        fieldwise_median(rres, nr, ROW_FIELDS, (double*)&row->res);
        row->tok = nt > 0;
        if (row->tok) fieldwise_median(tres, nt, TORCH_FIELDS, (double*)&row->tres);
        const RowSpec* r = &row->spec;
        const RowResult* x = &row->res;
        Flops f = flops_of(r);
        double gflops = f.per_token * r->B * r->T / (x->median_ms * 1e-3) * 1e-9;
        char shape[64];
        char kv[16] = "";
        if (r->cfg.num_kv_heads != r->cfg.num_heads) snprintf(kv, sizeof(kv), "/%d", r->cfg.num_kv_heads);
        snprintf(shape, sizeof(shape), "L%d H%d%s C%d V%d B%d T%d", r->cfg.num_layers,
                 r->cfg.num_heads, kv, r->cfg.channels, r->cfg.vocab_size, r->B, r->T);
        char recomp[40];
        if (r->chunk > 0) snprintf(recomp, sizeof(recomp), "%s chunk=%d", r->policy, r->chunk);
        else snprintf(recomp, sizeof(recomp), "%s", r->policy);
        printf("%-10s %-24s %4.2f %-4s %-17s %8.1f %7.1f %7.1f %6.1f %8.0f %7.1f %5.1f%% %5.1f%% %4.1f%% %8.1f %8.1f",
               r->group, shape, r->p, r->prec, recomp, x->median_ms, x->fwd_ms, x->bwd_ms,
               x->opt_ms, r->B * r->T / (x->median_ms * 1e-3), gflops,
               x->peak > 0 ? 100.0 * gflops / x->peak : 0.0, 100.0 * gflops / x->sgemm,
               100.0 * x->sys_s / (x->user_s + x->sys_s), x->peak_bytes / 1048576.0,
               x->peak_rss / 1048576.0);
        if (row->tok)
            printf(" %9.1f %8.1f %6.2fx", row->tres.median_ms, row->tres.peak_rss / 1048576.0,
                   row->tres.median_ms / x->median_ms);
        else if (torch_cmd != NULL)
            printf(" %9s %8s %7s", "-", "-", "-");
        printf("\n");
        if (x->allocs_after_step0 > 0 || x->check_mismatches > 0)
            printf("#   note: %.0f allocations after step 0, %.0f recompute check mismatches\n",
                   x->allocs_after_step0, x->check_mismatches);
        /* ratios: against the none row of the same group and precision, if there is one before
         * this row; a bf16 row also against its fp32 twin */
        const Row *none = NULL, *fp32 = NULL;
        for (int j = 0; j < i; j++) {
            const RowSpec* o = &rows[j].spec;
            if (!strcmp(o->group, r->group) && !strcmp(o->policy, "none") && o->p == r->p &&
                !strcmp(o->prec, r->prec) && rows[j].ok)
                none = &rows[j];
            if (row_is_bf16(r) && !row_is_bf16(o) && same_but_precision(o, r)) fp32 = &rows[j];
        }
        print_json(row, strcmp(r->group, "recompute") == 0 ? (none ? none : row) : NULL, fp32,
                   threads, blas_threads, warmup, steps, reps, sgemm,
                   row_peak_path(r) == PEAK_AVX512_BF16 ? peak_bf16 : peak, load[0]);
        fflush(stdout);
    }

    /* the profile section: each row's step by op class (model/profile.h) */
    printf("\n# per-op profile of the timed steps (model/profile.h; medians over the processes): ms/step\n"
           "#   per class; a recompute's re-run forward counts as recompute; host = the step's time\n"
           "#   between ops; GFLOP/s of the classes with FLOPs in the JSON ({\"bench\":\"profile\"})\n");
    static const char* const short_names[NUM_PROF_CLASSES] = {
        "mm fwd", "mm bwd", "at fwd", "at bwd", "LN", "GELU", "res+drp", "xent", "optim",
        "recomp", "other"};
    printf("%-10s %-17s %4s %-4s", "config", "recomp", "p", "prec");
    for (int c = 0; c < NUM_PROF_CLASSES; c++) printf(" %7s", short_names[c]);
    printf(" %7s %8s\n", "host", "step");
    for (int i = 0; i < nrows; i++) {
        const Row* row = &rows[i];
        if (!row->ok) continue;
        const RowResult* x = &row->res;
        ProfileTotals t;
        memset(&t, 0, sizeof(t));
        t.steps = steps;
        t.step_ms = x->prof_step_ms * steps;
        t.timer = "wall clock";
        double sum = 0;
        printf("%-10s %-17s %4.2f %-4s", row->spec.group, row->spec.policy, row->spec.p, row->spec.prec);
        for (int c = 0; c < NUM_PROF_CLASSES; c++) {
            t.ms[c] = x->prof_ms[c] * steps;
            t.flops[c] = x->prof_flops[c] * steps;
            sum += x->prof_ms[c];
            printf(" %7.1f", x->prof_ms[c]);
        }
        printf(" %7.1f %8.1f\n", x->prof_step_ms > sum ? x->prof_step_ms - sum : 0.0, x->prof_step_ms);
        const RowSpec* r = &row->spec;
        printf("{\"bench\":\"profile\",\"config\":\"%s\",\"L\":%d,\"NH\":%d,\"C\":%d,\"V\":%d,\"B\":%d,"
               "\"T\":%d,\"dropout\":%g,\"recompute\":\"%s\",\"precision\":\"%s\",\"chunk\":%d,"
               "\"threads\":%d", r->group, r->cfg.num_layers, r->cfg.num_heads, r->cfg.channels,
               r->cfg.vocab_size, r->B, r->T, r->p, r->policy, r->prec, r->chunk, threads);
        profile_json_fields(stdout, &t);
        printf("}\n");
    }
    fflush(stdout);

    /* the recompute section: ratios to the none row of the same precision and the arithmetic
     * floor; the last column against fp32's none */
    const Row* none32 = NULL;
    for (int i = 0; i < nrows; i++)
        if (rows[i].ok && !strcmp(rows[i].spec.group, "recompute") &&
            !strcmp(rows[i].spec.policy, "none") && !row_is_bf16(&rows[i].spec))
            none32 = &rows[i];
    for (int pass = 0; pass < 2; pass++) {
        const char* prec = pass ? "bf16" : "fp32";
        const Row* none = NULL;
        for (int i = 0; i < nrows; i++)
            if (rows[i].ok && !strcmp(rows[i].spec.group, "recompute") &&
                !strcmp(rows[i].spec.policy, "none") && !strcmp(rows[i].spec.prec, prec))
                none = &rows[i];
        if (none == NULL) continue;
        Flops f = flops_of(&none->spec);
        printf("\n# recompute, %s: L%d H%d C%d V%d B%d T%d, dropout %g; act = kept activations +\n"
               "#   recompute scratch (gpt_memory); peak = mem_stats().peak_bytes after the steps;\n"
               "#   ratios to %s's none, peak/fp32 to fp32's none. Every policy recomputes each\n"
               "#   block's forward once, so the time ratio has two references:\n"
               "#   floor  = 1 + (2 N_blk + 2 L T C) / (6 N + 6 L T C) = 1 + %.3g / %.3g FLOPs/token\n"
               "#   1+fwd  = 1 + forward ms / step ms of none (the forward's measured speed)\n",
               prec, none->spec.cfg.num_layers, none->spec.cfg.num_heads, none->spec.cfg.channels,
               none->spec.cfg.vocab_size, none->spec.B, none->spec.T, none->spec.p, prec,
               f.recompute_per_token, f.per_token);
        printf("%-17s %9s %7s %7s %7s %9s %7s %9s %7s %9s %7s %9s %7s %9s\n", "policy", "ms/step",
               "ratio", "floor", "1+fwd", "peak MiB", "ratio", "act MiB", "ratio", "torch ms", "ratio",
               "torchRSS", "ratio", "peak/fp32");
        double none_act = none->res.act_bytes + none->res.recompute_bytes;
        for (int i = 0; i < nrows; i++) {
            const Row* row = &rows[i];
            if (!row->ok || strcmp(row->spec.group, "recompute") != 0 || strcmp(row->spec.prec, prec) != 0)
                continue;
            double flop_floor, fwd_ref;
            recompute_refs(row, none, &flop_floor, &fwd_ref);
            double act = row->res.act_bytes + row->res.recompute_bytes;
            printf("%-17s %9.1f %7.3f %7.3f %7.3f %9.1f %7.3f %9.1f %7.3f", row->spec.policy,
                   row->res.median_ms, row->res.median_ms / none->res.median_ms, flop_floor,
                   fwd_ref, row->res.peak_bytes / 1048576.0,
                   row->res.peak_bytes / none->res.peak_bytes, act / 1048576.0, act / none_act);
            if (row->tok && none->tok)
                printf(" %9.1f %7.3f %9.1f %7.3f", row->tres.median_ms,
                       row->tres.median_ms / none->tres.median_ms, row->tres.peak_rss / 1048576.0,
                       row->tres.peak_rss / none->tres.peak_rss);
            else
                printf(" %9s %7s %9s %7s", "-", "-", "-", "-");
            if (none32 != NULL) printf(" %9.3f", row->res.peak_bytes / none32->res.peak_bytes);
            printf("\n");
        }
    }

    /* the bf16 section: every bf16 row beside its fp32 twin, and PyTorch's autocast beside both */
    int header = 0;
    for (int i = 0; i < nrows; i++) {
        const Row* row = &rows[i];
        if (!row->ok || !row_is_bf16(&row->spec)) continue;
        const Row* fp32 = NULL;
        for (int j = 0; j < nrows; j++)
            if (rows[j].ok && !row_is_bf16(&rows[j].spec) && same_but_precision(&rows[j].spec, &row->spec))
                fp32 = &rows[j];
        if (fp32 == NULL) continue;
        if (!header) {
            printf("\n# bf16 (the CPU's --precision bf16: %s) beside fp32; x fp32 = fp32 ms / bf16 ms;\n"
                   "#   act = kept activations + recompute scratch; torch32 = PyTorch fp32 ms / seedgpt\n"
                   "#   fp32 ms; torch16 = PyTorch under torch.autocast(\"cpu\", dtype=torch.bfloat16)\n"
                   "#   ms / seedgpt bf16 ms\n",
                   gemm_bf16_path_name(gemm_bf16_path_selected()));
            printf("%-10s %-17s %4s %9s %9s %7s %9s %9s %7s %9s %9s %7s %7s\n", "config", "recomp", "p",
                   "fp32 ms", "bf16 ms", "x fp32", "fp32 act", "bf16 act", "ratio", "fp32 peak",
                   "bf16 peak", "torch32", "torch16");
            header = 1;
        }
        double a32 = fp32->res.act_bytes + fp32->res.recompute_bytes;
        double a16 = row->res.act_bytes + row->res.recompute_bytes;
        printf("%-10s %-17s %4.2f %9.1f %9.1f %6.2fx %9.1f %9.1f %7.3f %9.1f %9.1f", row->spec.group,
               row->spec.policy, row->spec.p, fp32->res.median_ms, row->res.median_ms,
               fp32->res.median_ms / row->res.median_ms, a32 / 1048576.0, a16 / 1048576.0, a16 / a32,
               fp32->res.peak_bytes / 1048576.0, row->res.peak_bytes / 1048576.0);
        if (fp32->tok) printf(" %6.2fx", fp32->tres.median_ms / fp32->res.median_ms);
        else printf(" %7s", "-");
        if (row->tok) printf(" %6.2fx", row->tres.median_ms / row->res.median_ms);
        else printf(" %7s", "-");
        printf("\n");
    }

    /* the classifier section: each chunked row against the whole-logits row of its shape (the
     * first row of the classifier group at that T) */
    header = 0;
    for (int i = 0; i < nrows; i++) {
        const Row* row = &rows[i];
        if (!row->ok || strcmp(row->spec.group, "classifier") != 0) continue;
        const Row* whole = NULL;
        for (int j = 0; j < nrows && whole == NULL; j++)
            if (rows[j].ok && !strcmp(rows[j].spec.group, "classifier") && rows[j].spec.T == row->spec.T &&
                rows[j].spec.B == row->spec.B && rows[j].spec.chunk == row->spec.B * row->spec.T)
                whole = &rows[j];
        if (whole == NULL) continue;
        if (!header) {
            printf("\n# classifier: the LM head and loss in chunks of rows against the whole B*T logits\n"
                   "#   (chunk = B*T); rows = classifier rows per chunk (0 in the spec: the planner's)\n");
            printf("%-24s %6s %9s %7s %10s %7s\n", "shape", "rows", "ms/step", "ratio", "peak MiB", "ratio");
            header = 1;
        }
        const RowSpec* r = &row->spec;
        char shape[64];
        snprintf(shape, sizeof(shape), "L%d C%d V%d B%d T%d", r->cfg.num_layers, r->cfg.channels,
                 r->cfg.vocab_size, r->B, r->T);
        printf("%-24s %6d %9.1f %7.3f %10.1f %7.3f\n", shape,
               r->chunk > 0 ? r->chunk : gpt_classifier_rows(&r->cfg, r->B, r->T), row->res.median_ms,
               row->res.median_ms / whole->res.median_ms, row->res.peak_bytes / 1048576.0,
               row->res.peak_bytes / whole->res.peak_bytes);
    }
    return failures ? 1 : 0;
}
