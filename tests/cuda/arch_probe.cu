/* tests/cuda/arch_probe.cu — a small kernel for tests/check_cuda_archs.sh (not a test of its own):
 * it calls every tensor-core and data-movement wrapper of cuda/mma.h, so that compiled with the
 * Makefile's NVCC_ARCH its object holds one SASS image per target plus the PTX, and each target's
 * PTX shows which wrappers are real there and which are the __trap() that no run reaches (the
 * sm_80 ones below sm_80, cuda/arch.h). */
#include "cuda/device.h"
#include <stdint.h>
#include "cuda/mma.h"

__global__ void arch_probe_kernel(float* out, const uint32_t* in) {
    __shared__ __align__(16) uint16_t tile[32 * 8];
    int lane = threadIdx.x & 31;
    sg_cp_async16(&tile[lane * 8], in + lane * 4, 16);
    sg_cp_async_wait_all();
    __syncthreads();
    uint32_t a[4], b[2] = {in[lane], in[lane + 32]};
    sg_ldmatrix_x4(a, &tile[(lane & 31) * 8]);
    float c[4] = {0, 0, 0, 0}, d[4], e[4];
    sg_mma_m16n8k16_bf16_f32(d, a, b, c);   /* sm_80 */
    sg_mma_m16n8k8_f16_f32(e, a, b, c);     /* sm_75 */
    for (int i = 0; i < 4; i++) out[threadIdx.x * 4 + i] = d[i] + e[i];
}
