/* data/hellaswag.h — the HellaSwag eval file (llm.c's multiple-choice format): its reader and
 * validator, the rows one example becomes, and the writer that turns the dataset's jsonl into
 * that file (`./train prepare --hellaswag`).
 *
 * File (little-endian; docs/formats.md "HellaSwag eval file"):
 *   int32 header[256]:  [0] = 20240522 (magic), [1] = 1 (version), [2] = examples (>= 1),
 *                       [3] = bytes of the longest example record, the rest 0
 *   then one record per example, a run of uint16 words:
 *     65535 (start marker), bytes of this record (these three words included), example index
 *     (0, 1, 2, ... in file order), label (the right ending, < endings), endings (4),
 *     context length n >= 1, n context tokens,
 *     then per ending: its length m >= 1, m tokens.
 *   Nothing follows the last record.
 *
 * Rows. Ending k of an example is one row of a batch: the context, then the ending. The model reads
 * the row's tokens but the last (ctx + m - 1 positions) and is scored where the target is an
 * ending token: positions ctx-1 .. ctx+m-2 (the last context token predicts the first ending
 * token). So a row needs ctx + m - 1 positions of the model's context.
 *
 * Errors: nothing here prints or exits; one line naming the file goes into err[256] and the
 * function returns non-zero. Depends on no other folder of seedgpt but util/.
 */
#ifndef SEEDGPT_HELLASWAG_H
#define SEEDGPT_HELLASWAG_H

#include <stddef.h>
#include <stdint.h>

#define HELLASWAG_MAGIC 20240522
#define HELLASWAG_VERSION 1
#define HELLASWAG_HEADER_INTS 256
#define HELLASWAG_HEADER_BYTES (HELLASWAG_HEADER_INTS * 4)
#define HELLASWAG_ENDINGS 4          /* endings per example (llm.c's files always have 4) */
#define HELLASWAG_START 65535u       /* the record's first word */
#define HELLASWAG_MAX_EXAMPLES 65535 /* the record's index is a uint16 */

typedef struct {
    int label;                               /* index of the right ending */
    int ctx_len;                             /* >= 1 */
    const uint16_t* ctx;                     /* (ctx_len) into the set's words */
    int end_len[HELLASWAG_ENDINGS];          /* >= 1 each */
    const uint16_t* end[HELLASWAG_ENDINGS];  /* (end_len[k]) */
} HellaswagExample;

typedef struct {
    int num_examples;
    HellaswagExample* ex;    /* (num_examples) */
    uint16_t* words;         /* the file's records, which ex points into */
    int max_token;           /* the largest token id of the file */
    int longest_row;         /* the most positions any row needs: max of ctx_len + end_len - 1 */
} HellaswagSet;

/* Reads and checks the whole file. 0, or non-zero with one line in err. */
int hellaswag_open(HellaswagSet* s, const char* path, char err[256]);
void hellaswag_free(HellaswagSet* s);

/* Positions one row of ending k needs. */
static inline int hellaswag_row_len(const HellaswagExample* e, int k) {
    return e->ctx_len + e->end_len[k] - 1;
}
/* The most positions any row of examples [first, first + n) needs. */
int hellaswag_rows_len(const HellaswagSet* s, int first, int n);

/* Fills the rows of examples [first, first + n): row 4*i + k is ending k of example first + i,
 * T positions each (T >= hellaswag_rows_len). inputs/targets (4n, T): the row's tokens and the
 * next token, 0 past the row's end. comp_first/comp_len (4n): the positions scored (the targets
 * that are ending tokens); labels (n). */
void hellaswag_fill_rows(const HellaswagSet* s, int first, int n, int T, int* inputs, int* targets,
                         int* comp_first, int* comp_len, int* labels);

/* ---- the writer: HellaSwag jsonl -> the file above ------------------------------------------- */

/* `./train prepare --hellaswag IN.jsonl OUT.bin [--tokenizer gpt2|byte] [--bpe-dir DIR]`
 * (data/hellaswag_prepare.c; argv: the words after "prepare"): the dataset's jsonl, one object per
 * line with "ctx", "label" and "endings" (four strings), -> the file above, each context encoded
 * as it is and each ending as " " + ending (GPT-2's BPE by default: the space belongs to the
 * ending's first word, as in running text). OUT is written to OUT.tmp and renamed into place
 * when complete; an existing OUT must be an eval file itself. One summary line on stdout.
 * Returns the exit status: 0, or 2 with one line on stderr. */
int hellaswag_prepare_main(int argc, char** argv);

#endif
