/* model/profile.c — the per-op-class profile of training steps (model/profile.h): the wrapping
 * backend table, the per-step list of timed calls, the totals and their table and JSON fields.
 * Owns no tensor; every wrapper passes its arguments through untouched.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "model/profile.h"

/* ---- the wall-clock timer ----------------------------------------------------------------- */

static double* wall_marks;        /* ms since an arbitrary origin */
static int wall_n, wall_cap;

static double wall_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int wall_record(void) {
    if (wall_n == wall_cap) {   /* grows during the first step only: every step has the same ops */
        int cap = wall_cap ? 2 * wall_cap : 1024;
        double* p = realloc(wall_marks, (size_t)cap * sizeof(double));
        if (p == NULL) { fprintf(stderr, "seedgpt: --profile: out of memory\n"); exit(1); }
        wall_marks = p;
        wall_cap = cap;
    }
    wall_marks[wall_n] = wall_now_ms();
    return wall_n++;
}
static void wall_sync(void) {}
static double wall_elapsed_ms(int a, int b) { return wall_marks[b] - wall_marks[a]; }
static void wall_reset(void) { wall_n = 0; }

const ProfileTimer profile_timer_wall = {"wall clock", wall_record, wall_sync, wall_elapsed_ms,
                                         wall_reset};

/* ---- the state of the one profiler --------------------------------------------------------- */

typedef struct {
    int cls;
    int m0, m1;          /* the timer's marks before and after the op */
    double flops;
} Call;

static const Backend* inner;          /* the real backend */
static Backend outer;                 /* the table the model runs on */
static const ProfileTimer* timer;
static int recording;                 /* 1 between profile_step_begin and _end */
static int phase = BE_PHASE_FORWARD;
static Call* calls;                   /* this step's timed calls */
static int ncalls, calls_cap;
static double step_t0;
/* the steps measured, in three parts: the first step, the rest of the warm-up (steps 1 ..
 * PROFILE_WARMUP_STEPS - 1) and the steady steps after it */
enum { PART_FIRST, PART_WARMUP, PART_STEADY, NUM_PARTS };
static ProfileTotals parts[NUM_PARTS];

static void push_call(int cls, int m0, int m1, double flops) {
    if (ncalls == calls_cap) {
        int cap = calls_cap ? 2 * calls_cap : 512;
        Call* p = realloc(calls, (size_t)cap * sizeof(Call));
        if (p == NULL) { fprintf(stderr, "seedgpt: --profile: out of memory\n"); exit(1); }
        calls = p;
        calls_cap = cap;
    }
    calls[ncalls++] = (Call){cls, m0, m1, flops};
}

/* A forward op's class: its own, or recompute while the orchestrator recomputes. */
static int fwd_class(int cls) { return phase == BE_PHASE_RECOMPUTE ? PROF_RECOMPUTE : cls; }

/* Runs `call` (an op of the inner table), timed under class `cls` with `flops` while recording. */
#define TIMED(cls, flops, call) do {                                        \
        if (!recording) { call; break; }                                    \
        int m0_ = timer->record();                                          \
        call;                                                               \
        int m1_ = timer->record();                                          \
        push_call((cls), m0_, m1_, (flops));                                \
    } while (0)

/* ---- the wrappers: same arguments, same op ------------------------------------------------- */

static void w_phase(int p) { phase = p; }

