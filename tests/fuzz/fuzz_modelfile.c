/* tests/fuzz/fuzz_modelfile.c — libFuzzer target: model files (model/modelfile.h), both formats.
 * read_config must refuse with one line naming the file or return a valid configuration whose
 * size is exactly the file's (4 bytes a weight, 2 in llm.c's bf16 version 5); a small accepted
 * file must then load into a model of its shape
 * (unless a weight is NaN or infinite, refused naming the file), and be refused (naming a field)
 * by a model of another shape. */
#include "tests/fuzz/fuzz_common.h"
#include "model/gpt.h"
#include "model/modelfile.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_file(data, size);
    char err[256] = "";
    GPTConfig c;
    if (modelfile_read_config(path, &c, err) != 0) {
        fuzz_check_err(err, path);
        return 0;
    }
    if (gpt_config_problem(&c) != NULL) abort();
    size_t sizes[NUM_PARAMETER_TENSORS], P = 0;
    gpt_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += sizes[k];
    int32_t magic, version;   /* llm.c's version 5 holds bf16 weights: 2 bytes each */
    memcpy(&magic, data, 4);
    memcpy(&version, data + 4, 4);
    if (1024 + (magic == 20240326 && version == 5 ? 2 : 4) * P != size) abort();
    if (P > (1u << 20) || c.max_seq_len > 4096) return 0;   /* keep each run cheap */
    GPT m;
    if (gpt_build(&m, &c, 1, 1, err) != 0) abort();
    if (modelfile_load(&m, path, err) != 0) {   /* only a non-finite weight may refuse it now */
        if (strstr(err, "non-finite weight") == NULL) abort();
        fuzz_check_err(err, path);
        gpt_free(&m);
        return 0;
    }
    gpt_free(&m);
    GPTConfig other = c;
    other.num_layers += 1;
    if (gpt_build(&m, &other, 1, 1, err) == 0) {
        err[0] = '\0';
        if (modelfile_load(&m, path, err) == 0) abort();
        fuzz_check_err(err, path);
        gpt_free(&m);
    }
    return 0;
}
