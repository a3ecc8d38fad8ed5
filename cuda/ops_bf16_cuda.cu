/* cuda/ops_bf16_cuda.cu — the matmuls with bf16 operands through cuBLASLt (declared in
 * cuda/ops_bf16_cuda.h): the bf16 table's products on the operands as the activations store them
 * (at the end of the file: matmul_forward_bf16_act_cuda, matmul_backward_bf16_act_cuda), and the
 * fp32-interface twins of matmul_forward_cuda / matmul_backward_cuda with the operands of every
 * product rounded to bf16 at each call, fp32 sums, fp32 outputs. Both share lt_gemm below: the
 * cuBLASLt problem, its cached algorithm, its refusals.
 *
 * Each call of the fp32-interface twins:
 *   1. rounds its two GEMM operands to bf16 (round to nearest even, __float2bfloat16_rn) into a
 *      grow-only device scratch, padding every dimension with zeros to a multiple of LT_PAD = 8
 *      elements (16 bytes). The zeros add exact zero products, and they make every bf16 leading
 *      dimension and k a multiple of 16 bytes, the alignment cuBLASLt's tensor-core kernels read
 *      (an algorithm's CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_*_BYTES covers the pointer and the leading
 *      dimension), so odd N, C, OC need no special case;
 *   2. runs one cublasLtMatmul: A, B CUDA_R_16BF, C, D CUDA_R_32F, CUBLAS_COMPUTE_32F, fp32
 *      alpha/beta; the forward adds the fp32 bias in the CUBLASLT_EPILOGUE_BIAS epilogue (the bias
 *      type defaults to the type of D, fp32; it is set explicitly all the same); dweight
 *      accumulates with beta = 1 into fp32.
 *   The bias gradient is not a GEMM: the column sums of the fp32 dout in two fixed passes,
 *   matmul_backward_cuda's own (bias_backward_cuda), so dbias equals the fp32 op's bit for bit.
 *
 * Determinism (the recompute compares its outputs bit for bit): cuBLAS documents that its
 * routines give the same bits run to run on GPUs of the same architecture and SM count, for a
 * given toolkit, when one stream is active (cuBLAS guide, "Results reproducibility"); cuBLASLt
 * with a user-owned workspace, as here, is the recommended way to keep that. On top of it:
 *   - the preference restricts CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK to
 *     CUBLASLT_REDUCTION_SCHEME_NONE: no split-K, every dot product "performed in one sequence".
 *     Only if the heuristic then has nothing for a problem are the other documented schemes
 *     allowed; cublasLt.h describes each as a fixed sequence (INPLACE orders the partial sums
 *     through counters "to guarantee the sequentiality", COMPUTE_TYPE and OUTPUT_TYPE reduce the
 *     partials in a separate step), none as atomic;
 *   - the algorithm is chosen once per problem (shapes, transposes, epilogue, beta, and the
 *     operands' alignments capped at 16 bytes) by cublasLtMatmulAlgoGetHeuristic and cached, so a
 *     recompute into another buffer of the same alignment runs the same algorithm;
 *   - no epilogue that reduces (BGRADB) is used: its order is not documented.
 * The trainer's tensors all start 64-byte aligned (model/gpt.c), so their alignment class is
 * always 16.
 *
 * Refusals: the preference promises only the alignments the operands have, and with odd C or OC
 * the fp32 output's leading dimension gives D (and C) 4-byte alignment; which algorithms the real
 * heuristic then offers is not documented. When it offers none, or cublasLtMatmul answers
 * CUBLAS_STATUS_NOT_SUPPORTED (it launches nothing then), that product runs through the fp32 op's
 * own cuBLAS call instead (matmul_forward_cuda, matmul_backward_dinp_cuda,
 * matmul_backward_dweight_cuda: fp32 operands, so the fp32 op's bits), and stderr gets one line
 * naming the problem. The refusal is cached with the problem, so the line comes once per problem,
 * and every later call, a recompute included, takes the same path: still deterministic.
 *
 * The GELU is not fused into an epilogue: cublasLt.h and the cuBLAS guide define
 * CUBLASLT_EPILOGUE_GELU only as "x := GELU(x)", not as the tanh approximation seedgpt's GELU is
 * (model/ops.h), and the GELU_AUX_BIAS pre-activation output needs a leading dimension divisible
 * by 8 (OC here). So the MLP runs the BIAS epilogue GEMM and then gelu_forward_cuda, as in fp32.
 *
 * Memory: the operand copies live in one grow-only scratch and the 32 MiB workspace is allocated
 * once, both through device_alloc_cuda, so the peak the step reports counts them.
 */
#include "cuda/device.h"
#ifndef SG_EMU
#include <cublasLt.h>
#endif
#include <stdint.h>
#include <string.h>
#include "cuda/ops_bf16_cuda.h"
#include "cuda/ops_cuda.h"   /* device_alloc_cuda, device_free_cuda, bias_backward_cuda */
#include "cuda/act.h"

#define LT_PAD 8                /* bf16 elements: 16 bytes */
#define LT_ALIGN_CAP 16         /* alignment classes of the algorithm cache, in bytes */
#define LT_MAX_PLANS 256        /* distinct GEMM problems one process may run */
#define EW_THREADS 256
#define EW_MAX_BLOCKS 4096

static size_t pad_to(size_t x, size_t q) { return x == 0 ? q : (x + q - 1) / q * q; }

/* ---- scratch and workspace ---------------------------------------------------------------- */

/* One grow-only device scratch for the bf16 operand copies: the ops
 * run one after another on the default stream, so no two calls use it at once. */
static void* scratch_mem = NULL;
static size_t scratch_cap = 0;
static void* lt_scratch(size_t bytes) {
    if (bytes > scratch_cap) {
        if (scratch_mem != NULL) device_free_cuda(scratch_mem);
        scratch_mem = device_alloc_cuda(bytes);
        scratch_cap = bytes;
    }
    return scratch_mem;
}

