/* train.c — seedgpt's entry point: command line, training loop, logging, evaluation, model save,
 * training states (save, resume, pruning), the non-finite guard and the stop signals.
 *
 *   ./train [flags]            train (./train --help lists every flag)
 *   ./train prepare ...        text -> token shards (data/prepare.h)
 *   ./train sample ...         text from a model file (model/sample.h: KV cache, its own stream)
 *   ./train plot RUNDIR        loss and lr curves to RUNDIR/loss.png (runs scripts/plot.sh)
 *   mpirun -np R ./train_mpi   data parallel over R processes (`make mpi`; model/dist.h)
 *
 * The step: batch from data/ -> gpt_forward (each layer draws its dropout seeds into its record)
 * -> loss -> gpt_backward (masks regenerated from the records) -> [sum of the gradients over the
 * ranks] -> clip -> AdamW.
 *
 * Resume (DESIGN §6). Everything a step depends on is a function of the step number (dropout
 * seeds, learning rate, AdamW's bias correction), of the loader's (epoch, position, shuffle seed),
 * or of the weights and moments — and those are exactly what a state file holds (model/state.h).
 * So K steps + resume + N-K steps equals N steps, bit for bit.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>
#include <cblas.h>
#include "model/gpt.h"
#include "model/dist.h"
#include "model/mem.h"
#include "model/modelfile.h"
#include "model/state.h"
#include "model/sample.h"
#include "model/schedule.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "data/prepare.h"

void openblas_set_num_threads(int num_threads);  /* OpenBLAS's own; not in every cblas.h */

/* Exit statuses (also in --help). */
enum { EXIT_BAD_INPUT = 2, EXIT_RECOMPUTE_CHECK = 3, EXIT_NON_FINITE = 4 };

/* ---- options ------------------------------------------------------------------------------ */

typedef struct {
    const char* train_path;
    const char* val_path;
    const char* init_path;
    const char* save_path;
    const char* log_json;
    const char* tokenizer;
    const char* bpe_dir;     /* gpt2's encoder.json + vocab.bpe; NULL: $SEEDGPT_BPE_DIR, else data/gpt2 */
    /* a fresh model */
    int layers, heads, kv_heads, embd, vocab, seq_len;
    int pos_rope, rope_base, rope_layout, block_parallel;   /* model options (README) */
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
    double drop_path;        /* stochastic depth of each residual branch */
    /* logging and evaluation */
    int log_every, eval_every, eval_batches;
    int sample_every, sample_tokens;
    double peak_gflops;      /* 0: measure this machine's sgemm at start-up */
    /* gradient accumulation: tokens per optimizer step (0: one micro-batch, B*T) */
    long total_batch;
    int threads;
    const char* device;      /* "cpu" or "cuda" (model/backend.h) */
    const char* precision;   /* "fp32" or "bf16" (CUDA only) */
    /* activation checkpointing */
    RecomputePolicy policy;
    /* run folder, resume, the non-finite guard */
    const char* out_dir;
    const char* resume_dir;
    int save_every, keep, max_bad_steps;
    int log_json_is_default;   /* log_json is DIR/log.jsonl because --out was given without it */
} Options;

/* Every flag, and what it is to a resumed run:
 *   R_LOCAL   this process only, not stored in a state
 *   R_SHAPE   stored in the state's header (model shape, batch, seq, seed): must agree
 *   R_FIXED   stored in the state's option text: must agree
 *   R_CHANGE  stored in the option text, may change on resume (omitted: the state's value) */
enum { R_LOCAL, R_SHAPE, R_FIXED, R_CHANGE };
enum {
    F_TRAIN, F_VAL, F_INIT, F_SAVE, F_LOG_JSON, F_TOKENIZER, F_BPE_DIR,
    F_LAYERS, F_HEADS, F_KV_HEADS, F_EMBD, F_VOCAB, F_SEQ_LEN,
    F_POS, F_ROPE_BASE, F_ROPE_LAYOUT, F_BLOCK, F_DROP_PATH,
    F_BATCH, F_SEQ, F_STEPS,
    F_LR, F_LR_SCHEDULE, F_WARMUP, F_FINAL_LR_FRAC, F_BETA1, F_BETA2, F_EPS, F_WEIGHT_DECAY,
    F_CLIP,
    F_SEED, F_SHUFFLE, F_DROPOUT, F_ATTN_DROPOUT, F_RESID_DROPOUT, F_EMBD_DROPOUT,
    F_LOG_EVERY, F_EVAL_EVERY, F_EVAL_BATCHES, F_THREADS,
    F_RECOMPUTE, F_RECOMPUTE_CHECK, F_RECOMPUTE_SEEDS,
    F_OUT, F_RESUME, F_SAVE_EVERY, F_KEEP, F_MAX_BAD_STEPS,
    F_SAMPLE_EVERY, F_SAMPLE_TOKENS, F_PEAK_GFLOPS, F_TOTAL_BATCH, F_DEVICE,
    F_PRECISION,
    NUM_FLAGS
};
static const struct { const char* name; int resume; } flags[NUM_FLAGS] = {
    [F_TRAIN] = {"--train", R_CHANGE},          [F_VAL] = {"--val", R_CHANGE},
    [F_INIT] = {"--init", R_LOCAL},             [F_SAVE] = {"--save", R_CHANGE},
    [F_LOG_JSON] = {"--log-json", R_CHANGE},    [F_TOKENIZER] = {"--tokenizer", R_FIXED},
    [F_BPE_DIR] = {"--bpe-dir", R_LOCAL},
    [F_LAYERS] = {"--layers", R_SHAPE},         [F_HEADS] = {"--heads", R_SHAPE},
    [F_KV_HEADS] = {"--kv-heads", R_SHAPE},     [F_EMBD] = {"--embd", R_SHAPE},
    [F_VOCAB] = {"--vocab", R_SHAPE},           [F_SEQ_LEN] = {"--seq-len", R_SHAPE},
    [F_POS] = {"--pos", R_SHAPE},               [F_ROPE_BASE] = {"--rope-base", R_SHAPE},
    [F_ROPE_LAYOUT] = {"--rope-layout", R_SHAPE}, [F_BLOCK] = {"--block", R_SHAPE},
    [F_DROP_PATH] = {"--drop-path", R_FIXED},
    [F_BATCH] = {"--batch", R_SHAPE},           [F_SEQ] = {"--seq", R_SHAPE},
    [F_STEPS] = {"--steps", R_CHANGE},
    [F_LR] = {"--lr", R_FIXED},                 [F_LR_SCHEDULE] = {"--lr-schedule", R_FIXED},
    [F_WARMUP] = {"--warmup", R_FIXED},         [F_FINAL_LR_FRAC] = {"--final-lr-frac", R_FIXED},
    [F_BETA1] = {"--beta1", R_FIXED},           [F_BETA2] = {"--beta2", R_FIXED},
    [F_EPS] = {"--eps", R_FIXED},               [F_WEIGHT_DECAY] = {"--weight-decay", R_FIXED},
    [F_CLIP] = {"--clip", R_FIXED},
    [F_SEED] = {"--seed", R_SHAPE},             [F_SHUFFLE] = {"--shuffle", R_FIXED},
    [F_DROPOUT] = {"--dropout", R_LOCAL},       /* resolved into the three below */
    [F_ATTN_DROPOUT] = {"--attn-dropout", R_FIXED},
    [F_RESID_DROPOUT] = {"--resid-dropout", R_FIXED},
    [F_EMBD_DROPOUT] = {"--embd-dropout", R_FIXED},
    [F_LOG_EVERY] = {"--log-every", R_CHANGE},  [F_EVAL_EVERY] = {"--eval-every", R_CHANGE},
    [F_EVAL_BATCHES] = {"--eval-batches", R_CHANGE},
    [F_THREADS] = {"--threads", R_LOCAL},
    [F_RECOMPUTE] = {"--recompute", R_CHANGE},  [F_RECOMPUTE_CHECK] = {"--recompute-check", R_CHANGE},
    [F_RECOMPUTE_SEEDS] = {"--recompute-seeds", R_FIXED},
    [F_OUT] = {"--out", R_LOCAL},               [F_RESUME] = {"--resume", R_LOCAL},
    [F_SAVE_EVERY] = {"--save-every", R_CHANGE}, [F_KEEP] = {"--keep", R_CHANGE},
    [F_MAX_BAD_STEPS] = {"--max-bad-steps", R_CHANGE},
    [F_SAMPLE_EVERY] = {"--sample-every", R_CHANGE}, [F_SAMPLE_TOKENS] = {"--sample-tokens", R_CHANGE},
    [F_PEAK_GFLOPS] = {"--peak-gflops", R_LOCAL}, [F_TOTAL_BATCH] = {"--total-batch", R_FIXED},
    [F_DEVICE] = {"--device", R_LOCAL},   /* a state saved on one backend resumes on the other */
    [F_PRECISION] = {"--precision", R_LOCAL},   /* states hold fp32 weights whatever it is */
};

