/* tests/test_zero_masters.c — ZeRO-1's sharded fp32 masters under bf16 (model/zero.h) in one
 * process, so that ASan sees every pointer of the compact master layout: models built for each
 * rank's shard (gpt_build_shard, bf16 CPU backend) against one whole model, at 2 and 3 ranks:
 *   - the held parts of the operand-only tensors cover each tensor once; the other tensors whole;
 *   - the initialisation of each part equals the whole model's elements there, masters and bf16
 *     copy alike;
 *   - AdamW on each shard (zero_adamw_shard), then its copy rounded, equals gpt_adamw on the whole
 *     model, bit for bit, masters, moments and copy;
 *   - a state of the whole model loads into each shard model as its part;
 *   - the plan counts the masters a shard model holds; saving one without the others is refused.
 */
#include <unistd.h>
#include "tests/test.h"
#include "model/gpt.h"
#include "model/modelfile.h"
#include "model/state.h"
#include "model/zero.h"

static GPTConfig config(void) {
    /* C 64, V 257 (padded 384): wte 24576 floats, the shards cut inside several tensors */
    GPTConfig c = {32, 257, gpt_pad_vocab(257), 2, 2, 2, 64, 0, 0, 0, 0};
    return c;
}

/* a check's name with the rank count: NAME_R_ranks */
static const char* named(const char* name, int R) {
    static char buf[128];
    snprintf(buf, sizeof(buf), "%s_%d_ranks", name, R);
    return buf;
}

static float* tensor(const ParameterTensors* t, int k) {
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, t, sizeof(p));
    return p[k];
}

