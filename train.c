/* train.c — seedgpt's entry point: the subcommand table, and the training run told in order in
 * main: set-up (options, data parallelism, model, data, resume), the loop (step, log, evaluate,
 * sample, save), the end (summary, last state, model file). Here too what only the run needs:
 * training states (save, resume, pruning), the run folder, the JSON log, the non-finite guard and
 * the stop signals. The flags, their parsing and the usage texts are cli.c's.
 *
 *   ./train [flags]            train (./train --help lists every flag)
 *   ./train prepare ...        text -> token shards (data/prepare.h)
 *   ./train sample ...         text from a model file (model/sample.h: KV cache, its own stream)
 *   ./train eval ...           a model file's HellaSwag accuracy (data/hellaswag.h, model/eval.h)
 *   ./train export ...         a model file -> a Hugging Face GPT-2 folder (model/hf.h)
 *   ./train import ...         Hugging Face GPT-2 weights -> a model file (model/hf.h)
 *   ./train plot RUNDIR        loss and lr curves to RUNDIR/loss.png (runs scripts/plot.sh)
 *   ./train peak               the measured fp32 / bf16 FLOP peak, MFU's yardstick (cpu/peak.h)
 *   mpirun -np R ./train_mpi   data parallel over R processes (`make mpi`; dist/dist.h)
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>
#include "model/gpt.h"
#include "dist/dist.h"
#include "model/mem.h"
#include "model/modelfile.h"
#include "model/state.h"
#include "model/sample.h"
#include "model/schedule.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "data/prepare.h"
#include "data/hellaswag.h"
#include "model/eval.h"
#include "model/plan.h"
#include "util/fileio.h"
#include "model/profile.h"
#include "model/hf.h"
#include "model/zero.h"
#include "cli.h"

/* Processes of this run (dist/dist.h): 1 in ./train. They form dp groups of cpn ranks that
 * share each sequence (--context-parallel, DESIGN §9): world = dp x cpn. */
static int world = 1, dp = 1, cpn = 1;

/* Context parallelism: this rank's two chunks of each sequence of a (B, T) window, in the model's
 * chunk-major layout (model/gpt.h); without it, the window itself. Returns what the model takes. */
static const int* cp_local(const GPT* m, int* local, const int* window, int B, int T) {
    if (cpn == 1) return window;
    int Tl = T / cpn;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) {
            int k = t / (Tl / 2), tc = t % (Tl / 2);   /* local chunk, row in it */
            local[((size_t)k * B + b) * (Tl / 2) + tc] = window[(size_t)b * T + gpt_cp_position(m, t)];
        }
    return local;
}

/* ---- the schedule, evaluation and the progress figures ------------------------------------ */

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
static float evaluate(GPT* m, DataLoader* val, int n, int* inputs, int* targets, int* local_in,
                      int* local_tg) {
    size_t windows = loader_num_windows(val);
    if ((size_t)n > windows) n = (int)windows;
    double sum = 0.0;
    /* a context-parallel group shares each window: its ranks' means add up to cpn times it */
    for (int k = dist_dp_rank(); k < n; k += dp) {
        if (loader_window(val, (size_t)k, inputs, targets) != 0) {
            fprintf(stderr, "seedgpt: %s\n", val->err);
            exit(EXIT_BAD_INPUT);
        }
        sum += gpt_forward(m, cp_local(m, local_in, inputs, val->B, val->T),
                           cp_local(m, local_tg, targets, val->B, val->T), val->B, val->T / cpn,
                           0, 0, 0);
    }
    return (float)(dist_sum(sum) / ((double)n * cpn));
}

/* ---- HellaSwag (data/hellaswag.h: the file and its rows; model/eval.h: the scoring rule) ------ */

typedef struct {
    int n, correct, correct_norm;   /* examples scored; picks equal to the label, by acc / acc_norm */
} HellaswagScore;

/* The host buffers of one batch of rows (B, T), allocated once. */
typedef struct {
    int B, T;
    int *inputs, *targets;          /* (B, T) */
    int *comp_first, *comp_len;     /* (B) */
    int* labels;                    /* (B / 4) */
    double* sum;                    /* (B) */
} HellaswagBuffers;

static void hellaswag_buffers_alloc(HellaswagBuffers* hb, int B, int T) {
    hb->B = B;
    hb->T = T;
    hb->inputs = mem_alloc((size_t)B * T * sizeof(int));
    hb->targets = mem_alloc((size_t)B * T * sizeof(int));
    hb->comp_first = mem_alloc((size_t)B * sizeof(int));
    hb->comp_len = mem_alloc((size_t)B * sizeof(int));
    hb->labels = mem_alloc((size_t)B * sizeof(int));
    hb->sum = mem_alloc((size_t)B * sizeof(double));
}

static void hellaswag_buffers_free(HellaswagBuffers* hb) {
    mem_free(hb->inputs);
    mem_free(hb->targets);
    mem_free(hb->comp_first);
    mem_free(hb->comp_len);
    mem_free(hb->labels);
    mem_free(hb->sum);
    memset(hb, 0, sizeof(*hb));
}

/* Whether the file's examples fit a model of vocabulary V read in batches of B rows of T
 * positions. 0, or EXIT_BAD_INPUT with the line said (flag: what names the file). */
