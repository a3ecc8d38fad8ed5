/* data/bpe_none.c — the GPT-2 tokenizer's entry points in a build made without cJSON and PCRE2
 * (the Makefile picks this file when their headers are missing, e.g. on a GPU machine that has
 * only the CUDA toolkit). bpe_load refuses with one line; nothing else is reachable, because no
 * Bpe exists. The byte-level tokenizer is unaffected. */
#include <stdio.h>
#include <stdlib.h>
#include "data/bpe.h"

int bpe_load(Bpe** out, const char* dir, char err[256]) {
    *out = NULL;
    snprintf(err, 256, "%s: this build of seedgpt has no GPT-2 tokenizer (it was built without "
             "libcjson-dev and libpcre2-dev; install them and rebuild)", dir);
    return -1;
}

static void unreachable(const char* what) {
    fprintf(stderr, "seedgpt: internal error: %s without a GPT-2 tokenizer in this build\n", what);
    exit(1);
}

void bpe_free(Bpe* b) { (void)b; }
int bpe_vocab_size(const Bpe* b) { (void)b; unreachable("bpe_vocab_size"); return 0; }
int bpe_eot(const Bpe* b) { (void)b; unreachable("bpe_eot"); return 0; }
int bpe_max_token_bytes(const Bpe* b) { (void)b; unreachable("bpe_max_token_bytes"); return 0; }
size_t bpe_encode(Bpe* b, const unsigned char* text, size_t n, uint16_t* out) {
    (void)b; (void)text; (void)n; (void)out; unreachable("bpe_encode"); return 0;
}
int bpe_decode(const Bpe* b, int id, unsigned char* buf, size_t cap) {
    (void)b; (void)id; (void)buf; (void)cap; unreachable("bpe_decode"); return 0;
}
size_t bpe_pieces(Bpe* b, const unsigned char* text, size_t n, size_t* ends) {
    (void)b; (void)text; (void)n; (void)ends; unreachable("bpe_pieces"); return 0;
}
size_t bpe_safe_cut(const unsigned char* text, size_t n) {
    (void)text; (void)n; unreachable("bpe_safe_cut"); return 0;
}
