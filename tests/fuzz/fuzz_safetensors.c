/* tests/fuzz/fuzz_safetensors.c — libFuzzer target: safetensors files (model/safetensors.h) and
 * the GPT-2 import over them (model/hf.h). st_open must refuse with one line naming the file, or
 * give tensors whose offsets cover the buffer exactly, each of its dtype's size; every float tensor
 * then reads. hf_read_gpt2 must refuse with one line naming the file, or give a configuration
 * GPT-2 can be and a parameter block of its size. */
#include "tests/fuzz/fuzz_common.h"
#include "model/gpt.h"
#include "model/hf.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_file(data, size);
    char err[256] = "";
    StFile sf;
    if (st_open(&sf, path, err) != 0) {
        fuzz_check_err(err, path);
    } else {
        uint64_t covered = 0;
        for (int i = 0; i < sf.n; i++) {
            const StTensor* t = &sf.t[i];
            if (t->end < t->begin || t->end > sf.data_bytes ||
                t->end - t->begin != t->numel * (uint64_t)st_dtype_bytes(t->dtype))
                abort();
            covered += t->end - t->begin;
        }
        if (covered != sf.data_bytes || sf.data_start + sf.data_bytes != size) abort();
        for (int i = 0; i < sf.n; i++) {
            const StTensor* t = &sf.t[i];
            if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) continue;
            float* x = malloc((size_t)t->numel * sizeof(float) + 4);
            if (st_read_f32(&sf, t, x, err) != 0) abort();   /* the size was checked */
            free(x);
        }
        st_close(&sf);
    }
    GPTConfig c;
    float* p;
    err[0] = '\0';
    if (hf_read_gpt2(path, 1, &c, &p, err) != 0) {
        fuzz_check_err(err, path);
        return 0;
    }
    if (gpt_config_problem(&c) != NULL || c.num_kv_heads != c.num_heads) abort();
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    gpt_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += sizes[k];
    volatile float sink = p[P - 1];   /* the block holds P floats (ASan checks the read) */
    (void)sink;
    free(p);
    return 0;
}