static int hellaswag_fits(const HellaswagSet* hs, const char* flag, const char* path, int V, int B,
                          int T, const char* t_what) {
    if (hs->max_token >= V) {
        fprintf(stderr, "seedgpt: %s %s: token id %d is outside the model's vocabulary of %d\n",
                flag, path, hs->max_token, V);
        return EXIT_BAD_INPUT;
    }
    if (hs->longest_row > T) {
        fprintf(stderr, "seedgpt: %s %s: an example needs %d positions (context + ending - 1); "
                "%s is %d\n", flag, path, hs->longest_row, t_what, T);
        return EXIT_BAD_INPUT;
    }
    if (B < HELLASWAG_ENDINGS) {
        fprintf(stderr, "seedgpt: %s %s: each example is %d rows of a batch; the batch is %d\n",
                flag, path, HELLASWAG_ENDINGS, B);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* Scores the examples of hs: B / 4 examples per forward (each batch as long as its longest row),
 * rank k of `ranks` taking batches k, k + ranks, ... (the caller sums the counts over the
 * ranks). A progress line on stderr (every 2 s, and at the end) when progress is set; with
 * per_example, one line per example (its label, both picks, the four sums and lengths). */
static HellaswagScore hellaswag_eval(GPT* m, const HellaswagSet* hs, HellaswagBuffers* hb,
                                     int rank, int ranks, int progress, FILE* per_example) {
    int E = hb->B / HELLASWAG_ENDINGS;   /* examples per batch */
    int batches = (hs->num_examples + E - 1) / E;
    HellaswagScore sc = {0, 0, 0};
    double t0 = now_ms(), last_said = t0;
    for (int j = rank; j < batches; j += ranks) {
        int first = j * E, n = hs->num_examples - first < E ? hs->num_examples - first : E;
        int T = hellaswag_rows_len(hs, first, n);
        hellaswag_fill_rows(hs, first, n, T, hb->inputs, hb->targets, hb->comp_first, hb->comp_len,
                            hb->labels);
        eval_choice_losses(m, hb->inputs, hb->targets, HELLASWAG_ENDINGS * n, T, hb->comp_first,
                           hb->comp_len, hb->sum);
        for (int i = 0; i < n; i++) {
            const double* sum = hb->sum + HELLASWAG_ENDINGS * i;
            const int* len = hb->comp_len + HELLASWAG_ENDINGS * i;
            int pick = eval_pick(sum, len, HELLASWAG_ENDINGS, 0);
            int pick_norm = eval_pick(sum, len, HELLASWAG_ENDINGS, 1);
            sc.n++;
            sc.correct += pick == hb->labels[i];
            sc.correct_norm += pick_norm == hb->labels[i];
            if (per_example != NULL) {
                fprintf(per_example, "hellaswag example %d label %d pick %d pick_norm %d sums", first + i,
                        hb->labels[i], pick, pick_norm);
                for (int k = 0; k < HELLASWAG_ENDINGS; k++) fprintf(per_example, " %.17g", sum[k]);
                fprintf(per_example, " lens");
                for (int k = 0; k < HELLASWAG_ENDINGS; k++) fprintf(per_example, " %d", len[k]);
                fprintf(per_example, "\n");
            }
        }
        double now = now_ms();
        if (progress && now - last_said >= 2000.0) {
            fprintf(stderr, "hellaswag: %d/%d examples, acc_norm %.4f so far, %.1f s\n",
                    first + n, hs->num_examples, (double)sc.correct_norm / sc.n, (now - t0) / 1e3);
            last_said = now;
        }
    }
    if (progress)
        fprintf(stderr, "hellaswag: %d examples scored in %.1f s (%d per forward%s)\n", sc.n,
                (now_ms() - t0) / 1e3, E, ranks > 1 ? ", this rank" : "");
    return sc;
}

/* The rate MFU is read against when --peak-gflops is not given, with the line that says what it
 * is; 0 (no MFU) where nothing is known: the backend's answer (model/backend.h, peak_gflops). The
 * CPU: the fp32 FMA peak measured at the run's threads, OpenBLAS's sgemm rate beside it for
 * reference. A GPU: its documented dense peak at the run's precision. */
static double default_peak_gflops(const GPT* m, int threads, char* line, size_t cap) {
    if (m->be->peak_gflops != NULL) return m->be->peak_gflops(m->be, threads, line, cap);
    snprintf(line, cap, "peak: unknown for device %s (no MFU; --peak-gflops X to set)", m->be->name);
    return 0;
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

/* The pid of the run that holds dir's lock (DIR/.lock, lock_run_folder), -1 when it is held
 * but names none, 0 when no run holds it. Only probes: a lock taken here is dropped at once. */
static long folder_lock_holder(const char* dir) {
    char path[4200];
    const char* kind;
    snprintf(path, sizeof(path), "%s/.lock", dir);
    int fd = open_regular(path, &kind);
    if (fd < 0) return 0;
    long pid = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        char buf[32] = "";
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        pid = n > 0 && atol(buf) > 0 ? atol(buf) : -1;
    }
    close(fd);   /* releases a lock this probe took */
    return pid;
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
        long holder = folder_lock_holder(dir);
        char who[48] = "";
        if (holder > 0) snprintf(who, sizeof(who), " (pid %ld)", holder);
        if (holder != 0)
            fprintf(stderr, "seedgpt: --resume %s: no training state yet: the run in this folder%s "
                    "is still going and has not saved one; it saves every --save-every steps, at "
                    "its end and when stopped by SIGINT/SIGTERM\n", dir, who);
        else
            fprintf(stderr, "seedgpt: --resume %s: no training state in the folder (state_*.bin)\n",
                    dir);
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

/* ---- stop signals ------------------------------------------------------------------------- */

/* The loop's stop reasons, agreed over the ranks (the largest wins): 0 none, a signal number, or
 * this one, for a write to the JSON log that failed. */
enum { STOP_LOG_FAILED = 1000 };

static volatile sig_atomic_t stop_signal = 0;
/* The .tmp file a save is writing (pending_tmp_set), for a second signal to remove. */
static char pending_tmp[4200];
static volatile sig_atomic_t pending_tmp_set = 0;
/* What the first signal does, said by the handler (set before the handler is installed). */
static char first_signal_note[512];
static size_t first_signal_note_len;

static void begin_tmp(const char* path) {
    if (tmp_path_of(pending_tmp, sizeof(pending_tmp), path) == 0) pending_tmp_set = 1;
}
static void end_tmp(void) { pending_tmp_set = 0; }

/* The first SIGINT/SIGTERM asks the loop to finish the step and save, and says so; a second one
 * stops the process at once with EXIT_ABORTED, removing the .tmp a save was writing (the previous
 * state and model file stay intact). Only async-signal-safe calls: write, unlink, _exit. */
static void on_stop_signal(int sig) {
    if (stop_signal != 0) {
        if (pending_tmp_set) unlink(pending_tmp);
        static const char msg[] = "seedgpt: second stop signal: stopped at once, nothing more "
                                  "saved (the last saved state and model file stay)\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)w;
        _exit(EXIT_ABORTED);
    }
    stop_signal = sig;
    ssize_t w = write(STDERR_FILENO, first_signal_note, first_signal_note_len);
    (void)w;
}

static void install_stop_signals(const Options* o) {
    if (o->out_dir != NULL || o->save_path != NULL)
        snprintf(first_signal_note, sizeof(first_signal_note), "seedgpt: stop signal: finishing "
                 "this step, then saving %s%s%s; send it again to stop at once without saving\n",
                 o->out_dir ? "the state in " : "", o->out_dir ? o->out_dir : "",
                 o->out_dir ? (o->save_path ? " and --save" : "") : "--save");
    else
        snprintf(first_signal_note, sizeof(first_signal_note), "seedgpt: stop signal: finishing "
                 "this step, then stopping (nothing to save: no --out or --save); send it again to "
                 "stop at once\n");
    first_signal_note_len = strlen(first_signal_note);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- sampling ----------------------------------------------------------------------------- */

/* Feeds the prompt (ids; none: the EOT token starts the text, as GPT-2 was trained) and generates
 * up to n tokens, writing the decoded text to f. Generation ends early at an EOT token (printed as
 * nothing: EOT ends a document) or when the model's context is full. The draw at position t uses
 * counter (t, stream, 0, 0) of sample_seed (model/sample.h). Returns the tokens generated. */
static int generate(Sampler* s, const Tokenizer* tok, const int* prompt, int np, int n,
                    double temperature, int top_k, uint64_t sample_seed, uint32_t stream, FILE* f) {
    const GPTConfig* c = &s->model->config;
    int escape = isatty(fileno(f));   /* a terminal gets no raw control bytes */
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
        if (len > 0) sample_write_text(f, buf, (size_t)len, escape);
        if (s->pos >= c->max_seq_len) { made++; break; }
        logits = sampler_feed(s, next);
    }
    fflush(f);
    return made;
}

/* ---- the run ------------------------------------------------------------------------------ */

/* The memory figure of progress lines: the host's peak on the CPU, the device's on CUDA. */
static size_t run_peak_bytes(const GPT* m) {
    return m->be->host_memory ? mem_stats().peak_bytes : m->be->peak_bytes();
}

/* Everything a training run holds from its set-up to its end; run_close releases what was
 * opened (the *_open flags say what). */
typedef struct {
    const Options* o;
    int writer;                  /* rank 0: the only one that writes logs, samples, states, models */
    Tokenizer tok;
    GPTConfig cfg;
    int B, T;                    /* a micro-batch: B sequences of T tokens */
    int A;                       /* micro-batches per rank and step (--total-batch) */
    GPT model;
    DataLoader loader;           /* the training split */
    DataLoader val;              /* the validation split, when have_val */
    int have_val, tok_open, loader_open, val_open, model_built;
    FILE* jsonf;                 /* the JSON log, or NULL */
    int* inputs;                 /* (B, T) */
    int* targets;                /* (B, T) */
    int* local_inputs;           /* (B, T / cpn) this rank's chunks (--context-parallel), else NULL */
    int* local_targets;
    Sampler sampler;             /* samples during training (--sample-every), when have_sampler */
    int have_sampler;
    uint64_t sample_seed;
    int start_step;              /* the first step this process runs (a resumed state's step, or 0) */
    /* progress */
    double peak_gflops;          /* one process's peak (--peak-gflops, else rank 0's); 0: no MFU */
    double all_ranks_gflops;     /* MFU's reference: peak_gflops x the ranks */
    double step_tokens;          /* tokens of one step over every rank: A * R * B * T */
    double step_flops;           /* model FLOPs of one step over every rank */
    double total_ms;             /* the steps' time so far, this process */
    float last_loss, last_val;   /* last_val NaN: no evaluation yet */
    HellaswagSet hs;             /* --hellaswag's examples, when hs_open */
    int hs_open;
    HellaswagBuffers hb;         /* their batch (allocated before step 0) */
    int last_val_step;           /* the step after which last_val was measured */
    /* the non-finite guard, and the states */
    uint32_t bad_consecutive;    /* non-finite steps in a row */
    uint64_t bad_total;
    /* --precision fp16's dynamic loss scaling (0: another precision): the scale of the next step
     * and the good steps in a row since it last changed; both in the state */
    float loss_scale;
    uint32_t scale_good;
    int last_saved;              /* the step of the newest state written by this process, or -1 */
    /* the JSON log's first failed write (a full disk): its errno, 0 while none; the run then
     * stops after the step, saving its state, and ends with EXIT_WRITE_FAILED */
    int log_errno;
    /* a resumed run's --train and --val taken from the state (its path, for messages), or NULL */
    const char* train_from_state;
    const char* val_from_state;
    /* mpirun's stop (dist_stop_grace_s): the slowest step and the last save so far, and whether
     * the start-up note on a too short kill timeout was said */
    double slowest_step_ms, last_save_ms;
    int grace_judged;
    Zero zero;                   /* --zero 1: this rank's shard of the optimizer (zero.ranks 0: off) */
    float* zero_buf;             /* --zero 1, rank 0 when it saves (zero_saves): one tensor's
                                    moments or sharded masters, gathered for a save (the largest
                                    tensor's floats) */
} Run;

/* --precision fp16: the loss scale a run starts at (README "Precision") */
#define LOSS_SCALE_START 65536.0f

static void run_close(Run* r) {
    if (r->have_sampler) sampler_free(&r->sampler);
    if (r->jsonf != NULL) fclose(r->jsonf);
    mem_free(r->inputs);
    mem_free(r->targets);
    mem_free(r->local_inputs);
    mem_free(r->local_targets);
    if (r->loader_open) loader_close(&r->loader);
    if (r->val_open) loader_close(&r->val);
    if (r->hs_open) hellaswag_free(&r->hs);
    hellaswag_buffers_free(&r->hb);
    if (r->model_built) gpt_free(&r->model);
    if (r->zero.ranks > 0) zero_free(&r->zero);
    mem_free(r->zero_buf);
    if (r->tok_open) tokenizer_free(&r->tok);
}

/* ---- the JSON log ------------------------------------------------------------------------- */

/* One JSON object a line. The first row names the run,
 *     {"type":"run","version":1,"seed":S,"model":"L2 H2 KV2 C32 V257 maxT 32 learned sequential"}
 * then one {"type":"train",...} row per step, {"type":"eval",...} and {"type":"profile",...}
 * rows. The run writes into an existing file only when it is empty or a seedgpt log (its first
 * line is a run row, or, in a log of a seedgpt from before the run row, a train or eval row), and
 * a resumed run only into its own run's log (the same seed and model). The file is appended to,
 * or cut at a row boundary: never rewritten under another name. */

/* The model as the run row names it. */
static void log_model_text(const GPTConfig* c, char* out, size_t cap) {
    snprintf(out, cap, "L%d H%d KV%d C%d V%d maxT %d %s %s", c->num_layers, c->num_heads,
             c->num_kv_heads, c->channels, c->vocab_size, c->max_seq_len,
             c->pos_kind == POS_ROPE ? "rope" : "learned",
             c->block_kind == BLOCK_PARALLEL ? "parallel" : "sequential");
}

/* What names the log in messages: "--log-json PATH", or the run folder's default log. */
static void log_flag_text(const Options* o, char* out, size_t cap) {
    if (o->log_json_is_default) snprintf(out, cap, "the run folder's log %s", o->log_json);
    else snprintf(out, cap, "--log-json %s", o->log_json);
}

/* Whether the run may write into the existing file at the log's path: 0 when it is missing,
 * empty, a seedgpt log, and on resume (resuming) the log of this run (seed, cfg), else the exit
 * status, with the one line said. Reads the first line only. */
static int check_log_file(const Options* o, const GPTConfig* cfg, int resuming) {
    char flag[4300], line[4096];
    log_flag_text(o, flag, sizeof(flag));
    const char* kind;
    FILE* f = fopen_regular(o->log_json, &kind);
    if (f == NULL && kind != NULL) {
        fprintf(stderr, "seedgpt: %s is %s; expected a file path\n", flag, kind);
        return EXIT_BAD_INPUT;
    }
    if (f == NULL) return 0;   /* missing: the run creates it; unreadable: open_log says why */
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    if (n == 0) return 0;
    char* nl = memchr(line, '\n', n);
    if (nl != NULL) *nl = '\0';
    if (strncmp(line, "{\"type\":\"run\",", 14) == 0) {
        if (!resuming) return 0;   /* a fresh run starts the log anew */
        char want[160];
        log_model_text(cfg, want, sizeof(want));
        const char* seed = strstr(line, "\"seed\":");
        const char* model = strstr(line, "\"model\":\"");
        size_t wl = strlen(want);
        if (seed != NULL && model != NULL && strtoull(seed + 7, NULL, 10) == o->seed &&
            strncmp(model + 9, want, wl) == 0 && model[9 + wl] == '"')
            return 0;
        fprintf(stderr, "seedgpt: %s is the log of another run (its first row: %.160s), not of "
                "this one (seed %llu, model %s): give --log-json another path\n", flag, line,
                (unsigned long long)o->seed, want);
        return EXIT_BAD_INPUT;
    }
    if (strncmp(line, "{\"type\":\"train\",\"step\":", 23) == 0 ||
        strncmp(line, "{\"type\":\"eval\",\"step\":", 22) == 0)
        return 0;   /* a log of a seedgpt from before the run row */
    fprintf(stderr, "seedgpt: %s exists and is not a seedgpt log (its first line is not a "
            "{\"type\":\"run\",...} row): the run would write over it; give --log-json another "
            "path\n", flag);
    return EXIT_BAD_INPUT;
}

/* After each row (of step `step`; -1: the run row): the row goes out now, and the first failed
 * write (a full disk) is said in one line; the log is then closed, and main's loop stops after
 * the step, saves the state and ends with EXIT_WRITE_FAILED. The log then ends before that row
 * (a torn row is cut when the run resumes), and the resumed run logs from its next step on. */
static void log_row_done(Run* r, int step) {
    FILE* f = r->jsonf;
    if (fflush(f) == 0 && !ferror(f)) return;
    r->log_errno = errno ? errno : EIO;
    char flag[4300], row[48] = "its first row";
    log_flag_text(r->o, flag, sizeof(flag));
    if (step >= 0) snprintf(row, sizeof(row), "the row of step %d", step);
    fprintf(stderr, "seedgpt: %s: writing %s failed (%s): the run stops after this step%s%s%s; "
            "the log lacks that row\n", flag, row, strerror(r->log_errno),
            r->o->out_dir ? " and saves its state in " : "", r->o->out_dir ? r->o->out_dir : "",
            r->o->out_dir ? "" : " (no --out: no state to save)");
    fclose(f);   /* its error is the one just said */
    r->jsonf = NULL;
}

/* SEEDGPT_FAULT=log_full:N (test hook): from step N on, the log's writes fail as on a full disk
 * (the descriptor becomes /dev/full's), through the same checks as a real full disk. */
static void fault_log_full(Run* r, int step) {
    if (r->jsonf == NULL || !fault_fires("log_full", step)) return;
    fflush(r->jsonf);
    int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        dup2(fd, fileno(r->jsonf));
        close(fd);
    }
}

/* ---- mpirun's stop ------------------------------------------------------------------------ */

/* A SIGTERM or Ctrl-C to mpirun reaches every rank as SIGTERM, and the SIGKILL follows after
 * dist_stop_grace_s() seconds (Open MPI's odls_base_sigkill_timeout, 1 s unless set): in that
 * time the ranks finish their step and rank 0 saves the state and DIR/model.bin. Rank 0 says once
 * when that is too short here: when the slowest step and a save take more than half the grace
 * (a loaded machine is slower), after the run's second step (a save estimated from its bytes at
 * 1 GB/s until one is measured) and after each save. */
static void judge_stop_grace(Run* r) {
    int grace = dist_stop_grace_s();
    if (!r->writer || r->grace_judged || grace < 0 || r->o->out_dir == NULL) return;
    int measured = r->last_save_ms > 0;
    double save_ms = measured ? r->last_save_ms : 16.0 * (double)r->model.num_parameters / 1e6;
    double need_s = (r->slowest_step_ms + save_ms) / 1e3;
    if (2.0 * need_s <= grace) return;
    r->grace_judged = 1;
    printf("note: mpirun gives each rank %d s from its SIGTERM to its SIGKILL "
           "(odls_base_sigkill_timeout); here a step takes up to %.2f s and a save %s%.2f s, so a "
           "SIGTERM or Ctrl-C to mpirun may kill the ranks before the state is saved: start mpirun "
           "with --mca odls_base_sigkill_timeout %d or more (README, \"Multiple processes\")\n",
           grace, r->slowest_step_ms / 1e3, measured ? "" : "about ", save_ms / 1e3,
           (int)ceil(2.0 * need_s) + 1);
    fflush(stdout);
}

static int write_model_file(Run* r, const char* path, char err[256]);

/* DIR/model.bin: the weights of the newest state, as a model file. */
static void save_run_model(Run* r) {
    char mpath[4200], err[256];
    snprintf(mpath, sizeof(mpath), "%s/model.bin", r->o->out_dir);
    gpt_to_host(&r->model);
    begin_tmp(mpath);
    int rc = write_model_file(r, mpath, err);
    end_tmp();
    if (rc != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        exit(rc == MODELFILE_NON_FINITE ? EXIT_NON_FINITE : EXIT_BAD_INPUT);
    }
}

/* --zero 1: a state holds the whole optimizer in the usual format (a resume takes its own shard
 * of it, whatever the shards were). Rank 0's state_save_from asks for the moments tensor by
 * tensor; each tensor's pieces come from the ranks whose shards they lie in, in rank order, into
 * zero_buf; the other ranks serve the same pieces in the same order (zero_serve_moments). */
/* Under bf16 the masters of the operand-only tensors are sharded too (model/zero.h): those
 * come from the ranks as well, for the state (state.c asks for them first) and for every model
 * file rank 0 writes (zero_model_tensor). */
static int zero_gathered(const Run* r, int which, int k) {
    return which > 0 || (r->model.masters_sharded && gpt_param_operand_only[k]);
}

/* This rank's floats from block offset lo of tensor k, of the weights (which 0), m or v (host). */
static const float* zero_own(const Run* r, int which, int k, size_t lo) {
    const GPT* m = &r->model;
    if (which > 0) return (which == 1 ? m->host_m_memory : m->host_v_memory) + (lo - m->opt_begin);
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->host_params, sizeof(p));
    return p[k] + (lo - r->zero.tensor_off[k] - m->master_first[k]);
}

static const float* zero_moment_tensor(void* ctx, int which, int k, char err[256]) {
    Run* r = ctx;
    const Zero* z = &r->zero;
    size_t a = z->tensor_off[k], e = a + z->tensor_size[k];
    for (int s = 0; s < z->ranks; s++) {
        size_t lo = a > z->bounds[s] ? a : z->bounds[s];
        size_t hi = e < z->bounds[s + 1] ? e : z->bounds[s + 1];
        if (lo >= hi) continue;
        if (s == z->rank) memcpy(r->zero_buf + (lo - a), zero_own(r, which, k, lo), (hi - lo) * sizeof(float));
        else dist_recv_floats(r->zero_buf + (lo - a), hi - lo, s);
    }
    (void)err;
    return r->zero_buf;
}

/* The model file's source (model/modelfile.h): tensor k of the weights, gathered. */
static const float* zero_model_tensor(void* ctx, int k, char err[256]) {
    return zero_moment_tensor(ctx, 0, k, err);
}

/* Every rank but 0 while rank 0 gathers tensor k of array which: this rank's piece of it. */
static void zero_serve_tensor(Run* r, int which, int k) {
    const Zero* z = &r->zero;
    size_t a = z->tensor_off[k], e = a + z->tensor_size[k];
    size_t lo = a > z->bounds[z->rank] ? a : z->bounds[z->rank];
    size_t hi = e < z->bounds[z->rank + 1] ? e : z->bounds[z->rank + 1];
    if (lo < hi) dist_send_floats(zero_own(r, which, k, lo), hi - lo, 0);
}

/* Every rank but 0 while rank 0 writes a model file with sharded masters: the pieces of the
 * sharded weights, in the order zero_model_tensor receives them. */
static void zero_serve_model(Run* r) {
    if (!r->model.masters_sharded) return;
    gpt_to_host(&r->model);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        if (zero_gathered(r, 0, k)) zero_serve_tensor(r, 0, k);
}

/* Every rank but 0 while rank 0 saves a state under --zero 1 (save_state): its pieces of the
 * sharded masters and of every moment tensor, in the order zero_moment_tensor receives them,
 * then those of DIR/model.bin. */
static void zero_serve_moments(Run* r) {
    gpt_to_host(&r->model);
    for (int which = 0; which <= 2; which++)
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
            if (zero_gathered(r, which, k)) zero_serve_tensor(r, which, k);
    zero_serve_model(r);
}

/* Writes the model's weights to path (the host copy: gpt_to_host first); under sharded masters
 * their pieces gathered from the ranks, which serve them (zero_serve_model). */
static int write_model_file(Run* r, const char* path, char err[256]) {
    if (!r->model.masters_sharded) return modelfile_save(&r->model, path, err);
    const float* tensors[NUM_PARAMETER_TENSORS];
    memcpy(tensors, &r->model.host_params, sizeof(tensors));
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        if (zero_gathered(r, 0, k)) tensors[k] = NULL;
    ModelTensorSource src = {zero_model_tensor, r};
    return modelfile_write_from(&r->model.config, tensors, &src, path, err);
}

/* --zero 1, every rank after its shard's update (fp32 1) or after the weights were made or
 * loaded (fp32 0): the weights every rank reads. Without sharded masters the fp32 shards are
 * all-gathered and the operand copy rounded from them. With them (bf16) the tensors read in fp32
 * (wte, wpe, LayerNorms, biases) are all-gathered in fp32 and rounded on every rank; of the
 * operand-only tensors each owner rounds its shard of the masters and the copy's pieces are
 * all-gathered (2 bytes a float). Rounding is element-wise, so the copy has plain data
 * parallelism's bits. */
static void zero_share_weights(Run* r, int fp32) {
    const Zero* z = &r->zero;
    GPT* m = &r->model;
    if (!m->masters_sharded) {
        if (fp32) dist_allgather_floats(m->params_memory, z->bounds);
        gpt_round_weights(m);   /* the operand copy, where there is one */
        return;
    }
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->params, sizeof(p));
    size_t tb[z->ranks + 1];   /* a tensor's shards, in its own elements */
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            if (gpt_param_operand_only[k] != pass || (pass == 0 && !fp32)) continue;
            size_t a = z->tensor_off[k], e = a + z->tensor_size[k];
            for (int s = 0; s <= z->ranks; s++)
                tb[s] = (z->bounds[s] < a ? a : z->bounds[s] > e ? e : z->bounds[s]) - a;
            if (pass == 0) dist_allgather_floats(p[k], tb);
            else dist_allgather_elems(gpt_wop_at(m, k, 0), tb, dtype_bytes(m->act_dtype));
        }
        if (pass == 0) gpt_round_weights(m);   /* rounds what this rank holds */
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
    LoaderState ls = loader_get_state(&r->loader);
    info.loader.epoch = ls.epoch;
    info.loader.pos = ls.pos;
    info.loader.shuffle_seed = ls.shuffle_seed;
    info.loader.num_windows = ls.num_windows;
    info.loader.shuffle = ls.shuffle;
    info.batch = r->loader.B;
    info.seq = r->loader.T;
    info.bad_consecutive = r->bad_consecutive;
    info.bad_total = r->bad_total;
    info.loss_scale = r->loss_scale;
    info.scale_good = r->scale_good;
    info.ranks = (uint32_t)world;
    info.context_parallel = (uint32_t)cpn;
    format_state_options(o, dp, info.options, sizeof(info.options));
    double t0 = now_ms();
    gpt_to_host(&r->model);
    int rc = -1;
    StateMomentSource shards = {zero_moment_tensor, r};
    if (state_path(path, sizeof(path), o->out_dir, info.step) == 0) {
        begin_tmp(path);
        rc = state_save_from(path, &r->model, &info, r->zero.ranks > 0 ? &shards : NULL, err);
        end_tmp();
    } else if (r->zero.ranks > 0) {   /* the other ranks serve the moments all the same */
        for (int which = 0; which <= 2; which++)
            for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
                if (zero_gathered(r, which, k)) zero_moment_tensor(r, which, k, err);
    }
    if (rc != 0) {
        fprintf(stderr, "seedgpt: cannot save the training state: %s\n",
                path[0] ? err : "--out path too long");
        exit(rc == STATE_NON_FINITE ? EXIT_NON_FINITE : EXIT_BAD_INPUT);
    }
    fault_kill_point("model_before", -1);
    save_run_model(r);
    fault_kill_point("model_saved", -1);
    state_prune(o->out_dir, o->keep > 0 ? o->keep : INT32_MAX, info.step);   /* keep 0: all */
    r->last_saved = done;
    r->last_save_ms = now_ms() - t0;
    printf("saved %s\n", path);
    fflush(stdout);
    judge_stop_grace(r);
}

