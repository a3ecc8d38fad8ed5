/* tests/fuzz/fuzz_common.h — what the libFuzzer targets share: every loader of seedgpt reads a
 * path, so each input is written to one temporary file per process first. */
#ifndef SEEDGPT_FUZZ_COMMON_H
#define SEEDGPT_FUZZ_COMMON_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path[256];

/* A mkstemp/mkdtemp template in $TMPDIR (tests/fuzz/run.sh points it into the build folder, so
 * that what a crashing run leaves behind is swept there), else /tmp. */
static inline void fuzz_template(char* buf, size_t cap, const char* name) {
    const char* t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/%s.XXXXXX", t && *t ? t : "/tmp", name);
}

/* The temporary file (removed at exit), created on first use. */
static void fuzz_cleanup(void) { if (fuzz_path[0]) unlink(fuzz_path); }

static inline const char* fuzz_file(const uint8_t* data, size_t size) {
    if (!fuzz_path[0]) {
        fuzz_template(fuzz_path, sizeof(fuzz_path), "seedgpt_fuzz");
        int fd = mkstemp(fuzz_path);
        if (fd < 0) { perror("mkstemp"); abort(); }
        close(fd);
        atexit(fuzz_cleanup);
    }
    int fd = open(fuzz_path, O_WRONLY | O_TRUNC);
    if (fd < 0) { perror(fuzz_path); abort(); }
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) { perror("write"); abort(); }
        done += (size_t)w;
    }
    close(fd);
    return fuzz_path;
}

/* A loader's message must be one line that names the file. */
static inline void fuzz_check_err(const char* err, const char* path) {
    if (err[0] == '\0' || strchr(err, '\n') != NULL || strstr(err, path) == NULL) {
        fprintf(stderr, "bad error message: \"%s\"\n", err);
        abort();
    }
}

#endif
