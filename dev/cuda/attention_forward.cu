/* dev/cuda/attention_forward.cu — the forward of the fused causal attention with dropout on the
 * probabilities (DESIGN §5): per head, s_ij = q_i.k_j / sqrt(HD) for j <= i, LSE_i = log sum_j
 * exp(s_ij), o_i = sum_j (m_ij exp(s_ij - LSE_i) scale) v_j, the keep bits m_ij those of
 * philox_attn_draw. Layouts of attention/attention.h: qkv (B, T, (NH + 2 NKV) HD), out
 * (B, T, NH HD), lse (B, NH, T).
 *
 * Variants (both linked from attention/, not copied):
 *   1. attention_forward_cuda (attention/flash_cuda.cu), the trainer's kernel: fp32 q, k, v,
 *      tiles in shared memory, fp32 FMA products on the CUDA cores.
 *   2. attention_forward_tc_cuda (attention/flash_tc.cu): q, k, v in bf16, both products on the
 *      tensor cores (mma.sync m16n8k16, fp32 accumulators), P kept in registers between them.
 *      Half the bytes of q, k, v, and the tensor cores' rate; the price is bf16 inputs and bf16
 *      weights in P V. HD 64 or 128.
 * The reference is attention/flash_cpu.c's attention_forward with the same keep bits:
 *   1. on the fp32 inputs: max |out - ref| / max |ref| <= 1e-5, the same for lse (fp32 sums in
 *      another order);
 *   2. on the bf16-rounded inputs (as fp32): lse within 1e-5 max(1, |ref|), and each output
 *      element within (2^-8 + 2^-11) scale sum_j p_ij |v_jd| of the reference, p_ij computed in
 *      float64: the kernel rounds each kept weight to bf16 (a relative error of at most 2^-8),
 *      2^-11 covers the fp32 sums both kernels share up to order (tests/cuda/test_cuda_flash_tc.cu
 *      derives the same bound).
 * Timing: TFLOP/s of the causal forward, 2 * 2 * B NH T^2 HD / 2 flop (two products, half the
 * scores), dropout p = 0.1 as in training.
 *
 *   build/dev_cuda/attention_forward [K] [--validate] [--reps N] [--B 16] [--T 1024] [--NH 12]
 *                                    [--NKV NH] [--HD 64]
 */
#include "dev/cuda/common.h"
#include "attention/attention.h"
#include "attention/attention_cuda.h"
#include "util/bf16.h"
#include "attention/flash_tc.h"
#include "random/philox.h"

#define OP "attention_forward"
#define NVARIANTS 2
#define DROP_P 0.1
#define MASTER 0x5eedc0ffee123457ULL
#define FP32_TOL 1e-5
#define LSE_TOL 1e-5
#define BF16_TOL_FACTOR (0x1p-8 + 0x1p-11)

static const char* NAMES[NVARIANTS + 1] = {NULL, "fp32 flash (attention/flash_cuda.cu)",
                                           "bf16 tensor cores (attention/flash_tc.cu)"};

typedef struct {
    int B, T, NH, NKV, HD;
    uint32_t g0;
} Shape;

static size_t n_qkv(Shape s) { return (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HD; }
static size_t n_out(Shape s) { return (size_t)s.B * s.T * s.NH * s.HD; }
static size_t n_lse(Shape s) { return (size_t)s.B * s.NH * s.T; }

static int supported(int k, Shape s) { return k != 2 || s.HD == 64 || s.HD == 128; }

static uint64_t attn_seed(void) { return philox_site_seed(MASTER, 3, 1, SITE_ATTN_PROB, PASS_FORWARD); }

/* variant k; qkv is fp32 for variant 1, bf16 bits for variant 2 */
static void attention_variant(int k, float* out, float* lse, const void* qkv, Shape s, Dropout drop) {
    if (k == 1)
        attention_forward_cuda(out, lse, (const float*)qkv, s.B, s.T, s.NH, s.NKV, s.HD, s.g0,
                               attn_seed(), drop);
    else
        attention_forward_tc_cuda(out, lse, (const uint16_t*)qkv, s.B, s.T, s.NH, s.NKV, s.HD, s.g0,
                                  attn_seed(), drop);
}

/* mag[e] = sum_j p_ij |v_jd| in float64 for output element e = (b, i, h, d): the scale of the
 * bf16 variant's tolerance */
static double* weight_magnitudes(const float* qkv, Shape s) {
    int QKV = (s.NH + 2 * s.NKV) * s.HD, rep = s.NH / s.NKV;
    double* mag = (double*)calloc(n_out(s), sizeof(double));
    double sigma = 1.0 / sqrt((double)s.HD);
    #pragma omp parallel for schedule(dynamic)
    for (int bh = 0; bh < s.B * s.NH; bh++) {
        int b = bh / s.NH, h = bh % s.NH, kvh = h / rep;
        double* sc = (double*)malloc((size_t)s.T * sizeof(double));
        for (int i = 0; i < s.T; i++) {
            const float* q = qkv + ((size_t)b * s.T + i) * QKV + (size_t)h * s.HD;
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j <= i; j++) {
                const float* kj = qkv + ((size_t)b * s.T + j) * QKV + (size_t)(s.NH + kvh) * s.HD;
                double d = 0.0;
                for (int c = 0; c < s.HD; c++) d += (double)q[c] * kj[c];
                sc[j] = d * sigma;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j <= i; j++) sum += exp(sc[j] - mx);
            double* m = mag + ((size_t)b * s.T + i) * s.NH * s.HD + (size_t)h * s.HD;
            for (int j = 0; j <= i; j++) {
                double p = exp(sc[j] - mx) / sum;
                const float* vj = qkv + ((size_t)b * s.T + j) * QKV + (size_t)(s.NH + s.NKV + kvh) * s.HD;
                for (int c = 0; c < s.HD; c++) m[c] += p * fabs((double)vj[c]);
            }
        }
        free(sc);
    }
    return mag;
}

