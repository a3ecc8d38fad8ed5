/* cli.c — the trainer's command line (cli.h): the flag table, the defaults, parsing a flag's text
 * (from argv or from a state's option text) into Options, each option's canonical text, the
 * resume-time merging, and the usage texts. Every refusal is one line on stderr naming the flag
 * (and the state it came from), then exit status 2.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "checkpoint/checkpoint.h"
#include "model/backend.h"

/* ---- the flag table ----------------------------------------------------------------------- */

/* Every flag, and what it is to a resumed run:
 *   R_LOCAL   this process only, not stored in a state
 *   R_SHAPE   stored in the state's header (model shape, batch, seq, seed): must agree
 *   R_FIXED   stored in the state's option text: must agree
 *   R_CHANGE  stored in the option text, may change on resume (omitted: the state's value) */
enum { R_LOCAL, R_SHAPE, R_FIXED, R_CHANGE };
static const struct { const char* name; int resume; int bare; /* 1: takes no value */ } flags[NUM_FLAGS] = {
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
    [F_PROFILE] = {"--profile", R_LOCAL, 1},
    [F_LOG_ATTN_STATS] = {"--log-attn-stats", R_LOCAL, 1},
    [F_MEMORY_BUDGET] = {"--memory-budget", R_LOCAL},
    /* the state's header holds it: train.c refuses a resume with another layout */
    [F_CONTEXT_PARALLEL] = {"--context-parallel", R_LOCAL},
    /* ZeRO-1's bits are plain data parallelism's and a state holds the whole optimizer: a state
     * resumes with or without it */
    [F_ZERO] = {"--zero", R_LOCAL},
    /* not stored: a resumed run scores HellaSwag when it is given again */
    [F_HELLASWAG] = {"--hellaswag", R_LOCAL},   [F_HELLASWAG_EVERY] = {"--hellaswag-every", R_LOCAL},
    /* fp16 runs only (a state of one holds its loss scale: it resumes under fp16 only) */
    [F_LOSS_SCALE_WINDOW] = {"--loss-scale-window", R_FIXED},
};

/* ./train --help: the synopsis of training and of each subcommand (the words after "./train"
 * padded to one column), then every flag by topic, then the exit statuses. */
