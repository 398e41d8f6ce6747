// config.h — the run configuration: one struct, filled from an INI file (libinih) checked
// against a schema (src/core/config.c) in which every section and key is known, typed and
// range-checked. DESIGN 7. An unknown section/key, a bad type or an out-of-range value is an
// error naming file, line, key and what is allowed; the run starts only when all is valid.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CFG_STR 256

// train.recompute (model.c carve): which activations live in one buffer shared by the layers
// instead of one per layer. OFF, FULL are 0, 1: the boolean words false / true name them.
typedef enum {
    RECOMPUTE_OFF = 0,    // every layer keeps all its activations
    RECOMPUTE_FULL = 1,   // shared: the outputs of the RMSNorms, conv + SiLU + L2 norm, the gated
                          // norm, SwiGLU; the backward redoes them for its layer first (separate
                          // forward ops, recompute_layer)
    RECOMPUTE_LIGHT = 2,  // shared: the outputs of the RMSNorms, the gated norm and SwiGLU only;
                          // each is written again by the backward kernel that reads its inputs
                          // anyway (rmsnorm_bwd, gated_rmsnorm_bwd, swiglu_bwd: an extra output),
                          // before the weight-gradient GEMMs that read it
} gdn_recompute;

// gdn.bwd_states: where the GDN backward gets the rule's chunk-start states (all give the same
// gradients, bitwise on the GPU). The CPU backend keeps nothing to replay: replay recomputes there.
typedef enum {
    GDN_BWD_STATES_REPLAY = 0,     // the forward keeps each chunk's gate cumsums and Δ~ rows (GPU
                                   // bf16: ~v's size a layer), the backward replays the states
    GDN_BWD_STATES_RECOMPUTE = 1,  // nothing kept: the backward runs a second forward scan
    GDN_BWD_STATES_SAVED = 2,      // the forward stores the states (B*H*ceil(T/64)*dk*dv fp32 a
                                   // layer): the fastest backward, the most memory
} gdn_bwd_states_mode;

typedef struct {
    // [model]
    char pattern[64];        // G/S/A letters, repeated to n_layers            default "GS"
    int n_layers;            // >= 1                                           default 2
    int d_model;             // >= 1                                           default 128
    int vocab_size;          // >= 2; 0 = take it from the dataset           default 0
    bool tie_embeddings;     //                                                default true
    double dropout;          // [0, 1)                                         default 0
    double embed_dropout;    // [0, 1) on the embedding output                 default 0
    double mixer_dropout;    // [0, 1) on the input of each mixer's output projection (0)
    double mlp_ratio;        // > 0; hidden = 2/3 * ratio * d rounded up to 256 default 4
    int mlp_hidden;          // >= 0; 0 = from mlp_ratio                       default 0
    double norm_eps;         // > 0                                            default 1e-6
    bool doc_reset;          // mixers restart at document starts (model.h)    default true
    bool doc_positions;      // RoPE positions from the document start         default true
    double init_std;         // > 0                                            default 0.02
    // [gdn]
    int gdn_n_heads;         // >= 1                                           default 2
    int gdn_head_dim;        // dk, >= 1                                       default 32
    double gdn_expand_v;     // dv = expand_v * dk (must be a whole number)    default 2
    int gdn_conv_size;       // >= 1                                           default 4
    bool gdn_short_conv;     //                                                default true
    bool gdn_output_gate;    //                                                default true
    bool gdn_gate;           //                                                default true
    bool gdn_delta;          //                                                default true
    bool gdn_allow_neg_eigval; //                                              default false
    int gdn_chunk_size;      // 1..256                                         default 64
    gdn_bwd_states_mode gdn_bwd_states; // replay | recompute | saved                default replay
    int gdn_bwd_segment_chunks; // GPU backward's chunks per segment, 0 = whole sequence  default 0
    // [swa]
    int swa_n_heads;         // >= 1                                           default 2
    int swa_head_dim;        // >= 2, even                                     default 32
    int swa_window;          // >= 1 (>= seq_len: full attention)              default 64
    double swa_rope_base;    // > 0                                            default 10000
    bool swa_deterministic;  // false: GPU bf16 backward sums dq by atomics     default true
    // [data]
    char data_path[CFG_STR]; // token file or shard dir (DESIGN 5)                 default "data/tinyshakespeare.h5"
    int seq_len;             // >= 1                                           default 128
    char data_mix[1024];     // "" or "PATH:WEIGHT, ...": a weighted mix of token sets   default ""
    char data_sampling[16];  // windows | documents (packed documents, doc starts) default "windows"
    // [train]
    char device[16];         // auto | cpu | cuda                              default "auto"
    char precision[16];      // fp32 | bf16 (GPU only; CPU is always float64)  default "bf16"
    int batch_size;          // sequences per micro-batch per rank, >= 1       default 8
    int grad_accum;          // micro-batches per step, >= 1                   default 1
    int steps;               // >= 1                                           default 1000
    uint64_t seed;           //                                                default 1337
    int eval_every;          // >= 0 (0 = only at the end)                     default 100
    int eval_batches;        // >= 1                                           default 8
    int sample_every;        // >= 0 (0 = off): a sample printed every N steps default 0
    int sample_tokens;       // 1..4096 tokens per sample                      default 64
    int ckpt_every;          // >= 0 (0 = only at the end)                     default 0
    int keep_checkpoints;    // >= 1: the last N checkpoints (+ the best when > 1) default 1
    double skip_zscore;      // >= 0: gradient-norm z-score that skips a step (0 = off) default 0
    int skip_window;         // [2, 1024]: updated steps of the z-score window  default 100
    int max_skips;           // >= 1: skipped steps in a row that stop the run   default 5
    char out_dir[CFG_STR];   // run directory                                  default "runs/default"
    bool overwrite;          // a new run may replace the run in out_dir       default false
    int threads;             // CPU threads for BLAS, 0 = library default      default 0
    gdn_recompute recompute; // off | full | light (true = full, false = off)   default off
    int head_chunk_rows;     // LM head + loss in row chunks of this many tokens (0 = auto)
    bool gemm_tune;          // GPU: cuBLASLt algorithm tuning (same bits)      default true
    // [optim]
    double lr;               // > 0                                            default 1e-3
    double min_lr;           // >= 0                                           default 1e-4
    int warmup_steps;        // >= 0                                           default 50
    char schedule[16];       // cosine | linear | constant | wsd               default "cosine"
    double decay_frac;       // (0, 1]: last fraction of steps decaying (wsd)  default 0.2
    double weight_decay;     // >= 0                                           default 0.1
    double beta1, beta2;     // [0, 1)                                         default 0.9, 0.95
    double adam_eps;         // > 0                                            default 1e-8
    double grad_clip;        // >= 0 (0 = off)                                 default 1.0
    bool wd_embeddings;      // weight decay on embeddings                     default false
    // [dist]
    char dist_backend[8];    // auto | none | mpi | nccl (nccl/mpi at world 1 run the collectives) default "auto"
    bool zero1;              // shard AdamW state across ranks                 default false
    char nccl_id_path[CFG_STR]; // file used to share the NCCL id w/o MPI      default ""
    double bucket_mb;        // > 0, all-reduce bucket size                    default 25
    bool overlap;            // sum gradient buckets during the backward       default true
    int timeout_s;           // > 0, collective timeout                        default 300
    // [eval] (src/eval/eval.h, docs/evaluation.md)
    int ev_every;            // >= 0: steps between evaluations (0 = at the end only)  default 0
    char ev_val[1024];       // "NAME:PATH, ...": named token sets, val split   default ""
    int ev_batches;          // >= 0: batches per named set (0 = whole split)  default 8
    char ev_mc[1024];        // "NAME:FILE.jsonl, ...": multiple-choice tasks   default ""
    int ev_mc_items;         // >= 0: items per task (0 = all)                 default 0
    char ev_mqar[CFG_STR];   // "LEN:KEYS, ...": MQAR probes                   default ""
    char ev_needle[CFG_STR]; // "LEN, ...": needle-in-a-haystack probes        default ""
    int ev_probes;           // >= 1: sequences per recall probe               default 64
    uint64_t ev_seed;        // the recall probes' RNG                         default 1234
    // [log]
    int log_every;           // >= 1                                           default 10
    char metrics_file[CFG_STR]; // file name inside out_dir                   default "metrics.jsonl"
} gdn_config;

