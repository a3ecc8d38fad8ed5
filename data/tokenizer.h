/* data/tokenizer.h — text <-> token ids.
 *
 * This file owns the tokenizers seedgpt knows. Today there is one kind:
 *
 *   byte:  ids 0..255 are the 256 byte values, id 256 is end-of-text (EOT); vocab 257.
 *          Every byte string encodes (one token per byte) and decodes back exactly.
 *
 * The GPT-2 BPE tokenizer (vocab 50257, EOT 50256) is a later piece of work: it becomes a second
 * `kind` behind the same struct and the same four functions, with its tables hanging off the
 * struct (freed by tokenizer_free). Callers therefore never test the kind; they use vocab_size,
 * eot and the functions below.
 *
 * Decoding EOT: tokenizer_decode writes nothing for EOT (0 bytes). A sampler that wants to show
 * the document boundary prints its own marker when it sees id == tok->eot.
 *
 * Depends on no other folder of seedgpt. Never prints, never exits.
 */
#ifndef SEEDGPT_TOKENIZER_H
#define SEEDGPT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TOKENIZER_BYTE = 0,   /* ids 0..255 = bytes, 256 = EOT */
    TOKENIZER_GPT2 = 1,   /* reserved: GPT-2 BPE, not built yet */
} TokenizerKind;

typedef struct {
    TokenizerKind kind;
    int vocab_size;       /* number of ids, EOT included: 257 for byte */
    int eot;              /* the end-of-text id: 256 for byte */
    int max_token_bytes;  /* the longest byte string one id decodes to: 1 for byte */
} Tokenizer;

/* The byte-level tokenizer. Cannot fail. */
void tokenizer_init_byte(Tokenizer* tok);

/* By name, as given on the command line: "byte" (or "gpt2", refused until it is built).
 * Returns 0, or non-zero with one line in err. */
int tokenizer_init(Tokenizer* tok, const char* name, char err[256]);

/* Releases whatever the kind allocated (nothing for byte). */
void tokenizer_free(Tokenizer* tok);

/* A short name for messages: "byte". */
const char* tokenizer_name(const Tokenizer* tok);

/* The most tokens n bytes of text can encode to: out of tokenizer_encode needs this many slots.
 * (n for byte.) EOT is never produced by encode; the caller places it between documents. */
size_t tokenizer_max_tokens(const Tokenizer* tok, size_t n);

/* Encodes text (n bytes) into out (capacity tokenizer_max_tokens(tok, n)); returns the number of
 * tokens written. Text may be cut anywhere for the byte kind, so a stream can be encoded chunk
 * by chunk. */
size_t tokenizer_encode(const Tokenizer* tok, const unsigned char* text, size_t n, uint16_t* out);

/* Writes the bytes of token `id` into buf (capacity cap) and returns how many: 1 for a byte id,
 * 0 for EOT. Returns -1 for an id outside [0, vocab_size) or when cap is too small. buf is not
 * NUL-terminated. */
int tokenizer_decode(const Tokenizer* tok, int id, unsigned char* buf, size_t cap);

#endif
