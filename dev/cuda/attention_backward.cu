/* dev/cuda/attention_backward.cu — the backward of the fused causal attention with dropout on the
 * probabilities (DESIGN §5): from dout, the forward's out and lse, and the same keep bits
 * (philox_attn_draw), dqkv = (dq, dk, dv), every element written. Layouts of
 * attention/attention.h: qkv and dqkv (B, T, (NH + 2 NKV) HD), out and dout (B, T, NH HD), lse
 * (B, NH, T).
 *
 * Variants (all linked from attention/, not copied):
 *   1. attention_backward_cuda (attention/flash_cuda.cu), the fp32 trainer's kernel: fp32 q, k, v,
 *      dout, fp32 FMA products on the CUDA cores.
 *   2. attention_backward_tc_cuda (attention/flash_tc.cu): q, k, v as bf16 bits, the five products
 *      (S, dP, dV, dQ, dK) on the tensor cores (mma.sync m16n8k16, fp32 accumulators), P and dS
 *      rounded to bf16 between them. HD 16, 32, 64 or 128.
 *   3. attention_backward_bf16_cuda (attention/flash_tc.h), the fp32-interface wrapper: fp32
 *      qkv in, rounded to bf16 into the scratch (a kernel per call), then variant 2 (or variant 1
 *      on the rounded values for a head dim the tensor cores do not take). `--precision bf16`
 *      stores qkv in bf16 and runs variant 2 on it directly, so the difference of 3 and 2 is the
 *      rounding copy that storage saves per call.
 * The reference is attention/flash_cpu.c's attention_backward, from the CPU forward's out and lse
 * (given to the variant too, so only the backward is measured), with the same keep bits:
 *   1. on the fp32 inputs: max |dqkv - ref| / max |ref| <= 1e-5;
 *   2. on the bf16 values of q, k, v, with dout holding bf16 values (the kernel's only roundings
 *      are then those of P and dS): each element within (2^-8 + 2^-10) times a float64 sum of
 *      magnitudes, per element of dv scale sum_i p_ij |do_id|, of dq sigma sum_j a_ij |k_jd|,
 *      of dk sigma sum_i a_ij |q_id|, a_ij = p_ij (scale sum_d |do_id v_jd| + |D_i|) (the bound
 *      on |ds_ij|); the 2^-10 covers the fp32 parts both share up to order;
 *   3. on fp32 qkv (the reference on its bf16 values) and fp32 dout, which the kernel rounds too:
 *      another 2^-8 on dp and on dv's products, the factor (2^-7 + 2^-10).
 * The derivation is tests/cuda/test_cuda_flash_tc.cu's (backward_magnitudes there). Dropout p =
 * 0.1 throughout; and a control on the small shape: the variant run with another seed must miss
 * the same reference by more than 10x its tolerance, so a mask that differs from the CPU's
 * cannot pass.
 * Timing: TFLOP/s counted as 2.5 times the causal forward's 2 * 2 * B NH T^2 HD / 2 flop (five
 * products where the forward has two), p = 0.1.
 *
 *   build/dev_cuda/attention_backward [K] [--validate] [--reps N] [--B 16] [--T 1024] [--NH 12]
 *                                     [--NKV NH] [--HD 64]
 */
#include "dev/cuda/common.h"
#include "attention/attention.h"
#include "attention/attention_cuda.h"
#include "util/bf16.h"
#include "attention/flash_tc.h"
#include "random/philox.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define OP "attention_backward"
#define NVARIANTS 3
#define DROP_P 0.1
#define MASTER 0x5eedc0ffee123457ULL
#define FP32_TOL 1e-5
#define BF16_TOL_EXACT_DO (0x1p-8 + 0x1p-10)
#define BF16_TOL_FP32_DO (0x1p-7 + 0x1p-10)
#define CONTROL_MIN 10.0   /* the wrong-seed run must miss by more than this many tolerances */

