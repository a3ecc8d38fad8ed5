/* model/hf.h — GPT-2 weights in Hugging Face's layout: `./train export` and `./train import`
 * (README "Start from GPT-2 / hand your model on", docs/formats.md "safetensors").
 *
 * The mapping, one table for both directions (GPT2LMHeadModel's names):
 *   transformer.wte.weight (V, C)       wte, its V real rows (llm.c's file pads to Vp rows)
 *   transformer.wpe.weight (maxT, C)    wpe
 *   transformer.h.N.ln_1.weight/bias    ln1w/ln1b[N]
 *   transformer.h.N.attn.c_attn.weight (C, 3C) = qkvw[N] (3C, C) transposed (Conv1D: (in, out))
 *   transformer.h.N.attn.c_attn.bias    qkvb[N]
 *   transformer.h.N.attn.c_proj.weight (C, C)   attprojw[N] transposed; .bias attprojb[N]
 *   transformer.h.N.ln_2.weight/bias    ln2w/ln2b[N]
 *   transformer.h.N.mlp.c_fc.weight (C, 4C)     fcw[N] transposed; .bias fcb[N]
 *   transformer.h.N.mlp.c_proj.weight (4C, C)   fcprojw[N] transposed; .bias fcprojb[N]
 *   transformer.ln_f.weight/bias        lnfw/lnfb
 * lm_head.weight is tied to wte and not written (as Hugging Face's own save leaves it out); read,
 * it must equal wte. Import also takes the names without "transformer." (GPT2Model's, and
 * OpenAI's files on the Hub), and ignores the attention-mask buffers h.N.attn.bias and
 * h.N.attn.masked_bias.
 *
 * A configuration GPT-2 cannot express (grouped-query heads, RoPE, the parallel block) is refused
 * in one line naming the feature. Files are written as PATH.tmp and renamed (util/fileio.h); no
 * output is one of the inputs. Refusals: one line on stderr, exit status 2.
 */
#ifndef SEEDGPT_HF_H
#define SEEDGPT_HF_H

#include "model/gpt.h"

/* ./train export [--format safetensors] [--dtype fp32|bf16] [--bpe-dir DIR] MODEL.bin OUT_DIR.
 * default_bpe_dir: where GPT-2's tokenizer files are when neither --bpe-dir nor SEEDGPT_BPE_DIR
 * says. Returns the exit status. */
int hf_export_main(int argc, char** argv, const char* default_bpe_dir);

/* ./train import [--n-head N] MODEL.safetensors|HF_FOLDER OUT.bin. Returns the exit status. */
int hf_import_main(int argc, char** argv);

/* The reading half of import: a .safetensors file or a folder holding model.safetensors (and a
 * config.json, read when beside the file). n_head 0: config.json's n_head, else GPT-2's own for
 * the width (768: 12, 1024: 16, 1280: 20, 1600: 25). Fills cfg (plain GPT-2, Vp = V rounded up to
 * a multiple of 128) and *params, malloc'd: every parameter in llm.c's order and layout, padded
 * rows zero. 0, or -1 with one line in err. */
int hf_read_gpt2(const char* path, int n_head, GPTConfig* cfg, float** params, char err[256]);

#endif
