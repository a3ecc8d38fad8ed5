/* scripts/probe/bpe.c — the Makefile's probe for the GPT-2 tokenizer's libraries: compiles and
 * links only where cJSON and PCRE2 (8-bit) both have their headers and libraries. Never part of
 * seedgpt. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>

int main(void) {
    cJSON_Delete(cJSON_Parse("1"));
    pcre2_code_free(NULL);
    return 0;
}
