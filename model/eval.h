/* model/eval.h — multiple-choice scoring (HellaSwag): each choice is one row of a batch, a
 * context followed by the choice's tokens, and is scored by the model's loss on the choice's
 * tokens alone, through the same forward (and backend) as training, dropout off.
 *
 * The rule (llm.c's and the Hugging Face completion-style scoring): with l_t the cross-entropy of
 * the row's target at position t and S the m positions whose targets are the choice's tokens,
 *   sum  = sum_{t in S} l_t                          (the choice's negative log-likelihood)
 *   mean = sum / m                                   (per choice token)
 *   acc picks argmin sum, acc_norm picks argmin mean (llm.c's C eval reports the latter).
 * Ties go to the lower choice index. Sums are accumulated in double over the forward's fp32
 * per-position losses.
 *
 * Knows nothing of files: the rows come in as token arrays (data/hellaswag.h makes them).
 */
#ifndef SEEDGPT_EVAL_H
#define SEEDGPT_EVAL_H

#include "model/gpt.h"

/* One forward over the rows inputs/targets (B, T) (B <= m->B, T <= m->T; dropout off, as the
 * validation loss's forward: the layer records are drawn again before the next training step), then
 * per row r: sum[r] = the sum of its losses at positions
 * comp_first[r] .. comp_first[r] + comp_len[r] - 1. */
void eval_choice_losses(GPT* m, const int* inputs, const int* targets, int B, int T,
                        const int* comp_first, const int* comp_len, double* sum);

/* The pick among n choices: argmin of sum[k] (norm 0) or of sum[k] / len[k] (norm 1); the lower
 * index on a tie. */
int eval_pick(const double* sum, const int* len, int n, int norm);

#endif
