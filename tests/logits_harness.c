/* tests/logits_harness.c — seedgpt's logits for a batch, the C side of tests/test_export.py.
 *
 *   logits_harness MODEL.bin TOKENS.bin OUT.bin
 *
 * TOKENS.bin: int32 B, T, then B*T int32 token ids. OUT.bin: the (B*T, V) float32 logits of the
 * real vocabulary from gpt_forward (dropout off, no targets) on the CPU backend, row by row.
 */
#include <stdio.h>
#include <stdlib.h>
#include "model/gpt.h"
#include "model/modelfile.h"

static void die(const char* msg) {
    fprintf(stderr, "logits_harness: %s\n", msg);
    exit(2);
}

int main(int argc, char** argv) {
    if (argc != 4) die("usage: logits_harness MODEL.bin TOKENS.bin OUT.bin");
    char err[256];
    GPTConfig cfg;
    if (modelfile_read_config(argv[1], &cfg, err) != 0) die(err);
    FILE* f = fopen(argv[2], "rb");
    if (f == NULL) die("cannot open the tokens file");
    int32_t BT[2];
    if (fread(BT, 4, 2, f) != 2) die("truncated tokens file");
    int B = BT[0], T = BT[1];
    if (B <= 0 || T <= 0 || T > cfg.max_seq_len || B * T > 1024) die("bad batch shape");
    int* tokens = malloc((size_t)B * T * sizeof(int));
    if (fread(tokens, 4, (size_t)B * T, f) != (size_t)B * T) die("truncated tokens file");
    fclose(f);
    for (int i = 0; i < B * T; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg.vocab_size) die("token out of range");
    GPT m;
    if (gpt_build(&m, &cfg, B, T, err) != 0) die(err);
    if (modelfile_load(&m, argv[1], err) != 0) die(err);
    if (m.classifier_rows < B * T) die("the classifier's chunk does not hold every row");
    gpt_forward(&m, tokens, NULL, B, T, 0, 0, 0);
    FILE* out = fopen(argv[3], "wb");
    if (out == NULL) die("cannot create the output file");
    for (int r = 0; r < B * T; r++)
        if (fwrite(m.logits + (size_t)r * cfg.padded_vocab_size, 4, (size_t)cfg.vocab_size, out) !=
            (size_t)cfg.vocab_size)
            die("write error");
    if (fclose(out) != 0) die("write error");
    gpt_free(&m);
    free(tokens);
    return 0;
}
