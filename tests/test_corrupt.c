/* tests/test_corrupt.c — hostile input, as a table: every loader against every header field, every
 * truncation, trailing bytes and flipped bytes; then ./train itself against bad files and bad flag
 * values (status 2, one line on stderr naming the file or flag, nothing written).
 *
 * Loaders: token shards (data/shards.h: shard_read_header, shard_read, loader_open), model files in
 * both formats (model/modelfile.h), training states (model/state.h). tests/test_data.c and
 * tests/test_modelfile.c hold the one-case-per-property rejections; this file sweeps.
 * Tokenizers have no file format yet (the byte tokenizer is built in): only the --tokenizer value
 * is hostile input today.
 *
 * ./train is taken from $SEEDGPT_TRAIN, else ./train (make test runs from the repository root);
 * without it the command-line table is skipped.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/crc32_ref.h"
#include "data/shards.h"
#include "model/gpt.h"
#include "model/modelfile.h"
#include "model/state.h"

static char dir[256];

static void path_in(char* out, const char* name) { snprintf(out, 512, "%s/%s", dir, name); }

static unsigned char* slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void spit(const char* path, const void* buf, size_t n) {
    FILE* f = fopen(path, "wb");
    if (!f) { perror(path); exit(1); }
    if (n) fwrite(buf, 1, n, f);
    fclose(f);
}

/* Cuts the file at path to len bytes (from the end: its first len bytes stay). Writing a file once
 * and cutting it one byte at a time makes a sweep over every length cost the loader's work only. */
static void cut(const char* path, size_t len) {
    if (truncate(path, (off_t)len) != 0) { perror(path); exit(1); }
}

static int one_line(const char* s) { return s[0] != '\0' && strchr(s, '\n') == NULL; }

/* Tally of one sweep: how many variants were tried, how many refused properly, the first that
 * was not (for the message). */
typedef struct {
    int tried, refused;
    char first_bad[400];
} Tally;

static void tally(Tally* t, int ok, const char* what, const char* err) {
    t->tried++;
    if (ok) t->refused++;
    else if (!t->first_bad[0]) snprintf(t->first_bad, sizeof(t->first_bad), "%s -> \"%.120s\"", what, err);
}

static void report(const char* name, const Tally* t) {
    expect(t->tried > 0 && t->refused == t->tried, name, "%d of %d variants refused with one line "
           "naming the file%s%s", t->refused, t->tried, t->first_bad[0] ? "; first miss: " : "",
           t->first_bad);
}

/* ---- token shards ------------------------------------------------------------------------- */

/* A shard variant must be refused by the header check, by shard_read and by loader_open. */
static int shard_refused(const char* path, char err[256]) {
    size_t n;
    uint16_t* t = NULL;
    char e1[256] = "", e2[256] = "", e3[256] = "";
    int r1 = shard_read_header(path, &n, e1);
    int r2 = shard_read(path, 257, &t, &n, e2);
    free(t);
    DataLoader dl;
    int r3 = loader_open(&dl, path, 1, 4, 257, 0, 0, e3);
    if (r3 == 0) loader_close(&dl);
    snprintf(err, 256, "%s", r1 ? e1 : r2 ? e2 : e3);
    return r1 != 0 && r2 != 0 && r3 != 0 && strstr(e1, path) && strstr(e2, path) &&
           strstr(e3, path) && one_line(e1) && one_line(e2) && one_line(e3);
}

