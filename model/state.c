/* model/state.c — the training-state file (model/state.h; byte layout in docs/formats.md), the
 * state files of a run folder, and the crash tests' fault points.
 *
 * Owns: the state header and its checks, the CRC-32 (zlib's polynomial, computed here) over the whole file, the
 * tmp + fsync + rename discipline for writing one, and the finiteness check on both sides.
 * May not: print, exit (except the deliberate SIGKILL of a fault point, or the SIGINT of the
 * state_sigint test hook), or know data/.
 */
#include "model/state.h"
#include "util/fileio.h"
#include "util/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

/* Header offsets (bytes). Everything little-endian; the host must be too (checked). */
enum {
    O_MAGIC = 0,            /* char[8] "SEEDSTAT" */
    O_VERSION = 8,          /* u32 */
    O_HEADER_BYTES = 12,    /* u32 = 256 */
    O_CONFIG = 16,          /* i32 x 7: maxT, V, Vp, L, NH, NKV, C */
    O_RANKS = 44,           /* u32 data-parallel ranks; 0 for one process */
    O_PARAMS = 48,          /* u64 P: floats in each of weights, m, v */
    O_STEP = 56,            /* u64 */
    O_SEED = 64,            /* u64 master seed */
    O_EPOCH = 72,           /* u64 loader */
    O_POS = 80,             /* u64 loader */
    O_SHUFFLE_SEED = 88,    /* u64 loader */
    O_WINDOWS = 96,         /* u64 loader */
    O_SHUFFLE = 104,        /* i32 loader */
    O_BATCH = 108,          /* i32 B */
    O_SEQ = 112,            /* i32 T */
    O_BAD_RUN = 116,        /* u32 consecutive non-finite steps */
    O_BAD_TOTAL = 120,      /* u64 */
    O_OPTIONS_BYTES = 128,  /* u64 */
    O_RESERVED = 136,       /* bytes 136..239 = 0 (version 3: 140..239, version 4: 148..239) */
    O_CONTEXT = 136,        /* u32 context-parallel N (version 3); 0: none, as in versions 1, 2 */
    O_LOSS_SCALE = 140,     /* f32 fp16's loss scale (version 4); 0: not an fp16 run */
    O_SCALE_GOOD = 144,     /* u32 fp16's good steps since the scale last changed (version 4) */
    O_MODEL_OPTIONS = 240,  /* i32 x 4: pos kind, rope base, rope layout, block kind (version 2;
                               in version 1 reserved, 0: the defaults) */
    O_END = 256
};

static int host_is_little_endian(void) {
    const uint16_t probe = 1;
    return *(const unsigned char*)&probe == 1;
}

static uint32_t get_u32(const unsigned char* h, int off) { uint32_t v; memcpy(&v, h + off, 4); return v; }
static int32_t get_i32(const unsigned char* h, int off) { int32_t v; memcpy(&v, h + off, 4); return v; }
static uint64_t get_u64(const unsigned char* h, int off) { uint64_t v; memcpy(&v, h + off, 8); return v; }
static void put_u32(unsigned char* h, int off, uint32_t v) { memcpy(h + off, &v, 4); }
static void put_i32(unsigned char* h, int off, int32_t v) { memcpy(h + off, &v, 4); }
static void put_u64(unsigned char* h, int off, uint64_t v) { memcpy(h + off, &v, 8); }

/* CRC-32 as zlib, gzip and PNG define it (reflected polynomial 0xEDB88320, initial and final
 * inversion), so `crc32` of any tool checks a state; the tests compare it with their own bitwise
 * oracle (tests/crc32_ref.h). Slicing by 8: table k maps a byte that is followed by k more bytes
 * of the block, so eight table lookups advance the CRC by eight bytes (~2 GB/s; a 124M-parameter
 * state is 1.5 GB). */
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int t = 1; t < 8; t++)
            crc_table[t][b] = (crc_table[t - 1][b] >> 8) ^ crc_table[0][crc_table[t - 1][b] & 0xff];
}

/* crc of the bytes so far (0 for none) -> crc including buf[0..n) */
static uint32_t crc_update(uint32_t crc, const void* buf, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_init);
    const unsigned char* p = buf;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
            crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
    }
    for (; n > 0; n--, p++) c = (c >> 8) ^ crc_table[0][(c ^ *p) & 0xff];
    return ~c;
}

static size_t sum_param_sizes(const GPTConfig* c) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    gpt_param_sizes(c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) n += sizes[k];
    return n;
}