/* validates variant k on shape s: returns 1 when within tolerance, with the measured numbers */
static int validate(int k, Shape s, double* out_err, double* lse_err) {
    Dropout drop = dropout_make(DROP_P);
    float* qkv = dev_host_uniform(n_qkv(s), 11 + s.T, -1.0f, 1.0f);
    uint16_t* bits = NULL;
    if (k == 2) {   /* the kernel sees bf16; the reference the same values as fp32 */
        bits = (uint16_t*)malloc(n_qkv(s) * sizeof(uint16_t));
        for (size_t i = 0; i < n_qkv(s); i++) {
            bits[i] = sg_bf16_from_float(qkv[i]);
            qkv[i] = sg_bf16_to_float(bits[i]);
        }
    }
    float* ref = (float*)malloc(n_out(s) * sizeof(float));
    float* ref_lse = (float*)malloc(n_lse(s) * sizeof(float));
    attention_forward(ref, ref_lse, qkv, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, attn_seed(), drop);

    void* d_qkv;
    if (k == 2) {
        d_qkv = dev_malloc(n_qkv(s) * sizeof(uint16_t));
        SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv(s) * sizeof(uint16_t), cudaMemcpyHostToDevice));
    } else {
        d_qkv = dev_upload(qkv, n_qkv(s));
    }
    float *d_out = dev_poison(n_out(s)), *d_lse = dev_poison(n_lse(s));
    attention_variant(k, d_out, d_lse, d_qkv, s, drop);
    SG_CHECK(cudaDeviceSynchronize());
    float *out = dev_download(d_out, n_out(s)), *lse = dev_download(d_lse, n_lse(s));

    int ok;
    if (k == 1) {
        double num = 0.0, den = 0.0, lnum = 0.0, lden = 0.0;
        int finite = 1;
        for (size_t i = 0; i < n_out(s); i++) {
            finite &= isfinite(out[i]) != 0;
            num = fmax(num, fabs((double)out[i] - ref[i]));
            den = fmax(den, fabs((double)ref[i]));
        }
        for (size_t i = 0; i < n_lse(s); i++) {
            finite &= isfinite(lse[i]) != 0;
            lnum = fmax(lnum, fabs((double)lse[i] - ref_lse[i]));
            lden = fmax(lden, fabs((double)ref_lse[i]));
        }
        *out_err = finite ? num / den : INFINITY;
        *lse_err = finite ? lnum / lden : INFINITY;
        ok = *out_err <= FP32_TOL && *lse_err <= LSE_TOL;
    } else {
        double* mag = weight_magnitudes(qkv, s);
        double worst = 0.0, lworst = 0.0;
        for (size_t i = 0; i < n_out(s); i++) {
            double tol = BF16_TOL_FACTOR * drop.scale * mag[i] + 1e-30;
            double r = isfinite(out[i]) ? fabs((double)out[i] - ref[i]) / tol : INFINITY;
            worst = fmax(worst, r);
        }
        for (size_t i = 0; i < n_lse(s); i++) {
            double r = isfinite(lse[i]) ? fabs((double)lse[i] - ref_lse[i]) / fmax(1.0, fabs((double)ref_lse[i]))
                                        : INFINITY;
            lworst = fmax(lworst, r);
        }
        free(mag);
        *out_err = worst;   /* as a fraction of the elementwise tolerance */
        *lse_err = lworst;
        ok = worst <= 1.0 && lworst <= LSE_TOL;
    }
    free(qkv); free(bits); free(ref); free(ref_lse); free(out); free(lse);
    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse));
    return ok;
}

