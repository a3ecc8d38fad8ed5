/* tests/test_state.c — the training-state file (model/state.h, docs/formats.md "Training state"):
 * bit-exact round trip of weights, AdamW moments and every header field; the byte layout as
 * documented (offsets, order of the arrays, size, CRC32 of everything before the trailer); the
 * finiteness guard on both sides; refusals that name the field; the run folder's listing and
 * pruning; the SEEDGPT_FAULT syntax. The table of corrupted files is tests/test_corrupt.c.
 */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/test.h"
#include "tests/crc32_ref.h"
#include "model/gpt.h"
#include "model/state.h"

static char dir[256];

static void path_in_dir(char* out, const char* name) { snprintf(out, 512, "%s/%s", dir, name); }

static unsigned char* read_all(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) { *n = 0; return NULL; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static void write_all(const char* path, const void* buf, size_t n) {
    FILE* f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
}

static int file_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

static GPTConfig make_config(int L, int NH, int NKV, int C, int V, int maxT) {
    GPTConfig c = {maxT, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};  /* plain GPT-2 model options */
    return c;
}

static void build(GPT* m, const GPTConfig* c) {
    char err[256];
    if (gpt_build(m, c, 1, 4, err) != 0) { printf("FAIL build: %s\n", err); exit(1); }
}

/* every float of weights, m and v random; v >= 0 as AdamW keeps it */
static void fill_random(GPT* m) {
    size_t n = m->num_parameters;
    for (size_t i = 0; i < n; i++) {
        m->params_memory[i] = (float)test_normal();
        m->m_memory[i] = (float)(0.01 * test_normal());
        m->v_memory[i] = (float)(1e-4 * test_uniform());
    }
}

/* The three arrays in file order (weights, m, v; each tensor by tensor in llm.c order). */
static float* tensor_of(const GPT* m, int which, int k) {
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->params, sizeof(p));
    size_t off = (size_t)(p[k] - m->params_memory);
    return (which == 0 ? m->params_memory : which == 1 ? m->m_memory : m->v_memory) + off;
}

static int arrays_equal(const GPT* a, const GPT* b) {
    for (int which = 0; which < 3; which++)
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
            if (memcmp(tensor_of(a, which, k), tensor_of(b, which, k),
                       a->param_sizes[k] * sizeof(float)) != 0) return 0;
    return 1;
}

static StateInfo* make_info(void) {
    static StateInfo info;
    memset(&info, 0, sizeof(info));
    info.step = 1234;
    info.master_seed = 0xfedcba9876543210ULL;
    info.loader.epoch = 3;
    info.loader.pos = 17;
    info.loader.shuffle_seed = 0x0123456789abcdefULL;
    info.loader.num_windows = 40;
    info.loader.shuffle = 1;
    info.batch = 1;
    info.seq = 4;
    info.bad_consecutive = 2;
    info.bad_total = 5;
    snprintf(info.options, sizeof(info.options), "--lr 0.003\n--train data/x_*.bin\n");
    return &info;
}

static void test_roundtrip(const GPTConfig* c, const char* name) {
    GPT a, b;
    build(&a, c);
    build(&b, c);
    fill_random(&a);
    fill_random(&b);   /* different from a: the load must overwrite every float */
    char path[512], err[256] = "";
    path_in_dir(path, "rt.bin");
    StateInfo* info = make_info();
    int rs = state_save(path, &a, info, err);
    static StateInfo got;
    int rl = rs == 0 ? state_load(path, &b, &got, err) : -1;
    int fields = rl == 0 && got.step == info->step && got.master_seed == info->master_seed &&
                 memcmp(&got.loader, &info->loader, sizeof(StateLoader)) == 0 &&
                 got.batch == info->batch && got.seq == info->seq &&
                 got.bad_consecutive == info->bad_consecutive && got.bad_total == info->bad_total &&
                 strcmp(got.options, info->options) == 0 &&
                 memcmp(&got.config, c, sizeof(GPTConfig)) == 0 &&
                 got.num_parameters == a.num_parameters;
    char test_name[128];
    snprintf(test_name, sizeof(test_name), "state_roundtrip_is_bit_exact_%s", name);
    expect(rs == 0 && rl == 0 && arrays_equal(&a, &b) && fields, test_name,
           "save %d, load %d, weights/m/v bitwise %d, header fields and options equal %d %s", rs,
           rl, rl == 0 && arrays_equal(&a, &b), fields, err);
    unlink(path);
    gpt_free(&a);
    gpt_free(&b);
}