/* carve consecutive 256-byte aligned pieces out of the scratch */
typedef struct {
    size_t off[4];
    size_t total;
} Carve;
static size_t carve(Carve* c, int i, size_t bytes) {
    c->off[i] = c->total;
    c->total += (bytes + 255) / 256 * 256;
    return c->off[i];
}

/* The scratch's pieces for one product, forward and backward (the ops below carve the same) */
static void forward_carve(Carve* cv, int N, int C, int OC, int bias) {
    (void)bias;   /* the fp32 twins' output is fp32: cuBLASLt adds the fp32 bias itself */
    size_t Cp = pad_to((size_t)C, LT_PAD);
    carve(cv, 0, sizeof(__nv_bfloat16) * (size_t)OC * Cp);
    carve(cv, 1, sizeof(__nv_bfloat16) * (size_t)N * Cp);
}
static void backward_carve(Carve* cv, int N, int C, int OC, int dinp) {
    size_t Np = pad_to((size_t)N, LT_PAD), Cp = pad_to((size_t)C, LT_PAD);
    size_t OCp = pad_to((size_t)OC, LT_PAD);
    carve(cv, 0, sizeof(__nv_bfloat16) * Np * OCp);
    carve(cv, 1, sizeof(__nv_bfloat16) * Np * Cp);
    carve(cv, 2, dinp ? sizeof(__nv_bfloat16) * OCp * Cp : 0);
}

/* ---- rounding to the 16-bit operand type ------------------------------------------------------ */

/* The operand type of a product: bf16 (--precision bf16, and the fp32-interface twins) or fp16
 * (--precision fp16), model/backend.h's DT_BF16 / DT_FP16; in a kernel the element type
 * (cuda/act.h): uint16_t for bf16, sg_h16 for fp16. */
static cudaDataType_t lt_type(int dt) { return dt == DT_FP16 ? CUDA_R_16F : CUDA_R_16BF; }
static const char* dt_name(int dt) { return dt == DT_FP16 ? "fp16" : "bf16"; }

/* dst (rows_p, cols_p) row-major = src (rows, cols) rounded to ActT, zeros in the padding */
template <typename ActT>
__global__ void round_pad_act16_kernel(ActT* dst, const float* src, int rows, int cols, int rows_p, int cols_p) {
    size_t n = (size_t)rows_p * cols_p;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / (size_t)cols_p), c = (int)(i % (size_t)cols_p);
        float v = (r < rows && c < cols) ? src[(size_t)r * cols + c] : 0.0f;
        act_store(dst, i, v);
    }
}

static void* round_pad(int dt, void* base, size_t off, const float* src, int rows, int cols, int rows_p,
                       int cols_p) {
    void* dst = (unsigned char*)base + off;
    size_t n = (size_t)rows_p * cols_p;
    unsigned blocks = sg_ceil_div(n, EW_THREADS);
    if (blocks > EW_MAX_BLOCKS) blocks = EW_MAX_BLOCKS;
    if (dt == DT_FP16)
        SG_LAUNCH(round_pad_act16_kernel<sg_h16>, blocks, EW_THREADS, 0, (sg_h16*)dst, src, rows, cols, rows_p, cols_p);
    else
        SG_LAUNCH(round_pad_act16_kernel<uint16_t>, blocks, EW_THREADS, 0, (uint16_t*)dst, src, rows, cols, rows_p,
                  cols_p);
    SG_CHECK_LAUNCH();
    return dst;
}

/* ---- cuBLASLt ------------------------------------------------------------------------------ */

static cublasLtHandle_t lt_handle = NULL;
static void* lt_workspace = NULL;

static cublasLtHandle_t lt(void) {
    if (lt_handle == NULL) {
        SG_CUBLAS_CHECK(cublasLtCreate(&lt_handle));
        lt_workspace = device_alloc_cuda(SG_LT_WORKSPACE_BYTES);
    }
    return lt_handle;
}

/* the largest power of two (at most LT_ALIGN_CAP) dividing the address and the leading dimension
 * in bytes */
static unsigned align_class(const void* p, size_t ld_bytes) {
    uintptr_t v = (uintptr_t)p | (uintptr_t)ld_bytes | (uintptr_t)LT_ALIGN_CAP;
    return (unsigned)(v & (~v + 1));
}

/* one GEMM problem and the algorithm the heuristic chose for it, or the library's refusal */
typedef struct {
    int transa, transb, m, n, k;
    int64_t lda, ldb, ldd;
    uint32_t epilogue;
    int beta_one;
    int dt;       /* the operands' type: DT_BF16 or DT_FP16 */
    int d16;      /* D (and C) of the operands' type, else fp32 */
    unsigned align_a, align_b, align_d, align_bias;
    int refused;   /* no algorithm, or cublasLtMatmul said NOT_SUPPORTED: the fp32 op computes it */
    int reduction_allowed;   /* the heuristic had nothing without split-K: the documented schemes were allowed */
    float waves;             /* the heuristic's wavesCount: the tiles over the SMs' capacity (1.0: one full wave) */
    int batch;               /* a strided batch of this many products (split-K's slices: lt_split), else 1 */
    int64_t stride_a, stride_b, stride_d;   /* the batch's strides, in elements */
    cublasLtMatmulAlgo_t algo;
} LtPlan;
static LtPlan plans[LT_MAX_PLANS];
static const LtPlan* last_plan = NULL;   /* gemm_bf16_describe_last_cuda */
static int n_plans = 0;

static int same_problem(const LtPlan* a, const LtPlan* b) {
    return a->transa == b->transa && a->transb == b->transb && a->m == b->m && a->n == b->n &&
           a->k == b->k && a->lda == b->lda && a->ldb == b->ldb && a->ldd == b->ldd &&
           a->epilogue == b->epilogue && a->beta_one == b->beta_one && a->dt == b->dt && a->d16 == b->d16 &&
           a->align_a == b->align_a && a->batch == b->batch && a->stride_a == b->stride_a &&
           a->stride_b == b->stride_b && a->stride_d == b->stride_d &&
           a->align_b == b->align_b && a->align_d == b->align_d && a->align_bias == b->align_bias;
}