int main(int argc, char** argv) {
    int B = 16, T = 1024, NH = 12, NKV = 0, HD = 64;
#ifdef SG_EMU
    B = 1; T = 64; NH = 2; HD = 64;
#endif
    DevFlag flags[] = {{"--B", &B}, {"--T", &T}, {"--NH", &NH}, {"--NKV", &NKV}, {"--HD", &HD}};
    DevArgs args = dev_parse(argc, argv, "attention_forward", NVARIANTS, flags, 5);
    if (NKV == 0) NKV = NH;
    if (NH % NKV != 0) {
        fprintf(stderr, "attention_forward: --NKV %d must divide --NH %d\n", NKV, NH);
        return 2;
    }
    Shape timed = {B, T, NH, NKV, HD, 0};
    /* validation: grouped-query heads and T not a multiple of the 64 tiles, g0 != 0; then the
     * timed shape with B = 1 (the CPU reference is O(T^2); the grid over sequences is the same) */
    Shape checks[2] = {{2, 70, 4, 2, 64, 7}, {1, T, NH, NKV, HD, 3}};

    int valid[NVARIANTS + 1] = {0};
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k)) continue;
        if (!supported(k, timed)) {
            dev_skip(OP, k, "head dim 64 or 128 only");
            continue;
        }
        int ok = 1;
        double eo = 0.0, el = 0.0;
        char shapes[128] = "";
        for (int i = 0; i < 2; i++) {
            double o, l;
            ok &= validate(k, checks[i], &o, &l);
            eo = fmax(eo, o);
            el = fmax(el, l);
            snprintf(shapes + strlen(shapes), sizeof(shapes) - strlen(shapes), "%sB%d T%d NH%d/%d HD%d",
                     i ? ", " : "", checks[i].B, checks[i].T, checks[i].NH, checks[i].NKV, checks[i].HD);
        }
        if (k == 1)
            valid[k] = dev_check(ok, OP, k, "%s: %s, p %.1f: out err %.2e, lse err %.2e (max abs / max |ref|, tol %.0e)",
                                 NAMES[k], shapes, DROP_P, eo, el, FP32_TOL);
        else
            valid[k] = dev_check(ok, OP, k, "%s: %s, p %.1f: worst out err %.2f of the bf16 bound "
                                 "(2^-8 + 2^-11) scale sum_j p_ij |v_jd|, lse rel err %.2e (tol %.0e)",
                                 NAMES[k], shapes, DROP_P, eo, el, LSE_TOL);
    }
    (void)valid;   /* read by the timing only, which the emulation leaves out */
    if (args.validate_only) return dev_finish();

#ifndef SG_EMU
    printf("%s, causal, B %d T %d NH %d (kv %d) HD %d, p %.1f, %d reps\n", OP, B, T, NH, NKV, HD,
           DROP_P, args.reps);
    char shape[96];
    snprintf(shape, sizeof(shape), "B%d_T%d_NH%d_NKV%d_HD%d", B, T, NH, NKV, HD);
    Dropout drop = dropout_make(DROP_P);
    float* h = dev_host_uniform(n_qkv(timed), 5, -1.0f, 1.0f);
    uint16_t* bits = (uint16_t*)malloc(n_qkv(timed) * sizeof(uint16_t));
    for (size_t i = 0; i < n_qkv(timed); i++) bits[i] = sg_bf16_from_float(h[i]);
    float* d_qkv = dev_upload(h, n_qkv(timed));
    uint16_t* d_bits = (uint16_t*)dev_malloc(n_qkv(timed) * sizeof(uint16_t));
    SG_CHECK(cudaMemcpy(d_bits, bits, n_qkv(timed) * sizeof(uint16_t), cudaMemcpyHostToDevice));
    float *d_out = dev_poison(n_out(timed)), *d_lse = dev_poison(n_lse(timed));
    double flop = 2.0 * 2.0 * B * NH * (double)T * T * HD / 2.0;
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k) || !valid[k]) continue;
        const void* in = k == 1 ? (const void*)d_qkv : (const void*)d_bits;
        double ms = dev_time_ms(args.reps, [&]() { attention_variant(k, d_out, d_lse, in, timed, drop); });
        dev_report(OP, k, NAMES[k], shape, ms, flop / (ms * 1e-3) / 1e12, "TFLOP/s");
    }
    free(h); free(bits);
    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_bits)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse));
#endif
    return dev_finish();
}
