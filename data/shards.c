/* data/shards.c — llm.c token shards: writer, validator, and the DataLoader (data/shards.h).
 *
 * Owns: the shard header layout, the tmp + fsync + rename discipline for writing one, the window
 * arithmetic of a split, and the shuffle permutation. Reads tokens from the files at need with
 * pread (one window of B*T+1 tokens at a time); a split is never held in memory.
 *
 * May not: print, exit, or include anything outside data/ but util/ (the durable-write helpers).
 */
#include "data/shards.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/fileio.h"
#include "util/err.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard files are little-endian; this reader assumes a little-endian host (as llm.c does)"
#endif

/* ---- raw I/O ------------------------------------------------------------------------------- */

/* pread/pwrite move fewer bytes than asked at will (signals, pipes, big requests): loop. */
static int pread_full(int fd, void* buf, size_t n, off_t off) {
    char* p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) { errno = 0; return -1; }   /* end of file before n bytes: file shrank */
        p += r; n -= (size_t)r; off += r;
    }
    return 0;
}

static int write_full(int fd, const void* buf, size_t n) {
    const char* p = buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        p += r; n -= (size_t)r;
    }
    return 0;
}

static const char* errno_text(void) {
    return errno ? strerror(errno) : "unexpected end of file";
}

static char* str_dup(const char* s) {
    size_t n = strlen(s) + 1;
    char* d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- writing ------------------------------------------------------------------------------- */

int shard_writer_open(ShardWriter* w, const char* path, char err[256]) {
    memset(w, 0, sizeof(*w));
    w->fd = -1;
    size_t n = strlen(path);
    w->path = str_dup(path);
    w->tmp_path = malloc(n + 5);
    if (!w->path || !w->tmp_path) {
        free(w->path); free(w->tmp_path);
        w->path = w->tmp_path = NULL;
        err_printf(err, "%s: out of memory", path);
        return 1;
    }
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, ".tmp", 5);
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        err_printf(err, "%s: cannot create temporary file %s: %s", path, w->tmp_path, strerror(errno));
        free(w->path); free(w->tmp_path);
        w->path = w->tmp_path = NULL;
        return 1;
    }
    /* Placeholder header; finish rewrites it once the count is known. */
    int32_t header[SHARD_HEADER_INTS] = {0};
    if (write_full(w->fd, header, sizeof(header)) != 0) {
        err_printf(err, "%s: write failed: %s", w->tmp_path, strerror(errno));
        return 1;
    }
    return 0;
}

int shard_writer_append(ShardWriter* w, const uint16_t* tokens, size_t n, char err[256]) {
    if (w->fd < 0) { err_printf(err, "%s: writer is not open", w->path ? w->path : "?"); return 1; }
    if (n > SHARD_MAX_TOKENS - w->count) {
        err_printf(err, "%s: more than %u tokens in one shard (the header count is an int32)",
                   w->path, SHARD_MAX_TOKENS);
        return 1;
    }
    if (write_full(w->fd, tokens, n * sizeof(uint16_t)) != 0) {
        err_printf(err, "%s: write failed: %s", w->tmp_path, strerror(errno));
        return 1;
    }
    w->count += n;
    return 0;
}

int shard_writer_finish(ShardWriter* w, char err[256]) {
    if (w->fd < 0) { err_printf(err, "%s: writer is not open", w->path ? w->path : "?"); return 1; }
    if (w->count == 0) {
        err_printf(err, "%s: refusing to write a shard of 0 tokens", w->path);
        return 1;
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)w->count;
    ssize_t r;
    do { r = pwrite(w->fd, header, sizeof(header), 0); } while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof(header)) {
        err_printf(err, "%s: writing the header failed: %s", w->tmp_path,
                   r < 0 ? strerror(errno) : "short write");
        return 1;
    }
    if (fsync(w->fd) != 0) {
        err_printf(err, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
        return 1;
    }
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0) {
        err_printf(err, "%s: close failed: %s", w->tmp_path, strerror(errno));
        return 1;
    }
    return 0;
}

void shard_writer_abort(ShardWriter* w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->tmp_path) unlink(w->tmp_path);
    free(w->path); free(w->tmp_path);
    w->path = w->tmp_path = NULL;
}