/* The one line a refused problem prints, when it is refused: the plan remembers the refusal, so
 * each problem says it once, not at every call. */
static void lt_note_refusal(const LtPlan* p, const char* what, const char* why, const char* instead) {
    fprintf(stderr, "seedgpt: note: %s for the %s %s GEMM (m %d n %d k %d, ld %lld %lld %lld, alignment A %u "
            "B %u D %u bias %u bytes, %s epilogue, beta %d, D %s): this product runs %s from now on\n", why,
            dt_name(p->dt), what, p->m, p->n, p->k, (long long)p->lda, (long long)p->ldb, (long long)p->ldd,
            p->align_a, p->align_b, p->align_d, p->align_bias, p->epilogue == CUBLASLT_EPILOGUE_BIAS ? "bias" : "no",
            p->beta_one, p->d16 ? dt_name(p->dt) : "fp32", instead);
}
#define LT_INSTEAD_FP32 "in fp32 through cuBLAS (the fp32 matmul's)"
#define LT_INSTEAD_OWN "through seedgpt's own 16-bit GEMM kernel (fp32 sums in ascending k)"

/* D (m,n) column-major, ld ldd = op(A) (m,k) . op(B) (k,n) + beta D [+ bias (m)], A and B of type
 * dt (DT_BF16, DT_FP16) stored column-major (ld lda, ldb) before their transposes; beta is 0 or 1;
 * D fp32, or of type dt when d16 (the fp32 result rounded once, as cuBLASLt converts to D's type). Returns 1 when done,
 * 0 when cuBLASLt refuses the problem (no algorithm from the heuristic, or cublasLtMatmul returns
 * CUBLAS_STATUS_NOT_SUPPORTED, which launches nothing): D is then untouched and the caller
 * computes the product with the fp32 op. The real heuristic's choice depends on alignments and
 * shapes it does not document (C and OC odd make a 4-byte fp32 D), so a refusal is a slower
 * product, not the end of the run. Any other failure still ends the run with one line. */
static int lt_gemm_batched(const char* what, const char* instead, int dt, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const void* A, int64_t lda, const void* B,
                           int64_t ldb, float beta, void* D, int d16, int64_t ldd, const float* bias, int batch,
                           int64_t stride_a, int64_t stride_b, int64_t stride_d) {
    cublasLtHandle_t h = lt();
    const float alpha = 1.0f;
    LtPlan want;
    memset(&want, 0, sizeof(want));
    want.transa = (int)transa;
    want.transb = (int)transb;
    want.m = m;
    want.n = n;
    want.k = k;
    want.lda = lda;
    want.ldb = ldb;
    want.ldd = ldd;
    want.epilogue = bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    want.beta_one = beta != 0.0f;
    want.dt = dt;
    want.d16 = d16;
    want.align_a = align_class(A, (size_t)lda * 2);
    want.align_b = align_class(B, (size_t)ldb * 2);
    want.align_d = align_class(D, (size_t)ldd * (d16 ? 2 : 4));
    want.align_bias = bias != NULL ? align_class(bias, 0) : 0;
    want.batch = batch;
    want.stride_a = stride_a;
    want.stride_b = stride_b;
    want.stride_d = stride_d;

    LtPlan* plan = NULL;
    for (int i = 0; i < n_plans && plan == NULL; i++)
        if (same_problem(&plans[i], &want)) plan = &plans[i];
    if (plan != NULL) last_plan = plan;
    if (plan != NULL && plan->refused) return 0;

    cublasLtMatmulDesc_t desc;
    SG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = (int32_t)transa, tb = (int32_t)transb;
    uint32_t epi = want.epilogue;
    SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    if (bias != NULL) {
        int32_t bias_type = CUDA_R_32F;
        SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                       sizeof(bias)));
        SG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                       &bias_type, sizeof(bias_type)));
    }
    /* the stored matrices: A is (m,k) or, transposed, (k,m); B is (k,n) or (n,k) */
    cublasLtMatrixLayout_t la, lb, ld;
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, lt_type(dt), transa == CUBLAS_OP_N ? m : k,
                                               transa == CUBLAS_OP_N ? k : m, lda));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, lt_type(dt), transb == CUBLAS_OP_N ? k : n,
                                               transb == CUBLAS_OP_N ? n : k, ldb));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, d16 ? lt_type(dt) : CUDA_R_32F, m, n, ldd));
    if (batch > 1) {
        const int32_t count = batch;
        cublasLtMatrixLayout_t ls[3] = {la, lb, ld};
        const int64_t strides[3] = {stride_a, stride_b, stride_d};
        for (int i = 0; i < 3; i++) {
            SG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                             sizeof(count)));
            SG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                             &strides[i], sizeof(strides[i])));
        }
    }

    if (plan == NULL) {
        if (n_plans == LT_MAX_PLANS) {
            fprintf(stderr, "seedgpt: more than %d distinct 16-bit GEMM problems; raise LT_MAX_PLANS in %s\n",
                    LT_MAX_PLANS, __FILE__);
            exit(1);
        }
        cublasLtMatmulPreference_t pref;
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = SG_LT_WORKSPACE_BYTES;
        uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;   /* no split-K: see the header */
        uint32_t al_a = want.align_a, al_b = want.align_b, al_d = want.align_d;
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &ws, sizeof(ws)));
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                             &reduction, sizeof(reduction)));
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                             &al_a, sizeof(al_a)));
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                             &al_b, sizeof(al_b)));
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                             &al_d, sizeof(al_d)));
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                             &al_d, sizeof(al_d)));
        cublasLtMatmulHeuristicResult_t result;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &result, &found);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
            /* no algorithm without split-K: allow the documented reduction schemes, each of which
             * reduces in a fixed sequence (INPLACE through counters, the others in a separate
             * step); the cached choice still makes every call the same kernel */
            reduction = CUBLASLT_REDUCTION_SCHEME_MASK;
            SG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
                pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)));
            found = 0;
            st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &result, &found);
        }
        SG_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
            want.refused = 1;
            lt_note_refusal(&want, what, "cuBLASLt's heuristic has no algorithm", instead);
        } else {
            SG_CUBLAS_CHECK(st);
            want.algo = result.algo;
            want.waves = result.wavesCount;
            want.reduction_allowed = reduction != CUBLASLT_REDUCTION_SCHEME_NONE;
        }
        plans[n_plans] = want;
        plan = &plans[n_plans++];
    }
    if (!plan->refused) {
        cublasStatus_t st = cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &plan->algo,
                                           lt_workspace, SG_LT_WORKSPACE_BYTES, 0);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED) {   /* nothing ran: D is as it was */
            plan->refused = 1;
            lt_note_refusal(plan, what, "cublasLtMatmul returned CUBLAS_STATUS_NOT_SUPPORTED", instead);
        } else {
            SG_CUBLAS_CHECK(st);
        }
    }
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    SG_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
    SG_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    last_plan = plan;
    return !plan->refused;
}