static void usage(FILE* f) {
    fprintf(f,
"seedgpt: train a GPT-2 in C, with dropout that survives activation recompute.\n"
"\n"
"usage: ./train [flags]              train a model\n"
"       ./train sample --help        generate text from a model file\n"
"       ./train plot RUNDIR          RUNDIR/log.jsonl -> RUNDIR/loss.png (gnuplot)\n"
"       ./train prepare --help       turn text files into token shards\n"
"       mpirun -np R ./train_mpi [flags]   data parallel over R processes (`make mpi`; README)\n"
"\n"
"data\n"
"  --train PATH        training shards: a file or a glob pattern, e.g. 'data/kjv/train_*.bin'\n"
"  --val PATH          validation shards (optional)\n"
"  --tokenizer NAME    tokenizer of the shards: byte (default; vocab 257) or gpt2 (vocab 50257)\n"
"  --bpe-dir DIR       gpt2's encoder.json + vocab.bpe (default $SEEDGPT_BPE_DIR, else data/gpt2)\n"
"  --shuffle 0|1       visit training windows in a seeded shuffled order each epoch (default 1)\n"
"model (a fresh model, unless --init or --resume)\n"
"  --init PATH         start from a model file (llm.c fp32 v3 or seedgpt's own)\n"
"  --layers L          blocks (default 4)\n"
"  --heads H           query heads (default 4)\n"
"  --kv-heads K        key/value heads, divides H (default H: plain GPT-2)\n"
"  --embd C            channels, a multiple of H (default 128)\n"
"  --vocab V           vocabulary (default: the tokenizer's, 257 for byte)\n"
"  --seq-len N         the model's maximum context (default 256)\n"
"  --pos P             learned | rope (default learned): learned absolute positions (wpe), or\n"
"                      rotary embeddings of q and k after the QKV linear (no wpe tensor)\n"
"  --rope-base B       RoPE base, an integer >= 2: theta_d = B^(-2d/HD) (default 10000)\n"
"  --rope-layout L     neox | gptj (default neox): rotated pairs (d, d+HD/2) or (2d, 2d+1)\n"
"  --block K           sequential | parallel (default sequential): x += attn(LN1 x), then\n"
"                      x += mlp(LN2 x); or x = x + attn(LN1 x) + mlp(LN2 x), the parallel\n"
"                      residual of GPT-J / GPT-NeoX (two LayerNorms, both on x)\n"
"batch and schedule\n"
"  --batch B           sequences per step (default 8)\n"
"  --seq T             training sequence length, <= seq-len (default seq-len)\n"
"  --total-batch N     tokens per optimizer step, a multiple of B*T (default B*T): the gradient\n"
"                      of A = N/(B*T) micro-batches, each the next window of the loader, is\n"
"                      summed; micro-batch a holds global sequences a*B .. a*B+B-1, so the\n"
"                      dropout masks, loss and gradient equal those of one batch of A*B sequences\n"
"                      (with R data-parallel ranks: a multiple of R*B*T, default R*B*T; rank r's\n"
"                      micro-batch a holds sequences r*A*B + a*B .. + B-1, see README)\n"
"  --steps N           optimizer steps (default 100)\n"
"  --lr X              peak learning rate (default 1e-3)\n"
"  --lr-schedule S     constant | cosine | linear (default cosine)\n"
"  --warmup N          linear warmup steps (default 0)\n"
"  --final-lr-frac F   the schedule ends at F * lr (default 0.1)\n"
"  --beta1 X --beta2 X --eps X   AdamW moments (defaults 0.9, 0.95, 1e-8)\n"
"  --weight-decay X    decoupled, on 2-D weights and embeddings only (default 0.1)\n"
"  --clip X            clip the global gradient norm to X; 0 disables (default 1.0)\n"
"  --max-bad-steps N   stop (exit status 4) after N consecutive steps with a non-finite loss or\n"
"                      gradient norm; such a step skips its update (default 10; 0: never stop)\n"
"randomness\n"
"  --seed S            master seed: weights, shuffling and every dropout mask (default 1337)\n"
"  --dropout P         dropout probability at every site (default 0)\n"
"  --attn-dropout P    on the attention probabilities (overrides --dropout)\n"
"  --resid-dropout P   on both residual branches (overrides --dropout)\n"
"  --embd-dropout P    on the embedding (overrides --dropout)\n"
"  --drop-path P       stochastic depth: each residual branch of each sequence is dropped with\n"
"                      probability P, kept ones scaled 1/(1-P) (default 0); applied after the\n"
"                      branch's residual dropout; off in evaluation and sampling\n"
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
"                      (default with --out: DIR/log.jsonl)\n"
"  --eval-every N      validation loss every N steps, and at the end (default 0: only at the end)\n"
"  --eval-batches N    validation windows per evaluation (default 8)\n"
"  --sample-every N    print a sample every N steps (default 0: never): --sample-tokens tokens\n"
"                      (default 64) after an EOT, temperature 1, drawn from the master seed's\n"
"                      SAMPLE stream with counter (position, step, 0, 0); moves no loader\n"
"  --peak-gflops X     the FLOP rate MFU is measured against (default: this machine's sgemm,\n"
"                      measured for ~0.2 s at start-up)\n"
"  --save PATH         write the model file at the end\n"
"  --threads N         OpenMP and OpenBLAS threads (default: all cores, shared out among the\n"
"                      ranks of one machine under mpirun unless OMP_NUM_THREADS is set)\n"
"  --device D          cpu | cuda: where the model's memory lives and its ops run (default:\n"
"                      cuda in ./train_cuda, built by `make cuda`; cpu in ./train). Masks,\n"
"                      seeds, recompute and states are the same on both; a state saved on one\n"
"                      resumes on the other\n"
"  --precision P       fp32 | bf16 (default fp32). bf16 (--device cuda only): the dense products\n"
"                      and attention take bf16 operands on tensor cores, accumulate in fp32;\n"
"                      weights, AdamW state, the residual stream, LayerNorm and softmax\n"
"                      statistics and every stored activation stay fp32; masks are the same\n"
"                      bits. States and model files are fp32 either way (README \"Precision\")\n"
"run folder and resume\n"
"  --out DIR           write training states DIR/state_SSSSSSSS.bin (S = steps done) and the model\n"
"                      DIR/model.bin beside them: every --save-every steps, at the end, and on\n"
"                      SIGINT/SIGTERM (the current step finishes, the state is saved, exit\n"
"                      status 128 + signal: 130 or 143). A folder that already holds states is\n"
"                      refused unless the run resumes from it\n"
"  --save-every N      a state every N steps (default 0: only at the end and on a signal)\n"
"  --keep N            keep the newest N states (default 2; 0 keeps all)\n"
"  --resume DIR        continue from the newest state in DIR that loads cleanly (states that do\n"
"                      not are skipped with a message). Flags not given take the state's values;\n"
"                      a given flag that contradicts the state is refused. Only these may change:\n"
"                      --steps --train --val --log-every --log-json --eval-every --eval-batches\n"
"                      --save --save-every --keep --max-bad-steps --recompute --recompute-check\n"
"                      --threads --out (default: DIR)\n"
"exit status: 0 done, 2 bad flag or file (one line on stderr, nothing overwritten), 3 recompute\n"
"check failed (stop), 4 --max-bad-steps reached, 130/143 stopped by SIGINT/SIGTERM after saving\n");
}

/* Data-parallel processes of this run (model/dist.h): 1 in ./train. */
static int world = 1;

/* Where the values being parsed come from, for messages: the command line or a state file. */
static const char* parse_source = NULL;

static void die_flag(const char* flag, const char* value, const char* expected) {
    if (parse_source)
        fprintf(stderr, "seedgpt: %s: stored option %s %s: expected %s\n", parse_source, flag,
                value ? value : "(missing)", expected);
    else
        fprintf(stderr, "seedgpt: %s %s: expected %s\n", flag, value ? value : "(missing)", expected);
    exit(EXIT_BAD_INPUT);
}

static long parse_long(const char* flag, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *end != '\0' || errno != 0 ||
        v < lo || v > hi) {
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
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *end != '\0' || errno != 0 ||
        !isfinite(v) || v < lo ||
        (hi_open ? v >= hi : v > hi)) {
        char buf[96];
        snprintf(buf, sizeof(buf), "a number in [%g, %g%s", lo, hi, hi_open ? ")" : "]");
        die_flag(flag, s, buf);
    }
    return v;
}

static const char* parse_path(const char* flag, const char* v) {
    if (v == NULL || *v == '\0') die_flag(flag, v, "a path");
    return v;
}

static void set_defaults(Options* o) {
    memset(o, 0, sizeof(*o));
    o->tokenizer = "byte";
    o->layers = 4; o->heads = 4; o->kv_heads = 0; o->embd = 128; o->vocab = 0; o->seq_len = 256;
    o->batch = 8; o->seq = 0; o->steps = 100;
    o->lr = 1e-3; o->final_lr_frac = 0.1; o->beta1 = 0.9; o->beta2 = 0.95; o->eps = 1e-8;
    o->weight_decay = 0.1; o->clip = 1.0; o->lr_schedule = "cosine"; o->warmup = 0;
    o->seed = 1337; o->shuffle = 1;
    o->pos_rope = 0; o->rope_base = ROPE_DEFAULT_BASE; o->rope_layout = ROPE_NEOX;
    o->block_parallel = 0; o->drop_path = 0.0;
    o->dropout = 0.0; o->attn_dropout = o->resid_dropout = o->embd_dropout = -1.0;
    o->log_every = 10; o->eval_every = 0; o->eval_batches = 8; o->threads = 0;
    o->sample_every = 0; o->sample_tokens = 64; o->peak_gflops = 0; o->total_batch = 0;
    o->device = backend_default_name();
    o->precision = "fp32";
    o->policy.every = 0; o->policy.fresh_seeds = 0; o->policy.check = CHECK_WARN;
    o->save_every = 0; o->keep = 2; o->max_bad_steps = 10;
}

