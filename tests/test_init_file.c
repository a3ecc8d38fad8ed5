/* tests/test_init_file.c — the file handshake that starts NCCL without MPI (dist/init_file.h), on
 * the CPU: two processes (rank 0 publishes a 128-byte id, the other waits for it), the timeout,
 * and the files that must be refused at once (truncated, garbage, corrupt, another world size),
 * and rank 0 never overwriting a file it did not write. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/test.h"
#include "dist/init_file.h"

enum { ID_BYTES = 128 };   /* NCCL's ncclUniqueId */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fake_id(unsigned char* id, int seed) {
    for (int i = 0; i < ID_BYTES; i++) id[i] = (unsigned char)(i * 37 + seed * 11 + 5);
}

static void write_bytes(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    if (f == NULL) return;
    fwrite(p, 1, n, f);
    fclose(f);
}

static size_t read_bytes(const char* path, unsigned char* p, size_t cap) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) return 0;
    size_t n = fread(p, 1, cap, f);
    fclose(f);
    return n;
}

/* a published file of a 128-byte id, made and read back whole */
static size_t published(const char* path, unsigned char* bytes, size_t cap) {
    unsigned char id[ID_BYTES];
    char err[256];
    fake_id(id, 3);
    unlink(path);
    if (init_file_publish(path, id, ID_BYTES, 4, err) != 0) return 0;
    size_t n = read_bytes(path, bytes, cap);
    unlink(path);
    return n;
}

/* waits on a file holding bytes: the return and the error line */
static int refused(const char* path, const void* bytes, size_t n, int world, char err[256],
                   double* took) {
    unsigned char id[ID_BYTES];
    write_bytes(path, bytes, n);
    double t0 = now_s();
    int rc = init_file_wait(path, id, ID_BYTES, world, 10.0, err);
    *took = now_s() - t0;
    unlink(path);
    return rc;
}

int main(void) {
    char dir[] = "/tmp/seedgpt_init_file.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        expect(0, "init_file_temp_folder", "mkdtemp failed");
        return test_finish();
    }
    char path[256], err[256];
    snprintf(path, sizeof(path), "%s/nccl.id", dir);

    /* two processes: the waiter starts first, rank 0 publishes 200 ms later */
    {
        pid_t child = fork();
        if (child == 0) {
            unsigned char want[ID_BYTES], got[ID_BYTES];
            char cerr[256];
            fake_id(want, 1);
            int rc = init_file_wait(path, got, ID_BYTES, 2, 10.0, cerr);
            if (rc != 0) fprintf(stderr, "waiter: %s\n", cerr);
            _exit(rc == 0 && memcmp(want, got, ID_BYTES) == 0 ? 0 : 1);
        }
        struct timespec ts = {0, 200000000L};
        nanosleep(&ts, NULL);
        unsigned char id[ID_BYTES];
        fake_id(id, 1);
        double t0 = now_s();
        int rc = init_file_publish(path, id, ID_BYTES, 2, err);
        int status = -1;
        waitpid(child, &status, 0);
        double waited = now_s() - t0;
        struct stat st;
        char tmp[300];
        snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
        expect(rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && stat(tmp, &st) != 0,
               "init_file_second_process_reads_the_published_id",
               "publish %d%s%s, the waiter's exit status %d (0: the same 128 bytes), %.2f s after "
               "the publish, temporary file left: %s", rc, rc ? ": " : "", rc ? err : "",
               WIFEXITED(status) ? WEXITSTATUS(status) : -1, waited,
               stat(tmp, &st) == 0 ? "yes" : "no");
    }

    /* rank 0 never overwrites: the file just published stays, byte for byte */
    {
        unsigned char before[512], after[512], id[ID_BYTES];
        size_t nb = read_bytes(path, before, sizeof(before));
        fake_id(id, 2);
        int rc = init_file_publish(path, id, ID_BYTES, 2, err);
        size_t na = read_bytes(path, after, sizeof(after));
        expect(rc == -1 && nb == na && memcmp(before, after, nb) == 0 && strstr(err, "exists"),
               "init_file_existing_file_refused_untouched", "publish over it: %d, \"%s\"; the "
               "file %zu bytes before, %zu after, unchanged: %s", rc, err, nb, na,
               nb == na && memcmp(before, after, nb) == 0 ? "yes" : "no");
        unlink(path);
    }

    /* nobody publishes: the wait ends after its timeout with one line */
    {
        unsigned char id[ID_BYTES];
        double t0 = now_s();
        int rc = init_file_wait(path, id, ID_BYTES, 2, 0.3, err);
        double took = now_s() - t0;
        expect(rc == -1 && took >= 0.3 && took < 5.0 && strstr(err, "no NCCL id after 0.3 s") &&
               strstr(err, path) && strchr(err, '\n') == NULL,
               "init_file_wait_times_out_with_one_line", "%d after %.2f s: \"%s\"", rc, took, err);
    }

    /* files that are there but wrong: refused at once, not waited on */
    unsigned char good[512];
    size_t ng = published(path, good, sizeof(good));
    expect(ng == INIT_FILE_BYTES(ID_BYTES), "init_file_size", "%zu bytes (expected %d)", ng,
           INIT_FILE_BYTES(ID_BYTES));
    double took;
    {
        int rc = refused(path, good, ng / 2, 4, err, &took);
        expect(rc == -1 && took < 1.0 && strstr(err, "truncated"), "init_file_truncated_refused",
               "%zu of %zu bytes: %d after %.2f s, \"%s\"", ng / 2, ng, rc, took, err);
    }
    {
        unsigned char junk[200];
        for (int i = 0; i < 200; i++) junk[i] = (unsigned char)(i * 131 + 7);
        int rc = refused(path, junk, sizeof(junk), 4, err, &took);
        expect(rc == -1 && took < 1.0 && strstr(err, "not a seedgpt NCCL id file"),
               "init_file_garbage_refused", "200 bytes of garbage: %d after %.2f s, \"%s\"", rc,
               took, err);
    }
    {
        unsigned char bad[512];
        memcpy(bad, good, ng);
        bad[INIT_FILE_HEADER_BYTES + 17] ^= 0x40;   /* one bit of the id */
        int rc = refused(path, bad, ng, 4, err, &took);
        expect(rc == -1 && strstr(err, "checksum"), "init_file_corrupt_id_refused",
               "one bit of the id flipped: %d, \"%s\"", rc, err);
    }
    {
        int rc = refused(path, good, ng, 8, err, &took);
        expect(rc == -1 && strstr(err, "written for --world 4, this rank has --world 8"),
               "init_file_other_world_refused", "%d, \"%s\"", rc, err);
    }
    {
        unsigned char longer[600];
        memcpy(longer, good, ng);
        memset(longer + ng, 0, 16);
        int rc = refused(path, longer, ng + 16, 4, err, &took);
        expect(rc == -1 && strstr(err, "expected"), "init_file_trailing_bytes_refused",
               "16 bytes more: %d, \"%s\"", rc, err);
    }
    rmdir(dir);
    return test_finish();
}
