// hf.h — the model in the layout of flash-linear-attention's GatedDeltaNetForCausalLM (a
// Hugging Face directory: config.json, model.safetensors, the tokenizer), out and back in.
// docs/export.md has the mapping key by key and tensor by tensor.
//
// Export: every [model] / [gdn] / [swa] key of the run's config either maps onto a key of fla's
// GatedDeltaNetConfig, does not change the forward (dropout, kernel and memory choices), or is
// refused by name (hf_key_rule). Tensors are our parameters under fla's state_dict names and
// shapes, unchanged in value and layout (fla's q/k/v/a/b/g/o projections are ours row for row;
// the conv weight (C, K) is fla's (C, 1, K); A_log and dt_bias are the same parametrisation).
// Import (gdn-train --init-from DIR): config.json is read back into the architecture keys and
// compared with the run's config (a mismatch names the key and both values); then every
// parameter is read from model.safetensors with its shape checked.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include "model.h"
#include "safetensors.h"

// How the export treats [section] key: "fla KEY" (mapped), "ignored: WHY" (does not change the
// forward), "refused unless ..." (refused when set otherwise); NULL for a key it does not know.
const char *hf_key_rule(const char *section, const char *key);

// Whether c can be expressed by fla's config: false + err naming the first key that cannot.
bool hf_check_config(const gdn_config *c, char *err, size_t errlen);

// The config.json text (malloc'd) of c; torch_dtype "float32" | "bfloat16"; eot: the
// tokenizer's end-of-text id (config's bos and eos), -1 none. Call hf_check_config first.
char *hf_config_json(const gdn_config *c, const char *torch_dtype, int bos, int eot);

// fla's name and shape of parameter i of m.
typedef struct {
    char name[96];
    int ndim;
    int64_t shape[3];
} hf_tensor_name;
void hf_param_name(const model *m, int i, hf_tensor_name *out);

// Tokenizer files for the export: kind "bytes" | "bpe" | "spm" and the blob (tokenizer.h).
typedef struct {
    const char *kind;        // NULL: the checkpoint holds none
    const void *blob;
    size_t n;
    int eot;                 // end-of-text id, -1 none
    int bos;                 // beginning-of-text id: the post-processor template's first id
                             // (Llama 3: <|begin_of_text|>), else eot; -1 none
} hf_tokenizer;

// Writes dir/config.json, dir/model.safetensors (dtype) and the tokenizer (bpe: tokenizer.json
// + tokenizer_config.json; spm: tokenizer.model; bytes or none: no file, a line in *note).
// dir is created if absent. False + err (naming the key, file or tensor) on failure.
bool hf_export(const model *m, const char *dir, st_dtype dtype, const hf_tokenizer *tok,
               char *note, size_t notelen, char *err, size_t errlen);

// Reads dir/config.json into the architecture keys of *c (the others are left as they are).
// False + err naming the file and the key on a bad or inexpressible config.
bool hf_config_read(const char *dir, gdn_config *c, char *err, size_t errlen);

// Whether run config c has the architecture of the export in dir: false + err naming the first
// differing key with both values.
bool hf_config_matches(const gdn_config *c, const char *dir, char *err, size_t errlen);

// Loads every parameter of m from dir/model.safetensors (after hf_config_matches): names and
// shapes must match, no tensor may be left over. False + err naming the file and the tensor.
bool hf_import(model *m, const char *dir, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
