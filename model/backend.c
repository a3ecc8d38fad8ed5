/* model/backend.c — the backend tables: the CPU one always (cpu/, attention/flash_cpu.c), the
 * CUDA one in builds made with SEEDGPT_CUDA (`make cuda`, and the emulated build of `make
 * test-cuda-emu`; cuda/, the attention's .cu files). The one file of model/ that includes a backend's
 * headers (tests/check_layout.sh holds every other to the table). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "model/backend.h"
#include "model/ops.h"
#include "model/mem.h"
#include "cpu/backend_cpu.h"
#include "cpu/ops_bf16_cpu.h"
#include "attention/attention.h"
#ifdef SEEDGPT_CUDA
#include "cuda/ops_cuda.h"
#include "cuda/ops_bf16_cuda.h"
#include "cuda/device_peak.h"
#include "cuda/arch.h"
#include "cuda/profile_cuda.h"
#include "attention/attention_cuda.h"
#include "attention/flash_tc.h"
#endif

static void* cpu_alloc(size_t bytes) { return mem_alloc(bytes); }
static size_t cpu_peak_bytes(void) { return mem_stats().peak_bytes; }
static void cpu_synchronize(void) {}

/* The ops whose operand activations the table types void* (model/backend.h), bound to fp32
 * implementations: each adapter hands the pointers on as the float* they are under DT_FP32. */
#define FP32_PRODUCT_ADAPTERS(P, S)                                                                \
    static void P##_matmul_forward(void* out, int out_dtype, const void* inp, const void* weight, \
                                   const float* bias, int N, int C, int OC) {                     \
        (void)out_dtype;                                                                          \
        matmul_forward##S(out, inp, weight, bias, N, C, OC);                                      \
    }                                                                                             \
    static void P##_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, \
                                    const void* inp, const void* weight, int N, int C, int OC) {  \
        matmul_backward##S(dinp, dweight, dbias, dout, inp, weight, N, C, OC);                    \
    }                                                                                             \
    static void P##_attention_forward(void* out, float* lse, const void* qkv, int B, int T,       \
                                      int NH, int NKV, int HD, uint32_t g0, uint64_t seed,        \
                                      Dropout drop) {                                             \
        attention_forward##S(out, lse, qkv, B, T, NH, NKV, HD, g0, seed, drop);                   \
    }                                                                                             \
    static void P##_attention_backward(float* dqkv, float* scratch, const float* dout,            \
                                       const void* qkv, const void* out, const float* lse, int B, \
                                       int T, int NH, int NKV, int HD, uint32_t g0,               \
                                       uint64_t seed, Dropout drop) {                             \
        attention_backward##S(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HD, g0, seed,    \
                              drop);                                                              \
    }
#define FP32_ACT_ADAPTERS(P, S)                                                                   \
    FP32_PRODUCT_ADAPTERS(P, S)                                                                   \
    static void P##_layernorm_forward(void* out, float* mean, float* rstd, const float* inp,      \
                                      const float* weight, const float* bias, int N, int C) {     \
        layernorm_forward##S(out, mean, rstd, inp, weight, bias, N, C);                           \
    }                                                                                             \
    static void P##_gelu_forward(void* out, const void* inp, size_t n) {                          \
        gelu_forward##S(out, inp, n);                                                             \
    }                                                                                             \
    static void P##_gelu_backward(float* dinp, const void* inp, const float* dout, size_t n) {    \
        gelu_backward##S(dinp, inp, dout, n);                                                     \
    }                                                                                             \
    static void P##_rope_forward(void* qkv, const float* cos, const float* sin, int B, int T,     \
                                 int NH, int NKV, int HD, int layout, int pos0) {                 \
        rope_forward##S(qkv, cos, sin, B, T, NH, NKV, HD, layout, pos0);                          \
    }

FP32_ACT_ADAPTERS(cpu, )
static void cpu_attention_forward_stats(void* out, float* lse, const void* qkv, int B, int T,
                                        int NH, int NKV, int HD, uint32_t g0, uint64_t seed,
                                        Dropout drop, float stats[3]) {
    attention_forward_stats(out, lse, qkv, B, T, NH, NKV, HD, g0, seed, drop, stats);
}

