/* dist/init_file.c — the NCCL id's file handshake (init_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "dist/init_file.h"

enum { VERSION = 1, POLL_MS = 50 };

static uint64_t fnv1a(const unsigned char* p, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void put_u32(unsigned char* p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get_u32(const unsigned char* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static int write_all(int fd, const unsigned char* p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int init_file_publish(const char* path, const void* id, size_t n, int world, char err[256]) {
    size_t total = INIT_FILE_BYTES(n);
    unsigned char* buf = calloc(1, total);
    char tmp[4200];
    if (buf == NULL) {
        snprintf(err, 256, "--init-file %s: out of memory", path);
        return -1;
    }
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        snprintf(err, 256, "--init-file %s: path too long", path);
        free(buf);
        return -1;
    }
    memcpy(buf, INIT_FILE_MAGIC, 8);
    put_u32(buf + 8, VERSION);
    put_u32(buf + 12, (uint32_t)world);
    put_u32(buf + 16, (uint32_t)n);
    memcpy(buf + INIT_FILE_HEADER_BYTES, id, n);
    uint64_t h = fnv1a(buf, INIT_FILE_HEADER_BYTES + n);
    memcpy(buf + INIT_FILE_HEADER_BYTES + n, &h, 8);

    struct stat st;
    if (stat(path, &st) == 0) {
        snprintf(err, 256, "--init-file %s: the file exists (left by an earlier start?): rank 0 "
                 "never overwrites it; remove it or give each job a fresh path", path);
        free(buf);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        snprintf(err, 256, "--init-file %s: cannot create its temporary file: %s", path,
                 strerror(errno));
        free(buf);
        return -1;
    }
    int bad = write_all(fd, buf, total) != 0 || fsync(fd) != 0;
    int saved = errno;
    if (close(fd) != 0 && !bad) { bad = 1; saved = errno; }
    free(buf);
    if (bad) {
        unlink(tmp);
        snprintf(err, 256, "--init-file %s: writing its temporary file failed: %s", path,
                 strerror(saved));
        return -1;
    }
    /* link, not rename: an existing path (another job's, or an earlier start's) stays as it is */
    if (link(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        if (saved == EEXIST)
            snprintf(err, 256, "--init-file %s: the file appeared while it was being written "
                     "(another rank 0 on the same path?): rank 0 never overwrites it", path);
        else
            snprintf(err, 256, "--init-file %s: cannot link its temporary file to it: %s", path,
                     strerror(saved));
        return -1;
    }
    unlink(tmp);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The whole file at path, checked: 0, or -1 with err. */
static int read_checked(const char* path, void* id, size_t n, int world, char err[256]) {
    size_t want = INIT_FILE_BYTES(n);
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, 256, "--init-file %s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    size_t size = fstat(fileno(f), &st) == 0 ? (size_t)st.st_size : 0;
    unsigned char* buf = malloc(want + 1);
    size_t got = buf != NULL ? fread(buf, 1, want + 1, f) : 0;   /* want + 1: more is wrong */
    fclose(f);
    int rc = -1;
    if (buf == NULL) {
        snprintf(err, 256, "--init-file %s: out of memory", path);
    } else if (got < 8 || memcmp(buf, INIT_FILE_MAGIC, 8) != 0) {
        snprintf(err, 256, "--init-file %s: not a seedgpt NCCL id file (no %s magic; %zu "
                 "bytes)", path, INIT_FILE_MAGIC, size);
    } else if (got != want) {
        snprintf(err, 256, "--init-file %s: %zu bytes, expected %zu: truncated or not a seedgpt "
                 "NCCL id file of a %zu-byte id", path, size, want, n);
    } else if (get_u32(buf + 8) != VERSION || get_u32(buf + 16) != (uint32_t)n) {
        snprintf(err, 256, "--init-file %s: version %u with a %u-byte id, expected version %d "
                 "with %zu bytes", path, get_u32(buf + 8), get_u32(buf + 16), VERSION, n);
    } else {
        uint64_t h;
        memcpy(&h, buf + INIT_FILE_HEADER_BYTES + n, 8);
        if (h != fnv1a(buf, INIT_FILE_HEADER_BYTES + n)) {
            snprintf(err, 256, "--init-file %s: checksum mismatch: the file is corrupt", path);
        } else if (get_u32(buf + 12) != (uint32_t)world) {
            snprintf(err, 256, "--init-file %s: written for --world %u, this rank has --world %d "
                     "(a file from another job?)", path, get_u32(buf + 12), world);
        } else {
            memcpy(id, buf + INIT_FILE_HEADER_BYTES, n);
            rc = 0;
        }
    }
    free(buf);
    return rc;
}

int init_file_wait(const char* path, void* id, size_t n, int world, double timeout_s,
                   char err[256]) {
    double t0 = now_s();
    for (;;) {
        struct stat st;
        if (stat(path, &st) == 0) return read_checked(path, id, n, world, err);
        if (errno != ENOENT) {
            snprintf(err, 256, "--init-file %s: %s", path, strerror(errno));
            return -1;
        }
        if (now_s() - t0 >= timeout_s) {
            snprintf(err, 256, "--init-file %s: no NCCL id after %g s: is rank 0 running, with "
                     "the same --init-file on a file system this machine shares?", path,
                     timeout_s);
            return -1;
        }
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}
