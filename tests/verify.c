/* tests/verify.c — `make verify`: the teaching table of activation checkpointing with dropout.
 *
 * One small model, one fixed random batch, one seed. For dropout 0 and 0.1, and for each recompute
 * policy (none, layer, every:2, every:3, and layer with fresh seeds — the negative control), one
 * training step's gradients are compared with those of the policy none: the relative error over all
 * parameters, the worst tensor, whether loss and gradients are bitwise equal, and the verdict of
 * the value check. The table goes to stdout, the same data to out/verify.json.
 *
 * Expected: every captured-seed policy is bitwise equal to none at either dropout; fresh seeds at
 * dropout 0.1 give a clearly wrong gradient (relative error >> 1e-3) and the value check fails at
 * the first recomputed layer; fresh seeds at dropout 0 change nothing (no mask to re-draw).
 * Exits 1, naming the row, if any expectation fails. Links the normal (non-test) objects.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <omp.h>
#include "model/gpt.h"

void openblas_set_num_threads(int num_threads);  /* OpenBLAS's own; not in every cblas.h */

#define NT NUM_PARAMETER_TENSORS
#define VERIFY_SEED 1337ULL
#define VERIFY_STEP 0u
#define JSON_PATH "out/verify.json"

/* the model and batch of the table */
static const int L = 6, NH = 4, C = 64, V = 257, B = 4, T = 64;

typedef struct {
    const char* label;     /* "layer + fresh seeds" */
    int every;             /* 0 none, K */
    int fresh;
    int selective;         /* ln1, ln2 and the GELU output recomputed in the backward */
} Row;

static const Row ROWS[] = {
    {"none (rerun)", 0, 0, 0},
    {"layer", 1, 0, 0},
    {"every:2", 2, 0, 0},
    {"every:3", 3, 0, 0},
    {"selective", 0, 0, 1},
    {"selective+every:2", 2, 0, 1},
    {"layer + fresh seeds", 1, 1, 0},
};
#define NUM_ROWS ((int)(sizeof(ROWS) / sizeof(ROWS[0])))

typedef struct {
    double dropout;
    const Row* row;
    float loss;
    double rel_err;          /* ||g - g_none|| / ||g_none|| over all parameters */
    int worst;               /* tensor with the largest relative error */
    double worst_err;
    int bitwise;             /* loss and every gradient identical to none's */
    int mismatches;          /* segments the value check flagged */
    int first_layer;         /* first flagged layer, -1 if none */
    size_t kept_bytes, recompute_bytes;
    int ok;
    char expected[64];
    char why[160];           /* the failed expectation, if any */
} Result;

static GPTConfig config(void) {
    GPTConfig c = {T, V, gpt_pad_vocab(V), L, NH, NH, C, 0, 0, 0, 0};  /* plain GPT-2 model options */
    return c;
}

static void tensor_table(const ParameterTensors* p, float* t[NT]) {
    float* q[NT] = {p->wte, p->wpe, p->ln1w, p->ln1b, p->qkvw, p->qkvb, p->attprojw, p->attprojb,
                    p->ln2w, p->ln2b, p->fcw, p->fcb, p->fcprojw, p->fcprojb, p->lnfw, p->lnfb};
    memcpy(t, q, sizeof(q));
}

/* One step (forward with dropout, backward) under a policy, from the seed's initial weights. */
static GPT run_step(int every, int fresh, int selective, double p, const int* in, const int* tg,
                    float* loss, int* mismatches) {
    GPTConfig c = config();
    RecomputePolicy pol = {every, fresh, CHECK_WARN, selective};
    GPT m;
    char err[256];
    if (gpt_build_policy(&m, &c, B, T, &pol, err) != 0) {
        fprintf(stderr, "verify: %s\n", err);
        exit(2);
    }
    gpt_init_weights(&m, VERIFY_SEED);
    gpt_set_dropout(&m, VERIFY_SEED, p, p, p);
    gpt_zero_grad(&m);
    *loss = gpt_forward(&m, in, tg, B, T, 0, VERIFY_STEP, 1);
    *mismatches = gpt_backward(&m, 1.0f / (float)(B * T));
    return m;
}

