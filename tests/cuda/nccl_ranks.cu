/* tests/cuda/nccl_ranks.cu — one rank of the device sums of dist/dist_nccl.cu, started like
 * ./train_cuda_nccl (--rank R --world W --init-file PATH; tests/cuda/test_nccl_emu.sh starts W
 * of them). Each rank knows every rank's values (a hash of rank and index), so it checks its
 * results against sums it adds itself, in rank order, on the host:
 *   allreduce      dist_nccl_allreduce_sum over more than one round of the reduce-scatter: every
 *                  element is ((x_0 + x_1) + x_2) + ..., bit for bit, and the values are chosen so
 *                  that at 3 ranks and more the reverse order differs on many elements (counted:
 *                  the check could fail);
 *   reduce_scatter uneven shards, rank 0's empty: this rank's shard holds the sums, the rest of
 *                  its array is its own values, untouched;
 *   allgather      2-byte elements over the same shards: every element is its owner's;
 *   host_sums      dist_sum (doubles in rank order) and dist_max;
 *   ring           dist_nccl_ring_start/wait: this rank receives its predecessor's block.
 * One line per check on standard error, "rank R: ok NAME: ..." or "rank R: FAIL NAME: ...";
 * status 0 when every check passed. Built against the emulation (make emu-nccl-bins); with nvcc
 * and NCCL it would check a machine's GPUs the same way.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "cuda/device.h"
#include "dist/dist.h"

static int me, world, failures;

static void report(int ok, const char* name, const char* fmt, ...) {
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s %s: %s\n", me, ok ? "ok  " : "FAIL", name, detail);
    failures += !ok;
}

/* rank r's value at i: a hash spread over 2^-16 .. 2^15 in magnitude, either sign */
static float value(int r, size_t i) {
    uint64_t z = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 29;
    float m = (float)(z & 0xFFFFFF) / 16777216.0f - 0.5f;
    return ldexpf(m, (int)((z >> 24) % 32) - 16);
}

static float in_order(size_t i) {
    float s = value(0, i);
    for (int r = 1; r < world; r++) s += value(r, i);
    return s;
}

static float reversed(size_t i) {
    float s = value(world - 1, i);
    for (int r = world - 2; r >= 0; r--) s += value(r, i);
    return s;
}

