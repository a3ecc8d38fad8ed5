/* model/plan.h — memory you can plan before a run: the recompute policies worth comparing, each
 * one's planned bytes (gpt_plan: the layout code that allocates, run without allocating) and
 * recomputed FLOPs, and the choice --memory-budget makes among them.
 *
 * The bytes a budget is held to are a policy's planned peak, the high-water mark the trainer
 * counts and logs (peak_bytes, device_peak_bytes): on a host backend the arena and the host-side
 * tables, plus the larger of the build's transient RoPE table and what the training loop
 * allocates after the build (its batch of token ids and targets, and the sampler of
 * --sample-every); on a device backend the device arena and the ops' scratch beside it. Not
 * counted, and so not planned: the loaders' windows and the CPU GEMM's packing buffer (plain
 * malloc), and a GPU library's own workspace.
 */
#ifndef SEEDGPT_PLAN_H
#define SEEDGPT_PLAN_H

#include "model/gpt.h"

#define PLAN_MAX_ROWS 12

typedef struct {
    RecomputePolicy policy;
    GPTPlan plan;
    size_t loop;   /* host: the training loop's batch and sampler (plan_rows' sampler) */
    size_t peak;   /* plan_peak(&plan, be, sampler) */
} PlanRow;

/* The planned peak a budget is held to (see the header comment); sampler: the bytes of the
 * sampler the loop allocates (sampler_bytes), 0 without --sample-every. */
size_t plan_peak(const GPTPlan* p, const Backend* be, size_t sampler);

/* ZeRO-1 (model/zero.h): the rank whose memory a plan is for. ranks 0: no ZeRO (every rank holds
 * the whole optimizer, the same plan for all). Else rank `rank` of `ranks` holds the moments of
 * its shard (gpt_plan_shard) and the shard tables (zero_table_bytes), and rank 0 of a run that
 * saves states (saves) the buffer it gathers one tensor's moments into (zero_save_buffer_bytes),
 * all of it host memory counted with the tables. */
typedef struct {
    int ranks, rank, saves;
} PlanShard;

/* One row per policy, in this order: none, every:K for K = 8, 4, 2 where K < L, layer, then the
 * same with selective storage (selective, selective+every:K, selective+layer), then `extra` when
 * it is none of those (NULL: no extra). The rows' check mode and seeds are extra's
 * (or none's defaults). Returns the number of rows, or -1 with err (a configuration or batch the
 * model refuses: gpt_plan's message). */
int plan_rows(const GPTConfig* c, int B, int T, const Backend* be, int threads,
              const RecomputePolicy* extra, size_t sampler, const PlanShard* shard,
              PlanRow rows[PLAN_MAX_ROWS], char err[256]);

/* The row planned for policy p (the same `every` and the same `selective`), or -1 when there is
 * none; plan_rows' rows always hold its `extra`. */
int plan_find(const PlanRow rows[], int n, const RecomputePolicy* p);

/* --memory-budget: among the rows whose peak is at most budget bytes, the one with the fewest
 * recomputed FLOPs, ties to the smaller peak. Returns its index, or -1 when none fits; *runner_up
 * is the next by the same order (-1 when there is none). */
int plan_choose(const PlanRow rows[], int n, double budget, int* runner_up);

#endif
