#!/usr/bin/env bash
# run_gdn_fwd.sh — the GDN chunk forward benchmark next to fla's, in one GPU call, printing a
# markdown table (shape, dv_block, our ms, TFLOP/s, floor, fla ms, ratio). Run from the repo
# root on the GPU machine after building (cmake --build BUILD --target gdn_cuda gdn):
#   bench/run_gdn_fwd.sh [BUILD_DIR]        logs go to $OUT (or /tmp)
# fla's source must be at ./fla (bench/README.md). The bench binary is compiled here with
# nvcc against the built static libraries unless $GDN_FWD_BENCH names one.
set -euo pipefail
# shellcheck source=bench/lib.sh
cd "$(dirname "$0")/.." && . bench/lib.sh
kernel_bench_vs_fla gdn_fwd "${1:-build-dev}" "${GDN_FWD_BENCH:-}" FLA \
  "| shape | path | dv_block | CTAs | ms (round 1, 2) | TFLOP/s | TB/s | floor ms | fla ms | ratio to fla | check |" \
  'printf "| %s | %s | %s%s | %s | %s, %s | %s | %s | %s | %s | %s | %s |\n", s, f[3], f[4], (f[5] == "auto" ? " (auto)" : ""), f[6], f[7], f[8], f[9], f[10], f[11], fm, r, f[14]'
