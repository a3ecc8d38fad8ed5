/* tests/test_modelfile.c — model files (model/modelfile.c, docs/formats.md): the llm.c v3 layout
 * for plain GPT-2 configurations and seedgpt's own header for grouped-query ones, bit-exact round
 * trips, the header ints on disk, every refusal (magic, version, size, header fields, a model of
 * another shape) with a message naming the file and the problem, saves that fail without
 * touching the previous file, and a non-finite weight in any of the 16 tensors refused by both.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/test.h"
#include "model/gpt.h"
#include "model/modelfile.h"
#include "util/bf16.h"

static char dir[256];

static void path_in_dir(char* out, const char* name) { snprintf(out, 512, "%s/%s", dir, name); }

/* ---- whole-file helpers ------------------------------------------------------------------- */

static unsigned char* read_all(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* buf = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static void write_all(const char* path, const void* buf, size_t n) {
    FILE* f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Copy of src with header int slot k set to v, written to dst. */
static void patch_header(const char* src, const char* dst, int k, int32_t v) {
    size_t n;
    unsigned char* b = read_all(src, &n);
    memcpy(b + 4 * k, &v, 4);
    write_all(dst, b, n);
    free(b);
}

/* Copy of src with its length changed by delta bytes (appending zeros when positive). */
static void resize_copy(const char* src, const char* dst, long delta) {
    size_t n;
    unsigned char* b = read_all(src, &n);
    b = realloc(b, n + (delta > 0 ? (size_t)delta : 0));
    if (delta > 0) memset(b + n, 0, (size_t)delta);
    write_all(dst, b, (size_t)((long)n + delta));
    free(b);
}

/* ---- models ------------------------------------------------------------------------------- */

static GPTConfig make_config(int L, int NH, int NKV, int C, int V, int maxT) {
    GPTConfig c = {maxT, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};  /* plain GPT-2 model options */
    return c;
}

static void build(GPT* m, const GPTConfig* c) {
    char err[256];
    if (gpt_build(m, c, 1, 1, err) != 0) { printf("FAIL build: %s\n", err); exit(1); }
}

/* Every parameter a distinct random value (padded vocab rows zero, as the format requires). */
static void fill_random(GPT* m) {
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &m->params, sizeof(ptr));
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        for (size_t i = 0; i < m->param_sizes[k]; i++) ptr[k][i] = (float)test_normal();
    const GPTConfig* c = &m->config;
    memset(m->params.wte + (size_t)c->vocab_size * c->channels, 0,
           (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
}

/* Number of tensors whose bytes differ between two models of the same configuration. */
static int tensors_differing(const GPT* a, const GPT* b) {
    float *pa[NUM_PARAMETER_TENSORS], *pb[NUM_PARAMETER_TENSORS];
    memcpy(pa, &a->params, sizeof(pa));
    memcpy(pb, &b->params, sizeof(pb));
    int d = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        d += memcmp(pa[k], pb[k], a->param_sizes[k] * sizeof(float)) != 0;
    return d;
}

/* The file's bytes after the header equal the model's tensors, concatenated in llm.c order. */
static int payload_matches(const unsigned char* file, size_t n, const GPT* m) {
    if (n != 1024 + 4 * m->num_parameters) return 0;
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &m->params, sizeof(ptr));
    size_t off = 1024;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (memcmp(file + off, ptr[k], m->param_sizes[k] * 4) != 0) return 0;
        off += m->param_sizes[k] * 4;
    }
    return 1;
}

static int config_equal(const GPTConfig* a, const GPTConfig* b) {
    return a->max_seq_len == b->max_seq_len && a->vocab_size == b->vocab_size &&
           a->padded_vocab_size == b->padded_vocab_size && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->num_kv_heads == b->num_kv_heads &&
           a->channels == b->channels;
}

/* A refused load: returns -1 and err names the file and contains the word for the problem. */
static void expect_refusal(const char* name, GPT* m, const char* path, const char* word1,
                           const char* word2) {
    char err[256] = "";
    float* saved = malloc(m->num_parameters * sizeof(float) + 1);
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &m->params, sizeof(ptr));
    size_t off = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        memcpy(saved + off, ptr[k], m->param_sizes[k] * 4);
        off += m->param_sizes[k];
    }
    int rc = modelfile_load(m, path, err);
    int untouched = 1;
    off = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        untouched &= memcmp(saved + off, ptr[k], m->param_sizes[k] * 4) == 0;
        off += m->param_sizes[k];
    }
    free(saved);
    int names_file = strstr(err, path) != NULL;
    int names_problem = strstr(err, word1) != NULL && (word2 == NULL || strstr(err, word2) != NULL);
    int one_line = strchr(err, '\n') == NULL;
    expect(rc == -1 && names_file && names_problem && one_line && untouched, name,
           "rc %d, names file %d, names problem %d, one line %d, model untouched %d: \"%s\"",
           rc, names_file, names_problem, one_line, untouched, err);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_plain_roundtrip(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 100, 16);
    GPT a, b;
    build(&a, &c);
    build(&b, &c);
    fill_random(&a);
    char path[512], err[256];
    path_in_dir(path, "plain.bin");
    int rc = modelfile_save(&a, path, err);
    expect(rc == 0, "save_plain_config_succeeds", "rc %d %s", rc, rc ? err : "");

    size_t n;
    unsigned char* file = read_all(path, &n);
    int32_t h[256];
    memcpy(h, file, sizeof(h));
    int rest_zero = 1;
    for (int k = 8; k < 256; k++) rest_zero &= h[k] == 0;
    expect(h[0] == 20240326 && h[1] == 3 && h[2] == 16 && h[3] == 100 && h[4] == 2 && h[5] == 4 &&
           h[6] == 32 && h[7] == 128 && rest_zero,
           "plain_config_writes_llmc_v3_header",
           "magic %d version %d maxT %d V %d L %d NH %d C %d Vp %d, slots 8..255 zero %d",
           h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], rest_zero);
    expect(payload_matches(file, n, &a), "plain_file_holds_tensors_in_llmc_order_as_fp32",
           "file %zu bytes, expected 1024 + 4 x %zu", n, a.num_parameters);
    free(file);

    rc = modelfile_load(&b, path, err);
    int diff = tensors_differing(&a, &b);
    expect(rc == 0 && diff == 0, "plain_roundtrip_is_bit_exact",
           "rc %d, %d of %d tensors differ %s", rc, diff, NUM_PARAMETER_TENSORS, rc ? err : "");

    GPTConfig rc_cfg;
    rc = modelfile_read_config(path, &rc_cfg, err);
    expect(rc == 0 && config_equal(&rc_cfg, &c), "read_config_returns_written_plain_config",
           "rc %d: maxT %d V %d Vp %d L %d NH %d NKV %d C %d", rc, rc_cfg.max_seq_len,
           rc_cfg.vocab_size, rc_cfg.padded_vocab_size, rc_cfg.num_layers, rc_cfg.num_heads,
           rc_cfg.num_kv_heads, rc_cfg.channels);

    /* padded vocab rows: llm.c writes zeros; anything else there is cleared on load */
    char padded[512];
    path_in_dir(padded, "padded.bin");
    file = read_all(path, &n);
    float junk = 7.0f;
    size_t row = 1024 + (size_t)4 * (size_t)(c.vocab_size + 5) * c.channels;  /* wte row V+5 */
    memcpy(file + row, &junk, 4);
    write_all(padded, file, n);
    free(file);
    rc = modelfile_load(&b, padded, err);
    double pad_sum = 0;
    size_t pad0 = (size_t)c.vocab_size * c.channels;
    size_t pad1 = (size_t)c.padded_vocab_size * c.channels;
    for (size_t i = pad0; i < pad1; i++)
        pad_sum += fabs(b.params.wte[i]);
    expect(rc == 0 && pad_sum == 0.0, "load_zeroes_padded_vocab_rows", "rc %d, sum |padded| %g",
           rc, pad_sum);
    unlink(padded);
    gpt_free(&a);
    gpt_free(&b);
}

