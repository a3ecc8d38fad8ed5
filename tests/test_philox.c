/* tests/test_philox.c — the generator and the coordinate -> draw mapping of random/philox.h
 * (DESIGN §3): known answers, one-to-one mappings, thresholds, seed derivation. The cuRAND
 * oracle is tests/test_curand.c; kept fractions and per-op masks are in tests/test_ops.c. */
#include <stdint.h>
#include <stdlib.h>
#include "tests/test.h"
#include "random/philox.h"
#include "random/philox_x16.h"

static void known_answers(void) {
    /* DESIGN §3's vectors (Random123's published known answers for Philox4x32-10) */
    struct { uint32_t c[4], k[2], want[4]; } v[3] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        philox4x32_10(v[i].c, v[i].k[0], v[i].k[1], out);
        int same = !memcmp(out, v[i].want, sizeof(out));
        char name[64];
        snprintf(name, sizeof(name), "philox4x32_10_known_answer_%d", i);
        expect(same, name, "got %08x %08x %08x %08x want %08x %08x %08x %08x", out[0], out[1],
               out[2], out[3], v[i].want[0], v[i].want[1], v[i].want[2], v[i].want[3]);
    }
}

/* A (counter, word) pair packed for sorting. */
typedef struct { uint32_t c[4]; int w; } Slot;
static int slot_cmp(const void* a, const void* b) {
    const Slot *x = a, *y = b;
    for (int i = 0; i < 4; i++) if (x->c[i] != y->c[i]) return x->c[i] < y->c[i] ? -1 : 1;
    return x->w - y->w;
}
static int count_duplicates(Slot* s, size_t n) {
    qsort(s, n, sizeof(Slot), slot_cmp);
    int dup = 0;
    for (size_t i = 1; i < n; i++) dup += slot_cmp(&s[i - 1], &s[i]) == 0;
    return dup;
}

static void mappings_are_one_to_one(void) {
    /* attention (g, h, i, j): counter (i, ((j>>5)<<3)|(j&7), h, g), word (j>>3)&3 */
    int G = 3, H = 4, Tq = 70;
    size_t n = (size_t)G * H * Tq * Tq, k = 0;
    Slot* s = malloc(n * sizeof(Slot));
    int agree = 1;
    for (int g = 0; g < G; g++) for (int h = 0; h < H; h++)
    for (int i = 0; i < Tq; i++) for (int j = 0; j < Tq; j++) {
        Slot x = {{(uint32_t)i, (uint32_t)(((j >> 5) << 3) | (j & 7)), (uint32_t)h, (uint32_t)g},
                  (j >> 3) & 3};
        s[k++] = x;
        /* the draw of the mapping, and the draw4 form kernels use, are that slot's word */
        uint64_t seed = 0x0123456789abcdefULL;
        uint32_t out[4], four[4];
        philox4x32_10(x.c, (uint32_t)seed, (uint32_t)(seed >> 32), out);
        philox_attn_draw4(seed, g, h, i, (uint32_t)j >> 5, (uint32_t)j & 7, four);
        if (philox_attn_draw(seed, g, h, i, j) != out[x.w] || four[x.w] != out[x.w]) agree = 0;
    }
    int dup = count_duplicates(s, n);
    expect(dup == 0, "attention_coordinates_map_one_to_one", "%zu elements, %d collisions", n, dup);
    expect(agree, "attention_draw_is_the_documented_counter_and_word", "%s",
           agree ? "all agree" : "mismatch");
    free(s);

    /* residual / embedding (g, t, c): counter (t, c>>2, 0, g), word c&3 */
    int C = 37, T = 50;
    n = (size_t)G * T * C; k = 0;
    s = malloc(n * sizeof(Slot));
    agree = 1;
    for (int g = 0; g < G; g++) for (int t = 0; t < T; t++) for (int c = 0; c < C; c++) {
        Slot x = {{(uint32_t)t, (uint32_t)(c >> 2), 0, (uint32_t)g}, c & 3};
        s[k++] = x;
        uint64_t seed = 42;
        uint32_t out[4], four[4];
        philox4x32_10(x.c, 42, 0, out);
        philox_elem_draw4(seed, g, t, (uint32_t)c >> 2, four);
        if (philox_elem_draw(seed, g, t, c) != out[x.w] || four[x.w] != out[x.w]) agree = 0;
    }
    dup = count_duplicates(s, n);
    expect(dup == 0, "element_coordinates_map_one_to_one", "%zu elements, %d collisions", n, dup);
    expect(agree, "element_draw_is_the_documented_counter_and_word", "%s",
           agree ? "all agree" : "mismatch");
    free(s);

    uint32_t out[4], ctr[4] = {0, 0, 0, 7};
    philox4x32_10(ctr, 99, 0, out);
    expect(philox_depth_draw(99, 7) == out[0], "depth_draw_is_counter_0_0_0_g_word_0",
           "%08x vs %08x", philox_depth_draw(99, 7), out[0]);
}

