/* util/err.h — the one-line error messages of the loaders and writers. A function that can fail
 * on bad input takes a `char err[256]` from its caller and, when it fails, writes there one line
 * naming what is wrong; the caller prints it and exits with status 2. err may be
 * NULL when the caller only wants the status. */
#ifndef SEEDGPT_ERR_H
#define SEEDGPT_ERR_H

#include <stdarg.h>
#include <stdio.h>

#define ERR_LEN 256

static inline void err_vprintf(char* err, const char* fmt, va_list ap) {
    if (err) vsnprintf(err, ERR_LEN, fmt, ap);
}

static inline void err_printf(char* err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void err_printf(char* err, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vprintf(err, fmt, ap);
    va_end(ap);
}

#endif
