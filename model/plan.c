/* model/plan.c — the rows of ./train plan and the choice of --memory-budget (model/plan.h).
 * May not: allocate a model, print, or exit. */
#include <string.h>
#include "model/plan.h"
#include "model/zero.h"

size_t plan_peak(const GPTPlan* p, const Backend* be, size_t sampler) {
    if (!be->host_memory) return p->arena + p->op_scratch;
    /* the transient is freed inside the build, before the loop allocates */
    size_t loop = p->batch + sampler;
    return p->arena + p->host + (p->host_transient > loop ? p->host_transient : loop);
}

static int same_policy(const RecomputePolicy* a, const RecomputePolicy* b) {
    return a->every == b->every && a->selective == b->selective;
}

int plan_rows(const GPTConfig* c, int B, int T, const Backend* be, int threads,
              const RecomputePolicy* extra, size_t sampler, const PlanShard* shard,
              PlanRow rows[PLAN_MAX_ROWS], char err[256]) {
    size_t opt_floats = SIZE_MAX, zero_host = 0, begin = 0;
    if (shard != NULL && shard->ranks > 1) {
        opt_floats = zero_shard(c, shard->ranks, shard->rank, &begin);
        zero_host = zero_table_bytes(c, shard->ranks) +
                    (shard->rank == 0 && shard->saves ? zero_save_buffer_bytes(c) : 0);
    }
    RecomputePolicy base = {0, 0, CHECK_WARN, 0};
    if (extra != NULL) base = *extra;
    RecomputePolicy cand[PLAN_MAX_ROWS];
    int n = 0;
    const int everys[] = {0, 8, 4, 2, 1};
    for (int sel = 0; sel < 2; sel++)
        for (size_t i = 0; i < sizeof(everys) / sizeof(everys[0]); i++) {
            int k = everys[i];
            if (k > 1 && k >= c->num_layers) continue;   /* K >= L: one segment, not worth a row */
            cand[n] = base;
            cand[n].every = k;
            cand[n].selective = sel;
            n++;
        }
    if (extra != NULL) {
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= same_policy(&cand[i], extra);
        if (!seen) cand[n++] = *extra;
    }
    for (int i = 0; i < n; i++) {
        rows[i].policy = cand[i];
        if (gpt_plan_shard(c, B, T, &cand[i], be, threads, begin, opt_floats, &rows[i].plan, err) != 0)
            return -1;
        rows[i].plan.host += zero_host;
        rows[i].loop = rows[i].plan.batch + sampler;
        rows[i].peak = plan_peak(&rows[i].plan, be, sampler);
    }
    return n;
}

int plan_find(const PlanRow rows[], int n, const RecomputePolicy* p) {
    for (int i = 0; i < n; i++)
        if (same_policy(&rows[i].policy, p)) return i;
    return -1;
}

/* Is row a before row b in the budget's order? */
static int before(const PlanRow* a, const PlanRow* b) {
    if (a->plan.recompute_flops != b->plan.recompute_flops)
        return a->plan.recompute_flops < b->plan.recompute_flops;
    return a->peak < b->peak;
}

int plan_choose(const PlanRow rows[], int n, double budget, int* runner_up) {
    int best = -1, second = -1;
    for (int i = 0; i < n; i++) {
        if ((double)rows[i].peak > budget) continue;
        if (best < 0 || before(&rows[i], &rows[best])) {
            second = best;
            best = i;
        } else if (second < 0 || before(&rows[i], &rows[second])) {
            second = i;
        }
    }
    *runner_up = second;
    return best;
}
