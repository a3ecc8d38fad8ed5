/* tests/fuzz/fuzz_state.c — libFuzzer target: training-state files (model/state.h). The CRC would
 * stop almost every mutation at the door, so for inputs whose first byte is odd the target
 * recomputes the trailer first: the header checks, the loading and the finiteness check are
 * then what is fuzzed. Every refusal is one line naming the file; an accepted state must load
 * into a model of its shape with every value finite. */
#include <math.h>
#include "tests/crc32_ref.h"
#include "tests/fuzz/fuzz_common.h"
#include "model/gpt.h"
#include "model/state.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    int fix_crc = data[0] & 1;
    data++;
    size--;
    uint8_t* buf = malloc(size + 1);
    memcpy(buf, data, size);
    if (fix_crc && size >= 4) {
        uint32_t crc = crc32_ref(0, buf, size - 4);
        memcpy(buf + size - 4, &crc, 4);
    }
    const char* path = fuzz_file(buf, size);
    free(buf);
    static StateInfo info;
    char err[256] = "";
    if (state_read_info(path, &info, err) != 0) {
        fuzz_check_err(err, path);
        return 0;
    }
    const GPTConfig* c = &info.config;
    if (gpt_config_problem(c) != NULL || info.seq > c->max_seq_len || info.loader.pos >= info.loader.num_windows)
        abort();
    if (info.num_parameters > (1u << 18) || c->max_seq_len > 4096) return 0;
    GPT m;
    if (gpt_build(&m, c, 1, 1, err) != 0) abort();
    err[0] = '\0';
    if (state_load(path, &m, &info, err) != 0) {
        fuzz_check_err(err, path);   /* only a non-finite value gets here */
        if (!strstr(err, "non-finite")) abort();
    } else {
        for (size_t i = 0; i < m.num_parameters; i++)
            if (!isfinite(m.params_memory[i]) || !isfinite(m.m_memory[i]) || !isfinite(m.v_memory[i]))
                abort();
    }
    gpt_free(&m);
    return 0;
}