static void test_shards(void) {
    enum { N = 64 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 7 % 257);
    char good[512], bad[512], err[256];
    path_in(good, "good_shard.bin");
    path_in(bad, "bad_shard.bin");
    if (shard_write(good, tok, N, err) != 0) { printf("FAIL setup: %s\n", err); exit(1); }
    size_t n;
    unsigned char* g = slurp(good, &n);
    unsigned char* b = malloc(n + 4096);
    char what[64];

    /* every header field: magic, version, count */
    Tally th = {0};
    const int32_t values[] = {0, -1, 1, 2, 3, N - 1, N + 1, 2 * N, 20240326, 20240520, 0x7fffffff,
                              (int32_t)0x80000000};
    for (int slot = 0; slot < 3; slot++) {
        for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
            int32_t orig;
            memcpy(&orig, g + 4 * slot, 4);
            if (values[v] == orig) continue;
            memcpy(b, g, n);
            memcpy(b + 4 * slot, &values[v], 4);
            spit(bad, b, n);
            snprintf(what, sizeof(what), "slot %d = %d", slot, values[v]);
            tally(&th, shard_refused(bad, err), what, err);
        }
    }
    report("shard_every_header_field_corrupted_is_refused", &th);

    /* every truncation: 0 .. n-1 bytes */
    Tally tt = {0};
    for (size_t len = 0; len < n; len++) {
        spit(bad, g, len);
        snprintf(what, sizeof(what), "%zu of %zu bytes", len, n);
        tally(&tt, shard_refused(bad, err), what, err);
    }
    report("shard_every_truncation_is_refused", &tt);

    /* trailing bytes */
    Tally tr = {0};
    const size_t extra[] = {1, 2, 3, 4, 1024, 4096};
    for (size_t k = 0; k < sizeof(extra) / sizeof(extra[0]); k++) {
        memcpy(b, g, n);
        memset(b + n, 0, extra[k]);
        spit(bad, b, n + extra[k]);
        snprintf(what, sizeof(what), "+%zu bytes", extra[k]);
        tally(&tr, shard_refused(bad, err) && strstr(err, "trailing"), what, err);
    }
    report("shard_trailing_bytes_are_refused", &tr);

    /* every token position out of vocab (the loader checks tokens, the header check does not) */
    Tally tv = {0};
    for (int i = 0; i < N; i++) {
        memcpy(b, g, n);
        uint16_t big = 257 + (uint16_t)i;
        memcpy(b + 1024 + 2 * i, &big, 2);
        spit(bad, b, n);
        DataLoader dl;
        char e[256] = "";
        int rc = loader_open(&dl, bad, 1, 4, 257, 0, 0, e);
        if (rc == 0) loader_close(&dl);
        snprintf(what, sizeof(what), "token %d = %u", i, big);
        tally(&tv, rc != 0 && strstr(e, bad) && strstr(e, "out of vocab") && one_line(e), what, e);
    }
    report("shard_out_of_vocab_token_anywhere_is_refused", &tv);
    free(g);
    free(b);
    unlink(good);
    unlink(bad);
}

/* ---- model files -------------------------------------------------------------------------- */

/* The swept files' width: C = 8 (head dim 2) keeps a model file at ~12 KB and a state at ~33 KB,
 * so that every truncation can be tried (one load per length, ~71 000 in all: under a second). */
#define SWEEP_C 8

static GPTConfig make_config(int L, int NH, int NKV, int C, int V, int maxT) {
    GPTConfig c = {maxT, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};  /* plain GPT-2 model options */
    return c;
}

static void build(GPT* m, const GPTConfig* c) {
    char err[256];
    if (gpt_build(m, c, 1, 4, err) != 0) { printf("FAIL build: %s\n", err); exit(1); }
}

static void fill(GPT* m, float base) {
    for (size_t i = 0; i < m->num_parameters; i++) {
        m->params_memory[i] = base + (float)test_normal();
        m->m_memory[i] = (float)(0.01 * test_normal());
        m->v_memory[i] = (float)(1e-4 * test_uniform());
    }
}

/* Refused by read_config and by load, one line naming the file, and the model untouched. */
static int model_refused(GPT* m, const char* path, char err[256]) {
    GPTConfig c;
    char e1[256] = "", e2[256] = "";
    float probe = m->params_memory[0], probe2 = m->params_memory[m->num_parameters - 1];
    int r1 = modelfile_read_config(path, &c, e1);
    int r2 = modelfile_load(m, path, e2);
    snprintf(err, 256, "%s", r2 ? e2 : e1);
    int untouched = m->params_memory[0] == probe && m->params_memory[m->num_parameters - 1] == probe2;
    /* a header that is still a valid configuration of the same size passes read_config: load
     * then refuses it as a mismatch with the model */
    return (r1 != 0 || strstr(e2, "configuration mismatch")) && r2 != 0 && strstr(e2, path) &&
           one_line(e2) && untouched;
}

