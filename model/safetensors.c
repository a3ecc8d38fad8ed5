/* model/safetensors.c — reading and writing safetensors files (model/safetensors.h), with a small
 * JSON reader of its own: strings (every escape, \u pairs included), non-negative integers,
 * objects and arrays; any other value is only skipped over. Nesting is bounded, so a hostile
 * header cannot exhaust the stack.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "model/safetensors.h"
#include "util/fileio.h"
#include "util/err.h"

static const char* const dtype_names[ST_NUM_DTYPES] = {
    "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL",
    "F8_E4M3", "F8_E5M2"};
static const int dtype_sizes[ST_NUM_DTYPES] = {4, 2, 2, 8, 8, 4, 2, 1, 8, 4, 2, 1, 1, 1, 1};

const char* st_dtype_name(int dtype) {
    return dtype >= 0 && dtype < ST_NUM_DTYPES ? dtype_names[dtype] : "?";
}
int st_dtype_bytes(int dtype) { return dtype >= 0 && dtype < ST_NUM_DTYPES ? dtype_sizes[dtype] : 0; }

/* One line into err[256] (vsnprintf: a long path is cut, never overrun). */
/* A name from a hostile header, fit for a one-line message: printable ASCII kept, the rest '?',
 * at most 60 characters. */
static const char* shown(const char* name, char out[64]) {
    size_t i = 0;
    for (; name[i] && i < 60; i++) {
        unsigned char ch = (unsigned char)name[i];
        out[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    if (name[i]) { out[i - 3] = out[i - 2] = out[i - 1] = '.'; }
    out[i] = '\0';
    return out;
}

/* ---- JSON -------------------------------------------------------------------------------- */

typedef struct {
    const char* s;
    size_t n, i;
    const char* why;     /* what was wrong, for the message */
} Json;

#define JSON_MAX_DEPTH 64

static void ws(Json* j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' ||
                           j->s[j->i] == '\r'))
        j->i++;
}

static int expect(Json* j, char ch, const char* why) {
    ws(j);
    if (j->i < j->n && j->s[j->i] == ch) { j->i++; return 0; }
    j->why = why;
    return -1;
}

static int hex4(Json* j, uint32_t* v) {
    if (j->n - j->i < 4) return -1;
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = j->s[j->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A string at j->i (after white space) into out (cap bytes with the NUL; out NULL: skipped).
 * 0, or -1 with j->why. A NUL character (\u0000) is refused: names are C strings here. */
static int json_string(Json* j, char* out, size_t cap) {
    if (expect(j, '"', "expected a string") != 0) return -1;
    size_t len = 0;
    for (;;) {
        if (j->i >= j->n) { j->why = "unterminated string"; return -1; }
        unsigned char c = (unsigned char)j->s[j->i++];
        uint32_t cp;
        if (c == '"') break;
        if (c < 0x20) { j->why = "control character in a string"; return -1; }
        if (c != '\\') {
            if (out) { if (len + 1 >= cap) { j->why = "string too long"; return -1; } out[len] = (char)c; }
            len++;
            continue;
        }
        if (j->i >= j->n) { j->why = "unterminated string"; return -1; }
        char e = j->s[j->i++];
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = 8; break;
        case 'f': cp = 12; break;
        case 'n': cp = 10; break;
        case 'r': cp = 13; break;
        case 't': cp = 9; break;
        case 'u':
            if (hex4(j, &cp) != 0) { j->why = "bad \\u escape"; return -1; }
            if (cp >= 0xd800 && cp < 0xdc00) {   /* a high surrogate: its low one must follow */
                uint32_t lo;
                if (j->n - j->i < 2 || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u') {
                    j->why = "lone surrogate in a \\u escape";
                    return -1;
                }
                j->i += 2;
                if (hex4(j, &lo) != 0 || lo < 0xdc00 || lo >= 0xe000) {
                    j->why = "bad surrogate pair in a \\u escape";
                    return -1;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                j->why = "lone surrogate in a \\u escape";
                return -1;
            }
            if (cp == 0) { j->why = "NUL character in a string"; return -1; }
            break;
        default:
            j->why = "bad escape in a string";
            return -1;
        }
        unsigned char u[4];
        int k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (k == 1) u[0] = (unsigned char)cp;
        else if (k == 2) { u[0] = (unsigned char)(0xc0 | cp >> 6); u[1] = (unsigned char)(0x80 | (cp & 0x3f)); }
        else if (k == 3) {
            u[0] = (unsigned char)(0xe0 | cp >> 12); u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
            u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        } else {
            u[0] = (unsigned char)(0xf0 | cp >> 18); u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
            u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f)); u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        }
        if (out) {
            if (len + (size_t)k >= cap) { j->why = "string too long"; return -1; }
            memcpy(out + len, u, (size_t)k);
        }
        len += (size_t)k;
    }
    if (out) out[len] = '\0';
    return 0;
}

