#!/usr/bin/env bash
# run_attention.sh — build (self-contained nvcc/gcc commands, no CMake, no libinih) and run the
# attention GPU test, our benchmark and PyTorch's on the same GPU, in one go.
#   bench/run_attention.sh [LOGDIR]       build into $ATTN_BIN (default build-attn-nv) and run
#   ATTN_NO_BUILD=1 bench/run_attention.sh LOGDIR   run binaries built earlier (carried)
#   ATTN_ONLY_BUILD=1 bench/run_attention.sh        build only
#   ATTN_SKIP_TORCH=1                               skip the PyTorch timings
# Logs: LOGDIR/test_attention.log, attention_bench.log, attention_torch.log; the comparison
# table is printed last. Exit status: the test's (benchmarks still run when it fails).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${ATTN_BIN:-build-attn-nv}
LOG=${1:-$BIN/logs}
ARCH=${ATTN_ARCH:-"-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80"}
if [ "${ATTN_NO_BUILD:-0}" != 1 ]; then
  mkdir -p "$BIN"
  NV="nvcc -O3 -std=c++17 $ARCH -lineinfo --expt-relaxed-constexpr -Xcompiler=-Wall -Isrc"
  CC="cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror"
  pids=()
  $NV -c src/fwd/attention.cu -o "$BIN/fwd_attention.o" & pids+=($!)
  $NV -c src/bwd/attention.cu -o "$BIN/bwd_attention.o" & pids+=($!)
  $NV -c tests/gpu/test_attention.cu -o "$BIN/test_attention.o" & pids+=($!)
  $NV -c bench/attention_bench.cu -o "$BIN/attention_bench.o" & pids+=($!)
  for f in src/core/common.c src/core/rng.c src/fwd/attention.c src/bwd/attention.c; do
    $CC -c "$f" -o "$BIN/$(echo "$f" | tr / _).o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "run_attention: build failed" >&2; exit 1; }; done
  LIB="$BIN/fwd_attention.o $BIN/bwd_attention.o $BIN/src_core_common.c.o $BIN/src_core_rng.c.o"
  nvcc $ARCH -o "$BIN/test_attention" "$BIN/test_attention.o" $LIB "$BIN/src_fwd_attention.c.o" \
       "$BIN/src_bwd_attention.c.o" -lm -lpthread || exit 1
  nvcc $ARCH -o "$BIN/attention_bench" "$BIN/attention_bench.o" $LIB -lm || exit 1
  echo "run_attention: built $BIN/test_attention $BIN/attention_bench"
fi
[ "${ATTN_ONLY_BUILD:-0}" = 1 ] && exit 0
mkdir -p "$LOG"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
timeout 240 "$BIN/test_attention" 2>&1 | tee "$LOG/test_attention.log"
rc=${PIPESTATUS[0]}
timeout 90 "$BIN/attention_bench" 2>&1 | tee "$LOG/attention_bench.log"
[ "${ATTN_SKIP_TORCH:-0}" = 1 ] ||
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/attention_torch.py "$LOG/attention_bench.log" 2>&1 | tee "$LOG/attention_torch.log"
echo "run_attention: test exit status $rc"
exit "$rc"
