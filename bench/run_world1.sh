#!/usr/bin/env bash
# bench/run_world1.sh — one GPU call for the one-GPU parts of issues 7, 8 and 9. From the repo
# root on the GPU machine; files in $OUT. Binaries from GDN_BIN (default .gpubin; *.gz gunzipped).
#
# 1. test_cuda_ops (every small op's kernel against its CPU twin; conv1d over 9 shapes).
# 2. Issue 8, the NCCL path at world 1: configs/ablations/base.ini (GS, 11.3M, tinyshakespeare)
#    for W1_STEPS steps three times: no dist (dist.backend=none), dist.backend=nccl (bucketed
#    all-reduce overlapped with the backward, through NCCL on its own stream), and nccl with
#    dist.zero1=true (reduce-scatter, AdamW on the shard, all-gather); the checkpoints of the
#    last two must equal the first bit for bit (gdn-ckpt diff: params, AdamW m and v, loop state).
# 3. Issue 8, the timeline: configs/fla-220m.ini (220M) through NCCL at world 1 with
#    --timeline 3 (forward, the backward per layer, each 25 MB all-reduce bucket on the NCCL
#    stream, the wait, the update; CUDA events), tokens/s, and the startup lines (issue 7).
# 4. Issue 9, quality: base.ini and pattern-A.ini with model.embed_dropout=EMB_P, Q_STEPS steps.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
b=${GDN_BIN:-.gpubin}
W1_STEPS=${W1_STEPS:-50}
Q_STEPS=${Q_STEPS:-5000}
EMB_P=${EMB_P:-0.2}
export NCCL_NVLS_ENABLE=0
# shellcheck source=/dev/null
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
for f in "$b"/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
chmod +x "$b"/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$out/commit.txt"

echo "== 1. test_cuda_ops"
timeout 120 "./$b/test_cuda_ops" >"$out/test_cuda_ops.log" 2>&1
echo "test_cuda_ops exit $?"
grep -E "conv1d|FAIL|checks" "$out/test_cuda_ops.log" | tail -40

echo "== 2. NCCL at world 1 vs no dist, $W1_STEPS steps of base.ini"
common=(--set train.device=cuda --set "train.steps=$W1_STEPS" --set train.eval_every=0
        --set train.ckpt_every=0)
for v in none nccl nccl-zero1; do
    sets=(--set "train.out_dir=runs/w1-$v")
    case $v in
    none) sets+=(--set dist.backend=none) ;;
    nccl) sets+=(--set dist.backend=nccl) ;;
    nccl-zero1) sets+=(--set dist.backend=nccl --set dist.zero1=true) ;;
    esac
    timeout 120 "./$b/gdn-train" configs/ablations/base.ini "${common[@]}" "${sets[@]}" \
        >"$out/w1-$v.log" 2>&1
    echo "$v: exit $? | $(grep -E '^training:' "$out/w1-$v.log") | $(grep -E '^done:' "$out/w1-$v.log")"
done
for v in nccl nccl-zero1; do
    echo "diff none vs $v: $("./$b/gdn-ckpt" diff runs/w1-none/checkpoint.h5 "runs/w1-$v/checkpoint.h5" 2>&1 | tail -1)"
done

echo "== 3. timeline, fla-220m through NCCL at world 1"
[ -f data/synth-32000.h5 ] || python3 bench/make_tokens.py data/synth-32000.h5 --vocab 32000 >/dev/null
timeout 150 "./$b/gdn-train" configs/fla-220m.ini --set train.device=cuda --set dist.backend=nccl \
    --set train.steps=30 --set log.every=1 --set train.out_dir=/dev/shm/tl --set train.eval_batches=1 \
    --timeline 3 >"$out/timeline_run.log" 2>&1
echo "exit $?"
grep -E "^(init|startup|timeline|gradients|training):" "$out/timeline_run.log"
grep -E "^step +(1|2|10|20|29)/" "$out/timeline_run.log"
cp /dev/shm/tl/timeline.csv "$out/" 2>/dev/null
rm -f /dev/shm/tl/checkpoint.h5

echo "== 4. quality: embed_dropout $EMB_P, $Q_STEPS steps"
for c in base pattern-A; do
    timeout 150 "./$b/gdn-train" "configs/ablations/$c.ini" --set train.device=cuda \
        --set "train.steps=$Q_STEPS" --set "model.embed_dropout=$EMB_P" \
        --set "train.out_dir=runs/q-$c" >"$out/q-$c.log" 2>&1
    echo "$c: exit $? | $(grep -E '^done:' "$out/q-$c.log")"
    cp "runs/q-$c/metrics.jsonl" "$out/q-$c.metrics.jsonl" 2>/dev/null
done
