#!/usr/bin/env bash
# bench/ncu_kernels.sh — on the GPU machine: Nsight Compute on one instance of each named kernel
# inside a real training step (fla-220m by default), to see what bounds each one (DRAM %, issue
# slots, occupancy, stall reasons). ncu locks the SM clock (1.50 GHz on the H200 against 1.98 in
# training): compute-bound kernels read ~30% slower than in the step, memory-bound ones do not.
#   bench/ncu_kernels.sh GDN_TRAIN_BIN [NAME:SKIP ...]
# NAME is a regex of the kernel's function name, SKIP how many launches of it to pass first (12 =
# the second step's first layer for a per-layer kernel of fla-220m). Default: the GDN kernels and
# the largest memory-bound kernels of the step (bench/model_gpu.md). Full reports in
# /tmp/ncu/NAME.txt and their tarball in $OUT; one summary line per kernel here. CONFIG
# (environment): the config file.
set -uo pipefail
bin=${1:?usage: bench/ncu_kernels.sh GDN_TRAIN_BIN [NAME:SKIP ...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
config=${CONFIG:-configs/fla-220m.ini}
out=/tmp/ncu
mkdir -p "$out" data
[ -f data/synth-32000.h5 ] || python3 bench/make_tokens.py data/synth-32000.h5 --vocab 32000 >/dev/null
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "ncu_kernels: no ncu on this machine" >&2; exit 2; }
kernels=("$@")
[ ${#kernels[@]} -eq 0 ] && kernels=(gdn_bwd_final:12 gdn_bwd_prep:12 gdn_bwd_scan:12 gdn_chunk_fwd:12
    gdn_chunk_replay:12 conv_silu:12 crossentropy:4 rmsnorm_bwd:24 gated_rmsnorm_bwd:12 embedding_bwd:1)
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats
    --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis)
for ks in "${kernels[@]}"; do
    k=${ks%%:*} s=${ks##*:}
    [ "$s" = "$ks" ] && s=0
    timeout 120 "$NCU" "${sections[@]}" -k "regex:$k" -s "$s" -c 1 "$bin" "$config" --set train.device=cuda \
        --set train.steps=3 --set "train.out_dir=/dev/shm/ncu-$$" >"$out/$k.txt" 2>&1
    rc=$?
    rm -rf "/dev/shm/ncu-$$"
    echo "$k: exit $rc; $(grep -E 'Duration|DRAM Throughput|Issue Slots Busy|Registers Per Thread|Achieved Occupancy' \
        "$out/$k.txt" | awk '{$1 = $1}; 1' | tr '\n' ';')"
done
[ -n "${OUT:-}" ] && tar czf "$OUT/ncu.tgz" -C /tmp ncu
