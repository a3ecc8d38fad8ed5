/* tests/cuda/bench_attention_cuda.cu — the speed of the CUDA flash attention on a GPU: the fp32
 * kernels (attention/flash_cuda.cu); with --precision bf16 the tensor-core ones through the
 * fp32-interface wrappers (q, k, v rounded to bf16 at each call, as dev/cuda does); with
 * --precision bf16act the tensor-core ones as the trainer's bf16 table calls them (qkv and o in
 * bf16 where they lie, dout fp32). Forward and backward times at one shape, each the median of
 * --iters timed calls (CUDA events around each call, after --warmup calls, 3 by default), and TFLOP/s counted
 * as tools/torch_sdpa_bench.py counts them (causal forward 2 * 2 * B*H*T*T*D / 2, backward 2.5 x
 * that), so the two print comparable rows (scripts/gpu_check.sh, scripts/gpu_perf.sh). The
 * tensor-core runs name the kernels that ran (SEEDGPT_KERNELS: new or baseline; the backward:
 * fused, split or baseline, SEEDGPT_ATTN_BACKWARD) and print a hash
 * of the output's bits (o and dqkv, FNV-1a 64), so a script can tell whether two kernel sets gave
 * the same bits at the timed shape. Not a test.
 *   build/cuda/bench_attention_cuda [--precision fp32|bf16|bf16act] [--B 8] [--H 12] [--KV H]
 *                                   [--T 1024] [--D 64] [--p 0.1] [--iters 10] [--warmup 3]
 * Prints a table, then one JSON line:
 *   {"bench":"attention_cuda","precision":..,"kernels":..,"backward":..,"B":..,"H":..,"KV":..,"T":..,"D":..,"p":..,
 *    "fwd_ms":..,"bwd_ms":..,"ms":..,"tflops":..,"out_hash":..,"dqkv_hash":..}
 */
#include "cuda/device.h"
#include <algorithm>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attention/attention_cuda.h"
#include "attention/flash_tc.h"
#include "util/bf16.h"

/* FNV-1a 64 over n bytes of device memory */
static unsigned long long dev_hash(const void* d, size_t bytes) {
    unsigned char* h = (unsigned char*)malloc(bytes);
    SG_CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    unsigned long long x = 1469598103934665603ULL;
    for (size_t i = 0; i < bytes; i++) x = (x ^ h[i]) * 1099511628211ULL;
    free(h);
    return x;
}

/* the median time of `iters` calls of f, each between two CUDA events */
template <class F>
static double median_ms(int iters, F f) {
    cudaEvent_t a, b;
    SG_CHECK(cudaEventCreate(&a));
    SG_CHECK(cudaEventCreate(&b));
    double* t = (double*)malloc((size_t)iters * sizeof(double));
    for (int it = 0; it < iters; it++) {
        SG_CHECK(cudaEventRecord(a));
        f();
        SG_CHECK(cudaEventRecord(b));
        SG_CHECK(cudaEventSynchronize(b));
        float ms;
        SG_CHECK(cudaEventElapsedTime(&ms, a, b));
        t[it] = ms;
    }
    std::sort(t, t + iters);
    const double m = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    free(t);
    SG_CHECK(cudaEventDestroy(a));
    SG_CHECK(cudaEventDestroy(b));
    return m;
}

static int parse_int(const char* flag, const char* v) {
    char* end;
    long x = strtol(v, &end, 10);
    if (*end || x < 1 || x > (1L << 30)) {
        fprintf(stderr, "bench_attention_cuda: %s wants a positive integer, got '%s'\n", flag, v);
        exit(2);
    }
    return (int)x;
}

