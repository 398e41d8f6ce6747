#!/usr/bin/env bash
# bench/run_multi_gpu.sh — data parallel on one host, in one GPU call on a machine of
# several GPUs (nvidia-h200-x2 / -x4 / -x8; ask `status` first). From the repo root; logs in $OUT.
#
# 1. Scaling: gdn-train configs/fla-220m.ini --gpus N for N = 1, 2, 4, 8 (powers of two up to
#    the GPUs present, at most MAX_GPUS), fixed per-GPU batch 16 x 2048, SCALE_STEPS=81 steps;
#    tokens/s over steps 10..80 from metrics.jsonl (the last step also evaluates) and scaling
#    efficiency = tokens/s(N) / (N x tokens/s(1)) (target: >= 90% at 8 GPUs).
# 2. Equivalence: EQ_STEPS=50 steps on N GPUs with batch EQ_B/N per GPU against 1 GPU with batch
#    EQ_B=16 (the sampler hands rank r windows [r B/N, (r+1) B/N) of each global batch, so both
#    see the same tokens). Compared: the loss of every step (max |difference|, bound 1e-2 nats in
#    bf16, 1e-4 in fp32) and the final checkpoints (params, AdamW m and v) against a measured
#    noise floor, bench/ckpt_noise.py: the 1-GPU run in bf16 and the same run in fp32 give, per
#    tensor, how far bf16 rounding alone moves it over these steps; the N-GPU bf16 run must stay
#    within that floor for every tensor, the N-GPU fp32 run within 1/100 of it. A fixed rtol does
#    not work here (measured 2026-11-29, 2 x H200): on random tokens the gradients are mostly
#    noise, AdamW's m is a sum of nearly cancelling terms and m / sqrt(v) amplifies a rounding
#    difference, so m differs by 25% and the output projections by 2% between bf16 runs whose
#    losses agree to 1e-3 — and a fixed bound cannot tell that from a bug. A data-parallel bug is
#    O(1) against the floor: a gradient averaged over B/N instead of B scales m by N and v by N^2,
#    a missing all-reduce or other windows give other gradients altogether. ZeRO-1 runs are also
#    compared with the same N without it (gdn-ckpt diff --rtol 0: bitwise or not).
#    The equivalence model is fla-220m with EQ_SETS (default: 4 layers, vocab 4096 on
#    data/synth-4096.h5: 60M parameters, 1.4 GB checkpoints instead of 5.3 GB; EQ_SETS="" runs
#    the full model).
# 3. Resume: each N-GPU checkpoint resumed on 1 GPU (`--resume`, 5 more steps): exit 0, a
#    "done:" line, and the note that the world size changed.
#    The scaling runs record --timeline 3: each step split into compute and exposed communication
#    (the all-reduce wait; with ZeRO-1 the reduce-scatter and all-gather after the backward).
#    Each N-GPU run is also compared with 1 GPU running the same split as N micro-batches of
#    B/N (train.grad_accum: micro-batch m takes the windows rank m would): the same arithmetic
#    up to where the N partial gradients are summed, so the difference is data parallelism's
#    own (the all-reduce), without bf16's sensitivity to how the batch is split.
# Every phase with dist.zero1=false, then again with dist.zero1=true (N > 1).
# SKIP_SCALING=1 runs only the equivalence and resume phases.
#
#   bench/run_multi_gpu.sh
#
# Needs python3 with numpy and h5py for the synthetic token files (made when absent);
# .devdeps/env.sh, where present, puts libinih on the paths of a machine that lacks it. Binaries: GDN_BIN=DIR uses DIR/gdn-train and DIR/gdn-ckpt
# built elsewhere (DIR/*.gz gunzipped first); otherwise both are built here with CMake.
# Environment (defaults): MAX_GPUS=8, SCALE_STEPS=81, EQ_STEPS=50, EQ_B=16, EQ_FP32=1,
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
SCALE_STEPS=${SCALE_STEPS:-81}
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
    echo "# Data parallel on one host, $(date -u '+%Y-%m-%d %H:%M UTC')"
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
    for f in "$runs/$name"/timeline*.csv; do [ -f "$f" ] && cp "$f" "$logs/$name.$(basename "$f")"; done
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
# step time split of run NAME from rank 0's --timeline CSV (median over the recorded steps):
# "step ms | compute ms | exposed comm ms | NCCL stream busy ms". Exposed communication is the
# compute row's wait spans (the step waiting for its all-reduces) and, with ZeRO-1, its
# reduce-scatter and all-gather spans; compute is the rest.
split_of() {
    python3 - "$logs/$1.timeline.csv" <<'PY'
import csv, statistics, sys
steps = {}
try:
    for r in csv.DictReader(open(sys.argv[1])):
        s = steps.setdefault(r["step"], {"end": 0.0, "wait": 0.0, "comm": 0.0})
        d = float(r["end_ms"]) - float(r["start_ms"])
        if r["stream"] == "compute":
            s["end"] = max(s["end"], float(r["end_ms"]))
            if r["name"].startswith(("wait", "reduce-scatter", "all-gather")):
                s["wait"] += d
        else:
            s["comm"] += d
except (OSError, KeyError, ValueError):
    pass
if steps:
    m = lambda k: statistics.median(v[k] for v in steps.values())
    print("%.1f | %.1f | %.2f | %.1f" % (m("end"), m("end") - m("wait"), m("wait"), m("comm")))
else:
    print("- | - | - | -")
PY
}
loss_ok() { awk -v d="${1%% *}" -v t="$2" 'BEGIN { exit !(d != "" && d + 0 <= t + 0) }'; }

