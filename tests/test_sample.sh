#!/usr/bin/env bash
# test_sample.sh — gdn-sample end to end: train a micro model, sample twice with the same seed
# (identical text), with another seed (other text), greedy; bad arguments and files fail cleanly.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_sample; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/run"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.steps=20 >/dev/null 2>&1 || fail "training"
ck=$WORK/run/checkpoint.h5
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "ROMEO:" --tokens 80 --seed 3 >"$WORK/s1.txt" 2>/dev/null && pass "sample exits 0" || fail "sample"
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "ROMEO:" --tokens 80 --seed 3 >"$WORK/s2.txt" 2>/dev/null
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "ROMEO:" --tokens 80 --seed 4 >"$WORK/s3.txt" 2>/dev/null
[ "$(wc -c <"$WORK/s1.txt")" -ge 80 ] && pass "text of >= 80 bytes" || fail "too little text: $(wc -c <"$WORK/s1.txt")"
cmp -s "$WORK/s1.txt" "$WORK/s2.txt" && pass "same seed -> same text" || fail "same seed gave different text"
cmp -s "$WORK/s1.txt" "$WORK/s3.txt" && fail "another seed gave the same text" || pass "another seed -> other text"
head -c 6 "$WORK/s1.txt" | grep -q "ROMEO:" && pass "continues the prompt" || fail "prompt not echoed"
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "A" --tokens 20 --temperature 0 >/dev/null 2>&1 && pass "greedy runs" || fail "greedy"
"$BIN/gdn-sample" --checkpoint "$WORK/none.h5" >/dev/null 2>"$WORK/e1"; rc=$?
[ $rc -ne 0 ] && grep -q "none.h5" "$WORK/e1" && pass "missing checkpoint: exit $rc, names the file" || fail "missing checkpoint"
"$BIN/gdn-sample" --checkpoint "$WORK/d.h5" >/dev/null 2>"$WORK/e2"; rc=$?
[ $rc -ne 0 ] && grep -q "d.h5" "$WORK/e2" && pass "a token file is not a checkpoint: exit $rc" || fail "token file as checkpoint"
"$BIN/gdn-sample" --checkpoint "$ck" --tokens -5 >/dev/null 2>"$WORK/e3"; rc=$?
[ $rc -ne 0 ] && grep -q -- "--tokens" "$WORK/e3" && pass "bad --tokens: exit $rc, names the flag" || fail "bad --tokens: exit $rc"
"$BIN/gdn-sample" --checkpoint "$ck" --prompt "ROMEO:" --tokens 40 --top-k 20 --top-p 0.9 --device cpu >"$WORK/s4.txt" 2>/dev/null && pass "top-k + top-p on the CPU" || fail "top-p"
"$BIN/gdn-sample" --checkpoint "$ck" --top-p 0 >/dev/null 2>"$WORK/e4"; rc=$?
[ $rc -ne 0 ] && grep -q -- "top-p" "$WORK/e4" && pass "bad --top-p: exit $rc, names the flag" || fail "bad --top-p: exit $rc"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.steps=4 --set train.sample_every=2 --set train.sample_tokens=16 \
    --set train.out_dir="$WORK/run2" >"$WORK/t2.txt" 2>&1
[ "$(grep -c '^step [24] sample: ' "$WORK/t2.txt")" -eq 2 ] && pass "train.sample_every prints at steps 2 and 4" || fail "train.sample_every: $(grep -c sample: "$WORK/t2.txt") sample lines"
# a tokenizer.json whose post-processor puts <|begin_of_text|> before each text (Llama 3): the
# prompt gets it as every prepared document did (--specials template), never printed; none: not
fx=$SRC/tests/fixtures/tokenizers/llama3_post_bpe.json
head -c 60000 "$WORK/text.txt" >"$WORK/small.txt"
"$BIN/gdn-prepare" --input "$WORK/small.txt" --doc-split blank-lines --val-fraction 0.05 --tokenizer "$fx" --out "$WORK/l3" >/dev/null 2>&1 || fail "gdn-prepare with $fx"
write_micro "$WORK/l3.ini" "$WORK/l3" "$WORK/run3"
"$BIN/gdn-train" "$WORK/l3.ini" --set train.steps=2 --set train.eval_every=0 >/dev/null 2>&1 || fail "training on the Llama-3-style set"
ck3=$WORK/run3/checkpoint.h5
np_of() { sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p' "$1"; }
"$BIN/gdn-sample" --checkpoint "$ck3" --prompt "ROMEO:" --tokens 8 --seed 1 >"$WORK/t.txt" 2>"$WORK/t.err"
"$BIN/gdn-sample" --checkpoint "$ck3" --prompt "ROMEO:" --tokens 8 --seed 1 --specials none >"$WORK/n.txt" 2>"$WORK/n.err"
[ -n "$(np_of "$WORK/t.err")" ] && [ "$(np_of "$WORK/t.err")" -eq $(( $(np_of "$WORK/n.err") + 1 )) ] \
  && pass "--specials template: the prompt gets the template's one prefix id ($(np_of "$WORK/t.err") vs $(np_of "$WORK/n.err") tokens)" \
  || fail "template prefix: prompt $(np_of "$WORK/t.err") vs $(np_of "$WORK/n.err") tokens"
head -c 6 "$WORK/t.txt" | grep -q "ROMEO:" && ! grep -q "begin_of_text" "$WORK/t.txt" && pass "the prefix is not printed" || fail "prefix printed or prompt lost: $(head -c 40 "$WORK/t.txt")"
"$BIN/gdn-sample" --checkpoint "$ck3" --tokens 8 --seed 1 >"$WORK/e.txt" 2>"$WORK/e.err"
[ "$(np_of "$WORK/e.err")" = 1 ] && ! grep -q "begin_of_text" "$WORK/e.txt" && pass "no prompt: starts from the prefix alone" || fail "no prompt: $(np_of "$WORK/e.err") start tokens"
"$BIN/gdn-sample" --checkpoint "$ck3" --specials bos >/dev/null 2>"$WORK/e5"; rc=$?
[ $rc -ne 0 ] && grep -q -- "--specials" "$WORK/e5" && pass "bad --specials: exit $rc, names the flag" || fail "bad --specials: exit $rc"
"$BIN/gdn-export" "$ck3" "$WORK/hf3" >/dev/null 2>&1 || fail "gdn-export of the Llama-3-style run"
# the fixture's <|begin_of_text|> is id 0, <|end_of_text|> id 1
tr -d ' \n' <"$WORK/hf3/config.json" | grep -q '"bos_token_id":0,' && tr -d ' \n' <"$WORK/hf3/config.json" | grep -q '"eos_token_id":1,' \
  && pass "export: bos_token_id = <|begin_of_text|> (0), eos_token_id = <|end_of_text|> (1)" || fail "export: bos/eos ids: $(grep -E 'bos|eos' "$WORK/hf3/config.json" | tr -d '\n')"
finish test_sample
