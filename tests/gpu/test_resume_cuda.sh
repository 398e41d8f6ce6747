#!/usr/bin/env bash
# test_resume_cuda.sh — resume on the GPU is bit for bit: for train.precision fp32 and bf16, a
# run interrupted at step 30 (--stop-after) and resumed equals the uninterrupted 60-step run
# (gdn-ckpt diff IDENTICAL, the same per-step losses), and the checkpoint holds every tensor in
# float32 (the GPU's storage), not float64. The same with packed documents and doc_reset.
# Skipped (exit 77, reason printed) when no GPU is usable.
. "$(dirname "$0")/../lib.sh"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test_resume_cuda: SKIPPED: no usable CUDA device (nvidia-smi -L failed or is absent)"
  exit 77
fi
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_resume_cuda; }
"$BIN/gdn-prepare" --input "$WORK/text.txt" --doc-split blank-lines --val-fraction 0.05 --out "$WORK/docs" >/dev/null ||
  { fail "gdn-prepare (documents)"; finish test_resume_cuda; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/unused"
# the micro model at head dims the GPU kernels are built for, rows over two GDN chunks
base=(--set train.device=cuda --set train.steps=60 --set train.eval_every=20 --set gdn.head_dim=64
      --set gdn.chunk_size=64 --set swa.head_dim=64 --set swa.window=64 --set data.seq_len=130)

# run NAME ARGS...: gdn-train on the micro config; the log in $WORK/NAME.log
run() {
  local name=$1; shift
  "$BIN/gdn-train" "$WORK/micro.ini" "${base[@]}" "$@" >"$WORK/$name.log" 2>&1 ||
    { fail "$name: gdn-train exit $?"; tail -5 "$WORK/$name.log"; return 1; }
}

check_case() {
  local tag=$1; shift
  local a=$WORK/$tag-a b=$WORK/$tag-b
  run "$tag-a" --set train.out_dir="$a" "$@" || return
  run "$tag-b1" --set train.out_dir="$b" "$@" --stop-after 30 || return
  "$BIN/gdn-train" --resume "$b/checkpoint.h5" >"$WORK/$tag-b2.log" 2>&1 ||
    { fail "$tag: resume exit $?"; tail -5 "$WORK/$tag-b2.log"; return; }
  local n32 nall
  nall=$("$BIN/gdn-ckpt" info "$a/checkpoint.h5" | grep -cE 'float(32|64)')
  n32=$("$BIN/gdn-ckpt" info "$a/checkpoint.h5" | grep -c 'float32')
  if [ "$nall" -gt 0 ] && [ "$n32" -eq "$nall" ]; then pass "$tag: all $nall tensors stored as float32"
  else fail "$tag: $n32 of $nall tensors float32"; "$BIN/gdn-ckpt" info "$a/checkpoint.h5" | grep float64 | head -3; fi
  if "$BIN/gdn-ckpt" diff "$a/checkpoint.h5" "$b/checkpoint.h5" >"$WORK/$tag-diff.log" 2>&1 &&
     grep -q IDENTICAL "$WORK/$tag-diff.log"; then pass "$tag: resumed checkpoint IDENTICAL to the uninterrupted one"
  else fail "$tag: checkpoints differ"; head -8 "$WORK/$tag-diff.log"; fi
  if [ "$(losses "$a/metrics.jsonl" | awk '$1 > 30')" = "$(losses "$b/metrics.jsonl" | awk '$1 > 30')" ] &&
     [ -n "$(losses "$b/metrics.jsonl" | awk '$1 > 30')" ]; then pass "$tag: losses of steps 31-60 equal bit for bit"
  else fail "$tag: losses of steps 31-60 differ"; fi
}

echo "== fp32"
check_case fp32 --set train.precision=fp32
echo "== bf16"
check_case bf16 --set train.precision=bf16
echo "== bf16, packed documents with resets"
check_case docs --set train.precision=bf16 --set data.path="$WORK/docs" --set data.sampling=documents --set model.doc_reset=true
finish test_resume_cuda
