// test_config.c — the config loader (src/core/config.c): defaults, a file using every type,
// includes, --set overrides, each kind of error (its stderr message must name the file, the
// line, the key and what is allowed; a failed load must leave the struct untouched), and the
// write -> read round trip (byte-identical struct). INI files go to a mkdtemp folder.
#include "testutil.h"
#include "../src/core/config.h"
#include "../src/model/model.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/gdn_test_config_XXXXXX";
static char *made[64];  // files and folders to remove at the end, in creation order
static int nmade;

static void check(const char *what, bool ok) {
    printf("  %-66s %s\n", what, ok ? "pass" : "FAIL");
    gc_checks++;
    if (!ok) gc_failures++;
}

static char *tpath(const char *rel) {  // malloc'd tmpdir/rel
    char *p = gdn_malloc(strlen(tmpdir) + strlen(rel) + 2);
    sprintf(p, "%s/%s", tmpdir, rel);
    return p;
}
static void remember(char *p) {
    if (nmade == (int)(sizeof made / sizeof made[0])) gdn_die("test_config: too many temp files");
    made[nmade++] = p;
}
static const char *write_file(const char *rel, const char *text) {
    char *p = tpath(rel);
    for (int i = 0; i < nmade; i++)
        if (strcmp(made[i], p) == 0) { free(p); p = made[i]; goto write; }
    remember(p);
write:;
    FILE *f = fopen(p, "wb");
    CHECK_PTR(f);
    if (fputs(text, f) == EOF || fclose(f) != 0) gdn_die("writing %s: %s", p, strerror(errno));
    return p;
}

// stderr goes to a file between capture_begin and capture_end (which returns what was written).
static int saved_fd = -1;
static char *cap_path;
static void capture_begin(void) {
    fflush(stderr);
    CHECK_SYS(saved_fd = dup(2));
    int fd;
    CHECK_SYS(fd = open(cap_path, O_RDWR | O_CREAT | O_TRUNC, 0600));
    CHECK_SYS(dup2(fd, 2));
    CHECK_SYS(close(fd));
}
static char *capture_end(void) {
    fflush(stderr);
    CHECK_SYS(dup2(saved_fd, 2));
    CHECK_SYS(close(saved_fd));
    FILE *f = fopen(cap_path, "rb");
    CHECK_PTR(f);
    char *buf = gdn_malloc(1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    if (ferror(f)) gdn_die("reading %s", cap_path);
    buf[n] = '\0';
    fclose(f);
    return buf;
}
static void show(const char *msg) {  // the captured messages, indented
    for (const char *p = msg; *p;) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        printf("      | %.*s\n", n, p);
        p += n + (nl != NULL);
    }
}
static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// Load `rel` (written from text unless text is NULL) with overrides; expect failure with
// `nerr` error lines containing each of `must` (NULL-terminated), and *c left as it was.
static void expect_error(const char *title, const char *rel, const char *text, const char *const *sets,
                         int nset, int nerr, const char *const *must) {
    printf("\n%s\n", title);
    char *path = text ? (char *)write_file(rel, text) : tpath(rel);
    gdn_config c, before;
    config_defaults(&c);
    memcpy(&before, &c, sizeof c);
    capture_begin();
    bool ok = config_load(&c, path, sets, nset);
    char *msg = capture_end();
    show(msg);
    check("config_load returns false", !ok);
    check("struct left unchanged", memcmp(&c, &before, sizeof c) == 0);
    char what[200];
    snprintf(what, sizeof what, "%d error line(s) printed", nerr);
    check(what, count_lines(msg) == nerr);
    for (int i = 0; must[i]; i++) {
        snprintf(what, sizeof what, "message has \"%.48s\"", must[i]);
        check(what, strstr(msg, must[i]) != NULL);
    }
    free(msg);
    if (!text) free(path);
}

// Load expecting success; prints any message.
static bool load_ok(gdn_config *c, const char *path, const char *const *sets, int nset) {
    capture_begin();
    bool ok = config_load(c, path, sets, nset);
    char *msg = capture_end();
    show(msg);
    free(msg);
    return ok;
}