/* The documented layout, read back independently of state.c. */
/* the oracle itself: the published check value of CRC-32, whole and fed in two chunks */
static void test_crc_oracle(void) {
    const char* check = "123456789";
    uint32_t whole = crc32_ref(0, check, 9), split = crc32_ref(crc32_ref(0, check, 4), check + 4, 5);
    expect(whole == 0xCBF43926u && split == whole, "crc32_oracle_gives_the_published_check_value",
           "CRC-32(\"123456789\") 0x%08x whole, 0x%08x in two chunks (published 0xcbf43926)", whole,
           split);
}

static void test_layout(void) {
    GPTConfig c = make_config(2, 4, 2, 32, 100, 16);
    GPT m;
    build(&m, &c);
    fill_random(&m);
    char path[512], err[256];
    path_in_dir(path, "layout.bin");
    StateInfo* info = make_info();
    state_save(path, &m, info, err);
    size_t n;
    unsigned char* f = read_all(path, &n);
    size_t opt = strlen(info->options), P = m.num_parameters;
    uint32_t u32; int32_t i32[7]; uint64_t u64[10];
    memcpy(&u32, f + 8, 4);
    memcpy(i32, f + 16, 28);
    memcpy(u64, f + 48, 80);
    int32_t shuffle, batch, seq; uint32_t bad_run; uint64_t bad_total, opt_bytes, hb;
    memcpy(&shuffle, f + 104, 4); memcpy(&batch, f + 108, 4); memcpy(&seq, f + 112, 4);
    memcpy(&bad_run, f + 116, 4); memcpy(&bad_total, f + 120, 8); memcpy(&opt_bytes, f + 128, 8);
    uint32_t hb32; memcpy(&hb32, f + 12, 4); hb = hb32;
    int reserved_zero = 1;
    for (int i = 136; i < 256; i++) reserved_zero &= f[i] == 0;
    int header_ok = memcmp(f, "SEEDSTAT", 8) == 0 && u32 == 1 && hb == 256 &&
                    i32[0] == 16 && i32[1] == 100 && i32[2] == 128 && i32[3] == 2 && i32[4] == 4 &&
                    i32[5] == 2 && i32[6] == 32 && u64[0] == P && u64[1] == 1234 &&
                    u64[2] == info->master_seed && u64[3] == 3 && u64[4] == 17 &&
                    u64[5] == info->loader.shuffle_seed && u64[6] == 40 && shuffle == 1 &&
                    batch == 1 && seq == 4 && bad_run == 2 && bad_total == 5 && opt_bytes == opt &&
                    reserved_zero && memcmp(f + 256, info->options, opt) == 0;
    expect(header_ok, "state_header_fields_at_documented_offsets",
           "magic %.8s version %u header %llu config %d,%d,%d,%d,%d,%d,%d P %llu step %llu", f, u32,
           (unsigned long long)hb, i32[0], i32[1], i32[2], i32[3], i32[4], i32[5], i32[6],
           (unsigned long long)u64[0], (unsigned long long)u64[1]);
    /* payload: weights, m, v, each the tensors in llm.c order, contiguous */
    size_t off = 256 + opt, mismatches = 0;
    for (int which = 0; which < 3; which++)
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            size_t bytes = m.param_sizes[k] * sizeof(float);
            if (memcmp(f + off, tensor_of(&m, which, k), bytes) != 0) mismatches++;
            off += bytes;
        }
    expect(n == 256 + opt + 12 * P + 4 && off == n - 4 && mismatches == 0,
           "state_payload_is_weights_then_m_then_v_in_llmc_order",
           "file %zu bytes = 256 + %zu + 12 x %zu + 4: %d, %zu tensors misplaced", n, opt, P,
           n == 256 + opt + 12 * P + 4, mismatches);
    uint32_t stored, crc = 0;
    memcpy(&stored, f + n - 4, 4);
    crc = crc32_ref(crc, f, n - 4);
    expect(stored == crc, "state_trailer_is_crc32_of_all_preceding_bytes",
           "stored 0x%08x, computed 0x%08x", stored, crc);
    free(f);
    unlink(path);
    gpt_free(&m);
}

