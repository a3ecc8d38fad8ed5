/* cuda/arch.cu — the kernels chosen by compute capability (cuda/arch.h). Host code only.
 *
 * SG_CUDA_SASS and SG_CUDA_PTX come from the Makefile (NVCC_ARCH_DEFS): the SASS targets and the
 * PTX target of this build. A kernel image runs on a GPU when the binary holds SASS of the same
 * major compute capability at the same or a lower minor (sm_80 SASS runs on sm_86), or PTX of
 * that compute capability or an older one, which the driver compiles at load.
 */
#include "cuda/device.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/arch.h"

#if defined(SG_EMU)
#define ARCH_SASS NULL
#define ARCH_PTX 0
#elif defined(SG_CUDA_SASS) && defined(SG_CUDA_PTX)
#define ARCH_SASS SG_CUDA_SASS
#define ARCH_PTX SG_CUDA_PTX
#else   /* built outside the Makefile's CUDA rules: what it holds is not known, so not checked */
#define ARCH_SASS NULL
#define ARCH_PTX 0
#endif

/* The compute capability of the code this binary runs on cc: the newest SASS of cc's major at or
 * below its minor (sm_80 SASS runs on sm_86), else its PTX where that is cc's or older (the driver
 * compiles it at load), else 0: none. sass NULL (the emulation): cc itself. A build of compute_75
 * PTX alone (CUDA_ARCHS=75) runs Turing code on a Hopper GPU: 75 there, whose bf16 wrappers are
 * the guard's traps (cuda/mma.h), so the bf16 tables are refused on it. */
static int binary_code_cc(const char* sass, int ptx, int cc) {
    if (sass == NULL) return cc;
    int best = 0;
    for (const char* p = sass; *p;) {
        char* end;
        long a = strtol(p, &end, 10);
        if (end == p) break;
        if (a / 10 == cc / 10 && a % 10 <= cc % 10 && a > best) best = (int)a;
        p = end;
    }
    if (best) return best;
    return ptx > 0 && ptx <= cc ? ptx : 0;
}

/* The opt-in shared memory per block of the CUDA Programming Guide's table of limits, in bytes */
static size_t documented_smem_optin(int cc) {
    if (cc == 70 || cc == 72) return 96 * 1024;
    if (cc == 75) return 64 * 1024;
    if (cc == 80 || cc == 87) return 163 * 1024;
    if (cc == 86 || cc == 89 || cc >= 120) return 99 * 1024;
    if (cc >= 90) return 227 * 1024;
    return 48 * 1024;
}

extern "C" void cuda_arch_from_cc(const char* name, int cc_major, int cc_minor, const char* sass, int ptx,
                                  CudaArch* out) {
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", name ? name : "");
    out->cc_major = cc_major;
    out->cc_minor = cc_minor;
    int cc = 10 * cc_major + cc_minor;
    out->supported = cc >= 70;
    out->code_cc = binary_code_cc(sass, ptx, cc);
    out->has_code = out->code_cc > 0;
    out->bf16_tensor_cores = cc >= 80 && out->code_cc >= 80;
    out->fp16_tensor_cores = cc >= 75 && out->code_cc >= 75;
    out->smem_optin = documented_smem_optin(cc);
}

extern "C" int cuda_arch_query(CudaArch* out) {
    int dev = 0;
    cudaDeviceProp p;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaGetDeviceProperties(&p, dev);
    if (err != cudaSuccess) {
        memset(out, 0, sizeof(*out));
        snprintf(out->name, sizeof(out->name), "no CUDA device: %s", cudaGetErrorString(err));
        (void)cudaGetLastError();
        return -1;
    }
    cuda_arch_from_cc(p.name, p.major, p.minor, ARCH_SASS, ARCH_PTX, out);
    out->smem_optin = sg_smem_optin();
#ifdef SG_EMU
    out->emulated = 1;
#endif
    return 0;
}

extern "C" const char* cuda_arch_built(void) {
    static char s[160];
    if (ARCH_SASS == NULL) {
#ifdef SG_EMU
        return "the emulation (every kernel, on the CPU)";
#else
        return "targets not recorded (built outside the Makefile)";
#endif
    }
    size_t n = 0;
    const char* p = ARCH_SASS;
    while (*p) {
        char* end;
        long a = strtol(p, &end, 10);
        if (end == p) break;
        n += (size_t)snprintf(s + n, sizeof(s) - n, "%ssm_%ld", n ? " " : "", a);
        if (n >= sizeof(s)) break;
        p = end;
    }
    if (n < sizeof(s) && ARCH_PTX > 0) snprintf(s + n, sizeof(s) - n, " + PTX compute_%d", ARCH_PTX);
    return s;
}

