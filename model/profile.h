/* model/profile.h — where a training step's time goes, by op class (`./train --profile`, and
 * tests/bench_model.c).
 *
 * The profiler is a backend that wraps a backend: profile_wrap returns a copy of the model's
 * table (model/backend.h) whose ops time themselves and then call the real op with the same
 * arguments, so every result stays bit for bit what it was. A run without --profile never calls
 * profile_wrap and its ops are the plain table's: the timers cost nothing there.
 *
 * Timing: on a backend with host memory (the CPU), the wall clock around each op (every CPU op
 * returns when its work is done); on CUDA, a pair of cudaEvents around each op on the stream, read
 * once at the end of the step (cuda/profile_cuda.h). Only the ops between profile_step_begin and
 * profile_step_end are counted: evaluation and sampling between steps are not.
 *
 * Classes. The orchestrator tells its backend which part of the step it is in (Backend.phase:
 * forward, backward, recompute, optimizer), and an op's class is its kind, except that every op
 * of a recompute — the re-run forward of a segment before its backward, and its value check —
 * counts as "recompute", never as the forward op it repeats:
 *   matmul fwd / bwd     matmul_forward / matmul_backward (every linear and the LM head), and
 *                        matmul_forward_gelu (the MLP's first product with its GELU fused)
 *   attention fwd / bwd  attention_forward / _backward, with RoPE's rotation of q and k
 *   LayerNorm            layernorm_forward and _backward, and residual_layernorm_forward (the
 *                        residual add fused into the MLP's LayerNorm)
 *   GELU                 gelu_forward (where not fused) and _backward
 *   residual+dropout     residual_dropout_forward, dropout_backward, drop_path
 *   cross-entropy        crossentropy_forward and _backward (softmax over the vocabulary)
 *   zero_grad/clip/AdamW the fills, norms, scalings and updates of the optimizer phase
 *   recompute            every op of the recompute phase, and count_differ (the value check)
 *   other ops            the embedding (encoder_forward / _backward) and the backward's fills
 * What is left of the step is host time between ops (the data loader, the loss's sum on the
 * host, host-device copies, a data-parallel all-reduce, the profiler's own bookkeeping); on CUDA,
 * the step's wall time that no op's event interval covers (the device idle while the host works
 * or launches).
 *
 * FLOPs are counted where they are defined, from each call's shapes: a matmul forward 2 N C OC,
 * its backward 2 N C OC per product it computes (dinp, dweight); attention forward 4 B NH T^2 HD / 2
 * (QK^T and PV over the causal half), its backward 2.5 times that (tests/bench_attention.c's
 * counts); a recompute, the FLOPs of the matmuls and attention forwards it re-runs.
 *
 * One profiler per process (the wrapped table calls its ops through static state).
 */
#ifndef SEEDGPT_PROFILE_H
#define SEEDGPT_PROFILE_H

#include <stdio.h>
#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    PROF_MATMUL_FWD, PROF_MATMUL_BWD, PROF_ATTN_FWD, PROF_ATTN_BWD, PROF_LAYERNORM, PROF_GELU,
    PROF_RESID_DROPOUT, PROF_CROSSENTROPY, PROF_OPTIMIZER, PROF_RECOMPUTE, PROF_OTHER,
    NUM_PROF_CLASSES
};

/* How a backend marks instants in the order its ops run. record() returns the mark's index;
 * sync() waits until every mark recorded so far has happened; elapsed_ms(a, b) is the time from
 * mark a to mark b (after sync); reset() forgets the marks and keeps their storage. */
typedef struct ProfileTimer {
    const char* name;                       /* "wall clock", "cudaEvent" */
    int (*record)(void);
    void (*sync)(void);
    double (*elapsed_ms)(int a, int b);
    void (*reset)(void);
} ProfileTimer;

/* The host's wall clock: the timer of backends with host memory. */
extern const ProfileTimer profile_timer_wall;

/* The profiling table around `inner`, timed by `timer` (NULL: the wall clock). Call it once, after
 * the model is built; the model then runs on the returned table. */
const Backend* profile_wrap(const Backend* inner, const ProfileTimer* timer);

/* The steps to count: every op between the two calls, and the wall time from one to the other
 * (profile_step_end waits for the backend first). No-ops before profile_wrap. */
void profile_step_begin(void);
void profile_step_end(void);

/* What was counted: per class the total ms and FLOPs over the steps; the steps and their total
 * wall ms. */
typedef struct {
    int steps;
    double step_ms;                          /* total over the steps */
    double ms[NUM_PROF_CLASSES];
    double flops[NUM_PROF_CLASSES];          /* 0 where FLOPs are not defined */
    const char* timer;
    int warmup;                              /* steps measured before these and left out */
    double first_step_ms;                    /* the first step's wall ms when left out, else 0 */
} ProfileTotals;
/* Every step measured. */
ProfileTotals profile_totals(void);
/* The steady state: the steps after the first PROFILE_WARMUP_STEPS (the first pays for module
 * load, the libraries' first calls and their algorithm choices, and first touches of memory; the
 * second may still pay for some of it), with the first step's wall time on its own. A run of
 * fewer steps gives the steps after the first, and a run of one step that step. */
#define PROFILE_WARMUP_STEPS 2
ProfileTotals profile_totals_steady(void);

const char* profile_class_key(int c);        /* JSON key: "matmul_fwd", ... */
const char* profile_class_label(int c);      /* table label: "matmul fwd", ... */

/* The table: the first step's line when it was left out, then one row per class (ms/step, % of
 * the step, GFLOP/s and, with peak_gflops > 0, % of that peak), then the host time between ops
 * and the step. */
void profile_print(FILE* f, const ProfileTotals* t, double peak_gflops);
/* The JSON fields (each starting with a comma): "profile_steps", "warmup_steps", "step_ms" (per
 * step), "first_step_ms" (when left out),
 * "<class>_ms" per step for every class, "<class>_gflops" where FLOPs are defined, "host_ms" and
 * "timer". */
void profile_json_fields(FILE* f, const ProfileTotals* t);

#ifdef __cplusplus
}
#endif
#endif
