/* model/modelfile.c — reading and writing model files (the weights only; the training state for
 * resume is not this file's business). Byte layouts in docs/formats.md.
 *
 * Two formats, one tensor order (ParameterTensors, llm.c's order), both little-endian:
 *   - plain GPT-2 (num_kv_heads == num_heads): llm.c's fp32 checkpoint, 256 x int32 header
 *     {20240326, 3, maxT, V, L, NH, C, Vp, 0...}, so files move between llm.c and seedgpt;
 *   - any other configuration (grouped-query heads, RoPE, the parallel block): seedgpt's own
 *     header, 256 x int32 {MODELFILE_SEED_MAGIC, version, maxT, V, L, NH, C, Vp, NKV, pos kind,
 *     block kind, rope base, rope layout, 0...}; version 1 when the model options are the
 *     defaults (slots 9.. zero: older readers take it), version 2 otherwise.
 * Then every parameter tensor as contiguous float32, tensor after tensor (the tensors in memory
 * are separate 64-byte aligned blocks, so they are read and written one by one).
 * llm.c's bf16 model file (version 5, the same header) holds the same tensors as bf16 and is read
 * too, each weight widened exactly to fp32 (bf16 is the top half of an fp32); seedgpt writes
 * fp32 only.
 *
 * Loading checks everything that can be checked before a single weight is read (magic, version,
 * header fields, exact file size, the model's configuration), so a refused file leaves the model
 * untouched. Saving writes PATH.tmp, fsyncs it and renames it over PATH: a failing save never
 * damages the previous file.
 */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "model/modelfile.h"
#include "util/bf16.h"
#include "util/fileio.h"

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * 4)

#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3            /* fp32 weights: what seedgpt writes */
#define LLMC_VERSION_BF16 5       /* bf16 weights: read, widened to fp32 */
/* The file starts with the four ASCII bytes "SEED" (53 45 45 44), which read as a little-endian
 * int32 are 0x44454553 = 1145390419. */
#define MODELFILE_SEED_MAGIC 0x44454553
#define MODELFILE_SEED_VERSION 2      /* the newest version this build reads and writes */

/* Header slots. 2..7 mean the same in both formats. */
enum {
    H_MAGIC = 0, H_VERSION = 1, H_MAXT = 2, H_V = 3, H_L = 4, H_NH = 5, H_C = 6, H_VP = 7,
    H_NKV = 8,         /* seedgpt only */
    H_POS_KIND = 9,    /* seedgpt only: 0 = learned absolute positions (wpe), 1 = RoPE (v2) */
    H_BLOCK_KIND = 10, /* seedgpt only: 0 = GPT-2 sequential block, 1 = parallel block (v2) */
    H_ROPE_BASE = 11,  /* seedgpt v2: RoPE base; 0 with learned positions */
    H_ROPE_LAYOUT = 12,/* seedgpt v2: 0 = NeoX half-split pairs, 1 = GPT-J interleaved pairs */
    H_FIRST_RESERVED_V1 = 9,
    H_FIRST_RESERVED_V2 = 13
};

static int host_is_little_endian(void) {
    const uint16_t probe = 1;
    return *(const unsigned char*)&probe == 1;
}

static int has_model_options(const GPTConfig* c) {
    return c->pos_kind != POS_LEARNED || c->block_kind != BLOCK_SEQUENTIAL;
}
/* llm.c's format describes exactly this: all heads full, learned positions, sequential blocks */
static int is_plain_gpt2(const GPTConfig* c) {
    return c->num_kv_heads == c->num_heads && !has_model_options(c);
}

static size_t total_params(const GPTConfig* c) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    gpt_param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += sizes[i];
    return n;
}

/* Reads and validates the header of the open file f (at offset 0): magic, version, fields,
 * and the exact file size. Fills cfg and *elem_bytes (4: fp32, 2: llm.c's bf16); 0 or -1 with err. */
