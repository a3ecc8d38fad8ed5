/* tests/fuzz/fuzz_hellaswag.c — libFuzzer target: the HellaSwag eval file (data/hellaswag.h). Any
 * byte string is offered to the reader, which must refuse it with one line naming the file, or
 * accept a set whose every example is in bounds: 4 endings, a label below 4, lengths >= 1,
 * tokens below 65535, the longest row what the examples need. An accepted set's rows are then
 * filled at their own length, in batches of 1 and 3 examples, and read back. */
#include "tests/fuzz/fuzz_common.h"
#include "data/hellaswag.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_file(data, size);
    char err[256] = "";
    HellaswagSet s;
    if (hellaswag_open(&s, path, err) != 0) {
        fuzz_check_err(err, path);
        return 0;
    }
    if (s.num_examples < 1 || s.num_examples > HELLASWAG_MAX_EXAMPLES) abort();
    int longest = 0, max_token = 0;
    for (int i = 0; i < s.num_examples; i++) {
        const HellaswagExample* e = &s.ex[i];
        if (e->label < 0 || e->label >= HELLASWAG_ENDINGS || e->ctx_len < 1) abort();
        for (int t = 0; t < e->ctx_len; t++) if (e->ctx[t] > max_token) max_token = e->ctx[t];
        for (int k = 0; k < HELLASWAG_ENDINGS; k++) {
            if (e->end_len[k] < 1) abort();
            for (int t = 0; t < e->end_len[k]; t++) if (e->end[k][t] > max_token) max_token = e->end[k][t];
            if (hellaswag_row_len(e, k) > longest) longest = hellaswag_row_len(e, k);
        }
    }
    if (longest != s.longest_row || max_token != s.max_token || max_token >= 65535) abort();
    for (int per = 1; per <= 3; per += 2) {
        for (int first = 0; first < s.num_examples; first += per) {
            int n = s.num_examples - first < per ? s.num_examples - first : per;
            int T = hellaswag_rows_len(&s, first, n);
            size_t rows = (size_t)HELLASWAG_ENDINGS * n;
            int* in = malloc(rows * T * sizeof(int));
            int* tg = malloc(rows * T * sizeof(int));
            int cf[12], cl[12], lab[3];
            if (in == NULL || tg == NULL) abort();
            hellaswag_fill_rows(&s, first, n, T, in, tg, cf, cl, lab);
            for (size_t r = 0; r < rows; r++) {
                const HellaswagExample* e = &s.ex[first + r / HELLASWAG_ENDINGS];
                int k = (int)(r % HELLASWAG_ENDINGS);
                /* the scored targets are the ending's tokens, in order, inside the row */
                if (cf[r] + cl[r] > T || cl[r] != e->end_len[k]) abort();
                for (int j = 0; j < cl[r]; j++)
                    if (tg[r * T + cf[r] + j] != e->end[k][j]) abort();
                for (int t = 0; t < T; t++)
                    if (in[r * T + t] < 0 || in[r * T + t] > s.max_token) abort();
            }
            free(in);
            free(tg);
        }
    }
    hellaswag_free(&s);
    return 0;
}
