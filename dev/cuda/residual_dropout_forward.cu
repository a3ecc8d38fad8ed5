/* dev/cuda/residual_dropout_forward.cu — out (B,T,C) = x + drop(branch), the residual add after
 * the attention and MLP projections, with the keep bits of DESIGN §3: element (b, t, c) is kept
 * iff philox_elem_draw(seed, g0 + b, t, c) >= thr, i.e. word c & 3 of Philox4x32-10 with counter
 * (t, c >> 2, 0, g0 + b) and key = the site seed. Kept values are multiplied by scale.
 *
 * The op moves 12 bytes per element and computes one Philox call (10 rounds of two 32x32->64
 * multiplies) per four elements, so its cost is memory plus that arithmetic; the variants differ
 * in how they pay for the generator and how wide their loads are:
 *   1. one thread per element, one Philox call per element (philox_elem_draw): each call
 *      computes four words and keeps one, so the generator costs 4x what it must (and picking
 *      word c & 3 at run time puts the four on the stack: ptxas reports 16 bytes of stack).
 *   2. one thread per four channels 4q..4q+3, one call for the four (philox_elem_draw4, the words
 *      DESIGN §3 assigns them), scalar loads; a flat grid over all quads of all rows.
 *   3. the production kernel, residual_dropout_forward_cuda of cuda/ops_cuda.cu (linked): the
 *      same one call per quad, one block per (b, t) row, a thread per quad (the CPU's dropout_row
 *      layout; any C).
 *   4. variant 2 with float4 loads and stores (one 16-byte access per tensor per quad): needs
 *      C % 4 == 0, which makes every quad 16-byte aligned.
 * Validation, per variant: (a) the values against the CPU reference (the semantics of
 * cpu/ops_cpu.c's residual_dropout_forward, written out per element below) within one rounding
 * (a GPU may fuse branch * scale + x into one FMA); (b) the mask bit for bit: run with x = 0 and
 * |branch| >= 0.5, an output is zero exactly where the element was dropped, and that pattern must
 * equal the reference's keep bits at every element. As a control, the line also prints how many
 * keep bits another seed would change (the check is able to fail).
 *
 *   build/dev_cuda/residual_dropout_forward [K] [--validate] [--reps N] [--B 16] [--T 1024] [--C 768]
 */
#include "dev/cuda/common.h"
#include "random/philox.h"
#include "cuda/ops_cuda.h"

#define OP "residual_dropout_forward"
#define NVARIANTS 4
#define RD_THREADS 256
#define DROP_P 0.1          /* the trainer's usual residual dropout */
#define G0 12345u           /* the global index of row block 0: not 0, so g is exercised */
#define MASTER 0x5eedc0ffee123457ULL

static const char* NAMES[NVARIANTS + 1] = {
    NULL, "thread/element, philox/element", "thread/quad, philox/quad", "production (cuda/ops_cuda.cu)",
    "thread/quad, philox/quad, float4"};

/* ---- CPU reference: DESIGN §3 element by element -------------------------------------------- */

static int keep_cpu(uint64_t seed, uint32_t g, uint32_t t, uint32_t c, Dropout drop) {
    return !dropout_active(drop) || philox_elem_draw(seed, g, t, c) >= drop.thr;
}

static void residual_dropout_forward_cpu(float* out, const float* x, const float* branch, int B,
                                         int T, int C, uint32_t g0, uint64_t seed, Dropout drop) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                out[i] = x[i] + (keep_cpu(seed, g0 + b, t, c, drop) ? branch[i] * drop.scale : 0.0f);
            }
}

/* ---- variant 1: one thread per element, one Philox call per element -------------------------- */

__global__ void residual_dropout_kernel1(float* out, const float* x, const float* branch, int T,
                                         int C, uint32_t g0, uint64_t seed, Dropout drop, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t bt = i / C;
    int c = (int)(i % C), b = (int)(bt / T), t = (int)(bt % T);
    float v = branch[i] * drop.scale;
    if (dropout_active(drop) && philox_elem_draw(seed, g0 + b, t, c) < drop.thr) v = 0.0f;
    out[i] = x[i] + v;
}

/* ---- variant 2: one thread per quad, one call per quad ---------------------------------------- */

__global__ void residual_dropout_kernel2(float* out, const float* x, const float* branch, int T,
                                         int C, uint32_t g0, uint64_t seed, Dropout drop,
                                         size_t nquads) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nquads) return;
    int Q = (C + 3) / 4;
    size_t bt = i / Q;
    int q = (int)(i % Q), b = (int)(bt / T), t = (int)(bt % T);
    uint32_t r[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};   /* thr 0: all kept */
    if (dropout_active(drop)) philox_elem_draw4(seed, g0 + b, t, q, r);
    size_t e = bt * C + 4 * q;
    int nc = C - 4 * q < 4 ? C - 4 * q : 4;
    #pragma unroll
    for (int w = 0; w < 4; w++) {
        if (w < nc) out[e + w] = x[e + w] + (r[w] >= drop.thr ? branch[e + w] * drop.scale : 0.0f);
    }
}