/* A non-negative integer (no sign, fraction or exponent; no leading zero) that fits int64. */
static int json_uint(Json* j, uint64_t* v) {
    ws(j);
    size_t start = j->i;
    uint64_t x = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i] - '0');
        if (x > (uint64_t)(INT64_MAX - d) / 10) { j->why = "integer too large"; return -1; }
        x = x * 10 + d;
        j->i++;
    }
    if (j->i == start) { j->why = "expected a non-negative integer"; return -1; }
    if (j->s[start] == '0' && j->i - start > 1) { j->why = "integer with a leading zero"; return -1; }
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->why = "expected an integer, not a fraction";
        return -1;
    }
    *v = x;
    return 0;
}

/* Skips any one JSON value. */
static int json_skip(Json* j, int depth) {
    if (depth > JSON_MAX_DEPTH) { j->why = "nesting too deep"; return -1; }
    ws(j);
    if (j->i >= j->n) { j->why = "unexpected end of the header"; return -1; }
    char c = j->s[j->i];
    if (c == '"') return json_string(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->i++;
        ws(j);
        if (j->i < j->n && j->s[j->i] == close) { j->i++; return 0; }
        for (;;) {
            if (c == '{') {
                if (json_string(j, NULL, 0) != 0 || expect(j, ':', "expected ':'") != 0) return -1;
            }
            if (json_skip(j, depth + 1) != 0) return -1;
            ws(j);
            if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
            return expect(j, close, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    static const char* const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t L = strlen(words[k]);
        if (j->n - j->i >= L && memcmp(j->s + j->i, words[k], L) == 0) { j->i += L; return 0; }
    }
    /* a number: -? digits (. digits)? ([eE] [+-]? digits)? */
    size_t start = j->i;
    if (j->s[j->i] == '-') j->i++;
    size_t d0 = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    if (j->i == d0) { j->i = start; j->why = "expected a value"; return -1; }
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        size_t f0 = j->i;
        while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
        if (j->i == f0) { j->why = "bad number"; return -1; }
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        size_t e0 = j->i;
        while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
        if (j->i == e0) { j->why = "bad number"; return -1; }
    }
    return 0;
}

/* Calls field(j, key, ctx) for each member of the object at j->i, which must read the value.
 * 0, or -1 with j->why. */
static int json_object(Json* j, int (*field)(Json*, const char*, void*), void* ctx) {
    char key[ST_MAX_NAME];
    if (expect(j, '{', "expected an object") != 0) return -1;
    ws(j);
    if (j->i < j->n && j->s[j->i] == '}') { j->i++; return 0; }
    for (;;) {
        if (json_string(j, key, sizeof(key)) != 0) return -1;
        if (expect(j, ':', "expected ':'") != 0) return -1;
        if (field(j, key, ctx) != 0) return -1;
        ws(j);
        if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
        return expect(j, '}', "expected ',' or '}'");
    }
}

/* ---- the header ---------------------------------------------------------------------------- */

typedef struct {
    StFile* sf;
    int cap;
    StTensor* cur;
    int seen;            /* bits: 1 dtype, 2 shape, 4 data_offsets */
    int metadata_seen;
} HeaderCtx;

static int metadata_field(Json* j, const char* key, void* ctx) {
    (void)key; (void)ctx;
    return json_string(j, NULL, 0) == 0 ? 0 : (j->why = "__metadata__ values must be strings", -1);
}

static int tensor_field(Json* j, const char* key, void* vctx) {
    HeaderCtx* h = vctx;
    StTensor* t = h->cur;
    if (!strcmp(key, "dtype")) {
        if (h->seen & 1) { j->why = "field dtype twice"; return -1; }
        h->seen |= 1;
        char d[16];
        if (json_string(j, d, sizeof(d)) != 0) { j->why = "dtype: expected a short string"; return -1; }
        for (t->dtype = 0; t->dtype < ST_NUM_DTYPES; t->dtype++)
            if (!strcmp(d, dtype_names[t->dtype])) return 0;
        j->why = "unknown dtype";
        return -1;
    }
    if (!strcmp(key, "shape")) {
        if (h->seen & 2) { j->why = "field shape twice"; return -1; }
        h->seen |= 2;
        if (expect(j, '[', "shape: expected an array") != 0) return -1;
        t->ndim = 0;
        ws(j);
        if (j->i < j->n && j->s[j->i] == ']') { j->i++; return 0; }
        for (;;) {
            uint64_t d;
            if (t->ndim == ST_MAX_DIMS) { j->why = "shape: more than 8 dimensions"; return -1; }
            if (json_uint(j, &d) != 0) return -1;
            t->shape[t->ndim++] = (int64_t)d;
            ws(j);
            if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
            return expect(j, ']', "shape: expected ',' or ']'");
        }
    }
    if (!strcmp(key, "data_offsets")) {
        if (h->seen & 4) { j->why = "field data_offsets twice"; return -1; }
        h->seen |= 4;
        if (expect(j, '[', "data_offsets: expected [BEGIN, END]") != 0 || json_uint(j, &t->begin) != 0 ||
            expect(j, ',', "data_offsets: expected [BEGIN, END]") != 0 || json_uint(j, &t->end) != 0 ||
            expect(j, ']', "data_offsets: expected [BEGIN, END]") != 0)
            return -1;
        return 0;
    }
    j->why = "unknown field in a tensor (expected dtype, shape, data_offsets)";
    return -1;
}

static int header_field(Json* j, const char* key, void* vctx) {
    HeaderCtx* h = vctx;
    if (!strcmp(key, "__metadata__")) {
        if (h->metadata_seen++) { j->why = "__metadata__ twice"; return -1; }
        return json_object(j, metadata_field, NULL);
    }
    StFile* sf = h->sf;
    if (sf->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        StTensor* t = realloc(sf->t, (size_t)cap * sizeof(StTensor));
        if (t == NULL) { j->why = "out of memory"; return -1; }
        sf->t = t;
        h->cap = cap;
    }
    StTensor* t = &sf->t[sf->n];
    memset(t, 0, sizeof(*t));
    if (strlen(key) >= sizeof(t->name)) { j->why = "tensor name too long"; return -1; }
    strcpy(t->name, key);
    h->cur = t;
    h->seen = 0;
    if (json_object(j, tensor_field, h) != 0) return -1;
    if (h->seen != 7) {
        j->why = !(h->seen & 1) ? "a tensor without dtype" : !(h->seen & 2) ? "a tensor without shape"
                                                            : "a tensor without data_offsets";
        return -1;
    }
    sf->n++;
    return 0;
}

static int by_name(const void* a, const void* b) {
    return strcmp(((const StTensor*)a)->name, ((const StTensor*)b)->name);
}
static int by_offset(const void* a, const void* b) {
    const StTensor *x = *(const StTensor* const*)a, *y = *(const StTensor* const*)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int fail(StFile* sf, char err[256], const char* fmt_what, const char* detail) {
    err_printf(err, "%s: not a valid safetensors file: %s%s%s", sf->path, fmt_what,
             detail ? ": " : "", detail ? detail : "");
    if (sf->f) fclose(sf->f);
    free(sf->t);
    memset(sf, 0, sizeof(*sf));
    return -1;
}

/* Sizes, offsets and coverage of the parsed tensors (st_open's rules). */
static int check_tensors(StFile* sf, char err[256]) {
    char nm[64], msg[200];
    for (int i = 0; i < sf->n; i++) {
        StTensor* t = &sf->t[i];
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] == 0) numel = 0;
        for (int d = 0; d < t->ndim && numel != 0; d++) {
            uint64_t s = (uint64_t)t->shape[d];
            if (s != 0 && numel > sf->data_bytes / s) {   /* more elements than the buffer holds */
                numel = UINT64_MAX;
                break;
            }
            numel *= s;
        }
        t->numel = numel;
        if (t->begin > t->end || t->end > sf->data_bytes) {
            snprintf(msg, sizeof(msg), "tensor %s: data_offsets [%llu, %llu] run past the %llu-byte "
                     "buffer", shown(t->name, nm), (unsigned long long)t->begin,
                     (unsigned long long)t->end, (unsigned long long)sf->data_bytes);
            if (t->begin > t->end)
                snprintf(msg, sizeof(msg), "tensor %s: data_offsets [%llu, %llu] end before they "
                         "begin", shown(t->name, nm), (unsigned long long)t->begin,
                         (unsigned long long)t->end);
            return fail(sf, err, msg, NULL);
        }
        if (numel == UINT64_MAX || t->end - t->begin != numel * (uint64_t)dtype_sizes[t->dtype]) {
            snprintf(msg, sizeof(msg), "tensor %s: %llu bytes at data_offsets, but its shape and "
                     "dtype %s make %s", shown(t->name, nm),
                     (unsigned long long)(t->end - t->begin), dtype_names[t->dtype],
                     numel == UINT64_MAX ? "more than the buffer" : "another count");
            return fail(sf, err, msg, NULL);
        }
    }
    /* no name twice */
    StTensor* copy = malloc((size_t)(sf->n ? sf->n : 1) * sizeof(StTensor));
    const StTensor** order = malloc((size_t)(sf->n ? sf->n : 1) * sizeof(StTensor*));
    if (copy == NULL || order == NULL) {
        free(copy); free(order);
        return fail(sf, err, "out of memory", NULL);
    }
    memcpy(copy, sf->t, (size_t)sf->n * sizeof(StTensor));
    qsort(copy, (size_t)sf->n, sizeof(StTensor), by_name);
    for (int i = 1; i < sf->n; i++) {
        if (!strcmp(copy[i].name, copy[i - 1].name)) {
            snprintf(msg, sizeof(msg), "tensor %s named twice", shown(copy[i].name, nm));
            free(copy); free(order);
            return fail(sf, err, msg, NULL);
        }
    }
    free(copy);
    /* the tensors, in offset order, cover the buffer exactly: no overlap, no hole */
    for (int i = 0; i < sf->n; i++) order[i] = &sf->t[i];
    qsort(order, (size_t)sf->n, sizeof(StTensor*), by_offset);
    uint64_t at = 0;
    for (int i = 0; i < sf->n; i++) {
        const StTensor* t = order[i];
        if (t->begin < at || t->begin > at) {
            snprintf(msg, sizeof(msg), "tensor %s: data_offsets [%llu, %llu] %s the previous "
                     "tensor's end at byte %llu", shown(t->name, nm), (unsigned long long)t->begin,
                     (unsigned long long)t->end, t->begin < at ? "overlap" : "leave a hole after",
                     (unsigned long long)at);
            free(order);
            return fail(sf, err, msg, NULL);
        }
        at = t->end;
    }
    free(order);
    if (at != sf->data_bytes) {
        snprintf(msg, sizeof(msg), "the tensors end at byte %llu of the %llu-byte buffer",
                 (unsigned long long)at, (unsigned long long)sf->data_bytes);
        return fail(sf, err, msg, NULL);
    }
    return 0;
}

