#!/usr/bin/env bash
# test_run_dir.sh — a run directory belongs to one run, and nothing in it changes before the run
# is validated: a new run into a directory holding a checkpoint or metrics is refused (exit 1,
# saying how to go on) unless train.overwrite = true; a resume into a directory holding another
# checkpoint is refused; a resume that fails (another shape, a damaged checkpoint) leaves
# config.ini, metrics and checkpoint as they were; a metrics or progress line that cannot be
# written (a full disk: /dev/full, a file-size limit) stops the run with exit 1 naming the file
# and the step.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_run_dir; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/run"
short=(--set train.steps=4 --set train.eval_every=0)
"$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" >"$WORK/base.log" 2>&1 || { fail "baseline run"; cat "$WORK/base.log"; finish test_run_dir; }
# what a run directory holds, as one line of checksums
snap() { (cd "$1" && for f in config.ini metrics.jsonl checkpoint.h5; do [ -e "$f" ] && cksum <"$f" || echo "no $f"; done) | tr '\n' ' '; }
before=$(snap "$WORK/run")

# run CASE WANT_RC PATTERN -- ARGS...: gdn-train exits WANT_RC (not a signal), stderr holds PATTERN
run() {
  local name=$1 want=$2 pat=$3; shift 4
  "$BIN/gdn-train" "$@" >"$WORK/out.log" 2>"$WORK/err.log"
  local rc=$?
  if [ $rc -eq "$want" ] && grep -qF -- "$pat" "$WORK/err.log"; then pass "$name: exit $rc, \"$(grep -F -- "$pat" "$WORK/err.log" | head -1 | cut -c1-120)\""
  else fail "$name: exit $rc (want $want, stderr with \"$pat\"):"; sed 's/^/        /' "$WORK/err.log" | tail -6; fi
}

echo "== a new run into a directory that holds a run"
run "new run where a checkpoint and metrics are" 1 "holds a run (checkpoint.h5, metrics.jsonl)" -- "$WORK/micro.ini" "${short[@]}" --set train.seed=8
grep -q "HINT: resume it (--resume $WORK/run/checkpoint.h5), choose another train.out_dir, or set train.overwrite = true" "$WORK/err.log" && pass "says how to go on" || fail "no hint"
[ "$(snap "$WORK/run")" = "$before" ] && pass "config.ini, metrics and checkpoint unchanged" || fail "the run directory changed"
mkdir -p "$WORK/m" && cp "$WORK/run/metrics.jsonl" "$WORK/m/"
run "new run where only metrics are" 1 "holds a run (metrics.jsonl)" -- "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/m"
mkdir -p "$WORK/e" && : >"$WORK/e/metrics.jsonl"
"$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/e" >/dev/null 2>&1 && pass "an empty metrics file (a run that never logged) is not a run: exit 0" || fail "empty metrics file refused"

echo "== train.overwrite = true starts over"
cp -r "$WORK/run" "$WORK/o"
"$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" --set train.seed=8 --set train.out_dir="$WORK/o" --set train.overwrite=true >"$WORK/o.log" 2>&1 && pass "exit 0" || { fail "overwrite run"; tail "$WORK/o.log"; }
[ "$(grep -c '"loss"' "$WORK/o/metrics.jsonl")" -eq 4 ] && grep -q "^seed = 8" <("$BIN/gdn-ckpt" info "$WORK/o/checkpoint.h5") && pass "metrics (4 lines) and checkpoint (seed 8) of the new run" || fail "overwrite: $(grep -c . "$WORK/o/metrics.jsonl") metrics lines"

echo "== a resume into a directory that holds another checkpoint"
cp -r "$WORK/run" "$WORK/other"
"$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/other" --set train.overwrite=true --set train.steps=3 >/dev/null 2>&1
other=$(snap "$WORK/other")
run "resume into another run's directory" 1 "holds another checkpoint than the one resumed" -- --resume "$WORK/run/checkpoint.h5" --set train.steps=6 --set train.out_dir="$WORK/other"
[ "$(snap "$WORK/other")" = "$other" ] && pass "that directory unchanged" || fail "the other run directory changed"
"$BIN/gdn-train" --resume "$WORK/other/checkpoint.h5" --set train.steps=5 >/dev/null 2>&1 && pass "a resume in its own directory runs" || fail "resume in place refused"

echo "== a resume that fails changes nothing"
run "resume of another shape" 1 "d_model" -- "$WORK/micro.ini" "${short[@]}" --set model.d_model=48 --resume "$WORK/run/checkpoint.h5"
[ "$(snap "$WORK/run")" = "$before" ] && pass "config.ini, metrics and checkpoint unchanged" || fail "a failed resume changed the run directory: $(snap "$WORK/run") vs $before"
cp -r "$WORK/run" "$WORK/t"
head -c 20000 "$WORK/run/checkpoint.h5" >"$WORK/t/checkpoint.h5"
tbefore=$(snap "$WORK/t")
run "resume of a truncated checkpoint" 1 "checkpoint.h5" -- "$WORK/micro.ini" "${short[@]}" --set train.steps=6 --set train.out_dir="$WORK/t" --resume "$WORK/t/checkpoint.h5"
[ "$(snap "$WORK/t")" = "$tbefore" ] && pass "config.ini, metrics and checkpoint unchanged" || fail "a failed resume changed the run directory"

echo "== a full disk under the metrics file, under stdout"
mkdir -p "$WORK/full" && ln -s /dev/full "$WORK/full/metrics.jsonl"
run "metrics on a full disk" 1 "step 1: cannot write metrics file '$WORK/full/metrics.jsonl'" -- "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/full" --set train.overwrite=true
grep -q "No space left on device" "$WORK/err.log" && pass "says why: No space left on device" || fail "no reason given"
"$BIN/gdn-train" "$WORK/micro.ini" "${short[@]}" --set train.out_dir="$WORK/so" >/dev/full 2>"$WORK/so.err"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot write .* to stdout: No space left on device" "$WORK/so.err" && pass "stdout on a full disk: exit 1, \"$(head -1 "$WORK/so.err")\"" || { fail "stdout on a full disk: exit $rc"; cat "$WORK/so.err"; }
# a file-size limit of 8 KiB on stdout (a log file on a full disk): the progress lines fill it
( ulimit -f 8; "$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/so2" >"$WORK/so2.out" 2>"$WORK/so2.err" ); rc=$?
[ $rc -eq 1 ] && grep -q "^error: step [0-9]*: cannot write the progress line to stdout: File too large" "$WORK/so2.err" && pass "progress lines beyond a file-size limit: exit 1, \"$(head -1 "$WORK/so2.err")\"" || { fail "progress lines beyond a file-size limit: exit $rc"; tail -3 "$WORK/so2.err"; }
finish test_run_dir