static int lt_gemm(const char* what, const char* instead, int dt, cublasOperation_t transa, cublasOperation_t transb,
                   int m, int n, int k, const void* A, int64_t lda, const void* B, int64_t ldb,
                   float beta, void* D, int d16, int64_t ldd, const float* bias) {
    return lt_gemm_batched(what, instead, dt, transa, transb, m, n, k, A, lda, B, ldb, beta, D, d16, ldd, bias, 1, 0,
                           0, 0);
}

/* ---- the ops ------------------------------------------------------------------------------ */

/* cuBLASLt is column-major: a row-major (R, S) matrix is the column-major (S, R) one with leading
 * dimension S (cuda/ops_cuda.cu asks cuBLAS the same way). Padded sizes: Np, Cp, OCp. */

void matmul_forward_bf16_cuda(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    int Cp = (int)pad_to((size_t)C, LT_PAD);
    /* weight (OC, Cp) and inp (N, Cp) in bf16; C = 0 gives k = LT_PAD zeros: out = bias (or 0) */
    Carve cv = {{0}, 0};
    forward_carve(&cv, N, C, OC, bias != NULL);
    size_t ow = cv.off[0], ox = cv.off[1];
    void* base = lt_scratch(cv.total);
    const void* w16 = round_pad(DT_BF16, base, ow, weight, OC, C, OC, Cp);
    const void* x16 = round_pad(DT_BF16, base, ox, inp, N, C, N, Cp);
    /* out^T (OC,N) = weight (OC,Cp) . inp^T (Cp,N): weight is stored column-major as (Cp,OC) */
    if (!lt_gemm("forward", LT_INSTEAD_FP32, DT_BF16, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, Cp, w16, Cp, x16, Cp, 0.0f, out, 0,
                 OC, bias))
        matmul_forward_cuda(out, inp, weight, bias, N, C, OC);   /* refused: the fp32 op */
}

void matmul_backward_bf16_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int C, int OC) {
    if (N == 0 || C == 0 || OC == 0) return;
    int Np = (int)pad_to((size_t)N, LT_PAD), Cp = (int)pad_to((size_t)C, LT_PAD);
    int OCp = (int)pad_to((size_t)OC, LT_PAD);
    /* bf16 dout (Np, OCp) and inp (Np, Cp); weight (OCp, Cp) when dinp is asked for */
    Carve cv = {{0}, 0};
    backward_carve(&cv, N, C, OC, dinp != NULL);
    size_t og = cv.off[0], ox = cv.off[1], ow = cv.off[2];
    void* base = lt_scratch(cv.total);
    const void* g16 = round_pad(DT_BF16, base, og, dout, N, OC, Np, OCp);
    const void* x16 = round_pad(DT_BF16, base, ox, inp, N, C, Np, Cp);
    /* in the forward, out = inp . weight^T + bias, so:
     * dinp (N,C) = dout (N,OC) . weight (OC,C), asked as dinp^T (C,N) = weight^T (C,OCp) . dout^T */
    if (dinp != NULL) {
        const void* w16 = round_pad(DT_BF16, base, ow, weight, OC, C, OCp, Cp);
        if (!lt_gemm("dinp", LT_INSTEAD_FP32, DT_BF16, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OCp, w16, Cp, g16, OCp, 0.0f, dinp, 0,
                     C, NULL))
            matmul_backward_dinp_cuda(dinp, dout, weight, N, C, OC);   /* refused: the fp32 op's */
    }
    /* dweight (OC,C) += dout^T (OC,N) . inp (N,C), asked as dweight^T (C,OC) += inp^T (C,Np) . dout */
    if (!lt_gemm("dweight", LT_INSTEAD_FP32, DT_BF16, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, Np, x16, Cp, g16, OCp, 1.0f, dweight,
                 0, C, NULL))
        matmul_backward_dweight_cuda(dweight, dout, inp, N, C, OC);   /* refused: the fp32 op's */
    /* dbias += the column sums of dout, fp32, in matmul_backward_cuda's order */
    if (dbias != NULL) bias_backward_cuda(dbias, dout, N, OC);
}

/* ---- the scratch a model's calls need --------------------------------------------------------- */

/* The largest scratch any of a model's products carves (forward and backward, by the carve
 * functions of one interface), plus cuBLASLt's workspace. */
typedef void (*ForwardCarve)(Carve* cv, int N, int C, int OC, int bias);
typedef void (*BackwardCarve)(Carve* cv, int N, int C, int OC, int dinp);
static size_t products_scratch_bytes(const OpCalls* k, ForwardCarve fwd, BackwardCarve bwd) {
    size_t need = 0;
    for (int i = 0; i < k->n_matmul; i++) {
        const MatmulCall* c = &k->matmul[i];
        if (c->N == 0 || c->OC == 0) continue;
        Carve f = {{0}, 0}, b = {{0}, 0};
        fwd(&f, c->N, c->C, c->OC, c->bias);
        if (f.total > need) need = f.total;
        if (c->C == 0) continue;   /* the backward returns before its scratch */
        bwd(&b, c->N, c->C, c->OC, c->dinp);
        if (b.total > need) need = b.total;
    }
    return need + SG_LT_WORKSPACE_BYTES;
}

