/* cuda/emu/cuda_emu.h — the CUDA subset of cuda/device.h, emulated on the CPU (-DSG_EMU).
 *
 * A kernel source written for nvcc builds unchanged as C++ against this header; the runtime is
 * cuda/emu/cuda_emu.cpp. Each launch runs its blocks on teams (one fiber per CUDA thread, each
 * with a small stack; SG_EMU_THREADS=os: one pooled OS thread each); a block's threads meet only where CUDA makes them meet:
 * __syncthreads(), and the warp collectives with their explicit mask. What the emulation checks,
 * and what it cannot, is written up in docs/cuda-emulation.md.
 *
 * Only what device.h lists is here. Anything else (bare __shared__, __constant__, float atomics,
 * __activemask, cooperative groups, launches on a stream) fails to compile, which is the point.
 * Streams exist as handles for NCCL's calls (cuda/emu/nccl_emu.h), and run nothing of their own.
 */
#ifndef SEEDGPT_CUDA_EMU_H
#define SEEDGPT_CUDA_EMU_H

#ifndef __cplusplus
#error "cuda/emu/cuda_emu.h is C++: build .cu sources with a C++ compiler and -DSG_EMU"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- qualifiers ---------------------------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
/* __restrict__ is already a GNU C++ keyword */

/* ---- index types and the built-in variables (thread-locals of each emulated thread; a fiber
 * puts its own back whenever it runs) -------------------------------------------------------- */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
static constexpr int warpSize = 32;

/* ---- host API types (values as in the CUDA runtime headers) ------------------------------- */
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorLaunchFailure = 719,
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
/* the fields of cudaDeviceProp that seedgpt reads, filled with an H100's limits (sm_90) under the
 * name "seedgpt CUDA emulation (sm_90 limits)". As in CUDA 13 there is no clockRate field: the
 * clock is an attribute (cudaDeviceGetAttribute) */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    size_t sharedMemPerMultiprocessor;
    size_t totalConstMem;
    int regsPerBlock;
    int regsPerMultiprocessor;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int maxThreadsPerMultiProcessor;
    int multiProcessorCount;
    int major;
    int minor;
    int l2CacheSize;
    int memoryBusWidth;
};
/* the device attributes seedgpt reads (values as in driver_types.h) */
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrClockRate = 13,               /* kHz: the SM clock the device reports */
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,   /* bytes; follows SG_EMU_CC */
};

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t err);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
/* Streams, as handles for NCCL's calls (dist/dist_nccl.cu): everything runs at the call here,
 * so a stream orders nothing that the call order does not already; cudaMemcpyAsync is cudaMemcpy
 * and cudaStreamSynchronize returns at once. Kernels launch on the default stream only
 * (SG_LAUNCH has no stream). */
struct sg_emu_stream;
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
cudaError_t cudaStreamCreateWithFlags(struct sg_emu_stream** stream, unsigned flags);
cudaError_t cudaStreamDestroy(struct sg_emu_stream* stream);
cudaError_t cudaStreamSynchronize(struct sg_emu_stream* stream);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            struct sg_emu_stream* stream);
/* Events, on the default stream only. Launches are synchronous here, so recording an event
 * stamps the host's monotonic clock at the call; cudaEventElapsedTime reports milliseconds between
 * two recorded events (cudaErrorInvalidResourceHandle for an event never recorded, as CUDA does). */
struct sg_emu_event;
typedef sg_emu_event* cudaEvent_t;
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, struct sg_emu_stream* stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
namespace sg_emu {
cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
}
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
    return sg_emu::func_set_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}

/* ---- cuBLAS (routed to CBLAS; column-major as cuBLAS defines it) ------------------------- */
enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
};
struct sg_emu_cublas;
typedef sg_emu_cublas* cublasHandle_t;
cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb,
                                         long long strideB, const float* beta, float* C, int ldc,
                                         long long strideC, int batchCount);

/* ---- cuBLASLt: the subset cuda/ops_bf16_cuda.cu uses (values as in cublasLt.h) ----------
 * bf16 (or fp16) A and B, C and D both fp32 or both of A's type, fp32 compute and scale,
 * column-major, transposes N/T, the DEFAULT and BIAS (fp32 bias) epilogues, on the default stream;
 * strided batches (every layout's BATCH_COUNT equal, its STRIDED_BATCH_OFFSET in elements; no
 * bias with a batch), each matrix of the batch computed as one problem.
 * The emulation computes each element of D as the fp32 sum of the exact 16-bit products in
 * ascending k, then alpha * sum + beta * C (C not read when beta is 0), then + bias[row], rounded
 * once to nearest even when D is 16-bit. Anything else is refused with
 * CUBLAS_STATUS_NOT_SUPPORTED (or INVALID_VALUE where cuBLASLt says so). SG_EMU_LT_REFUSE makes
 * it refuse problems of the subset too, as the real library may (docs/cuda-emulation.md). */
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
typedef cudaDataType_t cudaDataType;
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
typedef struct sg_emu_stream* cudaStream_t;   /* a handle; see the streams above */
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_TRANSC = 5,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_BGRADB = 512,
};
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
enum cublasLtReductionScheme_t {
    CUBLASLT_REDUCTION_SCHEME_NONE = 0,
    CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
    CUBLASLT_REDUCTION_SCHEME_MASK = 0x7,
};
enum cublasLtMatrixLayoutAttribute_t {
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
};
struct sg_emu_lt;
struct sg_emu_lt_desc;
struct sg_emu_lt_layout;
struct sg_emu_lt_pref;
typedef sg_emu_lt* cublasLtHandle_t;
typedef sg_emu_lt_desc* cublasLtMatmulDesc_t;
typedef sg_emu_lt_layout* cublasLtMatrixLayout_t;
typedef sg_emu_lt_pref* cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);

