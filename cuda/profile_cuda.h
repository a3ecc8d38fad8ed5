/* cuda/profile_cuda.h — the profiler's timer on CUDA (cuda/profile_cuda.cu): a cudaEvent per
 * mark, recorded on the default stream where the ops run, read with cudaEventElapsedTime at the
 * end of the step. Plain C: train.c (under SEEDGPT_CUDA) hands it to profile_wrap. */
#ifndef SEEDGPT_PROFILE_CUDA_H
#define SEEDGPT_PROFILE_CUDA_H

#include "model/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const ProfileTimer profile_timer_cuda;

#ifdef __cplusplus
}
#endif
#endif
