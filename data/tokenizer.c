/* data/tokenizer.c — the byte-level tokenizer (see data/tokenizer.h for the contract).
 *
 * Owns: id <-> bytes for each tokenizer kind. The GPT-2 BPE kind will add its merge tables and
 * vocabulary here; until then it is refused by name with a clear message.
 */
#include "data/tokenizer.h"

#include <stdio.h>
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

int tokenizer_init(Tokenizer* tok, const char* name, char err[256]) {
    if (strcmp(name, "byte") == 0) {
        tokenizer_init_byte(tok);
        return 0;
    }
    if (strcmp(name, "gpt2") == 0) {
        if (err) snprintf(err, 256, "--tokenizer gpt2: gpt2 tokenizer not built yet (use byte)");
        return 1;
    }
    if (err) snprintf(err, 256, "--tokenizer %s: unknown tokenizer (expected byte or gpt2)", name);
    return 1;
}

void tokenizer_free(Tokenizer* tok) {
    /* byte: nothing allocated. GPT-2 will free its tables here. */
    (void)tok;
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
    (void)tok;   /* only the byte kind exists: the id is the byte */
    for (size_t i = 0; i < n; i++) out[i] = (uint16_t)text[i];
    return n;
}

int tokenizer_decode(const Tokenizer* tok, int id, unsigned char* buf, size_t cap) {
    if (id < 0 || id >= tok->vocab_size) return -1;
    if (id == tok->eot) return 0;           /* EOT decodes to nothing; see the header */
    if (cap < 1) return -1;
    buf[0] = (unsigned char)id;
    return 1;
}
