#!/usr/bin/env bash
# test_export_cli.sh — gdn-export and gdn-train --init-from end to end on the CPU: a 5-step GS run's
# checkpoint exported fp32 and bf16 (files present, tied head omitted); --dump-logits of the
# checkpoint and of its fp32 export agree (rel L2 < 1e-6: only the fp32 rounding of the weights);
# a run --init-from the export starts there; a run whose model differs is refused naming the key;
# an inexpressible option (gdn.gate = false) is refused naming the key.
. "$(dirname "$0")/lib.sh"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_export_cli; }
write_micro "$WORK/micro.ini" "$WORK/d.h5" "$WORK/a"
"$BIN/gdn-train" "$WORK/micro.ini" --set train.steps=5 >"$WORK/a.log" 2>&1 || { fail "training"; cat "$WORK/a.log"; finish test_export_cli; }

"$BIN/gdn-export" "$WORK/a/checkpoint.h5" "$WORK/hf32" --dtype fp32 >"$WORK/e.log" 2>&1 && pass "export fp32: $(head -1 "$WORK/e.log")" || { fail "export fp32"; cat "$WORK/e.log"; }
"$BIN/gdn-export" "$WORK/a/checkpoint.h5" "$WORK/hf16" >/dev/null 2>&1 && pass "export bf16 (default)" || fail "export bf16"
[ -s "$WORK/hf32/config.json" ] && [ -s "$WORK/hf32/model.safetensors" ] && pass "config.json and model.safetensors written" || fail "files missing"
s32=$(stat -c %s "$WORK/hf32/model.safetensors"); s16=$(stat -c %s "$WORK/hf16/model.safetensors")
[ $((s16 * 2)) -lt $((s32 + 4096)) ] && [ $((s16 * 2)) -gt $((s32 - 4096)) ] && pass "bf16 file is half the fp32 one ($s16 vs $s32 bytes)" || fail "sizes $s16 vs $s32"
grep -q '"lm_head.weight"' "$WORK/hf32/model.safetensors" && fail "tied head written" || pass "tied LM head not written (HF convention)"

# 2 rows of 40 byte ids, int32 little-endian
for i in $(seq 0 79); do printf "\\x$(printf %02x $(( (i * 37 + 11) % 256 )))\\x00\\x00\\x00"; done >"$WORK/tok.bin"
"$BIN/gdn-export" --dump-logits "$WORK/a/checkpoint.h5" "$WORK/tok.bin" "$WORK/l_ckpt.bin" --batch 2 >/dev/null 2>&1 &&
"$BIN/gdn-export" --dump-logits "$WORK/hf32" "$WORK/tok.bin" "$WORK/l_hf.bin" --batch 2 >/dev/null 2>&1 && pass "--dump-logits from the checkpoint and from the export" || fail "--dump-logits"
rel=$(paste <(od -An -v -t f8 -w8 "$WORK/l_ckpt.bin") <(od -An -v -t f8 -w8 "$WORK/l_hf.bin") |
      awk '{ n += ($1 - $2)^2; d += $1^2; c++ } END { if (c != 2 * 40 * 256 || d == 0) print "bad"; else printf "%.3g", sqrt(n / d) }')
awk -v r="$rel" 'BEGIN { exit !(r != "bad" && r < 1e-6) }' && pass "logits of checkpoint vs fp32 export: rel L2 $rel" || fail "logits rel L2 $rel"

"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/b" --set train.steps=2 --init-from "$WORK/hf32" >"$WORK/b.log" 2>&1 &&
    grep -q "init: parameters from $WORK/hf32" "$WORK/b.log" && pass "--init-from: a run starts from the export" || { fail "--init-from"; tail "$WORK/b.log"; }
"$BIN/gdn-train" "$WORK/micro.ini" --set train.out_dir="$WORK/c" --set model.d_model=64 --set swa.head_dim=32 --init-from "$WORK/hf32" >"$WORK/c.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "\[model\] d_model is 64 in the run's config, 32 in the export" "$WORK/c.log" && pass "--init-from into another model: refused, names [model] d_model" || { fail "mismatch rc $rc"; tail -3 "$WORK/c.log"; }
"$BIN/gdn-train" "$WORK/micro.ini" --resume "$WORK/a/checkpoint.h5" --init-from "$WORK/hf32" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && pass "--init-from with --resume: usage error" || fail "--init-from + --resume rc $rc"

write_micro "$WORK/nogate.ini" "$WORK/d.h5" "$WORK/g"
"$BIN/gdn-train" "$WORK/nogate.ini" --set train.steps=1 --set gdn.gate=false >/dev/null 2>&1
"$BIN/gdn-export" "$WORK/g/checkpoint.h5" "$WORK/hfg" >"$WORK/g.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "\[gdn\] gate = false cannot be exported" "$WORK/g.log" && pass "gdn.gate = false: refused naming the key" || { fail "gate=false rc $rc"; cat "$WORK/g.log"; }
finish test_export_cli