int shard_writer_commit(ShardWriter* w, char err[256]) {
    if (w->fd >= 0 || !w->tmp_path) {
        err_printf(err, "%s: commit before finish", w->path ? w->path : "?");
        shard_writer_abort(w);
        return 1;
    }
    if (rename(w->tmp_path, w->path) != 0) {
        err_printf(err, "%s: cannot rename %s into place: %s", w->path, w->tmp_path, strerror(errno));
        shard_writer_abort(w);
        return 1;
    }
    fsync_parent_dir(w->path);
    free(w->path); free(w->tmp_path);
    w->path = w->tmp_path = NULL;
    return 0;
}

int shard_write(const char* path, const uint16_t* tokens, size_t n, char err[256]) {
    if (n == 0) { err_printf(err, "%s: refusing to write a shard of 0 tokens", path); return 1; }
    if (n > SHARD_MAX_TOKENS) {
        err_printf(err, "%s: %zu tokens is more than one shard holds (%u)", path, n, SHARD_MAX_TOKENS);
        return 1;
    }
    ShardWriter w;
    if (shard_writer_open(&w, path, err) != 0) { shard_writer_abort(&w); return 1; }
    if (shard_writer_append(&w, tokens, n, err) != 0 || shard_writer_finish(&w, err) != 0) {
        shard_writer_abort(&w);
        return 1;
    }
    return shard_writer_commit(&w, err);
}

/* ---- reading ------------------------------------------------------------------------------- */

/* Opens a shard for reading once it is known to be a regular file (util/fileio.h): a FIFO given
 * as a shard is refused, never waited on. The descriptor, or -1 with err. */
static int open_shard(const char* path, char err[256]) {
    const char* kind;
    int fd = open_regular(path, &kind);
    if (fd >= 0) return fd;
    if (kind != NULL) err_printf(err, "%s: not a regular file (%s): expected a token shard", path, kind);
    else err_printf(err, "%s: cannot open: %s", path, strerror(errno));
    return -1;
}

/* Validates an open shard; returns its count. */
static int check_header_fd(int fd, const char* path, size_t* count, char err[256]) {
    struct stat st;
    if (fstat(fd, &st) != 0) { err_printf(err, "%s: cannot stat: %s", path, strerror(errno)); return 1; }
    if (!S_ISREG(st.st_mode)) { err_printf(err, "%s: not a regular file", path); return 1; }
    long long size = (long long)st.st_size;
    if (size < SHARD_HEADER_BYTES) {
        err_printf(err, "%s: file is %lld bytes, shorter than the %d-byte shard header (truncated or "
                   "not a token shard)", path, size, SHARD_HEADER_BYTES);
        return 1;
    }
    int32_t header[SHARD_HEADER_INTS];
    if (pread_full(fd, header, sizeof(header), 0) != 0) {
        err_printf(err, "%s: cannot read the header: %s", path, errno_text());
        return 1;
    }
    if (header[0] != SHARD_MAGIC) {
        err_printf(err, "%s: bad magic %d (expected %d, llm.c token shard)", path, header[0], SHARD_MAGIC);
        return 1;
    }
    if (header[1] != SHARD_VERSION) {
        err_printf(err, "%s: unsupported version %d (expected %d, uint16 tokens)", path, header[1],
                   SHARD_VERSION);
        return 1;
    }
    if (header[2] <= 0) {
        err_printf(err, "%s: header token count %d (a shard holds at least 1 token)", path, header[2]);
        return 1;
    }
    long long want = SHARD_HEADER_BYTES + 2LL * header[2];
    if (size != want) {
        err_printf(err, "%s: size %lld bytes does not match header count %d (expected %d + 2*%d = %lld "
                   "bytes): %s", path, size, header[2], SHARD_HEADER_BYTES, header[2], want,
                   size < want ? "truncated" : "oversized, trailing bytes");
        return 1;
    }
    *count = (size_t)header[2];
    return 0;
}

int shard_read_header(const char* path, size_t* count, char err[256]) {
    int fd = open_shard(path, err);
    if (fd < 0) return 1;
    int rc = check_header_fd(fd, path, count, err);
    close(fd);
    return rc;
}

/* Scans tokens [0, count) of an open shard in chunks; refuses the first >= vocab_size. */
static int check_tokens_fd(int fd, const char* path, size_t count, int vocab_size, char err[256]) {
    enum { CHUNK = 16384 };
    uint16_t chunk[CHUNK];
    for (size_t start = 0; start < count; start += CHUNK) {
        size_t n = count - start < CHUNK ? count - start : CHUNK;
        off_t off = SHARD_HEADER_BYTES + (off_t)(2 * start);
        if (pread_full(fd, chunk, n * sizeof(uint16_t), off) != 0) {
            err_printf(err, "%s: cannot read tokens at byte offset %lld: %s", path, (long long)off,
                       errno_text());
            return 1;
        }
        for (size_t i = 0; i < n; i++) {
            if ((int)chunk[i] >= vocab_size) {
                err_printf(err, "%s: token %u at byte offset %lld (token index %zu) is out of vocab "
                           "(must be < %d)", path, chunk[i], (long long)(off + 2 * (off_t)i),
                           start + i, vocab_size);
                return 1;
            }
        }
    }
    return 0;
}