/* Sets flag `id` of o from the text v, or exits with one line naming the flag. */
static void apply_flag(Options* o, int id, const char* v) {
    const char* f = flags[id].name;
    char err[256];
    switch (id) {
    case F_TRAIN: o->train_path = parse_path(f, v); break;
    case F_VAL: o->val_path = parse_path(f, v); break;
    case F_INIT: o->init_path = parse_path(f, v); break;
    case F_SAVE: o->save_path = parse_path(f, v); break;
    case F_LOG_JSON: o->log_json = parse_path(f, v); break;
    case F_TOKENIZER: o->tokenizer = v; break;
    case F_BPE_DIR: o->bpe_dir = v; break;
    case F_LAYERS: o->layers = parse_long(f, v, 1, 1024); break;
    case F_HEADS: o->heads = parse_long(f, v, 1, 1024); break;
    case F_KV_HEADS: o->kv_heads = parse_long(f, v, 1, 1024); break;
    case F_EMBD: o->embd = parse_long(f, v, 1, 65536); break;
    case F_VOCAB: o->vocab = parse_long(f, v, 1, 65536); break;
    case F_SEQ_LEN: o->seq_len = parse_long(f, v, 1, 1 << 20); break;
    case F_POS:
        if (strcmp(v, "learned") && strcmp(v, "rope")) die_flag(f, v, "learned or rope");
        o->pos_rope = !strcmp(v, "rope");
        break;
    case F_ROPE_BASE: o->rope_base = parse_long(f, v, 2, 2147483647L); break;
    case F_ROPE_LAYOUT:
        if (strcmp(v, "neox") && strcmp(v, "gptj")) die_flag(f, v, "neox or gptj");
        o->rope_layout = !strcmp(v, "gptj") ? ROPE_GPTJ : ROPE_NEOX;
        break;
    case F_BLOCK:
        if (strcmp(v, "sequential") && strcmp(v, "parallel")) die_flag(f, v, "sequential or parallel");
        o->block_parallel = !strcmp(v, "parallel");
        break;
    case F_DROP_PATH: o->drop_path = parse_double(f, v, 0, 1, 1); break;
    case F_BATCH: o->batch = parse_long(f, v, 1, 1 << 20); break;
    case F_SEQ: o->seq = parse_long(f, v, 1, 1 << 20); break;
    case F_STEPS: o->steps = parse_long(f, v, 0, 2000000000L); break;
    case F_LR: o->lr = parse_double(f, v, 0, 10, 0); break;
    case F_LR_SCHEDULE:
        if (strcmp(v, "constant") && strcmp(v, "cosine") && strcmp(v, "linear"))
            die_flag(f, v, "constant, cosine or linear");
        o->lr_schedule = v;
        break;
    case F_WARMUP: o->warmup = parse_long(f, v, 0, 2000000000L); break;
    case F_FINAL_LR_FRAC: o->final_lr_frac = parse_double(f, v, 0, 1, 0); break;
    case F_BETA1: o->beta1 = parse_double(f, v, 0, 1, 1); break;
    case F_BETA2: o->beta2 = parse_double(f, v, 0, 1, 1); break;
    case F_EPS: o->eps = parse_double(f, v, 0, 1, 0); break;
    case F_WEIGHT_DECAY: o->weight_decay = parse_double(f, v, 0, 10, 0); break;
    case F_CLIP: o->clip = parse_double(f, v, 0, 1e30, 0); break;
    case F_SHUFFLE: o->shuffle = parse_long(f, v, 0, 1); break;
    case F_SEED: {
        char* end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 0);
        if (*v == '\0' || *v == '-' || *v == '+' || *v == ' ' || *end != '\0' || errno != 0)
            die_flag(f, v, "an unsigned 64-bit integer");
        o->seed = s;
        break;
    }
    case F_DROPOUT: o->dropout = parse_double(f, v, 0, 1, 1); break;
    case F_ATTN_DROPOUT: o->attn_dropout = parse_double(f, v, 0, 1, 1); break;
    case F_RESID_DROPOUT: o->resid_dropout = parse_double(f, v, 0, 1, 1); break;
    case F_EMBD_DROPOUT: o->embd_dropout = parse_double(f, v, 0, 1, 1); break;
    case F_LOG_EVERY: o->log_every = parse_long(f, v, 0, 2000000000L); break;
    case F_EVAL_EVERY: o->eval_every = parse_long(f, v, 0, 2000000000L); break;
    case F_EVAL_BATCHES: o->eval_batches = parse_long(f, v, 1, 1000000); break;
    case F_THREADS: o->threads = parse_long(f, v, 1, 1024); break;
    case F_DEVICE:
        if (strcmp(v, "cpu") && strcmp(v, "cuda")) die_flag(f, v, "cpu or cuda");
        if (backend_by_name(v) == NULL)
            die_flag(f, v, "cpu (this binary has no CUDA backend: `make cuda` builds ./train_cuda)");
        o->device = v;
        break;
    case F_PRECISION:
        if (strcmp(v, "fp32") && strcmp(v, "bf16")) die_flag(f, v, "fp32 or bf16");
        o->precision = v;
        break;
    case F_RECOMPUTE:
        if (recompute_parse(v, &o->policy, err) != 0) die_flag(f, v, "none, layer or every:K");
        break;
    case F_RECOMPUTE_CHECK:
        if (recompute_check_parse(v, &o->policy.check, err) != 0) die_flag(f, v, "off, warn or stop");
        break;
    case F_RECOMPUTE_SEEDS:
        if (strcmp(v, "captured") && strcmp(v, "fresh")) die_flag(f, v, "captured or fresh");
        o->policy.fresh_seeds = !strcmp(v, "fresh");
        break;
    case F_OUT: o->out_dir = parse_path(f, v); break;
    case F_RESUME: o->resume_dir = parse_path(f, v); break;
    case F_SAVE_EVERY: o->save_every = parse_long(f, v, 0, 2000000000L); break;
    case F_KEEP: o->keep = parse_long(f, v, 0, 1000000); break;
    case F_MAX_BAD_STEPS: o->max_bad_steps = parse_long(f, v, 0, 2000000000L); break;
    case F_SAMPLE_EVERY: o->sample_every = parse_long(f, v, 0, 2000000000L); break;
    case F_SAMPLE_TOKENS: o->sample_tokens = parse_long(f, v, 1, 1 << 24); break;
    case F_PEAK_GFLOPS: o->peak_gflops = parse_double(f, v, 0, 1e12, 0); break;
    case F_TOTAL_BATCH: o->total_batch = parse_long(f, v, 0, 1L << 40); break;
    }
}

static int find_flag(const char* name) {
    for (int id = 0; id < NUM_FLAGS; id++)
        if (!strcmp(flags[id].name, name)) return id;
    return -1;
}

/* The shortest %.Ng (N = 15..17) that reads back as the same double. */
static void fmt_double(char* buf, size_t cap, double v) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The value of flag id as text, in the one canonical form used for storing and comparing
 * (doubles in the shortest form that reads back exactly). 0, or -1 when the flag has no value. */
static int format_flag(const Options* o, int id, char* buf, size_t cap) {
    char pname[32];
    const char* s = NULL;
    switch (id) {
    case F_TRAIN: s = o->train_path; break;
    case F_VAL: s = o->val_path; break;
    case F_INIT: s = o->init_path; break;
    case F_SAVE: s = o->save_path; break;
    case F_LOG_JSON: s = o->log_json; break;
    case F_TOKENIZER: s = o->tokenizer; break;
    case F_BPE_DIR: s = o->bpe_dir; break;
    case F_LAYERS: snprintf(buf, cap, "%d", o->layers); return 0;
    case F_HEADS: snprintf(buf, cap, "%d", o->heads); return 0;
    case F_KV_HEADS: snprintf(buf, cap, "%d", o->kv_heads ? o->kv_heads : o->heads); return 0;
    case F_EMBD: snprintf(buf, cap, "%d", o->embd); return 0;
    case F_VOCAB: snprintf(buf, cap, "%d", o->vocab); return 0;
    case F_SEQ_LEN: snprintf(buf, cap, "%d", o->seq_len); return 0;
    case F_POS: s = o->pos_rope ? "rope" : "learned"; break;
    case F_ROPE_BASE: snprintf(buf, cap, "%d", o->rope_base); return 0;
    case F_ROPE_LAYOUT: s = o->rope_layout == ROPE_GPTJ ? "gptj" : "neox"; break;
    case F_BLOCK: s = o->block_parallel ? "parallel" : "sequential"; break;
    case F_DROP_PATH: fmt_double(buf, cap, o->drop_path); return 0;
    case F_BATCH: snprintf(buf, cap, "%d", o->batch); return 0;
    case F_SEQ: snprintf(buf, cap, "%d", o->seq ? o->seq : o->seq_len); return 0;
    case F_STEPS: snprintf(buf, cap, "%d", o->steps); return 0;
    case F_LR: fmt_double(buf, cap, o->lr); return 0;
    case F_LR_SCHEDULE: s = o->lr_schedule; break;
    case F_WARMUP: snprintf(buf, cap, "%d", o->warmup); return 0;
    case F_FINAL_LR_FRAC: fmt_double(buf, cap, o->final_lr_frac); return 0;
    case F_BETA1: fmt_double(buf, cap, o->beta1); return 0;
    case F_BETA2: fmt_double(buf, cap, o->beta2); return 0;
    case F_EPS: fmt_double(buf, cap, o->eps); return 0;
    case F_WEIGHT_DECAY: fmt_double(buf, cap, o->weight_decay); return 0;
    case F_CLIP: fmt_double(buf, cap, o->clip); return 0;
    case F_SEED: snprintf(buf, cap, "%llu", (unsigned long long)o->seed); return 0;
    case F_SHUFFLE: snprintf(buf, cap, "%d", o->shuffle); return 0;
    case F_DROPOUT: return -1;
    case F_ATTN_DROPOUT: fmt_double(buf, cap, o->attn_dropout); return 0;
    case F_RESID_DROPOUT: fmt_double(buf, cap, o->resid_dropout); return 0;
    case F_EMBD_DROPOUT: fmt_double(buf, cap, o->embd_dropout); return 0;
    case F_LOG_EVERY: snprintf(buf, cap, "%d", o->log_every); return 0;
    case F_EVAL_EVERY: snprintf(buf, cap, "%d", o->eval_every); return 0;
    case F_EVAL_BATCHES: snprintf(buf, cap, "%d", o->eval_batches); return 0;
    case F_THREADS: snprintf(buf, cap, "%d", o->threads); return 0;
    case F_DEVICE: s = o->device; break;
    case F_PRECISION: s = o->precision; break;
    case F_RECOMPUTE: s = recompute_name(&o->policy, pname); break;
    case F_RECOMPUTE_CHECK:
        s = o->policy.check == CHECK_OFF ? "off" : o->policy.check == CHECK_WARN ? "warn" : "stop";
        break;
    case F_RECOMPUTE_SEEDS: s = o->policy.fresh_seeds ? "fresh" : "captured"; break;
    case F_OUT: s = o->out_dir; break;
    case F_RESUME: s = o->resume_dir; break;
    case F_SAVE_EVERY: snprintf(buf, cap, "%d", o->save_every); return 0;
    case F_KEEP: snprintf(buf, cap, "%d", o->keep); return 0;
    case F_MAX_BAD_STEPS: snprintf(buf, cap, "%d", o->max_bad_steps); return 0;
    case F_SAMPLE_EVERY: snprintf(buf, cap, "%d", o->sample_every); return 0;
    case F_SAMPLE_TOKENS: snprintf(buf, cap, "%d", o->sample_tokens); return 0;
    case F_PEAK_GFLOPS: fmt_double(buf, cap, o->peak_gflops); return 0;
    case F_TOTAL_BATCH:   /* canonical: the tokens per step, also when left to the default */
        snprintf(buf, cap, "%ld", o->total_batch ? o->total_batch
                                  : (long)world * o->batch * (o->seq ? o->seq : o->seq_len));
        return 0;
    }
    if (s == NULL) return -1;
    snprintf(buf, cap, "%s", s);
    return 0;
}

