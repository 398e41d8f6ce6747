// config.c — the run configuration: a schema table (every section and key, typed, ranged, with
// its default and a one-line help), the INI loader on top of libinih with file:line errors,
// `include`, `--set` overrides, the cross-key rules, and the writer (DESIGN 7).
//
// How a file is read: inih pulls lines through cfg_reader, which counts them (this libinih has
// no line number in the handler), strips leading blanks, and checks the line's shape itself, so
// that every syntax error is reported (inih returns only the first) and a rejected line reaches
// inih as a blank one. Stripping leading blanks matters: inih reads an indented line as the
// continuation of the previous key's value (Python configparser style), so an indented
// "d_model = 64" after "n_layers = 2" would otherwise become n_layers = "d_model = 64". No key
// here takes a multi-line value, so an indented line is read as the ordinary line it looks like.
//
// Every value goes through cfg_apply, the defaults included (they are INI text in the table), so
// a key's type and range are stated once. Loading works on a copy; *c changes only on success.
#include "config.h"
#include "common.h"
#include <ctype.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <strings.h>
#include <sys/stat.h>

// CFG_ENUM: a string field holding one of the choices. CFG_MODE: an int field (a C enum) holding
// the index of the value among the choices; it also takes the boolean words, false / no / 0 / off
// for choice 0 and true / yes / 1 / on for choice 1 (train.recompute = true is full), unless the
// key has CFG_NAMES_ONLY.
typedef enum {
    CFG_INT, CFG_U64, CFG_DOUBLE, CFG_BOOL, CFG_STRING, CFG_ENUM, CFG_PATTERN, CFG_MODE
} cfg_type;

enum {
    CFG_MIN_OPEN = 1,  // range excludes min
    CFG_MAX_OPEN = 2,  // range excludes max
    CFG_ZERO_OK = 4,   // 0 is also allowed (a "take it from elsewhere" value)
    CFG_EVEN = 8,      // integer must be even
    CFG_NAMES_ONLY = 16,  // CFG_MODE: the choices' names only, not the boolean words
};

// Keys the schema replaced. A config file or --set that still sets one gets the hint in its
// error; a checkpoint's config text (config_load_string) is read as the new key, its boolean
// value as the choice named for it (so that checkpoints written with the old key still load).
static const struct {
    const char *section, *key, *hint;
    const char *new_key, *if_true, *if_false;
} cfg_replaced[] = {
    {"gdn", "save_states", "gdn.bwd_states = saved for save_states = true, replay for false",
     "bwd_states", "saved", "replay"},
};

typedef struct {
    const char *section, *key;  // INI names: [section] key
    cfg_type type;
    size_t offset, size;        // field in gdn_config
    double min, max;            // numeric range (INFINITY: unbounded; ints stop at INT_MAX)
    unsigned flags;
    const char *def;            // default, as INI text
    const char *choices;        // CFG_ENUM, CFG_MODE: "a|b|c"
    const char *help;
} cfg_key;

#define F(field) offsetof(gdn_config, field), sizeof(((gdn_config *)0)->field)
#define INF INFINITY

static const char *const cfg_sections[] = {"model", "gdn", "swa", "data", "train", "optim", "dist", "log", "eval"};
#define CFG_NSECTIONS ((int)(sizeof cfg_sections / sizeof cfg_sections[0]))

