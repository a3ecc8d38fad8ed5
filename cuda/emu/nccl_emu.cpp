/* cuda/emu/nccl_emu.cpp — the runtime behind cuda/emu/nccl_emu.h: NCCL's point-to-point calls
 * and all-gather between processes, through mailboxes in a shared file mapping.
 *
 * The file: a header (the rank count, how many have joined), then nranks x nranks channels, the
 * channel from rank s to rank d at s * nranks + d. A channel is a count and NCCL_EMU_SLOT bytes:
 * the count is 0 while the mailbox is empty; the sender copies a piece in and stores its length
 * (release), the receiver waits for a length (acquire), copies the piece out and stores 0. One
 * sender and one receiver per channel, so nothing else is needed. Pieces of one message, and
 * messages one after another, go through a channel in order: NCCL's matching of sends and
 * receives between two ranks in posting order.
 *
 * A call moves pieces for every operation of its group in turn, never blocking on one while
 * another could move, and sleeps a little when none could (the ranks share the machine's cores
 * with each other).
 */
#include "cuda/emu/nccl_emu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#define NCCL_EMU_SLOT ((size_t)1 << 20)
#define NCCL_EMU_MAGIC 0x4c43434e45444553ull   /* "SEDENCCL" */

struct Channel {
    size_t full;   /* bytes in data; 0: empty */
    size_t pad[7];
    char data[NCCL_EMU_SLOT];
};

struct Header {
    unsigned long long magic;
    int nranks;
    int joined;
    char pad[48];
};

struct sg_emu_nccl_comm {
    int rank, nranks;
    char* map;
    size_t map_bytes;
    Channel* channel(int from, int to) {
        return reinterpret_cast<Channel*>(map + sizeof(Header)) + (size_t)from * nranks + to;
    }
};

