# bench/lib.sh — what the bench/run_*.sh scripts share (sourced, from the repo root).
# shellcheck shell=bash

# gdn_binaries LOG TARGET... : sets b to a folder holding the gdn binaries TARGET...: GDN_BIN
# (built elsewhere for sm_90a; its *.gz are gunzipped and made executable), else build-dev,
# built here with CMake (its output in LOG). Says which in LOG; returns 1 when a target is
# missing.
gdn_binaries() {
    local log=$1 t rc t0=$SECONDS
    shift
    if [ -n "${GDN_BIN:-}" ]; then
        b=$GDN_BIN
        for t in "$b"/*.gz; do [ -e "$t" ] && gunzip -f "$t"; done
        chmod +x "$b"/* 2>/dev/null   # (a .gz made with gzip -c > file does not keep the x bit)
        echo "binaries: prebuilt in $b" | tee "$log"
    else
        b="build-dev"
        { cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release &&
              cmake --build build-dev --target "$@"; } >"$log" 2>&1
        rc=$?
        echo "binaries: built here in $((SECONDS - t0)) s (exit $rc)" | tee -a "$log"
    fi
    for t in "$@"; do [ -x "$b/$t" ] || { echo "no $b/$t: see $log"; return 1; }; done
}

# kernel_bench_build NAME BUILD_DIR BIN: compiles bench/NAME_bench.cu into BIN against BUILD_DIR's
# static libraries (sm_90a; libgdn's CPU ops use OpenMP) unless BIN is already there.
kernel_bench_build() {
    local name=$1 build=$2 bin=$3 root
    root=$(pwd)
    [ -x "$bin" ] && return 0
    nvcc -O3 -std=c++17 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I"$root/src" \
         "$root/bench/${name}_bench.cu" "$build/libgdn_cuda.a" "$build/libgdn.a" \
         -Xcompiler -fopenmp -lgomp -lpthread -lm -o "$bin"
}

# kernel_bench_vs_fla NAME BUILD_DIR BIN FLA_TAG HEADER ROW: the GDN kernel benchmark
# bench/NAME_bench.cu (BIN, default BUILD_DIR/NAME_bench, compiled against BUILD_DIR's static
# libraries when not there yet) into OUT/NAME_bench.log, fla's timing of the same shapes
# (bench/fla_NAME.py, FLA_TIMEOUT s) into OUT/fla_NAME.log, then the table of the two
# (kernel_bench_table NAME FLA_TAG HEADER ROW). OUT is $OUT, else /tmp.
kernel_bench_vs_fla() {
    local name=$1 build=$2 bin=${3:-$2/$1_bench} out=${OUT:-/tmp} root
    root=$(pwd)
    kernel_bench_build "$name" "$build" "$bin"
    "$bin" | tee "$out/${name}_bench.log"
    if [ -d "$root/fla" ]; then
        (PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" \
             timeout "${FLA_TIMEOUT:-400}" python3 "bench/fla_${name}.py") | tee "$out/fla_${name}.log" || true
    else
        echo "no ./fla: fla not timed" | tee "$out/fla_${name}.log"
    fi
    # table: best of the two rounds for us and for fla
    kernel_bench_table "$name" "$4" "$5" "$6"
}

# kernel_bench_table NAME FLA_TAG HEADER ROW: the markdown table of OUT/NAME_bench.log's RESULT
# lines next to OUT/fla_NAME.log's FLA_TAG lines (OUT = $OUT or /tmp), into OUT/NAME_table.md.
# HEADER: the column names ("| a | b |"); ROW: awk statements printing one row from f[1..nf]
# (the RESULT line's fields), s (its shape), best (the faster of rounds f[7], f[8]), fm (fla's
# best round, "-" if none), r (best / fm), fmm (fla's extra MiB, field 9 of its line).
kernel_bench_table() {
    local name=$1 tag=$2 header=$3 row=$4 out=${OUT:-/tmp}
    awk -v tag="$tag" -v header="$header" '
      $1 == tag  { fla[$2] = ($4 < $5 ? $4 : $5); flam[$2] = $9 }
      /^RESULT / { n++; rows[n] = $0 }
      END {
        sep = header; gsub(/[^|]+/, "---", sep)
        print header; print sep
        for (i = 1; i <= n; i++) {
          nf = split(rows[i], f, " "); s = f[2]; best = f[7] < f[8] ? f[7] : f[8]
          fm = (s in fla) ? fla[s] : "-"; r = (s in fla) ? sprintf("%.3f", best / fla[s]) : "-"
          fmm = (s in flam) ? flam[s] : "-"
          '"$row"'
        }
      }' "$out/${name}_bench.log" "$out/fla_${name}.log" | tee "$out/${name}_table.md"
}