# ---- 1. scaling
scale_rows=()
declare -A tps1=()
for z in false true; do
    [ "${SKIP_SCALING:-0}" = 1 ] && break
    for n in "${Ns[@]}"; do
        [ "$z" = true ] && [ "$n" -eq 1 ] && continue
        name=scale-n$n-zero1-$z
        echo "== scaling: N=$n zero1=$z"
        train "$name" "$n" configs/fla-220m.ini --set "train.steps=$SCALE_STEPS" --set "dist.zero1=$z" \
            --timeline 3
        rm -rf "${runs:?}/$name"   # checkpoint ~5.3 GB
        t=$(tok_s "$name")
        [ "$n" -eq 1 ] && [ -n "$t" ] && tps1[$z]=$t
        ref=${tps1[false]:-}
        eff=-
        [ -n "$t" ] && [ -n "$ref" ] && eff=$(awk -v t="$t" -v r="$ref" -v n="$n" 'BEGIN { printf "%.1f%%", 100 * t / (n * r) }')
        per=-
        [ -n "$t" ] && per=$(awk -v t="$t" -v n="$n" 'BEGIN { printf "%.0f", t / n }')
        scale_rows+=("| $n | $z | ${t:--} | $per | $eff | $(split_of "$name") | $(status_of "$name") |")
        # ZeRO-1 refused on GPUs: the larger N would say the same
        if [ "$z" = true ] && grep -q 'not built yet' "$logs/$name.log" 2>/dev/null; then
            scale_rows+=("| larger N | true | - | - | - | - | - | - | - | not run: ZeRO-1 on GPUs is not built |")
            break
        fi
    done
done

