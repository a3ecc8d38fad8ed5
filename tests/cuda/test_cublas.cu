/* tests/cuda/test_cublas.cu — the cuBLAS call conventions seedgpt relies on, against a float64
 * loop on the host: cublasSgemm is column-major, so a row-major (M, N) = (M, K) . (K, N) product
 * is asked for as its transpose. All four transpose combinations, leading dimensions larger than
 * the rows (sub-matrices), beta = 0 and beta = 1, odd sizes.
 * On a real GPU this checks the real cuBLAS (scripts/gpu_check.sh runs it first); in the
 * emulation (make test-cuda-emu) it checks the emulated one, which routes to the CPU GEMM. The
 * two were written from the same reading of the cuBLAS documentation, so this is the test that
 * ties them together.
 */
#include "cuda/device.h"
#include <math.h>
#include <string.h>
#include "tests/test.h"

/* C (column-major, ldc) = alpha op(A) op(B) + beta C, in double, op given by ta/tb */
static void ref_gemm(int ta, int tb, int m, int n, int k, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc, double* out) {
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
                double b = tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
                s += a * b;
            }
            out[i + (size_t)j * ldc] = alpha * s + beta * (double)C[i + (size_t)j * ldc];
        }
    }
}

static float* dev_copy(const float* h, size_t n) {
    float* d;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    SG_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

int main(void) {
    cublasHandle_t h;
    SG_CUBLAS_CHECK(cublasCreate(&h));
    SG_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));   /* true fp32: no TF32 */
    const int shapes[3][3] = {{17, 33, 65}, {64, 48, 96}, {1, 31, 7}};
    for (int s = 0; s < 3; s++) {
        for (int combo = 0; combo < 8; combo++) {
            int ta = combo & 1, tb = (combo >> 1) & 1, accumulate = (combo >> 2) & 1;
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            /* stored shapes (column-major): A is m x k (or k x m transposed), padded rows */
            int arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
            int lda = arows + 3, ldb = brows + 5, ldc = m + 2;
            size_t na = (size_t)lda * acols, nb = (size_t)ldb * bcols, nc = (size_t)ldc * n;
            float* A = (float*)malloc(na * sizeof(float));
            float* B = (float*)malloc(nb * sizeof(float));
            float* C = (float*)malloc(nc * sizeof(float));
            double* want = (double*)malloc(nc * sizeof(double));
            for (size_t i = 0; i < na; i++) A[i] = (float)(test_uniform() - 0.5);
            for (size_t i = 0; i < nb; i++) B[i] = (float)(test_uniform() - 0.5);
            for (size_t i = 0; i < nc; i++) C[i] = (float)(test_uniform() - 0.5);
            float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
            ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, want);
            float *dA = dev_copy(A, na), *dB = dev_copy(B, nb), *dC = dev_copy(C, nc);
            SG_CUBLAS_CHECK(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
            float* got = (float*)malloc(nc * sizeof(float));
            SG_CHECK(cudaMemcpy(got, dC, nc * sizeof(float), cudaMemcpyDeviceToHost));
            /* the padding rows of C (i >= m) must be untouched */
            double num = 0, den = 0;
            int pad_touched = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < ldc; i++) {
                    size_t x = i + (size_t)j * ldc;
                    if (i >= m) { pad_touched |= memcmp(&got[x], &C[x], sizeof(float)) != 0; continue; }
                    num += (got[x] - want[x]) * (got[x] - want[x]);
                    den += want[x] * want[x];
                }
            double err = sqrt(num / den);
            char name[96];
            snprintf(name, sizeof(name), "cublas_sgemm_%s%s_beta%d_%dx%dx%d_matches_float64",
                     ta ? "T" : "N", tb ? "T" : "N", accumulate, m, n, k);
            expect(err <= 1e-6 && !pad_touched, name,
                   "rel err %.2e (lda %d ldb %d ldc %d), padding of C %s", err, lda, ldb, ldc,
                   pad_touched ? "WRITTEN" : "untouched");
            SG_CHECK(cudaFree(dA)); SG_CHECK(cudaFree(dB)); SG_CHECK(cudaFree(dC));
            free(A); free(B); free(C); free(want); free(got);
        }
    }
    SG_CUBLAS_CHECK(cublasDestroy(h));
    return test_finish();
}