static void sweep_model(const GPTConfig* cfg, const char* fmt_name, int slots) {
    GPT m;
    build(&m, cfg);
    fill(&m, 0.0f);
    char good[512], bad[512], err[256], name[128], what[64];
    path_in(good, "good_model.bin");
    path_in(bad, "bad_model.bin");
    if (modelfile_save(&m, good, err) != 0) { printf("FAIL setup: %s\n", err); exit(1); }
    size_t n;
    unsigned char* g = slurp(good, &n);
    unsigned char* b = malloc(n + 8192);
    fill(&m, 5.0f);   /* differs from the file: a refused load must leave this */

    Tally th = {0};
    for (int slot = 0; slot < slots; slot++) {
        int32_t orig;
        memcpy(&orig, g + 4 * slot, 4);
        /* wrapping arithmetic in uint32: the magic's neighbours overflow an int32 */
        const int32_t values[] = {0, -1, (int32_t)((uint32_t)orig + 1u), (int32_t)((uint32_t)orig - 1u),
                                  (int32_t)(2u * (uint32_t)orig + 1u), 0x7fffffff,
                                  (int32_t)0x80000000, 20240520};
        for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
            if (values[v] == orig) continue;
            memcpy(b, g, n);
            memcpy(b + 4 * slot, &values[v], 4);
            spit(bad, b, n);
            snprintf(what, sizeof(what), "slot %d = %d", slot, values[v]);
            tally(&th, model_refused(&m, bad, err), what, err);
        }
    }
    if (slots > 8) {   /* seedgpt format: the reserved slots (v1: 9..255, v2: 13..255) must be 0 */
        const int reserved[] = {11, 12, 13, 100, 200, 255};
        for (size_t k = 0; k < sizeof(reserved) / sizeof(reserved[0]); k++) {
            if (reserved[k] < slots) continue;
            memcpy(b, g, n);
            int32_t one = 1;
            memcpy(b + 4 * reserved[k], &one, 4);
            spit(bad, b, n);
            snprintf(what, sizeof(what), "reserved slot %d = 1", reserved[k]);
            tally(&th, model_refused(&m, bad, err), what, err);
        }
    }
    snprintf(name, sizeof(name), "model_%s_every_header_field_corrupted_is_refused", fmt_name);
    report(name, &th);

    /* every truncation: n - 1 .. 0 bytes */
    Tally tt = {0};
    spit(bad, g, n);
    for (size_t len = n; len-- > 0;) {
        cut(bad, len);
        snprintf(what, sizeof(what), "%zu of %zu bytes", len, n);
        tally(&tt, model_refused(&m, bad, err), what, err);
    }
    snprintf(name, sizeof(name), "model_%s_every_truncation_is_refused", fmt_name);
    report(name, &tt);

    Tally tr = {0};
    const size_t extra[] = {1, 3, 4, 8, 4096};
    for (size_t k = 0; k < sizeof(extra) / sizeof(extra[0]); k++) {
        memcpy(b, g, n);
        memset(b + n, 0, extra[k]);
        spit(bad, b, n + extra[k]);
        snprintf(what, sizeof(what), "+%zu bytes", extra[k]);
        tally(&tr, model_refused(&m, bad, err) && strstr(err, "oversized"), what, err);
    }
    snprintf(name, sizeof(name), "model_%s_trailing_bytes_are_refused", fmt_name);
    report(name, &tr);
    free(g);
    free(b);
    unlink(good);
    unlink(bad);
    gpt_free(&m);
}

/* llm.c's format keeps slots 8..255 unused and its readers ignore them; so does seedgpt's.
 * A seedgpt-format file refuses any non-zero value there (tested by the sweep above). */
static void test_llmc_ignores_unused_slots(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 100, 16);
    GPT m, r, want;
    build(&m, &c);
    build(&r, &c);
    build(&want, &c);
    fill(&m, 0.0f);
    char good[512], err[256] = "";
    path_in(good, "llmc.bin");
    modelfile_save(&m, good, err);
    modelfile_load(&want, good, err);   /* the weights as loaded from the untouched file */
    int fd = open(good, O_WRONLY);
    int32_t junk = 12345;
    int w = 0;
    for (int slot = 8; slot < 256; slot += 31) w += pwrite(fd, &junk, 4, 4 * slot) == 4;
    close(fd);
    int rc = modelfile_load(&r, good, err);
    int same = memcmp(want.params_memory, r.params_memory, m.num_parameters * sizeof(float)) == 0;
    expect(rc == 0 && same && w > 0, "model_llmc_reader_ignores_unused_slots_8_to_255",
           "%d slots set to 12345, load rc %d, weights equal %d %s", w, rc, same, err);
    unlink(good);
    gpt_free(&m);
    gpt_free(&r);
    gpt_free(&want);
}