// Bounds: every numeric key is bounded by what one machine can hold and what a real run uses,
// with room to spare; sizes are int downstream (model.h), and model_check_sizes checks the
// products. Widths: d_model <= 65536, mlp_hidden <= 2^20 (mlp_ratio <= 64), heads <= 4096 of
// head_dim <= 1024 (expand_v <= 64), conv_size <= 256, n_layers <= 256 (model.h MAX_LAYERS),
// vocab_size <= 2^24 (the token file's limit, dataset.c). Tokens: seq_len and window <= 2^24,
// batch_size <= 65536, and batch_size x seq_len <= 2^31 - 1 (cfg_check_cross). Counts: steps and
// the step cadences <= 10^9; grad_accum and eval_batches <= 65536 (a count near 2^31 would make
// one step or one evaluation run for days); threads <= 4096; timeout_s <= a week; bucket_mb <=
// 65536 (64 GiB).
// section, key, type, field, min, max, flags, default, choices, help
static const cfg_key cfg_keys[] = {
    {"model", "pattern", CFG_PATTERN, F(pattern), 0, 0, 0, "GS", NULL, "mixer per layer, repeated to n_layers: G gated delta, S sliding window, A full attention"},
    {"model", "n_layers", CFG_INT, F(n_layers), 1, 256, 0, "2", NULL, "number of blocks"},
    {"model", "d_model", CFG_INT, F(d_model), 1, 65536, 0, "128", NULL, "residual width"},
    {"model", "vocab_size", CFG_INT, F(vocab_size), 2, 16777216, CFG_ZERO_OK, "0", NULL, "0 = from the dataset"},
    {"model", "tie_embeddings", CFG_BOOL, F(tie_embeddings), 0, 0, 0, "true", NULL, "LM head shares the embedding"},
    {"model", "dropout", CFG_DOUBLE, F(dropout), 0, 1, CFG_MAX_OPEN, "0", NULL, "on each residual branch"},
    {"model", "mixer_dropout", CFG_DOUBLE, F(mixer_dropout), 0, 1, CFG_MAX_OPEN, "0", NULL, "on the mixer's input to its output projection"},
    {"model", "embed_dropout", CFG_DOUBLE, F(embed_dropout), 0, 1, CFG_MAX_OPEN, "0", NULL, "on the embedding output"},
    {"model", "mlp_ratio", CFG_DOUBLE, F(mlp_ratio), 0, 64, CFG_MIN_OPEN, "4", NULL, "hidden = 2/3 * ratio * d_model, rounded up to 256"},
    {"model", "mlp_hidden", CFG_INT, F(mlp_hidden), 0, 1048576, 0, "0", NULL, "0 = from mlp_ratio"},
    {"model", "norm_eps", CFG_DOUBLE, F(norm_eps), 0, INF, CFG_MIN_OPEN, "1e-6", NULL, "RMSNorm epsilon"},
    {"model", "doc_reset", CFG_BOOL, F(doc_reset), 0, 0, 0, "true", NULL, "when the batch carries document starts: GDN state, short conv and attention restart at each document"},
    {"model", "doc_positions", CFG_BOOL, F(doc_positions), 0, 0, 0, "true", NULL, "with doc_reset: RoPE positions count from the document start (false: from the row start)"},
    {"model", "init_std", CFG_DOUBLE, F(init_std), 0, INF, CFG_MIN_OPEN, "0.02", NULL, "std of linear weights at init"},
    {"gdn", "n_heads", CFG_INT, F(gdn_n_heads), 1, 4096, 0, "2", NULL, "GDN heads"},
    {"gdn", "head_dim", CFG_INT, F(gdn_head_dim), 1, 1024, 0, "32", NULL, "key dim dk"},
    {"gdn", "expand_v", CFG_DOUBLE, F(gdn_expand_v), 0, 64, CFG_MIN_OPEN, "2", NULL, "dv = expand_v * head_dim, a whole number"},
    {"gdn", "conv_size", CFG_INT, F(gdn_conv_size), 1, 256, 0, "4", NULL, "short causal conv kernel"},
    {"gdn", "short_conv", CFG_BOOL, F(gdn_short_conv), 0, 0, 0, "true", NULL, "conv on q, k, v"},
    {"gdn", "output_gate", CFG_BOOL, F(gdn_output_gate), 0, 0, 0, "true", NULL, "silu(z) gate after the norm"},
    {"gdn", "gate", CFG_BOOL, F(gdn_gate), 0, 0, 0, "true", NULL, "false: alpha = 1 (DeltaNet)"},
    {"gdn", "delta", CFG_BOOL, F(gdn_delta), 0, 0, 0, "true", NULL, "false: gated linear attention"},
    {"gdn", "allow_neg_eigval", CFG_BOOL, F(gdn_allow_neg_eigval), 0, 0, 0, "false", NULL, "beta in (0, 2)"},
    {"gdn", "chunk_size", CFG_INT, F(gdn_chunk_size), 1, 256, 0, "64", NULL, "tokens per chunk"},
    {"gdn", "bwd_states", CFG_MODE, F(gdn_bwd_states), 0, 0, CFG_NAMES_ONLY, "replay", "replay|recompute|saved", "the backward's chunk-start states: replay (from the forward's gate cumsums and rows, ~v's size a layer), recompute (a second forward scan, nothing kept), saved (kept, B*H*ceil(T/64)*dk*dv fp32 a layer; fastest)"},
    {"gdn", "bwd_segment_chunks", CFG_INT, F(gdn_bwd_segment_chunks), 0, 1 << 20, 0, "0", NULL, "GPU: the GDN backward in segments of this many 64-token chunks, each segment's workspace reused by the next (0: the whole sequence at once; fewer chunks, less memory and more time; the same bits)"},
    {"swa", "n_heads", CFG_INT, F(swa_n_heads), 1, 4096, 0, "2", NULL, "attention heads"},
    {"swa", "head_dim", CFG_INT, F(swa_head_dim), 2, 1024, CFG_EVEN, "32", NULL, "even (RoPE pairs)"},
    {"swa", "window", CFG_INT, F(swa_window), 1, 16777216, 0, "64", NULL, ">= seq_len: full attention"},
    {"swa", "rope_base", CFG_DOUBLE, F(swa_rope_base), 0, INF, CFG_MIN_OPEN, "10000", NULL, "RoPE base"},
    {"swa", "deterministic", CFG_BOOL, F(swa_deterministic), 0, 0, 0, "true", NULL,
     "false: GPU bf16 attention backward in one pass, dq summed by atomics (faster; runs not bitwise repeatable)"},
    {"data", "path", CFG_STRING, F(data_path), 0, 0, 0, "data/tinyshakespeare.h5", NULL, "token data: a version-1 .h5 file, a shard directory or its index.json"},
    {"data", "seq_len", CFG_INT, F(seq_len), 1, 16777216, 0, "128", NULL, "tokens per sequence"},
    {"data", "mix", CFG_STRING, F(data_mix), 0, 0, 0, "", NULL, "PATH:WEIGHT, ...: a weighted mix of token sets (empty: data.path)"},
    {"data", "sampling", CFG_ENUM, F(data_sampling), 0, 0, 0, "windows", "windows|documents", "rows: random windows, or packed documents with their starts"},
    {"train", "device", CFG_ENUM, F(device), 0, 0, 0, "auto", "auto|cpu|cuda", "auto: the GPU when there is one and its kernels cover the model (gdn.head_dim 64, 128, 256; expand_v 1, 2; swa.head_dim 64, 128), else the CPU"},
    {"train", "precision", CFG_ENUM, F(precision), 0, 0, 0, "bf16", "fp32|bf16", "GPU storage; CPU is float64"},
    {"train", "batch_size", CFG_INT, F(batch_size), 1, 65536, 0, "8", NULL, "sequences per micro-batch per rank"},
    {"train", "recompute", CFG_MODE, F(recompute), 0, 0, 0, "off", "off|full|light", "full: redo the cheap activations before each layer's backward; light: only the norm and SwiGLU outputs, inside the backward kernels"},
    {"train", "head_chunk_rows", CFG_INT, F(head_chunk_rows), 1, 1073741824, CFG_ZERO_OK, "0", NULL, "tokens per LM-head logits chunk; 0 = at most 512 MiB of logits"},
    {"train", "gemm_tune", CFG_BOOL, F(gemm_tune), 0, 0, 0, "true", NULL, "GPU: time cuBLASLt's candidate algorithms at each GEMM shape's first call and keep the fastest that computes the same bits (never changes a result; false: the heuristic's first choice, no start-up cost)"},
    {"train", "grad_accum", CFG_INT, F(grad_accum), 1, 65536, 0, "1", NULL, "micro-batches per step"},
    {"train", "steps", CFG_INT, F(steps), 1, 1000000000, 0, "1000", NULL, "optimizer steps"},
    {"train", "seed", CFG_U64, F(seed), 0, 0, 0, "1337", NULL, "seeds init, data and dropout"},
    {"train", "eval_every", CFG_INT, F(eval_every), 0, 1000000000, 0, "100", NULL, "0 = only at the end"},
    {"train", "eval_batches", CFG_INT, F(eval_batches), 0, 65536, 0, "8", NULL, "batches per evaluation (each batch_size x grad_accum x ranks windows); 0 = the whole validation split"},
    {"train", "ckpt_every", CFG_INT, F(ckpt_every), 0, 1000000000, 0, "0", NULL, "0 = only at the end"},
    {"train", "keep_checkpoints", CFG_INT, F(keep_checkpoints), 1, 1000000, 0, "1", NULL, "checkpoints kept: the last N (checkpoint.h5 the latest, checkpoint-STEP.h5 the earlier ones) and, when N > 1, the best by validation loss (checkpoint-best.h5); docs/checkpoints.md"},
    {"train", "skip_zscore", CFG_DOUBLE, F(skip_zscore), 0, INF, 0, "0", NULL, "skip the update of a step whose gradient norm is more than this many standard deviations above the mean of the last skip_window updated steps; 0 = off (non-finite norms are skipped always)"},
    {"train", "skip_window", CFG_INT, F(skip_window), 2, 1024, 0, "100", NULL, "updated steps whose gradient norms the z-score is taken over (judged once the window is full)"},
    {"train", "max_skips", CFG_INT, F(max_skips), 1, 1000000, 0, "5", NULL, "skipped steps in a row that stop the run (exit 3, naming the last good checkpoint); 1 = stop at the first bad gradient norm"},
    {"train", "sample_every", CFG_INT, F(sample_every), 0, 1000000000, 0, "0", NULL, "print a short sample of the model every N steps (temperature 1, seed train.seed, after the data's end-of-text token; on the run's device, rank 0); 0 = off"},
    {"train", "sample_tokens", CFG_INT, F(sample_tokens), 1, 4096, 0, "64", NULL, "tokens per sample (train.sample_every)"},
    {"train", "out_dir", CFG_STRING, F(out_dir), 0, 0, 0, "runs/default", NULL, "run directory"},
    {"train", "overwrite", CFG_BOOL, F(overwrite), 0, 0, 0, "false", NULL, "a new run may start in an out_dir that holds a checkpoint or metrics, replacing them (false: refused)"},
    {"train", "threads", CFG_INT, F(threads), 0, 4096, 0, "0", NULL, "CPU threads (ops + OpenBLAS), 0 = default"},
    {"optim", "lr", CFG_DOUBLE, F(lr), 0, INF, CFG_MIN_OPEN, "1e-3", NULL, "peak learning rate"},
    {"optim", "min_lr", CFG_DOUBLE, F(min_lr), 0, INF, 0, "1e-4", NULL, "final learning rate, <= lr"},
    {"optim", "warmup_steps", CFG_INT, F(warmup_steps), 0, 1000000000, 0, "50", NULL, "linear warmup"},
    {"optim", "schedule", CFG_ENUM, F(schedule), 0, 0, 0, "cosine", "cosine|linear|constant|wsd", "decay after warmup"},
    {"optim", "decay_frac", CFG_DOUBLE, F(decay_frac), 0, 1, CFG_MIN_OPEN, "0.2", NULL, "wsd: last fraction of steps decaying"},
    {"optim", "weight_decay", CFG_DOUBLE, F(weight_decay), 0, INF, 0, "0.1", NULL, "AdamW decoupled decay"},
    {"optim", "beta1", CFG_DOUBLE, F(beta1), 0, 1, CFG_MAX_OPEN, "0.9", NULL, "AdamW"},
    {"optim", "beta2", CFG_DOUBLE, F(beta2), 0, 1, CFG_MAX_OPEN, "0.95", NULL, "AdamW"},
    {"optim", "eps", CFG_DOUBLE, F(adam_eps), 0, INF, CFG_MIN_OPEN, "1e-8", NULL, "AdamW"},
    {"optim", "grad_clip", CFG_DOUBLE, F(grad_clip), 0, INF, 0, "1", NULL, "global norm, 0 = off"},
    {"optim", "wd_embeddings", CFG_BOOL, F(wd_embeddings), 0, 0, 0, "false", NULL, "weight decay on embeddings"},
    {"dist", "backend", CFG_ENUM, F(dist_backend), 0, 0, 0, "auto", "auto|none|mpi|nccl", "auto: nccl on GPUs, mpi on CPUs when world > 1"},
    {"dist", "zero1", CFG_BOOL, F(zero1), 0, 0, 0, "false", NULL, "shard AdamW state across ranks"},
    {"dist", "nccl_id_path", CFG_STRING, F(nccl_id_path), 0, 0, 0, "", NULL, "file sharing the NCCL id without MPI"},
    {"dist", "bucket_mb", CFG_DOUBLE, F(bucket_mb), 0, 65536, CFG_MIN_OPEN, "25", NULL, "all-reduce bucket size"},
    {"dist", "overlap", CFG_BOOL, F(overlap), 0, 0, 0, "true", NULL, "sum gradient buckets during the backward; false: one pass after it"},
    {"dist", "timeout_s", CFG_INT, F(timeout_s), 1, 604800, 0, "300", NULL, "collective timeout"},
    {"log", "every", CFG_INT, F(log_every), 1, 1000000000, 0, "10", NULL, "steps between log lines"},
    {"log", "metrics_file", CFG_STRING, F(metrics_file), 0, 0, 0, "metrics.jsonl", NULL, "inside out_dir"},
    {"eval", "every", CFG_INT, F(ev_every), 0, 1000000000, 0, "0", NULL, "steps between evaluations of the [eval] section; 0 = at the end only"},
    {"eval", "val", CFG_STRING, F(ev_val), 0, 0, 0, "", NULL, "NAME:PATH, ...: validation loss val/NAME on the val split of each token set"},
    {"eval", "batches", CFG_INT, F(ev_batches), 0, 65536, 0, "8", NULL, "batches per eval.val set (as train.eval_batches); 0 = the whole split"},
    {"eval", "mc", CFG_STRING, F(ev_mc), 0, 0, 0, "", NULL, "NAME:FILE.jsonl, ...: multiple-choice tasks, mc/NAME/acc and acc_norm (docs/evaluation.md)"},
    {"eval", "mc_items", CFG_INT, F(ev_mc_items), 0, 1000000000, 0, "0", NULL, "items per multiple-choice task, the file's first; 0 = all"},
    {"eval", "mqar", CFG_STRING, F(ev_mqar), 0, 0, 0, "", NULL, "LEN:KEYS, ...: associative-recall probes recall/mqar_L{LEN}_k{KEYS}"},
    {"eval", "needle", CFG_STRING, F(ev_needle), 0, 0, 0, "", NULL, "LEN, ...: needle-in-a-haystack probes recall/needle_L{LEN}"},
    {"eval", "probes", CFG_INT, F(ev_probes), 1, 65536, 0, "64", NULL, "sequences per recall probe"},
    {"eval", "seed", CFG_U64, F(ev_seed), 0, 0, 0, "1234", NULL, "seeds the recall probes' tokens"},
};
#define CFG_NKEYS ((int)(sizeof cfg_keys / sizeof cfg_keys[0]))
#undef F
#undef INF

