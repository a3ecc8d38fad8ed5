/* cuda/profile_cuda.cu — cudaEvent marks for the profiler (cuda/profile_cuda.h). The events are
 * created as the first step needs them and reused by every later step (each step records the same
 * marks); a mark's event is recorded on the default stream, so the time between two marks is the
 * device's time for the ops launched between them, whatever the host did meanwhile. */
#include "cuda/device.h"
#include "cuda/profile_cuda.h"

static cudaEvent_t* events = NULL;
static int n_events = 0, n_created = 0, cap_events = 0;

static int cuda_record(void) {
    if (n_events == n_created) {
        if (n_created == cap_events) {
            int cap = cap_events ? 2 * cap_events : 1024;
            cudaEvent_t* p = (cudaEvent_t*)realloc(events, (size_t)cap * sizeof(cudaEvent_t));
            if (p == NULL) { fprintf(stderr, "seedgpt: --profile: out of memory\n"); exit(1); }
            events = p;
            cap_events = cap;
        }
        SG_CHECK(cudaEventCreate(&events[n_created]));
        n_created++;
    }
    SG_CHECK(cudaEventRecord(events[n_events], 0));
    return n_events++;
}

static void cuda_sync(void) {
    if (n_events > 0) SG_CHECK(cudaEventSynchronize(events[n_events - 1]));
}

static double cuda_elapsed_ms(int a, int b) {
    float ms = 0;
    SG_CHECK(cudaEventElapsedTime(&ms, events[a], events[b]));
    return ms;
}

static void cuda_reset(void) { n_events = 0; }

extern "C" const ProfileTimer profile_timer_cuda = {"cudaEvent", cuda_record, cuda_sync,
                                                    cuda_elapsed_ms, cuda_reset};
