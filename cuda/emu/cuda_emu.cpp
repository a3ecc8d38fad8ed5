/* cuda/emu/cuda_emu.cpp — the runtime behind cuda/emu/cuda_emu.h: kernel launches on fibers (or
 * pooled CPU threads), __syncthreads, the warp collectives, shared memory, device memory, cuBLAS.
 *
 * How a launch runs: a team is the threads of one block. By default each CUDA thread is a fiber,
 * and a team's fibers share one OS thread (team 0: the launching thread; the others: pooled
 * threads), switching only where a CUDA thread must wait; SG_EMU_THREADS=os makes each CUDA
 * thread an OS thread of a pool that keeps them between launches, as the emulation first did. The
 * team runs its blocks one after another; between two blocks the last thread to leave poisons
 * the shared memory for the next. Teams = SG_EMU_CONCURRENT_BLOCKS (default 1); team t takes
 * blocks t, t + teams, ... with nothing ordering one team against another, so that a
 * ThreadSanitizer build sees data shared between blocks of one launch.
 *
 * Each team has one mutex for its bookkeeping (who waits where), so every arrival can check what
 * the others are doing: a divergent barrier or a collective that can never complete is reported
 * (one line naming the kernel, exit status 1) instead of hanging. A waiting fiber yields to its
 * team's scheduler (an OS thread sleeps on a futex), and the mutex is hidden from ThreadSanitizer:
 * the orderings CUDA promises are annotated instead (a barrier: every arrival before every
 * departure; a warp collective: the same among its lanes; the end of a block before the start of
 * the next on that team). To TSan each fiber is a thread of its own, and a switch orders nothing.
 */
#include "cuda/emu/cuda_emu.h"
#include "util/fp16.h"   /* cuBLASLt's CUDA_R_16F operands */

#ifndef SEEDGPT_NO_CBLAS
#include <cblas.h>
#endif
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <atomic>
#include <deque>
#include <map>
#include <vector>

/* ---- ThreadSanitizer annotations ---------------------------------------------------------- */
#if defined(__SANITIZE_THREAD__)
extern "C" {
void AnnotateHappensBefore(const char* f, int l, const volatile void* addr);
void AnnotateHappensAfter(const char* f, int l, const volatile void* addr);
void AnnotateIgnoreSyncBegin(const char* f, int l);
void AnnotateIgnoreSyncEnd(const char* f, int l);
void AnnotateIgnoreReadsBegin(const char* f, int l);
void AnnotateIgnoreReadsEnd(const char* f, int l);
void AnnotateIgnoreWritesBegin(const char* f, int l);
void AnnotateIgnoreWritesEnd(const char* f, int l);
/* the fiber API: each emulated CUDA thread run as a fiber is a thread of its own to TSan */
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
}
static const unsigned tsan_switch_no_sync = 1;   /* __tsan_switch_to_fiber_no_sync */
/* quiet: the emulator's bookkeeping, neither checked nor ordering anything */
static thread_local int quiet_depth = 0;
/* (the depth is written only while writes are ignored: the fibers of one OS thread share it) */
static inline void quiet_begin(void) {
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
    quiet_depth++;
}
static inline void quiet_end(void) {
    quiet_depth--;
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
}
/* writes to the thread-locals that the fibers of one OS thread share, invisible to TSan */
static inline void tls_writes_begin(void) { AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
static inline void tls_writes_end(void) { AnnotateIgnoreWritesEnd(__FILE__, __LINE__); }
/* before exiting from a quiet section (TSan reports a thread that ends with ignores on) */
static inline void quiet_unwind(void) {
    while (quiet_depth > 0) quiet_end();
}
/* token-wise happens-before, callable inside or outside a quiet section */
static inline void hb_release(const void* token) {
    if (quiet_depth) AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
    AnnotateHappensBefore(__FILE__, __LINE__, token);
    if (quiet_depth) AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
}
static inline void hb_acquire(const void* token) {
    if (quiet_depth) AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
    AnnotateHappensAfter(__FILE__, __LINE__, token);
    if (quiet_depth) AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
}
#else
static inline void tls_writes_begin(void) {}
static inline void tls_writes_end(void) {}
static inline void quiet_begin(void) {}
static inline void quiet_end(void) {}
static inline void quiet_unwind(void) {}
static inline void hb_release(const void*) {}
static inline void hb_acquire(const void*) {}
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace sg_emu {

/* GPU limits (sm_90) */
static const size_t SMEM_DEFAULT = 48 * 1024;      /* per block without the opt-in */
static const size_t SMEM_STATIC_MAX = 48 * 1024;
static const size_t GLOBAL_MEM = 80ull << 30;
/* the device it imitates (an H100 SXM): SMs, SM clock in kHz; its compute capability is
 * emu_cc() below */
static const int SM_COUNT = 132;
static const int CLOCK_KHZ = 1980000;
static const unsigned char POISON = 0xFF;          /* a float NaN, an int -1 */
static const int MAX_STATIC_SHARED = 32;           /* SG_SHARED arrays per kernel */

/* ---- one failure line, then exit ---------------------------------------------------------- */
struct Team;
struct Self {
    Team* team = nullptr;
    int tid = -1;
};
static thread_local Self self;
static pthread_mutex_t die_mu = PTHREAD_MUTEX_INITIALIZER;

static void vdie(const char* kernel, const char* fmt, va_list ap) {
    /* the first fault is the one reported; a thread of another block faulting at the same time
     * waits here until the process is gone */
    pthread_mutex_lock(&die_mu);
    quiet_unwind();
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    fflush(stdout);
    if (kernel && self.team)
        fprintf(stderr, "seedgpt: CUDA emulation: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n",
                kernel, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, msg);
    else if (kernel)
        fprintf(stderr, "seedgpt: CUDA emulation: kernel %s: %s\n", kernel, msg);
    else
        fprintf(stderr, "seedgpt: CUDA emulation: %s\n", msg);
    fflush(stderr);
    _exit(1);
}
static void die(const char* kernel, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(const char* kernel, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(kernel, fmt, ap);
    va_end(ap);
    _exit(1);
}

static long env_long(const char* name, long dflt, long lo, long hi) {
    const char* s = getenv(name);
    if (!s || !*s) return dflt;
    char* end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) die(nullptr, "%s=%s: expected an integer in [%ld, %ld]", name, s, lo, hi);
    return v;
}

/* The emulated device's largest grid.y and grid.z: 65535, as on every CUDA GPU, unless
 * SG_EMU_MAX_GRID_YZ lowers it (launches are checked against it, and cudaGetDeviceProperties and
 * cudaDeviceGetAttribute report it). Code that bounds its grids by the device's limit then runs
 * its grid-stride path at sizes a test can afford. Read at every launch and query, so a test may
 * change it between launches. */
static long max_grid_yz(void) { return env_long("SG_EMU_MAX_GRID_YZ", 65535, 1, 65535); }

/* The compute capability the emulated device reports, as 10 major + minor: 90 (sm_90) unless
 * SG_EMU_CC says otherwise (SG_EMU_CC=75: a Turing part), so that a test can watch the backend
 * choose its kernels for another GPU (cuda/arch.h). The emulation still runs every kernel; what
 * follows the compute capability is what it reports and the shared memory a block may take
 * (smem_optin below), so a kernel that asks for more than a T4 or a V100 has fails on their
 * emulated twins as it would on the card. The other limits stay sm_90's. Read at every query. */
static int emu_cc(void) { return (int)env_long("SG_EMU_CC", 90, 10, 129); }

/* The dynamic shared memory one block may take with the opt-in (cudaFuncSetAttribute), per
 * compute capability, as the CUDA Programming Guide's table of limits gives it: sm_70/72 96 KiB,
 * sm_75 64 KiB, sm_80/87 163 KiB, sm_86/89 (and sm_12x) 99 KiB, sm_90 and sm_100 227 KiB; older
 * parts 48 KiB, the limit without the opt-in. */
static size_t smem_optin(void) {
    const int cc = emu_cc();
    if (cc == 70 || cc == 72) return 96 * 1024;
    if (cc == 75) return 64 * 1024;
    if (cc == 80 || cc == 87) return 163 * 1024;
    if (cc == 86 || cc == 89 || cc >= 120) return 99 * 1024;
    if (cc >= 90) return 227 * 1024;
    return 48 * 1024;
}
/* and per SM (cudaDeviceProp.sharedMemPerMultiprocessor) */
static size_t smem_per_sm(void) {
    const int cc = emu_cc();
    return cc == 75 ? 64 * 1024 : smem_optin() + (cc >= 80 ? 1024 : 0);
}

/* ---- futex waits -------------------------------------------------------------------------- */
typedef std::atomic<uint32_t> Word;
static void futex_wait(Word* w, uint32_t val, long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t*)w, FUTEX_WAIT_PRIVATE, val, &ts, nullptr, 0);
}
static void futex_wake_all(Word* w) {
    syscall(SYS_futex, (uint32_t*)w, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

struct Launch {                /* the launch in flight (one at a time) */
    const char* name;
    dim3 grid, block;
    size_t dyn_smem, smem_limit;
    long nblocks;
    int nteams;
    const std::function<void()>* body;
};
static Launch cur;
static long stall_seconds = 300;

/* How the CUDA threads of a block run (SG_EMU_THREADS, read at every launch): as fibers of one OS
 * thread per team, switched by the x86-64 switch below (fibers; ucontext elsewhere) or by
 * swapcontext (ucontext), or as one OS thread each (os), the way the emulation first ran them. */
enum Mode { MODE_FIBERS, MODE_UCONTEXT, MODE_OS };
static Mode mode = MODE_FIBERS;
struct Fiber;
static thread_local Fiber* cur_fiber = nullptr;   /* the fiber running on this OS thread, if any */
static void fiber_wait(Word* w, uint32_t val, const char* what, Site site);
/* wakes the OS threads that wait on a team's word; a team's fibers never sleep on one */
static thread_local unsigned fiber_wakes = 0;   /* fiber modes: waits completed on this OS thread */
static inline void wake_waiters(Word* w) {
    if (mode == MODE_OS) futex_wake_all(w);
    else {
        tls_writes_begin();   /* a thread-local the fibers of the OS thread share */
        fiber_wakes++;
        tls_writes_end();
    }
}

/* sleeps until *w differs from val; past the stall limit, reports the kernel */
static void wait_change(Word* w, uint32_t val, const char* what, Site site) {
    if (cur_fiber) {   /* a fiber gives the OS thread to the next one until *w changes */
        fiber_wait(w, val, what, site);
        return;
    }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (w->load(std::memory_order_acquire) == val) {
        futex_wait(w, val, 1000);
        if (w->load(std::memory_order_acquire) != val) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= stall_seconds)
            die(cur.name, "no progress for %ld s waiting at %s (%s:%d): a thread spins or waits "
                "on another block (SG_EMU_STALL_SECONDS)", stall_seconds, what, site.file, site.line);
    }
}

/* ---- a block's team ----------------------------------------------------------------------- */
enum ThreadState { T_RUNNING, T_BARRIER, T_WARP, T_EXITED };
struct ThreadSlot {
    ThreadState state;
    Site site;
};
enum GroupState { G_FREE, G_COLLECTING, G_DRAINING };
struct Group {                 /* one warp collective in progress */
    std::atomic<int> state{G_FREE};   /* written under the team lock, except by the last reader */
    WarpOp op;
    const char* what;          /* the collective's name, for reports */
    unsigned mask, arrived;
    int width;
    int nwords;                /* warp_gather: 32-bit words per lane */
    std::atomic<int> readers{0};
    Site site;                 /* of the first lane to arrive */
    uint64_t value[32];
    uint32_t words[32][SG_EMU_GATHER_WORDS];   /* warp_gather's register sets */
    Word done{0};              /* bumped when the last lane arrives */
    char hb_token;             /* TSan: arrivals happen before departures */
};
struct Warp {
    std::deque<Group> groups;  /* deque: a waiting lane's reference survives growth */
};
struct Team {
    int index;
    pthread_mutex_t mu;
    int nthreads = 0;
    /* __syncthreads */
    int bar_arrived = 0;
    Word bar_gen{0};
    Site bar_site;
    char bar_token[2];         /* TSan: one per generation parity */
    /* leaving the block; the last thread out prepares the next block */
    int exited = 0;
    Word block_gen{0};
    char end_token, start_token;
    long block;                /* the block index the team runs now */
    ThreadSlot th[1024];
    Warp warps[32];
    /* shared memory: the static arena and the dynamic buffer, poisoned at every block start.
     * SG_SHARED offsets are fixed at their first use in a launch (the same kernel code asks for
     * the same arrays in every block), so later lookups read the table without the lock. */
    unsigned char* static_smem = nullptr;
    size_t static_used = 0;
    const void* static_key[MAX_STATIC_SHARED];
    size_t static_off[MAX_STATIC_SHARED];
    std::atomic<int> n_static{0};
    unsigned char* dyn_smem = nullptr;
    size_t dyn_cap = 0;
    /* fiber modes: one fiber per CUDA thread (made on demand, kept between launches) and the
     * context of the OS thread that schedules them; the watchdog reads switches and running */
    Fiber* fibers[1024];
    int n_fibers = 0;
    void* sched_sp = nullptr;
    ucontext_t sched_uc;
    void* sched_tsan = nullptr;
    std::atomic<uint64_t> switches{0};
    std::atomic<int> running{-1};      /* the fiber on the OS thread now, -1: the scheduler */
    std::atomic<bool> scheduling{false};
    Team() {
        pthread_mutex_init(&mu, nullptr);
        static_smem = (unsigned char*)aligned_alloc(128, SMEM_STATIC_MAX);
    }
};
static Team* teams[16];        /* made on demand, kept (SG_EMU_CONCURRENT_BLOCKS is at most 16) */

static inline Team& my_team() {
    if (!self.team) die(nullptr, "a device function was called outside a kernel launch");
    return *self.team;
}
static inline void team_lock(Team& t) {
    quiet_begin();
    pthread_mutex_lock(&t.mu);
}
static inline void team_unlock(Team& t) {
    pthread_mutex_unlock(&t.mu);
    quiet_end();
}

static void flat_to_uint3(long i, dim3 d, uint3* out) {
    out->x = (unsigned)(i % d.x);
    out->y = (unsigned)((i / d.x) % d.y);
    out->z = (unsigned)(i / ((long)d.x * d.y));
}

/* Lanes in `mask` of my warp that a collective would wait for in vain. */
static void check_lanes_can_meet(Team& t, int tid, unsigned mask, Site site, const char* what) {
    int base = tid & ~31;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1) || base + l == tid) continue;
        const ThreadSlot& o = t.th[base + l];
        if (o.state == T_EXITED)
            die(cur.name, "%s at %s:%d names lane %d in mask 0x%08x, but that thread has left the kernel",
                what, site.file, site.line, l, mask);
        if (o.state == T_BARRIER)
            die(cur.name, "%s at %s:%d names lane %d in mask 0x%08x, but that thread waits at __syncthreads (%s:%d)",
                what, site.file, site.line, l, mask, o.site.file, o.site.line);
    }
}

