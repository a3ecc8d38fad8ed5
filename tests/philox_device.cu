// tests/philox_device.cu — random/philox.h compiled as CUDA device code: the same function
// the CPU uses, called from a kernel. Built by `make test` (compile only, no GPU needed); run on
// a machine with a GPU it compares the device's draws with the host's (`make test-cuda`).
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>
#include "random/philox.h"

__global__ void draws(uint32_t* out, uint64_t seed, int T) {
    int i = blockIdx.x, j = threadIdx.x;
    if (j < T) out[i * T + j] = philox_attn_draw(seed, 3u, 1u, (uint32_t)i, (uint32_t)j);
}

int main() {
    const int T = 96;
    const uint64_t seed = 0x0123456789abcdefULL;
    uint32_t* d = nullptr;
    if (cudaMalloc(&d, T * T * sizeof(uint32_t)) != cudaSuccess) {
        printf("SKIP philox_device_matches_host: no usable GPU\n");
        return 0;
    }
    draws<<<T, 128>>>(d, seed, T);
    std::vector<uint32_t> dev(T * T), host(T * T);
    cudaMemcpy(dev.data(), d, T * T * sizeof(uint32_t), cudaMemcpyDeviceToHost);
    cudaFree(d);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) host[i * T + j] = philox_attn_draw(seed, 3u, 1u, i, j);
    int bad = 0;
    for (int k = 0; k < T * T; k++) bad += dev[k] != host[k];
    printf("%s philox_device_matches_host: %d of %d attention draws differ\n", bad ? "FAIL" : "ok  ",
           bad, T * T);
    return bad != 0;
}