// A written line is "key = value"; inih's line buffer holds INI_MAX_LINE - 3 characters.
#define CFG_LINE_MAX (INI_MAX_LINE - 3)
#define CFG_MAX_INCLUDE_DEPTH 16
#define CFG_FILE_MAX (1 << 20)  // bytes of one config file

// ---- where a value came from, and error output ----------------------------------------------

typedef enum { CFG_AT_NONE, CFG_AT_INITIAL, CFG_AT_FILE, CFG_AT_SET } cfg_at_kind;
typedef struct {
    cfg_at_kind kind;
    const char *name;  // file name (FILE) or the "section.key" text (SET)
    int line;          // FILE: 1-based line, 0 = the file as a whole
} cfg_at;

typedef struct {
    gdn_config cfg;              // the working copy
    int nerr;
    cfg_at origin[CFG_NKEYS];    // where each key was last set (for the cross-key messages)
    char **names;                // strings the origins point to, freed at the end
    int nnames;
    struct { dev_t dev; ino_t ino; bool has_id; const char *name; } stack[CFG_MAX_INCLUDE_DEPTH];
    int depth;                   // files being read (the include chain)
    bool checkpoint;             // config text from a checkpoint: replaced keys are read as new
} cfg_load;

typedef struct {
    cfg_load *L;
    const char *name, *dir;      // dir: folder that relative includes start from
    const char *text;
    size_t len, pos;
    int lineno;                  // line last handed to inih (inih calls the handler right after)
    int sec;                     // index into cfg_sections, or one of the two below
    int seen[CFG_NKEYS];         // line where this file set each key, 0 = not yet
} cfg_file;
enum { CFG_SEC_NONE = -1, CFG_SEC_SKIP = -2 };  // before the first header; in a bad/unknown one

static const char *cfg_keep(cfg_load *L, const char *s) {
    L->names = gdn_realloc(L->names, (size_t)(L->nnames + 1) * sizeof *L->names);
    return L->names[L->nnames++] = gdn_strdup(s);
}

