/* tests/cuda/test_cuda_mma_scores.cu — a first step to the tensor-core flash attention: the
 * forward's score tile S = sigma Q K^T (64 queries x 64 keys of one head) from bf16 Q and K,
 * through sg_mma_m16n8k16_bf16_f32 with fp32 accumulators, read straight from the model's qkv
 * layout (B, T, (NH + 2 NKV) HD) with grouped-query heads.
 *   1. every score against float64 (sigma times the exact dot product of the bf16 inputs) within
 *      sigma sg_mma_tolerance(HD, sum |q k|) plus the rounding of the product by sigma;
 *   2. against the CPU twin (the host's chain of sg_mma_dot16_bf16_f32, then sigma): bit for bit in
 *      the emulation, within the same tolerance on a GPU;
 *   3. against attention/flash_cpu.c: its forward, run on the same bf16-rounded qkv, returns the
 *      row log-sum-exp of its own scores; the log-sum-exp of the causal rows of the tensor-core
 *      tiles (j <= i, tiles (0,0), (64,0), (64,64) of T = 128) must agree with it to 1e-5.
 * Not wired into the trainer. Builds two ways: nvcc (make test-cuda) and C++ against the
 * emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "attention/attention.h"
#include "util/bf16.h"
#include "cuda/mma.h"
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

#define TILE 64
#define LSE_TOL 1e-5

/* fragments from row-major bf16 rows (ld elements apart), with cuda/mma.h's layout */
static __device__ void load_a(uint32_t a[4], const __nv_bfloat16* rows, size_t ld, int lane) {
    for (int r = 0; r < 4; r++) {
        int i = 2 * r;
        a[r] = sg_pack_bf16x2(rows[sg_mma_a_row(lane, i) * ld + sg_mma_a_col(lane, i)],
                              rows[sg_mma_a_row(lane, i + 1) * ld + sg_mma_a_col(lane, i + 1)]);
    }
}
/* B = K^T: column n of B is key row n, so B's (k, n) is rows[n * ld + k] */
static __device__ void load_b(uint32_t b[2], const __nv_bfloat16* rows, size_t ld, int lane) {
    for (int r = 0; r < 2; r++) {
        int i = 2 * r;
        b[r] = sg_pack_bf16x2(rows[sg_mma_b_col(lane, i) * ld + sg_mma_b_row(lane, i)],
                              rows[sg_mma_b_col(lane, i + 1) * ld + sg_mma_b_row(lane, i + 1)]);
    }
}

/* S (64, 64) row-major = sigma Q K^T for queries i0.. and keys j0.. of query head h of sequence b.
 * One block of four warps; warp w owns query rows 16w..16w+15 and all eight 8-key fragments, each
 * accumulated in fp32 over HD / 16 instructions in k order; sigma scales the fp32 sum. */
__global__ void score_tile_bf16(float* S, const __nv_bfloat16* qkv, int T, int NH, int NKV, int HD, int b, int h,
                                int i0, int j0, float sigma) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    int kvh = h / (NH / NKV);
    const __nv_bfloat16* q = qkv + ((size_t)b * T + i0 + 16 * w) * QKV + (size_t)h * HD;
    const __nv_bfloat16* k = qkv + ((size_t)b * T + j0) * QKV + (size_t)(NH + kvh) * HD;
    for (int nf = 0; nf < TILE / 8; nf++) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int d0 = 0; d0 < HD; d0 += 16) {
            uint32_t a[4], bb[2];
            load_a(a, q + d0, QKV, lane);
            load_b(bb, k + (size_t)(8 * nf) * QKV + d0, QKV, lane);
            sg_mma_m16n8k16_bf16_f32(acc, a, bb, acc);
        }
        for (int i = 0; i < 4; i++)
            S[(16 * w + sg_mma_c_row(lane, i)) * TILE + 8 * nf + sg_mma_c_col(lane, i)] = sigma * acc[i];
    }
}

typedef struct {
    int B, T, NH, NKV, HD;
    int b, h;   /* the head whose tiles are checked */
} Shape;

