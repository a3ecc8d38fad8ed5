/* train.c — seedgpt's entry point: command line, training loop, logging, evaluation, model save.
 *
 *   ./train [flags]            train (./train --help lists every flag)
 *   ./train prepare ...        text -> token shards (data/prepare.h)
 *
 * The step: batch from data/ -> gpt_forward (each layer draws its dropout seeds into its record)
 * -> loss -> gpt_backward (masks regenerated from the records) -> clip -> AdamW.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include "model/gpt.h"
#include "model/mem.h"
#include "model/modelfile.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "data/prepare.h"

void openblas_set_num_threads(int num_threads);  /* OpenBLAS's own; not in every cblas.h */

/* ---- options ------------------------------------------------------------------------------ */

typedef struct {
    const char* train_path;
    const char* val_path;
    const char* init_path;
    const char* save_path;
    const char* log_json;
    const char* tokenizer;
    /* a fresh model */
    int layers, heads, kv_heads, embd, vocab, seq_len;
    /* the batch */
    int batch, seq;
    int steps;
    /* optimizer */
    double lr, final_lr_frac, beta1, beta2, eps, weight_decay, clip;
    const char* lr_schedule;
    int warmup;
    /* randomness */
    uint64_t seed;
    int shuffle;
    double dropout, attn_dropout, resid_dropout, embd_dropout;   /* < 0: unset */
    /* logging and evaluation */
    int log_every, eval_every, eval_batches;
    int threads;
    /* activation checkpointing */
    RecomputePolicy policy;
} Options;

static void usage(FILE* f) {
    fprintf(f,
"seedgpt: train a GPT-2 in C, with dropout that survives activation recompute.\n"
"\n"
"usage: ./train [flags]              train a model\n"
"       ./train prepare --help       turn text files into token shards\n"
"\n"
"data\n"
"  --train PATH        training shards: a file or a glob pattern, e.g. 'data/kjv/train_*.bin'\n"
"  --val PATH          validation shards (optional)\n"
"  --tokenizer NAME    tokenizer of the shards: byte (default; vocab 257)\n"
"  --shuffle 0|1       visit training windows in a seeded shuffled order each epoch (default 1)\n"
"model (a fresh model, unless --init)\n"
"  --init PATH         start from a model file (llm.c fp32 v3 or seedgpt's own)\n"
"  --layers L          blocks (default 4)\n"
"  --heads H           query heads (default 4)\n"
"  --kv-heads K        key/value heads, divides H (default H: plain GPT-2)\n"
"  --embd C            channels, a multiple of H (default 128)\n"
"  --vocab V           vocabulary (default: the tokenizer's, 257 for byte)\n"
"  --seq-len N         the model's maximum context (default 256)\n"
"batch and schedule\n"
"  --batch B           sequences per step (default 8)\n"
"  --seq T             training sequence length, <= seq-len (default seq-len)\n"
"  --steps N           optimizer steps (default 100)\n"
"  --lr X              peak learning rate (default 1e-3)\n"
"  --lr-schedule S     constant | cosine | linear (default cosine)\n"
"  --warmup N          linear warmup steps (default 0)\n"
"  --final-lr-frac F   the schedule ends at F * lr (default 0.1)\n"
"  --beta1 X --beta2 X --eps X   AdamW moments (defaults 0.9, 0.95, 1e-8)\n"
"  --weight-decay X    decoupled, on 2-D weights and embeddings only (default 0.1)\n"
"  --clip X            clip the global gradient norm to X; 0 disables (default 1.0)\n"
"randomness\n"
"  --seed S            master seed: weights, shuffling and every dropout mask (default 1337)\n"
"  --dropout P         dropout probability at every site (default 0)\n"
"  --attn-dropout P    on the attention probabilities (overrides --dropout)\n"
"  --resid-dropout P   on both residual branches (overrides --dropout)\n"
"  --embd-dropout P    on the embedding (overrides --dropout)\n"
"activation checkpointing\n"
"  --recompute P       none | layer | every:K (default none): keep only each segment's input of\n"
"                      K layers and recompute the segment before its backward, with the seeds\n"
"                      its layers drew in the forward (layer = every:1)\n"
"  --recompute-check M off | warn | stop (default warn): a recomputed segment's output must\n"
"                      equal the stored input of the next, bit for bit\n"
"  --recompute-seeds S captured | fresh (default captured). fresh is the negative control: the\n"
"                      recompute draws new masks, as compiled checkpoints with fused dropout\n"
"                      do; gradients are then wrong and the value check says so\n"
"output\n"
"  --log-every N       a progress line every N steps (default 10)\n"
"  --log-json PATH     JSON lines: {\"type\":\"train\",...} per step, {\"type\":\"eval\",...}\n"
"  --eval-every N      validation loss every N steps, and at the end (default 0: only at the end)\n"
"  --eval-batches N    validation windows per evaluation (default 8)\n"
"  --save PATH         write the model file at the end\n"
"  --threads N         OpenMP and OpenBLAS threads (default: all cores)\n");
}

