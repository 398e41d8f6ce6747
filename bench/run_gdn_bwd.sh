#!/usr/bin/env bash
# run_gdn_bwd.sh — the GDN chunk forward + backward benchmark next to fla and FlashQLA, in one GPU
# call, printing markdown tables (bench/gdn_bwd.md). Run from the repo root on the GPU machine
# after building the libraries (cmake --build BUILD --target gdn_cuda gdn):
#   bench/run_gdn_bwd.sh [BUILD_DIR]        logs and tables go to $OUT (or /tmp)
# fla's source must be at ./fla (bench/README.md). fla's paths (bench/fla_inputs.py use_backend):
# triton always; tilelang (fla's shipped Hopper path, the anchor) when the tilelang package
# imports; flashqla (FlashQLA, dk = dv = 128 shapes only) when flash_qla imports too. Each path
# runs once in parallel first (Triton and TileLang compile into their caches), then every
# program alone: our bench, fla_gdn_bwd.py per path, fla_gdn_kernels.py per path at the
# fla-220m layer (shape 3) and shape 0, then ours per kernel at those shapes (ncu, when
# installed). FLA_TIMEOUT (default 400) bounds each fla program; FLA_PATHS (e.g. "tilelang")
# keeps only those of the importable paths. fla's compiled kernels and autotuning choices
# (Triton's and TileLang's caches, a cold warm-up takes minutes) go to OUT/fla_cache.tar.xz with
# FLA_CACHE_OUT=1, right after the warm-up, and an earlier call's archive is unpacked first with
# FLA_CACHE_IN=FILE (a path from the repo root); FLA_WARM_ONLY=1 stops after the warm-up (a
# call that only fills the caches).
# The bench binary is compiled here with nvcc against the built static libraries unless
# $GDN_BWD_BENCH names one.
set -euo pipefail
# shellcheck source=bench/lib.sh
cd "$(dirname "$0")/.." && . bench/lib.sh
build=${1:-build-dev}
out=${OUT:-/tmp}
root=$(pwd)
bin=${GDN_BWD_BENCH:-$build/gdn_bwd_bench}
export PYTHONUNBUFFERED=1 PYTHONPATH="$root:$root/bench${PYTHONPATH:+:$PYTHONPATH}"
fla_run() {  # fla_run LOG ARGS...: one fla program, bounded, never failing the runner
    local log=$1
    shift
    timeout "${FLA_TIMEOUT:-400}" python3 "$@" >"$log" 2>&1 || echo "python3 $*: exit $?" >>"$log"
}

# fla's caches: Triton's and TileLang's own (their defaults, which persist on the machine) unless
# FLA_CACHE_IN / FLA_CACHE_OUT carry them between machines: then one directory of both, with the
# autotuning choices kept in it too
cache=
if [ -n "${FLA_CACHE_IN:-}${FLA_CACHE_OUT:-}" ]; then
    cache=$(mktemp -d)
    trap 'rm -rf "$cache"' EXIT
    export TRITON_CACHE_DIR="$cache/triton" TILELANG_CACHE_DIR="$cache/tilelang" TRITON_CACHE_AUTOTUNING=1
    mkdir -p "$TRITON_CACHE_DIR" "$TILELANG_CACHE_DIR"
fi
if [ -n "${FLA_CACHE_IN:-}" ]; then
    if tar xJf "$FLA_CACHE_IN" -C "$cache"; then
        echo "fla: caches from $FLA_CACHE_IN (compiled kernels and autotuning choices)"
    else
        echo "fla: cannot read $FLA_CACHE_IN: cold caches"
    fi
fi
backends=()
if [ -d "$root/fla" ]; then
    backends=(triton)
    if python3 -c "import tilelang" >/dev/null 2>&1; then
        backends+=(tilelang)
        python3 -c "import flash_qla" >/dev/null 2>&1 && backends+=(flashqla)
    fi
    if [ -n "${FLA_PATHS:-}" ]; then
        kept=()
        for b in "${backends[@]}"; do [[ " $FLA_PATHS " == *" $b "* ]] && kept+=("$b"); done
        backends=("${kept[@]}")
    fi
    echo "fla paths: ${backends[*]}"
    for b in "${backends[@]}"; do  # warm-up, in parallel
        fla_run "$out/fla_warm_$b.log" bench/fla_gdn_bwd.py --backend "$b" &
    done
    wait
    if [ -n "${FLA_CACHE_OUT:-}" ]; then
        if tar cJf "$out/fla_cache.tar.xz" -C "$cache" triton tilelang; then
            echo "fla: caches saved to $out/fla_cache.tar.xz, $(du -k "$out/fla_cache.tar.xz" | cut -f1) KiB"
        else
            echo "fla: caches not saved (tar exit $?)"
        fi
    fi
    if [ -n "${FLA_WARM_ONLY:-}" ]; then
        echo "FLA_WARM_ONLY: stopping after the warm-up"
        exit 0
    fi
