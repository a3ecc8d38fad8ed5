/* model/mem.c — the counted, aligned allocator (see mem.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/mem.h"

static MemStats stats;

void* mem_alloc(size_t bytes) {
    /* one aligned line in front of the block remembers its size */
    size_t total = MEM_ALIGN + (bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
    unsigned char* base = aligned_alloc(MEM_ALIGN, total);
    if (base == NULL) {
        fprintf(stderr, "seedgpt: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    memset(base, 0, total);
    memcpy(base, &bytes, sizeof(bytes));
    #pragma omp critical(seedgpt_mem)
    {
        stats.allocations++;
        stats.live_bytes += bytes;
        if (stats.live_bytes > stats.peak_bytes) stats.peak_bytes = stats.live_bytes;
    }
    return base + MEM_ALIGN;
}

void mem_free(void* p) {
    if (p == NULL) return;
    unsigned char* base = (unsigned char*)p - MEM_ALIGN;
    size_t bytes;
    memcpy(&bytes, base, sizeof(bytes));
    #pragma omp critical(seedgpt_mem)
    stats.live_bytes -= bytes;
    free(base);
}

MemStats mem_stats(void) { return stats; }
