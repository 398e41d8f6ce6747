#!/usr/bin/env bash
# bench/ab_model.sh — on the GPU machine: tokens/s of two gdn-train binaries (or one binary in
# two settings) on the same config, alternated in one call (between machine instances the same
# binary's GEMMs differ by 2-3%, so an A/B across calls measures the machine as much as the change).
#   bench/ab_model.sh OLD_BIN NEW_BIN [ROUNDS=3] [CONFIG=configs/fla-220m.ini] [STEPS=61]
# Each run: STEPS steps; tokens/s is the mean over the step lines 11 .. STEPS-1 (cuBLASLt and the
# allocator warm up in the first steps; the last step also evaluates). Prints every run, then per binary the
# mean, min and max over runs and the ratio NEW / OLD of the means. Needs data/synth-32000.h5
# (made by bench/make_tokens.py when absent) and .devdeps/env.sh (libinih) where it exists.
# OLD_SET, NEW_SET (environment, optional): blank-separated section.key=value overrides for the
# OLD or the NEW runs only, so one binary can be measured against itself in two settings:
#   OLD_SET=train.recompute=off NEW_SET=train.recompute=light bench/ab_model.sh BIN BIN 3
# Each run's peak GPU memory (nvidia-smi memory.used every 100 ms, minus the reading before the
# run; "n/a" without nvidia-smi) is printed with its tokens/s, and its mean per side at the end.
set -uo pipefail
old=${1:?usage: bench/ab_model.sh OLD_BIN NEW_BIN [ROUNDS] [CONFIG] [STEPS]}
new=${2:?usage: bench/ab_model.sh OLD_BIN NEW_BIN [ROUNDS] [CONFIG] [STEPS]}
rounds=${3:-3}
config=${4:-configs/fla-220m.ini}
steps=${5:-61}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
mkdir -p data
[ -f data/synth-32000.h5 ] || python3 bench/make_tokens.py data/synth-32000.h5 --vocab 32000 >/dev/null
for b in "$old" "$new"; do [ -x "$b" ] || { echo "ab_model: $b is not an executable" >&2; exit 2; }; done
tmp=$(mktemp -d)
# run BIN TAG "SETS": "TOKS PEAK": mean tokens/s of the step lines after step 10 (or "fail") and
# the peak memory in MiB (or "n/a")
run() {
    local log="$tmp/$2.log" kv base="" smi="" toks peak
    local -a sets=()
    for kv in $3; do sets+=(--set "$kv"); done
    if command -v nvidia-smi >/dev/null 2>&1; then
        base=$(nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$tmp/$2.smi" 2>/dev/null &
        smi=$!
    fi
    timeout 300 "$1" "$config" --set train.device=cuda --set "train.steps=$steps" --set log.every=1 \
        --set "train.out_dir=/dev/shm/ab-$2" ${sets[@]+"${sets[@]}"} >"$log" 2>&1
    local rc=$?
    if [ -n "$smi" ]; then kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; fi
    rm -rf "/dev/shm/ab-$2"
    peak=n/a
    if [ -n "$smi" ] && [ -s "$tmp/$2.smi" ]; then
        peak=$(awk -v b="${base:-0}" '{ v = $1 + 0; if (v > m) m = v } END { printf "%.0f", m - b }' "$tmp/$2.smi")
    fi
    if [ $rc -ne 0 ]; then echo "fail $peak"; return; fi
    toks=$(awk -F'|' -v last="$steps" '/^step +[0-9]+\// { split($1, a, /[ \/]+/); s = a[2] + 0
                if (s > 10 && s < last) { t = $5; gsub(/[^0-9.]/, "", t); sum += t; n++ } }
               END { if (n) printf "%.0f\n", sum / n; else print "fail" }' "$log")
    echo "$toks $peak"
}
declare -a o n op np
for r in $(seq 1 "$rounds"); do
    read -r o[r] op[r] <<<"$(run "$old" "old$r" "${OLD_SET:-}")"
    read -r n[r] np[r] <<<"$(run "$new" "new$r" "${NEW_SET:-}")"
    echo "round $r: old ${o[r]} tok/s (peak ${op[r]} MiB), new ${n[r]} tok/s (peak ${np[r]} MiB)"
done
[ -n "${OLD_SET:-}${NEW_SET:-}" ] && echo "old: --set ${OLD_SET:-(none)}; new: --set ${NEW_SET:-(none)}"
peak_mean() { awk '{ for (i = 1; i <= NF; i++) if ($i != "n/a") { s += $i; k++ } }
                   END { if (k) printf "%.0f MiB (%d runs)", s / k, k; else print "n/a" }' <<<"$*"; }
echo "peak memory: old $(peak_mean "${op[@]}"), new $(peak_mean "${np[@]}")"
python3 - "${o[@]}" -- "${n[@]}" <<'EOF'
import sys
a = sys.argv[1:]
k = a.index('--')
old = [float(x) for x in a[:k] if x != 'fail']
new = [float(x) for x in a[k + 1:] if x != 'fail']
def stat(v): return "mean %.0f min %.0f max %.0f (%d runs)" % (sum(v) / len(v), min(v), max(v), len(v)) if v else "no runs"
print("old:", stat(old))
print("new:", stat(new))
if old and new: print("new / old: %.4f" % ((sum(new) / len(new)) / (sum(old) / len(old))))
EOF
rm -rf "$tmp"
