/* tests/cuda/test_cuda_arch.cu — the kernels chosen by compute capability (cuda/arch.cu): the
 * tensor-core paths each architecture may take, whether a binary's SASS and PTX targets hold code
 * for a GPU, the one-line refusals, the start-up line, and, in the emulation, the device it
 * reports when told to pretend to be a Turing part (SG_EMU_CC). Nothing launches a kernel.
 *
 * The implementation is included, so this test links only the runtime.
 */
#include "cuda/arch.cu"
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

static void choice_by_compute_capability(void) {
    /* cc, supported, fp16 tensor cores (m16n8k8), bf16 tensor cores (m16n8k16 bf16, cp.async) */
    static const int R[][4] = {
        {61, 0, 0, 0}, {70, 1, 0, 0}, {72, 1, 0, 0}, {75, 1, 1, 0}, {80, 1, 1, 1},
        {86, 1, 1, 1}, {89, 1, 1, 1}, {90, 1, 1, 1}, {100, 1, 1, 1}, {120, 1, 1, 1},
    };
    int ok = 1;
    char seen[512] = "";
    for (size_t i = 0; i < sizeof(R) / sizeof(R[0]); i++) {
        CudaArch a;
        cuda_arch_from_cc("gpu", R[i][0] / 10, R[i][0] % 10, NULL, 0, &a);
        int good = a.supported == R[i][1] && a.fp16_tensor_cores == R[i][2] && a.bf16_tensor_cores == R[i][3] &&
                   a.has_code == 1 && a.cc_major == R[i][0] / 10 && a.cc_minor == R[i][0] % 10;
        ok = ok && good;
        size_t n = strlen(seen);
        snprintf(seen + n, sizeof(seen) - n, "%ssm_%d: supported %d fp16 %d bf16 %d%s", i ? "; " : "", R[i][0],
                 a.supported, a.fp16_tensor_cores, a.bf16_tensor_cores, good ? "" : " (WRONG)");
    }
    expect(ok, "tensor_core_paths_by_compute_capability", "%s", seen);
}

static void binary_holds_code_for(void) {
    /* SASS list, PTX target, compute capability, holds code */
    static const struct { const char* sass; int ptx, cc, want; } R[] = {
        {"75 80 86 89 90", 90, 70, 0},   /* a CUDA 13 build: no Volta */
        {"70 75 80 86 89 90", 90, 70, 1},
        {"75 80 86 89 90", 90, 75, 1},
        {"75 80 86 89 90", 90, 87, 1},   /* sm_86 SASS runs on sm_87 */
        {"75 80 86 89 90", 90, 120, 1},  /* newer than all: the PTX */
        {"90", 90, 80, 0},               /* CUDA_ARCHS=90 on an A100 */
        {"90", 90, 75, 0},
        {"80", 0, 90, 0},                /* SASS does not run across majors, and no PTX */
        {"80", 80, 90, 1},
    };
    int ok = 1;
    char seen[768] = "";
    for (size_t i = 0; i < sizeof(R) / sizeof(R[0]); i++) {
        CudaArch a;
        cuda_arch_from_cc("gpu", R[i].cc / 10, R[i].cc % 10, R[i].sass, R[i].ptx, &a);
        ok = ok && a.has_code == R[i].want;
        size_t n = strlen(seen);
        snprintf(seen + n, sizeof(seen) - n, "%s[%s]+ptx%d on sm_%d: %d", i ? "; " : "", R[i].sass, R[i].ptx,
                 R[i].cc, a.has_code);
    }
    expect(ok, "binary_sass_and_ptx_hold_code_for_gpu", "%s", seen);
}

/* A build of compute_75 PTX alone (CUDA_ARCHS=75: sm_75 SASS plus compute_75 PTX) on an H100 runs
 * the PTX, JIT-compiled: Turing code, whose bf16 wrappers are traps, so bf16 is refused there
 * (saying why) and the fp32 tables and the fp16 attention run; the start-up line names the code. */
static void ptx_of_an_older_target(void) {
    CudaArch h;
    char err[512] = "", line[512];
    cuda_arch_from_cc("NVIDIA H100 80GB HBM3", 9, 0, "75", 75, &h);
    int r = cuda_arch_check(&h, "bf16", err, sizeof(err));
    expect(h.has_code && h.code_cc == 75 && !h.bf16_tensor_cores && h.fp16_tensor_cores && r == 1 &&
           strstr(err, "compute_75") && strstr(err, "CUDA_ARCHS=90") && !strchr(err, '\n'),
           "compute_75_ptx_on_sm90_refuses_bf16", "code_cc %d, rc %d: %s", h.code_cc, r, err);
    r = cuda_arch_check(&h, "fp32", err, sizeof(err));
    cuda_arch_describe(&h, "fp32", line, sizeof(line));
    expect(r == 0 && strstr(line, "running compute_75 code") && strstr(line, "m16n8k8"),
           "compute_75_ptx_on_sm90_runs_fp32_and_says_so", "rc %d: %s", r, line);
    CudaArch a;
    cuda_arch_from_cc("NVIDIA A10", 8, 6, "75 80 90", 90, &a);
    expect(a.code_cc == 80 && a.bf16_tensor_cores, "sm80_sass_serves_sm86", "code_cc %d, bf16 %d", a.code_cc,
           a.bf16_tensor_cores);
}