/* The rank count: 0 at offset 44 for one process (the bytes of files from before the field),
 * the count itself for data-parallel runs; read back as 1 and as the count. */
static void test_ranks(void) {
    GPTConfig c = make_config(1, 2, 2, 16, 64, 8);
    GPT m;
    build(&m, &c);
    fill_random(&m);
    char path[512], err[256] = "";
    path_in_dir(path, "ranks.bin");
    const uint32_t counts[3] = {1, 2, 7}, stored_want[3] = {0, 2, 7};
    int good = 1;
    char seen[128] = "";
    for (int i = 0; i < 3; i++) {
        StateInfo* info = make_info();
        info->ranks = counts[i];
        static StateInfo got;
        uint32_t stored = 0xffffffffu;
        size_t n;
        int rs = state_save(path, &m, info, err);
        unsigned char* f = rs == 0 ? read_all(path, &n) : NULL;
        if (f != NULL) { memcpy(&stored, f + 44, 4); free(f); }
        int rl = rs == 0 ? state_read_info(path, &got, err) : -1;
        good &= rs == 0 && rl == 0 && stored == stored_want[i] && got.ranks == counts[i];
        size_t len = strlen(seen);
        snprintf(seen + len, sizeof(seen) - len, "%s%u -> stored %u -> read %u", i ? ", " : "",
                 counts[i], stored, rl == 0 ? got.ranks : 0);
    }
    expect(good, "state_rank_count_is_stored_and_read_back", "%s %s", seen, good ? "" : err);
    unlink(path);
    gpt_free(&m);
}

static void test_nonfinite(void) {
    GPTConfig c = make_config(2, 2, 2, 16, 100, 8);
    GPT m;
    build(&m, &c);
    fill_random(&m);
    char path[512], tmp[520], err[256] = "";
    path_in_dir(path, "finite.bin");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    StateInfo* info = make_info();
    state_save(path, &m, info, err);
    size_t n0, n1;
    unsigned char* before = read_all(path, &n0);

    /* a NaN in v (tensor fcw, element 5) and an Inf in the weights: never written */
    float* fcw_v = tensor_of(&m, 2, 10);
    float keep = fcw_v[5];
    fcw_v[5] = NAN;
    int rc = state_save(path, &m, info, err);
    unsigned char* after = read_all(path, &n1);
    int same = n0 == n1 && memcmp(before, after, n0) == 0;
    expect(rc != 0 && same && !file_exists(tmp) && strstr(err, "AdamW v") && strstr(err, "fcw") &&
           strstr(err, "element 5") && strstr(err, path),
           "save_refuses_nan_in_moment_and_leaves_previous_state", "rc %d, file unchanged %d: \"%s\"",
           rc, same, err);
    free(after);
    fcw_v[5] = keep;
    m.params.lnfb[1] = -INFINITY;
    rc = state_save(path, &m, info, err);
    after = read_all(path, &n1);
    same = n0 == n1 && memcmp(before, after, n0) == 0;
    expect(rc != 0 && same && strstr(err, "weights") && strstr(err, "lnfb"),
           "save_refuses_inf_in_weights_and_leaves_previous_state", "rc %d, unchanged %d: \"%s\"",
           rc, same, err);
    free(after);

    /* a NaN planted in m of a file with a correct CRC: the loader refuses it all the same */
    size_t opt = strlen(info->options), P = m.num_parameters;
    unsigned char* f = malloc(n0);
    memcpy(f, before, n0);
    float nan = NAN;
    memcpy(f + 256 + opt + 4 * P + 4 * 7, &nan, 4);   /* m of wte, element 7 */
    uint32_t crc = crc32_ref(0, f, n0 - 4);
    memcpy(f + n0 - 4, &crc, 4);
    char bad[512];
    path_in_dir(bad, "nan_m.bin");
    write_all(bad, f, n0);
    GPT r;
    build(&r, &c);
    static StateInfo got;
    int ri = state_read_info(bad, &got, err);
    err[0] = '\0';
    rc = state_load(bad, &r, &got, err);
    expect(ri == 0 && rc != 0 && strstr(err, "AdamW m") && strstr(err, "wte") && strstr(err, "element 7"),
           "load_refuses_nan_in_a_file_with_valid_checksum", "crc valid %d, load rc %d: \"%s\"",
           ri == 0, rc, err);
    free(f);
    free(before);
    unlink(bad);
    unlink(path);
    gpt_free(&r);
    gpt_free(&m);
}