#define S(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void) {
    printf("\ndefaults (config.h comments)\n");
    gdn_config c;
    config_defaults(&c);
    check("[model]", strcmp(c.pattern, "GS") == 0 && c.n_layers == 2 && c.d_model == 128 &&
          c.vocab_size == 0 && c.tie_embeddings && c.dropout == 0 && c.mlp_ratio == 4 &&
          c.mlp_hidden == 0 && c.norm_eps == 1e-6 && c.init_std == 0.02);
    check("[gdn]", c.gdn_n_heads == 2 && c.gdn_head_dim == 32 && c.gdn_expand_v == 2 &&
          c.gdn_conv_size == 4 && c.gdn_short_conv && c.gdn_output_gate && c.gdn_gate &&
          c.gdn_delta && !c.gdn_allow_neg_eigval && c.gdn_chunk_size == 64 &&
          c.gdn_bwd_states == GDN_BWD_STATES_REPLAY);
    check("[swa]", c.swa_n_heads == 2 && c.swa_head_dim == 32 && c.swa_window == 64 &&
          c.swa_rope_base == 10000 && c.swa_deterministic);
    check("[data]", strcmp(c.data_path, "data/tinyshakespeare.h5") == 0 && c.seq_len == 128);
    check("[train]", strcmp(c.device, "auto") == 0 && strcmp(c.precision, "bf16") == 0 &&
          c.batch_size == 8 && c.grad_accum == 1 && c.steps == 1000 && c.seed == 1337 &&
          c.eval_every == 100 && c.eval_batches == 8 && c.ckpt_every == 0 &&
          strcmp(c.out_dir, "runs/default") == 0 && c.threads == 0 && c.recompute == RECOMPUTE_OFF);
    check("[optim]", c.lr == 1e-3 && c.min_lr == 1e-4 && c.warmup_steps == 50 &&
          strcmp(c.schedule, "cosine") == 0 && c.decay_frac == 0.2 && c.weight_decay == 0.1 &&
          c.beta1 == 0.9 && c.beta2 == 0.95 && c.adam_eps == 1e-8 && c.grad_clip == 1.0 &&
          !c.wd_embeddings);
    check("[dist]", !c.zero1 && c.nccl_id_path[0] == '\0' && c.bucket_mb == 25 && c.overlap && c.timeout_s == 300);
    check("[log]", c.log_every == 10 && strcmp(c.metrics_file, "metrics.jsonl") == 0);
    check("derived: mlp hidden 2/3*4*128 -> 512, dv 64, layers G S G S",
          config_mlp_hidden(&c) == 512 && config_gdn_dv(&c) == 64 && config_layer_kind(&c, 0) == 'G' &&
          config_layer_kind(&c, 1) == 'S' && config_layer_kind(&c, 2) == 'G' && config_layer_kind(&c, 3) == 'S');
    c.d_model = 1024;
    check("derived: mlp hidden for d 1024, ratio 4 = 2816 (fla)", config_mlp_hidden(&c) == 2816);
    c.mlp_ratio = 3;
    c.d_model = 1280;
    check("derived: mlp hidden for d 1280, ratio 3 = 2560 (exact multiple)", config_mlp_hidden(&c) == 2560);
    c.mlp_hidden = 300;
    check("derived: mlp_hidden set -> used as is", config_mlp_hidden(&c) == 300);
    strcpy(c.pattern, "GGGA");
    c.gdn_expand_v = 0.1;
    c.gdn_head_dim = 30;
    check("derived: GGGA layer 7 = A, 0.1 * 30 -> dv 3", config_layer_kind(&c, 7) == 'A' && config_gdn_dv(&c) == 3);
}

static const char *valid_ini =
    "\xEF\xBB\xBF; a file that sets every type (UTF-8 BOM first, CRLF on two lines)\r\n"
    "# hash comment\n"
    "[model]\n"
    "pattern = GGSA\n"
    "n_layers = 8 ; inline comment\n"
    "d_model = 256\r\n"
    "vocab_size = 0\n"
    "tie_embeddings = no\n"
    "dropout = 0.125\n"
    "mlp_hidden = 640\n"
    "\n"
    "[gdn]\n"
    "  head_dim = 64\n"         // indented lines: must not be read as continuations
    "  expand_v = 1.5\n"
    "  gate = OFF\n"
    "\tallow_neg_eigval = on\n"
    "[ swa ]\n"
    "head_dim = 64\n"
    "rope_base = 500000\n"
    "[data]\n"
    "path = /tmp/some dir/tokens.h5\n"
    "[train]\n"
    "device = cpu\n"
    "precision = fp32\n"
    "seed = 18446744073709551615\n"
    "out_dir = runs/a;b\n"
    "threads = 3\n"
    "[optim]\n"
    "schedule = wsd\n"
    "min_lr = 0\n"
    "eps = 1e-10\n"
    "beta2: 0.99\n"
    "[dist]\n"
    "zero1 = yes\n"
    "nccl_id_path = /shared/id\n"
    "[log]\n"
    "every = 1\n"
    "metrics_file = m.jsonl\n";

