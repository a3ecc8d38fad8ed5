/* model/mem.c — the counted, aligned allocator (see mem.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "model/mem.h"

static MemStats stats;

/* Blocks of at least HUGE_MIN bytes (a model's arena) start on a 2 MiB boundary and ask the
 * kernel for transparent huge pages, where it grants them on request (THP "madvise" mode): the
 * ops that stream the parameters, their gradients and AdamW's moments once per step walk a
 * page table 512 times less often. Only the address changes, never a value. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)16 << 20)

void* mem_alloc(size_t bytes) {
    /* one aligned line in front of the block remembers its size */
    size_t total = MEM_ALIGN + (bytes + MEM_ALIGN - 1) / MEM_ALIGN * MEM_ALIGN;
    size_t align = MEM_ALIGN;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= HUGE_MIN) {
        align = HUGE_PAGE;
        total = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    }
#endif
    unsigned char* base = aligned_alloc(align, total);
    if (base == NULL) {
        fprintf(stderr, "seedgpt: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == HUGE_PAGE) madvise(base, total, MADV_HUGEPAGE);   /* a hint: refusal is harmless */
#endif
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
