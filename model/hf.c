/* model/hf.c — GPT-2 weights between llm.c's model file and a Hugging Face folder (model/hf.h):
 * the name and layout table, `./train export` and `./train import`.
 *
 * Both directions walk one table (gpt2_tensors): each Hugging Face tensor with its shape, the
 * llm.c tensor and layer it comes from, and whether it is a Conv1D weight, stored (in, out) where
 * llm.c stores (out, in). Everything is checked before anything is written.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "model/hf.h"
#include "model/modelfile.h"
#include "model/safetensors.h"
#include "util/bf16.h"
#include "util/fileio.h"
#include "util/err.h"

enum { EXIT_BAD = 2 };                 /* bad input: one line said (cli.h's EXIT_BAD_INPUT) */
#define GPT2_BPE_VOCAB 50257           /* GPT-2's tokenizer: ids 0..50256, 50256 end of text */
#define PREFIX "transformer."
#define PREFIX_LEN 12

/* One line into err[256] (vsnprintf: a long path is cut, never overrun). */
/* ---- the table ----------------------------------------------------------------------------- */

typedef struct {
    char name[64];       /* GPT2LMHeadModel's, with "transformer." */
    int param;           /* llm.c tensor (ParameterTensors order) */
    int ndim;
    int64_t shape[2];    /* Hugging Face's shape */
    int transpose;       /* a Conv1D weight: (in, out) here, (out, in) in llm.c */
    size_t offset;       /* first element in the flat llm.c parameter block */
} HfTensor;

/* the per-layer tensors: the key inside transformer.h.N., the llm.c tensor, Conv1D or not */
static const struct { const char* key; int param; int conv; } BLOCK[12] = {
    {"ln_1.weight", 2, 0},        {"ln_1.bias", 3, 0},
    {"attn.c_attn.weight", 4, 1}, {"attn.c_attn.bias", 5, 0},
    {"attn.c_proj.weight", 6, 1}, {"attn.c_proj.bias", 7, 0},
    {"ln_2.weight", 8, 0},        {"ln_2.bias", 9, 0},
    {"mlp.c_fc.weight", 10, 1},   {"mlp.c_fc.bias", 11, 0},
    {"mlp.c_proj.weight", 12, 1}, {"mlp.c_proj.bias", 13, 0},
};

static int num_tensors(const GPTConfig* c) { return 4 + 12 * c->num_layers; }

/* The Hugging Face tensors of a plain GPT-2 configuration, in the order export writes them
 * (the model's order: embeddings, blocks, final LayerNorm). out has num_tensors(c) slots. */
static void gpt2_tensors(const GPTConfig* c, HfTensor* out) {
    size_t sizes[NUM_PARAMETER_TENSORS], off[NUM_PARAMETER_TENSORS];
    gpt_param_sizes(c, sizes);
    size_t at = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) { off[k] = at; at += sizes[k]; }
    int64_t C = c->channels, L = c->num_layers;
    int n = 0;
    out[n++] = (HfTensor){PREFIX "wte.weight", 0, 2, {c->vocab_size, C}, 0, off[0]};
    out[n++] = (HfTensor){PREFIX "wpe.weight", 1, 2, {c->max_seq_len, C}, 0, off[1]};
    for (int l = 0; l < L; l++) {
        for (int b = 0; b < 12; b++) {
            HfTensor* t = &out[n++];
            int k = BLOCK[b].param;
            int64_t per = (int64_t)(sizes[k] / (size_t)L);
            snprintf(t->name, sizeof(t->name), PREFIX "h.%d.%s", l, BLOCK[b].key);
            t->param = k;
            t->offset = off[k] + (size_t)l * (size_t)per;
            t->transpose = BLOCK[b].conv;
            if (BLOCK[b].conv) {
                int64_t in = k == 12 ? 4 * C : C;   /* fcprojw reads the MLP's 4C */
                t->ndim = 2;
                t->shape[0] = in;
                t->shape[1] = per / in;
            } else {
                t->ndim = 1;
                t->shape[0] = per;
            }
        }
    }
    out[n++] = (HfTensor){PREFIX "ln_f.weight", 14, 1, {C, 0}, 0, off[14]};
    out[n++] = (HfTensor){PREFIX "ln_f.bias", 15, 1, {C, 0}, 0, off[15]};
}

static size_t numel_of(const HfTensor* t) {
    return t->ndim == 1 ? (size_t)t->shape[0] : (size_t)t->shape[0] * (size_t)t->shape[1];
}

