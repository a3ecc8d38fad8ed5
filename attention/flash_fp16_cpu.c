/* attention/flash_fp16_cpu.c — the CPU flash attention of --precision fp16: attention/flash_cpu.c
 * compiled with FLASH_FP16 (q, k, v and the output in fp16; scores, softmax statistics and tile
 * sums in fp32; P rounded to fp16 after the dropout and before P.V, and in the backward dO,
 * m p scale and ds rounded as they become operands), the same sites as the bf16 twin
 * (attention/flash_bf16_cpu.c), each rounding util/fp16.h's. */
#define FLASH_FP16 1
#include "attention/flash_cpu.c"