static void test_gqa_roundtrip(void) {
    GPTConfig c = make_config(3, 4, 2, 32, 200, 24);
    GPT a, b;
    build(&a, &c);
    build(&b, &c);
    fill_random(&a);
    char path[512], err[256];
    path_in_dir(path, "gqa.bin");
    int rc = modelfile_save(&a, path, err);
    expect(rc == 0, "save_gqa_config_succeeds", "rc %d %s", rc, rc ? err : "");

    size_t n;
    unsigned char* file = read_all(path, &n);
    int32_t h[256];
    memcpy(h, file, sizeof(h));
    int rest_zero = 1;
    for (int k = 9; k < 256; k++) rest_zero &= h[k] == 0;
    expect(memcmp(file, "SEED", 4) == 0 && h[1] == 1 && h[2] == 24 && h[3] == 200 && h[4] == 3 &&
           h[5] == 4 && h[6] == 32 && h[7] == 256 && h[8] == 2 && rest_zero,
           "gqa_config_writes_seedgpt_v1_header",
           "bytes 0..3 \"%.4s\" version %d maxT %d V %d L %d NH %d C %d Vp %d NKV %d, "
           "slots 9..255 zero %d", (const char*)file, h[1], h[2], h[3], h[4], h[5], h[6], h[7],
           h[8], rest_zero);
    expect(payload_matches(file, n, &a), "gqa_file_holds_tensors_in_llmc_order_as_fp32",
           "file %zu bytes, expected 1024 + 4 x %zu", n, a.num_parameters);
    free(file);

    rc = modelfile_load(&b, path, err);
    int diff = tensors_differing(&a, &b);
    expect(rc == 0 && diff == 0, "gqa_roundtrip_is_bit_exact", "rc %d, %d of %d tensors differ %s",
           rc, diff, NUM_PARAMETER_TENSORS, rc ? err : "");

    GPTConfig r;
    rc = modelfile_read_config(path, &r, err);
    expect(rc == 0 && config_equal(&r, &c), "read_config_returns_written_gqa_config",
           "rc %d: maxT %d V %d Vp %d L %d NH %d NKV %d C %d", rc, r.max_seq_len, r.vocab_size,
           r.padded_vocab_size, r.num_layers, r.num_heads, r.num_kv_heads, r.channels);

    /* a reserved option a later version may define is refused, not ignored */
    char bad[512];
    path_in_dir(bad, "gqa_reserved.bin");
    patch_header(path, bad, 9, 1);
    expect_refusal("refuses_nonzero_reserved_slot_in_seedgpt_header", &b, bad,
                   "slot 9", "positional");
    patch_header(path, bad, 1, 3);
    expect_refusal("refuses_wrong_seedgpt_version", &b, bad, "seedgpt model file version 3",
                   "reads 1 to 2");
    unlink(bad);

    GPTConfig c4 = make_config(3, 4, 4, 32, 200, 24);   /* same shapes, plain heads */
    GPT p;
    build(&p, &c4);
    expect_refusal("refuses_gqa_file_for_plain_model", &p, path, "num_kv_heads",
                   "is 2 in the file but 4 in the model");
    gpt_free(&p);
    gpt_free(&a);
    gpt_free(&b);
}

