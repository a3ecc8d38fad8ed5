/* model/safetensors.h — the safetensors file format, read with every check its definition allows,
 * and written (docs/formats.md "safetensors").
 *
 * The format: an unsigned 64-bit little-endian N; N bytes of a JSON object, UTF-8, that maps each
 * tensor's name to {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [BEGIN, END]}, plus
 * an optional "__metadata__" object of string values; then the byte buffer. Offsets count from
 * the buffer's first byte, END excluded; a tensor's bytes are its elements row-major,
 * little-endian. The header may end in spaces (writers pad it so that the buffer starts 8-byte
 * aligned).
 *
 * st_open refuses, in one line naming the file: a file shorter than 8 bytes or than 8 + N, N over
 * 100 MB, a header that is not a JSON object of that shape (a trailing byte, an unknown field,
 * a field twice, a name twice), an unknown dtype, a negative or fractional dimension, a tensor
 * whose byte count is not its element count times its dtype's size, offsets that run past the
 * buffer, and offsets that overlap or leave a hole: the tensors, sorted by offset, must cover the
 * buffer exactly (the definition's rule, which also makes a file one thing only).
 *
 * The JSON reader is this file's own (the bare build has no cJSON); it is also the one that reads
 * a Hugging Face config.json (st_json_int, st_json_string). Never prints, never exits.
 */
#ifndef SEEDGPT_SAFETENSORS_H
#define SEEDGPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The dtypes a header may name (the definition's list); seedgpt reads the values of the first
 * three, widened exactly to fp32. */
typedef enum {
    ST_F32 = 0, ST_F16, ST_BF16,
    ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U64, ST_U32, ST_U16, ST_U8, ST_BOOL, ST_F8_E4M3,
    ST_F8_E5M2,
    ST_NUM_DTYPES
} StDtype;

const char* st_dtype_name(int dtype);   /* "F32", ... */
int st_dtype_bytes(int dtype);

#define ST_MAX_DIMS 8
#define ST_MAX_NAME 256
#define ST_MAX_HEADER 100000000ull   /* the definition's limit on N */

typedef struct {
    char name[ST_MAX_NAME];    /* as in the header (UTF-8) */
    int dtype;                 /* StDtype */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;            /* the product of the shape (1 for a scalar) */
    uint64_t begin, end;       /* byte offsets in the buffer, end excluded */
} StTensor;

typedef struct {
    char path[4096];
    FILE* f;
    uint64_t data_start;       /* 8 + N: the buffer's first byte in the file */
    uint64_t data_bytes;       /* the buffer's size: the file's size - data_start */
    int n;                     /* tensors */
    StTensor* t;               /* (n) in the header's order */
} StFile;

/* Opens and validates path (above). 0, or -1 with err; nothing to close on failure. */
int st_open(StFile* sf, const char* path, char err[256]);
void st_close(StFile* sf);
/* The tensor named name, or NULL. */
const StTensor* st_find(const StFile* sf, const char* name);
/* Reads tensor t (F32, F16 or BF16: each value widened exactly) into dst (t->numel floats).
 * 0, or -1 with err naming the file and the tensor (another dtype, a read error). */
int st_read_f32(StFile* sf, const StTensor* t, float* dst, char err[256]);

/* fp16 bits -> fp32, exact (subnormals, infinities and NaN included). */
float st_f16_to_float(uint16_t h);

/* ---- writing ----------------------------------------------------------------------------- */
typedef struct {
    const char* name;
    int dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} StEntry;

/* The first 8 + N bytes of a file holding the n tensors of e, in that order, back to back from
 * offset 0, with "__metadata__" holding the metadata_json object text (NULL: none); the header
 * is padded with spaces to a multiple of 8. Returns a malloc'd buffer (*len bytes), or NULL when
 * out of memory. The caller writes each tensor's bytes after it, in the same order. */
unsigned char* st_header(const StEntry* e, int n, const char* metadata_json, size_t* len);

/* ---- the JSON of config.json ---------------------------------------------------------------- */
/* In the JSON object text[0, n): the value of top-level key as an integer. 1 and *out when it is
 * one, 0 when the key is absent or its value null, -1 when the text is not a JSON object or the
 * value is something else. */
int st_json_int(const char* text, size_t n, const char* key, long long* out);
/* The same for a string value (into out, cap bytes with its NUL; -1 also when it does not fit). */
int st_json_string(const char* text, size_t n, const char* key, char* out, size_t cap);

#endif
