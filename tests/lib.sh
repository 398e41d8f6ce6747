# tests/lib.sh — shared by the shell tests: paths, a micro dataset and config, check helpers.
set -uo pipefail
SRC=${GDN_SOURCE_DIR:?run through ctest}
BIN=${GDN_BINARY_DIR:?run through ctest}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gdn-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
checks=0
pass() { checks=$((checks + 1)); echo "  pass  $*"; }
fail() { checks=$((checks + 1)); fails=$((fails + 1)); echo "  FAIL  $*"; }
finish() { echo "$1: $((checks - fails)) passed, $fails failed"; [ "$fails" -eq 0 ]; exit $?; }

# A text for tests: the first 300 kB of the tinyshakespeare text shipped in data/.
make_text() {
  head -c 300000 "$SRC/data/tinyshakespeare/input.txt" >"$1"
}

# micro.ini: a 2-layer GS model small enough for a few dozen steps in seconds.
write_micro() {
  cat >"$1" <<INI
[model]
pattern = GS
n_layers = 2
d_model = 32
mlp_hidden = 64
dropout = 0.1
[gdn]
n_heads = 2
head_dim = 16
chunk_size = 16
[swa]
n_heads = 2
head_dim = 16
window = 16
[data]
path = $2
seq_len = 40
[train]
batch_size = 4
steps = 40
eval_every = 20
eval_batches = 2
ckpt_every = 0
out_dir = $3
seed = 7
[optim]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[log]
every = 1
INI
}

# "loss" values of a metrics file, one per line, exactly as written (%.17g)
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([^,]*\),.*/\1 \2/p' "$1"; }