/* ---- training states ---------------------------------------------------------------------- */

static void fix_crc(unsigned char* b, size_t n) {
    uint32_t crc = crc32_ref(0, b, n - 4);
    memcpy(b + n - 4, &crc, 4);
}

static int state_refused(GPT* m, const char* path, char err[256]) {
    static StateInfo info;
    char e1[256] = "", e2[256] = "";
    float probe = m->params_memory[0], probe2 = m->v_memory[m->num_parameters - 1];
    int r1 = state_read_info(path, &info, e1);
    int r2 = state_load(path, m, &info, e2);
    snprintf(err, 256, "%s", e2);
    int untouched = m->params_memory[0] == probe && m->v_memory[m->num_parameters - 1] == probe2;
    return r1 != 0 && r2 != 0 && strstr(e1, path) && strstr(e2, path) && one_line(e1) &&
           one_line(e2) && untouched;
}

/* A header field of a state: offset, width, a bad value, a word the message must hold. With the
 * CRC recomputed, the field check itself must catch it. */
typedef struct {
    const char* field;
    int off, width;
    int64_t value;
    const char* word;
} StateField;

static void test_states(void) {
    GPTConfig c = make_config(2, 4, 2, SWEEP_C, 100, 16);
    GPT m;
    build(&m, &c);
    fill(&m, 0.0f);
    static StateInfo info;
    memset(&info, 0, sizeof(info));
    info.step = 40;
    info.master_seed = 7;
    info.loader.epoch = 1;
    info.loader.pos = 3;
    info.loader.shuffle_seed = 99;
    info.loader.num_windows = 10;
    info.loader.shuffle = 1;
    info.batch = 1;
    info.seq = 4;
    info.bad_consecutive = 1;
    info.bad_total = 2;
    snprintf(info.options, sizeof(info.options), "--lr 0.001\n--train x.bin\n");
    size_t opt = strlen(info.options);
    char good[512], bad[512], err[256], what[96];
    path_in(good, "good_state.bin");
    path_in(bad, "bad_state.bin");
    if (state_save(good, &m, &info, err) != 0) { printf("FAIL setup: %s\n", err); exit(1); }
    size_t n;
    unsigned char* g = slurp(good, &n);
    unsigned char* b = malloc(n + 8192);
    fill(&m, 5.0f);

    const StateField fields[] = {
        {"magic", 0, 8, 0x5841545344454553LL /* "SEEDSTAX" */, "magic"},
        {"version", 8, 4, 5, "version"},          {"version", 8, 4, 0, "version"},
        {"version", 8, 4, 4, "loss scale"},   /* an fp16 state's field, 0 here */
        {"header bytes", 12, 4, 512, "header size"},
        {"maxT", 16, 4, 0, "configuration"},      {"maxT", 16, 4, 17, "parameters"},
        {"V", 20, 4, 70000, "configuration"},     {"V", 20, 4, 129, "configuration"},
        {"Vp", 24, 4, 64, "configuration"},       {"Vp", 24, 4, 256, "parameters"},
        {"L", 28, 4, 0, "configuration"},         {"L", 28, 4, 3, "parameters"},
        {"NH", 32, 4, 3, "configuration"},        {"NH", 32, 4, -4, "configuration"},
        {"NKV", 36, 4, 3, "configuration"},       {"NKV", 36, 4, 4, "parameters"},
        {"C", 40, 4, 0, "configuration"},         {"C", 40, 4, 64, "parameters"},
        {"ranks", 44, 4, 1, "ranks"},             {"ranks", 44, 4, 1 << 21, "ranks"},
        {"P", 48, 8, -1, "parameters"},           {"P", 48, 8, 1, "parameters"},
        {"step", 56, 8, 1LL << 31, "step"},       {"step", 56, 8, 1, "non-finite steps"},
        {"loader pos", 80, 8, 10, "loader position"},
        {"loader windows", 96, 8, 0, "loader position"},
        {"loader shuffle", 104, 4, 2, "shuffle"},
        {"batch", 108, 4, 0, "batch"},            {"seq", 112, 4, 0, "batch"},
        {"seq", 112, 4, 17, "batch"},
        {"bad run", 116, 4, 3, "non-finite"},     {"bad total", 120, 8, 41, "non-finite"},
        {"option bytes", 128, 8, 1 << 20, "option text"},
        {"option bytes", 128, 8, 0, "oversized"}, {"option bytes", 128, 8, 100, "truncated"},
        {"reserved", 136, 1, 1, "reserved"},      {"reserved", 200, 1, 1, "reserved"},
        {"reserved", 255, 1, 0x80, "reserved"},
    };
    Tally tf = {0};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const StateField* f = &fields[i];
        memcpy(b, g, n);
        memcpy(b + f->off, &f->value, (size_t)f->width);   /* little-endian host */
        fix_crc(b, n);
        spit(bad, b, n);
        snprintf(what, sizeof(what), "%s = %lld (CRC fixed)", f->field, (long long)f->value);
        tally(&tf, state_refused(&m, bad, err) && strstr(err, f->word), what, err);
    }
    report("state_every_header_field_corrupted_is_refused_by_its_check", &tf);

    /* version 3: the context-parallel N of the layout, at byte 136 (written only when N > 1) */
    {
        char cpath[512], cerr[256] = "";
        path_in(cpath, "cp_state.bin");
        static StateInfo ci, back;
        ci = info;
        ci.ranks = 4;
        ci.context_parallel = 2;
        int rc = state_save(cpath, &m, &ci, cerr);
        size_t cn = 0;
        unsigned char* cb = rc == 0 ? slurp(cpath, &cn) : NULL;
        uint32_t version = 0, stored = 0;
        if (cb != NULL) { memcpy(&version, cb + 8, 4); memcpy(&stored, cb + 136, 4); }
        int read = rc == 0 && state_read_info(cpath, &back, cerr) == 0;
        const uint32_t bad_n[3] = {1, 3, 1u << 21};   /* 1 is written as 0; 3 does not divide 4 */
        int refused = 0;
        for (int k = 0; k < 3 && cb != NULL; k++) {
            memcpy(b, cb, cn);
            memcpy(b + 136, &bad_n[k], 4);
            fix_crc(b, cn);
            spit(bad, b, cn);
            refused += state_refused(&m, bad, err) && strstr(err, "context-parallel") != NULL;
        }
        expect(read && version == 3 && stored == 2 && back.context_parallel == 2 && back.ranks == 4 &&
               info.context_parallel <= 1 && g[8] == 1 && refused == 3,
               "state_version_3_holds_the_context_parallel_layout",
               "4 ranks as 2 x 2: version %u, N at byte 136 = %u, read back %u ranks as N %u; a state "
               "without it stays version %u; N = 1, 3, 2^21 refused naming context-parallel: %d of 3",
               version, stored, back.ranks, back.context_parallel, g[8], refused);
        free(cb);
    }

    /* version 4: --precision fp16's loss scale (f32 at byte 140) and its good steps (u32 at 144),
     * written only by an fp16 run (loss_scale != 0); a scale that is not a power of two >= 1 is
     * refused */
    {
        char spath[512], serr[256] = "";
        path_in(spath, "fp16_state.bin");
        static StateInfo si, back;
        si = info;
        si.loss_scale = 8192.0f;
        si.scale_good = 7;
        int rc = state_save(spath, &m, &si, serr);
        size_t sn = 0;
        unsigned char* sb = rc == 0 ? slurp(spath, &sn) : NULL;
        uint32_t version = 0, good = 0;
        float stored = 0;
        if (sb != NULL) { memcpy(&version, sb + 8, 4); memcpy(&stored, sb + 140, 4); memcpy(&good, sb + 144, 4); }
        int read = rc == 0 && state_read_info(spath, &back, serr) == 0;
        const float bad_scale[6] = {3.0f, 0.5f, -2.0f, INFINITY, NAN, 0.0f};
        int refused = 0;
        for (int k = 0; k < 6 && sb != NULL; k++) {
            memcpy(b, sb, sn);
            memcpy(b + 140, &bad_scale[k], 4);
            fix_crc(b, sn);
            spit(bad, b, sn);
            refused += state_refused(&m, bad, err) && strstr(err, "loss scale") != NULL;
        }
        expect(read && version == 4 && stored == 8192.0f && good == 7 && back.loss_scale == 8192.0f &&
               back.scale_good == 7 && g[8] == 1 && refused == 6,
               "state_version_4_holds_the_fp16_loss_scale",
               "version %u, scale at byte 140 = %g, good steps at 144 = %u, read back %g and %u; a "
               "state without it stays version %u; scales 3, 0.5, -2, inf, nan, 0 refused naming "
               "the loss scale: %d of 6", version, (double)stored, good, (double)back.loss_scale,
               back.scale_good, g[8], refused);
        free(sb);
    }

    /* every header and option byte flipped, CRC left as it was; a sample of the payload */
    Tally tb = {0};
    for (size_t pos = 0; pos < n; pos += pos < 256 + opt + 64 ? 1 : 509) {
        memcpy(b, g, n);
        b[pos] ^= 0x40;
        spit(bad, b, n);
        snprintf(what, sizeof(what), "byte %zu flipped", pos);
        tally(&tb, state_refused(&m, bad, err), what, err);
    }
    for (size_t pos = n - 4; pos < n; pos++) {
        memcpy(b, g, n);
        b[pos] ^= 0x01;
        spit(bad, b, n);
        snprintf(what, sizeof(what), "checksum byte %zu flipped", pos);
        tally(&tb, state_refused(&m, bad, err) && strstr(err, "checksum"), what, err);
    }
    report("state_every_flipped_byte_is_refused", &tb);

    /* a NUL inside the option text, CRC fixed */
    Tally to = {0};
    memcpy(b, g, n);
    b[256 + 3] = 0;
    fix_crc(b, n);
    spit(bad, b, n);
    tally(&to, state_refused(&m, bad, err) && strstr(err, "NUL"), "NUL in option text", err);
    report("state_option_text_with_nul_is_refused", &to);

    /* every truncation: n - 1 .. 0 bytes */
    Tally tt = {0};
    spit(bad, g, n);
    for (size_t len = n; len-- > 0;) {
        cut(bad, len);
        snprintf(what, sizeof(what), "%zu of %zu bytes", len, n);
        tally(&tt, state_refused(&m, bad, err) && strstr(err, "truncated"), what, err);
    }
    report("state_every_truncation_is_refused", &tt);

    Tally tr = {0};
    const size_t extra[] = {1, 3, 4, 12, 4096};
    for (size_t k = 0; k < sizeof(extra) / sizeof(extra[0]); k++) {
        memcpy(b, g, n);
        memset(b + n, 0, extra[k]);
        spit(bad, b, n + extra[k]);
        snprintf(what, sizeof(what), "+%zu bytes", extra[k]);
        tally(&tr, state_refused(&m, bad, err) && strstr(err, "trailing"), what, err);
    }
    report("state_trailing_bytes_are_refused", &tr);
    free(g);
    free(b);
    unlink(good);
    unlink(bad);
    gpt_free(&m);
}

