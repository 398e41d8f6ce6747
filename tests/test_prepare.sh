#!/usr/bin/env bash
# test_prepare.sh — gdn-prepare's version-1 output (--out FILE.h5) end to end: tinyshakespeare
# with bytes gives nanoGPT's split (1,003,854 train / 111,540 val tokens); SentencePiece training
# in-process and --spm-model; BPE training's refusals; several inputs; and the user
# errors (missing input, empty input, bad flag, bad value) exit non-zero with a message naming
# the problem. --help exits 0. The shard output is tested by test_prepare_shards.c.
set -u
BIN="${GDN_BINARY_DIR:-$(pwd)}/gdn-prepare"
SRC="${GDN_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
[ -x "$BIN" ] || { echo "gdn-prepare not built at $BIN"; exit 1; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/gdn-test-prepare-XXXXXX")"
fails=0
checks=0

ok() {  # ok DESCRIPTION COMMAND...: the command must succeed
    local what="$1"; shift
    checks=$((checks + 1))
    if "$@"; then printf '  %-78s pass\n' "$what"
    else printf '  %-78s FAIL\n' "$what"; fails=$((fails + 1)); fi
}

# expect_fail DESCRIPTION WANT_RC PATTERN ARGS...: gdn-prepare exits WANT_RC and its stderr
# contains PATTERN
expect_fail() {
    local what="$1" want="$2" pat="$3"; shift 3
    "$BIN" "$@" >"$TMP/out.txt" 2>"$TMP/err.txt"
    local rc=$?
    checks=$((checks + 1))
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pat" "$TMP/err.txt"; then
        printf '  %-78s pass\n' "$what (rc $rc)"
    else
        printf '  %-78s FAIL\n' "$what (rc $rc, want $want, pattern '$pat')"; fails=$((fails + 1))
    fi
    echo "    stderr: $(head -c 300 "$TMP/err.txt" | tr '\n' ' ')"
}

summary() { grep -E "^  $2 " "$1" | awk '{print $2}'; }

TS="$SRC/data/tinyshakespeare/input.txt"

echo "== gdn-prepare"
ok "--help exits 0 and prints usage" bash -c "'$BIN' --help | grep -q 'usage: gdn-prepare'"

"$BIN" --input "$TS" --out "$TMP/ts.h5" >"$TMP/ts.txt" 2>&1
ok "tinyshakespeare, bytes: exit 0" [ $? -eq 0 ]
sed 's/^/    /' "$TMP/ts.txt"
ok "bytes: train 1003854 tokens (nanoGPT's first 90%)" [ "$(summary "$TMP/ts.txt" train)" = 1003854 ]
ok "bytes: val 111540 tokens" [ "$(summary "$TMP/ts.txt" val)" = 111540 ]
ok "bytes: vocab 256" [ "$(summary "$TMP/ts.txt" vocab)" = 256 ]
ok "no temporary file left" bash -c "! ls '$TMP' | grep -q 'tmp\.'"
INPUT="$TS"

# SentencePiece: train a model in-process (libsentencepiece_train), then reuse it
head -c 200000 "$INPUT" >"$TMP/small.txt"
"$BIN" --input "$TMP/small.txt" --out "$TMP/sp.h5" --tokenizer spm --vocab 300 --val-frac 0.2 \
    >"$TMP/sp.txt" 2>&1
ok "spm --vocab 300: exit 0" [ $? -eq 0 ]
sed 's/^/    /' "$TMP/sp.txt"
ok "spm: model written next to the output" [ -f "$TMP/sp.spm.model" ]
ok "spm: vocab >= 300" [ "$(summary "$TMP/sp.txt" vocab)" -ge 300 ]
ok "spm: tokenizer attribute spm:<model path>" [ "$(summary "$TMP/sp.txt" tokenizer)" = "spm:$TMP/sp.spm.model" ]
tr=$(summary "$TMP/sp.txt" train); va=$(summary "$TMP/sp.txt" val)
ok "spm: val is 20% of the tokens ($tr + $va)" [ "$va" -eq $(( (tr + va) - (tr + va) * 8 / 10 )) ]
"$BIN" --input "$TMP/small.txt" --out "$TMP/sp2.h5" --spm-model "$TMP/sp.spm.model" --val-frac 0.2 \
    >"$TMP/sp2.txt" 2>&1
ok "--spm-model reuses the model: same token counts" \
    [ "$(summary "$TMP/sp2.txt" train)" = "$tr" -a "$(summary "$TMP/sp2.txt" val)" = "$va" ]
expect_fail "spm --vocab too large for the text" 1 "Vocabulary size too high" \
    --input "$TMP/small.txt" --out "$TMP/sp3.h5" --tokenizer spm --vocab 100000
ok "failed spm run leaves no output file" [ ! -e "$TMP/sp3.h5" ]
ok "failed spm run leaves no model file" bash -c "! ls '$TMP' | grep -q 'sp3\.'"

# BPE training needs a shard directory; a vocabulary below 256 + the special is refused
expect_fail "bpe into a version-1 .h5" 2 "write a shard directory" \
    --input "$TMP/small.txt" --out "$TMP/bpe.h5" --tokenizer bpe --vocab 300
expect_fail "bpe --vocab 200 (below 256 bytes + 1 special)" 2 "needs --vocab >= 257" \
    --input "$TMP/small.txt" --out "$TMP/bpe" --tokenizer bpe --vocab 200
ok "failed bpe run leaves no output directory" [ ! -e "$TMP/bpe" ]

# two inputs: a newline goes between them when the first lacks one
printf 'abc' >"$TMP/a.txt"; printf 'de\n' >"$TMP/b.txt"
"$BIN" --input "$TMP/a.txt" --input "$TMP/b.txt" --out "$TMP/ab.h5" --val-frac 0 >"$TMP/ab.txt" 2>&1
ok "two inputs 'abc' + 'de\\n': 7 tokens (separator newline), all in train" \
    [ "$(summary "$TMP/ab.txt" train)" = 7 -a "$(summary "$TMP/ab.txt" val)" = 0 ]

: >"$TMP/empty.txt"
expect_fail "missing input" 1 "cannot read input '$TMP/nope.txt'" --input "$TMP/nope.txt" --out "$TMP/x.h5"
expect_fail "empty input" 1 "$TMP/empty.txt: empty document" --input "$TMP/empty.txt" --out "$TMP/x.h5"
expect_fail "unknown flag" 2 "unknown argument '--bogus'" --input "$TMP/a.txt" --out "$TMP/x.h5" --bogus
expect_fail "no --out" 2 "no --out given" --input "$TMP/a.txt"
expect_fail "no --input" 2 "no --input given" --out "$TMP/x.h5"
expect_fail "--val-frac 1" 2 "--val-fraction must be a number in [0, 1)" --input "$TMP/a.txt" --out "$TMP/x.h5" --val-frac 1
expect_fail "--tokenizer wordpiece" 2 "--tokenizer must be bytes, bpe or spm" --input "$TMP/a.txt" --out "$TMP/x.h5" --tokenizer wordpiece
expect_fail "--vocab with bytes" 2 "it needs --tokenizer bpe or spm" --input "$TMP/a.txt" --out "$TMP/x.h5" --vocab 500
expect_fail "--vocab abc" 2 "--vocab must be an integer" --input "$TMP/a.txt" --out "$TMP/x.h5" --tokenizer spm --vocab abc
expect_fail "--input without a value" 2 "missing value after '--input'" --out "$TMP/x.h5" --input
expect_fail "missing output directory" 1 "$TMP/no/dir/x.h5: write failed" --input "$TMP/a.txt" --out "$TMP/no/dir/x.h5"
ok "no output file after the failures" [ ! -e "$TMP/x.h5" ]

echo
echo "test_prepare: $checks checks, $fails failed"
if [ "$fails" -eq 0 ]; then rm -rf "$TMP"; else echo "(files kept in $TMP)"; fi
[ "$fails" -eq 0 ]
