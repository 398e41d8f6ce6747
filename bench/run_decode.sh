#!/usr/bin/env bash
# bench/run_decode.sh — decode tokens/s, gdn.c's GPU decoder against fla's generate, in one GPU
# call: configs/fla-220m.ini (219.90M parameters), random weights, a 16-token random prompt, 256
# greedy tokens per sequence, batch 1 and 64.
#   gdn.c: bench/decode_bench.c in bf16 and fp32 (CUDA graph replay; batch 1 also without);
#   fla:   bench/fla_generate.py, GatedDeltaNetForCausalLM.generate in bf16 (needs ./fla).
# Then a table of the JSON lines (results: bench/decode.md).
#
#   bench/run_decode.sh            on the GPU machine, from the repo root; logs in $OUT
#
# Environment: GDN_BIN=DIR uses DIR/decode_bench built elsewhere (bench/lib.sh gdn_binaries),
# TOKENS=256, PROMPT=16, FLA_TIMEOUT=300.
# Files in $OUT: decode.jsonl, decode_bench.log, fla_generate.log, build.log, summary.md.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/out}
mkdir -p "$out"
TOKENS=${TOKENS:-256}
PROMPT=${PROMPT:-16}
FLA_TIMEOUT=${FLA_TIMEOUT:-300}
# shellcheck source=/dev/null
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
# shellcheck source=bench/lib.sh
source bench/lib.sh
gdn_binaries "$out/build.log" decode_bench || exit 1
: >"$out/decode.jsonl"
: >"$out/decode_bench.log"
for run in "bf16 1 1" "bf16 64 1" "fp32 1 1" "fp32 64 1" "bf16 1 0"; do
    set -- $run
    "$b/decode_bench" configs/fla-220m.ini --precision "$1" --batch "$2" --graph "$3" \
        --prompt "$PROMPT" --tokens "$TOKENS" 2>>"$out/decode_bench.log" | tee -a "$out/decode.jsonl"
done
if [ -d fla ]; then
    (PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" timeout -k 10 "$FLA_TIMEOUT" \
        python3 bench/fla_generate.py --batch 1 64 --prompt "$PROMPT" --tokens "$TOKENS") \
        2>"$out/fla_generate.log" | tee -a "$out/decode.jsonl"
else
    echo "no ./fla: fla not timed" | tee "$out/fla_generate.log"
fi
python3 - "$out/decode.jsonl" <<'PY' | tee "$out/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("| impl | precision | batch | graph | tokens/s | ms / step |")
print("|---|---|---:|---|---:|---:|")
for r in rows:
    print(f"| {r['impl']} | {r['precision']} | {r['batch']} | {r.get('graph', '-')} | "
          f"{r['tokens_per_s']:.0f} | {r['ms_per_step']:.3f} |")
if rows:
    print(f"\n{rows[0]['device']}; prompt {rows[0]['prompt']}, {rows[0]['tokens']} greedy tokens")
PY
