/* data/tokenizer.c — the byte-level and GPT-2 tokenizers (see data/tokenizer.h for the contract).
 *
 * Owns: picking the kind by name and the BPE folder, and the byte kind itself. The GPT-2 kind's
 * tables and algorithm live in data/bpe.c; this file forwards to it.
 */
#include "data/tokenizer.h"
#include "data/bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTE_VOCAB 257
#define BYTE_EOT 256

void tokenizer_init_byte(Tokenizer* tok) {
    memset(tok, 0, sizeof(*tok));
    tok->kind = TOKENIZER_BYTE;
    tok->vocab_size = BYTE_VOCAB;
    tok->eot = BYTE_EOT;
    tok->max_token_bytes = 1;
}

int tokenizer_init_gpt2(Tokenizer* tok, const char* bpe_dir, char err[256]) {
    memset(tok, 0, sizeof(*tok));
    if (!bpe_dir) {
        const char* env = getenv("SEEDGPT_BPE_DIR");
        bpe_dir = env && *env ? env : TOKENIZER_GPT2_DEFAULT_DIR;
    }
    char e[256];
    Bpe* b;
    if (bpe_load(&b, bpe_dir, e) != 0) {
        if (err) snprintf(err, 256, "--tokenizer gpt2: %.230s", e);
        return 1;
    }
    tok->kind = TOKENIZER_GPT2;
    tok->vocab_size = bpe_vocab_size(b);
    tok->eot = bpe_eot(b);
    tok->max_token_bytes = bpe_max_token_bytes(b);
    tok->bpe = b;
    return 0;
}

int tokenizer_open(Tokenizer* tok, const char* name, const char* bpe_dir, char err[256]) {
    if (strcmp(name, "byte") == 0) {
        if (bpe_dir) {
            if (err) snprintf(err, 256, "--bpe-dir is for --tokenizer gpt2, not byte");
            return 1;
        }
        tokenizer_init_byte(tok);
        return 0;
    }
    if (strcmp(name, "gpt2") == 0) return tokenizer_init_gpt2(tok, bpe_dir, err);
    if (err) snprintf(err, 256, "--tokenizer %s: unknown tokenizer (expected byte or gpt2)", name);
    return 1;
}

int tokenizer_init(Tokenizer* tok, const char* name, char err[256]) {
    return tokenizer_open(tok, name, NULL, err);
}

void tokenizer_free(Tokenizer* tok) {
    bpe_free(tok->bpe);   /* byte: NULL, nothing allocated */
    tok->bpe = NULL;
}

const char* tokenizer_name(const Tokenizer* tok) {
    switch (tok->kind) {
        case TOKENIZER_BYTE: return "byte";
        case TOKENIZER_GPT2: return "gpt2";
    }
    return "?";
}

size_t tokenizer_max_tokens(const Tokenizer* tok, size_t n) {
    (void)tok;   /* byte: one token per byte; BPE never produces more tokens than bytes either */
    return n;
}

size_t tokenizer_encode(const Tokenizer* tok, const unsigned char* text, size_t n, uint16_t* out) {
    if (tok->kind == TOKENIZER_GPT2) return bpe_encode(tok->bpe, text, n, out);
    for (size_t i = 0; i < n; i++) out[i] = (uint16_t)text[i];   /* byte: the id is the byte */
    return n;
}

size_t tokenizer_safe_cut(const Tokenizer* tok, const unsigned char* text, size_t n) {
    if (tok->kind == TOKENIZER_GPT2) return bpe_safe_cut(text, n);
    return n;
}

int tokenizer_decode(const Tokenizer* tok, int id, unsigned char* buf, size_t cap) {
    if (id < 0 || id >= tok->vocab_size) return -1;
    if (id == tok->eot) return 0;           /* EOT decodes to nothing; see the header */
    if (tok->kind == TOKENIZER_GPT2) return bpe_decode(tok->bpe, id, buf, cap);
    if (cap < 1) return -1;
    buf[0] = (unsigned char)id;
    return 1;
}