const Backend backend_cpu = {
    .name = "cpu",
    .precision = "fp32",
    .host_memory = 1,
    .act_dtype = DT_FP32,
    .alloc = cpu_alloc,
    .free = mem_free,
    .to_backend = copy_cpu,
    .to_host = copy_cpu,
    .fill = fill_cpu,
    .count_differ = count_differ_cpu,
    .peak_bytes = cpu_peak_bytes,
    .synchronize = cpu_synchronize,
    .peak_gflops = peak_gflops_cpu,
    .peak_report = peak_report_cpu,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_dropout_forward = residual_dropout_forward,
    .dropout_backward = dropout_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = rope_backward,
    .drop_path = drop_path,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .crossentropy_forward_backward = crossentropy_forward_backward,
    .sum_squares = sum_squares,
    .scale_inplace = scale_inplace,
    .adamw_update = adamw_update,
    .attention_forward = cpu_attention_forward,
    .attention_forward_stats = cpu_attention_forward_stats,
    .attention_backward_scratch_floats = attention_backward_scratch_floats,
    .attention_backward = cpu_attention_backward,
    .encoder_forward_at = encoder_forward_at,
    .residual_dropout_forward_at = residual_dropout_forward_at,
    .dropout_backward_at = dropout_backward_at,
    .attention_block_forward = attention_block_forward,
    .attention_merge = attention_merge,
    .copy_rows = copy_rows_cpu,
    .attention_block_backward = attention_block_backward,
};

/* --precision bf16 (fp16) on the CPU: bf16 (fp16) operand activations and a 16-bit copy of the
 * weights; in bf16 the products through gemm_bf16 (VDPBF16PS or its portable twin), in fp16
 * through gemm_f32 on the operands widened exactly; attention through the 16-bit twin of
 * attention/flash_cpu.c. The memory ops and every fp32-only op are the fp32 table's. One macro
 * fills both tables from the same list, so the two cannot drift apart. */
#define CPU_ACT16_TABLE(FN, PREC, DT, S, ROUND, DESCRIBE)                                          \
    const Backend* FN(void) {                                                                     \
        static Backend t;                                                                         \
        static int ready = 0;                                                                     \
        if (!ready) {                                                                             \
            t = backend_cpu;                                                                      \
            t.precision = PREC;                                                                   \
            t.act_dtype = DT;                                                                     \
            t.round_to_act = ROUND;                                                               \
            t.describe = DESCRIBE;                                                                \
            t.adamw_update_act = adamw_update##S;                                                 \
            t.layernorm_forward = layernorm_forward##S;                                           \
            t.matmul_forward = matmul_forward##S;                                                 \
            t.matmul_backward = matmul_backward##S;                                               \
            t.gelu_forward = gelu_forward##S;                                                     \
            t.gelu_backward = gelu_backward##S;                                                   \
            t.rope_forward = rope_forward##S;                                                     \
            t.attention_forward = attention_forward##S;                                           \
            t.attention_forward_stats = attention_forward_stats##S;                               \
            t.attention_backward_scratch_floats = attention_backward_scratch_floats##S;           \
            t.attention_backward = attention_backward##S;                                         \
            /* context parallelism's blocks read fp32 q, k, v: not under 16-bit activations    */ \
            /* (yet), so gpt_build_cp refuses it                                               */ \
            t.encoder_forward_at = NULL;                                                          \
            t.residual_dropout_forward_at = NULL;                                                 \
            t.dropout_backward_at = NULL;                                                         \
            t.attention_block_forward = NULL;                                                     \
            t.attention_merge = NULL;                                                             \
            t.copy_rows = NULL;                                                                   \
            t.attention_block_backward = NULL;                                                    \
            ready = 1;                                                                            \
        }                                                                                         \
        return &t;                                                                                \
    }
CPU_ACT16_TABLE(backend_cpu_bf16, "bf16", DT_BF16, _bf16, round_to_bf16_cpu, describe_bf16_cpu)
CPU_ACT16_TABLE(backend_cpu_fp16, "fp16", DT_FP16, _fp16, round_to_fp16_cpu, describe_fp16_cpu)

#ifdef SEEDGPT_CUDA
FP32_ACT_ADAPTERS(cuda, _cuda)

/* The CUDA tables' scratch beside the arena: the ops' shared block and the value check's counts;
 * under bf16 also the products' scratch (the backward's bf16 dout, padded operand copies where C
 * is not a multiple of 8) with cuBLASLt's workspace, and, for a head dim the tensor cores do not
 * take, the attention forward's fp32 view of qkv and o. */
