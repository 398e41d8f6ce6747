#!/usr/bin/env bash
# test_train.sh — the loop end to end on the CPU: training lowers the loss; the same seed gives
# the same losses bit for bit; 20 steps + checkpoint + resume + 20 steps equals 40 straight steps
# bit for bit (weights, AdamW state, data position); SIGINT finishes the step, checkpoints and
# exits 0; a NaN loss stops with the step and the last good checkpoint named; a blow-up (a NaN
# loss, optim.lr = 1e6) on a checkpoint step, the last step or between checkpoints stops with
# exit 3 and leaves the last good checkpoint, whose weights evaluate finite; --eval scores a checkpoint (== the run's
# own last evaluation) and writes nothing.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_train; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/a"

echo "== 40 steps, twice with the same seed"
"$BIN/gdn-train" "$WORK/micro.ini" >"$WORK/a.log" 2>&1 && pass "run A exits 0" || { fail "run A"; cat "$WORK/a.log"; }
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/b" >"$WORK/b.log" 2>&1 && pass "run B exits 0" || fail "run B"
first=$(losses "$WORK/a/metrics.jsonl" | head -1 | cut -d' ' -f2)
last=$(losses "$WORK/a/metrics.jsonl" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' && pass "loss falls: step 1 $first -> step 40 $last" || fail "loss did not fall by 1 nat: $first -> $last"
grep -q '"val_loss"' "$WORK/a/metrics.jsonl" && pass "validation loss logged" || fail "no val_loss in metrics"
grep -q "ETA" "$WORK/a.log" && grep -q "tok/s" "$WORK/a.log" && grep -q "MFU" "$WORK/a.log" && pass "progress line has tok/s, MFU, ETA" || fail "progress line incomplete"
if cmp -s <(losses "$WORK/a/metrics.jsonl") <(losses "$WORK/b/metrics.jsonl"); then pass "same seed -> identical losses (40 steps, 17 digits)"; else fail "same seed gave different losses"; fi
"$BIN/gdn-ckpt" diff "$WORK/a/checkpoint.h5" "$WORK/b/checkpoint.h5" >/dev/null && pass "same seed -> identical checkpoints" || fail "same seed -> checkpoints differ"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/s" --set train.seed=8 >/dev/null 2>&1
cmp -s <(losses "$WORK/a/metrics.jsonl") <(losses "$WORK/s/metrics.jsonl") && fail "another seed gave the same losses" || pass "another seed -> other losses"

echo "== 20 steps + checkpoint + resume + 20 steps == 40 steps"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/c" --stop-after 20 >"$WORK/c1.log" 2>&1 && pass "first half exits 0" || { fail "first half"; cat "$WORK/c1.log"; }
"$BIN/gdn-ckpt" info "$WORK/c/checkpoint.h5" | grep -q "^step = 20$" && pass "checkpoint at step 20" || fail "no step-20 checkpoint"
"$BIN/gdn-train" --resume "$WORK/c/checkpoint.h5" >"$WORK/c2.log" 2>&1 && pass "resume exits 0" || { fail "resume"; cat "$WORK/c2.log"; }
"$BIN/gdn-ckpt" diff "$WORK/a/checkpoint.h5" "$WORK/c/checkpoint.h5" >"$WORK/diff.log" && pass "resumed run == straight run: weights, AdamW m and v, step, data position bitwise" || { fail "resumed run differs"; cat "$WORK/diff.log"; }
"$BIN/gdn-ckpt" diff --rtol 0 "$WORK/a/checkpoint.h5" "$WORK/c/checkpoint.h5" >"$WORK/diff0.log" && grep -q "^CLOSE: \([0-9]*\) tensors compared, 0 differ beyond --rtol, \1 bitwise equal;" "$WORK/diff0.log" &&
    pass "gdn-ckpt diff --rtol 0 counts the bitwise-equal tensors: $(cat "$WORK/diff0.log")" || { fail "gdn-ckpt diff --rtol 0"; cat "$WORK/diff0.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-x "$WORK/a/checkpoint.h5" "$WORK/c/checkpoint.h5" >/dev/null 2>"$WORK/rt.err"; rc=$?
[ $rc -eq 2 ] && grep -q "rtol '1e-x': expected a number >= 0" "$WORK/rt.err" && pass "gdn-ckpt diff --rtol 1e-x: exit 2, says why" || fail "--rtol 1e-x: exit $rc"
cmp -s <(losses "$WORK/a/metrics.jsonl") <(losses "$WORK/c/metrics.jsonl") && pass "resumed losses == straight losses (all 40 steps)" || fail "resumed losses differ"

echo "== train.recompute: 40 steps (with an evaluation and dropout) == run A, bitwise"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/r" --set train.recompute=true >"$WORK/r.log" 2>&1 && pass "recompute run exits 0" || { fail "recompute run"; tail "$WORK/r.log"; }
"$BIN/gdn-ckpt" diff "$WORK/a/checkpoint.h5" "$WORK/r/checkpoint.h5" >"$WORK/rdiff.log" && grep -q "^IDENTICAL" "$WORK/rdiff.log" && pass "recompute == without: weights, AdamW state bitwise" || { fail "recompute differs"; cat "$WORK/rdiff.log"; }
cmp -s <(losses "$WORK/a/metrics.jsonl") <(losses "$WORK/r/metrics.jsonl") && pass "recompute losses == run A losses" || fail "recompute losses differ"
a_act=$(sed -n 's/^memory:.*activations \([0-9.]*\) MiB.*/\1/p' "$WORK/a.log"); r_act=$(sed -n 's/^memory:.*activations \([0-9.]*\) MiB.*/\1/p' "$WORK/r.log")
awk -v a="$a_act" -v b="$r_act" 'BEGIN { exit !(b < a) }' && pass "recompute activations $r_act MiB < $a_act MiB" || fail "recompute activations $r_act MiB vs $a_act MiB"

echo "== SIGINT finishes the step, checkpoints, exits 0"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/i" --set train.steps=100000 --set train.eval_every=0 >"$WORK/i.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$WORK/i/metrics.jsonl" ] && break; sleep 0.1; done
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 0 ] && pass "exit 0 after SIGINT" || fail "exit $rc after SIGINT"
grep -q "signal 2: stopped after step" "$WORK/i.log" && pass "says where it stopped" || fail "no stop message"
step=$("$BIN/gdn-ckpt" info "$WORK/i/checkpoint.h5" 2>/dev/null | sed -n 's/^step = //p')
[ -n "$step" ] && [ "$step" -gt 0 ] && [ "$step" -lt 100000 ] && pass "checkpoint at step $step" || fail "no checkpoint after SIGINT"

echo "== NaN loss stops the run, naming the step and the last good checkpoint"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/n" --set train.ckpt_every=10 --test-fault-nan-step 30 >"$WORK/n.log" 2>&1
rc=$?
[ $rc -eq 3 ] && pass "exit 3" || fail "exit $rc on NaN"
grep -q "step 30: loss is nan" "$WORK/n.log" && pass "names step 30" || { fail "message"; cat "$WORK/n.log"; }
grep -q "last good checkpoint: .*n/checkpoint.h5" "$WORK/n.log" && pass "names the last good checkpoint" || fail "no checkpoint named"
"$BIN/gdn-ckpt" info "$WORK/n/checkpoint.h5" | grep -q "^step = 20$" && pass "checkpoint of step 20 kept intact" || fail "checkpoint damaged"

echo "== blow-ups leave the last good checkpoint: no checkpoint of weights whose loss is not finite or beyond twice ln(vocab)"
ckpt_step() { "$BIN/gdn-ckpt" info "$1/checkpoint.h5" 2>/dev/null | sed -n 's/^step = //p'; }
evals_finite() {  # the checkpoint's validation loss is a number
  "$BIN/gdn-train" --resume "$1/checkpoint.h5" --eval >"$WORK/ev.log" 2>&1 && grep -q "^eval: val loss [0-9]" "$WORK/ev.log"
}
# blowup NAME DIR WANT_STEP ARGS...: exit 3, names DIR's checkpoint of WANT_STEP as the last good one, which is it
blowup() {
  local name=$1 dir=$2 want=$3; shift 3
  "$BIN/gdn-train" "$@" >"$WORK/b.log" 2>&1
  local rc=$? got
  got=$(ckpt_step "$dir")
  if [ $rc -eq 3 ] && grep -q "last good checkpoint: $dir/checkpoint.h5 (step $want)" "$WORK/b.log" && [ "$got" = "$want" ] && evals_finite "$dir"; then
    pass "$name: exit 3, \"$(grep '^error' "$WORK/b.log" | head -1 | cut -c1-100)\", checkpoint of step $want kept, its val loss finite"
  else
    fail "$name: exit $rc, checkpoint of step '$got' (want exit 3, step $want):"; grep -A2 "^error" "$WORK/b.log" | sed 's/^/        /'
  fi
}
blowup "NaN loss on a checkpoint step (20)" "$WORK/n2" 10 "$WORK/micro.ini" --set train.out_dir="$WORK/n2" --set train.ckpt_every=10 --test-fault-nan-step 20
blowup "NaN loss on the last step (40)" "$WORK/n3" 30 "$WORK/micro.ini" --set train.out_dir="$WORK/n3" --set train.ckpt_every=10 --test-fault-nan-step 40
grep -q "^done:" "$WORK/b.log" && fail "the blown-up last step says done" || pass "no \"done:\" line"
cp -r "$WORK/n" "$WORK/x1"; cp -r "$WORK/n" "$WORK/x2"; cp -r "$WORK/n" "$WORK/x3"
blowup "optim.lr = 1e6 from step 20, checkpoint every step" "$WORK/x1" 20 --resume "$WORK/x1/checkpoint.h5" --set train.out_dir="$WORK/x1" --set optim.lr=1e6 --set train.ckpt_every=1
blowup "optim.lr = 1e6 on the last step (21)" "$WORK/x2" 20 --resume "$WORK/x2/checkpoint.h5" --set train.out_dir="$WORK/x2" --set optim.lr=1e6 --set train.steps=21
blowup "optim.lr = 1e6, no checkpoint due: the next step's loss (1e12, finite)" "$WORK/x3" 20 --resume "$WORK/x3/checkpoint.h5" --set train.out_dir="$WORK/x3" --set optim.lr=1e6 --set train.eval_every=0
grep -q "^error: step 22: loss is [0-9.e+]*, above the blow-up bound" "$WORK/b.log" && pass "... stops at step 22, before its update" || fail "step 22 not named"

echo "== --eval: the validation loss of a checkpoint"
before=$(cksum <"$WORK/a/config.ini")
"$BIN/gdn-train" --resume "$WORK/a/checkpoint.h5" --eval >"$WORK/e.log" 2>&1 && pass "--eval exits 0" || { fail "--eval"; cat "$WORK/e.log"; }
want=$(grep '"val_loss"' "$WORK/a/metrics.jsonl" | tail -1 | sed 's/.*"val_loss": \([^,}]*\).*/\1/' | awk '{ printf "%.6f", $1 }')
got=$(sed -n 's/^eval: val loss \([0-9.]*\) over .*/\1/p' "$WORK/e.log")
[ -n "$got" ] && [ "$got" = "$want" ] && pass "--eval: val loss $got == the run's last evaluation" || fail "--eval: '$got' vs the run's $want"
"$BIN/gdn-train" --resume "$WORK/a/checkpoint.h5" --eval --set train.eval_batches=0 >"$WORK/e0.log" 2>&1 &&
    grep -q "^eval: val loss [0-9.]* over the whole split ([0-9]* windows of " "$WORK/e0.log" && pass "--eval, eval_batches 0: $(grep '^eval:' "$WORK/e0.log")" || { fail "--eval whole split"; cat "$WORK/e0.log"; }
[ "$(cksum <"$WORK/a/config.ini")" = "$before" ] && [ "$(grep -c . "$WORK/a/metrics.jsonl")" -gt 0 ] && pass "--eval leaves the run directory as it was (config.ini)" || fail "--eval rewrote config.ini"
"$BIN/gdn-train" "$WORK/micro.ini" --eval >/dev/null 2>"$WORK/e2.err"; rc=$?
[ $rc -eq 2 ] && grep -q "needs --resume" "$WORK/e2.err" && pass "--eval without --resume: exit 2, says why" || fail "--eval without --resume: exit $rc"
finish test_train
