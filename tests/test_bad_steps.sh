#!/usr/bin/env bash
# test_bad_steps.sh — the bad-step policy of train.c on the CPU, by fault injection
# (--test-fault-grad-scale STEP[-LAST]:FACTOR multiplies a step's summed gradients):
#   - an outlier gradient norm (x100 at step 12; train.skip_zscore = 3 over a window of 5) is
#     skipped: a logged line (step, loss, grad norm, z), a metrics record "skipped": true, the
#     weights and AdamW state of step 11 unchanged at step 12 while the data moved on;
#   - the same fault without skip_zscore is not skipped (the control: the option is what skips);
#   - a non-finite norm (x nan) is skipped whatever skip_zscore; the run goes on and ends (exit 0);
#   - resume across skips is bitwise: a run stopped at the skipped step, and one stopped after it
#     (the window and the skip counts come from the checkpoint), resumed, equal the straight run;
#   - train.max_skips = 3 with 3 bad steps in a row: exit 3 naming the step and the last good
#     checkpoint; max_skips = 1: the first bad norm stops the run (the rule before skipping);
#   - gdn-ckpt info shows the skip count; a bad --test-fault-grad-scale value exits 2.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_bad_steps; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/a"
Z=(--set train.skip_zscore=3 --set train.skip_window=5)

echo "== an outlier gradient norm is skipped"
"$BIN/gdn-train" "$WORK/micro.ini" "${Z[@]}" --test-fault-grad-scale 12:100 >"$WORK/a.log" 2>&1; rc=$?
[ $rc -eq 0 ] && pass "run exits 0" || { fail "run exit $rc"; tail -5 "$WORK/a.log"; }
line=$(grep '^step *12/40 | skipped:' "$WORK/a.log")
echo "$line" | grep -q 'loss [0-9.]* | grad norm [0-9.]* (z [0-9.]* > 3) | no update' && pass "logged: $line" || { fail "no skip line for step 12"; grep skipped "$WORK/a.log"; }
grep -q '^{"step": 12, "tokens": [0-9]*, "skipped": true, "loss": [0-9.]*, "grad_norm": [0-9.]*, "grad_z": [0-9.]*, "skips_in_row": 1, "skips": 1,' "$WORK/a/metrics.jsonl" &&
  pass "metrics record for step 12 with skipped, grad_norm, grad_z" || fail "no metrics record of the skip"
"$BIN/gdn-ckpt" info "$WORK/a/checkpoint.h5" | grep -q '^skips = [1-9]' && pass "gdn-ckpt info: $("$BIN/gdn-ckpt" info "$WORK/a/checkpoint.h5" | grep '^skips =')" || fail "no skips in info"

"$BIN/gdn-train" "$WORK/micro.ini" "${Z[@]}" --test-fault-grad-scale 12:100 --set train.out_dir="$WORK/s11" --stop-after 11 >/dev/null 2>&1
"$BIN/gdn-train" "$WORK/micro.ini" "${Z[@]}" --test-fault-grad-scale 12:100 --set train.out_dir="$WORK/s12" --stop-after 12 >/dev/null 2>&1
"$BIN/gdn-ckpt" diff "$WORK/s11/checkpoint.h5" "$WORK/s12/checkpoint.h5" >"$WORK/d1112.log"
grep -q "^  step: 11 vs 12" "$WORK/d1112.log" && grep -q "^  sampler_pos: 11 vs 12" "$WORK/d1112.log" && ! grep -q "relative difference .*; first at" "$WORK/d1112.log" &&
  pass "step 12 skipped: weights and AdamW m, v of step 11 bitwise, data position moved on" || { fail "step 12 changed the state"; cat "$WORK/d1112.log"; }

"$BIN/gdn-train" "$WORK/micro.ini" --test-fault-grad-scale 12:100 --set train.out_dir="$WORK/c" >"$WORK/c.log" 2>&1
! grep -q 'skipped:' "$WORK/c.log" && ! "$BIN/gdn-ckpt" diff "$WORK/a/checkpoint.h5" "$WORK/c/checkpoint.h5" >/dev/null &&
  pass "control: skip_zscore = 0 (the default) does not skip the outlier, other weights" || fail "control: skipped without skip_zscore"

