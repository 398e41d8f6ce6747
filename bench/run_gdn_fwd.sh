#!/usr/bin/env bash
# run_gdn_fwd.sh — the GDN chunk forward benchmark next to fla's, in one GPU call, printing a
# markdown table (shape, dv_block, our ms, TFLOP/s, floor, fla ms, ratio). Run from the repo
# root on the GPU machine after building (cmake --build BUILD --target gdn_cuda gdn):
#   bench/run_gdn_fwd.sh [BUILD_DIR]        logs go to $OUT (or /tmp)
# fla's source must be at ./fla (bench/README.md). The bench binary is compiled here with
# nvcc against the built static libraries unless $GDN_FWD_BENCH names one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-dev}
out=${OUT:-/tmp}
cd "$root"
# shellcheck source=bench/lib.sh
. bench/lib.sh
kernel_bench_vs_fla gdn_fwd "$build" "${GDN_FWD_BENCH:-$build/gdn_fwd_bench}" "$out"
# table: best of the two rounds for us and for fla
awk '
  /^FLA /    { fla[$2] = ($4 < $5 ? $4 : $5) }
  /^RESULT / { n++; row[n] = $0 }
  END {
    print "| shape | path | dv_block | CTAs | ms (round 1, 2) | TFLOP/s | TB/s | floor ms | fla ms | ratio to fla | check |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      split(row[i], f, " ")
      s = f[2]; best = f[7] < f[8] ? f[7] : f[8]
      fm = (s in fla) ? fla[s] : "-"; r = (s in fla) ? sprintf("%.3f", best / fla[s]) : "-"
      printf "| %s | %s | %s%s | %s | %s, %s | %s | %s | %s | %s | %s | %s |\n", s, f[3], f[4], (f[5] == "auto" ? " (auto)" : ""), f[6], f[7], f[8], f[9], f[10], f[11], fm, r, f[14]
    }
  }' "$out/gdn_fwd_bench.log" "$out/fla_gdn_fwd.log" | tee "$out/gdn_fwd_table.md"