int st_open(StFile* sf, const char* path, char err[256]) {
    memset(sf, 0, sizeof(*sf));
    snprintf(sf->path, sizeof(sf->path), "%s", path);
    const uint16_t probe = 1;
    if (*(const unsigned char*)&probe != 1) {
        err_printf(err, "%s: safetensors files are little-endian; this host is not", path);
        return -1;
    }
    const char* kind;
    sf->f = fopen_regular(path, &kind);
    if (sf->f == NULL) {
        if (kind != NULL)
            err_printf(err, "%s: not a regular file (%s): expected a safetensors file", path, kind);
        else err_printf(err, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(sf->f), &st) != 0) return fail(sf, err, "cannot stat", strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (size < 8 || fread(len8, 1, 8, sf->f) != 8) return fail(sf, err, "shorter than its 8-byte header length", NULL);
    uint64_t N = 0;
    for (int k = 7; k >= 0; k--) N = N << 8 | len8[k];
    char msg[200];
    if (N > ST_MAX_HEADER) {
        snprintf(msg, sizeof(msg), "header length %llu is over the format's limit of %llu bytes",
                 (unsigned long long)N, ST_MAX_HEADER);
        return fail(sf, err, msg, NULL);
    }
    if (N > size - 8) {
        snprintf(msg, sizeof(msg), "truncated: header length %llu, but the file has %llu bytes after it",
                 (unsigned long long)N, (unsigned long long)(size - 8));
        return fail(sf, err, msg, NULL);
    }
    char* text = malloc(N ? N : 1);
    if (text == NULL) return fail(sf, err, "out of memory for the header", NULL);
    if (fread(text, 1, N, sf->f) != N) { free(text); return fail(sf, err, "read error", strerror(errno)); }
    sf->data_start = 8 + N;
    sf->data_bytes = size - sf->data_start;
    Json j = {text, N, 0, NULL};
    HeaderCtx h = {sf, 0, NULL, 0, 0};
    if (N == 0 || text[0] != '{') j.why = "the header is not a JSON object";
    else if (json_object(&j, header_field, &h) == 0) {
        ws(&j);
        if (j.i != j.n) j.why = "bytes after the header's JSON object";
    }
    if (j.why != NULL) {
        snprintf(msg, sizeof(msg), "bad header JSON at byte %zu of %llu", j.i, (unsigned long long)N);
        free(text);
        return fail(sf, err, msg, j.why);
    }
    free(text);
    return check_tensors(sf, err);
}

void st_close(StFile* sf) {
    if (sf->f) fclose(sf->f);
    free(sf->t);
    memset(sf, 0, sizeof(*sf));
}

const StTensor* st_find(const StFile* sf, const char* name) {
    for (int i = 0; i < sf->n; i++)
        if (!strcmp(sf->t[i].name, name)) return &sf->t[i];
    return NULL;
}

float st_f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | m << 13;            /* infinity, NaN (payload kept) */
    } else if (e != 0) {
        u = sign | (e + 112) << 23 | m << 13;       /* normal: exponent bias 15 -> 127 */
    } else if (m == 0) {
        u = sign;                                    /* zero */
    } else {
        /* subnormal m * 2^-24: shift the leading one up to bit 10, one exponent step each */
        uint32_t sh = 0;
        while (!(m & 0x400u)) { m <<= 1; sh++; }
        u = sign | (113 - sh) << 23 | (m & 0x3ffu) << 13;
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int st_read_f32(StFile* sf, const StTensor* t, float* dst, char err[256]) {
    char nm[64];
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        err_printf(err, "%s: tensor %s has dtype %s; expected F32, F16 or BF16", sf->path,
                 shown(t->name, nm), dtype_names[t->dtype]);
        return -1;
    }
    if (fseeko(sf->f, (off_t)(sf->data_start + t->begin), SEEK_SET) != 0) {
        err_printf(err, "%s: cannot seek to tensor %s: %s", sf->path, shown(t->name, nm), strerror(errno));
        return -1;
    }
    int eb = dtype_sizes[t->dtype];
    enum { CHUNK = 16384 };
    unsigned char buf[CHUNK * 4];
    for (uint64_t at = 0; at < t->numel;) {
        size_t k = t->numel - at < CHUNK ? (size_t)(t->numel - at) : CHUNK;
        if (fread(buf, (size_t)eb, k, sf->f) != k) {
            err_printf(err, "%s: read error in tensor %s: %s", sf->path, shown(t->name, nm),
                     ferror(sf->f) ? strerror(errno) : "unexpected end of file");
            return -1;
        }
        for (size_t i = 0; i < k; i++) {
            if (eb == 4) {
                memcpy(&dst[at + i], buf + 4 * i, 4);
            } else {
                uint16_t b = (uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8);
                if (t->dtype == ST_F16) {
                    dst[at + i] = st_f16_to_float(b);
                } else {
                    uint32_t u = (uint32_t)b << 16;
                    memcpy(&dst[at + i], &u, 4);
                }
            }
        }
        at += k;
    }
    return 0;
}