/* a thread about to wait at a barrier or leave: no open collective of its warp may wait for it */
static void check_no_collective_waits_for(Team& t, int tid, const char* doing) {
    Warp& w = t.warps[tid >> 5];
    unsigned bit = 1u << (tid & 31);
    for (Group& g : w.groups)
        if (g.state == G_COLLECTING && (g.mask & bit) && !(g.arrived & bit))
            die(cur.name, "this thread %s while lanes of its warp wait for it in a warp collective "
                "at %s:%d (mask 0x%08x)", doing, g.site.file, g.site.line, g.mask);
}

}  // namespace sg_emu

/* ---- __syncthreads ------------------------------------------------------------------------ */
void sg_emu::syncthreads(Site site) {
    Team& t = my_team();
    int tid = self.tid;
    team_lock(t);
    if (t.exited > 0)
        die(cur.name, "__syncthreads at %s:%d waits for %d thread(s) that have already left the kernel "
            "(divergent barrier)", site.file, site.line, t.exited);
    char where[300];
    snprintf(where, sizeof(where), "waits at __syncthreads (%s:%d)", site.file, site.line);
    check_no_collective_waits_for(t, tid, where);
    if (t.bar_arrived == 0) {
        t.bar_site = site;
    } else if (t.bar_site.line != site.line || strcmp(t.bar_site.file, site.file) != 0) {
        die(cur.name, "divergent barrier: this thread waits at __syncthreads %s:%d while %d other(s) "
            "wait at %s:%d", site.file, site.line, t.bar_arrived, t.bar_site.file, t.bar_site.line);
    }
    uint32_t gen = t.bar_gen.load(std::memory_order_relaxed);
    const char* token = &t.bar_token[gen & 1];
    hb_release(token);
    if (++t.bar_arrived == t.nthreads) {
        /* everyone is released now, though they wake one by one */
        for (int i = 0; i < t.nthreads; i++) t.th[i].state = T_RUNNING;
        t.bar_arrived = 0;
        t.bar_gen.store(gen + 1, std::memory_order_release);
        team_unlock(t);
        wake_waiters(&t.bar_gen);
    } else {
        t.th[tid].state = T_BARRIER;
        t.th[tid].site = site;
        team_unlock(t);
        quiet_begin();   /* the futex word is bookkeeping too */
        wait_change(&t.bar_gen, gen, "__syncthreads", site);
        quiet_end();
    }
    hb_acquire(token);
}

/* ---- warp collectives --------------------------------------------------------------------- */
static const char* op_name(sg_emu::WarpOp op) {
    static const char* names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync", "__ballot_sync", "__all_sync", "__any_sync",
                                  "warp_gather"};
    return names[op];
}

/* a collecting group on a wait-for path from `from` that leads back to `target`, or null */
static sg_emu::Group* waits_back(sg_emu::Warp& w, sg_emu::Group* from, sg_emu::Group* target, uint64_t* visited) {
    using namespace sg_emu;
    unsigned missing = from->mask & ~from->arrived;
    for (size_t i = 0; i < w.groups.size() && i < 64; i++) {
        Group* h = &w.groups[i];
        if (h->state != G_COLLECTING || h == from || !(h->arrived & missing)) continue;
        if (h == target) return from;
        if (*visited >> i & 1) continue;
        *visited |= 1ull << i;
        if (waits_back(w, h, target, visited)) return h;
    }
    return nullptr;
}

/* The meeting every warp collective is: checks the mask, deposits this lane's value (and, for
 * warp_gather, its words), waits until every lane of the mask has arrived, and returns the group,
 * whose deposits stay put until leave_group. Called outside any quiet section; returns inside one. */
