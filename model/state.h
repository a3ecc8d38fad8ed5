/* model/state.h — the training state: everything a run needs to continue bit for bit
 * (DESIGN §6), in one CRC32-checked, versioned file; the naming of state files in a run folder;
 * and the fault points the crash tests kill the trainer at.
 *
 * A state holds the weights, AdamW's m and v (raw float32 bits), the step, the master seed, the
 * training loader's position and shuffle state, the model configuration, the batch shape, the
 * number of data-parallel ranks, the non-finite guard's counters, and the run's options as text
 * (cli.c's flag table owns their meaning). Byte layout: docs/formats.md, "Training state".
 *
 * Writing goes to PATH.tmp, is flushed and fsynced, renamed over PATH, and the folder is fsynced:
 * a crash at any instant leaves either the old file or the new one under PATH, never a mix.
 * A state with a non-finite weight or moment is never written. Reading checks every header field,
 * the exact size and the CRC before a single weight reaches the model.
 *
 * This file knows the model (model/gpt.h) but not data/: the loader's state travels as
 * StateLoader, a field-for-field copy of data/shards.h's LoaderState that train.c fills.
 * Nothing here prints or exits; errors are one line in the caller's err[256].
 */
#ifndef SEEDGPT_STATE_H
#define SEEDGPT_STATE_H

#include <stddef.h>
#include <stdint.h>
#include "model/gpt.h"

#define STATE_MAGIC "SEEDSTAT"         /* the file's first 8 bytes */
#define STATE_VERSION 4               /* the newest this build reads; 1 = no model options,
                                         2 = no context parallelism, 3 = no loss scale */
#define STATE_HEADER_BYTES 256
#define STATE_MAX_OPTIONS 16384        /* bytes of option text */
#define STATE_MAX_RANKS 1048576        /* data-parallel ranks */

/* data/shards.h's LoaderState, copied field by field (model/ does not include data/). */
typedef struct {
    uint64_t epoch;         /* completed epochs */
    uint64_t pos;           /* windows served in this epoch, < num_windows */
    uint64_t shuffle_seed;
    uint64_t num_windows;   /* of the split, for the B, T below */
    int32_t shuffle;        /* 0 sequential, 1 shuffled */
} StateLoader;

typedef struct {
    GPTConfig config;
    uint64_t num_parameters;    /* floats in each of the weights, m and v: sum of param_sizes */
    uint64_t step;              /* optimizer steps completed = the next step to run */
    uint64_t master_seed;
    StateLoader loader;
    int32_t batch, seq;         /* B sequences of T tokens per step (per rank) */
    uint32_t ranks;             /* data-parallel processes of the run (dist/dist.h); 1: one.
                                   A state resumes only with the same count */
    uint32_t context_parallel;  /* N of the run's ranks share each sequence (DESIGN §9); 1: none.
                                   ranks = data-parallel x N; a state resumes only with the same
                                   layout */
    uint32_t bad_consecutive;   /* non-finite steps in a row, ending at step - 1 */
    uint64_t bad_total;         /* non-finite steps of the whole run */
    float loss_scale;           /* --precision fp16: the dynamic loss scale for the next step (a
                                   power of two, >= 1; version 4); 0: not an fp16 run */
    uint32_t scale_good;        /* fp16: good steps in a row since the scale last changed */
    char options[STATE_MAX_OPTIONS + 1];  /* "--flag value\n" lines, NUL-terminated */
} StateInfo;

/* Writes m's weights and AdamW moments with info (its config and num_parameters are taken from
 * m) to path via path.tmp + fsync + rename + folder fsync. Refuses, writing nothing, when a
 * weight or moment is not finite (naming the tensor and index) or the option text is too long.
 * 0, -1 with err, or STATE_NON_FINITE with err (a NaN or infinity); on failure the file at
 * path (if any) is untouched. */
#define STATE_NON_FINITE (-2)
int state_save(const char* path, const GPT* m, const StateInfo* info, char err[256]);  /* host copies: gpt_to_host first */

/* ZeRO-1 (model/zero.h): a model built for one shard (gpt_build_shard) holds the moments of that
 * shard only; the others live on the other ranks. Under sharded masters (bf16: m->masters_sharded)
 * it holds only its part of the operand-only tensors' weights (gpt_param_operand_only) too.
 * state_save_from asks src for each such tensor, whole, in the file's order (the sharded weight
 * tensors, then m: tensors 0..15, then v: 0..15; which 0, 1, 2) and always for all of them, even
 * after a failure (the ranks that serve them go through all of them too); the other weights come
 * from m. tensor returns the tensor's floats (valid until the next call), or NULL with err. The
 * same returns as state_save; the file is the same format, the whole optimizer and weights. */
typedef struct {
    const float* (*tensor)(void* ctx, int which, int k, char err[256]);   /* 0 weights, 1 m, 2 v */
    void* ctx;
} StateMomentSource;
int state_save_from(const char* path, const GPT* m, const StateInfo* info,
                    const StateMomentSource* src, char err[256]);

/* Reads and checks a state file without a model: magic, version, every header field, the exact
 * size, and the CRC32 over the whole file. Fills info. 0 or -1 (err names the file and the
 * problem). */
int state_read_info(const char* path, StateInfo* info, char err[256]);

/* state_read_info, then: the file's configuration must equal m's (err names the field and both
 * values), then the weights, m and v are read into the model (of a model built for one ZeRO-1
 * shard, that shard of m and v, and of sharded masters that part of the weights: any shard of a
 * state's whole optimizer) and the CRC checked
 * again, then every value must be finite. On a refusal before the weights are read the model is untouched;
 * a failure after (the file changed under us, a non-finite value) leaves it partly overwritten. */
int state_load(const char* path, GPT* m, StateInfo* info, char err[256]);

/* ---- state files in a run folder ---------------------------------------------------------
 * DIR/state_SSSSSSSS.bin, S the step number (%08llu, more digits past 10^8). */

/* The path of the state for `step` in dir; -1 if it does not fit in cap. */
int state_path(char* out, size_t cap, const char* dir, uint64_t step);

/* The steps of the state files in dir (names state_<digits>.bin only; not a check of their
 * contents), newest first, in *steps (malloc'ed, caller frees; NULL when none). 0, or -1 with err
 * when dir cannot be read. */
int state_list(const char* dir, uint64_t** steps, int* n, char err[256]);

/* After a save at `current`: removes state files with step < current beyond the newest `keep`
 * (keep >= 1; states numbered above current are left alone), and stale state_*.bin.tmp files.
 * Returns the number of files removed; errors are ignored (a leftover file is harmless). */
int state_prune(const char* dir, int keep, uint64_t current);

/* ---- fault points (crash tests) -----------------------------------------------------------
 * SEEDGPT_FAULT="NAME:N[-M][,NAME:N[-M]...]" names points where the process kills itself with
 * SIGKILL (fault_kill_point) or where a test hook fires (fault_fires). The index a point is
 * compared with is what the caller passes, or, when it passes -1, the number of times this
 * process has reached the point (1 = the first). Read in every build: without the variable
 * nothing fires. The points are listed in docs/formats.md. */

/* Checks SEEDGPT_FAULT's syntax: 0, or -1 with one line in err. */
int fault_check_env(char err[256]);
/* Does the point fire at this index (index < 0: the process's own count of hits)? */
int fault_fires(const char* name, long index);
/* Kills the process with SIGKILL when the point fires. */
void fault_kill_point(const char* name, long index);

#endif
