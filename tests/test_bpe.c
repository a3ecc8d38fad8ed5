/* tests/test_bpe.c — the GPT-2 tokenizer (data/bpe.h, data/tokenizer.h) and `prepare --tokenizer`.
 *
 *   test_bpe                          self-contained checks (no network, no GPT-2 files): the
 *                                     pre-tokeniser against hand-derived pieces of GPT-2's
 *                                     pattern; the merge loop against hand-derived ids and
 *                                     against a plain O(m^2) reference BPE written here, over a
 *                                     small vocabulary this test writes; the loader's refusals;
 *                                     cutting a stream; round trips; prepare (byte and gpt2) over
 *                                     inputs of several MB, token for token.
 *   test_bpe --oracle DIR SHARD|- DOC IDS [DOC IDS ...]
 *                                     GPT-2's real files in DIR against the ids the npm package's
 *                                     JavaScript encoder gave (tests/test_bpe.sh runs node): each
 *                                     DOC encoded whole must give its IDS (uint16 LE, no header);
 *                                     pinned ids; decode(encode(x)) == x; stream cuts; and SHARD
 *                                     (written by ./train prepare on the DOCs; "-": none) must be
 *                                     EOT ids1 EOT ids2 ...
 *
 * Files live in a fresh mkdtemp folder under /tmp, removed at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tests/test.h"
#include "data/bpe.h"
#include "data/tokenizer.h"
#include "data/shards.h"
#include "data/prepare.h"

#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

/* ---- helpers ------------------------------------------------------------------------------- */

static void path_in(char* out, size_t cap, const char* name) { snprintf(out, cap, "%s/%s", tmpdir, name); }
static int contains(const char* s, const char* sub) { return strstr(s, sub) != NULL; }

static unsigned char* slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static void spit(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static int rm_entry(const char* p, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Index of the first difference of two id arrays (the shorter length when one is a prefix);
 * equal arrays give (size_t)-1. */
static size_t first_diff(const uint16_t* a, size_t na, const uint16_t* b, size_t nb) {
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++) if (a[i] != b[i]) return i;
    return na == nb ? (size_t)-1 : n;
}

/* Decodes ids back to bytes (EOT gives nothing); returns a malloc'ed buffer, *n its length. */
static unsigned char* decode_all(const Tokenizer* tok, const uint16_t* ids, size_t k, size_t* n,
                                 int* bad) {
    unsigned char* out = malloc(k * (size_t)tok->max_token_bytes + 1);
    size_t m = 0;
    *bad = 0;
    for (size_t i = 0; i < k; i++) {
        int w = tokenizer_decode(tok, ids[i], out + m, (size_t)tok->max_token_bytes);
        if (w < 0) (*bad)++; else m += (size_t)w;
    }
    *n = m;
    return out;
}

/* ---- a small vocabulary, written as GPT-2's files ------------------------------------------- */

/* GPT-2's byte -> character table, written here from its definition: bytes 33..126, 161..172 and
 * 174..255 are their own character; the other 68 bytes take U+0100, U+0101, ... in byte order. */
static unsigned spell_char(unsigned char b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) n++;
    return 256 + n;
}

/* bytes -> a JSON string body (\uXXXX for everything outside printable ASCII, and for " and \). */
static void json_spell(FILE* f, const unsigned char* s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned c = spell_char(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') fputc((int)c, f);
        else fprintf(f, "\\u%04x", c);
    }
}

/* bytes -> GPT-2's UTF-8 spelling (as vocab.bpe holds it). */
static void utf8_spell(FILE* f, const unsigned char* s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned c = spell_char(s[i]);
        if (c < 0x80) fputc((int)c, f);
        else { fputc((int)(0xC0 | c >> 6), f); fputc((int)(0x80 | (c & 0x3F)), f); }
    }
}

typedef struct { const char* a; const char* b; } Merge;