size_t matmul_scratch_bytes_bf16_cuda(const OpCalls* k) {
    return products_scratch_bytes(k, forward_carve, backward_carve);
}

void matmul_reserve_scratch_bf16_cuda(const OpCalls* k) {
    (void)lt();   /* the handle and its workspace */
    (void)lt_scratch(matmul_scratch_bytes_bf16_cuda(k) - SG_LT_WORKSPACE_BYTES);
}

/* ---- the backend table's products: the bf16 operands as the activations store them ---------- */
/* The bf16 table (model/backend.c) keeps its operand activations and the weights' operand copy in
 * bf16, so these products read them where they lie: no rounding and no copy when C (the leading
 * dimension of inp and weight, and the forward's k) is a multiple of LT_PAD, as the trainer's
 * channel counts are; otherwise inp and weight are copied into the scratch with their rows padded
 * to Cp with zeros (bf16 to bf16: no rounding). The backward's dout is fp32 and is rounded into
 * the scratch (N, OCp) as the products take it, the one operand rounded here. The forward writes
 * fp32 (a residual branch, the logits) or bf16 (qkv, fch: the fp32 sum plus the fp32 bias, rounded
 * once; with a bias through an fp32 result in the scratch, since cuBLASLt's bias has D's type). dinp's k is OC and dweight's is N, unpadded: a padded k would
 * read past the weight's rows or the activation's.
 * A problem cuBLASLt refuses runs through gemm_act16_own_kernel below: the same problem, the same
 * operands, fp32 sums in ascending k; no scratch of its own. */

/* C is a leading dimension cuBLASLt reads whole 16-byte pieces of (the operands are used as stored) */
static int act_direct(int C) { return C > 0 && C % LT_PAD == 0; }

/* dst (rows, cols_p) = src (rows, cols), zeros in columns cols .. cols_p - 1; bf16 bits copied */
__global__ void pad_cols16_kernel(uint16_t* dst, const uint16_t* src, int rows, int cols, int cols_p) {
    size_t n = (size_t)rows * cols_p;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / (size_t)cols_p), c = (int)(i % (size_t)cols_p);
        dst[i] = c < cols ? src[(size_t)r * cols + c] : (uint16_t)0;
    }
}

static const void* pad_cols16(void* base, size_t off, const void* src, int rows, int cols, int cols_p) {
    uint16_t* dst = (uint16_t*)((unsigned char*)base + off);
    size_t n = (size_t)rows * cols_p;
    if (n == 0) return dst;
    unsigned blocks = sg_ceil_div(n, EW_THREADS);
    if (blocks > EW_MAX_BLOCKS) blocks = EW_MAX_BLOCKS;
    SG_LAUNCH(pad_cols16_kernel, blocks, EW_THREADS, 0, dst, (const uint16_t*)src, rows, cols, cols_p);
    SG_CHECK_LAUNCH();
    return (const __nv_bfloat16*)dst;
}

/* lt_gemm's problem without cuBLASLt: D (m,n) column-major = op(A) . op(B) [+ beta D] [+ bias],
 * one thread an element, the k products (exact in fp32: 8 + 8 or 11 + 11 significant bits) summed
 * in ascending k; ActT the operands' element (uint16_t bf16, sg_h16 fp16), D fp32 or ActT */
template <typename ActT>
__global__ void gemm_act16_own_kernel(void* D, int d16, int64_t ldd, int ta, const ActT* A, int64_t lda,
                                      int tb, const ActT* B, int64_t ldb, int m, int n, int k, float beta,
                                      const float* bias) {
    size_t total = (size_t)m * n;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e % (size_t)m), j = (int)(e / (size_t)m);
        float acc = 0.0f;
        for (int p = 0; p < k; p++) {
            float x = act_load(A, ta ? (size_t)p + (size_t)i * lda : (size_t)i + (size_t)p * lda);
            float y = act_load(B, tb ? (size_t)j + (size_t)p * ldb : (size_t)p + (size_t)j * ldb);
            acc = acc + x * y;
        }
        size_t at = (size_t)i + (size_t)j * ldd;
        float t = acc;
        if (beta != 0.0f) t = t + beta * (d16 ? act_load((const ActT*)D, at) : act_load((const float*)D, at));
        if (bias != NULL) t = t + bias[i];
        if (d16) act_store((ActT*)D, at, t);
        else act_store((float*)D, at, t);
    }
}

static void lt_gemm_or_own(const char* what, int dt, cublasOperation_t transa, cublasOperation_t transb, int m,
                           int n, int k, const void* A, int64_t lda, const void* B, int64_t ldb,
                           float beta, void* D, int d16, int64_t ldd, const float* bias) {
    if (lt_gemm(what, LT_INSTEAD_OWN, dt, transa, transb, m, n, k, A, lda, B, ldb, beta, D, d16, ldd, bias)) return;
    size_t total = (size_t)m * n;
    if (total == 0) return;
    unsigned blocks = sg_ceil_div(total, EW_THREADS);
    if (blocks > EW_MAX_BLOCKS) blocks = EW_MAX_BLOCKS;
    const int ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    if (dt == DT_FP16)
        SG_LAUNCH(gemm_act16_own_kernel<sg_h16>, blocks, EW_THREADS, 0, D, d16, ldd, ta, (const sg_h16*)A, lda, tb,
                  (const sg_h16*)B, ldb, m, n, k, beta, bias);
    else
        SG_LAUNCH(gemm_act16_own_kernel<uint16_t>, blocks, EW_THREADS, 0, D, d16, ldd, ta, (const uint16_t*)A, lda,
                  tb, (const uint16_t*)B, ldb, m, n, k, beta, bias);
    SG_CHECK_LAUNCH();
}