/* ---- the runtime's entry points for device code ------------------------------------------- */
namespace sg_emu {

struct Site {
    const char* file;
    int line;
};
#define SG_EMU_SITE (::sg_emu::Site{__FILE__, __LINE__})

/* runs body() once per thread of every block; returns the launch's error (nothing runs then) */
cudaError_t launch(const char* kernel_name, const void* kernel, dim3 grid, dim3 block,
                   size_t dyn_smem, const std::function<void()>& body);

/* The kernel's arguments are converted to its parameter types once, at the launch, as CUDA
 * does; each emulated thread then gets its own copy of them (parameters are per-thread). */
template <class... P>
struct Launcher {
    const char* name;
    void (*kernel)(P...);
    dim3 grid, block;
    size_t dyn_smem;
    template <class... A>
    cudaError_t operator()(A&&... args) const {
        std::tuple<typename std::decay<P>::type...> params(std::forward<A>(args)...);
        void (*k)(P...) = kernel;
        return launch(name, reinterpret_cast<const void*>(k), grid, block, dyn_smem,
                      [&params, k]() { std::apply(k, params); });
    }
};
template <class... P>
Launcher<P...> launcher(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem) {
    return Launcher<P...>{name, kernel, grid, block, dyn_smem};
}

void syncthreads(Site site);
void* dynamic_shared(void);
void* static_shared(const void* key, size_t bytes, Site site);

enum WarpOp { WARP_SYNC, WARP_IDX, WARP_UP, WARP_DOWN, WARP_XOR, WARP_BALLOT, WARP_ALL, WARP_ANY, WARP_GATHER };
/* one warp collective: the lanes named in mask meet; returns this lane's 64-bit result */
uint64_t warp_collective(Site site, WarpOp op, unsigned mask, uint64_t value, int arg, int width);

/* A warp collective that moves whole register sets: each lane in mask deposits nwords (at most
 * SG_EMU_GATHER_WORDS) 32-bit words; once every lane has arrived, each receives all of them,
 * out[l * nwords + i] = word i of lane l (lanes outside mask: poison, ~0). `what` names the
 * instruction in reports. The emulated tensor-core instructions (cuda/mma.h) are built on it. */
#define SG_EMU_GATHER_WORDS 16
void warp_gather(Site site, const char* what, unsigned mask, const uint32_t* words, int nwords, uint32_t* out);

/* ldmatrix (cuda/mma.h): a warp collective of all 32 lanes; each lane gives the 16-byte shared
 * memory row `row` (row l % 8 of matrix l / 8, for the lanes of the nmat matrices) and receives
 * nmat registers, plain or transposed as the PTX ISA lays them out. A row that is not 16-byte
 * aligned or not inside the block's shared memory is reported. */
void ldmatrix(Site site, const char* what, int nmat, int trans, const void* row, uint32_t* r);
/* cp.async (cuda/mma.h), per thread as on a GPU: cp_async fills dst (bytes: 4, 8 or 16, inside
 * the block's shared memory, aligned to bytes, src aligned too) with the poison at once and
 * records the copy of src_bytes bytes (0 or bytes; the rest zero) in the thread's open group;
 * cp_async_commit closes the open group; cp_async_wait(n) performs the copies of every committed
 * group but the n newest. A thread that leaves the kernel with a copy not yet performed (never
 * waited for, or never committed) is reported. */
void cp_async(Site site, void* dst, const void* src, int bytes, int src_bytes);
void cp_async_commit(Site site);
void cp_async_wait(Site site, int n);

/* __syncwarp() or __syncwarp(mask): a call site, then the optional mask */
struct SyncWarp {
    Site site;
    void operator()(unsigned mask = 0xffffffffu) const { (void)warp_collective(site, WARP_SYNC, mask, 0, 0, 32); }
};

template <class T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles take 4- or 8-byte scalars");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T>
inline T shfl(Site s, WarpOp op, unsigned mask, T v, int arg, int width) {
    return from_bits<T>(warp_collective(s, op, mask, to_bits(v), arg, width));
}
template <class T>
inline T shfl_idx(Site s, unsigned mask, T v, int src, int width = 32) {
    return shfl(s, WARP_IDX, mask, v, src, width);
}
template <class T>
inline T shfl_up(Site s, unsigned mask, T v, unsigned d, int width = 32) {
    return shfl(s, WARP_UP, mask, v, (int)d, width);
}
template <class T>
inline T shfl_down(Site s, unsigned mask, T v, unsigned d, int width = 32) {
    return shfl(s, WARP_DOWN, mask, v, (int)d, width);
}
template <class T>
inline T shfl_xor(Site s, unsigned mask, T v, int lane_mask, int width = 32) {
    return shfl(s, WARP_XOR, mask, v, lane_mask, width);
}

}  // namespace sg_emu

