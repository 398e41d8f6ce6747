#!/usr/bin/env bash
# test_resume_checks.sh — --resume validates the checkpoint against the effective config: a
# checkpoint of another layer count, tying or seed, or a --set of a key that may not change on
# resume, is refused (exit 1) naming the key and both values; the keys that may change
# (train.steps, optim.lr, ...) do; a checkpoint beyond train.steps is refused, one at
# train.steps has nothing to do (exit 0, nothing written); CONFIG.ini --resume with the run's
# own config continues bit for bit.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_resume_checks; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/base"
short=(--set train.steps=4 --set train.eval_every=0)
train() { "$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" "$@" >"$WORK/train.log" 2>&1 || { fail "training run $*"; tail -5 "$WORK/train.log"; }; }
train
train --set model.n_layers=4 --set train.out_dir="$WORK/l4"
train --set model.tie_embeddings=false --set train.out_dir="$WORK/ut"

# refused NAME PATTERN... -- ARGS: exit 1 (not a signal), stderr holds every PATTERN
refused() {
  local name=$1; shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$BIN/gdn-train" "$@" >"$WORK/out.log" 2>"$WORK/err.log"
  local rc=$? ok=1
  [ $rc -eq 1 ] || ok=0
  for p in "${pats[@]}"; do grep -qF -- "$p" "$WORK/err.log" || ok=0; done
  if [ $ok -eq 1 ]; then pass "$name: exit 1, \"$(grep '^error' "$WORK/err.log" | head -1 | cut -c1-150)\""
  else fail "$name: exit $rc (want 1 and: ${pats[*]})"; sed 's/^/        /' "$WORK/err.log" | tail -6; fi
}

echo "== what may not change"
refused "4-layer checkpoint into a 2-layer config" "[model] n_layers is 4 in the checkpoint's config, 2 here" -- \
  "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/x1" --resume "$WORK/l4/checkpoint.h5"
refused "untied checkpoint into a tied model" "[model] tie_embeddings is false in the checkpoint's config, true here" -- \
  "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/x2" --resume "$WORK/ut/checkpoint.h5"
refused "another seed" "[train] seed is 7 in the checkpoint's config, 8 here" -- \
  "$WORK/micro.ini" "${short[@]}" --set train.seed=8 --set train.out_dir="$WORK/x3" --resume "$WORK/base/checkpoint.h5"
refused "--resume alone with --set model.dropout" "[model] dropout is 0.1 in the checkpoint's config, 0.2 here" "HINT: resume with model.dropout = 0.1" -- \
  --resume "$WORK/base/checkpoint.h5" --set model.dropout=0.2 --set train.steps=6
refused "another AdamW beta2" "[optim] beta2" -- --resume "$WORK/base/checkpoint.h5" --set optim.beta2=0.99 --set train.steps=6
[ ! -e "$WORK/x1" ] && [ ! -e "$WORK/x2" ] && [ ! -e "$WORK/x3" ] && pass "no run directory made by a refused resume" || fail "a refused resume made its run directory"

echo "== what may change"
"$BIN/gdn-train" --resume "$WORK/base/checkpoint.h5" --set train.steps=6 --set optim.lr=1e-3 --set optim.grad_clip=0.5 \
  --set train.eval_every=2 --set train.ckpt_every=1 --set train.batch_size=2 --set train.grad_accum=2 --set log.every=2 \
  --set train.out_dir="$WORK/more" >"$WORK/more.log" 2>&1 && grep -q "^step = 6$" <("$BIN/gdn-ckpt" info "$WORK/more/checkpoint.h5") &&
  pass "steps, lr, grad_clip, cadences, batch split, out_dir: resumed to step 6" || { fail "resume with resumable keys"; tail -5 "$WORK/more.log"; }

echo "== the checkpoint's step against train.steps"
snap() { (cd "$1" && for f in config.ini metrics.jsonl checkpoint.h5; do cksum <"$f"; done) | tr '\n' ' '; }
before=$(snap "$WORK/base")
refused "a checkpoint beyond train.steps" "the checkpoint is at step 4, beyond train.steps = 2" -- \
  --resume "$WORK/base/checkpoint.h5" --set train.steps=2
"$BIN/gdn-train" --resume "$WORK/base/checkpoint.h5" >"$WORK/done.log" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "^nothing to do: '$WORK/base/checkpoint.h5' is at step 4 = train.steps" "$WORK/done.log" &&
  pass "a checkpoint at train.steps: exit 0, \"$(grep '^nothing' "$WORK/done.log" | cut -c1-110)...\"" || { fail "checkpoint at train.steps: exit $rc"; tail -3 "$WORK/done.log"; }
[ "$(snap "$WORK/base")" = "$before" ] && pass "... and the run directory unchanged" || fail "the run directory changed"

echo "== CONFIG.ini --resume with the run's own config == the straight run, bitwise"
train --set train.out_dir="$WORK/half" --stop-after 2
"$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/half" --resume "$WORK/half/checkpoint.h5" >"$WORK/half.log" 2>&1 &&
  "$BIN/gdn-ckpt" diff "$WORK/base/checkpoint.h5" "$WORK/half/checkpoint.h5" >"$WORK/diff.log" && grep -q "^IDENTICAL" "$WORK/diff.log" &&
  pass "2 + 2 steps == 4 steps" || { fail "CONFIG.ini --resume"; tail -3 "$WORK/half.log" "$WORK/diff.log"; }
finish test_resume_checks