/* ---- writing ----------------------------------------------------------------------------- */

/* Appends to a growing buffer; returns -1 when out of memory. */
typedef struct { char* s; size_t n, cap; } Buf;
static int put(Buf* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(Buf* b, const char* fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return -1;
        if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return 0; }
        size_t cap = (b->cap ? 2 * b->cap : 4096) + (size_t)k;
        char* s = realloc(b->s, cap);
        if (s == NULL) return -1;
        b->s = s;
        b->cap = cap;
    }
}

unsigned char* st_header(const StEntry* e, int n, const char* metadata_json, size_t* len) {
    Buf b = {NULL, 0, 0};
    int bad = put(&b, "{");
    if (metadata_json != NULL) bad |= put(&b, "\"__metadata__\":%s", metadata_json);
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        bad |= put(&b, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i || metadata_json ? "," : "",
                   e[i].name, dtype_names[e[i].dtype]);
        for (int d = 0; d < e[i].ndim; d++) {
            bad |= put(&b, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
            numel *= (uint64_t)e[i].shape[d];
        }
        uint64_t end = at + numel * (uint64_t)dtype_sizes[e[i].dtype];
        bad |= put(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)end);
        at = end;
    }
    bad |= put(&b, "}");
    while (!bad && (8 + b.n) % 8 != 0) bad |= put(&b, " ");
    if (bad) { free(b.s); return NULL; }
    unsigned char* out = malloc(8 + b.n);
    if (out == NULL) { free(b.s); return NULL; }
    for (int k = 0; k < 8; k++) out[k] = (unsigned char)((uint64_t)b.n >> (8 * k));
    memcpy(out + 8, b.s, b.n);
    *len = 8 + b.n;
    free(b.s);
    return out;
}

