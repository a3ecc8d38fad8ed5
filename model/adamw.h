/* model/adamw.h — one AdamW element update, the formula both backends run (ops_cpu.c's loop and
 * ops_cuda.cu's kernel), so the two cannot drift apart. The bias corrections bc1 = 1 - beta1^t
 * and bc2 = 1 - beta2^t are computed once per step on the host. Decoupled weight decay, as
 * torch's AdamW: p <- p (1 - lr wd) - lr mhat / (sqrt(vhat) + eps).
 */
#ifndef SEEDGPT_ADAMW_H
#define SEEDGPT_ADAMW_H

#include <math.h>

#if defined(__CUDACC__)
#define ADAMW_FN static __host__ __device__ __forceinline__
#else
#define ADAMW_FN static inline
#endif

ADAMW_FN void adamw_element(float* param, float g, float* m, float* v, float lr, float beta1,
                            float beta2, float eps, float weight_decay, float bc1, float bc2) {
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float p = *param * (1.0f - lr * weight_decay);
    *param = p - lr * (mhat / (sqrtf(vhat) + eps));
}

#endif
