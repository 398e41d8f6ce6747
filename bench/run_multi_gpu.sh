#!/usr/bin/env bash
# bench/run_multi_gpu.sh — data parallel on one host (issue 10), in one GPU call on a machine of
# several GPUs (nvidia-h200-x2 / -x4 / -x8; ask `status` first). From the repo root; logs in $OUT.
#
# 1. Scaling: gdn-train configs/fla-220m.ini --gpus N for N = 1, 2, 4, 8 (powers of two up to
#    the GPUs present, at most MAX_GPUS), fixed per-GPU batch 16 x 2048, SCALE_STEPS=41 steps;
#    tokens/s over steps 10..40 from metrics.jsonl (the last step also evaluates) and scaling
#    efficiency = tokens/s(N) / (N x tokens/s(1)) (target BENCHMARKS.md: >= 90% at 8 GPUs).
# 2. Equivalence: EQ_STEPS=50 steps on N GPUs with batch EQ_B/N per GPU against 1 GPU with batch
#    EQ_B=16 (the sampler hands rank r windows [r B/N, (r+1) B/N) of each global batch, so both
#    see the same tokens). Compared: the loss of every step (max |difference|, bound 1e-2 nats
#    in bf16) and the final checkpoints, `gdn-ckpt diff --rtol 1e-2` (params, AdamW m and v,
#    loop state; each tensor within ||a - b|| <= 1e-2 ||b||). Why 1e-2 in bf16: bf16 keeps 8
#    significant bits (unit roundoff 2^-9 = 2e-3); splitting the batch changes the order of
#    every GEMM reduction and of the gradient sum (per-rank partial sums, then the fp32
#    all-reduce), so each bf16 activation and gradient may round differently, by about one
#    unit: per-tensor norm-wise differences of a few 1e-3 are expected after 50 steps, and
#    1e-2 is ~5 roundoffs. A real data-parallel bug is O(1): a gradient averaged over B/N
#    instead of B scales m by N and v by N^2, a missing all-reduce or other windows give other
#    gradients altogether. Cancellation-prone tensors (A_log, dt_bias: bench/model_gpu.md) are
#    the first expected near the bound; the diff names the tensors beyond it. Loss alone cannot
#    tell a data-order bug on random tokens (every batch's loss is ~ln V), the checkpoints can.
#    With EQ_FP32=1 (default) the same at the largest N in fp32 (train.precision=fp32), bound
#    1e-4 for both (fp32 reordering: ~sqrt(n) x 6e-8 over long sums, 1e-5 seen on the
#    cancellation-prone tensors against float64).
#    The equivalence model is fla-220m with EQ_SETS (default: 4 layers, vocab 4096 on
#    data/synth-4096.h5: 60M parameters, 1.4 GB checkpoints instead of 5.3 GB; EQ_SETS="" runs
#    the full model).
# 3. Resume: each N-GPU checkpoint resumed on 1 GPU (`--resume`, 5 more steps): exit 0, a
#    "done:" line, and the note that the world size changed.
# Every phase with dist.zero1=false, then again with dist.zero1=true (N > 1). GPU ZeRO-1 ran at
# world 1 on the H200 (bench/dist.md: bitwise the run without it); a build that refuses it
# ("not built yet") is reported in the table and the script goes on.
#
#   bench/run_multi_gpu.sh
#
# Needs .devdeps (libinih; carry it), python3 with numpy and h5py (there) for the synthetic
# token files (made when absent). Binaries: GDN_BIN=DIR uses DIR/gdn-train and DIR/gdn-ckpt
# built elsewhere (DIR/*.gz gunzipped first); otherwise both are built here with CMake.
# Environment (defaults): MAX_GPUS=8, SCALE_STEPS=41, EQ_STEPS=50, EQ_B=16, EQ_FP32=1,
# EQ_SETS (above), RUN_TIMEOUT=150 (one gdn-train run), CALL_LIMIT=570 (the script's whole time:
# runs that would not fit are skipped and marked so). NVLink multicast stays off:
# NCCL_NVLS_ENABLE=0 (and the PyTorch / NVSHMEM switches) are exported for every worker.
# Files in $OUT: summary.md, multi_gpu_logs.tar.gz (every run's log and metrics.jsonl, each
# diff's output), build.log.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/out}
mkdir -p "$out"
MAX_GPUS=${MAX_GPUS:-8}
SCALE_STEPS=${SCALE_STEPS:-41}
EQ_STEPS=${EQ_STEPS:-50}
EQ_B=${EQ_B:-16}
EQ_FP32=${EQ_FP32:-1}
EQ_SETS=${EQ_SETS---set model.n_layers=4 --set model.vocab_size=4096 --set data.path=data/synth-4096.h5}
RUN_TIMEOUT=${RUN_TIMEOUT:-150}
CALL_LIMIT=${CALL_LIMIT:-570}
W=10  # tokens/s window starts at the end of this step
# shellcheck source=/dev/null
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
read -r -a eq_sets <<<"$EQ_SETS"
left() { echo $((CALL_LIMIT - SECONDS)); }
logs=$(mktemp -d)
pack() { tar -czf "$out/multi_gpu_logs.tar.gz" -C "$logs" . 2>/dev/null; }
trap 'pack; rm -rf "$logs"' EXIT
md=$out/summary.md

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
Ns=()
for n in 1 2 4 8 16; do [ "$n" -le "$ngpu" ] && [ "$n" -le "$MAX_GPUS" ] && Ns+=("$n"); done
{
    echo "# Data parallel on one host (issue 10), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "GPUs: $ngpu x $(nvidia-smi -i 0 --query-gpu=name,driver_version --format=csv,noheader 2>&1); N in: ${Ns[*]:-none}"
    if c=$(git rev-parse --short HEAD 2>/dev/null); then echo "tree: $c"; else echo "tree: no .git on this machine"; fi
    echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
    echo
    echo '```'
    nvidia-smi topo -m 2>&1 | head -20
    echo '```'
} >"$md"
[ "${#Ns[@]}" -ge 1 ] || { echo "no GPU found" | tee -a "$md"; exit 1; }