static void thresholds(void) {
    Dropout d0 = dropout_make(0.0);
    expect(d0.thr == 0 && d0.scale == 1.0f && !dropout_active(d0), "p0_gives_thr0_scale1",
           "thr %u scale %.9g", d0.thr, d0.scale);
    Dropout d5 = dropout_make(0.5);
    expect(d5.thr == 0x80000000u && d5.scale == 2.0f, "p_half_gives_thr_2pow31_scale2",
           "thr %u scale %.9g", d5.thr, d5.scale);
    Dropout d1 = dropout_make(0.1);
    uint32_t want = (uint32_t)llround(0.1 * 4294967296.0);
    expect(d1.thr == want && d1.scale == (float)(1.0 / 0.9), "p_tenth_rounds_p_times_2pow32",
           "thr %u want %u scale %.9g", d1.thr, want, d1.scale);
    Dropout dh = dropout_make(1.0 - 1e-12);
    expect(dh.thr == 0xffffffffu, "threshold_saturates_at_2pow32_minus_1", "thr %u", dh.thr);
}

static void seeds(void) {
    uint64_t master = 1337;
    uint64_t base = philox_site_seed(master, 5, 2, 1, 0);
    uint32_t out[4], ctr[4] = {5, 2, 1, 0};
    philox4x32_10(ctr, (uint32_t)master, (uint32_t)(master >> 32), out);
    uint64_t want = (uint64_t)out[0] | ((uint64_t)out[1] << 32);
    expect(base == want, "site_seed_is_w0_w1_of_philox_step_layer_site_pass",
           "%016llx vs %016llx", (unsigned long long)base, (unsigned long long)want);
    int differ = base != philox_site_seed(master, 6, 2, 1, 0) &&
                 base != philox_site_seed(master, 5, 3, 1, 0) &&
                 base != philox_site_seed(master, 5, 2, 2, 0) &&
                 base != philox_site_seed(master, 5, 2, 1, 1) &&
                 base != philox_site_seed(master + 1, 5, 2, 1, 0);
    expect(differ, "site_seed_changes_with_step_layer_site_pass_and_master", "%s",
           differ ? "all differ" : "a collision");
    /* the non-dropout streams never coincide with a site seed of the first steps */
    uint32_t tags[4] = {STREAM_INIT, STREAM_SHUFFLE, STREAM_EVAL, STREAM_SAMPLE};
    int clash = 0;
    for (int t = 0; t < 4; t++)
        for (uint32_t step = 0; step < 64; step++)
            for (uint32_t l = 0; l < 4; l++)
                for (uint32_t site = 0; site < NUM_SITES; site++)
                    for (uint32_t pass = 0; pass < 2; pass++)
                        clash += philox_stream_seed(master, tags[t]) ==
                                 philox_site_seed(master, step, l, site, pass);
    expect(clash == 0, "stream_seeds_differ_from_dropout_seeds", "%d clashes", clash);
}

/* random/philox_x16.h: sixteen calls in vector lanes against the scalar generator, lane for lane
 * (the known answers among the counters), and its two draw layouts against philox.h's mappings */