/* ---- set-up ------------------------------------------------------------------------------- */

/* --resume: the newest state of cmd's folder that loads (its header and options in *resumed, its
 * path in state_file[cap]), and o = its options under the command line's. 0, or the exit
 * status. */
static int resume_options(Options* o, const Options* cmd, const char* raw[NUM_FLAGS], int writer,
                          StateInfo* resumed, char* state_file, size_t cap) {
    if (cmd->init_path != NULL) {
        fprintf(stderr, "seedgpt: --init %s and --resume %s: the weights come from the state; "
                "drop --init\n", cmd->init_path, cmd->resume_dir);
        return EXIT_BAD_INPUT;
    }
    pick_state(cmd->resume_dir, state_file, cap, resumed);
    /* the layout: ranks and context parallelism (the command line's, else the state's) */
    int N = cmd->context_parallel ? cmd->context_parallel : (int)resumed->context_parallel;
    if (resumed->ranks != (uint32_t)world || resumed->context_parallel != (uint32_t)N) {
        /* every rank finds it; rank 0 says it */
        if (writer && resumed->context_parallel == 1 && N == 1)
            fprintf(stderr, "seedgpt: --resume %s: %s was written by a run of %u process(es); "
                    "this run has %d: resume with the same count (mpirun -np %u)\n",
                    cmd->resume_dir, state_file, resumed->ranks, world, resumed->ranks);
        else if (writer)
            fprintf(stderr, "seedgpt: --resume %s: %s was written by a run of %u rank(s) as %u "
                    "data-parallel x %u context-parallel; this run has %d rank(s) with "
                    "--context-parallel %d: resume with the same layout (mpirun -np %u, "
                    "--context-parallel %u)\n", cmd->resume_dir, state_file, resumed->ranks,
                    resumed->ranks / resumed->context_parallel, resumed->context_parallel, world, N,
                    resumed->ranks, resumed->context_parallel);
        return EXIT_BAD_INPUT;
    }
    static Options st;
    static StateInfo text;   /* options_from_state splits the text in place; st (and o) point in */
    text = *resumed;
    options_from_state(&st, &text, state_file);
    merge_resumed_options(o, cmd, raw, &st, state_file, world / N);
    o->context_parallel = N;   /* not in the option text: the header holds it */
    if (o->out_dir == NULL) o->out_dir = cmd->resume_dir;
    if (o->steps < (int)resumed->step) {
        fprintf(stderr, "seedgpt: --steps %d is below the %llu steps the state %s has done\n",
                o->steps, (unsigned long long)resumed->step, state_file);
        return EXIT_BAD_INPUT;
    }
    if (st.steps != o->steps && strcmp(o->lr_schedule, "constant") != 0)
        printf("note: the %s schedule now spans %d steps (the state's run planned %d): the "
               "learning rate from step %llu on follows the new span\n", o->lr_schedule,
               o->steps, st.steps, (unsigned long long)resumed->step);
    /* another --train: said once the loader has taken the state's position (load_weights), or
     * refused there when the new split's window count differs */
    if (st.train_path != NULL && o->train_path != NULL && strcmp(st.train_path, o->train_path) != 0)
        o->resumed_train_path = st.train_path;
    return 0;
}

/* OpenMP's and OpenBLAS's threads: --threads, else every core, shared out among the ranks of one
 * machine unless OMP_NUM_THREADS says otherwise. Returns the count. */
static int set_threads(const Options* o) {
    if (o->threads > 0) omp_set_num_threads(o->threads);
    else if (dist_local_size() > 1 && getenv("OMP_NUM_THREADS") == NULL)   /* ranks share the cores */
        omp_set_num_threads(omp_get_num_procs() > dist_local_size()
                            ? omp_get_num_procs() / dist_local_size() : 1);
    return omp_get_max_threads();
}

/* A fresh model's configuration from the flags; NULL, or what is wrong with it. */
static const char* config_from_flags(const Options* o, int tokenizer_vocab, GPTConfig* cfg) {
    cfg->max_seq_len = o->seq_len;
    cfg->vocab_size = o->vocab ? o->vocab : tokenizer_vocab;
    cfg->padded_vocab_size = gpt_pad_vocab(cfg->vocab_size);
    cfg->num_layers = o->layers;
    cfg->num_heads = o->heads;
    cfg->num_kv_heads = o->kv_heads ? o->kv_heads : o->heads;
    cfg->channels = o->embd;
    cfg->pos_kind = o->pos_rope ? POS_ROPE : POS_LEARNED;
    cfg->rope_base = o->pos_rope ? o->rope_base : 0;
    cfg->rope_layout = o->pos_rope ? o->rope_layout : 0;
    cfg->block_kind = o->block_parallel ? BLOCK_PARALLEL : BLOCK_SEQUENTIAL;
    return gpt_config_problem(cfg);
}

/* The model's configuration into r->cfg: the resumed state's (resumed != NULL), the --init
 * file's, or the flags'. Refused when its vocabulary is smaller than the tokenizer's or its
 * weights, gradients and AdamW moments would not fit in this machine's memory. 0, or the exit
 * status. */
