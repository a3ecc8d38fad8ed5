/* util/fileio.h — the durable-write discipline shared by every writer of a file that must survive
 * a crash (model files, training states, token shards): write PATH.tmp, flush and fsync it, close
 * it, rename it over PATH, then fsync the folder so the new name itself survives. A failure at any
 * step leaves the previous PATH untouched and removes PATH.tmp.
 *
 * And the reading side's one rule: an input is opened only once it is known to be a regular file
 * (open_regular, fopen_regular), so that a FIFO or a device given as a shard, a model or a state
 * is refused in one line instead of blocking the open or being read forever.
 *
 * util/ depends on no other folder of seedgpt: data/ and model/ both include it (DESIGN §1). */
#ifndef SEEDGPT_FILEIO_H
#define SEEDGPT_FILEIO_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file that is not a regular file is, for messages: "a folder", "a FIFO", ... */
static inline const char* file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

/* Opens path read-only if it is a regular file. stat first, so that nothing else is opened at
 * all; then O_NONBLOCK, so that a path swapped for a FIFO meanwhile cannot block the open, and
 * fstat on what was opened; then the descriptor is made blocking again. Returns the descriptor,
 * or -1: *kind NULL and errno set when stat or open failed, *kind = file_kind(...) when the path
 * is not a regular file. */
static inline int open_regular(const char* path, const char** kind) {
    struct stat st;
    *kind = NULL;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISREG(st.st_mode)) { *kind = file_kind(st.st_mode); return -1; }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    int flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || flags < 0 ||
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) *kind = file_kind(st.st_mode);
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* open_regular as a stdio stream ("rb"); NULL as open_regular's -1. */
static inline FILE* fopen_regular(const char* path, const char** kind) {
    int fd = open_regular(path, kind);
    if (fd < 0) return NULL;
    FILE* f = fdopen(fd, "rb");
    if (f == NULL) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

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