static void test_valid(gdn_config *out) {
    printf("\na valid file setting every type\n");
    const char *p = write_file("valid.ini", valid_ini);
    gdn_config c;
    config_defaults(&c);
    check("config_load returns true", load_ok(&c, p, NULL, 0));
    check("pattern, ints, 'no', dropout, mlp_hidden",
          strcmp(c.pattern, "GGSA") == 0 && c.n_layers == 8 && c.d_model == 256 && c.vocab_size == 0 &&
          !c.tie_embeddings && c.dropout == 0.125 && c.mlp_hidden == 640);
    check("indented [gdn] keys each read on their own: 64, 1.5, OFF, on -> dv 96",
          c.gdn_head_dim == 64 && c.gdn_expand_v == 1.5 && !c.gdn_gate && c.gdn_allow_neg_eigval &&
          config_gdn_dv(&c) == 96);
    check("[ swa ] header with blanks, double 500000", c.swa_head_dim == 64 && c.swa_rope_base == 500000);
    check("string with a blank, string with ';' inside",
          strcmp(c.data_path, "/tmp/some dir/tokens.h5") == 0 && strcmp(c.out_dir, "runs/a;b") == 0);
    check("enums cpu / fp32 / wsd", strcmp(c.device, "cpu") == 0 && strcmp(c.precision, "fp32") == 0 &&
          strcmp(c.schedule, "wsd") == 0);
    check("uint64 seed = 2^64 - 1", c.seed == UINT64_MAX);
    check("min_lr 0, eps 1e-10, 'beta2: 0.99' (colon form)", c.min_lr == 0 && c.adam_eps == 1e-10 && c.beta2 == 0.99);
    check("[dist] yes, path; [log] every, metrics_file", c.zero1 && strcmp(c.nccl_id_path, "/shared/id") == 0 &&
          c.log_every == 1 && strcmp(c.metrics_file, "m.jsonl") == 0);
    check("untouched keys keep defaults (d_model... steps, lr)", c.steps == 1000 && c.lr == 1e-3 &&
          c.gdn_n_heads == 2 && c.swa_window == 64);
    memcpy(out, &c, sizeof c);
}

static void test_include_and_set(void) {
    printf("\ninclude (relative to the including file, two levels) and --set\n");
    char *sub = tpath("sub");
    CHECK_SYS(mkdir(sub, 0700));
    remember(sub);
    write_file("sub/deeper.ini", "[train]\nsteps = 77\nbatch_size = 3\n");
    write_file("sub/base.ini", "include = deeper.ini\n[model]\nd_model = 96\nn_layers = 3\n[optim]\nlr = 0.002\n");
    const char *top = write_file("top.ini", "include = sub/base.ini\n[model]\nn_layers = 5\n[train]\nbatch_size = 4\n");
    gdn_config c;
    config_defaults(&c);
    check("config_load(top.ini) returns true", load_ok(&c, top, NULL, 0));
    check("included keys arrive (d_model 96, lr 0.002, steps 77 from sub/deeper.ini)",
          c.d_model == 96 && c.lr == 0.002 && c.steps == 77);
    check("the including file overrides (n_layers 5, batch_size 4)", c.n_layers == 5 && c.batch_size == 4);

    config_defaults(&c);
    bool ok = load_ok(&c, top, S("model.n_layers=7", " optim.lr = 0.01 ", "data.path=x y.h5", "train.seed=0"), 4);
    check("--set overrides file values (n_layers 7, lr 0.01, path, seed 0)",
          ok && c.n_layers == 7 && c.lr == 0.01 && strcmp(c.data_path, "x y.h5") == 0 && c.seed == 0 &&
          c.d_model == 96);

    gdn_config before;
    config_defaults(&c);
    memcpy(&before, &c, sizeof c);
    capture_begin();
    bool r1 = config_set(&c, "gdn.chunk_size=512");
    bool r2 = config_set(&c, "optim.min_lr=0.5");  // > lr: the cross-key rule applies too
    bool r3 = config_set(&c, "data.path=a ;b");      // would read back as "a"
    bool r4 = config_set(&c, "train.seed=-1");
    char *msg = capture_end();
    show(msg);
    check("config_set rejects chunk_size 512, min_lr > lr, 'a ;b', seed -1", !r1 && !r2 && !r3 && !r4);
    check("... naming '--set gdn.chunk_size' and '[1, 256]'",
          strstr(msg, "--set gdn.chunk_size: 512 is out of range; allowed: an integer in [1, 256]") != NULL);
    check("... naming '--set optim.min_lr' and 'min_lr <= lr'",
          strstr(msg, "--set optim.min_lr: min_lr = 0.5 is greater than lr = 0.001") &&
          strstr(msg, "allowed: min_lr <= lr"));
    check("... struct unchanged", memcmp(&c, &before, sizeof c) == 0);
    free(msg);
    capture_begin();
    r1 = config_set(&c, "gdn.chunk_size = 128");
    msg = capture_end();
    show(msg);
    check("config_set(gdn.chunk_size = 128) applies", r1 && c.gdn_chunk_size == 128 && !msg[0]);
    free(msg);
}