// Fill *c with the defaults above.
void config_defaults(gdn_config *c);

// Parse `path` into *c (starting from what *c already holds, normally the defaults), then
// apply the `--set section.key=value` overrides (nset of them), then check the cross-key rules
// (e.g. pattern letters, expand_v whole). A top-level `include = other.ini` (before the first
// section) loads that file first, relative to the including file's folder.
// On any error: prints every error found ("file:line: [section] key: message; allowed: ...")
// to stderr and returns false. Returns true when the whole config is valid.
bool config_load(gdn_config *c, const char *path, const char *const *sets, int nset);

// Apply one override "section.key=value" (used by config_load; exposed for tools).
bool config_set(gdn_config *c, const char *assignment);

// Write the effective config as INI text (every key, in schema order). Round-trips through
// config_load.
void config_write(const gdn_config *c, FILE *f);
// The same as a malloc'd string (for checkpoints).
char *config_to_string(const gdn_config *c);
// Parse config text (as written by config_write) — used when resuming from a checkpoint. A key
// the schema replaced (gdn.save_states) is read as its replacement.
bool config_load_string(gdn_config *c, const char *text, const char *name_for_errors);
// The same followed by --set overrides, checked together (cross-key rules see the result).
bool config_load_string_sets(gdn_config *c, const char *text, const char *name_for_errors,
                             const char *const *sets, int nset);

// Derived sizes.
int config_mlp_hidden(const gdn_config *c);   // mlp_hidden or 2/3*ratio*d rounded up to 256
int config_gdn_dv(const gdn_config *c);       // expand_v * head_dim
char config_layer_kind(const gdn_config *c, int layer); // 'G', 'S' or 'A'

// Resume (train.c): the keys whose value may differ between the config of a --resume run and
// the config stored in its checkpoint (config.c, resumable_keys: how the run executes, how long
// it runs and how it is watched, how a step's batch is split, the learning-rate schedule and
// clipping). Every other key must agree.
bool config_key_resumable(const char *section, const char *key);
// Index of the first key, in schema order from key index `from` (0: all), whose value differs
// between a and b, skipping the resumable keys when skip_resumable; -1 when none. The key's
// section, name and both values as INI text go to *d.
typedef struct {
    const char *section, *key;
    char a[CFG_STR + 64], b[CFG_STR + 64];
} config_difference;
int config_first_difference(const gdn_config *a, const gdn_config *b, int from,
                            bool skip_resumable, config_difference *d);

// The schema's default of [section] key as the INI text of its table (e.g. "1e-3", "off",
// "data/tinyshakespeare.h5"), or NULL when the schema has no such key. Read by documentation
// checks (tests/test_readme_options.c: README's options table against the schema).
const char *config_key_default(const char *section, const char *key);

#ifdef __cplusplus
}
#endif