static void test_mismatch_and_failed_save(void) {
    GPTConfig c = make_config(2, 2, 2, 16, 100, 8);
    GPT m, other;
    build(&m, &c);
    fill_random(&m);
    char path[512], err[256] = "";
    path_in_dir(path, "mm.bin");
    state_save(path, &m, make_info(), err);
    GPTConfig c3 = make_config(3, 2, 2, 16, 100, 8);
    build(&other, &c3);
    fill_random(&other);
    float before = other.params_memory[0];
    static StateInfo got;
    int rc = state_load(path, &other, &got, err);
    expect(rc != 0 && strstr(err, "num_layers (L) is 2 in the state but 3 in the model") &&
           other.params_memory[0] == before,
           "load_names_the_mismatched_config_field_and_leaves_model", "rc %d: \"%s\"", rc, err);
    gpt_free(&other);

    /* PATH.tmp cannot be created (it is a folder): the save fails, PATH is untouched */
    char tmp[520];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    size_t n0, n1;
    unsigned char* b0 = read_all(path, &n0);
    mkdir(tmp, 0755);
    m.params_memory[0] += 1.0f;
    rc = state_save(path, &m, make_info(), err);
    unsigned char* b1 = read_all(path, &n1);
    expect(rc != 0 && n0 == n1 && memcmp(b0, b1, n0) == 0 && strstr(err, path),
           "failed_save_leaves_previous_state_untouched", "rc %d: \"%s\"", rc, err);
    rmdir(tmp);
    free(b0);
    free(b1);
    unlink(path);
    gpt_free(&m);
}

static void touch(const char* name) {
    char p[512];
    path_in_dir(p, name);
    write_all(p, "x", 1);
}

