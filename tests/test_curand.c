/* tests/test_curand.c — philox.h against an external oracle: cuRAND's host generator
 * (CURAND_RNG_PSEUDO_PHILOX4_32_10 runs on the CPU, no GPU needed). Its output block k for seed s
 * is Philox4x32-10 with key (s_lo, s_hi) and counter (k >> 16, 0, k & 0xffff, 0) (DESIGN §3). */
#include <stdint.h>
#include <curand.h>
#include "tests/test.h"
#include "random/philox.h"

static void compare(uint64_t seed, size_t blocks) {
    curandGenerator_t gen;
    unsigned int* out = malloc(blocks * 4 * sizeof(unsigned int));
    curandStatus_t st = curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    if (st == CURAND_STATUS_SUCCESS) st = curandSetPseudoRandomGeneratorSeed(gen, seed);
    if (st == CURAND_STATUS_SUCCESS) st = curandGenerate(gen, out, blocks * 4);
    char name[96];
    snprintf(name, sizeof(name), "philox_matches_curand_host_seed_%016llx",
             (unsigned long long)seed);
    if (st != CURAND_STATUS_SUCCESS) {
        expect(0, name, "cuRAND host generator failed with status %d", (int)st);
        free(out);
        return;
    }
    size_t bad = 0, first_bad = (size_t)-1;
    for (size_t k = 0; k < blocks; k++) {
        uint32_t ctr[4] = {(uint32_t)(k >> 16), 0, (uint32_t)(k & 0xffff), 0}, r[4];
        philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), r);
        for (int w = 0; w < 4; w++) {
            if (r[w] != out[4 * k + w]) { if (first_bad == (size_t)-1) first_bad = k; bad++; }
        }
    }
    expect(bad == 0, name, "%zu outputs compared, %zu differ (first bad block %zd)",
           blocks * 4, bad, bad ? (ssize_t)first_bad : (ssize_t)-1);
    curandDestroyGenerator(gen);
    free(out);
}

int main(void) {
    compare(0, 1 << 15);
    compare(0x0123456789abcdefULL, 150000);   /* >= 1e5 blocks, crossing k >> 16 == 1 and 2 */
    compare(0xffffffffffffffffULL, 1 << 15);
    return test_finish();
}