static void test_refusals(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 100, 16);
    GPT m;
    build(&m, &c);
    fill_random(&m);
    char good[512], bad[512], err[256];
    path_in_dir(good, "good.bin");
    path_in_dir(bad, "bad.bin");
    if (modelfile_save(&m, good, err) != 0) { printf("FAIL save: %s\n", err); exit(1); }
    fill_random(&m);   /* the model now differs from the file: a refused load must not touch it */

    patch_header(good, bad, 0, 20240520);   /* a token shard's magic */
    expect_refusal("refuses_wrong_magic", &m, bad, "magic", "20240520");
    patch_header(good, bad, 1, 4);
    expect_refusal("refuses_wrong_version", &m, bad, "version 4", "expected 3 (fp32) or 5 (bf16)");
    patch_header(good, bad, 1, 5);   /* bf16 promises 2 bytes a weight: this file has 4 */
    expect_refusal("refuses_fp32_payload_under_bf16_version", &m, bad, "oversized", "1024 + 2 x");
    resize_copy(good, bad, -4);
    expect_refusal("refuses_truncated_file", &m, bad, "truncated", NULL);
    resize_copy(good, bad, 4);
    expect_refusal("refuses_oversized_file", &m, bad, "oversized", NULL);
    resize_copy(good, bad, -(long)(4 * m.num_parameters + 100));   /* not even a header */
    expect_refusal("refuses_file_shorter_than_header", &m, bad, "header", NULL);
    patch_header(good, bad, 7, 64);         /* Vp < V */
    expect_refusal("refuses_padded_vocab_below_vocab", &m, bad, "padded vocab", NULL);
    patch_header(good, bad, 6, 30);         /* C % NH != 0 */
    expect_refusal("refuses_channels_not_multiple_of_heads", &m, bad, "multiple of heads", NULL);
    patch_header(good, bad, 4, -2);
    expect_refusal("refuses_nonpositive_layers", &m, bad, "layers", "positive");
    patch_header(good, bad, 4, 1 << 30);    /* absurd: L * 4C * C must not overflow the size */
    patch_header(bad, bad, 6, 1 << 30);     /* check */
    expect_refusal("refuses_absurd_header_without_overflow", &m, bad, "bad header", NULL);
    char missing[512];
    path_in_dir(missing, "missing.bin");
    expect_refusal("refuses_missing_file", &m, missing, "cannot open", NULL);
    expect_refusal("refuses_directory", &m, dir, "not a regular file", NULL);

    /* a valid file of another shape */
    GPTConfig c3 = make_config(3, 4, 4, 32, 100, 16);
    GPT m3;
    build(&m3, &c3);
    expect_refusal("refuses_file_with_fewer_layers_than_model", &m3, good, "num_layers",
                   "is 2 in the file but 3 in the model");
    gpt_free(&m3);
    GPTConfig cw = make_config(2, 4, 4, 64, 100, 16);
    build(&m3, &cw);
    expect_refusal("refuses_file_with_other_channels", &m3, good, "channels",
                   "is 32 in the file but 64 in the model");
    gpt_free(&m3);
    GPTConfig cv = make_config(2, 4, 4, 32, 120, 16);  /* same Vp, other V */
    build(&m3, &cv);
    expect_refusal("refuses_file_with_other_vocab", &m3, good, "vocab_size",
                   "is 100 in the file but 120 in the model");
    gpt_free(&m3);
    GPTConfig cg = make_config(2, 4, 2, 32, 100, 16);  /* GQA model, plain file */
    build(&m3, &cg);
    expect_refusal("refuses_plain_file_for_gqa_model", &m3, good, "num_kv_heads",
                   "is 4 in the file but 2 in the model");
    gpt_free(&m3);

    /* a non-finite weight: refused naming the tensor and the element, the model untouched (the
     * weights are checked before any is copied). The last float of the file is the last element
     * of lnfb; an infinity in the first tensor's element 5 is wte's. */
    {
        size_t n;
        unsigned char* bytes = read_all(good, &n);
        float nan = NAN, inf = INFINITY;
        memcpy(bytes + n - 4, &nan, 4);
        write_all(bad, bytes, n);
        char where[64];
        snprintf(where, sizeof(where), "lnfb element %d", c.channels - 1);
        expect_refusal("refuses_nan_weight_naming_tensor_and_element", &m, bad, where, "nan");
        memcpy(bytes + n - 4, &bytes[n - 8], 4);
        memcpy(bytes + 1024 + 5 * 4, &inf, 4);
        write_all(bad, bytes, n);
        expect_refusal("refuses_infinite_weight_naming_tensor_and_element", &m, bad,
                       "wte element 5", "inf");
        /* a training state in a model file's place: said so, pointing to --resume */
        memcpy(bytes, "SEEDSTAT", 8);
        write_all(bad, bytes, n);
        expect_refusal("refuses_training_state_as_model_file_saying_so", &m, bad,
                       "is a training state", "--resume");
        free(bytes);
    }

    GPTConfig r;
    int rc = modelfile_read_config(missing, &r, err);
    expect(rc == -1 && strstr(err, missing) != NULL, "read_config_names_missing_file",
           "rc %d: \"%s\"", rc, err);
    patch_header(good, bad, 0, 12345);
    rc = modelfile_read_config(bad, &r, err);
    expect(rc == -1 && strstr(err, bad) != NULL && strstr(err, "magic") != NULL,
           "read_config_refuses_wrong_magic", "rc %d: \"%s\"", rc, err);
    unlink(bad);
    unlink(good);
    gpt_free(&m);
}

