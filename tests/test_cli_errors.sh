#!/usr/bin/env bash
# test_cli_errors.sh — bad input through gdn-train: each case exits non-zero with a clear
# message naming the file / key / field, and nothing already written is overwritten.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_cli_errors; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/run"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.steps=3 >/dev/null 2>&1 || fail "baseline run"
sum_before=$(cksum <"$WORK/run/checkpoint.h5")

# expect NAME EXPECTED_RC PATTERN... -- ARGS...: run gdn-train, check exit code and message
expect() {
  local name=$1 want=$2; shift 2
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$BIN/gdn-train" "$@" >"$WORK/out.log" 2>"$WORK/err.log"
  local rc=$? ok=1
  [ $rc -eq "$want" ] || ok=0
  for p in "${pats[@]}"; do grep -qF -- "$p" "$WORK/err.log" || ok=0; done
  if [ $ok -eq 1 ]; then pass "$name: exit $rc, \"$(head -1 "$WORK/err.log" | cut -c1-110)\""
  else fail "$name: exit $rc (want $want), stderr:"; sed 's/^/        /' "$WORK/err.log" | head -8; fi
}
cfg() { cp "$WORK/micro.ini" "$WORK/bad.ini"; printf '%s\n' "$@" >>"$WORK/bad.ini"; }

cfg "[optim]" "warmup_step = 5"
expect "unknown key" 2 "bad.ini:" "warmup_step" "did you mean" -- "$WORK/bad.ini"
cfg "[optimizer]" "lr = 1e-3"
expect "unknown section" 2 "bad.ini:" "optimizer" -- "$WORK/bad.ini"
cfg "[model]" "vocab_size = 12x"
expect "wrong type" 2 "bad.ini:" "vocab_size" "12x" -- "$WORK/bad.ini"
cfg "[optim]" "beta2 = 1.5"
expect "out of range" 2 "bad.ini:" "beta2" "allowed" -- "$WORK/bad.ini"
cfg "[train]" "device = tpu"
expect "bad enum" 2 "device" "auto" "cpu" "cuda" -- "$WORK/bad.ini"
expect "bad --set" 2 "--set" "n_layer" -- "$WORK/micro.ini" --set model.n_layer=3
expect "missing config" 2 "nope.ini" -- "$WORK/nope.ini"
# a model the GPU kernels do not cover is refused on train.device = cuda before any device is
# opened, naming the key (the micro model: head dims 16); a CPU-only build says it has no CUDA
if [ -e "$BIN/libgdn_cuda.a" ]; then
  expect "GPU: gdn head dim" 1 "micro.ini: train.device = cuda" "[gdn] head_dim = 16" "64, 128 and 256" -- \
    "$WORK/micro.ini" --set train.device=cuda
  expect "GPU: gdn expand_v" 1 "[gdn] expand_v = 1.5" "expand_v 1 and 2" -- \
    "$WORK/micro.ini" --set train.device=cuda --set gdn.head_dim=64 --set gdn.expand_v=1.5
  expect "GPU: swa head dim" 1 "[swa] head_dim = 16" "64 and 128" -- \
    "$WORK/micro.ini" --set train.device=cuda --set gdn.head_dim=64
else
  expect "no CUDA backend" 1 "train.device = cuda: this build has no CUDA backend" -- \
    "$WORK/micro.ini" --set train.device=cuda
fi
expect "missing dataset" 1 "$WORK/none.h5" -- "$WORK/micro.ini" --set data.path="$WORK/none.h5"
echo "not hdf5" >"$WORK/plain.h5"
expect "not HDF5" 1 "plain.h5" "HDF5" -- "$WORK/micro.ini" --set data.path="$WORK/plain.h5"
expect "wrong format attribute" 1 "checkpoint.h5" "format" -- "$WORK/micro.ini" --set data.path="$WORK/run/checkpoint.h5" --set train.out_dir="$WORK/x1"
expect "vocab too small for the data" 1 "vocab_size" "256" -- "$WORK/micro.ini" --set model.vocab_size=100 --set train.out_dir="$WORK/x2"
head -c 30 "$WORK/text.txt" >"$WORK/short.txt"
"$BIN/gdn-prepare" --input "$WORK/short.txt" --out "$WORK/short.h5" >/dev/null 2>&1
expect "dataset shorter than one window" 1 "short" "41" -- "$WORK/micro.ini" --set data.path="$WORK/short.h5" --set train.out_dir="$WORK/x3"
expect "checkpoint of another shape" 1 "checkpoint.h5" "[model] d_model is 32 in the checkpoint's config, 48 here" -- "$WORK/micro.ini" --set model.d_model=48 --resume "$WORK/run/checkpoint.h5" --set train.out_dir="$WORK/x4"
expect "resume from a missing checkpoint" 1 "missing.h5" -- --resume "$WORK/missing.h5"
expect "bad --stop-after" 2 "--stop-after" -- "$WORK/micro.ini" --stop-after zero
expect "bad --test-fault-nan-step" 2 "--test-fault-nan-step" "a step number >= 1" -- "$WORK/micro.ini" --test-fault-nan-step 0
expect "bad dist.overlap" 2 "dist.overlap" "maybe" -- "$WORK/micro.ini" --set dist.overlap=maybe
[ "$(cksum <"$WORK/run/checkpoint.h5")" = "$sum_before" ] && pass "existing checkpoint untouched by every failure" || fail "checkpoint was modified"

# a full disk while writing the checkpoint (file-size limit of 64 KiB: the checkpoint is larger):
# a clean exit 1 with the message, not a signal (HDF5 crashed at exit on a file it failed to close)
( ulimit -f 64; "$BIN/gdn-train" --resume "$WORK/run/checkpoint.h5" --set train.steps=5 >"$WORK/full.log" 2>"$WORK/full.err" )
rc=$?
[ $rc -eq 1 ] && grep -q "writing checkpoint" "$WORK/full.err" && grep -q "previous checkpoint is kept" "$WORK/full.err" \
  && pass "full disk: exit $rc, \"$(head -1 "$WORK/full.err" | cut -c1-100)\"" || { fail "full disk: exit $rc"; cat "$WORK/full.err"; }
[ "$(cksum <"$WORK/run/checkpoint.h5")" = "$sum_before" ] && pass "full disk: previous checkpoint intact" || fail "full disk damaged the checkpoint"
ls "$WORK/run/" | grep -q "\.tmp\." && fail "temporary checkpoint left behind" || pass "no temporary file left"
# a shard set whose val split is shorter than one window: the message, exit 1 every time, no
# crash of the training sampler's prefetch thread (it used to start first and die in HDF5)
printf 'one two three four five six seven eight nine ten\n\n' >"$WORK/tiny.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --input "$WORK/tiny.txt" --out "$WORK/shortval" >/dev/null 2>&1
bad=0
for i in 1 2 3 4 5; do
  "$BIN/gdn-train" "$WORK/micro.ini" --set data.path="$WORK/shortval" --set train.out_dir="$WORK/sv$i" >/dev/null 2>"$WORK/sv.err"
  rc=$?
  { [ $rc -eq 1 ] && grep -q "validation data: .*shortval.*val split has" "$WORK/sv.err" && ! grep -q HDF5 "$WORK/sv.err"; } || { bad=1; echo "    run $i: exit $rc: $(head -c 300 "$WORK/sv.err")"; }
done
[ $bad -eq 0 ] && pass "val split shorter than a window: exit 1 with the message, 5 runs of 5" || fail "val split shorter than a window"
finish test_cli_errors
