/* cli.h — the trainer's command line: the options of a training run (Options), the table of
 * flags behind them and what each is to a resumed run, parsing the command line and a state's
 * option text into Options, the options' canonical text, the merging of a state's options under
 * the command line's, and the usage texts of ./train and ./train sample.
 *
 * A bad flag prints one line naming the flag and what was expected and exits with
 * EXIT_BAD_INPUT; nothing here opens a file, builds a model or runs a step: what the options do
 * to a run is train.c's story.
 */
#ifndef SEEDGPT_CLI_H
#define SEEDGPT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include "model/gpt.h"
#include "model/state.h"

/* Exit statuses (also in --help). */
enum { EXIT_BAD_INPUT = 2, EXIT_RECOMPUTE_CHECK = 3, EXIT_NON_FINITE = 4, EXIT_ABORTED = 5,
       EXIT_WRITE_FAILED = 6 };

/* A training run's options, as its flags set them (the defaults: cli.c's set_defaults). */
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
    double peak_gflops;      /* 0: the default yardstick (train.c, default_peak_gflops) */
    int profile;             /* --profile: time per op class over the steps (model/profile.h) */
    int log_attn_stats;      /* --log-attn-stats: per-layer attention statistics in the JSON rows */
    /* gradient accumulation: tokens per optimizer step (0: one micro-batch, B*T) */
    long total_batch;
    int threads;
    const char* device;      /* "cpu" or "cuda" (model/backend.h) */
    const char* precision;   /* "fp32", "bf16" or "fp16" */
    int loss_scale_window;   /* fp16: good steps in a row after which the loss scale doubles */
    /* activation checkpointing */
    RecomputePolicy policy;
    int context_parallel;    /* N ranks share each sequence (DESIGN §9; ./train_mpi); 0: not
                                given (1, or a resumed state's N) */
    int zero;                /* --zero 1: ZeRO-1, the optimizer sharded over the data-parallel
                                ranks (model/zero.h; ./train_mpi, 2 ranks or more); 0: off */
    double memory_budget;    /* bytes; 0: none. The policy that fits with the fewest recomputed
                                FLOPs, unless --recompute is given (model/plan.h) */
    /* run folder, resume, the non-finite guard */
    const char* out_dir;
    const char* resume_dir;
    int save_every, keep, max_bad_steps;
    int log_json_is_default;   /* log_json is DIR/log.jsonl because --out was given without it */
    const char* resumed_train_path;   /* --resume: the state's --train when this run's differs */
    /* HellaSwag in the loop (data/hellaswag.h): the eval file, scored every N steps and at the
     * end (N 0: only at the end) */
    const char* hellaswag_path;
    int hellaswag_every;
} Options;

/* The flags of ./train, as indices into cli.c's table (each flag's spelling and what it is to a
 * resumed run); a state's option text lists them in this order. raw[id] below is the text given
 * for flag id (NULL: not given). */
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
    F_PRECISION, F_PROFILE, F_LOG_ATTN_STATS,
    F_MEMORY_BUDGET, F_CONTEXT_PARALLEL, F_ZERO,
    F_HELLASWAG, F_HELLASWAG_EVERY, F_LOSS_SCALE_WINDOW,
    NUM_FLAGS
};

/* A subcommand, `./train NAME ...` (train.c's table). run gets the binary's path as invoked
 * (argv[0]) and the argc words after NAME; it returns the process's exit status. */
typedef struct {
    const char* name;
    const char* synopsis;    /* what follows NAME in the usage text: "--help", "RUNDIR" */
    int (*run)(const char* self, int argc, char** argv);
    const char* help;        /* one line for the usage text */
} Subcommand;

/* Parses argv (argv[0] the binary) into o over the defaults; raw[id] is the text given for flag
 * id (NULL: not given), and --dropout counts as given for each site it sets. --help prints the
 * usage text, with the subcommands subs[0 .. nsubs-1], and exits 0. */
void parse_options(Options* o, const char* raw[NUM_FLAGS], int argc, char** argv,
                   const Subcommand* subs, int nsubs);

/* Checks that concern the final options (after a resume merged them); exits on a bad one. */
void check_options(const Options* o, const char* raw[NUM_FLAGS]);

/* The options a state stores, one "--flag value\n" line each, into out[cap]. world: the run's
 * data-parallel processes (the canonical --total-batch counts every rank's tokens). */
void format_state_options(const Options* o, int world, char* out, size_t cap);

/* The options of a state: defaults, then the state's header and option text. The text is split
 * in place (st points into info->options). path names the state in messages. */
void options_from_state(Options* st, StateInfo* info, const char* path);

/* Resume: o = the state's options st, with the command line's (cmd, raw) on top. A given flag
 * that is not allowed to change and differs from the state is refused, naming the flag and both
 * values. world as for format_state_options. */
void merge_resumed_options(Options* o, const Options* cmd, const char* raw[NUM_FLAGS],
                           const Options* st, const char* state_path, int world);

/* ./train sample's options. */
typedef struct {
    const char* init;          /* the model file (required) */
    const char* prompt;        /* "": none, generation starts after an EOT */
    const char* tokenizer;
    const char* bpe_dir;       /* NULL: $SEEDGPT_BPE_DIR, else data/gpt2 */
    long tokens, top_k;        /* top_k 0: every token */
    double temperature;        /* 0: greedy */
    uint64_t seed;
    int threads;               /* 0: OpenMP's default */
} SampleOptions;

/* Parses the words after `sample` into so; --help prints the sample usage text and exits 0. */
void parse_sample_options(SampleOptions* so, int argc, char** argv);

/* ./train eval's options. */
typedef struct {
    const char* init;          /* the model file (required) */
    const char* hellaswag;     /* the HellaSwag eval file (required) */
    int batch;                 /* rows per forward, 4 per example (default 16) */
    const char* device;        /* cpu or cuda */
    const char* precision;     /* fp32 or bf16 */
    int threads;               /* 0: OpenMP's default */
    int per_example;           /* one line per example on stdout */
} EvalOptions;

/* Parses the words after `eval` into eo; --help prints the eval usage text and exits 0. */
void parse_eval_options(EvalOptions* eo, int argc, char** argv);

/* ./train peak's options. */
typedef struct {
    int threads;               /* 0: OpenMP's default (OMP_NUM_THREADS, else every core) */
    double seconds;            /* how long each rate is measured */
    int json;                  /* also one JSON line */
} PeakOptions;

/* Parses the words after `peak` into po; --help prints the peak usage text and exits 0. */
void parse_peak_options(PeakOptions* po, int argc, char** argv);

/* What this build left out, for the start-up line and --version; "" when nothing. */
const char* build_left_out(void);

#endif
