/* tests/fuzz/fuzz_shard.c — libFuzzer target: token shards (data/shards.h). Any byte string is
 * offered to the header check, the whole-shard reader and the loader, which must refuse it with
 * one line naming the file or serve windows whose tokens are all < vocab. */
#include "tests/fuzz/fuzz_common.h"
#include "data/shards.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_file(data, size);
    char err[256] = "";
    size_t count;
    if (shard_read_header(path, &count, err) != 0) {
        fuzz_check_err(err, path);
        return 0;
    }
    if (count * 2 + SHARD_HEADER_BYTES != size) abort();   /* accepted a size that disagrees */
    uint16_t* tokens = NULL;
    err[0] = '\0';
    if (shard_read(path, 257, &tokens, &count, err) != 0) fuzz_check_err(err, path);
    free(tokens);
    /* the loader, at two batch shapes, sequential and shuffled */
    for (int shape = 0; shape < 2; shape++) {
        DataLoader dl;
        int B = shape ? 2 : 1, T = shape ? 3 : 1;
        err[0] = '\0';
        if (loader_open(&dl, path, B, T, 257, shape, 12345, err) != 0) {
            fuzz_check_err(err, path);
            continue;
        }
        int inputs[6], targets[6];
        for (int k = 0; k < 5; k++) {
            if (loader_next(&dl, inputs, targets) != 0) abort();   /* the file did not change */
            for (int i = 0; i < B * T; i++)
                if (inputs[i] < 0 || inputs[i] >= 257 || targets[i] < 0 || targets[i] >= 257) abort();
        }
        LoaderState st = loader_get_state(&dl);
        if (loader_set_state(&dl, &st, err) != 0) abort();
        st.pos = st.num_windows;   /* out of range: refused */
        if (loader_set_state(&dl, &st, err) == 0) abort();
        loader_close(&dl);
    }
    return 0;
}