static void test_failing_saves(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 100, 16);
    GPT a, b;
    build(&a, &c);
    build(&b, &c);
    fill_random(&a);
    fill_random(&b);
    char good[512], tmp[600], err[256];
    path_in_dir(good, "keep.bin");
    snprintf(tmp, sizeof(tmp), "%s.tmp", good);
    if (modelfile_save(&a, good, err) != 0) { printf("FAIL save: %s\n", err); exit(1); }
    size_t n0;
    unsigned char* before = read_all(good, &n0);

    /* PATH.tmp cannot be created (a directory sits there) */
    mkdir(tmp, 0700);
    err[0] = '\0';
    int rc = modelfile_save(&b, good, err);
    size_t n1;
    unsigned char* after = read_all(good, &n1);
    int same = n1 == n0 && memcmp(before, after, n0) == 0;
    expect(rc == -1 && same && strstr(err, good) != NULL,
           "failing_save_leaves_previous_file_byte_identical",
           "rc %d, file unchanged %d: \"%s\"", rc, same, err);
    free(after);
    rmdir(tmp);

    /* a NaN weight: nothing is written (MODELFILE_NON_FINITE), the previous file stays */
    {
        float keep = b.params.ln1w[3];
        b.params.ln1w[3] = NAN;
        err[0] = '\0';
        rc = modelfile_save(&b, good, err);
        b.params.ln1w[3] = keep;
        after = read_all(good, &n1);
        same = n1 == n0 && memcmp(before, after, n0) == 0;
        expect(rc == MODELFILE_NON_FINITE && same && !file_exists(tmp) &&
               strstr(err, "ln1w element 3") != NULL && strstr(err, good) != NULL,
               "save_refuses_non_finite_weight_and_keeps_previous_file",
               "rc %d, file unchanged %d, tmp left %d: \"%s\"", rc, same, file_exists(tmp), err);
        free(after);
    }

    /* a folder that does not exist */
    char nodir[512];
    path_in_dir(nodir, "no/such/folder/m.bin");
    err[0] = '\0';
    rc = modelfile_save(&b, nodir, err);
    expect(rc == -1 && strstr(err, nodir) != NULL, "save_into_missing_folder_fails_with_message",
           "rc %d: \"%s\"", rc, err);

    /* the rename fails (a non-empty folder has the name): the temporary file is removed */
    char target[512], inner[600], ttmp[600];
    path_in_dir(target, "occupied");
    snprintf(inner, sizeof(inner), "%s/x", target);
    snprintf(ttmp, sizeof(ttmp), "%s.tmp", target);
    mkdir(target, 0700);
    write_all(inner, "x", 1);
    err[0] = '\0';
    rc = modelfile_save(&b, target, err);
    expect(rc == -1 && !file_exists(ttmp) && strstr(err, "rename") != NULL,
           "failing_rename_removes_temporary_file", "rc %d, tmp left %d: \"%s\"", rc,
           file_exists(ttmp), err);
    unlink(inner);
    rmdir(target);

    /* a good save replaces the file and leaves no temporary behind */
    rc = modelfile_save(&b, good, err);
    GPT r;
    build(&r, &c);
    int lrc = modelfile_load(&r, good, err);
    int diff = tensors_differing(&b, &r);
    expect(rc == 0 && lrc == 0 && diff == 0 && !file_exists(tmp),
           "save_replaces_previous_file_without_leftovers",
           "save rc %d, load rc %d, %d tensors differ, tmp left %d", rc, lrc, diff,
           file_exists(tmp));
    gpt_free(&r);
    free(before);
    unlink(good);
    gpt_free(&a);
    gpt_free(&b);
}