/* What GPT-2's architecture cannot express in c, or NULL. */
static const char* gpt2_unexpressible(const GPTConfig* c, char why[200]) {
    if (c->num_kv_heads != c->num_heads) {
        snprintf(why, 200, "grouped-query heads (%d key/value heads for %d query heads): GPT-2's "
                 "attention has one key/value head per query head", c->num_kv_heads, c->num_heads);
        return why;
    }
    if (c->pos_kind == POS_ROPE) {
        snprintf(why, 200, "RoPE positions: GPT-2 learns absolute positions (wpe)");
        return why;
    }
    if (c->block_kind == BLOCK_PARALLEL) {
        snprintf(why, 200, "the parallel block: GPT-2's block is sequential (attention, then MLP)");
        return why;
    }
    return NULL;
}

/* ---- small file helpers -------------------------------------------------------------------- */

/* An output path's refusal: where it exists it must be a regular file, and none of the inputs
 * (compared by device and inode). 0, or EXIT_BAD with the line said. */
static int check_output(const char* cmd, const char* path, const char* const* inputs, int n) {
    struct stat st, si;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "seedgpt: %s: %s is %s; expected a file path\n", cmd, path, file_kind(st.st_mode));
        return EXIT_BAD;
    }
    for (int i = 0; i < n; i++) {
        if (inputs[i] != NULL && stat(inputs[i], &si) == 0 && si.st_dev == st.st_dev &&
            si.st_ino == st.st_ino) {
            fprintf(stderr, "seedgpt: %s: %s is the input %s: it would be written over; choose "
                    "another output\n", cmd, path, inputs[i]);
            return EXIT_BAD;
        }
    }
    return 0;
}