/* ---- deterministic split-K where the tiles are scarce ------------------------------------------
 * Some products of a GPT-2 step have too few output tiles for the GPU's multiprocessors: the
 * attention projection's dweight (768 x 768: 36 tiles of 128 x 128 on 132 SMs), fc's and fc
 * projection's (144: 1.09 waves), qkv's (108), the classifier's dinp (768 x 1024 a chunk: 48).
 * cuBLASLt's own split-K is excluded (the preference above), so seedgpt splits k itself: S equal
 * slices of k as one strided batch of S products into S fp32 partials in the scratch (one launch,
 * S times the tiles), then lt_split_sum_kernel adds them in slice order, the same order every run,
 * and writes D (+ D when beta is 1). S depends on the shapes only, never on the device, so the bits
 * are the same on any GPU that runs the same algorithm:
 *   tiles = ceil(m / 128) ceil(n / 128); S = 1 when tiles >= LT_SPLIT_TILES (two waves of a
 *   132-SM H100 or H200, 264) / 4 * 3; else the largest S <= min(LT_SPLIT_MAX, ceil(LT_SPLIT_TILES
 *   / tiles), k / LT_SPLIT_MIN_K) that divides k into slices of a multiple of LT_PAD elements.
 * At GPT-2 124M B16 T1024: the attention projection's dweight in 8 slices, qkv's, fc's and fc
 * projection's in 2, the classifier's dinp in 6 (k = 50304). Only products with an fp32 D and no
 * bias (the backward's dinp and dweight) are split; SEEDGPT_KERNELS=baseline splits none. The
 * bits move against the unsplit product (its k summed in other groups), within fp32 rounding;
 * the tests hold both to the fp32 reference and the split one to itself run again. */
#define LT_SPLIT_TILES 264
#define LT_SPLIT_MAX 8
#define LT_SPLIT_MIN_K 1024
static int lt_split(int m, int n, int k) {
    const long tiles = (long)((m + 127) / 128) * (long)((n + 127) / 128);
    if (tiles * 4 >= (long)LT_SPLIT_TILES * 3) return 1;
    long S = (LT_SPLIT_TILES + tiles - 1) / tiles;
    if (S > LT_SPLIT_MAX) S = LT_SPLIT_MAX;
    if (S > k / LT_SPLIT_MIN_K) S = k / LT_SPLIT_MIN_K;
    for (; S >= 2; S--)
        if (k % S == 0 && (k / S) % LT_PAD == 0) return (int)S;
    return 1;
}
/* the scratch the partials of a split (m, n, k) product take, 0 when it is not split */
static size_t lt_split_bytes(int m, int n, int k) {
    const int S = lt_split(m, n, k);
    return S > 1 ? (size_t)S * m * n * sizeof(float) : 0;
}

/* D (m, n, ld ldd) = [D +] the S partials (m, n, ld m, m n apart) added in slice order */
__global__ void lt_split_sum_kernel(float* D, int64_t ldd, const float* parts, int m, int n, int S, int accumulate) {
    const size_t total = (size_t)m * n, step = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        float acc = parts[e];
        for (int x = 1; x < S; x++) acc += parts[(size_t)x * total + e];
        const size_t at = (e % m) + (e / m) * (size_t)ldd;
        D[at] = accumulate ? D[at] + acc : acc;
    }
}

/* lt_gemm_or_own for an fp32 D without bias, split as lt_split says, the partials at `parts` (the
 * caller's scratch, lt_split_bytes of it). A batch cuBLASLt refuses runs unsplit (its refusal
 * noted once, like any other). A stored A (transa N) is (m, k): slice x starts x ks columns in;
 * transposed, x ks rows in; B likewise by transb. */
static void lt_gemm_split_or_own(const char* what, int dt, cublasOperation_t transa, cublasOperation_t transb, int m,
                                 int n, int k, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
                                 float* D, int64_t ldd, void* parts) {
    const int S = kernels_baseline_cuda() ? 1 : lt_split(m, n, k);
    if (S > 1 && m > 0 && n > 0) {
        const int ks = k / S;
        const int64_t sa = transa == CUBLAS_OP_N ? (int64_t)ks * lda : ks;
        const int64_t sb = transb == CUBLAS_OP_N ? ks : (int64_t)ks * ldb;
        if (lt_gemm_batched(what, "unsplit, as one product", dt, transa, transb, m, n, ks, A, lda, B, ldb, 0.0f, parts, 0, m, NULL, S,
                            sa, sb, (int64_t)m * n)) {
            unsigned blocks = sg_ceil_div((size_t)m * n, EW_THREADS);
            if (blocks > EW_MAX_BLOCKS) blocks = EW_MAX_BLOCKS;
            SG_LAUNCH(lt_split_sum_kernel, blocks, EW_THREADS, 0, D, ldd, (const float*)parts, m, n, S,
                      beta != 0.0f);
            SG_CHECK_LAUNCH();
            return;
        }
    }
    lt_gemm_or_own(what, dt, transa, transb, m, n, k, A, lda, B, ldb, beta, D, 0, ldd, NULL);
}

void gemm_bf16_describe_last_cuda(char* line, size_t cap) {
    const LtPlan* p = last_plan;
    if (p == NULL) { snprintf(line, cap, "no GEMM yet"); return; }
    if (p->refused) { snprintf(line, cap, "refused by cuBLASLt: seedgpt's own kernel"); return; }
#ifdef SG_EMU
    snprintf(line, cap, "emulated cuBLASLt (one algorithm: fp32 sums in ascending k)%s",
             p->batch > 1 ? ", split-K by seedgpt" : "");
    if (p->batch > 1) snprintf(line + strlen(line), cap - strlen(line), " into %d slices", p->batch);
#else
    int32_t id = -1, splitk = -1;
    uint32_t tile = 0, reduction = 0, stages = 0, swizzle = 0;
    uint16_t cluster = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
    snprintf(line, cap, "algo %d tile %u stages %u cluster %u swizzle %u splitK %d reduction %u%s, %.2f waves", id,
             tile, stages, (unsigned)cluster, swizzle, splitk, reduction,
             p->reduction_allowed ? " (allowed: nothing without)" : "", p->waves);
    if (p->batch > 1)
        snprintf(line + strlen(line), cap - strlen(line), ", split-K by seedgpt into %d slices", p->batch);
#endif
}