static size_t cuda_scratch_bytes(const OpCalls* k) {
    return ops_scratch_bytes_cuda(k) + device_differ_scratch_bytes_cuda();
}
static void cuda_reserve_scratch(const OpCalls* k) {
    (void)kernels_baseline_cuda();   /* a wrong SEEDGPT_KERNELS is refused at the build, in one line */
    (void)attention_tc_backward_kernels(k->HD);   /* and a wrong SEEDGPT_ATTN_BACKWARD */
    ops_reserve_scratch_cuda(k);
    device_reserve_differ_cuda();
}
static size_t cuda_bf16_scratch_bytes(const OpCalls* k) {
    return cuda_scratch_bytes(k) + matmul_act_scratch_bytes_bf16_cuda(k) +
           attention_forward_act_scratch_bytes_bf16_cuda(k->B, k->T, k->NH, k->NKV, k->HD);
}
static void cuda_bf16_reserve_scratch(const OpCalls* k) {
    cuda_reserve_scratch(k);
    matmul_act_reserve_scratch_bf16_cuda(k);
    attention_reserve_forward_act_scratch_bf16_cuda(k->B, k->T, k->NH, k->NKV, k->HD);
}

/* The kernels by compute capability (cuda/arch.h): refused in one line where they cannot run
 * (bf16 below sm_80, a GPU the binary holds no code for), and named at the run's start. */
static int cuda_check_device(const Backend* be, char* err, size_t cap) {
    CudaArch a;
    if (cuda_arch_query(&a) != 0) {
        snprintf(err, cap, "--device cuda: %s", a.name);
        return 1;
    }
    return cuda_arch_check(&a, be->precision, err, cap);
}
static void cuda_describe_as(const char* precision, char* line, size_t cap) {
    CudaArch a;
    if (cuda_arch_query(&a) != 0) snprintf(line, cap, "cuda: %s", a.name);
    else cuda_arch_describe(&a, precision, line, cap);
}
static void cuda_describe(char* line, size_t cap) { cuda_describe_as("fp32", line, cap); }
static void cuda_bf16_describe(char* line, size_t cap) { cuda_describe_as("bf16", line, cap); }
static void cuda_fp16_describe(char* line, size_t cap) { cuda_describe_as("fp16", line, cap); }

static const Backend backend_cuda = {
    .name = "cuda",
    .precision = "fp32",
    .host_memory = 0,
    .act_dtype = DT_FP32,
    .alloc = device_alloc_cuda,
    .free = device_free_cuda,
    .to_backend = device_to_backend_cuda,
    .to_host = device_to_host_cuda,
    .fill = device_fill_cuda,
    .count_differ = device_count_differ_cuda,
    .peak_bytes = device_peak_bytes_cuda,
    .synchronize = device_synchronize_cuda,
    .scratch_bytes = cuda_scratch_bytes,
    .peak_gflops = peak_gflops_cuda,
    .peak_report = peak_report_cuda,
    .describe = cuda_describe,
    .check_device = cuda_check_device,
    .profile_timer = &profile_timer_cuda,
    .reserve_scratch = cuda_reserve_scratch,
    .encoder_forward = encoder_forward_cuda,
    .encoder_backward = encoder_backward_cuda,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = layernorm_backward_cuda,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .residual_dropout_forward = residual_dropout_forward_cuda,
    .residual_layernorm_forward = residual_layernorm_forward_cuda,
    .dropout_backward = dropout_backward_cuda,
    .rope_forward = cuda_rope_forward,
    .rope_backward = rope_backward_cuda,
    .drop_path = drop_path_cuda,
    .crossentropy_forward = crossentropy_forward_cuda,
    .crossentropy_backward = crossentropy_backward_cuda,
    .sum_squares = sum_squares_cuda,
    .sum_squares_tensors = sum_squares_tensors_cuda,
    .sum_squares_blocks = sum_squares_blocks_cuda,
    .sum_partials = sum_partials_cuda,
    .scale_inplace = scale_inplace_cuda,
    .adamw_update = adamw_update_cuda,
    .adamw_update_tensors = adamw_update_tensors_cuda,
    .attention_forward = cuda_attention_forward,
    .attention_backward_scratch_floats = attention_backward_scratch_floats_cuda,
    .attention_backward = cuda_attention_backward,
    .encoder_forward_at = encoder_forward_at_cuda,
    .residual_dropout_forward_at = residual_dropout_forward_at_cuda,
    .dropout_backward_at = dropout_backward_at_cuda,
    .attention_block_forward = attention_block_forward_cuda,
    .attention_merge = attention_merge_cuda,
    .copy_rows = copy_rows_cuda,
    .attention_block_backward = attention_block_backward_cuda,
};

