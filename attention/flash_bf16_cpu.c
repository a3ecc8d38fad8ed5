/* attention/flash_bf16_cpu.c — the CPU flash attention of --precision bf16: attention/flash_cpu.c
 * compiled with FLASH_BF16 (q, k, v and the output in bf16; scores, softmax statistics and tile
 * sums in fp32; P rounded to bf16 after the dropout and before P.V, and in the backward dO,
 * m p scale and ds rounded as they become operands; dq summed a key tile at a time, then over the
 * tiles in ascending order). That is attention/flash_tc.cu's arithmetic (its fused backward's
 * grouping of dq), so this op is the tensor-core kernel's reference twin. */
#define FLASH_BF16 1
#include "attention/flash_cpu.c"