static int model_config(Run* r, const StateInfo* resumed) {
    const Options* o = r->o;
    GPTConfig* cfg = &r->cfg;
    char err[256];
    if (resumed != NULL) {
        *cfg = resumed->config;
    } else if (o->init_path != NULL) {
        if (modelfile_read_config(o->init_path, cfg, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
        if (o->vocab != 0 && o->vocab != cfg->vocab_size) {
            fprintf(stderr, "seedgpt: --vocab %d contradicts %s (vocab %d)\n", o->vocab,
                    o->init_path, cfg->vocab_size);
            return EXIT_BAD_INPUT;
        }
    } else {
        const char* problem = config_from_flags(o, r->tok.vocab_size, cfg);
        if (problem != NULL) {
            fprintf(stderr, "seedgpt: model flags: %s\n", problem);
            return EXIT_BAD_INPUT;
        }
    }
    if (cfg->vocab_size < r->tok.vocab_size) {
        fprintf(stderr, "seedgpt: model vocab %d is smaller than the %s tokenizer's %d\n",
                cfg->vocab_size, tokenizer_name(&r->tok), r->tok.vocab_size);
        return EXIT_BAD_INPUT;
    }
    /* weights, gradients and AdamW's two moments must fit in memory: refuse, rather than die in
     * the allocator (or in the kernel's OOM killer) */
    size_t sizes[NUM_PARAMETER_TENSORS];
    double P = 0;
    gpt_param_sizes(cfg, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += (double)sizes[k];
    double need = 16.0 * P, have = (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
    if (have > 0 && need > have) {
        fprintf(stderr, "seedgpt: model (L%d C%d V%d maxT %d) has %.3g parameters: weights, "
                "gradients and AdamW moments need %.1f GiB, this machine has %.1f GiB\n",
                cfg->num_layers, cfg->channels, cfg->vocab_size, cfg->max_seq_len, P,
                need / 1073741824.0, have / 1073741824.0);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* The step's shape: B x T per micro-batch (T = --seq, else the model's context) and A
 * micro-batches per rank, from --total-batch. 0, or the exit status. */
static int batch_shape(Run* r) {
    const Options* o = r->o;
    int B = o->batch, T = o->seq ? o->seq : r->cfg.max_seq_len;
    if (T > r->cfg.max_seq_len) {
        fprintf(stderr, "seedgpt: --seq %d exceeds the model's maximum context %d\n", T,
                r->cfg.max_seq_len);
        return EXIT_BAD_INPUT;
    }
    if (cpn > 1 && T % (2 * cpn) != 0) {
        if (dist_rank() == 0)   /* every rank finds it; rank 0 says it */
            fprintf(stderr, "seedgpt: --context-parallel %d: the sequence length %d (--seq, else "
                    "--seq-len) must be a multiple of 2 x %d = %d: each rank holds 2 of %d equal "
                    "chunks\n", cpn, T, cpn, 2 * cpn, 2 * cpn);
        return EXIT_BAD_INPUT;
    }
    long tokens_per_micro = (long)dp * B * T;   /* one micro-batch of every data-parallel rank */
    if (o->total_batch != 0 && o->total_batch % tokens_per_micro != 0) {
        if (dp > 1)
            fprintf(stderr, "seedgpt: --total-batch %ld: expected a multiple of %sranks x batch x seq "
                    "= %d x %d x %d = %ld tokens\n", o->total_batch, cpn > 1 ? "data-parallel " : "",
                    dp, B, T, tokens_per_micro);
        else
            fprintf(stderr, "seedgpt: --total-batch %ld: expected a multiple of batch x seq = %d x "
                    "%d = %ld tokens\n", o->total_batch, B, T, tokens_per_micro);
        return EXIT_BAD_INPUT;
    }
    r->B = B;
    r->T = T;
    r->A = o->total_batch ? (int)(o->total_batch / tokens_per_micro) : 1;
    return 0;
}

/* ---- memory planning ---------------------------------------------------------------------- */

static double mib(size_t bytes) { return bytes / 1048576.0; }

/* The rows of plan_rows for this run's processes, so that every rank makes the same choice:
 * without ZeRO rank 0's (the one that samples); under ZeRO-1 (zero) each policy's row of the rank
 * with the largest peak. n, or -1 with err. */
/* --zero 1: does rank 0 gather tensors to save (a state with DIR/model.bin, or under sharded
 * masters a --save model file too)? It then holds zero_buf (the plan counts it). */
static int zero_saves(const Options* o, const Backend* be) {
    return o->out_dir != NULL || (o->save_path != NULL && be->act_dtype != DT_FP32);
}

static int run_plan_rows(const GPTConfig* cfg, int B, int T, const Backend* be, const Options* o,
                         int zero, PlanRow rows[PLAN_MAX_ROWS], char err[256]) {
    size_t sampler = o->sample_every > 0 ? sampler_bytes(cfg) : 0;
    if (!zero)
        return plan_rows(cfg, B, T, be, omp_get_max_threads(), &o->policy, sampler, NULL, rows, err);
    int n = -1;
    for (int rk = 0; rk < world; rk++) {
        PlanShard sh = {world, rk, zero_saves(o, be)};
        PlanRow part[PLAN_MAX_ROWS];
        int k = plan_rows(cfg, B, T, be, omp_get_max_threads(), &o->policy, rk == 0 ? sampler : 0,
                          &sh, part, err);
        if (k < 0) return -1;
        for (int i = 0; i < k; i++)
            if (rk == 0 || part[i].peak > rows[i].peak) rows[i] = part[i];
        n = k;
    }
    return n;
}

/* --memory-budget: the policy whose planned peak fits with the fewest recomputed FLOPs, said in
 * one line with the runner-up; with an explicit --recompute (explicit_policy), that policy must
 * fit, judged by its own row (every and selective: plan_rows plans it when it is none of the
 * listed policies). o->policy is set to the choice. Sizes are said in MiB and in bytes: a peak a
 * few KiB over the budget reads the same as the budget in MiB. 0, or the exit status. */
static int apply_memory_budget(const GPTConfig* cfg, int B, int T, Options* o, int explicit_policy,
                               int explicit_zero, int writer) {
    if (o->memory_budget <= 0) return 0;
    if (cpn > 1) {
        fprintf(stderr, "seedgpt: --memory-budget plans one process's memory; with "
                "--context-parallel %d it cannot choose yet: give --recompute instead\n", cpn);
        return EXIT_BAD_INPUT;
    }
    const Backend* be = backend_lookup(o->device, o->precision);
    static PlanRow rows[PLAN_MAX_ROWS], zrows[PLAN_MAX_ROWS];
    char err[256], name[32], name2[32];
    int n = run_plan_rows(cfg, B, T, be, o, o->zero, rows, err);
    if (n < 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    double budget = o->memory_budget;
    int second, best = plan_choose(rows, n, budget, &second);
    /* the lever of several ranks (unless --zero is given): ZeRO-1, when it lets a
     * policy with fewer recomputed FLOPs fit, or lets one fit at all (its bits are plain data
     * parallelism's, so it costs no precision) */
    /* (not under bf16 with --init or --sample-every, which need the masters whole) */
    int zero_fits = be->act_dtype == DT_FP32 || (o->init_path == NULL && o->sample_every == 0);
    if (!o->zero && !explicit_zero && world > 1 && zero_fits) {
        int nz = run_plan_rows(cfg, B, T, be, o, 1, zrows, err);
        if (nz < 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
        int zsecond, zbest = plan_choose(zrows, nz, budget, &zsecond);
        int own = explicit_policy ? plan_find(rows, n, &o->policy) : -1;
        int zown = explicit_policy ? plan_find(zrows, nz, &o->policy) : -1;
        int take = explicit_policy
                       ? own >= 0 && zown >= 0 && (double)rows[own].peak > budget &&
                             (double)zrows[zown].peak <= budget
                       : zbest >= 0 && (best < 0 || zrows[zbest].plan.recompute_flops <
                                                        rows[best].plan.recompute_flops);
        if (take) {
            if (writer)
                printf("memory budget %.1f MiB: --zero 1, AdamW's moments sharded over the %d "
                       "ranks (without it %s)\n", budget / 1048576.0, world,
                       explicit_policy ? "this --recompute does not fit"
                       : best < 0      ? "no recompute policy fits"
                                       : "a policy that recomputes more would be needed");
            o->zero = 1;
            memcpy(rows, zrows, sizeof(rows));
            n = nz;
            best = zbest;
            second = zsecond;
        }
    }
    if (explicit_policy) {
        int own = plan_find(rows, n, &o->policy);
        if (own < 0) {   /* plan_rows plans its extra policy: never here */
            fprintf(stderr, "seedgpt: --memory-budget: --recompute %s has no planned row\n",
                    recompute_name(&o->policy, name));
            return EXIT_BAD_INPUT;
        }
        size_t peak = rows[own].peak;
        if ((double)peak <= budget) return 0;
        /* best fits and own does not, so best is another policy */
        fprintf(stderr, "seedgpt: --recompute %s plans a peak of %.1f MiB (%zu B), over "
                "--memory-budget %.1f MiB (%.0f B) by %.0f B%s%s%s\n",
                recompute_name(&o->policy, name), mib(peak), peak, budget / 1048576.0, budget,
                (double)peak - budget, best >= 0 ? " (--recompute " : "",
                best >= 0 ? recompute_name(&rows[best].policy, name2) : "",
                best >= 0 ? " fits; drop --recompute to let the budget choose)"
                          : " (no recompute policy fits)");
        return EXIT_BAD_INPUT;
    }
    if (best < 0) {
        int small = 0;
        for (int i = 1; i < n; i++) if (rows[i].peak < rows[small].peak) small = i;
        size_t peak = rows[small].peak;
        fprintf(stderr, "seedgpt: --memory-budget %.1f MiB (%.0f B): no recompute policy fits; the "
                "smallest planned peak is %.1f MiB (%zu B, %.0f B over; --recompute %s): lower "
                "--batch (%d) or --seq (%d), or raise the budget\n", budget / 1048576.0, budget,
                mib(peak), peak, (double)peak - budget, recompute_name(&rows[small].policy, name),
                B, T);
        return EXIT_BAD_INPUT;
    }
    o->policy = rows[best].policy;
    if (writer) {
        printf("memory budget %.1f MiB: --recompute %s, planned peak %.1f MiB (%zu B), recomputing "
               "%.1f%% of a step's FLOPs", budget / 1048576.0,
               recompute_name(&rows[best].policy, name), mib(rows[best].peak), rows[best].peak,
               100.0 * rows[best].plan.recompute_flops / rows[best].plan.step_flops);
        if (second >= 0)
            printf("; runner-up %s, %.1f MiB (%zu B), %.1f%%",
                   recompute_name(&rows[second].policy, name2), mib(rows[second].peak),
                   rows[second].peak,
                   100.0 * rows[second].plan.recompute_flops / rows[second].plan.step_flops);
        printf("\n");
    }
    return 0;
}

/* ---- the files the run writes ------------------------------------------------------------ */

/* One rule for every file the run writes (the JSON log, --save, the states, DIR/model.bin, the
 * lock, and the .tmp each durable write goes through): it is none of the run's inputs (compared by
 * device and inode: a shard, --init, the resumed state, a tokenizer file), no two of them are one
 * file, and where it exists it is a regular file. Rank 0 checks all of it before it opens
 * anything for writing; a refusal is one line and EXIT_BAD_INPUT. */

typedef struct {
    dev_t dev;
    ino_t ino;
    const char* what;    /* "the training shard", "--init's model file", ... */
    char* path;
} InputFile;

typedef struct {
    InputFile* v;
    int n, cap;
} InputList;

static void add_input(InputList* in, const char* what, const char* path) {
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) return;
    if (in->n == in->cap) {
        int cap = in->cap ? 2 * in->cap : 16;
        InputFile* v = realloc(in->v, (size_t)cap * sizeof(InputFile));
        if (v == NULL) return;   /* out of memory: fewer comparisons, never a wrong refusal */
        in->v = v;
        in->cap = cap;
    }
    char* copy = strdup(path);
    if (copy == NULL) return;
    in->v[in->n++] = (InputFile){st.st_dev, st.st_ino, what, copy};
}

static void free_inputs(InputList* in) {
    for (int i = 0; i < in->n; i++) free(in->v[i].path);
    free(in->v);
}

/* The input that path is (same device and inode), or NULL. */
static const InputFile* input_at(const InputList* in, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    for (int i = 0; i < in->n; i++)
        if (in->v[i].dev == st.st_dev && in->v[i].ino == st.st_ino) return &in->v[i];
    return NULL;
}

/* The run's inputs: the shards of --train and --val (the loaders are open), --init, the resumed
 * state, and under --tokenizer gpt2 the files of its folder. */
static void collect_inputs(const Run* r, const char* state_file, InputList* in) {
    const Options* o = r->o;
    for (int s = 0; s < r->loader.num_shards; s++)
        add_input(in, "the training shard", r->loader.paths[s]);
    if (r->val_open)
        for (int s = 0; s < r->val.num_shards; s++)
            add_input(in, "the validation shard", r->val.paths[s]);
    add_input(in, "--init's model file", o->init_path);
    add_input(in, "the HellaSwag file", o->hellaswag_path);
    if (state_file != NULL && state_file[0] != '\0') add_input(in, "the resumed state", state_file);
    if (!strcmp(o->tokenizer, "gpt2")) {
        const char* env = getenv("SEEDGPT_BPE_DIR");
        const char* dir = o->bpe_dir ? o->bpe_dir : env && *env ? env : TOKENIZER_GPT2_DEFAULT_DIR;
        static const char* const names[] = {"encoder.json", "vocab.json", "vocab.bpe", "merges.txt"};
        char path[4200];
        for (int i = 0; i < 4; i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
            add_input(in, "the tokenizer file", path);
        }
    }
}

/* path as a file the run writes, named by `what` in the refusal: where it exists it must be a
 * regular file and none of the inputs. 0, or the exit status with the line said. */
static int check_output(const InputList* in, const char* what, const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;   /* the run creates it (or says why it cannot) */
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "seedgpt: %s %s is %s; expected a file path\n", what, path,
                file_kind(st.st_mode));
        return EXIT_BAD_INPUT;
    }
    const InputFile* x = input_at(in, path);
    if (x != NULL) {
        fprintf(stderr, "seedgpt: %s %s is %s %s, an input of this run: the run would write over "
                "it; choose another path\n", what, path, x->what, x->path);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* The folder part of path ("." for a bare name) into dir[cap], and the name after it. */
static const char* split_path(const char* path, char* dir, size_t cap) {
    const char* slash = strrchr(path, '/');
    if (slash == NULL) { snprintf(dir, cap, "."); return path; }
    snprintf(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash + 1;
}

/* Whether paths a and b name one file: the same inode where both exist, else the same name in the
 * same folder. */
static int same_file(const char* a, const char* b) {
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb) return 0;
    char da[4200], db[4200];
    const char* na = split_path(a, da, sizeof(da));
    const char* nb = split_path(b, db, sizeof(db));
    return strcmp(na, nb) == 0 && stat(da, &sa) == 0 && stat(db, &sb) == 0 &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* A name the run folder's own files take: state_*.bin, their .tmp, model.bin(.tmp), .lock. */
static int run_folder_name(const char* name) {
    size_t n = strlen(name);
    if (!strcmp(name, ".lock") || !strcmp(name, "model.bin") || !strcmp(name, "model.bin.tmp"))
        return 1;
    return strncmp(name, "state_", 6) == 0 &&
           ((n > 10 && !strcmp(name + n - 4, ".bin")) || (n > 14 && !strcmp(name + n - 8, ".bin.tmp")));
}

/* Whether path is inside out_dir under one of the run folder's own names. */
static int in_run_folder(const char* path, const char* out_dir) {
    char dir[4200];
    const char* name = split_path(path, dir, sizeof(dir));
    struct stat sa, sb;
    return run_folder_name(name) && stat(dir, &sa) == 0 && stat(out_dir, &sb) == 0 &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Every file the run will write, against its inputs and one another (rank 0, before the run
 * folder is created or locked). state_file: the resumed state, or NULL. 0, or the exit status. */
static int check_outputs(const Run* r, const char* state_file) {
    const Options* o = r->o;
    InputList in = {NULL, 0, 0};
    collect_inputs(r, state_file, &in);
    char tmp[4200], path[4400], flag[4300];
    int rc = 0;
    if (o->log_json != NULL) {
        log_flag_text(o, flag, sizeof(flag));
        const char* what = o->log_json_is_default ? "the run folder's log" : "--log-json";
        rc = check_output(&in, what, o->log_json);
        if (rc == 0) rc = check_log_file(o, &r->cfg, o->resume_dir != NULL);
        if (rc == 0 && o->save_path != NULL &&
            (same_file(o->log_json, o->save_path) ||
             (tmp_path_of(tmp, sizeof(tmp), o->save_path) == 0 && same_file(o->log_json, tmp)))) {
            fprintf(stderr, "seedgpt: %s and --save %s name one file: give them two paths\n", flag,
                    o->save_path);
            rc = EXIT_BAD_INPUT;
        }
        if (rc == 0 && o->out_dir != NULL && in_run_folder(o->log_json, o->out_dir)) {
            fprintf(stderr, "seedgpt: %s takes a name of the run folder %s's own files (states, "
                    "model.bin, .lock): give --log-json another path\n", flag, o->out_dir);
            rc = EXIT_BAD_INPUT;
        }
    }
    if (rc == 0 && o->save_path != NULL) {
        rc = check_output(&in, "--save", o->save_path);
        if (rc == 0 && tmp_path_of(tmp, sizeof(tmp), o->save_path) == 0)
            rc = check_output(&in, "--save's temporary file", tmp);
        if (rc == 0 && o->out_dir != NULL && in_run_folder(o->save_path, o->out_dir) &&
            strcmp(split_path(o->save_path, tmp, sizeof(tmp)), "model.bin") != 0) {
            fprintf(stderr, "seedgpt: --save %s takes a name of the run folder %s's states or lock: "
                    "give --save another path\n", o->save_path, o->out_dir);
            rc = EXIT_BAD_INPUT;
        }
    }
    if (rc == 0 && o->out_dir != NULL) {
        static const char* const fixed[] = {".lock", "model.bin", "model.bin.tmp"};
        for (int i = 0; i < 3 && rc == 0; i++) {
            snprintf(path, sizeof(path), "%s/%s", o->out_dir, fixed[i]);
            rc = check_output(&in, "the run folder's file", path);
        }
        /* the states and the .tmp of their saves; the resumed state is read, never written */
        DIR* d = opendir(o->out_dir);
        struct dirent* e;
        struct stat st, resumed;
        int have_resumed = state_file != NULL && stat(state_file, &resumed) == 0;
        while (rc == 0 && d != NULL && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "state_", 6) != 0 || !run_folder_name(e->d_name)) continue;
            snprintf(path, sizeof(path), "%s/%s", o->out_dir, e->d_name);
            if (have_resumed && stat(path, &st) == 0 && st.st_dev == resumed.st_dev &&
                st.st_ino == resumed.st_ino)
                continue;
            rc = check_output(&in, "the run folder's file", path);
        }
        if (d != NULL) closedir(d);
    }
    free_inputs(&in);
    return rc;
}

/* Removes the .tmp files an interrupted save left in the run folder (the lock is held: no other
 * run is writing them); they are never read. Says what it removed. */
static void remove_leftover_tmp(const char* out_dir) {
    DIR* d = opendir(out_dir);
    if (d == NULL) return;
    struct dirent* e;
    char path[4400];
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".tmp") != 0 || !run_folder_name(e->d_name)) continue;
        snprintf(path, sizeof(path), "%s/%s", out_dir, e->d_name);
        if (unlink(path) == 0) printf("note: removed %s, left by an interrupted save\n", path);
    }
    closedir(d);
}

/* DIR/.lock, flock'ed for the rest of the process (the descriptor is never closed; the kernel
 * releases the lock when the process ends, however it ends): two runs never write into one
 * folder. The holder's pid is in the file, for the refusal. 0, or the exit status. */
static int lock_run_folder(const char* out_dir) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/.lock", out_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "seedgpt: --out %s: cannot create the lock file %s: %s\n", out_dir, path,
                strerror(errno));
        return EXIT_BAD_INPUT;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char buf[32] = "";
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        long pid = n > 0 ? atol(buf) : 0;
        if (pid > 0)
            fprintf(stderr, "seedgpt: --out %s is in use by another run (pid %ld): wait for it to "
                    "end, or choose another folder\n", out_dir, pid);
        else
            fprintf(stderr, "seedgpt: --out %s is in use by another run (%s is locked): wait for it "
                    "to end, or choose another folder\n", out_dir, path);
        close(fd);
        return EXIT_BAD_INPUT;
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        fprintf(stderr, "seedgpt: --out %s: cannot write the lock file %s: %s\n", out_dir, path,
                strerror(errno));
        close(fd);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* --save PATH is checked before the first step, as --out is: its .tmp can be created (then
 * removed; check_outputs has made sure that PATH and its .tmp are regular files or absent and no
 * input), so a run never learns only at its end that it cannot save. 0, or the exit status. */
static int check_save_path(const char* save_path) {
    char tmp[4200];
    int fd = tmp_path_of(tmp, sizeof(tmp), save_path) == 0
             ? open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
    if (fd < 0) {
        fprintf(stderr, "seedgpt: --save %s: cannot write there (%s); checked before training\n",
                save_path, strerror(errno));
        return EXIT_BAD_INPUT;
    }
    close(fd);
    unlink(tmp);
    return 0;
}

/* The run folder (--out): created if missing and locked for this run; a fresh run never writes
 * into another run's states (resume_dir: the folder this run resumes from, or NULL). 0, or the
 * exit status. */
static int prepare_run_folder(const char* out_dir, const char* resume_dir) {
    if (make_dirs(out_dir) != 0) {
        fprintf(stderr, "seedgpt: --out %s: cannot create the folder: %s\n", out_dir,
                strerror(errno));
        return EXIT_BAD_INPUT;
    }
    int locked = lock_run_folder(out_dir);
    if (locked != 0) return locked;
    int same_dir = resume_dir != NULL && strcmp(out_dir, resume_dir) == 0;
    uint64_t* steps;
    int n;
    char err[256];
    if (!same_dir && state_list(out_dir, &steps, &n, err) == 0) {
        if (n > 0) {
            fprintf(stderr, "seedgpt: --out %s already holds training states (newest: "
                    "state_%08llu.bin): continue that run with --resume %s, or choose another "
                    "folder\n", out_dir, (unsigned long long)steps[0], out_dir);
            free(steps);
            return EXIT_BAD_INPUT;
        }
        free(steps);
    }
    remove_leftover_tmp(out_dir);
    return 0;
}

/* A loader that cannot open its split, in one line; a resumed run's path taken from the state
 * (from_state: the state) says so, and a relative one that it is read from the working folder. */
static void say_split_error(const char* flag, const char* split, const char* err,
                            const char* from_state) {
    if (from_state == NULL)
        fprintf(stderr, "seedgpt: %s\n", err);
    else
        fprintf(stderr, "seedgpt: %s (%s %s is the state %s's%s; give %s PATH to resume with "
                "another)\n", err, flag, split, from_state,
                split[0] != '/' ? ", a path relative to the folder that run started in" : "", flag);
}

/* The loaders (training: shuffled by the master seed's SHUFFLE stream; validation: in order).
 * 0, or the exit status. */
static int open_data(Run* r) {
    const Options* o = r->o;
    char err[256];
    uint64_t shuffle_seed = philox_stream_seed(o->seed, STREAM_SHUFFLE);
    if (loader_open(&r->loader, o->train_path, r->B, r->T, r->cfg.vocab_size, o->shuffle,
                    shuffle_seed, err) != 0) {
        say_split_error("--train", o->train_path, err, r->train_from_state);
        return EXIT_BAD_INPUT;
    }
    r->loader_open = 1;
    if (r->have_val) {
        if (loader_open(&r->val, o->val_path, r->B, r->T, r->cfg.vocab_size, 0, 0, err) != 0) {
            say_split_error("--val", o->val_path, err, r->val_from_state);
            return EXIT_BAD_INPUT;
        }
        r->val_open = 1;
    }
    if (o->hellaswag_path != NULL) {
        if (cpn > 1) {
            fprintf(stderr, "seedgpt: --hellaswag: not available with --context-parallel (each "
                    "example's rows are scored whole on one rank)\n");
            return EXIT_BAD_INPUT;
        }
        if (hellaswag_open(&r->hs, o->hellaswag_path, err) != 0) {
            fprintf(stderr, "seedgpt: --hellaswag %s\n", err);
            return EXIT_BAD_INPUT;
        }
        r->hs_open = 1;
        int rc = hellaswag_fits(&r->hs, "--hellaswag", o->hellaswag_path, r->cfg.vocab_size, r->B,
                                r->T, "the training sequence (--seq)");
        if (rc != 0) return rc;
    }
    return 0;
}

/* The backend and the model. 0, or the exit status. */
static int build_model(Run* r) {
    const Options* o = r->o;
    char err[256];
    const Backend* be = backend_lookup(o->device, o->precision);
    ContextParallel cp = dist_context_parallel();
    if (o->zero) {   /* ZeRO-1: the moments of this rank's shard only (model/zero.h) */
        if (zero_init(&r->zero, &r->cfg, world, dist_rank(), err) != 0) {
            fprintf(stderr, "seedgpt: --zero 1: %s\n", err);
            return EXIT_BAD_INPUT;
        }
        /* device memory: the shards move through NCCL (dist/dist.h) */
        if (dist_use_backend(be, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
        int rk = dist_rank();
        if (be->act_dtype != DT_FP32 && (o->init_path != NULL || o->sample_every > 0)) {
            /* every rank refuses; rank 0 says it */
            if (r->writer)
                fprintf(stderr, "seedgpt: --zero 1 --precision %s: %s needs the whole fp32 "
                        "weights on one rank, and the masters are sharded; not supported yet\n",
                        be->precision, o->init_path != NULL ? "--init" : "--sample-every");
            return EXIT_BAD_INPUT;
        }
        /* rank 0's buffer for a save before the build, as the plan counts it (model/plan.h) */
        if (r->writer && zero_saves(o, be))
            r->zero_buf = mem_alloc(zero_save_buffer_bytes(&r->cfg));
        if (gpt_build_shard(&r->model, &r->cfg, r->B, r->T, &o->policy, be, r->zero.bounds[rk],
                            r->zero.bounds[rk + 1] - r->zero.bounds[rk], err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
        r->model_built = 1;
        return 0;
    }
    if (dist_use_backend(be, err) != 0 ||
        gpt_build_cp(&r->model, &r->cfg, r->B, r->T, &o->policy, be, &cp, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    r->model_built = 1;
    return 0;
}

/* The weights and where training starts: the resumed state (weights, moments, loader position,
 * the guard's counters; *resumed is read again with them), the --init file, or a fresh
 * initialisation from the master seed (r->start_step: the first step to run); then the run's
 * dropout. 0, or the exit status. */
static int load_weights(Run* r, StateInfo* resumed, const char* state_file) {
    const Options* o = r->o;
    char err[256];
    int fp16 = strcmp(r->model.be->precision, "fp16") == 0;
    r->loss_scale = fp16 ? LOSS_SCALE_START : 0.0f;
    r->scale_good = 0;
    if (resumed != NULL && (resumed->loss_scale != 0.0f) != fp16) {
        /* an fp16 state holds a loss scale no other precision has a use for, and a state of
         * another precision none to continue with: refused, both ways */
        if (fp16)
            fprintf(stderr, "seedgpt: --resume %s: --precision fp16, but %s was written by a run "
                    "in another precision (no loss scale in it): resume it in its precision\n",
                    o->resume_dir, state_file);
        else
            fprintf(stderr, "seedgpt: --resume %s: --precision %s, but %s was written by an fp16 "
                    "run (loss scale %g): resume it with --precision fp16\n", o->resume_dir,
                    r->model.be->precision, state_file, (double)resumed->loss_scale);
        return EXIT_BAD_INPUT;
    }
    if (resumed != NULL) {
        if (state_load(state_file, &r->model, resumed, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
        LoaderState ls;
        memset(&ls, 0, sizeof(ls));
        ls.epoch = resumed->loader.epoch;
        ls.pos = resumed->loader.pos;
        ls.shuffle_seed = resumed->loader.shuffle_seed;
        ls.num_windows = resumed->loader.num_windows;
        ls.shuffle = resumed->loader.shuffle;
        uint64_t shuffle_seed = philox_stream_seed(o->seed, STREAM_SHUFFLE);
        if (ls.shuffle != o->shuffle || ls.shuffle_seed != shuffle_seed) {
            fprintf(stderr, "seedgpt: %s: the loader state (shuffle %d, seed %llu) does not match "
                    "the run's (shuffle %d, seed %llu)\n", state_file, (int)ls.shuffle,
                    (unsigned long long)ls.shuffle_seed, o->shuffle,
                    (unsigned long long)shuffle_seed);
            return EXIT_BAD_INPUT;
        }
        if (loader_set_state(&r->loader, &ls, err) != 0) {
            if (o->resumed_train_path != NULL)
                fprintf(stderr, "seedgpt: --resume %s: --train %s has %zu windows of B=%d, T=%d; "
                        "the state's split %s had %llu: resume with the state's --train, or start "
                        "a new run from its weights (--init %s/model.bin)\n", state_file,
                        o->train_path, loader_num_windows(&r->loader), r->B, r->T,
                        o->resumed_train_path, (unsigned long long)ls.num_windows, o->resume_dir);
            else
                fprintf(stderr, "seedgpt: --resume %s: %s\n", state_file, err);
            return EXIT_BAD_INPUT;
        }
        if (o->resumed_train_path != NULL)
            printf("note: --train %s differs from the state's %s (both %zu windows); continuing at "
                   "epoch %llu, window %llu of the new split\n", o->train_path,
                   o->resumed_train_path, loader_num_windows(&r->loader),
                   (unsigned long long)ls.epoch, (unsigned long long)ls.pos);
        r->start_step = (int)resumed->step;
        printf("resumed from %s: step %d, epoch %llu, window %llu\n", state_file, r->start_step,
               (unsigned long long)resumed->loader.epoch, (unsigned long long)resumed->loader.pos);
        fflush(stdout);
        r->bad_consecutive = resumed->bad_consecutive;
        r->bad_total = resumed->bad_total;
        r->loss_scale = resumed->loss_scale;
        r->scale_good = resumed->scale_good;
        r->last_saved = r->start_step;
    } else if (o->init_path != NULL) {
        if (modelfile_load(&r->model, o->init_path, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
    } else {
        gpt_init_weights(&r->model, o->seed);
    }
    /* sharded masters: each rank rounded its own part of the operand copy; the rest from them */
    if (r->zero.ranks > 0 && r->model.masters_sharded) zero_share_weights(r, 0);
    gpt_set_dropout(&r->model, o->seed, o->embd_dropout, o->attn_dropout, o->resid_dropout);
    gpt_set_drop_path(&r->model, o->drop_path);
    if (o->log_attn_stats && cpn > 1) {
        if (dist_rank() == 0)
            fprintf(stderr, "seedgpt: --log-attn-stats: the attention statistics are not computed "
                    "by --context-parallel %d's ring yet\n", cpn);
        return EXIT_BAD_INPUT;
    }
    if (o->log_attn_stats && gpt_set_attn_stats(&r->model, 1, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* The JSON log (rank 0), which check_log_file has let the run take: a resumed run keeps the rows
 * of the steps before start_step (the later ones are run and logged again, so the log reads as
 * one run) and cuts the file at that row boundary, a torn last row included; a fresh run cuts it
 * at 0. Rows are appended after the cut; a log cut at 0 starts with the run row. 0, or the exit
 * status. */
static int open_log(Run* r, int resuming) {
    const Options* o = r->o;
    char flag[4300];
    if (o->log_json == NULL || !r->writer) return 0;
    log_flag_text(o, flag, sizeof(flag));
    /* O_NONBLOCK: a FIFO put at the path since it was checked must not block the open */
    int fd = open(o->log_json, O_RDWR | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0) {
        fprintf(stderr, "seedgpt: %s: cannot open for writing (%s)\n", flag, strerror(errno));
        return EXIT_BAD_INPUT;
    }
    int fl = fcntl(fd, F_GETFL);
    FILE* f = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fl < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 || (f = fdopen(fd, "r+")) == NULL) {
        fprintf(stderr, "seedgpt: %s is %s; expected a file path\n", flag,
                fstat(fd, &st) == 0 ? file_kind(st.st_mode) : "unreadable");
        close(fd);
        return EXIT_BAD_INPUT;
    }
    off_t keep = 0;   /* the log is kept up to this row boundary */
    if (resuming) {
        char* line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, f)) > 0) {
            if (line[len - 1] != '\n') break;            /* a torn last row */
            const char* at = strstr(line, "\"step\":");
            if (at != NULL && atol(at + 7) >= r->start_step) break;
            keep += len;
        }
        free(line);
    }
    fault_kill_point("log_truncate", -1);
    if (ftruncate(fd, keep) != 0 || fseeko(f, 0, SEEK_END) != 0) {
        fprintf(stderr, "seedgpt: %s: cannot cut the log at byte %lld: %s\n", flag,
                (long long)keep, strerror(errno));
        fclose(f);
        return EXIT_BAD_INPUT;
    }
    r->jsonf = f;
    if (keep == 0) {
        char model[160];
        log_model_text(&r->cfg, model, sizeof(model));
        fprintf(f, "{\"type\":\"run\",\"version\":1,\"seed\":%llu,\"model\":\"%s\"}\n",
                (unsigned long long)o->seed, model);
        log_row_done(r, -1);
    }
    return 0;
}

/* The run's header lines: the model, the batch, the randomness, the recompute policy, memory. */
static void print_run(const Run* r, int threads) {
    const Options* o = r->o;
    const GPTConfig* cfg = &r->cfg;
    int B = r->B, T = r->T, A = r->A;
    GPTMemory mem = gpt_memory(&r->model);
    if (build_left_out()[0] != '\0') printf("build: left out %s\n", build_left_out());
    printf("model: L%d H%d KV%d C%d V%d (padded %d) maxT %d, %zu parameters\n",
           cfg->num_layers, cfg->num_heads, cfg->num_kv_heads, cfg->channels, cfg->vocab_size,
           cfg->padded_vocab_size, cfg->max_seq_len, r->model.num_parameters);
    if (cfg->pos_kind == POS_ROPE || cfg->block_kind == BLOCK_PARALLEL || o->drop_path > 0) {
        printf("model options: positions %s", cfg->pos_kind == POS_ROPE ? "rope" : "learned");
        if (cfg->pos_kind == POS_ROPE)
            printf(" (base %d, %s pairs)", cfg->rope_base, cfg->rope_layout == ROPE_GPTJ ? "gptj" : "neox");
        printf(", %s block, drop-path %g\n",
               cfg->block_kind == BLOCK_PARALLEL ? "parallel" : "sequential", o->drop_path);
    }
    printf("batch %d x %d", B, T);
    if (world > 1 && cpn == 1) printf(" x %d ranks (%s)", world, dist_kind());
    if (cpn > 1)
        printf(" x %d data-parallel x %d context-parallel ranks (%s; %d positions per rank)", dp,
               cpn, dist_kind(), T / cpn);
    if (A > 1) printf(" x %d micro-batches", A);
    if (r->zero.ranks > 0) printf(", ZeRO-1");
    if (A * dp > 1) printf(" (%ld tokens per step)", (long)A * dp * B * T);
    printf(", %d steps, %zu training windows, %d threads, device %s, precision %s\n", o->steps,
           loader_num_windows(&r->loader), threads, r->model.be->name, r->model.be->precision);
    printf("dropout: embd %g attn %g resid %g, seed %llu\n", o->embd_dropout, o->attn_dropout,
           o->resid_dropout, (unsigned long long)o->seed);
    char pname[32], span[96] = "";
    if (o->policy.every > cfg->num_layers)   /* a segment longer than the model: the whole model */
        snprintf(span, sizeof(span), " (K = %d > %d layers: one segment of all %d, as every:%d)",
                 o->policy.every, cfg->num_layers, cfg->num_layers, cfg->num_layers);
    printf("recompute: %s%s%s, value check %s\n", recompute_name(&o->policy, pname), span,
           o->policy.fresh_seeds ? " with FRESH seeds (negative control: gradients will be wrong)" : "",
           o->policy.check == CHECK_OFF ? "off" : o->policy.check == CHECK_WARN ? "warn" : "stop");
    if (r->have_val && (size_t)o->eval_batches > loader_num_windows(&r->val))
        printf("note: --eval-batches %d: the validation split has %zu windows of %d x %d; each "
               "evaluation uses those %zu\n", o->eval_batches, loader_num_windows(&r->val), B, T,
               loader_num_windows(&r->val));
    if (r->model.be->describe != NULL) {
        char line[512];
        r->model.be->describe(line, sizeof(line));
        printf("%s\n", line);
    }
    if (r->zero.ranks > 0)
        printf("ZeRO-1: each of %d ranks keeps AdamW's moments%s of its shard of the %zu-float "
               "block; rank 0's holds %zu floats\n", r->zero.ranks,
               r->model.masters_sharded ? " and the fp32 masters of qkvw, attprojw, fcw, fcprojw"
                                        : "", r->zero.span, r->zero.bounds[1] - r->zero.bounds[0]);
    printf("memory (MiB): params %.1f, grads %.1f, AdamW %.1f", mem.params / 1048576.0,
           mem.grads / 1048576.0, mem.optimizer / 1048576.0);
    if (mem.weights_op > 0) printf(", bf16 weights %.1f", mem.weights_op / 1048576.0);
    printf(", kept activations %.1f (layers %.1f, residual stream %.1f, logits %.1f, final LN "
           "%.1f), recompute scratch %.1f, gradient scratch %.1f\n", mem.activations / 1048576.0,
           mem.layer_acts / 1048576.0, mem.resid / 1048576.0, mem.logits / 1048576.0,
           (mem.activations - mem.layer_acts - mem.resid - mem.logits) / 1048576.0,
           mem.recompute / 1048576.0, mem.scratch / 1048576.0);
    fflush(stdout);
}

/* What the loop needs before step 0: the batch buffers, the FLOP rate MFU is measured against,
 * and the sampler of --sample-every (allocated now: nothing is allocated after step 0). */
static void prepare_loop(Run* r) {
    const Options* o = r->o;
    r->inputs = mem_alloc((size_t)r->B * r->T * sizeof(int));
    r->targets = mem_alloc((size_t)r->B * r->T * sizeof(int));
    if (r->hs_open) hellaswag_buffers_alloc(&r->hb, r->B / HELLASWAG_ENDINGS * HELLASWAG_ENDINGS, r->T);
    /* progress: model FLOPs per step against this machine's (or the given) peak. The peak is
     * one process's (rank 0 measures its own threads' or device's); the step's FLOPs are every
     * rank's, so MFU reads them against the peak of all ranks */
    r->peak_gflops = o->peak_gflops;
    if (r->peak_gflops <= 0 && (o->log_every > 0 || o->profile) && r->writer) {
        char line[512];
        r->peak_gflops = default_peak_gflops(&r->model, omp_get_max_threads(), line, sizeof(line));
        printf("%s\n", line);
    }
    r->all_ranks_gflops = r->peak_gflops * world;
    if (world > 1 && r->peak_gflops > 0 && r->writer)
        printf("MFU reads against the peak of all %d ranks: %d x %.1f = %.1f GFLOP/s (every rank "
               "as rank 0)\n", world, world, r->peak_gflops, r->all_ranks_gflops);
    if (o->profile) {   /* the model's ops, timed from here on (model/profile.h) */
        const ProfileTimer* timer = r->model.be->profile_timer;
        r->model.be = profile_wrap(r->model.be, timer != NULL ? timer : &profile_timer_wall);
    }
    r->step_tokens = (double)r->A * dp * r->B * r->T;   /* over every rank */
    if (cpn > 1) {   /* this rank's share of each window, in the model's layout */
        r->local_inputs = mem_alloc((size_t)r->B * r->T * sizeof(int));
        r->local_targets = mem_alloc((size_t)r->B * r->T * sizeof(int));
    }
    r->step_flops = flops_per_token(&r->model, r->T) * r->step_tokens;
    if (o->sample_every > 0 && r->writer) {
        sampler_init(&r->sampler, &r->model);
        r->have_sampler = 1;
    }
    r->sample_seed = philox_stream_seed(o->seed, STREAM_SAMPLE);
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* One step's numbers, for its log lines. */
typedef struct {
    float loss;    /* mean over the step's positions, every rank's */
    float norm;    /* the global gradient norm, before clipping */
    double lr;
    int finite;    /* 0: loss or norm not finite, the update was skipped */
    float loss_scale;   /* fp16: the scale this step's loss gradient was multiplied by; else 0 */
    int overflow_tensor, overflow_layer;   /* fp16 overflow: gpt_first_nonfinite_grad's answer */
    double ms;
} StepStats;

/* --precision fp16's dynamic loss scaling, after a step's gradient is known: a non-finite
 * gradient halves the scale (not below 1) and restarts the count of good steps; --loss-scale-window
 * good steps in a row double it. Powers of two throughout, so scaling and unscaling are exact
 * and two runs take the same decisions. */
static void loss_scale_update(Run* r, int grad_finite) {
    if (!grad_finite) {
        if (r->loss_scale > 1.0f) r->loss_scale *= 0.5f;
        r->scale_good = 0;
    } else if (++r->scale_good >= (uint32_t)r->o->loss_scale_window) {
        if (r->loss_scale < 0x1p100f) r->loss_scale *= 2.0f;
        r->scale_good = 0;
    }
}

/* Optimizer step `step`: the A micro-batches' forward and backward, the gradients summed over
 * the ranks, clip, AdamW (skipped when the loss or the norm is not finite). 0, or the exit
 * status (an unreadable window; a failed recompute check under --recompute-check stop). */
static int train_step(Run* r, int step, StepStats* s) {
    const Options* o = r->o;
    GPT* model = &r->model;
    int B = r->B, T = r->T, A = r->A;
    /* A micro-batches per data-parallel rank. Rank r's micro-batch a is the loader's window
     * r*A + a positions ahead, global sequences g = (r*A + a)*B .. + B-1 (DESIGN §2); the step
     * then moves the loader R*A windows on. Each position's loss weighs 1/(R*A*B*T), so the sum
     * of the ranks' gradients is the gradient of the global batch's mean loss. Under context
     * parallelism r is the group (R = dp), each rank of it holds T / cpn positions of each window,
     * and their gradients add up to the window's. */
    double t0 = now_ms(), loss_sum = 0.0;
    profile_step_begin();   /* --profile; nothing before profile_wrap */
    if (model->attn_stats_on) gpt_attn_stats_reset(model);
    int first = dist_dp_rank() * A;   /* this rank's first micro-batch in the step */
    float step_scale = r->loss_scale;
    /* test hook: a planted overflow, the step's loss gradient 2^40 times larger still, so that
     * its fp16 operands in the backward's products round to infinity */
    if (r->loss_scale != 0.0f && fault_fires("fp16_overflow", step)) step_scale *= 0x1p40f;
    gpt_zero_grad(model);
    for (int a = 0; a < A; a++) {
        if (loader_peek(&r->loader, (size_t)(first + a), r->inputs, r->targets) != 0) {
            fprintf(stderr, "seedgpt: %s\n", r->loader.err);
            return EXIT_BAD_INPUT;
        }
        /* fp16: the loss scale (a power of two: dloss is the unscaled one's bits, scaled) */
        float dloss = (r->loss_scale != 0.0f ? step_scale : 1.0f) / ((float)B * T * A * dp);
        gpt_set_loss_scale(model, dloss);   /* the classifier's gradient comes with the forward */
        loss_sum += gpt_forward(model, cp_local(model, r->local_inputs, r->inputs, B, T),
                                cp_local(model, r->local_targets, r->targets, B, T), B, T / cpn,
                                (uint32_t)((first + a) * B), (uint32_t)step, 1);
        int mismatches = gpt_backward(model, dloss);
        if (mismatches > 0 && o->policy.check == CHECK_STOP) {
            fprintf(stderr, "seedgpt: stopping at step %d: the recompute check failed in %d "
                    "segment(s), first at layer %d (--recompute-check stop)\n", step, mismatches,
                    model->check_first_layer);
            return EXIT_RECOMPUTE_CHECK;
        }
    }
    loader_advance(&r->loader, (size_t)dp * A);
    /* the hook between backward and clip: gradients and loss summed over the ranks (under
     * --zero 1 each rank gets the sum of its own shard only) */
    Zero* z = &r->zero;
    if (z->ranks > 0) dist_reduce_scatter(model->grads_memory, z->bounds);
    else dist_allreduce_grads(model);
    loss_sum = dist_sum(loss_sum);
    float loss = A * world == 1 ? (float)loss_sum : (float)(loss_sum / (A * world));
    if (fault_fires("nan_loss", step)) loss = NAN;           /* test hook */
    if (fault_fires("nan_grad", step)) model->be->fill(model->grads_memory, 1, NAN);   /* test hook */
    float norm;
    if (z->ranks > 0) {   /* the norm's blocks: each rank its own, then every rank all of them */
        zero_block_partials(z, model);
        dist_allgather_doubles(z->partials, z->block_bounds);
        norm = zero_clip_from_partials(z, model, (float)o->clip);
    } else {
        /* fp16: the gradients unscaled as AdamW reads them, the norm unscaled (exact) */
        norm = gpt_clip_grads_unscaled(model, (float)o->clip,
                                       r->loss_scale != 0.0f ? r->loss_scale : 1.0f);
    }
    double lr = lr_at(o, step);
    /* the guard: a non-finite loss or norm skips the update; the step and the loader have
     * advanced all the same (DESIGN §2) */
    int finite = isfinite(loss) && isfinite(norm);
    s->loss_scale = r->loss_scale;
    /* fp16: an overflow of the scaled gradient (finite loss, non-finite norm) is the loss
     * scale's to fix, not a bad step: the scale halves and the step is skipped; it counts toward
     * --max-bad-steps only once the scale is down to 1 */
    int overflow = r->loss_scale != 0.0f && isfinite(loss) && !isfinite(norm) &&
                   r->loss_scale > 1.0f;
    s->overflow_tensor = overflow ? gpt_first_nonfinite_grad(model, &s->overflow_layer) : -1;
    if (r->loss_scale != 0.0f) loss_scale_update(r, isfinite(norm));
    fault_kill_point("step_mid", step);
    if (finite) {
        /* AdamW's bias correction counts the updates applied, as torch's optimizer does: a
         * skipped step is not one (the state's bad_total makes the count exact on resume) */
        int applied = step + 1 - (int)r->bad_total;
        if (z->ranks > 0) {   /* each rank its shard, then every rank the updated weights */
            zero_adamw_shard(z, model, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                             (float)o->weight_decay, applied);
            zero_share_weights(r, 1);
        } else {
            gpt_adamw(model, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                      (float)o->weight_decay, applied);
        }
        if (fault_fires("nan_weights", step)) model->be->fill(model->params_memory, 1, NAN); /* test hook */
        r->bad_consecutive = 0;
    } else {
        if (!overflow) r->bad_consecutive++;
        r->bad_total++;   /* AdamW's count of applied updates leaves every skipped step out */
    }
    fault_kill_point("step_updated", step);
    profile_step_end();
    s->ms = now_ms() - t0;
    r->total_ms += s->ms;
    r->last_loss = loss;
    s->loss = loss;
    s->norm = norm;
    s->lr = lr;
    s->finite = finite;
    return 0;
}

#ifdef SEEDGPT_TEST_BUILD
/* Test builds: this process's resident set after step 1 and its largest after any later step,
 * said in one stderr line per rank at the end (tests/test_cp.sh: flat within 1%). */
static size_t rss_after_step1, rss_largest_later;
static size_t resident_bytes(void) {
    long pages = 0, resident = 0;
    FILE* f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGE_SIZE);
}
static void track_rss(const Run* r, int step) {
    size_t b = resident_bytes();
    if (step == r->start_step + 1) rss_after_step1 = b;
    else if (step > r->start_step + 1 && b > rss_largest_later) rss_largest_later = b;
}
static void report_rss(int done) {
    if (rss_after_step1 == 0 || rss_largest_later == 0) return;
    fprintf(stderr, "seedgpt-test: rank %d rss after step 1 %zu B, largest after a later step %zu B "
            "(%+.3f%%, %d steps)\n", dist_rank(), rss_after_step1, rss_largest_later,
            100.0 * ((double)rss_largest_later - (double)rss_after_step1) / rss_after_step1, done);
}
#endif

/* The step's lines: a skipped update, the progress line (every --log-every steps and the last),
 * the JSON row. */
static void log_step(Run* r, int step, const StepStats* s) {
    const Options* o = r->o;
    if (!s->finite) {
        char what[96];
        if (!isfinite(s->loss) && !isfinite(s->norm))
            snprintf(what, sizeof(what), "non-finite loss %g and grad norm %g", s->loss, s->norm);
        else if (!isfinite(s->loss))
            snprintf(what, sizeof(what), "non-finite loss %g (grad norm %g)", s->loss, s->norm);
        else
            snprintf(what, sizeof(what), "non-finite grad norm %g (loss %g)", s->norm, s->loss);
        if (s->loss_scale != 0.0f && isfinite(s->loss) && !isfinite(s->norm) && s->loss_scale > 1.0f) {
            /* where the backward first met a non-finite gradient: the overflow's origin */
            char where[96] = "";
            if (s->overflow_tensor >= 0 && s->overflow_layer >= 0)
                snprintf(where, sizeof(where), " (first non-finite gradient in the backward: "
                         "layer %d's %s)", s->overflow_layer, gpt_param_names[s->overflow_tensor]);
            else if (s->overflow_tensor >= 0)
                snprintf(where, sizeof(where), " (first non-finite gradient in the backward: %s)",
                         gpt_param_names[s->overflow_tensor]);
            printf("step %d: fp16 gradient overflow at loss scale %g%s; update skipped, loss scale "
                   "now %g (%llu steps skipped in all)\n", step, (double)s->loss_scale, where,
                   (double)r->loss_scale, (unsigned long long)r->bad_total);
        }
        else
            printf("step %d: %s; update skipped (%u in a row, %llu in all)\n", step, what,
                   r->bad_consecutive, (unsigned long long)r->bad_total);
    }
    if (o->log_every > 0 && (step % o->log_every == 0 || step == o->steps - 1)) {
        char eta[32];
        fmt_duration(eta, sizeof(eta),
                     (o->steps - step - 1) * (r->total_ms / (step + 1 - r->start_step)) / 1e3);
        printf("step %5d/%d | loss %.4f | lr %.3e | norm %.4f | %.0f tok/s | %.1f ms | ",
               step, o->steps, s->loss, s->lr, s->norm, r->step_tokens / (s->ms / 1e3), s->ms);
        if (r->all_ranks_gflops > 0)
            printf("MFU %.1f%% | ", 100.0 * r->step_flops / (s->ms * 1e6) / r->all_ranks_gflops);
        printf("mem %.0f MiB | ETA %s\n", run_peak_bytes(&r->model) / 1048576.0, eta);
        fflush(stdout);
    }
    fault_log_full(r, step);   /* test hook */
    if (r->jsonf != NULL) {
        FILE* f = r->jsonf;
        fprintf(f, "{\"type\":\"train\",\"step\":%d", step);
        json_float(f, "loss", s->loss);
        json_float(f, "grad_norm", s->norm);
        json_float(f, "lr", s->lr);
        fprintf(f, ",\"step_ms\":%.3f,\"peak_bytes\":%zu", s->ms, mem_stats().peak_bytes);
#ifdef SEEDGPT_TEST_BUILD
        /* test builds: the allocations so far (tests/test_cp.sh: constant from step 1 on) */
        fprintf(f, ",\"allocations\":%zu", mem_stats().allocations);
#endif
        if (!r->model.be->host_memory)
            fprintf(f, ",\"device_peak_bytes\":%zu", r->model.be->peak_bytes());
        if (r->model.attn_stats_on) {   /* --log-attn-stats: [max |s|, min LSE, max LSE] a layer */
            fprintf(f, ",\"attn_stats\":[");
            for (int l = 0; l < r->model.config.num_layers; l++) {
                const float* st = r->model.attn_stats + 3 * l;
                fprintf(f, "%s[%.9g,%.9g,%.9g]", l ? "," : "", st[0], st[1], st[2]);
            }
            fprintf(f, "]");
            if (s->loss_scale != 0.0f) {
                /* fp16: how many times each layer's largest score could grow and still be an fp16
                 * value (65504 / max |s|); the scores are accumulated in fp32 here, but q and k
                 * are fp16 operands and a kernel that held scores in fp16 would overflow there */
                fprintf(f, ",\"attn_fp16_headroom\":[");
                for (int l = 0; l < r->model.config.num_layers; l++) {
                    float mx = r->model.attn_stats[3 * l];
                    fprintf(f, "%s%.9g", l ? "," : "", mx > 0.0f ? 65504.0 / mx : 1e300);
                }
                fprintf(f, "]");
            }
        }
        if (s->loss_scale != 0.0f) fprintf(f, ",\"loss_scale\":%.9g", (double)s->loss_scale);
        fprintf(f, "%s}\n", s->finite ? "" : ",\"skipped\":true");
        log_row_done(r, step);
    }
}

/* --max-bad-steps: after that many non-finite steps in a row the run stops, saving nothing
 * more. 0, or the exit status. */
static int check_bad_steps(const Run* r, int step) {
    const Options* o = r->o;
    if (o->max_bad_steps > 0 && r->bad_consecutive >= (uint32_t)o->max_bad_steps) {
        fprintf(stderr, "seedgpt: stopping at step %d: %u consecutive steps with a non-finite "
                "loss or gradient norm (--max-bad-steps %d); nothing more is saved%s%s%s\n",
                step, r->bad_consecutive, o->max_bad_steps,
                o->out_dir ? " (the states already in " : "", o->out_dir ? o->out_dir : "",
                o->out_dir ? " stay)" : "");
        return EXIT_NON_FINITE;
    }
    return 0;
}

/* Between steps: the validation loss (every --eval-every steps and after the last), a sample
 * (every --sample-every), a state (every --save-every; the last step's is written at the end). */
static void after_step(Run* r, int step) {
    const Options* o = r->o;
    int last = step == o->steps - 1;
    if (r->have_val && ((o->eval_every > 0 && (step + 1) % o->eval_every == 0) || last)) {
        float vl = evaluate(&r->model, &r->val, o->eval_batches, r->inputs, r->targets,
                            r->local_inputs, r->local_targets);
        printf("step %5d | val loss %.4f\n", step, vl);
        r->last_val = vl;
        r->last_val_step = step;
        if (r->jsonf != NULL) {
            fprintf(r->jsonf, "{\"type\":\"eval\",\"step\":%d", step);
            json_float(r->jsonf, "val_loss", vl);
            fprintf(r->jsonf, "}\n");
            log_row_done(r, step);
        }
    }
    if (r->hs_open && ((o->hellaswag_every > 0 && (step + 1) % o->hellaswag_every == 0) || last)) {
        HellaswagScore sc = hellaswag_eval(&r->model, &r->hs, &r->hb, dist_dp_rank(), dp, r->writer,
                                           NULL);
        sc.n = (int)dist_sum(sc.n);
        sc.correct = (int)dist_sum(sc.correct);
        sc.correct_norm = (int)dist_sum(sc.correct_norm);
        double acc = (double)sc.correct / sc.n, acc_norm = (double)sc.correct_norm / sc.n;
        if (r->writer) printf("step %5d | hellaswag acc %.4f acc_norm %.4f (%d examples)\n", step, acc,
                              acc_norm, sc.n);
        if (r->jsonf != NULL) {
            fprintf(r->jsonf, "{\"type\":\"hellaswag\",\"step\":%d", step);
            json_float(r->jsonf, "acc", acc);
            json_float(r->jsonf, "acc_norm", acc_norm);
            fprintf(r->jsonf, ",\"n\":%d,\"correct\":%d,\"correct_norm\":%d}\n", sc.n, sc.correct,
                    sc.correct_norm);
            log_row_done(r, step);
        }
    }
    if (r->have_sampler && (step + 1) % o->sample_every == 0) {
        gpt_to_host(&r->model);   /* sampling runs on the host copy of the weights */
        printf("step %5d | sample: ", step);
        generate(&r->sampler, &r->tok, NULL, 0, o->sample_tokens, 1.0, 0, r->sample_seed,
                 (uint32_t)step, stdout);
        printf("\n");
        fflush(stdout);
    }
    if (o->out_dir != NULL && o->save_every > 0 && (step + 1) % o->save_every == 0 && !last) {
        if (r->writer) save_state(r, step + 1);
        else if (r->zero.ranks > 0) zero_serve_moments(r);   /* rank 0 saves the whole optimizer */
        r->last_saved = step + 1;
    }
}

/* ---- the end ------------------------------------------------------------------------------ */

/* The closing line: the steps done, the last losses, the speed and the peak memory. */
static void print_summary(const Run* r, int done, int resuming, double run_start) {
    const Options* o = r->o;
    if (done > r->start_step) {
        double mean_ms = r->total_ms / (done - r->start_step);
        char wall[32];
        fmt_duration(wall, sizeof(wall), (now_ms() - run_start) / 1e3);
        printf("done: %d steps%s, final loss %.4f", done, done < o->steps ? " (stopped early)" : "",
               r->last_loss);
        /* the last evaluation's step when it is not the last step's (a stop between evals) */
        if (!isnan(r->last_val) && r->last_val_step == done - 1) printf(", val loss %.4f", r->last_val);
        else if (!isnan(r->last_val))
            printf(", val loss %.4f at step %d", r->last_val, r->last_val_step);
        printf(", mean %.1f ms/step, %.0f tok/s", mean_ms, r->step_tokens / (mean_ms / 1e3));
        if (r->all_ranks_gflops > 0)
            printf(", MFU %.1f%% of %.1f GFLOP/s", 100.0 * r->step_flops / (mean_ms * 1e6) /
                   r->all_ranks_gflops, r->all_ranks_gflops);
        printf(", peak %s memory %.0f MiB, wall %s\n", r->model.be->host_memory ? "host" : "device",
               run_peak_bytes(&r->model) / 1048576.0, wall);
    } else if (resuming) {
        printf("nothing to train: the state is at step %d of %d\n", r->start_step, o->steps);
    }
}

/* --zero 1, every rank at the end: each rank's counted peak (model/mem.h) in one line of rank 0's
 * output; the ranks hold different shards, and `./train plan --ranks N --zero 1` plans each. */
static void report_rank_peaks(const Run* r) {
    double* peaks = calloc((size_t)world, sizeof(double));
    size_t* bounds = calloc((size_t)world + 1, sizeof(size_t));
    if (peaks == NULL || bounds == NULL) {
        fprintf(stderr, "seedgpt: out of memory for %d ranks' peaks\n", world);
        exit(1);
    }
    for (int q = 0; q <= world; q++) bounds[q] = (size_t)q;
    peaks[dist_rank()] = (double)run_peak_bytes(&r->model);
    dist_allgather_doubles(peaks, bounds);
    printf("ZeRO-1 peak bytes by rank:");
    for (int q = 0; q < world; q++) printf(" %.0f", peaks[q]);
    printf("\n");
    fflush(stdout);
    free(peaks);
    free(bounds);
}

/* --profile, rank 0, at the end: the table of op classes over this process's steps, and one
 * {"type":"profile"} row in the JSON log, tied to the last step it measured ("step"), so that a
 * resume that runs that step again drops it with the step's own rows. */
static void print_profile(Run* r, int done) {
    if (!r->o->profile || !r->writer || done <= r->start_step) return;
    ProfileTotals t = profile_totals_steady();   /* the warm-up steps left out */
    profile_print(stdout, &t, r->peak_gflops);
    fflush(stdout);
    if (r->jsonf != NULL) {
        fprintf(r->jsonf, "{\"type\":\"profile\",\"first_step\":%d,\"step\":%d", r->start_step,
                done - 1);
        profile_json_fields(r->jsonf, &t);
        fprintf(r->jsonf, "}\n");
        log_row_done(r, done - 1);
    }
}

/* Rank 0 at the end: the state after `done` steps (unless just written) with DIR/model.bin, and
 * the --save model file. 0, or the exit status. */
static int save_at_end(Run* r, int done) {
    const Options* o = r->o;
    char err[256];
    if (!r->writer) {   /* under --zero 1 rank 0's saves need this rank's pieces, as below */
        if (r->zero.ranks == 0) return 0;
        if (o->out_dir != NULL && r->last_saved != done) zero_serve_moments(r);
        else if (o->out_dir != NULL && done == r->start_step) zero_serve_model(r);
        if (o->save_path != NULL) zero_serve_model(r);
        return 0;
    }
    if (o->out_dir != NULL && r->last_saved != done) save_state(r, done);
    /* a crash between a state's rename and its model.bin leaves the model file one state behind */
    else if (o->out_dir != NULL && done == r->start_step) save_run_model(r);
    if (o->save_path != NULL) {
        gpt_to_host(&r->model);
        begin_tmp(o->save_path);
        int rc = write_model_file(r, o->save_path, err);
        end_tmp();
        if (rc != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return rc == MODELFILE_NON_FINITE ? EXIT_NON_FINITE : EXIT_BAD_INPUT;
        }
        printf("saved %s\n", o->save_path);
    }
    return 0;
}

/* ---- the subcommands ---------------------------------------------------------------------- */

/* ./train sample: text from a model file (options: cli.c). */
static int sample_main(const char* self, int argc, char** argv) {
    SampleOptions so;
    parse_sample_options(&so, argc, argv);
    if (so.threads > 0) omp_set_num_threads(so.threads);
    char err[256];
    GPTConfig cfg;
    if (modelfile_read_config(so.init, &cfg, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    /* no --tokenizer: the one the model's vocabulary was made for (a byte-level reading of a
     * 50257-id model decodes nearly every token to nothing) */
    const char* tok_name = so.tokenizer;
    if (tok_name == NULL) {
        tok_name = cfg.vocab_size >= TOKENIZER_GPT2_VOCAB ? "gpt2" : "byte";
        if (cfg.vocab_size >= TOKENIZER_GPT2_VOCAB)
            fprintf(stderr, "note: %s has vocab %d: sampling with the gpt2 tokenizer "
                    "(--tokenizer byte|gpt2 to choose)\n", so.init, cfg.vocab_size);
    }
    Tokenizer tok;
    if (tokenizer_open(&tok, tok_name, so.bpe_dir, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    GPT model;
    if (gpt_build(&model, &cfg, 1, 1, err) != 0) {
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
        sample_write_text(stdout, (const unsigned char*)so.prompt, plen, isatty(STDOUT_FILENO));
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

/* ./train eval: a model file's HellaSwag accuracy (options: cli.c), one process. The model is
 * planned for batches of --batch rows (4 per example) of the file's longest row, on --device at
 * --precision, and scored through the training forward (model/eval.h). */
static int eval_main(const char* self, int argc, char** argv) {
    EvalOptions eo;
    parse_eval_options(&eo, argc, argv);
    if (eo.threads > 0) omp_set_num_threads(eo.threads);
    char err[256];
    GPTConfig cfg;
    if (modelfile_read_config(eo.init, &cfg, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    HellaswagSet hs;
    if (hellaswag_open(&hs, eo.hellaswag, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    int rc = hellaswag_fits(&hs, "--hellaswag", eo.hellaswag, cfg.vocab_size, eo.batch,
                            cfg.max_seq_len, "the model's context (maxT)");
    const Backend* be = backend_lookup(eo.device, eo.precision);
    if (rc == 0 && be == NULL) {
        fprintf(stderr, "seedgpt: eval: --device %s --precision %s is not in this binary\n",
                eo.device, eo.precision);
        rc = EXIT_BAD_INPUT;
    }
    if (rc != 0) {
        hellaswag_free(&hs);
        return rc;
    }
    int B = eo.batch / HELLASWAG_ENDINGS * HELLASWAG_ENDINGS;
    if (B > HELLASWAG_ENDINGS * hs.num_examples) B = HELLASWAG_ENDINGS * hs.num_examples;
    int T = hs.longest_row;
    RecomputePolicy none;
    memset(&none, 0, sizeof(none));
    GPT model;
    if (gpt_build_on(&model, &cfg, B, T, &none, be, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        hellaswag_free(&hs);
        return EXIT_BAD_INPUT;
    }
    if (modelfile_load(&model, eo.init, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        gpt_free(&model);
        hellaswag_free(&hs);
        return EXIT_BAD_INPUT;
    }
    fprintf(stderr, "hellaswag: %s, %d examples, %d rows of up to %d positions per forward, "
            "device %s, precision %s\n", eo.hellaswag, hs.num_examples, B, T, model.be->name,
            model.be->precision);
    HellaswagBuffers hb;
    hellaswag_buffers_alloc(&hb, B, T);
    HellaswagScore sc = hellaswag_eval(&model, &hs, &hb, 0, 1, 1, eo.per_example ? stdout : NULL);
    printf("hellaswag: %d examples, acc %.4f (%d right), acc_norm %.4f (%d right)\n", sc.n,
           (double)sc.correct / sc.n, sc.correct, (double)sc.correct_norm / sc.n, sc.correct_norm);
    printf("{\"type\":\"hellaswag\"");
    json_float(stdout, "acc", (double)sc.correct / sc.n);
    json_float(stdout, "acc_norm", (double)sc.correct_norm / sc.n);
    printf(",\"n\":%d,\"correct\":%d,\"correct_norm\":%d}\n", sc.n, sc.correct, sc.correct_norm);
    hellaswag_buffers_free(&hb);
    gpt_free(&model);
    hellaswag_free(&hs);
    return 0;
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

/* ./train plan: the memory of every recompute policy before anything runs (model/plan.h). The
 * training flags describe the run (model shape, or --init's header; batch; --device and
 * --precision narrow the backends); nothing is read but a model file's header, and nothing is
 * allocated but the plan. --format json prints one {"type":"plan",...} line per row instead of
 * the table. */
static int plan_main(const char* self, int argc, char** argv) {
    int json = 0, nranks = 1;
    char** args = calloc((size_t)argc + 2, sizeof(char*));   /* a program name, the flags, NULL */
    int n = 0;
    args[n++] = (char*)self;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {   /* the processes of the run */
            char* end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*argv[i + 1] == '\0' || *end != '\0' || v < 1 || v > STATE_MAX_RANKS) {
                fprintf(stderr, "seedgpt: plan: --ranks %s: expected an integer in [1, %d]\n",
                        argv[i + 1], STATE_MAX_RANKS);
                free(args);
                return EXIT_BAD_INPUT;
            }
            nranks = (int)v;
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--format") && i + 1 < argc) {
            if (strcmp(argv[i + 1], "table") && strcmp(argv[i + 1], "json")) {
                fprintf(stderr, "seedgpt: plan: --format %s: expected table or json\n", argv[i + 1]);
                free(args);
                return EXIT_BAD_INPUT;
            }
            json = !strcmp(argv[++i], "json");
            continue;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ./train plan [--format table|json] [--ranks N] TRAINING FLAGS\n"
                   "The planned memory of every recompute policy for the run the flags describe\n"
                   "(model shape or --init, --batch, --seq, --device, --precision, --threads,\n"
                   "--memory-budget): params, grads, AdamW, kept activations, logits, recompute\n"
                   "scratch, gradient and attention scratch, the rest, and the share of a step's\n"
                   "FLOPs a recompute adds. Needs no data; allocates nothing but the plan.\n"
                   "--ranks N with --zero 1: the plan of each of N ranks of ./train_mpi, each\n"
                   "holding its shard of AdamW's moments (rank 0 also, with --out, the buffer a\n"
                   "save gathers one tensor's moments into).\n");
            free(args);
            return 0;
        }
        args[n++] = argv[i];
    }
    Options o;
    const char* raw[NUM_FLAGS];
    parse_options(&o, raw, n, args, NULL, 0);
    free(args);
    if (o.threads > 0) omp_set_num_threads(o.threads);
    int threads = omp_get_max_threads();
    char err[256];
    if (o.zero && nranks < 2) {
        fprintf(stderr, "seedgpt: plan: --zero 1 shards the optimizer over ranks: give --ranks N "
                "(N >= 2, the processes of mpirun -np N ./train_mpi)\n");
        return EXIT_BAD_INPUT;
    }
    GPTConfig cfg;
    if (o.init_path != NULL) {
        if (modelfile_read_config(o.init_path, &cfg, err) != 0) {
            fprintf(stderr, "seedgpt: %s\n", err);
            return EXIT_BAD_INPUT;
        }
    } else {
        if (strcmp(o.tokenizer, "byte") && strcmp(o.tokenizer, "gpt2")) {
            fprintf(stderr, "seedgpt: --tokenizer %s: expected byte or gpt2\n", o.tokenizer);
            return EXIT_BAD_INPUT;
        }
        int tok_vocab = !strcmp(o.tokenizer, "gpt2") ? TOKENIZER_GPT2_VOCAB : 257;
        const char* problem = config_from_flags(&o, tok_vocab, &cfg);
        if (problem != NULL) {
            fprintf(stderr, "seedgpt: model flags: %s\n", problem);
            return EXIT_BAD_INPUT;
        }
    }
    int B = o.batch, T = o.seq ? o.seq : cfg.max_seq_len;
    if (T > cfg.max_seq_len) {
        fprintf(stderr, "seedgpt: --seq %d exceeds the model's maximum context %d\n", T,
                cfg.max_seq_len);
        return EXIT_BAD_INPUT;
    }
    const char* devices[2] = {"cpu", "cuda"};
    const char* precisions[3] = {"fp32", "bf16", "fp16"};
    int shown = 0;
    for (int d = 0; d < 2; d++) {
        if (raw[F_DEVICE] != NULL && strcmp(o.device, devices[d])) continue;
        for (int q = 0; q < 3; q++) {
            if (raw[F_PRECISION] != NULL && strcmp(o.precision, precisions[q])) continue;
            const Backend* be = backend_lookup(devices[d], precisions[q]);
            if (be == NULL) continue;
          for (int rk = 0; rk < (o.zero ? nranks : 1); rk++) {   /* ZeRO-1: each rank's plan */
            PlanRow rows[PLAN_MAX_ROWS];
            PlanShard sh = {nranks, rk, zero_saves(&o, be)};
            /* the sampler of --sample-every: rank 0's */
            size_t sampler = o.sample_every > 0 && rk == 0 ? sampler_bytes(&cfg) : 0;
            int nr = plan_rows(&cfg, B, T, be, threads, raw[F_RECOMPUTE] ? &o.policy : NULL,
                               sampler, o.zero ? &sh : NULL, rows, err);
            if (nr < 0) {
                fprintf(stderr, "seedgpt: %s\n", err);
                return EXIT_BAD_INPUT;
            }
            int second = -1, best = o.memory_budget > 0 ? plan_choose(rows, nr, o.memory_budget, &second) : -1;
            char name[32];
            if (!json) {
                size_t P = 0, sizes[NUM_PARAMETER_TENSORS];
                gpt_param_sizes(&cfg, sizes);
                for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += sizes[k];
                printf("%splan: L%d H%d KV%d C%d V%d maxT %d (%zu parameters), batch %d x %d, device "
                       "%s, precision %s, %d threads; MiB (peak: %s)\n", shown ? "\n" : "",
                       cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.channels,
                       cfg.vocab_size, cfg.max_seq_len, P, B, T, devices[d], precisions[q], threads,
                       be->host_memory ? "arena + host tables + the larger of the build's transient "
                                         "and the loop's batch and sampler"
                                       : "the device arena + the ops' scratch");
                if (o.zero) {
                    size_t begin, len = zero_shard(&cfg, nranks, rk, &begin);
                    printf("rank %d of %d, ZeRO-1: AdamW's moments of floats %zu .. %zu of the "
                           "block (%zu)%s\n", rk, nranks, begin, begin + len, len,
                           rk == 0 && o.out_dir != NULL ? ", and the buffer of a save" : "");
                }
                printf("%-17s %8s %8s %8s %7s %8s %8s %9s %8s %8s %6s %7s %6s %6s %7s %9s\n",
                       "policy", "params", "grads", "adamw", "bf16-w", "kept", "logits",
                       "recompute", "grad-scr", "attn-scr", "other", "ops-scr", "host", "loop",
                       "peak", "recompute");
            }
            for (int i = 0; i < nr; i++) {
                const GPTPlan* p = &rows[i].plan;
                double frac = p->recompute_flops / p->step_flops;
                recompute_name(&rows[i].policy, name);
                if (json) {
                    printf("{\"type\":\"plan\",\"device\":\"%s\",\"precision\":\"%s\","
                           "\"policy\":\"%s\",\"batch\":%d,\"seq\":%d,\"threads\":%d,"
                           "\"params_bytes\":%zu,\"grads_bytes\":%zu,\"adamw_bytes\":%zu,"
                           "\"kept_activation_bytes\":%zu,\"logits_bytes\":%zu,"
                           "\"recompute_bytes\":%zu,\"grad_scratch_bytes\":%zu,"
                           "\"attn_scratch_bytes\":%zu,\"other_bytes\":%zu,\"arena_bytes\":%zu,"
                           "\"op_scratch_bytes\":%zu,\"host_bytes\":%zu,"
                           "\"host_transient_bytes\":%zu,\"loop_bytes\":%zu,\"peak_bytes\":%zu,"
                           "\"step_flops\":%.6g,\"recompute_flops\":%.6g,"
                           "\"bf16_weights_bytes\":%zu,\"layer_activation_bytes\":%zu,"
                           "\"resid_bytes\":%zu%s",
                           devices[d], precisions[q], name, B, T, threads, p->params, p->grads,
                           p->adamw, p->activations, p->logits, p->recompute, p->grad_scratch,
                           p->attn_scratch, p->other, p->arena, p->op_scratch, p->host,
                           p->host_transient, rows[i].loop, rows[i].peak, p->step_flops,
                           p->recompute_flops, p->weights_op, p->layer_acts, p->resid,
                           i == best ? ",\"budget_choice\":true" : "");
                    if (o.zero) printf(",\"zero\":1,\"ranks\":%d,\"rank\":%d", nranks, rk);
                    printf("}\n");
                } else {
                    printf("%-17s %8.1f %8.1f %8.1f %7.1f %8.1f %8.1f %9.1f %8.1f %8.1f %6.1f %7.1f "
                           "%6.1f %6.1f %7.0f %8.1f%%%s\n", name, mib(p->params), mib(p->grads),
                           mib(p->adamw), mib(p->weights_op), mib(p->activations), mib(p->logits),
                           mib(p->recompute),
                           mib(p->grad_scratch), mib(p->attn_scratch), mib(p->other),
                           mib(p->op_scratch), mib(p->host + p->host_transient),
                           mib(rows[i].loop), mib(rows[i].peak), 100.0 * frac,
                           i == best ? "   <- --memory-budget" : i == second ? "   (runner-up)" : "");
                }
            }
            if (!json && o.memory_budget > 0 && best < 0)
                printf("--memory-budget %.1f MiB: no policy fits\n", o.memory_budget / 1048576.0);
            shown++;
          }
        }
    }
    if (shown == 0) {
        fprintf(stderr, "seedgpt: plan: this binary has no backend for --device %s --precision %s\n",
                o.device, o.precision);
        return EXIT_BAD_INPUT;
    }
    return 0;
}

/* ./train prepare: text -> token shards (data/prepare.h). */
static int prepare_cmd(const char* self, int argc, char** argv) {
    for (int i = 0; i < argc; i++)   /* the HellaSwag jsonl -> its eval file (data/hellaswag.h) */
        if (!strcmp(argv[i], "--hellaswag")) return hellaswag_prepare_main(argc, argv);
    return prepare_main(argc, argv);
}

/* ./train export and ./train import: Hugging Face's GPT-2 layout (model/hf.h). */
static int export_cmd(const char* self, int argc, char** argv) {
    return hf_export_main(argc, argv, TOKENIZER_GPT2_DEFAULT_DIR);
}
static int import_cmd(const char* self, int argc, char** argv) {
    return hf_import_main(argc, argv);
}

/* ./train peak: the measured arithmetic peak (cpu/peak.h) at the run's thread count, what MFU
 * is read against on the CPU; with a GPU (./train_cuda), its documented peak too. Each backend
 * this build has prints its own rows (model/backend.h, peak_report). */
static int peak_main(const char* self, int argc, char** argv) {
    PeakOptions po;
    parse_peak_options(&po, argc, argv);
    if (po.threads > 0) omp_set_num_threads(po.threads);
    int threads = omp_get_max_threads();
    printf("peak: %d threads, the best of ~10 ms repeats over %.2f s per rate\n", threads, po.seconds);
    char json[1024];
    snprintf(json, sizeof(json), "{\"type\":\"peak\",\"threads\":%d,\"seconds\":%g", threads,
             po.seconds);
    static const char* const names[] = {"cpu", "cuda"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const Backend* be = backend_by_name(names[i]);
        if (be != NULL && be->peak_report != NULL)
            be->peak_report(stdout, threads, po.seconds, json, sizeof(json));
    }
    if (po.json) printf("%s}\n", json);
    return 0;
}

/* ./train --version: what this binary holds and what its build left out. The devices and
 * precisions are read from the backend table, so the line cannot claim one that is not there. */
static int print_version(void) {
    static const char* const devices[] = {"cpu", "cuda"};
    static const char* const precisions[] = {"fp32", "bf16", "fp16"};
    char line[256] = "";
    size_t n = 0;
    for (int d = 0; d < 2; d++) {
        if (backend_by_name(devices[d]) == NULL) continue;
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s (", n ? ", " : "", devices[d]);
        int k = 0;
        for (int q = 0; q < 3; q++)
            if (backend_lookup(devices[d], precisions[q]) != NULL)
                n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s", k++ ? ", " : "",
                                      precisions[q]);
        n += (size_t)snprintf(line + n, sizeof(line) - n, ")");
    }
    if (strcmp(dist_kind(), "none") == 0)
        printf("seedgpt: devices %s; one process (no data parallelism in this binary)\n", line);
    else
        printf("seedgpt: devices %s; data parallel over %s (mpirun -np R)\n", line, dist_kind());
    const char* out = build_left_out();
    printf("left out of this build: %s\n", out[0] ? out : "nothing");
    return 0;
}

/* Every subcommand, in the order ./train --help lists them. */
static const Subcommand subcommands[] = {
    {"sample", "--help", sample_main, "generate text from a model file"},
    {"eval", "--help", eval_main, "a model file's HellaSwag accuracy (acc, acc_norm)"},
    {"plot", "RUNDIR", plot_main, "RUNDIR/log.jsonl -> RUNDIR/loss.png (gnuplot)"},
    {"prepare", "--help", prepare_cmd, "turn text files into token shards"},
    {"export", "--help", export_cmd, "a model file -> a Hugging Face GPT-2 folder (safetensors)"},
    {"import", "--help", import_cmd, "Hugging Face GPT-2 weights (safetensors) -> a model file"},
    {"plan", "TRAINING FLAGS", plan_main, "the memory of each recompute policy, before a run"},
    {"peak", "[--threads N]", peak_main, "this machine's measured fp32 (and bf16) FLOP peak"},
};
enum { NUM_SUBCOMMANDS = (int)(sizeof(subcommands) / sizeof(subcommands[0])) };

/* ---- the training run --------------------------------------------------------------------- */

int main(int argc, char** argv) {
    if (argc == 2 && !strcmp(argv[1], "--version")) return print_version();
    for (int k = 0; argc >= 2 && k < NUM_SUBCOMMANDS; k++)
        if (!strcmp(argv[1], subcommands[k].name))
            return subcommands[k].run(argv[0], argc - 2, argv + 2);

    char err[256];
    if (dist_init(&argc, &argv, err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }
    world = dist_size();
    int writer = dist_rank() == 0;   /* only rank 0 writes logs, samples, states and model files */
    if (fault_check_env(err) != 0) { fprintf(stderr, "seedgpt: %s\n", err); return EXIT_BAD_INPUT; }

    /* the options: the command line's, over those of the state a resumed run continues */
    Options cmd, o;
    const char* raw[NUM_FLAGS];
    parse_options(&cmd, raw, argc, argv, subcommands, NUM_SUBCOMMANDS);
    o = cmd;
    static StateInfo resumed;   /* the newest state that loads: header and option text */
    char state_file[4096] = "";
    int resuming = cmd.resume_dir != NULL;
    if (resuming) {
        int rc = resume_options(&o, &cmd, raw, writer, &resumed, state_file, sizeof(state_file));
        if (rc != 0) return rc;
    }
    /* context parallelism: the command line's N, else a resumed state's; every rank checks it,
     * rank 0 says what is wrong */
    if (o.context_parallel == 0) o.context_parallel = 1;
    if (o.context_parallel > 1 && strcmp(o.precision, "fp16") == 0) {   /* before the ring */
        if (writer)
            fprintf(stderr, "seedgpt: --precision fp16 --context-parallel %d: context parallelism "
                    "runs in --precision fp32 only so far\n", o.context_parallel);
        return EXIT_BAD_INPUT;
    }
    if (dist_cp_init(o.context_parallel, err) != 0) {
        if (writer) fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    cpn = dist_cp_size();
    dp = dist_dp_size();
    check_options(&o, raw);
    if (o.zero && (world == 1 || cpn > 1)) {   /* every rank refuses; rank 0 says it */
        if (writer && world == 1)
            fprintf(stderr, "seedgpt: --zero 1 shards the optimizer over data-parallel ranks and "
                    "this run has one process: run mpirun -np R ./train_mpi --zero 1 (R >= 2), "
                    "or drop --zero\n");
        else if (writer)
            fprintf(stderr, "seedgpt: --zero 1 with --context-parallel %d: not supported yet; "
                    "use one or the other\n", cpn);
        return EXIT_BAD_INPUT;
    }
    if (o.log_json == NULL && o.out_dir != NULL) {
        static char log_default[4200];
        snprintf(log_default, sizeof(log_default), "%s/log.jsonl", o.out_dir);
        o.log_json = log_default;
        o.log_json_is_default = 1;   /* not stored: a resume into another --out logs there */
    }
    int threads = set_threads(&o);

    /* set up: tokenizer, model shape, batch, run folder, data, model, weights, log */
    Run r;
    memset(&r, 0, sizeof(r));   /* nothing opened yet */
    r.o = &o;
    r.writer = writer;
    r.have_val = o.val_path != NULL;
    r.last_saved = -1;
    r.last_val = NAN;
    if (resuming && raw[F_TRAIN] == NULL) r.train_from_state = state_file;
    if (resuming && raw[F_VAL] == NULL) r.val_from_state = state_file;
    if (tokenizer_open(&r.tok, o.tokenizer, o.bpe_dir, err) != 0) {
        fprintf(stderr, "seedgpt: %s\n", err);
        return EXIT_BAD_INPUT;
    }
    r.tok_open = 1;
    /* from here on errors leave through `cleanup`, which releases whatever was opened */
    int rc = model_config(&r, resuming ? &resumed : NULL);
    if (rc == 0) rc = batch_shape(&r);
    if (rc == 0)
        rc = apply_memory_budget(&r.cfg, r.B, r.T, &o, raw[F_RECOMPUTE] != NULL, raw[F_ZERO] != NULL,
                                 writer);
    if (rc == 0) rc = open_data(&r);
    /* rank 0 checks every file the run writes against its inputs, then takes the run folder;
     * every rank learns the outcome (none is left waiting for a rank that refused) */
    if (rc == 0) {
        int wrc = writer ? check_outputs(&r, resuming ? state_file : NULL) : 0;
        if (wrc == 0 && o.out_dir != NULL && writer)
            wrc = prepare_run_folder(o.out_dir, resuming ? cmd.resume_dir : NULL);
        if (wrc == 0 && o.save_path != NULL && writer) wrc = check_save_path(o.save_path);
        rc = dist_max(wrc);
    }
    if (rc == 0) rc = build_model(&r);
    if (rc == 0) rc = load_weights(&r, resuming ? &resumed : NULL, state_file);
    if (rc == 0) rc = open_log(&r, resuming);
    if (rc != 0) goto cleanup;
    print_run(&r, threads);
    install_stop_signals(&o);
    prepare_loop(&r);

    /* the loop; every rank stops after the same step, whichever of them got the signal or failed
     * to write the log */
    double run_start = now_ms();
    int step = r.start_step, stopped_by = 0;
    for (; step < o.steps && (stopped_by = dist_max(stop_signal ? stop_signal
                                                    : r.log_errno ? STOP_LOG_FAILED : 0)) == 0;
         step++) {
        StepStats s;
        if ((rc = train_step(&r, step, &s)) != 0) goto cleanup;
        log_step(&r, step, &s);
#ifdef SEEDGPT_TEST_BUILD
        track_rss(&r, step);
#endif
        fault_kill_point("step_logged", step);
        if ((rc = check_bad_steps(&r, step)) != 0) goto cleanup;
        after_step(&r, step);
        if (s.ms > r.slowest_step_ms) r.slowest_step_ms = s.ms;
        if (step == r.start_step + 1) judge_stop_grace(&r);
        if (fault_fires("sigterm", step)) raise(SIGTERM);        /* test hooks */
        if (fault_fires("sigint", step)) raise(SIGINT);
    }

    /* the end: the summary, the last state and the model file */
    int done = step;
    print_summary(&r, done, resuming, run_start);
    if (r.zero.ranks > 0) report_rank_peaks(&r);
#ifdef SEEDGPT_TEST_BUILD
    report_rss(done);
#endif
    print_profile(&r, done);
    if ((rc = save_at_end(&r, done)) != 0) goto cleanup;
    if (r.log_errno != 0 || stopped_by == STOP_LOG_FAILED) {
        if (writer && done > r.start_step)
            printf("stopped after step %d: the log could not be written%s\n", done - 1,
                   o.out_dir ? " (state saved)" : "");
        else if (writer)
            printf("stopped before its first step: the log could not be written\n");
        rc = EXIT_WRITE_FAILED;
    } else if (stopped_by != 0 && done < o.steps) {
        printf("stopped by %s after step %d%s\n", stopped_by == SIGINT ? "SIGINT" : "SIGTERM",
               done - 1, o.out_dir ? " (state saved)" : "");
        rc = 128 + stopped_by;
    }
    /* No rank leaves before rank 0 has written its files: mpirun ends the whole job (SIGKILL) as
     * soon as one rank exits with a non-zero status, so a rank that had nothing to save and left
     * at once would take rank 0's stop-save with it. The ranks leave with rank 0's status. */
    fflush(stdout);
    rc = dist_max(rc);
cleanup:
    run_close(&r);
    return rc;
}
