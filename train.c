/* train.c — seedgpt's entry point: the subcommand table, training loop, logging, evaluation, model
 * save, training states (save, resume, pruning), the non-finite guard and the stop signals. The
 * flags, their parsing and the usage texts are cli.c's.
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
#include "cli.h"

void openblas_set_num_threads(int num_threads);  /* OpenBLAS's own; not in every cblas.h */

/* Data-parallel processes of this run (model/dist.h): 1 in ./train. */
static int world = 1;

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

/* ---- stop signals ------------------------------------------------------------------------- */

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
    format_state_options(o, world, info.options, sizeof(info.options));
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

/* ---- sampling ----------------------------------------------------------------------------- */

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

/* ---- the subcommands ---------------------------------------------------------------------- */

/* ./train sample: text from a model file (options: cli.c). */
static int sample_main(const char* self, int argc, char** argv) {
    SampleOptions so;
    parse_sample_options(&so, argc, argv);
    if (so.threads > 0) omp_set_num_threads(so.threads);
    openblas_set_num_threads(omp_get_max_threads());
    char err[256];
    Tokenizer tok;
    if (tokenizer_open(&tok, so.tokenizer, so.bpe_dir, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    GPTConfig cfg;
    GPT model;
    if (modelfile_read_config(so.init, &cfg, err) != 0 || gpt_build(&model, &cfg, 1, 1, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        tokenizer_free(&tok);
        return EXIT_BAD_INPUT;
    }
    if (modelfile_load(&model, so.init, err) != 0) {
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
    size_t plen = strlen(so.prompt);
    uint16_t* ids16 = malloc((tokenizer_max_tokens(&tok, plen) + 1) * sizeof(uint16_t));
    size_t np = tokenizer_encode(&tok, (const unsigned char*)so.prompt, plen, ids16);
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
        fwrite(so.prompt, 1, plen, stdout);
        double t0 = now_ms();
        int made = generate(&s, &tok, ids, (int)np, (int)so.tokens, so.temperature, (int)so.top_k,
                            philox_stream_seed(so.seed, STREAM_SAMPLE), 0, stdout);
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

/* ./train plot: runs scripts/plot.sh beside this binary (the repository root), else in the
 * working folder, with the words after `plot`. */
static int plot_main(const char* self, int argc, char** argv) {
    static char script[4200];
    const char* slash = strrchr(self, '/');
    snprintf(script, sizeof(script), "%.*sscripts/plot.sh", slash ? (int)(slash - self + 1) : 0,
             self);
    if (access(script, X_OK) != 0) snprintf(script, sizeof(script), "scripts/plot.sh");
    char** args = calloc((size_t)argc + 2, sizeof(char*));   /* script, the words, NULL */
    if (args != NULL) {
        args[0] = script;
        for (int i = 0; i < argc; i++) args[i + 1] = argv[i];
        execv(script, args);
        free(args);
    }
    fprintf(stderr, "seedgpt: plot: cannot run %s: %s\n", script, strerror(errno));
    return EXIT_BAD_INPUT;
}

/* ./train prepare: text -> token shards (data/prepare.h). */
static int prepare_cmd(const char* self, int argc, char** argv) {
    return prepare_main(argc, argv);
}

/* Every subcommand, in the order ./train --help lists them. */
static const Subcommand subcommands[] = {
    {"sample", "--help", sample_main, "generate text from a model file"},
    {"plot", "RUNDIR", plot_main, "RUNDIR/log.jsonl -> RUNDIR/loss.png (gnuplot)"},
    {"prepare", "--help", prepare_cmd, "turn text files into token shards"},
};
enum { NUM_SUBCOMMANDS = (int)(sizeof(subcommands) / sizeof(subcommands[0])) };

int main(int argc, char** argv) {
    for (int k = 0; argc >= 2 && k < NUM_SUBCOMMANDS; k++)
        if (!strcmp(argv[1], subcommands[k].name))
            return subcommands[k].run(argv[0], argc - 2, argv + 2);

    char err[256];
    if (dist_init(&argc, &argv, err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }
    world = dist_size();
    int writer = dist_rank() == 0;   /* only rank 0 writes logs, samples, states and model files */
    if (fault_check_env(err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }

    Options cmd, o;
    const char* raw[NUM_FLAGS];
    parse_options(&cmd, raw, argc, argv, subcommands, NUM_SUBCOMMANDS);
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
        merge_resumed_options(&o, &cmd, raw, &st, state_file, world);
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