static void usage(FILE* f, const Subcommand* subs, int nsubs) {
    fprintf(f,
"seedgpt: train a GPT-2 in C, with dropout that survives activation recompute.\n"
"\n"
"usage: ./train %-20s %s\n", "[flags]", "train a model");
    for (int k = 0; k < nsubs; k++) {
        char words[64];
        snprintf(words, sizeof(words), "%s %s", subs[k].name, subs[k].synopsis);
        fprintf(f, "       ./train %-20s %s\n", words, subs[k].help);
    }
    fprintf(f,
"       mpirun -np R ./train_mpi [flags]   data parallel over R processes (`make mpi`; README)\n"
"\n"
"data\n"
"  --train PATH        training shards: a file or a glob pattern, e.g. 'data/kjv/train_*.bin'\n"
"  --val PATH          validation shards (optional)\n"
"  --tokenizer NAME    tokenizer of the shards: byte (default; vocab 257) or gpt2 (vocab 50257)\n"
"  --bpe-dir DIR       gpt2's encoder.json + vocab.bpe (default $SEEDGPT_BPE_DIR, else data/gpt2)\n"
"  --shuffle 0|1       visit training windows in a seeded shuffled order each epoch (default 1)\n"
"model (a fresh model, unless --init or --resume)\n"
"  --init PATH         start from a model file (llm.c fp32 v3 or bf16 v5, or seedgpt's own)\n"
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
"                      its layers drew in the forward (layer = every:1). selective: keep what\n"
"                      the products and the attention need, recompute ln1, ln2 and the GELU\n"
"                      output in the backward; selective+layer, selective+every:K: both\n"
"  --memory-budget S   e.g. 512MiB or 20GiB (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB are powers\n"
"                      of 1000): take the policy whose planned memory fits with the fewest\n"
"                      recomputed FLOPs (./train plan shows them); with --recompute, refuse\n"
"                      when that policy does not fit\n"
"  --recompute-check M off | warn | stop (default warn): a recomputed segment's output must\n"
"                      equal the stored input of the next, bit for bit\n"
"  --recompute-seeds S captured | fresh (default captured). fresh is the negative control: the\n"
"                      recompute draws new masks, as compiled checkpoints with fused dropout\n"
"                      do; gradients are then wrong and the value check says so\n"
"output\n"
"  --log-every N       a progress line every N steps (default 10)\n"
"  --log-json PATH     JSON lines: a {\"type\":\"run\",...} row, then {\"type\":\"train\",...} per\n"
"                      step, {\"type\":\"eval\",...} (default with --out: DIR/log.jsonl). PATH is\n"
"                      new, empty or a seedgpt log; never an input of the run. A failed write\n"
"                      (a full disk) stops the run after the step, state saved, exit status 6\n"
"  --eval-every N      validation loss every N steps, and at the end (default 0: only at the end)\n"
"  --eval-batches N    validation windows per evaluation (default 8)\n"
"  --hellaswag PATH    HellaSwag accuracy (acc, acc_norm; README \"HellaSwag\") of the model at the\n"
"                      end, as a {\"type\":\"hellaswag\",...} row; PATH in llm.c's eval format\n"
"                      (scripts/data/hellaswag.sh). Needs --batch >= 4 (4 rows per example)\n"
"  --hellaswag-every N also every N steps (default 0: only at the end)\n"
"  --sample-every N    print a sample every N steps (default 0: never): --sample-tokens tokens\n"
"                      (default 64) after an EOT, temperature 1, drawn from the master seed's\n"
"                      SAMPLE stream with counter (position, step, 0, 0); moves no loader\n"
"  --peak-gflops X     the FLOP rate MFU is measured against, X > 0 (default: this machine's\n"
"                      fp32 FMA peak at the run's threads, measured for ~0.2 s at start-up, as\n"
"                      `./train peak` prints it; on a GPU its documented dense peak at the\n"
"                      run's precision). One process's: with R ranks MFU reads the step's FLOPs\n"
"                      against R x X, and tok/s counts the tokens of all ranks\n"
"  --profile           at the end, time per op class over the steps after 2 warm-up steps\n"
"                      (matmul and attention forward and backward, LayerNorm, GELU,\n"
"                      residual+dropout, cross-entropy, zero_grad/clip/AdamW, recompute): ms/step,\n"
"                      %% of the step, GFLOP/s, the first step's time on its own line; one\n"
"                      {\"type\":\"profile\",...} row in the JSON log. Results are unchanged\n"
"  --log-attn-stats    each JSON train row gets \"attn_stats\": per layer [max |scaled score|,\n"
"                      min LSE, max LSE] over the step's training forwards, computed inside\n"
"                      the attention forward (a recompute adds nothing); CPU backend. The\n"
"                      first thing to read when a low-precision loss goes NaN\n"
"  --save PATH         write the model file at the end (PATH: none yet or a regular file, not\n"
"                      an input of the run)\n"
"  --threads N         OpenMP and OpenBLAS threads (default: all cores, shared out among the\n"
"                      ranks of one machine under mpirun unless OMP_NUM_THREADS is set)\n"
"  --context-parallel N ./train_mpi: N ranks share each sequence (context parallelism); ranks =\n"
"                      data-parallel x N. The sequence is cut into 2N chunks, rank r of a group\n"
"                      holds chunks r and 2N-1-r; K/V go around the ring. Masks are the\n"
"                      one-process run's (docs/context-parallel.md). T a multiple of 2N\n"
"  --zero 0|1          ./train_mpi: 1 shards the optimizer over the R ranks (ZeRO-1): rank r\n"
"                      updates one R-th of the weights and their AdamW moments, the gradients\n"
"                      reduce-scattered and the weights all-gathered, bit for bit plain data\n"
"                      parallelism (CPU backend; R >= 2; default 0)\n"
"  --device D          cpu | cuda: where the model's memory lives and its ops run (default:\n"
"                      cuda in ./train_cuda, built by `make cuda`; cpu in ./train). Masks,\n"
"                      seeds, recompute and states are the same on both; a state saved on one\n"
"                      resumes on the other\n"
"  --precision P       fp32 | bf16 | fp16 (default fp32). bf16: the dense products and attention\n"
"                      take bf16 operands (tensor cores on cuda; VDPBF16PS or its portable twin\n"
"                      on the cpu, which also keeps the activations that are operands in bf16)\n"
"                      and accumulate in fp32; master weights, AdamW state, the residual\n"
"                      stream, LayerNorm and softmax statistics and gradients stay fp32; masks\n"
"                      are the same bits. States and model files are fp32 either way (README\n"
"                      \"Precision\"). fp16 (cpu only so far): the same with fp16 operands and\n"
"                      dynamic loss scaling; its states hold the scale and resume in fp16 only\n"
"  --loss-scale-window N  fp16: the loss scale (2^16 at the start) halves and the step is\n"
"                      skipped on a non-finite gradient, and doubles after N good steps in a\n"
"                      row (default 1000; refused without --precision fp16)\n"
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
"check failed (stop), 4 --max-bad-steps reached or non-finite weights refused (no file written),\n"
"5 stopped at once by a second SIGINT/SIGTERM (nothing saved after the last state), 6 the log\n"
"could not be written (the run stopped after the step and saved its state), 130/143 stopped by\n"
"SIGINT/SIGTERM after saving\n");
}