# ---- binaries
# shellcheck source=bench/lib.sh
. bench/lib.sh
gdn_binaries "$out/build.log" gdn-train gdn-ckpt || { echo "binaries missing: see build.log" | tee -a "$md"; exit 1; }
ldd "$b/gdn-train" 2>/dev/null | grep -q libnccl ||
    echo "warning: $b/gdn-train does not link NCCL: --gpus N > 1 on GPUs will fail" | tee -a "$md"

# ---- data
mkdir -p data
for v in 32000 4096; do
    [ -f "data/synth-$v.h5" ] || python3 bench/make_tokens.py "data/synth-$v.h5" --vocab "$v" ||
        { echo "cannot make data/synth-$v.h5" | tee -a "$md"; exit 1; }
done
runs=/dev/shm/gdn-multi
if ! mkdir -p "$runs" 2>/dev/null || [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -lt $((24 << 20)) ]; then
    runs=$root/runs/multi
    mkdir -p "$runs"
fi

# train NAME N [args...]: one gdn-train run into $runs/NAME (log + metrics kept in $logs);
# exit status in $logs/NAME.rc; skipped (rc "skip") when less than 60 s would be left after it.
train() {
    local name=$1 n=$2 lim rc
    shift 2
    rm -rf "${runs:?}/$name"
    lim=$(($(left) - 30))
    [ "$lim" -lt "$RUN_TIMEOUT" ] || lim=$RUN_TIMEOUT
    if [ "$lim" -lt 60 ]; then
        echo skip >"$logs/$name.rc"
        echo "  $name: skipped ($(left) s left)"
        return 1
    fi
    local gpus=()
    [ "$n" -gt 1 ] && gpus=(--gpus "$n")
    timeout -k 30 "$lim" "$b/gdn-train" "$@" "${gpus[@]}" --set train.device=cuda \
        --set "train.out_dir=$runs/$name" >"$logs/$name.log" 2>&1
    rc=$?
    echo "$rc" >"$logs/$name.rc"
    cp "$runs/$name/metrics.jsonl" "$logs/$name.metrics.jsonl" 2>/dev/null
    echo "  $name: exit $rc ($(grep -m1 -E '^error|error:' "$logs/$name.log" || grep '^done:' "$logs/$name.log" || tail -1 "$logs/$name.log"))"
    return "$rc"
}
# status text of run NAME: ok / FAILED (exit, first error line) / skipped
status_of() {
    local rc
    rc=$(cat "$logs/$1.rc" 2>/dev/null || echo none)
    case $rc in
    0) echo ok ;;
    skip) echo "skipped (time)" ;;
    none) echo "not run" ;;
    *) local why
       why=$(grep -m1 -i 'error' "$logs/$1.log" 2>/dev/null | cut -c1-160)
       [ "$rc" -eq 124 ] && why="timed out${why:+; $why}"
       echo "FAILED (exit $rc)${why:+: ${why//|/\\|}}" ;;
    esac
}
# tokens/s of run NAME over steps W..last-1 (the last step evaluates)
tok_s() {
    python3 - "$logs/$1.metrics.jsonl" "$W" <<'PY'
import json, sys
rows = {}
try:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if "loss" in r:
            rows[r["step"]] = r
except OSError:
    pass
w = int(sys.argv[2])
last = max(rows) - 1 if rows else -1
if w in rows and last in rows and last > w:
    print("%.0f" % ((rows[last]["tokens"] - rows[w]["tokens"]) / (rows[last]["time"] - rows[w]["time"])))
PY
}
# max |loss difference| over the steps of runs A and B
loss_diff() {
    python3 - "$logs/$1.metrics.jsonl" "$logs/$2.metrics.jsonl" <<'PY'
import json, sys
def load(p):
    d = {}
    try:
        for line in open(p):
            r = json.loads(line)
            if "loss" in r:
                d[r["step"]] = r["loss"]
    except OSError:
        pass
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
common = sorted(set(a) & set(b))
if common and len(common) == len(a) == len(b):
    print("%.2e over %d steps" % (max(abs(a[s] - b[s]) for s in common), len(common)))
elif common:
    print("%.2e over %d common steps (%d vs %d logged)" % (max(abs(a[s] - b[s]) for s in common), len(common), len(a), len(b)))
PY
}
loss_ok() { awk -v d="${1%% *}" -v t="$2" 'BEGIN { exit !(d != "" && d + 0 <= t + 0) }'; }