static const char* NAMES[NVARIANTS + 1] = {NULL, "fp32 flash (attention/flash_cuda.cu)",
                                           "bf16 tensor cores (attention/flash_tc.cu)",
                                           "bf16 wrapper, rounding incl. (flash_tc.h)"};

typedef struct {
    int B, T, NH, NKV, HD;
    uint32_t g0;
} Shape;

static size_t n_qkv(Shape s) { return (size_t)s.B * s.T * (s.NH + 2 * s.NKV) * s.HD; }
static size_t n_out(Shape s) { return (size_t)s.B * s.T * s.NH * s.HD; }
static size_t n_lse(Shape s) { return (size_t)s.B * s.NH * s.T; }

static int supported(int k, Shape s) { return k == 2 ? attention_tc_supports_hd(s.HD) : s.HD <= 128; }

static uint64_t attn_seed(void) { return philox_site_seed(MASTER, 3, 1, SITE_ATTN_PROB, PASS_FORWARD); }

static size_t scratch_floats(int k, Shape s) {
    if (k == 1) return attention_backward_scratch_floats_cuda(s.B, s.T, s.NH, s.NKV, s.HD, 1);
    if (k == 2) return attention_backward_tc_scratch_floats(s.B, s.T, s.NH, s.NKV, s.HD);
    return attention_backward_scratch_floats_bf16_cuda(s.B, s.T, s.NH, s.NKV, s.HD, 1);
}

/* variant k; qkv is fp32 for variants 1 and 3, bf16 bits for variant 2 */
static void attention_variant(int k, float* dqkv, float* scratch, const float* dout, const void* qkv,
                              const float* out, const float* lse, Shape s, uint64_t seed, Dropout drop) {
    if (k == 1)
        attention_backward_cuda(dqkv, scratch, dout, (const float*)qkv, out, lse, s.B, s.T, s.NH, s.NKV,
                                s.HD, s.g0, seed, drop);
    else if (k == 2)
        attention_backward_tc_cuda(dqkv, scratch, dout, (const uint16_t*)qkv, out, lse, s.B, s.T, s.NH,
                                   s.NKV, s.HD, s.g0, seed, drop);
    else
        attention_backward_bf16_cuda(dqkv, scratch, dout, (const float*)qkv, out, lse, s.B, s.T, s.NH,
                                     s.NKV, s.HD, s.g0, seed, drop);
}

/* mag (B, T, QKV), laid out as dqkv: the float64 sums of magnitudes of the bf16 tolerance (see the
 * header), from the values the reference ran on. One kv head group per iteration: its query
 * heads add into the same dk, dv magnitudes. */
static double* backward_magnitudes(const float* qkv, const float* dout, const float* out,
                                   const float* lse, Shape s, float scale) {
    const int QKV = (s.NH + 2 * s.NKV) * s.HD, C = s.NH * s.HD, rep = s.NH / s.NKV;
    const double sigma = 1.0 / sqrt((double)s.HD);
    double* mag = (double*)calloc(n_qkv(s), sizeof(double));
    #pragma omp parallel for schedule(dynamic)
    for (int bg = 0; bg < s.B * s.NKV; bg++) {
        int b = bg / s.NKV, kvh = bg % s.NKV;
        for (int h = kvh * rep; h < (kvh + 1) * rep; h++)
            for (int i = 0; i < s.T; i++) {
                const float* q = qkv + ((size_t)b * s.T + i) * QKV + (size_t)h * s.HD;
                const float* dO = dout + ((size_t)b * s.T + i) * C + (size_t)h * s.HD;
                const float* o = out + ((size_t)b * s.T + i) * C + (size_t)h * s.HD;
                double L = lse[((size_t)b * s.NH + h) * s.T + i], Di = 0.0;
                for (int d = 0; d < s.HD; d++) Di += (double)dO[d] * o[d];
                double* mq = mag + ((size_t)b * s.T + i) * QKV + (size_t)h * s.HD;
                for (int j = 0; j <= i; j++) {
                    size_t row = ((size_t)b * s.T + j) * QKV;
                    const float* kj = qkv + row + (size_t)(s.NH + kvh) * s.HD;
                    const float* vj = qkv + row + (size_t)(s.NH + s.NKV + kvh) * s.HD;
                    double* mk = mag + row + (size_t)(s.NH + kvh) * s.HD;
                    double* mv = mag + row + (size_t)(s.NH + s.NKV + kvh) * s.HD;
                    double dot = 0.0, A = 0.0;
                    for (int d = 0; d < s.HD; d++) {
                        dot += (double)q[d] * kj[d];
                        A += fabs((double)dO[d] * vj[d]);
                    }
                    double p = exp(sigma * dot - L), a = p * (scale * A + fabs(Di));
                    for (int d = 0; d < s.HD; d++) {
                        mv[d] += scale * p * fabs((double)dO[d]);
                        mq[d] += sigma * a * fabs((double)kj[d]);
                        mk[d] += sigma * a * fabs((double)q[d]);
                    }
                }
            }
    }
    return mag;
}