/* ---- parsing ------------------------------------------------------------------------------ */

/* Where the values being parsed come from, for messages: the command line or a state file. */
static const char* parse_source = NULL;

static void die_flag(const char* flag, const char* value, const char* expected) {
    if (parse_source)
        fprintf(stderr, "seedgpt: %s: stored option %s %s: expected %s\n", parse_source, flag,
                value ? value : "with no value", expected);
    else if (value == NULL)   /* the last word of the command line */
        fprintf(stderr, "seedgpt: %s needs a value after it%s%s\n", flag,
                strcmp(expected, "a value") ? ": expected " : "",
                strcmp(expected, "a value") ? expected : "");
    else
        fprintf(stderr, "seedgpt: %s %s: expected %s\n", flag, value, expected);
    exit(EXIT_BAD_INPUT);
}

/* A number as the flags take it: decimal, with an optional fraction and exponent. strtod also
 * reads hexadecimal (0x100000) and the words inf and nan, which no integer flag takes either. */
static int decimal_number_text(const char* s) {
    return s != NULL && strpbrk(s, "xX") == NULL;
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

/* A decimal number in the interval from lo to hi, each end open or closed. */
static double parse_double_in(const char* flag, const char* s, double lo, int lo_open, double hi,
                              int hi_open) {
    char* end;
    errno = 0;
    double v = decimal_number_text(s) ? strtod(s, &end) : 0;
    if (!decimal_number_text(s) || *s == '\0' || isspace((unsigned char)*s) || *end != '\0' ||
        errno != 0 || !isfinite(v) || (lo_open ? v <= lo : v < lo) ||
        (hi_open ? v >= hi : v > hi)) {
        char buf[96];
        snprintf(buf, sizeof(buf), "a number in %s%g, %g%s", lo_open ? "(" : "[", lo, hi,
                 hi_open ? ")" : "]");
        die_flag(flag, s, buf);
    }
    return v;
}

static double parse_double(const char* flag, const char* s, double lo, double hi, int hi_open) {
    return parse_double_in(flag, s, lo, 0, hi, hi_open);
}

static const char* parse_path(const char* flag, const char* v) {
    if (v == NULL || *v == '\0') die_flag(flag, v, "a path");
    return v;
}

/* A 64-bit seed, in decimal like every other integer flag (a leading 0 is not octal, and 0x is
 * refused), digits only. */
static uint64_t parse_seed(const char* flag, const char* v) {
    char* end;
    errno = 0;
    if (v == NULL || *v < '0' || *v > '9') die_flag(flag, v, "a decimal unsigned 64-bit integer");
    unsigned long long s = strtoull(v, &end, 10);
    if (*end != '\0' || errno != 0) die_flag(flag, v, "a decimal unsigned 64-bit integer");
    return s;
}

/* A size in bytes: a positive number and a unit, B, KiB, MiB, GiB, TiB (powers of 1024) or KB,
 * MB, GB, TB (powers of 1000); a bare number is bytes. */
static double parse_size(const char* flag, const char* v) {
    static const struct { const char* unit; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
    const char* expected = "a positive size such as 512MiB or 20GiB (units B, KiB, MiB, GiB, TiB, "
                           "KB, MB, GB, TB)";
    char* end;
    errno = 0;
    double x = decimal_number_text(v) && *v != '\0' && !isspace((unsigned char)*v)
               ? strtod(v, &end) : -1;
    if (v == NULL || x < 0 || errno != 0 || !isfinite(x)) die_flag(flag, v, expected);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) != 0) continue;
        double bytes = x * units[i].scale;
        if (!(bytes >= 1.0) || !isfinite(bytes)) die_flag(flag, v, expected);
        return bytes;
    }
    die_flag(flag, v, expected);
    return 0;
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
    o->loss_scale_window = 1000;
}

