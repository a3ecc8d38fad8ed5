/* data/hellaswag_prepare.c — `./train prepare --hellaswag IN.jsonl OUT.bin`: the HellaSwag
 * dataset's jsonl -> the eval file of data/hellaswag.h, tokenized by seedgpt's own tokenizers
 * (GPT-2's BPE by default), so that no Python is needed.
 *
 * Per line: an object with "ctx" (a string), "label" (0..3) and "endings" (four strings); other
 * fields are ignored, blank lines skipped. The context is encoded as it is, each ending as
 * " " + ending. Records are written as data/hellaswag.h says, the index counting the examples
 * from 0. Needs cJSON (the GPT-2 tokenizer's dependency); a build without it refuses.
 *
 * This is a main: it prints its own errors (one line, stderr) and returns the exit status.
 */
#include "data/hellaswag.h"
#include "data/tokenizer.h"
#include "util/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef SEEDGPT_NO_BPE
static int write_eval_file(const char* jsonl_path, const char* out_path, const char* tokenizer,
                           const char* bpe_dir) {
    fprintf(stderr, "seedgpt: prepare --hellaswag: this build has no JSON reader (cJSON, the GPT-2 "
            "tokenizer's dependency; Debian: libcjson-dev libpcre2-dev, then rebuild)\n");
    return 2;
}
#else
#include <cjson/cJSON.h>

/* A growing run of uint16 words: the records of the file. */
typedef struct {
    uint16_t* w;
    size_t n, cap;
} Words;

static int words_push(Words* v, uint16_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 1 << 16;
        uint16_t* w = realloc(v->w, cap * sizeof(uint16_t));
        if (w == NULL) return -1;
        v->w = w;
        v->cap = cap;
    }
    v->w[v->n++] = x;
    return 0;
}

/* Encodes text (n bytes) with a length word before the ids. 0, or a message (static). */
static const char* push_encoded(Words* v, const Tokenizer* tok, const char* text, size_t n) {
    uint16_t* ids = malloc((tokenizer_max_tokens(tok, n) + 1) * sizeof(uint16_t));
    if (ids == NULL) return "out of memory";
    size_t k = tokenizer_encode(tok, (const unsigned char*)text, n, ids);
    const char* bad = NULL;
    if (k == 0) bad = "a text encodes to no token (empty context or ending)";
    else if (k >= 65535) bad = "a text of 65535 tokens or more";
    for (size_t i = 0; bad == NULL && i < k; i++)
        if (ids[i] == HELLASWAG_START) bad = "token id 65535 cannot be stored (it is the start marker)";
    if (bad == NULL && words_push(v, (uint16_t)k) != 0) bad = "out of memory";
    for (size_t i = 0; bad == NULL && i < k; i++)
        if (words_push(v, ids[i]) != 0) bad = "out of memory";
    free(ids);
    return bad;
}

