#!/usr/bin/env bash
# test_ckpt_keep.sh — train.keep_checkpoints on the CPU (train.c, docs/checkpoints.md):
#   - default (1): checkpoint.h5 only, no step or best files;
#   - keep 2, a checkpoint every 10 of 40 steps: checkpoint-00000030.h5 and -00000040.h5 remain
#     (10, 20 deleted), checkpoint.h5 is the same file as the newest (a hard link), no temporary
#     files are left, every file verifies;
#   - checkpoint-best.h5 holds the step of the lowest val_loss in metrics.jsonl, also when that
#     step had no regular checkpoint (validation every 5 steps, checkpoints every 20, the run
#     stopped by a NaN loss at step 37: best 35, latest 20);
#   - a run stopped at step 20 and resumed from checkpoint.h5 equals the straight run bitwise,
#     and rotation goes on across the resume;
#   - every checkpoint carries the token file's tokenizer (bytes: kind "bytes", empty blob).
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_ckpt_keep; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/one"
K=(--set train.ckpt_every=10 --set train.eval_every=10 --set train.keep_checkpoints=2)

echo "== keep_checkpoints = 1 (default): one file"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.ckpt_every=10 >/dev/null 2>&1 || fail "default run"
files=$(cd "$WORK/one" && ls checkpoint* | tr '\n' ' ')
[ "$files" = "checkpoint.h5 " ] && pass "only checkpoint.h5" || fail "files: $files"
"$BIN/gdn-ckpt" info "$WORK/one/checkpoint.h5" | grep -q '^tokenizer = bytes (0 bytes)$' && pass "the checkpoint carries tokenizer bytes" || fail "tokenizer not in the checkpoint"

echo "== keep_checkpoints = 2"
"$BIN/gdn-train" "$WORK/micro.ini" "${K[@]}" --set train.out_dir="$WORK/k" >"$WORK/k.log" 2>&1 || { fail "keep run"; tail -3 "$WORK/k.log"; }
files=$(cd "$WORK/k" && ls checkpoint* | tr '\n' ' ')
[ "$files" = "checkpoint-00000030.h5 checkpoint-00000040.h5 checkpoint-best.h5 checkpoint.h5 " ] && pass "files: $files" || fail "files: $files"
[ "$(stat -c %i "$WORK/k/checkpoint.h5")" = "$(stat -c %i "$WORK/k/checkpoint-00000040.h5")" ] && pass "checkpoint.h5 is the newest step file (one inode)" || fail "checkpoint.h5 is not the newest"
ls "$WORK/k" | grep -q tmp && fail "temporary files left: $(ls "$WORK/k")" || pass "no temporary files left"
allok=1
for f in "$WORK"/k/checkpoint*.h5; do "$BIN/gdn-ckpt" verify "$f" >/dev/null 2>&1 || allok=0; done
[ $allok -eq 1 ] && pass "every kept file verifies" || fail "a kept file does not verify"
best_step=$(sed -n 's/.*"step": \([0-9]*\), .*"val_loss": \([^,]*\),.*/\2 \1/p' "$WORK/k/metrics.jsonl" | sort -g | head -1 | cut -d' ' -f2)
got=$("$BIN/gdn-ckpt" info "$WORK/k/checkpoint-best.h5" | sed -n 's/^step = //p')
[ -n "$best_step" ] && [ "$got" = "$best_step" ] && pass "checkpoint-best.h5 at the lowest val_loss's step ($got)" || fail "best at $got, lowest val_loss at $best_step"

echo "== the best on a step without a regular checkpoint"
# validation every 5 steps, checkpoints every 20; a NaN loss at step 37 ends the run before its
# last checkpoint, so the best (step 35 while the loss falls) had no regular checkpoint
"$BIN/gdn-train" "$WORK/micro.ini" --set train.ckpt_every=20 --set train.eval_every=5 --set train.keep_checkpoints=3 --set train.out_dir="$WORK/b" --test-fault-nan-step 37 >"$WORK/b.log" 2>&1; rc=$?
best_step=$(sed -n 's/.*"step": \([0-9]*\), .*"val_loss": \([^,]*\),.*/\2 \1/p' "$WORK/b/metrics.jsonl" | sort -g | head -1 | cut -d' ' -f2)
got=$("$BIN/gdn-ckpt" info "$WORK/b/checkpoint-best.h5" | sed -n 's/^step = //p')
latest=$("$BIN/gdn-ckpt" info "$WORK/b/checkpoint.h5" | sed -n 's/^step = //p')
[ $rc -eq 3 ] && [ "$got" = "$best_step" ] && [ "$got" = 35 ] && [ "$latest" = 20 ] &&
  pass "checkpoint-best.h5 at step $got (the lowest val_loss's), checkpoint.h5 at $latest" || fail "rc $rc, best at $got, lowest val_loss at $best_step, latest $latest"
"$BIN/gdn-ckpt" verify "$WORK/b/checkpoint-best.h5" >/dev/null 2>&1 && pass "it verifies" || fail "best does not verify"

echo "== stop, resume, rotate on"
"$BIN/gdn-train" "$WORK/micro.ini" "${K[@]}" --set train.out_dir="$WORK/r" --stop-after 20 >/dev/null 2>&1 || fail "first half"
files=$(cd "$WORK/r" && ls checkpoint-0* | tr '\n' ' ')
[ "$files" = "checkpoint-00000010.h5 checkpoint-00000020.h5 " ] && pass "after 20 steps: $files" || fail "after 20: $files"
"$BIN/gdn-train" --resume "$WORK/r/checkpoint.h5" >"$WORK/r2.log" 2>&1 || { fail "resume"; tail -3 "$WORK/r2.log"; }
"$BIN/gdn-ckpt" diff "$WORK/k/checkpoint.h5" "$WORK/r/checkpoint.h5" >"$WORK/rd.log" && pass "resumed == straight, bitwise" || { fail "resumed differs"; cat "$WORK/rd.log"; }
files=$(cd "$WORK/r" && ls checkpoint* | tr '\n' ' ')
[ "$files" = "checkpoint-00000030.h5 checkpoint-00000040.h5 checkpoint-best.h5 checkpoint.h5 " ] && pass "rotation went on: $files" || fail "after resume: $files"
finish test_ckpt_keep
