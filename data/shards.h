/* data/shards.h — llm.c token shards and the batch loader that reads them.
 *
 * This file owns the token shard format, its writer and validator, and the DataLoader: which
 * window of which shard the trainer sees at each position of each epoch, and the small state that
 * pins that position down for resume. It depends on no other folder of seedgpt; the shuffle's
 * randomness comes in as an explicit `shuffle_seed` (the trainer derives it from the master seed).
 *
 * Shard file (llm.c format, DESIGN §6), little-endian:
 *   int32 header[256]:  header[0] = 20240520 (magic), header[1] = 1 (version: uint16 tokens),
 *                       header[2] = count (tokens, 1 .. 2^31-1), the rest 0
 *   uint16 tokens[count]
 *   file size is exactly 1024 + 2*count bytes.
 *
 * Windows. With B sequences of T tokens a batch needs B*T + 1 consecutive tokens: inputs are the
 * first B*T, targets the same shifted by one. Window k of a shard of n tokens is its tokens
 * [k*B*T, k*B*T + B*T + 1), for k = 0 .. floor((n-1)/(B*T)) - 1. Windows never cross a shard
 * boundary (the tail of each shard that cannot fill a window is never read). The split's windows
 * are those of all its shards in order: window w of the split is window (w - first(s)) of the shard
 * s that holds it. inputs[b*T + t] = window[b*T + t], targets[b*T + t] = window[b*T + t + 1].
 *
 * Order. An epoch visits every window of the split once:
 *   sequential: position p of every epoch is window p.
 *   shuffled:   position p of epoch e is window perm_e[p], where perm_e is a Fisher-Yates
 *               permutation driven by a counter-based hash of (shuffle_seed, e, i) — a pure
 *               function of (seed, epoch), independent of threads and of what was read before.
 * After the last position of an epoch the loader wraps to position 0 of the next epoch.
 *
 * State. (epoch, pos, shuffle, shuffle_seed) is the whole state: get it, store it, set it into a
 * freshly opened loader of the same split and B, T, and the same batches follow bit for bit.
 *
 * Errors. Nothing here prints or exits. Functions return 0 on success; otherwise they write one
 * line naming the file (or split) and the problem into the caller's `char err[256]` (NULL allowed)
 * and return non-zero. The caller prints the line and exits with status 2.
 */
#ifndef SEEDGPT_SHARDS_H
#define SEEDGPT_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAX_TOKENS 2147483647u   /* count is an int32 in the header */

/* ---- writing ------------------------------------------------------------------------------- */

/* A shard written incrementally: tokens go to PATH.tmp, the header (with the final count) is
 * written at finish, which fsyncs; commit renames PATH.tmp onto PATH and fsyncs the directory.
 * Until commit an existing PATH is never touched, so a failing run leaves a good file intact.
 * After a failed open/append/finish call shard_writer_abort (it removes PATH.tmp); commit ends the
 * writer either way. */
typedef struct {
    char* path;       /* final name */
    char* tmp_path;   /* PATH.tmp */
    int fd;           /* open on tmp_path until finish; -1 after */
    size_t count;     /* tokens appended so far */
} ShardWriter;

int shard_writer_open(ShardWriter* w, const char* path, char err[256]);
int shard_writer_append(ShardWriter* w, const uint16_t* tokens, size_t n, char err[256]);
/* Writes the header, fsyncs and closes PATH.tmp. Refuses a shard of 0 tokens. */
int shard_writer_finish(ShardWriter* w, char err[256]);
/* Renames PATH.tmp to PATH (after finish). Frees the writer's memory. */
int shard_writer_commit(ShardWriter* w, char err[256]);
/* Closes and removes PATH.tmp, frees the writer's memory. Safe after any failure. */
void shard_writer_abort(ShardWriter* w);

/* The whole shard at once: open + append + finish + commit. n in [1, SHARD_MAX_TOKENS]. */
int shard_write(const char* path, const uint16_t* tokens, size_t n, char err[256]);

/* ---- reading ------------------------------------------------------------------------------- */

/* Validates the header and the file size (magic, version, count >= 1, size == 1024 + 2*count)
 * and returns the token count. */
int shard_read_header(const char* path, size_t* count, char err[256]);

/* Scans every token of a valid shard and refuses the first one >= vocab_size, naming its byte
 * offset, its index and its value. */
int shard_check_tokens(const char* path, int vocab_size, char err[256]);

/* Reads a whole shard into a malloc'ed array (*tokens, caller frees) after validating it; tokens
 * are checked against vocab_size when vocab_size > 0. For tests and small tools: the loader
 * never holds a whole shard. */