void gemm_bf16_cuda(int transa, int transb, int m, int n, int k, const void* A, long long lda,
                    const void* B, long long ldb, float beta, void* D, int d_bf16, long long ldd,
                    const float* bias) {
    const cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!d_bf16 && bias == NULL) {   /* as the backward's dinp and dweight run: split where lt_split says */
        const size_t bytes = lt_split_bytes(m, n, k);
        lt_gemm_split_or_own("benchmarked", DT_BF16, ta, tb, m, n, k, A, lda, B, ldb, beta, (float*)D, ldd,
                             bytes > 0 ? lt_scratch(bytes) : NULL);
        return;
    }
    lt_gemm_or_own("benchmarked", DT_BF16, ta, tb, m, n, k, A, lda, B, ldb, beta, D, d_bf16, ldd, bias);
}

/* the scratch's pieces (the ops below carve the same): the forward's padded weight and inp when C
 * is not used as stored, and with a bias its fp32 result before the one rounding to bf16 (below);
 * the backward's rounded dout, then the padded inp and weight likewise */
static void act_forward_carve(Carve* cv, int N, int C, int OC, int bias) {
    if (!act_direct(C)) {
        size_t Cp = pad_to((size_t)C, LT_PAD);
        carve(cv, 0, sizeof(uint16_t) * (size_t)OC * Cp);
        carve(cv, 1, sizeof(uint16_t) * (size_t)N * Cp);
    }
    if (bias) carve(cv, 2, sizeof(float) * (size_t)N * OC);
}

/* dst (n) bf16 = src (n) fp32, rounded to nearest even once */
__global__ void round_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        act_store(dst, i, src[i]);
}
static void act_backward_carve(Carve* cv, int N, int C, int OC, int dinp) {
    size_t Cp = pad_to((size_t)C, LT_PAD), OCp = pad_to((size_t)OC, LT_PAD);
    carve(cv, 0, sizeof(uint16_t) * (size_t)N * OCp);
    /* split-K's partials, for dweight (C, OC, k N) or dinp (C, N, k OC), whichever needs more */
    size_t split = lt_split_bytes(C, OC, N), split_dinp = dinp ? lt_split_bytes(C, N, OC) : 0;
    carve(cv, 3, split > split_dinp ? split : split_dinp);
    if (act_direct(C)) return;
    carve(cv, 1, sizeof(uint16_t) * (size_t)N * Cp);
    carve(cv, 2, dinp ? sizeof(uint16_t) * (size_t)OC * Cp : 0);
}

/* matmul_forward_bf16_act_cuda (dt DT_BF16) or matmul_forward_fp16_act_cuda (DT_FP16) and, with
 * out_gelu != NULL (out 16-bit), the GELU of its result into out_gelu */
static void matmul_forward_act(int dt, void* out, int out_dtype, void* out_gelu, const void* inp,
                               const void* weight, const float* bias, int N, int C, int OC) {
    if (N == 0 || OC == 0) return;
    const void* x = inp;
    const void* w = weight;
    int K = C;
    Carve cv = {{0}, 0};
    act_forward_carve(&cv, N, C, OC, bias != NULL);
    void* base = cv.total > 0 ? lt_scratch(cv.total) : NULL;
    if (!act_direct(C)) {   /* C = 0 gives k = LT_PAD zeros: out = bias (or 0) */
        K = (int)pad_to((size_t)C, LT_PAD);
        w = pad_cols16(base, cv.off[0], weight, OC, C, K);
        x = pad_cols16(base, cv.off[1], inp, N, C, K);
    }
    /* cuBLASLt takes a bias of D's type only (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: an
     * fp32 bias with a bf16 D is CUBLAS_STATUS_INVALID_VALUE on the GPU), and a bf16 bias would be
     * a rounding the CPU twin does not make. So a bf16 result with a bias is the fp32 product plus
     * the fp32 bias in the scratch, then rounded once into out: the same bits as the fused form.
     * The same for fp16. */
    int stage = out_dtype != DT_FP32 && bias != NULL;
    void* d = stage ? (void*)((unsigned char*)base + cv.off[2]) : out;
    /* out^T (OC,N) = weight (OC,K) . inp^T (K,N): weight is stored column-major as (K,OC) */
    lt_gemm_or_own("forward", dt, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, K, w, K, x, K, 0.0f, d,
                   out_dtype != DT_FP32 && !stage, OC, bias);
    size_t n = (size_t)N * OC;
    if (stage && dt == DT_FP16) {
        round_to_fp16_cuda(out, (const float*)d, n);
    } else if (stage) {
        /* the rounding and the GELU from one read of the staged sum, where the kernel applies */
        if (out_gelu != NULL && round_gelu_bf16_cuda(out, out_gelu, (const float*)d, n)) return;
        if (!kernels_baseline_cuda()) {
            round_to_bf16_cuda(out, (const float*)d, n);   /* 16-byte accesses where aligned */
        } else {
            unsigned blocks = sg_ceil_div(n, EW_THREADS);
            if (blocks > EW_MAX_BLOCKS) blocks = EW_MAX_BLOCKS;
            SG_LAUNCH(round_bf16_kernel, blocks, EW_THREADS, 0, (uint16_t*)out, (const float*)d, n);
            SG_CHECK_LAUNCH();
        }
    }
    if (out_gelu != NULL && dt == DT_FP16) gelu_forward_fp16_cuda(out_gelu, out, n);
    else if (out_gelu != NULL) gelu_forward_bf16_cuda(out_gelu, out, n);
}

void matmul_forward_bf16_act_cuda(void* out, int out_dtype, const void* inp, const void* weight,
                                  const float* bias, int N, int C, int OC) {
    matmul_forward_act(DT_BF16, out, out_dtype, NULL, inp, weight, bias, N, C, OC);
}

void matmul_forward_gelu_bf16_act_cuda(void* out, void* out_gelu, const void* inp,
                                       const void* weight, const float* bias, int N, int C, int OC) {
    matmul_forward_act(DT_BF16, out, DT_BF16, out_gelu, inp, weight, bias, N, C, OC);
}