static void test_errors(void) {
    expect_error("unknown section", "sec.ini", "[model]\nn_layers = 3\n\n[modle]\nd_model = 8\n", NULL, 0, 1,
                 S("sec.ini:4: [modle]: unknown section (did you mean [model]?)",
                   "allowed: model, gdn, swa, data, train, optim, dist, log"));
    expect_error("unknown key, suggestion by edit distance", "key.ini", "[model]\nn_layer = 4\n", NULL, 0, 1,
                 S("key.ini:2: [model] n_layer: unknown key (did you mean 'n_layers'?)",
                   "allowed: pattern, n_layers, d_model, vocab_size"));
    expect_error("unknown key, right key in another section", "key2.ini", "[train]\nlr = 0.1\n", NULL, 0, 1,
                 S("key2.ini:2: [train] lr: unknown key (did you mean [optim] lr?)", "allowed: device, precision"));
    expect_error("bad integer", "int.ini", "[model]\nd_model = 12x\n", NULL, 0, 1,
                 S("int.ini:2: [model] d_model: expected an integer, got '12x'; allowed: an integer in [1, 65536]"));
    expect_error("bad double", "dbl.ini", "[optim]\nlr = 0.0o1\n", NULL, 0, 1,
                 S("dbl.ini:2: [optim] lr: expected a number, got '0.0o1'; allowed: a number > 0"));
    expect_error("non-finite double", "nan.ini", "[optim]\n\nweight_decay = nan\n", NULL, 0, 1,
                 S("nan.ini:3: [optim] weight_decay: expected a finite number, got 'nan'; allowed: a number >= 0"));
    expect_error("bad bool", "bool.ini", "[gdn]\ngate = maybe\n", NULL, 0, 1,
                 S("bool.ini:2: [gdn] gate: expected a boolean, got 'maybe'; allowed: true/false, yes/no, on/off, 1/0"));
    expect_error("integer out of range", "range.ini", "[gdn]\nchunk_size = 300\n", NULL, 0, 1,
                 S("range.ini:2: [gdn] chunk_size: 300 is out of range; allowed: an integer in [1, 256]"));
    expect_error("double out of a half-open range", "beta.ini", "[optim]\nbeta2 = 1\n", NULL, 0, 1,
                 S("beta.ini:2: [optim] beta2: 1 is out of range; allowed: a number in [0, 1)"));
    expect_error("vocab_size 1 (0 or in [2, 2^24])", "vocab.ini", "[model]\nvocab_size = 1\n", NULL, 0, 1,
                 S("vocab.ini:2: [model] vocab_size: 1 is out of range; allowed: 0 or an integer in [2, 16777216]"));
    expect_error("bad enum", "enum.ini", "[train]\ndevice = gpu\n", NULL, 0, 1,
                 S("enum.ini:2: [train] device: 'gpu' is not one of the choices; allowed: auto | cpu | cuda"));
    expect_error("bad mode (an int enum that also takes the bool words)", "rc.ini", "[train]\nrecompute = fast\n",
                 NULL, 0, 1,
                 S("rc.ini:2: [train] recompute: 'fast' is not one of the choices; allowed: off | full | light "
                   "(or true = full, false = off)"));
    expect_error("bad pattern letter", "pat.ini", "[model]\npattern = GXS\n", NULL, 0, 1,
                 S("pat.ini:2: [model] pattern: pattern 'GXS' has the letter 'X'",
                   "allowed: 1 to 63 letters from G (gated delta), S (sliding window), A (full attention)"));
    expect_error("empty pattern", "pat0.ini", "[model]\npattern =\n", NULL, 0, 1,
                 S("pat0.ini:2: [model] pattern: the pattern is empty; allowed: 1 to 63 letters"));
    expect_error("duplicate key", "dup.ini", "[model]\nn_layers = 2\nd_model = 64\nn_layers = 4\n", NULL, 0, 1,
                 S("dup.ini:4: [model] n_layers: duplicate key (first set at line 2)"));
    expect_error("swa.head_dim odd", "odd.ini", "[swa]\nhead_dim = 33\n", NULL, 0, 1,
                 S("odd.ini:2: [swa] head_dim: 33 is out of range; allowed: an even integer in [2, 1024]"));
    expect_error("expand_v * head_dim not whole", "dv.ini", "[gdn]\nhead_dim = 33\nexpand_v = 1.5\n", NULL, 0, 1,
                 S("dv.ini:3: [gdn] expand_v: expand_v * head_dim = 1.5 * 33 = 49.5 is not a whole number",
                   "head_dim is set at ", "dv.ini:2", "allowed: values whose product is a whole number >= 1"));
    expect_error("min_lr > lr", "lr.ini", "[optim]\nlr = 0.001\nmin_lr = 0.01\n", NULL, 0, 1,
                 S("lr.ini:3: [optim] min_lr: min_lr = 0.01 is greater than lr = 0.001 (lr is set at ",
                   "lr.ini:2", "allowed: min_lr <= lr"));
    expect_error("missing file", "missing.ini", NULL, NULL, 0, 1,
                 S("cannot open config ", "missing.ini: No such file or directory"));
    write_file("cyc_b.ini", "include = cyc_a.ini\n[model]\nd_model = 64\n");
    expect_error("include cycle", "cyc_a.ini", "include = cyc_b.ini\n[model]\nn_layers = 3\n", NULL, 0, 1,
                 S("cyc_b.ini:1: include: include cycle: ", "cyc_a.ini -> ", "cyc_b.ini -> ",
                   "allowed: includes that do not lead back"));
    expect_error("include after a section", "late.ini", "[model]\nn_layers = 2\ninclude = valid.ini\n", NULL, 0, 1,
                 S("late.ini:3: [model] include: include after a section header; allowed: include = path before the first section"));
    expect_error("include of a missing file", "incmiss.ini", "; c\ninclude = nope/none.ini\n[model]\n", NULL, 0, 1,
                 S("incmiss.ini:2: include: cannot open config ", "nope/none.ini: No such file or directory"));
    expect_error("no key name", "noname.ini", "[log]\n = 3\n", NULL, 0, 1,
                 S("noname.ini:2: [log]: no key name before '='; allowed: key = value"));
    expect_error("key before the first section", "nosec.ini", "n_layers = 2\n[model]\n", NULL, 0, 1,
                 S("nosec.ini:1: n_layers: a key before the first [section]; allowed: include = path"));
    expect_error("syntax: unclosed header (its keys skipped), a line without '='", "syn.ini",
                 "[model\nn_layers = 2\n[gdn]\nthis is not ini\n", NULL, 0, 2,
                 S("syn.ini:1: bad section header '[model'", "syn.ini:4: cannot read 'this is not ini'; allowed: 'key = value'"));
    char longini[600];
    snprintf(longini, sizeof longini, "[data]\npath = /%0300d\n", 0);
    expect_error("line longer than inih's buffer", "long.ini", longini, NULL, 0, 1,
                 S("long.ini:2: the line is 308 characters long; allowed: at most 198"));
    expect_error("every error in one pass (4 in the file, 2 from --set)", "many.ini",
                 "[model]\nn_layers = 0\nd_model = x\n[train]\ndevice = tpu\n[optim]\nbeta1 = 2\n",
                 S("modle.n_layers=3", "model.n_layers"), 2, 6,
                 S("many.ini:2: [model] n_layers", "many.ini:3: [model] d_model", "many.ini:5: [train] device",
                   "many.ini:7: [optim] beta1", "--set modle.n_layers: unknown section (did you mean [model]?)",
                   "--set model.n_layers: cannot read this override; allowed: section.key=value"));
    expect_error("bad --set value on a good file", "valid.ini", NULL, S("model.n_layers=0"), 1, 1,
                 S("--set model.n_layers: 0 is out of range; allowed: an integer in [1, 256]"));
}