int main(void) {
    const Backend* be = backend_lookup("cpu", "bf16");
    GPTConfig c = config();
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    char err[256] = "", dir[] = "/tmp/seedgpt_zero_masters.XXXXXX", path[300];
    if (be == NULL || mkdtemp(dir) == NULL) {
        expect(0, "zero_masters_setup", "no bf16 CPU backend or no temporary folder");
        return test_finish();
    }
    snprintf(path, sizeof(path), "%s/state.bin", dir);
    GPT w;
    if (gpt_build_on(&w, &c, 1, 8, &none, be, err) != 0) {
        expect(0, "zero_masters_build_whole", "%s", err);
        return test_finish();
    }
    gpt_init_weights(&w, 7);
    /* the gradients: random, the same in every model (they are whole on every rank) */
    size_t off[NUM_PARAMETER_TENSORS];
    gpt_param_offsets(&c, off);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        for (size_t i = 0; i < w.param_sizes[k]; i++)
            w.grads_memory[off[k] + i] = (float)(0.01 * test_normal());
    StateInfo info;
    memset(&info, 0, sizeof(info));
    info.step = 3;
    info.batch = 1;
    info.seq = 8;
    info.loader.num_windows = 1;

    for (int R = 2; R <= 3; R++) {
        Zero z;
        GPT s[3];
        size_t covered[NUM_PARAMETER_TENSORS] = {0};
        int init_ok = 1, whole_ok = 1, plan_ok = 1;
        for (int r = 0; r < R; r++) {
            if (zero_init(&z, &c, R, r, err) != 0 ||
                gpt_build_shard(&s[r], &c, 1, 8, &none, be, z.bounds[r], z.bounds[r + 1] - z.bounds[r],
                                err) != 0) {
                expect(0, "zero_masters_build_shard", "%d ranks, rank %d: %s", R, r, err);
                return test_finish();
            }
            gpt_init_weights(&s[r], 7);
            GPTPlan plan;
            gpt_plan_shard(&c, 1, 8, &none, be, s[r].plan_threads, z.bounds[r],
                           z.bounds[r + 1] - z.bounds[r], &plan, err);
            plan_ok &= plan.params == gpt_memory(&s[r]).params && s[r].masters_sharded;
            for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
                size_t first = s[r].master_first[k], held = s[r].master_held[k];
                covered[k] += held;
                if (!gpt_param_operand_only[k] && (first != 0 || held != w.param_sizes[k])) whole_ok = 0;
                if (held == 0) continue;
                init_ok &= !memcmp(tensor(&s[r].params, k), tensor(&w.params, k) + first,
                                   held * sizeof(float));
                init_ok &= !memcmp(gpt_wop_at(&s[r], k, first), gpt_wop_at(&w, k, first), held * 2);
            }
            memcpy(s[r].grads_memory, w.grads_memory, (size_t)off[NUM_PARAMETER_TENSORS - 1] *
                   sizeof(float) + w.param_sizes[NUM_PARAMETER_TENSORS - 1] * sizeof(float));
            zero_free(&z);
        }
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
            if (gpt_param_operand_only[k] && covered[k] != w.param_sizes[k]) whole_ok = 0;
        expect(whole_ok, named("zero_masters_parts_cover_each_tensor_once", R),
               "%d ranks: the operand-only tensors' parts add up to each tensor, the others whole",
               R);
        expect(init_ok, named("zero_masters_init_equals_whole_model", R), "%d ranks: masters and bf16 copy "
               "of every part equal the whole model's", R);
        expect(plan_ok, named("zero_masters_plan_counts_held_masters", R), "%d ranks: each rank's planned "
               "weights equal its built ones", R);

        /* one AdamW step: the whole model, and each rank its shard */
        GPT ref;
        gpt_build_on(&ref, &c, 1, 8, &none, be, err);
        memcpy(ref.params_memory, w.params_memory, gpt_memory(&w).params);
        memcpy(ref.grads_memory, w.grads_memory, gpt_memory(&w).grads);
        gpt_to_backend(&ref);
        gpt_adamw(&ref, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
        int step_ok = 1;
        for (int r = 0; r < R; r++) {
            zero_init(&z, &c, R, r, err);
            zero_adamw_shard(&z, &s[r], 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
            gpt_to_backend(&s[r]);   /* rounds the parts it holds */
            size_t b0 = z.bounds[r], b1 = z.bounds[r + 1];
            for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
                size_t lo = off[k] > b0 ? off[k] : b0, hi = off[k] + w.param_sizes[k];
                if (hi > b1) hi = b1;
                if (lo >= hi) continue;
                size_t i = lo - off[k], n = hi - lo;
                step_ok &= !memcmp(zero_master(&s[r], k, i), tensor(&ref.params, k) + i, n * 4);
                step_ok &= !memcmp(gpt_wop_at(&s[r], k, i), gpt_wop_at(&ref, k, i), n * 2);
                step_ok &= !memcmp(s[r].m_memory + (lo - s[r].opt_begin), ref.m_memory + lo, n * 4);
                step_ok &= !memcmp(s[r].v_memory + (lo - s[r].opt_begin), ref.v_memory + lo, n * 4);
            }
            zero_free(&z);
        }
        expect(step_ok, named("zero_masters_adamw_shard_equals_whole_bitwise", R), "%d ranks: every "
               "shard's masters, bf16 copy, m and v after one step equal gpt_adamw's", R);

        /* the whole model's state loads into each shard model as its part */
        StateInfo got;
        int load_ok = state_save(path, &ref, &info, err) == 0;
        for (int r = 0; r < R && load_ok; r++) {
            load_ok &= state_load(path, &s[r], &got, err) == 0;
            for (int k = 0; k < NUM_PARAMETER_TENSORS && load_ok; k++) {
                size_t first = s[r].master_first[k], held = s[r].master_held[k];
                load_ok &= !memcmp(tensor(&s[r].params, k), tensor(&ref.params, k) + first,
                                   held * 4);
                load_ok &= !memcmp(gpt_wop_at(&s[r], k, first), gpt_wop_at(&ref, k, first),
                                   held * 2);
            }
        }
        expect(load_ok, named("zero_masters_state_loads_as_each_part", R), "%d ranks: %s", R,
               load_ok ? "each shard model holds the state's masters and copy of its part" : err);

        char e1[256] = "", e2[256] = "", mpath[300];
        snprintf(mpath, sizeof(mpath), "%s/model.bin", dir);
        int rs = state_save(path, &s[0], &info, e1), rm = modelfile_save(&s[0], mpath, e2);
        expect(rs == -1 && rm == -1 && access(mpath, F_OK) != 0 && strstr(e2, "one shard"),
               named("zero_masters_save_without_the_others_refused", R), "state %d \"%s\"; model file %d "
               "\"%s\"", rs, e1, rm, e2);
        for (int r = 0; r < R; r++) gpt_free(&s[r]);
        gpt_free(&ref);
    }
    unlink(path);
    rmdir(dir);
    gpt_free(&w);
    return test_finish();
}
