/* util/fileio.h — the durable-write discipline shared by every writer of a file that must survive
 * a crash (model files, training states, token shards): write PATH.tmp, flush and fsync it, close
 * it, rename it over PATH, then fsync the folder so the new name itself survives. A failure at any
 * step leaves the previous PATH untouched and removes PATH.tmp.
 *
 * util/ depends on no other folder of seedgpt: data/ and model/ both include it (DESIGN §1). */
#ifndef SEEDGPT_FILEIO_H
#define SEEDGPT_FILEIO_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* fsync of a folder. Best effort: some filesystems refuse it, and the rename already happened. */
static inline void fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* fsync of the folder holding path. */
static inline void fsync_parent_dir(const char* path) {
    char dir[4096];
    const char* slash = strrchr(path, '/');
    if (slash == NULL) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof(dir)) return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    fsync_dir(dir);
}

/* tmp = PATH.tmp; -1 if it does not fit in cap bytes. */
static inline int tmp_path_of(char* tmp, size_t cap, const char* path) {
    return snprintf(tmp, cap, "%s.tmp", path) >= (int)cap ? -1 : 0;
}

/* The end of a durable write of f, opened on tmp: flush, fsync, close, rename tmp over path, fsync
 * the folder. f is closed in every case. Returns NULL, or the step that failed ("write" for the
 * flush, "fsync", "close", "rename"; `failed` the caller's own earlier failure, if not NULL) with
 * *saved_errno set and tmp removed. */
static inline const char* commit_tmp_file(FILE* f, const char* tmp, const char* path,
                                          const char* failed, int* saved_errno) {
    *saved_errno = 0;
    if (failed == NULL && fflush(f) != 0) failed = "write";
    if (failed == NULL && fsync(fileno(f)) != 0) failed = "fsync";
    if (failed != NULL) *saved_errno = errno;
    if (fclose(f) != 0 && failed == NULL) { failed = "close"; *saved_errno = errno; }
    if (failed == NULL && rename(tmp, path) != 0) { failed = "rename"; *saved_errno = errno; }
    if (failed != NULL) {
        unlink(tmp);
        return failed;
    }
    fsync_parent_dir(path);
    return NULL;
}

#endif
