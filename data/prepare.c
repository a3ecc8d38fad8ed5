/* data/prepare.c — `./train prepare`: text files -> train/val token shards (data/prepare.h).
 *
 * Owns: the subcommand's flags, the document/EOT stream, the train/val split rule, shard naming
 * and the all-or-nothing replacement of a dataset directory. It streams: text is read in 1 MB
 * chunks and tokens go straight into the shard being written, so memory does not grow with the
 * input. A chunk is encoded up to the tokenizer's last safe cut (tokenizer_safe_cut: anywhere for
 * byte; before a space or newline for gpt2) and the rest carried into the next chunk, so the ids
 * are those of the whole document encoded at once. Two passes over the inputs: the first counts
 * tokens (so the split point is known before any token is written: the file size for byte, an
 * encoding pass for gpt2), the second writes.
 *
 * This is a main: it prints its own errors (one line, stderr) and returns the exit status.
 */
#include "data/prepare.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "util/err.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifndef SEEDGPT_NO_BPE
#include <cjson/cJSON.h>
#endif

#define PREPARE_CHUNK_BYTES (1u << 20)
#define PREPARE_PROGRESS_BYTES (10ull << 20)
#define PREPARE_DEFAULT_SHARD_TOKENS 100000000ull

static const char* const split_names[2] = {"train", "val"};

/* One line into a 256-byte error buffer (long paths are cut, never overflow). */
static void usage(FILE* f) {
    fprintf(f,
        "usage: ./train prepare [--tokenizer byte|gpt2] [--bpe-dir DIR] [--val-frac F] [--shard-tokens N]\n"
        "                       [--jsonl FIELD] IN.txt [IN2.txt ...] OUTDIR\n"
        "       ./train prepare --hellaswag IN.jsonl OUT.bin   (the HellaSwag eval file; --hellaswag --help)\n"
        "\n"
        "Turns text files into llm.c token shards OUTDIR/train_NNNNNN.bin and OUTDIR/val_NNNNNN.bin.\n"
        "Each input file is one document; the token stream is EOT doc1 EOT doc2 ... EOT docN (n tokens).\n"
        "\n"
        "  --tokenizer byte   byte-level: ids 0..255 are bytes, 256 is EOT, vocab 257 (default).\n"
        "  --tokenizer gpt2   GPT-2's BPE: vocab 50257, EOT 50256 (the ids OpenAI's GPT-2 encoder gives).\n"
        "  --bpe-dir DIR      where gpt2's encoder.json and vocab.bpe are; default $SEEDGPT_BPE_DIR, else\n"
        "                     " TOKENIZER_GPT2_DEFAULT_DIR " (scripts/get_gpt2_bpe.sh puts them there).\n"
        "  --val-frac F       0 <= F < 1, default 0.1. The stream is split at s = round((1-F)*n):\n"
        "                     train = tokens [0, s); val = EOT + tokens [s, n), the EOT added only when\n"
        "                     the split falls inside a document. F = 0 writes no val shard.\n"
        "  --shard-tokens N   at most N tokens per shard file, default 100000000.\n"
        "  --jsonl FIELD      the inputs are JSON lines: each line's string FIELD is one document\n"
        "                     (e.g. --jsonl text; blank lines skipped), so the stream is EOT doc ...\n"
        "                     over every line of every file.\n"
        "  --help             this text.\n"
        "\n"
        "OUTDIR is created if missing. Shards are written to NAME.tmp and renamed into place only when\n"
        "all are complete, so a failed run leaves an existing dataset intact; shards of an older run\n"
        "numbered beyond the new ones are then removed.\n");
}

/* ---- the token sink: the stream -> train/val shards --------------------------------------- */

typedef struct {
    const char* outdir;
    size_t shard_tokens;   /* most tokens per file */
    size_t split_at;       /* stream index of the first val token */
    size_t consumed;       /* stream tokens fed so far */
    int eot;
    ShardWriter cur;       /* the shard being written, when cur_open */
    int cur_open, cur_split;
    ShardWriter* done;     /* (n_done) finished shards, still NAME.tmp, in order */
    int n_done, cap_done;
    int files[2];          /* files per split (train, val) */
    size_t tokens[2];      /* tokens per split, val's leading EOT included */
    char err[256];
} Sink;

