/* tests/bench_gemm.c — seedgpt's GEMM (cpu/gemm_cpu.c) against OpenBLAS's cblas_sgemm on the
 * products of GPT-2 small's matmuls (C = 768), forward and both backward products, at two batch
 * sizes; beside them seedgpt's bf16 product (cpu/gemm_bf16_cpu.c: bf16 operands, fp32 sums) on
 * the same shapes. Prints a table and one JSON line per shape. Not a test: the numbers are the
 * machine's.
 *
 *   build/bench_gemm [--threads N (2)] [--reps N (5)]
 *   build/bench_gemm --packing [--threads N]   the packing buffers instead (no timing): each
 *       product of GPT-2 124M, fp32, bf16 operands with an fp32 result, and (forward) a bf16
 *       result, one call each, on the paths SEEDGPT_GEMM / SEEDGPT_GEMM_BF16 select
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu/gemm_cpu.h"
#include "util/bf16.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static float* rand_buf(size_t n, unsigned* s) {
    float* p = aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
    for (size_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        p[i] = (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

static uint16_t* to_bf16(const float* x, size_t n) {
    uint16_t* p = aligned_alloc(64, ((n * sizeof(uint16_t)) + 63) & ~(size_t)63);
    for (size_t i = 0; i < n; i++) p[i] = sg_bf16_from_float(x[i]);
    return p;
}

typedef enum { FWD, DINP, DW } Kind;  /* out = inp.W^T; dinp = dout.W; dW += dout^T.inp */
static const char* kind_name[] = {"fwd  out=x.W^T", "bwd  dx=dy.W", "bwd  dW+=dy^T.x"};

/* One product of matmul (rows N, in C, out OC), by seedgpt (which 0) or OpenBLAS (which 1). */
static void run(int which, Kind kind, int N, int C, int OC, const float* x, const float* w,
                const float* dy, float* out) {
    if (kind == FWD) {
        if (which == 0) gemm_f32(N, OC, C, x, C, 1, w, 1, C, 0, out, OC);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, x, C, w, C,
                         0.0f, out, OC);
    } else if (kind == DINP) {
        if (which == 0) gemm_f32(N, C, OC, dy, OC, 1, w, C, 1, 0, out, C);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dy, OC, w, C,
                         0.0f, out, C);
    } else {
        if (which == 0) gemm_f32(OC, C, N, dy, 1, OC, x, C, 1, 1, out, C);
        else cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dy, OC, x, C,
                         1.0f, out, C);
    }
}

/* The same product by seedgpt's bf16 GEMM, on bf16 copies of the operands. */
static void run_bf16(Kind kind, int N, int C, int OC, const uint16_t* x, const uint16_t* w,
                     const uint16_t* dy, float* out) {
    if (kind == FWD) gemm_bf16(N, OC, C, x, C, 1, w, 1, C, 0, out, OC);
    else if (kind == DINP) gemm_bf16(N, C, OC, dy, OC, 1, w, C, 1, 0, out, C);
    else gemm_bf16(OC, C, N, dy, 1, OC, x, C, 1, 1, out, C);
}

static double mib(size_t bytes) { return bytes / 1048576.0; }

/* One row of the packing table: what the last call of one GEMM packed. */
static void packing_row(const char* product, int N, int C, int OC, const char* kind, GemmPacking p) {
    static const char* driver[] = {"direct", "A-blocked", "B-blocked"};
    const size_t total = p.shared_bytes + (size_t)p.threads * p.thread_bytes;
    printf("%-18s %5d %5d %5d %-10s %-9s %6d %6d %9.2f %9.2f %9.2f\n", product, N, C, OC, kind,
           driver[p.driver], p.chunks, p.row_blocks, mib(p.shared_bytes), mib(p.thread_bytes),
           mib(total));
    printf("{\"bench\":\"gemm_packing\",\"product\":\"%s\",\"N\":%d,\"C\":%d,\"OC\":%d,"
           "\"kind\":\"%s\",\"driver\":\"%s\",\"chunks\":%d,\"row_blocks\":%d,"
           "\"shared_bytes\":%zu,\"thread_bytes\":%zu,\"threads\":%d,\"total_bytes\":%zu}\n",
           product, N, C, OC, kind, driver[p.driver], p.chunks, p.row_blocks, p.shared_bytes,
           p.thread_bytes, p.threads, total);
}

/* The packing buffers of GPT-2 124M's products (C 768; the layers' at 256 and 2048 rows, the
 * classifier's at 256 rows and at 1024, its smallest default chunk; vocabulary 50304), as the CPU
 * ops call the GEMMs: fp32; bf16 operands with an fp32 result (the backward's gradient fp32,
 * rounded as it is packed); a bf16 result with a bias (forward). One call each: sizes, not
 * speed. */
