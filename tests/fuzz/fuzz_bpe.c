/* tests/fuzz/fuzz_bpe.c — libFuzzer target: the GPT-2 tokenizer's files (data/bpe.h: encoder.json
 * and vocab.bpe in a folder). Input: 2 bytes little-endian J, then J bytes of encoder.json, then
 * vocab.bpe. bpe_load must refuse with one line naming a file, or load a tokenizer that encodes
 * any text (here: the input itself) into ids below its vocabulary, never the end-of-text id, and
 * decodes them back to exactly that text. */
#include <sys/stat.h>
#include "tests/fuzz/fuzz_common.h"
#include "data/bpe.h"

static char bpe_dir[256], json_path[300], merges_path[300];

static void bpe_cleanup(void) { unlink(json_path); unlink(merges_path); rmdir(bpe_dir); }

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    fuzz_template(bpe_dir, sizeof(bpe_dir), "seedgpt_fuzz_bpe");
    if (!mkdtemp(bpe_dir)) abort();
    snprintf(json_path, sizeof(json_path), "%s/encoder.json", bpe_dir);
    snprintf(merges_path, sizeof(merges_path), "%s/vocab.bpe", bpe_dir);
    atexit(bpe_cleanup);
    return 0;
}

static void put(const char* path, const uint8_t* d, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n)) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    size_t j = (size_t)data[0] | (size_t)data[1] << 8;
    if (j > size - 2) j = size - 2;
    put(json_path, data + 2, j);
    put(merges_path, data + 2 + j, size - 2 - j);
    Bpe* b = NULL;
    char err[256] = "";
    if (bpe_load(&b, bpe_dir, err) != 0) {
        if (err[0] == '\0' || strchr(err, '\n') || !strstr(err, bpe_dir)) {
            fprintf(stderr, "bad error message: \"%s\"\n", err);
            abort();
        }
        return 0;
    }
    int V = bpe_vocab_size(b), eot = bpe_eot(b);
    if (V < 257 || V > 65536 || eot < 0 || eot >= V) abort();
    uint16_t* ids = malloc((size + 1) * sizeof(uint16_t));
    size_t m = bpe_encode(b, data, size, ids);
    unsigned char* back = malloc(size + 1);
    size_t n = 0;
    unsigned char piece[4096];
    for (size_t i = 0; i < m; i++) {
        if (ids[i] >= V || ids[i] == eot) abort();
        int w = bpe_decode(b, ids[i], piece, sizeof(piece));
        if (w <= 0 || n + (size_t)w > size) abort();
        memcpy(back + n, piece, (size_t)w);
        n += (size_t)w;
    }
    if (n != size || memcmp(back, data, size) != 0) abort();
    free(ids);
    free(back);
    bpe_free(b);
    return 0;
}