static void test_roundtrip(const gdn_config *valid) {
    printf("\nwrite -> read round trip\n");
    gdn_config a, b;
    memcpy(&a, valid, sizeof a);
    a.lr = 0.1 + 0.2;              // 0.30000000000000004
    a.init_std = 1.0 / 3.0;
    a.bucket_mb = 1e-300;
    a.swa_rope_base = 123456789.125;
    a.min_lr = 5e-324;             // the smallest denormal
    a.weight_decay = -0.0;         // written "-0", read back with its sign
    a.swa_deterministic = false;   // a boolean off its default
    char set[300];  // "data.path=" + a path of 190, then 191 characters
    strcpy(set, "data.path=/");
    memset(set + 11, 'x', 189);
    set[200] = '\0';
    capture_begin();
    bool ok = config_set(&a, set);
    set[200] = 'y', set[201] = '\0';
    bool too_long = config_set(&a, set);
    char *msg = capture_end();
    show(msg);
    check("a 190-character path is accepted, 191 rejected (the line must fit inih's buffer)",
          ok && strlen(a.data_path) == 190 && !too_long && strstr(msg, "at most 190 characters"));
    free(msg);

    char *text = config_to_string(&a);
    printf("    written config (first lines):\n");
    char head[1500];
    snprintf(head, sizeof head, "%.*s", (int)(strstr(text, "[gdn]") - text), text);
    show(head);
    config_defaults(&b);
    capture_begin();
    ok = config_load_string(&b, text, "checkpoint");
    msg = capture_end();
    show(msg);
    free(msg);
    check("config_load_string(config_to_string(a)) returns true", ok);
    check("the struct read back is byte-identical (memcmp)", memcmp(&a, &b, sizeof a) == 0);
    char *text2 = config_to_string(&b);
    check("and writes the same text again", strcmp(text, text2) == 0);
    int nkeys = 0;  // lines that are not blank, a [section] or a comment
    for (const char *q = text; *q; q = strchr(q, '\n') + 1) nkeys += *q != '\n' && *q != '[' && *q != ';';
    check("every key written (84 key lines)", nkeys == 84);

    char *p = tpath("written.ini");
    remember(p);
    FILE *f = fopen(p, "w");
    CHECK_PTR(f);
    config_write(&a, f);
    if (fclose(f) != 0) gdn_die("closing %s: %s", p, strerror(errno));
    config_defaults(&b);
    check("config_write -> config_load: byte-identical", load_ok(&b, p, NULL, 0) && memcmp(&a, &b, sizeof a) == 0);

    gdn_config d, e;
    config_defaults(&d);
    config_defaults(&e);
    char *dt = config_to_string(&d);
    check("defaults round trip", config_load_string(&e, dt, "defaults") && memcmp(&d, &e, sizeof d) == 0);
    free(dt);
    free(text);
    free(text2);
}

