#!/usr/bin/env bash
# run_gdn_docs.sh — the GDN chunk forward + backward with packed documents next to fla's varlen
# path (cu_seqlens) on the same documents, in one GPU call, at one fla-220m GDN layer (B16 T2048
# H4 dk128 dv256): no documents, documents of mean 1000 tokens, documents of mean 100 tokens.
# Prints a markdown table (variant, mean doc, our fwd+bwd ms, fla's, ratio, our cost against our
# no-documents default). Run from the repo root on the GPU machine after building the libraries
# (cmake --build BUILD --target gdn_cuda gdn):
#   bench/run_gdn_docs.sh [BUILD_DIR] [BACKEND]   logs, the cu_seqlens files and the table go to
#                                                 $OUT (or /tmp); BACKEND: fla's path, triton
#                                                 (default) or tilelang (bench/fla_inputs.py)
# fla's source must be at ./fla (bench/README.md); fla is given FLA_TIMEOUT s (default 150) for
# all its runs. The bench binary is compiled here with nvcc against the built static libraries
# unless $GDN_DOCS_BENCH names one.
set -euo pipefail
# shellcheck source=bench/lib.sh
cd "$(dirname "$0")/.." && . bench/lib.sh
build=${1:-build-dev}
out=${OUT:-/tmp}
root=$(pwd)
bin=${GDN_DOCS_BENCH:-$build/gdn_docs_bench}
kernel_bench_build gdn_docs "$build" "$bin"

log=$out/gdn_docs_bench.log
: >"$log"
fla_runs=(none)
for mean in 0 1000 100; do
    name=$([ "$mean" = 0 ] && echo none-varlen || echo "docs$mean")
    cu=$out/gdn_docs_cu_seqlens_$name.bin
    { "$bin" --mean "$mean" --docs-out "$cu" || echo "gdn_docs_bench --mean $mean: exit $?"; } | tee -a "$log"
    fla_runs+=("$name=$cu")
done

fla_log=$out/fla_gdn_varlen.log
if [ -d "$root/fla" ]; then
    (PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" \
         timeout "${FLA_TIMEOUT:-150}" python3 bench/fla_gdn_varlen.py --backend "${2:-triton}" "${fla_runs[@]}") | tee "$fla_log" || true
else
    echo "no ./fla: fla not timed" | tee "$fla_log"
fi

# the table: best of the two rounds for us and for fla; fla's "none" (rows, no cu_seqlens) sits
# next to our none and none-recompute, its "none-varlen" (each row one sequence through
# cu_seqlens) on a row of its own
awk '
  $1 == "FLA_DOCS" { fla[$2] = ($4 < $5 ? $4 : $5) }
  $1 == "RESULT_DOCS" { n++; row[n] = $0; b = ($14 < $15 ? $14 : $15); if ($2 == "none") base = b }
  END {
    print "| variant | mean doc | segments | Tp (pad %) | fwd ms | bwd ms | fwd+bwd ms (round 1, 2) | fla fwd+bwd ms | ratio | cost vs our none | plan ms (host) | check |"
    print "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      split(row[i], f, " "); v = f[2]; b = (f[14] < f[15] ? f[14] : f[15])
      fv = (v ~ /^none/) ? "none" : v
      fm = (fv in fla) ? fla[fv] : "-"; r = (fv in fla) ? sprintf("%.3f", b / fla[fv]) : "-"
      cost = base ? sprintf("%+.1f%%", 100 * (b / base - 1)) : "-"
      printf "| %s | %s | %s | %s (%s) | %s | %s | %s, %s | %s | %s | %s | %s | %s |\n", v, f[4], f[6], f[8],
             f[19], f[10], f[12], f[14], f[15], fm, r, cost, f[17], f[20]
    }
    if ("none-varlen" in fla)
      printf "| none-varlen (fla: each row one sequence via cu_seqlens) | - | 16 | - | - | - | - | %s | - | - | - | - |\n", fla["none-varlen"]
  }' "$log" "$fla_log" | tee "$out/gdn_docs_table.md"
