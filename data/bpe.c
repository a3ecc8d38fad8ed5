/* data/bpe.c — GPT-2's byte-level BPE (see data/bpe.h for the contract and the algorithm).
 *
 * Owns: loading encoder.json and vocab.bpe into id tables, the pre-tokenising regex, the merge
 * loop, and a cache of encoded pieces. Works on raw bytes and ids only: GPT-2's byte -> character
 * spelling is undone once, on load.
 *
 * The merge loop. The reference (encoder.py) finds the best-ranked adjacent pair, merges all its
 * occurrences left to right, and repeats: O(m^2) for a piece of m bytes, which a long run of
 * letters or spaces makes slow. Here the pairs sit in a min-heap ordered by (rank, position) over
 * a linked list of symbols; a popped entry whose symbols have changed since it was pushed is
 * skipped. This merges in the same order as the reference because a merge only creates pairs
 * that contain its result, and every merge using that result ranks after the merge that made it
 * (bpe_load checks this, and that no token is made twice): so no new pair can jump ahead of the
 * remaining occurrences of the pair being merged, and occurrences of one pair pop left to right.
 */
#include "data/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/fileio.h"
#include "util/err.h"

#define BPE_MAX_VOCAB 65536
#define BPE_EOT_STRING "<|endoftext|>"
/* Pieces up to this many bytes are cached (nearly all of natural text). */
#define BPE_CACHE_MAX_PIECE 48
#define BPE_CACHE_SLOTS (1u << 17)            /* cleared when half full */

/* GPT-2's pattern with \s spelled out as Unicode White_Space (see data/bpe.h). */
#define WS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
static const char bpe_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

typedef struct {   /* pair (left id, right id) -> the merge */
    uint32_t key;      /* left << 16 | right */
    int32_t rank;      /* line of vocab.bpe (0 first); -1: empty slot */
    uint32_t merged;   /* the id of left + right */
} PairSlot;

typedef struct {   /* piece bytes -> its ids, in the arenas below */
    uint64_t hash;
    uint32_t boff, toff;
    uint16_t blen, ntok;   /* blen 0: empty slot */
} CacheSlot;

typedef struct { int32_t rank, left, right; } HeapEntry;

struct Bpe {
    int vocab_size, eot, max_token_bytes;
    uint16_t byte_id[256];              /* the single-byte token of each byte */
    uint32_t* tok_off;                  /* (vocab_size + 1) offsets into tok_bytes */
    unsigned char* tok_bytes;           /* every token's raw bytes, back to back */
    PairSlot* pairs;                    /* (pair_mask + 1) slots, open addressing */
    uint32_t pair_mask;
    pcre2_code* re;
    pcre2_match_data* md;
    /* the cache */
    CacheSlot* cache;                   /* (BPE_CACHE_SLOTS) */
    uint32_t cache_used;
    int cache_failed;
    unsigned char* cache_bytes;         /* piece bytes */
    uint16_t* cache_toks;               /* piece ids */
    size_t cache_bytes_len, cache_toks_len;
    /* scratch of the merge loop, grown to the longest piece seen */
    size_t scratch_cap;
    uint16_t* sym;
    int32_t *prev, *next;
    HeapEntry* heap;
};

/* One line, always: token spellings quoted from a hostile encoder.json may hold control bytes
 * (a newline would split the message), so those are shown as '?'. */
static void set_err(char* err, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vprintf(err, fmt, ap);
    va_end(ap);
    for (char* c = err; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f) *c = '?';
}