/* the error of g against ref in units of its tolerance: variant 1 max |g - ref| / (1e-5 max |ref|),
 * the others the worst element's |g - ref| / (factor mag); a non-finite g counts as infinite */
static double error_ratio(int k, const float* g, const float* ref, const double* mag, size_t n) {
    double worst = 0.0, num = 0.0, den = 0.0;
    double factor = k == 2 ? BF16_TOL_EXACT_DO : BF16_TOL_FP32_DO;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(g[i])) return INFINITY;
        double d = fabs((double)g[i] - ref[i]);
        if (k == 1) {
            num = fmax(num, d);
            den = fmax(den, fabs((double)ref[i]));
        } else {
            worst = fmax(worst, d / (factor * mag[i] + 1e-30));
        }
    }
    return k == 1 ? num / (FP32_TOL * den + 1e-30) : worst;
}

static int cpu_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* validates variant k on shape s: *err the worst error in units of the tolerance; with control,
 * *ctl the same for the variant run with another seed (else 0). 1 when err <= 1 (and ctl > 10). */
static int validate(int k, Shape s, int control, double* err, double* ctl) {
    Dropout drop = dropout_make(DROP_P);
    /* qkv in [-2, 2), dout in [-1, 1); the kernel's inputs first, then what the reference sees */
    float* qkv = dev_host_uniform(n_qkv(s), 21 + s.T, -2.0f, 2.0f);
    float* dout = dev_host_uniform(n_out(s), 22 + s.T, -1.0f, 1.0f);
    uint16_t* bits = NULL;
    float* qkv_ref = qkv;
    if (k >= 2) {
        bits = (uint16_t*)malloc(n_qkv(s) * sizeof(uint16_t));
        qkv_ref = (float*)malloc(n_qkv(s) * sizeof(float));
        for (size_t i = 0; i < n_qkv(s); i++) {
            bits[i] = sg_bf16_from_float(qkv[i]);
            qkv_ref[i] = sg_bf16_to_float(bits[i]);
        }
    }
    if (k == 2)   /* dout holding bf16 values: exact in the kernel's dO products */
        for (size_t i = 0; i < n_out(s); i++) dout[i] = sg_bf16_round(dout[i]);
    float* out = (float*)malloc(n_out(s) * sizeof(float));
    float* lse = (float*)malloc(n_lse(s) * sizeof(float));
    float* ref = (float*)malloc(n_qkv(s) * sizeof(float));
    float* cpu_scratch = (float*)malloc(
        attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.HD, cpu_threads()) * sizeof(float) + 1);
    attention_forward(out, lse, qkv_ref, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, attn_seed(), drop);
    attention_backward(ref, cpu_scratch, dout, qkv_ref, out, lse, s.B, s.T, s.NH, s.NKV, s.HD, s.g0,
                       attn_seed(), drop);
    double* mag = k == 1 ? NULL : backward_magnitudes(qkv_ref, dout, out, lse, s, drop.scale);

    void* d_qkv;
    if (k == 2) {
        d_qkv = dev_malloc(n_qkv(s) * sizeof(uint16_t));
        SG_CHECK(cudaMemcpy(d_qkv, bits, n_qkv(s) * sizeof(uint16_t), cudaMemcpyHostToDevice));
    } else {
        d_qkv = dev_upload(qkv, n_qkv(s));
    }
    float *d_dout = dev_upload(dout, n_out(s)), *d_out = dev_upload(out, n_out(s));
    float *d_lse = dev_upload(lse, n_lse(s)), *d_dqkv = dev_poison(n_qkv(s));
    float* d_scratch = dev_poison(scratch_floats(k, s));
    attention_variant(k, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s, attn_seed(), drop);
    SG_CHECK(cudaDeviceSynchronize());
    float* g = dev_download(d_dqkv, n_qkv(s));
    *err = error_ratio(k, g, ref, mag, n_qkv(s));
    *ctl = 0.0;
    if (control) {   /* another seed: other keep bits, the same reference */
        free(g);
        SG_CHECK(cudaMemset(d_dqkv, 0xff, n_qkv(s) * sizeof(float)));
        attention_variant(k, d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, s, attn_seed() ^ 1, drop);
        SG_CHECK(cudaDeviceSynchronize());
        g = dev_download(d_dqkv, n_qkv(s));
        *ctl = error_ratio(k, g, ref, mag, n_qkv(s));
    }
    free(qkv); free(dout); free(bits); free(out); free(lse); free(ref); free(cpu_scratch); free(mag); free(g);
    if (qkv_ref != qkv) free(qkv_ref);
    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_dout)); SG_CHECK(cudaFree(d_out));
    SG_CHECK(cudaFree(d_lse)); SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_scratch));
    return *err <= 1.0 && (!control || *ctl > CONTROL_MIN);
}