static void refusals_are_one_line(void) {
    char err[512] = "";
    CudaArch t4, a100, p100, old;
    cuda_arch_from_cc("Tesla T4", 7, 5, NULL, 0, &t4);
    cuda_arch_from_cc("NVIDIA A100-SXM4-80GB", 8, 0, NULL, 0, &a100);
    cuda_arch_from_cc("Tesla P100-PCIE-16GB", 6, 0, NULL, 0, &p100);
    cuda_arch_from_cc("Tesla V100-SXM2-16GB", 7, 0, "75 80 86 89 90", 90, &old);
    int r = cuda_arch_check(&t4, "bf16", err, sizeof(err));
    expect(r == 1 && strstr(err, "--precision bf16") && strstr(err, "sm_80") && strstr(err, "sm_75") &&
           strstr(err, "Tesla T4") && !strchr(err, '\n'), "bf16_refused_below_sm80_in_one_line", "rc %d: %s", r, err);
    err[0] = '\0';
    r = cuda_arch_check(&t4, "fp32", err, sizeof(err));
    expect(r == 0 && err[0] == '\0', "fp32_runs_on_sm75", "rc %d: %s", r, err);
    r = cuda_arch_check(&a100, "bf16", err, sizeof(err));
    expect(r == 0, "bf16_runs_on_sm80", "rc %d", r);
    r = cuda_arch_check(&p100, "fp32", err, sizeof(err));
    expect(r == 1 && strstr(err, "sm_60") && strstr(err, "sm_70"), "below_sm70_refused", "rc %d: %s", r, err);
    r = cuda_arch_check(&old, "fp32", err, sizeof(err));
    expect(r == 1 && strstr(err, "sm_70") && strstr(err, "no code") && strstr(err, "CUDA_ARCHS=70"),
           "gpu_without_code_in_binary_refused", "rc %d: %s", r, err);
}

static void startup_line_names_the_choice(void) {
    char line[512];
    CudaArch t4, h100;
    cuda_arch_from_cc("Tesla T4", 7, 5, NULL, 0, &t4);
    cuda_arch_from_cc("NVIDIA H100 80GB HBM3", 9, 0, NULL, 0, &h100);
    cuda_arch_describe(&t4, "fp32", line, sizeof(line));
    expect(strstr(line, "Tesla T4") && strstr(line, "sm_75") && strstr(line, "fp32 kernels") &&
           strstr(line, "no bf16 tensor cores") && strstr(line, "64 KiB shared memory a block") &&
           strstr(line, "fp16 tensor-core attention (mma.sync m16n8k8"),
           "startup_line_sm75_fp32", "%s", line);
    CudaArch v100;
    cuda_arch_from_cc("Tesla V100-SXM2-16GB", 7, 0, NULL, 0, &v100);
    cuda_arch_describe(&v100, "fp32", line, sizeof(line));
    expect(strstr(line, "sm_70") && strstr(line, "no tensor-core attention below sm_75") &&
           strstr(line, "96 KiB shared memory a block"), "startup_line_sm70_fp32", "%s", line);
    cuda_arch_describe(&h100, "bf16", line, sizeof(line));
    expect(strstr(line, "sm_90") && strstr(line, "bf16 tensor-core kernels") && strstr(line, "m16n8k16") &&
           strstr(line, "227 KiB shared memory a block"),
           "startup_line_sm90_bf16", "%s", line);
}

static void device_query(void) {
    CudaArch a;
    char err[512];
    if (cuda_arch_query(&a) != 0) {
        expect(!EMU_ONLY, "device_arch_queried", "%s", a.name);
        return;
    }
    cudaDeviceProp p;
    SG_CHECK(cudaGetDeviceProperties(&p, 0));
    expect(a.cc_major == p.major && a.cc_minor == p.minor && strcmp(a.name, p.name) == 0 && a.emulated == EMU_ONLY,
           "device_arch_is_the_runtimes", "%s: sm_%d%d (runtime sm_%d%d), emulated %d", a.name, a.cc_major,
           a.cc_minor, p.major, p.minor, a.emulated);
    if (!EMU_ONLY) return;
    /* the emulation pretends to be a T4 when told, and the choice follows */
    setenv("SG_EMU_CC", "75", 1);
    CudaArch t;
    int q = cuda_arch_query(&t);
    int r = cuda_arch_check(&t, "bf16", err, sizeof(err));
    int maj = 0, min = 0;
    cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, 0);
    unsetenv("SG_EMU_CC");
    expect(q == 0 && t.cc_major == 7 && t.cc_minor == 5 && maj == 7 && min == 5 && strstr(t.name, "sm_75") &&
           t.fp16_tensor_cores && !t.bf16_tensor_cores && r == 1 && strstr(err, "sm_80") &&
           t.smem_optin == 64 * 1024,
           "emulation_reports_sm75_when_told", "query %d: \"%s\" sm_%d%d (attributes %d.%d), %zu bytes of shared "
           "memory a block, bf16 check %d: %s", q, t.name, t.cc_major, t.cc_minor, maj, min, t.smem_optin, r, err);
    CudaArch b;
    cuda_arch_query(&b);
    expect(b.cc_major == 9 && b.cc_minor == 0 && b.bf16_tensor_cores, "emulation_back_to_sm90_unset",
           "sm_%d%d", b.cc_major, b.cc_minor);
}

int main(void) {
    choice_by_compute_capability();
    binary_holds_code_for();
    refusals_are_one_line();
    ptx_of_an_older_target();
    startup_line_names_the_choice();
    device_query();
    return test_finish();
}