// Prints "<where>: [section] key: <message>" (section and key when known) and counts it.
__attribute__((format(printf, 5, 6)))
static void cfg_err(cfg_load *L, const cfg_at *at, const char *section, const char *key,
                    const char *fmt, ...) {
    char pre[4608] = "", msg[8192];
    size_t n = 0;
    if (at->kind == CFG_AT_FILE)
        n = (size_t)snprintf(pre, sizeof pre, at->line > 0 ? "%s:%d: " : "%s: ", at->name, at->line);
    else if (at->kind == CFG_AT_INITIAL)
        n = (size_t)snprintf(pre, sizeof pre, "(initial value) ");
    if (at->kind == CFG_AT_SET)
        snprintf(pre, sizeof pre, "--set %s: ", at->name);
    else if (n < sizeof pre && section && key)
        snprintf(pre + n, sizeof pre - n, "[%s] %s: ", section, key);
    else if (n < sizeof pre && section)
        snprintf(pre + n, sizeof pre - n, "[%s]: ", section);
    else if (n < sizeof pre && key)
        snprintf(pre + n, sizeof pre - n, "%s: ", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s\n", pre, msg);
    L->nerr++;
}

static void cfg_at_str(const cfg_at *at, const cfg_key *k, char *buf, size_t n) {
    switch (at->kind) {
    case CFG_AT_FILE: snprintf(buf, n, "is set at %s:%d", at->name, at->line); break;
    case CFG_AT_SET: snprintf(buf, n, "is set by --set %s.%s", k->section, k->key); break;
    default: snprintf(buf, n, "has its initial value"); break;
    }
}

// ---- values -----------------------------------------------------------------------------------

static int cfg_section_index(const char *name) {
    for (int s = 0; s < CFG_NSECTIONS; s++)
        if (strcmp(cfg_sections[s], name) == 0) return s;
    return -1;
}
static int cfg_key_index(const char *section, const char *key) {
    for (int i = 0; i < CFG_NKEYS; i++)
        if (strcmp(cfg_keys[i].section, section) == 0 && strcmp(cfg_keys[i].key, key) == 0) return i;
    return -1;
}

// Longest string value for key k: the field, and a written "key = value" line inih can read.
static size_t cfg_str_max(const cfg_key *k) {
    size_t line = (size_t)CFG_LINE_MAX - strlen(k->key) - 3;
    return GDN_MIN(k->size - 1, line);
}

// What key k accepts, in words.
static void cfg_allowed(const cfg_key *k, char *buf, size_t n) {
    const char *lo = (k->flags & CFG_MIN_OPEN) ? "(" : "[", *hi = (k->flags & CFG_MAX_OPEN) ? ")" : "]";
    const char *gt = (k->flags & CFG_MIN_OPEN) ? ">" : ">=";
    switch (k->type) {
    case CFG_INT: {
        const char *what = (k->flags & CFG_EVEN) ? "an even integer" : "an integer";
        if (isinf(k->max))
            snprintf(buf, n, "%s%s >= %.0f", (k->flags & CFG_ZERO_OK) ? "0 or " : "", what, k->min);
        else
            snprintf(buf, n, "%s%s in [%.0f, %.0f]", (k->flags & CFG_ZERO_OK) ? "0 or " : "", what,
                     k->min, k->max);
        break;
    }
    case CFG_U64: snprintf(buf, n, "an integer in [0, %" PRIu64 "]", UINT64_MAX); break;
    case CFG_DOUBLE:
        if (isinf(k->max)) snprintf(buf, n, "a number %s %g", gt, k->min);
        else snprintf(buf, n, "a number in %s%g, %g%s", lo, k->min, k->max, hi);
        break;
    case CFG_BOOL: snprintf(buf, n, "true/false, yes/no, on/off, 1/0"); break;
    case CFG_ENUM:
    case CFG_MODE: {
        size_t m = 0;
        for (const char *c = k->choices; *c && m + 4 < n; c++) {
            if (*c == '|') m += (size_t)snprintf(buf + m, n - m, " | ");
            else buf[m++] = *c;
        }
        buf[GDN_MIN(m, n - 1)] = '\0';
        if (k->type == CFG_MODE && !(k->flags & CFG_NAMES_ONLY) && m < n) {  // the boolean words
            size_t c0 = strcspn(k->choices, "|"), c1 = strcspn(k->choices + c0 + 1, "|");
            snprintf(buf + m, n - m, " (or true = %.*s, false = %.*s)", (int)c1,
                     k->choices + c0 + 1, (int)c0, k->choices);
        }
        break;
    }
    case CFG_STRING:
        snprintf(buf, n, "text of at most %zu characters, no control characters, no ';' at the "
                 "start or after a blank (INI comment)", cfg_str_max(k));
        break;
    case CFG_PATTERN:
        snprintf(buf, n, "1 to %zu letters from G (gated delta), S (sliding window), A (full attention)",
                 k->size - 1);
        break;
    }
}

static bool cfg_in_range(const cfg_key *k, double v) {
    if ((k->flags & CFG_ZERO_OK) && v == 0) return true;
    bool lo = (k->flags & CFG_MIN_OPEN) ? v > k->min : v >= k->min;
    bool hi = isinf(k->max) || ((k->flags & CFG_MAX_OPEN) ? v < k->max : v <= k->max);
    return lo && hi;
}

// Parse `v` for key k into c. On failure: false, the problem in err (without the allowed part).
static bool cfg_apply(const cfg_key *k, const char *v, gdn_config *c, char *err, size_t n) {
    char *field = (char *)c + k->offset, *end = NULL;
    switch (k->type) {
    case CFG_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || isspace((unsigned char)*v)) {
            snprintf(err, n, "expected an integer, got '%s'", v);
            return false;
        }
        if (errno == ERANGE || x > INT_MAX || x < INT_MIN || !cfg_in_range(k, (double)x) ||
            ((k->flags & CFG_EVEN) && x % 2 != 0)) {
            snprintf(err, n, "%s is out of range", v);
            return false;
        }
        int xi = (int)x;
        memcpy(field, &xi, sizeof xi);
        return true;
    }
    case CFG_U64: {
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (!isdigit((unsigned char)*v) || *end) {  // strtoull would wrap "-1" silently
            snprintf(err, n, "expected an unsigned integer, got '%s'", v);
            return false;
        }
        if (errno == ERANGE || x > UINT64_MAX) {
            snprintf(err, n, "%s is out of range", v);
            return false;
        }
        uint64_t xu = (uint64_t)x;
        memcpy(field, &xu, sizeof xu);
        return true;
    }
    case CFG_DOUBLE: {
        double x = strtod(v, &end);
        if (!*v || *end || isspace((unsigned char)*v)) {
            snprintf(err, n, "expected a number, got '%s'", v);
            return false;
        }
        if (!isfinite(x)) {
            snprintf(err, n, "expected a finite number, got '%s'", v);
            return false;
        }
        if (!cfg_in_range(k, x)) {
            snprintf(err, n, "%s is out of range", v);
            return false;
        }
        memcpy(field, &x, sizeof x);
        return true;
    }
    case CFG_BOOL: {
        static const char *const t[] = {"true", "1", "yes", "on"}, *const f[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            bool b = strcasecmp(v, t[i]) == 0;
            if (b || strcasecmp(v, f[i]) == 0) {
                memcpy(field, &b, sizeof b);
                return true;
            }
        }
        snprintf(err, n, "expected a boolean, got '%s'", v);
        return false;
    }
    case CFG_ENUM: {
        size_t len = strlen(v);
        for (const char *ch = k->choices; *ch;) {
            size_t m = strcspn(ch, "|");
            if (m == len && strncmp(ch, v, m) == 0) {
                memset(field, 0, k->size);
                memcpy(field, v, len);
                return true;
            }
            ch += m + (ch[m] == '|');
        }
        snprintf(err, n, "'%s' is not one of the choices", v);
        return false;
    }
    case CFG_MODE: {
        static const char *const t[] = {"true", "1", "yes", "on"},
                                 *const f[] = {"false", "0", "no", "off"};
        int idx = -1, i = 0;
        size_t len = strlen(v);
        for (const char *ch = k->choices; *ch && idx < 0; i++) {
            size_t m = strcspn(ch, "|");
            if (m == len && strncmp(ch, v, m) == 0) idx = i;
            ch += m + (ch[m] == '|');
        }
        for (int j = 0; j < 4 && idx < 0 && !(k->flags & CFG_NAMES_ONLY); j++) {
            if (strcasecmp(v, f[j]) == 0) idx = 0;
            if (strcasecmp(v, t[j]) == 0) idx = 1;
        }
        if (idx < 0) {
            snprintf(err, n, "'%s' is not one of the choices", v);
            return false;
        }
        memcpy(field, &idx, sizeof idx);
        return true;
    }
    case CFG_PATTERN: {
        size_t len = strlen(v);
        if (len == 0) {
            snprintf(err, n, "the pattern is empty");
            return false;
        }
        if (len >= k->size) {
            snprintf(err, n, "the pattern has %zu letters", len);
            return false;
        }
        size_t bad = strspn(v, "GSA");
        if (bad < len) {
            snprintf(err, n, "pattern '%s' has the letter '%c'", v, v[bad]);
            return false;
        }
        memset(field, 0, k->size);
        memcpy(field, v, len);
        return true;
    }
    case CFG_STRING: {
        size_t len = strlen(v);
        if (len > cfg_str_max(k)) {
            snprintf(err, n, "the value is %zu characters long", len);
            return false;
        }
        for (size_t i = 0; i < len; i++) {
            unsigned char ch = (unsigned char)v[i];
            if (ch < 0x20 || ch == 0x7f) {
                snprintf(err, n, "control character 0x%02x at position %zu", ch, i);
                return false;
            }
            if (ch == ';' && (i == 0 || isspace((unsigned char)v[i - 1]))) {
                snprintf(err, n, "'%s' would be cut at the ';' (INI comment) when read back", v);
                return false;
            }
        }
        if (len && (isspace((unsigned char)v[0]) || isspace((unsigned char)v[len - 1]))) {
            snprintf(err, n, "'%s' has blanks at an end", v);
            return false;
        }
        memset(field, 0, k->size);
        memcpy(field, v, len);
        return true;
    }
    }
    snprintf(err, n, "internal: unknown type");
    return false;
}

