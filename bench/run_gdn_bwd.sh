#!/usr/bin/env bash
# run_gdn_bwd.sh — the GDN chunk forward + backward benchmark next to fla's, in one GPU call,
# printing a markdown table (shape, variant, our fwd+bwd ms, fla fwd+bwd ms, ratio, memory).
# Run from the repo root on the GPU machine after building the libraries
# (cmake --build BUILD --target gdn_cuda gdn):
#   bench/run_gdn_bwd.sh [BUILD_DIR]        logs go to $OUT (or /tmp)
# fla's source must be at ./fla (bench/README.md). The bench binary is
# compiled here with nvcc against the built static libraries unless $GDN_BWD_BENCH names one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-dev}
out=${OUT:-/tmp}
cd "$root"
# shellcheck source=bench/lib.sh
. bench/lib.sh
kernel_bench_vs_fla gdn_bwd "$build" "${GDN_BWD_BENCH:-$build/gdn_bwd_bench}" "$out"
# table: best of the two rounds for us and for fla
awk '
  /^FLA_FWDBWD / { fla[$2] = ($4 < $5 ? $4 : $5); flam[$2] = $9 }
  /^RESULT /     { n++; row[n] = $0 }
  END {
    print "| shape | variant | scan dv_block | fwd+bwd ms (round 1, 2) | fwd ms | bwd ms | fla fwd+bwd ms | ratio | extra MiB (ws) | fla extra MiB | check |"
    print "|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      nf = split(row[i], f, " "); s = f[2]
      best = f[7] < f[8] ? f[7] : f[8]
      fm = (s in fla) ? fla[s] : "-"; r = (s in fla) ? sprintf("%.3f", best / fla[s]) : "-"
      fmm = (s in flam) ? flam[s] : "-"
      printf "| %s | %s | %s | %s, %s | %s | %s | %s | %s | %s (%s) | %s | %s |\n", s, f[3], f[5], f[7], f[8], f[10], f[12], fm, r, f[16], f[14], fmm, f[nf]
    }
  }' "$out/gdn_bwd_bench.log" "$out/fla_gdn_bwd.log" | tee "$out/gdn_bwd_table.md"