/* ---- variant 4: variant 2 with float4 accesses (C % 4 == 0) ----------------------------------- */

__global__ void residual_dropout_kernel4(float* out, const float* x, const float* branch, int T,
                                         int C, uint32_t g0, uint64_t seed, Dropout drop,
                                         size_t nquads) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nquads) return;
    int Q = C / 4;
    size_t bt = i / Q;
    int q = (int)(i % Q), b = (int)(bt / T), t = (int)(bt % T);
    uint32_t r[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    if (dropout_active(drop)) philox_elem_draw4(seed, g0 + b, t, q, r);
    float4 xv = reinterpret_cast<const float4*>(x)[i];
    float4 bv = reinterpret_cast<const float4*>(branch)[i];
    float4 o;
    o.x = xv.x + (r[0] >= drop.thr ? bv.x * drop.scale : 0.0f);
    o.y = xv.y + (r[1] >= drop.thr ? bv.y * drop.scale : 0.0f);
    o.z = xv.z + (r[2] >= drop.thr ? bv.z * drop.scale : 0.0f);
    o.w = xv.w + (r[3] >= drop.thr ? bv.w * drop.scale : 0.0f);
    reinterpret_cast<float4*>(out)[i] = o;
}

/* ---- the variants behind one call ------------------------------------------------------------ */

static int supported(int k, int C) { return k != 4 || C % 4 == 0; }

static void residual_dropout_variant(int k, float* out, const float* x, const float* branch, int B,
                                     int T, int C, uint32_t g0, uint64_t seed, Dropout drop) {
    size_t n = (size_t)B * T * C, nquads = (size_t)B * T * ((C + 3) / 4);
    switch (k) {
    case 1:
        SG_LAUNCH(residual_dropout_kernel1, sg_ceil_div(n, RD_THREADS), RD_THREADS, 0, out, x,
                  branch, T, C, g0, seed, drop, n);
        SG_CHECK_LAUNCH();
        break;
    case 2:
        SG_LAUNCH(residual_dropout_kernel2, sg_ceil_div(nquads, RD_THREADS), RD_THREADS, 0, out, x,
                  branch, T, C, g0, seed, drop, nquads);
        SG_CHECK_LAUNCH();
        break;
    case 3:
        residual_dropout_forward_cuda(out, x, branch, B, T, C, g0, seed, drop);
        break;
    case 4:
        SG_LAUNCH(residual_dropout_kernel4, sg_ceil_div(nquads, RD_THREADS), RD_THREADS, 0, out, x,
                  branch, T, C, g0, seed, drop, nquads);
        SG_CHECK_LAUNCH();
        break;
    }
}

/* ---- one shape: inputs, the reference, each variant's check ---------------------------------- */

typedef struct {
    int B, T, C;
    size_t n;
    uint64_t seed;
    Dropout drop;
    float *x, *branch, *ref;     /* host */
    unsigned char* keep;         /* the reference's keep bits */
    size_t n_kept, control_diff; /* kept elements; keep bits another seed changes */
    float *dx, *dbranch, *dzero; /* device */
} Case;

static Case case_make(int B, int T, int C, uint64_t input_seed) {
    Case s;
    s.B = B; s.T = T; s.C = C;
    s.n = (size_t)B * T * C;
    s.seed = philox_site_seed(MASTER, 3, 1, SITE_ATTN_RESID, PASS_FORWARD);
    s.drop = dropout_make(DROP_P);
    s.x = dev_host_uniform(s.n, input_seed, -1.0f, 1.0f);
    /* |branch| in [0.5, 1.5): a kept element is never 0, so a zero output means dropped */
    s.branch = dev_host_uniform(s.n, input_seed + 1, -1.0f, 1.0f);
    for (size_t i = 0; i < s.n; i++) s.branch[i] = s.branch[i] < 0 ? s.branch[i] - 0.5f : s.branch[i] + 0.5f;
    s.ref = (float*)malloc(s.n * sizeof(float));
    residual_dropout_forward_cpu(s.ref, s.x, s.branch, B, T, C, G0, s.seed, s.drop);
    s.keep = (unsigned char*)malloc(s.n);
    s.n_kept = s.control_diff = 0;
    uint64_t other = philox_site_seed(MASTER, 3, 1, SITE_MLP_RESID, PASS_FORWARD);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                s.keep[i] = (unsigned char)keep_cpu(s.seed, G0 + b, t, c, s.drop);
                s.n_kept += s.keep[i];
                s.control_diff += s.keep[i] != keep_cpu(other, G0 + b, t, c, s.drop);
            }
    s.dx = dev_upload(s.x, s.n);
    s.dbranch = dev_upload(s.branch, s.n);
    s.dzero = (float*)dev_malloc(s.n * sizeof(float));
    SG_CHECK(cudaMemset(s.dzero, 0, s.n * sizeof(float)));
    return s;
}

