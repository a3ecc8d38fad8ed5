/* model/plan.h — memory you can plan before a run: the recompute policies worth comparing, each
 * one's planned bytes (gpt_plan: the layout code that allocates, run without allocating) and
 * recomputed FLOPs, and the choice --memory-budget makes among them.
 *
 * The bytes a budget is held to are a policy's planned peak: on a host backend the arena, the
 * host-side tables and the build's transient RoPE table; on a device backend the device arena.
 * The run's other buffers (the loaders' windows, one batch of token ids, the GEMM's packing
 * buffer, a device backend's grow-only op scratch) are not in it.
 */
#ifndef SEEDGPT_PLAN_H
#define SEEDGPT_PLAN_H

#include "model/gpt.h"

#define PLAN_MAX_ROWS 12

typedef struct {
    RecomputePolicy policy;
    GPTPlan plan;
    size_t peak;   /* plan_peak(&plan, be) */
} PlanRow;

/* The planned peak a budget is held to (see the header comment). */
size_t plan_peak(const GPTPlan* p, const Backend* be);

/* One row per policy, in this order: none, every:K for K = 8, 4, 2 where K < L, layer, then the
 * same with selective storage (selective, selective+every:K, selective+layer), then `extra` when
 * it is none of those (NULL: no extra). The rows' check mode and seeds are extra's
 * (or none's defaults). Returns the number of rows, or -1 with err (a configuration or batch the
 * model refuses: gpt_plan's message). */
int plan_rows(const GPTConfig* c, int B, int T, const Backend* be, int threads,
              const RecomputePolicy* extra, PlanRow rows[PLAN_MAX_ROWS], char err[256]);

/* --memory-budget: among the rows whose peak is at most budget bytes, the one with the fewest
 * recomputed FLOPs, ties to the smaller peak. Returns its index, or -1 when none fits; *runner_up
 * is the next by the same order (-1 when there is none). */
int plan_choose(const PlanRow rows[], int n, double budget, int* runner_up);

#endif