/* The three arrays of a state, tensor by tensor: weights, then m, then v, each in llm.c order.
 * m and v sit at the weights' offsets inside their own blocks. These are the host copies: the
 * caller moves them (gpt_to_host before a save, gpt_to_backend after a load). */
static float* array_tensor(const GPT* m, int which, int k) {
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->host_params, sizeof(p));
    if (which == 0) return p[k];
    size_t off[NUM_PARAMETER_TENSORS];
    gpt_param_offsets(&m->config, off);
    return (which == 1 ? m->host_m_memory : m->host_v_memory) + off[k];
}
static const char* const array_names[3] = {"weights", "AdamW m", "AdamW v"};

/* The part of tensor k's moments (which 1: m, 2: v) the model holds: all of it, unless the model
 * was built for one ZeRO-1 shard (gpt_build_shard: the moments of [opt_begin, opt_begin +
 * opt_floats) of the block only). Returns its element count (0: none), its first element in the
 * tensor in *first and where it lives in *ptr. */
static size_t moment_part(const GPT* m, int which, int k, size_t* first, float** ptr) {
    size_t off[NUM_PARAMETER_TENSORS];
    gpt_param_offsets(&m->config, off);
    size_t a = off[k], e = a + m->param_sizes[k], end = m->opt_begin + m->opt_floats;
    size_t lo = a > m->opt_begin ? a : m->opt_begin, hi = e < end ? e : end;
    *first = 0;
    *ptr = NULL;
    if (lo >= hi) return 0;
    *first = lo - a;
    *ptr = (which == 1 ? m->host_m_memory : m->host_v_memory) + (lo - m->opt_begin);
    return hi - lo;
}

/* The part of tensor k of array `which` the model holds, as moment_part; of the weights, all of
 * it unless the masters are sharded (model/gpt.h: master_first, master_held). */
static size_t held_part(const GPT* m, int which, int k, size_t* first, float** ptr) {
    if (which > 0) return moment_part(m, which, k, first, ptr);
    *first = m->master_first[k];
    *ptr = array_tensor(m, 0, k);
    return m->master_held[k];
}

/* Is tensor k of array `which` held in part, gathered from the ranks at a save? */
static int gathered(const GPT* m, int which, int k) {
    return which > 0 || (m->masters_sharded && gpt_param_operand_only[k]);
}

/* Does the model hold only one shard of the moments (and perhaps of the masters)? */
static int sharded(const GPT* m) {
    size_t off[NUM_PARAMETER_TENSORS];
    return m->masters_sharded || m->opt_begin != 0 ||
           m->opt_floats != gpt_param_offsets(&m->config, off);
}

/* The first non-finite value of n floats at t, element `first` of tensor k of array which. */
static int check_values(const float* t, size_t n, size_t first, int which, int k,
                        const char* path, const char* when, char err[256]) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(t[i])) {
            err_printf(err, "%s: %s: %s tensor %s element %zu is %g (a state never holds a "
                       "non-finite value)", path, when, array_names[which], gpt_param_names[k],
                       first + i, (double)t[i]);
            return -1;
        }
    }
    return 0;
}

/* The first non-finite value of the three arrays (of the moments, the part the model holds;
 * moments: 0 skips them): 0 if none, else -1 with err. */