static void test_list_and_prune(void) {
    char sub[300];
    snprintf(sub, sizeof(sub), "%s/run", dir);
    mkdir(sub, 0755);
    const char* names[] = {"run/state_00000001.bin", "run/state_00000002.bin",
                           "run/state_00000003.bin", "run/state_00000005.bin",
                           "run/state_00000007.bin", "run/state_123456789012.bin",
                           "run/state_00000004.bin.tmp", "run/state_x.bin", "run/state_.bin",
                           "run/state_00000006.binx", "run/model.bin", "run/log.jsonl"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) touch(names[i]);
    uint64_t* steps;
    int n;
    char err[256];
    int rc = state_list(sub, &steps, &n, err);
    int order = rc == 0 && n == 6 && steps[0] == 123456789012ULL && steps[1] == 7 && steps[2] == 5 &&
                steps[3] == 3 && steps[4] == 2 && steps[5] == 1;
    expect(order, "state_list_finds_state_files_newest_first", "rc %d, %d states, first %llu",
           rc, n, n ? (unsigned long long)steps[0] : 0ULL);
    free(steps);

    char p[512];
    path_in_dir(p, "run/state_123456789012.bin");
    unlink(p);
    /* after a save at step 5, keep 2: 5 and 3 stay, 2 and 1 go; 7 (above 5) stays; tmp goes */
    int removed = state_prune(sub, 2, 5);
    int ok = 1;
    const char* stay[] = {"run/state_00000003.bin", "run/state_00000005.bin",
                          "run/state_00000007.bin", "run/state_x.bin", "run/model.bin",
                          "run/log.jsonl", "run/state_00000006.binx"};
    const char* gone[] = {"run/state_00000001.bin", "run/state_00000002.bin",
                          "run/state_00000004.bin.tmp"};
    for (size_t i = 0; i < sizeof(stay) / sizeof(stay[0]); i++) { path_in_dir(p, stay[i]); ok &= file_exists(p); }
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) { path_in_dir(p, gone[i]); ok &= !file_exists(p); }
    expect(ok && removed == 3, "prune_keeps_newest_n_up_to_current_and_removes_stale_tmp",
           "%d files removed, expected files kept/removed %d", removed, ok);
    char path[600];
    rc = state_path(path, sizeof(path), "d", 42);
    expect(rc == 0 && strcmp(path, "d/state_00000042.bin") == 0, "state_path_names_step_with_8_digits",
           "\"%s\"", path);
    /* clean up */
    DIR* d = opendir(sub);
    struct dirent* e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", sub, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(sub);
}

/* Runs first: fault_fires reads SEEDGPT_FAULT once per process. */
static void test_fault_spec(void) {
    const char* good[] = {"a:1", "state_open:3,step_mid:10-12", "x9_y:0-0"};
    const char* bad[] = {"a", "a:", "a:x", "a:5-2", "A:1", "a:1;b:2", "a:-1", "a:1,", ":3", "a:1-"};
    char err[256];
    int good_ok = 1, bad_ok = 1;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        setenv("SEEDGPT_FAULT", good[i], 1);
        good_ok &= fault_check_env(err) == 0;
    }
    char first_bad[64] = "";
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SEEDGPT_FAULT", bad[i], 1);
        err[0] = '\0';
        int refused = fault_check_env(err) != 0 && strstr(err, "SEEDGPT_FAULT") != NULL;
        if (!refused && !first_bad[0]) snprintf(first_bad, sizeof(first_bad), "%s", bad[i]);
        bad_ok &= refused;
    }
    expect(good_ok && bad_ok, "fault_spec_syntax_is_checked", "3 good accepted %d, 10 bad refused %d %s",
           good_ok, bad_ok, first_bad);
    setenv("SEEDGPT_FAULT", "hits:2-3,at:7", 1);
    int h[5];
    for (int i = 0; i < 5; i++) h[i] = fault_fires("hits", -1);
    int at = fault_fires("at", 7) && !fault_fires("at", 6) && !fault_fires("at", 8);
    int other = fault_fires("state_open", -1);
    expect(!h[0] && h[1] && h[2] && !h[3] && !h[4] && at && !other,
           "fault_fires_at_the_nth_hit_or_the_given_index", "hits %d%d%d%d%d, index 7 %d, other %d",
           h[0], h[1], h[2], h[3], h[4], at, other);
}

int main(void) {
    snprintf(dir, sizeof(dir), "/tmp/seedgpt_test_state.XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL mkdtemp\n"); return 1; }
    test_fault_spec();
    GPTConfig plain = make_config(2, 4, 4, 32, 100, 16), gqa = make_config(3, 4, 2, 32, 200, 24);
    test_roundtrip(&plain, "plain");
    test_roundtrip(&gqa, "gqa");
    test_crc_oracle();
    test_layout();
    test_ranks();
    test_nonfinite();
    test_mismatch_and_failed_save();
    test_list_and_prune();
    rmdir(dir);
    return test_finish();
}