int shard_check_tokens(const char* path, int vocab_size, char err[256]) {
    int fd = open_shard(path, err);
    if (fd < 0) return 1;
    size_t count;
    int rc = check_header_fd(fd, path, &count, err);
    if (rc == 0) rc = check_tokens_fd(fd, path, count, vocab_size, err);
    close(fd);
    return rc;
}

int shard_read(const char* path, int vocab_size, uint16_t** tokens, size_t* count, char err[256]) {
    *tokens = NULL;
    *count = 0;
    int fd = open_shard(path, err);
    if (fd < 0) return 1;
    size_t n;
    if (check_header_fd(fd, path, &n, err) != 0) { close(fd); return 1; }
    if (vocab_size > 0 && check_tokens_fd(fd, path, n, vocab_size, err) != 0) { close(fd); return 1; }
    uint16_t* t = malloc(n * sizeof(uint16_t));
    if (!t) { err_printf(err, "%s: out of memory for %zu tokens", path, n); close(fd); return 1; }
    if (pread_full(fd, t, n * sizeof(uint16_t), SHARD_HEADER_BYTES) != 0) {
        err_printf(err, "%s: cannot read tokens: %s", path, errno_text());
        free(t); close(fd);
        return 1;
    }
    close(fd);
    *tokens = t;
    *count = n;
    return 0;
}

/* ---- shuffle ------------------------------------------------------------------------------- */

/* splitmix64's finalizer: a bijection on 64 bits with good avalanche. */
static inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The shuffle's random word: a pure function of (seed, epoch, i, attempt) — counter-based, so
 * the permutation of an epoch needs no generator state and no history. Not Philox on purpose:
 * data/ depends on no other folder, and this stream is separate from every dropout stream. */
static inline uint64_t shuffle_word(uint64_t seed, uint64_t epoch, uint64_t i, uint64_t attempt) {
    uint64_t h = mix64(seed);
    h = mix64(h ^ epoch);
    h = mix64(h ^ i);
    return mix64(h ^ attempt);
}

/* Uniform in [0, s), unbiased: reject the 2^64 mod s lowest words so the accepted range is a
 * multiple of s, then reduce. The attempt counter gives a rejected draw a fresh word. */
static uint64_t shuffle_below(uint64_t seed, uint64_t epoch, uint64_t i, uint64_t s) {
    uint64_t reject_below = (0 - s) % s;   /* = 2^64 mod s */
    for (uint64_t attempt = 0;; attempt++) {
        uint64_t x = shuffle_word(seed, epoch, i, attempt);
        if (x >= reject_below) return x % s;
    }
}

/* perm (n) = the order of epoch `epoch`: Fisher-Yates from the top, step i drawing j in [0, i]. */
static void build_perm(uint64_t* perm, size_t n, uint64_t seed, uint64_t epoch) {
    for (size_t w = 0; w < n; w++) perm[w] = w;
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)shuffle_below(seed, epoch, i, (uint64_t)i + 1);
        uint64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
}

/* ---- the loader ---------------------------------------------------------------------------- */

static int cmp_str(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Expands `split` into a sorted list of paths. Sorting is by byte value (strcmp), never by the
 * locale, so the order of shards is the same on every machine. */
static int expand_split(DataLoader* dl, const char* split, char err[256]) {
    if (strpbrk(split, "*?[") == NULL) {
        dl->paths = malloc(sizeof(char*));
        if (!dl->paths || !(dl->paths[0] = str_dup(split))) {
            err_printf(err, "%s: out of memory", split);
            return 1;
        }
        dl->num_shards = 1;
        return 0;
    }
    glob_t g;
    int rc = glob(split, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        err_printf(err, "split %s: pattern matches no files", split);
        if (rc == 0) globfree(&g);
        return 1;
    }
    if (rc != 0) {
        err_printf(err, "split %s: cannot expand the pattern (glob error %d)", split, rc);
        return 1;
    }
    dl->paths = calloc(g.gl_pathc, sizeof(char*));
    if (!dl->paths) { globfree(&g); err_printf(err, "split %s: out of memory", split); return 1; }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (!(dl->paths[i] = str_dup(g.gl_pathv[i]))) {
            dl->num_shards = (int)i;
            globfree(&g);
            err_printf(err, "split %s: out of memory", split);
            return 1;
        }
    }
    dl->num_shards = (int)g.gl_pathc;
    globfree(&g);
    qsort(dl->paths, (size_t)dl->num_shards, sizeof(char*), cmp_str);
    return 0;
}

