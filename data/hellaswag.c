/* data/hellaswag.c — the HellaSwag eval file's reader and validator, and the rows of its examples
 * (data/hellaswag.h). The whole file is read at once (HellaSwag's validation split is 3.6 MB) and
 * every record is checked before anything is scored, so a bad file is refused in one line before
 * the first forward. */
#include "data/hellaswag.h"
#include "util/fileio.h"
#include "util/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t le32(const unsigned char* p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

void hellaswag_free(HellaswagSet* s) {
    free(s->ex);
    free(s->words);
    memset(s, 0, sizeof(*s));
}

/* Reads the whole regular file path into *buf (*n bytes). 0, or non-zero with err set. */
static int read_whole(const char* path, unsigned char** buf, size_t* n, char err[256]) {
    const char* kind;
    FILE* f = fopen_regular(path, &kind);
    if (f == NULL) {
        if (kind != NULL) err_printf(err, "%s is %s; expected a HellaSwag eval file", path, kind);
        else err_printf(err, "cannot open %s: %s", path, strerror(errno));
        return 1;
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char* b = malloc(cap);
    while (b != NULL) {
        if (len == cap) {
            unsigned char* nb = cap > ((size_t)1 << 30) ? NULL : realloc(b, cap * 2);
            if (nb == NULL) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int bad = b == NULL || ferror(f);
    fclose(f);
    if (bad) {
        err_printf(err, "%s: %s", path, b == NULL ? "too large or out of memory" : "read failed");
        free(b);
        return 1;
    }
    *buf = b;
    *n = len;
    return 0;
}

int hellaswag_open(HellaswagSet* s, const char* path, char err[256]) {
    memset(s, 0, sizeof(*s));
    unsigned char* buf;
    size_t size;
    if (read_whole(path, &buf, &size, err) != 0) return 1;
    int rc = 1;
    if (size < HELLASWAG_HEADER_BYTES) {
        err_printf(err, "%s: truncated: %zu bytes, shorter than the %d-byte header of a HellaSwag eval "
                   "file", path, size, HELLASWAG_HEADER_BYTES);
        goto out;
    }
    int32_t magic = le32(buf), version = le32(buf + 4), count = le32(buf + 8), longest = le32(buf + 12);
    if (magic != HELLASWAG_MAGIC) {
        err_printf(err, "%s: not a HellaSwag eval file (magic %d, expected %d%s)", path, (int)magic,
                   HELLASWAG_MAGIC, magic == 20240520 ? "; this is a token shard" : "");
        goto out;
    }
    if (version != HELLASWAG_VERSION) {
        err_printf(err, "%s: HellaSwag eval file version %d, expected %d", path, (int)version,
                   HELLASWAG_VERSION);
        goto out;
    }
    if (count < 1 || count > HELLASWAG_MAX_EXAMPLES) {
        err_printf(err, "%s: the header says %d examples; expected 1 to %d", path, (int)count,
                   HELLASWAG_MAX_EXAMPLES);
        goto out;
    }
    if (longest < 2 * 15 || longest > 65535) {   /* 15 words: the smallest record */
        err_printf(err, "%s: the header's longest example is %d bytes; expected 30 to 65535", path,
                   (int)longest);
        goto out;
    }
    size_t nbytes = size - HELLASWAG_HEADER_BYTES;
    if (nbytes % 2 != 0) {
        err_printf(err, "%s: truncated: the records are %zu bytes, an odd number", path, nbytes);
        goto out;
    }
    size_t nw = nbytes / 2;
    s->words = malloc(nw ? nw * sizeof(uint16_t) : 1);
    s->ex = calloc((size_t)count, sizeof(HellaswagExample));
    if (s->words == NULL || s->ex == NULL) { err_printf(err, "%s: out of memory", path); goto out; }
    for (size_t i = 0; i < nw; i++)
        s->words[i] = (uint16_t)(buf[HELLASWAG_HEADER_BYTES + 2 * i] |
                                 buf[HELLASWAG_HEADER_BYTES + 2 * i + 1] << 8);
    size_t at = 0;   /* the word where the record being read starts */
    for (int i = 0; i < count; i++) {
        const uint16_t* w = s->words + at;
        size_t left = nw - at;   /* words from here to the end of the file */
        if (left < 3) {
            err_printf(err, "%s: truncated: the file ends before example %d of %d", path, i, (int)count);
            goto out;
        }
        if (w[0] != HELLASWAG_START) {
            err_printf(err, "%s: example %d does not start with the marker 65535 (found %u)", path, i,
                       (unsigned)w[0]);
            goto out;
        }
        size_t rec_bytes = w[1];
        if (rec_bytes % 2 != 0 || rec_bytes < 2 * 15) {
            err_printf(err, "%s: example %d says it is %zu bytes; expected an even number, at least 30",
                       path, i, rec_bytes);
            goto out;
        }
        if (rec_bytes > (size_t)longest) {
            err_printf(err, "%s: example %d is %zu bytes, longer than the header's longest, %d", path,
                       i, rec_bytes, (int)longest);
            goto out;
        }
        size_t rec = rec_bytes / 2;   /* words of this record */
        if (rec > left) {
            err_printf(err, "%s: truncated: example %d needs %zu bytes, %zu are left", path, i,
                       rec_bytes, 2 * left);
            goto out;
        }
        if (w[2] != (unsigned)i) {
            err_printf(err, "%s: example %d carries the index %u", path, i, (unsigned)w[2]);
            goto out;
        }
        HellaswagExample* e = &s->ex[i];
        e->label = w[3];
        if (w[4] != HELLASWAG_ENDINGS) {
            err_printf(err, "%s: example %d has %u endings; expected %d", path, i, (unsigned)w[4],
                       HELLASWAG_ENDINGS);
            goto out;
        }
        if (e->label >= HELLASWAG_ENDINGS) {
            err_printf(err, "%s: example %d has label %d; expected 0 to %d", path, i, e->label,
                       HELLASWAG_ENDINGS - 1);
            goto out;
        }
        size_t p = 5;   /* the next word of the record */
        e->ctx_len = w[p++];
        if (e->ctx_len < 1 || p + (size_t)e->ctx_len > rec) {
            err_printf(err, "%s: example %d: its context of %d tokens %s", path, i, e->ctx_len,
                       e->ctx_len < 1 ? "is empty" : "runs past the record");
            goto out;
        }
        e->ctx = w + p;
        p += (size_t)e->ctx_len;
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
            if (p >= rec) {
                err_printf(err, "%s: example %d: the record ends before ending %d", path, i, k);
                goto out;
            }
            e->end_len[k] = w[p++];
            if (e->end_len[k] < 1 || p + (size_t)e->end_len[k] > rec) {
                err_printf(err, "%s: example %d: ending %d of %d tokens %s", path, i, k, e->end_len[k],
                           e->end_len[k] < 1 ? "is empty" : "runs past the record");
                goto out;
            }
            e->end[k] = w + p;
            p += (size_t)e->end_len[k];
            int len = hellaswag_row_len(e, k);
            if (len > s->longest_row) s->longest_row = len;
        }
        if (p != rec) {
            err_printf(err, "%s: example %d says it is %zu bytes; its fields take %zu", path, i,
                       rec_bytes, 2 * p);
            goto out;
        }
        for (int k = -1; k < HELLASWAG_ENDINGS; k++) {   /* the context (-1), then each ending */
            const uint16_t* tok = k < 0 ? e->ctx : e->end[k];
            int len = k < 0 ? e->ctx_len : e->end_len[k];
            for (int t = 0; t < len; t++) {
                if (tok[t] == HELLASWAG_START) {
                    err_printf(err, "%s: example %d holds the token id 65535, which is the start "
                               "marker", path, i);
                    goto out;
                }
                if (tok[t] > s->max_token) s->max_token = tok[t];
            }
        }
        at += rec;
    }
    if (at != nw) {
        err_printf(err, "%s: %zu bytes follow the last of its %d examples", path, 2 * (nw - at),
                   (int)count);
        goto out;
    }
    s->num_examples = count;
    rc = 0;
out:
    free(buf);
    if (rc != 0) hellaswag_free(s);
    return rc;
}

int hellaswag_rows_len(const HellaswagSet* s, int first, int n) {
    int T = 1;
    for (int i = first; i < first + n; i++)
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
            int len = hellaswag_row_len(&s->ex[i], k);
            if (len > T) T = len;
        }
    return T;
}

void hellaswag_fill_rows(const HellaswagSet* s, int first, int n, int T, int* inputs, int* targets,
                         int* comp_first, int* comp_len, int* labels) {
    for (int i = 0; i < n; i++) {
        const HellaswagExample* e = &s->ex[first + i];
        labels[i] = e->label;
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
            int r = HELLASWAG_ENDINGS * i + k, len = hellaswag_row_len(e, k);
            int* in = inputs + (size_t)r * T;
            int* tg = targets + (size_t)r * T;
            /* token t of the row (context then ending), t < ctx + m */
#define ROW_TOKEN(t) ((t) < e->ctx_len ? e->ctx[(t)] : e->end[k][(t) - e->ctx_len])
            for (int t = 0; t < T; t++) {
                in[t] = t < len ? ROW_TOKEN(t) : 0;
                tg[t] = t < len ? ROW_TOKEN(t + 1) : 0;
            }
#undef ROW_TOKEN
            /* the targets that are ending tokens: the last context token predicts the first */
            comp_first[r] = e->ctx_len - 1;
            comp_len[r] = e->end_len[k];
        }
    }
}