/* Parses argv into o; raw[id] is the text given for flag id (NULL: not given). --dropout counts
 * as given for each site it sets. */
static void parse_options(Options* o, const char* raw[NUM_FLAGS], int argc, char** argv) {
    set_defaults(o);
    for (int id = 0; id < NUM_FLAGS; id++) raw[id] = NULL;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout); exit(0); }
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: unexpected argument '%s' (see ./train --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        int id = find_flag(f);
        if (id < 0) {
            fprintf(stderr, "seedgpt: unknown flag %s (see ./train --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) die_flag(f, NULL, "a value");
        i++;
        apply_flag(o, id, v);
        raw[id] = v;
    }
    if (raw[F_DROPOUT] != NULL) {
        const int sites[3] = {F_ATTN_DROPOUT, F_RESID_DROPOUT, F_EMBD_DROPOUT};
        for (int k = 0; k < 3; k++) {
            if (raw[sites[k]] == NULL) {
                apply_flag(o, sites[k], raw[F_DROPOUT]);
                raw[sites[k]] = raw[F_DROPOUT];
            }
        }
    }
    if (o->attn_dropout < 0) o->attn_dropout = o->dropout;
    if (o->resid_dropout < 0) o->resid_dropout = o->dropout;
    if (o->embd_dropout < 0) o->embd_dropout = o->dropout;
}

/* Checks that concern the final options (after a resume merged them). */
static void check_options(const Options* o, const char* raw[NUM_FLAGS]) {
    if (o->train_path == NULL) {
        fprintf(stderr, "seedgpt: --train PATH is required (see ./train --help)\n");
        exit(EXIT_BAD_INPUT);
    }
    if (o->resume_dir == NULL && o->init_path != NULL &&
        (raw[F_LAYERS] || raw[F_HEADS] || raw[F_KV_HEADS] || raw[F_EMBD] || raw[F_SEQ_LEN] ||
         raw[F_POS] || raw[F_ROPE_BASE] || raw[F_ROPE_LAYOUT] || raw[F_BLOCK])) {
        fprintf(stderr, "seedgpt: --init takes the model shape from the file; drop --layers, "
                        "--heads, --kv-heads, --embd, --seq-len, --pos, --rope-base, "
                        "--rope-layout and --block\n");
        exit(EXIT_BAD_INPUT);
    }
    if (!o->pos_rope && (raw[F_ROPE_BASE] || raw[F_ROPE_LAYOUT])) {
        fprintf(stderr, "seedgpt: %s needs --pos rope\n",
                raw[F_ROPE_BASE] ? "--rope-base" : "--rope-layout");
        exit(EXIT_BAD_INPUT);
    }
    if (o->policy.fresh_seeds && o->policy.every == 0) {
        fprintf(stderr, "seedgpt: --recompute-seeds fresh needs a recompute policy (--recompute "
                        "layer or every:K): under none nothing is recomputed\n");
        exit(EXIT_BAD_INPUT);
    }
    if (backend_lookup(o->device, o->precision) == NULL) {
        fprintf(stderr, "seedgpt: --precision %s: not on --device %s (bf16 runs on --device cuda; "
                        "the CPU backend computes in fp32)\n", o->precision, o->device);
        exit(EXIT_BAD_INPUT);
    }
    if (o->out_dir == NULL && raw[F_SAVE_EVERY] != NULL && o->save_every > 0) {
        fprintf(stderr, "seedgpt: --save-every %d needs a run folder: add --out DIR\n",
                o->save_every);
        exit(EXIT_BAD_INPUT);
    }
}

/* The options a state stores, one "--flag value\n" line each (values with a newline are not
 * stored: such a flag must then be given again on resume). */
static void format_state_options(const Options* o, char* out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int id = 0; id < NUM_FLAGS; id++) {
        if (flags[id].resume != R_FIXED && flags[id].resume != R_CHANGE) continue;
        if (id == F_LOG_JSON && o->log_json_is_default) continue;
        char v[4200];
        if (format_flag(o, id, v, sizeof(v)) != 0 || strchr(v, '\n') != NULL) continue;
        int w = snprintf(out + n, cap - n, "%s %s\n", flags[id].name, v);
        if (w < 0 || (size_t)w >= cap - n) { out[n] = '\0'; return; }   /* too long: stop */
        n += (size_t)w;
    }
}

/* The options of a state: defaults, then the state's header and option text. The text is
 * split in place (st points into info->options). */
static void options_from_state(Options* st, StateInfo* info, const char* path) {
    set_defaults(st);
    parse_source = path;
    char* line = info->options;
    while (*line) {
        char* nl = strchr(line, '\n');
        if (nl == NULL) {
            fprintf(stderr, "seedgpt: %s: the option text does not end with a newline\n", path);
            exit(EXIT_BAD_INPUT);
        }
        *nl = '\0';
        char* space = strchr(line, ' ');
        if (space == NULL) {
            fprintf(stderr, "seedgpt: %s: bad option line \"%s\"\n", path, line);
            exit(EXIT_BAD_INPUT);
        }
        *space = '\0';
        int id = find_flag(line);
        if (id < 0 || (flags[id].resume != R_FIXED && flags[id].resume != R_CHANGE)) {
            fprintf(stderr, "seedgpt: %s: the state holds an option this build does not take "
                    "from a state: %s\n", path, line);
            exit(EXIT_BAD_INPUT);
        }
        apply_flag(st, id, space + 1);
        line = nl + 1;
    }
    parse_source = NULL;
    const GPTConfig* c = &info->config;
    st->layers = c->num_layers;
    st->heads = c->num_heads;
    st->kv_heads = c->num_kv_heads;
    st->pos_rope = c->pos_kind == POS_ROPE;
    st->rope_base = c->pos_kind == POS_ROPE ? c->rope_base : ROPE_DEFAULT_BASE;
    st->rope_layout = c->rope_layout;
    st->block_parallel = c->block_kind == BLOCK_PARALLEL;
    st->embd = c->channels;
    st->vocab = c->vocab_size;
    st->seq_len = c->max_seq_len;
    st->batch = info->batch;
    st->seq = info->seq;
    st->seed = info->master_seed;
}

/* Resume: the state's options, with the command line's on top. A given flag that is not allowed
 * to change and differs from the state is refused, naming the flag and both values. */
static void merge_resumed_options(Options* o, const Options* cmd, const char* raw[NUM_FLAGS],
                                  const Options* st, const char* state_path) {
    for (int id = 0; id < NUM_FLAGS; id++) {
        if (raw[id] == NULL) continue;
        if (flags[id].resume != R_SHAPE && flags[id].resume != R_FIXED) continue;
        char a[4200], b[4200];
        int ra = format_flag(cmd, id, a, sizeof(a)), rb = format_flag(st, id, b, sizeof(b));
        if (ra != rb || strcmp(a, b) != 0) {
            int via_dropout = raw[F_DROPOUT] != NULL && raw[id] == raw[F_DROPOUT] &&
                              (id == F_ATTN_DROPOUT || id == F_RESID_DROPOUT || id == F_EMBD_DROPOUT);
            fprintf(stderr, "seedgpt: --resume: %s %s%s contradicts the state %s, which has %s %s "
                    "(drop the flag to continue the run as it was, or start a new run)\n",
                    flags[id].name, a, via_dropout ? " (from --dropout)" : "", state_path,
                    flags[id].name, b);
            exit(EXIT_BAD_INPUT);
        }
    }
    *o = *st;
    for (int id = 0; id < NUM_FLAGS; id++) {
        if (raw[id] != NULL && id != F_DROPOUT) apply_flag(o, id, raw[id]);
    }
    o->dropout = cmd->dropout;
}

