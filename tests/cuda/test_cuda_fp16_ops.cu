/* tests/cuda/test_cuda_fp16_ops.cu — the CUDA fp16 table's ops (cuda/ops_bf16_cuda.h's fp16 twins:
 * round_to_act, LayerNorm alone and after the residual add, GELU, RoPE, the products through
 * cuBLASLt on CUDA_R_16F operands or seedgpt's own kernel) against the CUDA fp32 op rounded once
 * (bit for bit) and the CPU fp16 table (cpu/ops_fp16_cpu.c: one fp16 step at most, in at most
 * FLIP_FRAC of the outputs; the products within their summation bound), and the new kernels
 * against the baseline's: tests/cuda/test_cuda_bf16_ops.cu compiled for fp16, which says how each
 * bound is built. fp16's edges (65504, the tie to infinity, denormals) are in round_to_act's
 * inputs. No cross-entropy rows: the fp16 table runs the fp32 cross-entropy. */
#define OPS16_FP16 1
#include "cuda/ops_bf16_cuda.h"
#include "tests/cuda/test_cuda_bf16_ops.cu"