static void case_free(Case* s) {
    free(s->x); free(s->branch); free(s->ref); free(s->keep);
    SG_CHECK(cudaFree(s->dx)); SG_CHECK(cudaFree(s->dbranch)); SG_CHECK(cudaFree(s->dzero));
}

/* one rounding of each term: a GPU may compute x + branch * scale as one FMA, the CPU rounds twice */
#define VALUE_TOL 0x1p-22

typedef struct {
    double value_ratio;   /* worst |out - ref| / (VALUE_TOL (|x| + |branch scale|)) */
    size_t mask_diff;     /* keep bits that differ from the reference */
} Err;

static Err case_error(int k, const Case* s) {
    Err e = {0.0, 0};
    float* out = dev_poison(s->n);
    residual_dropout_variant(k, out, s->dx, s->dbranch, s->B, s->T, s->C, G0, s->seed, s->drop);
    SG_CHECK(cudaDeviceSynchronize());
    float* h = dev_download(out, s->n);
    for (size_t i = 0; i < s->n; i++) {
        double tol = VALUE_TOL * (fabs((double)s->x[i]) + fabs((double)s->branch[i] * s->drop.scale));
        double r = isfinite(h[i]) ? fabs((double)h[i] - (double)s->ref[i]) / tol : INFINITY;
        if (r > e.value_ratio) e.value_ratio = r;
    }
    /* the mask: x = 0, so out = drop(branch), zero exactly where dropped */
    SG_CHECK(cudaMemset(out, 0xff, s->n * sizeof(float)));
    residual_dropout_variant(k, out, s->dzero, s->dbranch, s->B, s->T, s->C, G0, s->seed, s->drop);
    SG_CHECK(cudaDeviceSynchronize());
    SG_CHECK(cudaMemcpy(h, out, s->n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < s->n; i++) e.mask_diff += (h[i] != 0.0f) != (s->keep[i] != 0);
    free(h);
    SG_CHECK(cudaFree(out));
    return e;
}

int main(int argc, char** argv) {
    int B = 16, T = 1024, C = 768;
#ifdef SG_EMU
    B = 2; T = 3; C = 1032;   /* more quads than a production block's 256 threads */
#endif
    DevFlag flags[] = {{"--B", &B}, {"--T", &T}, {"--C", &C}};
    DevArgs args = dev_parse(argc, argv, "residual_dropout_forward", NVARIANTS, flags, 3);

    /* validation: an awkward small shape (C = 13: a partial quad), then the timed shape */
    Case cases[2] = {case_make(3, 5, 13, 1), case_make(B, T, C, 2)};
    int valid[NVARIANTS + 1] = {0};
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k)) continue;
        if (!supported(k, C)) {
            dev_skip(OP, k, "needs C % 4 == 0");
            continue;
        }
        Err worst = {0.0, 0};
        size_t checked = 0, kept = 0, control = 0;
        for (int i = 0; i < 2; i++) {
            if (!supported(k, cases[i].C)) continue;
            Err e = case_error(k, &cases[i]);
            worst.value_ratio = fmax(worst.value_ratio, e.value_ratio);
            worst.mask_diff += e.mask_diff;
            checked += cases[i].n;
            kept += cases[i].n_kept;
            control += cases[i].control_diff;
        }
        valid[k] = dev_check(worst.value_ratio <= 1.0 && worst.mask_diff == 0, OP, k,
                             "%s: p %.1f, %zu elements (%zu kept), mask bits differing from the CPU's "
                             "%zu (another seed: %zu), worst value err %.2g of tol (2^-22 rel)",
                             NAMES[k], DROP_P, checked, kept, worst.mask_diff, control,
                             worst.value_ratio);
    }
    case_free(&cases[0]);
    (void)valid;   /* read by the timing only, which the emulation leaves out */
    if (args.validate_only) {
        case_free(&cases[1]);
        return dev_finish();
    }

#ifndef SG_EMU
    printf("%s, B %d T %d C %d, p %.1f, %d reps\n", OP, B, T, C, DROP_P, args.reps);
    char shape[64];
    snprintf(shape, sizeof(shape), "B%d_T%d_C%d", B, T, C);
    const Case* s = &cases[1];
    float* out = dev_poison(s->n);
    double bytes = 3.0 * 4.0 * (double)s->n;
    for (int k = 1; k <= NVARIANTS; k++) {
        if (!dev_selected(&args, k) || !valid[k]) continue;
        double ms = dev_time_ms(args.reps, [&]() {
            residual_dropout_variant(k, out, s->dx, s->dbranch, B, T, C, G0, s->seed, s->drop);
        });
        dev_report(OP, k, NAMES[k], shape, ms, bytes / (ms * 1e-3) / 1e9, "GB/s");
    }
    SG_CHECK(cudaFree(out));
#endif
    case_free(&cases[1]);
    return dev_finish();
}
