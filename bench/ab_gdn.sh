#!/usr/bin/env bash
# bench/ab_gdn.sh — on the GPU machine: the GDN chunk forward + backward of two gdn_bwd_bench
# binaries (a kernel change against the tree before it), alternated in one call (the same binary
# moves by 1-3% between machine instances, so an A/B across calls measures the machine as much as
# the change).
#   bench/ab_gdn.sh OLD_BIN NEW_BIN [ROUNDS=2] [SHAPES="0 1 2 3"]
# Each round runs OLD then NEW once per shape (gdn_bwd_bench --shape S: every variant, its
# gradients checked against float64 first, two timed medians). Prints each run's RESULT lines, then
# per shape and variant the best median of each binary over all rounds, NEW / OLD, and both
# binaries' checks; exits 1 when a run fails or a check does not pass. Logs in $OUT (or /tmp).
set -uo pipefail
usage="usage: bench/ab_gdn.sh OLD_BIN NEW_BIN [ROUNDS] [SHAPES]"
old=${1:?$usage}
new=${2:?$usage}
rounds=${3:-2}
shapes=${4:-0 1 2 3}
out=${OUT:-/tmp}
mkdir -p "$out"
for b in "$old" "$new"; do [ -x "$b" ] || { echo "ab_gdn: $b is not an executable" >&2; exit 2; }; done
case "$rounds" in '' | *[!0-9]* | 0) echo "ab_gdn: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
status=0
all="$out/ab_gdn_results.txt"
: >"$all"
for r in $(seq 1 "$rounds"); do
    for s in $shapes; do
        for side in old new; do
            bin=$old
            [ "$side" = new ] && bin=$new
            log="$out/ab_gdn_${side}_r${r}_s$s.log"
            if ! timeout 300 "$bin" --shape "$s" >"$log" 2>&1; then
                echo "ab_gdn: $side ($bin) --shape $s failed in round $r: $log" >&2
                status=1
            fi
            grep '^RESULT' "$log" | sed "s/^/$side /" | tee -a "$all"
        done
    done
done
# RESULT SHAPE VARIANT dvb N ms R1 R2 fwd_ms F bwd_ms B ... CHECK
awk '
  { side = $1; key = $3 " " $4; t = ($8 < $9 ? $8 : $9)
    if (!((side, key) in best) || t < best[side, key]) best[side, key] = t
    if ($NF != "check-pass") bad[side, key] = $NF
    if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
  END {
    print "| shape | variant | old ms | new ms | new / old | checks |"
    print "|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, f, " ")
      o = ((("old", k) in best) ? best["old", k] : "-"); w = ((("new", k) in best) ? best["new", k] : "-")
      ratio = (o != "-" && w != "-") ? sprintf("%.3f", w / o) : "-"
      c = ((("old", k) in bad) ? "old " bad["old", k] " " : "") ((("new", k) in bad) ? "new " bad["new", k] : "")
      printf "| %s | %s | %s | %s | %s | %s |\n", f[1], f[2], o, w, ratio, (c == "" ? "pass" : c)
    }
  }' "$all" | tee "$out/ab_gdn_table.md"
awk '$NF != "check-pass" { bad = 1 } END { exit bad || NR == 0 }' "$all" || status=1  # (none: failed)
exit $status