/* ---- the learning-rate schedule ----------------------------------------------------------- */

static double lr_at(const Options* o, int step) {
    return lr_schedule_at(o->lr_schedule, o->lr, o->warmup, o->steps, o->final_lr_frac, step);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Mean loss over the first n windows of the validation split, dropout off. Uses its own loader,
 * so it never moves the training loader. With several ranks each takes every R-th window and the
 * sums are added over the ranks. */
static float evaluate(GPT* m, DataLoader* val, int n, int* inputs, int* targets) {
    size_t windows = loader_num_windows(val);
    if ((size_t)n > windows) n = (int)windows;
    double sum = 0.0;
    for (int k = dist_rank(); k < n; k += world) {
        if (loader_window(val, (size_t)k, inputs, targets) != 0) {
            fprintf(stderr, "seedgpt: %s\n", val->err);
            exit(EXIT_BAD_INPUT);
        }
        sum += gpt_forward(m, inputs, targets, val->B, val->T, 0, 0, 0);
    }
    return (float)(dist_sum(sum) / n);
}

/* This machine's sgemm rate in GFLOP/s: 512^3 products for about 0.2 s, the best of them. The
 * peak MFU is measured against when --peak-gflops is not given. */
static double measure_sgemm_gflops(void) {
    enum { M = 512 };
    float* a = mem_alloc_floats((size_t)M * M);
    float* b = mem_alloc_floats((size_t)M * M);
    float* c = mem_alloc_floats((size_t)M * M);
    for (size_t i = 0; i < (size_t)M * M; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    double best = 0.0, start = now_ms();
    do {
        double t0 = now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, M, 1.0f, a, M, b, M, 0.0f, c, M);
        double ms = now_ms() - t0;
        double g = 2.0 * M * M * M / (ms * 1e6);
        if (g > best) best = g;
    } while (now_ms() - start < 200.0);
    mem_free(a); mem_free(b); mem_free(c);
    return best;
}

/* Model FLOPs of one token's forward and backward (nanoGPT's estimate): 6 per parameter, plus
 * the attention's 12 * L * C * T (scores and weighted sum, forward 1/3, backward 2/3; causal
 * masking not subtracted). A recompute's extra forward is not counted: MFU is model FLOPs. */
static double flops_per_token(const GPT* m, int T) {
    const GPTConfig* c = &m->config;
    return 6.0 * (double)m->num_parameters + 12.0 * c->num_layers * c->channels * (double)T;
}

static void fmt_duration(char* buf, size_t cap, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, cap, "%lds", s);
}

