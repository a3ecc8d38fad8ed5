/* cuda/device_memory.h — device memory for every CUDA source (cuda/device_memory.cu): counted
 * allocations (zeroed; the peak is what the step JSON reports), copies between host and device,
 * fill, the bitwise comparison of the recompute value check, and synchronisation. Plain C: the
 * backend table (model/backend.c, built by gcc) points at these functions. */
#ifndef SEEDGPT_DEVICE_MEMORY_H
#define SEEDGPT_DEVICE_MEMORY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void* device_alloc_cuda(size_t bytes);   /* exits with one line when the device is full */
void device_free_cuda(void* p);          /* only what device_alloc_cuda returned */
void device_to_backend_cuda(void* dst, const void* host_src, size_t bytes);
void device_to_host_cuda(void* host_dst, const void* src, size_t bytes);
void device_fill_cuda(float* x, size_t n, float value);
size_t device_count_differ_cuda(const float* a, const float* b, size_t n);
size_t device_peak_bytes_cuda(void);
/* The value check's per-block counts (device_count_differ_cuda): their bytes, and their
 * allocation now rather than at the first check (a model's build reserves them). */
size_t device_differ_scratch_bytes_cuda(void);
void device_reserve_differ_cuda(void);
size_t device_live_bytes_cuda(void);   /* allocated and not freed */
void device_synchronize_cuda(void);

#ifdef __cplusplus
}
#endif
#endif