/* A NaN or an infinity in any of the 16 tensors, at its first and at its last element, is refused
 * by the load (naming the tensor and the element, the model untouched) and by the save (nothing
 * written, the previous file byte for byte). The tensors' names, order and sizes are llm.c's,
 * written out here for this model (L 2, C 32, V 100 padded to Vp, maxT 16), not taken from
 * gpt.c. */
static void test_non_finite_in_every_tensor(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 100, 16);
    const size_t L = 2, C = 32, Vp = (size_t)c.padded_vocab_size, T = 16;
    const char* names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                             "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const size_t sizes[16] = {Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C,
                              L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C,
                              C, C};
    GPT m, b;
    build(&m, &c);
    build(&b, &c);
    fill_random(&m);
    fill_random(&b);
    char good[512], bad[512], tmp[600], err[256], where[96];
    path_in_dir(good, "every.bin");
    path_in_dir(bad, "every_bad.bin");
    snprintf(tmp, sizeof(tmp), "%s.tmp", good);
    if (modelfile_save(&m, good, err) != 0) { printf("FAIL save: %s\n", err); exit(1); }
    size_t n;
    unsigned char* bytes = read_all(good, &n);
    size_t total = 0;
    for (int k = 0; k < 16; k++) total += sizes[k];
    float* before = malloc(total * sizeof(float));
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &b.params, sizeof(ptr));
    for (size_t k = 0, off = 0; k < 16; off += sizes[k], k++)
        memcpy(before + off, ptr[k], sizes[k] * 4);
    int load_bad = 0, save_bad = 0, cases = 0;
    char load_detail[600] = "", save_detail[600] = "";
    size_t off = 1024;   /* the header, then the tensors in this order */
    for (int k = 0; k < 16; k++) {
        for (int last = 0; last < 2; last++) {
            size_t e = last ? sizes[k] - 1 : 0;
            float v = last ? NAN : -INFINITY;
            snprintf(where, sizeof(where), "tensor %s element %zu is %s", names[k], e,
                     last ? "nan" : "-inf");
            cases++;
            /* the load: the file with v at tensor k's element e */
            float keep;
            memcpy(&keep, bytes + off + 4 * e, 4);
            memcpy(bytes + off + 4 * e, &v, 4);
            write_all(bad, bytes, n);
            memcpy(bytes + off + 4 * e, &keep, 4);
            err[0] = '\0';
            int rc = modelfile_load(&b, bad, err);
            int untouched = 1;
            for (size_t j = 0, o = 0; j < 16; o += sizes[j], j++)
                untouched &= memcmp(before + o, ptr[j], sizes[j] * 4) == 0;
            size_t used = strlen(load_detail);
            if (!(rc == -1 && strstr(err, where) && strstr(err, bad) && untouched) && load_bad++ < 2)
                snprintf(load_detail + used, sizeof(load_detail) - used,
                         " [%s: rc %d, model untouched %d, \"%.150s\"]", where, rc, untouched, err);
            /* the save: model b with v at tensor k's element e, over the file of model m */
            keep = ptr[k][e];
            ptr[k][e] = v;
            err[0] = '\0';
            rc = modelfile_save(&b, good, err);
            ptr[k][e] = keep;
            size_t n2;
            unsigned char* after = read_all(good, &n2);
            int same = n2 == n && memcmp(after, bytes, n) == 0;
            free(after);
            if (!(rc == MODELFILE_NON_FINITE && same && !file_exists(tmp) && strstr(err, where))) {
                used = strlen(save_detail);
                if (save_bad++ < 2)
                    snprintf(save_detail + used, sizeof(save_detail) - used,
                             " [%s: rc %d, file unchanged %d, tmp left %d, \"%.150s\"]", where, rc,
                             same, file_exists(tmp), err);
                if (!same) write_all(good, bytes, n);   /* the next cases need m's file back */
            }
        }
        off += 4 * sizes[k];
    }
    expect(load_bad == 0 && off == n, "load_refuses_a_non_finite_weight_in_each_of_the_16_tensors",
           "-inf at the first and nan at the last element of each tensor: %d of %d loads not "
           "refused as expected (the file %zu B, the tensors end at %zu B)%s", load_bad, cases, n,
           off, load_detail);
    expect(save_bad == 0, "save_refuses_a_non_finite_weight_in_each_of_the_16_tensors",
           "-inf at the first and nan at the last element of each tensor: %d of %d saves not "
           "refused with the previous file kept%s", save_bad, cases, save_detail);
    free(before);
    free(bytes);
    unlink(bad);
    unlink(good);
    gpt_free(&m);
    gpt_free(&b);
}