else
    echo "no ./fla: fla not timed"
fi

kernel_bench_build gdn_bwd "$build" "$bin"
"$bin" | tee "$out/gdn_bwd_bench.log"
for b in "${backends[@]}"; do
    fla_run "$out/fla_gdn_bwd_$b.log" bench/fla_gdn_bwd.py --backend "$b"
    grep -E "^FLA_(FWDBWD|AGREE)|exit" "$out/fla_gdn_bwd_$b.log" || true
done
for b in "${backends[@]}"; do
    for s in 3 0; do
        fla_run "$out/fla_gdn_kernels_${b}_$s.log" bench/fla_gdn_kernels.py "$s" --backend "$b"
        grep -E "^FLA_KERNEL_TOTAL|exit" "$out/fla_gdn_kernels_${b}_$s.log" || true
    done
done
# ours per kernel, same shapes: Nsight Compute on the replay variant (the model's path), GPU
# clocks as they run, into OUT/gdn_bwd_kernels.md (shape, kernel, us, MB moved)
if command -v ncu >/dev/null 2>&1; then
    {
        echo "| shape | kernel | us | MB |"
        echo "|---|---|---|---|"
        for s in 3 0; do
            ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes.sum -k regex:gdn \
                "$bin" --shape "$s" --quick --variant replay >"$out/ncu_ours_$s.log" 2>&1 ||
                echo "| $s | ncu: exit $? ($out/ncu_ours_$s.log) | | |"
            awk -v shape="$s" '
              /Context [0-9]+, Stream/ { n = $0; sub(/^ *(void )?(<unnamed>::)?/, "", n); sub(/[<(].*/, "", n); name = n }
              $1 == "dram__bytes.sum" { gsub(/,/, "", $3); mb = $3 + 0; if ($2 == "Gbyte") mb *= 1000; if ($2 == "Kbyte") mb /= 1000 }
              $1 == "gpu__time_duration.sum" {
                gsub(/,/, "", $3); us = $3 + 0; if ($2 == "ms") us *= 1000; if ($2 == "ns") us /= 1000
                printf "| %s | %s | %.1f | %.0f |\n", shape, name, us, mb; tot += us; mbt += mb }
              END { if (tot > 0) printf "| %s | **sum** | **%.1f** | %.0f |\n", shape, tot, mbt }' "$out/ncu_ours_$s.log"
        done
    } | tee "$out/gdn_bwd_kernels.md"
else
    echo "no ncu: ours per kernel not measured"
fi

fla_logs=()
for b in "${backends[@]}"; do fla_logs+=("$out/fla_gdn_bwd_$b.log"); done
# the table: best of the two rounds for us and for each fla path; ratio against the anchor
# (tilelang when it ran, else triton)
awk '
  $1 == "FLA_FWDBWD" { b = $NF; t = ($4 < $5 ? $4 : $5); fla[b, $2] = t; fwd[b, $2] = $7; mem[b, $2] = $9; seen[b] = 1 }
  $1 == "RESULT" { n++; row[n] = $0 }
  END {
    anchor = ("tilelang" in seen) ? "tilelang" : "triton"
    print "| shape | variant | fwd+bwd ms (round 1, 2) | fwd ms | bwd ms | extra MiB | fla Triton ms | fla TileLang ms | FlashQLA ms | ratio to fla " anchor " | fla / FlashQLA extra MiB | check |"
    print "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      nf = split(row[i], f, " "); s = f[2]; best = (f[7] < f[8] ? f[7] : f[8])
      c1 = ((("triton", s) in fla) ? fla["triton", s] " (" fwd["triton", s] ")" : "-")
      c2 = ((("tilelang", s) in fla) ? fla["tilelang", s] " (" fwd["tilelang", s] ")" : "-")
      c3 = ((("flashqla", s) in fla) ? fla["flashqla", s] " (" fwd["flashqla", s] ")" : "-")
      r = (((anchor, s) in fla) ? sprintf("%.3f", best / fla[anchor, s]) : "-")
      m = ((anchor, s) in mem ? mem[anchor, s] : "-") " / " ((("flashqla", s) in mem) ? mem["flashqla", s] : "-")
      printf "| %s | %s | %s, %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s, f[3], f[7], f[8], f[10],
             f[12], f[16], c1, c2, c3, r, m, f[nf]
    }
  }' "$out/gdn_bwd_bench.log" "${fla_logs[@]}" | tee "$out/gdn_bwd_table.md"
