/* tests/bigram_baseline.c — the baseline a trained model must beat: a bigram model
 * P(next | current) fitted by counting every pair of the training split (add-alpha smoothing,
 * alpha chosen on the fit itself among a few values), evaluated on exactly the validation
 * positions the trainer's evaluation sees (windows 0..n-1 of B x T, targets shifted by one).
 *
 *   bigram_baseline TRAIN_PATTERN VAL_PATTERN VOCAB B T NWINDOWS   -> prints the mean loss
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "data/shards.h"

int main(int argc, char** argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: bigram_baseline TRAIN VAL VOCAB B T NWINDOWS\n");
        return 2;
    }
    int V = atoi(argv[3]), B = atoi(argv[4]), T = atoi(argv[5]), n = atoi(argv[6]);
    char err[256];
    DataLoader tr, va;
    if (loader_open(&tr, argv[1], 1, 1, V, 0, 0, err) || loader_open(&va, argv[2], B, T, V, 0, 0, err)) {
        fprintf(stderr, "bigram_baseline: %s\n", err);
        return 2;
    }
    /* counts over every consecutive pair of every training shard */
    double* counts = calloc((size_t)V * V, sizeof(double));
    for (int s = 0; s < tr.num_shards; s++) {
        uint16_t* tok;
        size_t count;
        if (shard_read(tr.paths[s], V, &tok, &count, err)) {
            fprintf(stderr, "bigram_baseline: %s\n", err);
            return 2;
        }
        for (size_t i = 0; i + 1 < count; i++) counts[(size_t)tok[i] * V + tok[i + 1]] += 1.0;
        free(tok);
    }
    double* rowsum = calloc(V, sizeof(double));
    for (int a = 0; a < V; a++) for (int b = 0; b < V; b++) rowsum[a] += counts[(size_t)a * V + b];

    int* inputs = malloc(sizeof(int) * B * T);
    int* targets = malloc(sizeof(int) * B * T);
    if ((size_t)n > loader_num_windows(&va)) n = (int)loader_num_windows(&va);
    /* the baseline gets its best smoothing on the validation positions: a generous baseline */
    double alphas[5] = {1.0, 0.3, 0.1, 0.03, 0.01};
    double best = INFINITY;
    for (int ai = 0; ai < 5; ai++) {
        double alpha = alphas[ai], sum = 0.0;
        size_t npos = 0;
        for (int k = 0; k < n; k++) {
            if (loader_window(&va, (size_t)k, inputs, targets)) {
                fprintf(stderr, "bigram_baseline: %s\n", va.err);
                return 2;
            }
            for (int i = 0; i < B * T; i++) {
                double p = (counts[(size_t)inputs[i] * V + targets[i]] + alpha) /
                           (rowsum[inputs[i]] + alpha * V);
                sum -= log(p);
                npos++;
            }
        }
        double loss = sum / (double)npos;
        if (loss < best) best = loss;
    }
    printf("%.6f\n", best);
    loader_close(&tr);
    loader_close(&va);
    free(counts); free(rowsum); free(inputs); free(targets);
    return 0;
}
