/* model/backend.h — the table through which the orchestrator (model/gpt.c) and the run (train.c)
 * reach a backend: its memory, its ops and what it says of itself. model/backend.c fills the
 * tables: the CPU's from cpu/ and attention/flash_cpu.c; the CUDA one (built by `make cuda`) from
 * cuda/ and the attention's .cu twins, with the same signatures: every pointer an op receives
 * lives in that backend's memory. backend.c is the one file of model/ that names a backend's
 * folder; every other file of model/, and train.c, goes through the table.
 *
 * Under --precision bf16 a table may store the activations that are operands of products in
 * bf16 (act_dtype): the orchestrator carves them by the table's act_dtype and hands them on as
 * void*, never reading them. Both bf16 tables do (the CPU's and the CUDA one), with the weights'
 * operand copy in bf16 too, made once per update through round_to_act.
 *
 * The orchestrator never asks which backend it holds, except for the host mirrors of the weights
 * and optimizer state (the CPU backend's memory is host memory, so its mirrors are the memory
 * itself).
 */
#ifndef SEEDGPT_BACKEND_H
#define SEEDGPT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The element type of the activations that are operands of products (ln1, qkv, atty, ln2, fch,
 * fch_gelu, lnf) and of the weights' operand copy: Backend.act_dtype. Those arguments are typed
 * void* below; every other tensor an op receives is fp32. */
enum { DT_FP32 = 0, DT_BF16 = 1, DT_FP16 = 2 };
static inline size_t dtype_bytes(int dtype) { return dtype == DT_FP32 ? 4 : 2; }

/* The calls a model makes to the ops that keep scratch of their own beside the arena (a device
 * backend's partial sums, token buckets and bf16 operand copies): a backend sizes that scratch
 * from them once, at build, so that no op allocates after it and ./train plan counts it. */
typedef struct {
    int N, C, OC;   /* a dense product: (N, C) . (OC, C)^T */
    int bias;       /* its backward sums dbias */
    int dinp;       /* its backward computes dinp */
} MatmulCall;
#define OP_CALLS_MAX_MATMULS 8
typedef struct {
    int B, T, C;            /* the residual stream's shape; every row-wise op runs on B*T rows */
    int V;                  /* token ids are below V (the encoder backward's buckets) */
    int NH, NKV, HD;        /* attention */
    size_t largest_tensor;  /* floats: sum_squares reads one parameter tensor at a time */
    size_t all_parameters;  /* floats in all the parameter tensors, and their count: */
    int n_tensors;          /* sum_squares_tensors reads them all at once */
    int n_matmul;
    MatmulCall matmul[OP_CALLS_MAX_MATMULS];
} OpCalls;

/* The part of a training step the orchestrator is in (Backend.phase). */
enum { BE_PHASE_FORWARD, BE_PHASE_BACKWARD, BE_PHASE_RECOMPUTE, BE_PHASE_OPTIMIZER };

struct ProfileTimer;   /* model/profile.h */