#if PHILOX_X16
/* compiled for AVX-512F whatever -march says, and called only where the CPU runs it */
__attribute__((target("avx512f"))) static void x16_lanes_check(void) {
    uint64_t state = 0x9e3779b97f4a7c15ull;
    int differ = 0, calls = 0;
    for (int rep = 0; rep < 4096; rep++) {
        uint32_t ctr[16][4], k[2];
        for (int l = 0; l < 16; l++)
            for (int w = 0; w < 4; w++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                ctr[l][w] = (uint32_t)(state >> 32);
            }
        k[0] = (uint32_t)state; k[1] = (uint32_t)(state >> 17);
        if (rep == 0) {   /* known answer 1 and 0 in lanes 0 and 1 */
            for (int w = 0; w < 4; w++) { ctr[0][w] = 0xffffffffu; ctr[1][w] = 0; }
        }
        uint32_t in[4][16], out[4][16];
        for (int w = 0; w < 4; w++)
            for (int l = 0; l < 16; l++) in[w][l] = ctr[l][w];
        __m512i c[4];
        for (int w = 0; w < 4; w++) c[w] = _mm512_loadu_si512(in[w]);
        philox4x32_10_x16(c, rep == 0 ? 0xffffffffu : k[0], rep == 0 ? 0xffffffffu : k[1]);
        for (int w = 0; w < 4; w++) _mm512_storeu_si512(out[w], c[w]);
        for (int l = 0; l < 16; l++) {
            uint32_t want[4];
            philox4x32_10(ctr[l], rep == 0 ? 0xffffffffu : k[0], rep == 0 ? 0xffffffffu : k[1], want);
            for (int w = 0; w < 4; w++) differ += out[w][l] != want[w];
            calls++;
        }
    }
    expect(differ == 0, "philox_x16_lanes_equal_philox4x32_10", "%d of %d words differ over %d calls",
           differ, 4 * calls, calls);
    int bad_attn = 0, bad_elem = 0, n = 0;
    const uint64_t seed = 0x0123456789abcdefull;
    /* key blocks up to the last one a 32-bit position has (j >> 5 < 2^27), channel quads past 2^29 */
    const uint32_t blks[] = {0, 1, 7, 0x07fffffeu, 0x07fffffeu}, quads[] = {0, 1, 7, 0x1fffffffu, 0x3ffffff0u};
    for (int b = 0; b < 5; b++)
        for (uint32_t i = 0; i < 40; i += 13) {
            uint32_t dr[4][16], r[16][4];
            philox_attn_draw64_x16(seed, 5, 3, i, blks[b], dr);
            for (int half = 0; half < 2; half++)
                for (int w = 0; w < 4; w++)
                    for (int lo = 0; lo < 8; lo++)
                        bad_attn += dr[w][8 * half + lo] !=
                                    philox_attn_draw(seed, 5, 3, i, 32u * (blks[b] + half) + 8u * w + lo);
            philox_elem_draw64_x16(seed, 9, i, quads[b], r);
            for (int k = 0; k < 64; k++) bad_elem += r[k >> 2][k & 3] != philox_elem_draw(seed, 9, i, 4u * quads[b] + k);
            n += 64;
        }
    expect(bad_attn == 0 && bad_elem == 0, "philox_x16_draw_layouts_are_the_documented_mappings",
           "attention %d, element %d of %d draws differ", bad_attn, bad_elem, n);
}
#endif

static void x16_lanes_equal_the_scalar_generator(void) {
#if PHILOX_X16
    if (!philox_x16_supported()) {
        printf("SKIP philox_x16_lanes_equal_philox4x32_10: this CPU has no AVX-512F\n");
        return;
    }
    x16_lanes_check();
#else
    printf("SKIP philox_x16_lanes_equal_philox4x32_10: not an x86-64 build\n");
#endif
}

int main(void) {
    known_answers();
    x16_lanes_equal_the_scalar_generator();
    mappings_are_one_to_one();
    thresholds();
    seeds();
    return test_finish();
}
