/* tests/cuda/bench_ops_cuda.cu — the GPU step's ops one at a time, old kernels against new, and
 * the step's GEMM problems one by one (scripts/gpu_perf_step.sh runs it; not a test).
 *
 *   build/cuda/bench_ops_cuda [--B 16] [--T 1024] [--C 768] [--V 50257] [--L 12] [--chunk 1024]
 *                             [--warmup 5] [--reps 20] [--only NAME]
 *
 * Ops (GPT-2 124M's shapes by default, bf16 activations as --precision bf16 stores them): each row
 * runs the op's public function under SEEDGPT_KERNELS=baseline (the kernels before the rewrite)
 * and with the switch unset (the new ones): --warmup calls, then --reps calls each between two
 * cudaEvents, the median. Every call takes the next of several buffer sets, enough sets that
 * together they hold at least 3 x 60 MB (the H200's L2 is 60 MB): a call never finds its inputs
 * in the cache from the call before. Inputs are random (zeros can run faster than data).
 * Each row also has its floor: the bytes the new kernels must move at the copy rate measured
 * here at start-up (a device-to-device copy, bytes read plus written), plus the FLOPs of a
 * product at --gemm-rate TFLOP/s (790 by default: an 8192^3 bf16 torch.matmul measured on an
 * H200 of this project's lender). "calls" is how often one training step at this shape runs it
 * (recompute none, dropout on): the step's share is calls x ms.
 *
 * GEMM problems: every dense product of a step (the four linears of a layer and the classifier's
 * chunk; forward, dinp, dweight), as gemm_bf16_cuda runs them (the products' cuBLASLt plans),
 * each timed alone; a JSON line each, which scripts/gpu_perf_gemm.py reads to time torch.matmul on
 * the same shapes.
 *
 * Output: a table per part, then JSON lines
 *   {"bench":"op","name":..,"calls":..,"bytes":..,"flops":..,"floor_ms":..,"old_ms":..,"new_ms":..}
 *   {"bench":"gemm","name":..,"M":..,"N":..,"K":..,"d":"fp32"|"bf16","beta":..,"calls":..,"ms":..,"tflops":..}
 *   {"bench":"copy","gbps":..}
 * In the CUDA emulation the same code runs at tiny shapes (the times are the host's, no figure).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <functional>
#include "random/philox.h"
#include "cuda/ops_cuda.h"
#include "cuda/ops_bf16_cuda.h"

#define L2_BYTES ((size_t)60 << 20)

/* ---- inputs --------------------------------------------------------------------------------- */