static int packing_table(int threads) {
    const int shapes[][3] = {{256, 768, 2304}, {256, 768, 768}, {256, 768, 3072}, {256, 3072, 768},
                             {2048, 768, 2304}, {2048, 768, 768}, {2048, 768, 3072},
                             {2048, 3072, 768}, {256, 768, 50304}, {1024, 768, 50304}};
                             /* rows N, in C, out OC */
    printf("packing buffers per product: fp32 gemm (%s), bf16 gemm (%s), %d threads; MiB\n",
           gemm_path_name(gemm_path_selected()), gemm_bf16_path_name(gemm_bf16_path_selected()),
           threads);
    printf("%-18s %5s %5s %5s %-10s %-9s %6s %6s %9s %9s %9s\n", "product", "N", "C", "OC", "kind",
           "driver", "chunks", "blocks", "shared", "thread", "total");
    unsigned seed = 1;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        const int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float* x = rand_buf((size_t)N * C, &seed);
        float* w = rand_buf((size_t)OC * C, &seed);
        float* dy = rand_buf((size_t)N * OC, &seed);
        float* bias = rand_buf((size_t)OC, &seed);
        size_t outn = (size_t)N * OC > (size_t)OC * C ? (size_t)N * OC : (size_t)OC * C;
        if ((size_t)N * C > outn) outn = (size_t)N * C;
        float* out = rand_buf(outn, &seed);
        uint16_t* xb = to_bf16(x, (size_t)N * C);
        uint16_t* wb = to_bf16(w, (size_t)OC * C);
        uint16_t* ob = malloc(sizeof(uint16_t) * (size_t)N * OC);
        for (Kind k = FWD; k <= DW; k++) {
            run(0, k, N, C, OC, x, w, dy, out);
            packing_row(kind_name[k], N, C, OC, "fp32", gemm_f32_last_packing());
            if (k == FWD) gemm_bf16(N, OC, C, xb, C, 1, wb, 1, C, 0, out, OC);
            else if (k == DINP) gemm_bf16_ex(N, C, OC, dy, 1, OC, 1, wb, C, 1, 0, out, C, NULL, NULL);
            else gemm_bf16_ex(OC, C, N, dy, 1, 1, OC, xb, C, 1, 1, out, C, NULL, NULL);
            packing_row(kind_name[k], N, C, OC, "bf16>fp32", gemm_bf16_last_packing());
            if (k == FWD) {
                gemm_bf16_ex(N, OC, C, xb, 0, C, 1, wb, 1, C, 0, NULL, OC, ob, bias);
                packing_row(kind_name[k], N, C, OC, "bf16>bf16", gemm_bf16_last_packing());
            }
        }
        free(x); free(w); free(dy); free(bias); free(out); free(xb); free(wb); free(ob);
    }
    return 0;
}

int main(int argc, char** argv) {
    int threads = 2, reps = 5, packing = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--packing") == 0) packing = 1;
        else { fprintf(stderr, "bench_gemm: unknown argument %s\n", argv[i]); return 1; }
    }
    if (threads < 1 || reps < 1) { fprintf(stderr, "bench_gemm: --threads and --reps >= 1\n"); return 1; }
    omp_set_num_threads(threads);
    if (packing) return packing_table(threads);
    const int rows[] = {256, 2048};                 /* 4 x 64 and 8 x 256 tokens */
    const int shapes[][2] = {{768, 2304}, {768, 3072}, {768, 768}, {3072, 768}};  /* C, OC */
    printf("seedgpt gemm (%s) vs cblas_sgemm, and seedgpt's bf16 gemm (%s), %d threads, best of "
           "%d; GFLOP/s\n", gemm_path_name(gemm_path_selected()),
           gemm_bf16_path_name(gemm_bf16_path_selected()), threads, reps);
    printf("%-18s %5s %5s %5s %9s %9s %6s %9s %9s\n", "product", "N", "C", "OC", "seedgpt", "openblas",
           "ratio", "bf16", "bf16/f32");
    unsigned seed = 1;
    for (int r = 0; r < 2; r++)
        for (int s = 0; s < 4; s++) {
            int N = rows[r], C = shapes[s][0], OC = shapes[s][1];
            float* x = rand_buf((size_t)N * C, &seed);
            float* w = rand_buf((size_t)OC * C, &seed);
            float* dy = rand_buf((size_t)N * OC, &seed);
            size_t outn = (size_t)N * OC > (size_t)OC * C ? (size_t)N * OC : (size_t)OC * C;
            if ((size_t)N * C > outn) outn = (size_t)N * C;
            float* out = rand_buf(outn, &seed);
            uint16_t* xb = to_bf16(x, (size_t)N * C);
            uint16_t* wb = to_bf16(w, (size_t)OC * C);
            uint16_t* dyb = to_bf16(dy, (size_t)N * OC);
            for (Kind k = FWD; k <= DW; k++) {
                double flops = 2.0 * N * C * OC, best[3] = {1e30, 1e30, 1e30};
                for (int rep = 0; rep < reps; rep++)
                    for (int which = 0; which < 3; which++) {   /* the three alternate */
                        double t0 = now();
                        if (which < 2) run(which, k, N, C, OC, x, w, dy, out);
                        else run_bf16(k, N, C, OC, xb, wb, dyb, out);
                        double t = now() - t0;
                        if (t < best[which]) best[which] = t;
                    }
                double g0 = flops / best[0] * 1e-9, g1 = flops / best[1] * 1e-9;
                double g2 = flops / best[2] * 1e-9;
                printf("%-18s %5d %5d %5d %9.1f %9.1f %6.2f %9.1f %9.2f\n", kind_name[k], N, C, OC,
                       g0, g1, g0 / g1, g2, g2 / g0);
                printf("{\"bench\":\"gemm\",\"product\":\"%s\",\"N\":%d,\"C\":%d,\"OC\":%d,"
                       "\"threads\":%d,\"seedgpt_gflops\":%.2f,\"openblas_gflops\":%.2f,"
                       "\"seedgpt_bf16_gflops\":%.2f}\n",
                       k == FWD ? "fwd" : k == DINP ? "dinp" : "dweight", N, C, OC, threads, g0,
                       g1, g2);
            }
            free(x); free(w); free(dy); free(out); free(xb); free(wb); free(dyb);
        }
    return 0;
}