static sg_emu::Group* meet(sg_emu::Site site, sg_emu::WarpOp op, const char* what, unsigned mask,
                           uint64_t value, const uint32_t* words, int nwords, int width) {
    using namespace sg_emu;
    Team& t = my_team();
    int tid = self.tid, lane = tid & 31, base = tid & ~31;
    unsigned bit = 1u << lane;
    if (!(mask & bit))
        die(cur.name, "%s at %s:%d called by lane %d with mask 0x%08x, which does not name the caller",
            what, site.file, site.line, lane, mask);
    int lanes = t.nthreads - base < 32 ? t.nthreads - base : 32;
    unsigned exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    if (mask & ~exist)
        die(cur.name, "%s at %s:%d: mask 0x%08x names lanes beyond the block's %d threads", what,
            site.file, site.line, mask, t.nthreads);
    if (width < 1 || width > 32 || (width & (width - 1)))
        die(cur.name, "%s at %s:%d: width %d is not a power of 2 in [1, 32]", what, site.file, site.line, width);

    team_lock(t);
    check_lanes_can_meet(t, tid, mask, site, what);
    Warp& w = t.warps[tid >> 5];
    Group* g = nullptr;
    for (Group& h : w.groups)
        if (h.state == G_COLLECTING && h.mask == mask) { g = &h; break; }
    if (g) {
        if (g->op != op || g->width != width || g->nwords != nwords || strcmp(g->what, what) != 0)
            die(cur.name, "lanes of mask 0x%08x meet at different collectives: %s (width %d) at %s:%d and "
                "%s (width %d) at %s:%d", mask, g->what, g->width, g->site.file, g->site.line,
                what, width, site.file, site.line);
    } else {
        for (Group& h : w.groups)
            if (h.state == G_FREE) { g = &h; break; }
        if (!g) { w.groups.emplace_back(); g = &w.groups.back(); }
        g->state = G_COLLECTING;
        g->op = op;
        g->what = what;
        g->mask = mask;
        g->arrived = 0;
        g->width = width;
        g->nwords = nwords;
        g->site = site;
    }
    g->value[lane] = value;
    if (nwords > 0) memcpy(g->words[lane], words, sizeof(uint32_t) * nwords);
    g->arrived |= bit;
    /* Lanes of one mask may be busy in another group for now (two half-warps, one ahead of the
     * other); only a cycle of groups each waiting for lanes held in the next is a deadlock. My
     * arrival adds edges into my group only, so a new cycle passes through it. */
    uint64_t visited = 0;
    if (g->arrived != g->mask) {
        Group* h = waits_back(w, g, g, &visited);
        if (h)
            die(cur.name, "mismatched masks: %s at %s:%d with mask 0x%08x waits for lanes held in %s at %s:%d "
                "with mask 0x%08x, which waits (directly or not) for this group", what, site.file, site.line,
                mask, h->what, h->site.file, h->site.line, h->mask);
    }
    hb_release(&g->hb_token);
    if (g->arrived == g->mask) {
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1) t.th[base + l].state = T_RUNNING;
        g->state = G_DRAINING;
        g->readers.store(__builtin_popcount(mask), std::memory_order_relaxed);
        g->done.fetch_add(1, std::memory_order_release);
        team_unlock(t);
        quiet_begin();
        wake_waiters(&g->done);
    } else {
        t.th[tid].state = T_WARP;
        t.th[tid].site = site;
        uint32_t seen = g->done.load(std::memory_order_relaxed);
        team_unlock(t);
        quiet_begin();
        wait_change(&g->done, seen, what, site);
    }
    /* the group's values stay put until its last reader is done (no lock needed to read) */
    hb_acquire(&g->hb_token);
    return g;
}

/* this lane is done reading the group's deposits; the last reader frees the group */
static void leave_group(sg_emu::Group* g) {
    if (g->readers.fetch_sub(1, std::memory_order_acq_rel) == 1) g->state.store(sg_emu::G_FREE, std::memory_order_release);
    quiet_end();
}

uint64_t sg_emu::warp_collective(Site site, WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    Group* g = meet(site, op, op_name(op), mask, value, nullptr, 0, width);
    int lane = self.tid & 31;
    /* every lane of the group has arrived: read my result from their values */
    uint64_t r = 0;
    int seg = lane & ~(width - 1);
    int src = -1;
    switch (op) {
    case WARP_SYNC:
    case WARP_GATHER: break;
    case WARP_IDX: src = seg + ((unsigned)arg % (unsigned)width); break;
    case WARP_UP: src = lane - arg >= seg ? lane - arg : lane; break;
    case WARP_DOWN: src = lane + arg < seg + width ? lane + arg : lane; break;
    case WARP_XOR: src = (lane ^ arg) < seg + width ? (lane ^ arg) : lane; break;
    case WARP_BALLOT:
    case WARP_ALL:
    case WARP_ANY: {
        unsigned ballot = 0;
        for (int l = 0; l < 32; l++)
            if ((mask >> l & 1) && g->value[l]) ballot |= 1u << l;
        r = op == WARP_BALLOT ? ballot : op == WARP_ALL ? (ballot == mask) : (ballot != 0);
        break;
    }
    }
    if (src >= 0) {
        /* reading a lane outside the mask is undefined on a GPU: here it reads the poison */
        r = (src < 32 && (mask >> src & 1)) ? g->value[src] : ~0ull;
    }
    leave_group(g);
    return r;
}

void sg_emu::warp_gather(Site site, const char* what, unsigned mask, const uint32_t* words, int nwords,
                         uint32_t* out) {
    if (nwords < 1 || nwords > SG_EMU_GATHER_WORDS)
        die(cur.name, "%s at %s:%d: %d words per lane (1 to %d)", what, site.file, site.line, nwords,
            SG_EMU_GATHER_WORDS);
    Group* g = meet(site, WARP_GATHER, what, mask, 0, words, nwords, 32);
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < nwords; i++) out[l * nwords + i] = (mask >> l & 1) ? g->words[l][i] : ~0u;
    leave_group(g);
}

/* ---- shared memory ------------------------------------------------------------------------ */
/* is [p, p + n) inside the block's shared memory (the dynamic buffer or the static arena)? */
static bool in_shared(const sg_emu::Team& t, const void* p, size_t n) {
    const unsigned char* a = (const unsigned char*)p;
    if (t.dyn_smem && a >= t.dyn_smem && a + n <= t.dyn_smem + sg_emu::cur.dyn_smem) return true;
    return a >= t.static_smem && a + n <= t.static_smem + sg_emu::SMEM_STATIC_MAX;
}

/* ---- ldmatrix ----------------------------------------------------------------------------- */
void sg_emu::ldmatrix(Site site, const char* what, int nmat, int trans, const void* row, uint32_t* r) {
    Team& t = my_team();
    uintptr_t a = (uintptr_t)row;
    uint32_t mine[2] = {(uint32_t)a, (uint32_t)(a >> 32)}, all[64];
    warp_gather(site, what, 0xffffffffu, mine, 2, all);
    const int lane = self.tid & 31, g = lane >> 2, tq = lane & 3;
    /* the rows of the lanes that give them: 16-byte aligned, in shared memory */
    for (int l = 0; l < 8 * nmat; l++) {
        const uintptr_t p = (uintptr_t)all[2 * l] | (uintptr_t)all[2 * l + 1] << 32;
        if (p % 16 != 0 || !in_shared(t, (const void*)p, 16))
            die(cur.name, "%s at %s:%d: lane %d gives row address %p, %s", what, site.file, site.line, l,
                (const void*)p, p % 16 ? "not 16-byte aligned" : "not inside the block's shared memory");
    }
    auto elem = [&](int l, int c) {   /* element c of the row lane l gave */
        const uintptr_t p = (uintptr_t)all[2 * l] | (uintptr_t)all[2 * l + 1] << 32;
        uint16_t v;
        memcpy(&v, (const unsigned char*)p + 2 * c, 2);
        return (uint32_t)v;
    };
    for (int m = 0; m < nmat; m++) {
        if (!trans) r[m] = elem(8 * m + g, 2 * tq) | elem(8 * m + g, 2 * tq + 1) << 16;
        else r[m] = elem(8 * m + 2 * tq, g) | elem(8 * m + 2 * tq + 1, g) << 16;
    }
}

