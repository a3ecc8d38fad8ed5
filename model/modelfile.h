/* model/modelfile.h — model files (DESIGN §2, docs/formats.md).
 *
 * Plain GPT-2 configurations (n_kv_head == n_head, learned positions) read and write llm.c's fp32
 * checkpoint: 256 x int32 header (magic 20240326, version 3, maxT, V, L, NH, C, Vp), then the
 * parameters in llm.c order (the order of ParameterTensors). llm.c's bf16 file (version 5) is read
 * too, its weights widened exactly to fp32. Any other configuration uses
 * seedgpt's own versioned header (see docs/formats.md). Loading refuses a wrong magic, version,
 * size, a configuration that does not match the model, a training state given in a model
 * file's place, or a non-finite weight (naming the tensor and the element), with one line in err.
 */
#ifndef SEEDGPT_MODELFILE_H
#define SEEDGPT_MODELFILE_H

#include "model/gpt.h"

/* Reads only the header. Returns 0, or -1 with one line in err naming the file and the problem. */
int modelfile_read_config(const char* path, GPTConfig* cfg, char err[256]);

/* Loads the weights into m, whose configuration must equal the file's. 0 or -1 (err); a refused
 * file leaves m untouched (the weights are checked for NaN and infinity before any is copied). */
int modelfile_load(GPT* m, const char* path, char err[256]);  /* then moves them to the backend */

/* Reads the weights of the file at path, whose configuration must equal cfg (modelfile_read_config
 * gives it), into tensors[k] (gpt_param_sizes(cfg) floats each), widened to fp32 from a bf16 file;
 * wte's padded vocab rows are zeroed. The same checks as modelfile_load. 0 or -1 (err). */
int modelfile_read(const char* path, const GPTConfig* cfg, float* const tensors[NUM_PARAMETER_TENSORS],
                   char err[256]);

/* modelfile_save for weights held outside a GPT: tensors[k] holds gpt_param_sizes(c) floats. */
int modelfile_write(const GPTConfig* c, const float* const tensors[NUM_PARAMETER_TENSORS],
                    const char* path, char err[256]);

/* modelfile_write with some tensors from elsewhere (ZeRO-1's sharded masters, gathered from the
 * ranks): tensors[k] NULL is asked of src, whole, in the file's order, once per write and always
 * (even after a failure: the ranks that serve them go through all of them too); the returned
 * floats stay valid until the next call, NULL with err on a failure. The same returns. */
typedef struct {
    const float* (*tensor)(void* ctx, int k, char err[256]);
    void* ctx;
} ModelTensorSource;
int modelfile_write_from(const GPTConfig* c, const float* const tensors[NUM_PARAMETER_TENSORS],
                         const ModelTensorSource* src, const char* path, char err[256]);

/* Writes m's weights (llm.c v3 when the configuration is plain GPT-2, else seedgpt's own header)
 * to path.tmp, fsyncs, renames into place. 0, -1 (err), or MODELFILE_NON_FINITE (err names the
 * tensor and element) when a weight is NaN or infinite; on failure the old file is intact. */
#define MODELFILE_NON_FINITE (-2)
int modelfile_save(const GPT* m, const char* path, char err[256]);  /* the host copy: gpt_to_host first */

#endif