int main(int argc, char** argv) {
    int B = 16, T = 1024, NH = 12, NKV = 0, HD = 64;
#ifdef SG_EMU
    B = 1; T = 24; NH = 2; HD = 64;
#endif
    DevFlag flags[] = {{"--B", &B}, {"--T", &T}, {"--NH", &NH}, {"--NKV", &NKV}, {"--HD", &HD}};
    DevArgs args = dev_parse(argc, argv, OP, NVARIANTS, flags, 5);
    if (NKV == 0) NKV = NH;
    if (NH % NKV != 0) {
        fprintf(stderr, "%s: --NKV %d must divide --NH %d\n", OP, NKV, NH);
        return 2;
    }
    Shape timed = {B, T, NH, NKV, HD, 0};
    /* validation: grouped-query heads and T not a multiple of the 64 tiles, B > 1, g0 != 0, the
     * head dim of the timed shape (with the wrong-seed control); then the timed shape with B = 1
     * (the CPU reference is O(T^2); the grid over sequences is the same) */
    Shape checks[2] = {{2, 70, 4, 2, HD, 7}, {1, T, NH, NKV, HD, 3}};
#ifdef SG_EMU
    /* the emulation runs every thread on the CPU: one partial tile, two query heads per kv head */
    checks[0].T = 37;
    checks[0].NH = 2;
    checks[0].NKV = 1;
#endif

    int valid[NVARIANTS + 1] = {0};
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k)) continue;
        if (!supported(k, timed)) {
            dev_skip(OP, k, k == 2 ? "head dim 16, 32, 64 or 128 only" : "head dim up to 128 only");
            continue;
        }
        int ok = 1;
        double e = 0.0, ctl = 0.0;
        char shapes[128] = "";
        for (int i = 0; i < 2; i++) {
            double ei, ci;
            ok &= validate(k, checks[i], i == 0, &ei, &ci);
            e = fmax(e, ei);
            if (i == 0) ctl = ci;
            snprintf(shapes + strlen(shapes), sizeof(shapes) - strlen(shapes), "%sB%d T%d NH%d/%d HD%d",
                     i ? ", " : "", checks[i].B, checks[i].T, checks[i].NH, checks[i].NKV, checks[i].HD);
        }
        const char* tol = k == 1 ? "1e-5 max |ref|"
                          : k == 2 ? "(2^-8 + 2^-10) x sums of magnitudes, bf16 dout"
                                   : "(2^-7 + 2^-10) x sums of magnitudes, fp32 dout";
        valid[k] = dev_check(ok, OP, k, "%s: %s, p %.1f: worst dqkv err %.3f of tol (%s); another seed: "
                             "%.1f x tol (must be > %.0f)", NAMES[k], shapes, DROP_P, e, tol, ctl, CONTROL_MIN);
    }
    (void)valid;   /* read by the timing only, which the emulation leaves out */
    if (args.validate_only) return dev_finish();

