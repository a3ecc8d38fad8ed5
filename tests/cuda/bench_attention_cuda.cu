/* tests/cuda/bench_attention_cuda.cu — the speed of the CUDA flash attention on a GPU, the fp32
 * kernels (attention/flash_cuda.cu) or, with --precision bf16, the tensor-core ones
 * (attention/flash_tc.cu, through the fp32-interface wrappers the trainer calls, so the rounding of
 * q, k, v to bf16 is included): forward and backward times at one shape, and TFLOP/s counted as
 * tools/torch_sdpa_bench.py counts them (causal forward 2 * 2 * B*H*T*T*D / 2, backward 2.5 x
 * that), so the two print comparable rows (scripts/gpu_check.sh). Not a test: nvcc only.
 *   build/cuda/bench_attention_cuda [--precision fp32|bf16] [--B 8] [--H 12] [--KV H] [--T 1024]
 *                                   [--D 64] [--p 0.1] [--iters 10]
 * Prints a table, then one JSON line:
 *   {"bench":"attention_cuda","precision":..,"B":..,"H":..,"KV":..,"T":..,"D":..,"p":..,"fwd_ms":..,"bwd_ms":..,"ms":..,"tflops":..}
 */
#include "cuda/device.h"
#include <chrono>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attention/attention_cuda.h"
#include "attention/flash_tc.h"

static double now_ms(void) {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
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
    int B = 8, H = 12, KV = 0, T = 1024, D = 64, iters = 10;
    double p = 0.1;
    int bf16 = 0;
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
        else if (!strcmp(f, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
                fprintf(stderr, "bench_attention_cuda: --precision wants fp32 or bf16, got '%s'\n", v);
                return 2;
            }
            bf16 = !strcmp(v, "bf16");
        }
        else if (!strcmp(f, "--p")) {
            char* end;
            p = strtod(v, &end);
            if (*end || !(p >= 0.0 && p < 1.0)) {
                fprintf(stderr, "bench_attention_cuda: --p wants a probability in [0, 1), got '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_attention_cuda: unknown flag %s (--precision --B --H --KV --T --D --p --iters)\n", f);
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
    typedef void (*Fwd)(float*, float*, const float*, int, int, int, int, int, uint32_t, uint64_t, Dropout);
    typedef void (*Bwd)(float*, float*, const float*, const float*, const float*, const float*, int, int,
                        int, int, int, uint32_t, uint64_t, Dropout);
    const Fwd fwd = bf16 ? attention_forward_bf16_cuda : attention_forward_cuda;
    const Bwd bwd = bf16 ? attention_backward_bf16_cuda : attention_backward_cuda;
    const size_t n_scratch = bf16 ? attention_backward_scratch_floats_bf16_cuda(B, T, H, KV, D, 1)
                                  : attention_backward_scratch_floats_cuda(B, T, H, KV, D, 1);
    SG_CHECK(cudaMalloc((void**)&out, n_out * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&lse, n_lse * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&dqkv, n_qkv * sizeof(float)));
    SG_CHECK(cudaMalloc((void**)&scratch, n_scratch * sizeof(float)));

    for (int w = 0; w < 3; w++) {   /* warm up: attributes, caches, clocks */
        fwd(out, lse, qkv, B, T, H, KV, D, 0, seed, drop);
        bwd(dqkv, scratch, dout, qkv, out, lse, B, T, H, KV, D, 0, seed, drop);
    }
    SG_CHECK(cudaDeviceSynchronize());
    double t0 = now_ms();
    for (int it = 0; it < iters; it++) fwd(out, lse, qkv, B, T, H, KV, D, 0, seed, drop);
    SG_CHECK(cudaDeviceSynchronize());
    const double fwd_ms = (now_ms() - t0) / iters;
    t0 = now_ms();
    for (int it = 0; it < iters; it++)
        bwd(dqkv, scratch, dout, qkv, out, lse, B, T, H, KV, D, 0, seed, drop);
    SG_CHECK(cudaDeviceSynchronize());
    const double bwd_ms = (now_ms() - t0) / iters;
    const double ms = fwd_ms + bwd_ms;

    const double fwd_flop = 2.0 * 2.0 * B * H * (double)T * T * D / 2.0;
    const double tf_fwd = fwd_flop / (fwd_ms * 1e-3) / 1e12;
    const double tf_bwd = 2.5 * fwd_flop / (bwd_ms * 1e-3) / 1e12;
    const double tflops = 3.5 * fwd_flop / (ms * 1e-3) / 1e12;

    printf("seedgpt CUDA attention, %s, causal: B %d, H %d (kv %d), T %d, D %d, dropout %g, %d iters\n",
           bf16 ? "bf16 tensor cores" : "fp32", B, H, KV, T, D, p, iters);
    printf("  %-10s %10s %10s\n", "pass", "ms", "TFLOP/s");
    printf("  %-10s %10.3f %10.2f\n", "forward", fwd_ms, tf_fwd);
    printf("  %-10s %10.3f %10.2f\n", "backward", bwd_ms, tf_bwd);
    printf("  %-10s %10.3f %10.2f\n", "fwd+bwd", ms, tflops);
    printf("{\"bench\":\"attention_cuda\",\"precision\":\"%s\",\"B\":%d,\"H\":%d,\"KV\":%d,\"T\":%d,\"D\":%d,\"p\":%g,"
           "\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"ms\":%.3f,\"tflops\":%.2f}\n",
           bf16 ? "bf16" : "fp32", B, H, KV, T, D, p, fwd_ms, bwd_ms, ms, tflops);
    SG_CHECK(cudaFree(qkv)); SG_CHECK(cudaFree(dout)); SG_CHECK(cudaFree(out));
    SG_CHECK(cudaFree(lse)); SG_CHECK(cudaFree(dqkv)); SG_CHECK(cudaFree(scratch));
    return 0;
}