static void w_fill(float* x, size_t n, float value) {
    TIMED(phase == BE_PHASE_OPTIMIZER ? PROF_OPTIMIZER
          : phase == BE_PHASE_RECOMPUTE ? PROF_RECOMPUTE : PROF_OTHER, 0,
          inner->fill(x, n, value));
}
static size_t w_count_differ(const float* a, const float* b, size_t n) {
    size_t r = 0;
    TIMED(PROF_RECOMPUTE, 0, r = inner->count_differ(a, b, n));
    return r;
}
static void w_encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                              int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop) {
    TIMED(PROF_OTHER, 0, inner->encoder_forward(out, inp, wte, wpe, B, T, C, g0, embd_seed, drop));
}
static void w_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                               int B, int T, int C) {
    TIMED(PROF_OTHER, 0, inner->encoder_backward(dwte, dwpe, dout, inp, B, T, C));
}
static void w_layernorm_forward(void* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) {
    TIMED(fwd_class(PROF_LAYERNORM), 0,
          inner->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C));
}
static void w_residual_layernorm_forward(float* out, const float* x, const float* branch, int B,
                                         int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                         void* ln_out, float* mean, float* rstd,
                                         const float* weight, const float* bias) {
    TIMED(fwd_class(PROF_LAYERNORM), 0,
          inner->residual_layernorm_forward(out, x, branch, B, T, C, g0, seed, drop, ln_out, mean,
                                            rstd, weight, bias));
}
static void w_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) {
    TIMED(PROF_LAYERNORM, 0,
          inner->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C));
}
static void w_matmul_forward(void* out, int out_dtype, const void* inp, const void* weight,
                             const float* bias, int N, int C, int OC) {
    TIMED(fwd_class(PROF_MATMUL_FWD), 2.0 * N * C * OC,
          inner->matmul_forward(out, out_dtype, inp, weight, bias, N, C, OC));
}
static void w_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                              const void* inp, const void* weight, int N, int C, int OC) {
    TIMED(PROF_MATMUL_BWD, (dinp != NULL ? 4.0 : 2.0) * N * C * OC,
          inner->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC));
}
static void w_matmul_forward_gelu(void* out, void* out_gelu, const void* inp, const void* weight,
                                  const float* bias, int N, int C, int OC) {
    TIMED(fwd_class(PROF_MATMUL_FWD), 2.0 * N * C * OC,
          inner->matmul_forward_gelu(out, out_gelu, inp, weight, bias, N, C, OC));
}
static void w_gelu_forward(void* out, const void* inp, size_t n) {
    TIMED(fwd_class(PROF_GELU), 0, inner->gelu_forward(out, inp, n));
}
static void w_gelu_backward(float* dinp, const void* inp, const float* dout, size_t n) {
    TIMED(PROF_GELU, 0, inner->gelu_backward(dinp, inp, dout, n));
}
static void w_residual_dropout_forward(float* out, const float* x, const float* branch, int B,
                                       int T, int C, uint32_t g0, uint64_t seed, Dropout drop) {
    TIMED(fwd_class(PROF_RESID_DROPOUT), 0,
          inner->residual_dropout_forward(out, x, branch, B, T, C, g0, seed, drop));
}
static void w_dropout_backward(float* dy, const float* dout, int B, int T, int C, uint32_t g0,
                               uint64_t seed, Dropout drop) {
    TIMED(PROF_RESID_DROPOUT, 0, inner->dropout_backward(dy, dout, B, T, C, g0, seed, drop));
}
static void w_rope_forward(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                           int NKV, int HD, int layout, int pos0) {
    TIMED(fwd_class(PROF_ATTN_FWD), 0,
          inner->rope_forward(qkv, cos, sin, B, T, NH, NKV, HD, layout, pos0));
}
static void w_rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int HD, int layout, int pos0) {
    TIMED(PROF_ATTN_BWD, 0, inner->rope_backward(dqkv, cos, sin, B, T, NH, NKV, HD, layout, pos0));
}
static void w_drop_path(float* y, const float* x, int B, int T, int C, uint32_t g0, uint64_t seed,
                        Dropout drop) {
    TIMED(fwd_class(PROF_RESID_DROPOUT), 0, inner->drop_path(y, x, B, T, C, g0, seed, drop));
}
static void w_crossentropy_forward(float* losses, const float* logits, const int* targets, int N,
                                   int V, int Vp) {
    TIMED(PROF_CROSSENTROPY, 0, inner->crossentropy_forward(losses, logits, targets, N, V, Vp));
}
static void w_crossentropy_backward(float* logits, const int* targets, float dloss, int N, int V,
                                    int Vp) {
    TIMED(PROF_CROSSENTROPY, 0, inner->crossentropy_backward(logits, targets, dloss, N, V, Vp));
}
static void w_crossentropy_forward_backward(float* losses, float* logits, const int* targets,
                                            float dloss, int N, int V, int Vp) {
    TIMED(PROF_CROSSENTROPY, 0,
          inner->crossentropy_forward_backward(losses, logits, targets, dloss, N, V, Vp));
}
static void w_crossentropy_forward_backward_act(float* losses, float* logits, const int* targets,
                                                float dloss, int N, int V, int Vp) {
    TIMED(PROF_CROSSENTROPY, 0,
          inner->crossentropy_forward_backward_act(losses, logits, targets, dloss, N, V, Vp));
}
static void w_matmul_backward_dout_act(float* dinp, float* dweight, float* dbias, const void* dout,
                                       int ld_dout, const void* inp, const void* weight, int N, int C,
                                       int OC) {
    TIMED(PROF_MATMUL_BWD, (dinp != NULL ? 4.0 : 2.0) * N * C * OC,
          inner->matmul_backward_dout_act(dinp, dweight, dbias, dout, ld_dout, inp, weight, N, C, OC));
}
static double w_sum_squares(const float* x, size_t n) {
    double r = 0;
    TIMED(PROF_OPTIMIZER, 0, r = inner->sum_squares(x, n));
    return r;
}
static void w_sum_squares_blocks(double* out, const float* x, size_t n) {
    TIMED(PROF_OPTIMIZER, 0, inner->sum_squares_blocks(out, x, n));
}
static double w_sum_partials(const double* partials, size_t n) {
    double r = 0;
    TIMED(PROF_OPTIMIZER, 0, r = inner->sum_partials(partials, n));
    return r;
}
static void w_sum_squares_tensors(double* out, const float* x, int ntensors, const size_t* offset,
                                  const size_t* size) {
    TIMED(PROF_OPTIMIZER, 0, inner->sum_squares_tensors(out, x, ntensors, offset, size));
}
static void w_scale_inplace(float* x, size_t n, float s) {
    TIMED(PROF_OPTIMIZER, 0, inner->scale_inplace(x, n, s));
}
static void w_adamw_update(float* params, const float* grads, float grad_scale, float* m, float* v,
                           size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int t) {
    TIMED(PROF_OPTIMIZER, 0,
          inner->adamw_update(params, grads, grad_scale, m, v, n, lr, beta1, beta2, eps,
                              weight_decay, t));
}
static void w_adamw_update_act(float* params, void* params_act, const float* grads,
                               float grad_scale, float* m, float* v, size_t n, float lr,
                               float beta1, float beta2, float eps, float weight_decay, int t) {
    TIMED(PROF_OPTIMIZER, 0,
          inner->adamw_update_act(params, params_act, grads, grad_scale, m, v, n, lr, beta1, beta2,
                                  eps, weight_decay, t));
}
static void w_adamw_update_tensors(float* params, void* params_act, const float* grads,
                                   float grad_scale, float* m, float* v, int ntensors,
                                   const size_t* offset, const size_t* size, const float* wd,
                                   float lr, float beta1, float beta2, float eps, int t) {
    TIMED(PROF_OPTIMIZER, 0,
          inner->adamw_update_tensors(params, params_act, grads, grad_scale, m, v, ntensors, offset,
                                      size, wd, lr, beta1, beta2, eps, t));
}
static void w_round_to_act(void* dst, const float* src, size_t n) {
    TIMED(PROF_OPTIMIZER, 0, inner->round_to_act(dst, src, n));
}
/* causal attention: QK^T and PV over the T (T + 1) / 2 pairs, counted as T^2 / 2 */
static double attention_flops(int B, int T, int NH, int HD) {
    return 4.0 * B * NH * (double)T * T * HD / 2.0;
}
static void w_attention_forward(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    TIMED(fwd_class(PROF_ATTN_FWD), attention_flops(B, T, NH, HD),
          inner->attention_forward(out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop));
}
static void w_attention_backward(float* dqkv, float* scratch, const float* dout, const void* qkv,
                                 const void* out, const float* lse, int B, int T, int NH, int NKV,
                                 int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    TIMED(PROF_ATTN_BWD, 2.5 * attention_flops(B, T, NH, HD),
          inner->attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, g0,
                                    attn_seed, drop));
}