/* Sets flag `id` of o from the text v, or exits with one line naming the flag. */
static void apply_flag(Options* o, int id, const char* v) {
    const char* f = flags[id].name;
    char err[256], *end;
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
    case F_EPS:   /* AdamW divides by sqrt(v) + eps: 0 turns a zero gradient into 0/0 */
        o->eps = parse_double_in(f, v, 0, 1, 1, 0);
        break;
    case F_WEIGHT_DECAY: o->weight_decay = parse_double(f, v, 0, 10, 0); break;
    case F_CLIP: o->clip = parse_double(f, v, 0, 1e30, 0); break;
    case F_SHUFFLE: o->shuffle = parse_long(f, v, 0, 1); break;
    case F_SEED: o->seed = parse_seed(f, v); break;
    case F_DROPOUT: o->dropout = parse_double(f, v, 0, 1, 1); break;
    case F_ATTN_DROPOUT: o->attn_dropout = parse_double(f, v, 0, 1, 1); break;
    case F_RESID_DROPOUT: o->resid_dropout = parse_double(f, v, 0, 1, 1); break;
    case F_EMBD_DROPOUT: o->embd_dropout = parse_double(f, v, 0, 1, 1); break;
    case F_LOG_EVERY: o->log_every = parse_long(f, v, 0, 2000000000L); break;
    case F_EVAL_EVERY: o->eval_every = parse_long(f, v, 0, 2000000000L); break;
    case F_EVAL_BATCHES: o->eval_batches = parse_long(f, v, 1, 1000000); break;
    case F_THREADS: o->threads = parse_long(f, v, 1, 1024); break;
    case F_CONTEXT_PARALLEL: o->context_parallel = (int)parse_long(f, v, 1, 1 << 20); break;
    case F_ZERO:
        if (v == NULL || (strcmp(v, "0") && strcmp(v, "1")))
            die_flag(f, v, "0 (off) or 1 (ZeRO-1: AdamW's moments sharded over the ranks); "
                           "stages 2 and 3 are not implemented");
        o->zero = v[0] - '0';
        break;
    case F_HELLASWAG: o->hellaswag_path = parse_path(f, v); break;
    case F_HELLASWAG_EVERY: o->hellaswag_every = parse_long(f, v, 0, 2000000000L); break;
    case F_DEVICE:
        if (strcmp(v, "cpu") && strcmp(v, "cuda")) die_flag(f, v, "cpu or cuda");
        if (backend_by_name(v) == NULL)
            die_flag(f, v, "cpu (this binary has no CUDA backend: `make cuda` builds ./train_cuda)");
        o->device = v;
        break;
    case F_PRECISION:
        if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "fp16")) die_flag(f, v, "fp32, bf16 or fp16");
        o->precision = v;
        break;
    case F_RECOMPUTE:
        if (recompute_parse(v, &o->policy, err) != 0)
            die_flag(f, v, "none, layer, every:K, selective, selective+layer or selective+every:K "
                     "(K a positive integer)");
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
    case F_LOSS_SCALE_WINDOW: o->loss_scale_window = (int)parse_long(f, v, 1, 2000000000L); break;
    case F_SAMPLE_EVERY: o->sample_every = parse_long(f, v, 0, 2000000000L); break;
    case F_SAMPLE_TOKENS: o->sample_tokens = parse_long(f, v, 1, 1 << 24); break;
    case F_PEAK_GFLOPS:
        if (!decimal_number_text(v) || *v == '\0' || isspace((unsigned char)*v) ||
            (o->peak_gflops = strtod(v, &end), *end != '\0') || !(o->peak_gflops > 0) ||
            o->peak_gflops > 1e12)
            die_flag(f, v, "a rate in GFLOP/s, above 0 and at most 1e12");
        break;
    case F_MEMORY_BUDGET: o->memory_budget = parse_size(f, v); break;
    case F_TOTAL_BATCH: o->total_batch = parse_long(f, v, 0, 1L << 40); break;
    case F_PROFILE: o->profile = 1; break;
    case F_LOG_ATTN_STATS: o->log_attn_stats = 1; break;
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
 * (doubles in the shortest form that reads back exactly). 0, or -1 when the flag has no value.
 * world: the run's data-parallel processes (--total-batch's default counts them). */
