/* tests/crc32_ref.h — the tests' own CRC-32 (the polynomial of zlib, PNG and Ethernet:
 * reflected 0xEDB88320, initial and final inversion), one bit at a time: the oracle for the
 * trainer's slicing-by-8 table code in model/state.c. A different algorithm over the same
 * definition, anchored by the published check value CRC-32("123456789") = 0xCBF43926, which
 * tests/test_state.c asserts. Same calling convention as zlib's crc32(): start from 0, feed
 * chunks. */
#ifndef SEEDGPT_CRC32_REF_H
#define SEEDGPT_CRC32_REF_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t crc32_ref(uint32_t crc, const void* buf, size_t n) {
    const unsigned char* p = (const unsigned char*)buf;
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

#endif