static void w_attention_forward_stats(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                      int NKV, int HD, uint32_t g0, uint64_t attn_seed,
                                      Dropout drop, float stats[3]) {
    TIMED(fwd_class(PROF_ATTN_FWD), attention_flops(B, T, NH, HD),
          inner->attention_forward_stats(out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed, drop,
                                         stats));
}

const Backend* profile_wrap(const Backend* in, const ProfileTimer* t) {
    inner = in;
    timer = t != NULL ? t : &profile_timer_wall;
    outer = *in;   /* memory, names and the attention scratch size: the inner table's own */
    outer.phase = w_phase;
    outer.fill = w_fill;
    outer.count_differ = w_count_differ;
    outer.encoder_forward = w_encoder_forward;
    outer.encoder_backward = w_encoder_backward;
    outer.layernorm_forward = w_layernorm_forward;
    outer.residual_layernorm_forward =
        in->residual_layernorm_forward ? w_residual_layernorm_forward : NULL;
    outer.layernorm_backward = w_layernorm_backward;
    outer.matmul_forward = w_matmul_forward;
    outer.matmul_backward = w_matmul_backward;
    outer.matmul_forward_gelu = in->matmul_forward_gelu ? w_matmul_forward_gelu : NULL;
    outer.gelu_forward = w_gelu_forward;
    outer.gelu_backward = w_gelu_backward;
    outer.residual_dropout_forward = w_residual_dropout_forward;
    outer.dropout_backward = w_dropout_backward;
    outer.rope_forward = w_rope_forward;
    outer.rope_backward = w_rope_backward;
    outer.drop_path = w_drop_path;
    outer.crossentropy_forward = w_crossentropy_forward;
    outer.crossentropy_backward = w_crossentropy_backward;
    outer.crossentropy_forward_backward =
        in->crossentropy_forward_backward ? w_crossentropy_forward_backward : NULL;
    outer.crossentropy_forward_backward_act =
        in->crossentropy_forward_backward_act ? w_crossentropy_forward_backward_act : NULL;
    outer.matmul_backward_dout_act = in->matmul_backward_dout_act ? w_matmul_backward_dout_act : NULL;
    outer.sum_squares = w_sum_squares;
    outer.sum_squares_tensors = in->sum_squares_tensors ? w_sum_squares_tensors : NULL;
    outer.sum_squares_blocks = in->sum_squares_blocks ? w_sum_squares_blocks : NULL;
    outer.sum_partials = in->sum_partials ? w_sum_partials : NULL;
    outer.scale_inplace = w_scale_inplace;
    outer.adamw_update = w_adamw_update;
    outer.adamw_update_act = in->adamw_update_act ? w_adamw_update_act : NULL;
    outer.adamw_update_tensors = in->adamw_update_tensors ? w_adamw_update_tensors : NULL;
    outer.round_to_act = in->round_to_act ? w_round_to_act : NULL;
    outer.attention_forward = w_attention_forward;
    outer.attention_backward = w_attention_backward;
    outer.attention_forward_stats = in->attention_forward_stats ? w_attention_forward_stats : NULL;
    memset(parts, 0, sizeof(parts));
    return &outer;
}

