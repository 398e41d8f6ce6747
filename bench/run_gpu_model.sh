#!/usr/bin/env bash
# bench/run_gpu_model.sh — one device call for the whole-model GPU path: build, the GPU tests of
# the model (test_model_cuda: fp32 vs CPU float64 per tensor, bf16 200-step curve, determinism),
# tools/gradcheck --device cuda on the tiny config, then timed training runs on tinyshakespeare:
# the tiny config on the GPU and the GDN-H1 baby-GPT-size base of the ablations (issue 9), each
# with its wall time. Logs go to $OUT. Needs data/tinyshakespeare.h5 (carry `data`) and
# .devdeps (libinih; carry it).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
source .devdeps/env.sh
# GDN_BIN: a folder of binaries built elsewhere for sm_90a (saves the device's build minutes)
b=${GDN_BIN:-build-dev}
if [ -z "${GDN_BIN:-}" ]; then
  cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null || exit 1
  cmake --build build-dev 2>&1 | tail -3
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
./$b/test_model_cuda 2>&1 | tee "$out/test_model_cuda.log" | tail -25
GDN_BUILD=$b tools/gradcheck configs/tiny-cpu.ini --device cuda --set model.vocab_size=256 2>&1 | tee "$out/gradcheck_cuda.log" | tail -8
t0=$SECONDS
./$b/gdn-train configs/tiny-cpu.ini --set train.device=cuda --set train.out_dir=runs/gpu-tiny \
  --set train.steps=${TINY_STEPS:-2000} 2>&1 | tee "$out/gpu_tiny.log" | grep -E "val|done|error" | tail -6
echo "gpu tiny wall $((SECONDS - t0)) s" | tee -a "$out/gpu_tiny.log"
t0=$SECONDS
timeout ${BASE_TIMEOUT:-200} ./$b/gdn-train configs/ablations/base.ini --set train.device=cuda \
  --set train.out_dir=runs/gpu-base ${BASE_SETS:-} 2>&1 | tee "$out/gpu_base.log" | grep -E "step|val|done|error" | tail -12
echo "gpu base wall $((SECONDS - t0)) s" | tee -a "$out/gpu_base.log"
cp runs/gpu-base/metrics.jsonl "$out/gpu_base_metrics.jsonl" 2>/dev/null || true