static int sink_close_current(Sink* k) {
    if (!k->cur_open) return 0;
    k->cur_open = 0;
    if (shard_writer_finish(&k->cur, k->err) != 0) { shard_writer_abort(&k->cur); return 1; }
    if (k->n_done == k->cap_done) {
        int cap = k->cap_done ? 2 * k->cap_done : 8;
        ShardWriter* d = realloc(k->done, (size_t)cap * sizeof(ShardWriter));
        if (!d) {
            err_printf(k->err, "%s: out of memory", k->outdir);
            shard_writer_abort(&k->cur);
            return 1;
        }
        k->done = d;
        k->cap_done = cap;
    }
    k->done[k->n_done++] = k->cur;
    return 0;
}

/* Appends tokens to split sp, starting a new file whenever the current one is full. */
static int sink_emit(Sink* k, int sp, const uint16_t* t, size_t n) {
    while (n > 0) {
        if (k->cur_open && (k->cur_split != sp || k->cur.count == k->shard_tokens)) {
            if (sink_close_current(k) != 0) return 1;
        }
        if (!k->cur_open) {
            char path[PATH_MAX];
            int len = snprintf(path, sizeof(path), "%s/%s_%06d.bin", k->outdir, split_names[sp],
                               k->files[sp]);
            if (len < 0 || (size_t)len >= sizeof(path)) {
                err_printf(k->err, "%s: output path too long", k->outdir);
                return 1;
            }
            if (shard_writer_open(&k->cur, path, k->err) != 0) {
                shard_writer_abort(&k->cur);
                return 1;
            }
            k->cur_open = 1;
            k->cur_split = sp;
            k->files[sp]++;
        }
        size_t room = k->shard_tokens - k->cur.count;
        size_t m = n < room ? n : room;
        if (shard_writer_append(&k->cur, t, m, k->err) != 0) return 1;
        k->tokens[sp] += m;
        t += m;
        n -= m;
    }
    return 0;
}

/* Feeds the next n tokens of the stream: those before split_at go to train, the rest to val,
 * val starting with EOT (added unless the stream has one there). */
static int sink_feed(Sink* k, const uint16_t* t, size_t n) {
    if (k->consumed < k->split_at) {
        size_t m = k->split_at - k->consumed;
        if (m > n) m = n;
        if (sink_emit(k, 0, t, m) != 0) return 1;
        k->consumed += m;
        t += m;
        n -= m;
    }
    if (n == 0) return 0;
    if (k->consumed == k->split_at && t[0] != k->eot) {
        uint16_t eot = (uint16_t)k->eot;
        if (sink_emit(k, 1, &eot, 1) != 0) return 1;
    }
    if (sink_emit(k, 1, t, n) != 0) return 1;
    k->consumed += n;
    return 0;
}

static void sink_abort(Sink* k) {
    if (k->cur_open) shard_writer_abort(&k->cur);
    k->cur_open = 0;
    for (int i = 0; i < k->n_done; i++) shard_writer_abort(&k->done[i]);
    free(k->done);
    k->done = NULL;
    k->n_done = 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* mkdir -p */
static int make_dirs(const char* dir, char err[256]) {
    char path[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(path)) { err_printf(err, "prepare: bad output directory '%s'", dir); return 1; }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            err_printf(err, "%s: cannot create directory: %s", path, strerror(errno));
            return 1;
        }
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        err_printf(err, "%s: not a directory", dir);
        return 1;
    }
    return 0;
}

/* The size of one input, which must be a readable regular file. */
static int input_size(const char* path, size_t* bytes, char err[256]) {
    struct stat st;
    if (stat(path, &st) != 0) { err_printf(err, "%s: cannot read input: %s", path, strerror(errno)); return 1; }
    if (!S_ISREG(st.st_mode)) { err_printf(err, "%s: input is not a regular file", path); return 1; }
    if (access(path, R_OK) != 0) {
        err_printf(err, "%s: cannot read input: %s", path, strerror(errno));
        return 1;
    }
    *bytes = (size_t)st.st_size;
    return 0;
}