/* ---- what kernels write ------------------------------------------------------------------- */
#define SG_LAUNCH(kernel, grid, block, smem, ...) \
    ((void)::sg_emu::launcher(#kernel, kernel, (grid), (block), (smem))(__VA_ARGS__))
#define SG_DYN_SHARED(type, name) type* name = reinterpret_cast<type*>(::sg_emu::dynamic_shared())
/* the key is the address of a static local: one per call site (and per template instance) */
#define SG_SHARED(type, name, count) \
    static const char sg_smem_key_##name = 0; \
    type (&name)[count] = *reinterpret_cast<type (*)[count]>( \
        ::sg_emu::static_shared(&sg_smem_key_##name, sizeof(type) * (count), SG_EMU_SITE))

#define __syncthreads() ::sg_emu::syncthreads(SG_EMU_SITE)
#define __syncwarp(...) ::sg_emu::SyncWarp{SG_EMU_SITE}(__VA_ARGS__)
#define __shfl_sync(...) ::sg_emu::shfl_idx(SG_EMU_SITE, __VA_ARGS__)
#define __shfl_up_sync(...) ::sg_emu::shfl_up(SG_EMU_SITE, __VA_ARGS__)
#define __shfl_down_sync(...) ::sg_emu::shfl_down(SG_EMU_SITE, __VA_ARGS__)
#define __shfl_xor_sync(...) ::sg_emu::shfl_xor(SG_EMU_SITE, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
    ((unsigned)::sg_emu::warp_collective(SG_EMU_SITE, ::sg_emu::WARP_BALLOT, (mask), (pred) ? 1 : 0, 0, 32))
#define __all_sync(mask, pred) \
    ((int)::sg_emu::warp_collective(SG_EMU_SITE, ::sg_emu::WARP_ALL, (mask), (pred) ? 1 : 0, 0, 32))
#define __any_sync(mask, pred) \
    ((int)::sg_emu::warp_collective(SG_EMU_SITE, ::sg_emu::WARP_ANY, (mask), (pred) ? 1 : 0, 0, 32))

/* ---- integer atomics: relaxed, as CUDA's are (no ordering implied beyond the one word) ----- */
template <class T>
inline T sg_emu_atomic_check() {
    static_assert(std::is_integral<T>::value, "atomics on integers only (DESIGN: no float atomics)");
    return T();
}
template <class T>
inline T atomicAdd(T* p, T v) {
    sg_emu_atomic_check<T>();
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline T atomicSub(T* p, T v) {
    sg_emu_atomic_check<T>();
    return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
}
template <class T>
inline T atomicCAS(T* p, T expected, T desired) {
    sg_emu_atomic_check<T>();
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return expected;  /* the old value, whether or not it was swapped */
}
template <class T>
inline T atomicMax(T* p, T v) {
    sg_emu_atomic_check<T>();
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
    sg_emu_atomic_check<T>();
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
template <class T>
inline T atomicExch(T* p, T v) {
    sg_emu_atomic_check<T>();
    return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
}

/* ---- bfloat16 (cuda_bf16.h's names; the conversions are util/bf16.h's, bit for bit) ------
 * A storage type only: no arithmetic and no implicit conversion, so a kernel converts explicitly
 * where it means to round, and fp32 stays the type it computes in. */
#include "util/bf16.h"
struct __nv_bfloat16 {
    unsigned short __x;
};
static_assert(sizeof(__nv_bfloat16) == 2, "bf16 is two bytes, as on a GPU");
static inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16{sg_bf16_from_float(x)}; }
static inline float __bfloat162float(__nv_bfloat16 h) { return sg_bf16_to_float(h.__x); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

/* ---- device math (the fast intrinsics are the plain functions here: results can differ from
 * a GPU's in the last bits, which is why CUDA tests compare with a tolerance) ------------------ */
/* glibc declares its own __expf/__logf (the same functions): macros keep the CUDA spelling */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
static inline float __fdividef(float a, float b) { return a / b; }
/* a product rounded on its own: nvcc never fuses __fmul_rn into an fma; nor does this build
 * (ISO C++ leaves -ffp-contract off, and x86-64 code without -mfma has no fma) */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

#endif