# ---- 1. scaling
scale_rows=()
declare -A tps1=()
for z in false true; do
    for n in "${Ns[@]}"; do
        [ "$z" = true ] && [ "$n" -eq 1 ] && continue
        name=scale-n$n-zero1-$z
        echo "== scaling: N=$n zero1=$z"
        train "$name" "$n" configs/fla-220m.ini --set "train.steps=$SCALE_STEPS" --set "dist.zero1=$z"
        rm -rf "${runs:?}/$name"   # checkpoint ~5.3 GB
        t=$(tok_s "$name")
        [ "$n" -eq 1 ] && [ -n "$t" ] && tps1[$z]=$t
        ref=${tps1[false]:-}
        eff=-
        [ -n "$t" ] && [ -n "$ref" ] && eff=$(awk -v t="$t" -v r="$ref" -v n="$n" 'BEGIN { printf "%.1f%%", 100 * t / (n * r) }')
        per=-
        [ -n "$t" ] && per=$(awk -v t="$t" -v n="$n" 'BEGIN { printf "%.0f", t / n }')
        scale_rows+=("| $n | $z | ${t:--} | $per | $eff | $(status_of "$name") |")
        # ZeRO-1 refused on GPUs: the larger N would say the same
        if [ "$z" = true ] && grep -q 'not built yet' "$logs/$name.log" 2>/dev/null; then
            scale_rows+=("| larger N | true | - | - | - | not run: ZeRO-1 on GPUs is not built |")
            break
        fi
    done
done

