#!/usr/bin/env bash
# tests/gpu/fla_export_check.sh — on the GPU machine, from the repository root, with fla's source
# in ./fla (as for bench/run_model_vs_fla.sh): builds gdn-train, gdn-prepare and gdn-export
# (bench/lib.sh gdn_binaries; GDN_BIN=DIR takes prebuilt ones) and runs
# tests/gpu/fla_export_check.py (fla loads gdn-export's fp32 and bf16 directories and gdn.c
# imports fla's own save_pretrained; logits on 4 x 512 tokens compared). Logs in $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/out}
mkdir -p "$out"
# shellcheck source=/dev/null
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
# shellcheck source=bench/lib.sh
. bench/lib.sh
gdn_binaries "$out/build.log" gdn-train gdn-prepare gdn-export || { tail -20 "$out/build.log"; exit 1; }
case $b in /*) ;; *) b=$root/$b ;; esac
[ -d fla ] || { echo "no ./fla: carry fla's source (bench/README.md)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" \
    python3 tests/gpu/fla_export_check.py --bin "$b" --work "$work" 2>&1 | tee "$out/fla_export_check.log"
exit "${PIPESTATUS[0]}"