static int format_flag(const Options* o, int id, int world, char* buf, size_t cap) {
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
    case F_CONTEXT_PARALLEL: snprintf(buf, cap, "%d", o->context_parallel); return 0;
    case F_ZERO: snprintf(buf, cap, "%d", o->zero); return 0;
    case F_HELLASWAG: s = o->hellaswag_path; break;
    case F_HELLASWAG_EVERY: snprintf(buf, cap, "%d", o->hellaswag_every); return 0;
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
    case F_LOSS_SCALE_WINDOW: snprintf(buf, cap, "%d", o->loss_scale_window); return 0;
    case F_SAMPLE_EVERY: snprintf(buf, cap, "%d", o->sample_every); return 0;
    case F_SAMPLE_TOKENS: snprintf(buf, cap, "%d", o->sample_tokens); return 0;
    case F_PEAK_GFLOPS: fmt_double(buf, cap, o->peak_gflops); return 0;
    case F_PROFILE: snprintf(buf, cap, "%d", o->profile); return 0;
    case F_LOG_ATTN_STATS: snprintf(buf, cap, "%d", o->log_attn_stats); return 0;
    case F_MEMORY_BUDGET: fmt_double(buf, cap, o->memory_budget); return 0;
    case F_TOTAL_BATCH:   /* canonical: the tokens per step, also when left to the default */
        snprintf(buf, cap, "%ld", o->total_batch ? o->total_batch
                                  : (long)world * o->batch * (o->seq ? o->seq : o->seq_len));
        return 0;
    }
    if (s == NULL) return -1;
    snprintf(buf, cap, "%s", s);
    return 0;
}