/* The synthetic vocabulary: its merges in rank order (rank = index). */
static const Merge small_merges[] = {
    {"b", "c"}, {"a", "b"}, {"a", "a"}, {"aa", "aa"}, {" ", "a"}, {"x", "y"}, {"xy", "z"},
    {"\xc3", "\xa9"}, {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
    /* so that how white space is split into pieces shows in the ids: */
    {" ", " "}, {"\n", "\n"}, {"\xc2", "\xa0"}, {"\xc2\xa0", " "},
    {"\xe3", "\x80"}, {"\xe3\x80", "\x80"}, {"\xe3\x80\x80", " "},
};
#define N_SMALL_MERGES (int)(sizeof(small_merges) / sizeof(small_merges[0]))

/* Ids deliberately unlike GPT-2's: byte b is id (7b + 3) mod 256; merge r makes id
 * 256 + (R - 1 - r); one unreachable token "zz"; EOT last. */
static int small_byte_id(unsigned b) { return (int)((7 * b + 3) % 256); }
static int small_merge_id(int r, int R) { return 256 + (R - 1 - r); }

/* Writes encoder.json and vocab.bpe for `merges` (R of them) into dir. Returns the vocab size. */
static int write_vocab(const char* dir, const Merge* merges, int R) {
    char p[400];
    mkdir(dir, 0755);
    snprintf(p, sizeof(p), "%s/encoder.json", dir);
    FILE* f = fopen(p, "wb");
    fputc('{', f);
    for (unsigned b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        fputc('"', f); json_spell(f, &c, 1); fprintf(f, "\": %d, ", small_byte_id(b));
    }
    for (int r = 0; r < R; r++) {
        char m[64];
        snprintf(m, sizeof(m), "%s%s", merges[r].a, merges[r].b);
        fputc('"', f); json_spell(f, (const unsigned char*)m, strlen(m));
        fprintf(f, "\": %d, ", small_merge_id(r, R));
    }
    fprintf(f, "\"zz\": %d, \"<|endoftext|>\": %d}", 256 + R, 257 + R);
    fclose(f);
    snprintf(p, sizeof(p), "%s/vocab.bpe", dir);
    f = fopen(p, "wb");
    fprintf(f, "#version: 0.2\n");
    for (int r = 0; r < R; r++) {
        utf8_spell(f, (const unsigned char*)merges[r].a, strlen(merges[r].a));
        fputc(' ', f);
        utf8_spell(f, (const unsigned char*)merges[r].b, strlen(merges[r].b));
        fputc('\n', f);
    }
    fclose(f);
    return 258 + R;
}

/* ---- a plain reference BPE (GPT-2's encoder.py loop, on strings) ---------------------------- */

/* Symbols are NUL-free byte strings here. Merges: best rank first; every occurrence of the best
 * pair, left to right; repeat. Returns the number of symbols, written into sym (strdup'ed). */
static int ref_bpe(const char* piece, const Merge* merges, int R, char** sym) {
    int m = (int)strlen(piece);
    for (int i = 0; i < m; i++) { sym[i] = malloc(2); sym[i][0] = piece[i]; sym[i][1] = 0; }
    for (;;) {
        int best = R;
        for (int i = 0; i + 1 < m; i++)
            for (int r = 0; r < best; r++)
                if (!strcmp(sym[i], merges[r].a) && !strcmp(sym[i + 1], merges[r].b)) { best = r; break; }
        if (best == R) break;
        int k = 0;
        for (int i = 0; i < m;) {
            if (i + 1 < m && !strcmp(sym[i], merges[best].a) && !strcmp(sym[i + 1], merges[best].b)) {
                char* s = malloc(strlen(sym[i]) + strlen(sym[i + 1]) + 1);
                strcpy(s, sym[i]);
                strcat(s, sym[i + 1]);
                free(sym[i]); free(sym[i + 1]);
                sym[k++] = s;
                i += 2;
            } else {
                sym[k++] = sym[i++];
            }
        }
        m = k;
    }
    return m;
}

/* ---- the pre-tokeniser ---------------------------------------------------------------------- */

typedef struct { const char* text; const char* pieces[8]; } PieceCase;

/* Each expected split derived by hand from the pattern (data/bpe.h): first matching alternative
 * at each position; \s = Unicode White_Space. */
static const PieceCase piece_cases[] = {
    {"Hello world", {"Hello", " world"}},
    {"I'll don't", {"I", "'ll", " don", "'t"}},
    {"'tis 'S", {"'t", "is", " '", "S"}},                   /* 's/'t only lower case */
    {"a  b", {"a", " ", " b"}},                              /* \s+(?!\S) leaves the last space */
    {"x\n\ny", {"x", "\n", "\n", "y"}},
    {"a\r\n\r\nb", {"a", "\r\n\r", "\n", "b"}},
    {"end   ", {"end", "   "}},                              /* trailing run: one piece */
    {"123abc 42", {"123", "abc", " 42"}},
    {"?!  ...", {"?!", " ", " ..."}},
    {"<|endoftext|>", {"<|", "endoftext", "|>"}},            /* text, never EOT */
    {"a\xc2\xa0" "b", {"a", "\xc2\xa0", "b"}},               /* U+00A0 is white space, not ' ' */
    {"\xe3\x80\x80\xe3\x80\x80x", {"\xe3\x80\x80", "\xe3\x80\x80", "x"}},   /* U+3000 */
    {"x \xc2\x85\xc2\x85y", {"x", " \xc2\x85", "\xc2\x85", "y"}},         /* U+0085: white space */
    {" \xe1\xa0\x8e" "b", {" \xe1\xa0\x8e", "b"}},           /* U+180E: not white space */
    {"e\xcc\x81", {"e", "\xcc\x81"}},                        /* combining mark: not a letter */
    {"\xc2\xbd\xc2\xb2\xe2\x85\xab\xd9\xa3", {"\xc2\xbd\xc2\xb2\xe2\x85\xab\xd9\xa3"}},  /* ½²Ⅻ٣: \p{N} */
    {"\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!", {"\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!"}},
    {"ab\xff" "cd", {"ab", "\xff", "cd"}},                   /* invalid UTF-8: a piece of its own */
    {"\xe4\xb8 x", {"\xe4\xb8", " x"}},                      /* truncated character */
};

static void test_pieces(Bpe* b) {
    int bad = 0, n_cases = (int)(sizeof(piece_cases) / sizeof(piece_cases[0]));
    for (int c = 0; c < n_cases; c++) {
        const PieceCase* pc = &piece_cases[c];
        size_t n = strlen(pc->text), ends[64];
        size_t k = bpe_pieces(b, (const unsigned char*)pc->text, n, ends);
        int ok = 1;
        size_t want = 0;
        while (want < 8 && pc->pieces[want]) want++;
        if (k != want) ok = 0;
        for (size_t i = 0, start = 0; ok && i < k; start = ends[i], i++) {
            size_t len = ends[i] - start;
            if (len != strlen(pc->pieces[i]) || memcmp(pc->text + start, pc->pieces[i], len) != 0) ok = 0;
        }
        if (!ok) {
            bad++;
            printf("# case %d: %zu pieces (expected %zu):", c, k, want);
            for (size_t i = 0, start = 0; i < k; start = ends[i], i++) {
                printf(" [");
                for (size_t j = start; j < ends[i]; j++) {
                    unsigned char ch = (unsigned char)pc->text[j];
                    if (ch >= 0x20 && ch < 0x7f) putchar(ch); else printf("\\x%02x", ch);
                }
                printf("]");
            }
            printf("\n");
        }
    }
    expect(bad == 0, "pretokenizer_splits_as_gpt2_pattern_with_unicode_white_space",
           "%d of %d hand-derived cases differ", bad, n_cases);
}

/* ---- the merge loop ------------------------------------------------------------------------- */

typedef struct { const char* text; const char* tokens[6]; } MergeCase;

/* Hand-derived from small_merges (rank = position in the list). */
static const MergeCase merge_cases[] = {
    {"abc", {"a", "bc"}},            /* (b,c) ranks before (a,b) */
    {"aaa", {"aa", "a"}},            /* occurrences merge left to right */
    {"aaaa", {"aaaa"}},              /* a a a a -> aa aa -> aaaa */
    {"aaaaa", {"aaaa", "a"}},
    {"abab", {"ab", "ab"}},
    {"a a", {"a", " a"}},            /* pieces first: "a", " a" */
    {"xyz", {"xyz"}},
    {"hello", {"hello"}},            /* he, ll, hell, hello */
    {"\xc3\xa9", {"\xc3\xa9"}},      /* é: a merge of two bytes */
    {"zz", {"z", "z"}},              /* a token no merge makes is never produced */
    {"x    a", {"x", "  ", " ", " a"}},   /* pieces "x", "   ", " a"; the run merges pairwise */
};

static int small_token_id(const char* s) {
    if (strlen(s) == 1) return small_byte_id((unsigned char)s[0]);
    for (int r = 0; r < N_SMALL_MERGES; r++) {
        char m[64];
        snprintf(m, sizeof(m), "%s%s", small_merges[r].a, small_merges[r].b);
        if (!strcmp(m, s)) return small_merge_id(r, N_SMALL_MERGES);
    }
    return -1;
}

static void test_merges(const Tokenizer* tok) {
    int bad = 0, n_cases = (int)(sizeof(merge_cases) / sizeof(merge_cases[0]));
    for (int c = 0; c < n_cases; c++) {
        const MergeCase* mc = &merge_cases[c];
        uint16_t got[64];
        size_t k = tokenizer_encode(tok, (const unsigned char*)mc->text, strlen(mc->text), got);
        size_t want = 0;
        while (want < 6 && mc->tokens[want]) want++;
        int ok = k == want;
        for (size_t i = 0; ok && i < k; i++) ok = got[i] == small_token_id(mc->tokens[i]);
        if (!ok) {
            bad++;
            printf("# \"%s\":", mc->text);
            for (size_t i = 0; i < k; i++) printf(" %d", got[i]);
            printf(" (expected");
            for (size_t i = 0; i < want; i++) printf(" %d", small_token_id(mc->tokens[i]));
            printf(")\n");
        }
    }
    expect(bad == 0, "bpe_merges_best_rank_first_all_occurrences_left_to_right",
           "%d of %d hand-derived encodings differ", bad, n_cases);
}

/* Random merge tables over {a, b, c} (each merge of two existing tokens, so parts are made before
 * they are used), random letter strings: the heap loop against ref_bpe. */
static void test_merges_vs_reference(void) {
    int tables = 6, strings = 0, bad = 0;
    for (int t = 0; t < tables; t++) {
        enum { R = 40 };
        static char store[R][64];
        Merge merges[R];
        const char* toks[3 + R] = {"a", "b", "c"};
        int ntok = 3, r = 0;
        while (r < R) {
            const char* x = toks[(int)(test_uniform() * ntok)];
            const char* y = toks[(int)(test_uniform() * ntok)];
            char m[64];
            if (strlen(x) + strlen(y) >= sizeof(m)) continue;
            memcpy(m, x, strlen(x));
            strcpy(m + strlen(x), y);
            int dup = 0;
            for (int i = 0; i < ntok; i++) dup |= !strcmp(toks[i], m);
            if (dup) continue;
            strcpy(store[r], m);
            merges[r] = (Merge){x, y};
            toks[ntok++] = store[r];
            r++;
        }
        char dir[300], name[32], err[256];
        snprintf(name, sizeof(name), "rand%d", t);
        path_in(dir, sizeof(dir), name);
        write_vocab(dir, merges, R);
        Tokenizer tok;
        if (tokenizer_init_gpt2(&tok, dir, err) != 0) {
            expect(0, "bpe_merge_loop_matches_plain_reference_bpe", "load: %s", err);
            return;
        }
        for (int s = 0; s < 300; s++) {
            char piece[400];
            int len = 1 + (int)(test_uniform() * (s < 250 ? 24 : 380));
            double pa = test_uniform();   /* skewed letter mixes: long runs of one letter too */
            for (int i = 0; i < len; i++) {
                double u = test_uniform();
                piece[i] = u < pa ? 'a' : u < pa + (1 - pa) / 2 ? 'b' : 'c';
            }
            piece[len] = 0;
            char* sym[400];
            int m = ref_bpe(piece, merges, R, sym);
            uint16_t got[400];
            size_t k = tokenizer_encode(&tok, (const unsigned char*)piece, (size_t)len, got);
            int ok = (int)k == m;
            for (int i = 0; i < m; i++) {
                if (ok) {
                    int id = -1;
                    if (strlen(sym[i]) == 1) id = small_byte_id((unsigned char)sym[i][0]);
                    for (int q = 0; q < R && id < 0; q++) if (!strcmp(store[q], sym[i])) id = small_merge_id(q, R);
                    ok = got[i] == id;
                }
                free(sym[i]);
            }
            strings++;
            if (!ok && bad++ < 3) printf("# table %d: \"%s\" -> %zu ids, reference %d symbols\n", t, piece, k, m);
        }
        tokenizer_free(&tok);
    }
    expect(bad == 0, "bpe_merge_loop_matches_plain_reference_bpe",
           "%d of %d random strings (up to 380 letters, %d random merge tables) differ", bad, strings, tables);
}

/* ---- the loader ----------------------------------------------------------------------------- */

static void test_loader(const char* good_dir) {
    char err[256], dir[300], p[400];
    Tokenizer tok;
    int bad = 0, cases = 0;
    char enc_good[400], bpe_good[400];
    snprintf(enc_good, sizeof(enc_good), "%s/encoder.json", good_dir);
    snprintf(bpe_good, sizeof(bpe_good), "%s/vocab.bpe", good_dir);
    size_t ne, nb;
    unsigned char* enc = slurp(enc_good, &ne);
    unsigned char* bpe = slurp(bpe_good, &nb);

    /* (what to write, what the message must name) */
    struct { const char* name; const char* encoder; const char* merges; const char* needle; } c[] = {
        {"not_json", "[1, 2", NULL, "not a JSON object"},
        {"too_few", "{\"a\": 0}", NULL, "1 tokens"},
        {"three_words", NULL, "#version: 0.2\na b c\n", "vocab.bpe:2: expected two tokens"},
        {"unknown_result", NULL, "#version: 0.2\nq q\n", "vocab.bpe:2: the merged result is not a token"},
        {"before_made", NULL, "#version: 0.2\nhe ll\nh e\nl l\n", "vocab.bpe:2: uses a token before"},
        {"made_twice", NULL, "#version: 0.2\nb c\nb c\n", "vocab.bpe:3: its result is already made"},
        {"not_alphabet", NULL, "#version: 0.2\na \xe2\x82\xac\n", "vocab.bpe:2: not spelled in GPT-2's"},
    };
    int nc = (int)(sizeof(c) / sizeof(c[0]));
    for (int i = 0; i < nc; i++) {
        path_in(dir, sizeof(dir), c[i].name);
        mkdir(dir, 0755);
        snprintf(p, sizeof(p), "%s/encoder.json", dir);
        if (c[i].encoder) spit(p, c[i].encoder, strlen(c[i].encoder)); else spit(p, enc, ne);
        snprintf(p, sizeof(p), "%s/vocab.bpe", dir);
        if (c[i].merges) spit(p, c[i].merges, strlen(c[i].merges)); else spit(p, bpe, nb);
        err[0] = 0;
        int rc = tokenizer_init_gpt2(&tok, dir, err);
        cases++;
        if (rc == 0 || !contains(err, c[i].needle) || !contains(err, dir)) {
            bad++;
            printf("# %s: rc %d: \"%s\"\n", c[i].name, rc, err);
        }
        if (rc == 0) tokenizer_free(&tok);
    }
    /* a byte without a single-byte token: the good encoder with token "q" renamed "qq" */
    {
        path_in(dir, sizeof(dir), "no_q");
        mkdir(dir, 0755);
        char* e2 = malloc(ne + 2);
        memcpy(e2, enc, ne);
        e2[ne] = 0;
        char* q = strstr(e2, "\"q\": ");
        if (q) memmove(q + 2, q + 1, strlen(q + 1) + 1);   /* "q" -> "qq" */
        snprintf(p, sizeof(p), "%s/encoder.json", dir);
        spit(p, e2, strlen(e2));
        snprintf(p, sizeof(p), "%s/vocab.bpe", dir);
        spit(p, "#version: 0.2\n", 14);
        int rc = tokenizer_init_gpt2(&tok, dir, err);
        cases++;
        if (rc == 0 || !contains(err, "byte 0x71 has no single-byte token")) {
            bad++;
            printf("# no_q: rc %d: \"%s\"\n", rc, err);
        }
        if (rc == 0) tokenizer_free(&tok);
        free(e2);
    }
    /* an id given twice: EOT's id replaced by 3 */
    {
        path_in(dir, sizeof(dir), "id_twice");
        mkdir(dir, 0755);
        char* e2 = malloc(ne + 16);
        memcpy(e2, enc, ne);
        e2[ne] = 0;
        char* x = strstr(e2, "<|endoftext|>\": ");
        if (x) strcpy(x + strlen("<|endoftext|>\": "), "3}");
        snprintf(p, sizeof(p), "%s/encoder.json", dir);
        spit(p, e2, strlen(e2));
        snprintf(p, sizeof(p), "%s/vocab.bpe", dir);
        spit(p, bpe, nb);
        int rc = tokenizer_init_gpt2(&tok, dir, err);
        cases++;
        if (rc == 0 || !contains(err, "id 3 is given twice")) {
            bad++;
            printf("# id_twice: rc %d: \"%s\"\n", rc, err);
        }
        if (rc == 0) tokenizer_free(&tok);
        free(e2);
    }
    /* no end-of-text token */
    {
        path_in(dir, sizeof(dir), "no_eot");
        mkdir(dir, 0755);
        char* e2 = malloc(ne + 1);
        memcpy(e2, enc, ne);
        e2[ne] = 0;
        char* x = strstr(e2, "<|endoftext|>");
        if (x) x[2] = 'E';
        snprintf(p, sizeof(p), "%s/encoder.json", dir);
        spit(p, e2, strlen(e2));
        snprintf(p, sizeof(p), "%s/vocab.bpe", dir);
        spit(p, bpe, nb);
        int rc = tokenizer_init_gpt2(&tok, dir, err);
        cases++;
        if (rc == 0 || !contains(err, "no \"<|endoftext|>\" token")) {
            bad++;
            printf("# no_eot: rc %d: \"%s\"\n", rc, err);
        }
        if (rc == 0) tokenizer_free(&tok);
        free(e2);
    }
    /* a missing folder names the file and how to get it */
    path_in(dir, sizeof(dir), "nowhere");
    int rc = tokenizer_init_gpt2(&tok, dir, err);
    cases++;
    if (rc == 0 || !contains(err, "encoder.json") || !contains(err, "get_gpt2_bpe.sh")) {
        bad++;
        printf("# missing: rc %d: \"%s\"\n", rc, err);
    }
    expect(bad == 0, "bpe_loader_refuses_bad_files_with_one_line_naming_the_file",
           "%d of %d bad vocabularies not refused as expected", bad, cases);

    /* Hugging Face's names for the same files: vocab.json and merges.txt */
    {
        path_in(dir, sizeof(dir), "hf_names");
        mkdir(dir, 0755);
        snprintf(p, sizeof(p), "%s/vocab.json", dir);
        spit(p, enc, ne);
        snprintf(p, sizeof(p), "%s/merges.txt", dir);
        spit(p, bpe, nb);
        Tokenizer a, h;
        int ra = tokenizer_init_gpt2(&a, good_dir, err), rh = tokenizer_init_gpt2(&h, dir, err);
        uint16_t ia[64], ih[64];
        const char* probe = "hello aaaa abc xyz";
        size_t ka = ra == 0 ? tokenizer_encode(&a, (const unsigned char*)probe, strlen(probe), ia) : 0;
        size_t kh = rh == 0 ? tokenizer_encode(&h, (const unsigned char*)probe, strlen(probe), ih) : 1;
        expect(ra == 0 && rh == 0 && ka == kh && memcmp(ia, ih, ka * sizeof(uint16_t)) == 0 &&
               a.vocab_size == h.vocab_size, "bpe_dir_may_use_hugging_face_file_names",
               "encoder.json+vocab.bpe rc %d, vocab.json+merges.txt rc %d, %zu / %zu ids", ra, rh, ka, kh);
        if (ra == 0) tokenizer_free(&a);
        if (rh == 0) tokenizer_free(&h);
    }
    free(enc);
    free(bpe);

    /* by name: byte refuses a BPE folder; gpt2 honours SEEDGPT_BPE_DIR; unknown names refused */
    int rb = tokenizer_open(&tok, "byte", good_dir, err);
    int byte_msg = contains(err, "--bpe-dir");
    setenv("SEEDGPT_BPE_DIR", good_dir, 1);
    int rg = tokenizer_init(&tok, "gpt2", err);
    int vocab = rg == 0 ? tok.vocab_size : -1, eot = rg == 0 ? tok.eot : -1;
    if (rg == 0) tokenizer_free(&tok);
    unsetenv("SEEDGPT_BPE_DIR");
    int rx = tokenizer_open(&tok, "gpt3", NULL, err);
    expect(rb != 0 && byte_msg && rg == 0 && vocab == 258 + N_SMALL_MERGES &&
           eot == 257 + N_SMALL_MERGES && rx != 0 && contains(err, "gpt3"),
           "tokenizer_by_name_gpt2_reads_SEEDGPT_BPE_DIR_byte_refuses_bpe_dir",
           "byte+dir rc %d (names --bpe-dir %d); gpt2 rc %d vocab %d eot %d; gpt3 rc %d \"%s\"",
           rb, byte_msg, rg, vocab, eot, rx, err);
}

/* ---- streams, round trips, decode ------------------------------------------------------------ */

/* Random text from fragments that stress the pattern: spaces and newlines of every kind, letters,
 * digits, contractions, marks, emoji, invalid bytes. */
static size_t random_text(unsigned char* out, size_t n) {
    static const char* frag[] = {
        "a", "b", "c", "hello", "aaaa", " ", " ", "\n", "  ", "\t", "\r\n", "xyz", "'s", "'", "'ll",
        "\xc3\xa9", "\xc2\xa0", "\xe3\x80\x80", "\xc2\x85", "\xe1\xa0\x8e", "1", "22", ".", "!?",
        "\xff", "\xe4\xb8", "\xf0\x9f\x98\x80", "\xe4\xb8\xad\xe6\x96\x87", "e\xcc\x81", " a", "\x00",
    };
    int nf = (int)(sizeof(frag) / sizeof(frag[0]));
    size_t m = 0;
    while (m < n) {
        const char* f = frag[(int)(test_uniform() * nf)];
        size_t l = f[0] ? strlen(f) : 1;   /* "\x00": one NUL byte */
        if (m + l > n) break;
        memcpy(out + m, f, l);
        m += l;
    }
    return m;
}

/* Cutting at tokenizer_safe_cut of any prefix and encoding the two parts apart gives the ids of
 * the whole. */
static void check_safe_cuts(const Tokenizer* tok, const unsigned char* text, size_t n, int trials,
                            const char* name) {
    uint16_t* whole = malloc(n * sizeof(uint16_t));
    uint16_t* parts = malloc(n * sizeof(uint16_t));
    size_t kw = tokenizer_encode(tok, text, n, whole);
    int bad = 0, zero = 0;
    size_t min_k = n, max_gap = 0;
    for (int t = 0; t < trials; t++) {
        size_t p = 1 + (size_t)(test_uniform() * (double)(n - 1));
        size_t k = tokenizer_safe_cut(tok, text, p);
        if (k == 0) { zero++; continue; }
        size_t k1 = tokenizer_encode(tok, text, k, parts);
        size_t k2 = tokenizer_encode(tok, text + k, n - k, parts + k1);
        if (k > p || first_diff(parts, k1 + k2, whole, kw) != (size_t)-1) bad++;
        if (k < min_k) min_k = k;
        if (p - k > max_gap) max_gap = p - k;
    }
    expect(bad == 0 && zero < trials / 10, name,
           "%d of %d cuts change the ids (%d prefixes without a cut; longest carried tail %zu bytes)",
           bad, trials, zero, max_gap);
    free(whole);
    free(parts);
}

static void check_roundtrip(const Tokenizer* tok, const unsigned char* text, size_t n, const char* name) {
    uint16_t* ids = malloc(n * sizeof(uint16_t) + 2);
    size_t k = tokenizer_encode(tok, text, n, ids);
    int bad, eot_seen = 0;
    for (size_t i = 0; i < k; i++) eot_seen += ids[i] == tok->eot;
    size_t m;
    unsigned char* back = decode_all(tok, ids, k, &m, &bad);
    expect(bad == 0 && eot_seen == 0 && m == n && memcmp(back, text, n) == 0, name,
           "%zu bytes -> %zu ids -> %zu bytes, equal %d, %d bad decodes, %d EOTs produced", n, k, m,
           m == n && memcmp(back, text, n) == 0, bad, eot_seen);
    free(back);
    free(ids);
}

static void test_decode_edges(const Tokenizer* tok) {
    unsigned char buf[256];
    int we = tokenizer_decode(tok, tok->eot, buf, sizeof(buf));
    int wn = tokenizer_decode(tok, -1, buf, sizeof(buf));
    int wv = tokenizer_decode(tok, tok->vocab_size, buf, sizeof(buf));
    int hello = small_token_id("hello");
    int wc = tokenizer_decode(tok, hello, buf, 4);
    int wh = tokenizer_decode(tok, hello, buf, 5);
    expect(we == 0 && wn == -1 && wv == -1 && wc == -1 && wh == 5 && memcmp(buf, "hello", 5) == 0,
           "gpt2_decode_eot_is_empty_bad_id_and_small_buffer_refused",
           "eot -> %d, -1 -> %d, vocab -> %d, \"hello\" into 4 -> %d, into 5 -> %d", we, wn, wv, wc, wh);
}

/* ---- prepare ---------------------------------------------------------------------------------- */

static int run_prepare(int argc, const char** argv) {
    fflush(stdout);
    int rc = prepare_main(argc, (char**)argv);
    fflush(stdout);
    return rc;
}

static uint16_t* read_shard(const char* path, size_t* n) {
    uint16_t* t = NULL;
    char err[256];
    if (shard_read(path, 0, &t, n, err) != 0) { printf("# %s\n", err); *n = 0; return NULL; }
    return t;
}

/* The expected stream: EOT doc1 EOT doc2 ..., each document encoded whole. */
static uint16_t* expected_stream(const Tokenizer* tok, unsigned char** docs, const size_t* sizes,
                                 int nd, size_t* n) {
    size_t cap = nd;
    for (int d = 0; d < nd; d++) cap += sizes[d];
    uint16_t* s = malloc(cap * sizeof(uint16_t));
    size_t k = 0;
    for (int d = 0; d < nd; d++) {
        s[k++] = (uint16_t)tok->eot;
        k += tokenizer_encode(tok, docs[d], sizes[d], s + k);
    }
    *n = k;
    return s;
}

static void test_prepare(const char* small_dir, const Tokenizer* small) {
    /* byte: 2.5 MB of random bytes and a short document; chunks of 1 MB inside */
    size_t sz[2] = {2500000 + 17, 3001};
    unsigned char* docs[2];
    char paths[2][300];
    for (int d = 0; d < 2; d++) {
        docs[d] = malloc(sz[d]);
        for (size_t i = 0; i < sz[d]; i++) docs[d][i] = (unsigned char)(test_uniform() * 256);
        char name[32];
        snprintf(name, sizeof(name), "bytes%d.txt", d);
        path_in(paths[d], sizeof(paths[d]), name);
        spit(paths[d], docs[d], sz[d]);
    }
    char out[300], shard[400];
    path_in(out, sizeof(out), "prep_byte");
    const char* av[] = {"--val-frac", "0", paths[0], paths[1], out};
    int rc = run_prepare(5, av);
    snprintf(shard, sizeof(shard), "%s/train_000000.bin", out);
    size_t n;
    uint16_t* got = read_shard(shard, &n);
    size_t want_n = 2 + sz[0] + sz[1], bad = 0;
    if (got && n == want_n) {
        size_t q = 0;
        for (int d = 0; d < 2; d++) {
            bad += got[q++] != 256;
            for (size_t i = 0; i < sz[d]; i++) bad += got[q++] != docs[d][i];
        }
    }
    expect(rc == 0 && got && n == want_n && bad == 0, "prepare_byte_shard_is_eot_then_each_byte_over_several_chunks",
           "rc %d, %zu tokens (expected %zu = 2 EOTs + %zu + %zu bytes), %zu differ", rc, n, want_n,
           sz[0], sz[1], bad);
    free(got);

    /* gpt2 (the small vocabulary): 2.5 MB of cut-friendly text, then 1.2 MB without a single
     * place to cut (the reader must grow its buffer), then a short document */
    size_t tsz[3];
    unsigned char* tdocs[3];
    tdocs[0] = malloc(2500000);
    tsz[0] = random_text(tdocs[0], 2500000);
    tsz[1] = 1200000;
    tdocs[1] = malloc(tsz[1]);
    for (size_t i = 0; i < tsz[1]; i++) tdocs[1][i] = "abchelo"[(int)(test_uniform() * 7)];
    tdocs[2] = (unsigned char*)strdup("hello aaa abc\n\n");
    tsz[2] = strlen((char*)tdocs[2]);
    char tpaths[3][300];
    for (int d = 0; d < 3; d++) {
        char name[32];
        snprintf(name, sizeof(name), "text%d.txt", d);
        path_in(tpaths[d], sizeof(tpaths[d]), name);
        spit(tpaths[d], tdocs[d], tsz[d]);
    }
    size_t want;
    uint16_t* stream = expected_stream(small, tdocs, tsz, 3, &want);
    path_in(out, sizeof(out), "prep_gpt2");
    const char* ag[] = {"--tokenizer", "gpt2", "--bpe-dir", small_dir, "--val-frac", "0",
                        tpaths[0], tpaths[1], tpaths[2], out};
    double t0 = now();
    rc = run_prepare(10, ag);
    double dt = now() - t0;
    snprintf(shard, sizeof(shard), "%s/train_000000.bin", out);
    got = read_shard(shard, &n);
    size_t d = got ? first_diff(got, n, stream, want) : 0;
    expect(rc == 0 && got && d == (size_t)-1,
           "prepare_gpt2_shard_is_eot_then_each_document_encoded_whole",
           "rc %d, %zu tokens (expected %zu), first difference at %zd; %.1f MB in %.2f s", rc, n,
           want, d == (size_t)-1 ? (ssize_t)-1 : (ssize_t)d,
           (double)(tsz[0] + tsz[1] + tsz[2]) / 1e6, dt);
    free(got);
    free(stream);

    /* --bpe-dir with byte, and a missing BPE folder: one line each, status 2 */
    const char* ab[] = {"--bpe-dir", small_dir, tpaths[2], out};
    int rb = run_prepare(4, ab);
    char nowhere[300];
    path_in(nowhere, sizeof(nowhere), "nowhere");
    const char* am[] = {"--tokenizer", "gpt2", "--bpe-dir", nowhere, tpaths[2], out};
    int rm = run_prepare(6, am);
    expect(rb == 2 && rm == 2, "prepare_refuses_bpe_dir_with_byte_and_a_missing_bpe_dir",
           "byte + --bpe-dir: status %d; missing folder: status %d (see the two lines above)", rb, rm);

    for (int i = 0; i < 2; i++) free(docs[i]);
    for (int i = 0; i < 3; i++) free(tdocs[i]);
}

/* ---- the self-contained run ---------------------------------------------------------------- */

static void run_self_contained(void) {
    char dir[300], err[256];
    path_in(dir, sizeof(dir), "small");
    write_vocab(dir, small_merges, N_SMALL_MERGES);
    Tokenizer tok;
    if (tokenizer_init_gpt2(&tok, dir, err) != 0) {
        expect(0, "small_vocabulary_loads", "%s", err);
        return;
    }
    expect(tok.kind == TOKENIZER_GPT2 && tok.vocab_size == 258 + N_SMALL_MERGES &&
           tok.eot == 257 + N_SMALL_MERGES && tok.max_token_bytes == 13,
           "small_vocabulary_loads_with_its_eot_and_longest_token",
           "vocab %d (expected %d), eot %d (expected %d), longest token %d bytes (<|endoftext|>: 13)",
           tok.vocab_size, 258 + N_SMALL_MERGES, tok.eot, 257 + N_SMALL_MERGES, tok.max_token_bytes);
    test_pieces(tok.bpe);
    test_merges(&tok);
    test_merges_vs_reference();
    test_loader(dir);
    test_decode_edges(&tok);

    size_t n = 100000;
    unsigned char* text = malloc(n);
    n = random_text(text, n);
    check_safe_cuts(&tok, text, n, 300, "safe_cut_prefix_and_rest_encode_to_the_whole");
    check_roundtrip(&tok, text, n, "gpt2_decode_encode_is_identity_on_mixed_text");
    for (size_t i = 0; i < n; i++) text[i] = (unsigned char)(test_uniform() * 256);
    check_roundtrip(&tok, text, n, "gpt2_decode_encode_is_identity_on_random_bytes");
    free(text);

    test_prepare(dir, &tok);
    tokenizer_free(&tok);
}

/* ---- the oracle run ------------------------------------------------------------------------- */

static uint16_t* read_ids(const char* path, size_t* n) {
    size_t bytes;
    unsigned char* b = slurp(path, &bytes);
    if (!b) return NULL;
    *n = bytes / 2;
    uint16_t* ids = malloc(*n * sizeof(uint16_t) + 2);
    for (size_t i = 0; i < *n; i++) ids[i] = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
    free(b);
    return ids;
}

static int run_oracle(int argc, char** argv) {
    const char *dir = argv[2], *shard_path = argv[3];
    int ndocs = (argc - 4) / 2;
    char err[256];
    Tokenizer tok;
    double t0 = now();
    if (tokenizer_init_gpt2(&tok, dir, err) != 0) {
        expect(0, "gpt2_vocabulary_loads", "%s", err);
        return test_finish();
    }
    double t_load = now() - t0;
    expect(tok.vocab_size == 50257 && tok.eot == 50256, "gpt2_vocabulary_is_50257_with_eot_50256",
           "vocab %d, eot %d, longest token %d bytes, loaded in %.2f s", tok.vocab_size, tok.eot,
           tok.max_token_bytes, t_load);

    uint16_t hw[16];
    size_t khw = tokenizer_encode(&tok, (const unsigned char*)"Hello world", 11, hw);
    expect(khw == 2 && hw[0] == 15496 && hw[1] == 995, "gpt2_hello_world_is_15496_995",
           "%zu ids: %d %d", khw, khw > 0 ? hw[0] : -1, khw > 1 ? hw[1] : -1);

    /* each document encoded whole against the JavaScript ids; the expected shard alongside */
    size_t total_bytes = 0, total_ids = 0, stream_n = 0, stream_cap = 1;
    uint16_t* stream = malloc(2);
    int diff_docs = 0, rt_bad = 0;
    double t_enc = 0;
    for (int d = 0; d < ndocs; d++) {
        const char *doc_path = argv[4 + 2 * d], *ids_path = argv[5 + 2 * d];
        size_t n = 0, kj = 0;
        unsigned char* text = slurp(doc_path, &n);
        uint16_t* js = read_ids(ids_path, &kj);
        if (!text || !js) {
            expect(0, "oracle_inputs_readable", "%s or %s missing", doc_path, ids_path);
            return test_finish();
        }
        uint16_t* ids = malloc(n * sizeof(uint16_t) + 2);
        t0 = now();
        size_t k = tokenizer_encode(&tok, text, n, ids);
        t_enc += now() - t0;
        size_t at = first_diff(ids, k, js, kj);
        if (at != (size_t)-1) {
            diff_docs++;
            printf("# %s: %zu ids, javascript %zu; first difference at id %zu: seedgpt", doc_path, k,
                   kj, at);
            for (size_t i = at >= 3 ? at - 3 : 0; i < at + 4 && i < k; i++) printf(" %d", ids[i]);
            printf(" | javascript");
            for (size_t i = at >= 3 ? at - 3 : 0; i < at + 4 && i < kj; i++) printf(" %d", js[i]);
            printf("\n");
        }
        int bad;
        size_t m;
        unsigned char* back = decode_all(&tok, ids, k, &m, &bad);
        if (bad || m != n || memcmp(back, text, n) != 0) {
            rt_bad++;
            printf("# %s: %zu bytes -> %zu ids -> %zu bytes, %d bad decodes\n", doc_path, n, k, m, bad);
        }
        free(back);
        char name[160];
        snprintf(name, sizeof(name), "gpt2_safe_cut_prefix_and_rest_encode_to_the_whole[%s]",
                 strrchr(doc_path, '/') ? strrchr(doc_path, '/') + 1 : doc_path);
        check_safe_cuts(&tok, text, n < 100000 ? n : 100000, 100, name);

        stream_cap += 1 + kj;
        stream = realloc(stream, stream_cap * sizeof(uint16_t));
        stream[stream_n++] = (uint16_t)tok.eot;
        memcpy(stream + stream_n, js, kj * sizeof(uint16_t));
        stream_n += kj;
        total_bytes += n;
        total_ids += k;
        free(ids);
        free(js);
        free(text);
    }
    expect(diff_docs == 0 && total_bytes >= 1000000, "gpt2_ids_equal_the_javascript_encoder",
           "%d document(s), %.2f MB -> %zu ids, %d document(s) differ; encoded in %.2f s (%.1f MB/s)",
           ndocs, (double)total_bytes / 1e6, total_ids, diff_docs, t_enc,
           (double)total_bytes / 1e6 / t_enc);
    expect(rt_bad == 0, "gpt2_decode_encode_is_identity_on_the_corpus",
           "%d of %d document(s) do not come back byte for byte", rt_bad, ndocs);

    if (strcmp(shard_path, "-") != 0) {
        size_t ns;
        uint16_t* shard = read_shard(shard_path, &ns);
        size_t at = shard ? first_diff(shard, ns, stream, stream_n) : 0;
        expect(shard && at == (size_t)-1, "prepare_gpt2_shard_equals_eot_plus_javascript_ids_per_document",
               "%d document(s), shard %zu tokens (expected %zu), first difference at %zd", ndocs, ns,
               stream_n, at == (size_t)-1 ? (ssize_t)-1 : (ssize_t)at);
        free(shard);
    }
    free(stream);
    tokenizer_free(&tok);
    return test_finish();
}

int main(int argc, char** argv) {
    if (argc >= 6 && argc % 2 == 0 && !strcmp(argv[1], "--oracle")) return run_oracle(argc, argv);
    if (argc != 1) {
        fprintf(stderr, "usage: test_bpe | test_bpe --oracle DIR SHARD|- DOC IDS [DOC IDS ...]\n");
        return 2;
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/seedgpt_bpe_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    run_self_contained();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return test_finish();
}