/* --precision bf16 on CUDA, the twin of backend_cpu_bf16(): bf16 operand activations (ln1, qkv,
 * atty, ln2, fch, fch_gelu, lnf) and a bf16 copy of the weights in the arena, each rounded once by
 * the op that produces it; the dense products through cuBLASLt on those bf16 operands (fp32
 * accumulation, the bias in the GEMM's epilogue), the attention on tensor cores reading bf16 qkv
 * and writing bf16 o (fp32 softmax statistics and LSE). The memory ops and every fp32-only op
 * (residual stream, LayerNorm backward, dropout, cross-entropy, AdamW) are the fp32 table's. Made
 * once, from the fp32 table. */
static const Backend* backend_cuda_bf16(void) {
    static Backend t;
    static int ready = 0;
    if (!ready) {
        t = backend_cuda;
        t.precision = "bf16";
        t.act_dtype = DT_BF16;
        t.round_to_act = round_to_bf16_cuda;
        t.describe = cuda_bf16_describe;
        t.scratch_bytes = cuda_bf16_scratch_bytes;
        t.reserve_scratch = cuda_bf16_reserve_scratch;
        t.layernorm_forward = layernorm_forward_bf16_cuda;
        t.residual_layernorm_forward = residual_layernorm_forward_bf16_cuda;
        t.matmul_forward = matmul_forward_bf16_act_cuda;
        t.matmul_forward_gelu = matmul_forward_gelu_bf16_act_cuda;
        t.crossentropy_forward_backward_act = crossentropy_forward_backward_bf16_cuda;
        t.matmul_backward_dout_act = matmul_backward_dout_bf16_act_cuda;
        t.matmul_backward = matmul_backward_bf16_act_cuda;
        t.gelu_forward = gelu_forward_bf16_cuda;
        t.gelu_backward = gelu_backward_bf16_cuda;
        t.rope_forward = rope_forward_bf16_cuda;
        t.attention_forward = attention_forward_bf16_act_cuda;
        t.attention_backward_scratch_floats = attention_backward_act_scratch_floats_bf16_cuda;
        t.attention_backward = attention_backward_bf16_act_cuda;
        /* context parallelism's blocks read fp32 q, k, v: not under bf16 activations (yet), so
         * gpt_build_cp refuses it */
        t.encoder_forward_at = NULL;
        t.residual_dropout_forward_at = NULL;
        t.dropout_backward_at = NULL;
        t.attention_block_forward = NULL;
        t.attention_merge = NULL;
        t.copy_rows = NULL;
        t.attention_block_backward = NULL;
        ready = 1;
    }
    return &t;
}

/* --precision fp16 on CUDA, the twin of backend_cpu_fp16(): the bf16 table's layout with fp16 in
 * place of bf16 (the operand activations and the weights' copy, each rounded once, to nearest
 * even, by the op that produces it), the products through cuBLASLt on CUDA_R_16F operands (fp32
 * sums), and the attention on the fp16 tensor cores where the device has them (sm_75 and newer:
 * cuda/arch.h), else the fp32 kernels on the fp16 values. Not in it: the bf16 table's fused
 * cross-entropy (the fp16 table runs the fp32 one; the classifier's product rounds dlogits as it
 * reads them) and the one-pass AdamW with the copy (AdamW, then round_to_act over the block), as
 * the CPU fp16 table. The loss scaling is train.c's, the same on every table. */