int shard_read(const char* path, int vocab_size, uint16_t** tokens, size_t* count, char err[256]);

/* ---- the loader ---------------------------------------------------------------------------- */

/* Everything needed to continue the same sequence of batches; fixed-width for state files. */
typedef struct {
    uint64_t epoch;         /* completed epochs */
    uint64_t pos;           /* windows already served in this epoch, 0 .. num_windows-1 */
    uint64_t shuffle_seed;  /* the permutation of epoch e is a pure function of (seed, e) */
    uint64_t num_windows;   /* of the split when the state was taken; set_state checks it */
    int32_t shuffle;        /* 0 sequential, 1 shuffled */
    int32_t reserved;       /* 0 */
} LoaderState;

typedef struct {
    /* configuration, fixed at open */
    int B, T;                 /* batch of B sequences of T tokens */
    int vocab_size;           /* tokens must be < vocab_size; 0 = unchecked */
    char* split;              /* the path or pattern as given, for messages */
    int num_shards;
    char** paths;             /* (num_shards) sorted */
    size_t* shard_tokens;     /* (num_shards) token counts */
    size_t* first_window;     /* (num_shards + 1) split index of each shard's window 0; last = total */
    size_t num_windows;       /* windows of the whole split */
    /* position */
    LoaderState state;
    /* caches: not state, rebuilt at need */
    uint64_t* perm;           /* (num_windows) the order of epoch perm_epoch, when shuffled */
    uint64_t perm_epoch;
    int perm_valid;
    int fd, fd_shard;         /* the one shard file open for reading, and which shard it is */
    uint16_t* buf;            /* (B*T + 1) one window, allocated at open */
    char err[256];            /* the reason of the last failed loader_next / loader_window */
} DataLoader;

/* Opens a split: `split` is one shard path or a glob pattern (matches sorted by name; a pattern
 * that matches nothing is an error naming it). Validates every shard (header, size, and every
 * token against vocab_size when vocab_size > 0) and refuses a split with zero windows. Starts at
 * epoch 0, position 0. */
int loader_open(DataLoader* dl, const char* split, int B, int T, int vocab_size,
                int shuffle, uint64_t shuffle_seed, char err[256]);
void loader_close(DataLoader* dl);

size_t loader_num_windows(const DataLoader* dl);

/* Fills inputs and targets, (B*T) ints each, with the window at the current position and
 * advances (wrapping into the next epoch). On an I/O error returns non-zero with the reason in
 * dl->err and does not advance. */
int loader_next(DataLoader* dl, int* inputs, int* targets);

/* Data parallelism (dist/dist.h). A step of R ranks with A micro-batches each consumes the next
 * R*A positions; rank r's micro-batch a is the position `ahead` = r*A + a after the current one,
 * so the sequences of the step keep the order one process would read them in (with the same B and
 * A' = R*A micro-batches), and its global sequence index g = r*A*B + a*B + b (DESIGN §2) names the
 * same row in both. Every rank reads its own windows and advances by R*A at the end of the step;
 * all ranks hold the same state.
 * loader_peek fills inputs and targets with the window `ahead` positions after the current one
 * (crossing into later epochs when it runs past this one's end) without moving the loader; errors
 * as loader_next. loader_advance moves the position n windows on (wrapping into the next epochs).
 * loader_next is loader_peek(0) followed by loader_advance(1). */
int loader_peek(DataLoader* dl, size_t ahead, int* inputs, int* targets);
void loader_advance(DataLoader* dl, size_t n);

/* Reads the window at position k (0 .. num_windows-1) of the current epoch's order without moving
 * the loader. For evaluation. Errors as loader_next. */
int loader_window(DataLoader* dl, size_t k, int* inputs, int* targets);

/* The split index of the window at position k of epoch `epoch`: k for sequential, perm_epoch[k]
 * when shuffled. */
size_t loader_order(DataLoader* dl, uint64_t epoch, size_t k);

/* Where split window w lives: its shard and the index of its first token in that shard. */
void loader_locate(const DataLoader* dl, size_t w, int* shard, size_t* first_token);

/* Back to epoch 0, position 0 (shuffle flag and seed unchanged). */
void loader_reset(DataLoader* dl);

LoaderState loader_get_state(const DataLoader* dl);
/* Refuses a state taken on a split with a different number of windows, or a position out of
 * range, with one line in err; the loader is unchanged then. */
int loader_set_state(DataLoader* dl, const LoaderState* s, char err[256]);

#endif
