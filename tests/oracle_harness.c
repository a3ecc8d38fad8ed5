/* tests/oracle_harness.c — the C side of the PyTorch oracle (tests/torch_oracle.py).
 *
 *   oracle_harness MODEL.bin BATCH.bin OUT.bin
 *
 * Loads the model file the oracle wrote (modelfile_read_config, gpt_build, modelfile_load), runs
 * the batch (dropout off unless the batch file carries a dropout section), and writes what the
 * oracle compares against its own model. Also the C side of tests/torch_dropout_oracle.py.
 *
 * BATCH.bin (little-endian, written by torch_oracle.py / torch_dropout_oracle.py):
 *   int32 B, T;  int32 inputs[B*T];  int32 targets[B*T];
 *   float32 lr, beta1, beta2, eps, weight_decay, clip;  int32 steps
 *   optional dropout section (absent: dropout off, g0 = 0, steps numbered from 0, as before):
 *     uint32 magic 0x504f5244 ("DROP");  uint32 master_seed_lo, master_seed_hi;
 *     uint32 step, g0;  float64 p_embd, p_attn, p_resid
 *   With it, gpt_set_dropout(master seed, p_embd, p_attn, p_resid) and every forward trains with
 *   dropout: the step-0 forward uses (g0, step), AdamW step s uses (g0, step + s).
 * OUT.bin (float32 throughout):
 *   loss of step 0, then every parameter gradient of step 0 (before any update) in llm.c tensor
 *   order, each tensor contiguous (num_parameters floats, padded vocab rows included);
 *   then for each of the `steps` AdamW steps on the same batch: loss, gradient norm before
 *   clipping;  then the final weights (num_parameters floats, same order).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/gpt.h"
#include "model/modelfile.h"

static void die(const char* msg) {
    fprintf(stderr, "oracle_harness: %s\n", msg);
    exit(2);
}

static void read_exact(FILE* f, void* dst, size_t size, size_t n, const char* path) {
    if (fread(dst, size, n, f) != n) {
        fprintf(stderr, "oracle_harness: %s: truncated batch file\n", path);
        exit(2);
    }
}

static void write_floats(FILE* f, const float* x, size_t n) {
    if (fwrite(x, sizeof(float), n, f) != n) die("write error on the output file");
}

static void write_tensors(FILE* f, const ParameterTensors* t, const size_t* sizes) {
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, t, sizeof(ptr));
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) write_floats(f, ptr[k], sizes[k]);
}

int main(int argc, char** argv) {
    if (argc != 4) die("usage: oracle_harness MODEL.bin BATCH.bin OUT.bin");
    const char *model_path = argv[1], *batch_path = argv[2], *out_path = argv[3];
    char err[256];

    GPTConfig cfg;
    if (modelfile_read_config(model_path, &cfg, err) != 0) die(err);

    FILE* bf = fopen(batch_path, "rb");
    if (bf == NULL) die("cannot open the batch file");
    int32_t BT[2];
    read_exact(bf, BT, 4, 2, batch_path);
    int B = BT[0], T = BT[1];
    if (B <= 0 || T <= 0 || T > cfg.max_seq_len) die("bad batch shape");
    int* inputs = malloc((size_t)B * T * sizeof(int));
    int* targets = malloc((size_t)B * T * sizeof(int));
    read_exact(bf, inputs, 4, (size_t)B * T, batch_path);
    read_exact(bf, targets, 4, (size_t)B * T, batch_path);
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= cfg.vocab_size || targets[i] < 0 ||
            targets[i] >= cfg.vocab_size)
            die("token out of range in the batch file");
    }
    float hp[6];   /* lr, beta1, beta2, eps, weight_decay, clip */
    read_exact(bf, hp, 4, 6, batch_path);
    int32_t steps;
    read_exact(bf, &steps, 4, 1, batch_path);
    /* the optional dropout section */
    uint64_t master_seed = 0;
    uint32_t step0 = 0, g0 = 0;
    double p[3] = {0.0, 0.0, 0.0};   /* embedding, attention, residual */
    uint32_t magic;
    if (fread(&magic, 4, 1, bf) == 1) {
        if (magic != 0x504f5244u) die("bad dropout section in the batch file (magic)");
        uint32_t w[4];   /* seed_lo, seed_hi, step, g0 */
        read_exact(bf, w, 4, 4, batch_path);
        read_exact(bf, p, 8, 3, batch_path);
        master_seed = (uint64_t)w[0] | (uint64_t)w[1] << 32;
        step0 = w[2];
        g0 = w[3];
        for (int k = 0; k < 3; k++)
            if (!(p[k] >= 0.0 && p[k] < 1.0)) die("dropout probability outside [0, 1)");
    }
    fclose(bf);

    GPT m;
    if (gpt_build(&m, &cfg, B, T, err) != 0) die(err);
    if (modelfile_load(&m, model_path, err) != 0) die(err);
    gpt_set_dropout(&m, master_seed, p[0], p[1], p[2]);

    FILE* out = fopen(out_path, "wb");
    if (out == NULL) die("cannot create the output file");
    float dloss = 1.0f / (float)(B * T);

    /* step 0's loss and gradients, before any update */
    gpt_zero_grad(&m);
    float loss = gpt_forward(&m, inputs, targets, B, T, g0, step0, 1);
    gpt_backward(&m, dloss);
    write_floats(out, &loss, 1);
    write_tensors(out, &m.grads, m.param_sizes);

    /* the training steps: zero, forward, backward, clip, AdamW */
    for (int step = 0; step < steps; step++) {
        gpt_zero_grad(&m);
        float l = gpt_forward(&m, inputs, targets, B, T, g0, step0 + (uint32_t)step, 1);
        gpt_backward(&m, dloss);
        float norm = gpt_clip_grads(&m, hp[5]);
        gpt_adamw(&m, hp[0], hp[1], hp[2], hp[3], hp[4], step + 1);
        float rec[2] = {l, norm};
        write_floats(out, rec, 2);
    }
    write_tensors(out, &m.params, m.param_sizes);
    if (fclose(out) != 0) die("write error on the output file");

    gpt_free(&m);
    free(inputs);
    free(targets);
    return 0;
}