void parse_options(Options* o, const char* raw[NUM_FLAGS], int argc, char** argv,
                   const Subcommand* subs, int nsubs) {
    set_defaults(o);
    for (int id = 0; id < NUM_FLAGS; id++) raw[id] = NULL;
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { usage(stdout, subs, nsubs); exit(0); }
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: unexpected argument '%s' (see ./train --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        int id = find_flag(f);
        if (id < 0) {
            fprintf(stderr, "seedgpt: unknown flag %s (see ./train --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        if (flags[id].bare) { apply_flag(o, id, "1"); raw[id] = "1"; continue; }
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

void check_options(const Options* o, const char* raw[NUM_FLAGS]) {
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
    if (o->hellaswag_path == NULL && raw[F_HELLASWAG_EVERY] != NULL) {
        fprintf(stderr, "seedgpt: --hellaswag-every needs --hellaswag PATH\n");
        exit(EXIT_BAD_INPUT);
    }
    if (!o->pos_rope && (raw[F_ROPE_BASE] || raw[F_ROPE_LAYOUT])) {
        fprintf(stderr, "seedgpt: %s needs --pos rope\n",
                raw[F_ROPE_BASE] ? "--rope-base" : "--rope-layout");
        exit(EXIT_BAD_INPUT);
    }
    if (o->policy.fresh_seeds && o->policy.every == 0) {
        fprintf(stderr, "seedgpt: --recompute-seeds fresh needs a recompute policy (--recompute "
                        "layer or every:K, selective+ either): under %s no layer is recomputed\n",
                o->policy.selective ? "selective alone" : "none");
        exit(EXIT_BAD_INPUT);
    }
    if (backend_lookup(o->device, o->precision) == NULL) {
        fprintf(stderr, "seedgpt: --precision %s: not on --device %s in this build\n", o->precision,
                o->device);
        exit(EXIT_BAD_INPUT);
    }
    if (raw[F_LOSS_SCALE_WINDOW] != NULL && strcmp(o->precision, "fp16") != 0) {
        fprintf(stderr, "seedgpt: --loss-scale-window needs --precision fp16 (the loss is scaled "
                "in fp16 only; --precision is %s)\n", o->precision);
        exit(EXIT_BAD_INPUT);
    }
    if (strcmp(o->precision, "fp16") == 0 && o->zero) {
        fprintf(stderr, "seedgpt: --precision fp16 --zero 1: the sharded optimizer does not take "
                "the loss scale yet; drop --zero\n");
        exit(EXIT_BAD_INPUT);
    }
    if (o->out_dir == NULL && raw[F_SAVE_EVERY] != NULL && o->save_every > 0) {
        fprintf(stderr, "seedgpt: --save-every %d needs a run folder: add --out DIR\n",
                o->save_every);
        exit(EXIT_BAD_INPUT);
    }
}

/* Values with a newline are not stored: such a flag must then be given again on resume. */
void format_state_options(const Options* o, int world, char* out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int id = 0; id < NUM_FLAGS; id++) {
        if (flags[id].resume != R_FIXED && flags[id].resume != R_CHANGE) continue;
        if (id == F_LOG_JSON && o->log_json_is_default) continue;
        if (id == F_LOSS_SCALE_WINDOW && strcmp(o->precision, "fp16") != 0) continue;
        char v[4200];
        if (format_flag(o, id, world, v, sizeof(v)) != 0 || strchr(v, '\n') != NULL) continue;
        int w = snprintf(out + n, cap - n, "%s %s\n", flags[id].name, v);
        if (w < 0 || (size_t)w >= cap - n) { out[n] = '\0'; return; }   /* too long: stop */
        n += (size_t)w;
    }
}

void options_from_state(Options* st, StateInfo* info, const char* path) {
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

void merge_resumed_options(Options* o, const Options* cmd, const char* raw[NUM_FLAGS],
                           const Options* st, const char* state_path, int world) {
    for (int id = 0; id < NUM_FLAGS; id++) {
        if (raw[id] == NULL) continue;
        if (flags[id].resume != R_SHAPE && flags[id].resume != R_FIXED) continue;
        char a[4200], b[4200];
        int ra = format_flag(cmd, id, world, a, sizeof(a)), rb = format_flag(st, id, world, b, sizeof(b));
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

/* ---- ./train sample ----------------------------------------------------------------------- */

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
"  --tokenizer NAME    byte or gpt2 (default: gpt2 for a model of vocab 50257 or more, else\n"
"                      byte);  --bpe-dir DIR  gpt2's files\n"
"  --threads N         OpenMP and OpenBLAS threads (default: all cores)\n"
"The prompt is printed, then the generated text, then a newline. The key/value cache makes the\n"
"cost of each new token linear in the context length.\n");
}

void parse_sample_options(SampleOptions* so, int argc, char** argv) {
    so->init = NULL; so->prompt = ""; so->tokenizer = NULL; so->bpe_dir = NULL;
    so->tokens = 256; so->top_k = 0; so->temperature = 1.0; so->seed = 1337; so->threads = 0;
    for (int i = 0; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { sample_usage(stdout); exit(0); }
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: sample: unexpected argument '%s' (see ./train sample --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        static const char* const known[] = {"--init", "--prompt", "--tokens", "--temperature",
                                            "--top-k", "--tokenizer", "--bpe-dir", "--threads",
                                            "--seed"};
        int is_known = 0;
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) is_known |= !strcmp(f, known[k]);
        if (!is_known) {
            fprintf(stderr, "seedgpt: sample: unknown flag %s (see ./train sample --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        if (v == NULL) die_flag(f, NULL, "a value");
        i++;
        if (!strcmp(f, "--init")) so->init = parse_path(f, v);
        else if (!strcmp(f, "--prompt")) so->prompt = v;
        else if (!strcmp(f, "--tokens")) so->tokens = parse_long(f, v, 0, 1 << 24);
        else if (!strcmp(f, "--temperature")) so->temperature = parse_double(f, v, 0, 100, 0);
        else if (!strcmp(f, "--top-k")) so->top_k = parse_long(f, v, 0, 1 << 24);
        else if (!strcmp(f, "--tokenizer")) so->tokenizer = v;
        else if (!strcmp(f, "--bpe-dir")) so->bpe_dir = v;
        else if (!strcmp(f, "--threads")) so->threads = (int)parse_long(f, v, 1, 1024);
        else if (!strcmp(f, "--seed")) so->seed = parse_seed(f, v);
        else {
            fprintf(stderr, "seedgpt: sample: unknown flag %s (see ./train sample --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
    }
    if (so->init == NULL) {
        fprintf(stderr, "seedgpt: sample: --init MODEL is required (see ./train sample --help)\n");
        exit(EXIT_BAD_INPUT);
    }
}

/* ---- ./train eval ------------------------------------------------------------------------ */

static void eval_usage(FILE* f) {
    fprintf(f,
"usage: ./train eval --hellaswag FILE --init MODEL [flags]\n"
"  --hellaswag PATH    the examples, in llm.c's HellaSwag eval format (scripts/data/hellaswag.sh\n"
"                      writes it; docs/formats.md)\n"
"  --init PATH         the model file (llm.c fp32 v3 or seedgpt's own)\n"
"  --batch N           rows per forward, 4 per example, N >= 4 (default 16)\n"
"  --device D          cpu or cuda (default: as a training run's);  --precision fp32|bf16|fp16\n"
"  --threads N         OpenMP threads (default: all cores)\n"
"  --per-example       one line per example on stdout: label, both picks, the four summed\n"
"                      losses and ending lengths\n"
"Each ending is scored by the model's cross-entropy over its own tokens, after the shared\n"
"context: acc picks the lowest sum, acc_norm the lowest mean per ending token (llm.c's number).\n"
"Prints a summary line and a {\"type\":\"hellaswag\",...} JSON line; progress on stderr.\n");
}

void parse_eval_options(EvalOptions* eo, int argc, char** argv) {
    eo->init = NULL; eo->hellaswag = NULL; eo->batch = 16; eo->device = backend_default_name();
    eo->precision = "fp32"; eo->threads = 0; eo->per_example = 0;
    for (int i = 0; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { eval_usage(stdout); exit(0); }
        if (!strcmp(f, "--per-example")) { eo->per_example = 1; continue; }
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: eval: unexpected argument '%s' (see ./train eval --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int known = !strcmp(f, "--init") || !strcmp(f, "--hellaswag") || !strcmp(f, "--batch") ||
                    !strcmp(f, "--device") || !strcmp(f, "--precision") || !strcmp(f, "--threads");
        if (!known) {
            fprintf(stderr, "seedgpt: eval: unknown flag %s (see ./train eval --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        if (v == NULL) die_flag(f, NULL, "a value");
        i++;
        if (!strcmp(f, "--init")) eo->init = parse_path(f, v);
        else if (!strcmp(f, "--hellaswag")) eo->hellaswag = parse_path(f, v);
        else if (!strcmp(f, "--batch")) eo->batch = (int)parse_long(f, v, 4, 1 << 20);
        else if (!strcmp(f, "--threads")) eo->threads = (int)parse_long(f, v, 1, 1024);
        else if (!strcmp(f, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) die_flag(f, v, "cpu or cuda");
            if (backend_by_name(v) == NULL)
                die_flag(f, v, "cpu (this binary has no CUDA backend: `make cuda` builds ./train_cuda)");
            eo->device = v;
        } else {
            if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "fp16")) die_flag(f, v, "fp32, bf16 or fp16");
            eo->precision = v;
        }
    }
    if (eo->hellaswag == NULL || eo->init == NULL) {
        fprintf(stderr, "seedgpt: eval: --%s is required (see ./train eval --help)\n",
                eo->hellaswag == NULL ? "hellaswag FILE" : "init MODEL");
        exit(EXIT_BAD_INPUT);
    }
}

/* ---- ./train peak ------------------------------------------------------------------------- */

static void peak_usage(FILE* f) {
    fprintf(f,
"usage: ./train peak [flags]\n"
"  --threads N         OpenMP threads (default: OMP_NUM_THREADS, else all cores), as a training\n"
"                      run with the same setting would have\n"
"  --seconds S         how long each rate is measured, 0.01 to 60 (default 0.2); the best of\n"
"                      ~10 ms repeats is reported\n"
"  --json              also one JSON line {\"type\":\"peak\",...}\n"
"Prints this machine's measured arithmetic peak (cpu/peak.h): the fp32 FMA rate on the widest\n"
"vector path the CPU runs (the yardstick of MFU on the CPU), and the bf16 dot-product rate\n"
"(VDPBF16PS) where the CPU has AVX512_BF16; also OpenBLAS's sgemm rate, for reference.\n");
}

void parse_peak_options(PeakOptions* po, int argc, char** argv) {
    po->threads = 0; po->seconds = 0.2; po->json = 0;
    for (int i = 0; i < argc; i++) {
        const char* f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) { peak_usage(stdout); exit(0); }
        if (!strcmp(f, "--json")) { po->json = 1; continue; }
        if (strncmp(f, "--", 2) != 0) {
            fprintf(stderr, "seedgpt: peak: unexpected argument '%s' (see ./train peak --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--threads")) po->threads = (int)parse_long(f, v, 1, 1024);
        else if (!strcmp(f, "--seconds")) po->seconds = parse_double(f, v, 0.01, 60, 0);
        else {
            fprintf(stderr, "seedgpt: peak: unknown flag %s (see ./train peak --help)\n", f);
            exit(EXIT_BAD_INPUT);
        }
        i++;
    }
}

/* What this build left out (the Makefile's probes, SEEDGPT_NO_*): "" when nothing. Said at
 * start-up and by --version. */
const char* build_left_out(void) {
    return ""
#ifdef SEEDGPT_NO_CBLAS
           "OpenBLAS (no sgemm reference rate beside the measured fp32 peak); "
#endif
#ifdef SEEDGPT_NO_BPE
           "the GPT-2 tokenizer (no cJSON/PCRE2: --tokenizer gpt2 is refused); "
#endif
#ifdef SEEDGPT_NO_MPI
           "MPI (no mpicc: ./train_mpi is not built); "
#endif
           ;
}
