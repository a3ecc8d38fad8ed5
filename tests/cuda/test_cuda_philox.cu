// tests/cuda/test_cuda_philox.cu — random/philox.h compiled as CUDA device code draws the same
// words as on the host: the functions every kernel calls (site seeds, the attention, residual and
// stochastic-depth keep-bit draws) run in a kernel, and each result is compared with the host's.
// Runs on a GPU (make test-cuda, scripts/gpu_check.sh) and on the CPU through the emulation
// (make test-cuda-emu); tests/check_nvcc.sh compiles it for sm_90 + PTX.
#include "cuda/device.h"
#include <stdint.h>
#include <string.h>
#include "random/philox.h"
#include "tests/test.h"

#define T 96            // query and key positions of the attention draws
#define C 40            // channels of the residual draws
#define NSEQ 5          // sequences of the stochastic-depth draws
#define NSITE 8         // (step, layer, site, pass) tuples of the site seeds

// block i, thread j: attention draw (g 3, h 1, i, j) for j < T; residual draw (g 2, t i, c j) for
// j < C; block 0 also the depth draws and the site seeds
__global__ void draws(uint32_t* attn, uint32_t* elem, uint32_t* depth, uint64_t* site, uint64_t seed,
                      uint64_t master) {
    int i = blockIdx.x, j = threadIdx.x;
    if (j < T) attn[i * T + j] = philox_attn_draw(seed, 3u, 1u, (uint32_t)i, (uint32_t)j);
    if (j < C) elem[i * C + j] = philox_elem_draw(seed, 2u, (uint32_t)i, (uint32_t)j);
    if (i == 0 && j < NSEQ) depth[j] = philox_depth_draw(seed, (uint32_t)j);
    if (i == 0 && j < NSITE)
        site[j] = philox_site_seed(master, 1000u + (uint32_t)j, (uint32_t)j % 3u, (uint32_t)j % 6u,
                                   (uint32_t)j & 1u);
}

int main() {
    const uint64_t seed = 0x0123456789abcdefULL, master = 0xfedcba9876543210ULL;
    uint32_t *d_attn, *d_elem, *d_depth;
    uint64_t* d_site;
    SG_CHECK(cudaMalloc((void**)&d_attn, T * T * sizeof(uint32_t)));
    SG_CHECK(cudaMalloc((void**)&d_elem, T * C * sizeof(uint32_t)));
    SG_CHECK(cudaMalloc((void**)&d_depth, NSEQ * sizeof(uint32_t)));
    SG_CHECK(cudaMalloc((void**)&d_site, NSITE * sizeof(uint64_t)));
    SG_LAUNCH(draws, T, 128, 0, d_attn, d_elem, d_depth, d_site, seed, master);
    SG_CHECK_LAUNCH();
    static uint32_t attn[T * T], elem[T * C], depth[NSEQ];
    static uint64_t site[NSITE];
    SG_CHECK(cudaMemcpy(attn, d_attn, sizeof(attn), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(elem, d_elem, sizeof(elem), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(depth, d_depth, sizeof(depth), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(site, d_site, sizeof(site), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaFree(d_attn));
    SG_CHECK(cudaFree(d_elem));
    SG_CHECK(cudaFree(d_depth));
    SG_CHECK(cudaFree(d_site));

    int bad = 0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) bad += attn[i * T + j] != philox_attn_draw(seed, 3u, 1u, i, j);
    expect(bad == 0, "philox_attention_draws_on_device_match_host", "%d of %d draws differ", bad, T * T);
    bad = 0;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) bad += elem[t * C + c] != philox_elem_draw(seed, 2u, t, c);
    expect(bad == 0, "philox_residual_draws_on_device_match_host", "%d of %d draws differ", bad, T * C);
    bad = 0;
    for (int g = 0; g < NSEQ; g++) bad += depth[g] != philox_depth_draw(seed, g);
    for (int k = 0; k < NSITE; k++)
        bad += site[k] != philox_site_seed(master, 1000u + k, k % 3u, k % 6u, k & 1u);
    expect(bad == 0, "philox_depth_draws_and_site_seeds_on_device_match_host",
           "%d of %d differ", bad, NSEQ + NSITE);
    return test_finish();
}
