/* tests/test_data.c — data/: the byte tokenizer, token shards, the DataLoader and `prepare`.
 *
 * Each check names the property it states (data/tokenizer.h, data/shards.h, data/prepare.h are the
 * specifications) and prints what it measured. All files live in a fresh mkdtemp directory under
 * /tmp that is removed at the end.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tests/test.h"
#include "data/tokenizer.h"
#include "data/shards.h"
#include "data/prepare.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* ---- helpers ------------------------------------------------------------------------------- */

static void path_in(char* out, size_t cap, const char* name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static long long file_size(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Whole file into a malloc'ed buffer; *n its size. NULL if unreadable. */
static unsigned char* slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = malloc(sz > 0 ? (size_t)sz : 1);
    size_t got = fread(b, 1, (size_t)sz, f);
    fclose(f);
    *n = got;
    return b;
}

static void spit(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* Overwrites one int32 header slot of a shard. */
static void poke_header(const char* path, int slot, int32_t value) {
    int fd = open(path, O_WRONLY);
    if (pwrite(fd, &value, 4, 4 * slot) != 4) perror("pwrite");
    close(fd);
}

static int contains(const char* s, const char* sub) { return strstr(s, sub) != NULL; }

static int rm_entry(const char* p, const struct stat* st, int flag, struct FTW* ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

/* Tokens for loader tests: token i of shard s is s*10000 + i, so every token says where it came
 * from (vocab unchecked: values exceed 257 on purpose). */
static void write_tagged_shard(const char* path, int s, size_t n) {
    uint16_t* t = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(s * 10000 + i);
    char err[256];
    if (shard_write(path, t, n, err) != 0) { printf("setup failed: %s\n", err); exit(1); }
    free(t);
}

/* Runs prepare_main with stdout+stderr captured; returns its status, the output in out. */
static int run_prepare(int argc, const char** argv, char* out, size_t cap) {
    char cap_path[300];
    path_in(cap_path, sizeof(cap_path), "prepare_output.txt");
    fflush(stdout); fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    int fd = open(cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1); dup2(fd, 2); close(fd);
    int rc = prepare_main(argc, (char**)argv);
    fflush(stdout); fflush(stderr);
    dup2(saved_out, 1); dup2(saved_err, 2);
    close(saved_out); close(saved_err);
    size_t n;
    unsigned char* b = slurp(cap_path, &n);
    if (n >= cap) n = cap - 1;
    memcpy(out, b, n);
    out[n] = '\0';
    while (n > 0 && out[n - 1] == '\n') out[--n] = '\0';
    free(b);
    unlink(cap_path);
    return rc;
}

/* ---- tokenizer ----------------------------------------------------------------------------- */

static void test_tokenizer(void) {
    Tokenizer tok;
    tokenizer_init_byte(&tok);
    expect(tok.vocab_size == 257 && tok.eot == 256, "byte_tokenizer_vocab_257_eot_256",
           "vocab %d, eot %d", tok.vocab_size, tok.eot);

    unsigned char text[256], back[256];
    uint16_t ids[256];
    for (int i = 0; i < 256; i++) text[i] = (unsigned char)i;
    size_t n = tokenizer_encode(&tok, text, 256, ids);
    int id_is_byte = 1;
    for (int i = 0; i < 256; i++) id_is_byte &= ids[i] == i;
    size_t m = 0;
    int bad_decode = 0;
    for (size_t i = 0; i < n; i++) {
        int w = tokenizer_decode(&tok, ids[i], back + m, sizeof(back) - m);
        if (w != 1) bad_decode++; else m += (size_t)w;
    }
    expect(n == 256 && id_is_byte && m == 256 && bad_decode == 0 && memcmp(text, back, 256) == 0,
           "byte_tokenizer_roundtrips_all_256_bytes", "%zu tokens, ids==bytes %d, %zu bytes back, "
           "%d bad decodes", n, id_is_byte, m, bad_decode);

    unsigned char b[4];
    int weot = tokenizer_decode(&tok, tok.eot, b, sizeof(b));
    int wbig = tokenizer_decode(&tok, 257, b, sizeof(b));
    int wneg = tokenizer_decode(&tok, -1, b, sizeof(b));
    int wcap = tokenizer_decode(&tok, 65, b, 0);
    expect(weot == 0 && wbig == -1 && wneg == -1 && wcap == -1,
           "byte_tokenizer_eot_decodes_to_nothing_bad_ids_refused",
           "eot -> %d bytes, 257 -> %d, -1 -> %d, cap 0 -> %d", weot, wbig, wneg, wcap);

    char err[256] = "", nobpe[300];
    Tokenizer t2;
    path_in(nobpe, sizeof(nobpe), "no_bpe_files_here");
    int rg = tokenizer_open(&t2, "gpt2", nobpe, err);
    int gpt2_msg = contains(err, nobpe) && contains(err, "encoder.json");
    int rb = tokenizer_init(&t2, "byte", err);
    int rx = tokenizer_init(&t2, "bogus", err);
    expect(rg != 0 && gpt2_msg && rb == 0 && t2.vocab_size == 257 && rx != 0 && contains(err, "bogus"),
           "tokenizer_by_name_byte_ok_gpt2_without_its_files_and_unknown_refused",
           "gpt2 rc %d (message ok %d), byte rc %d, bogus rc %d: \"%s\"", rg, gpt2_msg, rb, rx, err);
}

/* ---- shard format -------------------------------------------------------------------------- */

static void test_shard_roundtrip(void) {
    char path[300], tmp[310], err[256] = "";
    path_in(path, sizeof(path), "rt.bin");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    size_t n = 1000;
    uint16_t* t = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(test_uniform() * 65536);
    int rc = shard_write(path, t, n, err);
    long long size = file_size(path);
    size_t count = 0;
    int rh = shard_read_header(path, &count, err);
    uint16_t* back = NULL;
    size_t nb = 0;
    int rr = shard_read(path, 0, &back, &nb, err);
    int same = rr == 0 && nb == n && memcmp(back, t, n * sizeof(uint16_t)) == 0;
    int32_t header[256] = {0};
    FILE* f = fopen(path, "rb");
    if (fread(header, 4, 256, f) != 256) header[0] = -1;
    fclose(f);
    int rest_zero = 1;
    for (int i = 3; i < 256; i++) rest_zero &= header[i] == 0;
    expect(rc == 0 && rh == 0 && count == n && same && size == 1024 + 2 * (long long)n,
           "shard_write_read_roundtrip", "write rc %d, header rc %d count %zu, read rc %d same %d, "
           "size %lld (expected %lld)", rc, rh, count, rr, same, size, 1024 + 2 * (long long)n);
    expect(header[0] == 20240520 && header[1] == 1 && header[2] == (int32_t)n && rest_zero &&
           !file_exists(tmp), "shard_header_is_llmc_and_no_tmp_left",
           "magic %d version %d count %d, slots 3..255 zero %d, .tmp left %d", header[0], header[1],
           header[2], rest_zero, file_exists(tmp));
    free(back);

    char zpath[300];
    path_in(zpath, sizeof(zpath), "zero.bin");
    int rz = shard_write(zpath, t, 0, err);
    expect(rz != 0 && !file_exists(zpath) && contains(err, zpath) && contains(err, "0 tokens"),
           "shard_write_refuses_zero_tokens", "rc %d, file exists %d: \"%s\"", rz,
           file_exists(zpath), err);
    free(t);
}

/* One rejection: the reader refuses, and the line names the file and the problem. */
static void expect_refused(const char* name, const char* path, int vocab, const char* p1,
                           const char* p2) {
    char err[256] = "";
    uint16_t* t = NULL;
    size_t n = 0;
    int rc = shard_read(path, vocab, &t, &n, err);
    int ok = rc != 0 && t == NULL && contains(err, path) && contains(err, p1) &&
             (!p2 || contains(err, p2)) && strchr(err, '\n') == NULL;
    expect(ok, name, "rc %d: \"%s\"", rc, err);
    free(t);
}

static void test_shard_rejections(void) {
    char path[300];
    size_t n = 200;
    uint16_t t[200];
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(i % 257);
    char err[256];

    path_in(path, sizeof(path), "magic.bin");
    shard_write(path, t, n, err);
    poke_header(path, 0, 12345);
    expect_refused("shard_refuses_wrong_magic", path, 0, "bad magic 12345", "expected 20240520");

    path_in(path, sizeof(path), "version.bin");
    shard_write(path, t, n, err);
    poke_header(path, 1, 2);
    expect_refused("shard_refuses_wrong_version", path, 0, "version 2", "expected 1");

    path_in(path, sizeof(path), "truncated.bin");
    shard_write(path, t, n, err);
    if (truncate(path, 1024 + 2 * (off_t)n - 3) != 0) perror("truncate");
    expect_refused("shard_refuses_truncated_file", path, 0, "truncated", "1421 bytes");

    path_in(path, sizeof(path), "oversized.bin");
    shard_write(path, t, n, err);
    FILE* f = fopen(path, "ab");
    fputc(0, f); fputc(0, f);
    fclose(f);
    expect_refused("shard_refuses_oversized_file", path, 0, "oversized", "1426 bytes");

    path_in(path, sizeof(path), "count_big.bin");
    shard_write(path, t, n, err);
    poke_header(path, 2, (int32_t)n + 10);
    expect_refused("shard_refuses_count_larger_than_data", path, 0, "does not match header count 210",
                   "truncated");

    path_in(path, sizeof(path), "count_small.bin");
    shard_write(path, t, n, err);
    poke_header(path, 2, (int32_t)n - 10);
    expect_refused("shard_refuses_count_smaller_than_data", path, 0, "does not match header count 190",
                   "oversized");

    path_in(path, sizeof(path), "count_zero.bin");
    shard_write(path, t, n, err);
    poke_header(path, 2, 0);
    if (truncate(path, 1024) != 0) perror("truncate");
    expect_refused("shard_refuses_count_zero", path, 0, "count 0", NULL);

    path_in(path, sizeof(path), "short.bin");
    spit(path, t, 100);
    expect_refused("shard_refuses_file_shorter_than_header", path, 0, "shorter than the 1024-byte",
                   NULL);

    path_in(path, sizeof(path), "missing.bin");
    expect_refused("shard_refuses_missing_file", path, 0, "cannot open", NULL);

    /* out of vocab: token 300 at index 77, byte offset 1024 + 2*77 = 1178 */
    path_in(path, sizeof(path), "oov.bin");
    t[77] = 300;
    shard_write(path, t, n, err);
    expect_refused("shard_refuses_out_of_vocab_token_naming_offset", path, 257, "token 300",
                   "byte offset 1178 (token index 77)");
    int rc_unchecked = shard_read_header(path, &n, err);
    expect(rc_unchecked == 0, "shard_out_of_vocab_is_a_vocab_check_not_a_format_error",
           "header rc %d", rc_unchecked);

    DataLoader dl;
    err[0] = '\0';
    int rl = loader_open(&dl, path, 1, 8, 257, 0, 0, err);
    expect(rl != 0 && contains(err, path) && contains(err, "token 300") &&
           contains(err, "byte offset 1178"), "loader_open_refuses_out_of_vocab_token",
           "rc %d: \"%s\"", rl, err);
}

/* ---- the loader ---------------------------------------------------------------------------- */

enum { LB = 2, LT = 8, LBT = LB * LT };
static const size_t shard_n[2] = {1000, 777};   /* not multiples of B*T, nor of B*T + 1 */

static void make_split(void) {
    char path[300];
    path_in(path, sizeof(path), "split_000000.bin");
    write_tagged_shard(path, 0, shard_n[0]);
    path_in(path, sizeof(path), "split_000001.bin");
    write_tagged_shard(path, 1, shard_n[1]);
}

static int open_split(DataLoader* dl, int shuffle, uint64_t seed) {
    char pat[300], err[256];
    path_in(pat, sizeof(pat), "split_*.bin");
    if (loader_open(dl, pat, LB, LT, 0, shuffle, seed, err) != 0) {
        printf("FAIL loader_open: %s\n", err);
        test_n_failed++;
        return 1;
    }
    return 0;
}

/* The split window a batch came from, recovered from its first token's tag. */
static size_t window_of(const int* inputs) {
    int s = inputs[0] / 10000, i = inputs[0] % 10000;
    size_t before = s == 0 ? 0 : (shard_n[0] - 1) / LBT;
    return before + (size_t)i / LBT;
}

static void test_loader_windows(void) {
    DataLoader dl;
    if (open_split(&dl, 0, 0)) return;
    size_t w0 = (shard_n[0] - 1) / LBT, w1 = (shard_n[1] - 1) / LBT;
    size_t N = loader_num_windows(&dl);
    expect(N == w0 + w1 && dl.num_shards == 2, "split_windows_are_floor_n_minus_1_over_BT_per_shard",
           "%zu windows (expected %zu + %zu) from %d shards", N, w0, w1, dl.num_shards);

    int in[LBT], tg[LBT];
    size_t bad_content = 0, crossing = 0, past_end = 0;
    for (size_t k = 0; k < N; k++) {
        if (loader_window(&dl, k, in, tg) != 0) { bad_content++; continue; }
        int s = k < w0 ? 0 : 1;
        size_t first = (k - (s ? w0 : 0)) * LBT;   /* window k = tokens [first, first + B*T + 1) */
        for (int j = 0; j < LBT; j++) {
            if (in[j] != (int)(s * 10000 + first + j)) bad_content++;
            if (tg[j] != (int)(s * 10000 + first + j + 1)) bad_content++;
            if (in[j] / 10000 != s || tg[j] / 10000 != s) crossing++;
        }
        if (first + LBT + 1 > shard_n[s]) past_end++;
        int ls;
        size_t lf;
        loader_locate(&dl, k, &ls, &lf);
        if (ls != s || lf != first) bad_content++;
    }
    expect(bad_content == 0, "window_k_is_tokens_kBT_to_kBT_plus_BT_plus_1_targets_shifted_by_one",
           "%zu mismatching tokens over %zu windows", bad_content, N);
    expect(crossing == 0 && past_end == 0, "windows_never_cross_a_shard_boundary",
           "%zu tokens from another shard, %zu windows past a shard's end", crossing, past_end);

    /* sequential: position p of every epoch is window p; wraps into the next epoch */
    size_t wrong = 0, total = 2 * N + 3;
    for (size_t i = 0; i < total; i++) {
        if (loader_next(&dl, in, tg) != 0 || window_of(in) != i % N) wrong++;
    }
    LoaderState st = loader_get_state(&dl);
    expect(wrong == 0 && st.epoch == 2 && st.pos == 3, "sequential_order_wraps_into_next_epoch",
           "%zu of %zu batches out of order, state epoch %llu pos %llu (expected 2, 3)", wrong, total,
           (unsigned long long)st.epoch, (unsigned long long)st.pos);

    loader_reset(&dl);
    st = loader_get_state(&dl);
    int rn = loader_next(&dl, in, tg);
    expect(st.epoch == 0 && st.pos == 0 && rn == 0 && window_of(in) == 0,
           "loader_reset_returns_to_epoch_0_window_0", "epoch %llu pos %llu, first window %zu",
           (unsigned long long)st.epoch, (unsigned long long)st.pos, window_of(in));

    /* window index out of range is an error, not a crash */
    int ro = loader_window(&dl, N, in, tg);
    expect(ro != 0 && contains(dl.err, "out of range"), "loader_window_refuses_k_past_the_end",
           "rc %d: \"%s\"", ro, dl.err);
    loader_close(&dl);
}

/* The order of one epoch as split window indices, read from the data itself. */
static void epoch_order(DataLoader* dl, size_t* order) {
    int in[LBT], tg[LBT];
    size_t N = loader_num_windows(dl);
    for (size_t p = 0; p < N; p++) {
        order[p] = loader_next(dl, in, tg) == 0 ? window_of(in) : (size_t)-1;
    }
}

static int is_permutation(const size_t* order, size_t N) {
    char* seen = calloc(N, 1);
    int ok = 1;
    for (size_t p = 0; p < N; p++) {
        if (order[p] >= N || seen[order[p]]) { ok = 0; break; }
        seen[order[p]] = 1;
    }
    free(seen);
    return ok;
}

static void test_loader_shuffle(void) {
    DataLoader a, b, c;
    if (open_split(&a, 1, 42) || open_split(&b, 1, 42) || open_split(&c, 1, 43)) return;
    size_t N = loader_num_windows(&a);
    size_t* e0 = malloc(N * sizeof(size_t));
    size_t* e1 = malloc(N * sizeof(size_t));
    size_t* b0 = malloc(N * sizeof(size_t));
    size_t* c0 = malloc(N * sizeof(size_t));
    epoch_order(&a, e0);
    epoch_order(&a, e1);
    epoch_order(&b, b0);
    epoch_order(&c, c0);
    size_t fixed = 0, diff_epoch = 0, diff_seed = 0;
    for (size_t p = 0; p < N; p++) {
        fixed += e0[p] == p;
        diff_epoch += e0[p] != e1[p];
        diff_seed += e0[p] != c0[p];
    }
    int p0 = is_permutation(e0, N), p1 = is_permutation(e1, N);
    expect(p0 && p1 && fixed < N / 4, "shuffle_visits_every_window_once_per_epoch",
           "epoch 0 permutation %d, epoch 1 permutation %d, %zu of %zu windows in place", p0, p1,
           fixed, N);
    expect(memcmp(e0, b0, N * sizeof(size_t)) == 0, "shuffle_is_deterministic_for_a_seed",
           "two loaders with seed 42 agree on %s", memcmp(e0, b0, N * sizeof(size_t)) ? "no" : "all");
    expect(diff_epoch > N / 2 && diff_seed > N / 2, "shuffle_differs_between_epochs_and_seeds",
           "%zu of %zu positions differ epoch 0 vs 1, %zu differ seed 42 vs 43", diff_epoch, N,
           diff_seed);

    /* a pure function of (seed, epoch): epoch 0's order asked for after epoch 1 was built */
    size_t again = 0;
    for (size_t p = 0; p < N; p++) again += loader_order(&b, 0, p) == e0[p];
    expect(again == N, "shuffle_order_is_a_pure_function_of_seed_and_epoch",
           "%zu of %zu positions of epoch 0 reproduced after later epochs", again, N);

    /* loader_window(k) reads position k of the current epoch's order, and never moves the loader */
    LoaderState before = loader_get_state(&a);   /* epoch 2, pos 0 */
    int in[LBT], tg[LBT];
    size_t mismatch = 0;
    for (size_t k = 0; k < N; k += 7) {
        loader_window(&a, k, in, tg);
        if (window_of(in) != loader_order(&a, 2, k)) mismatch++;
    }
    LoaderState after = loader_get_state(&a);
    loader_next(&a, in, tg);
    int moved = memcmp(&before, &after, sizeof(before)) != 0;
    expect(!moved && mismatch == 0 && window_of(in) == loader_order(&a, 2, 0),
           "loader_window_reads_current_epoch_order_and_does_not_move_the_loader",
           "state moved %d, %zu windows off the epoch order, next batch window %zu (expected %zu)",
           moved, mismatch, window_of(in), loader_order(&a, 2, 0));

    free(e0); free(e1); free(b0); free(c0);
    loader_close(&a); loader_close(&b); loader_close(&c);
}

/* Fisher-Yates with unbiased draws: over many epochs each of the 4! orders of 4 windows shows up
 * equally often. */
static void test_shuffle_uniform(void) {
    char path[300], err[256];
    path_in(path, sizeof(path), "four.bin");
    write_tagged_shard(path, 0, 4 * LBT + 1);
    DataLoader dl;
    if (loader_open(&dl, path, LB, LT, 0, 1, 1234, err) != 0) {
        expect(0, "shuffle_is_uniform_over_permutations", "open: %s", err);
        return;
    }
    int counts[256] = {0};
    const int epochs = 24000;
    for (int e = 0; e < epochs; e++) {
        int code = 0;
        for (int k = 0; k < 4; k++) code = code * 4 + (int)loader_order(&dl, (uint64_t)e, (size_t)k);
        counts[code]++;
    }
    int distinct = 0, lo = epochs, hi = 0;
    for (int i = 0; i < 256; i++) {
        if (!counts[i]) continue;
        distinct++;
        if (counts[i] < lo) lo = counts[i];
        if (counts[i] > hi) hi = counts[i];
    }
    /* expected 1000 each, sd ~31: [850, 1150] is ~5 sd */
    expect(distinct == 24 && lo > 850 && hi < 1150, "shuffle_is_uniform_over_permutations",
           "%d distinct orders of 4 windows over %d epochs, counts in [%d, %d] (expected ~1000)",
           distinct, epochs, lo, hi);
    loader_close(&dl);
}

static void test_loader_resume(void) {
    DataLoader a, r;
    if (open_split(&a, 1, 7)) return;
    size_t N = loader_num_windows(&a);
    int in[LBT], tg[LBT];
    /* run to 3 positions before the end of epoch 1, take the state through bytes (as a state file
     * would), then 10 more batches cross into epoch 2 */
    for (size_t i = 0; i < N + N - 3; i++) loader_next(&a, in, tg);
    LoaderState st = loader_get_state(&a);
    unsigned char bytes[sizeof(LoaderState)];
    memcpy(bytes, &st, sizeof(st));
    enum { K = 10 };
    int ref_in[K][LBT], ref_tg[K][LBT];
    for (int i = 0; i < K; i++) loader_next(&a, ref_in[i], ref_tg[i]);
    LoaderState end_a = loader_get_state(&a);

    if (open_split(&r, 0, 999)) return;   /* fresh loader, different flags: the state sets them */
    LoaderState st2;
    memcpy(&st2, bytes, sizeof(st2));
    char err[256] = "";
    int rs = loader_set_state(&r, &st2, err);
    size_t diff = 0;
    for (int i = 0; i < K; i++) {
        loader_next(&r, in, tg);
        diff += memcmp(in, ref_in[i], sizeof(in)) != 0 || memcmp(tg, ref_tg[i], sizeof(tg)) != 0;
    }
    LoaderState end_r = loader_get_state(&r);
    expect(rs == 0 && diff == 0 && memcmp(&end_a, &end_r, sizeof(end_a)) == 0 && end_a.epoch == 2,
           "state_get_set_resumes_identical_batches_across_epoch_boundary_shuffled",
           "set rc %d, %zu of %d batches differ, end states equal %d (epoch %llu pos %llu)", rs, diff,
           K, memcmp(&end_a, &end_r, sizeof(end_a)) == 0, (unsigned long long)end_a.epoch,
           (unsigned long long)end_a.pos);
    loader_close(&r);

    /* a state from a different split shape is refused, and the loader is unchanged */
    char pat[300];
    path_in(pat, sizeof(pat), "split_*.bin");
    DataLoader o;
    int ro = loader_open(&o, pat, LB, LT + 1, 0, 0, 0, err);
    LoaderState o_before = loader_get_state(&o);
    int rset = ro == 0 ? loader_set_state(&o, &st, err) : -1;
    LoaderState o_after = loader_get_state(&o);
    expect(ro == 0 && rset != 0 && contains(err, "windows") &&
           memcmp(&o_before, &o_after, sizeof(o_before)) == 0,
           "set_state_refuses_a_state_of_another_split_shape", "open rc %d, set rc %d: \"%s\"", ro,
           rset, err);
    if (ro == 0) loader_close(&o);
    loader_close(&a);
}

/* Data parallelism: R ranks of A micro-batches, rank r reading position r*A + a ahead and all
 * advancing by R*A, together read what one loader reads with loader_next, shuffled and across
 * epoch boundaries, and end in the same state. */
static void test_loader_ranks(void) {
    DataLoader one, ranks;
    if (open_split(&one, 1, 11)) return;
    if (open_split(&ranks, 1, 11)) { loader_close(&one); return; }
    size_t N = loader_num_windows(&one);
    enum { R = 3, A = 2 };
    int in[LBT], tg[LBT], ref_in[LBT], ref_tg[LBT];
    size_t steps = (2 * N + 5) / (R * A) + 1, diff = 0, failed = 0;
    for (size_t s = 0; s < steps; s++) {
        for (int r = 0; r < R; r++)
            for (int a = 0; a < A; a++) {
                failed += loader_next(&one, ref_in, ref_tg) != 0;
                failed += loader_peek(&ranks, (size_t)(r * A + a), in, tg) != 0;
                diff += memcmp(in, ref_in, sizeof(in)) != 0 || memcmp(tg, ref_tg, sizeof(tg)) != 0;
            }
        loader_advance(&ranks, R * A);
    }
    LoaderState e1 = loader_get_state(&one), e2 = loader_get_state(&ranks);
    expect(failed == 0 && diff == 0 && memcmp(&e1, &e2, sizeof(e1)) == 0 && e1.epoch >= 2,
           "rank_offset_windows_read_what_one_loader_reads",
           "%zu steps of %d ranks x %d micro-batches over %zu windows: %zu batches differ, %zu "
           "reads failed, end states equal %d (epoch %llu pos %llu)", steps, R, A, N, diff, failed,
           memcmp(&e1, &e2, sizeof(e1)) == 0, (unsigned long long)e1.epoch,
           (unsigned long long)e1.pos);
    loader_close(&one);
    loader_close(&ranks);
}

static void test_loader_open_errors(void) {
    char pat[300], path[300], err[256] = "";
    DataLoader dl;
    path_in(pat, sizeof(pat), "nothing_*.bin");
    int rc = loader_open(&dl, pat, 2, 8, 0, 0, 0, err);
    expect(rc != 0 && contains(err, pat) && contains(err, "matches no files"),
           "loader_refuses_pattern_matching_nothing", "rc %d: \"%s\"", rc, err);

    path_in(path, sizeof(path), "tiny.bin");
    write_tagged_shard(path, 0, 16);   /* B*T+1 = 17 needed */
    err[0] = '\0';
    rc = loader_open(&dl, path, 2, 8, 0, 0, 0, err);
    expect(rc != 0 && contains(err, path) && contains(err, "too little data") && contains(err, "17") &&
           contains(err, "16"), "loader_refuses_split_with_zero_windows", "rc %d: \"%s\"", rc, err);

    /* one bad shard among good ones refuses the whole split at open */
    char bad[300];
    path_in(bad, sizeof(bad), "split_000002.bin");
    write_tagged_shard(bad, 2, 100);
    poke_header(bad, 1, 3);
    path_in(pat, sizeof(pat), "split_*.bin");
    err[0] = '\0';
    rc = loader_open(&dl, pat, 2, 8, 0, 0, 0, err);
    expect(rc != 0 && contains(err, bad) && contains(err, "version 3"),
           "loader_validates_every_shard_at_open", "rc %d: \"%s\"", rc, err);
    unlink(bad);
}

/* ---- writers never clobber a good file ----------------------------------------------------- */

static void test_writer_failure(void) {
    char path[300], tmp[310], err[256] = "";
    uint16_t good[50], other[60];
    for (int i = 0; i < 50; i++) good[i] = (uint16_t)i;
    for (int i = 0; i < 60; i++) other[i] = (uint16_t)(1000 + i);
    path_in(path, sizeof(path), "good.bin");
    shard_write(path, good, 50, err);
    size_t n0, n1;
    unsigned char* before = slurp(path, &n0);

    /* PATH.tmp cannot be created (it is a directory): works even as root */
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    mkdir(tmp, 0755);
    int rc = shard_write(path, other, 60, err);
    unsigned char* after = slurp(path, &n1);
    expect(rc != 0 && contains(err, path) && n0 == n1 && memcmp(before, after, n0) == 0,
           "failed_shard_write_leaves_existing_file_untouched", "rc %d, file %zu -> %zu bytes, "
           "same %d: \"%s\"", rc, n0, n1, n0 == n1 && memcmp(before, after, n0) == 0, err);
    free(after);
    rmdir(tmp);

    /* unwritable directory */
    char dir[300], dpath[320];
    path_in(dir, sizeof(dir), "ro");
    mkdir(dir, 0755);
    snprintf(dpath, sizeof(dpath), "%s/good.bin", dir);
    shard_write(dpath, good, 50, err);
    chmod(dir, 0555);
    char probe[330];
    snprintf(probe, sizeof(probe), "%s/probe", dir);
    int pfd = open(probe, O_WRONLY | O_CREAT, 0644);
    if (pfd >= 0) {
        close(pfd);
        unlink(probe);
        skip("failed_write_in_unwritable_dir_leaves_file_untouched",
             "directory permissions do not bind this user (root)");
    } else {
        err[0] = '\0';
        rc = shard_write(dpath, other, 60, err);
        after = slurp(dpath, &n1);
        expect(rc != 0 && contains(err, dpath) && n1 == n0 && memcmp(before, after, n0) == 0,
               "failed_write_in_unwritable_dir_leaves_file_untouched", "rc %d, %zu bytes after: "
               "\"%s\"", rc, n1, err);
        free(after);
    }
    chmod(dir, 0755);
    free(before);
}

/* ---- prepare ------------------------------------------------------------------------------- */

/* Concatenation of every shard NAME_NNNNNN.bin in dir, checked with vocab 257. */
static uint16_t* read_split(const char* dir, const char* name, size_t* n, int* files, size_t* sizes) {
    uint16_t* all = NULL;
    *n = 0;
    *files = 0;
    for (int i = 0;; i++) {
        char path[400], err[256];
        snprintf(path, sizeof(path), "%s/%s_%06d.bin", dir, name, i);
        if (!file_exists(path)) break;
        uint16_t* t;
        size_t m;
        if (shard_read(path, 257, &t, &m, err) != 0) { printf("# %s\n", err); break; }
        all = realloc(all, (*n + m) * sizeof(uint16_t));
        memcpy(all + *n, t, m * sizeof(uint16_t));
        *n += m;
        if (sizes) sizes[*files] = m;
        (*files)++;
        free(t);
    }
    return all;
}

static void test_prepare(void) {
    /* three documents with every byte value in them */
    const size_t doc_n[3] = {5000, 3000, 2001};
    char docs[3][300];
    unsigned char* text[3];
    for (int d = 0; d < 3; d++) {
        char name[32];
        snprintf(name, sizeof(name), "doc%d.txt", d);
        path_in(docs[d], sizeof(docs[d]), name);
        text[d] = malloc(doc_n[d]);
        for (size_t i = 0; i < doc_n[d]; i++) text[d][i] = (unsigned char)(test_uniform() * 256);
        spit(docs[d], text[d], doc_n[d]);
    }
    /* the expected stream: EOT doc0 EOT doc1 EOT doc2 */
    size_t n = 3 + doc_n[0] + doc_n[1] + doc_n[2];
    uint16_t* stream = malloc(n * sizeof(uint16_t));
    size_t q = 0;
    for (int d = 0; d < 3; d++) {
        stream[q++] = 256;
        for (size_t i = 0; i < doc_n[d]; i++) stream[q++] = text[d][i];
    }

    char out[300], msg[2048];
    path_in(out, sizeof(out), "prep/nested");   /* parent missing too: created */
    const char* argv[] = {"--val-frac", "0.1", "--shard-tokens", "4000", docs[0], docs[1], docs[2], out};
    int rc = run_prepare(8, argv, msg, sizeof(msg));
    printf("# %s\n", msg);
    size_t ntr, nva, sizes[16];
    int ftr, fva;
    uint16_t* tr = read_split(out, "train", &ntr, &ftr, sizes);
    uint16_t* va = read_split(out, "val", &nva, &fva, NULL);
    size_t s = (size_t)llround(0.9 * (double)n);   /* 9004 of 10004: inside doc 2 */
    int train_ok = tr && ntr == s && memcmp(tr, stream, s * sizeof(uint16_t)) == 0;
    int val_ok = va && nva == 1 + (n - s) && va[0] == 256 &&
                 memcmp(va + 1, stream + s, (n - s) * sizeof(uint16_t)) == 0;
    size_t bytes = doc_n[0] + doc_n[1] + doc_n[2];
    expect(rc == 0 && ftr == 3 && fva == 1 && sizes[0] == 4000 && sizes[1] == 4000 &&
           sizes[2] == s - 8000, "prepare_writes_train_shards_of_at_most_N_and_a_val_shard",
           "rc %d, %d train files (%zu, %zu, %zu tokens), %d val files", rc, ftr, sizes[0],
           ftr > 1 ? sizes[1] : 0, ftr > 2 ? sizes[2] : 0, fva);
    expect(train_ok && val_ok && ntr + nva == bytes + 3 + 1,
           "prepare_stream_is_eot_doc_per_file_split_at_round_0_9n_val_gets_leading_eot",
           "train %zu + val %zu = %zu tokens = %zu bytes + 3 EOTs + 1 val EOT; split at %zu of %zu; "
           "train same %d, val same %d", ntr, nva, ntr + nva, bytes, s, n, train_ok, val_ok);
    double frac = (double)(nva - 1) / (double)n;
    expect(fabs(frac - 0.1) <= 0.5 / (double)n + 1e-12, "prepare_val_holds_the_last_val_frac_of_the_stream",
           "val text tokens %zu / %zu = %.6f (expected 0.1 within half a token)", nva - 1, n, frac);
    free(tr); free(va);

    /* a split on a document boundary adds no EOT: two equal documents, val-frac 0.5 */
    char out2[300];
    path_in(out2, sizeof(out2), "prep2");
    spit(docs[2], text[0], 3000);   /* doc1 and doc2 now both 3000 bytes */
    const char* argv2[] = {"--val-frac", "0.5", docs[1], docs[2], out2};
    rc = run_prepare(5, argv2, msg, sizeof(msg));
    tr = read_split(out2, "train", &ntr, &ftr, NULL);
    va = read_split(out2, "val", &nva, &fva, NULL);
    expect(rc == 0 && ntr == 3001 && nva == 3001 && va && va[0] == 256 && ntr + nva == 6000 + 2,
           "prepare_split_on_document_boundary_adds_no_extra_eot",
           "rc %d, train %zu + val %zu = %zu (bytes 6000 + 2 EOTs), val[0] %d", rc, ntr, nva,
           ntr + nva, va ? va[0] : -1);
    free(tr); free(va);

    /* --val-frac 0: no val shard */
    char out3[300], v3[320];
    path_in(out3, sizeof(out3), "prep3");
    const char* argv3[] = {"--val-frac", "0", docs[0], out3};
    rc = run_prepare(4, argv3, msg, sizeof(msg));
    tr = read_split(out3, "train", &ntr, &ftr, NULL);
    snprintf(v3, sizeof(v3), "%s/val_000000.bin", out3);
    expect(rc == 0 && ntr == 5001 && ftr == 1 && !file_exists(v3), "prepare_val_frac_0_writes_no_val",
           "rc %d, train %zu tokens in %d file(s), val file exists %d", rc, ntr, ftr, file_exists(v3));
    free(tr);

    /* a rerun with bigger shards replaces the dataset: older higher-numbered shards go */
    const char* argv4[] = {"--shard-tokens", "100000", docs[0], docs[1], docs[2], out};
    rc = run_prepare(6, argv4, msg, sizeof(msg));
    char old1[400];
    snprintf(old1, sizeof(old1), "%s/train_000001.bin", out);
    tr = read_split(out, "train", &ntr, &ftr, NULL);
    expect(rc == 0 && ftr == 1 && !file_exists(old1) && contains(msg, "removed 2 stale"),
           "prepare_rerun_removes_stale_shards_of_older_run", "rc %d, %d train file(s), "
           "train_000001 exists %d: \"%s\"", rc, ftr, file_exists(old1), msg);
    free(tr);

    /* help and refusals */
    const char* ah[] = {"--help"};
    rc = run_prepare(1, ah, msg, sizeof(msg));
    expect(rc == 0 && contains(msg, "usage") && contains(msg, "round((1-F)*n)"),
           "prepare_help_prints_usage_and_split_rule", "rc %d, %zu chars", rc, strlen(msg));

    char nobpe[300];
    path_in(nobpe, sizeof(nobpe), "no_bpe_files_here");
    const char* ag[] = {"--tokenizer", "gpt2", "--bpe-dir", nobpe, docs[0], out3};
    rc = run_prepare(6, ag, msg, sizeof(msg));
    expect(rc == 2 && contains(msg, "encoder.json") && contains(msg, "get_gpt2_bpe.sh") && !strchr(msg, '\n'),
           "prepare_refuses_gpt2_without_its_files_in_one_line", "rc %d: \"%s\"", rc, msg);

    const char* af[] = {"--val-fraction", "0.1", docs[0], out3};
    rc = run_prepare(4, af, msg, sizeof(msg));
    expect(rc == 2 && contains(msg, "--val-fraction") && !strchr(msg, '\n'),
           "prepare_refuses_unknown_flag", "rc %d: \"%s\"", rc, msg);

    const char* av[] = {"--val-frac", "1.5", docs[0], out3};
    rc = run_prepare(4, av, msg, sizeof(msg));
    expect(rc == 2 && contains(msg, "--val-frac 1.5"), "prepare_refuses_val_frac_outside_0_1",
           "rc %d: \"%s\"", rc, msg);

    const char* a1[] = {docs[0]};
    rc = run_prepare(1, a1, msg, sizeof(msg));
    expect(rc == 2 && contains(msg, "output directory"), "prepare_refuses_missing_outdir",
           "rc %d: \"%s\"", rc, msg);

    char empty[300];
    path_in(empty, sizeof(empty), "empty.txt");
    spit(empty, "", 0);
    const char* ae[] = {empty, out3};
    rc = run_prepare(2, ae, msg, sizeof(msg));
    expect(rc == 2 && contains(msg, "empty input"), "prepare_refuses_empty_input", "rc %d: \"%s\"",
           rc, msg);

    /* failures leave the existing dataset untouched: a missing input, and a shard that cannot be
     * created after another one was already complete (all-or-nothing commit) */
    char t0[400], t1tmp[400], t0tmp[400], missing[300];
    snprintf(t0, sizeof(t0), "%s/train_000000.bin", out);
    size_t nb0, nb1;
    unsigned char* before = slurp(t0, &nb0);
    path_in(missing, sizeof(missing), "no_such.txt");
    const char* am[] = {docs[0], missing, out};
    rc = run_prepare(3, am, msg, sizeof(msg));
    unsigned char* after = slurp(t0, &nb1);
    int same = before && after && nb0 == nb1 && memcmp(before, after, nb0) == 0;
    expect(rc == 2 && contains(msg, missing) && same, "prepare_missing_input_refused_dataset_untouched",
           "rc %d, train_000000 same %d: \"%s\"", rc, same, msg);
    free(after);

    snprintf(t1tmp, sizeof(t1tmp), "%s/train_000001.bin.tmp", out);
    snprintf(t0tmp, sizeof(t0tmp), "%s/train_000000.bin.tmp", out);
    mkdir(t1tmp, 0755);
    const char* ax[] = {"--shard-tokens", "1000", docs[0], out};
    rc = run_prepare(4, ax, msg, sizeof(msg));
    after = slurp(t0, &nb1);
    same = before && after && nb0 == nb1 && memcmp(before, after, nb0) == 0;
    expect(rc == 2 && same && !file_exists(t0tmp) && contains(msg, "train_000001.bin"),
           "prepare_failing_midway_leaves_dataset_untouched_and_no_tmp",
           "rc %d, train_000000 same %d, its .tmp left %d: \"%s\"", rc, same, file_exists(t0tmp), msg);
    rmdir(t1tmp);
    free(after); free(before);

    for (int d = 0; d < 3; d++) free(text[d]);
    free(stream);
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/seedgpt_test_data_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }

    test_tokenizer();
    test_shard_roundtrip();
    test_shard_rejections();
    make_split();
    test_loader_windows();
    test_loader_shuffle();
    test_shuffle_uniform();
    test_loader_resume();
    test_loader_ranks();
    test_loader_open_errors();
    test_writer_failure();
    test_prepare();

    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return test_finish();
}