static float* dev_random(size_t n, uint64_t seed) {
    float* h = (float*)malloc(n * sizeof(float));
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {   /* uniform in [-1, 1): the timing does not care */
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        h[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
    }
    float* d = NULL;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

int main(int argc, char** argv) {
    int B = 8, H = 12, KV = 0, T = 1024, D = 64, iters = 10, warmup = 3;
    double p = 0.1;
    int bf16 = 0, act = 0;
    for (int a = 1; a < argc; a++) {
        if (a + 1 >= argc) {
            fprintf(stderr, "bench_attention_cuda: %s needs a value\n", argv[a]);
            return 2;
        }
        const char* f = argv[a];
        const char* v = argv[++a];
        if (!strcmp(f, "--B")) B = parse_int(f, v);
        else if (!strcmp(f, "--H")) H = parse_int(f, v);
        else if (!strcmp(f, "--KV")) KV = parse_int(f, v);
        else if (!strcmp(f, "--T")) T = parse_int(f, v);
        else if (!strcmp(f, "--D")) D = parse_int(f, v);
        else if (!strcmp(f, "--iters")) iters = parse_int(f, v);
        else if (!strcmp(f, "--warmup")) warmup = !strcmp(v, "0") ? 0 : parse_int(f, v);
        else if (!strcmp(f, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "bf16act")) {
                fprintf(stderr, "bench_attention_cuda: --precision wants fp32, bf16 or bf16act, got '%s'\n", v);
                return 2;
            }
            bf16 = strcmp(v, "fp32") != 0;
            act = !strcmp(v, "bf16act");
        }
        else if (!strcmp(f, "--p")) {
            char* end;
            p = strtod(v, &end);
            if (*end || !(p >= 0.0 && p < 1.0)) {
                fprintf(stderr, "bench_attention_cuda: --p wants a probability in [0, 1), got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_attention_cuda: unknown flag %s (--precision --B --H --KV --T --D --p --iters --warmup)\n", f);
            return 2;
        }
    }
    if (KV == 0) KV = H;
    if (H % KV != 0) {
        fprintf(stderr, "bench_attention_cuda: --KV %d must divide --H %d\n", KV, H);
        return 2;
    }
    const size_t n_qkv = (size_t)B * T * (H + 2 * KV) * D, n_out = (size_t)B * T * H * D;
    const size_t n_lse = (size_t)B * H * T;
    const Dropout drop = dropout_make(p);
    const uint64_t seed = 0x5eed5eed5eed5eedULL;
    float* qkv = dev_random(n_qkv, 1);
    float* dout = dev_random(n_out, 2);
    float *out, *lse, *dqkv, *scratch;
    void *qkv16 = NULL, *out16 = NULL;
    typedef void (*Fwd)(float*, float*, const float*, int, int, int, int, int, uint32_t, uint64_t, Dropout);
    typedef void (*Bwd)(float*, float*, const float*, const float*, const float*, const float*, int, int,
                        int, int, int, uint32_t, uint64_t, Dropout);
    const Fwd fwd = bf16 ? attention_forward_bf16_cuda : attention_forward_cuda;
    const Bwd bwd = bf16 ? attention_backward_bf16_cuda : attention_backward_cuda;
    const size_t n_scratch = act ? attention_backward_act_scratch_floats_bf16_cuda(B, T, H, KV, D, 1)
                             : bf16 ? attention_backward_scratch_floats_bf16_cuda(B, T, H, KV, D, 1)
                                    : attention_backward_scratch_floats_cuda(B, T, H, KV, D, 1);
    SG_CHECK(cudaMalloc((void**)&out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&dqkv, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&scratch, n_scratch * sizeof(float)));
    if (act) {   /* the bf16 table's storage: qkv rounded once on the host, o written by the forward */
        float* h = (float*)malloc(n_qkv * sizeof(float));
        uint16_t* b16 = (uint16_t*)malloc(n_qkv * sizeof(uint16_t));
        SG_CHECK(cudaMemcpy(h, qkv, n_qkv * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t e = 0; e < n_qkv; e++) b16[e] = sg_bf16_from_float(h[e]);
        SG_CHECK(cudaMalloc(&qkv16, n_qkv * sizeof(uint16_t)));
        SG_CHECK(cudaMalloc(&out16, n_out * sizeof(uint16_t)));
        SG_CHECK(cudaMemcpy(qkv16, b16, n_qkv * sizeof(uint16_t), cudaMemcpyHostToDevice));
        free(h); free(b16);
        attention_reserve_forward_act_scratch_bf16_cuda(B, T, H, KV, D);
    }
    auto run_fwd = [&]() {
        if (act) attention_forward_bf16_act_cuda(out16, lse, qkv16, B, T, H, KV, D, 0, seed, drop);
        else fwd(out, lse, qkv, B, T, H, KV, D, 0, seed, drop);
    };
    auto run_bwd = [&]() {
        if (act) attention_backward_bf16_act_cuda(dqkv, scratch, dout, qkv16, out16, lse, B, T, H, KV, D, 0, seed, drop);
        else bwd(dqkv, scratch, dout, qkv, out, lse, B, T, H, KV, D, 0, seed, drop);
    };

    for (int w = 0; w < warmup; w++) {   /* warm up: attributes, caches, clocks */
        run_fwd();
        run_bwd();
    }
    SG_CHECK(cudaDeviceSynchronize());
    const double fwd_ms = median_ms(iters, run_fwd);
    const double bwd_ms = median_ms(iters, run_bwd);
    SG_CHECK(cudaDeviceSynchronize());
    const double ms = fwd_ms + bwd_ms;
    const unsigned long long out_hash = act ? dev_hash(out16, n_out * sizeof(uint16_t)) : dev_hash(out, n_out * sizeof(float));
    const unsigned long long dqkv_hash = dev_hash(dqkv, n_qkv * sizeof(float));
    const char* kernels = bf16 ? attention_tc_kernels() : "fp32";
    const char* backward = bf16 && attention_tc_supports_hd(D) ? attention_tc_backward_kernels(D) : "fp32";

    const double fwd_flop = 2.0 * 2.0 * B * H * (double)T * T * D / 2.0;
    const double tf_fwd = fwd_flop / (fwd_ms * 1e-3) / 1e12;
    const double tf_bwd = 2.5 * fwd_flop / (bwd_ms * 1e-3) / 1e12;
    const double tflops = 3.5 * fwd_flop / (ms * 1e-3) / 1e12;

    const char* what = act ? "bf16 tensor cores, the bf16 table's entries" : bf16 ? "bf16 tensor cores, fp32 interface" : "fp32";
    printf("seedgpt CUDA attention, %s (kernels: %s, backward: %s), causal: B %d, H %d (kv %d), T %d, D %d, "
           "dropout %g, median of %d\n", what, kernels, backward, B, H, KV, T, D, p, iters);
    printf("  %-10s %10s %10s\n", "pass", "ms", "TFLOP/s");
    printf("  %-10s %10.3f %10.2f\n", "forward", fwd_ms, tf_fwd);
    printf("  %-10s %10.3f %10.2f\n", "backward", bwd_ms, tf_bwd);
    printf("  %-10s %10.3f %10.2f\n", "fwd+bwd", ms, tflops);
    printf("{\"bench\":\"attention_cuda\",\"precision\":\"%s\",\"kernels\":\"%s\",\"backward\":\"%s\",\"B\":%d,"
           "\"H\":%d,\"KV\":%d,\"T\":%d,\"D\":%d,\"p\":%g,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"ms\":%.4f,\"tflops\":%.2f,"
           "\"out_hash\":\"%016llx\",\"dqkv_hash\":\"%016llx\"}\n",
           act ? "bf16act" : bf16 ? "bf16" : "fp32", kernels, backward, B, H, KV, T, D, p, fwd_ms, bwd_ms, ms, tflops,
           out_hash, dqkv_hash);
    SG_CHECK(cudaFree(qkv)); SG_CHECK(cudaFree(dout)); SG_CHECK(cudaFree(out));
    SG_CHECK(cudaFree(lse)); SG_CHECK(cudaFree(dqkv)); SG_CHECK(cudaFree(scratch));
    if (act) { SG_CHECK(cudaFree(qkv16)); SG_CHECK(cudaFree(out16)); }
    return 0;
}