/* A float for the JSON log: %.9g round-trips a float exactly; NaN and Inf are not JSON. */
static void json_float(FILE* f, const char* key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* ---- the run folder ----------------------------------------------------------------------- */

/* mkdir -p; 0 or -1 with errno. */
static int make_dirs(const char* path) {
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) { errno = ENAMETOOLONG; return -1; }
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

/* The newest state in dir that passes every check of state_read_info; states that do not are
 * reported and skipped. Exits (status 2) when dir holds none that loads. */
static void pick_state(const char* dir, char* path, size_t cap, StateInfo* info) {
    uint64_t* steps;
    int n;
    char err[256];
    if (state_list(dir, &steps, &n, err) != 0) {
        fprintf(stderr, "seedgpt: --resume %s\n", err);
        exit(EXIT_BAD_INPUT);
    }
    if (n == 0) {
        fprintf(stderr, "seedgpt: --resume %s: no training state in the folder (state_*.bin)\n", dir);
        exit(EXIT_BAD_INPUT);
    }
    char first_err[256] = "";
    for (int i = 0; i < n; i++) {
        if (state_path(path, cap, dir, steps[i]) != 0) continue;
        if (state_read_info(path, info, err) == 0) { free(steps); return; }
        fprintf(stderr, "seedgpt: skipping %s\n", err);
        if (first_err[0] == '\0') snprintf(first_err, sizeof(first_err), "%s", err);
    }
    free(steps);
    fprintf(stderr, "seedgpt: --resume %s: none of its %d state file(s) loads (newest: %s)\n", dir,
            n, first_err);
    exit(EXIT_BAD_INPUT);
}

/* On resume the JSON log keeps only the rows of steps before the resumed one: the steps after
 * the state (run before a crash) are run again and logged again, so the log reads as one run.
 * Written to PATH.tmp and renamed. 0, or -1 with err. */
static int truncate_log(const char* path, int start_step, char err[256]) {
    FILE* in = fopen(path, "rb");
    if (in == NULL) return errno == ENOENT ? 0 : (snprintf(err, 256, "--log-json %s: cannot read: "
                                                           "%s", path, strerror(errno)), -1);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* out = fopen(tmp, "wb");
    if (out == NULL) {
        snprintf(err, 256, "--log-json %s: cannot create %s.tmp: %s", path, path, strerror(errno));
        fclose(in);
        return -1;
    }
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    int failed = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (line[len - 1] != '\n') break;            /* a torn last line */
        const char* s = strstr(line, "\"step\":");
        if (s != NULL && atol(s + 7) >= start_step) continue;
        if (fwrite(line, 1, (size_t)len, out) != (size_t)len) failed = 1;
    }
    free(line);
    fclose(in);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0) failed = 1;
    if (fclose(out) != 0) failed = 1;
    fault_kill_point("log_truncate", -1);
    if (failed || rename(tmp, path) != 0) {
        snprintf(err, 256, "--log-json %s: cannot rewrite the log: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- stop signals --------------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal = 0;

/* The first SIGINT/SIGTERM asks the loop to finish the step and save; a second one ends the
 * process at once (a state write it interrupts leaves the previous state intact). */
static void on_stop_signal(int sig) {
    if (stop_signal != 0) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

static void install_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- the run ------------------------------------------------------------------------------ */

/* The memory figure of progress lines: the host's peak on the CPU, the device's on CUDA. */
static size_t run_peak_bytes(const GPT* m) {
    return m->be->host_memory ? mem_stats().peak_bytes : m->be->peak_bytes();
}

typedef struct {
    const Options* o;
    GPT* model;
    DataLoader* loader;
    uint32_t bad_consecutive;    /* non-finite steps in a row */
    uint64_t bad_total;
    int last_saved;              /* the step of the newest state written by this process, or -1 */
} Run;

/* DIR/model.bin: the weights of the newest state, as a model file. */
static void save_run_model(Run* r) {
    char mpath[4200], err[256];
    snprintf(mpath, sizeof(mpath), "%s/model.bin", r->o->out_dir);
    gpt_to_host(r->model);
    if (modelfile_save(r->model, mpath, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        exit(EXIT_BAD_INPUT);
    }
}

/* Writes the state after `done` steps (and DIR/model.bin), then prunes. Exits on failure: a run
 * that was asked to keep states does not go on without them. */
static void save_state(Run* r, int done) {
    const Options* o = r->o;
    static StateInfo info;   /* 16 KiB of option text: not on the stack */
    char path[4096] = "", err[256];
    memset(&info, 0, sizeof(info));
    info.step = (uint64_t)done;
    info.master_seed = o->seed;
    LoaderState ls = loader_get_state(r->loader);
    info.loader.epoch = ls.epoch;
    info.loader.pos = ls.pos;
    info.loader.shuffle_seed = ls.shuffle_seed;
    info.loader.num_windows = ls.num_windows;
    info.loader.shuffle = ls.shuffle;
    info.batch = r->loader->B;
    info.seq = r->loader->T;
    info.bad_consecutive = r->bad_consecutive;
    info.bad_total = r->bad_total;
    info.ranks = (uint32_t)world;
    format_state_options(o, info.options, sizeof(info.options));
    gpt_to_host(r->model);
    if (state_path(path, sizeof(path), o->out_dir, info.step) != 0 ||
        state_save(path, r->model, &info, err) != 0) {
        fprintf(stderr, "seedgpt: cannot save the training state: %s\n",
                path[0] ? err : "--out path too long");
        exit(EXIT_BAD_INPUT);
    }
    fault_kill_point("model_before", -1);
    save_run_model(r);
    fault_kill_point("model_saved", -1);
    state_prune(o->out_dir, o->keep > 0 ? o->keep : INT32_MAX, info.step);   /* keep 0: all */
    r->last_saved = done;
    printf("saved %s\n", path);
    fflush(stdout);
}

/* ---- sampling ------------------------------------------------------------------------------ */

/* Feeds the prompt (ids; none: the EOT token starts the text, as GPT-2 was trained) and generates
 * up to n tokens, writing the decoded text to f. Generation ends early at an EOT token (printed as
 * nothing: EOT ends a document) or when the model's context is full. The draw at position t uses
 * counter (t, stream, 0, 0) of sample_seed (model/sample.h). Returns the tokens generated. */
static int generate(Sampler* s, const Tokenizer* tok, const int* prompt, int np, int n,
                    double temperature, int top_k, uint64_t sample_seed, uint32_t stream, FILE* f) {
    const GPTConfig* c = &s->model->config;
    unsigned char buf[256];
    const float* logits = NULL;
    sampler_reset(s);
    int start = tok->eot;
    if (np == 0) { prompt = &start; np = 1; }
    for (int i = 0; i < np; i++) {
        logits = sampler_feed(s, prompt[i]);
        if (logits == NULL) return 0;
    }
    int made = 0;
    for (; made < n; made++) {
        int next = sample_pick(logits, c->vocab_size, temperature, top_k, sample_seed,
                               (uint32_t)s->pos, stream, s->order);
        if (next == tok->eot) break;
        int len = tokenizer_decode(tok, next, buf, sizeof(buf));
        if (len > 0) fwrite(buf, 1, (size_t)len, f);
        if (s->pos >= c->max_seq_len) { made++; break; }
        logits = sampler_feed(s, next);
    }
    fflush(f);
    return made;
}

static void sample_usage(FILE* f) {
    fprintf(f,
"usage: ./train sample --init MODEL [flags]\n"
"  --init PATH         the model file (llm.c fp32 v3 or seedgpt's own)\n"
"  --prompt TEXT       the text to continue (default: none; generation starts after an EOT)\n"
"  --tokens N          tokens to generate (default 256); ends early at EOT or a full context\n"
"  --temperature X     softmax temperature; 0 is greedy (default 1.0)\n"
"  --top-k K           draw from the K most likely tokens; 0: all (default 0)\n"
"  --seed S            the draws are Philox(counter = (position, 0, 0, 0), key =\n"
"                      philox_stream_seed(S, STREAM_SAMPLE)) (default 1337)\n"
"  --tokenizer NAME    byte (default) or gpt2;  --bpe-dir DIR  gpt2's files\n"
"  --threads N         OpenMP and OpenBLAS threads (default: all cores)\n"
"The prompt is printed, then the generated text, then a newline. The key/value cache makes the\n"
"cost of each new token linear in the context length.\n");
}

static int sample_main(int argc, char** argv) {
    const char *init = NULL, *prompt = "", *tokname = "byte", *bpe_dir = NULL;
    long ntok = 256, top_k = 0;
    double temperature = 1.0;
    uint64_t seed = 1337;
    for (int i = 0; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { sample_usage(stdout); return 0; }
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: sample: unexpected argument '%s' (see ./train sample --help)\n", f);
            return EXIT_BAD_INPUT;
        }
        if (v == NULL) die_flag(f, NULL, "a value");
        i++;
        if (!strcmp(f, "--init")) init = parse_path(f, v);
        else if (!strcmp(f, "--prompt")) prompt = v;
        else if (!strcmp(f, "--tokens")) ntok = parse_long(f, v, 0, 1 << 24);
        else if (!strcmp(f, "--temperature")) temperature = parse_double(f, v, 0, 100, 0);
        else if (!strcmp(f, "--top-k")) top_k = parse_long(f, v, 0, 1 << 24);
        else if (!strcmp(f, "--tokenizer")) tokname = v;
        else if (!strcmp(f, "--bpe-dir")) bpe_dir = v;
        else if (!strcmp(f, "--threads")) {
            int t = (int)parse_long(f, v, 1, 1024);
            omp_set_num_threads(t);
        } else if (!strcmp(f, "--seed")) {
            char* end;
            errno = 0;
            unsigned long long sv = strtoull(v, &end, 0);
            if (*v == '\0' || *v == '-' || *v == '+' || *v == ' ' || *end != '\0' || errno != 0)
                die_flag(f, v, "an unsigned 64-bit integer");
            seed = sv;
        } else {
            fprintf(stderr, "seedgpt: sample: unknown flag %s (see ./train sample --help)\n", f);
            return EXIT_BAD_INPUT;
        }
    }
    if (init == NULL) {
        fprintf(stderr, "seedgpt: sample: --init MODEL is required (see ./train sample --help)\n");
        return EXIT_BAD_INPUT;
    }
    openblas_set_num_threads(omp_get_max_threads());
    char err[256];
    Tokenizer tok;
    if (tokenizer_open(&tok, tokname, bpe_dir, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    GPTConfig cfg;
    GPT model;
    if (modelfile_read_config(init, &cfg, err) != 0 || gpt_build(&model, &cfg, 1, 1, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        tokenizer_free(&tok);
        return EXIT_BAD_INPUT;
    }
    if (modelfile_load(&model, init, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        gpt_free(&model);
        tokenizer_free(&tok);
        return EXIT_BAD_INPUT;
    }
    if (cfg.vocab_size < tok.vocab_size) {
        fprintf(stderr, "seedgpt: sample: model vocab %d is smaller than the %s tokenizer's %d\n",
                cfg.vocab_size, tokenizer_name(&tok), tok.vocab_size);
        gpt_free(&model);
        tokenizer_free(&tok);
        return EXIT_BAD_INPUT;
    }
    size_t plen = strlen(prompt);
    uint16_t* ids16 = malloc((tokenizer_max_tokens(&tok, plen) + 1) * sizeof(uint16_t));
    size_t np = tokenizer_encode(&tok, (const unsigned char*)prompt, plen, ids16);
    int rc = 0;
    if ((long)np >= cfg.max_seq_len) {
        fprintf(stderr, "seedgpt: sample: --prompt is %zu tokens; the model's context is %d\n", np,
                cfg.max_seq_len);
        rc = EXIT_BAD_INPUT;
    } else {
        int* ids = malloc((np + 1) * sizeof(int));
        for (size_t i = 0; i < np; i++) ids[i] = ids16[i];
        Sampler s;
        sampler_init(&s, &model);
        fwrite(prompt, 1, plen, stdout);
        double t0 = now_ms();
        int made = generate(&s, &tok, ids, (int)np, (int)ntok, temperature, (int)top_k,
                            philox_stream_seed(seed, STREAM_SAMPLE), 0, stdout);
        double ms = now_ms() - t0;
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "sample: %d tokens in %.0f ms (%.1f tokens/s)%s\n", made, ms,
                made > 0 ? made / (ms / 1e3) : 0.0,
                s.pos >= cfg.max_seq_len ? ", stopped at the model's full context" : "");
        sampler_free(&s);
        free(ids);
    }
    free(ids16);
    gpt_free(&model);
    tokenizer_free(&tok);
    return rc;
}

int main(int argc, char** argv) {
    if (argc >= 2 && !strcmp(argv[1], "prepare")) return prepare_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "sample")) return sample_main(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "plot")) {
        /* scripts/plot.sh beside this binary (the repository root), else in the working folder */
        static char script[4200];
        const char* slash = strrchr(argv[0], '/');
        snprintf(script, sizeof(script), "%.*sscripts/plot.sh", slash ? (int)(slash - argv[0] + 1) : 0,
                 argv[0]);
        if (access(script, X_OK) != 0) snprintf(script, sizeof(script), "scripts/plot.sh");
        argv[1] = script;
        execv(script, argv + 1);
        fprintf(stderr, "seedgpt: plot: cannot run %s: %s\n", script, strerror(errno));
        return EXIT_BAD_INPUT;
    }

    char err[256];
    if (dist_init(&argc, &argv, err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }
    world = dist_size();
    int writer = dist_rank() == 0;   /* only rank 0 writes logs, samples, states and model files */
    if (fault_check_env(err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }

    Options cmd, o;
    const char* raw[NUM_FLAGS];
    parse_options(&cmd, raw, argc, argv);
    o = cmd;

    /* resume: the newest state that loads, its options under the command line's */
    static StateInfo resumed;
    char state_file[4096] = "";
    int resuming = cmd.resume_dir != NULL;
    if (resuming) {
        if (cmd.init_path != NULL) {
            fprintf(stderr, "seedgpt: --init %s and --resume %s: the weights come from the state; "
                    "drop --init\n", cmd.init_path, cmd.resume_dir);
            return EXIT_BAD_INPUT;
        }
        pick_state(cmd.resume_dir, state_file, sizeof(state_file), &resumed);
        if (resumed.ranks != (uint32_t)world) {   /* every rank finds it; rank 0 says it */
            if (writer)
                fprintf(stderr, "seedgpt: --resume %s: %s was written by a run of %u process(es); "
                        "this run has %d: resume with the same count (mpirun -np %u)\n",
                        cmd.resume_dir, state_file, resumed.ranks, world, resumed.ranks);
            return EXIT_BAD_INPUT;
        }
        static Options st;
        static StateInfo text;   /* options_from_state splits the text in place; st points in */
        text = resumed;
        options_from_state(&st, &text, state_file);
        merge_resumed_options(&o, &cmd, raw, &st, state_file);
        if (o.out_dir == NULL) o.out_dir = cmd.resume_dir;
        if (o.steps < (int)resumed.step) {
            fprintf(stderr, "seedgpt: --steps %d is below the %llu steps the state %s has done\n",
                    o.steps, (unsigned long long)resumed.step, state_file);
            return EXIT_BAD_INPUT;
        }
        if (st.steps != o.steps && strcmp(o.lr_schedule, "constant") != 0)
            printf("note: the %s schedule now spans %d steps (the state's run planned %d): the "
                   "learning rate from step %llu on follows the new span\n", o.lr_schedule,
                   o.steps, st.steps, (unsigned long long)resumed.step);
        if (st.train_path != NULL && o.train_path != NULL && strcmp(st.train_path, o.train_path) != 0)
            printf("note: --train %s differs from the state's %s; continuing at epoch %llu, "
                   "window %llu of the new split\n", o.train_path, st.train_path,
                   (unsigned long long)resumed.loader.epoch, (unsigned long long)resumed.loader.pos);
    }
    check_options(&o, raw);
    if (o.log_json == NULL && o.out_dir != NULL) {
        static char log_default[4200];
        snprintf(log_default, sizeof(log_default), "%s/log.jsonl", o.out_dir);
        o.log_json = log_default;
        o.log_json_is_default = 1;   /* not stored: a resume into another --out logs there */
    }

    if (o.threads > 0) omp_set_num_threads(o.threads);
    else if (dist_local_size() > 1 && getenv("OMP_NUM_THREADS") == NULL)   /* ranks share the cores */
        omp_set_num_threads(omp_get_num_procs() > dist_local_size()
                            ? omp_get_num_procs() / dist_local_size() : 1);
    int threads = omp_get_max_threads();
    openblas_set_num_threads(threads);

    Tokenizer tok;
    if (tokenizer_open(&tok, o.tokenizer, o.bpe_dir, err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }

    /* from here on errors leave through `cleanup`, which releases whatever was opened */
    int rc = 0;
    DataLoader train_loader, val_loader;
    int train_open = 0, have_val = o.val_path != NULL, val_open = 0, model_built = 0;
    GPT model;
    FILE* jsonf = NULL;
    int* inputs = NULL;
    int* targets = NULL;
    Sampler sampler;             /* --sample-every */
    int have_sampler = 0;

    /* the model's configuration: from the state, the file, or the flags */
    GPTConfig cfg;
    if (resuming) {
        cfg = resumed.config;
    } else if (o.init_path != NULL) {
        if (modelfile_read_config(o.init_path, &cfg, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        if (o.vocab != 0 && o.vocab != cfg.vocab_size) {
            fprintf(stderr, "seedgpt: --vocab %d contradicts %s (vocab %d)\n", o.vocab,
                    o.init_path, cfg.vocab_size);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
    } else {
        cfg.max_seq_len = o.seq_len;
        cfg.vocab_size = o.vocab ? o.vocab : tok.vocab_size;
        cfg.padded_vocab_size = gpt_pad_vocab(cfg.vocab_size);
        cfg.num_layers = o.layers;
        cfg.num_heads = o.heads;
        cfg.num_kv_heads = o.kv_heads ? o.kv_heads : o.heads;
        cfg.channels = o.embd;
        cfg.pos_kind = o.pos_rope ? POS_ROPE : POS_LEARNED;
        cfg.rope_base = o.pos_rope ? o.rope_base : 0;
        cfg.rope_layout = o.pos_rope ? o.rope_layout : 0;
        cfg.block_kind = o.block_parallel ? BLOCK_PARALLEL : BLOCK_SEQUENTIAL;
        const char* problem = gpt_config_problem(&cfg);
        if (problem != NULL) {
            fprintf(stderr, "seedgpt: model flags: %s\n", problem);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
    }
    if (cfg.vocab_size < tok.vocab_size) {
        fprintf(stderr, "seedgpt: model vocab %d is smaller than the %s tokenizer's %d\n",
                cfg.vocab_size, tokenizer_name(&tok), tok.vocab_size);
        rc = EXIT_BAD_INPUT;
        goto cleanup;
    }
    /* weights, gradients and AdamW's two moments must fit in memory: refuse, rather than die in
     * the allocator (or in the kernel's OOM killer) */
    {
        size_t sizes[NUM_PARAMETER_TENSORS];
        double P = 0;
        gpt_param_sizes(&cfg, sizes);
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += (double)sizes[k];
        double need = 16.0 * P, have = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
        if (have > 0 && need > have) {
            fprintf(stderr, "seedgpt: model (L%d C%d V%d maxT %d) has %.3g parameters: weights, "
                    "gradients and AdamW moments need %.1f GiB, this machine has %.1f GiB\n",
                    cfg.num_layers, cfg.channels, cfg.vocab_size, cfg.max_seq_len, P,
                    need / 1073741824.0, have / 1073741824.0);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
    }
    int B = o.batch, T = o.seq ? o.seq : cfg.max_seq_len;
    if (T > cfg.max_seq_len) {
        fprintf(stderr, "seedgpt: --seq %d exceeds the model's maximum context %d\n", T,
                cfg.max_seq_len);
        rc = EXIT_BAD_INPUT;
        goto cleanup;
    }

    long tokens_per_micro = (long)world * B * T;   /* one micro-batch of every rank */
    if (o.total_batch != 0 && o.total_batch % tokens_per_micro != 0) {
        if (world > 1)
            fprintf(stderr, "seedgpt: --total-batch %ld: expected a multiple of ranks x batch x seq "
                    "= %d x %d x %d = %ld tokens\n", o.total_batch, world, B, T, tokens_per_micro);
        else
            fprintf(stderr, "seedgpt: --total-batch %ld: expected a multiple of batch x seq = %d x "
                    "%d = %ld tokens\n", o.total_batch, B, T, tokens_per_micro);
        rc = EXIT_BAD_INPUT;
        goto cleanup;
    }
    int A = o.total_batch ? (int)(o.total_batch / tokens_per_micro) : 1;   /* micro-batches per rank */

    /* the run folder: created if missing; a fresh run never writes into another run's states */
    if (o.out_dir != NULL && writer) {
        if (make_dirs(o.out_dir) != 0) {
            fprintf(stderr, "seedgpt: --out %s: cannot create the folder: %s\n", o.out_dir,
                    strerror(errno));
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        int same_dir = resuming && strcmp(o.out_dir, cmd.resume_dir) == 0;
        uint64_t* steps;
        int n;
        if (!same_dir && state_list(o.out_dir, &steps, &n, err) == 0) {
            if (n > 0) {
                fprintf(stderr, "seedgpt: --out %s already holds training states (newest: "
                        "state_%08llu.bin): continue that run with --resume %s, or choose another "
                        "folder\n", o.out_dir, (unsigned long long)steps[0], o.out_dir);
                free(steps);
                rc = EXIT_BAD_INPUT;
                goto cleanup;
            }
            free(steps);
        }
    }

    uint64_t shuffle_seed = philox_stream_seed(o.seed, STREAM_SHUFFLE);
    if (loader_open(&train_loader, o.train_path, B, T, cfg.vocab_size, o.shuffle, shuffle_seed,
                    err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        rc = EXIT_BAD_INPUT;
        goto cleanup;
    }
    train_open = 1;
    if (have_val) {
        if (loader_open(&val_loader, o.val_path, B, T, cfg.vocab_size, 0, 0, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        val_open = 1;
    }
    if (dist_use_backend(backend_lookup(o.device, o.precision), err) != 0 ||
        gpt_build_on(&model, &cfg, B, T, &o.policy, backend_lookup(o.device, o.precision), err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        rc = EXIT_BAD_INPUT;
        goto cleanup;
    }
    model_built = 1;
    Run run = {&o, &model, &train_loader, 0, 0, -1};
    int start_step = 0;
    if (resuming) {
        if (state_load(state_file, &model, &resumed, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        LoaderState ls;
        memset(&ls, 0, sizeof(ls));
        ls.epoch = resumed.loader.epoch;
        ls.pos = resumed.loader.pos;
        ls.shuffle_seed = resumed.loader.shuffle_seed;
        ls.num_windows = resumed.loader.num_windows;
        ls.shuffle = resumed.loader.shuffle;
        if (ls.shuffle != o.shuffle || ls.shuffle_seed != shuffle_seed) {
            fprintf(stderr, "seedgpt: %s: the loader state (shuffle %d, seed %llu) does not match "
                    "the run's (shuffle %d, seed %llu)\n", state_file, (int)ls.shuffle,
                    (unsigned long long)ls.shuffle_seed, o.shuffle,
                    (unsigned long long)shuffle_seed);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        if (loader_set_state(&train_loader, &ls, err) != 0) {
            fprintf(stderr, "seedgpt: --resume %s: %s\n", state_file, err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        start_step = (int)resumed.step;
        printf("resumed from %s: step %d, epoch %llu, window %llu\n", state_file, start_step,
               (unsigned long long)resumed.loader.epoch, (unsigned long long)resumed.loader.pos);
        fflush(stdout);
        run.bad_consecutive = resumed.bad_consecutive;
        run.bad_total = resumed.bad_total;
        run.last_saved = start_step;
    } else if (o.init_path != NULL) {
        if (modelfile_load(&model, o.init_path, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
    } else {
        gpt_init_weights(&model, o.seed);
    }
    gpt_set_dropout(&model, o.seed, o.embd_dropout, o.attn_dropout, o.resid_dropout);
    gpt_set_drop_path(&model, o.drop_path);

    if (o.log_json != NULL && writer) {
        if (resuming && truncate_log(o.log_json, start_step, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        jsonf = fopen(o.log_json, resuming ? "a" : "w");
        if (jsonf == NULL) {
            fprintf(stderr, "seedgpt: --log-json %s: cannot open for writing (%s)\n", o.log_json,
                    strerror(errno));
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
    }

    GPTMemory mem = gpt_memory(&model);
    printf("model: L%d H%d KV%d C%d V%d (padded %d) maxT %d, %zu parameters\n",
           cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.channels, cfg.vocab_size,
           cfg.padded_vocab_size, cfg.max_seq_len, model.num_parameters);
    if (cfg.pos_kind == POS_ROPE || cfg.block_kind == BLOCK_PARALLEL || o.drop_path > 0) {
        printf("model options: positions %s", cfg.pos_kind == POS_ROPE ? "rope" : "learned");
        if (cfg.pos_kind == POS_ROPE)
            printf(" (base %d, %s pairs)", cfg.rope_base, cfg.rope_layout == ROPE_GPTJ ? "gptj" : "neox");
        printf(", %s block, drop-path %g\n",
               cfg.block_kind == BLOCK_PARALLEL ? "parallel" : "sequential", o.drop_path);
    }
    printf("batch %d x %d", B, T);
    if (world > 1) printf(" x %d ranks (%s)", world, dist_kind());
    if (A > 1) printf(" x %d micro-batches", A);
    if (A * world > 1) printf(" (%ld tokens per step)", (long)A * world * B * T);
    printf(", %d steps, %zu training windows, %d threads, device %s, precision %s\n", o.steps,
           loader_num_windows(&train_loader), threads, model.be->name, model.be->precision);
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

    install_stop_signals();
    inputs = mem_alloc((size_t)B * T * sizeof(int));
    targets = mem_alloc((size_t)B * T * sizeof(int));
    /* progress: model FLOPs per step against this machine's (or the given) peak */
    double peak_gflops = o.peak_gflops;
    if (peak_gflops <= 0 && o.log_every > 0 && model.be->host_memory && writer) {
        peak_gflops = measure_sgemm_gflops();
        printf("peak: sgemm %.1f GFLOP/s measured on this machine (MFU is against it; "
               "--peak-gflops X to set)\n", peak_gflops);
    }
    double step_tokens = (double)A * world * B * T;   /* over every rank */
    double step_flops = flops_per_token(&model, T) * step_tokens;
    /* samples during training: a sampler of their own, allocated before step 0 */
    if (o.sample_every > 0 && writer) { sampler_init(&sampler, &model); have_sampler = 1; }
    uint64_t sample_seed = philox_stream_seed(o.seed, STREAM_SAMPLE);
    double total_ms = 0.0, run_start = now_ms();
    float last_loss = 0.0f, last_val = NAN;
    int step = start_step, stopped_by = 0;
    /* every rank stops after the same step, whichever of them got the signal */
    for (; step < o.steps && (stopped_by = dist_max(stop_signal)) == 0; step++) {
        /* A micro-batches per rank. Rank r's micro-batch a is the loader's window r*A + a
         * positions ahead, global sequences g = (r*A + a)*B .. + B-1 (DESIGN §2); the step then
         * moves the loader R*A windows on. Each position's loss weighs 1/(R*A*B*T), so the sum of
         * the ranks' gradients is the gradient of the global batch's mean loss. */
        double t0 = now_ms(), loss_sum = 0.0;
        int first = dist_rank() * A;   /* this rank's first micro-batch in the step */
        gpt_zero_grad(&model);
        for (int a = 0; a < A; a++) {
            if (loader_peek(&train_loader, (size_t)(first + a), inputs, targets) != 0) {
                fprintf(stderr, "seedgpt: %s\n", train_loader.err);
                rc = EXIT_BAD_INPUT;
                goto cleanup;
            }
            loss_sum += gpt_forward(&model, inputs, targets, B, T, (uint32_t)((first + a) * B),
                                    (uint32_t)step, 1);
            int mismatches = gpt_backward(&model, 1.0f / ((float)B * T * A * world));
            if (mismatches > 0 && o.policy.check == CHECK_STOP) {
                fprintf(stderr, "seedgpt: stopping at step %d: the recompute check failed in %d "
                        "segment(s), first at layer %d (--recompute-check stop)\n", step, mismatches,
                        model.check_first_layer);
                rc = EXIT_RECOMPUTE_CHECK;
                goto cleanup;
            }
        }
        loader_advance(&train_loader, (size_t)world * A);
        /* the hook between backward and clip: gradients and loss summed over the ranks */
        dist_allreduce_grads(&model);
        loss_sum = dist_sum(loss_sum);
        float loss = A * world == 1 ? (float)loss_sum : (float)(loss_sum / (A * world));
        if (fault_fires("nan_loss", step)) loss = NAN;           /* test hook */
        if (fault_fires("nan_grad", step)) model.be->fill(model.grads_memory, 1, NAN);   /* test hook */
        float norm = gpt_clip_grads(&model, (float)o.clip);
        double lr = lr_at(&o, step);
        /* the guard: a non-finite loss or norm skips the update; the step and the loader have
         * advanced all the same (DESIGN §2) */
        int finite = isfinite(loss) && isfinite(norm);
        fault_kill_point("step_mid", step);
        if (finite) {
            gpt_adamw(&model, (float)lr, (float)o.beta1, (float)o.beta2, (float)o.eps,
                      (float)o.weight_decay, step + 1);
            run.bad_consecutive = 0;
        } else {
            run.bad_consecutive++;
            run.bad_total++;
        }
        fault_kill_point("step_updated", step);
        double ms = now_ms() - t0;
        total_ms += ms;
        last_loss = loss;
        if (!finite) {
            printf("step %d: non-finite loss %g or grad norm %g; update skipped (%u in a row, "
                   "%llu in all)\n", step, loss, norm, run.bad_consecutive,
                   (unsigned long long)run.bad_total);
        }
        if (o.log_every > 0 && (step % o.log_every == 0 || step == o.steps - 1)) {
            char eta[32];
            fmt_duration(eta, sizeof(eta), (o.steps - step - 1) * (total_ms / (step + 1 - start_step)) / 1e3);
            printf("step %5d/%d | loss %.4f | lr %.3e | norm %.4f | %.0f tok/s | %.1f ms | ",
                   step, o.steps, loss, lr, norm, step_tokens / (ms / 1e3), ms);
            if (peak_gflops > 0) printf("MFU %.1f%% | ", 100.0 * step_flops / (ms * 1e6) / peak_gflops);
            printf("mem %.0f MiB | ETA %s\n", run_peak_bytes(&model) / 1048576.0, eta);
            fflush(stdout);
        }
        if (jsonf != NULL) {
            fprintf(jsonf, "{\"type\":\"train\",\"step\":%d", step);
            json_float(jsonf, "loss", loss);
            json_float(jsonf, "grad_norm", norm);
            json_float(jsonf, "lr", lr);
            fprintf(jsonf, ",\"step_ms\":%.3f,\"peak_bytes\":%zu", ms, mem_stats().peak_bytes);
            if (!model.be->host_memory)
                fprintf(jsonf, ",\"device_peak_bytes\":%zu", model.be->peak_bytes());
            fprintf(jsonf, "%s}\n", finite ? "" : ",\"skipped\":true");
            fflush(jsonf);
        }
        fault_kill_point("step_logged", step);
        if (o.max_bad_steps > 0 && run.bad_consecutive >= (uint32_t)o.max_bad_steps) {
            fprintf(stderr, "seedgpt: stopping at step %d: %u consecutive steps with a non-finite "
                    "loss or gradient norm (--max-bad-steps %d); nothing more is saved%s%s%s\n",
                    step, run.bad_consecutive, o.max_bad_steps,
                    o.out_dir ? " (the states already in " : "", o.out_dir ? o.out_dir : "",
                    o.out_dir ? " stay)" : "");
            rc = EXIT_NON_FINITE;
            goto cleanup;
        }
        int last = step == o.steps - 1;
        if (have_val && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last)) {
            float vl = evaluate(&model, &val_loader, o.eval_batches, inputs, targets);
            printf("step %5d | val loss %.4f\n", step, vl);
            last_val = vl;
            if (jsonf != NULL) {
                fprintf(jsonf, "{\"type\":\"eval\",\"step\":%d", step);
                json_float(jsonf, "val_loss", vl);
                fprintf(jsonf, "}\n");
                fflush(jsonf);
            }
        }
        if (have_sampler && (step + 1) % o.sample_every == 0) {
            gpt_to_host(&model);   /* sampling runs on the host copy of the weights */
            printf("step %5d | sample: ", step);
            generate(&sampler, &tok, NULL, 0, o.sample_tokens, 1.0, 0, sample_seed,
                     (uint32_t)step, stdout);
            printf("\n");
            fflush(stdout);
        }
        if (writer && o.out_dir != NULL && o.save_every > 0 && (step + 1) % o.save_every == 0 && !last)
            save_state(&run, step + 1);
        if (fault_fires("sigterm", step)) raise(SIGTERM);        /* test hook */
    }
    int done = step;
    if (done > start_step) {
        double mean_ms = total_ms / (done - start_step);
        char wall[32];
        fmt_duration(wall, sizeof(wall), (now_ms() - run_start) / 1e3);
        printf("done: %d steps%s, final loss %.4f", done, done < o.steps ? " (stopped early)" : "",
               last_loss);
        if (!isnan(last_val)) printf(", val loss %.4f", last_val);
        printf(", mean %.1f ms/step, %.0f tok/s", mean_ms, step_tokens / (mean_ms / 1e3));
        if (peak_gflops > 0)
            printf(", MFU %.1f%% of %.1f GFLOP/s", 100.0 * step_flops / (mean_ms * 1e6) / peak_gflops,
                   peak_gflops);
        printf(", peak %s memory %.0f MiB, wall %s\n", model.be->host_memory ? "host" : "device",
               run_peak_bytes(&model) / 1048576.0, wall);
    } else if (resuming) {
        printf("nothing to train: the state is at step %d of %d\n", start_step, o.steps);
    }
    if (writer && o.out_dir != NULL && run.last_saved != done) save_state(&run, done);
    /* a crash between a state's rename and its model.bin leaves the model file one state behind */
    else if (writer && o.out_dir != NULL && done == start_step) save_run_model(&run);
    if (writer && o.save_path != NULL) {
        gpt_to_host(&model);
        if (modelfile_save(&model, o.save_path, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            rc = EXIT_BAD_INPUT;
            goto cleanup;
        }
        printf("saved %s\n", o.save_path);
    }
    if (stopped_by != 0 && done < o.steps) {
        printf("stopped by %s after step %d%s\n", stopped_by == SIGINT ? "SIGINT" : "SIGTERM",
               done - 1, o.out_dir ? " (state saved)" : "");
        rc = 128 + stopped_by;
    }
cleanup:
    if (have_sampler) sampler_free(&sampler);
    if (jsonf != NULL) fclose(jsonf);
    mem_free(inputs);
    mem_free(targets);
    if (train_open) loader_close(&train_loader);
    if (val_open) loader_close(&val_loader);
    if (model_built) gpt_free(&model);
    tokenizer_free(&tok);
    return rc;
}
