/* data/bpe.h — GPT-2's byte-level BPE: the vocabulary, the merges and the pre-tokeniser.
 *
 * Owns: reading `encoder.json` (token string -> id) and `vocab.bpe` (the merges, best first), and
 * turning bytes into ids and back exactly as OpenAI's GPT-2 encoder does. data/tokenizer.c wraps
 * it as the `gpt2` tokenizer kind; nothing else needs this header (the tests do).
 *
 * The algorithm, as GPT-2 defines it:
 *   1. Pre-tokenise: the text is cut into pieces by the first-match alternation
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      (PCRE2, UTF). \s is Unicode's White_Space property, spelled out as a class in bpe.c
 *      (U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
 *      U+205F, U+3000) — what Python's `regex` module, which GPT-2's encoder.py uses, and tiktoken
 *      call \s. (PCRE2's own \s adds U+180E; JavaScript's drops U+0085 and adds U+FEFF; see the
 *      README.) \p{L} and \p{N} are the Unicode tables of the system's PCRE2 (Debian 12: 10.42,
 *      Unicode 14).
 *      Bytes that are not valid UTF-8 match no alternative; each maximal run of them between two
 *      matches is one piece of its own (GPT-2 itself only ever sees valid text).
 *   2. Each piece starts as one symbol per byte. Repeatedly, the adjacent pair of symbols whose
 *      merge comes first in vocab.bpe is found, and every occurrence of that pair is merged, left
 *      to right; until no adjacent pair has a merge. Each final symbol is a token of encoder.json.
 *   Both files spell bytes through GPT-2's byte -> character table (bytes 33..126, 161..172,
 *   174..255 are themselves; the other 68 bytes are U+0100.. in order); this file converts them to
 *   raw bytes on load, and works on bytes and ids from then on.
 *
 * Encoding never produces the end-of-text id: "<|endoftext|>" in the text is ordinary text.
 * Ids fit uint16 (the loader refuses a vocabulary of more than 65536).
 *
 * Depends on libcjson (encoder.json) and libpcre2-8. A Bpe is not thread-safe: encoding uses
 * scratch buffers and a piece cache (12 MB, allocated on first use) inside it. Never prints and
 * never exits, except that bpe_encode aborts with a message when memory runs out for the scratch
 * of one piece (~46 bytes per byte of the piece: a run of letters, digits, punctuation or white
 * space many megabytes long).
 */
#ifndef SEEDGPT_BPE_H
#define SEEDGPT_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct Bpe Bpe;

/* Loads DIR/encoder.json and DIR/vocab.bpe (or, when present, Hugging Face's names for the same
 * files: DIR/vocab.json and DIR/merges.txt). Returns 0 and *out, or non-zero with one line in err
 * naming the file (and line) at fault. Refused: ids that are not exactly 0..N-1, N > 65536, two
 * ids with the same bytes, a byte with no single-byte token, no "<|endoftext|>" token, a merge
 * line that is not two words, a merge whose parts or result are not tokens, a token made by two
 * merges (so also a pair merged twice), and a merge that uses a token before the merge that makes
 * it (GPT-2's files satisfy all of these; the encoder's merge order relies on the last two). */
int bpe_load(Bpe** out, const char* dir, char err[256]);

void bpe_free(Bpe* b);

int bpe_vocab_size(const Bpe* b);     /* N: ids are 0..N-1 (GPT-2: 50257) */
int bpe_eot(const Bpe* b);            /* the id of "<|endoftext|>" (GPT-2: 50256) */
int bpe_max_token_bytes(const Bpe* b);/* the longest token, in bytes */

/* Encodes text (n bytes) into out, which needs room for n ids (a token has at least one byte);
 * returns the number of ids written. */
size_t bpe_encode(Bpe* b, const unsigned char* text, size_t n, uint16_t* out);

/* The bytes of token id into buf (capacity cap); returns their number, or -1 for an id outside
 * [0, N) or a buffer too small. The end-of-text token gives its 13 characters here (the tokenizer
 * decides what EOT prints). */
int bpe_decode(const Bpe* b, int id, unsigned char* buf, size_t cap);

/* Step 1 alone, for tests and tools: writes the end offset of each piece of text into ends
 * (room for n) and returns the number of pieces. Piece k is text[ends[k-1], ends[k]). */
size_t bpe_pieces(Bpe* b, const unsigned char* text, size_t n, size_t* ends);

/* The largest k <= n at which text may be cut without changing its encoding, whatever follows
 * text[n-1]: encode(text[0,k)) followed by encode(rest) equals encode(whole). It is the last
 * position k where text[k] is ' ' or '\n' and text[k-1] ends a valid UTF-8 character that is not
 * white space (no alternative of the pattern runs from such a character into white space, and
 * none looks behind). 0 when there is no such position; the caller then reads on. */
size_t bpe_safe_cut(const unsigned char* text, size_t n);

#endif
