/* cuda/arch.h — which kernels the CUDA backend runs on this GPU, chosen once from its compute
 * capability (cuda/arch.cu). One ./train_cuda holds machine code for several architectures
 * (Makefile: CUDA_ARCHS); the kernels that need sm_80's instructions (mma.sync m16n8k16 in bf16,
 * cp.async, and the ldmatrix that feeds them: attention/flash_tc.cu; cuBLASLt's bf16 products)
 * are compiled for every target but may run only on sm_80 or newer, so the choice is made here
 * and nowhere else:
 *   sm_80 and newer   every table; --precision bf16 takes the bf16 tensor-core paths
 *   sm_75 (Turing)    --precision fp32 and fp16; bf16 is refused; fp16 takes the fp16 tensor-core
 *                     attention (attention/flash_tc.h, mma.sync m16n8k8; also on sm_80 and newer)
 *   sm_70 (Volta)     fp32 and fp16, where the binary holds code for it (CUDA 12 toolkits build
 *                     it); fp16's attention is the fp32 kernels on fp16 values there
 *   below sm_70       refused
 * A GPU whose architecture the binary holds neither SASS nor usable PTX for is refused too, in
 * one line that names what the binary holds.
 * Plain C: model/backend.c calls it through the CUDA tables (check_device, describe).
 */
#ifndef SEEDGPT_CUDA_ARCH_H
#define SEEDGPT_CUDA_ARCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];          /* the runtime's device name */
    int cc_major, cc_minor;  /* compute capability */
    int supported;           /* 1: sm_70 or newer, the oldest the sources build for */
    int has_code;            /* 1: this binary holds SASS that runs here, or PTX old enough to JIT */
    int code_cc;             /* the compute capability of that code (10 major + minor): the SASS
                              * taken, or the PTX's where the driver compiles it (a compute_75
                              * PTX build on an H100: 75, so no bf16 kernels); 0: none */
    int bf16_tensor_cores;   /* 1: sm_80+ and code for sm_80+: mma.sync m16n8k16 bf16, cp.async
                              * (the bf16 tables) */
    int fp16_tensor_cores;   /* 1: sm_75+ and code for sm_75+: mma.sync m16n8k8 f16 (cuda/mma.h) */
    int emulated;            /* 1: the CPU emulation (cuda/emu/), which runs every kernel */
    size_t smem_optin;       /* the dynamic shared memory a block may opt in to, bytes: the
                              * device's (cuda_arch_query), else the architecture's documented
                              * limit (96 KiB sm_70, 64 KiB sm_75, 163 KiB sm_80, 99 KiB sm_86/89,
                              * 227 KiB sm_90). Kernels that would take more run smaller layouts
                              * (cuda/device.h: sg_smem_optin) */
} CudaArch;

/* The choice from a compute capability alone (no device; the tests). name may be NULL. sass is
 * the binary's SASS targets as "75 80 90" and ptx its PTX target (0: none); sass NULL means "any
 * code" (the emulation). */
void cuda_arch_from_cc(const char* name, int cc_major, int cc_minor, const char* sass, int ptx,
                       CudaArch* out);

/* The current device's choice, for this binary. Returns 0, or -1 without a device (out->name
 * then says why). */
int cuda_arch_query(CudaArch* out);

/* What this binary was built for: "sm_75 sm_80 ... + PTX compute_90", or "the emulation". */
const char* cuda_arch_built(void);

/* 0 where a run in `precision` ("fp32", "bf16", "fp16") can take its kernels on a; else 1, with the one
 * line that says why in err (cap bytes). */
int cuda_arch_check(const CudaArch* a, const char* precision, char* err, size_t cap);

/* The start-up line: the device, its compute capability, the kernels chosen for precision and the
 * shared memory a block may take. */
void cuda_arch_describe(const CudaArch* a, const char* precision, char* line, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
