/* model/eval.c — multiple-choice scoring over the training forward (model/eval.h). */
#include "model/eval.h"

void eval_choice_losses(GPT* m, const int* inputs, const int* targets, int B, int T,
                        const int* comp_first, const int* comp_len, double* sum) {
    /* no dropout: train 0; the per-position losses land in m->host_losses (B, T) */
    gpt_forward(m, inputs, targets, B, T, 0, 0, 0);
    for (int r = 0; r < B; r++) {
        const float* l = m->host_losses + (size_t)r * T;
        double s = 0.0;
        for (int t = comp_first[r]; t < comp_first[r] + comp_len[r]; t++) s += l[t];
        sum[r] = s;
    }
}

int eval_pick(const double* sum, const int* len, int n, int norm) {
    int best = 0;
    double best_v = 0.0;
    for (int k = 0; k < n; k++) {
        double v = norm ? sum[k] / len[k] : sum[k];
        if (k == 0 || v < best_v) {
            best = k;
            best_v = v;
        }
    }
    return best;
}