/* One example (a parsed line) appended as a record with index idx. 0, or a message (static). */
static const char* push_example(Words* v, const Tokenizer* tok, const cJSON* o, int idx,
                                int* rec_bytes) {
    const cJSON* ctx = cJSON_GetObjectItemCaseSensitive(o, "ctx");
    const cJSON* label = cJSON_GetObjectItemCaseSensitive(o, "label");
    const cJSON* endings = cJSON_GetObjectItemCaseSensitive(o, "endings");
    if (!cJSON_IsString(ctx)) return "no \"ctx\" string";
    double d = cJSON_IsNumber(label) ? label->valuedouble : -1;
    if (!(d == 0 || d == 1 || d == 2 || d == 3)) return "\"label\" is not an integer 0 to 3";
    if (!cJSON_IsArray(endings) || cJSON_GetArraySize(endings) != HELLASWAG_ENDINGS)
        return "\"endings\" is not an array of 4 strings";
    size_t start = v->n;
    if (words_push(v, HELLASWAG_START) || words_push(v, 0) || words_push(v, (uint16_t)idx) ||
        words_push(v, (uint16_t)d) || words_push(v, HELLASWAG_ENDINGS))
        return "out of memory";
    const char* bad = push_encoded(v, tok, ctx->valuestring, strlen(ctx->valuestring));
    for (int k = 0; bad == NULL && k < HELLASWAG_ENDINGS; k++) {
        const cJSON* e = cJSON_GetArrayItem(endings, k);
        if (!cJSON_IsString(e)) return "\"endings\" is not an array of 4 strings";
        size_t n = strlen(e->valuestring);
        char* text = malloc(n + 2);
        if (text == NULL) return "out of memory";
        text[0] = ' ';
        memcpy(text + 1, e->valuestring, n + 1);
        bad = push_encoded(v, tok, text, n + 1);
        free(text);
    }
    if (bad != NULL) return bad;
    size_t bytes = 2 * (v->n - start);
    if (bytes > 65535) return "the example is more than 65535 bytes as a record";
    v->w[start + 1] = (uint16_t)bytes;
    *rec_bytes = (int)bytes;
    return NULL;
}

/* out_path may be written: new, or an earlier eval file (magic 20240522), and not the input. */
static int check_out_path(const char* out_path, const char* jsonl_path) {
    struct stat so, si;
    if (stat(out_path, &so) != 0) return 0;
    if (!S_ISREG(so.st_mode)) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: %s is %s; expected a file path\n", out_path,
                file_kind(so.st_mode));
        return 2;
    }
    if (stat(jsonl_path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: the output %s is the input\n", out_path);
        return 2;
    }
    const char* kind;
    FILE* f = fopen_regular(out_path, &kind);
    unsigned char m[4] = {0, 0, 0, 0};
    int is_eval = f != NULL && fread(m, 1, 4, f) == 4 &&
                  (m[0] | m[1] << 8 | m[2] << 16 | (uint32_t)m[3] << 24) == HELLASWAG_MAGIC;
    if (f != NULL) fclose(f);
    if (!is_eval && so.st_size > 0) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: %s exists and is not a HellaSwag eval file; "
                "not overwriting it\n", out_path);
        return 2;
    }
    return 0;
}

