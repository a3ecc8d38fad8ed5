/* model/schedule.h — the learning-rate schedule of train.c (--lr-schedule, --warmup,
 * --final-lr-frac), a pure function of the step so that a resumed run continues it exactly.
 *
 *   warmup:   steps 0 .. W-1 ramp linearly, lr * (step + 1) / W (the first step is not at 0)
 *   then, with progress p = (step - W) / (S - W - 1) running from 0 at step W to 1 at the last
 *   step S - 1 (p = 1 when fewer than two steps remain after warmup):
 *   constant: lr
 *   linear:   lr - (lr - lr_min) * p
 *   cosine:   lr_min + (lr - lr_min) * (1 + cos(pi * p)) / 2
 *   with lr_min = final_frac * lr, so linear and cosine end exactly at lr_min on the last step.
 */
#ifndef SEEDGPT_SCHEDULE_H
#define SEEDGPT_SCHEDULE_H

#include <math.h>
#include <string.h>

/* kind: "constant", "linear" or "cosine" (anything else: cosine). */
static inline double lr_schedule_at(const char* kind, double lr, int warmup, int steps,
                                    double final_frac, int step) {
    if (step < warmup) return lr * (step + 1) / warmup;
    if (!strcmp(kind, "constant")) return lr;
    double lr_min = lr * final_frac;
    int span = steps - warmup;
    double progress = span > 1 ? (double)(step - warmup) / (span - 1) : 1.0;
    if (!strcmp(kind, "linear")) return lr - (lr - lr_min) * progress;
    return lr_min + 0.5 * (1.0 + cos(3.14159265358979323846 * progress)) * (lr - lr_min);
}

#endif