static void cfg_set_key(cfg_load *L, const cfg_at *at, int ki, const char *v) {
    const cfg_key *k = &cfg_keys[ki];
    char err[512], allowed[256];
    if (cfg_apply(k, v, &L->cfg, err, sizeof err)) {
        L->origin[ki] = *at;
        return;
    }
    cfg_allowed(k, allowed, sizeof allowed);
    cfg_err(L, at, k->section, k->key, "%s; allowed: %s", err, allowed);
}

// ---- unknown names: suggest the closest known one ---------------------------------------------

static int cfg_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return INT_MAX;
    int d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            d[i][j] = GDN_MIN(sub, GDN_MIN(d[i - 1][j], d[i][j - 1]) + 1);
        }
    return d[la][lb];
}
static bool cfg_close_enough(const char *typed, int dist) {
    return dist <= GDN_MAX(2, (int)strlen(typed) / 2);
}

static void cfg_unknown_section(cfg_load *L, const cfg_at *at, const char *name) {
    int best = -1, bd = INT_MAX;
    for (int s = 0; s < CFG_NSECTIONS; s++) {
        int d = strcasecmp(name, cfg_sections[s]) == 0 ? 0 : cfg_edit_distance(name, cfg_sections[s]);
        if (d < bd) bd = d, best = s;
    }
    char hint[96] = "";
    if (best >= 0 && cfg_close_enough(name, bd))
        snprintf(hint, sizeof hint, " (did you mean [%s]?)", cfg_sections[best]);
    cfg_err(L, at, at->kind == CFG_AT_SET ? NULL : name, NULL,
            "unknown section%s; allowed: model, gdn, swa, data, train, optim, dist, log", hint);
}

static void cfg_unknown_key(cfg_load *L, const cfg_at *at, int sec, const char *name) {
    const char *section = cfg_sections[sec];
    int best = -1, bd = INT_MAX, other = -1;
    size_t ln = strlen(name);
    for (int i = 0; i < CFG_NKEYS; i++) {
        const cfg_key *k = &cfg_keys[i];
        size_t lk = strlen(k->key);
        if (strcmp(k->section, section) != 0) {
            if (strcmp(k->key, name) == 0 && other < 0) other = i;  // right key, wrong section
            continue;
        }
        // struct-style names: gdn_n_heads, adam_eps, log_every
        int d = (ln > lk && name[ln - lk - 1] == '_' && strcmp(name + ln - lk, k->key) == 0)
                    ? 1 : cfg_edit_distance(name, k->key);
        if (d < bd) bd = d, best = i;
    }
    char hint[128] = "", allowed[1024];
    const char *replaced = NULL;
    for (size_t i = 0; i < sizeof cfg_replaced / sizeof cfg_replaced[0]; i++)
        if (strcmp(cfg_replaced[i].section, section) == 0 && strcmp(cfg_replaced[i].key, name) == 0)
            replaced = cfg_replaced[i].hint;
    if (replaced)
        snprintf(hint, sizeof hint, " (replaced: use %s)", replaced);
    else if (best >= 0 && cfg_close_enough(name, bd))
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", cfg_keys[best].key);
    else if (other >= 0)
        snprintf(hint, sizeof hint, " (did you mean [%s] %s?)", cfg_keys[other].section, name);
    size_t m = 0;
    for (int i = 0; i < CFG_NKEYS && m < sizeof allowed; i++)
        if (strcmp(cfg_keys[i].section, section) == 0)
            m += (size_t)snprintf(allowed + m, sizeof allowed - m, "%s%s", m ? ", " : "", cfg_keys[i].key);
    cfg_err(L, at, section, name, "unknown key%s; allowed: %s", hint, allowed);
}

// ---- reading INI text -------------------------------------------------------------------------

static void cfg_read_file(cfg_load *L, const char *path, const cfg_file *parent);

// The first of `chars` in [s, e) before an inline comment (inih's rule: ';' after a blank).
static const char *cfg_find(const char *s, const char *e, const char *chars) {
    for (const char *p = s; p < e; p++) {
        if (strchr(chars, *p)) return p;
        if (*p == ';' && p > s && isspace((unsigned char)p[-1])) return NULL;
    }
    return NULL;
}

// The shape of one line (s, n: leading and trailing blanks gone); tracks the section.
// Returns false for a line rejected here (already reported).
static bool cfg_check_line(cfg_file *f, const char *s, size_t n) {
    cfg_at at = {CFG_AT_FILE, f->name, f->lineno};
    const char *e = s + n;
    if (n == 0 || *s == ';' || *s == '#') return true;
    if (*s == '[') {
        const char *close = cfg_find(s + 1, e, "]");
        const char *rest = close ? close + 1 : e;
        while (rest < e && isspace((unsigned char)*rest)) rest++;
        if (!close || (rest < e && *rest != ';' && *rest != '#')) {
            cfg_err(f->L, &at, NULL, NULL, "bad section header '%.*s'; allowed: [name], "
                    "optionally followed by a ';' comment", (int)GDN_MIN(n, 80), s);
            f->sec = CFG_SEC_SKIP;
            return false;
        }
        const char *a = s + 1, *b = close;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(b - a), a);
        f->sec = cfg_section_index(name);
        if (f->sec < 0) {
            cfg_unknown_section(f->L, &at, name);
            f->sec = CFG_SEC_SKIP;  // its keys are not reported one by one
        }
        return true;
    }
    if (!cfg_find(s, e, "=:")) {
        cfg_err(f->L, &at, NULL, NULL, "cannot read '%.*s'; allowed: 'key = value', '[section]', "
                "a comment (';' or '#') or a blank line", (int)GDN_MIN(n, 80), s);
        return false;
    }
    return true;
}

