/* cpu/ops_fp16_cpu.c — the CPU ops of --precision fp16: cpu/ops_bf16_cpu.c compiled with
 * OPS16_FP16 (the same sites rounded, to fp16; the products through gemm_f32 on fp16 operands
 * widened exactly to fp32). */
#define OPS16_FP16 1
#include "cpu/ops_bf16_cpu.c"