// train.recompute: off | full | light (a CFG_MODE key), and the boolean words for its first two
// choices (true = full, false = off); written back as the mode's name, read back to the same value
static void test_recompute_mode(void) {
    printf("\ntrain.recompute: off | full | light, true = full, false = off\n");
    const struct { const char *v; gdn_recompute want; const char *name; } cases[] = {
        {"off", RECOMPUTE_OFF, "off"},     {"full", RECOMPUTE_FULL, "full"}, {"light", RECOMPUTE_LIGHT, "light"},
        {"true", RECOMPUTE_FULL, "full"},  {"false", RECOMPUTE_OFF, "off"},  {"Yes", RECOMPUTE_FULL, "full"},
        {"0", RECOMPUTE_OFF, "off"},       {"on", RECOMPUTE_FULL, "full"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gdn_config c, back;
        config_defaults(&c);
        config_defaults(&back);
        char set[64], line[64], what[160];
        snprintf(set, sizeof set, "train.recompute=%s", cases[i].v);
        snprintf(line, sizeof line, "\n%-16s = %s ", "recompute", cases[i].name);
        capture_begin();
        bool ok = config_set(&c, set);
        char *text = config_to_string(&c);
        bool ok_back = config_load_string(&back, text, "written");
        free(capture_end());
        snprintf(what, sizeof what, "recompute = %s -> %s, written '%s', read back equal", cases[i].v, cases[i].name,
                 cases[i].name);
        check(what, ok && c.recompute == cases[i].want && strstr(text, line) != NULL && ok_back &&
                        back.recompute == cases[i].want);
        free(text);
    }
}

// The bounds of the numeric keys (config.c): each value past its key's bound is refused, naming
// the key and the range (among them the values that crashed, hung or wrapped sizes when the keys
// were bounded only by int: threads 100000, grad_accum and eval_batches 2^31 - 1, d_model,
// batch_size, seq_len near 2^31); the bounds themselves are accepted; batch_size x seq_len past
// 2^31 - 1 is refused naming both; every config in configs/ still loads; model_check_sizes
// turns sizes past an int or a 64-bit size into a message (no wrapped number).
static void test_bounds(void) {
    printf("\nbounds of the numeric keys\n");
    static const struct { const char *set, *msg; } bad[] = {
        {"model.d_model=2147483647", "--set model.d_model: 2147483647 is out of range; allowed: an integer in [1, 65536]"},
        {"model.d_model=2147483648", "--set model.d_model: 2147483648 is out of range"},
        {"model.d_model=65537", "--set model.d_model: 65537 is out of range; allowed: an integer in [1, 65536]"},
        {"train.batch_size=2147483647", "--set train.batch_size: 2147483647 is out of range; allowed: an integer in [1, 65536]"},
        {"data.seq_len=2147483647", "--set data.seq_len: 2147483647 is out of range; allowed: an integer in [1, 16777216]"},
        {"train.threads=100000", "--set train.threads: 100000 is out of range; allowed: an integer in [0, 4096]"},
        {"train.grad_accum=2147483647", "--set train.grad_accum: 2147483647 is out of range; allowed: an integer in [1, 65536]"},
        {"train.eval_batches=2147483647", "--set train.eval_batches: 2147483647 is out of range; allowed: an integer in [0, 65536]"},
        {"model.n_layers=257", "--set model.n_layers: 257 is out of range; allowed: an integer in [1, 256]"},
        {"model.vocab_size=16777217", "allowed: 0 or an integer in [2, 16777216]"},
        {"model.mlp_hidden=1048577", "allowed: an integer in [0, 1048576]"},
        {"model.mlp_ratio=1e300", "--set model.mlp_ratio: 1e300 is out of range; allowed: a number in (0, 64]"},
        {"gdn.n_heads=4097", "allowed: an integer in [1, 4096]"},
        {"gdn.head_dim=1025", "allowed: an integer in [1, 1024]"},
        {"gdn.expand_v=65", "allowed: a number in (0, 64]"},
        {"gdn.conv_size=257", "allowed: an integer in [1, 256]"},
        {"gdn.bwd_segment_chunks=-1", "--set gdn.bwd_segment_chunks: -1 is out of range; allowed: an integer in [0, 1048576]"},
        {"swa.head_dim=2048", "allowed: an even integer in [2, 1024]"},
        {"swa.window=2147483647", "allowed: an integer in [1, 16777216]"},
        {"train.steps=1000000001", "allowed: an integer in [1, 1000000000]"},
        {"train.head_chunk_rows=2147483647", "allowed: 0 or an integer in [1, 1073741824]"},
        {"dist.timeout_s=604801", "allowed: an integer in [1, 604800]"},
        {"dist.bucket_mb=1e9", "allowed: a number in (0, 65536]"},
        {"log.every=2000000000", "allowed: an integer in [1, 1000000000]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gdn_config c, before;
        config_defaults(&c);
        memcpy(&before, &c, sizeof c);
        capture_begin();
        bool ok = config_set(&c, bad[i].set);
        char *msg = capture_end();
        char what[200];
        snprintf(what, sizeof what, "%s refused, naming the key and range", bad[i].set);
        check(what, !ok && strstr(msg, bad[i].msg) && memcmp(&c, &before, sizeof c) == 0);
        if (ok || !strstr(msg, bad[i].msg)) show(msg);
        free(msg);
    }
    gdn_config c;
    config_defaults(&c);
    capture_begin();
    bool ok = config_load_string_sets(&c, "[model]\nd_model = 65536\nn_layers = 256\nvocab_size = 16777216\n"
                                      "[train]\nthreads = 4096\ngrad_accum = 65536\neval_batches = 65536\n"
                                      "batch_size = 127\n[data]\nseq_len = 16777216\n", "max.ini", NULL, 0);
    char *msg = capture_end();
    show(msg);
    free(msg);
    check("the bounds themselves are accepted (d_model 65536, threads 4096, seq_len 2^24 x batch 127 ...)",
          ok && c.d_model == 65536 && c.threads == 4096 && c.seq_len == 16777216 && c.batch_size == 127);
    config_defaults(&c);
    capture_begin();
    ok = config_load_string_sets(&c, "[data]\nseq_len = 16777216\n", "tok.ini", S("train.batch_size=65536"), 1);
    msg = capture_end();
    show(msg);
    check("batch_size x seq_len past 2^31 - 1 refused, naming both and the product",
          !ok && strstr(msg, "--set train.batch_size: batch_size x seq_len = 65536 x 16777216 = 1099511627776 "
                             "tokens per micro-batch (seq_len is set at tok.ini:2); allowed: a product of at most 2147483647"));
    free(msg);

    // every shipped config still loads
    const char *src = getenv("GDN_SOURCE_DIR");
    if (src) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "find '%s/configs' -name '*.ini' | sort", src);
        FILE *p = popen(cmd, "r");
        CHECK_PTR(p);
        char line[1024];
        int n = 0, good = 0;
        while (fgets(line, sizeof line, p)) {
            line[strcspn(line, "\n")] = '\0';
            config_defaults(&c);
            n++;
            if (load_ok(&c, line, NULL, 0)) good++;
            else printf("      config %s does not load\n", line);
        }
        pclose(p);
        char what[128];
        snprintf(what, sizeof what, "every config in configs/ loads (%d of %d)", good, n);
        check(what, n > 0 && good == n);
    } else {
        printf("  (GDN_SOURCE_DIR not set: configs/ not checked)\n");
    }

    printf("\nmodel_check_sizes: sizes past an int or a 64-bit size\n");
    char err[512];
    config_defaults(&c);
    c.vocab_size = 32000;
    c.d_model = 1024;
    c.n_layers = 12;
    check("fla-220m-like model at 16 x 2048 tokens: fine", model_check_sizes(&c, 16, 2048, err, sizeof err));
    bool r = model_check_sizes(&c, 65536, 65536, err, sizeof err);
    printf("      | %s\n", err);
    check("65536 x 65536 tokens per micro-batch: a message, no wrapped size",
          !r && strstr(err, "batch_size x seq_len = 65536 x 65536 = 4294967296 tokens") && !strstr(err, "184467"));
    c.d_model = 65536;
    c.vocab_size = 16777216;
    c.n_layers = 256;
    c.mlp_hidden = 1048576;
    c.gdn_n_heads = 4096;
    c.gdn_head_dim = 1024;
    c.gdn_expand_v = 64;
    r = model_check_sizes(&c, 127, 16777216, err, sizeof err);
    printf("      | %s\n", err);
    check("every width at its bound, 2^31 - 2^24 tokens: 'would exceed a 64-bit size'",
          !r && strstr(err, "would exceed a 64-bit size") && !strstr(err, "184467"));
    c.gdn_n_heads = 65536;
    c.gdn_head_dim = 65536;
    r = model_check_sizes(&c, 1, 8, err, sizeof err);
    printf("      | %s\n", err);
    check("heads x head_dim past an int (outside the schema): 'does not fit an int'",
          !r && strstr(err, "does not fit an int"));
}