/* ---- cp.async: issued copies land at the wait --------------------------------------------- */
namespace sg_emu {
struct CpCopy {
    void* dst;
    const void* src;
    int bytes, src_bytes;
    Site site;
};
struct CpState {
    std::vector<CpCopy> open;                  /* issued since the last commit */
    std::deque<std::vector<CpCopy>> groups;    /* committed, oldest first */
};
static thread_local CpState* cp_cur = nullptr;   /* the running CUDA thread's (see run_team_thread) */
static void cp_perform(const CpCopy& c) {
    if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
    if (c.src_bytes < c.bytes) memset((unsigned char*)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
}
/* the thread leaves the block: every copy it issued must have landed */
static void cp_check_at_exit(void) {
    size_t n = cp_cur->open.size();
    const CpCopy* first = n ? &cp_cur->open[0] : nullptr;
    for (auto& g : cp_cur->groups) {
        if (!first && !g.empty()) first = &g[0];
        n += g.size();
    }
    if (n > 0)
        die(cur.name, "this thread leaves the kernel with %zu cp.async cop%s never waited for (the first issued at "
            "%s:%d): a missing sg_cp_async_commit / sg_cp_async_wait", n, n == 1 ? "y" : "ies", first->site.file,
            first->site.line);
}
}  // namespace sg_emu

void sg_emu::cp_async(Site site, void* dst, const void* src, int bytes, int src_bytes) {
    Team& t = my_team();
    if (bytes != 4 && bytes != 8 && bytes != 16)
        die(cur.name, "cp.async at %s:%d: %d bytes (4, 8 or 16)", site.file, site.line, bytes);
    if (src_bytes < 0 || src_bytes > bytes)
        die(cur.name, "cp.async at %s:%d: src_bytes %d outside [0, %d]", site.file, site.line, src_bytes, bytes);
    if ((uintptr_t)dst % bytes != 0 || !in_shared(t, dst, (size_t)bytes))
        die(cur.name, "cp.async at %s:%d: destination %p %s", site.file, site.line, dst,
            (uintptr_t)dst % bytes ? "not aligned to the copy's size" : "not inside the block's shared memory");
    if ((uintptr_t)src % bytes != 0)
        die(cur.name, "cp.async at %s:%d: source %p not aligned to the copy's %d bytes", site.file, site.line, src,
            bytes);
    memset(dst, POISON, (size_t)bytes);   /* undefined until the wait */
    cp_cur->open.push_back(CpCopy{dst, src, bytes, src_bytes, site});
}

void sg_emu::cp_async_commit(Site site) {
    (void)my_team();
    (void)site;
    cp_cur->groups.push_back(std::move(cp_cur->open));
    cp_cur->open.clear();
}

void sg_emu::cp_async_wait(Site site, int n) {
    (void)my_team();
    (void)site;
    while ((int)cp_cur->groups.size() > n) {
        for (const CpCopy& c : cp_cur->groups.front()) cp_perform(c);
        cp_cur->groups.pop_front();
    }
}

void* sg_emu::dynamic_shared(void) {
    return my_team().dyn_smem;   /* a launch with 0 bytes still gets an address, as on a GPU */
}

void* sg_emu::static_shared(const void* key, size_t bytes, Site site) {
    Team& t = my_team();
    void* p = nullptr;
    quiet_begin();
    int n = t.n_static.load(std::memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (t.static_key[i] == key) { p = t.static_smem + t.static_off[i]; break; }
    quiet_end();
    if (p) return p;
    team_lock(t);
    n = t.n_static.load(std::memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (t.static_key[i] == key) { p = t.static_smem + t.static_off[i]; break; }
    if (!p) {
        size_t off = (t.static_used + 15) & ~(size_t)15;
        if (off + bytes > SMEM_STATIC_MAX || off + bytes + cur.dyn_smem > cur.smem_limit)
            die(cur.name, "SG_SHARED at %s:%d: %zu bytes of static shared memory (%zu already) plus %zu "
                "dynamic exceed the block's %zu", site.file, site.line, bytes, off, cur.dyn_smem,
                off + bytes > SMEM_STATIC_MAX ? SMEM_STATIC_MAX : cur.smem_limit);
        if (n == MAX_STATIC_SHARED)
            die(cur.name, "SG_SHARED at %s:%d: more than %d shared arrays in one kernel", site.file,
                site.line, MAX_STATIC_SHARED);
        t.static_key[n] = key;
        t.static_off[n] = off;
        t.static_used = off + bytes;
        t.n_static.store(n + 1, std::memory_order_release);
        p = t.static_smem + off;
    }
    team_unlock(t);
    return p;
}

/* ---- the thread pool ---------------------------------------------------------------------- */
namespace sg_emu {

struct Worker {
    pthread_t thread;
    int index;
    Word job{0};               /* the launch number it was last given */
};
static std::vector<Worker*> workers;
static Word pool_left{0};      /* workers of the launch still running; the host sleeps on it */
static uint32_t launch_no = 0;
static bool in_launch = false;
static char launch_token, done_token;   /* TSan: the host before the kernel, the kernel before the host */

static void prepare_block(Team& t, long b) {
    memset(t.static_smem, POISON, SMEM_STATIC_MAX);
    if (cur.dyn_smem) memset(t.dyn_smem, POISON, cur.dyn_smem);
    t.exited = 0;
    t.bar_arrived = 0;
    t.block = b;
    for (int i = 0; i < t.nthreads; i++) t.th[i].state = T_RUNNING;
}

/* The thread leaves the block. Returns once the team's next block is ready (or there is none). */
static void leave_block(Team& t, int tid) {
    team_lock(t);
    if (t.bar_arrived > 0)
        die(cur.name, "divergent barrier: this thread left the kernel while %d thread(s) wait at "
            "__syncthreads %s:%d", t.bar_arrived, t.bar_site.file, t.bar_site.line);
    check_no_collective_waits_for(t, tid, "left the kernel");
    t.th[tid].state = T_EXITED;
    hb_release(&t.end_token);
    if (++t.exited == t.nthreads) {
        team_unlock(t);
        hb_acquire(&t.end_token);
        long next = t.block + cur.nteams;
        if (next < cur.nblocks) prepare_block(t, next);
        else t.block = next;
        hb_release(&t.start_token);
        quiet_begin();
        t.block_gen.fetch_add(1, std::memory_order_release);
        wake_waiters(&t.block_gen);
        quiet_end();
    } else {
        uint32_t gen = t.block_gen.load(std::memory_order_relaxed);
        team_unlock(t);
        quiet_begin();
        wait_change(&t.block_gen, gen, "the end of the block", Site{"(runtime)", 0});
        quiet_end();
    }
    hb_acquire(&t.start_token);
}

/* One CUDA thread: every block of its team, in turn. Its thread-locals are written while TSan
 * ignores writes: in the fiber modes the fibers of one OS thread share them (each puts its own
 * back when it runs again), and nothing orders one fiber's writes before another's. */
static void run_team_thread(Team& t, int tid, CpState* cp) {
    tls_writes_begin();
    self.team = &t;
    self.tid = tid;
    cp_cur = cp;
    blockDim = cur.block;
    gridDim = cur.grid;
    flat_to_uint3(tid, cur.block, &threadIdx);
    tls_writes_end();
    while (t.block < cur.nblocks) {
        tls_writes_begin();
        flat_to_uint3(t.block, cur.grid, &blockIdx);
        tls_writes_end();
        (*cur.body)();
        cp_check_at_exit();
        leave_block(t, tid);
    }
    tls_writes_begin();
    self.team = nullptr;
    self.tid = -1;
    tls_writes_end();
}

static size_t stack_bytes(void) {
    static size_t stack = (size_t)env_long("SG_EMU_STACK_KB", 256, 64, 1 << 20) * 1024;
    return stack;
}

/* ---- fibers: the CUDA threads of a team as coroutines of one OS thread -----------------------
 * A fiber runs until it must wait (a barrier, a warp collective, the end of the block); then it
 * switches to its team's scheduler, which resumes the next fiber whose wait is over, round robin.
 * No system call on the way: a switch saves the callee-saved registers on the fiber's stack. The
 * checks, the bookkeeping and the TSan annotations are those of the OS-thread mode; only the wait
 * differs. A fiber lives as long as the process and loops over launches: after its last block it
 * parks, done, until the next launch resumes it. */
struct TlsState {              /* the thread-locals a CUDA thread sees */
    uint3 thread_idx, block_idx;
    dim3 block_dim, grid_dim;
    Self self;
    CpState* cp;
    Fiber* fiber;
    int quiet;
};
static inline void tls_save(TlsState* s) {
    s->thread_idx = threadIdx;
    s->block_idx = blockIdx;
    s->block_dim = blockDim;
    s->grid_dim = gridDim;
    s->self = self;
    s->cp = cp_cur;
    s->fiber = cur_fiber;
#if defined(__SANITIZE_THREAD__)
    s->quiet = quiet_depth;
#endif
}
static inline void tls_load(const TlsState* s) {
    tls_writes_begin();
    threadIdx = s->thread_idx;
    blockIdx = s->block_idx;
    blockDim = s->block_dim;
    gridDim = s->grid_dim;
    self = s->self;
    cp_cur = s->cp;
    cur_fiber = s->fiber;
#if defined(__SANITIZE_THREAD__)
    quiet_depth = s->quiet;
#endif
    tls_writes_end();
}

struct Fiber {
    Team* team;
    int tid;
    int kind = -1;             /* the mode its context was made for; -1: to be made */
    void* sp = nullptr;        /* MODE_FIBERS: the stack pointer it was switched out at */
    ucontext_t uc;             /* MODE_UCONTEXT */
    unsigned char* stack;      /* stack_bytes(), a guard page below */
    size_t stack_size;
    bool done = true;          /* finished this launch */
    Word* wait_word = nullptr; /* waits until *wait_word != wait_val */
    uint32_t wait_val = 0;
    const char* wait_what = nullptr;
    Site wait_site{nullptr, 0};
    CpState cp;
    TlsState tls;
    void* tsan = nullptr;
};

/* x86-64: a switch that saves what the SysV ABI makes the callee keep (rbx, rbp, r12-r15, the
 * MXCSR and x87 control words) on the old stack and pops them from the new one; no signal mask,
 * so no system call (swapcontext makes one). Elsewhere: ucontext. */
#if defined(__x86_64__) && defined(__ELF__)
#define SG_EMU_ASM_SWITCH 1
extern "C" void sg_emu_fiber_switch(void** save_sp, void* to_sp);
extern "C" void sg_emu_fiber_start(void);
asm(R"(
    .pushsection .text
    .globl sg_emu_fiber_switch
    .hidden sg_emu_fiber_switch
    .type sg_emu_fiber_switch, @function
    .p2align 4
sg_emu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size sg_emu_fiber_switch, .-sg_emu_fiber_switch
    .globl sg_emu_fiber_start
    .hidden sg_emu_fiber_start
    .type sg_emu_fiber_start, @function
sg_emu_fiber_start:
    movq %r13, %rdi
    callq *%r12
    ud2
    .size sg_emu_fiber_start, .-sg_emu_fiber_start
    .popsection
)");
#endif

static void fiber_switch_out(Fiber* f);

static void fiber_main(Fiber* f) {
    TlsState fresh = {};
    fresh.fiber = f;
    tls_load(&fresh);
    for (;;) {
        hb_acquire(&launch_token);
        run_team_thread(*f->team, f->tid, &f->cp);
        hb_release(&done_token);
        quiet_begin();
        f->done = true;
        fiber_switch_out(f);   /* parked until the next launch */
        quiet_end();
    }
}
static void fiber_main_uc(unsigned lo, unsigned hi) {
    fiber_main((Fiber*)((uintptr_t)hi << 32 | (uintptr_t)lo));
}

/* a fresh context at the top of the fiber's stack, entering fiber_main */
static void fiber_make(Fiber* f, Team& t, int kind) {
#if defined(__SANITIZE_THREAD__)
    /* a new TSan fiber too: a parked one is inside a quiet section, ignoring its accesses */
    /* made outside the quiet sections, so that the fiber starts after what its OS thread did
     * before (TSan's writes that set up the thread's TLS, which the fiber reads) */
    if (f->tsan) __tsan_destroy_fiber(f->tsan);
    int depth = quiet_depth;
    for (int i = 0; i < depth; i++) quiet_end();
    f->tsan = __tsan_create_fiber(0);
    for (int i = 0; i < depth; i++) quiet_begin();
    char name[64];
    snprintf(name, sizeof(name), "emulated CUDA thread %d (team %d)", f->tid, t.index);
    __tsan_set_fiber_name(f->tsan, name);
#endif
    f->cp.open.clear();
    f->cp.groups.clear();
#ifdef SG_EMU_ASM_SWITCH
    if (kind == MODE_FIBERS) {
        uintptr_t top = (uintptr_t)(f->stack + f->stack_size) & ~(uintptr_t)15;
        uint64_t* ret = (uint64_t*)(top - 24);   /* so that fiber_main starts with rsp = 8 mod 16 */
        ret[1] = ret[2] = 0;
        ret[0] = (uint64_t)(uintptr_t)sg_emu_fiber_start;
        uint64_t* sp = ret - 7;
        uint32_t mxcsr;
        uint16_t fpucw;
        __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
        __asm__ volatile("fnstcw %0" : "=m"(fpucw));
        sp[0] = 0;
        memcpy(&sp[0], &mxcsr, 4);
        memcpy((char*)&sp[0] + 4, &fpucw, 2);
        sp[1] = sp[2] = 0;                          /* r15, r14 */
        sp[3] = (uint64_t)(uintptr_t)f;             /* r13: the argument */
        sp[4] = (uint64_t)(uintptr_t)fiber_main;    /* r12: the function */
        sp[5] = sp[6] = 0;                          /* rbx, rbp */
        f->sp = sp;
        f->kind = kind;
        return;
    }
#endif
    if (getcontext(&f->uc) != 0) die(nullptr, "getcontext failed for emulated GPU thread %d", f->tid);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)(void))fiber_main_uc, 2, (unsigned)(uintptr_t)f,
                (unsigned)((uintptr_t)f >> 32));
    f->kind = MODE_UCONTEXT;
}

static Fiber* new_fiber(Team& t, int tid) {
    Fiber* f = new Fiber;
    f->team = &t;
    f->tid = tid;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = (stack_bytes() + page - 1) / page * page;
    void* m = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        die(nullptr, "cannot map the stack of emulated GPU thread %d (SG_EMU_STACK_KB %zu)", tid, stack_bytes() / 1024);
    mprotect(m, page, PROT_NONE);   /* a guard page: an overflow faults, as on an OS thread's stack */
    f->stack = (unsigned char*)m + page;
    f->stack_size = bytes;
    return f;
}

/* the scheduler gives the OS thread to f until f waits or finishes the launch */
static inline void switch_in(Team& t, Fiber* f) {
#if defined(__SANITIZE_THREAD__)
    __tsan_switch_to_fiber(f->tsan, tsan_switch_no_sync);   /* no_sync: a switch orders nothing */
#endif
#ifdef SG_EMU_ASM_SWITCH
    if (f->kind == MODE_FIBERS) {
        void* to = f->sp;
        sg_emu_fiber_switch(&t.sched_sp, to);
        return;
    }
#endif
    swapcontext(&t.sched_uc, &f->uc);
}

/* the fiber gives the OS thread back to its scheduler; returns when resumed */
static void fiber_switch_out(Fiber* f) {
    Team& t = *f->team;
    tls_save(&f->tls);
#if defined(__SANITIZE_THREAD__)
    __tsan_switch_to_fiber(t.sched_tsan, tsan_switch_no_sync);
#endif
#ifdef SG_EMU_ASM_SWITCH
    if (f->kind == MODE_FIBERS) {
        void* to = t.sched_sp;
        sg_emu_fiber_switch(&f->sp, to);
    } else
#endif
        swapcontext(&f->uc, &t.sched_uc);
    tls_load(&f->tls);
}

/* wait_change for a fiber: called inside a quiet section */
static void fiber_wait(Word* w, uint32_t val, const char* what, Site site) {
    Fiber* f = cur_fiber;
    f->wait_word = w;
    f->wait_val = val;
    f->wait_what = what;
    f->wait_site = site;
    fiber_switch_out(f);
    f->wait_word = nullptr;
}

/* Runs the team's share of the launch: its nthreads fibers, each until it waits. A fiber is
 * resumed only once what it waits for has changed; only the team's own fibers change it, so a
 * full round with none to resume is a deadlock that no check caught: the scheduler then sleeps
 * and the watchdog reports it, as a thread that spins is reported.
 *
 * The order is greedy, so that a missing barrier shows: whenever a wait completes, the scan starts
 * again from the first fiber, so the lowest runnable thread always runs on (a warp runs ahead of
 * the others through its own collectives, and reads what a later warp has not yet written). Odd
 * launches scan from the last fiber instead, so that the later warps run ahead too. Without a
 * completed wait the scan goes on from where it was (each arrival at a barrier costs O(1)). */
static void run_fiber_team(Team& t, uint32_t launch) {
    quiet_begin();
    const int n = t.nthreads;
#if defined(__SANITIZE_THREAD__)
    t.sched_tsan = __tsan_get_current_fiber();
#endif
    while (t.n_fibers < n) {
        t.fibers[t.n_fibers] = new_fiber(t, t.n_fibers);
        t.n_fibers++;
    }
    for (int i = 0; i < n; i++) {
        Fiber* f = t.fibers[i];
        if (f->kind != (int)mode) fiber_make(f, t, mode);
        f->done = false;
        f->wait_word = nullptr;
    }
    TlsState mine;
    tls_save(&mine);
    t.scheduling.store(true, std::memory_order_release);
    const bool down = launch & 1;
    const int first = down ? n - 1 : 0;
    int live = n, idle = 0, i = first;
    while (live > 0) {
        Fiber* f = t.fibers[i];
        if (f->done || (f->wait_word && f->wait_word->load(std::memory_order_acquire) == f->wait_val)) {
            if (++idle >= n) {
                idle = 0;
                struct timespec ts = {0, 20 * 1000000L};
                nanosleep(&ts, nullptr);
            }
            i = down ? (i == 0 ? n - 1 : i - 1) : (i + 1 == n ? 0 : i + 1);
            continue;
        }
        idle = 0;
        unsigned wakes = fiber_wakes;
        t.running.store(i, std::memory_order_relaxed);
        switch_in(t, f);
        t.running.store(-1, std::memory_order_relaxed);
        tls_load(&mine);
        t.switches.fetch_add(1, std::memory_order_relaxed);
        if (f->done) live--;
        if (fiber_wakes != wakes) i = first;   /* waiters released: the first runnable goes on */
        else i = down ? (i == 0 ? n - 1 : i - 1) : (i + 1 == n ? 0 : i + 1);
    }
    t.scheduling.store(false, std::memory_order_release);
    quiet_end();
}

/* ---- the watchdog: a fiber that spins holds its OS thread, so no fiber can time its own wait.
 * A thread of its own looks at every team a few times a second, and reports a team whose fibers
 * have not switched for SG_EMU_STALL_SECONDS, naming a fiber that waits (or the one running). */
static std::atomic<uint32_t> watch_launch{0};   /* bumped at every launch in a fiber mode */
static std::atomic<int> watch_teams{0};         /* teams of that launch; 0: none in flight */
static bool watchdog_started = false;

static void report_stall(Team& t) {
    int tid = t.running.load(std::memory_order_relaxed);
    Fiber* w = nullptr;   /* with none running, the scheduler found no fiber to resume */
    for (int i = 0; tid < 0 && i < t.nthreads && i < t.n_fibers; i++)
        if (!t.fibers[i]->done && t.fibers[i]->wait_word) { w = t.fibers[i]; break; }
    if (w) tid = w->tid;
    self.team = &t;
    self.tid = tid;
    flat_to_uint3(tid < 0 ? 0 : tid, cur.block, &threadIdx);
    flat_to_uint3(t.block, cur.grid, &blockIdx);
    if (w)
        die(cur.name, "no progress for %ld s waiting at %s (%s:%d): a thread spins or waits "
            "on another block (SG_EMU_STALL_SECONDS)", stall_seconds, w->wait_what, w->wait_site.file,
            w->wait_site.line);
    die(cur.name, "no progress for %ld s: this thread runs on without reaching a barrier or collective: it "
        "spins or waits on another block (SG_EMU_STALL_SECONDS)", stall_seconds);
}

static void* watchdog_main(void*) {
    quiet_begin();   /* it reads bookkeeping only, and orders nothing */
    uint32_t launch = 0;
    uint64_t seen[16] = {0};
    struct timespec since[16], now;
    for (;;) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, nullptr);
        int nt = watch_teams.load(std::memory_order_acquire);
        uint32_t l = watch_launch.load(std::memory_order_acquire);
        clock_gettime(CLOCK_MONOTONIC, &now);
        for (int i = 0; i < nt && i < 16; i++) {
            Team* t = teams[i];
            if (!t) continue;
            uint64_t s = t->switches.load(std::memory_order_relaxed);
            if (l != launch || s != seen[i] || !t->scheduling.load(std::memory_order_acquire)) {
                seen[i] = s;
                since[i] = now;
            } else if (now.tv_sec - since[i].tv_sec >= stall_seconds &&
                       watch_launch.load(std::memory_order_acquire) == l) {
                report_stall(*t);
            }
        }
        launch = l;
    }
    return nullptr;
}