static void mb_line(char* buf, size_t cap, size_t bytes) {
    snprintf(buf, cap, "%.1f MB", (double)bytes / (1 << 20));
}

/* ---- reading a document in chunks the tokenizer may cut ----------------------------------- */

typedef struct {
    const Tokenizer* tok;
    unsigned char* text;     /* (cap) bytes: a chunk, and the tail of the one before */
    uint16_t* toks;          /* (tokenizer_max_tokens(cap)) */
    size_t cap;              /* PREPARE_CHUNK_BYTES, doubled while a chunk has no safe cut */
    const char* label;       /* for the progress line: "counting" or "read" */
    size_t bytes_done, total_bytes, next_progress, tokens_done;
} Reader;

static int reader_init(Reader* r, const Tokenizer* tok, const char* label, size_t total_bytes) {
    memset(r, 0, sizeof(*r));
    r->tok = tok;
    r->label = label;
    r->total_bytes = total_bytes;
    r->next_progress = PREPARE_PROGRESS_BYTES;
    r->cap = PREPARE_CHUNK_BYTES;
    r->text = malloc(r->cap);
    r->toks = malloc(tokenizer_max_tokens(tok, r->cap) * sizeof(uint16_t));
    return r->text && r->toks ? 0 : 1;
}

static void reader_free(Reader* r) {
    free(r->text);
    free(r->toks);
    r->text = NULL;
    r->toks = NULL;
}

static int reader_grow(Reader* r) {
    size_t cap = 2 * r->cap;
    unsigned char* t = realloc(r->text, cap);
    if (t) r->text = t;
    uint16_t* k = realloc(r->toks, tokenizer_max_tokens(r->tok, cap) * sizeof(uint16_t));
    if (k) r->toks = k;
    if (!t || !k) return 1;
    r->cap = cap;
    return 0;
}

typedef int (*TokenFn)(void* ctx, const uint16_t* t, size_t n);

/* Encodes the document at path, chunk by chunk, handing the ids to fn (which sets its own error
 * and returns non-zero to stop). Each chunk is encoded up to its last safe cut; the rest is
 * carried over. Returns 0, or non-zero with err set (unless fn failed). */
static int encode_document(Reader* r, const char* path, TokenFn fn, void* ctx, char err[256]) {
    FILE* f = fopen(path, "rb");
    if (!f) { err_printf(err, "%s: cannot open input: %s", path, strerror(errno)); return 1; }
    size_t have = 0;
    int eof = 0, rc = 0;
    while (!eof || have > 0) {
        if (!eof) {
            size_t want = r->cap - have, got = fread(r->text + have, 1, want, f);
            have += got;
            if (got < want) {
                if (ferror(f)) { err_printf(err, "%s: read error: %s", path, strerror(errno)); rc = 1; break; }
                eof = 1;
            }
        }
        size_t cut = eof ? have : tokenizer_safe_cut(r->tok, r->text, have);
        if (cut == 0) {   /* no place to cut yet (a very long word): read on in a bigger buffer */
            if (eof) break;   /* nothing left */
            if (reader_grow(r) != 0) { err_printf(err, "%s: out of memory", path); rc = 1; break; }
            continue;
        }
        size_t m = tokenizer_encode(r->tok, r->text, cut, r->toks);
        if (fn(ctx, r->toks, m) != 0) { rc = 1; break; }
        memmove(r->text, r->text + cut, have - cut);
        have -= cut;
        r->bytes_done += cut;
        r->tokens_done += m;
        if (r->bytes_done >= r->next_progress) {
            char a[32], b[32];
            mb_line(a, sizeof(a), r->bytes_done);
            mb_line(b, sizeof(b), r->total_bytes);
            fprintf(stderr, "prepare: %s %s of %s (%.0f%%), %zu tokens\n", r->label, a, b,
                    100.0 * (double)r->bytes_done / (double)r->total_bytes, r->tokens_done);
            while (r->next_progress <= r->bytes_done) r->next_progress += PREPARE_PROGRESS_BYTES;
        }
    }
    fclose(f);
    return rc;
}