static uint64_t fnv1a(const unsigned char* s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static uint32_t mix32(uint32_t x) {   /* a cheap integer hash for the pair table */
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* ---- GPT-2's byte <-> character table -------------------------------------------------------- */

/* char_of_byte[b]: the code point GPT-2 spells byte b with. byte_of_char: the inverse, -1 where
 * a code point (< 324) spells no byte. */
static void byte_table(uint32_t char_of_byte[256], int byte_of_char[324]) {
    int n = 0;
    for (int c = 0; c < 324; c++) byte_of_char[c] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        char_of_byte[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        byte_of_char[char_of_byte[b]] = b;
    }
}

/* Decodes the UTF-8 string s (n bytes) as GPT-2 characters into raw bytes (out: room for n).
 * Returns the byte count, or -1 on a character that spells no byte. */
static long spelled_to_bytes(const unsigned char* s, size_t n, const int byte_of_char[324],
                             unsigned char* out) {
    long m = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        unsigned char x = s[i];
        if (x < 0x80) { c = x; i += 1; }
        else if ((x & 0xE0) == 0xC0 && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
            c = ((uint32_t)(x & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else return -1;   /* every spelling character is below U+0800 */
        if (c >= 324 || byte_of_char[c] < 0) return -1;
        out[m++] = (unsigned char)byte_of_char[c];
    }
    return m;
}

/* ---- a string -> id table, used while loading -------------------------------------------------- */

typedef struct {
    const unsigned char* bytes;   /* the Bpe's token bytes */
    const uint32_t* off;
    int32_t* slot;                /* ids, -1 empty */
    uint32_t mask;
} IdTable;

static int idt_find(const IdTable* t, const unsigned char* s, size_t n) {
    for (uint32_t i = (uint32_t)fnv1a(s, n) & t->mask;; i = (i + 1) & t->mask) {
        int32_t id = t->slot[i];
        if (id < 0) return -1;
        size_t len = t->off[id + 1] - t->off[id];
        if (len == n && memcmp(t->bytes + t->off[id], s, n) == 0) return id;
    }
}

static int idt_insert(IdTable* t, int id) {   /* 1 if the bytes were there already */
    const unsigned char* s = t->bytes + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    uint32_t i = (uint32_t)fnv1a(s, n) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        int32_t o = t->slot[i];
        if (o < 0) break;
        if (t->off[o + 1] - t->off[o] == n && memcmp(t->bytes + t->off[o], s, n) == 0) return 1;
    }
    t->slot[i] = id;
    return 0;
}

/* ---- the pair table ------------------------------------------------------------------------ */

static const PairSlot* pair_find(const Bpe* b, uint32_t left, uint32_t right) {
    uint32_t key = left << 16 | right;
    for (uint32_t i = mix32(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        const PairSlot* p = &b->pairs[i];
        if (p->rank < 0) return NULL;
        if (p->key == key) return p;
    }
}

/* ---- loading ------------------------------------------------------------------------------- */

static unsigned char* read_file(const char* path, size_t* n, char err[256]) {
    const char* kind;
    FILE* f = fopen_regular(path, &kind);   /* util/fileio.h: a FIFO is refused, never waited on */
    if (!f && kind) {
        set_err(err, "%s: not a regular file (%s)", path, kind);
        return NULL;
    }
    if (!f) {
        set_err(err, "%s: cannot open: %s (run scripts/get_gpt2_bpe.sh, or give --bpe-dir)", path,
                strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, len = 0;
    unsigned char* buf = malloc(cap + 1);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        unsigned char* nb = realloc(buf, cap + 1);
        if (!nb) { free(buf); buf = NULL; }
        else buf = nb;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        set_err(err, "%s: %s", path, buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    *n = len;
    return buf;
}

/* encoder.json -> vocab_size, tok_off, tok_bytes, byte_id, eot. */
static int load_encoder(Bpe* b, const char* path, const int byte_of_char[324], char err[256]) {
    size_t n;
    unsigned char* text = read_file(path, &n, err);
    if (!text) return 1;
    cJSON* root = cJSON_ParseWithLength((const char*)text, n);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        set_err(err, "%s: not a JSON object (expected {\"token\": id, ...})", path);
        cJSON_Delete(root);
        return 1;
    }
    int count = cJSON_GetArraySize(root);
    if (count < 257 || count > BPE_MAX_VOCAB) {
        set_err(err, "%s: %d tokens (expected 257 .. %d)", path, count, BPE_MAX_VOCAB);
        cJSON_Delete(root);
        return 1;
    }
    /* first pass: ids and lengths, so tokens can be laid out by id */
    size_t total = 0;
    const cJSON** by_id = calloc((size_t)count, sizeof(cJSON*));
    int rc = 1;
    if (!by_id) { set_err(err, "%s: out of memory", path); goto done; }
    const cJSON* it;
    cJSON_ArrayForEach(it, root) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (!(v >= 0 && v < count && v == (double)(int)v)) {
            set_err(err, "%s: token \"%.60s\": id must be an integer in [0, %d)", path,
                    it->string ? it->string : "", count);
            goto done;
        }
        int id = (int)v;
        if (by_id[id]) {
            set_err(err, "%s: id %d is given twice (\"%.60s\" and \"%.60s\")", path, id,
                    by_id[id]->string, it->string);
            goto done;
        }
        by_id[id] = it;
        total += strlen(it->string);   /* bytes <= UTF-8 length of the spelling */
    }
    b->vocab_size = count;
    b->tok_off = malloc(((size_t)count + 1) * sizeof(uint32_t));
    b->tok_bytes = malloc(total + 1);
    if (!b->tok_off || !b->tok_bytes) { set_err(err, "%s: out of memory", path); goto done; }
    uint32_t off = 0;
    b->eot = -1;
    for (int i = 0; i < 256; i++) b->byte_id[i] = 0xFFFF;
    int have_byte[256] = {0};
    for (int id = 0; id < count; id++) {
        const char* s = by_id[id]->string;
        long m = spelled_to_bytes((const unsigned char*)s, strlen(s), byte_of_char, b->tok_bytes + off);
        if (m <= 0) {
            set_err(err, "%s: token \"%.60s\" (id %d) is %s", path, s, id,
                    m == 0 ? "empty" : "not spelled in GPT-2's byte alphabet");
            goto done;
        }
        b->tok_off[id] = off;
        if (m == 1 && !have_byte[b->tok_bytes[off]]) {
            have_byte[b->tok_bytes[off]] = 1;
            b->byte_id[b->tok_bytes[off]] = (uint16_t)id;
        }
        if (strcmp(s, BPE_EOT_STRING) == 0) b->eot = id;
        if (m > b->max_token_bytes) b->max_token_bytes = (int)m;
        off += (uint32_t)m;
    }
    b->tok_off[count] = off;
    for (int x = 0; x < 256; x++) {
        if (!have_byte[x]) {
            set_err(err, "%s: byte 0x%02x has no single-byte token (every byte needs one)", path, x);
            goto done;
        }
    }
    if (b->eot < 0) {
        set_err(err, "%s: no \"" BPE_EOT_STRING "\" token", path);
        goto done;
    }
    rc = 0;
done:
    free(by_id);
    cJSON_Delete(root);
    return rc;
}

/* vocab.bpe -> the pair table. */
static int load_merges(Bpe* b, const char* path, const char* encoder_path,
                       const int byte_of_char[324], char err[256]) {
    size_t n;
    unsigned char* text = read_file(path, &n, err);
    if (!text) return 1;
    int rc = 1;
    IdTable idt = {b->tok_bytes, b->tok_off, NULL, 0};
    uint32_t cap = 1;
    while (cap < 2u * (uint32_t)b->vocab_size) cap <<= 1;
    idt.mask = cap - 1;
    idt.slot = malloc(cap * sizeof(int32_t));
    int32_t* made_by = malloc((size_t)b->vocab_size * sizeof(int32_t));   /* rank, -1: no merge */
    /* count lines for the pair table's size */
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    uint32_t pcap = 1;
    while (pcap < 2 * lines + 2) pcap <<= 1;
    b->pairs = malloc(pcap * sizeof(PairSlot));
    b->pair_mask = pcap - 1;
    unsigned char* wa = malloc(n + 1);
    if (!idt.slot || !made_by || !b->pairs || !wa) { set_err(err, "%s: out of memory", path); goto done; }
    for (uint32_t i = 0; i < cap; i++) idt.slot[i] = -1;
    for (uint32_t i = 0; i < pcap; i++) b->pairs[i].rank = -1;
    for (int id = 0; id < b->vocab_size; id++) {
        made_by[id] = -1;
        if (idt_insert(&idt, id)) {
            set_err(err, "%s: token id %d spells the same bytes as an earlier id", encoder_path, id);
            goto done;
        }
    }

    int32_t rank = 0;
    size_t pos = 0;
    for (long line = 1; pos < n; line++) {
        size_t end = pos;
        while (end < n && text[end] != '\n') end++;
        size_t len = end - pos;
        const unsigned char* s = text + pos;
        pos = end + 1;
        if (len > 0 && s[len - 1] == '\r') len--;
        if (line == 1 && len > 0 && s[0] == '#') continue;   /* "#version: 0.2" */
        if (len == 0) continue;
        /* two words separated by spaces */
        size_t i = 0;
        while (i < len && s[i] != ' ') i++;
        size_t a_len = i;
        while (i < len && s[i] == ' ') i++;
        size_t b_start = i;
        while (i < len && s[i] != ' ') i++;
        size_t b_len = i - b_start;
        while (i < len && s[i] == ' ') i++;
        if (a_len == 0 || b_len == 0 || i != len) {
            set_err(err, "%s:%ld: expected two tokens separated by a space", path, line);
            goto done;
        }
        long la = spelled_to_bytes(s, a_len, byte_of_char, wa);
        long lb = spelled_to_bytes(s + b_start, b_len, byte_of_char, wa + (la > 0 ? la : 0));
        if (la <= 0 || lb <= 0) {
            set_err(err, "%s:%ld: not spelled in GPT-2's byte alphabet", path, line);
            goto done;
        }
        int ia = idt_find(&idt, wa, (size_t)la);
        int ib = idt_find(&idt, wa + la, (size_t)lb);
        int im = idt_find(&idt, wa, (size_t)(la + lb));
        if (ia < 0 || ib < 0 || im < 0) {
            set_err(err, "%s:%ld: the %s is not a token of encoder.json", path, line,
                    ia < 0 ? "first part" : ib < 0 ? "second part" : "merged result");
            goto done;
        }
        int ca = b->tok_off[ia + 1] - b->tok_off[ia] > 1, cb = b->tok_off[ib + 1] - b->tok_off[ib] > 1;
        if ((ca && made_by[ia] < 0) || (cb && made_by[ib] < 0)) {
            set_err(err, "%s:%ld: uses a token before the merge that makes it (merge order matters)",
                    path, line);
            goto done;
        }
        if (made_by[im] >= 0) {   /* (this also refuses a pair merged twice) */
            set_err(err, "%s:%ld: its result is already made by an earlier line", path, line);
            goto done;
        }
        uint32_t key = (uint32_t)ia << 16 | (uint32_t)ib;
        uint32_t k = mix32(key) & b->pair_mask;
        while (b->pairs[k].rank >= 0) k = (k + 1) & b->pair_mask;   /* a new pair: see above */
        b->pairs[k] = (PairSlot){key, rank, (uint32_t)im};
        made_by[im] = rank++;
    }
    rc = 0;
done:
    free(wa);
    free(made_by);
    free(idt.slot);
    free(text);
    return rc;
}

/* dir/name, or dir/other_name when only that one exists (errors then still name `name`). */
static void pick_file(char path[4096], const char* dir, const char* name, const char* other_name) {
    snprintf(path, 4096, "%s/%s", dir, name);
    if (access(path, F_OK) == 0) return;
    snprintf(path, 4096, "%s/%s", dir, other_name);
    if (access(path, F_OK) == 0) return;
    snprintf(path, 4096, "%s/%s", dir, name);
}

int bpe_load(Bpe** out, const char* dir, char err[256]) {
    *out = NULL;
    Bpe* b = calloc(1, sizeof(Bpe));
    if (!b) { set_err(err, "bpe: out of memory"); return 1; }
    uint32_t char_of_byte[256];
    int byte_of_char[324];
    byte_table(char_of_byte, byte_of_char);

    /* OpenAI's names, else Hugging Face's for the same two files (vocab.json, merges.txt) */
    char enc_path[4096], path[4096];
    pick_file(enc_path, dir, "encoder.json", "vocab.json");
    if (load_encoder(b, enc_path, byte_of_char, err) != 0) { bpe_free(b); return 1; }
    pick_file(path, dir, "vocab.bpe", "merges.txt");
    if (load_merges(b, path, enc_path, byte_of_char, err) != 0) { bpe_free(b); return 1; }

    int ec;
    PCRE2_SIZE eo;
    b->re = pcre2_compile((PCRE2_SPTR)bpe_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        set_err(err, "bpe: the GPT-2 pattern does not compile at offset %zu: %s", (size_t)eo, msg);
        bpe_free(b);
        return 1;
    }
    pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE);   /* without JIT, pcre2_match interprets */
    b->md = pcre2_match_data_create_from_pattern(b->re, NULL);
    if (!b->md) {
        set_err(err, "bpe: out of memory");
        bpe_free(b);
        return 1;
    }
    *out = b;
    return 0;
}

void bpe_free(Bpe* b) {
    if (!b) return;
    free(b->tok_off);
    free(b->tok_bytes);
    free(b->pairs);
    if (b->md) pcre2_match_data_free(b->md);
    if (b->re) pcre2_code_free(b->re);
    free(b->cache);
    free(b->cache_bytes);
    free(b->cache_toks);
    free(b->sym);
    free(b->prev);
    free(b->next);
    free(b->heap);
    free(b);
}

int bpe_vocab_size(const Bpe* b) { return b->vocab_size; }
int bpe_eot(const Bpe* b) { return b->eot; }
int bpe_max_token_bytes(const Bpe* b) { return b->max_token_bytes; }

int bpe_decode(const Bpe* b, int id, unsigned char* buf, size_t cap) {
    if (id < 0 || id >= b->vocab_size) return -1;
    size_t n = b->tok_off[id + 1] - b->tok_off[id];
    if (n > cap) return -1;
    memcpy(buf, b->tok_bytes + b->tok_off[id], n);
    return (int)n;
}

/* ---- the merge loop ------------------------------------------------------------------------- */

#define DEAD (-2)   /* prev[] of a symbol merged into its left neighbour */

static int heap_less(HeapEntry x, HeapEntry y) {
    return x.rank < y.rank || (x.rank == y.rank && x.left < y.left);
}

static void heap_push(HeapEntry* h, size_t* n, HeapEntry e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(e, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static HeapEntry heap_pop(HeapEntry* h, size_t* n) {
    HeapEntry top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static int grow_scratch(Bpe* b, size_t m) {
    if (m <= b->scratch_cap) return 0;
    size_t cap = b->scratch_cap ? b->scratch_cap : 64;
    while (cap < m) cap *= 2;
    uint16_t* sym = realloc(b->sym, cap * sizeof(uint16_t));
    if (sym) b->sym = sym;
    int32_t* prev = realloc(b->prev, cap * sizeof(int32_t));
    if (prev) b->prev = prev;
    int32_t* next = realloc(b->next, cap * sizeof(int32_t));
    if (next) b->next = next;
    HeapEntry* heap = realloc(b->heap, 3 * cap * sizeof(HeapEntry));
    if (heap) b->heap = heap;
    if (!sym || !prev || !next || !heap) return 1;
    b->scratch_cap = cap;
    return 0;
}

/* Pushes the pair (l, r) when it has a merge. */
static void push_pair(const Bpe* b, HeapEntry* h, size_t* nh, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const PairSlot* p = pair_find(b, b->sym[l], b->sym[r]);
    if (p) heap_push(h, nh, (HeapEntry){p->rank, l, r});
}

/* One piece (m >= 1 bytes) -> ids in out; returns their number. */
static size_t merge_piece(Bpe* b, const unsigned char* s, size_t m, uint16_t* out) {
    if (m == 1) { out[0] = b->byte_id[s[0]]; return 1; }
    if (grow_scratch(b, m) != 0) {   /* out of memory: abort rather than encode wrongly */
        fprintf(stderr, "bpe: out of memory encoding a piece of %zu bytes\n", m);
        abort();
    }
    uint16_t* sym = b->sym;
    int32_t *prev = b->prev, *next = b->next;
    HeapEntry* h = b->heap;
    size_t nh = 0;
    for (size_t i = 0; i < m; i++) {
        sym[i] = b->byte_id[s[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < m; i++) push_pair(b, h, &nh, (int32_t)i, (int32_t)i + 1);
    while (nh > 0) {
        HeapEntry e = heap_pop(h, &nh);
        /* still the same two adjacent symbols? (one merged away, or changed since: skip) */
        if (prev[e.left] == DEAD || next[e.left] != e.right || prev[e.right] == DEAD) continue;
        const PairSlot* p = pair_find(b, sym[e.left], sym[e.right]);
        if (!p || p->rank != e.rank) continue;
        int32_t l = e.left, r = e.right;
        sym[l] = (uint16_t)p->merged;
        prev[r] = DEAD;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        push_pair(b, h, &nh, prev[l], l);
        push_pair(b, h, &nh, l, next[l]);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) out[k++] = sym[i];
    return k;
}

/* The cache in front of merge_piece. */
static size_t encode_piece(Bpe* b, const unsigned char* s, size_t m, uint16_t* out) {
    if (m == 1 || m > BPE_CACHE_MAX_PIECE) return merge_piece(b, s, m, out);
    if (!b->cache && !b->cache_failed) {   /* allocated on first use: 12 MB */
        b->cache = calloc(BPE_CACHE_SLOTS, sizeof(CacheSlot));
        b->cache_bytes = malloc((size_t)BPE_CACHE_SLOTS / 2 * BPE_CACHE_MAX_PIECE);
        b->cache_toks = malloc((size_t)BPE_CACHE_SLOTS / 2 * BPE_CACHE_MAX_PIECE * sizeof(uint16_t));
        if (!b->cache || !b->cache_bytes || !b->cache_toks) {
            free(b->cache); free(b->cache_bytes); free(b->cache_toks);
            b->cache = NULL; b->cache_bytes = NULL; b->cache_toks = NULL;
            b->cache_failed = 1;
        }
    }
    if (!b->cache) return merge_piece(b, s, m, out);
    uint64_t hash = fnv1a(s, m);
    uint32_t i = (uint32_t)hash & (BPE_CACHE_SLOTS - 1);
    for (;; i = (i + 1) & (BPE_CACHE_SLOTS - 1)) {
        CacheSlot* c = &b->cache[i];
        if (c->blen == 0) break;
        if (c->hash == hash && c->blen == m && memcmp(b->cache_bytes + c->boff, s, m) == 0) {
            memcpy(out, b->cache_toks + c->toff, c->ntok * sizeof(uint16_t));
            return c->ntok;
        }
    }
    size_t k = merge_piece(b, s, m, out);
    if (b->cache_used >= BPE_CACHE_SLOTS / 2) {   /* full: start over */
        memset(b->cache, 0, BPE_CACHE_SLOTS * sizeof(CacheSlot));
        b->cache_used = 0;
        b->cache_bytes_len = b->cache_toks_len = 0;
        i = (uint32_t)hash & (BPE_CACHE_SLOTS - 1);
    }
    CacheSlot* c = &b->cache[i];
    *c = (CacheSlot){hash, (uint32_t)b->cache_bytes_len, (uint32_t)b->cache_toks_len, (uint16_t)m,
                     (uint16_t)k};
    memcpy(b->cache_bytes + b->cache_bytes_len, s, m);
    memcpy(b->cache_toks + b->cache_toks_len, out, k * sizeof(uint16_t));
    b->cache_bytes_len += m;
    b->cache_toks_len += k;
    b->cache_used++;
    return k;
}

/* ---- pre-tokenising ------------------------------------------------------------------------- */

/* The next piece at or after pos: its end, and in *start where it begins (a run of invalid UTF-8
 * before the next match is a piece of its own). */
static size_t next_piece(Bpe* b, const unsigned char* text, size_t n, size_t pos, size_t* start) {
    int rc = pcre2_match(b->re, text, n, pos, 0, b->md, NULL);
    if (rc < 0) { *start = pos; return n; }   /* no match: the rest is one gap */
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(b->md);
    if (ov[0] > pos) { *start = pos; return ov[0]; }
    *start = ov[0];
    return ov[1];
}

size_t bpe_pieces(Bpe* b, const unsigned char* text, size_t n, size_t* ends) {
    size_t k = 0, pos = 0, start;
    while (pos < n) {
        pos = next_piece(b, text, n, pos, &start);
        ends[k++] = pos;
    }
    return k;
}

size_t bpe_encode(Bpe* b, const unsigned char* text, size_t n, uint16_t* out) {
    size_t k = 0, pos = 0, start;
    while (pos < n) {
        size_t end = next_piece(b, text, n, pos, &start);
        k += encode_piece(b, text + start, end - start, out + k);
        pos = end;
    }
    return k;
}

/* ---- safe cuts ------------------------------------------------------------------------------ */

static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Does text[0, k) end with a valid UTF-8 character that is not white space? */
static int ends_with_non_space(const unsigned char* text, size_t k) {
    unsigned char last = text[k - 1];
    if (last < 0x80) return !is_white_space(last);
    size_t j = k - 1, back = 0;
    while (j > 0 && back < 3 && (text[j] & 0xC0) == 0x80) { j--; back++; }
    unsigned char lead = text[j];
    size_t len = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead < 0xE0 ? 2 : 0;
    if (len == 0 || len != k - j) return 0;
    uint32_t c = lead & (0x7F >> len);
    for (size_t i = j + 1; i < k; i++) {
        if ((text[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (text[i] & 0x3F);
    }
    /* overlong, surrogate or out of range: not valid UTF-8 */
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
        (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return !is_white_space(c);
}

size_t bpe_safe_cut(const unsigned char* text, size_t n) {
    for (size_t k = n; k-- > 1;) {
        if ((text[k] == ' ' || text[k] == '\n') && ends_with_non_space(text, k)) return k;
    }
    return 0;
}