// inih's reader: hands over one whole line, leading blanks (and a UTF-8 BOM) stripped; a line
// rejected by cfg_check_line or too long for inih's buffer goes over as a blank line.
static char *cfg_reader(char *str, int num, void *stream) {
    cfg_file *f = stream;
    if (f->pos >= f->len || num < 2) return NULL;
    const char *s = f->text + f->pos, *nl = memchr(s, '\n', f->len - f->pos);
    size_t n = nl ? (size_t)(nl - s) : f->len - f->pos;
    f->pos += n + (nl != NULL);
    f->lineno++;
    if (f->lineno == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3, n -= 3;
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    strcpy(str, "\n");
    if (n + 2 > (size_t)num) {
        cfg_at at = {CFG_AT_FILE, f->name, f->lineno};
        cfg_err(f->L, &at, NULL, NULL, "the line is %zu characters long; allowed: at most %d", n, num - 2);
        if (*s == '[') f->sec = CFG_SEC_SKIP;
        return str;
    }
    if (!cfg_check_line(f, s, n)) return str;
    memcpy(str, s, n);
    str[n] = '\n';
    str[n + 1] = '\0';
    return str;
}

static void cfg_include(cfg_file *f, const char *value) {
    cfg_at at = {CFG_AT_FILE, f->name, f->lineno};
    if (!*value) {
        cfg_err(f->L, &at, NULL, "include", "no file named; allowed: include = path (relative to %s)", f->dir);
        return;
    }
    char *path;
    if (value[0] == '/' || strcmp(f->dir, ".") == 0) {
        path = gdn_strdup(value);
    } else {
        path = gdn_malloc(strlen(f->dir) + strlen(value) + 2);
        sprintf(path, "%s/%s", f->dir, value);
    }
    cfg_read_file(f->L, path, f);
    free(path);
}

static int cfg_handler(void *user, const char *section, const char *name, const char *value) {
    (void)section;  // cfg_check_line tracks the section (and knows when to skip its keys)
    cfg_file *f = user;
    cfg_at at = {CFG_AT_FILE, f->name, f->lineno};
    bool include = strcmp(name, "include") == 0;
    if (f->sec == CFG_SEC_SKIP) return 1;
    if (f->sec == CFG_SEC_NONE) {
        if (include) cfg_include(f, value);
        else cfg_err(f->L, &at, NULL, name, "a key before the first [section]; allowed: include = path");
        return 1;
    }
    if (include) {
        cfg_err(f->L, &at, cfg_sections[f->sec], name, "include after a section header; allowed: "
                "include = path before the first section");
        return 1;
    }
    int ki = cfg_key_index(cfg_sections[f->sec], name);
    const size_t nrep = sizeof cfg_replaced / sizeof cfg_replaced[0];
    for (size_t i = 0; ki < 0 && f->L->checkpoint && i < nrep; i++)
        if (strcmp(cfg_replaced[i].section, cfg_sections[f->sec]) == 0 &&
            strcmp(cfg_replaced[i].key, name) == 0) {
            value = strcmp(value, "true") == 0 ? cfg_replaced[i].if_true : cfg_replaced[i].if_false;
            name = cfg_replaced[i].new_key;
            ki = cfg_key_index(cfg_sections[f->sec], name);
        }
    if (ki < 0) {
        if (*name) cfg_unknown_key(f->L, &at, f->sec, name);
        else cfg_err(f->L, &at, cfg_sections[f->sec], NULL, "no key name before '='; allowed: key = value");
        return 1;
    }
    if (f->seen[ki]) {
        cfg_err(f->L, &at, cfg_sections[f->sec], name, "duplicate key (first set at line %d); allowed: "
                "each key once per file (an including file or --set may override)", f->seen[ki]);
        return 1;
    }
    f->seen[ki] = f->lineno;
    cfg_set_key(f->L, &at, ki, value);
    return 1;  // errors are counted in L; inih goes on to the next line either way
}

// Parse INI text. `name` is for messages; `dir` is where relative includes start.
static void cfg_parse_text(cfg_load *L, const char *name, const char *dir, const char *text, size_t len) {
    cfg_file f = {.L = L, .name = cfg_keep(L, name), .dir = dir, .text = text, .len = len,
                  .sec = CFG_SEC_NONE};
    if (strlen(text) != len) {
        cfg_at at = {CFG_AT_FILE, f.name, 0};
        cfg_err(L, &at, NULL, NULL, "contains a NUL byte; allowed: INI text");
        return;
    }
    int rc = ini_parse_stream(cfg_reader, &f, cfg_handler, &f);
    if (rc != 0) {  // cfg_reader hands inih only well-formed lines; this is a safety net
        cfg_at at = {CFG_AT_FILE, f.name, rc > 0 ? rc : 0};
        cfg_err(L, &at, NULL, NULL, "the INI parser failed (code %d)", rc);
    }
}

// Read and parse the file at `path`; parent: the file whose include names it (or NULL).
static void cfg_read_file(cfg_load *L, const char *path, const cfg_file *parent) {
    cfg_at at = parent ? (cfg_at){CFG_AT_FILE, parent->name, parent->lineno} : (cfg_at){CFG_AT_NONE, NULL, 0};
    const char *key = parent ? "include" : NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        cfg_err(L, &at, NULL, key, "cannot open config %s: %s", path, strerror(errno));
        return;
    }
    struct stat st;
    int fs = fstat(fileno(fp), &st);
    if (fs != 0 || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode))) {  // not /dev/zero, a tty, ...
        cfg_err(L, &at, NULL, key, "cannot read config %s: %s", path,
                fs != 0 ? strerror(errno) : S_ISDIR(st.st_mode) ? "it is a directory"
                                                                : "not a regular file or a pipe");
        fclose(fp);
        return;
    }
    for (int i = 0; i < L->depth; i++) {
        if (!L->stack[i].has_id || L->stack[i].dev != st.st_dev || L->stack[i].ino != st.st_ino) continue;
        char chain[1024];
        size_t m = 0;
        for (int j = i; j < L->depth && m < sizeof chain; j++)
            m += (size_t)snprintf(chain + m, sizeof chain - m, "%s -> ", L->stack[j].name);
        if (m < sizeof chain) snprintf(chain + m, sizeof chain - m, "%s", path);
        cfg_err(L, &at, NULL, key, "include cycle: %s; allowed: includes that do not lead back", chain);
        fclose(fp);
        return;
    }
    if (L->depth == CFG_MAX_INCLUDE_DEPTH) {
        cfg_err(L, &at, NULL, key, "includes nested deeper than %d at %s", CFG_MAX_INCLUDE_DEPTH, path);
        fclose(fp);
        return;
    }
    size_t cap = 4096, len = 0;
    char *text = gdn_malloc(cap);
    errno = 0;
    for (;;) {  // at most CFG_FILE_MAX + 1 bytes: enough to tell that the file is too large
        len += fread(text + len, 1, cap - 1 - len, fp);
        if (len < cap - 1 || len > CFG_FILE_MAX) break;
        cap *= 2;
        text = gdn_realloc(text, cap);
    }
    text[len] = '\0';
    bool bad = ferror(fp) != 0;
    int read_errno = errno ? errno : EIO;
    fclose(fp);
    if (bad || len > CFG_FILE_MAX) {
        if (bad) cfg_err(L, &at, NULL, key, "cannot read config %s: %s", path, strerror(read_errno));
        else cfg_err(L, &at, NULL, key, "config %s is larger than %d bytes; allowed: an INI file "
                     "of at most that size", path, CFG_FILE_MAX);
        free(text);
        return;
    }
    char *dir = gdn_strdup(path), *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    L->stack[L->depth].dev = st.st_dev;
    L->stack[L->depth].ino = st.st_ino;
    L->stack[L->depth].has_id = true;
    L->stack[L->depth].name = path;
    L->depth++;
    cfg_parse_text(L, path, dir, text, len);
    L->depth--;
    free(dir);
    free(text);
}

// ---- --set, cross-key rules, load entry points ------------------------------------------------

static char *cfg_trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