static void start_watchdog(void) {
    if (watchdog_started) return;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, watchdog_main, nullptr) != 0)
        die(nullptr, "cannot start the emulation's watchdog thread");
    pthread_attr_destroy(&attr);
    watchdog_started = true;
}

static void* worker_main(void* arg) {
    Worker* w = (Worker*)arg;
    uint32_t seen = 0;
    CpState cp;   /* the cp.async state of the CUDA thread it runs (os mode) */
    for (;;) {
        quiet_begin();
        while (w->job.load(std::memory_order_acquire) == seen) futex_wait(&w->job, seen, 60000);
        seen = w->job.load(std::memory_order_acquire);
        quiet_end();
        hb_acquire(&launch_token);
        if (mode == MODE_OS) {
            int per_team = cur.block.x * cur.block.y * cur.block.z;
            run_team_thread(*teams[w->index / per_team], w->index % per_team, &cp);
        } else {
            run_fiber_team(*teams[w->index + 1], launch_no);   /* team 0 runs on the host thread */
        }
        hb_release(&done_token);
        quiet_begin();
        if (pool_left.fetch_sub(1, std::memory_order_acq_rel) == 1) futex_wake_all(&pool_left);
        quiet_end();
    }
    return nullptr;
}

/* A child made by fork() has none of the pool's threads, nor the watchdog: it starts its own.
 * Fibers parked by the parent's threads get fresh contexts (their saved frames belong to threads
 * that do not exist here). */