static void compare(Result* r, const GPT* m, const GPT* ref, float ref_loss) {
    float *g[NT], *gr[NT];
    tensor_table(&m->grads, g);
    tensor_table(&ref->grads, gr);
    double num = 0, den = 0;
    r->bitwise = memcmp(&r->loss, &ref_loss, sizeof(float)) == 0;
    r->worst = 0;
    r->worst_err = 0;
    for (int k = 0; k < NT; k++) {
        size_t n = m->param_sizes[k];
        r->bitwise &= memcmp(g[k], gr[k], n * sizeof(float)) == 0;
        double tn = 0, td = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)g[k][i] - gr[k][i];
            tn += d * d;
            td += (double)gr[k][i] * gr[k][i];
        }
        num += tn;
        den += td;
        double e = td > 0 ? sqrt(tn / td) : sqrt(tn);
        if (!(e <= r->worst_err) && !isnan(r->worst_err)) { r->worst_err = e; r->worst = k; }
    }
    r->rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
}

/* What the row must show, and whether it does. */
static void judge(Result* r) {
    const Row* w = r->row;
    int wrong_expected = w->fresh && r->dropout > 0;
    if (!wrong_expected) {
        snprintf(r->expected, sizeof(r->expected), "0, bitwise, %s", w->every ? "pass" : "n/a");
        r->ok = r->rel_err == 0 && r->bitwise && r->mismatches == 0;
        if (!r->ok)
            snprintf(r->why, sizeof(r->why), "expected bitwise equal to none and a passing check;"
                     " got rel err %.3e, bitwise %s, %d flagged segments", r->rel_err,
                     r->bitwise ? "yes" : "no", r->mismatches);
    } else {
        int top = (L - 1) / w->every * w->every;   /* the first layer of the top segment */
        snprintf(r->expected, sizeof(r->expected), "> 1e-3, FAIL at layer %d", top);
        r->ok = r->rel_err > 1e-3 && isfinite(r->rel_err) && r->mismatches > 0 &&
                r->first_layer == top;
        if (!r->ok)
            snprintf(r->why, sizeof(r->why), "expected rel err > 1e-3 and the check to fail at "
                     "layer %d; got rel err %.3e, %d flagged segments, first at layer %d", top,
                     r->rel_err, r->mismatches, r->first_layer);
    }
}

static void verdict(const Result* r, char* buf, size_t n) {
    if (r->row->every == 0) snprintf(buf, n, "n/a (no recompute)");
    else if (r->mismatches == 0) snprintf(buf, n, "pass");
    else snprintf(buf, n, "FAIL at layer %d (%d seg)", r->first_layer, r->mismatches);
}