/* --jsonl FIELD: each non-blank line of path is a JSON object whose string FIELD is one document;
 * fn gets EOT and then the document's ids, for every line in order (*docs counts them). Each
 * document is encoded whole. Returns 0, or non-zero with err set (unless fn failed). */
static int encode_jsonl(Reader* r, const char* path, const char* field, TokenFn fn, void* ctx,
                        size_t* docs, char err[256]) {
#ifdef SEEDGPT_NO_BPE
    err_printf(err, "%s: --jsonl needs cJSON, which this build was made without", path);
    return 1;
#else
    FILE* f = fopen(path, "rb");
    if (!f) { err_printf(err, "%s: cannot open input: %s", path, strerror(errno)); return 1; }
    char* line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    uint16_t* ids = NULL;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        r->bytes_done += (size_t)len;
        size_t i = 0;
        while (i < (size_t)len && strchr(" \t\r\n", line[i]) != NULL) i++;
        if (i == (size_t)len) continue;
        cJSON* o = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON* v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL;
        if (!cJSON_IsString(v)) {
            err_printf(err, "%s:%zu: %s", path, lineno, o == NULL || !cJSON_IsObject(o)
                       ? "not a JSON object" : "no string field named by --jsonl");
            cJSON_Delete(o);
            rc = 1;
            break;
        }
        size_t n = strlen(v->valuestring);
        uint16_t* grown = realloc(ids, (tokenizer_max_tokens(r->tok, n) + 1) * sizeof(uint16_t));
        if (grown == NULL) { cJSON_Delete(o); err_printf(err, "%s: out of memory", path); rc = 1; break; }
        ids = grown;
        ids[0] = (uint16_t)r->tok->eot;   /* the document's EOT, then its ids */
        size_t m = tokenizer_encode(r->tok, (const unsigned char*)v->valuestring, n, ids + 1);
        cJSON_Delete(o);
        if (fn(ctx, ids, m + 1) != 0) { rc = 1; break; }
        r->tokens_done += m + 1;
        (*docs)++;
    }
    if (rc == 0 && ferror(f)) { err_printf(err, "%s: read error: %s", path, strerror(errno)); rc = 1; }
    free(ids);
    free(line);
    fclose(f);
    return rc;
#endif
}

static int count_tokens(void* ctx, const uint16_t* t, size_t n) {
    (void)t;
    *(size_t*)ctx += n;
    return 0;
}

static int feed_sink(void* ctx, const uint16_t* t, size_t n) {
    return sink_feed((Sink*)ctx, t, n);
}

static int parse_val_frac(const char* s, double* out) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0.0 || v >= 1.0) return 1;
    *out = v;
    return 0;
}

static int parse_count(const char* s, size_t* out) {
    if (*s < '0' || *s > '9') return 1;
    char* end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v < 1 || v > SHARD_MAX_TOKENS) return 1;
    *out = (size_t)v;
    return 0;
}

/* Is `name` SPLIT_NNNNNN.bin with NNNNNN >= keep? (a shard of an older, bigger run) */
static int is_stale_shard(const char* name, const char* split, int keep) {
    size_t ls = strlen(split);
    if (strncmp(name, split, ls) != 0 || name[ls] != '_') return 0;
    const char* d = name + ls + 1;
    for (int i = 0; i < 6; i++) if (d[i] < '0' || d[i] > '9') return 0;
    if (strcmp(d + 6, ".bin") != 0) return 0;
    return atoi(d) >= keep;
}

static int remove_stale_shards(const char* outdir, const int files[2]) {
    DIR* dir = opendir(outdir);
    if (!dir) return 0;
    int removed = 0;
    struct dirent* e;
    char path[PATH_MAX];
    while ((e = readdir(dir)) != NULL) {
        for (int sp = 0; sp < 2; sp++) {
            if (!is_stale_shard(e->d_name, split_names[sp], files[sp])) continue;
            int len = snprintf(path, sizeof(path), "%s/%s", outdir, e->d_name);
            if (len > 0 && (size_t)len < sizeof(path) && unlink(path) == 0) removed++;
        }
    }
    closedir(dir);
    return removed;
}