extern "C" int cuda_arch_check(const CudaArch* a, const char* precision, char* err, size_t cap) {
    if (!a->supported) {
        snprintf(err, cap, "--device cuda: %s is sm_%d%d; seedgpt's CUDA kernels need sm_70 or newer "
                 "(use --device cpu)", a->name, a->cc_major, a->cc_minor);
        return 1;
    }
    if (!a->has_code) {
        snprintf(err, cap, "--device cuda: %s is sm_%d%d and this ./train_cuda holds no code for it (%s); "
                 "rebuild with CUDA_ARCHS=%d%d and a toolkit that builds it", a->name, a->cc_major, a->cc_minor,
                 cuda_arch_built(), a->cc_major, a->cc_minor);
        return 1;
    }
    if (strcmp(precision, "bf16") == 0 && !a->bf16_tensor_cores) {
        if (10 * a->cc_major + a->cc_minor >= 80)   /* the GPU has them, the code it runs not */
            snprintf(err, cap, "--precision bf16 --device cuda: %s is sm_%d%d but this ./train_cuda runs compute_%d "
                     "code on it (%s), without the bf16 tensor-core kernels; use --precision fp32 or rebuild with "
                     "CUDA_ARCHS=%d%d", a->name, a->cc_major, a->cc_minor, a->code_cc, cuda_arch_built(), a->cc_major,
                     a->cc_minor);
        else
            snprintf(err, cap, "--precision bf16 --device cuda: the bf16 tensor-core kernels need sm_80 or "
                     "newer and %s is sm_%d%d; use --precision fp32", a->name, a->cc_major, a->cc_minor);
        return 1;
    }
    return 0;
}

extern "C" void cuda_arch_describe(const CudaArch* a, const char* precision, char* line, size_t cap) {
    const char* kernels;
    if (strcmp(precision, "bf16") == 0)
        kernels = "bf16 tensor-core kernels (mma.sync m16n8k16, ldmatrix, cp.async; cuBLASLt bf16)";
    else if (strcmp(precision, "fp16") == 0 && a->fp16_tensor_cores)
        kernels = "fp16 kernels (cuBLASLt fp16 products; the fp16 tensor-core attention, mma.sync m16n8k8)";
    else if (strcmp(precision, "fp16") == 0)
        kernels = "fp16 kernels (cuBLASLt fp16 products; the attention's fp32 kernels on fp16 values: no "
                  "mma.sync m16n8k8 below sm_75)";
    else if (a->bf16_tensor_cores)
        kernels = "fp32 kernels (cuBLAS fp32); --precision bf16 would take the bf16 tensor cores";
    else if (a->fp16_tensor_cores && 10 * a->cc_major + a->cc_minor >= 80)
        kernels = "fp32 kernels (cuBLAS fp32); no bf16 tensor cores in the code it runs; fp16 tensor-core "
                  "attention (mma.sync m16n8k8, attention_forward_tc_f16_cuda)";
    else if (a->fp16_tensor_cores)
        kernels = "fp32 kernels (cuBLAS fp32); no bf16 tensor cores below sm_80; fp16 tensor-core attention "
                  "(mma.sync m16n8k8, attention_forward_tc_f16_cuda)";
    else
        kernels = "fp32 kernels (cuBLAS fp32); no tensor-core attention below sm_75";
    char code[64] = "";
    if (a->code_cc && a->code_cc != 10 * a->cc_major + a->cc_minor)
        snprintf(code, sizeof(code), " running %s_%d code", a->code_cc / 10 == a->cc_major ? "sm" : "compute",
                 a->code_cc);
    snprintf(line, cap, "cuda: %s, sm_%d%d%s%s: %s; %zu KiB shared memory a block; binary: %s", a->name,
             a->cc_major, a->cc_minor, a->emulated ? " (emulated)" : "", code, kernels, a->smem_optin / 1024,
             cuda_arch_built());
}