/* ---- ./train ------------------------------------------------------------------------------ */

static const char* trainer;

/* Runs `trainer ARGS` with stdout to /dev/null and stderr into err; returns the exit status
 * (128 + signal when killed). */
static int run_train(const char* args, char* err, size_t cap) {
    char cmd[4096], errpath[512];
    path_in(errpath, "train_stderr.txt");
    snprintf(cmd, sizeof(cmd), "OMP_WAIT_POLICY=passive %s %s > /dev/null 2> %s", trainer, args,
             errpath);
    int st = system(cmd);
    size_t n;
    unsigned char* e = slurp(errpath, &n);
    if (n >= cap) n = cap - 1;
    if (e != NULL) memcpy(err, e, n);
    err[n] = '\0';
    free(e);
    if (n > 0 && err[n - 1] == '\n') err[n - 1] = '\0';   /* the line's own newline */
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int file_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

static void test_cli(void) {
    trainer = getenv("SEEDGPT_TRAIN") ? getenv("SEEDGPT_TRAIN") : "./train";
    if (access(trainer, X_OK) != 0) {
        skip("train_refuses_bad_files_and_flags", "no ./train here (run from the repository root, "
             "or set SEEDGPT_TRAIN)");
        return;
    }
    /* a good shard, a good model file for the shape below, and a "precious" file the runs are
     * told to --save over: a refused run must leave it byte for byte */
    char shard[512], model[512], precious[512], outdir[512], err[1024], args[3000];
    path_in(shard, "cli_train.bin");
    path_in(model, "cli_model.bin");
    path_in(precious, "precious.bin");
    path_in(outdir, "cli_out");
    uint16_t tok[2000];
    for (int i = 0; i < 2000; i++) tok[i] = (uint16_t)(i * 13 % 257);
    shard_write(shard, tok, 2000, err);
    const char* shape = "--layers 1 --heads 2 --embd 16 --seq-len 16 --batch 2 --steps 2 --threads 1";
    snprintf(args, sizeof(args), "--train %s %s --save %s", shard, shape, model);
    int rc0 = run_train(args, err, sizeof(err));
    spit(precious, "precious", 8);
    if (rc0 != 0) { expect(0, "train_setup_run", "status %d: %s", rc0, err); return; }

    /* bad files through the command line */
    size_t ms;
    unsigned char* mg = slurp(model, &ms);
    unsigned char* sg;
    size_t ss;
    sg = slurp(shard, &ss);
    char bad_model[512], bad_shard[512];
    path_in(bad_model, "cli_bad_model.bin");
    path_in(bad_shard, "cli_bad_shard.bin");
    struct { const char* what; int model; int off; int32_t value; long trunc; } files[] = {
        {"model magic", 1, 0, 1, 0},     {"model version", 1, 4, 5, 0},
        {"model L", 1, 16, 0, 0},        {"model C", 1, 24, 15, 0},
        {"model truncated", 1, -1, 0, -5}, {"model trailing", 1, -1, 0, 7},
        {"shard magic", 0, 0, 7, 0},     {"shard version", 0, 4, 2, 0},
        {"shard count", 0, 8, 1999, 0},  {"shard truncated", 0, -1, 0, -1},
        {"shard trailing", 0, -1, 0, 2},
    };
    Tally tf = {0};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const unsigned char* src = files[i].model ? mg : sg;
        size_t n = files[i].model ? ms : ss;
        unsigned char* b = calloc(n + 64, 1);
        memcpy(b, src, n);
        if (files[i].off >= 0) memcpy(b + files[i].off, &files[i].value, 4);
        n = (size_t)((long)n + files[i].trunc);
        const char* path = files[i].model ? bad_model : bad_shard;
        spit(path, b, n);
        spit(precious, "precious", 8);
        free(b);
        if (files[i].model)
            snprintf(args, sizeof(args), "--train %s --init %s --batch 2 --steps 1 --save %s", shard,
                     bad_model, precious);
        else
            snprintf(args, sizeof(args), "--train %s %s --save %s --out %s", bad_shard, shape,
                     precious, outdir);
        int rc = run_train(args, err, sizeof(err));
        size_t pn;
        unsigned char* p = slurp(precious, &pn);
        int kept = pn == 8 && memcmp(p, "precious", 8) == 0;
        free(p);
        char ls[600];
        snprintf(ls, sizeof(ls), "%s/state_00000001.bin", outdir);
        tally(&tf, rc == 2 && one_line(err) && strstr(err, path) && kept && !file_exists(ls),
              files[i].what, err);
    }
    report("train_refuses_bad_files_with_status_2_and_writes_nothing", &tf);
    free(mg);
    free(sg);

    /* bad flag values: status 2, one line naming the flag, the --save target untouched */
    struct { const char* flags; const char* word; } bad_flags[] = {
        {"--batch 0", "--batch"}, {"--batch -1", "--batch"}, {"--batch abc", "--batch"},
        {"--batch 1e3", "--batch"}, {"--batch 99999999999999999999", "--batch"},
        {"--batch ''", "--batch"}, {"--steps -1", "--steps"}, {"--steps 1.5", "--steps"},
        {"--lr -1", "--lr"}, {"--lr nan", "--lr"}, {"--lr inf", "--lr"}, {"--lr 11", "--lr"},
        {"--lr 1e-3x", "--lr"}, {"--dropout 1", "--dropout"}, {"--dropout -0.1", "--dropout"},
        {"--attn-dropout 1.5", "--attn-dropout"}, {"--seed -1", "--seed"},
        {"--seed 18446744073709551616", "--seed"}, {"--seed abc", "--seed"},
        {"--beta1 1", "--beta1"}, {"--beta2 -0.5", "--beta2"}, {"--eps 2", "--eps"},
        {"--weight-decay -1", "--weight-decay"}, {"--clip -1", "--clip"},
        {"--warmup -3", "--warmup"}, {"--final-lr-frac 1.5", "--final-lr-frac"},
        {"--lr-schedule exp", "--lr-schedule"}, {"--shuffle 2", "--shuffle"},
        {"--recompute every:0", "--recompute"}, {"--recompute bogus", "--recompute"},
        {"--recompute-check maybe", "recompute"}, {"--recompute-seeds new", "--recompute-seeds"},
        {"--recompute-seeds fresh", "--recompute-seeds"}, {"--tokenizer gpt3", "--tokenizer gpt3"},
        {"--threads 0", "--threads"},
        {"--log-every -1", "--log-every"}, {"--eval-every x", "--eval-every"},
        {"--eval-batches 0", "--eval-batches"}, {"--keep -1", "--keep"},
        {"--save-every 5", "--save-every"}, {"--max-bad-steps -1", "--max-bad-steps"},
        {"--layers 0", "--layers"}, {"--heads 3", "model flags"}, {"--kv-heads 3", "model flags"},
        {"--embd 0", "--embd"}, {"--vocab 100", "vocab 100"}, {"--seq 17", "--seq 17"},
        {"--seq-len 0", "--seq-len"}, {"--frobnicate 1", "--frobnicate"},
        {"stray", "stray"}, {"--lr", "--lr"}, {"--resume ''", "--resume"},
        {"--out ''", "--out"}, {"--steps ' 5'", "--steps"}, {"--lr ' 0.1'", "--lr"},
        {"--embd 16384 --heads 16 --layers 64", "GiB"},
    };
    Tally tv = {0};
    for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
        /* the bad flag last, so that a flag missing its value really is missing it */
        snprintf(args, sizeof(args), "--train %s %s --save %s %s", shard, shape, precious,
                 bad_flags[i].flags);
        spit(precious, "precious", 8);   /* so that one miss does not spoil the cases after it */
        int rc = run_train(args, err, sizeof(err));
        size_t pn;
        unsigned char* p = slurp(precious, &pn);
        int kept = pn == 8 && memcmp(p, "precious", 8) == 0;
        free(p);
        tally(&tv, rc == 2 && one_line(err) && strstr(err, bad_flags[i].word) && kept,
              bad_flags[i].flags, err);
    }
    report("train_refuses_bad_flag_values_with_one_line_and_status_2", &tv);

    snprintf(args, sizeof(args), "--batch 2 %s", shape);
    int rc = run_train(args, err, sizeof(err));
    expect(rc == 2 && one_line(err) && strstr(err, "--train"), "train_requires_train_flag",
           "status %d: \"%s\"", rc, err);
    setenv("SEEDGPT_FAULT", "nan_loss:x", 1);
    snprintf(args, sizeof(args), "--train %s %s", shard, shape);
    rc = run_train(args, err, sizeof(err));
    unsetenv("SEEDGPT_FAULT");
    expect(rc == 2 && one_line(err) && strstr(err, "SEEDGPT_FAULT"), "train_refuses_bad_fault_spec",
           "status %d: \"%s\"", rc, err);
    unlink(shard);
    unlink(model);
    unlink(precious);
    unlink(bad_model);
    unlink(bad_shard);
    char e[512];
    path_in(e, "train_stderr.txt");
    unlink(e);
    rmdir(outdir);
}

int main(void) {
    snprintf(dir, sizeof(dir), "/tmp/seedgpt_test_corrupt.XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL mkdtemp\n"); return 1; }
    unsetenv("SEEDGPT_FAULT");
    test_shards();
    GPTConfig plain = make_config(2, 4, 4, SWEEP_C, 100, 16), gqa = make_config(2, 4, 2, SWEEP_C, 100, 16);
    sweep_model(&plain, "llmc", 8);
    sweep_model(&gqa, "seedgpt", 11);
    /* version 2: RoPE (GPT-J pairs, base 500) and the parallel block; slots 9..12 hold them */
    GPTConfig opts = gqa;
    opts.pos_kind = POS_ROPE;
    opts.rope_base = 500;
    opts.rope_layout = ROPE_GPTJ;
    opts.block_kind = BLOCK_PARALLEL;
    sweep_model(&opts, "seedgpt_v2_options", 13);
    test_llmc_ignores_unused_slots();
    test_states();
    test_cli();
    rmdir(dir);
    return test_finish();
}