static int check_finite(const GPT* m, int moments, const char* path, const char* when,
                        char err[256]) {
    for (int which = 0; which < (moments ? 3 : 1); which++) {
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            size_t first = 0;
            float* t = NULL;
            size_t n = held_part(m, which, k, &first, &t);
            if (check_values(t, n, first, which, k, path, when, err) != 0) return -1;
        }
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------------ */

static int write_crc(FILE* f, const void* buf, size_t n, uint32_t* crc) {
    *crc = crc_update(*crc, buf, n);
    return fwrite(buf, 1, n, f) == n ? 0 : -1;
}

int state_save(const char* path, const GPT* m, const StateInfo* info, char err[256]) {
    return state_save_from(path, m, info, NULL, err);
}

int state_save_from(const char* path, const GPT* m, const StateInfo* info,
                    const StateMomentSource* src, char err[256]) {
    if (src == NULL && sharded(m)) {
        err_printf(err, "%s: the model holds one shard of AdamW's moments (ZeRO-1): the others' are "
                   "needed to save", path);
        return -1;
    }
    if (!host_is_little_endian()) {
        err_printf(err, "%s: state files are little-endian; this host is not", path);
        return -1;
    }
    char tmp[4096];
    if (tmp_path_of(tmp, sizeof(tmp), path) != 0) {
        err_printf(err, "%s: path too long", path);
        return -1;
    }
    size_t opt_len = strnlen(info->options, STATE_MAX_OPTIONS + 1);
    if (opt_len > STATE_MAX_OPTIONS) {
        err_printf(err, "%s: option text longer than %d bytes", path, STATE_MAX_OPTIONS);
        return -1;
    }
    /* the moments (and sharded masters) from src are checked as they come, before they are
     * written; the weights the model holds whole, here */
    if (check_finite(m, src == NULL, path, "refusing to save", err) != 0) return STATE_NON_FINITE;

    const GPTConfig* c = &m->config;
    unsigned char h[STATE_HEADER_BYTES];
    memset(h, 0, sizeof(h));
    memcpy(h + O_MAGIC, STATE_MAGIC, 8);
    int options = c->pos_kind != POS_LEARNED || c->block_kind != BLOCK_SEQUENTIAL;
    int context = info->context_parallel > 1;
    int scaled = info->loss_scale != 0.0f;
    /* the oldest version that holds it */
    put_u32(h, O_VERSION, scaled ? 4 : context ? 3 : options ? 2 : 1);
    if (scaled) {
        uint32_t bits;
        memcpy(&bits, &info->loss_scale, 4);
        put_u32(h, O_LOSS_SCALE, bits);
        put_u32(h, O_SCALE_GOOD, info->scale_good);
    }
    put_u32(h, O_CONTEXT, context ? info->context_parallel : 0);
    put_u32(h, O_HEADER_BYTES, STATE_HEADER_BYTES);
    int32_t cf[7] = {c->max_seq_len, c->vocab_size, c->padded_vocab_size, c->num_layers,
                     c->num_heads, c->num_kv_heads, c->channels};
    for (int i = 0; i < 7; i++) put_i32(h, O_CONFIG + 4 * i, cf[i]);
    int32_t mo[4] = {c->pos_kind, c->rope_base, c->rope_layout, c->block_kind};
    for (int i = 0; i < 4; i++) put_i32(h, O_MODEL_OPTIONS + 4 * i, mo[i]);
    put_u32(h, O_RANKS, info->ranks > 1 ? info->ranks : 0);   /* one process: 0, as before */
    put_u64(h, O_PARAMS, sum_param_sizes(c));
    put_u64(h, O_STEP, info->step);
    put_u64(h, O_SEED, info->master_seed);
    put_u64(h, O_EPOCH, info->loader.epoch);
    put_u64(h, O_POS, info->loader.pos);
    put_u64(h, O_SHUFFLE_SEED, info->loader.shuffle_seed);
    put_u64(h, O_WINDOWS, info->loader.num_windows);
    put_i32(h, O_SHUFFLE, info->loader.shuffle);
    put_i32(h, O_BATCH, info->batch);
    put_i32(h, O_SEQ, info->seq);
    put_u32(h, O_BAD_RUN, info->bad_consecutive);
    put_u64(h, O_BAD_TOTAL, info->bad_total);
    put_u64(h, O_OPTIONS_BYTES, opt_len);

    FILE* f = fopen(tmp, "wb");
    if (f == NULL) {
        err_printf(err, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    fault_kill_point("state_open", -1);
    const char* failed = NULL;
    uint32_t crc = 0u;
    if (write_crc(f, h, sizeof(h), &crc) != 0 || fflush(f) != 0) failed = "write";
    fault_kill_point("state_header", -1);
    if (fault_fires("state_sigint", -1)) raise(SIGINT);   /* test hook: a signal mid-write */
    if (failed == NULL && write_crc(f, info->options, opt_len, &crc) != 0) failed = "write";
    int non_finite = 0;
    for (int which = 0; which < 3; which++) {
        /* with src every gathered tensor is asked for, whatever failed before: the ranks that
         * serve them go through all of them too */
        for (int k = 0; k < NUM_PARAMETER_TENSORS && (failed == NULL || src != NULL); k++) {
            int from_src = src != NULL && gathered(m, which, k);
            const float* t = from_src ? NULL : array_tensor(m, which, k);
            size_t n = m->param_sizes[k];
            if (from_src) {
                char serr[256] = "";
                t = src->tensor(src->ctx, which, k, serr);
                if (t == NULL) {
                    if (failed == NULL) err_printf(err, "%s: %s: %s", path, array_names[which], serr);
                    if (failed == NULL) failed = "gather";
                    continue;
                }
                if (failed == NULL &&
                    check_values(t, n, 0, which, k, path, "refusing to save", err) != 0) {
                    failed = "check";
                    non_finite = 1;
                }
            }
            if (failed == NULL && write_crc(f, t, n * sizeof(float), &crc) != 0) failed = "write";
        }
        if (which == 0) {   /* the weights are out, the moments not yet */
            if (failed == NULL && fflush(f) != 0) failed = "write";
            fault_kill_point("state_payload", -1);
        }
    }
    if (failed != NULL && (non_finite || !strcmp(failed, "gather"))) {
        fclose(f);
        unlink(tmp);
        return non_finite ? STATE_NON_FINITE : -1;   /* err says what */
    }
    unsigned char trailer[4];
    put_u32(trailer, 0, crc);
    if (failed == NULL && fwrite(trailer, 1, 4, f) != 4) failed = "write";
    if (failed == NULL && fflush(f) != 0) failed = "write";
    /* util/fileio.h's commit_tmp_file, spelled out: the crash tests' fault points sit between
     * its steps */
    fault_kill_point("state_written", -1);
    if (failed == NULL && fsync(fileno(f)) != 0) failed = "fsync";
    int saved_errno = errno;
    if (fclose(f) != 0 && failed == NULL) { failed = "close"; saved_errno = errno; }
    if (failed == NULL) fault_kill_point("state_fsynced", -1);
    if (failed == NULL && rename(tmp, path) != 0) { failed = "rename"; saved_errno = errno; }
    if (failed != NULL) {
        unlink(tmp);
        err_printf(err, "%s: %s of %s failed: %s (the previous file, if any, is untouched)", path,
                   failed, tmp, strerror(saved_errno));
        return -1;
    }
    fault_kill_point("state_renamed", -1);
    fsync_parent_dir(path);
    return 0;
}

/* ---- reading ------------------------------------------------------------------------------ */

static int read_full(FILE* f, void* buf, size_t n) { return fread(buf, 1, n, f) == n ? 0 : -1; }

/* Checks the 256 header bytes of a file of `size` bytes and fills info (options not yet). */
static int parse_header(const unsigned char* h, long long size, const char* path, StateInfo* info,
                        char err[256]) {
    if (memcmp(h + O_MAGIC, STATE_MAGIC, 8) != 0) {
        char shown[9];
        for (int i = 0; i < 8; i++) shown[i] = h[i] >= 32 && h[i] < 127 ? (char)h[i] : '?';
        shown[8] = '\0';
        err_printf(err, "%s: bad magic \"%s\" (expected \"%s\"): not a seedgpt training state", path,
                   shown, STATE_MAGIC);
        return -1;
    }
    uint32_t version = get_u32(h, O_VERSION);
    if (version < 1 || version > STATE_VERSION) {
        err_printf(err, "%s: state file version %u, this build reads versions 1 to %d", path, version,
                   STATE_VERSION);
        return -1;
    }
    uint32_t hb = get_u32(h, O_HEADER_BYTES);
    if (hb != STATE_HEADER_BYTES) {
        err_printf(err, "%s: header size %u, expected %d", path, hb, STATE_HEADER_BYTES);
        return -1;
    }
    uint32_t ranks = get_u32(h, O_RANKS);
    if (ranks == 1 || ranks > STATE_MAX_RANKS) {
        err_printf(err, "%s: bad header: ranks %u (0 for one process, else 2 .. %d)", path, ranks,
                   STATE_MAX_RANKS);
        return -1;
    }
    uint32_t context = version >= 3 ? get_u32(h, O_CONTEXT) : 0;
    if (context == 1 || context > STATE_MAX_RANKS || (context > 1 && (ranks == 0 || ranks % context != 0))) {
        err_printf(err, "%s: bad header: context-parallel %u with %u ranks (0 for none, else 2 .. %d "
                   "dividing the ranks)", path, context, ranks, STATE_MAX_RANKS);
        return -1;
    }
    info->loss_scale = 0.0f;
    info->scale_good = 0;
    if (version >= 4) {
        uint32_t bits = get_u32(h, O_LOSS_SCALE);
        float ls;
        memcpy(&ls, &bits, 4);
        int e;
        /* version 4 is written by fp16 runs only: a power of two from 1 to 2^127 */
        if (!(isfinite(ls) && ls >= 1.0f && frexpf(ls, &e) == 0.5f)) {
            err_printf(err, "%s: bad header: loss scale %g in a version-4 state (a power of two "
                       ">= 1)", path, (double)ls);
            return -1;
        }
        info->loss_scale = ls;
        info->scale_good = get_u32(h, O_SCALE_GOOD);
    }
    for (int i = version >= 4 ? O_SCALE_GOOD + 4 : version >= 3 ? O_CONTEXT + 4 : O_RESERVED;
         i < (version == 1 ? O_END : O_MODEL_OPTIONS); i++) {
        if (h[i] != 0) {
            err_printf(err, "%s: reserved header byte %d is %d, must be 0 in version %u", path, i,
                       h[i], version);
            return -1;
        }
    }
    GPTConfig c;
    c.max_seq_len = get_i32(h, O_CONFIG + 0);
    c.vocab_size = get_i32(h, O_CONFIG + 4);
    c.padded_vocab_size = get_i32(h, O_CONFIG + 8);
    c.num_layers = get_i32(h, O_CONFIG + 12);
    c.num_heads = get_i32(h, O_CONFIG + 16);
    c.num_kv_heads = get_i32(h, O_CONFIG + 20);
    c.channels = get_i32(h, O_CONFIG + 24);
    c.pos_kind = get_i32(h, O_MODEL_OPTIONS + 0);
    c.rope_base = get_i32(h, O_MODEL_OPTIONS + 4);
    c.rope_layout = get_i32(h, O_MODEL_OPTIONS + 8);
    c.block_kind = get_i32(h, O_MODEL_OPTIONS + 12);
    const char* problem = gpt_config_problem(&c);
    if (problem != NULL) {
        err_printf(err, "%s: bad configuration in header (maxT %d, V %d, Vp %d, L %d, NH %d, NKV %d, "
                   "C %d): %s", path, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers,
                   c.num_heads, c.num_kv_heads, c.channels, problem);
        return -1;
    }
    uint64_t P = get_u64(h, O_PARAMS);
    size_t want_P = sum_param_sizes(&c);
    if (P != want_P) {
        err_printf(err, "%s: inconsistent header: %llu parameters, the configuration has %zu", path,
                   (unsigned long long)P, want_P);
        return -1;
    }
    info->config = c;
    info->num_parameters = P;
    info->ranks = ranks ? ranks : 1;
    info->context_parallel = context ? context : 1;
    info->step = get_u64(h, O_STEP);
    info->master_seed = get_u64(h, O_SEED);
    info->loader.epoch = get_u64(h, O_EPOCH);
    info->loader.pos = get_u64(h, O_POS);
    info->loader.shuffle_seed = get_u64(h, O_SHUFFLE_SEED);
    info->loader.num_windows = get_u64(h, O_WINDOWS);
    info->loader.shuffle = get_i32(h, O_SHUFFLE);
    info->batch = get_i32(h, O_BATCH);
    info->seq = get_i32(h, O_SEQ);
    info->bad_consecutive = get_u32(h, O_BAD_RUN);
    info->bad_total = get_u64(h, O_BAD_TOTAL);
    uint64_t opt_len = get_u64(h, O_OPTIONS_BYTES);
    if (info->step > INT32_MAX) {
        err_printf(err, "%s: bad header: step %llu (at most %d)", path,
                   (unsigned long long)info->step, INT32_MAX);
        return -1;
    }
    if (info->batch < 1 || info->seq < 1 || info->seq > c.max_seq_len) {
        err_printf(err, "%s: bad header: batch %d x seq %d (both >= 1, seq <= maxT %d)", path,
                   info->batch, info->seq, c.max_seq_len);
        return -1;
    }
    const StateLoader* l = &info->loader;
    if (l->num_windows == 0 || l->pos >= l->num_windows || (l->shuffle != 0 && l->shuffle != 1)) {
        err_printf(err, "%s: bad header: loader position %llu of %llu windows, shuffle %d", path,
                   (unsigned long long)l->pos, (unsigned long long)l->num_windows, (int)l->shuffle);
        return -1;
    }
    if (info->bad_total > info->step || info->bad_consecutive > info->bad_total) {
        err_printf(err, "%s: inconsistent header: %u consecutive and %llu total non-finite steps in "
                   "%llu steps", path, info->bad_consecutive, (unsigned long long)info->bad_total,
                   (unsigned long long)info->step);
        return -1;
    }
    if (opt_len > STATE_MAX_OPTIONS) {
        err_printf(err, "%s: bad header: %llu bytes of option text (at most %d)", path,
                   (unsigned long long)opt_len, STATE_MAX_OPTIONS);
        return -1;
    }
    /* P <= 2^40 (gpt_config_problem), so the size fits easily in 64 bits */
    long long expected = STATE_HEADER_BYTES + (long long)opt_len + 12LL * (long long)P + 4;
    if (size != expected) {
        err_printf(err, "%s: %s: file has %lld bytes, the header promises %lld (256 + %llu option "
                   "bytes + 3 x 4 x %llu parameters + 4)", path,
                   size < expected ? "truncated" : "oversized, trailing bytes", size, expected,
                   (unsigned long long)opt_len, (unsigned long long)P);
        return -1;
    }
    return 0;
}

/* Opens path and checks the header and size; leaves f positioned after the header. */
static FILE* open_checked(const char* path, StateInfo* info, unsigned char h[STATE_HEADER_BYTES],
                          char err[256]) {
    if (!host_is_little_endian()) {
        err_printf(err, "%s: state files are little-endian; this host is not", path);
        return NULL;
    }
    /* opened only once it is known to be a regular file (util/fileio.h): a FIFO named like a
     * state is refused, never waited on */
    const char* kind;
    FILE* f = fopen_regular(path, &kind);
    if (f == NULL) {
        if (kind != NULL) err_printf(err, "%s: not a regular file (%s)", path, kind);
        else err_printf(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        err_printf(err, "%s: cannot stat: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    long long size = (long long)st.st_size;
    if (size < STATE_HEADER_BYTES || read_full(f, h, STATE_HEADER_BYTES) != 0) {
        err_printf(err, "%s: truncated: file has %lld bytes, the state header alone is %d", path,
                   size, STATE_HEADER_BYTES);
        fclose(f);
        return NULL;
    }
    if (parse_header(h, size, path, info, err) != 0) {
        fclose(f);
        return NULL;
    }
    return f;
}

/* Reads the option text (after the header) into info->options and checks it is text. */
static int read_options(FILE* f, const unsigned char* h, const char* path, StateInfo* info,
                        uint32_t* crc, char err[256]) {
    size_t n = (size_t)get_u64(h, O_OPTIONS_BYTES);
    if (read_full(f, info->options, n) != 0) {
        err_printf(err, "%s: read error in the option text", path);
        return -1;
    }
    info->options[n] = '\0';
    *crc = crc_update(*crc, info->options, n);
    if (strlen(info->options) != n) {
        err_printf(err, "%s: option text holds a NUL byte", path);
        return -1;
    }
    return 0;
}

static int check_trailer(FILE* f, const char* path, uint32_t crc, char err[256]) {
    unsigned char t[4];
    if (read_full(f, t, 4) != 0) {
        err_printf(err, "%s: read error at the checksum", path);
        return -1;
    }
    uint32_t stored = get_u32(t, 0);
    if (stored != crc) {
        err_printf(err, "%s: checksum mismatch: stored CRC32 0x%08x, contents give 0x%08x (corrupted "
                   "file)", path, stored, crc);
        return -1;
    }
    return 0;
}

int state_read_info(const char* path, StateInfo* info, char err[256]) {
    unsigned char h[STATE_HEADER_BYTES];
    memset(info, 0, sizeof(*info));
    FILE* f = open_checked(path, info, h, err);
    if (f == NULL) return -1;
    uint32_t crc = crc_update(0u, h, sizeof(h));
    if (read_options(f, h, path, info, &crc, err) != 0) { fclose(f); return -1; }
    /* the payload: 12 P bytes, streamed through the CRC */
    size_t left = (size_t)info->num_parameters * 12;
    enum { CHUNK = 1 << 20 };
    unsigned char* buf = malloc(CHUNK);
    if (buf == NULL) { err_printf(err, "%s: out of memory", path); fclose(f); return -1; }
    while (left > 0) {
        size_t n = left < CHUNK ? left : CHUNK;
        if (read_full(f, buf, n) != 0) {
            err_printf(err, "%s: read error in the tensors (file changed while reading?)", path);
            free(buf);
            fclose(f);
            return -1;
        }
        crc = crc_update(crc, buf, n);
        left -= n;
    }
    free(buf);
    int rc = check_trailer(f, path, crc, err);
    fclose(f);
    return rc;
}

/* Names the first configuration field that differs. */
static int config_mismatch(const GPTConfig* file, const GPTConfig* model, const char* path,
                           char err[256]) {
    int fv, mv;
    const char* field = gpt_config_diff(file, model, &fv, &mv);
    if (field == NULL) return 0;
    err_printf(err, "%s: configuration mismatch: %s is %d in the state but %d in the model", path,
               field, fv, mv);
    return -1;
}

/* Tensor k of array `which` from f, through the CRC, keeping the part the (sharded) model
 * holds. 0, or -1 on a read error. */
static int read_held_part(FILE* f, GPT* m, int which, int k, uint32_t* crc) {
    size_t first, n = m->param_sizes[k];
    float* dst;
    size_t keep = held_part(m, which, k, &first, &dst);
    enum { PIECE = 4096 };
    float piece[PIECE];
    for (size_t i = 0; i < n; i += PIECE) {
        size_t c = n - i < PIECE ? n - i : PIECE;
        if (read_full(f, piece, c * sizeof(float)) != 0) return -1;
        *crc = crc_update(*crc, piece, c * sizeof(float));
        size_t lo = i > first ? i : first, hi = i + c < first + keep ? i + c : first + keep;
        if (lo < hi) memcpy(dst + (lo - first), piece + (lo - i), (hi - lo) * sizeof(float));
    }
    return 0;
}

int state_load(const char* path, GPT* m, StateInfo* info, char err[256]) {
    if (state_read_info(path, info, err) != 0) return -1;
    if (config_mismatch(&info->config, &m->config, path, err) != 0) return -1;
    /* second pass: into the model, the CRC again (the file may have changed in between) */
    unsigned char h[STATE_HEADER_BYTES];
    StateInfo again;
    FILE* f = open_checked(path, &again, h, err);
    if (f == NULL) return -1;
    uint32_t crc = crc_update(0u, h, sizeof(h));
    if (read_options(f, h, path, &again, &crc, err) != 0) { fclose(f); return -1; }
    int shard = sharded(m);
    for (int which = 0; which < 3; which++) {
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            if (shard && gathered(m, which, k)) {   /* ZeRO-1: the tensor read through, its part kept */
                if (read_held_part(f, m, which, k, &crc) != 0) {
                    err_printf(err, "%s: read error in %s tensor %s", path, array_names[which],
                               gpt_param_names[k]);
                    fclose(f);
                    return -1;
                }
                continue;
            }
            float* t = array_tensor(m, which, k);
            size_t n = m->param_sizes[k] * sizeof(float);
            if (read_full(f, t, n) != 0) {
                err_printf(err, "%s: read error in %s tensor %s", path, array_names[which],
                           gpt_param_names[k]);
                fclose(f);
                return -1;
            }
            crc = crc_update(crc, t, n);
        }
    }
    int rc = check_trailer(f, path, crc, err);
    fclose(f);
    if (rc != 0) return -1;
    if (memcmp(&again.config, &info->config, sizeof(GPTConfig)) != 0 || again.step != info->step) {
        err_printf(err, "%s: the file changed while it was being read", path);
        return -1;
    }
    if (check_finite(m, 1, path, "refusing to load", err) != 0) return -1;
    gpt_to_backend(m);
    return 0;
}

/* ---- state files in a run folder ---------------------------------------------------------- */

int state_path(char* out, size_t cap, const char* dir, uint64_t step) {
    int n = snprintf(out, cap, "%s/state_%08llu.bin", dir, (unsigned long long)step);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* "state_<digits>.bin" -> step; 0 on a match. */
static int parse_state_name(const char* name, uint64_t* step) {
    if (strncmp(name, "state_", 6) != 0) return -1;
    const char* d = name + 6;
    size_t nd = strspn(d, "0123456789");
    if (nd == 0 || nd > 19 || strcmp(d + nd, ".bin") != 0) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < nd; i++) v = v * 10 + (uint64_t)(d[i] - '0');
    *step = v;
    return 0;
}

static int cmp_desc(const void* a, const void* b) {
    uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int state_list(const char* dir, uint64_t** steps, int* n, char err[256]) {
    *steps = NULL;
    *n = 0;
    DIR* d = opendir(dir);
    if (d == NULL) {
        err_printf(err, "%s: cannot read the folder: %s", dir, strerror(errno));
        return -1;
    }
    int cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        uint64_t s;
        if (parse_state_name(e->d_name, &s) != 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t* grown = realloc(*steps, (size_t)cap * sizeof(uint64_t));
            if (grown == NULL) {
                free(*steps);
                *steps = NULL;
                *n = 0;
                closedir(d);
                err_printf(err, "%s: out of memory listing states", dir);
                return -1;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) qsort(*steps, (size_t)*n, sizeof(uint64_t), cmp_desc);
    return 0;
}

int state_prune(const char* dir, int keep, uint64_t current) {
    uint64_t* steps;
    int n, removed = 0, kept = 0;
    char path[4096];
    if (state_list(dir, &steps, &n, NULL) == 0) {
        for (int i = 0; i < n; i++) {
            if (steps[i] > current) continue;        /* not ours to judge */
            if (kept < keep) { kept++; continue; }
            if (state_path(path, sizeof(path), dir, steps[i]) == 0 && unlink(path) == 0) {
                removed++;
                fault_kill_point("state_prune", -1);
            }
        }
        free(steps);
    }
    /* temporary files of interrupted saves */
    DIR* d = opendir(dir);
    if (d != NULL) {
        struct dirent* e;
        while ((e = readdir(d)) != NULL) {
            size_t len = strlen(e->d_name);
            if (strncmp(e->d_name, "state_", 6) == 0 && len > 8 &&
                strcmp(e->d_name + len - 8, ".bin.tmp") == 0 &&
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path) &&
                unlink(path) == 0) {
                removed++;
            }
        }
        closedir(d);
    }
    fsync_dir(dir);
    return removed;
}

/* ---- fault points ------------------------------------------------------------------------- */

#define MAX_FAULTS 16
typedef struct {
    char name[40];
    long lo, hi;     /* fires for lo <= index <= hi */
    long hits;       /* times this process reached the point */
} Fault;
static Fault faults[MAX_FAULTS];
static int num_faults = -1;   /* -1: SEEDGPT_FAULT not read yet */

/* Parses spec into faults; 0, or -1 with err. */
static int parse_faults(const char* spec, Fault* out, int* n, char err[256]) {
    *n = 0;
    const char* p = spec;
    while (*p) {
        if (*n == MAX_FAULTS) {
            err_printf(err, "SEEDGPT_FAULT: more than %d entries", MAX_FAULTS);
            return -1;
        }
        Fault* f = &out[*n];
        memset(f, 0, sizeof(*f));
        size_t nl = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (nl == 0 || nl >= sizeof(f->name) || p[nl] != ':') {
            err_printf(err, "SEEDGPT_FAULT \"%s\": expected NAME:N or NAME:N-M, comma separated", spec);
            return -1;
        }
        memcpy(f->name, p, nl);
        p += nl + 1;
        char* end;
        errno = 0;
        long lo = strtol(p, &end, 10), hi;
        if (end == p || *p == '-' || *p == '+' || errno != 0 || lo < 0) {
            err_printf(err, "SEEDGPT_FAULT \"%s\": bad number after %s:", spec, f->name);
            return -1;
        }
        p = end;
        hi = lo;
        if (*p == '-') {
            p++;
            errno = 0;
            hi = strtol(p, &end, 10);
            if (end == p || *p == '-' || *p == '+' || errno != 0 || hi < lo) {
                err_printf(err, "SEEDGPT_FAULT \"%s\": bad range after %s:", spec, f->name);
                return -1;
            }
            p = end;
        }
        f->lo = lo;
        f->hi = hi;
        (*n)++;
        if (*p == ',' && p[1] != '\0') p++;
        else if (*p != '\0') {
            err_printf(err, "SEEDGPT_FAULT \"%s\": unexpected '%c'", spec, *p);
            return -1;
        }
    }
    return 0;
}

int fault_check_env(char err[256]) {
    const char* spec = getenv("SEEDGPT_FAULT");
    if (spec == NULL) return 0;
    Fault tmp[MAX_FAULTS];
    int n;
    return parse_faults(spec, tmp, &n, err);
}

int fault_fires(const char* name, long index) {
    if (num_faults < 0) {
        const char* spec = getenv("SEEDGPT_FAULT");
        if (spec == NULL || parse_faults(spec, faults, &num_faults, NULL) != 0) num_faults = 0;
    }
    int fires = 0;
    for (int i = 0; i < num_faults; i++) {
        Fault* f = &faults[i];
        if (strcmp(f->name, name) != 0) continue;
        long at = index >= 0 ? index : ++f->hits;
        if (at >= f->lo && at <= f->hi) fires = 1;
    }
    return fires;
}

void fault_kill_point(const char* name, long index) {
    if (fault_fires(name, index)) {
        fflush(stdout);   /* the diagnostics so far; no other stream: a real kill flushes nothing */
        raise(SIGKILL);
    }
}