/* ---- steps and totals ----------------------------------------------------------------------- */

void profile_step_begin(void) {
    if (inner == NULL) return;
    if (inner->synchronize != NULL) inner->synchronize();   /* the step starts on an idle device */
    timer->reset();
    ncalls = 0;
    recording = 1;
    step_t0 = wall_now_ms();
}

void profile_step_end(void) {
    if (inner == NULL || !recording) return;
    timer->sync();
    if (inner->synchronize != NULL) inner->synchronize();
    double wall = wall_now_ms() - step_t0;
    recording = 0;
    int done = parts[PART_FIRST].steps + parts[PART_WARMUP].steps + parts[PART_STEADY].steps;
    ProfileTotals* t = &parts[done == 0 ? PART_FIRST : done < PROFILE_WARMUP_STEPS ? PART_WARMUP
                                                                                  : PART_STEADY];
    for (int i = 0; i < ncalls; i++) {
        double ms = timer->elapsed_ms(calls[i].m0, calls[i].m1);
        t->ms[calls[i].cls] += ms > 0 ? ms : 0;
        t->flops[calls[i].cls] += calls[i].flops;
    }
    t->steps++;
    t->step_ms += wall;
}

/* the sum of parts [from, NUM_PARTS) */
static ProfileTotals parts_from(int from) {
    ProfileTotals t;
    memset(&t, 0, sizeof(t));
    for (int k = from; k < NUM_PARTS; k++) {
        t.steps += parts[k].steps;
        t.step_ms += parts[k].step_ms;
        for (int c = 0; c < NUM_PROF_CLASSES; c++) {
            t.ms[c] += parts[k].ms[c];
            t.flops[c] += parts[k].flops[c];
        }
    }
    t.timer = timer != NULL ? timer->name : "";
    t.first_step_ms = 0.0;
    return t;
}

ProfileTotals profile_totals(void) { return parts_from(PART_FIRST); }

ProfileTotals profile_totals_steady(void) {
    /* the steady steps; with too few steps for them, what is after the first; the first alone
     * when it is all there is */
    int from = parts[PART_STEADY].steps > 0 ? PART_STEADY
             : parts[PART_WARMUP].steps > 0 ? PART_WARMUP : PART_FIRST;
    ProfileTotals t = parts_from(from);
    if (from == PART_STEADY) t.warmup = PROFILE_WARMUP_STEPS;
    if (from == PART_WARMUP) t.warmup = 1;
    if (from != PART_FIRST && parts[PART_FIRST].steps > 0) t.first_step_ms = parts[PART_FIRST].step_ms;
    return t;
}