static int cuda_fp16_tensor_cores(void) {
    static int known = 0, tc = 0;
    if (!known) {
        CudaArch a;
        tc = cuda_arch_query(&a) == 0 && a.fp16_tensor_cores;
        known = 1;
    }
    return tc;
}
static void cuda_fp16_attention_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                                        int HD, uint32_t g0, uint64_t attn_seed, Dropout drop) {
    attention_forward_fp16_act_cuda(cuda_fp16_tensor_cores(), out, lse, qkv, B, T, NH, NKV, HD, g0, attn_seed,
                                    drop);
}
static size_t cuda_fp16_attention_backward_scratch_floats(int B, int T, int NH, int NKV, int HD, int nthreads) {
    return attention_backward_act_scratch_floats_fp16_cuda(cuda_fp16_tensor_cores(), B, T, NH, NKV, HD, nthreads);
}
static void cuda_fp16_attention_backward(float* dqkv, float* scratch, const float* dout, const void* qkv,
                                         const void* out, const float* lse, int B, int T, int NH, int NKV, int HD,
                                         uint32_t g0, uint64_t attn_seed, Dropout drop) {
    attention_backward_fp16_act_cuda(cuda_fp16_tensor_cores(), dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV,
                                     HD, g0, attn_seed, drop);
}
static size_t cuda_fp16_scratch_bytes(const OpCalls* k) {
    return cuda_scratch_bytes(k) + matmul_act_scratch_bytes_bf16_cuda(k) +
           attention_forward_act_scratch_bytes_fp16_cuda(cuda_fp16_tensor_cores(), k->B, k->T, k->NH, k->NKV, k->HD);
}
static void cuda_fp16_reserve_scratch(const OpCalls* k) {
    cuda_reserve_scratch(k);
    matmul_act_reserve_scratch_bf16_cuda(k);   /* the operand copies' scratch: 16-bit, either type */
    attention_reserve_forward_act_scratch_fp16_cuda(cuda_fp16_tensor_cores(), k->B, k->T, k->NH, k->NKV, k->HD);
}
static const Backend* backend_cuda_fp16(void) {
    static Backend t;
    static int ready = 0;
    if (!ready) {
        t = *backend_cuda_bf16();
        t.precision = "fp16";
        t.act_dtype = DT_FP16;
        t.round_to_act = round_to_fp16_cuda;
        t.describe = cuda_fp16_describe;
        t.scratch_bytes = cuda_fp16_scratch_bytes;
        t.reserve_scratch = cuda_fp16_reserve_scratch;
        t.layernorm_forward = layernorm_forward_fp16_cuda;
        t.residual_layernorm_forward = residual_layernorm_forward_fp16_cuda;
        t.matmul_forward = matmul_forward_fp16_act_cuda;
        t.matmul_forward_gelu = matmul_forward_gelu_fp16_act_cuda;
        t.crossentropy_forward_backward_act = NULL;
        t.matmul_backward_dout_act = NULL;
        t.matmul_backward = matmul_backward_fp16_act_cuda;
        t.gelu_forward = gelu_forward_fp16_cuda;
        t.gelu_backward = gelu_backward_fp16_cuda;
        t.rope_forward = rope_forward_fp16_cuda;
        t.attention_forward = cuda_fp16_attention_forward;
        t.attention_backward_scratch_floats = cuda_fp16_attention_backward_scratch_floats;
        t.attention_backward = cuda_fp16_attention_backward;
        t.adamw_update_tensors = NULL;   /* its copy is bf16's: AdamW, then round_to_act */
        t.adamw_update_act = NULL;
        ready = 1;
    }
    return &t;
}
#endif

const Backend* backend_lookup(const char* name, const char* precision) {
    if (strcmp(precision, "fp32") == 0) {
        if (strcmp(name, "cpu") == 0) return &backend_cpu;
#ifdef SEEDGPT_CUDA
        if (strcmp(name, "cuda") == 0) return &backend_cuda;
#endif
    }
    if (strcmp(precision, "bf16") == 0 && strcmp(name, "cpu") == 0) return backend_cpu_bf16();
    if (strcmp(precision, "fp16") == 0 && strcmp(name, "cpu") == 0) return backend_cpu_fp16();
#ifdef SEEDGPT_CUDA
    if (strcmp(precision, "bf16") == 0 && strcmp(name, "cuda") == 0) return backend_cuda_bf16();
    if (strcmp(precision, "fp16") == 0 && strcmp(name, "cuda") == 0) return backend_cuda_fp16();
#endif
    return NULL;
}

const Backend* backend_by_name(const char* name) { return backend_lookup(name, "fp32"); }

const char* backend_default_name(void) {
#ifdef SEEDGPT_CUDA
    return "cuda";
#else
    return "cpu";
#endif
}
