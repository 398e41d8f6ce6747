#!/usr/bin/env bash
# run_gdn_bwd.sh — the GDN chunk forward + backward benchmark next to fla's, in one GPU call,
# printing a markdown table (shape, variant, our fwd+bwd ms, fla fwd+bwd ms, ratio, memory).
# Run from the repo root on the GPU machine after building the libraries
# (cmake --build BUILD --target gdn_cuda gdn):
#   bench/run_gdn_bwd.sh [BUILD_DIR] [BACKEND]     logs go to $OUT (or /tmp)
# fla's source must be at ./fla (bench/README.md); BACKEND (default triton) is fla's path,
# bench/fla_inputs.py use_backend: triton, tilelang (fla's shipped Hopper path) or flashqla
# (FlashQLA, dk = dv = 128 only), the last two with their packages installed. The bench binary is
# compiled here with nvcc against the built static libraries unless $GDN_BWD_BENCH names one.
set -euo pipefail
# shellcheck source=bench/lib.sh
cd "$(dirname "$0")/.." && . bench/lib.sh
kernel_bench_vs_fla gdn_bwd "${1:-build-dev}" "${GDN_BWD_BENCH:-}" FLA_FWDBWD \
  "| shape | variant | scan dv_block | fwd+bwd ms (round 1, 2) | fwd ms | bwd ms | fla fwd+bwd ms | ratio | extra MiB (ws) | fla extra MiB | check |" \
  'printf "| %s | %s | %s | %s, %s | %s | %s | %s | %s | %s (%s) | %s | %s |\n", s, f[3], f[5], f[7], f[8], f[10], f[12], fm, r, f[16], f[14], fmm, f[nf]' \
  --backend "${2:-triton}"