static int write_eval_file(const char* jsonl_path, const char* out_path, const char* tokenizer,
                           const char* bpe_dir) {
    char err[256];
    int rc = check_out_path(out_path, jsonl_path);
    if (rc != 0) return rc;
    const char* kind;
    FILE* in = fopen_regular(jsonl_path, &kind);
    if (in == NULL) {
        if (kind != NULL) fprintf(stderr, "seedgpt: prepare --hellaswag: %s is %s\n", jsonl_path, kind);
        else fprintf(stderr, "seedgpt: prepare --hellaswag: cannot open %s: %s\n", jsonl_path,
                     strerror(errno));
        return 2;
    }
    Tokenizer tok;
    if (tokenizer_open(&tok, tokenizer, bpe_dir, err) != 0) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: %s\n", err);
        fclose(in);
        return 2;
    }
    Words v = {NULL, 0, 0};
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    int count = 0, longest = 0, lineno = 0;
    rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
        if (i == (size_t)len) continue;   /* a blank line */
        if (count == HELLASWAG_MAX_EXAMPLES) {
            fprintf(stderr, "seedgpt: prepare --hellaswag: %s:%d: more than %d examples (the index "
                    "is a uint16)\n", jsonl_path, lineno, HELLASWAG_MAX_EXAMPLES);
            rc = 2;
            break;
        }
        cJSON* o = cJSON_ParseWithLength(line, (size_t)len);
        int bytes = 0;
        const char* bad = o == NULL || !cJSON_IsObject(o) ? "not a JSON object"
                                                          : push_example(&v, &tok, o, count, &bytes);
        cJSON_Delete(o);
        if (bad != NULL) {
            fprintf(stderr, "seedgpt: prepare --hellaswag: %s:%d: %s\n", jsonl_path, lineno, bad);
            rc = 2;
            break;
        }
        if (bytes > longest) longest = bytes;
        count++;
    }
    int read_failed = ferror(in);
    free(line);
    fclose(in);
    tokenizer_free(&tok);
    if (rc == 0 && read_failed) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: reading %s failed\n", jsonl_path);
        rc = 2;
    }
    if (rc == 0 && count == 0) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: %s holds no example\n", jsonl_path);
        rc = 2;
    }
    if (rc == 0) {
        char tmp[4200];
        FILE* f = NULL;
        if (tmp_path_of(tmp, sizeof(tmp), out_path) != 0 || (f = fopen(tmp, "wb")) == NULL) {
            fprintf(stderr, "seedgpt: prepare --hellaswag: cannot create %s.tmp: %s\n", out_path,
                    strerror(errno));
            rc = 2;
        } else {
            int32_t header[HELLASWAG_HEADER_INTS];
            memset(header, 0, sizeof(header));
            header[0] = HELLASWAG_MAGIC;
            header[1] = HELLASWAG_VERSION;
            header[2] = count;
            header[3] = longest;
            /* little-endian hosts only, as the rest of seedgpt's files */
            const char* failed = NULL;
            if (fwrite(header, sizeof(header), 1, f) != 1 ||
                fwrite(v.w, sizeof(uint16_t), v.n, f) != v.n)
                failed = "write";
            int e;
            failed = commit_tmp_file(f, tmp, out_path, failed, &e);
            if (failed != NULL) {
                fprintf(stderr, "seedgpt: prepare --hellaswag: %s %s failed: %s\n", failed, out_path,
                        strerror(e));
                rc = 2;
            }
        }
    }
    if (rc == 0)
        printf("prepare --hellaswag: %d examples from %s -> %s (%zu bytes, tokenizer %s)\n", count,
               jsonl_path, out_path, (size_t)HELLASWAG_HEADER_BYTES + 2 * v.n, tokenizer);
    free(v.w);
    return rc;
}
#endif

int hellaswag_prepare_main(int argc, char** argv) {
    const char* tokenizer = "gpt2";
    const char* bpe_dir = NULL;
    const char* paths[2] = {NULL, NULL};
    int npaths = 0, saw_flag = 0;
    for (int i = 0; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            printf("usage: ./train prepare --hellaswag IN.jsonl OUT.bin [--tokenizer gpt2|byte] "
                   "[--bpe-dir DIR]\n"
                   "The HellaSwag jsonl (\"ctx\", \"label\", \"endings\" per line) -> llm.c's eval file\n"
                   "(docs/formats.md); the context encoded as it is, each ending as \" \" + ending.\n");
            return 0;
        }
        if (!strcmp(f, "--hellaswag")) { saw_flag = 1; continue; }
        if (!strcmp(f, "--tokenizer") || !strcmp(f, "--bpe-dir")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "seedgpt: prepare --hellaswag: %s needs a value\n", f);
                return 2;
            }
            if (!strcmp(f, "--tokenizer")) tokenizer = argv[++i];
            else bpe_dir = argv[++i];
            continue;
        }
        if (f[0] == '-' && f[1] == '-') {
            fprintf(stderr, "seedgpt: prepare --hellaswag: unknown flag %s (see ./train prepare "
                    "--hellaswag --help)\n", f);
            return 2;
        }
        if (npaths == 2) {
            fprintf(stderr, "seedgpt: prepare --hellaswag: unexpected argument '%s'; expected "
                    "IN.jsonl OUT.bin\n", f);
            return 2;
        }
        paths[npaths++] = f;
    }
    if (!saw_flag || npaths != 2) {
        fprintf(stderr, "seedgpt: prepare --hellaswag: expected IN.jsonl OUT.bin\n");
        return 2;
    }
    return write_eval_file(paths[0], paths[1], tokenizer, bpe_dir);
}