namespace {

struct Op {
    ncclComm_t comm;
    int send;          /* 1: to peer; 0: from peer */
    int peer;
    char* buf;         /* a send's bytes are read through it only */
    size_t bytes, done;
};

int group_depth = 0;
std::vector<Op> queued;

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double timeout_s(void) {
    const char* s = getenv("SG_EMU_NCCL_TIMEOUT");
    double t = s != NULL ? atof(s) : 0.0;
    return t > 0.0 ? t : 120.0;
}

void nap(void) {
    struct timespec ts = {0, 50000};   /* 50 us */
    nanosleep(&ts, NULL);
}

size_t map_bytes_for(int nranks) {
    return sizeof(Header) + (size_t)nranks * (size_t)nranks * sizeof(Channel);
}

/* one piece of op, if its mailbox allows; 1 when something moved */
int step(Op& op) {
    if (op.done == op.bytes) return 0;
    Channel* ch = op.send ? op.comm->channel(op.comm->rank, op.peer) : op.comm->channel(op.peer, op.comm->rank);
    size_t full = __atomic_load_n(&ch->full, __ATOMIC_ACQUIRE);
    if (op.send) {
        if (full != 0) return 0;
        size_t n = op.bytes - op.done < NCCL_EMU_SLOT ? op.bytes - op.done : NCCL_EMU_SLOT;
        memcpy(ch->data, op.buf + op.done, n);
        op.done += n;
        __atomic_store_n(&ch->full, n, __ATOMIC_RELEASE);
    } else {
        if (full == 0) return 0;
        size_t left = op.bytes - op.done;
        if (full > left) {   /* the peer's message is longer than this receive: NCCL's misuse */
            fprintf(stderr, "nccl (emulated): rank %d: a receive of %zu bytes from rank %d met a "
                    "longer send\n", op.comm->rank, op.bytes, op.peer);
            abort();
        }
        memcpy(op.buf + op.done, ch->data, full);
        op.done += full;
        __atomic_store_n(&ch->full, 0, __ATOMIC_RELEASE);
    }
    return 1;
}

/* every op moved to its end, or ncclRemoteError after the timeout without progress */
ncclResult_t run(std::vector<Op>& ops) {
    double limit = timeout_s(), last = now_s();
    for (;;) {
        int moved = 0, left = 0;
        for (size_t i = 0; i < ops.size(); i++) {
            /* two messages to (or from) one peer go through its channel one after the other */
            int earlier = 0;
            for (size_t j = 0; j < i && !earlier; j++)
                earlier = ops[j].send == ops[i].send && ops[j].peer == ops[i].peer &&
                          ops[j].done < ops[j].bytes;
            if (!earlier) moved += step(ops[i]);
            left += ops[i].done < ops[i].bytes;
        }
        if (left == 0) return ncclSuccess;
        if (moved) {
            last = now_s();
            continue;
        }
        if (now_s() - last > limit) {
            for (Op& op : ops)
                if (op.done < op.bytes) {
                    fprintf(stderr, "nccl (emulated): rank %d: rank %d did not %s in %.0f s\n",
                            op.comm->rank, op.peer, op.send ? "receive" : "send", limit);
                    break;
                }
            return ncclRemoteError;
        }
        nap();
    }
}

ncclResult_t post(Op op) {
    if (op.bytes == 0) return ncclSuccess;
    if (group_depth > 0) {
        queued.push_back(op);
        return ncclSuccess;
    }
    std::vector<Op> one(1, op);
    return run(one);
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (id == NULL) return ncclInvalidArgument;
    memset(id, 0, sizeof(*id));
    const char* dir = getenv("TMPDIR");
    if (dir == NULL || *dir == '\0') dir = "/tmp";
    int n = snprintf(id->internal, sizeof(id->internal), "%s/seedgpt-nccl-emu.XXXXXX", dir);
    if (n < 0 || (size_t)n >= sizeof(id->internal)) return ncclSystemError;
    int fd = mkstemp(id->internal);
    if (fd < 0) return ncclSystemError;
    close(fd);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (comm == NULL || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    id.internal[sizeof(id.internal) - 1] = '\0';
    int fd = open(id.internal, O_RDWR);
    if (fd < 0) {
        fprintf(stderr, "nccl (emulated): rank %d: the id's file %s: %s\n", rank, id.internal,
                strerror(errno));
        return ncclSystemError;
    }
    size_t bytes = map_bytes_for(nranks);
    /* every rank sizes it the same: the file is whole before anyone maps it */
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return ncclSystemError;
    }
    void* map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ncclSystemError;
    Header* h = (Header*)map;
    unsigned long long none = 0;
    __atomic_compare_exchange_n(&h->magic, &none, NCCL_EMU_MAGIC, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    int expected = 0;
    __atomic_compare_exchange_n(&h->nranks, &expected, nranks, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != NCCL_EMU_MAGIC ||
        __atomic_load_n(&h->nranks, __ATOMIC_ACQUIRE) != nranks) {
        fprintf(stderr, "nccl (emulated): rank %d: the id's file %s is for %d ranks, not %d\n", rank,
                id.internal, h->nranks, nranks);
        munmap(map, bytes);
        return ncclInvalidUsage;
    }
    __atomic_add_fetch(&h->joined, 1, __ATOMIC_ACQ_REL);
    double limit = timeout_s(), start = now_s();
    while (__atomic_load_n(&h->joined, __ATOMIC_ACQUIRE) < nranks) {
        if (now_s() - start > limit) {
            fprintf(stderr, "nccl (emulated): rank %d: %d of %d ranks joined in %.0f s\n", rank,
                    __atomic_load_n(&h->joined, __ATOMIC_ACQUIRE), nranks, limit);
            munmap(map, bytes);
            return ncclRemoteError;
        }
        nap();
    }
    if (rank == 0) unlink(id.internal);
    sg_emu_nccl_comm* c = new sg_emu_nccl_comm;
    c->rank = rank;
    c->nranks = nranks;
    c->map = (char*)map;
    c->map_bytes = bytes;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) return ncclInvalidArgument;
    munmap(comm->map, comm->map_bytes);
    delete comm;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    }
    return "unknown result code";
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Op> ops;
    ops.swap(queued);
    return run(ops);
}

static ncclResult_t check(ncclComm_t comm, int peer, ncclDataType_t t) {
    if (comm == NULL || type_bytes(t) == 0) return ncclInvalidArgument;
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank) return ncclInvalidArgument;
    return ncclSuccess;
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r = check(comm, peer, datatype);
    if (r != ncclSuccess) return r;
    Op op = {comm, 1, peer, (char*)sendbuff, count * type_bytes(datatype), 0};
    return post(op);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r = check(comm, peer, datatype);
    if (r != ncclSuccess) return r;
    Op op = {comm, 0, peer, (char*)recvbuff, count * type_bytes(datatype), 0};
    return post(op);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    if (comm == NULL || type_bytes(datatype) == 0) return ncclInvalidArgument;
    size_t bytes = sendcount * type_bytes(datatype);
    char* mine = (char*)recvbuff + (size_t)comm->rank * bytes;
    if (mine != sendbuff) memmove(mine, sendbuff, bytes);
    ncclGroupStart();
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank) continue;
        ncclSend(mine, sendcount, datatype, p, comm, stream);
        ncclRecv((char*)recvbuff + (size_t)p * bytes, sendcount, datatype, p, comm, stream);
    }
    return ncclGroupEnd();
}