int loader_open(DataLoader* dl, const char* split, int B, int T, int vocab_size,
                int shuffle, uint64_t shuffle_seed, char err[256]) {
    memset(dl, 0, sizeof(*dl));
    dl->fd = -1;
    dl->fd_shard = -1;
    if (B < 1 || T < 1 || (long long)B * T >= (long long)SHARD_MAX_TOKENS) {
        err_printf(err, "split %s: bad batch shape B=%d T=%d", split, B, T);
        return 1;
    }
    dl->B = B;
    dl->T = T;
    dl->vocab_size = vocab_size > 0 ? vocab_size : 0;
    dl->split = str_dup(split);
    if (!dl->split) { err_printf(err, "split %s: out of memory", split); return 1; }
    if (expand_split(dl, split, err) != 0) { loader_close(dl); return 1; }

    size_t S = (size_t)dl->num_shards;
    size_t bt = (size_t)B * T;
    dl->shard_tokens = calloc(S, sizeof(size_t));
    dl->first_window = calloc(S + 1, sizeof(size_t));
    dl->buf = malloc((bt + 1) * sizeof(uint16_t));
    if (!dl->shard_tokens || !dl->first_window || !dl->buf) {
        err_printf(err, "split %s: out of memory", split);
        loader_close(dl);
        return 1;
    }
    size_t largest = 0;
    for (size_t s = 0; s < S; s++) {
        const char* path = dl->paths[s];
        int fd = open_shard(path, err);
        if (fd < 0) {
            loader_close(dl);
            return 1;
        }
        size_t n;
        int rc = check_header_fd(fd, path, &n, err);
        if (rc == 0 && dl->vocab_size > 0) rc = check_tokens_fd(fd, path, n, dl->vocab_size, err);
        close(fd);
        if (rc != 0) { loader_close(dl); return 1; }
        dl->shard_tokens[s] = n;
        if (n > largest) largest = n;
        /* a shard of n tokens holds floor((n-1)/(B*T)) windows of B*T+1 tokens */
        dl->first_window[s + 1] = dl->first_window[s] + (n - 1) / bt;
    }
    dl->num_windows = dl->first_window[S];
    if (dl->num_windows == 0) {
        err_printf(err, "split %s: too little data: a window needs B*T+1 = %zu tokens (B=%d, T=%d) "
                   "in one shard, the largest of its %zu shard(s) has %zu: give it more text or "
                   "lower --batch/--seq", split, bt + 1, B, T, S, largest);
        loader_close(dl);
        return 1;
    }
    dl->perm = malloc(dl->num_windows * sizeof(uint64_t));
    if (!dl->perm) { err_printf(err, "split %s: out of memory", split); loader_close(dl); return 1; }
    dl->state.shuffle = shuffle ? 1 : 0;
    dl->state.shuffle_seed = shuffle_seed;
    dl->state.num_windows = dl->num_windows;
    return 0;
}

void loader_close(DataLoader* dl) {
    if (dl->fd >= 0) close(dl->fd);
    if (dl->paths) for (int s = 0; s < dl->num_shards; s++) free(dl->paths[s]);
    free(dl->paths);
    free(dl->split);
    free(dl->shard_tokens);
    free(dl->first_window);
    free(dl->perm);
    free(dl->buf);
    memset(dl, 0, sizeof(*dl));
    dl->fd = -1;
    dl->fd_shard = -1;
}

size_t loader_num_windows(const DataLoader* dl) {
    return dl->num_windows;
}