static float* to_device(const std::vector<float>& h) {
    float* d;
    SG_CHECK(cudaMalloc((void**)&d, h.size() * sizeof(float)));
    SG_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> to_host(const float* d, size_t n) {
    std::vector<float> h(n);
    SG_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void check_allreduce(void) {
    const size_t n = 3 * ((size_t)1 << 20) + 1001;   /* a shard > one round of 2^20 floats */
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = value(me, i);
    float* d = to_device(h);
    char err[256];
    if (dist_nccl_allreduce_sum(d, n, err) != 0) {
        report(0, "allreduce", "%s", err);
        return;
    }
    std::vector<float> got = to_host(d, n);
    /* two terms add the same either way round: there, the sum must differ from this rank's own
     * values (a missing reduction would not) */
    size_t wrong = 0, first = n, sensitive = 0;
    for (size_t i = 0; i < n; i++) {
        float want = in_order(i);
        if (memcmp(&got[i], &want, sizeof(float)) != 0 && wrong++ == 0) first = i;
        sensitive += world > 2 ? reversed(i) != want : value(me, i) != want;
    }
    if (wrong == 0 && sensitive > 0)
        report(1, "allreduce", "%zu floats equal the rank-order sum bit for bit (%zu of them differ "
               "%s)", n, sensitive, world > 2 ? "summed in reverse order" : "from this rank's own");
    else if (wrong == 0)
        report(0, "allreduce", "no element is sensitive to the order: the check cannot fail");
    else
        report(0, "allreduce", "%zu of %zu floats differ from the rank-order sum, the first at %zu "
               "(%.9g, want %.9g)", wrong, n, first, got[first], in_order(first));
    SG_CHECK(cudaFree(d));
}

/* rank 0's shard empty, the others a little over one round each, not multiples of anything */
static std::vector<size_t> uneven_bounds(void) {
    std::vector<size_t> b(world + 1);
    b[0] = 0;
    b[1] = 0;
    for (int s = 2; s <= world; s++) b[s] = b[s - 1] + ((size_t)1 << 20) + 7 + 3 * (size_t)s;
    return b;
}

static void check_reduce_scatter(void) {
    std::vector<size_t> b = uneven_bounds();
    size_t n = b[world];
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = value(me, i);
    float* d = to_device(h);
    char err[256];
    if (dist_nccl_reduce_scatter(d, b.data(), err) != 0) {
        report(0, "reduce_scatter", "%s", err);
        return;
    }
    std::vector<float> got = to_host(d, n);
    size_t wrong = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        float want = i >= b[me] && i < b[me + 1] ? in_order(i) : value(me, i);
        if (memcmp(&got[i], &want, sizeof(float)) != 0 && wrong++ == 0) first = i;
    }
    if (wrong == 0)
        report(1, "reduce_scatter", "shard [%zu, %zu) summed in rank order, the other %zu floats "
               "untouched", b[me], b[me + 1], n - (b[me + 1] - b[me]));
    else
        report(0, "reduce_scatter", "%zu of %zu floats wrong, the first at %zu (shard [%zu, %zu))",
               wrong, n, first, b[me], b[me + 1]);
    SG_CHECK(cudaFree(d));
}

static uint16_t pattern(int owner, size_t i) { return (uint16_t)(owner * 7919 + i * 31 + 1); }

static void check_allgather(void) {
    std::vector<size_t> b = uneven_bounds();
    size_t n = b[world];
    std::vector<uint16_t> h(n, 0xFFFF);
    for (size_t i = b[me]; i < b[me + 1]; i++) h[i] = pattern(me, i);
    uint16_t* d;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(uint16_t)));
    SG_CHECK(cudaMemcpy(d, h.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    char err[256];
    if (dist_nccl_allgather(d, b.data(), sizeof(uint16_t), err) != 0) {
        report(0, "allgather", "%s", err);
        return;
    }
    SG_CHECK(cudaMemcpy(h.data(), d, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (int s = 0; s < world; s++)
        for (size_t i = b[s]; i < b[s + 1]; i++) wrong += h[i] != pattern(s, i);
    report(wrong == 0, "allgather", "%zu of %zu 2-byte elements not their owner's", wrong, n);
    SG_CHECK(cudaFree(d));
}

static void check_host_sums(void) {
    /* 1e16 + 1 - 1e16 ...: in rank order the 1 is lost, in other orders it is not */
    double x = me == 0 ? 1e16 : me == 1 ? 1.0 : -1e16 / (world - 2);
    double want = 1e16;
    for (int r = 1; r < world; r++) want += r == 1 ? 1.0 : -1e16 / (world - 2);
    double got = dist_sum(x);
    int mx = dist_max(me == world - 1 ? 1000 : me);
    report(memcmp(&got, &want, sizeof(double)) == 0 && mx == 1000, "host_sums",
           "dist_sum %.17g (want %.17g), dist_max %d (want 1000)", got, want, mx);
}

static void check_ring(void) {
    const size_t n = ((size_t)1 << 20) + 333;   /* more than one mailbox of the emulation */
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = value(me, i);
    float* send = to_device(h);
    float* recv;
    SG_CHECK(cudaMalloc((void**)&recv, n * sizeof(float)));
    char err[256];
    int next = (me + 1) % world, prev = (me + world - 1) % world;
    if (dist_nccl_ring_start(send, recv, n, next, prev, err) != 0 || dist_nccl_ring_wait(err) != 0) {
        report(0, "ring", "%s", err);
        return;
    }
    std::vector<float> got = to_host(recv, n);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += got[i] != value(prev, i);
    report(wrong == 0, "ring", "%zu floats from rank %d, %zu wrong", n, prev, wrong);
    SG_CHECK(cudaFree(send));
    SG_CHECK(cudaFree(recv));
}

int main(int argc, char** argv) {
    char err[256];
    if (dist_init(&argc, &argv, err) != 0) {
        fprintf(stderr, "nccl_ranks: %s\n", err);
        return 2;
    }
    me = dist_rank();
    world = dist_size();
    if (world < 2) {
        fprintf(stderr, "nccl_ranks: start 2 or more ranks (--rank R --world W --init-file PATH)\n");
        return 2;
    }
    check_allreduce();
    check_reduce_scatter();
    check_allgather();
    check_host_sums();
    check_ring();
    return failures == 0 ? 0 : 1;
}