# ---- 2 + 3. equivalence and resume
# References on 1 GPU with batch EQ_B, in bf16 and in fp32: the pair is also the noise floor
# (bench/ckpt_noise.py: how far bf16 rounding alone moves each tensor over the same steps).
eq_rows=()
ref_run() {  # ref_run PREC
    [ -f "$logs/eq-ref-$1.rc" ] && return
    echo "== equivalence reference: 1 GPU, batch $EQ_B, $1"
    train "eq-ref-$1" 1 configs/fla-220m.ini "${eq_sets[@]}" --set "train.precision=$1" \
        --set "train.steps=$EQ_STEPS" --set "train.batch_size=$EQ_B" --set dist.zero1=false
}
ckpt_of() { echo "$runs/$1/checkpoint.h5"; }
eq_case() {  # eq_case PREC SCALE LOSS_TOL ZERO1 N...
    local prec=$1 scale=$2 ltol=$3 z=$4 refn=eq-ref-$1 n name d verdict res rs
    shift 4
    for n in "$@"; do
        name=eq-n$n-$prec-zero1-$z
        if [ "$(cat "$logs/$refn.rc")" != 0 ] || [ "$(cat "$logs/eq-ref-fp32.rc")" != 0 ] ||
            [ "$(cat "$logs/eq-ref-bf16.rc")" != 0 ]; then
            eq_rows+=("| $n | $prec | $z | - | - | no reference runs: $(status_of eq-ref-bf16), $(status_of eq-ref-fp32) | - |")
            continue
        fi
        echo "== equivalence: N=$n batch $((EQ_B / n)) per GPU, $prec, zero1=$z"
        if ! train "$name" "$n" configs/fla-220m.ini "${eq_sets[@]}" --set "train.precision=$prec" \
            --set "train.steps=$EQ_STEPS" --set "train.batch_size=$((EQ_B / n))" --set "dist.zero1=$z"; then
            eq_rows+=("| $n | $prec | $z | - | - | $(status_of "$name") | - |")
            continue
        fi
        d=$(loss_diff "$name" "$refn")
        python3 bench/ckpt_noise.py --scale "$scale" --label "N=$n $prec zero1=$z vs 1 GPU" \
            "$(ckpt_of "$refn")" "$(ckpt_of "$name")" "$(ckpt_of eq-ref-bf16)" "$(ckpt_of eq-ref-fp32)" \
            >"$logs/$name.noise" 2>&1
        verdict="floor: $(tail -1 "$logs/$name.noise")"
        loss_ok "$d" "$ltol" || verdict="FAIL (loss); $verdict"
        verdict="$verdict; $(grep -E '^  (params|adam_m|adam_v) ' "$logs/$name.noise" |
            awk '{ printf "%s%s d %s (d/f %s)", (NR > 1 ? ", " : ""), $1, $4, $10 }')"
        # against 1 GPU running the same split as N micro-batches of B/N (train.grad_accum): the
        # same windows per micro-batch, the same fp32 sum of the N partial gradients
        local acc=eq-acc$n-$prec
        if [ ! -f "$logs/$acc.rc" ]; then
            echo "== 1 GPU, $n micro-batches of $((EQ_B / n)), $prec"
            train "$acc" 1 configs/fla-220m.ini "${eq_sets[@]}" --set "train.precision=$prec" \
                --set "train.steps=$EQ_STEPS" --set "train.batch_size=$((EQ_B / n))" \
                --set "train.grad_accum=$n" --set dist.zero1=false
        fi
        if [ "$(cat "$logs/$acc.rc")" = 0 ]; then
            "$b/gdn-ckpt" diff --rtol 0 "$(ckpt_of "$name")" "$(ckpt_of "$acc")" >"$logs/$name.vs-acc.diff" 2>&1
            verdict="$verdict; **same split, vs 1 GPU x $n micro-batches of $((EQ_B / n)): loss $(loss_diff "$name" "$acc"), $(tail -1 "$logs/$name.vs-acc.diff" | sed "s/ tensors compared, / tensors, /; s/ beyond --rtol;/;/")**"
        else
            verdict="$verdict; 1 GPU x $n micro-batches: $(status_of "$acc")"
        fi
        # ZeRO-1 against the same N without it: the same sums in another grouping
        if [ "$z" = true ] && [ -f "$(ckpt_of "eq-n$n-$prec-zero1-false")" ]; then
            "$b/gdn-ckpt" diff --rtol 0 "$(ckpt_of "$name")" "$(ckpt_of "eq-n$n-$prec-zero1-false")" \
                >"$logs/$name.vs-nozero1.diff" 2>&1
            verdict="$verdict; vs ZeRO-1 off: $(tail -1 "$logs/$name.vs-nozero1.diff" | cut -c1-80)"
        fi
        # resume the N-GPU checkpoint on 1 GPU for 5 more steps
        res=$name-resume1
        echo "== resume $name on 1 GPU"
        rs="not run"
        if [ "$(left)" -ge 90 ]; then
            timeout -k 30 "$(($(left) - 30 < RUN_TIMEOUT ? $(left) - 30 : RUN_TIMEOUT))" "$b/gdn-train" \
                --resume "$(ckpt_of "$name")" --set "train.steps=$((EQ_STEPS + 5))" \
                --set "train.out_dir=$runs/$res" >"$logs/$res.log" 2>&1
            rs=$?
            if [ "$rs" -eq 0 ] && grep -q '^done: ' "$logs/$res.log"; then
                rs="ok ($(grep -c '^note: checkpoint written by' "$logs/$res.log") world-size note)"
            else
                rs="FAILED (exit $rs: $(grep -m1 -i error "$logs/$res.log" | cut -c1-100))"
            fi
        fi
        eq_rows+=("| $n | $prec | $z | ${d:--} (bound $ltol) | $scale | ${verdict//|/\\|} | $rs |")
        rm -rf "${runs:?}/$res"
    done
}
multi=()
for n in "${Ns[@]}"; do [ "$n" -gt 1 ] && multi+=("$n"); done
if [ "${#multi[@]}" -gt 0 ]; then
    ref_run bf16
    ref_run fp32
    eq_rows+=("| 1 (floor) | bf16 vs fp32 | false | $(loss_diff eq-ref-bf16 eq-ref-fp32) | - | the noise floor: 1 GPU bf16 against the same run in fp32 | - |")
    eq_case bf16 1 1e-2 false "${multi[@]}"
    eq_case bf16 1 1e-2 true "${multi[@]}"
    [ "$EQ_FP32" = 1 ] && eq_case fp32 0.01 1e-4 false "${multi[-1]}"
