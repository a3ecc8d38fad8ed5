/* cuda/emu/nccl_emu.h — the NCCL subset of dist/dist_nccl.cu, emulated between processes on one
 * machine (-DSG_EMU; the runtime is cuda/emu/nccl_emu.cpp). Each rank is a process of its own
 * with its own emulated GPU (cuda/emu/cuda_emu.h), and device memory is that process's memory.
 *
 * The unique id names a file (in TMPDIR, else /tmp) that every rank maps: for each ordered pair of
 * ranks one channel, a mailbox of NCCL_EMU_SLOT bytes that the sender fills and the receiver
 * empties, so a message of any length streams through it in pieces. Sends and receives between
 * two ranks are matched in the order they are posted, as NCCL matches them.
 *
 * Only what seedgpt calls is here, and nothing that adds: ncclSend, ncclRecv and ncclAllGather
 * move bytes; every sum over the ranks is seedgpt's own (dist/dist_nccl.cu), so the emulation
 * puts no order of its own into a sum. Between ncclGroupStart and ncclGroupEnd the calls are queued, and the End
 * moves them all, a piece at a time wherever a mailbox allows, so that a group of sends and
 * receives completes in whatever order the peers post theirs, as NCCL's does. Outside a group a
 * call completes before it returns. Everything is done when the call (or the End) returns: the
 * stream orders nothing more (cuda/emu/cuda_emu.h).
 *
 * A peer that never answers: after NCCL_EMU_TIMEOUT seconds (SG_EMU_NCCL_TIMEOUT, default 120)
 * the waiting call prints one line naming the peer to standard error and returns
 * ncclRemoteError. A rank that exits makes its peers wait that long; a launcher ends the
 * job sooner.
 */
#ifndef SEEDGPT_NCCL_EMU_H
#define SEEDGPT_NCCL_EMU_H

#include <stddef.h>
#include "cuda/emu/cuda_emu.h"

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* values as in nccl.h */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
} ncclDataType_t;

struct sg_emu_nccl_comm;
typedef sg_emu_nccl_comm* ncclComm_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
/* Collective: returns once all nranks ranks have joined (or with ncclRemoteError after the
 * timeout). Rank 0 removes the id's file then; the ranks keep their mappings. */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
/* recvbuff holds nranks x count elements, rank r's at r x count; sendbuff may be this rank's
 * place in it (in place). */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

#endif
