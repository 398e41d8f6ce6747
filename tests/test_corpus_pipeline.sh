#!/usr/bin/env bash
# test_corpus_pipeline.sh — raw text to samples, the commands of configs/gdn-125m.ini at a tiny
# scale: gdn-prepare trains a BPE (vocab 1000) on a corpus of a text file (documents between
# blank lines) and a .jsonl.gz, and writes shards; gdn-train runs configs/gdn-125m.ini with a
# tiny model (--set overrides) for 10 steps on packed documents (data.sampling = documents);
# the checkpoint carries the tokenizer (gdn-ckpt info); gdn-sample decodes with it after the
# token set is gone.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/plays.txt"
{
  printf '{"text": "First line of a web page.\\nIt has two lines, and \\u00e9 \\u4e2d."}\n'
  printf '{"text": "ROMEO: a second document in the jsonl, with digits 12345."}\n'
  printf '{"id": 3, "text": "<|endoftext|> written as text is just text here."}\n'
} | gzip >"$WORK/web.jsonl.gz"

"$BIN/gdn-prepare" --input "$WORK/plays.txt" --input "$WORK/web.jsonl.gz" --doc-split blank-lines \
  --tokenizer bpe --vocab 1000 --train-mem 16 --threads 2 --val-fraction 0.02 \
  --out "$WORK/corpus" >"$WORK/prep.txt" 2>"$WORK/prep.err"
rc=$?
sed 's/^/    /' "$WORK/prep.txt"
[ $rc -eq 0 ] && pass "gdn-prepare --tokenizer bpe --vocab 1000: exit 0" || { fail "gdn-prepare: rc $rc"; cat "$WORK/prep.err"; finish test_corpus_pipeline; }
grep -q "^  tokenizer  bpe tokenizer.json" "$WORK/prep.txt" && [ -s "$WORK/corpus/tokenizer.json" ] &&
  pass "the trained tokenizer.json is in the token set" || fail "no tokenizer.json in the token set"
grep -q "^  vocab      1000$" "$WORK/prep.txt" && grep -q "^  eot        999$" "$WORK/prep.txt" &&
  pass "vocab 1000, eot <|endoftext|> = 999 (the last id)" || fail "vocab / eot in the summary"
grep -q '"<|endoftext|>": 999' "$WORK/corpus/tokenizer.json" && grep -q '"type": "BPE"' "$WORK/corpus/tokenizer.json" &&
  pass "tokenizer.json: model BPE, <|endoftext|> = 999" || fail "tokenizer.json contents"
grep -q "tokenizer training: read" "$WORK/prep.err" && pass "training pass shows a progress line" || fail "no training progress line"
! ls -a "$WORK/corpus" | grep -q "prepare-tmp" && pass "no temporary files left" || fail "temporary files left"

# configs/gdn-125m.ini's command with a tiny model
tiny=(--set data.path="$WORK/corpus" --set model.vocab_size=1000 --set model.n_layers=2
      --set model.d_model=32 --set model.mlp_hidden=64 --set gdn.n_heads=2 --set gdn.head_dim=16
      --set swa.n_heads=2 --set swa.head_dim=16 --set swa.window=32 --set data.seq_len=64
      --set train.batch_size=4 --set train.grad_accum=1 --set train.steps=10
      --set train.eval_every=10 --set train.eval_batches=2 --set train.ckpt_every=0
      --set optim.warmup_steps=2 --set log.every=5 --set train.device=cpu
      --set train.recompute=off --set train.out_dir="$WORK/run")
"$BIN/gdn-train" "$SRC/configs/gdn-125m.ini" "${tiny[@]}" >"$WORK/train.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && pass "gdn-train configs/gdn-125m.ini (tiny overrides), 10 steps: exit 0" || { fail "gdn-train: rc $rc"; tail -20 "$WORK/train.txt"; finish test_corpus_pipeline; }
grep -q "sampling *= documents" "$WORK/train.txt" && pass "data.sampling = documents" || fail "sampling is not documents"
grep -E "^step +10/10 " "$WORK/train.txt" | grep -q "val [0-9]" && pass "step 10 with a finite val loss" || fail "no val loss at step 10"
ck="$WORK/run/checkpoint.h5"
"$BIN/gdn-ckpt" info "$ck" >"$WORK/info.txt" 2>&1
grep -q "^tokenizer = bpe (" "$WORK/info.txt" && pass "gdn-ckpt info: the checkpoint carries the bpe tokenizer" || fail "gdn-ckpt info: $(grep tokenizer "$WORK/info.txt")"

# sampling decodes with the checkpoint's tokenizer, the token set gone
mv "$WORK/corpus" "$WORK/corpus-moved"
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "ROMEO:" --tokens 30 --seed 5 >"$WORK/s1.txt" 2>"$WORK/s1.err"
rc=$?
[ $rc -eq 0 ] && grep -q "tokenizer bpe from the checkpoint" "$WORK/s1.err" &&
  pass "gdn-sample: tokenizer from the checkpoint (token set moved away)" || { fail "gdn-sample: rc $rc"; cat "$WORK/s1.err"; }
head -c 6 "$WORK/s1.txt" | grep -q "ROMEO:" && [ "$(wc -c <"$WORK/s1.txt")" -gt 30 ] &&
  pass "decoded text continues the prompt ($(wc -c <"$WORK/s1.txt") bytes)" || fail "sample text: $(head -c 80 "$WORK/s1.txt")"
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "ROMEO:" --tokens 30 --seed 5 >"$WORK/s2.txt" 2>/dev/null
cmp -s "$WORK/s1.txt" "$WORK/s2.txt" && pass "same seed -> same text" || fail "same seed gave other text"
finish test_corpus_pipeline