static void forget_pool_in_child(void) {
    workers.clear();   /* the parent's Worker records stay with the parent's threads */
    in_launch = false;
    watchdog_started = false;
    watch_teams.store(0);
    for (Team* t : teams) {
        if (!t) continue;
        t->scheduling.store(false);
        for (int i = 0; i < t->n_fibers; i++) t->fibers[i]->kind = -1;
    }
}

static void grow_pool(int n) {
    static bool atfork_set = false;
    if (!atfork_set) {
        pthread_atfork(nullptr, nullptr, forget_pool_in_child);
        atfork_set = true;
    }
    size_t stack = stack_bytes();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while ((int)workers.size() < n) {
        Worker* w = new Worker;
        w->index = (int)workers.size();
        if (pthread_create(&w->thread, &attr, worker_main, w) != 0)
            die(nullptr, "cannot start emulated GPU thread %d (SG_EMU_STACK_KB %zu)", w->index, stack / 1024);
        workers.push_back(w);
    }
    pthread_attr_destroy(&attr);
}

/* SG_EMU_THREADS: fibers (the default), ucontext (fibers switched by swapcontext: the portable
 * switch, which is the fibers' switch where there is no x86-64 one), os (an OS thread each) */
static Mode threads_mode(void) {
    const char* s = getenv("SG_EMU_THREADS");
    if (!s || !*s || !strcmp(s, "fibers")) {
#ifdef SG_EMU_ASM_SWITCH
        return MODE_FIBERS;
#else
        return MODE_UCONTEXT;
#endif
    }
    if (!strcmp(s, "ucontext")) return MODE_UCONTEXT;
    if (!strcmp(s, "os")) return MODE_OS;
    die(nullptr, "SG_EMU_THREADS=%s: expected fibers, ucontext or os", s);
}

/* ---- launch ------------------------------------------------------------------------------- */
static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER;   /* attributes, allocations */
static std::map<const void*, int> max_dyn_smem;                 /* cudaFuncSetAttribute */
static thread_local cudaError_t last_error = cudaSuccess;

static cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

}  // namespace sg_emu

cudaError_t sg_emu::func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return value >= -1 && value <= 100 ? cudaSuccess : set_error(cudaErrorInvalidValue);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > smem_optin())
        return set_error(cudaErrorInvalidValue);
    pthread_mutex_lock(&state_mu);
    max_dyn_smem[kernel] = value;
    pthread_mutex_unlock(&state_mu);
    return cudaSuccess;
}

cudaError_t sg_emu::launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t dyn_smem,
                           const std::function<void()>& body) {
    if (self.team) die(name, "launched from inside a kernel (no dynamic parallelism in the subset)");
    if (in_launch) die(name, "launched while another launch runs (one host thread launches)");
    long threads = (long)block.x * block.y * block.z;
    if (block.x < 1 || block.y < 1 || block.z < 1 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        threads > 1024)
        return set_error(cudaErrorInvalidConfiguration);
    const unsigned yz = (unsigned)max_grid_yz();
    if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u || grid.y > yz || grid.z > yz)
        return set_error(cudaErrorInvalidConfiguration);
    pthread_mutex_lock(&state_mu);
    auto it = max_dyn_smem.find(kernel);
    bool opted_in = it != max_dyn_smem.end();
    size_t dyn_limit = opted_in ? (size_t)it->second : SMEM_DEFAULT;
    pthread_mutex_unlock(&state_mu);
    const size_t optin = smem_optin();   /* an opt-in made under a larger SG_EMU_CC no longer holds */
    if (dyn_limit > optin) dyn_limit = optin;
    if (dyn_smem > dyn_limit) return set_error(cudaErrorInvalidValue);

    stall_seconds = env_long("SG_EMU_STALL_SECONDS", 300, 1, 1L << 30);
    mode = threads_mode();
    long nblocks = (long)grid.x * grid.y * grid.z;
    long nteams = env_long("SG_EMU_CONCURRENT_BLOCKS", 1, 1, 16);
    if (nteams > nblocks) nteams = nblocks;
    in_launch = true;
    cur.name = name;
    cur.grid = grid;
    cur.block = block;
    cur.dyn_smem = dyn_smem;
    cur.smem_limit = opted_in ? optin : SMEM_DEFAULT;
    cur.nblocks = nblocks;
    cur.nteams = (int)nteams;
    cur.body = &body;
    for (int i = 0; i < nteams; i++)
        if (!teams[i]) {
            teams[i] = new Team;
            teams[i]->index = i;
        }
    for (int i = 0; i < nteams; i++) {
        Team& t = *teams[i];
        t.nthreads = (int)threads;
        t.static_used = 0;
        t.n_static.store(0, std::memory_order_relaxed);
        for (Warp& w : t.warps)
            for (Group& g : w.groups) g.state = G_FREE;
        if (t.dyn_cap < dyn_smem || !t.dyn_smem) {
            free(t.dyn_smem);
            t.dyn_cap = dyn_smem < 16 ? 16 : dyn_smem;
            t.dyn_smem = (unsigned char*)aligned_alloc(128, (t.dyn_cap + 127) & ~(size_t)127);
        }
        prepare_block(t, i);
    }
    if (mode == MODE_OS) {
        int needed = (int)(nteams * threads);
        grow_pool(needed);
        pool_left.store(needed, std::memory_order_relaxed);
        launch_no++;
        hb_release(&launch_token);
        quiet_begin();
        for (int i = 0; i < needed; i++) {
            workers[i]->job.store(launch_no, std::memory_order_release);
            futex_wake_all(&workers[i]->job);
        }
    } else {
        /* team 0's fibers run on this thread; each other team's on a worker of its own */
        int helpers = (int)nteams - 1;
        grow_pool(helpers);
        start_watchdog();
        pool_left.store(helpers, std::memory_order_relaxed);
        launch_no++;
        hb_release(&launch_token);
        quiet_begin();
        watch_launch.fetch_add(1, std::memory_order_release);
        watch_teams.store((int)nteams, std::memory_order_release);
        for (int i = 0; i < helpers; i++) {
            workers[i]->job.store(launch_no, std::memory_order_release);
            futex_wake_all(&workers[i]->job);
        }
        run_fiber_team(*teams[0], launch_no);
    }
    uint32_t left;
    while ((left = pool_left.load(std::memory_order_acquire)) != 0) futex_wait(&pool_left, left, 60000);
    watch_teams.store(0, std::memory_order_release);
    quiet_end();
    hb_acquire(&done_token);
    in_launch = false;
    return cudaSuccess;
}

/* ---- device memory ------------------------------------------------------------------------ */
namespace sg_emu {
static std::map<uintptr_t, size_t> allocations;   /* start -> bytes */
static size_t allocated_bytes = 0;

/* is [p, p + n) inside one allocation? */
static bool is_device(const void* p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&state_mu);
    auto it = allocations.upper_bound(a);
    bool ok = false;
    if (it != allocations.begin()) {
        --it;
        ok = a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
    }
    pthread_mutex_unlock(&state_mu);
    return ok;
}
}  // namespace sg_emu

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    using namespace sg_emu;
    if (!ptr) return set_error(cudaErrorInvalidValue);
    pthread_mutex_lock(&state_mu);
    bool room = allocated_bytes + bytes <= GLOBAL_MEM;
    pthread_mutex_unlock(&state_mu);
    void* p = room ? aligned_alloc(256, bytes ? (bytes + 255) & ~(size_t)255 : 256) : nullptr;
    if (!p) { *ptr = nullptr; return set_error(cudaErrorMemoryAllocation); }
    memset(p, POISON, bytes);   /* device memory starts as garbage: make reading it visible */
    pthread_mutex_lock(&state_mu);
    allocations[(uintptr_t)p] = bytes;
    allocated_bytes += bytes;
    pthread_mutex_unlock(&state_mu);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    using namespace sg_emu;
    if (!ptr) return cudaSuccess;
    pthread_mutex_lock(&state_mu);
    auto it = allocations.find((uintptr_t)ptr);
    bool known = it != allocations.end();
    if (known) {
        allocated_bytes -= it->second;
        allocations.erase(it);
    }
    pthread_mutex_unlock(&state_mu);
    if (!known) return set_error(cudaErrorInvalidValue);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    using namespace sg_emu;
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return set_error(cudaErrorInvalidValue);
    bool dst_dev = is_device(dst, bytes), src_dev = is_device(src, bytes);
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToHost: ok = true; break;
    case cudaMemcpyHostToDevice: ok = dst_dev; break;
    case cudaMemcpyDeviceToHost: ok = src_dev; break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyDefault: ok = true; break;
    default: return set_error(cudaErrorInvalidMemcpyDirection);
    }
    if (!ok) return set_error(cudaErrorInvalidValue);
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
    using namespace sg_emu;
    if (bytes == 0) return cudaSuccess;
    if (!is_device(ptr, bytes)) return set_error(cudaErrorInvalidValue);
    memset(ptr, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }   /* launches are synchronous */

/* ---- streams: handles only (every call has finished when it returns) ---------------------- */
struct sg_emu_stream {
    unsigned flags;
};

cudaError_t cudaStreamCreateWithFlags(sg_emu_stream** stream, unsigned flags) {
    if (stream == NULL || flags > cudaStreamNonBlocking) return sg_emu::set_error(cudaErrorInvalidValue);
    *stream = (sg_emu_stream*)calloc(1, sizeof(sg_emu_stream));
    if (*stream == NULL) return sg_emu::set_error(cudaErrorMemoryAllocation);
    (*stream)->flags = flags;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(sg_emu_stream* stream) {
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(sg_emu_stream* stream) { return cudaSuccess; }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            sg_emu_stream* stream) {
    return cudaMemcpy(dst, src, bytes, kind);
}

/* ---- events: a host timestamp per record (launches have finished by then) ---------------- */
struct sg_emu_event {
    int recorded;
    double ms;        /* CLOCK_MONOTONIC at the last cudaEventRecord */
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    if (event == NULL) return sg_emu::set_error(cudaErrorInvalidValue);
    *event = (cudaEvent_t)calloc(1, sizeof(sg_emu_event));
    return *event != NULL ? cudaSuccess : sg_emu::set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (event == NULL) return sg_emu::set_error(cudaErrorInvalidResourceHandle);
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, struct sg_emu_stream* stream) {
    if (event == NULL) return sg_emu::set_error(cudaErrorInvalidResourceHandle);
    if (stream != NULL) return sg_emu::set_error(cudaErrorInvalidValue);   /* the default stream only */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    event->ms = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    event->recorded = 1;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (event == NULL) return sg_emu::set_error(cudaErrorInvalidResourceHandle);
    return cudaSuccess;   /* the work before the record has finished */
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == NULL) return sg_emu::set_error(cudaErrorInvalidValue);
    if (start == NULL || end == NULL || !start->recorded || !end->recorded)
        return sg_emu::set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = sg_emu::last_error;
    sg_emu::last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return sg_emu::last_error; }

