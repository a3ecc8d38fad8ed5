/* data/tokenizer.h — text <-> token ids.
 *
 * This file owns the tokenizers seedgpt knows, two kinds behind one struct and one set of
 * functions (callers never test the kind; they use vocab_size, eot and the functions below):
 *
 *   byte:  ids 0..255 are the 256 byte values, id 256 is end-of-text (EOT); vocab 257.
 *          Every byte string encodes (one token per byte) and decodes back exactly.
 *   gpt2:  GPT-2's byte-level BPE (data/bpe.h) from encoder.json + vocab.bpe in a folder (the
 *          "BPE dir"; Hugging Face's vocab.json + merges.txt are the same files and also read);
 *          vocab 50257, EOT 50256 ("<|endoftext|>") with GPT-2's files. Every byte
 *          string encodes and decodes back exactly, invalid UTF-8 included. scripts/get_gpt2_bpe.sh
 *          puts the files in TOKENIZER_GPT2_DEFAULT_DIR.
 *
 * Decoding EOT: tokenizer_decode writes nothing for EOT (0 bytes). A sampler that wants to show
 * the document boundary prints its own marker when it sees id == tok->eot.
 *
 * Streams: byte text may be cut anywhere; BPE text only where tokenizer_safe_cut says (cutting
 * elsewhere can change the ids around the cut). A Tokenizer is not thread-safe (the BPE encoder
 * has scratch space and a cache).
 *
 * Depends on no other folder of seedgpt. Never prints, never exits (but see data/bpe.h on memory).
 */
#ifndef SEEDGPT_TOKENIZER_H
#define SEEDGPT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* Where `gpt2` looks for encoder.json and vocab.bpe when no folder is given and SEEDGPT_BPE_DIR
 * is unset: relative to the working directory, i.e. the repository root for ./train. */
#define TOKENIZER_GPT2_DEFAULT_DIR "data/gpt2"
/* GPT-2's vocabulary: 50257 ids, EOT 50256 */
#define TOKENIZER_GPT2_VOCAB 50257

typedef enum {
    TOKENIZER_BYTE = 0,   /* ids 0..255 = bytes, 256 = EOT */
    TOKENIZER_GPT2 = 1,   /* GPT-2 BPE */
} TokenizerKind;

struct Bpe;

typedef struct {
    TokenizerKind kind;
    int vocab_size;       /* number of ids, EOT included: 257 for byte, 50257 for gpt2 */
    int eot;              /* the end-of-text id: 256 for byte, 50256 for gpt2 */
    int max_token_bytes;  /* the longest byte string one id decodes to: 1 for byte */
    struct Bpe* bpe;      /* gpt2: vocabulary, merges, scratch (data/bpe.h); NULL for byte */
} Tokenizer;

/* The byte-level tokenizer. Cannot fail. */
void tokenizer_init_byte(Tokenizer* tok);

/* GPT-2 BPE from bpe_dir/encoder.json and bpe_dir/vocab.bpe. bpe_dir NULL: $SEEDGPT_BPE_DIR if
 * set and non-empty, else TOKENIZER_GPT2_DEFAULT_DIR. Returns 0, or non-zero with one line in err
 * naming the file. */
int tokenizer_init_gpt2(Tokenizer* tok, const char* bpe_dir, char err[256]);

/* By name, as given on the command line: "byte" or "gpt2" (whose files are found as
 * tokenizer_init_gpt2(tok, bpe_dir, err) finds them; bpe_dir may be NULL, and is refused with
 * "byte"). Returns 0, or non-zero with one line in err. */
int tokenizer_open(Tokenizer* tok, const char* name, const char* bpe_dir, char err[256]);

/* tokenizer_open(tok, name, NULL, err). */
int tokenizer_init(Tokenizer* tok, const char* name, char err[256]);

/* Releases whatever the kind allocated (nothing for byte). */
void tokenizer_free(Tokenizer* tok);

/* A short name for messages: "byte" or "gpt2". */
const char* tokenizer_name(const Tokenizer* tok);

/* The most tokens n bytes of text can encode to: out of tokenizer_encode needs this many slots.
 * (n: every token holds at least one byte.) EOT is never produced by encode; the caller places it
 * between documents. */
size_t tokenizer_max_tokens(const Tokenizer* tok, size_t n);

/* Encodes text (n bytes) into out (capacity tokenizer_max_tokens(tok, n)); returns the number of
 * tokens written. */
size_t tokenizer_encode(const Tokenizer* tok, const unsigned char* text, size_t n, uint16_t* out);

/* The largest k <= n such that encoding text[0, k) and, later, the text from k on gives the ids
 * of the whole, whatever follows text[n-1]. byte: n. gpt2: before the last ' ' or '\n' that
 * follows a character other than white space (data/bpe.h), or 0 when there is none (read more
 * text, or encode the rest whole at the end of the input). */
size_t tokenizer_safe_cut(const Tokenizer* tok, const unsigned char* text, size_t n);

/* Writes the bytes of token `id` into buf (capacity cap) and returns how many: 1 for a byte id,
 * 1..max_token_bytes for a BPE id, 0 for EOT. Returns -1 for an id outside [0, vocab_size) or
 * when cap is too small. buf is not NUL-terminated. A multi-byte UTF-8 character may be split
 * over several ids: decode a whole sequence before showing it as text. */
int tokenizer_decode(const Tokenizer* tok, int id, unsigned char* buf, size_t cap);

#endif
