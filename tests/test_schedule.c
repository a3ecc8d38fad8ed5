/* tests/test_schedule.c — the learning-rate schedule (model/schedule.h) at chosen steps, against
 * values worked out by hand from the formulas: lr 1e-3, final fraction 0.1 (lr_min 1e-4),
 * warmup 10, 111 steps, so that progress p = (step - 10) / 100 after warmup. */
#include <math.h>
#include <stdio.h>
#include "tests/test.h"
#include "model/schedule.h"

static void at(const char* name, const char* kind, int warmup, int steps, int step, double want) {
    double got = lr_schedule_at(kind, 1e-3, warmup, steps, 0.1, step);
    expect(fabs(got - want) <= 1e-12 * fabs(want) + 1e-18, name,
           "%s warmup %d, %d steps: step %d gives %.10g, expected %.10g", kind, warmup, steps, step,
           got, want);
}

int main(void) {
    /* warmup: lr * (step + 1) / 10, the same under every kind */
    at("warmup_first_step_is_lr_over_warmup", "cosine", 10, 111, 0, 1e-4);
    at("warmup_is_linear", "linear", 10, 111, 4, 5e-4);
    at("warmup_reaches_lr_on_its_last_step", "constant", 10, 111, 9, 1e-3);
    /* cosine: 1e-4 + 9e-4 * (1 + cos(pi p)) / 2 */
    at("cosine_starts_at_lr_after_warmup", "cosine", 10, 111, 10, 1e-3);
    at("cosine_quarter_way", "cosine", 10, 111, 35, 1e-4 + 9e-4 * (1 + sqrt(0.5)) / 2);
    at("cosine_halfway_is_the_mean_of_lr_and_lr_min", "cosine", 10, 111, 60, 5.5e-4);
    at("cosine_three_quarters", "cosine", 10, 111, 85, 1e-4 + 9e-4 * (1 - sqrt(0.5)) / 2);
    at("cosine_ends_at_final_fraction", "cosine", 10, 111, 110, 1e-4);
    /* linear: 1e-3 - 9e-4 p */
    at("linear_halfway", "linear", 10, 111, 60, 5.5e-4);
    at("linear_one_fifth", "linear", 10, 111, 30, 1e-3 - 9e-4 * 0.2);
    at("linear_ends_at_final_fraction", "linear", 10, 111, 110, 1e-4);
    /* constant */
    at("constant_after_warmup", "constant", 10, 111, 10, 1e-3);
    at("constant_at_the_end", "constant", 10, 111, 110, 1e-3);
    /* no warmup: the first step is at the peak */
    at("no_warmup_cosine_starts_at_lr", "cosine", 0, 101, 0, 1e-3);
    at("no_warmup_cosine_halfway", "cosine", 0, 101, 50, 5.5e-4);
    /* cosine never increases after warmup */
    int rises = 0;
    for (int s = 10; s < 110; s++)
        rises += lr_schedule_at("cosine", 1e-3, 10, 111, 0.1, s + 1) >
                 lr_schedule_at("cosine", 1e-3, 10, 111, 0.1, s);
    expect(rises == 0, "cosine_decreases_monotonically_after_warmup", "%d rises in 100 steps", rises);
    return test_finish();
}
