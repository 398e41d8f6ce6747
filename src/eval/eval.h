// eval.h — evaluation in the training loop (the [eval] config section; docs/evaluation.md):
// validation loss on named token sets, multiple-choice tasks scored by log-likelihood, and
// synthetic recall probes (multi-query associative recall, a needle in a haystack) built by the
// engine from a seeded RNG. Every score goes through the model's forward with dropout off
// (model_logprobs, model_eval_loss) on batches of the run's shape (batch_size x seq_len), with
// samplers and RNG streams of its own: evaluating changes no bit of the training.
//
// Results are named as they appear in metrics.jsonl and on the plot:
//   val/NAME                  mean validation loss (nats/token) of set NAME
//   mc/NAME/acc, mc/NAME/acc_norm   multiple-choice accuracy, and length-normalised
//   recall/mqar_L{len}_k{keys}, recall/needle_L{len}   accuracy of the recalled value tokens
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../core/config.h"
#include "../core/rng.h"
#include "../data/dataset.h"
#include "../data/tokenizer.h"
#include "../dist/dist.h"
#include "../model/model.h"

// What scores a batch: for the B*T positions i with y[i] >= 0, logp[i] = log p(y[i] | x of the
// row up to i) and argmax[i] = the most likely next token (argmax may be NULL); model_logprobs's
// contract. The model through eval_scorer_model; tests pass a stub whose log-probs they control.
typedef void (*eval_logprob_fn)(void *ctx, const int32_t *x, const int32_t *y, double *logp,
                                int32_t *argmax);
typedef struct {
    eval_logprob_fn fn;
    void *ctx;
    int B, T, V;             // rows per batch, tokens per row, vocabulary (token ids < V)
    dist *d;                 // batches are shared out over its ranks; NULL: one process
} eval_scorer;
eval_scorer eval_scorer_model(model *m, dist *d);

// ---- multiple choice --------------------------------------------------------------------------
// One jsonl line per item, in any of these forms (the first that fits):
//   {"context": str, "endings": [str, ...], "label": k}           the common form
//   {"ctx": str, "endings": [str, ...], "label": k}               HellaSwag (ctx used as is)
//   {"question": str, "choices": {"text": [...], "label": [...]}, "answerKey": str}   ARC
//   {"goal": str, "sol1": str, "sol2": str, "label": k}           PIQA
// k: an integer or a string of digits, 0-based. ARC and PIQA contexts are "Question: " + text +
// "\nAnswer:" (lm-evaluation-harness's prompts). Blank lines are skipped.
typedef struct {
    int line;                // 1-based line in the file
    char *context;
    char **endings;
    int n_endings;           // 2 .. MC_MAX_ENDINGS
    int label;
} mc_item;
enum { MC_MAX_ENDINGS = 64 };

typedef struct {
    char path[1024];
    mc_item *items;
    int n;
} mc_task;

// Parse a file. false + "PATH:LINE: what is wrong" on a bad line (not JSON, no form fits, a
// label out of range, an empty context or ending), or "PATH: ..." when unreadable or empty.
bool mc_load(mc_task *t, const char *path, char *err, size_t errlen);
void mc_free(mc_task *t);

// An item's candidates as token rows: candidate j is context + " " + ending j (the space is
// lm-evaluation-harness's target delimiter); its continuation is the tokens of the whole
// beyond the number of tokens of the context alone (lm-evaluation-harness's split). Rows
// longer than T + 1 tokens lose tokens from the left of the context.
typedef struct {
    int32_t *tok;            // (n) the row's tokens
    int n, cont;             // tokens in the row; of them the last `cont` are the continuation
    int chars;               // Unicode characters of the ending (the acc_norm divisor)
    int item, ending;
} mc_cand;
typedef struct {
    mc_cand *c;
    int n;                   // candidates of all items
    int n_items;
    const int *label;        // (n_items) borrowed from the task
    int *first;              // (n_items + 1) item i's candidates are [first[i], first[i+1])
} mc_prepared;
// Tokenize the first max_items items (0: all). false + "PATH:LINE: ..." when a candidate
// cannot be scored at T (its continuation has no token, or more than T) or holds an id >= V.
bool mc_prepare(mc_prepared *p, const mc_task *t, int max_items, const gdn_tokenizer *tok,
                int T, int V, char *err, size_t errlen);
void mc_prepared_free(mc_prepared *p);

// acc: the fraction of items whose label has the largest sum of continuation log-probs;
// acc_norm: the same with each sum divided by its ending's characters (lm-evaluation-harness's
// acc_norm: len() of the Python string). Ties go to the lowest index (numpy argmax).
typedef struct {
    double acc, acc_norm;
    int n;
} mc_result;
mc_result mc_score(const eval_scorer *s, const mc_prepared *p);

enum { EVAL_MAX_NAMED = 16, EVAL_MAX_PROBES = 32, EVAL_MAX_KEYS = 4096 };

// ---- recall probes ----------------------------------------------------------------------------
// Token ranges: keys from [0, V/2), values and filler from [V/2, V), so a key token occurs only
// where the probe puts it. A row is L tokens x[0..L) and its targets y (-1: not scored).
// MQAR, K keys: K distinct keys and K values (with replacement); x = k1 v1 ... kK vK, then
// L - 4K filler tokens, then the K pairs again with the keys in a seeded order; y at each of
// those last K key positions is its value. Needs L >= 4K, K <= V/2, K <= EVAL_MAX_KEYS.
// Needle, sequence j of n: filler everywhere, the key at p = floor(j (L - 3) / max(n - 1, 1))
// and its value at p + 1 (depth j / (n - 1)), the key again at L - 1 with y[L - 1] = the value.
// Needs L >= 3. Sequences are drawn in order from rng_init(seed, stream) (recall_stream).
void recall_mqar_row(int32_t *x, int32_t *y, int L, int K, int V, rng_t *r);
void recall_needle_row(int32_t *x, int32_t *y, int L, int j, int n, int V, rng_t *r);
uint64_t recall_stream(char kind, int L, int K);  // kind 'm' (MQAR) or 'n' (needle)
// Accuracy of argmax at the scored positions over n rows (needs L <= s->T).
double recall_mqar(const eval_scorer *s, int L, int K, int n, uint64_t seed);
double recall_needle(const eval_scorer *s, int L, int n, uint64_t seed);

// ---- the [eval] section -----------------------------------------------------------------------
typedef struct {
    char name[112];          // val/NAME, mc/NAME/acc, recall/...
    double value;
} eval_value;

typedef struct evaluator evaluator;
// Parse and check the [eval] keys against the run (the model's vocabulary c->vocab_size and
// c->seq_len), open the named sets and the multiple-choice files, tokenize those with the
// data's tokenizer (src: data.path's set). NULL with *err = "" when the section asks for
// nothing; NULL + a message naming the key (and file, line) on a bad value.
evaluator *evaluator_open(const gdn_config *c, const data_source *src, char *err, size_t errlen);
void evaluator_free(evaluator *e);
// Whether step `step` evaluates: every eval.every steps (0: never in between) and at the last.
bool evaluator_due(const evaluator *e, long step, bool last);
// Run everything (every rank takes part; every rank gets the same values). Returns the number
// of values written to out (at most evaluator_count).
int evaluator_run(evaluator *e, model *m, dist *d, eval_value *out);
int evaluator_count(const evaluator *e);
// {"val/a": 3.2, ...} (%.17g) into buf; the values as one line for the log ("val/a 3.2000 | ...").
void eval_values_json(const eval_value *v, int n, char *buf, size_t len);
void eval_values_line(const eval_value *v, int n, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
