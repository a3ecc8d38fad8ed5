/* tests/ref_gpt.h — a float64 reference of the whole GPT (DESIGN §2–3, and the model options),
 * written naively and independently of the fp32 ops, for the model tests. Test code only: no
 * main, every name prefixed ref_gpt_.
 *
 * Parameters (and gradients) are one contiguous double array holding the 16 tensors in llm.c
 * order (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
 * fcprojb, lnfw, lnfb) with the shapes documented in model/gpt.h, back to back, no padding.
 */
#ifndef SEEDGPT_REF_GPT_H
#define SEEDGPT_REF_GPT_H

#include <stddef.h>
#include <stdint.h>
#include "model/gpt.h"

#define REF_GPT_NUM_TENSORS 16

/* Element count of each tensor (computed here from the documented shapes, not by the model);
 * returns the total. */
size_t ref_gpt_param_sizes(const GPTConfig* c, size_t sizes[REF_GPT_NUM_TENSORS]);

/* Mean cross-entropy over the B*T positions (real vocab V) of the model with these parameters on
 * inputs/targets (B, T). Row b is global sequence g0 + b. Dropout (p_embd on the embedding, p_attn
 * on the attention probabilities, p_resid on both residual branches) uses the seeds
 * philox_site_seed(master, step, layer, site, PASS_FORWARD); p = 0 means no dropout at that site.
 * grads (same layout as params) is written with d(mean loss)/d(params) unless NULL.
 * losses (B*T) receives the per-position losses unless NULL. */
double ref_gpt_loss_and_grad(const GPTConfig* c, const double* params, double* grads,
                             const int* inputs, const int* targets, int B, int T, uint32_t g0,
                             uint64_t master, uint32_t step, double p_embd, double p_attn,
                             double p_resid);
double ref_gpt_loss_and_grad_rows(const GPTConfig* c, const double* params, double* grads,
                                  double* losses, const int* inputs, const int* targets,
                                  int B, int T, uint32_t g0, uint64_t master, uint32_t step,
                                  double p_embd, double p_attn, double p_resid);
/* The same with the model options of c (README "Model options": RoPE, written here in float64
 * from the angle formula; the parallel block) and stochastic depth p_drop_path on both residual
 * branches (sites 4 and 5, one keep bit per sequence: philox_depth_draw). With RoPE there is no
 * wpe tensor (size 0). */
double ref_gpt_loss_and_grad_opts(const GPTConfig* c, const double* params, double* grads,
                                  double* losses, const int* inputs, const int* targets,
                                  int B, int T, uint32_t g0, uint64_t master, uint32_t step,
                                  double p_embd, double p_attn, double p_resid,
                                  double p_drop_path);

#endif