void loader_locate(const DataLoader* dl, size_t w, int* shard, size_t* first_token) {
    /* the last shard s with first_window[s] <= w; shards without windows share their start
     * with the next one, and the last such s is the one that holds w */
    int lo = 0, hi = dl->num_shards;   /* invariant: first_window[lo] <= w < first_window[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (dl->first_window[mid] <= w) lo = mid; else hi = mid;
    }
    *shard = lo;
    *first_token = (w - dl->first_window[lo]) * (size_t)dl->B * dl->T;
}

size_t loader_order(DataLoader* dl, uint64_t epoch, size_t k) {
    if (!dl->state.shuffle) return k;
    if (!dl->perm_valid || dl->perm_epoch != epoch) {
        build_perm(dl->perm, dl->num_windows, dl->state.shuffle_seed, epoch);
        dl->perm_epoch = epoch;
        dl->perm_valid = 1;
    }
    return (size_t)dl->perm[k];
}

/* Reads split window w into inputs/targets (B*T each). */
static int read_window(DataLoader* dl, size_t w, int* inputs, int* targets) {
    int s;
    size_t first;
    loader_locate(dl, w, &s, &first);
    const char* path = dl->paths[s];
    if (dl->fd_shard != s) {
        if (dl->fd >= 0) close(dl->fd);
        dl->fd_shard = -1;
        dl->fd = open_shard(path, dl->err);
        if (dl->fd < 0) return 1;
        dl->fd_shard = s;
    }
    size_t bt = (size_t)dl->B * dl->T;
    off_t off = SHARD_HEADER_BYTES + (off_t)(2 * first);
    if (pread_full(dl->fd, dl->buf, (bt + 1) * sizeof(uint16_t), off) != 0) {
        err_printf(dl->err, "%s: cannot read %zu tokens at byte offset %lld: %s", path, bt + 1,
                   (long long)off, errno_text());
        return 1;
    }
    /* validated at open; checked again because the file may have changed since */
    if (dl->vocab_size > 0) {
        for (size_t i = 0; i <= bt; i++) {
            if ((int)dl->buf[i] >= dl->vocab_size) {
                err_printf(dl->err, "%s: token %u at byte offset %lld (token index %zu) is out of "
                           "vocab (must be < %d)", path, dl->buf[i], (long long)(off + 2 * (off_t)i),
                           first + i, dl->vocab_size);
                return 1;
            }
        }
    }
    for (size_t i = 0; i < bt; i++) {
        inputs[i] = dl->buf[i];
        targets[i] = dl->buf[i + 1];
    }
    return 0;
}

int loader_window(DataLoader* dl, size_t k, int* inputs, int* targets) {
    if (k >= dl->num_windows) {
        err_printf(dl->err, "split %s: window %zu out of range (%zu windows)", dl->split, k,
                   dl->num_windows);
        return 1;
    }
    return read_window(dl, loader_order(dl, dl->state.epoch, k), inputs, targets);
}

int loader_next(DataLoader* dl, int* inputs, int* targets) {
    if (loader_window(dl, (size_t)dl->state.pos, inputs, targets) != 0) return 1;
    dl->state.pos++;
    if (dl->state.pos == dl->num_windows) {
        dl->state.pos = 0;
        dl->state.epoch++;
    }
    return 0;
}

int loader_peek(DataLoader* dl, size_t ahead, int* inputs, int* targets) {
    uint64_t at = dl->state.pos + (uint64_t)ahead;
    uint64_t epoch = dl->state.epoch + at / dl->num_windows;
    return read_window(dl, loader_order(dl, epoch, (size_t)(at % dl->num_windows)), inputs, targets);
}

void loader_advance(DataLoader* dl, size_t n) {
    uint64_t at = dl->state.pos + (uint64_t)n;
    dl->state.epoch += at / dl->num_windows;
    dl->state.pos = at % dl->num_windows;
}

void loader_reset(DataLoader* dl) {
    dl->state.epoch = 0;
    dl->state.pos = 0;
}

LoaderState loader_get_state(const DataLoader* dl) {
    return dl->state;
}

int loader_set_state(DataLoader* dl, const LoaderState* s, char err[256]) {
    if (s->num_windows != dl->num_windows) {
        err_printf(err, "split %s: loader state is for a split of %llu windows, this one has %zu "
                   "(B=%d, T=%d): different data or batch shape", dl->split,
                   (unsigned long long)s->num_windows, dl->num_windows, dl->B, dl->T);
        return 1;
    }
    if (s->pos >= s->num_windows || (s->shuffle != 0 && s->shuffle != 1)) {
        err_printf(err, "split %s: bad loader state (pos %llu of %llu windows, shuffle %d)", dl->split,
                   (unsigned long long)s->pos, (unsigned long long)s->num_windows, (int)s->shuffle);
        return 1;
    }
    dl->state = *s;
    dl->perm_valid = 0;   /* the seed may have changed */
    return 0;
}