echo "== a non-finite gradient norm is skipped"
"$BIN/gdn-train" "$WORK/micro.ini" --test-fault-grad-scale 12:nan --set train.out_dir="$WORK/n" >"$WORK/n.log" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q '^step *12/40 | skipped: .*grad norm nan (not finite)' "$WORK/n.log" && grep -q '"step": 12, .*"skipped": true, .*"grad_norm": null, "grad_z": null' "$WORK/n/metrics.jsonl" &&
  pass "nan norm at step 12 skipped, run ends (exit 0), metrics says null" || { fail "nan norm: exit $rc"; grep -E 'skipped|error' "$WORK/n.log"; }

echo "== resume across skips is bitwise"
for stop in 12 20; do
  "$BIN/gdn-train" "$WORK/micro.ini" "${Z[@]}" --test-fault-grad-scale 12:100 --set train.out_dir="$WORK/r$stop" --stop-after $stop >/dev/null 2>&1
  "$BIN/gdn-train" --resume "$WORK/r$stop/checkpoint.h5" --test-fault-grad-scale 12:100 >"$WORK/r$stop.log" 2>&1 || fail "resume from $stop"
  "$BIN/gdn-ckpt" diff "$WORK/a/checkpoint.h5" "$WORK/r$stop/checkpoint.h5" >"$WORK/dr$stop.log" &&
    pass "stopped at step $stop, resumed: == the straight run (weights, m, v, skips, data position)" || { fail "resume from $stop differs"; cat "$WORK/dr$stop.log"; }
done
n_straight=$(grep -c '"skipped": true' "$WORK/a/metrics.jsonl")
n_resumed=$(grep -c '"skipped": true' "$WORK/r20/metrics.jsonl")
[ "$n_straight" = "$n_resumed" ] && pass "the same skips in both ($n_straight)" || fail "skips: straight $n_straight, resumed $n_resumed"

echo "== train.max_skips in a row stop the run"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.max_skips=3 --set train.ckpt_every=10 --test-fault-grad-scale 12-14:inf --set train.out_dir="$WORK/k" >"$WORK/k.log" 2>&1; rc=$?
[ $rc -eq 3 ] && pass "3 bad norms in a row, max_skips = 3: exit 3" || { fail "exit $rc"; tail -3 "$WORK/k.log"; }
grep -q "^error: step 14: the gradient norm (skipped step 3 in a row of train.max_skips = 3) is -*\(nan\|inf\); stopping" "$WORK/k.log" && grep -q "last good checkpoint: $WORK/k/checkpoint.h5 (step 10)" "$WORK/k.log" &&
  pass "names the step and the last good checkpoint: $(grep -A1 '^error' "$WORK/k.log" | tr '\n' ' ' | cut -c1-160)" || { fail "stop message"; grep -A2 error "$WORK/k.log"; }
"$BIN/gdn-train" "$WORK/micro.ini" --set train.max_skips=4 --test-fault-grad-scale 12-14:inf --set train.out_dir="$WORK/k4" >"$WORK/k4.log" 2>&1; rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'skipped:' "$WORK/k4.log")" -eq 3 ] && pass "the same with max_skips = 4: 3 skips, the run ends (exit 0)" || fail "max_skips 4: exit $rc"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.max_skips=1 --test-fault-grad-scale 7:nan --set train.out_dir="$WORK/k1" >"$WORK/k1.log" 2>&1; rc=$?
[ $rc -eq 3 ] && grep -q "^error: step 7: the gradient norm" "$WORK/k1.log" && pass "max_skips = 1: the first bad norm stops the run (exit 3)" || { fail "max_skips 1: exit $rc"; tail -3 "$WORK/k1.log"; }

echo "== bad option values"
"$BIN/gdn-train" "$WORK/micro.ini" --test-fault-grad-scale 12 >/dev/null 2>"$WORK/e1"; rc=$?
[ $rc -eq 2 ] && grep -q "STEP\[-LAST\]:FACTOR" "$WORK/e1" && pass "--test-fault-grad-scale 12: exit 2, says the form" || fail "bad fault value: exit $rc"
"$BIN/gdn-train" "$WORK/micro.ini" --test-fault-grad-scale 9-3:2 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && pass "--test-fault-grad-scale 9-3:2: exit 2" || fail "9-3:2: exit $rc"
"$BIN/gdn-train" --help | grep -q "test-fault-grad-scale" && pass "--help lists it under testing" || fail "--help"
finish test_bad_steps
