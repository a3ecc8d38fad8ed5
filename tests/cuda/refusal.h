// tests/cuda/refusal.h — the CUDA tests' check that a call refuses bad input with one line and a
// non-zero exit: the test runs itself again (/proc/self/exe FLAG WHICH) in a child whose stderr
// is caught, so the refusal's exit() ends the child, not the test.
#ifndef SEEDGPT_TEST_REFUSAL_H
#define SEEDGPT_TEST_REFUSAL_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/test.h"

// expects the child `argv0 flag which` to exit non-zero (not 127: it ran) with exactly one line on
// stderr that contains `words`
static void expect_refusal(const char* name, const char* argv0, const char* flag, const char* which,
                           const char* words) {
    char msg[512] = "";
    int fds[2];
    if (pipe(fds) != 0) { expect(0, name, "pipe failed"); return; }
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execl("/proc/self/exe", argv0, flag, which, (char*)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(msg) - 1 && (r = read(fds[0], msg + got, sizeof(msg) - 1 - got)) > 0) got += (size_t)r;
    msg[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    char* nl = strchr(msg, '\n');
    const int one_line = nl != NULL && nl[1] == '\0';
    if (nl) *nl = '\0';
    expect(code != 0 && code != 127 && one_line && strstr(msg, words) != NULL, name,
           "exit %d, stderr \"%s\"", code, msg);
}

#endif
