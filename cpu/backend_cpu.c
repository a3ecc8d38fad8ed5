/* cpu/backend_cpu.c — the CPU backend's memory ops and what it says of itself
 * (cpu/backend_cpu.h); model/backend.c puts them in the CPU tables. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#ifndef SEEDGPT_NO_CBLAS
#include <cblas.h>
void openblas_set_num_threads(int num_threads);  /* OpenBLAS's own; not in every cblas.h */
#endif
#include "cpu/backend_cpu.h"
#include "cpu/gemm_cpu.h"
#include "cpu/peak.h"

void copy_cpu(void* dst, const void* src, size_t bytes) {
    if (dst != src && bytes > 0) memcpy(dst, src, bytes);
}

/* Fills are mostly zero_grad's, over every gradient (500 MB at GPT-2 124M): on all threads, and
 * above FILL_STREAM_FLOATS with non-temporal stores, which skip reading each line before writing
 * it and leave the caches to data that fits them (a 124M zero_grad on 2 cores: 53 ms serial, 22 ms
 * on both threads, 12 ms streamed). Small fills stay a plain loop. */
#define FILL_PARALLEL_FLOATS ((size_t)1 << 16)
#define FILL_STREAM_FLOATS ((size_t)16 << 20)   /* 64 MiB: past what a core's caches hold */
void fill_cpu(float* x, size_t n, float value) {
    if (n < FILL_PARALLEL_FLOATS) {
        for (size_t i = 0; i < n; i++) x[i] = value;
        return;
    }
    #pragma omp parallel
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const size_t lo = n * (size_t)t / (size_t)nt, hi = n * (size_t)(t + 1) / (size_t)nt;
        size_t i = lo;
#if defined(__x86_64__) && defined(__GNUC__)
        if (n >= FILL_STREAM_FLOATS) {
            for (; i < hi && ((uintptr_t)(x + i) & 15) != 0; i++) x[i] = value;
            const __m128 v = _mm_set1_ps(value);
            for (; i + 4 <= hi; i += 4) _mm_stream_ps(x + i, v);
            _mm_sfence();   /* the streamed stores before the region's barrier */
        }
#endif
        for (; i < hi; i++) x[i] = value;
    }
}

size_t count_differ_cpu(const float* a, const float* b, size_t n) {
    if (memcmp(a, b, n * sizeof(float)) == 0) return 0;
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return differ;
}

void copy_rows_cpu(float* dst, size_t dst_stride, const float* src, size_t src_stride,
                   size_t rows, size_t width) {
    #pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * dst_stride, src + r * src_stride, width * sizeof(float));
}

/* OpenBLAS's sgemm rate in GFLOP/s at `threads`: 512^3 products for about 0.2 s, the best of
 * them; 0 in a build without OpenBLAS. A reference beside the measured peak (MFU reads against
 * the peak, not this). Its buffers are not the model's: plain malloc, so the run's memory
 * high-water mark (model/mem.h) never counts them. OpenBLAS is called nowhere else, so its
 * thread count is set here. */
static double sgemm_gflops(int threads) {
#ifndef SEEDGPT_NO_CBLAS
    enum { M = 512 };
    openblas_set_num_threads(threads);
    float* a = malloc(sizeof(float) * M * M);
    float* b = malloc(sizeof(float) * M * M);
    float* c = malloc(sizeof(float) * M * M);
    if (a == NULL || b == NULL || c == NULL) { free(a); free(b); free(c); return 0.0; }
    for (size_t i = 0; i < (size_t)M * M; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    double best = 0.0, start = omp_get_wtime();
    do {
        double t0 = omp_get_wtime();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, M, 1.0f, a, M, b, M, 0.0f, c, M);
        double s = omp_get_wtime() - t0;
        double g = 2.0 * M * M * M / (s * 1e9);
        if (g > best) best = g;
    } while (omp_get_wtime() - start < 0.2);
    free(a); free(b); free(c);
    return best;
#else
    (void)threads;
    return 0.0;
#endif
}

double peak_gflops_cpu(const Backend* be, int threads, char* line, size_t cap) {
    (void)be;
    double g = peak_fp32_gflops(threads, 0.2);
    char ref[96] = "";
#ifndef SEEDGPT_NO_CBLAS
    snprintf(ref, sizeof(ref), "; OpenBLAS sgemm %.1f GFLOP/s for reference", sgemm_gflops(threads));
#endif
    snprintf(line, cap, "peak: fp32 FMA %.1f GFLOP/s measured on this machine (%s, %d threads%s; "
             "MFU is against it; --peak-gflops X to set)", g,
             peak_path_name(peak_fp32_path()), threads, ref);
    return g;
}

void peak_report_cpu(FILE* f, int threads, double seconds, char* json, size_t cap) {
    PeakPath path = peak_fp32_path();
    double fp32 = peak_fp32_gflops(threads, seconds);
    int has_bf16 = peak_path_supported(PEAK_AVX512_BF16);
    double bf16 = has_bf16 ? peak_bf16_gflops(threads, seconds) : 0.0;
    fprintf(f, "  fp32 FMA         %10.1f GFLOP/s  (%s; the CPU's MFU yardstick)\n", fp32,
            peak_path_name(path));
    if (has_bf16)
        fprintf(f, "  bf16 dot product %10.1f GFLOP/s  (avx512bf16, VDPBF16PS: bf16 products, fp32 "
                "sums)\n", bf16);
    else
        fprintf(f, "  bf16 dot product %10s            (this CPU has no AVX512_BF16)\n", "-");
    double sgemm = sgemm_gflops(threads);
#ifndef SEEDGPT_NO_CBLAS
    fprintf(f, "  OpenBLAS sgemm   %10.1f GFLOP/s  (512^3, for reference: %.0f%% of the fp32 peak)\n",
            sgemm, fp32 > 0 ? 100.0 * sgemm / fp32 : 0.0);
#endif
    size_t used = strlen(json);
    if (used < cap)
        snprintf(json + used, cap - used, ",\"fp32_path\":\"%s\",\"fp32_gflops\":%.3f,"
                 "\"bf16_gflops\":%.3f", peak_path_name(path), fp32, bf16);
    used = strlen(json);
    if (sgemm > 0 && used < cap) snprintf(json + used, cap - used, ",\"sgemm_gflops\":%.3f", sgemm);
}

void describe_bf16_cpu(char* line, size_t cap) {
    GemmBf16Path gp = gemm_bf16_path_selected();
    snprintf(line, cap, "bf16: products through gemm_bf16 on the %s path (%s), activations that are "
             "operands in bf16", gemm_bf16_path_name(gp),
             gp == GEMM_BF16_AVX512BF16 ? "VDPBF16PS"
             : gp == GEMM_BF16_AVX512F ? "the bf16 widened to fp32 FMAs, where VDPBF16PS is absent "
                                         "or half the FMA rate; the same bits"
                                       : "this CPU has no AVX-512, or SEEDGPT_GEMM_BF16 chose it; "
                                         "the same bits");
}

void describe_fp16_cpu(char* line, size_t cap) {
    snprintf(line, cap, "fp16: products through gemm_f32 on the %s path, their fp16 operands widened "
             "to fp32 (exact), activations that are operands in fp16, dynamic loss scaling",
             gemm_path_name(gemm_path_selected()));
}
