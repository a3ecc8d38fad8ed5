/* model/mem.h — every long-lived buffer of seedgpt comes from here: 64-byte aligned (DESIGN §4:
 * vectorised loops must not sum in an order that depends on the address), zeroed, and counted,
 * so a test can prove that nothing is allocated after step 0 and report the high-water mark. */
#ifndef SEEDGPT_MEM_H
#define SEEDGPT_MEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEM_ALIGN 64

/* floats rounded up to a whole number of 64-byte lines */
static inline size_t mem_align_floats(size_t n) { return (n + 15) / 16 * 16; }

/* Aligned, zeroed; exits with a message naming the size if the memory is not there. */
void* mem_alloc(size_t bytes);
static inline float* mem_alloc_floats(size_t n) { return (float*)mem_alloc(n * sizeof(float)); }
void mem_free(void* p);

typedef struct {
    size_t allocations;   /* calls to mem_alloc so far */
    size_t live_bytes;    /* allocated and not freed */
    size_t peak_bytes;    /* high-water mark of live_bytes */
} MemStats;
MemStats mem_stats(void);

#ifdef __cplusplus
}
#endif
#endif