static void cfg_set_one(cfg_load *L, const char *assignment) {
    char *copy = gdn_strdup(assignment), *eq = strchr(copy, '=');
    if (eq) *eq = '\0';
    char *lhs = cfg_trim(copy), *dot = strchr(lhs, '.');
    cfg_at at = {CFG_AT_SET, cfg_keep(L, lhs), 0};
    if (!eq || !dot) {
        at.name = cfg_keep(L, assignment);
        cfg_err(L, &at, NULL, NULL, "cannot read this override; allowed: section.key=value");
        free(copy);
        return;
    }
    *dot = '\0';
    char *section = cfg_trim(lhs), *key = cfg_trim(dot + 1), *value = cfg_trim(eq + 1);
    int sec = cfg_section_index(section);
    if (sec < 0) cfg_unknown_section(L, &at, section);
    else if (cfg_key_index(section, key) < 0) cfg_unknown_key(L, &at, sec, key);
    else cfg_set_key(L, &at, cfg_key_index(section, key), value);
    free(copy);
}

static void cfg_fmt_double(double x, char *buf, size_t n);

static void cfg_check_cross(cfg_load *L) {
    const gdn_config *c = &L->cfg;
    char where[600], x[32], y[32], z[32];
    // dv = expand_v * dk: a whole number >= 1 (to a relative 1e-9, so 0.1 * 30 counts as 3)
    int ie = cfg_key_index("gdn", "expand_v"), ih = cfg_key_index("gdn", "head_dim");
    double dv = c->gdn_expand_v * c->gdn_head_dim;
    if (!(dv >= 1 && fabs(dv - nearbyint(dv)) <= 1e-9 * dv)) {
        bool on_e = L->origin[ie].kind != CFG_AT_INITIAL || L->origin[ih].kind == CFG_AT_INITIAL;
        int at = on_e ? ie : ih, other = on_e ? ih : ie;
        cfg_at_str(&L->origin[other], &cfg_keys[other], where, sizeof where);
        cfg_fmt_double(c->gdn_expand_v, x, sizeof x);
        cfg_fmt_double(dv, y, sizeof y);
        cfg_err(L, &L->origin[at], "gdn", cfg_keys[at].key,
                "expand_v * head_dim = %s * %d = %s is not a whole number (it is dv, the value "
                "head dim; %s %s); allowed: values whose product is a whole number >= 1",
                x, c->gdn_head_dim, y, cfg_keys[other].key, where);
    }
    // the tokens of one micro-batch, B x T, index int arrays (model.h N)
    int ib = cfg_key_index("train", "batch_size"), it = cfg_key_index("data", "seq_len");
    if ((long long)c->batch_size * c->seq_len > INT_MAX) {
        bool on_b = L->origin[ib].kind != CFG_AT_INITIAL || L->origin[it].kind == CFG_AT_INITIAL;
        int at = on_b ? ib : it, other = on_b ? it : ib;
        cfg_at_str(&L->origin[other], &cfg_keys[other], where, sizeof where);
        cfg_err(L, &L->origin[at], cfg_keys[at].section, cfg_keys[at].key,
                "batch_size x seq_len = %d x %d = %lld tokens per micro-batch (%s %s); allowed: a "
                "product of at most %d (use train.grad_accum for more tokens per step)",
                c->batch_size, c->seq_len, (long long)c->batch_size * c->seq_len,
                cfg_keys[other].key, where, INT_MAX);
    }
    int il = cfg_key_index("optim", "lr"), im = cfg_key_index("optim", "min_lr");
    if (c->min_lr > c->lr) {
        bool on_m = L->origin[im].kind != CFG_AT_INITIAL || L->origin[il].kind == CFG_AT_INITIAL;
        int at = on_m ? im : il, other = on_m ? il : im;
        cfg_at_str(&L->origin[other], &cfg_keys[other], where, sizeof where);
        cfg_fmt_double(c->min_lr, y, sizeof y);
        cfg_fmt_double(c->lr, z, sizeof z);
        cfg_err(L, &L->origin[at], "optim", cfg_keys[at].key,
                "min_lr = %s is greater than lr = %s (%s %s); allowed: min_lr <= lr", y, z,
                cfg_keys[other].key, where);
    }
}

static void cfg_begin(cfg_load *L, const gdn_config *c) {
    memset(L, 0, sizeof *L);
    memcpy(&L->cfg, c, sizeof *c);  // memcpy, not assignment: padding bytes too (memcmp-able)
    for (int i = 0; i < CFG_NKEYS; i++) L->origin[i].kind = CFG_AT_INITIAL;
}

static bool cfg_end(cfg_load *L, gdn_config *c) {
    cfg_check_cross(L);
    bool ok = L->nerr == 0;
    if (ok) memcpy(c, &L->cfg, sizeof *c);
    for (int i = 0; i < L->nnames; i++) free(L->names[i]);
    free(L->names);
    return ok;
}

static void cfg_check_resumable_keys(void);

void config_defaults(gdn_config *c) {
    memset(c, 0, sizeof *c);
    char err[512];
    for (int i = 0; i < CFG_NKEYS; i++)
        if (!cfg_apply(&cfg_keys[i], cfg_keys[i].def, c, err, sizeof err))
            gdn_die("config schema: default of [%s] %s: %s", cfg_keys[i].section, cfg_keys[i].key, err);
    cfg_check_resumable_keys();
}

bool config_load(gdn_config *c, const char *path, const char *const *sets, int nset) {
    cfg_load L;
    cfg_begin(&L, c);
    cfg_read_file(&L, path, NULL);
    for (int i = 0; i < nset; i++) cfg_set_one(&L, sets[i]);
    return cfg_end(&L, c);
}

bool config_set(gdn_config *c, const char *assignment) {
    cfg_load L;
    cfg_begin(&L, c);
    cfg_set_one(&L, assignment);
    return cfg_end(&L, c);
}

bool config_load_string(gdn_config *c, const char *text, const char *name_for_errors) {
    return config_load_string_sets(c, text, name_for_errors, NULL, 0);
}

bool config_load_string_sets(gdn_config *c, const char *text, const char *name_for_errors,
                             const char *const *sets, int nset) {
    cfg_load L;
    cfg_begin(&L, c);
    L.checkpoint = true;
    cfg_parse_text(&L, name_for_errors, ".", text, strlen(text));
    for (int i = 0; i < nset; i++) cfg_set_one(&L, sets[i]);
    return cfg_end(&L, c);
}

// ---- writing ----------------------------------------------------------------------------------

// Shortest %.Ng that reads back as the same double; whole numbers as integers ("10000").
static void cfg_fmt_double(double x, char *buf, size_t n) {
    if (x == nearbyint(x) && fabs(x) < 1e15) {
        snprintf(buf, n, "%.0f", x);
        if (strtod(buf, NULL) == x && !signbit(x)) return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static void cfg_fmt_value(const cfg_key *k, const gdn_config *c, char *buf, size_t n) {
    const char *field = (const char *)c + k->offset;
    switch (k->type) {
    case CFG_INT: { int x; memcpy(&x, field, sizeof x); snprintf(buf, n, "%d", x); break; }
    case CFG_U64: { uint64_t x; memcpy(&x, field, sizeof x); snprintf(buf, n, "%" PRIu64, x); break; }
    case CFG_DOUBLE: { double x; memcpy(&x, field, sizeof x); cfg_fmt_double(x, buf, n); break; }
    case CFG_BOOL: { bool x; memcpy(&x, field, sizeof x); snprintf(buf, n, "%s", x ? "true" : "false"); break; }
    case CFG_MODE: {  // the choice's name
        int x, i = 0;
        memcpy(&x, field, sizeof x);
        const char *ch = k->choices;
        for (; *ch && i < x; i++) ch += strcspn(ch, "|") + (ch[strcspn(ch, "|")] == '|');
        snprintf(buf, n, "%.*s", (int)strcspn(ch, "|"), ch);
        break;
    }
    default: snprintf(buf, n, "%.*s", (int)strnlen(field, k->size), field); break;
    }
}

typedef struct { char *s; size_t len, cap; } cfg_buf;

__attribute__((format(printf, 2, 3)))
static void cfg_append(cfg_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (w < 0) gdn_die("config: formatting failed");
    if (b->len + (size_t)w + 1 > b->cap) {
        b->cap = 2 * (b->len + (size_t)w + 1);
        b->s = gdn_realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)w;
}

// text as "; " comment lines of at most width characters, broken at spaces (a word longer than
// a line stands alone on its line)
static void cfg_append_comment(cfg_buf *b, const char *text, int width) {
    const int room = width - 2;
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        int n = (int)strlen(p);
        if (n > room) {
            int cut = room;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0) {  // one long word: up to the next space
                cut = room;
                while (p[cut] && p[cut] != ' ') cut++;
            }
            n = cut;
        }
        cfg_append(b, "; %.*s\n", n, p);
        p += n;
    }
}

