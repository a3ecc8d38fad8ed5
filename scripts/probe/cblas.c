/* scripts/probe/cblas.c — the Makefile's probe for CBLAS: compiles and links only where the
 * header declares cblas_sgemm and the library defines it (an empty or missing header, or a
 * missing library, fails). Never part of seedgpt. */
#include <cblas.h>

int main(void) {
    float a = 1.0f, c = 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 1, 1, 1, 1.0f, &a, 1, &a, 1, 0.0f, &c, 1);
    return c == 1.0f ? 0 : 1;
}