static int parse_header(FILE* f, const char* path, GPTConfig* cfg, int* elem_bytes, char err[256]) {
    if (!host_is_little_endian()) {
        snprintf(err, 256, "%s: model files are little-endian; this host is not", path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        snprintf(err, 256, "%s: cannot stat: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, 256, "%s: not a regular file", path);
        return -1;
    }
    int32_t h[HEADER_INTS];
    if (st.st_size < HEADER_BYTES || fread(h, 4, HEADER_INTS, f) != HEADER_INTS) {
        snprintf(err, 256, "%s: truncated header: file has %lld bytes, the header alone is %d",
                 path, (long long)st.st_size, HEADER_BYTES);
        return -1;
    }
    int seed_format, eb = 4;
    if (h[H_MAGIC] == LLMC_MAGIC) {
        seed_format = 0;
        if (h[H_VERSION] != LLMC_VERSION && h[H_VERSION] != LLMC_VERSION_BF16) {
            snprintf(err, 256, "%s: llm.c model file version %d, expected %d (fp32) or %d (bf16)",
                     path, h[H_VERSION], LLMC_VERSION, LLMC_VERSION_BF16);
            return -1;
        }
        if (h[H_VERSION] == LLMC_VERSION_BF16) eb = 2;
    } else if (h[H_MAGIC] == MODELFILE_SEED_MAGIC && memcmp(h, "SEEDSTAT", 8) != 0) {
        seed_format = 1;
        if (h[H_VERSION] < 1 || h[H_VERSION] > MODELFILE_SEED_VERSION) {
            snprintf(err, 256, "%s: seedgpt model file version %d, this build reads 1 to %d", path,
                     h[H_VERSION], MODELFILE_SEED_VERSION);
            return -1;
        }
    } else if (memcmp(h, "SEEDSTAT", 8) == 0) {   /* model/state.h's STATE_MAGIC */
        snprintf(err, 256, "%s is a training state, not a model file: continue its run with "
                 "--resume on its folder, or take the newest weights from the folder's model.bin",
                 path);
        return -1;
    } else {
        snprintf(err, 256, "%s: bad magic %d (0x%08x), expected %d (llm.c) or 0x%08x (seedgpt): "
                 "not a model file", path, h[H_MAGIC], (uint32_t)h[H_MAGIC], LLMC_MAGIC,
                 (uint32_t)MODELFILE_SEED_MAGIC);
        return -1;
    }
    if (seed_format) {
        /* options this version does not know must be absent, so a later file is never misread */
        int first = h[H_VERSION] == 1 ? H_FIRST_RESERVED_V1 : H_FIRST_RESERVED_V2;
        for (int k = first; k < HEADER_INTS; k++) {
            if (h[k] != 0) {
                snprintf(err, 256, "%s: header slot %d is %d, must be 0 in seedgpt version %d "
                         "(%s)", path, k, h[k], h[H_VERSION],
                         k == H_POS_KIND ? "positional encoding kind"
                         : k == H_BLOCK_KIND ? "block kind"
                         : k == H_ROPE_BASE ? "rope base"
                         : k == H_ROPE_LAYOUT ? "rope layout" : "reserved");
                return -1;
            }
        }
    }

    GPTConfig c;
    c.max_seq_len = h[H_MAXT];
    c.vocab_size = h[H_V];
    c.num_layers = h[H_L];
    c.num_heads = h[H_NH];
    c.channels = h[H_C];
    c.padded_vocab_size = h[H_VP];
    c.num_kv_heads = seed_format ? h[H_NKV] : h[H_NH];
    c.pos_kind = seed_format ? h[H_POS_KIND] : POS_LEARNED;
    c.block_kind = seed_format ? h[H_BLOCK_KIND] : BLOCK_SEQUENTIAL;
    c.rope_base = seed_format ? h[H_ROPE_BASE] : 0;
    c.rope_layout = seed_format ? h[H_ROPE_LAYOUT] : 0;
    if (seed_format && h[H_VERSION] == 2 && !has_model_options(&c)) {
        /* one configuration, one header: version 2 exists for the model options */
        snprintf(err, 256, "%s: seedgpt model file version 2 without model options (slots 9..12 "
                 "zero); such a model is written as version 1", path);
        return -1;
    }
    const char* problem = gpt_config_problem(&c);
    if (problem != NULL) {
        snprintf(err, 256, "%s: bad header (maxT %d, V %d, L %d, NH %d, NKV %d, C %d, Vp %d): %s",
                 path, c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.num_kv_heads,
                 c.channels, c.padded_vocab_size, problem);
        return -1;
    }
    /* the field values are positive int32s; bound the byte count before computing it in size_t
     * so an absurd header cannot overflow the size check */
    double C = c.channels, L = c.num_layers;
    double QKV = ((double)c.num_heads + 2.0 * c.num_kv_heads) * (c.channels / c.num_heads);
    double approx = ((double)c.padded_vocab_size + c.max_seq_len) * C
                  + L * (QKV * C + QKV + C * C + 8.0 * C * C + 13.0 * C) + 2.0 * C;
    if (approx * 4.0 > 1e18 || QKV > 2147483647.0) {
        snprintf(err, 256, "%s: bad header: it describes %.3g parameters", path, approx);
        return -1;
    }
    long long expected = HEADER_BYTES + (long long)total_params(&c) * eb;
    if ((long long)st.st_size != expected) {
        snprintf(err, 256, "%s: %s: file has %lld bytes, the header promises %lld "
                 "(1024 + %d x %zu parameters)", path,
                 (long long)st.st_size < expected ? "truncated" : "oversized",
                 (long long)st.st_size, expected, eb, total_params(&c));
        return -1;
    }
    *cfg = c;
    *elem_bytes = eb;
    return 0;
}

/* Opens a model file for reading once it is known to be a regular file (util/fileio.h): a FIFO
 * given as --init is refused, never waited on. NULL with err. */
static FILE* open_model_file(const char* path, char err[256]) {
    const char* kind;
    FILE* f = fopen_regular(path, &kind);
    if (f != NULL) return f;
    if (kind != NULL) snprintf(err, 256, "%s: not a regular file (%s): expected a model file", path, kind);
    else snprintf(err, 256, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
}

int modelfile_read_config(const char* path, GPTConfig* cfg, char err[256]) {
    FILE* f = open_model_file(path, err);
    if (f == NULL) return -1;
    int eb;
    int rc = parse_header(f, path, cfg, &eb, err);
    fclose(f);
    return rc;
}

/* Names the first field in which the file's configuration differs from the model's. */
static int config_mismatch(const GPTConfig* file, const GPTConfig* model, const char* path,
                           char err[256]) {
    int fv, mv;
    const char* field = gpt_config_diff(file, model, &fv, &mv);
    if (field == NULL) return 0;
    snprintf(err, 256, "%s: configuration mismatch: %s is %d in the file but %d in the model", path,
             field, fv, mv);
    return -1;
}

/* The first non-finite float among n: its index, or n when all are finite. */
static size_t first_non_finite(const float* x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* Reads n weights of the open file f, stored as elem_bytes each (4: fp32; 2: bf16, widened
 * exactly), into dst. 0, or -1 on a short read. */
static int read_weights(FILE* f, float* dst, size_t n, int elem_bytes) {
    if (elem_bytes == 4) return fread(dst, sizeof(float), n, f) == n ? 0 : -1;
    enum { CHUNK = 8192 };
    uint16_t buf[CHUNK];
    for (size_t at = 0; at < n;) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        if (fread(buf, 2, k, f) != k) return -1;
        for (size_t i = 0; i < k; i++) dst[at + i] = sg_bf16_to_float(buf[i]);
        at += k;
    }
    return 0;
}

/* Reads every weight of the open file f (just past the header) once, in chunks, before any is
 * copied into a model: a file holding a NaN or an infinity is refused naming the tensor and the
 * element, and leaves the model untouched. 0, or -1 with err. */
static int check_weights_finite(FILE* f, const GPTConfig* c, int elem_bytes, const char* path,
                                char err[256]) {
    enum { CHUNK = 16384 };
    static float buf[CHUNK];
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt_param_sizes(c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        for (size_t at = 0; at < sizes[k];) {
            size_t n = sizes[k] - at < CHUNK ? sizes[k] - at : CHUNK;
            if (read_weights(f, buf, n, elem_bytes) != 0) {
                snprintf(err, 256, "%s: read error in tensor %s: %s", path, gpt_param_names[k],
                         ferror(f) ? strerror(errno) : "unexpected end of file");
                return -1;
            }
            size_t bad = first_non_finite(buf, n);
            if (bad < n) {
                snprintf(err, 256, "%s: tensor %s element %zu is %g: a model file never holds a "
                         "non-finite weight", path, gpt_param_names[k], at + bad, (double)buf[bad]);
                return -1;
            }
            at += n;
        }
    }
    return 0;
}

/* The common part of modelfile_load and modelfile_read: every check first (header, the
 * configuration `want`, every weight finite), then the weights into ptr[k] (fp32). The padded
 * vocab rows never produce loss and must stay zero (llm.c writes them as zeros): they are zeroed.
 * 0, or -1 with err; the buffers are untouched unless only an I/O error stops the reading. */
static int read_model_file(const char* path, const GPTConfig* want, float* const ptr[NUM_PARAMETER_TENSORS],
                           char err[256]) {
    FILE* f = open_model_file(path, err);
    if (f == NULL) return -1;
    GPTConfig fc;
    int eb;
    if (parse_header(f, path, &fc, &eb, err) != 0 || config_mismatch(&fc, want, path, err) != 0 ||
        check_weights_finite(f, &fc, eb, path, err) != 0) {
        fclose(f);
        return -1;
    }
    if (fseek(f, HEADER_BYTES, SEEK_SET) != 0) {
        snprintf(err, 256, "%s: cannot seek: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt_param_sizes(&fc, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (read_weights(f, ptr[k], sizes[k], eb) != 0) {
            /* the size was checked: only an I/O error gets here (the weights are then partial) */
            snprintf(err, 256, "%s: read error in tensor %s: %s", path, gpt_param_names[k],
                     ferror(f) ? strerror(errno) : "unexpected end of file");
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    memset(ptr[0] + (size_t)fc.vocab_size * fc.channels, 0,
           (size_t)(fc.padded_vocab_size - fc.vocab_size) * fc.channels * sizeof(float));
    return 0;
}

int modelfile_read(const char* path, const GPTConfig* cfg, float* const tensors[NUM_PARAMETER_TENSORS],
                   char err[256]) {
    return read_model_file(path, cfg, tensors, err);
}

int modelfile_load(GPT* m, const char* path, char err[256]) {
    if (m->masters_sharded) {
        snprintf(err, 256, "%s: a model with sharded fp32 masters (ZeRO-1 under bf16) cannot load "
                 "a whole model file", path);
        return -1;
    }
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &m->host_params, sizeof(ptr));
    if (read_model_file(path, &m->config, ptr, err) != 0) return -1;
    gpt_to_backend(m);
    return 0;
}

int modelfile_save(const GPT* m, const char* path, char err[256]) {
    if (m->masters_sharded) {
        snprintf(err, 256, "%s: the model holds one shard of the fp32 masters (ZeRO-1): the "
                 "others' are needed to save", path);
        return -1;
    }
    const float* tensors[NUM_PARAMETER_TENSORS];
    memcpy(tensors, &m->host_params, sizeof(tensors));
    return modelfile_write(&m->config, tensors, path, err);
}

int modelfile_write(const GPTConfig* c, const float* const tensors[NUM_PARAMETER_TENSORS],
                    const char* path, char err[256]) {
    return modelfile_write_from(c, tensors, NULL, path, err);
}

int modelfile_write_from(const GPTConfig* c, const float* const tensors[NUM_PARAMETER_TENSORS],
                         const ModelTensorSource* src, const char* path, char err[256]) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt_param_sizes(c, sizes);
    /* a NaN or an infinity in the weights never reaches a file, and the previous one stays
     * (src's tensors: checked as they come, the temporary file removed) */
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (tensors[k] == NULL) continue;
        size_t bad = first_non_finite(tensors[k], sizes[k]);
        if (bad < sizes[k]) {
            snprintf(err, 256, "%s: refusing to save: tensor %s element %zu is %g (the previous "
                     "file, if any, is untouched)", path, gpt_param_names[k], bad,
                     (double)tensors[k][bad]);
            return MODELFILE_NON_FINITE;
        }
    }
    char tmp[4096];
    if (tmp_path_of(tmp, sizeof(tmp), path) != 0) {
        snprintf(err, 256, "%s: path too long", path);
        return -1;
    }
    int32_t h[HEADER_INTS];
    memset(h, 0, sizeof(h));
    int plain = is_plain_gpt2(c);
    h[H_MAGIC] = plain ? LLMC_MAGIC : MODELFILE_SEED_MAGIC;
    h[H_VERSION] = plain ? LLMC_VERSION : has_model_options(c) ? 2 : 1;
    h[H_MAXT] = c->max_seq_len;
    h[H_V] = c->vocab_size;
    h[H_L] = c->num_layers;
    h[H_NH] = c->num_heads;
    h[H_C] = c->channels;
    h[H_VP] = c->padded_vocab_size;
    if (!plain) {
        h[H_NKV] = c->num_kv_heads;
        h[H_POS_KIND] = c->pos_kind;        /* these four are 0 in version 1 */
        h[H_BLOCK_KIND] = c->block_kind;
        h[H_ROPE_BASE] = c->rope_base;
        h[H_ROPE_LAYOUT] = c->rope_layout;
    }

    FILE* f = fopen(tmp, "wb");
    if (f == NULL) {
        snprintf(err, 256, "%s: cannot create %s.tmp: %s", path, path, strerror(errno));
        return -1;
    }
    const char* failed = NULL;
    int saved_errno;
    if (fwrite(h, 4, HEADER_INTS, f) != HEADER_INTS) failed = "write";
    int rc = -1;
    /* src is asked for each of its tensors whatever failed before: the ranks that serve them
     * go through all of them too */
    for (int k = 0; k < NUM_PARAMETER_TENSORS && (failed == NULL || src != NULL); k++) {
        const float* t = tensors[k];
        if (t == NULL) {
            char serr[256] = "";
            t = src->tensor(src->ctx, k, serr);
            if (t == NULL) {
                if (failed == NULL) snprintf(err, 256, "%s: %s", path, serr);
                if (failed == NULL) failed = "gather";
                continue;
            }
            size_t bad = first_non_finite(t, sizes[k]);
            if (failed == NULL && bad < sizes[k]) {
                snprintf(err, 256, "%s: refusing to save: tensor %s element %zu is %g (the "
                         "previous file, if any, is untouched)", path, gpt_param_names[k], bad,
                         (double)t[bad]);
                failed = "check";
                rc = MODELFILE_NON_FINITE;
            }
        }
        if (failed == NULL && fwrite(t, sizeof(float), sizes[k], f) != sizes[k]) failed = "write";
    }
    if (failed != NULL && (!strcmp(failed, "check") || !strcmp(failed, "gather"))) {
        fclose(f);
        unlink(tmp);
        return rc;   /* err says what */
    }
    failed = commit_tmp_file(f, tmp, path, failed, &saved_errno);
    if (failed != NULL) {
        snprintf(err, 256, "%s: %s of %s.tmp failed: %s (the previous file, if any, is untouched)",
                 path, failed, path, strerror(saved_errno));
        return -1;
    }
    return 0;
}