static void die_flag(const char* flag, const char* value, const char* expected) {
    fprintf(stderr, "seedgpt: %s %s: expected %s\n", flag, value ? value : "(missing)", expected);
    exit(2);
}

static long parse_long(const char* flag, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
        char buf[96];
        snprintf(buf, sizeof(buf), "an integer in [%ld, %ld]", lo, hi);
        die_flag(flag, s, buf);
    }
    return v;
}

static double parse_double(const char* flag, const char* s, double lo, double hi, int hi_open) {
    char* end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (s == NULL || *s == '\0' || *end != '\0' || errno != 0 || !isfinite(v) || v < lo ||
        (hi_open ? v >= hi : v > hi)) {
        char buf[96];
        snprintf(buf, sizeof(buf), "a number in [%g, %g%s", lo, hi, hi_open ? ")" : "]");
        die_flag(flag, s, buf);
    }
    return v;
}

static void parse_options(Options* o, int argc, char** argv) {
    memset(o, 0, sizeof(*o));
    o->tokenizer = "byte";
    o->layers = 4; o->heads = 4; o->kv_heads = 0; o->embd = 128; o->vocab = 0; o->seq_len = 256;
    o->batch = 8; o->seq = 0; o->steps = 100;
    o->lr = 1e-3; o->final_lr_frac = 0.1; o->beta1 = 0.9; o->beta2 = 0.95; o->eps = 1e-8;
    o->weight_decay = 0.1; o->clip = 1.0; o->lr_schedule = "cosine"; o->warmup = 0;
    o->seed = 1337; o->shuffle = 1;
    o->dropout = 0.0; o->attn_dropout = o->resid_dropout = o->embd_dropout = -1.0;
    o->log_every = 10; o->eval_every = 0; o->eval_batches = 8; o->threads = 0;
    o->policy.every = 0; o->policy.fresh_seeds = 0; o->policy.check = CHECK_WARN;
    char err[256];
    int seen_layers = 0, seen_heads = 0, seen_kv = 0, seen_embd = 0, seen_seqlen = 0;

    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); exit(0); }
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: unexpected argument '%s' (see ./train --help)\n", f);
            exit(2);
        }
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) die_flag(f, NULL, "a value");
        i++;
        if (!strcmp(f, "--train")) o->train_path = v;
        else if (!strcmp(f, "--val")) o->val_path = v;
        else if (!strcmp(f, "--init")) o->init_path = v;
        else if (!strcmp(f, "--save")) o->save_path = v;
        else if (!strcmp(f, "--log-json")) o->log_json = v;
        else if (!strcmp(f, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(f, "--layers")) { o->layers = parse_long(f, v, 1, 1024); seen_layers = 1; }
        else if (!strcmp(f, "--heads")) { o->heads = parse_long(f, v, 1, 1024); seen_heads = 1; }
        else if (!strcmp(f, "--kv-heads")) { o->kv_heads = parse_long(f, v, 1, 1024); seen_kv = 1; }
        else if (!strcmp(f, "--embd")) { o->embd = parse_long(f, v, 1, 65536); seen_embd = 1; }
        else if (!strcmp(f, "--vocab")) o->vocab = parse_long(f, v, 1, 65536);
        else if (!strcmp(f, "--seq-len")) { o->seq_len = parse_long(f, v, 1, 1 << 20); seen_seqlen = 1; }
        else if (!strcmp(f, "--batch")) o->batch = parse_long(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--seq")) o->seq = parse_long(f, v, 1, 1 << 20);
        else if (!strcmp(f, "--steps")) o->steps = parse_long(f, v, 0, 2000000000L);
        else if (!strcmp(f, "--lr")) o->lr = parse_double(f, v, 0, 10, 0);
        else if (!strcmp(f, "--lr-schedule")) {
            if (strcmp(v, "constant") && strcmp(v, "cosine") && strcmp(v, "linear"))
                die_flag(f, v, "constant, cosine or linear");
            o->lr_schedule = v;
        }
        else if (!strcmp(f, "--warmup")) o->warmup = parse_long(f, v, 0, 2000000000L);
        else if (!strcmp(f, "--final-lr-frac")) o->final_lr_frac = parse_double(f, v, 0, 1, 0);
        else if (!strcmp(f, "--beta1")) o->beta1 = parse_double(f, v, 0, 1, 1);
        else if (!strcmp(f, "--beta2")) o->beta2 = parse_double(f, v, 0, 1, 1);
        else if (!strcmp(f, "--eps")) o->eps = parse_double(f, v, 0, 1, 0);
        else if (!strcmp(f, "--weight-decay")) o->weight_decay = parse_double(f, v, 0, 10, 0);
        else if (!strcmp(f, "--clip")) o->clip = parse_double(f, v, 0, 1e30, 0);
        else if (!strcmp(f, "--shuffle")) o->shuffle = parse_long(f, v, 0, 1);
        else if (!strcmp(f, "--seed")) {
            char* end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 0);
            if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0)
                die_flag(f, v, "an unsigned 64-bit integer");
            o->seed = s;
        }
        else if (!strcmp(f, "--dropout")) o->dropout = parse_double(f, v, 0, 1, 1);
        else if (!strcmp(f, "--attn-dropout")) o->attn_dropout = parse_double(f, v, 0, 1, 1);
        else if (!strcmp(f, "--resid-dropout")) o->resid_dropout = parse_double(f, v, 0, 1, 1);
        else if (!strcmp(f, "--embd-dropout")) o->embd_dropout = parse_double(f, v, 0, 1, 1);
        else if (!strcmp(f, "--log-every")) o->log_every = parse_long(f, v, 0, 2000000000L);
        else if (!strcmp(f, "--eval-every")) o->eval_every = parse_long(f, v, 0, 2000000000L);
        else if (!strcmp(f, "--eval-batches")) o->eval_batches = parse_long(f, v, 1, 1000000);
        else if (!strcmp(f, "--threads")) o->threads = parse_long(f, v, 1, 1024);
        else if (!strcmp(f, "--recompute")) {
            if (recompute_parse(v, &o->policy, err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); exit(2); }
        }
        else if (!strcmp(f, "--recompute-check")) {
            if (recompute_check_parse(v, &o->policy.check, err) != 0) {
                fprintf(stderr, "seedgpt: %s\n", err);
                exit(2);
            }
        }
        else if (!strcmp(f, "--recompute-seeds")) {
            if (strcmp(v, "captured") && strcmp(v, "fresh")) die_flag(f, v, "captured or fresh");
            o->policy.fresh_seeds = !strcmp(v, "fresh");
        }
        else {
            fprintf(stderr, "seedgpt: unknown flag %s (see ./train --help)\n", f);
            exit(2);
        }
    }
    if (o->train_path == NULL) {
        fprintf(stderr, "seedgpt: --train PATH is required (see ./train --help)\n");
        exit(2);
    }
    if (o->init_path != NULL && (seen_layers || seen_heads || seen_kv || seen_embd || seen_seqlen)) {
        fprintf(stderr, "seedgpt: --init takes the model shape from the file; drop --layers, "
                        "--heads, --kv-heads, --embd and --seq-len\n");
        exit(2);
    }
    if (o->policy.fresh_seeds && o->policy.every == 0) {
        fprintf(stderr, "seedgpt: --recompute-seeds fresh needs a recompute policy (--recompute "
                        "layer or every:K): under none nothing is recomputed\n");
        exit(2);
    }
    if (o->kv_heads == 0) o->kv_heads = o->heads;
    if (o->attn_dropout < 0) o->attn_dropout = o->dropout;
    if (o->resid_dropout < 0) o->resid_dropout = o->dropout;
    if (o->embd_dropout < 0) o->embd_dropout = o->dropout;
}

