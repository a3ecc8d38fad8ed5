/* tests/fuzz/fuzz_tokenizer.c — libFuzzer target: the tokenizer and the text loader behind
 * `./train prepare` (data/tokenizer.h, data/prepare.h). seedgpt has no tokenizer file yet (the
 * byte tokenizer is built in), so the hostile inputs are a tokenizer name and the text itself:
 * the first bytes up to a NUL are the name; the rest is text that must encode and decode back
 * exactly, and that prepare must turn into shards whose tokens (EOT aside) are the text's bytes
 * in order, or refuse with status 2. */
#include <sys/stat.h>
#include "tests/fuzz/fuzz_common.h"
#include "data/tokenizer.h"
#include "data/prepare.h"
#include "data/shards.h"

static char outdir[256];
static Tokenizer gpt2;        /* loaded once: reading GPT-2's 1 MB of files per input is too slow */
static int have_gpt2;

static void fuzz_rm_outdir(void) {
    char p[512];
    const char* names[] = {"train_000000.bin", "train_000001.bin", "train_000002.bin",
                           "val_000000.bin", "val_000001.bin", "val_000002.bin"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", outdir, names[i]);
        unlink(p);
    }
}

static void fuzz_rm_all(void) { fuzz_rm_outdir(); rmdir(outdir); }

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    fuzz_template(outdir, sizeof(outdir), "seedgpt_fuzz_prep");
    if (!mkdtemp(outdir)) abort();
    atexit(fuzz_rm_all);
    if (!freopen("/dev/null", "w", stdout)) abort();   /* prepare's summary line */
    char err[256];
    have_gpt2 = tokenizer_init(&gpt2, "gpt2", err) == 0;   /* where its files are installed */
    return 0;
}

/* Appends the tokens of dir/PREFIX_NNNNNN.bin, in order, to *all. */
static void read_split(const char* prefix, uint16_t** all, size_t* n) {
    for (int k = 0; k < 3; k++) {
        char p[512], err[256] = "";
        snprintf(p, sizeof(p), "%s/%s_%06d.bin", outdir, prefix, k);
        struct stat st;
        if (stat(p, &st) != 0) return;
        uint16_t* t;
        size_t c;
        if (shard_read(p, 257, &t, &c, err) != 0) { fprintf(stderr, "%s\n", err); abort(); }
        *all = realloc(*all, (*n + c) * sizeof(uint16_t));
        memcpy(*all + *n, t, c * sizeof(uint16_t));
        *n += c;
        free(t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    size_t name_len = strnlen((const char*)data, size < 16 ? size : 16);
    char name[17];
    memcpy(name, data, name_len);
    name[name_len] = '\0';
    const uint8_t* text = data + name_len + (name_len < size ? 1 : 0);
    size_t n = size - (size_t)(text - data);

    Tokenizer tok;
    char err[256] = "";
    int cached = have_gpt2 && strcmp(name, "gpt2") == 0;
    if (cached) {
        tok = gpt2;
    } else if (tokenizer_init(&tok, name, err) != 0) {
        /* one line, unless the name itself holds a newline (the message quotes it) */
        if (err[0] == '\0' || (strchr(err, '\n') && !strchr(name, '\n'))) abort();
        tokenizer_init_byte(&tok);
    }
    uint16_t* ids = malloc((tokenizer_max_tokens(&tok, n) + 1) * sizeof(uint16_t));
    size_t m = tokenizer_encode(&tok, text, n, ids);
    size_t back = 0;
    size_t cap = (size_t)tok.max_token_bytes;   /* the longest string one id decodes to */
    unsigned char* piece = malloc(cap + 1);
    for (size_t i = 0; i < m; i++) {
        if (ids[i] >= tok.vocab_size || ids[i] == tok.eot) abort();
        int w = tokenizer_decode(&tok, ids[i], piece, cap);
        if (w < 0 || back + (size_t)w > n || memcmp(piece, text + back, (size_t)w) != 0) abort();
        back += (size_t)w;
    }
    if (back != n) abort();
    if (tokenizer_decode(&tok, -1, piece, cap) != -1 || tokenizer_decode(&tok, tok.vocab_size, piece, cap) != -1)
        abort();
    free(piece);
    free(ids);
    if (!cached) tokenizer_free(&tok);

    /* prepare: the text as one document; val-frac and shard size from the input's size */
    const char* path = fuzz_file(text, n);
    char frac[16], shard_tokens[16];
    snprintf(frac, sizeof(frac), "%.2f", (double)(size % 5) * 0.1);
    snprintf(shard_tokens, sizeof(shard_tokens), "%zu", n / 2 + 1);
    const char* argv[] = {"--val-frac", frac, "--shard-tokens", shard_tokens, path, outdir};
    fuzz_rm_outdir();
    int saved = dup(2);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);   /* its one-line refusals */
    int rc = prepare_main(6, (char**)argv);
    dup2(saved, 2);
    close(saved);
    close(devnull);
    if (rc != 0 && rc != 2) abort();
    if (rc == 0) {
        uint16_t* all = NULL;
        size_t total = 0;
        read_split("train", &all, &total);
        read_split("val", &all, &total);
        /* EOT text (train), then EOT again at the start of val when the split fell inside the
         * text: drop EOTs, the rest is the text */
        size_t j = 0;
        for (size_t i = 0; i < total; i++) {
            if (all[i] == 256) continue;
            if (j >= n || all[i] != text[j]) abort();
            j++;
        }
        if (j != n) abort();
        free(all);
    }
    return 0;
}