static void run_shape(const Shape* s, uint64_t seed) {
    test_rng_state = seed;
    const size_t QKV = (size_t)(s->NH + 2 * s->NKV) * s->HD;
    const size_t n = (size_t)s->B * s->T * QKV;
    const float sigma = 1.0f / sqrtf((float)s->HD);
    /* random qkv, rounded to bf16: the bits for the device, their exact values for the CPU */
    uint16_t* bits = (uint16_t*)malloc(n * 2);
    float* qkv = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        bits[i] = sg_bf16_from_float((float)(4.0 * test_uniform() - 2.0));
        qkv[i] = sg_bf16_to_float(bits[i]);
    }
    __nv_bfloat16* dqkv;
    float* dS;
    SG_CHECK(cudaMalloc((void**)&dqkv, n * 2));
    SG_CHECK(cudaMemcpy(dqkv, bits, n * 2, cudaMemcpyHostToDevice));
    SG_CHECK(cudaMalloc((void**)&dS, TILE * TILE * sizeof(float)));

    /* the CPU attention's row log-sum-exp for every head, no dropout */
    float* out = (float*)malloc((size_t)s->B * s->T * s->NH * s->HD * sizeof(float));
    float* lse = (float*)malloc((size_t)s->B * s->NH * s->T * sizeof(float));
    attention_forward(out, lse, qkv, s->B, s->T, s->NH, s->NKV, s->HD, 0, 0, dropout_make(0.0));

    /* the row's running log-sum-exp over the causal keys of the tiles, in float64 */
    double* row_max = (double*)malloc(s->T * sizeof(double));
    double* row_sum = (double*)malloc(s->T * sizeof(double));
    for (int i = 0; i < s->T; i++) { row_max[i] = -INFINITY; row_sum[i] = 0.0; }

    const int kvh = s->h / (s->NH / s->NKV);
    double worst64 = 0, worst_twin = 0, worst_abs = 0;
    int nonfinite = 0, twin_bits_differ = 0, tiles = 0;
    float S[TILE * TILE];
    for (int i0 = 0; i0 < s->T; i0 += TILE)
        for (int j0 = 0; j0 <= i0; j0 += TILE) {
            SG_CHECK(cudaMemset(dS, 0xff, TILE * TILE * sizeof(float)));   /* NaN: unwritten fails */
            SG_LAUNCH(score_tile_bf16, 1, 128, 0, dS, dqkv, s->T, s->NH, s->NKV, s->HD, s->b, s->h, i0, j0, sigma);
            SG_CHECK_LAUNCH();
            SG_CHECK(cudaMemcpy(S, dS, sizeof(S), cudaMemcpyDeviceToHost));
            tiles++;
            for (int r = 0; r < TILE; r++)
                for (int c = 0; c < TILE; c++) {
                    int i = i0 + r, j = j0 + c;
                    const uint16_t* qb = bits + ((size_t)s->b * s->T + i) * QKV + (size_t)s->h * s->HD;
                    const uint16_t* kb = bits + ((size_t)s->b * s->T + j) * QKV + (size_t)(s->NH + kvh) * s->HD;
                    double dot = 0, mag = 0;
                    float twin = 0.0f;
                    for (int d0 = 0; d0 < s->HD; d0 += 16) twin = sg_mma_dot16_bf16_f32(twin, qb + d0, kb + d0);
                    twin *= sigma;
                    for (int d = 0; d < s->HD; d++) {
                        double p = (double)sg_bf16_to_float(qb[d]) * (double)sg_bf16_to_float(kb[d]);
                        dot += p;
                        mag += fabs(p);
                    }
                    double ref = (double)sigma * dot;
                    double tol = sigma * sg_mma_tolerance(s->HD, mag) + fabs(ref) * 0x1p-23;
                    float v = S[r * TILE + c];
                    if (!isfinite(v)) { nonfinite++; continue; }
                    double e = fabs((double)v - ref);
                    if (e > worst_abs) worst_abs = e;
                    if (e / tol > worst64) worst64 = e / tol;
                    if (fabs((double)v - (double)twin) / tol > worst_twin) worst_twin = fabs((double)v - (double)twin) / tol;
                    if (memcmp(&v, &twin, 4) != 0) twin_bits_differ++;
                    if (j <= i) {   /* causal: into row i's log-sum-exp, rescaling as the max grows */
                        if (v > row_max[i]) {
                            row_sum[i] = row_sum[i] * exp(row_max[i] - v) + 1.0;
                            row_max[i] = v;
                        } else {
                            row_sum[i] += exp(v - row_max[i]);
                        }
                    }
                }
        }
    double worst_lse = 0;
    int worst_row = -1;
    for (int i = 0; i < s->T; i++) {
        double tc = row_max[i] + log(row_sum[i]);
        double cpu = lse[((size_t)s->b * s->NH + s->h) * s->T + i];
        double e = fabs(tc - cpu) / fmax(1.0, fabs(cpu));
        if (!(e <= worst_lse)) { worst_lse = e; worst_row = i; }
    }

    char name[128];
    snprintf(name, sizeof(name), "mma_score_tiles_match_float64_hd%d_gqa%d", s->HD, s->NH / s->NKV);
    expect(nonfinite == 0 && worst64 <= 1.0, name, "%d tiles of 64x64 (b %d, head %d, kv head %d, T %d): worst "
           "|s - ref| %.3g = %.3f of the tolerance, %d non-finite", tiles, s->b, s->h, kvh, s->T, worst_abs,
           worst64, nonfinite);
    snprintf(name, sizeof(name), "mma_score_tiles_match_cpu_twin_hd%d_gqa%d", s->HD, s->NH / s->NKV);
    if (EMU_ONLY)
        expect(nonfinite == 0 && twin_bits_differ == 0, name, "%d of %d scores differ in bits from the host's "
               "chain of sg_mma_dot16_bf16_f32 times sigma", twin_bits_differ, tiles * TILE * TILE);
    else
        expect(nonfinite == 0 && worst_twin <= 1.0, name, "worst |s_gpu - s_twin| = %.3f of the tolerance; %d of %d "
               "scores differ in bits", worst_twin, twin_bits_differ, tiles * TILE * TILE);
    snprintf(name, sizeof(name), "mma_score_tiles_lse_matches_flash_cpu_hd%d_gqa%d", s->HD, s->NH / s->NKV);
    expect(nonfinite == 0 && worst_lse <= LSE_TOL, name, "row log-sum-exp of the causal tiles against "
           "attention_forward's: worst |diff| / max(1, |lse|) %.3g at row %d (tolerance %.0e)", worst_lse, worst_row,
           LSE_TOL);

    free(bits); free(qkv); free(out); free(lse); free(row_max); free(row_sum);
    SG_CHECK(cudaFree(dqkv));
    SG_CHECK(cudaFree(dS));
}

int main(void) {
    const Shape shapes[] = {
        {2, 128, 4, 2, 64, 1, 3},    /* GPT-2's head size; grouped-query heads, the last head */
        {1, 128, 2, 2, 128, 0, 1},   /* the largest head size of flash_cuda.cu */
        {1, 128, 3, 1, 32, 0, 2},    /* two k-steps, three query heads on one kv head */
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) run_shape(&shapes[i], 0x5c0e5000ull + i);
    return test_finish();
}