const char* cudaGetErrorString(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unrecognized error code";
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    using namespace sg_emu;
    if (!free_bytes || !total_bytes) return set_error(cudaErrorInvalidValue);
    pthread_mutex_lock(&state_mu);
    *total_bytes = GLOBAL_MEM;
    *free_bytes = GLOBAL_MEM - allocated_bytes;
    pthread_mutex_unlock(&state_mu);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    using namespace sg_emu;
    if (!p) return set_error(cudaErrorInvalidValue);
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof(*p));
    if (sg_emu::emu_cc() == 90) snprintf(p->name, sizeof(p->name), "seedgpt CUDA emulation (sm_90 limits)");
    else snprintf(p->name, sizeof(p->name), "seedgpt CUDA emulation (sm_90 limits, sm_%d shared memory)",
                  sg_emu::emu_cc());
    p->totalGlobalMem = GLOBAL_MEM;
    p->sharedMemPerBlock = SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = smem_optin();
    p->sharedMemPerMultiprocessor = smem_per_sm();
    p->totalConstMem = 64 * 1024;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = (int)sg_emu::max_grid_yz();
    p->maxThreadsPerMultiProcessor = 2048;
    p->multiProcessorCount = SM_COUNT;
    p->major = sg_emu::emu_cc() / 10;
    p->minor = sg_emu::emu_cc() % 10;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->memoryBusWidth = 5120;
    return cudaSuccess;
}

/* The emulated device's identity (emu_cc(), SM_COUNT, CLOCK_KHZ): the H100 SXM whose
 * limits cudaGetDeviceProperties reports. They describe what the emulation imitates, not the CPU
 * it runs on (cuda/device_peak.cu gives it no FLOP rate). The block and grid limits are the
 * properties' (SG_EMU_MAX_GRID_YZ lowers grid.y and grid.z). */
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    using namespace sg_emu;
    if (!value) return set_error(cudaErrorInvalidValue);
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; return cudaSuccess;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; return cudaSuccess;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; return cudaSuccess;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; return cudaSuccess;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; return cudaSuccess;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; return cudaSuccess;
    case cudaDevAttrClockRate: *value = CLOCK_KHZ; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = SM_COUNT; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; return cudaSuccess;
    }
    return set_error(cudaErrorInvalidValue);
}

cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return sg_emu::set_error(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    return device == 0 ? cudaSuccess : sg_emu::set_error(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
    if (!device) return sg_emu::set_error(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------------------------- */
struct sg_emu_cublas {
    cublasMath_t math;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new sg_emu_cublas{CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode < CUBLAS_DEFAULT_MATH || mode > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;   /* the CPU computes in fp32 whatever the mode (no TF32 emulation) */
    return CUBLAS_STATUS_SUCCESS;
}

namespace sg_emu {
/* column-major op(A) is m x k: stored rows x cols with leading dimension ld */
static bool gemm_operand_ok(const float* p, cublasOperation_t op, int rows_op, int cols_op, int ld) {
    int rows = op == CUBLAS_OP_N ? rows_op : cols_op;
    int cols = op == CUBLAS_OP_N ? cols_op : rows_op;
    if (ld < (rows > 1 ? rows : 1)) return false;
    if (rows == 0 || cols == 0) return true;
    size_t extent = ((size_t)(cols - 1) * ld + rows) * sizeof(float);
    return is_device(p, extent);
}

static cublasStatus_t sgemm_one(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                float alpha, const float* A, int lda, const float* B, int ldb,
                                float beta, float* C, int ldc) {
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (k == 0 || alpha == 0.0f) {
        /* C = beta C; with beta 0, C is written without being read (it may hold NaN) */
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float* c = &C[i + (size_t)j * ldc];
                *c = beta == 0.0f ? 0.0f : beta * *c;
            }
        return CUBLAS_STATUS_SUCCESS;
    }
    if (beta == 0.0f)   /* cuBLAS does not read C when beta is 0: don't let NaN in it through */
        for (int j = 0; j < n; j++) memset(&C[(size_t)j * ldc], 0, (size_t)m * sizeof(float));
#ifndef SEEDGPT_NO_CBLAS
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    /* a build without OpenBLAS (a bare machine): the same product as a plain loop, column-major,
     * each element an fp32 sum over l in order */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int l = 0; l < k; l++) {
                float a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
                float b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
                acc += a * b;
            }
            float* c = &C[i + (size_t)j * ldc];
            *c = alpha * acc + beta * *c;
        }
#endif
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t sgemm_check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const float* alpha, const float* beta, int lda, int ldb,
                                  int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (ta < CUBLAS_OP_N || ta > CUBLAS_OP_C || tb < CUBLAS_OP_N || tb > CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
    if (m < 0 || n < 0 || k < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace sg_emu

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc) {
    using namespace sg_emu;
    cublasStatus_t st = sgemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (m && n && k && (!gemm_operand_ok(A, transa, m, k, lda) || !gemm_operand_ok(B, transb, k, n, ldb)))
        return CUBLAS_STATUS_INVALID_VALUE;   /* the real one would fault on a host pointer */
    if (m && n && !gemm_operand_ok(C, CUBLAS_OP_N, m, n, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
    return sgemm_one(transa, transb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb,
                                         long long strideB, const float* beta, float* C, int ldc,
                                         long long strideC, int batchCount) {
    using namespace sg_emu;
    cublasStatus_t st = sgemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int b = 0; b < batchCount; b++) {
        const float* Ab = A + b * strideA;
        const float* Bb = B + b * strideB;
        float* Cb = C + b * strideC;
        if (m && n && k && (!gemm_operand_ok(Ab, transa, m, k, lda) || !gemm_operand_ok(Bb, transb, k, n, ldb)))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (m && n && !gemm_operand_ok(Cb, CUBLAS_OP_N, m, n, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int b = 0; b < batchCount; b++)
        sgemm_one(transa, transb, m, n, k, *alpha, A + b * strideA, lda, B + b * strideB, ldb, *beta,
                  C + b * strideC, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt ----------------------------------------------------------------------------- */
/* The subset cuda/ops_bf16_cuda.cu uses (cuda_emu.h lists it). Descriptors hold what was set;
 * cublasLtMatmul checks the whole problem, as the library would, then computes on the CPU: each
 * element of D is the fp32 sum of the bf16 products (exact in fp32) in ascending k, then
 * alpha * sum + beta * C, then + bias[row], stored as D's type (fp32, or bf16 rounded to nearest
 * even once). The heuristic offers one algorithm, this loop.
 *
 * Refusals. The real library may have no algorithm for a problem (its kernels need an alignment,
 * a shape, a workspace the problem does not offer), and it says so in one of two ways: the
 * heuristic returns CUBLAS_STATUS_NOT_SUPPORTED with no result, or cublasLtMatmul returns
 * CUBLAS_STATUS_NOT_SUPPORTED and runs nothing. Which problems it refuses is not documented, so
 * the emulation accepts every problem of its subset unless SG_EMU_LT_REFUSE asks it to refuse,
 * in exactly those two ways (read at every call, so a test may change it between calls):
 *   none       (or unset) accept;
 *   heuristic  the heuristic finds no algorithm for any problem;
 *   matmul     the heuristic offers its algorithm, cublasLtMatmul refuses every problem;
 *   align16    a library whose kernels all need 16 bytes: the heuristic finds nothing when a
 *              preference's MIN_ALIGNMENT_A..D_BYTES is below 16, and cublasLtMatmul refuses a
 *              matrix whose pointer or leading dimension in bytes, or a bias whose pointer, is not
 *              a multiple of 16. */
enum LtRefusal { LT_ACCEPT, LT_REFUSE_HEURISTIC, LT_REFUSE_MATMUL, LT_REFUSE_ALIGN16 };
static LtRefusal lt_refusal(void) {
    const char* s = getenv("SG_EMU_LT_REFUSE");
    if (!s || !*s || !strcmp(s, "none")) return LT_ACCEPT;
    if (!strcmp(s, "heuristic")) return LT_REFUSE_HEURISTIC;
    if (!strcmp(s, "matmul")) return LT_REFUSE_MATMUL;
    if (!strcmp(s, "align16")) return LT_REFUSE_ALIGN16;
    sg_emu::die(nullptr, "SG_EMU_LT_REFUSE=%s: expected none, heuristic, matmul or align16", s);
}
struct sg_emu_lt {
    int live;
};
struct sg_emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void* bias;
    int32_t bias_type;   /* -1: the type of D */
};
struct sg_emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;    /* CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: 1 */
    int64_t stride;   /* CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, in elements: 0 */
};
struct sg_emu_lt_pref {
    uint64_t max_workspace;
    uint32_t reduction_mask;
    uint32_t align[4];   /* A, B, C, D */
};

static const uint64_t SG_EMU_LT_ALGO = 0x5eed1e0a16bf0032ull;   /* the emulation's one algorithm */

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new sg_emu_lt{1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new sg_emu_lt_desc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
    if (!desc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        int32_t op;
        memcpy(&op, buf, sizeof(op));
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->transa : desc->transb) = op;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&desc->epilogue, buf, sizeof(uint32_t));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&desc->bias, buf, sizeof(void*));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&desc->bias_type, buf, sizeof(int32_t));
        return CUBLAS_STATUS_SUCCESS;
    default:
        /* pointer modes, aux buffers, scale pointers, ...: not emulated */
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatmulDescSetAttribute: attribute %d is not "
                        "emulated (docs/cuda-emulation.md lists the subset)\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new sg_emu_lt_layout{type, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
    if (!layout || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&layout->batch, buf, sizeof(int32_t));
        return layout->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        if (bytes != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&layout->stride, buf, sizeof(int64_t));
        return CUBLAS_STATUS_SUCCESS;
    default:
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatrixLayoutSetAttribute: attribute %d is not "
                        "emulated (docs/cuda-emulation.md lists the subset)\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new sg_emu_lt_pref{0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
    if (!pref || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&pref->max_workspace, buf, sizeof(uint64_t));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&pref->reduction_mask, buf, sizeof(uint32_t));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        uint32_t a;
        memcpy(&a, buf, sizeof(a));
        if (a == 0 || (a & (a - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
        pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = a;
        return CUBLAS_STATUS_SUCCESS;
    }
    default:
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatmulPreferenceSetAttribute: attribute %d is "
                        "not emulated (docs/cuda-emulation.md lists the subset)\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

namespace sg_emu {
static size_t lt_type_bytes(cudaDataType_t t) {
    return t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : t == CUDA_R_32F ? 4 : 0;
}
/* a 16-bit element's value (exact) and the one rounding to it: bf16 or fp16 */
static float lt_load16(cudaDataType_t t, uint16_t h) { return t == CUDA_R_16F ? sg_fp16_to_float(h) : sg_bf16_to_float(h); }
static uint16_t lt_round16(cudaDataType_t t, float x) {
    return t == CUDA_R_16F ? sg_fp16_from_float(x) : sg_bf16_from_float(x);
}

/* is the stored matrix of layout L inside one device allocation from p? */
static bool lt_operand_ok(const void* p, const sg_emu_lt_layout* L) {
    if (L->rows == 0 || L->cols == 0) return true;
    size_t extent = ((size_t)(L->cols - 1) * (size_t)L->ld + L->rows) * lt_type_bytes(L->type);
    return is_device(p, extent);
}

/* The problem as cuBLASLt defines it: op(A) m x k, op(B) k x n, C and D m x n. Returns the status
 * the library would give, and one line on stderr for what the emulation does not implement. */
static cublasStatus_t lt_check(const sg_emu_lt_desc* d, const sg_emu_lt_layout* A, const sg_emu_lt_layout* B,
                               const sg_emu_lt_layout* C, const sg_emu_lt_layout* D) {
    if (!d || !A || !B || !C || !D) return CUBLAS_STATUS_INVALID_VALUE;
    const char* why = nullptr;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        why = "compute and scale types other than CUBLAS_COMPUTE_32F / CUDA_R_32F";
    else if ((A->type != CUDA_R_16BF && A->type != CUDA_R_16F) || B->type != A->type)
        why = "A and B other than both CUDA_R_16BF or both CUDA_R_16F";
    else if (C->type != D->type || (D->type != CUDA_R_32F && D->type != A->type))
        why = "C and D other than both CUDA_R_32F or both of A's type";
    else if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
        why = "epilogues other than DEFAULT and BIAS";
    else if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && D->type != CUDA_R_32F && d->bias_type == CUDA_R_32F)
        /* cublasLt.h: the bias has D's type (its exceptions are integer and fp8 kernels); the real
         * library answers an fp32 bias with a bf16 D with INVALID_VALUE (seen on an H200, 13.0) */
        return CUBLAS_STATUS_INVALID_VALUE;
    else if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && (D->type != CUDA_R_32F || (d->bias_type != -1 && d->bias_type != CUDA_R_32F)))
        why = "a bias type other than CUDA_R_32F";
    if (why) {
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatmul: %s is not emulated (epilogue %u, types "
                        "A %d B %d C %d D %d)\n", why, d->epilogue, (int)A->type, (int)B->type, (int)C->type,
                (int)D->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    uint64_t m = d->transa == CUBLAS_OP_N ? A->rows : A->cols;
    uint64_t k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    uint64_t kb = d->transb == CUBLAS_OP_N ? B->rows : B->cols;
    uint64_t n = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    if (k != kb || C->rows != m || C->cols != n || D->rows != m || D->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
    const sg_emu_lt_layout* all[4] = {A, B, C, D};
    for (const sg_emu_lt_layout* L : all)
        if (L->ld < (int64_t)(L->rows > 1 ? L->rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (C->ld != D->ld) {
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatmul: C and D with different leading dimensions "
                        "are not emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && d->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace sg_emu

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    using namespace sg_emu;
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!pref || requested <= 0 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = lt_check(desc, Adesc, Bdesc, Cdesc, Ddesc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const LtRefusal refuse = lt_refusal();
    bool under16 = false;
    for (int i = 0; i < 4; i++) under16 |= pref->align[i] < 16;
    if (refuse == LT_REFUSE_HEURISTIC || (refuse == LT_REFUSE_ALIGN16 && under16)) {
        *returned = 0;   /* as the library: no algorithm fits */
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&results[0], 0, sizeof(results[0]));
    results[0].algo.data[0] = SG_EMU_LT_ALGO;
    results[0].workspaceSize = 0;   /* no split-K, no workspace: one sequence per dot product */
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    using namespace sg_emu;
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = lt_check(desc, Adesc, Bdesc, Cdesc, Ddesc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (stream != nullptr) {
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatmul: only the default stream is emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (algo != nullptr && algo->data[0] != SG_EMU_LT_ALGO) return CUBLAS_STATUS_INVALID_VALUE;
    if (workspace_bytes > 0 && !is_device(workspace, workspace_bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    float a, b;
    memcpy(&a, alpha, sizeof(float));
    memcpy(&b, beta, sizeof(float));
    const bool ta = desc->transa == CUBLAS_OP_T, tb = desc->transb == CUBLAS_OP_T;
    const uint64_t m = Ddesc->rows, n = Ddesc->cols, k = ta ? Adesc->rows : Adesc->cols;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    /* the real library would fault on a host pointer or read past an allocation */
    if ((k > 0 && (!lt_operand_ok(A, Adesc) || !lt_operand_ok(B, Bdesc))) || !lt_operand_ok(D, Ddesc) ||
        (b != 0.0f && !lt_operand_ok(C, Cdesc)))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float* bias = desc->epilogue == CUBLASLT_EPILOGUE_BIAS ? (const float*)desc->bias : nullptr;
    if (bias && !is_device(bias, m * sizeof(float))) return CUBLAS_STATUS_INVALID_VALUE;
    const LtRefusal refuse = lt_refusal();
    if (refuse == LT_REFUSE_MATMUL) return CUBLAS_STATUS_NOT_SUPPORTED;   /* D untouched */
    if (refuse == LT_REFUSE_ALIGN16) {
        uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)D | (uintptr_t)bias;
        bits |= (uintptr_t)Adesc->ld * 2 | (uintptr_t)Bdesc->ld * 2 | (uintptr_t)Ddesc->ld * lt_type_bytes(Ddesc->type);
        if (b != 0.0f) bits |= (uintptr_t)C | (uintptr_t)Cdesc->ld * lt_type_bytes(Cdesc->type);
        if (bits % 16 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const int32_t batch = Ddesc->batch;
    if (Adesc->batch != batch || Bdesc->batch != batch || Cdesc->batch != batch || (batch > 1 && bias)) {
        fprintf(stderr, "seedgpt: CUDA emulation: cublasLtMatmul: batches of different counts, or a bias with a "
                        "batch, are not emulated\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (batch > 1) {   /* each matrix of the strided batch as a problem of its own */
        sg_emu_lt_layout la = *Adesc, lb = *Bdesc, lc = *Cdesc, ld = *Ddesc;
        la.batch = lb.batch = lc.batch = ld.batch = 1;
        for (int32_t x = 0; x < batch; x++) {
            const size_t ea = lt_type_bytes(Adesc->type), eb = lt_type_bytes(Bdesc->type);
            const size_t ec = lt_type_bytes(Cdesc->type), ed = lt_type_bytes(Ddesc->type);
            st = cublasLtMatmul(handle, desc, alpha, (const char*)A + (size_t)x * Adesc->stride * ea, &la,
                                (const char*)B + (size_t)x * Bdesc->stride * eb, &lb, beta,
                                (const char*)C + (size_t)x * Cdesc->stride * ec, &lc,
                                (char*)D + (size_t)x * Ddesc->stride * ed, &ld, algo, workspace, workspace_bytes,
                                stream);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
        }
        return CUBLAS_STATUS_SUCCESS;
    }
    const uint16_t* Ab = (const uint16_t*)A;
    const uint16_t* Bb = (const uint16_t*)B;
    const bool d16 = Ddesc->type != CUDA_R_32F;   /* C and D 16-bit: read exactly, written rounded once */
    const cudaDataType_t ab = Adesc->type;
    const float* Cf = (const float*)C;
    float* Df = (float*)D;
    const uint16_t* Cb = (const uint16_t*)C;
    uint16_t* Db = (uint16_t*)D;
    const size_t lda = (size_t)Adesc->ld, ldb = (size_t)Bdesc->ld, ldc = (size_t)Cdesc->ld, ldd = (size_t)Ddesc->ld;
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0.0f;
            for (uint64_t p = 0; p < k; p++) {
                float x = lt_load16(ab, ta ? Ab[p + i * lda] : Ab[i + p * lda]);
                float y = lt_load16(ab, tb ? Bb[j + p * ldb] : Bb[p + j * ldb]);
                float prod = x * y;   /* exact: 8 + 8 (bf16) or 11 + 11 (fp16) significant bits */
                acc = acc + prod;
            }
            float t = a * acc;
            if (b != 0.0f) t = t + b * (d16 ? lt_load16(ab, Cb[i + j * ldc]) : Cf[i + j * ldc]);   /* beta 0: C is not read */
            if (bias) t = t + bias[i];
            if (d16) Db[i + j * ldd] = lt_round16(ab, t);
            else Df[i + j * ldd] = t;
        }
    return CUBLAS_STATUS_SUCCESS;
}