static const char* const keys[NUM_PROF_CLASSES] = {
    "matmul_fwd", "matmul_bwd", "attn_fwd", "attn_bwd", "layernorm", "gelu",
    "residual_dropout", "crossentropy", "optimizer", "recompute", "other_ops"};
static const char* const labels[NUM_PROF_CLASSES] = {
    "matmul fwd", "matmul bwd", "attention fwd", "attention bwd", "LayerNorm", "GELU",
    "residual+dropout", "cross-entropy", "zero_grad/clip/AdamW", "recompute",
    "other ops (embedding, fills)"};

const char* profile_class_key(int c) { return c >= 0 && c < NUM_PROF_CLASSES ? keys[c] : "?"; }
const char* profile_class_label(int c) { return c >= 0 && c < NUM_PROF_CLASSES ? labels[c] : "?"; }

static double host_ms_total(const ProfileTotals* t) {
    double sum = 0;
    for (int c = 0; c < NUM_PROF_CLASSES; c++) sum += t->ms[c];
    return t->step_ms > sum ? t->step_ms - sum : 0;
}

void profile_print(FILE* f, const ProfileTotals* t, double peak_gflops) {
    if (t->steps == 0) {
        fprintf(f, "profile: no step was measured\n");
        return;
    }
    double n = t->steps, step = t->step_ms / n;
    if (t->first_step_ms > 0)
        fprintf(f, "profile: first step %.2f ms (module load, the libraries' first calls and "
                "algorithm choices, first touches of memory), not in the table\n", t->first_step_ms);
    char after[64] = "";
    if (t->warmup > 0)
        snprintf(after, sizeof after, " after %d warm-up step%s", t->warmup, t->warmup == 1 ? "" : "s");
    fprintf(f, "profile: %d step%s%s, %.2f ms/step (%s per op; a recompute's re-run forward counts "
            "as recompute)\n", t->steps, t->steps == 1 ? "" : "s", after, step, t->timer);
    fprintf(f, "  %-30s %10s %7s %9s%s\n", "op class", "ms/step", "% step", "GFLOP/s",
            peak_gflops > 0 ? "   % peak" : "");
    for (int c = 0; c < NUM_PROF_CLASSES; c++) {
        double ms = t->ms[c] / n;
        fprintf(f, "  %-30s %10.3f %6.1f%%", labels[c], ms, step > 0 ? 100.0 * ms / step : 0.0);
        if (t->flops[c] > 0 && t->ms[c] > 0) {
            double g = t->flops[c] / (t->ms[c] * 1e6);
            fprintf(f, " %9.1f", g);
            if (peak_gflops > 0) fprintf(f, " %7.1f%%", 100.0 * g / peak_gflops);
        } else {
            fprintf(f, " %9s%s", "-", peak_gflops > 0 ? "        -" : "");
        }
        fprintf(f, "\n");
    }
    double host = host_ms_total(t) / n;
    fprintf(f, "  %-30s %10.3f %6.1f%%\n", "host, between ops", host,
            step > 0 ? 100.0 * host / step : 0.0);
    fprintf(f, "  %-30s %10.3f %6.1f%%\n", "step", step, 100.0);
}

void profile_json_fields(FILE* f, const ProfileTotals* t) {
    double n = t->steps > 0 ? t->steps : 1;
    fprintf(f, ",\"profile_steps\":%d,\"warmup_steps\":%d,\"step_ms\":%.4f", t->steps, t->warmup,
            t->step_ms / n);
    if (t->first_step_ms > 0) fprintf(f, ",\"first_step_ms\":%.4f", t->first_step_ms);
    for (int c = 0; c < NUM_PROF_CLASSES; c++) {
        fprintf(f, ",\"%s_ms\":%.4f", keys[c], t->ms[c] / n);
        if (t->flops[c] > 0)
            fprintf(f, ",\"%s_gflops\":%.3f", keys[c],
                    t->ms[c] > 0 ? t->flops[c] / (t->ms[c] * 1e6) : 0.0);
    }
    fprintf(f, ",\"host_ms\":%.4f,\"timer\":\"%s\"", host_ms_total(t) / n, t->timer);
}
