/* dist/init_file.h — the file handshake that starts NCCL without MPI: processes started by any
 * launcher (slurm, a shell loop) with --rank, --world and --init-file PATH on a file system they
 * all see. Rank 0 makes the NCCL unique id and publishes it at PATH; every other rank waits for
 * PATH to appear, reads the id and joins the communicator with it (dist/dist_nccl.cu).
 *
 * The file (host byte order; the ranks of one job share it):
 *   bytes 0..7    "SEEDNCID"
 *   8..11         u32 version (1)
 *   12..15        u32 world: the --world it was written for
 *   16..19        u32 n: the id's bytes (NCCL's: 128)
 *   20..23        u32 0
 *   24..24+n-1    the id
 *   then          u64 FNV-1a of every byte before it
 * Publishing writes PATH.tmp.PID, fsyncs it, then link()s it to PATH, which fails when PATH
 * exists: a reader never sees half a file, and a file left by an earlier start is never
 * overwritten (rank 0 refuses it, naming it; remove it, or name a fresh PATH per job). A file
 * that is there but is not exactly such a file is refused at once, not waited on.
 *
 * No NCCL here (tests/test_init_file.c runs it on any machine). Nothing prints or exits; errors
 * are one line in err[256].
 */
#ifndef SEEDGPT_INIT_FILE_H
#define SEEDGPT_INIT_FILE_H

#include <stddef.h>

#define INIT_FILE_MAGIC "SEEDNCID"
#define INIT_FILE_HEADER_BYTES 24
/* a file's bytes for an id of n bytes */
#define INIT_FILE_BYTES(n) (INIT_FILE_HEADER_BYTES + (n) + 8)

/* Rank 0: the id's n bytes published at path for a job of `world` ranks. 0, or -1 with err
 * (path exists, cannot be written). */
int init_file_publish(const char* path, const void* id, size_t n, int world, char err[256]);

/* Every other rank: waits up to timeout_s seconds (polling every 50 ms) for path, then reads the
 * id's n bytes into id. 0, or -1 with err: no file after timeout_s, or a file of the wrong size,
 * magic, version, id length or checksum, or written for another world size. */
int init_file_wait(const char* path, void* id, size_t n, int world, double timeout_s,
                   char err[256]);

#endif
