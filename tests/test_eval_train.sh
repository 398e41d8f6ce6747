#!/usr/bin/env bash
# test_eval_train.sh — the [eval] section in gdn-train on the CPU: every eval.every steps and at
# the end one metrics line holds val/NAME for each named set, mc/NAME/acc and acc_norm, and the
# recall probes; val/NAME of the training's own set equals the run's val_loss bit for bit; the
# training is bitwise the run without [eval] (losses, checkpoint), also through --stop-after and
# --resume (the eval keys may change on resume); --eval prints the values of the run's last
# evaluation; bad eval values stop the run before anything is written, naming the key (and the
# file and line); tools/plot draws the eval curves.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_eval_train; }
head -c 120000 "$SRC/src/model/model.c" >"$WORK/code.txt"
"$BIN/gdn-prepare" --input "$WORK/code.txt" --out "$WORK/code.h5" >/dev/null || { fail "gdn-prepare code"; finish test_eval_train; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/plain"
cat "$WORK/micro.ini" >"$WORK/eval.ini"
cat >>"$WORK/eval.ini" <<INI
[eval]
every = 20
val = shk:$WORK/d.h5, code:$WORK/code.h5
batches = 2
mc = toy:$SRC/tests/fixtures/eval/mc.jsonl
mc_items = 6
mqar = 32:4, 40:8
needle = 40
probes = 6
INI
evline() { grep '"eval"' "$1" | sed -n "${2}p"; }
# one value of an eval metrics line: key (a regex-safe name) -> value as written
evval() { sed -n "s|.*\"$2\": \\([^,}]*\\).*|\\1|p" <<<"$1"; }

echo "== a run with [eval] against the same run without"
"$BIN/gdn-train" "$WORK/micro.ini" >"$WORK/plain.log" 2>&1 && pass "run without [eval] exits 0" || { fail "plain run"; tail "$WORK/plain.log"; }
"$BIN/gdn-train" "$WORK/eval.ini" --set train.out_dir="$WORK/ev" >"$WORK/ev.log" 2>&1 && pass "run with [eval] exits 0" || { fail "eval run"; tail "$WORK/ev.log"; }
[ "$(grep -c '"eval"' "$WORK/ev/metrics.jsonl")" = 2 ] && pass "two eval lines (step 20 and the end)" || fail "eval lines: $(grep -c '"eval"' "$WORK/ev/metrics.jsonl")"
l20=$(evline "$WORK/ev/metrics.jsonl" 1); l40=$(evline "$WORK/ev/metrics.jsonl" 2)
grep -q '^{"step": 20, "tokens": 3200, "eval": {' <<<"$l20" && grep -q '^{"step": 40, ' <<<"$l40" && pass "at steps 20 and 40" || fail "eval steps: $l20 / $l40"
keys_ok=1
for k in val/shk val/code mc/toy/acc mc/toy/acc_norm recall/mqar_L32_k4 recall/mqar_L40_k8 recall/needle_L40; do
  v=$(evval "$l40" "$k"); [[ $v =~ ^[0-9.eE+-]+$ ]] || { keys_ok=0; echo "    $k: '$v'"; }
done
[ $keys_ok = 1 ] && pass "every value present and a number: $l40" || fail "eval values: $l40"
for step in 20 40; do
  vl=$(sed -n "s/^{\"step\": $step, .*\"val_loss\": \\([^,]*\\),.*/\\1/p" "$WORK/ev/metrics.jsonl")
  vs=$(evval "$(grep "^{\"step\": $step, .*\"eval\"" "$WORK/ev/metrics.jsonl")" val/shk)
  [ -n "$vl" ] && [ "$vl" = "$vs" ] && pass "step $step: val/shk $vs == val_loss (data.path's own set, 17 digits)" || fail "step $step: val/shk '$vs' vs val_loss '$vl'"
done
grep -q "^eval step 40 | val/shk [0-9.]* | val/code [0-9.]* | mc/toy/acc " "$WORK/ev.log" && pass "eval line printed: $(grep '^eval step 40' "$WORK/ev.log")" || fail "no eval line in the log"
grep -q "^eval: mc/toy: 6 items, 18 candidates in " "$WORK/ev.log" && pass "the task's progress line: $(grep '^eval: mc/toy' "$WORK/ev.log" | tail -1)" || fail "no mc progress line"
cmp -s <(losses "$WORK/plain/metrics.jsonl") <(losses "$WORK/ev/metrics.jsonl") && pass "losses == the run without [eval] (40 steps, 17 digits)" || fail "losses differ with [eval]"
"$BIN/gdn-ckpt" diff "$WORK/plain/checkpoint.h5" "$WORK/ev/checkpoint.h5" >"$WORK/d1.log" && grep -q "^IDENTICAL" "$WORK/d1.log" && pass "checkpoint == the run without [eval]: weights, AdamW state, data position bitwise" || { fail "checkpoint differs with [eval]"; cat "$WORK/d1.log"; }

echo "== --stop-after 20 + --resume with [eval] == straight"
"$BIN/gdn-train" "$WORK/eval.ini" --set train.out_dir="$WORK/h" --stop-after 20 >"$WORK/h1.log" 2>&1 && pass "first half exits 0" || { fail "first half"; tail "$WORK/h1.log"; }
"$BIN/gdn-train" --resume "$WORK/h/checkpoint.h5" --set eval.needle=32 --set eval.every=10 >"$WORK/h2.log" 2>&1 && pass "resume with other eval keys exits 0 (eval.* resumable)" || { fail "resume"; tail "$WORK/h2.log"; }
"$BIN/gdn-ckpt" diff "$WORK/ev/checkpoint.h5" "$WORK/h/checkpoint.h5" >"$WORK/d2.log" && grep -q "^IDENTICAL" "$WORK/d2.log" && pass "resumed == straight, bitwise" || { fail "resumed differs"; cat "$WORK/d2.log"; }
grep '"eval"' "$WORK/h/metrics.jsonl" | tail -1 | grep -q '"step": 40, .*"recall/needle_L32": ' && [ "$(grep -c '"eval"' "$WORK/h/metrics.jsonl")" = 3 ] && pass "the resumed part evaluates at 30 and 40 with the new keys" || fail "resumed eval lines: $(grep '"eval"' "$WORK/h/metrics.jsonl")"

echo "== --eval prints the values of the run's last evaluation"
"$BIN/gdn-train" --resume "$WORK/ev/checkpoint.h5" --eval >"$WORK/e.log" 2>&1 && pass "--eval exits 0" || { fail "--eval"; cat "$WORK/e.log"; }
printf -v want 'val/shk %.4f' "$(evval "$l40" val/shk)"
grep -q "^eval: $want | val/code " "$WORK/e.log" && pass "--eval: $(grep '^eval: val/' "$WORK/e.log")" || { fail "--eval line, want '$want'"; cat "$WORK/e.log"; }

echo "== bad [eval] values stop the run before it writes, naming the key"
bad() {  # what, expected message (grep -F), --set arguments...
  local what=$1 want=$2; shift 2
  rm -rf "$WORK/bad"
  "$BIN/gdn-train" "$WORK/eval.ini" --set train.out_dir="$WORK/bad" "$@" >"$WORK/bad.log" 2>&1; local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$want" "$WORK/bad.log" && [ ! -e "$WORK/bad/metrics.jsonl" ] && [ ! -e "$WORK/bad/config.ini" ]; then
    pass "$what: exit 1, $(grep -F -- "$want" "$WORK/bad.log" | head -1)"
  else
    fail "$what: exit $rc"; tail -3 "$WORK/bad.log"
  fi
}
bad "MQAR longer than seq_len" "eval.mqar: length 64 is longer than data.seq_len = 40" --set eval.mqar=64:4
bad "MQAR with too many keys" "eval.mqar: 32:9 needs 4 x KEYS <= LEN" --set eval.mqar=32:9
bad "MQAR entry without keys" "eval.mqar: entry \"32\" is not LEN:KEYS" --set eval.mqar=32
bad "needle too short" "eval.needle: length 2, expected at least 3" --set eval.needle=2
bad "an empty list entry" "eval.needle = \"40,,32\": an empty entry" --set eval.needle=40,,32
bad "a set that does not exist" "eval.val nope: $WORK/nope.h5" --set "eval.val=nope:$WORK/nope.h5"
bad "a name given twice" "eval.val: the name \"a\" is given twice" --set "eval.val=a:$WORK/d.h5, a:$WORK/code.h5"
bad "an entry without a name" "is not NAME:PATH" --set "eval.val=$WORK/d.h5"
printf '{"context": "a", "endings": ["b", "c"], "label": 0}\n{"context": "a", "endings": ["b"], "label": 0}\n' >"$WORK/bad.jsonl"
bad "a bad multiple-choice line" "eval.mc t: $WORK/bad.jsonl:2: 'endings' has 1 entries" --set "eval.mc=t:$WORK/bad.jsonl"

echo "== tools/plot draws the eval curves"
if command -v gnuplot >/dev/null; then
  "$SRC/tools/plot" "$WORK/ev" "$WORK/ev.png" >"$WORK/plot.log" 2>&1 && [ "$(head -c 4 "$WORK/ev.png" | od -An -c | tr -d ' ')" = '211PNG' ] &&
    pass "PNG written: $(cat "$WORK/plot.log")" || { fail "tools/plot"; cat "$WORK/plot.log"; }
  grep -q "eval: 2 loss curves, 5 accuracy curves" "$WORK/plot.log" && pass "2 eval loss curves, 5 accuracy curves" || fail "plot curves: $(cat "$WORK/plot.log")"
else
  echo "  (gnuplot not found: plot not checked)"
fi
finish test_eval_train
