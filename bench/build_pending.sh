#!/usr/bin/env bash
# build_pending.sh — on the build machine (no GPU needed): sm_90a binaries of main and of main
# with each patch of docs/pending applied, gzipped into OUTDIR (default .gpubin-pending), for
# bench/run_pending.sh to run on the GPU machine in one call (carry OUTDIR and .devdeps).
#   bench/build_pending.sh [OUTDIR]
#   ONLY="NAME..." bench/build_pending.sh   rebuild only those variants, keeping the others in OUTDIR
# Each variant builds in its own temporary clone of HEAD (the working tree is not touched);
# a patch that no longer applies is reported and skipped. Takes ~10-20 min on 2 cores.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/.gpubin-pending}")
cd "$root"
if [ -z "${ONLY:-}" ]; then rm -rf "$out"; fi
mkdir -p "$out"
tmp=$(mktemp -d /tmp/gdn-pending.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
arch="-gencode=arch=compute_90a,code=sm_90a"

# variant NAME PATCH|PATCH+PATCH..|- TARGET...: clone, patch (stacked patches in order), build TARGETs (cmake targets, plus the bench
# programs gdn_bwd_bench / attention_bench by name), gzip them into $out/NAME
variant() {
    local name=$1 patch=$2 src=$tmp/$1 t
    shift 2
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
    rm -rf "${out:?}/$name"
    git clone -q "$root" "$src" || return 1
    local p1
    if [ "$patch" != - ]; then
        for p1 in ${patch//+/ }; do  # A+B: stacked patches, applied in that order
            if ! git -C "$src" apply "$root/$p1"; then
                echo "build_pending: $p1 does not apply (after the ones before it in $patch): $name skipped"
                return 1
            fi
        done
    fi
    local cm=() extra=()
    for t in "$@"; do
        case $t in gdn_bwd_bench | attention_bench) extra+=("$t") ;; *) cm+=("$t") ;; esac
    done
    if [ ${#cm[@]} -gt 0 ] || [[ " ${extra[*]} " == *" gdn_bwd_bench "* ]]; then
        cmake -S "$src" -B "$src/build" -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
            >"$tmp/$name.cmake.log" 2>&1 &&
            cmake --build "$src/build" -j"$(nproc)" --target "${cm[@]}" gdn_cuda gdn >>"$tmp/$name.cmake.log" 2>&1 ||
            { echo "build_pending: $name: build failed"; tail -20 "$tmp/$name.cmake.log"; return 1; }
    fi
    for t in "${extra[@]}"; do
        case $t in
        gdn_bwd_bench)
            nvcc -O3 -std=c++17 $arch -I"$src/src" "$src/bench/gdn_bwd_bench.cu" "$src/build/libgdn_cuda.a" \
                "$src/build/libgdn.a" -Xcompiler -fopenmp -lgomp -lpthread -lm -o "$src/build/gdn_bwd_bench" ;;
        attention_bench)  # the attention test and bench, as bench/run_attention.sh builds them
            (cd "$src" && ATTN_ARCH="$arch" ATTN_ONLY_BUILD=1 ATTN_BIN=build bash bench/run_attention.sh) \
                >"$tmp/$name.attn.log" 2>&1 || { echo "build_pending: $name: attention build failed"; return 1; } ;;
        esac
    done
    mkdir -p "$out/$name"
    for t in "$@" $([[ " $* " == *" attention_bench "* ]] && echo test_attention); do
        gzip -1 -c "$src/build/$t" >"$out/$name/$t.gz" || return 1
    done
    [ "$patch" != - ] && for p1 in ${patch//+/ }; do cp "$root/$p1" "$out/$name/"; done
    [ "$name" = attention ] && cp "$src/bench/attention_torch.py" "$out/$name/"
    echo "build_pending: $name: $(ls "$out/$name" | tr '\n' ' ')"
    rm -rf "$src"
}

# main with only the test's per-gradient hash lines (ghash) of the kernel patch: the base
# (main also carries what the next session's first call runs on main itself: run_pending.sh mainchecks)
variant main - test_gdn_bwd gdn_bwd_bench test_model_cuda test_wgmma attention_bench
[ -f docs/pending/attention_fwd_first_delete.patch ] &&
    variant attnclean docs/pending/attention_fwd_first_delete.patch test_attention test_model_cuda
# the standalone Hopper GEMM bench (bench/hopper_gemm.cu, on main since session 9; a pending
# patch to it, docs/pending/hopper_gemm*.patch, is applied to a clone first): one nvcc, no CMake
if [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" hgemm "* ]]; then
    rm -rf "${out:?}/hgemm" "$tmp/hgemm"
    hsrc=$root
    hp=$(ls docs/pending/hopper_gemm*.patch 2>/dev/null | head -1)
    if [ -n "$hp" ]; then
        git clone -q "$root" "$tmp/hgemm" && git -C "$tmp/hgemm" apply "$root/$hp" && hsrc=$tmp/hgemm
    fi
    mkdir -p "$out/hgemm" &&
        nvcc -O3 -std=c++17 $arch "$hsrc/bench/hopper_gemm.cu" -lcublasLt -o "$out/hgemm/hopper_gemm" &&
        nvcc -O3 -std=c++17 $arch -DHGEMM_WATCHDOG "$hsrc/bench/hopper_gemm.cu" -lcublasLt -o "$out/hgemm/hopper_gemm-wd" &&
        gzip -f "$out/hgemm/hopper_gemm" "$out/hgemm/hopper_gemm-wd" && echo "build_pending: hgemm${hp:+ ($hp)}: $(ls "$out/hgemm" | tr '\n' ' ')" ||
        echo "build_pending: hgemm: build failed"
fi
du -sh "$out"