# ---- 2 + 3. equivalence and resume
eq_rows=()
eq_case() {  # eq_case PREC RTOL LOSS_TOL ZERO1 N...: reference on 1 GPU, then each N
    local prec=$1 rtol=$2 ltol=$3 z=$4 refn n name d dv verdict res rs
    shift 4
    refn=eq-ref-$prec
    if [ ! -f "$logs/$refn.rc" ]; then
        echo "== equivalence reference: 1 GPU, batch $EQ_B, $prec"
        train "$refn" 1 configs/fla-220m.ini "${eq_sets[@]}" --set "train.precision=$prec" \
            --set "train.steps=$EQ_STEPS" --set "train.batch_size=$EQ_B" --set dist.zero1=false
    fi
    for n in "$@"; do
        name=eq-n$n-$prec-zero1-$z
        if [ "$(cat "$logs/$refn.rc")" != 0 ]; then
            eq_rows+=("| $n | $prec | $z | - | - | no reference run: $(status_of "$refn") | - |")
            continue
        fi
        echo "== equivalence: N=$n batch $((EQ_B / n)) per GPU, $prec, zero1=$z"
        if ! train "$name" "$n" configs/fla-220m.ini "${eq_sets[@]}" --set "train.precision=$prec" \
            --set "train.steps=$EQ_STEPS" --set "train.batch_size=$((EQ_B / n))" --set "dist.zero1=$z"; then
            eq_rows+=("| $n | $prec | $z | - | - | $(status_of "$name") | - |")
            rm -rf "${runs:?}/$name"
            if [ "$z" = true ] && grep -q 'not built yet' "$logs/$name.log" 2>/dev/null; then
                eq_rows+=("| larger N | $prec | true | - | - | not run: ZeRO-1 on GPUs is not built | - |")
                return
            fi
            continue
        fi
        d=$(loss_diff "$name" "$refn")
        "$b/gdn-ckpt" diff --rtol "$rtol" "$runs/$name/checkpoint.h5" "$runs/$refn/checkpoint.h5" \
            >"$logs/$name.diff" 2>&1
        dv=$?
        verdict="ckpt $(tail -1 "$logs/$name.diff" | cut -c1-120)"
        if [ $dv -eq 0 ] && loss_ok "$d" "$ltol"; then verdict="PASS; $verdict"; else verdict="FAIL; $verdict"; fi
        # resume the N-GPU checkpoint on 1 GPU for 5 more steps
        res=$name-resume1
        echo "== resume $name on 1 GPU"
        rs="not run"
        if [ "$(left)" -ge 90 ]; then
            timeout -k 30 "$(($(left) - 30 < RUN_TIMEOUT ? $(left) - 30 : RUN_TIMEOUT))" "$b/gdn-train" \
                --resume "$runs/$name/checkpoint.h5" --set "train.steps=$((EQ_STEPS + 5))" \
                --set "train.out_dir=$runs/$res" >"$logs/$res.log" 2>&1
            rs=$?
            if [ "$rs" -eq 0 ] && grep -q '^done: ' "$logs/$res.log"; then
                rs="ok ($(grep -c '^note: checkpoint written by' "$logs/$res.log") world-size note)"
            else
                rs="FAILED (exit $rs: $(grep -m1 -i error "$logs/$res.log" | cut -c1-100))"
            fi
        fi
        eq_rows+=("| $n | $prec | $z | ${d:--} (bound $ltol) | $rtol | $verdict | $rs |")
        rm -rf "${runs:?}/$name" "${runs:?}/$res"
    done
}
multi=()
for n in "${Ns[@]}"; do [ "$n" -gt 1 ] && multi+=("$n"); done
if [ "${#multi[@]}" -gt 0 ]; then
    eq_case bf16 1e-2 1e-2 false "${multi[@]}"
    [ "$EQ_FP32" = 1 ] && eq_case fp32 1e-4 1e-4 false "${multi[-1]}"
    eq_case bf16 1e-2 1e-2 true "${multi[@]}"
else
    eq_rows+=("| - | - | - | - | - | one GPU only: nothing to compare | - |")
fi

# ---- table
{
    echo
    echo "## Scaling: configs/fla-220m.ini, per-GPU batch 16 x 2048, steps $W..$((SCALE_STEPS - 1))"
    echo
    echo "| GPUs | ZeRO-1 | tokens/s | per GPU | efficiency vs 1 GPU | status |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${scale_rows[@]}"
    echo
    echo "## Equivalence: $EQ_STEPS steps, N GPUs x batch $EQ_B/N vs 1 GPU x batch $EQ_B (${EQ_SETS:-full model})"
    echo
    echo "| GPUs | precision | ZeRO-1 | max loss difference | ckpt diff rtol | verdict (gdn-ckpt diff) | resumed on 1 GPU |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${eq_rows[@]}"
    echo
    echo "call time: $SECONDS s; logs: multi_gpu_logs.tar.gz"
} >>"$md"
cat "$md"
rm -rf "${runs:?}"
