/* data/prepare.h — the `./train prepare` subcommand: text files -> train/val token shards.
 *
 *   ./train prepare [--tokenizer byte|gpt2] [--bpe-dir DIR] [--val-frac F] [--shard-tokens N]
 *                   IN.txt [IN2.txt ...] OUTDIR
 *
 * Each input file is one document. The token stream is every document in the order given, each
 * preceded by EOT (as llm.c does):  EOT doc1 EOT doc2 ... EOT docN,  n tokens in all.
 * The tokenizer (data/tokenizer.h): byte (default; EOT 256) or gpt2 (GPT-2's BPE, EOT 50256,
 * its encoder.json and vocab.bpe read from --bpe-dir DIR, default $SEEDGPT_BPE_DIR, else
 * data/gpt2). Each document's ids are those of the whole file encoded at once, though it is read
 * in chunks.
 *
 * Split rule: s = round((1 - F) * n) (F = --val-frac, default 0.1, 0 <= F < 1).
 *   train = stream[0, s)
 *   val   = EOT + stream[s, n), the EOT added only when stream[s] is not already an EOT (i.e. the
 *           split fell inside a document), so val, like train, starts at a document boundary.
 * Hence train + val = bytes + documents (+1 when the split fell inside a document), and val holds
 * the last F of the stream (its leading EOT aside). F = 0 writes no val shard. A split that would
 * leave train empty, or val empty when F > 0, is refused.
 *
 * Files: OUTDIR/train_000000.bin, train_000001.bin, ... and OUTDIR/val_000000.bin, ..., each
 * llm.c token shards (data/shards.h) of at most N tokens (--shard-tokens, default 100000000).
 * OUTDIR is created if missing. Every shard is first written in full to NAME.tmp and fsynced;
 * only when all of them are complete are they renamed into place, so a failing run leaves an
 * existing dataset untouched. After that, shards of an older run with higher numbers
 * (train_NNNNNN.bin / val_NNNNNN.bin beyond the new ones) are removed, so that a pattern like
 * OUTDIR/train_*.bin names exactly the new split.
 *
 * Output: a progress line on stderr every 10 MB of text read (for gpt2 also while counting), one
 * summary line on stdout.
 * Errors: one line on stderr naming the flag or file, and the return value 2.
 */
#ifndef SEEDGPT_PREPARE_H
#define SEEDGPT_PREPARE_H

/* argv holds the words AFTER "prepare": for `./train prepare --val-frac 0.2 a.txt out`, main calls
 * prepare_main(argc - 2, argv + 2), and argv[0] here is "--val-frac". Returns the process exit
 * status: 0 done (or --help), 2 bad flags, bad or empty input, or an I/O error. */
int prepare_main(int argc, char** argv);

#endif