/* ---- the learning-rate schedule ----------------------------------------------------------- */

static double lr_at(const Options* o, int step) {
    if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
    if (!strcmp(o->lr_schedule, "constant")) return o->lr;
    double lr_min = o->lr * o->final_lr_frac;
    int span = o->steps - o->warmup;
    double progress = span > 1 ? (double)(step - o->warmup) / (span - 1) : 1.0;
    if (!strcmp(o->lr_schedule, "linear")) return o->lr - (o->lr - lr_min) * progress;
    return lr_min + 0.5 * (1.0 + cos(M_PI * progress)) * (o->lr - lr_min);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Mean loss over the first n windows of the validation split, dropout off. Uses its own loader,
 * so it never moves the training loader. */
static float evaluate(GPT* m, DataLoader* val, int n, int* inputs, int* targets) {
    size_t windows = loader_num_windows(val);
    if ((size_t)n > windows) n = (int)windows;
    double sum = 0.0;
    for (int k = 0; k < n; k++) {
        if (loader_window(val, (size_t)k, inputs, targets) != 0) {
            fprintf(stderr, "seedgpt: %s\n", val->err);
            exit(2);
        }
        sum += gpt_forward(m, inputs, targets, val->B, val->T, 0, 0, 0);
    }
    return (float)(sum / n);
}

int main(int argc, char** argv) {
    if (argc >= 2 && !strcmp(argv[1], "prepare")) return prepare_main(argc - 2, argv + 2);

    Options o;
    parse_options(&o, argc, argv);
    if (o.threads > 0) omp_set_num_threads(o.threads);
    int threads = omp_get_max_threads();
    openblas_set_num_threads(threads);

    char err[256];
    Tokenizer tok;
    if (tokenizer_init(&tok, o.tokenizer, err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return 2; }

    /* the model's configuration: from the file, or from the flags */
    GPTConfig cfg;
    if (o.init_path != NULL) {
        if (modelfile_read_config(o.init_path, &cfg, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return 2;
        }
        if (o.vocab != 0 && o.vocab != cfg.vocab_size) {
            fprintf(stderr, "seedgpt: --vocab %d contradicts %s (vocab %d)\n", o.vocab,
                    o.init_path, cfg.vocab_size);
            return 2;
        }
    } else {
        cfg.max_seq_len = o.seq_len;
        cfg.vocab_size = o.vocab ? o.vocab : tok.vocab_size;
        cfg.padded_vocab_size = gpt_pad_vocab(cfg.vocab_size);
        cfg.num_layers = o.layers;
        cfg.num_heads = o.heads;
        cfg.num_kv_heads = o.kv_heads;
        cfg.channels = o.embd;
        const char* problem = gpt_config_problem(&cfg);
        if (problem != NULL) { fprintf(stderr, "seedgpt: model flags: %s\n", problem); return 2; }
    }
    if (cfg.vocab_size < tok.vocab_size) {
        fprintf(stderr, "seedgpt: model vocab %d is smaller than the %s tokenizer's %d\n",
                cfg.vocab_size, tokenizer_name(&tok), tok.vocab_size);
        return 2;
    }
    int B = o.batch, T = o.seq ? o.seq : cfg.max_seq_len;
    if (T > cfg.max_seq_len) {
        fprintf(stderr, "seedgpt: --seq %d exceeds the model's maximum context %d\n", T,
                cfg.max_seq_len);
        return 2;
    }

    DataLoader train_loader, val_loader;
    uint64_t shuffle_seed = philox_stream_seed(o.seed, STREAM_SHUFFLE);
    if (loader_open(&train_loader, o.train_path, B, T, cfg.vocab_size, o.shuffle, shuffle_seed,
                    err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return 2;
    }
    int have_val = o.val_path != NULL;
    if (have_val && loader_open(&val_loader, o.val_path, B, T, cfg.vocab_size, 0, 0, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return 2;
    }

    GPT model;
    if (gpt_build_policy(&model, &cfg, B, T, &o.policy, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return 2;
    }
    if (o.init_path != NULL) {
        if (modelfile_load(&model, o.init_path, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return 2;
        }
    } else {
        gpt_init_weights(&model, o.seed);
    }
    gpt_set_dropout(&model, o.seed, o.embd_dropout, o.attn_dropout, o.resid_dropout);

    FILE* jsonf = NULL;
    if (o.log_json != NULL) {
        jsonf = fopen(o.log_json, "w");
        if (jsonf == NULL) {
            fprintf(stderr, "seedgpt: --log-json %s: cannot open for writing (%s)\n", o.log_json,
                    strerror(errno));
            return 2;
        }
    }

    GPTMemory mem = gpt_memory(&model);
    printf("model: L%d H%d KV%d C%d V%d (padded %d) maxT %d, %zu parameters\n",
           cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.channels, cfg.vocab_size,
           cfg.padded_vocab_size, cfg.max_seq_len, model.num_parameters);
    printf("batch %d x %d, %d steps, %zu training windows, %d threads\n", B, T, o.steps,
           loader_num_windows(&train_loader), threads);
    printf("dropout: embd %g attn %g resid %g, seed %llu\n", o.embd_dropout, o.attn_dropout,
           o.resid_dropout, (unsigned long long)o.seed);
    char pname[32];
    printf("recompute: %s%s, value check %s\n", recompute_name(&o.policy, pname),
           o.policy.fresh_seeds ? " with FRESH seeds (negative control: gradients will be wrong)" : "",
           o.policy.check == CHECK_OFF ? "off" : o.policy.check == CHECK_WARN ? "warn" : "stop");
    printf("memory (MiB): params %.1f, grads %.1f, AdamW %.1f, kept activations %.1f, "
           "recompute scratch %.1f, gradient scratch %.1f\n",
           mem.params / 1048576.0, mem.grads / 1048576.0, mem.optimizer / 1048576.0,
           mem.activations / 1048576.0, mem.recompute / 1048576.0, mem.scratch / 1048576.0);
    fflush(stdout);

    int* inputs = mem_alloc((size_t)B * T * sizeof(int));
    int* targets = mem_alloc((size_t)B * T * sizeof(int));
    double total_ms = 0.0;
    float last_loss = 0.0f;
    for (int step = 0; step < o.steps; step++) {
        if (loader_next(&train_loader, inputs, targets) != 0) {
            fprintf(stderr, "seedgpt: %s\n", train_loader.err);
            return 2;
        }
        double t0 = now_ms();
        float loss = gpt_forward(&model, inputs, targets, B, T, 0, (uint32_t)step, 1);
        gpt_zero_grad(&model);
        int mismatches = gpt_backward(&model, 1.0f / (B * T));
        if (mismatches > 0 && o.policy.check == CHECK_STOP) {
            fprintf(stderr, "seedgpt: stopping at step %d: the recompute check failed in %d "
                    "segment(s), first at layer %d (--recompute-check stop)\n", step, mismatches,
                    model.check_first_layer);
            return 3;
        }
        float norm = gpt_clip_grads(&model, (float)o.clip);
        double lr = lr_at(&o, step);
        int finite = isfinite(loss) && isfinite(norm);
        if (finite) {
            gpt_adamw(&model, (float)lr, (float)o.beta1, (float)o.beta2, (float)o.eps,
                      (float)o.weight_decay, step + 1);
        }
        double ms = now_ms() - t0;
        total_ms += ms;
        last_loss = loss;
        if (!finite) printf("step %d: non-finite loss %g or grad norm %g; update skipped\n",
                            step, loss, norm);
        if (o.log_every > 0 && (step % o.log_every == 0 || step == o.steps - 1)) {
            printf("step %5d/%d | loss %.4f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s\n",
                   step, o.steps, loss, lr, norm, ms, B * T / (ms / 1e3));
            fflush(stdout);
        }
        if (jsonf != NULL) {
            fprintf(jsonf, "{\"type\":\"train\",\"step\":%d,\"loss\":%.9g,\"grad_norm\":%.9g,"
                           "\"lr\":%.9g,\"step_ms\":%.3f,\"peak_bytes\":%zu}\n",
                    step, loss, norm, lr, ms, mem_stats().peak_bytes);
            fflush(jsonf);
        }
        int last = step == o.steps - 1;
        if (have_val && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last)) {
            float vl = evaluate(&model, &val_loader, o.eval_batches, inputs, targets);
            printf("step %5d | val loss %.4f\n", step, vl);
            if (jsonf != NULL) {
                fprintf(jsonf, "{\"type\":\"eval\",\"step\":%d,\"val_loss\":%.9g}\n", step, vl);
                fflush(jsonf);
            }
        }
    }
    if (o.steps > 0) {
        printf("done: %d steps, final loss %.4f, mean %.1f ms/step\n", o.steps, last_loss,
               total_ms / o.steps);
    }
    if (o.save_path != NULL) {
        if (modelfile_save(&model, o.save_path, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return 2;
        }
        printf("saved %s\n", o.save_path);
    }
    if (jsonf != NULL) fclose(jsonf);
    mem_free(inputs);
    mem_free(targets);
    loader_close(&train_loader);
    if (have_val) loader_close(&val_loader);
    gpt_free(&model);
    tokenizer_free(&tok);
    return 0;
}