/* ---- the subcommand ------------------------------------------------------------------------ */

int prepare_main(int argc, char** argv) {
    const char* tok_name = "byte";
    const char* bpe_dir = NULL;
    const char* jsonl = NULL;   /* --jsonl FIELD: one document per line */
    size_t jsonl_docs = 0;
    double val_frac = 0.1;
    size_t shard_tokens = PREPARE_DEFAULT_SHARD_TOKENS;
    const char** pos = calloc((size_t)argc + 1, sizeof(char*));
    int npos = 0;
    if (!pos) { fprintf(stderr, "prepare: out of memory\n"); return 2; }

    int flags_done = 0;
    for (int i = 0; i < argc; i++) {
        const char* a = argv[i];
        if (flags_done || a[0] != '-' || a[1] == '\0') { pos[npos++] = a; continue; }
        if (strcmp(a, "--") == 0) { flags_done = 1; continue; }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); free(pos); return 0; }
        int takes_value = strcmp(a, "--tokenizer") == 0 || strcmp(a, "--val-frac") == 0 ||
                          strcmp(a, "--shard-tokens") == 0 || strcmp(a, "--bpe-dir") == 0 ||
                          strcmp(a, "--jsonl") == 0;
        if (!takes_value) {
            fprintf(stderr, "prepare: unknown flag %s (see ./train prepare --help)\n", a);
            free(pos);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "prepare: %s needs a value (see ./train prepare --help)\n", a);
            free(pos);
            return 2;
        }
        const char* v = argv[++i];
        if (strcmp(a, "--tokenizer") == 0) {
            tok_name = v;
        } else if (strcmp(a, "--bpe-dir") == 0) {
            bpe_dir = v;
        } else if (strcmp(a, "--jsonl") == 0) {
            jsonl = v;
        } else if (strcmp(a, "--val-frac") == 0) {
            if (parse_val_frac(v, &val_frac) != 0) {
                fprintf(stderr, "prepare: --val-frac %s: expected a number in [0, 1)\n", v);
                free(pos);
                return 2;
            }
        } else {
            if (parse_count(v, &shard_tokens) != 0) {
                fprintf(stderr, "prepare: --shard-tokens %s: expected an integer in [1, %u]\n", v,
                        SHARD_MAX_TOKENS);
                free(pos);
                return 2;
            }
        }
    }

    char err[256];
    Tokenizer tok;
    if (tokenizer_open(&tok, tok_name, bpe_dir, err) != 0) {
        fprintf(stderr, "prepare: %s\n", err);
        free(pos);
        return 2;
    }
    if (npos < 2) {
        fprintf(stderr, "prepare: need at least one input file and an output directory "
                "(see ./train prepare --help)\n");
        tokenizer_free(&tok); free(pos);
        return 2;
    }
    const char* outdir = pos[npos - 1];
    int ndocs = npos - 1;

    /* pass 1: count, so the split point is known before any token is written. The byte
     * tokenizer's count is the file size; another encodes the file to count. */
    size_t n = 0, total_bytes = 0;
    for (int d = 0; d < ndocs; d++) {
        size_t b;
        if (input_size(pos[d], &b, err) != 0) {
            fprintf(stderr, "prepare: %s\n", err);
            tokenizer_free(&tok); free(pos);
            return 2;
        }
        n += 1 + b;   /* EOT + the document (byte: one token per byte) */
        total_bytes += b;
    }
    if (tok.kind != TOKENIZER_BYTE || jsonl != NULL) {
        Reader r;
        n = jsonl != NULL ? 0 : (size_t)ndocs;    /* the EOTs (--jsonl: counted with each line) */
        int bad = reader_init(&r, &tok, "counting", total_bytes);
        if (bad) err_printf(err, "out of memory");
        for (int d = 0; d < ndocs && !bad; d++)
            bad = jsonl != NULL ? encode_jsonl(&r, pos[d], jsonl, count_tokens, &n, &jsonl_docs, err)
                                : encode_document(&r, pos[d], count_tokens, &n, err);
        reader_free(&r);
        if (bad) {
            fprintf(stderr, "prepare: %s\n", err);
            tokenizer_free(&tok); free(pos);
            return 2;
        }
    }
    if (total_bytes == 0) {
        fprintf(stderr, "prepare: empty input: %d file(s), 0 bytes of text\n", ndocs);
        tokenizer_free(&tok); free(pos);
        return 2;
    }
    size_t split_at = (size_t)llround((1.0 - val_frac) * (double)n);
    if (split_at > n) split_at = n;
    if (split_at == 0) {
        fprintf(stderr, "prepare: --val-frac %g leaves no train tokens (%zu tokens in all)\n",
                val_frac, n);
        tokenizer_free(&tok); free(pos);
        return 2;
    }
    if (val_frac > 0 && split_at == n) {
        fprintf(stderr, "prepare: --val-frac %g leaves no val tokens: input too small (%zu tokens "
                "in all); use --val-frac 0 for no val split\n", val_frac, n);
        tokenizer_free(&tok); free(pos);
        return 2;
    }
    if (make_dirs(outdir, err) != 0) {
        fprintf(stderr, "prepare: %s\n", err);
        tokenizer_free(&tok); free(pos);
        return 2;
    }

    /* pass 2: stream the documents into shards (all still NAME.tmp) */
    Sink k;
    memset(&k, 0, sizeof(k));
    k.outdir = outdir;
    k.shard_tokens = shard_tokens;
    k.split_at = split_at;
    k.eot = tok.eot;
    Reader r;
    int failed = reader_init(&r, &tok, "read", total_bytes);
    if (failed) err_printf(k.err, "out of memory");
    size_t docs_read = 0;
    for (int d = 0; d < ndocs && !failed && jsonl != NULL; d++)
        failed = encode_jsonl(&r, pos[d], jsonl, feed_sink, &k, &docs_read, k.err) != 0;
    for (int d = 0; d < ndocs && !failed && jsonl == NULL; d++) {
        uint16_t eot = (uint16_t)tok.eot;
        if (sink_feed(&k, &eot, 1) != 0) { failed = 1; break; }
        r.tokens_done++;
        if (encode_document(&r, pos[d], feed_sink, &k, k.err) != 0) failed = 1;
    }
    reader_free(&r);
    if (!failed && k.consumed != n) {
        err_printf(k.err, "input changed while reading: counted %zu tokens, read %zu",
                 n, k.consumed);
        failed = 1;
    }
    if (!failed && sink_close_current(&k) != 0) failed = 1;

    /* commit: every shard is complete; rename them all into place */
    for (int i = 0; i < k.n_done && !failed; i++) {
        if (shard_writer_commit(&k.done[i], k.err) != 0) {
            failed = 1;
            for (int j = i + 1; j < k.n_done; j++) shard_writer_abort(&k.done[j]);
            k.n_done = 0;
        }
    }
    if (failed) {
        sink_abort(&k);
        fprintf(stderr, "prepare: %s\n", k.err);
        tokenizer_free(&tok); free(pos);
        return 2;
    }
    free(k.done);
    int removed = remove_stale_shards(outdir, k.files);

    printf("prepare: %zu document(s), %zu bytes -> %zu train tokens in %d file(s), %zu val tokens "
           "in %d file(s) in %s (%s tokenizer, vocab %d, val-frac %g)",
           jsonl != NULL ? jsonl_docs : (size_t)ndocs, total_bytes,
           k.tokens[0], k.files[0], k.tokens[1], k.files[1], outdir, tokenizer_name(&tok),
           tok.vocab_size, val_frac);
    if (removed) printf("; removed %d stale shard(s) of an older run", removed);
    printf("\n");
    fflush(stdout);
    tokenizer_free(&tok);
    free(pos);
    return 0;
}
