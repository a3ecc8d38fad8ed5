/* model/backend.c — the backend tables: the CPU one always, the CUDA one in builds made with
 * SEEDGPT_CUDA (`make cuda`, and the emulated build of `make test-cuda-emu`). */
#include <string.h>
#include "model/backend.h"
#include "model/ops.h"
#include "model/mem.h"
#include "attention/attention.h"
#ifdef SEEDGPT_CUDA
#include "model/ops_cuda.h"
#include "model/ops_bf16_cuda.h"
#include "attention/attention_cuda.h"
#include "attention/flash_tc.h"
#endif

static void* cpu_alloc(size_t bytes) { return mem_alloc(bytes); }
static void cpu_copy(void* dst, const void* src, size_t bytes) {
    if (dst != src && bytes > 0) memcpy(dst, src, bytes);
}
static void cpu_fill(float* x, size_t n, float value) {
    for (size_t i = 0; i < n; i++) x[i] = value;
}
static size_t cpu_count_differ(const float* a, const float* b, size_t n) {
    if (memcmp(a, b, n * sizeof(float)) == 0) return 0;
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return differ;
}
static size_t cpu_peak_bytes(void) { return mem_stats().peak_bytes; }
static void cpu_synchronize(void) {}

static void cpu_copy_rows(float* dst, size_t dst_stride, const float* src, size_t src_stride,
                          size_t rows, size_t width) {
    #pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * dst_stride, src + r * src_stride, width * sizeof(float));
}

const Backend backend_cpu = {
    .name = "cpu",
    .precision = "fp32",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = mem_free,
    .to_backend = cpu_copy,
    .to_host = cpu_copy,
    .fill = cpu_fill,
    .count_differ = cpu_count_differ,
    .peak_bytes = cpu_peak_bytes,
    .synchronize = cpu_synchronize,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .residual_dropout_forward = residual_dropout_forward,
    .dropout_backward = dropout_backward,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .drop_path = drop_path,
    .crossentropy_forward = crossentropy_forward,
    .crossentropy_backward = crossentropy_backward,
    .sum_squares = sum_squares,
    .scale_inplace = scale_inplace,
    .adamw_update = adamw_update,
    .attention_forward = attention_forward,
    .attention_backward_scratch_floats = attention_backward_scratch_floats,
    .attention_backward = attention_backward,
    .encoder_forward_at = encoder_forward_at,
    .residual_dropout_forward_at = residual_dropout_forward_at,
    .dropout_backward_at = dropout_backward_at,
    .attention_block_forward = attention_block_forward,
    .attention_merge = attention_merge,
    .copy_rows = cpu_copy_rows,
    .attention_block_backward = attention_block_backward,
};

#ifdef SEEDGPT_CUDA
/* The CUDA tables' scratch beside the arena: the ops' shared block and the value check's counts;
 * under bf16 also the products' operand copies with cuBLASLt's workspace, and the attention
 * forward's bf16 copy of qkv. */
static size_t cuda_scratch_bytes(const OpCalls* k) {
    return ops_scratch_bytes_cuda(k) + device_differ_scratch_bytes_cuda();
}
static void cuda_reserve_scratch(const OpCalls* k) {
    ops_reserve_scratch_cuda(k);
    device_reserve_differ_cuda();
}
static size_t cuda_bf16_scratch_bytes(const OpCalls* k) {
    return cuda_scratch_bytes(k) + matmul_scratch_bytes_bf16_cuda(k) +
           attention_forward_scratch_bytes_bf16_cuda(k->B, k->T, k->NH, k->NKV, k->HD);
}
static void cuda_bf16_reserve_scratch(const OpCalls* k) {
    cuda_reserve_scratch(k);
    matmul_reserve_scratch_bf16_cuda(k);
    attention_reserve_forward_scratch_bf16_cuda(k->B, k->T, k->NH, k->NKV, k->HD);
}

static const Backend backend_cuda = {
    .name = "cuda",
    .precision = "fp32",
    .host_memory = 0,
    .alloc = device_alloc_cuda,
    .free = device_free_cuda,
    .to_backend = device_to_backend_cuda,
    .to_host = device_to_host_cuda,
    .fill = device_fill_cuda,
    .count_differ = device_count_differ_cuda,
    .peak_bytes = device_peak_bytes_cuda,
    .synchronize = device_synchronize_cuda,
    .scratch_bytes = cuda_scratch_bytes,
    .reserve_scratch = cuda_reserve_scratch,
    .encoder_forward = encoder_forward_cuda,
    .encoder_backward = encoder_backward_cuda,
    .layernorm_forward = layernorm_forward_cuda,
    .layernorm_backward = layernorm_backward_cuda,
    .matmul_forward = matmul_forward_cuda,
    .matmul_backward = matmul_backward_cuda,
    .gelu_forward = gelu_forward_cuda,
    .gelu_backward = gelu_backward_cuda,
    .residual_dropout_forward = residual_dropout_forward_cuda,
    .dropout_backward = dropout_backward_cuda,
    .rope_forward = rope_forward_cuda,
    .rope_backward = rope_backward_cuda,
    .drop_path = drop_path_cuda,
    .crossentropy_forward = crossentropy_forward_cuda,
    .crossentropy_backward = crossentropy_backward_cuda,
    .sum_squares = sum_squares_cuda,
    .scale_inplace = scale_inplace_cuda,
    .adamw_update = adamw_update_cuda,
    .attention_forward = attention_forward_cuda,
    .attention_backward_scratch_floats = attention_backward_scratch_floats_cuda,
    .attention_backward = attention_backward_cuda,
    .encoder_forward_at = encoder_forward_at_cuda,
    .residual_dropout_forward_at = residual_dropout_forward_at_cuda,
    .dropout_backward_at = dropout_backward_at_cuda,
    .attention_block_forward = attention_block_forward_cuda,
    .attention_merge = attention_merge_cuda,
    .copy_rows = copy_rows_cuda,
    .attention_block_backward = attention_block_backward_cuda,
};

/* --precision bf16: the CUDA table with the dense products (cuBLASLt, bf16 operands, fp32
 * accumulation, the bias in the GEMM's epilogue) and attention (tensor cores, bf16 q, k, v, fp32
 * softmax statistics) swapped in, with the scratch they keep. Everything else, and the arena, is the fp32 table's: weights,
 * gradients, AdamW state and activations stay fp32. Made once, from the fp32 table. */
static const Backend* backend_cuda_bf16(void) {
    static Backend t;
    static int ready = 0;
    if (!ready) {
        t = backend_cuda;
        t.precision = "bf16";
        t.scratch_bytes = cuda_bf16_scratch_bytes;
        t.reserve_scratch = cuda_bf16_reserve_scratch;
        t.matmul_forward = matmul_forward_bf16_cuda;
        t.matmul_backward = matmul_backward_bf16_cuda;
        t.attention_forward = attention_forward_bf16_cuda;
        t.attention_backward_scratch_floats = attention_backward_scratch_floats_bf16_cuda;
        t.attention_backward = attention_backward_bf16_cuda;
        /* no bf16 block attention yet: gpt_build_cp refuses context parallelism under bf16 */
        t.attention_block_forward = NULL;
        t.attention_block_backward = NULL;
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
#ifdef SEEDGPT_CUDA
    if (strcmp(precision, "bf16") == 0 && strcmp(name, "cuda") == 0) return backend_cuda_bf16();
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