// Resume (train.c): which keys may differ from a checkpoint's config, and the first difference.
static void test_resume_keys(void) {
    printf("== resume: the keys that may change, the first difference\n");
    check("train.steps, optim.lr, dist.zero1, log.every may change",
          config_key_resumable("train", "steps") && config_key_resumable("optim", "lr") &&
          config_key_resumable("dist", "zero1") && config_key_resumable("log", "every"));
    check("model.d_model, model.tie_embeddings, train.seed, optim.beta2, data.path may not",
          !config_key_resumable("model", "d_model") && !config_key_resumable("model", "tie_embeddings") &&
          !config_key_resumable("train", "seed") && !config_key_resumable("optim", "beta2") &&
          !config_key_resumable("data", "path"));
    gdn_config a, b;
    config_defaults(&a);
    config_defaults(&b);
    config_difference d;
    check("equal configs: no difference", config_first_difference(&a, &b, 0, false, &d) < 0);
    b.steps = 7;
    b.lr = 0.5;
    check("steps and lr differ: none once the resumable keys are skipped",
          config_first_difference(&a, &b, 0, true, &d) < 0);
    int i = config_first_difference(&a, &b, 0, false, &d);
    check("... and [train] steps 1000 vs 7 first when they are not",
          i >= 0 && !strcmp(d.section, "train") && !strcmp(d.key, "steps") && !strcmp(d.a, "1000") &&
          !strcmp(d.b, "7"));
    check("... then [optim] lr 0.001 vs 0.5 from the next key on",
          config_first_difference(&a, &b, i + 1, false, &d) > i && !strcmp(d.key, "lr") &&
          !strcmp(d.a, "0.001") && !strcmp(d.b, "0.5"));
    b.tie_embeddings = false;
    check("tie_embeddings differs: named with true vs false even when skipping the resumable",
          config_first_difference(&a, &b, 0, true, &d) >= 0 && !strcmp(d.key, "tie_embeddings") &&
          !strcmp(d.a, "true") && !strcmp(d.b, "false"));
}

int main(void) {
    CHECK_PTR(mkdtemp(tmpdir));
    cap_path = tpath("stderr.txt");
    test_defaults();
    gdn_config valid;
    test_valid(&valid);
    test_include_and_set();
    test_errors();
    test_recompute_mode();
    test_bounds();
    test_roundtrip(&valid);
    test_resume_keys();
    CHECK_SYS(unlink(cap_path));
    free(cap_path);
    for (int i = nmade - 1; i >= 0; i--) {
        struct stat st;
        CHECK_SYS(stat(made[i], &st));
        if (S_ISDIR(st.st_mode)) CHECK_SYS(rmdir(made[i]));
        else CHECK_SYS(unlink(made[i]));
        free(made[i]);
    }
    CHECK_SYS(rmdir(tmpdir));
    return gc_finish("test_config");
}
