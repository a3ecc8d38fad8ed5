/* model/fsync_dir.h — durability of a rename: after writing PATH.tmp, fsyncing it and renaming it
 * to PATH, the folder holding PATH is fsynced too, so the new name survives a crash. Used by the
 * model-file and training-state writers. Best effort: a folder that cannot be opened is skipped. */
#ifndef SEEDGPT_FSYNC_DIR_H
#define SEEDGPT_FSYNC_DIR_H

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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

#endif