#ifndef SG_EMU
    printf("%s, causal, B %d T %d NH %d (kv %d) HD %d, p %.1f, %d reps\n", OP, B, T, NH, NKV, HD,
           DROP_P, args.reps);
    char shape[96];
    snprintf(shape, sizeof(shape), "B%d_T%d_NH%d_NKV%d_HD%d", B, T, NH, NKV, HD);
    Dropout drop = dropout_make(DROP_P);
    float* h = dev_host_uniform(n_qkv(timed), 5, -2.0f, 2.0f);
    float* hd = dev_host_uniform(n_out(timed), 6, -1.0f, 1.0f);
    uint16_t* bits = (uint16_t*)malloc(n_qkv(timed) * sizeof(uint16_t));
    for (size_t i = 0; i < n_qkv(timed); i++) bits[i] = sg_bf16_from_float(h[i]);
    float* d_qkv = dev_upload(h, n_qkv(timed));
    uint16_t* d_bits = (uint16_t*)dev_malloc(n_qkv(timed) * sizeof(uint16_t));
    SG_CHECK(cudaMemcpy(d_bits, bits, n_qkv(timed) * sizeof(uint16_t), cudaMemcpyHostToDevice));
    float *d_dout = dev_upload(hd, n_out(timed)), *d_dqkv = dev_poison(n_qkv(timed));
    float *d_out = dev_poison(n_out(timed)), *d_lse = dev_poison(n_lse(timed));
    size_t ns = 0;
    for (int k = 1; k <= NVARIANTS; k++)
        if (supported(k, timed) && scratch_floats(k, timed) > ns) ns = scratch_floats(k, timed);
    float* d_scratch = dev_poison(ns);
    /* out and lse of the fp32 forward: what the backward reads, the same for every variant */
    attention_forward_cuda(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, 0, attn_seed(), drop);
    double flop = 2.5 * 2.0 * 2.0 * B * NH * (double)T * T * HD / 2.0;
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k) || !valid[k]) continue;
        const void* in = k == 2 ? (const void*)d_bits : (const void*)d_qkv;
        double ms = dev_time_ms(args.reps, [&]() {
            attention_variant(k, d_dqkv, d_scratch, d_dout, in, d_out, d_lse, timed, attn_seed(), drop);
        });
        dev_report(OP, k, NAMES[k], shape, ms, flop / (ms * 1e-3) / 1e12, "TFLOP/s");
    }
    free(h); free(hd); free(bits);
    SG_CHECK(cudaFree(d_qkv)); SG_CHECK(cudaFree(d_bits)); SG_CHECK(cudaFree(d_dout));
    SG_CHECK(cudaFree(d_dqkv)); SG_CHECK(cudaFree(d_out)); SG_CHECK(cudaFree(d_lse));
    SG_CHECK(cudaFree(d_scratch));
#endif
    return dev_finish();
}