else
    eq_rows+=("| - | - | - | - | - | one GPU only: nothing to compare | - |")
fi

# ---- table
{
    echo
    echo "## Scaling: configs/fla-220m.ini, per-GPU batch 16 x 2048, steps $W..$((SCALE_STEPS - 1))"
    echo
    echo "Step split from --timeline 3 (steps 3-5, rank 0, median): the step, its compute (the step"
    echo "less the waits for all-reduces), the exposed communication (those waits), and the time the"
    echo "NCCL stream was busy (mostly hidden under the backward)."
    echo
    echo "| GPUs | ZeRO-1 | tokens/s | per GPU | efficiency vs 1 GPU | step ms | compute ms | exposed comm ms | NCCL busy ms | status |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${scale_rows[@]}"
    echo
    echo "## Equivalence: $EQ_STEPS steps, N GPUs x batch $EQ_B/N vs 1 GPU x batch $EQ_B (${EQ_SETS:-full model})"
    echo
    echo "Verdict (bench/ckpt_noise.py): every tensor of params, AdamW m and v must differ from the"
    echo "1-GPU run of its precision by at most SCALE x its noise floor f, the distance between the"
    echo "1-GPU bf16 and fp32 runs (bf16: SCALE 1, the change moves nothing further than bf16 rounding"
    echo "does; fp32: SCALE 0.01, a hundred times below it). d = relative L2 difference to the 1-GPU"
    echo "run, d/f its ratio to the floor (worst tensor per group). \"Same split\": against 1 GPU running"
    echo "the N halves as N micro-batches (train.grad_accum): at N = 2 bf16 should be bitwise (both sum"
    echo "two fp32 partial gradients once); at N > 2 NCCL sums in another order than the accumulation,"
    echo "an fp32-rounding difference that bf16 training then amplifies."
    echo
    echo "| GPUs | precision | ZeRO-1 | max loss difference | scale | verdict | resumed on 1 GPU |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${eq_rows[@]}"
    echo
    echo "call time: $SECONDS s; logs: multi_gpu_logs.tar.gz"
} >>"$md"
cat "$md"
rm -rf "${runs:?}"