/* Reads a whole small regular file (at most cap bytes) into a malloc'd buffer. 0, -1 (err). */
static int read_small(const char* path, size_t cap, char** out, size_t* n, char err[256]) {
    const char* kind;
    FILE* f = fopen_regular(path, &kind);
    if (f == NULL) {
        if (kind) err_printf(err, "%s: not a regular file (%s)", path, kind);
        else err_printf(err, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char* buf = malloc(cap + 1);
    size_t k = buf ? fread(buf, 1, cap + 1, f) : 0;
    int bad = buf == NULL || ferror(f) || k > cap;
    fclose(f);
    if (bad) {
        err_printf(err, "%s: %s", path, buf == NULL ? "out of memory" : k > cap ? "too large" : "read error");
        free(buf);
        return -1;
    }
    buf[k] = '\0';
    *out = buf;
    *n = k;
    return 0;
}

/* Writes n bytes to path through path.tmp (util/fileio.h). 0, or -1 with err. */
static int write_file(const char* path, const void* data, size_t n, char err[256]) {
    char tmp[4200];
    if (tmp_path_of(tmp, sizeof(tmp), path) != 0) { err_printf(err, "%s: path too long", path); return -1; }
    FILE* f = fopen(tmp, "wb");
    if (f == NULL) { err_printf(err, "%s: cannot create %s: %s", path, tmp, strerror(errno)); return -1; }
    int saved;
    const char* failed = commit_tmp_file(f, tmp, path, fwrite(data, 1, n, f) != n ? "write" : NULL, &saved);
    if (failed != NULL) {
        err_printf(err, "%s: %s of %s failed: %s", path, failed, tmp, strerror(saved));
        return -1;
    }
    return 0;
}

/* ---- export -------------------------------------------------------------------------------- */

static void export_usage(FILE* f) {
    fprintf(f,
"usage: ./train export [--format safetensors] [--dtype fp32|bf16] [--bpe-dir DIR] MODEL.bin OUT_DIR\n"
"Writes a Hugging Face GPT-2 folder: OUT_DIR/model.safetensors (GPT2LMHeadModel's names, Conv1D\n"
"weights (in, out), the V real vocab rows, lm_head tied to wte) and config.json; for a model of\n"
"GPT-2's vocabulary (50257) also vocab.json, merges.txt (copied from the BPE folder: --bpe-dir, else\n"
"$SEEDGPT_BPE_DIR, else data/gpt2) and tokenizer_config.json. --dtype bf16 rounds each weight to\n"
"nearest even. OUT_DIR is created when absent; its files are replaced through NAME.tmp.\n");
}

/* The llm.c tensor of t, laid out as Hugging Face's, elements [at, at + n) of it, as fp32. */
static void gather(const HfTensor* t, const float* params, size_t at, size_t n, float* out) {
    const float* src = params + t->offset;
    if (!t->transpose) { memcpy(out, src + at, n * sizeof(float)); return; }
    size_t in = (size_t)t->shape[0], o = (size_t)t->shape[1];
    for (size_t j = 0; j < n; j++) {   /* element (i, c) of (in, out) is llm.c's (c, i) */
        size_t e = at + j;
        out[j] = src[(e % o) * in + e / o];
    }
}

static int write_safetensors(const char* path, const GPTConfig* c, const float* params, int bf16,
                             char err[256]) {
    int n = num_tensors(c);
    HfTensor* t = calloc((size_t)n, sizeof(HfTensor));
    StEntry* e = calloc((size_t)n, sizeof(StEntry));
    if (t == NULL || e == NULL) { free(t); free(e); err_printf(err, "%s: out of memory", path); return -1; }
    gpt2_tensors(c, t);
    for (int i = 0; i < n; i++) {
        e[i].name = t[i].name;
        e[i].dtype = bf16 ? ST_BF16 : ST_F32;
        e[i].ndim = t[i].ndim;
        e[i].shape[0] = t[i].shape[0];
        e[i].shape[1] = t[i].shape[1];
    }
    size_t hlen;
    unsigned char* header = st_header(e, n, "{\"format\":\"pt\"}", &hlen);
    free(e);
    char tmp[4200];
    FILE* f = NULL;
    if (header == NULL || tmp_path_of(tmp, sizeof(tmp), path) != 0 || (f = fopen(tmp, "wb")) == NULL) {
        err_printf(err, "%s: %s", path,
                   header == NULL ? "out of memory" : f == NULL ? strerror(errno) : "path too long");
        free(header); free(t);
        return -1;
    }
    const char* failed = fwrite(header, 1, hlen, f) != hlen ? "write" : NULL;
    free(header);
    enum { CHUNK = 65536 };
    float* chunk = malloc(CHUNK * sizeof(float));
    uint16_t* half = malloc(CHUNK * sizeof(uint16_t));
    if (chunk == NULL || half == NULL) failed = "allocation";
    for (int i = 0; i < n && failed == NULL; i++) {
        size_t total = numel_of(&t[i]);
        for (size_t at = 0; at < total && failed == NULL; at += CHUNK) {
            size_t k = total - at < CHUNK ? total - at : CHUNK;
            gather(&t[i], params, at, k, chunk);
            if (bf16) {
                for (size_t j = 0; j < k; j++) half[j] = sg_bf16_from_float(chunk[j]);
                if (fwrite(half, 2, k, f) != k) failed = "write";
            } else if (fwrite(chunk, 4, k, f) != k) {
                failed = "write";
            }
        }
    }
    free(chunk); free(half); free(t);
    int saved;
    failed = commit_tmp_file(f, tmp, path, failed, &saved);
    if (failed != NULL) {
        err_printf(err, "%s: %s of %s failed: %s", path, failed, tmp, strerror(saved));
        return -1;
    }
    return 0;
}

static int write_config(const char* path, const GPTConfig* c, int bf16, char err[256]) {
    char text[2048];
    int eot = c->vocab_size - 1;   /* end of text: 50256 in GPT-2's vocabulary, 256 in the byte one */
    snprintf(text, sizeof(text),
             "{\n"
             "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
             "  \"model_type\": \"gpt2\",\n"
             "  \"vocab_size\": %d,\n"
             "  \"n_positions\": %d,\n"
             "  \"n_ctx\": %d,\n"
             "  \"n_embd\": %d,\n"
             "  \"n_layer\": %d,\n"
             "  \"n_head\": %d,\n"
             "  \"n_inner\": null,\n"
             "  \"activation_function\": \"gelu_new\",\n"
             "  \"layer_norm_epsilon\": 1e-05,\n"
             "  \"resid_pdrop\": 0.0,\n"
             "  \"embd_pdrop\": 0.0,\n"
             "  \"attn_pdrop\": 0.0,\n"
             "  \"initializer_range\": 0.02,\n"
             "  \"scale_attn_weights\": true,\n"
             "  \"scale_attn_by_inverse_layer_idx\": false,\n"
             "  \"reorder_and_upcast_attn\": false,\n"
             "  \"tie_word_embeddings\": true,\n"
             "  \"bos_token_id\": %d,\n"
             "  \"eos_token_id\": %d,\n"
             "  \"torch_dtype\": \"%s\"\n"
             "}\n",
             c->vocab_size, c->max_seq_len, c->max_seq_len, c->channels, c->num_layers,
             c->num_heads, eot, eot, bf16 ? "bfloat16" : "float32");
    return write_file(path, text, strlen(text), err);
}

/* One of a tokenizer's two files in dir: name, else Hugging Face's other_name (data/bpe.c finds
 * them the same way). 0 and path, or -1. */
static int find_bpe_file(char path[4200], const char* dir, const char* name, const char* other_name) {
    struct stat st;
    snprintf(path, 4200, "%s/%s", dir, name);
    if (stat(path, &st) == 0) return 0;
    snprintf(path, 4200, "%s/%s", dir, other_name);
    return stat(path, &st) == 0 ? 0 : -1;
}

int hf_export_main(int argc, char** argv, const char* default_bpe_dir) {
    const char* pos[2];
    int npos = 0, bf16 = 0;
    const char* bpe_dir = NULL;
    for (int i = 0; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { export_usage(stdout); return 0; }
        if (a[0] == '-' && a[1] != '\0') {
            if (strcmp(a, "--format") && strcmp(a, "--dtype") && strcmp(a, "--bpe-dir")) {
                fprintf(stderr, "seedgpt: export: unknown flag %s (see ./train export --help)\n", a);
                return EXIT_BAD;
            }
            if (i + 1 >= argc) {
                fprintf(stderr, "seedgpt: export: %s needs a value (see ./train export --help)\n", a);
                return EXIT_BAD;
            }
            const char* v = argv[++i];
            if (!strcmp(a, "--format") && strcmp(v, "safetensors")) {
                fprintf(stderr, "seedgpt: export: --format %s: expected safetensors\n", v);
                return EXIT_BAD;
            }
            if (!strcmp(a, "--dtype")) {
                if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
                    fprintf(stderr, "seedgpt: export: --dtype %s: expected fp32 or bf16\n", v);
                    return EXIT_BAD;
                }
                bf16 = !strcmp(v, "bf16");
            }
            if (!strcmp(a, "--bpe-dir")) bpe_dir = v;
            continue;
        }
        if (npos == 2) {
            fprintf(stderr, "seedgpt: export: one model file and one output folder, got a third "
                    "word %s (see ./train export --help)\n", a);
            return EXIT_BAD;
        }
        pos[npos++] = a;
    }
    if (npos != 2) {
        fprintf(stderr, "seedgpt: export: expected MODEL.bin OUT_DIR (see ./train export --help)\n");
        return EXIT_BAD;
    }
    const char *model = pos[0], *out = pos[1];
    char err[256], why[200];
    GPTConfig c;
    if (modelfile_read_config(model, &c, err) != 0) {
        fprintf(stderr, "seedgpt: export: %s\n", err);
        return EXIT_BAD;
    }
    if (gpt2_unexpressible(&c, why) != NULL) {
        fprintf(stderr, "seedgpt: export: %s: not exported: the model uses %s\n", model, why);
        return EXIT_BAD;
    }
    /* the tokenizer's files, found before anything is written */
    int with_tok = c.vocab_size == GPT2_BPE_VOCAB;
    char enc[4200] = "", merges[4200] = "";
    if (with_tok) {
        if (bpe_dir == NULL) {
            const char* env = getenv("SEEDGPT_BPE_DIR");
            bpe_dir = env && *env ? env : default_bpe_dir;
        }
        if (find_bpe_file(enc, bpe_dir, "encoder.json", "vocab.json") != 0 ||
            find_bpe_file(merges, bpe_dir, "vocab.bpe", "merges.txt") != 0) {
            fprintf(stderr, "seedgpt: export: the model has GPT-2's vocabulary (%d) but %s holds no "
                    "encoder.json/vocab.json and vocab.bpe/merges.txt: give --bpe-dir DIR "
                    "(scripts/get_gpt2_bpe.sh fetches them)\n", GPT2_BPE_VOCAB, bpe_dir);
            return EXIT_BAD;
        }
    }
    /* the folder and its files: none of them an input, each a regular file where it exists */
    struct stat st;
    int have_dir = stat(out, &st) == 0;
    if (have_dir && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "seedgpt: export: %s is %s; expected a folder (it is created when "
                "absent)\n", out, file_kind(st.st_mode));
        return EXIT_BAD;
    }
    static const char* const names[5] = {"model.safetensors", "config.json", "vocab.json",
                                         "merges.txt", "tokenizer_config.json"};
    char paths[5][4200];
    const char* inputs[3] = {model, with_tok ? enc : NULL, with_tok ? merges : NULL};
    int nout = with_tok ? 5 : 2;
    for (int i = 0; i < nout; i++) {
        if (snprintf(paths[i], sizeof(paths[i]), "%s/%s", out, names[i]) >= (int)sizeof(paths[i]) - 8) {
            fprintf(stderr, "seedgpt: export: %s: path too long\n", out);
            return EXIT_BAD;
        }
        int rc = check_output("export", paths[i], inputs, 3);
        if (rc != 0) return rc;
    }

    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    gpt_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += sizes[k];
    float* params = malloc(P * sizeof(float));
    if (params == NULL) {
        fprintf(stderr, "seedgpt: export: out of memory for %zu parameters\n", P);
        return EXIT_BAD;
    }
    float* ptr[NUM_PARAMETER_TENSORS];
    for (size_t k = 0, at = 0; k < NUM_PARAMETER_TENSORS; at += sizes[k], k++) ptr[k] = params + at;
    if (modelfile_read(model, &c, ptr, err) != 0) {   /* every weight read before any write */
        fprintf(stderr, "seedgpt: export: %s\n", err);
        free(params);
        return EXIT_BAD;
    }
    if (!have_dir && mkdir(out, 0755) != 0) {
        fprintf(stderr, "seedgpt: export: cannot create the folder %s: %s\n", out, strerror(errno));
        free(params);
        return EXIT_BAD;
    }
    int rc = 0;
    if (write_safetensors(paths[0], &c, params, bf16, err) != 0 ||
        write_config(paths[1], &c, bf16, err) != 0) {
        fprintf(stderr, "seedgpt: export: %s\n", err);
        rc = EXIT_BAD;
    }
    free(params);
    if (rc == 0 && with_tok) {
        const char* src[2] = {enc, merges};   /* copied byte for byte */
        for (int i = 0; i < 2 && rc == 0; i++) {
            char* text = NULL;
            size_t n;
            if (read_small(src[i], (size_t)64 << 20, &text, &n, err) != 0 ||
                write_file(paths[2 + i], text, n, err) != 0) {
                fprintf(stderr, "seedgpt: export: %s\n", err);
                rc = EXIT_BAD;
            }
            free(text);
        }
        char tc[512];
        snprintf(tc, sizeof(tc),
                 "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
                 "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                 "  \"unk_token\": \"<|endoftext|>\",\n  \"add_prefix_space\": false,\n"
                 "  \"add_bos_token\": false\n}\n", c.max_seq_len);
        if (rc == 0 && write_file(paths[4], tc, strlen(tc), err) != 0) {
            fprintf(stderr, "seedgpt: export: %s\n", err);
            rc = EXIT_BAD;
        }
    }
    if (rc != 0) return rc;
    printf("export: %s -> %s: model.safetensors (%d tensors, %zu parameters, %s), config.json%s\n",
           model, out, num_tensors(&c),
           P - (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels, bf16 ? "bf16" : "fp32",
           with_tok ? ", vocab.json, merges.txt, tokenizer_config.json" : "");
    if (!with_tok)
        fprintf(stderr, "note: vocab %d is not GPT-2's %d: weights and config.json only, no "
                "tokenizer files (no Hugging Face tokenizer has the ids of seedgpt's byte "
                "tokenizer: 0..255 the bytes, 256 end of text)\n", c.vocab_size, GPT2_BPE_VOCAB);
    return 0;
}

/* ---- import -------------------------------------------------------------------------------- */

/* The tensor named name (with "transformer.") or the same name without the prefix; NULL when
 * absent. *twice: 1 when both are there. */
static const StTensor* find_either(const StFile* sf, const char* name, int* twice) {
    const StTensor* a = st_find(sf, name);
    const StTensor* b = st_find(sf, name + PREFIX_LEN);
    *twice = a != NULL && b != NULL;
    return a ? a : b;
}

/* For a name of the form [transformer.]h.N.REST: N, and REST in *rest; else -1. */
static long block_of(const char* name, const char** rest) {
    if (!strncmp(name, PREFIX, PREFIX_LEN)) name += PREFIX_LEN;
    if (strncmp(name, "h.", 2) != 0 || name[2] < '0' || name[2] > '9') return -1;
    char* end;
    errno = 0;
    long l = strtol(name + 2, &end, 10);
    if (errno != 0 || *end != '.' || l > 1000000 || (name[2] == '0' && end != name + 3)) return -1;
    *rest = end + 1;
    return l;
}

static int shape_is(const StTensor* s, const HfTensor* t) {
    if (s->ndim != t->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (s->shape[d] != t->shape[d]) return 0;
    return 1;
}

static void shape_text(const StTensor* s, char out[96]) {
    size_t n = (size_t)snprintf(out, 96, "(");
    for (int d = 0; d < s->ndim && n < 80; d++)
        n += (size_t)snprintf(out + n, 96 - n, "%s%lld", d ? ", " : "", (long long)s->shape[d]);
    snprintf(out + n, 96 - n, ")");
}

/* config.json beside the weights, when there: the fields it gives must agree with the tensors.
 * Fills *n_head (0: not given). 0, or -1 with err. */
static int read_config_json(const char* path, const GPTConfig* c, int* n_head, char err[256]) {
    struct stat st;
    *n_head = 0;
    if (stat(path, &st) != 0) return 0;
    char* text;
    size_t n;
    if (read_small(path, 1 << 20, &text, &n, err) != 0) return -1;
    long long v;
    static const char* const keys[5] = {"n_head", "n_layer", "n_embd", "n_positions", "vocab_size"};
    const int want[5] = {0, c->num_layers, c->channels, c->max_seq_len, c->vocab_size};
    for (int k = 0; k < 5; k++) {
        int r = st_json_int(text, n, keys[k], &v);
        if (r < 0) {
            err_printf(err, "%s: not a JSON object with an integer %s", path, keys[k]);
            free(text);
            return -1;
        }
        if (r == 0) continue;
        if (k == 0) {
            if (v <= 0 || v > 1000000) {
                err_printf(err, "%s: n_head %lld: expected a positive count", path, v);
                free(text);
                return -1;
            }
            *n_head = (int)v;
        } else if (v != want[k]) {
            err_printf(err, "%s: %s is %lld but the weights say %d", path, keys[k], v, want[k]);
            free(text);
            return -1;
        }
    }
    char act[64];
    int r = st_json_string(text, n, "activation_function", act, sizeof(act));
    free(text);
    if (r == 1 && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh")) {
        err_printf(err, "%s: activation_function %s: seedgpt's GELU is the tanh approximation "
                 "(gelu_new)", path, act);
        return -1;
    }
    return 0;
}

int hf_read_gpt2(const char* path, int n_head, GPTConfig* cfg, float** params, char err[256]) {
    char st_path[4200], cfg_path[4200];
    struct stat st;
    *params = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(st_path, sizeof(st_path), "%s/model.safetensors", path);
        snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", path);
    } else {
        snprintf(st_path, sizeof(st_path), "%s", path);
        const char* slash = strrchr(path, '/');
        snprintf(cfg_path, sizeof(cfg_path), "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
    }
    StFile sf;
    if (st_open(&sf, st_path, err) != 0) return -1;
    char msg[96];
    int twice;
    const StTensor* wte = find_either(&sf, PREFIX "wte.weight", &twice);
    const StTensor* wpe = find_either(&sf, PREFIX "wpe.weight", &twice);
    if (wte == NULL || wpe == NULL || wte->ndim != 2 || wpe->ndim != 2) {
        err_printf(err, "%s: %s", st_path, wte == NULL ? "missing tensor wte.weight (the token "
                 "embedding): not a GPT-2 model" : wpe == NULL ? "missing tensor wpe.weight (the "
                 "position embedding): not a GPT-2 model" : "wte.weight and wpe.weight must be 2-D");
        st_close(&sf);
        return -1;
    }
    /* the layers: h.N.ln_1.weight for N = 0 .. L-1 */
    long L = 0;
    for (int i = 0; i < sf.n; i++) {
        const char* rest;
        long l = block_of(sf.t[i].name, &rest);
        if (l >= 0 && !strcmp(rest, "ln_1.weight") && l + 1 > L) L = l + 1;
    }
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.vocab_size = wte->shape[0] > 1000000 ? -1 : (int)wte->shape[0];
    c.channels = wte->shape[1] > 1000000 ? -1 : (int)wte->shape[1];
    c.max_seq_len = wpe->shape[0] > 1000000 ? -1 : (int)wpe->shape[0];
    c.num_layers = (int)L;
    c.padded_vocab_size = c.vocab_size > 0 ? gpt_pad_vocab(c.vocab_size) : 0;
    int cfg_heads;
    if (read_config_json(cfg_path, &c, &cfg_heads, err) != 0) { st_close(&sf); return -1; }
    if (n_head <= 0) n_head = cfg_heads;
    if (n_head <= 0) {
        n_head = c.channels == 768 ? 12 : c.channels == 1024 ? 16 : c.channels == 1280 ? 20
               : c.channels == 1600 ? 25 : 0;
        if (n_head == 0) {
            err_printf(err, "%s: the number of heads is not in the weights and there is no "
                     "config.json beside them: give --n-head N", st_path);
            st_close(&sf);
            return -1;
        }
    }
    c.num_heads = c.num_kv_heads = n_head;
    const char* problem = gpt_config_problem(&c);
    if (L == 0 || problem != NULL || wpe->shape[1] != wte->shape[1]) {
        err_printf(err, "%s: not a GPT-2 model seedgpt can hold (V %lld, C %lld, maxT %lld, L %ld, "
                 "NH %d): %s", st_path, (long long)wte->shape[0], (long long)wte->shape[1],
                 (long long)wpe->shape[0], L, n_head, L == 0 ? "no block h.0.ln_1.weight"
                 : problem ? problem : "wpe's width differs from wte's");
        st_close(&sf);
        return -1;
    }
    if (L > sf.n) {   /* a block is 12 tensors: most of them are missing (and L sizes the table) */
        err_printf(err, "%s: missing tensors: a block h.%ld. means %ld blocks, the file holds "
                 "%d tensors in all", st_path, L - 1, L, sf.n);
        st_close(&sf);
        return -1;
    }
    /* every tensor of the table: present once, of its shape, of a float dtype */
    int n = num_tensors(&c);
    HfTensor* t = calloc((size_t)n, sizeof(HfTensor));
    const StTensor** src = calloc((size_t)n, sizeof(StTensor*));
    if (t == NULL || src == NULL) {
        err_printf(err, "%s: out of memory", st_path);
        free(t); free(src); st_close(&sf);
        return -1;
    }
    gpt2_tensors(&c, t);
    size_t biggest = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        src[i] = find_either(&sf, t[i].name, &twice);
        if (src[i] == NULL) {
            err_printf(err, "%s: missing tensor %s", st_path, t[i].name);
            rc = -1;
        } else if (twice) {
            err_printf(err, "%s: tensor %s is there with and without the prefix \"" PREFIX "\"",
                     st_path, t[i].name + PREFIX_LEN);
            rc = -1;
        } else if (!shape_is(src[i], &t[i])) {
            char want[64];
            shape_text(src[i], msg);
            if (t[i].ndim == 1) snprintf(want, sizeof(want), "(%lld)", (long long)t[i].shape[0]);
            else snprintf(want, sizeof(want), "(%lld, %lld)", (long long)t[i].shape[0],
                          (long long)t[i].shape[1]);
            err_printf(err, "%s: tensor %s has shape %s, expected %s", st_path, t[i].name, msg, want);
            rc = -1;
        } else if (src[i]->dtype != ST_F32 && src[i]->dtype != ST_F16 && src[i]->dtype != ST_BF16) {
            err_printf(err, "%s: tensor %s has dtype %s; expected F32, F16 or BF16", st_path,
                     t[i].name, st_dtype_name(src[i]->dtype));
            rc = -1;
        }
        if (rc == 0 && numel_of(&t[i]) > biggest) biggest = numel_of(&t[i]);
    }
    /* and nothing else but the tied LM head and the attention-mask buffers */
    const StTensor* head = NULL;
    for (int i = 0; i < sf.n && rc == 0; i++) {
        const char* name = sf.t[i].name;
        const char* rest;
        long l = block_of(name, &rest);
        if (!strcmp(name, "lm_head.weight")) { head = &sf.t[i]; continue; }
        if (l >= 0 && l < L && (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias"))) continue;
        int known = 0;
        for (int k = 0; k < n && !known; k++) known = src[k] == &sf.t[i];
        if (!known) {
            char shown_name[64];
            size_t j = 0;
            for (; name[j] && j < 60; j++)
                shown_name[j] = name[j] >= 0x20 && name[j] < 0x7f ? name[j] : '?';
            shown_name[j] = '\0';
            err_printf(err, "%s: unexpected tensor %s: not a weight of GPT-2 (L %ld)", st_path,
                     shown_name, L);
            rc = -1;
        }
    }
    if (rc == 0 && head != NULL && (head->ndim != 2 || head->shape[0] != wte->shape[0] ||
                                    head->shape[1] != wte->shape[1])) {
        err_printf(err, "%s: lm_head.weight's shape differs from wte's: an untied LM head "
                 "(GPT-2 ties it to wte)", st_path);
        rc = -1;
    }
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    gpt_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += sizes[k];
    float* p = rc == 0 ? calloc(P, sizeof(float)) : NULL;
    float* tmp = rc == 0 ? malloc((biggest ? biggest : 1) * sizeof(float)) : NULL;
    if (rc == 0 && (p == NULL || tmp == NULL)) {
        err_printf(err, "%s: out of memory for %zu parameters", st_path, P);
        rc = -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (st_read_f32(&sf, src[i], tmp, err) != 0) { rc = -1; break; }
        float* dst = p + t[i].offset;
        size_t total = numel_of(&t[i]);
        if (!t[i].transpose) {
            memcpy(dst, tmp, total * sizeof(float));
        } else {
            size_t in = (size_t)t[i].shape[0], o = (size_t)t[i].shape[1];
            for (size_t r = 0; r < o; r++)          /* llm.c's (out, in) from Conv1D's (in, out) */
                for (size_t k = 0; k < in; k++) dst[r * in + k] = tmp[k * o + r];
        }
    }
    if (rc == 0 && head != NULL) {   /* tied: the same values as wte, bit for bit */
        if (st_read_f32(&sf, head, tmp, err) != 0) {
            rc = -1;
        } else if (memcmp(tmp, p, (size_t)c.vocab_size * c.channels * sizeof(float)) != 0) {
            err_printf(err, "%s: lm_head.weight differs from wte.weight: an untied LM head "
                     "(GPT-2 ties it to wte)", st_path);
            rc = -1;
        }
    }
    free(tmp); free(t); free(src);
    st_close(&sf);
    if (rc != 0) { free(p); return -1; }
    *cfg = c;
    *params = p;
    return 0;
}

int hf_import_main(int argc, char** argv) {
    const char* pos[2];
    int npos = 0, n_head = 0;
    for (int i = 0; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: ./train import [--n-head N] MODEL.safetensors|HF_FOLDER OUT.bin\n"
                   "Reads Hugging Face GPT-2 weights (F32, F16 or BF16, widened exactly; names with or\n"
                   "without \"transformer.\"; a folder's model.safetensors and config.json) and writes\n"
                   "llm.c's fp32 model file, the file --init reads. --n-head N when neither a\n"
                   "config.json beside the weights nor GPT-2's own widths tell the heads.\n");
            return 0;
        }
        if (!strcmp(a, "--n-head")) {
            char* end = NULL;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (end == NULL || *end != '\0' || v <= 0 || v > 65536) {
                fprintf(stderr, "seedgpt: import: --n-head %s: expected a positive count\n",
                        i + 1 < argc ? argv[i + 1] : "(no value)");
                return EXIT_BAD;
            }
            n_head = (int)v;
            i++;
            continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "seedgpt: import: unknown flag %s (see ./train import --help)\n", a);
            return EXIT_BAD;
        }
        if (npos == 2) {
            fprintf(stderr, "seedgpt: import: expected IN OUT.bin, got a third word %s\n", a);
            return EXIT_BAD;
        }
        pos[npos++] = a;
    }
    if (npos != 2) {
        fprintf(stderr, "seedgpt: import: expected MODEL.safetensors|HF_FOLDER OUT.bin (see "
                "./train import --help)\n");
        return EXIT_BAD;
    }
    const char *in = pos[0], *out = pos[1];
    char st_path[4200], cfg_path[4200];
    struct stat st;
    if (stat(in, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(st_path, sizeof(st_path), "%s/model.safetensors", in);
        snprintf(cfg_path, sizeof(cfg_path), "%s/config.json", in);
    } else {
        const char* slash = strrchr(in, '/');
        snprintf(st_path, sizeof(st_path), "%s", in);
        snprintf(cfg_path, sizeof(cfg_path), "%.*sconfig.json", slash ? (int)(slash - in + 1) : 0, in);
    }
    const char* inputs[2] = {st_path, cfg_path};
    int rc = check_output("import", out, inputs, 2);
    if (rc != 0) return rc;
    char err[256];
    GPTConfig c;
    float* p;
    if (hf_read_gpt2(in, n_head, &c, &p, err) != 0) {
        fprintf(stderr, "seedgpt: import: %s\n", err);
        return EXIT_BAD;
    }
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    gpt_param_sizes(&c, sizes);
    const float* ptr[NUM_PARAMETER_TENSORS];
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) { ptr[k] = p + P; P += sizes[k]; }
    rc = modelfile_write(&c, ptr, out, err);
    free(p);
    if (rc != 0) {
        fprintf(stderr, "seedgpt: import: %s\n", err);
        return EXIT_BAD;
    }
    printf("import: %s -> %s: llm.c model file, L %d NH %d C %d V %d (padded %d) maxT %d\n", in,
           out, c.num_layers, c.num_heads, c.channels, c.vocab_size, c.padded_vocab_size,
           c.max_seq_len);
    return 0;
}