static __device__ inline uint32_t hash32(uint64_t i, uint32_t seed) {
    uint32_t x = (uint32_t)i * 0x9e3779b9u ^ (uint32_t)(i >> 32) ^ seed;
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

/* x[i] uniform in [lo, hi) */
__global__ void fill_f32_kernel(float* x, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = lo + (hi - lo) * (float)(hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
}
__global__ void fill_bf16_kernel(uint16_t* x, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __bfloat16_as_ushort(__float2bfloat16_rn(lo + (hi - lo) * (float)(hash32(i, seed) >> 8) * (1.0f / 16777216.0f)));
}

static uint32_t next_seed = 1;
static unsigned fill_blocks(size_t n) { size_t b = (n + 255) / 256; return b < 1 ? 1 : b > 1024 ? 1024 : (unsigned)b; }
static float* rand_f32(size_t n, float lo, float hi) {
    float* d;
    SG_CHECK(cudaMalloc((void**)&d, (n > 0 ? n : 1) * sizeof(float)));
    SG_LAUNCH(fill_f32_kernel, fill_blocks(n), 256, 0, d, n, next_seed++, lo, hi);
    SG_CHECK_LAUNCH();
    return d;
}
static void* rand_bf16(size_t n, float lo, float hi) {
    uint16_t* d;
    SG_CHECK(cudaMalloc((void**)&d, (n > 0 ? n : 1) * 2));
    SG_LAUNCH(fill_bf16_kernel, fill_blocks(n), 256, 0, d, n, next_seed++, lo, hi);
    SG_CHECK_LAUNCH();
    return d;
}

/* the buffer sets a row rotates through: enough to hold 3 x L2 together, 1 to 8 */
static int sets_for(size_t set_bytes) {
    size_t k = (3 * L2_BYTES + set_bytes - 1) / (set_bytes > 0 ? set_bytes : 1);
    return k < 1 ? 1 : k > 8 ? 8 : (int)k;
}

/* ---- timing --------------------------------------------------------------------------------- */

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

/* median ms of `reps` calls of f(set), the sets taken in turn, after `warmup` calls; under the
 * switch's `side` (NULL: unset) */
static double time_calls(const char* side, const std::function<void(int)>& f, int nsets, int warmup,
                         int reps, const std::function<void(int)>& prep = nullptr) {
    if (side != NULL) setenv("SEEDGPT_KERNELS", side, 1);
    else unsetenv("SEEDGPT_KERNELS");
    int s = 0;
    for (int w = 0; w < warmup; w++, s = (s + 1) % nsets) {
        if (prep) prep(s);
        f(s);
    }
    SG_CHECK(cudaDeviceSynchronize());
    double* t = (double*)malloc(sizeof(double) * reps);
    cudaEvent_t e0, e1;
    SG_CHECK(cudaEventCreate(&e0));
    SG_CHECK(cudaEventCreate(&e1));
    for (int r = 0; r < reps; r++, s = (s + 1) % nsets) {
        if (prep) prep(s);   /* outside the timed interval */
        SG_CHECK(cudaEventRecord(e0, 0));
        f(s);
        SG_CHECK(cudaEventRecord(e1, 0));
        SG_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        SG_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        t[r] = ms;
    }
    SG_CHECK(cudaEventDestroy(e0));
    SG_CHECK(cudaEventDestroy(e1));
    qsort(t, reps, sizeof(double), cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    free(t);
    unsetenv("SEEDGPT_KERNELS");
    return med;
}

/* the copy rate, GB/s counting bytes read plus written: a device-to-device copy of 1 GiB (of
 * 1 MiB in the emulation), the median of 10 */
static double copy_gbps(size_t bytes) {
    void *a, *b;
    SG_CHECK(cudaMalloc(&a, bytes));
    SG_CHECK(cudaMalloc(&b, bytes));
    SG_CHECK(cudaMemset(a, 1, bytes));
    double ms = time_calls(NULL, [&](int) { SG_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 1, 3, 10);
    SG_CHECK(cudaFree(a));
    SG_CHECK(cudaFree(b));
    return 2.0 * bytes / (ms * 1e6);
}

/* ---- the rows ------------------------------------------------------------------------------- */

typedef struct {
    int warmup, reps;
    double gbps, tflops;   /* the floors' rates */
    const char* only;
} Bench;

static int skipped(const Bench* b, const char* name) { return b->only != NULL && strstr(name, b->only) == NULL; }

/* one op row: old and new kernels through the same call */
static void op_row(const Bench* b, const char* name, int calls, double bytes, double flops, int nsets,
                   const std::function<void(int)>& f, const std::function<void(int)>& prep = nullptr) {
    if (skipped(b, name)) return;
    double floor_ms = bytes / (b->gbps * 1e6) + flops / (b->tflops * 1e9);
    double old_ms = time_calls("baseline", f, nsets, b->warmup, b->reps, prep);
    double new_ms = time_calls(NULL, f, nsets, b->warmup, b->reps, prep);
    printf("%-34s %5d %10.1f %9.4f %9.4f %9.4f %7.2fx %8.0f\n", name, calls, bytes / 1e6, floor_ms, old_ms,
           new_ms, old_ms / new_ms, bytes / (new_ms * 1e6));
    printf("{\"bench\":\"op\",\"name\":\"%s\",\"calls\":%d,\"bytes\":%.0f,\"flops\":%.0f,\"floor_ms\":%.5f,"
           "\"old_ms\":%.5f,\"new_ms\":%.5f}\n", name, calls, bytes, flops, floor_ms, old_ms, new_ms);
    fflush(stdout);
}

/* one GEMM problem, row-major terms: out (M, N) = a (M, K) . b (K, N) */
static void gemm_row(const Bench* b, const char* name, int calls, int M, int N, int K, int d_bf16,
                     float beta, int nsets, const std::function<void(int)>& f) {
    if (skipped(b, name)) return;
    for (int side = 0; side < 2; side++) {
        /* side 1: a product seedgpt split (split-K by seedgpt, cuda/ops_bf16_cuda.cu) again as one
         * product (SEEDGPT_KERNELS=baseline), as "gemm_unsplit": not a problem of the step's sums */
        if (side == 1) setenv("SEEDGPT_KERNELS", "baseline", 1);
        double ms = time_calls(NULL, f, nsets, b->warmup, b->reps);
        if (side == 1) unsetenv("SEEDGPT_KERNELS");
        double fl = 2.0 * M * N * K;
        char plan[256], label[96];
        gemm_bf16_describe_last_cuda(plan, sizeof plan);
        snprintf(label, sizeof label, "%s%s", name, side ? " (unsplit)" : "");
        printf("%-34s %5d %7d %7d %7d %5s %4.0f %9.4f %8.1f  %s\n", label, calls, M, N, K, d_bf16 ? "bf16" : "fp32",
               beta, ms, fl / (ms * 1e9), plan);
        printf("{\"bench\":\"%s\",\"name\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"d\":\"%s\",\"beta\":%g,\"calls\":%d,"
               "\"ms\":%.5f,\"tflops\":%.2f,\"plan\":\"%s\"}\n", side ? "gemm_unsplit" : "gemm", name, M, N, K,
               d_bf16 ? "bf16" : "fp32", beta, calls, ms, fl / (ms * 1e9), plan);
        fflush(stdout);
        if (strstr(plan, "slices") == NULL) break;   /* not split: nothing to compare */
    }
}

static int parse_int(const char* flag, const char* v) {
    char* end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > (1L << 30)) {
        fprintf(stderr, "bench_ops_cuda: %s wants a non-negative integer, got '%s'\n", flag, v);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char** argv) {
    int Bsz = 16, T = 1024, C = 768, V = 50257, L = 12, chunk = 1024;
    Bench bench = {5, 20, 0, 790, NULL};
    for (int a = 1; a < argc; a++) {
        const char* f = argv[a];
        if (a + 1 >= argc) { fprintf(stderr, "bench_ops_cuda: %s needs a value\n", f); return 2; }
        const char* v = argv[++a];
        if (!strcmp(f, "--B")) Bsz = parse_int(f, v);
        else if (!strcmp(f, "--T")) T = parse_int(f, v);
        else if (!strcmp(f, "--C")) C = parse_int(f, v);
        else if (!strcmp(f, "--V")) V = parse_int(f, v);
        else if (!strcmp(f, "--L")) L = parse_int(f, v);
        else if (!strcmp(f, "--chunk")) chunk = parse_int(f, v);
        else if (!strcmp(f, "--warmup")) bench.warmup = parse_int(f, v);
        else if (!strcmp(f, "--reps")) bench.reps = parse_int(f, v);
        else if (!strcmp(f, "--gemm-rate")) bench.tflops = parse_int(f, v);
        else if (!strcmp(f, "--only")) bench.only = v;
        else { fprintf(stderr, "bench_ops_cuda: unknown flag %s\n", f); return 2; }
    }
    if (Bsz < 1 || T < 1 || C < 8 || C % 8 || V < 1 || L < 1 || chunk < 1 || bench.reps < 1 || bench.tflops < 1) {
        fprintf(stderr, "bench_ops_cuda: want B, T, L, chunk, reps, gemm-rate >= 1 and C a multiple of 8\n");
        return 2;
    }
    const int N = Bsz * T, Vp = (V + 127) / 128 * 128, R = chunk < N ? chunk : N, C3 = 3 * C, C4 = 4 * C;
    const size_t NC = (size_t)N * C;
#ifdef SG_EMU
    const size_t copy_bytes = (size_t)1 << 20;
#else
    const size_t copy_bytes = (size_t)1 << 30;
#endif
    bench.gbps = copy_gbps(copy_bytes);
    printf("# bench_ops_cuda: B %d T %d C %d V %d (Vp %d) L %d, classifier chunk %d rows; %d warm-up, median "
           "of %d; copy %.0f GB/s (read + write), products at %.0f TFLOP/s for the floors%s\n",
           Bsz, T, C, V, Vp, L, R, bench.warmup, bench.reps, bench.gbps, bench.tflops,
#ifdef SG_EMU
           " (EMULATION: host times, no figure)"
#else
           ""
#endif
    );
    printf("{\"bench\":\"copy\",\"gbps\":%.1f}\n", bench.gbps);
    const Dropout drop = dropout_make(0.1);
    const uint64_t seed = philox_site_seed(0x5eedull, 0, 0, 2, 0);

    printf("\n%-34s %5s %10s %9s %9s %9s %8s %8s\n", "op (old: SEEDGPT_KERNELS=baseline)", "calls", "MB", "floor ms",
           "old ms", "new ms", "old/new", "new GB/s");
    {   /* residual stream rows (N, C) fp32 */
        const size_t set = 3 * NC * 4;
        const int K = sets_for(set);
        float *x[8], *br[8], *out[8];
        for (int s = 0; s < K; s++) { x[s] = rand_f32(NC, -1, 1); br[s] = rand_f32(NC, -1, 1); out[s] = rand_f32(NC, -1, 1); }
        op_row(&bench, "residual_dropout_forward", L, 3.0 * NC * 4, 0, K,
               [&](int s) { residual_dropout_forward_cuda(out[s], x[s], br[s], Bsz, T, C, 0, seed, drop); });
        op_row(&bench, "dropout_backward", 2 * L + 1, 2.0 * NC * 4, 0, K,
               [&](int s) { dropout_backward_cuda(out[s], br[s], Bsz, T, C, 0, seed, drop); });
        float *w = rand_f32(C, 0.5f, 1.5f), *bb = rand_f32(C, -0.1f, 0.1f);
        float *mean[8], *rstd[8];
        void* ln[8];
        for (int s = 0; s < K; s++) { mean[s] = rand_f32(N, -0.1f, 0.1f); rstd[s] = rand_f32(N, 0.5f, 2); ln[s] = rand_bf16(NC, -1, 1); }
        op_row(&bench, "layernorm_forward_bf16", L + 1, NC * 4.0 + NC * 2.0, 0, K,
               [&](int s) { layernorm_forward_bf16_cuda(ln[s], mean[s], rstd[s], x[s], w, bb, N, C); });
        op_row(&bench, "residual_layernorm_forward_bf16", L, 3.0 * NC * 4 + NC * 2.0, 0, K,
               [&](int s) { residual_layernorm_forward_bf16_cuda(out[s], x[s], br[s], Bsz, T, C, 0, seed, drop, ln[s],
                                                                 mean[s], rstd[s], w, bb); });
        float *dw = rand_f32(C, -1, 1), *db = rand_f32(C, -1, 1);
        op_row(&bench, "layernorm_backward", 2 * L + 1, 4.0 * NC * 4, 0, K,
               [&](int s) { layernorm_backward_cuda(out[s], dw, db, br[s], x[s], w, mean[s], rstd[s], N, C); });
        for (int s = 0; s < K; s++) { cudaFree(x[s]); cudaFree(br[s]); cudaFree(out[s]); cudaFree(mean[s]); cudaFree(rstd[s]); cudaFree(ln[s]); }
        cudaFree(w); cudaFree(bb); cudaFree(dw); cudaFree(db);
    }
    {   /* the MLP's width (N, 4C) */
        const size_t n = NC * 4, set = n * (2 + 2 + 4);
        const int K = sets_for(set);
        void *pre[8], *act[8];
        float* g[8];
        for (int s = 0; s < K; s++) { pre[s] = rand_bf16(n, -3, 3); act[s] = rand_bf16(n, -1, 1); g[s] = rand_f32(n, -1, 1); }
        op_row(&bench, "gelu_forward_bf16 (selective recompute)", 0, n * 4.0, 0, K,
               [&](int s) { gelu_forward_bf16_cuda(act[s], pre[s], n); });
        op_row(&bench, "gelu_backward_bf16", L, n * 10.0, 0, K,
               [&](int s) { gelu_backward_bf16_cuda(g[s], pre[s], g[s], n); });
        for (int s = 0; s < K; s++) { cudaFree(pre[s]); cudaFree(act[s]); cudaFree(g[s]); }
    }
    {   /* the products as the table calls them: forward (bf16 out with a bias: staged), backward */
        struct Prod { const char* name; int n, c, oc, bias, dinp, calls, bf16_out; };
        const Prod prods[] = {
            {"qkv", N, C, C3, 1, 1, L, 1}, {"attproj", N, C, C, 1, 1, L, 0}, {"fc", N, C, C4, 1, 1, L, 1},
            {"fcproj", N, C4, C, 1, 1, L, 0}};
        for (const Prod& p : prods) {
            const size_t ni = (size_t)p.n * p.c, no = (size_t)p.n * p.oc, nw = (size_t)p.oc * p.c;
            const size_t set = ni * 2 + no * (4 + 2 + 2) + ni * 4;
            const int K = sets_for(set);
            void *x[8], *w = rand_bf16(nw, -0.05f, 0.05f), *y16[8], *g16[8];
            float *bias = rand_f32(p.oc, -0.1f, 0.1f), *dout[8], *dinp[8], *dw = rand_f32(nw, -1, 1),
                  *db = rand_f32(p.oc, -1, 1);
            for (int s = 0; s < K; s++) {
                x[s] = rand_bf16(ni, -1, 1); y16[s] = rand_bf16(no, -1, 1); g16[s] = rand_bf16(no, -1, 1);
                dout[s] = rand_f32(no, -1, 1); dinp[s] = rand_f32(ni, -1, 1);
            }
            const double fl = 2.0 * p.n * p.c * p.oc;
            char name[96];
            if (p.bf16_out && p.oc == C4) {
                snprintf(name, sizeof name, "matmul_forward_gelu_bf16 %s", p.name);
                op_row(&bench, name, p.calls, no * (4.0 + 4 + 2 + 2), fl, K, [&](int s) {
                    matmul_forward_gelu_bf16_act_cuda(y16[s], g16[s], x[s], w, bias, p.n, p.c, p.oc); });
            } else if (p.bf16_out) {
                snprintf(name, sizeof name, "matmul_forward_bf16 %s", p.name);
                op_row(&bench, name, p.calls, no * (4.0 + 4 + 2), fl, K, [&](int s) {
                    matmul_forward_bf16_act_cuda(y16[s], DT_BF16, x[s], w, bias, p.n, p.c, p.oc); });
            }
            snprintf(name, sizeof name, "matmul_backward_bf16 %s", p.name);
            op_row(&bench, name, p.calls, no * (4.0 + 2), 2 * fl, K, [&](int s) {
                matmul_backward_bf16_act_cuda(dinp[s], dw, p.bias ? db : NULL, dout[s], x[s], w, p.n, p.c, p.oc); });
            for (int s = 0; s < K; s++) { cudaFree(x[s]); cudaFree(y16[s]); cudaFree(g16[s]); cudaFree(dout[s]); cudaFree(dinp[s]); }
            cudaFree(w); cudaFree(bias); cudaFree(dw); cudaFree(db);
        }
    }
    {   /* the classifier's chunk: the cross-entropy (fp32 logits in, bf16 dlogits over them out),
         * then the head's backward product on them; each call on freshly written logits */
        const size_t nl = (size_t)R * Vp, ni = (size_t)R * C, nw = (size_t)Vp * C;
        const int calls = (N + R - 1) / R, K = sets_for(nl * 4);
        float *fresh = rand_f32(nl, -4, 4), *logits[8], *loss = rand_f32(R, 0, 1), *dinp = rand_f32(ni, -1, 1),
              *dw = rand_f32(nw, -1, 1);
        int* tg;
        SG_CHECK(cudaMalloc((void**)&tg, R * sizeof(int)));
        int* htg = (int*)malloc(R * sizeof(int));
        for (int r = 0; r < R; r++) htg[r] = (int)((r * 2654435761u) % (unsigned)V);
        SG_CHECK(cudaMemcpy(tg, htg, R * sizeof(int), cudaMemcpyHostToDevice));
        free(htg);
        void *x = rand_bf16(ni, -1, 1), *w = rand_bf16(nw, -0.05f, 0.05f);
        for (int s = 0; s < K; s++) SG_CHECK(cudaMalloc((void**)&logits[s], nl * 4));
        auto refill = [&](int s) { SG_CHECK(cudaMemcpy(logits[s], fresh, nl * 4, cudaMemcpyDeviceToDevice)); };
        op_row(&bench, "crossentropy_forward_backward_bf16", calls, nl * 6.0, 0, K,
               [&](int s) { crossentropy_forward_backward_bf16_cuda(loss, logits[s], tg, 1e-4f, R, V, Vp); }, refill);
        op_row(&bench, "classifier backward: cross-entropy + head product", calls, nl * 6.0, 4.0 * R * C * Vp, K,
               [&](int s) {
                   crossentropy_forward_backward_bf16_cuda(loss, logits[s], tg, 1e-4f, R, V, Vp);
                   matmul_backward_dout_bf16_act_cuda(dinp, dw, NULL, logits[s], 2 * Vp, x, w, R, C, Vp);
               }, refill);
        for (int s = 0; s < K; s++) cudaFree(logits[s]);
        cudaFree(fresh); cudaFree(loss); cudaFree(dinp); cudaFree(dw); cudaFree(tg); cudaFree(x); cudaFree(w);
    }
    {   /* the optimizer over GPT-2's 16 tensors (model/gpt.c's order), 64-byte aligned */
        const size_t sz[16] = {(size_t)Vp * C, (size_t)T * C, (size_t)L * C, (size_t)L * C, (size_t)L * C3 * C,
                               (size_t)L * C3, (size_t)L * C * C, (size_t)L * C, (size_t)L * C, (size_t)L * C,
                               (size_t)L * C4 * C, (size_t)L * C4, (size_t)L * C * C4, (size_t)L * C, (size_t)C,
                               (size_t)C};
        size_t off[16], total = 0;
        float wd[16];
        for (int k = 0; k < 16; k++) { off[k] = total; total += (sz[k] + 15) / 16 * 16; wd[k] = 0.1f; }
        const size_t set = total * (4 * 4 + 2);
        const int K = sets_for(set);
        float *p[8], *g[8], *m[8], *v[8];
        void* a[8];
        for (int s = 0; s < K; s++) {
            p[s] = rand_f32(total, -0.1f, 0.1f); g[s] = rand_f32(total, -1, 1); m[s] = rand_f32(total, -0.1f, 0.1f);
            v[s] = rand_f32(total, 0, 0.01f); a[s] = rand_bf16(total, -1, 1);
        }
        op_row(&bench, "adamw_update_tensors (+ bf16 copy)", 1, total * 30.0, 0, K, [&](int s) {
            adamw_update_tensors_cuda(p[s], a[s], g[s], 1.0f, m[s], v[s], 16, off, sz, wd, 1e-4f, 0.9f, 0.95f, 1e-8f, 7); });
        double out[16];
        op_row(&bench, "sum_squares_tensors", 1, total * 4.0, 0, K,
               [&](int s) { sum_squares_tensors_cuda(out, g[s], 16, off, sz); });
        for (int s = 0; s < K; s++) { cudaFree(p[s]); cudaFree(g[s]); cudaFree(m[s]); cudaFree(v[s]); cudaFree(a[s]); }
    }

    /* ---- the GEMM problems: out (M, N) = a (M, K) . b (K, N) in row-major terms ---- */
    printf("\n%-34s %5s %7s %7s %7s %5s %4s %9s %8s  %s\n", "GEMM problem (gemm_bf16_cuda)", "calls", "M", "N", "K", "D",
           "beta", "ms", "TFLOP/s", "cuBLASLt's plan");
    {
        struct Prod { const char* name; int n, c, oc, bias, calls; };
        const Prod prods[] = {{"qkv", N, C, C3, 1, L}, {"attproj", N, C, C, 1, L}, {"fc", N, C, C4, 1, L},
                              {"fcproj", N, C4, C, 1, L}, {"classifier", R, C, Vp, 0, (N + R - 1) / R}};
        for (const Prod& p : prods) {
            /* the classifier's dout is the cross-entropy's bf16 dlogits over the fp32 logits: rows
             * 2 Vp apart; the layers' is the rounded copy, rows OC apart */
            const int ldg = p.bias ? p.oc : 2 * p.oc;
            const size_t ni = (size_t)p.n * p.c, no = (size_t)p.n * p.oc, nw = (size_t)p.oc * p.c;
            const int K = sets_for(ni * 2 + no * 6 + ni * 4);
            void *x[8], *g[8], *w = rand_bf16(nw, -0.05f, 0.05f);
            float *d[8], *di[8], *bias = p.bias ? rand_f32(p.oc, -0.1f, 0.1f) : NULL, *dw = rand_f32(nw, -1, 1);
            for (int s = 0; s < K; s++) {
                x[s] = rand_bf16(ni, -1, 1); g[s] = rand_bf16((size_t)p.n * ldg, -1, 1); d[s] = rand_f32(no, -1, 1);
                di[s] = rand_f32(ni, -1, 1);
            }
            char name[96];
            /* forward: out^T (OC, N) = w (OC, C) . x^T; fp32 D (a bf16 result with a bias is staged so) */
            snprintf(name, sizeof name, "%s forward", p.name);
            gemm_row(&bench, name, p.calls, p.n, p.oc, p.c, 0, 0, K, [&](int s) {
                gemm_bf16_cuda(1, 0, p.oc, p.n, p.c, w, p.c, x[s], p.c, 0.0f, d[s], 0, p.oc, bias); });
            /* dinp (N, C) = dout (N, OC) . w (OC, C) */
            snprintf(name, sizeof name, "%s dinp", p.name);
            gemm_row(&bench, name, p.calls, p.n, p.c, p.oc, 0, 0, K, [&](int s) {
                gemm_bf16_cuda(0, 0, p.c, p.n, p.oc, w, p.c, g[s], ldg, 0.0f, di[s], 0, p.c, NULL); });
            /* dweight (OC, C) += dout^T (OC, N) . x (N, C) */
            snprintf(name, sizeof name, "%s dweight", p.name);
            gemm_row(&bench, name, p.calls, p.oc, p.c, p.n, 0, 1, K, [&](int s) {
                gemm_bf16_cuda(0, 1, p.c, p.oc, p.n, x[s], p.c, g[s], ldg, 1.0f, dw, 0, p.c, NULL); });
            for (int s = 0; s < K; s++) { cudaFree(x[s]); cudaFree(g[s]); cudaFree(d[s]); cudaFree(di[s]); }
            cudaFree(w); if (bias) cudaFree(bias); cudaFree(dw);
        }
    }
    return 0;
}