char *config_to_string(const gdn_config *c) {
    cfg_buf b = {0};
    char value[CFG_STR + 64], line[CFG_STR + 512];
    cfg_append(&b, "; gdn.c run configuration: every key (src/core/config.h)\n");
    for (int s = 0; s < CFG_NSECTIONS; s++) {
        cfg_append(&b, "\n[%s]\n", cfg_sections[s]);
        for (int i = 0; i < CFG_NKEYS; i++) {
            const cfg_key *k = &cfg_keys[i];
            if (strcmp(k->section, cfg_sections[s]) != 0) continue;
            cfg_fmt_value(k, c, value, sizeof value);
            // "key = value ; help"; where that line would not fit inih's buffer, the help goes
            // above the key as comment lines of at most 96 characters
            int w = snprintf(line, sizeof line, "%-16s = %-12s ; %s", k->key, value, k->help);
            if (w < 0 || w > CFG_LINE_MAX) {
                cfg_append_comment(&b, k->help, 96);
                w = snprintf(line, sizeof line, "%-16s = %s", k->key, value);
                if (w < 0 || w > CFG_LINE_MAX) snprintf(line, sizeof line, "%s = %s", k->key, value);
            }
            cfg_append(&b, "%s\n", line);
        }
    }
    return b.s;
}

void config_write(const gdn_config *c, FILE *f) {
    char *s = config_to_string(c);
    if (fputs(s, f) == EOF) gdn_die("writing the config failed: %s", strerror(errno));
    free(s);
}

// ---- derived sizes ----------------------------------------------------------------------------

int config_mlp_hidden(const gdn_config *c) {
    if (c->mlp_hidden > 0) return c->mlp_hidden;
    double h = 2.0 * c->mlp_ratio * c->d_model / 3.0;  // divide last: exact when h is whole
    return (int)ceil(h / 256.0) * 256;
}

int config_gdn_dv(const gdn_config *c) {
    return (int)lround(c->gdn_expand_v * c->gdn_head_dim);  // whole to 1e-9 (cfg_check_cross)
}

char config_layer_kind(const gdn_config *c, int layer) {
    size_t n = strnlen(c->pattern, sizeof c->pattern);
    if (n == 0 || layer < 0) gdn_die("config_layer_kind: layer %d of pattern '%s'", layer, c->pattern);
    return c->pattern[(size_t)layer % n];
}

// ---- the schema, read-only ------------------------------------------------------------------

const char *config_key_default(const char *section, const char *key) {
    int i = cfg_key_index(section, key);
    return i < 0 ? NULL : cfg_keys[i].def;
}

// ---- resume: which keys may change --------------------------------------------------------

// The keys a --resume run may set to other values than its checkpoint's config holds. Every
// other key (the model and its maths, the data, train.seed, AdamW's betas, eps and weight
// decay) must agree, so that the weights, the moments and the data position keep their meaning.
//   how the run executes: device, precision, threads, recompute, head_chunk_rows, gemm_tune,
//     gdn.bwd_states, gdn.bwd_segment_chunks, swa.deterministic, every [dist] key;
//   how long it runs and how it is watched: steps, eval_every, eval_batches, ckpt_every,
//     keep_checkpoints, sample_every, sample_tokens, out_dir, overwrite, every [log] key;
//   the bad-step policy's thresholds: skip_zscore, max_skips (skip_window is stored state: the
//     checkpoint holds that many gradient norms);
//   how a step's windows are split: batch_size, grad_accum (the world size may change; a step
//     keeps its data when batch_size x grad_accum x ranks does, see README);
//   the step size: lr, min_lr, warmup_steps, schedule, decay_frac, grad_clip (the way on after
//     a blow-up, and the schedule's end moves with train.steps anyway).
static const char *const resumable_keys[] = {
    "train.device", "train.precision", "train.threads", "train.recompute",
    "train.head_chunk_rows", "train.gemm_tune", "gdn.bwd_states", "gdn.bwd_segment_chunks",
    "swa.deterministic",
    "train.steps", "train.eval_every", "train.eval_batches", "train.ckpt_every",
    "train.keep_checkpoints", "train.skip_zscore", "train.max_skips",
    "train.sample_every", "train.sample_tokens",
    "train.out_dir", "train.overwrite", "train.batch_size", "train.grad_accum",
    "optim.lr", "optim.min_lr", "optim.warmup_steps", "optim.schedule", "optim.decay_frac",
    "optim.grad_clip",
};
static const char *const resumable_sections[] = {"dist", "log", "eval"};

// Every name on the lists is one of the schema's (run by config_defaults, like the defaults).
static void cfg_check_resumable_keys(void) {
    for (size_t i = 0; i < sizeof resumable_keys / sizeof *resumable_keys; i++) {
        const char *k = resumable_keys[i], *dot = strchr(k, '.');
        char section[32];
        snprintf(section, sizeof section, "%.*s", dot ? (int)(dot - k) : 0, k);
        if (!dot || cfg_key_index(section, dot + 1) < 0)
            gdn_die("config schema: resumable key '%s' is not a key of the schema", k);
    }
    for (size_t i = 0; i < sizeof resumable_sections / sizeof *resumable_sections; i++)
        if (cfg_section_index(resumable_sections[i]) < 0)
            gdn_die("config schema: resumable section '%s' is not a section", resumable_sections[i]);
}

bool config_key_resumable(const char *section, const char *key) {
    for (size_t i = 0; i < sizeof resumable_sections / sizeof *resumable_sections; i++)
        if (strcmp(section, resumable_sections[i]) == 0) return true;
    size_t ls = strlen(section);
    for (size_t i = 0; i < sizeof resumable_keys / sizeof *resumable_keys; i++) {
        const char *k = resumable_keys[i];
        if (strncmp(k, section, ls) == 0 && k[ls] == '.' && strcmp(k + ls + 1, key) == 0) return true;
    }
    return false;
}

int config_first_difference(const gdn_config *a, const gdn_config *b, int from,
                            bool skip_resumable, config_difference *d) {
    for (int i = GDN_MAX(from, 0); i < CFG_NKEYS; i++) {
        const cfg_key *k = &cfg_keys[i];
        if (skip_resumable && config_key_resumable(k->section, k->key)) continue;
        cfg_fmt_value(k, a, d->a, sizeof d->a);
        cfg_fmt_value(k, b, d->b, sizeof d->b);
        if (strcmp(d->a, d->b) == 0) continue;
        d->section = k->section;
        d->key = k->key;
        return i;
    }
    return -1;
}