typedef struct Backend {
    const char* name;          /* "cpu" or "cuda" */
    const char* precision;     /* "fp32", or "bf16" / "fp16": the operands of the dense products
                                  and of attention in that type, fp32 accumulation (README
                                  "Precision"); fp16 runs take dynamic loss scaling (train.c) */
    int host_memory;           /* 1: the backend's memory is host memory (no copies needed) */
    int act_dtype;             /* DT_FP32, DT_BF16 or DT_FP16: the operand activations' type, and
                                  the weights' operand copy's (DT_FP32: the products read the
                                  fp32 master weights themselves) */
    /* DT_BF16 and DT_FP16 only (NULL otherwise): dst (n) = src (n) rounded to nearest even, the weights'
     * operand copy made from the masters once per update */
    void (*round_to_act)(void* dst, const float* src, size_t n);

    /* ---- memory ---- */
    /* one arena per model: aligned (64 bytes), zeroed; exits with a message if it is not there */
    void* (*alloc)(size_t bytes);
    void (*free)(void* p);
    void (*to_backend)(void* dst, const void* host_src, size_t bytes);
    void (*to_host)(void* host_dst, const void* src, size_t bytes);
    void (*fill)(float* x, size_t n, float value);
    /* elements whose bits differ (the recompute value check) */
    size_t (*count_differ)(const float* a, const float* b, size_t n);
    /* the backend's memory high-water mark in bytes (what the step JSON reports) */
    size_t (*peak_bytes)(void);
    void (*synchronize)(void);
    /* optional (NULL in the backends): told the step's phase as it changes, BE_PHASE_*. Only the
     * profiler (model/profile.h) listens; no op may depend on it */
    void (*phase)(int phase);
    /* optional (NULL on the CPU, whose ops keep no counted scratch): the bytes of the scratch the
     * ops keep beside the arena for a model's calls, and its reservation, which the build makes
     * right after the arena; after it no op's scratch grows, so the counted peak of a run is the
     * arena plus these bytes (gpt_plan's op_scratch) */
    size_t (*scratch_bytes)(const OpCalls* calls);
    void (*reserve_scratch)(const OpCalls* calls);

    /* ---- what the backend says of itself (the run's start-up lines, MFU, ./train peak) ---- */
    /* The rate MFU is read against for a run on table be, in GFLOP/s, with the line that says
     * what it is written to line (cap bytes); 0 where no rate is known. threads: the run's. */
    double (*peak_gflops)(const struct Backend* be, int threads, char* line, size_t cap);
    /* ./train peak: the backend's rates as rows of a table on f, each measured for about
     * `seconds` at `threads` where it is measured; its JSON fields (each starting with a comma)
     * appended to the string json (cap bytes in all) */
    void (*peak_report)(FILE* f, int threads, double seconds, char* json, size_t cap);
    /* optional (NULL: nothing to say): one line on the kernel paths this table takes here (the
     * CPU's bf16 GEMM path), printed at the run's start */
    void (*describe)(char* line, size_t cap);
    /* optional (NULL: runs anywhere it is built): 0 where this table's kernels can run on this
     * machine's device (the CUDA tables: its compute capability, cuda/arch.h); else nonzero with
     * the one line that says why in err (cap bytes). The model's build calls it first. */
    int (*check_device)(const struct Backend* be, char* err, size_t cap);
    /* optional (NULL: the host's wall clock): the timer --profile reads this backend's ops with */
    const struct ProfileTimer* profile_timer;

    /* ---- ops: the signatures and contracts of model/ops.h and attention/attention.h ---- */
    void (*encoder_forward)(float* out, const int* inp, const float* wte, const float* wpe,
                            int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop);
    void (*encoder_backward)(float* dwte, float* dwpe, const float* dout, const int* inp,
                             int B, int T, int C);
    void (*layernorm_forward)(void* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C);
    /* optional (NULL: residual_dropout_forward, then layernorm_forward of its output): both in
     * one call, the same bits: out = x + drop(branch) (out may alias branch), and the LayerNorm
     * of out into ln_out (act_dtype), mean and rstd */
    void (*residual_layernorm_forward)(float* out, const float* x, const float* branch, int B,
                                       int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                       void* ln_out, float* mean, float* rstd,
                                       const float* weight, const float* bias);
    void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C);
    /* out written in out_dtype: DT_FP32 (a residual branch, the logits) or act_dtype (qkv, fch);
     * inp and weight in act_dtype */
    void (*matmul_forward)(void* out, int out_dtype, const void* inp, const void* weight,
                           const float* bias, int N, int C, int OC);
    void (*matmul_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                            const void* inp, const void* weight, int N, int C, int OC);
    /* optional (NULL: matmul_forward with out in act_dtype, then gelu_forward(out_gelu, out)):
     * both in one call, the same bits */
    void (*matmul_forward_gelu)(void* out, void* out_gelu, const void* inp, const void* weight,
                                const float* bias, int N, int C, int OC);
    void (*gelu_forward)(void* out, const void* inp, size_t n);
    void (*gelu_backward)(float* dinp, const void* inp, const float* dout, size_t n);
    void (*residual_dropout_forward)(float* out, const float* x, const float* branch,
                                     int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop);
    void (*dropout_backward)(float* dy, const float* dout, int B, int T, int C, uint32_t g0,
                             uint64_t seed, Dropout drop);
    void (*rope_forward)(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                         int NKV, int HD, int layout, int pos0);
    void (*rope_backward)(float* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                          int NKV, int HD, int layout, int pos0);
    void (*drop_path)(float* y, const float* x, int B, int T, int C, uint32_t g0, uint64_t seed,
                      Dropout drop);
    void (*crossentropy_forward)(float* losses, const float* logits, const int* targets,
                                 int N, int V, int Vp);
    void (*crossentropy_backward)(float* logits, const int* targets, float dloss, int N, int V,
                                  int Vp);
    /* optional (NULL: crossentropy_forward, then crossentropy_backward): both in one call, the
     * same bits */
    void (*crossentropy_forward_backward)(float* losses, float* logits, const int* targets,
                                          float dloss, int N, int V, int Vp);
    /* optional, together (NULL: crossentropy_forward_backward, then matmul_backward on the fp32
     * dlogits): the classifier chunk's loss and gradient with dlogits in act_dtype, then its
     * backward product reading them. crossentropy_forward_backward_act writes the losses as
     * crossentropy_forward does, and dloss (softmax - onehot) on [0, V), +0 on [V, Vp), in
     * act_dtype over the logits' own memory: row n's Vp values at the start of fp32 row n, so
     * rows Vp * 4 / dtype_bytes(act_dtype) elements apart (it may compute in a way that moves
     * bits against crossentropy_forward_backward: the backend's docs give the bound).
     * matmul_backward_dout_act is matmul_backward with that dout (rows ld_dout elements apart) and
     * no bias gradient (dbias NULL). */
    void (*crossentropy_forward_backward_act)(float* losses, float* logits, const int* targets,
                                              float dloss, int N, int V, int Vp);
    void (*matmul_backward_dout_act)(float* dinp, float* dweight, float* dbias, const void* dout,
                                     int ld_dout, const void* inp, const void* weight, int N, int C,
                                     int OC);
    double (*sum_squares)(const float* x, size_t n);
    /* optional (NULL: sum_squares tensor by tensor): out[k] = sum_squares(x + offset[k], size[k])
     * for the ntensors tensors in one call, the same bits */
    void (*sum_squares_tensors)(double* out, const float* x, int ntensors, const size_t* offset,
                                const size_t* size);
    /* optional, for ZeRO-1's norm from the shards (model/zero.h). sum_squares cuts x from its
     * start into blocks of 16384 floats (the last shorter) and adds the blocks' sums of squares;
     * sum_squares_blocks writes those partials (host memory, one a block) in one call (NULL:
     * sum_squares of each block alone, which is its partial), and sum_partials adds n partials
     * (host memory) as sum_squares adds its blocks, the same bits (NULL: in order from 0.0) */
    void (*sum_squares_blocks)(double* out, const float* x, size_t n);
    double (*sum_partials)(const double* partials, size_t n);
    void (*scale_inplace)(float* x, size_t n, float s);
    /* the gradient grads[i] * grad_scale (model/ops.h) */
    void (*adamw_update)(float* params, const float* grads, float grad_scale, float* m, float* v,
                         size_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int t);
    /* optional (NULL: adamw_update, then round_to_act over the whole block): adamw_update that
     * also writes each updated parameter rounded to act_dtype into params_act, the weights'
     * operand copy, in the same pass (the same bits as the two steps) */
    void (*adamw_update_act)(float* params, void* params_act, const float* grads,
                             float grad_scale, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, int t);
    /* optional (NULL: adamw_update_act, or adamw_update then round_to_act, tensor by tensor): every
     * parameter tensor in one call, the same bits. Tensor k is [offset[k], offset[k] + size[k])
     * of params, grads, m, v and, when params_act is not NULL, of the operand copy (act_dtype),
     * written in the same pass; wd[k] its weight decay */
    void (*adamw_update_tensors)(float* params, void* params_act, const float* grads,
                                 float grad_scale, float* m, float* v, int ntensors,
                                 const size_t* offset, const size_t* size, const float* wd,
                                 float lr, float beta1, float beta2, float eps, int t);
    void (*attention_forward)(void* out, float* lse, const void* qkv,
                              int B, int T, int NH, int NKV, int HD,
                              uint32_t g0, uint64_t attn_seed, Dropout drop);
    /* optional (NULL: this backend has none): attention_forward plus --log-attn-stats' stats
     * (attention/attention.h, attention_forward_stats); stats in host memory */
    void (*attention_forward_stats)(void* out, float* lse, const void* qkv,
                                    int B, int T, int NH, int NKV, int HD,
                                    uint32_t g0, uint64_t attn_seed, Dropout drop, float stats[3]);
    size_t (*attention_backward_scratch_floats)(int B, int T, int NH, int NKV, int HD,
                                                int nthreads);
    void (*attention_backward)(float* dqkv, float* scratch, const float* dout, const void* qkv,
                               const void* out, const float* lse,
                               int B, int T, int NH, int NKV, int HD,
                               uint32_t g0, uint64_t attn_seed, Dropout drop);

    /* ---- context parallelism (DESIGN §9): the ops above at global positions, and attention in
     * blocks (model/ops.h, attention/attention.h). NULL in a backend that has none yet (CUDA):
     * gpt_build_cp refuses context parallelism there ---- */
    void (*encoder_forward_at)(float* out, const int* inp, const float* wte, const float* wpe,
                               int B, int T, int t0, int C, uint32_t g0, uint64_t embd_seed,
                               Dropout drop);
    void (*residual_dropout_forward_at)(float* out, const float* x, const float* branch, int B,
                                        int T, int t0, int C, uint32_t g0, uint64_t seed,
                                        Dropout drop);
    void (*dropout_backward_at)(float* dy, const float* dout, int B, int T, int t0, int C,
                                uint32_t g0, uint64_t seed, Dropout drop);
    void (*attention_block_forward)(float* out, float* lse, const float* q, size_t q_stride,
                                    int Tq, int iq0, const float* k, const float* v,
                                    size_t kv_stride, int Tk, int jk0, int B, int NH, int NKV,
                                    int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);
    /* rows x width floats from src (row stride src_stride) to dst (row stride dst_stride) */
    void (*copy_rows)(float* dst, size_t dst_stride, const float* src, size_t src_stride,
                      size_t rows, size_t width);
    void (*attention_merge)(float* acc, float* lse_acc, const float* blk, const float* lse_blk,
                            int B, int T, int NH, int HD);
    void (*attention_block_backward)(float* dq, size_t dq_stride, float* dk, float* dv,
                                     size_t dkv_stride, float* scratch, const float* dout,
                                     const float* out, const float* lse, const float* q,
                                     size_t q_stride, int Tq, int iq0, const float* k,
                                     const float* v, size_t kv_stride, int Tk, int jk0, int B,
                                     int NH, int NKV, int HD, uint32_t g0, uint64_t attn_seed,
                                     Dropout drop);
} Backend;

extern const Backend backend_cpu;
/* The CPU in bf16 (cpu/ops_bf16_cpu.c, attention/flash_bf16_cpu.c) and in fp16 (the same sources
 * compiled for fp16: cpu/ops_fp16_cpu.c, attention/flash_fp16_cpu.c). */
const Backend* backend_cpu_bf16(void);
const Backend* backend_cpu_fp16(void);

/* "cpu" or "cuda" in fp32; NULL if this build has no such backend (the CPU build has no "cuda"). */
const Backend* backend_by_name(const char* name);
/* The backend `name` computing in `precision` ("fp32", "bf16" or "fp16"); NULL if this build has
 * no such combination. */
const Backend* backend_lookup(const char* name, const char* precision);
/* The backend a run gets without --device: "cuda" in a build that has it, else "cpu". */
const char* backend_default_name(void);

#ifdef __cplusplus
}
#endif
#endif
