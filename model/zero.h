/* model/zero.h — ZeRO-1 (DESIGN §11, `--zero 1`): AdamW's work split over the R data-parallel
 * ranks. Rank r owns one fixed, contiguous shard [bounds[r], bounds[r+1]) of the flat parameter
 * block (float offsets from params_memory, the same in grads_memory, m_memory and v_memory):
 * only rank r updates those weights and their moments. The step under --zero 1 (train.c):
 *
 *   gradients reduce-scattered in rank order (dist/dist.h): rank r holds the sum over the ranks
 *     of its shard only, g_0 + g_1 + ... + g_{R-1}, the same per-element sum plain data
 *     parallelism computes (there every shard is then gathered back);
 *   the clip norm from the shards: each rank the sums of squares of its own norm blocks, the
 *     blocks gathered, then every rank adds them in gpt_grad_norm's order (tensor by tensor,
 *     blocks in order), so the norm has plain data parallelism's bits at any rank count;
 *   AdamW on the shard, then the weights all-gathered (and, under bf16, rounded to the operand
 *     copy): every rank holds the same weights, bit for bit plain data parallelism's.
 *
 * The norm blocks: each tensor cut from its start into blocks of ZERO_NORM_BLOCK floats, the last
 * one shorter, exactly the blocks the CPU backend's sum_squares adds in order (cpu/ops_cpu.c,
 * NORM_BLOCK); a shard is a run of whole blocks, so a block's sum of squares is one rank's.
 * A block alone is one call of the backend's sum_squares, whose total is then that block's
 * partial (0.0 + partial): the rank-independent unit (or the backend's sum_squares_blocks gives
 * the partials of a run of blocks at once); the partials of a tensor are then added as the
 * backend's sum_squares adds them (its sum_partials: the CUDA backend's second pass), so the
 * norm has plain data parallelism's bits on either backend.
 *
 * Memory: each rank's model is built with the moments of its shard only (gpt_build_shard): 2 x 4
 * bytes per float of the shard instead of per float of the block. A state save gathers the
 * moments to rank 0 one tensor at a time (train.c), so the state file holds the whole optimizer
 * in the usual format and a resume takes its own shard of it, whatever the shards were.
 * Under an operand copy (bf16, fp16) the fp32 masters are sharded too, where they can be: the
 * tensors only the products read (gpt_param_operand_only: qkvw, attprojw, fcw, fcprojw) keep
 * their fp32 masters on the owner alone (GPT's master_first, master_held); the owner rounds its
 * shard of them to the operand copy and the copy's pieces are all-gathered (2 bytes a float).
 * The other tensors (wte, wpe, LayerNorms, biases) are read in fp32 by the encoder, the
 * LayerNorms and the bias adds, so their fp32 values are all-gathered whole, as under fp32.
 * A save gathers the sharded masters to rank 0 tensor by tensor, like the moments.
 * May not: move data between ranks (train.c calls dist/), print or exit.
 */
#ifndef SEEDGPT_ZERO_H
#define SEEDGPT_ZERO_H

#include <stddef.h>
#include "model/gpt.h"

#define ZERO_NORM_BLOCK 16384   /* the CPU backend's sum_squares block (cpu/ops_cpu.c) */

typedef struct {
    int ranks, rank;          /* R, and this process's rank; ranks 0: ZeRO is off */
    size_t tensor_off[NUM_PARAMETER_TENSORS];    /* each tensor's first float in the block */
    size_t tensor_size[NUM_PARAMETER_TENSORS];
    size_t span;              /* floats from the block's start to the end of the last tensor */
    size_t* bounds;           /* (ranks + 1) shard r = [bounds[r], bounds[r+1]); bounds[ranks] = span */
    int nblocks;              /* the norm's blocks over every tensor, in order */
    size_t* block_off;        /* (nblocks) a block's first float */
    size_t* block_len;        /* (nblocks) its floats, 1 .. ZERO_NORM_BLOCK */
    int* block_tensor;        /* (nblocks) the tensor it belongs to */
    size_t* block_bounds;     /* (ranks + 1) rank r owns blocks [block_bounds[r], block_bounds[r+1]) */
    double* partials;         /* (nblocks) the blocks' sums of squares (this rank's, then all) */
} Zero;

/* The shards of the parameter block of configuration c over `ranks` ranks, as even in floats as
 * whole blocks allow. Allocates the tables (model/mem.h: zero_table_bytes). 0, or -1 with err. */
int zero_init(Zero* z, const GPTConfig* c, int ranks, int rank, char err[256]);
void zero_free(Zero* z);
/* Without allocating: rank's shard [*begin, *begin + return value), as zero_init cuts it. */
size_t zero_shard(const GPTConfig* c, int ranks, int rank, size_t* begin);
/* The bytes zero_init allocates (counted by model/mem.h, for the plan). */
size_t zero_table_bytes(const GPTConfig* c, int ranks);
/* The largest tensor's bytes: the buffer rank 0 gathers one tensor's moments into for a save. */
size_t zero_save_buffer_bytes(const GPTConfig* c);

/* This rank's blocks' sums of squares into z->partials[block_bounds[rank] ..]; the others' come
 * from the ranks that own them (dist_allgather_doubles over block_bounds). */
void zero_block_partials(Zero* z, GPT* m);

/* The global gradient norm from every block's partial, in gpt_grad_norm's order, and the clip's
 * coefficient in m->grad_scale as gpt_clip_grads leaves it (max_norm 0: none). Returns the norm. */
float zero_clip_from_partials(const Zero* z, GPT* m, float max_norm);

/* AdamW (gpt_adamw's formula and arguments) on this rank's shard only: the weights, m and v of
 * [bounds[rank], bounds[rank+1]), with the clip's coefficient; the rest of the block is left as it
 * is. m is built for this shard (gpt_build_shard: opt_begin = bounds[rank]). The bf16 operand
 * copy is not touched: round it after the weights are gathered. */
/* The fp32 master of element i of tensor k (an element this rank holds). */
float* zero_master(const GPT* m, int k, size_t i);

void zero_adamw_shard(const Zero* z, GPT* m, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int t);

#endif