static int write_json(const Result* res, int n, double seconds) {
    if (mkdir("out", 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "verify: cannot create out/: %s\n", strerror(errno));
        return -1;
    }
    const char* tmp = JSON_PATH ".tmp";
    FILE* f = fopen(tmp, "w");
    if (f == NULL) {
        fprintf(stderr, "verify: cannot write %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    int all_ok = 1;
    for (int i = 0; i < n; i++) all_ok &= res[i].ok;
    fprintf(f, "{\n  \"model\": {\"layers\": %d, \"heads\": %d, \"kv_heads\": %d, \"channels\": %d,"
               " \"vocab\": %d, \"batch\": %d, \"seq\": %d, \"seed\": %llu, \"step\": %u,"
               " \"threads\": %d, \"blas_threads\": 1},\n  \"seconds\": %.3f,\n  \"ok\": %s,\n  \"rows\": [\n",
            L, NH, NH, C, V, B, T, (unsigned long long)VERIFY_SEED, VERIFY_STEP,
            omp_get_max_threads(), seconds, all_ok ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const Result* r = &res[i];
        fprintf(f, "    {\"dropout\": %.1f, \"policy\": \"%s\", \"every\": %d, \"seeds\": \"%s\", "
                   "\"loss\": %.9g, \"rel_grad_err\": %.9g, \"worst_tensor\": \"%s\", "
                   "\"worst_tensor_err\": %.9g, \"bitwise\": %s, \"check\": \"%s\", "
                   "\"check_first_layer\": %d, \"flagged_segments\": %d, "
                   "\"kept_activation_bytes\": %zu, \"recompute_scratch_bytes\": %zu, "
                   "\"expected\": \"%s\", \"ok\": %s}%s\n",
                r->dropout, r->row->label, r->row->every, r->row->fresh ? "fresh" : "captured",
                r->loss, r->rel_err, gpt_param_names[r->worst], r->worst_err,
                r->bitwise ? "true" : "false",
                r->row->every == 0 ? "n/a" : r->mismatches == 0 ? "pass" : "fail",
                r->first_layer, r->mismatches, r->kept_bytes, r->recompute_bytes, r->expected,
                r->ok ? "true" : "false", i + 1 < n ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0 || rename(tmp, JSON_PATH) != 0) {
        fprintf(stderr, "verify: cannot write %s: %s\n", JSON_PATH, strerror(errno));
        return -1;
    }
    return 0;
}

int main(void) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* One thread unless OMP_NUM_THREADS says otherwise. The table does not depend on it (the
     * model's sums are cut so that they do not depend on thread counts: tests/test_model and
     * tests/test_checkpoint check it), and the model is so small that on a 2-core machine shared
     * with a busy process an OpenMP team spinning at its barriers, with OpenBLAS's own threads
     * competing, took 12-18 s instead of 0.6 s. */
    if (getenv("OMP_NUM_THREADS") == NULL) omp_set_num_threads(1);
    openblas_set_num_threads(1);

    /* one fixed batch of random tokens (a small LCG: the same on every machine) */
    int in[B * T], tg[B * T];
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        in[i] = (int)((s >> 33) % V);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        tg[i] = (int)((s >> 33) % V);
    }

    printf("verify: L%d H%d C%d V%d, batch %dx%d, seed %llu, %d thread(s), one step; gradients "
           "against the policy none\n\n", L, NH, C, V, B, T, (unsigned long long)VERIFY_SEED,
           omp_get_max_threads());
    Result res[2 * NUM_ROWS];
    int n = 0;
    const double drops[2] = {0.0, 0.1};
    for (int d = 0; d < 2; d++) {
        float ref_loss;
        int ref_mm;
        GPT ref = run_step(0, 0, 0, drops[d], in, tg, &ref_loss, &ref_mm);
        for (int i = 0; i < NUM_ROWS; i++) {
            Result* r = &res[n++];
            memset(r, 0, sizeof(*r));
            r->dropout = drops[d];
            r->row = &ROWS[i];
            /* a failing value check prints one stderr line per flagged segment: let it show */
            if (ROWS[i].fresh && drops[d] > 0) {
                printf("the value check's own words (stderr) for '%s' at dropout %.1f:\n",
                       ROWS[i].label, drops[d]);
                fflush(stdout);
            }
            GPT m = run_step(ROWS[i].every, ROWS[i].fresh, ROWS[i].selective, drops[d], in, tg, &r->loss,
                             &r->mismatches);
            fflush(stderr);
            r->first_layer = m.check_first_layer;
            GPTMemory mem = gpt_memory(&m);
            r->kept_bytes = mem.activations;
            r->recompute_bytes = mem.recompute;
            compare(r, &m, &ref, ref_loss);
            judge(r);
            gpt_free(&m);
        }
        gpt_free(&ref);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);

    printf("\n%-7s  %-19s  %8s  %8s  %12s  %-19s  %-7s  %-22s  %s\n", "dropout", "policy",
           "kept KiB", "scr KiB", "rel grad err", "worst tensor (err)", "bitwise", "value check",
           "as expected");
    int failures = 0;
    for (int i = 0; i < n; i++) {
        const Result* r = &res[i];
        char worst[40], check[40];
        if (r->worst_err == 0) snprintf(worst, sizeof(worst), "-");
        else snprintf(worst, sizeof(worst), "%s %.2e", gpt_param_names[r->worst], r->worst_err);
        verdict(r, check, sizeof(check));
        if (i > 0 && r->dropout != res[i - 1].dropout) printf("\n");
        printf("%-7.1f  %-19s  %8.1f  %8.1f  %12.3e  %-19s  %-7s  %-22s  %s\n", r->dropout,
               r->row->label, r->kept_bytes / 1024.0, r->recompute_bytes / 1024.0, r->rel_err,
               worst, r->bitwise ? "yes" : "no", check, r->ok ? "yes" : "NO");
        failures += !r->ok;
    }
    printf("\nkept KiB: activations kept from the forward to the backward; scr KiB: the recompute "
           "scratch.\n");
    int json_failed = write_json(res, n, seconds) != 0;
    if (!json_failed) printf("wrote %s (%.2f s)\n", JSON_PATH, seconds);
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        if (!res[i].ok)
            fprintf(stderr, "verify: FAILED: dropout %.1f, %s: %s\n", res[i].dropout,
                    res[i].row->label, res[i].why);
    }
    if (failures > 0) fprintf(stderr, "verify: %d row(s) not as expected\n", failures);
    if (failures > 0 || json_failed) return 1;
    printf("verify: all %d rows as expected: captured seeds reproduce none bit for bit; fresh seeds "
           "at dropout 0.1 give wrong gradients and the value check catches them\n", n);
    return 0;
}