/* ---- config.json --------------------------------------------------------------------------- */

typedef struct {
    const char* key;
    int kind;            /* 0 integer, 1 string */
    long long* ival;
    char* sval;
    size_t cap;
    int found;           /* 1 found, 0 absent or null, -1 another kind of value */
} FindCtx;

static int find_field(Json* j, const char* key, void* vctx) {
    FindCtx* c = vctx;
    if (strcmp(key, c->key) != 0) return json_skip(j, 1);
    ws(j);
    if (j->n - j->i >= 4 && memcmp(j->s + j->i, "null", 4) == 0) { c->found = 0; j->i += 4; return 0; }
    if (c->kind == 0) {
        int neg = j->i < j->n && j->s[j->i] == '-';
        if (neg) j->i++;
        uint64_t v;
        Json probe = *j;
        if (json_uint(&probe, &v) == 0) {
            *j = probe;
            *c->ival = neg ? -(long long)v : (long long)v;
            c->found = 1;
            return 0;
        }
        if (neg) j->i--;
    } else if (j->i < j->n && j->s[j->i] == '"') {
        Json probe = *j;
        if (json_string(&probe, c->sval, c->cap) == 0) { *j = probe; c->found = 1; return 0; }
    }
    c->found = -1;
    return json_skip(j, 1);
}

static int json_find(const char* text, size_t n, FindCtx* c) {
    Json j = {text, n, 0, NULL};
    c->found = 0;
    if (json_object(&j, find_field, c) != 0) return -1;
    ws(&j);
    if (j.i != j.n) return -1;
    return c->found;
}

int st_json_int(const char* text, size_t n, const char* key, long long* out) {
    FindCtx c = {key, 0, out, NULL, 0, 0};
    return json_find(text, n, &c);
}

int st_json_string(const char* text, size_t n, const char* key, char* out, size_t cap) {
    FindCtx c = {key, 1, NULL, out, cap, 0};
    return json_find(text, n, &c);
}