void matmul_forward_fp16_act_cuda(void* out, int out_dtype, const void* inp, const void* weight,
                                  const float* bias, int N, int C, int OC) {
    matmul_forward_act(DT_FP16, out, out_dtype, NULL, inp, weight, bias, N, C, OC);
}

void matmul_forward_gelu_fp16_act_cuda(void* out, void* out_gelu, const void* inp,
                                       const void* weight, const float* bias, int N, int C, int OC) {
    matmul_forward_act(DT_FP16, out, DT_FP16, out_gelu, inp, weight, bias, N, C, OC);
}

static void matmul_backward_act(int dt, float* dinp, float* dweight, float* dbias, const float* dout,
                                const void* inp, const void* weight, int N, int C, int OC) {
    if (N == 0 || C == 0 || OC == 0) return;
    int OCp = (int)pad_to((size_t)OC, LT_PAD);
    Carve cv = {{0}, 0};
    act_backward_carve(&cv, N, C, OC, dinp != NULL);
    void* base = lt_scratch(cv.total);
    /* dout rounded to bf16 once, into the scratch (N, OCp). With OC a multiple of 8 there is no
     * padding, and the rounding goes with the bias gradient's column sums (one read of the fp32
     * dout for both), or alone in 16-byte accesses; otherwise the padded copy. dbias is
     * bias_backward_cuda's either way, the same bits. */
    void* g16 = (unsigned char*)base + cv.off[0];
    int dbias_done = 0, rounded = 0;
    if (!kernels_baseline_cuda() && OC % LT_PAD == 0) {
        /* the fused column sums and rounding are bf16's; fp16 rounds alone */
        if (dbias != NULL && dt == DT_BF16)
            rounded = dbias_done = bias_backward_round_bf16_cuda(dbias, g16, dout, N, OC);
        if (!rounded && ((uintptr_t)dout & 15u) == 0 && ((uintptr_t)g16 & 15u) == 0) {
            if (dt == DT_FP16) round_to_fp16_cuda(g16, dout, (size_t)N * OC);
            else round_to_bf16_cuda(g16, dout, (size_t)N * OC);
            rounded = 1;
        }
    }
    if (!rounded) g16 = round_pad(dt, base, cv.off[0], dout, N, OC, N, OCp);
    const void* x = inp;
    const void* w = weight;
    int ldx = C;
    if (!act_direct(C)) {
        ldx = (int)pad_to((size_t)C, LT_PAD);
        x = pad_cols16(base, cv.off[1], inp, N, C, ldx);
        if (dinp != NULL) w = pad_cols16(base, cv.off[2], weight, OC, C, ldx);
    }
    /* in the forward, out = inp . weight^T + bias, so:
     * dinp (N,C) = dout (N,OC) . weight (OC,C), asked as dinp^T (C,N) = weight^T (C,OC) . dout^T */
    void* parts = (unsigned char*)base + cv.off[3];
    if (dinp != NULL)
        lt_gemm_split_or_own("dinp", dt, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, ldx, g16, OCp, 0.0f, dinp, C, parts);
    /* dweight (OC,C) += dout^T (OC,N) . inp (N,C), asked as dweight^T (C,OC) += inp^T (C,N) . dout */
    lt_gemm_split_or_own("dweight", dt, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, x, ldx, g16, OCp, 1.0f, dweight, C, parts);
    /* dbias += the column sums of dout, fp32, in matmul_backward_cuda's order */
    if (dbias != NULL && !dbias_done) bias_backward_cuda(dbias, dout, N, OC);
}

void matmul_backward_bf16_act_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const void* weight, int N, int C, int OC) {
    matmul_backward_act(DT_BF16, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void matmul_backward_fp16_act_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const void* weight, int N, int C, int OC) {
    matmul_backward_act(DT_FP16, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void matmul_backward_dout_bf16_act_cuda(float* dinp, float* dweight, float* dbias, const void* dout,
                                        int ld_dout, const void* inp, const void* weight, int N, int C,
                                        int OC) {
    if (N == 0 || C == 0 || OC == 0) return;
    if (dbias != NULL || ld_dout < OC || ld_dout % LT_PAD != 0 || ((uintptr_t)dout & 15u) != 0) {
        fprintf(stderr, "seedgpt: matmul_backward_dout_bf16_act_cuda: wants no bias gradient (its sums need the "
                "fp32 dout), rows of dout at least OC (%d) apart in a multiple of %d elements (%d) and 16-byte "
                "aligned\n", OC, LT_PAD, ld_dout);
        exit(1);
    }
    Carve cv = {{0}, 0};
    act_backward_carve(&cv, N, C, OC, dinp != NULL);
    void* base = lt_scratch(cv.total);
    const void* g16 = dout;
    const void* x = inp;
    const void* w = weight;
    int ldx = C;
    if (!act_direct(C)) {
        ldx = (int)pad_to((size_t)C, LT_PAD);
        x = pad_cols16(base, cv.off[1], inp, N, C, ldx);
        if (dinp != NULL) w = pad_cols16(base, cv.off[2], weight, OC, C, ldx);
    }
    /* the products of matmul_backward_bf16_act_cuda, on the given bf16 dout */
    void* parts = (unsigned char*)base + cv.off[3];
    if (dinp != NULL)
        lt_gemm_split_or_own("dinp", DT_BF16, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, ldx, g16, ld_dout, 0.0f, dinp, C,
                             parts);
    lt_gemm_split_or_own("dweight", DT_BF16, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, x, ldx, g16, ld_dout, 1.0f, dweight,
                         C, parts);
}

size_t matmul_act_scratch_bytes_bf16_cuda(const OpCalls* k) {
    return products_scratch_bytes(k, act_forward_carve, act_backward_carve);
}

void matmul_act_reserve_scratch_bf16_cuda(const OpCalls* k) {
    (void)lt();   /* the handle and its workspace */
    (void)lt_scratch(matmul_act_scratch_bytes_bf16_cuda(k) - SG_LT_WORKSPACE_BYTES);
}
