#!/usr/bin/env bash
# bench/run_world1.sh — the data-parallel path at world size 1, on one GPU (bench/dist.md). From
# the repo root on the GPU machine; files in $OUT. Binaries: GDN_BIN=DIR (gdn-train and gdn-ckpt
# built elsewhere for sm_90a; DIR/*.gz gunzipped first), default build.
#
# 1. configs/ablations/base.ini (GS, 11.3M, tinyshakespeare) for W1_STEPS steps three times: no
#    dist (dist.backend=none), dist.backend=nccl (bucketed all-reduce overlapped with the
#    backward, through NCCL on its own stream), and nccl with dist.zero1=true (AdamW on the
#    rank's shard, all-gather of the weights); the checkpoints of the last two must equal the
#    first bit for bit (gdn-ckpt diff: params, AdamW m and v, loop state).
# 2. The timeline: configs/fla-220m.ini (220M) through NCCL at world 1 with --timeline 3 (the
#    forward, the backward per layer, each 25 MB all-reduce bucket on the NCCL stream, the wait,
#    the update; CUDA events), its tokens/s and startup lines; timeline.csv in $OUT
#    (tools/plot-timeline draws it).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
b=${GDN_BIN:-build}
W1_STEPS=${W1_STEPS:-50}
export NCCL_NVLS_ENABLE=0
# shellcheck source=/dev/null
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
for f in "$b"/*.gz; do [ -e "$f" ] && gunzip -f "$f"; done
chmod +x "$b"/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$out/commit.txt"

echo "== 1. NCCL at world 1 vs no dist, $W1_STEPS steps of base.ini"
[ -f data/tinyshakespeare.h5 ] || "./$b/gdn-prepare" --input data/tinyshakespeare/input.txt \
    --out data/tinyshakespeare.h5 --tokenizer bytes --val-frac 0.1 >/dev/null
# train.overwrite: a second call on the same machine starts these runs over
common=(--set train.device=cuda --set "train.steps=$W1_STEPS" --set train.eval_every=0
        --set train.ckpt_every=0 --set train.overwrite=true)
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

echo "== 2. timeline, fla-220m through NCCL at world 1"
[ -f data/synth-32000.h5 ] || python3 bench/make_tokens.py data/synth-32000.h5 --vocab 32000 >/dev/null
timeout 150 "./$b/gdn-train" configs/fla-220m.ini --set train.device=cuda --set dist.backend=nccl \
    --set train.steps=30 --set log.every=1 --set train.out_dir=/dev/shm/tl --set train.overwrite=true --set train.eval_batches=1 \
    --timeline 3 >"$out/timeline_run.log" 2>&1
echo "exit $?"
grep -E "^(init|startup|timeline|gradients|training):" "$out/timeline_run.log"
grep -E "^step +(1|2|10|20|29)/" "$out/timeline_run.log"
cp /dev/shm/tl/timeline.csv "$out/" 2>/dev/null
rm -f /dev/shm/tl/checkpoint.h5