/* llm.c's bf16 model file (version 5): the same header and tensor order, 2 bytes a weight. It
 * loads with every weight widened exactly (bf16 -> fp32 appends 16 zero bits); a short one and one
 * holding a bf16 NaN are refused. */
static void test_llmc_bf16_file(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 100, 16);
    GPT m, back;
    build(&m, &c);
    build(&back, &c);
    fill_random(&m);
    char good[512], v5[512], bad[512], err[256] = "";
    path_in_dir(good, "v3.bin");
    path_in_dir(v5, "v5.bin");
    path_in_dir(bad, "v5bad.bin");
    if (modelfile_save(&m, good, err) != 0) { printf("FAIL save: %s\n", err); exit(1); }
    size_t n;
    unsigned char* f = read_all(good, &n);
    int32_t five = 5;
    memcpy(f + 4, &five, 4);
    size_t P = (n - 1024) / 4;
    uint16_t* half = malloc(P * 2);
    for (size_t i = 0; i < P; i++) {
        float x;
        memcpy(&x, f + 1024 + 4 * i, 4);
        half[i] = sg_bf16_from_float(x);
    }
    unsigned char* out = malloc(1024 + 2 * P);
    memcpy(out, f, 1024);
    memcpy(out + 1024, half, 2 * P);
    write_all(v5, out, 1024 + 2 * P);
    int rc = modelfile_load(&back, v5, err);
    size_t wrong = 0, at = 0;
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &back.params, sizeof(ptr));
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        for (size_t i = 0; i < back.param_sizes[k]; i++, at++) {
            float w = sg_bf16_to_float(half[at]);
            wrong += memcmp(&ptr[k][i], &w, 4) != 0;
        }
    expect(rc == 0 && wrong == 0, "loads_llmc_bf16_file_widened_exactly",
           "rc %d (%s), %zu of %zu weights differ from their bf16 widened", rc, err, wrong, P);
    GPTConfig fc;
    rc = modelfile_read_config(v5, &fc, err);
    expect(rc == 0 && config_equal(&fc, &c), "reads_llmc_bf16_file_header", "rc %d %s", rc, err);
    write_all(bad, out, 1024 + 2 * P - 2);
    expect_refusal("refuses_truncated_bf16_file", &back, bad, "truncated", "1024 + 2 x");
    uint16_t nan = 0x7fc0;
    memcpy(out + 1024 + 2 * 5, &nan, 2);
    write_all(bad, out, 1024 + 2 * P);
    expect_refusal("refuses_bf16_file_holding_nan", &back, bad, "non-finite", "element 5");
    free(f); free(half); free(out);
    unlink(good); unlink(v5); unlink(bad);
    gpt_free(&m);
    gpt_free(&back);
}

int main(void) {
    snprintf(dir, sizeof(dir), "/tmp/seedgpt_test_modelfile_XXXXXX");
    if (mkdtemp(dir) == NULL) { perror("mkdtemp"); return 1; }
    test_plain_roundtrip();
    test_gqa_roundtrip();
    test_refusals();
    test_failing_saves();
    test_non_finite_in_every_tensor();
    test_llmc_bf16_file();
    char p[512];
    path_in_dir(p, "plain.bin"); unlink(p);
    path_in_dir(p, "gqa.bin"); unlink(p);
    rmdir(dir);
    return test_finish();
}
