#!/usr/bin/env bash
# bench/run_model_vs_fla.sh — whole-model training, gdn.c against fla, in one GPU call:
# configs/fla-220m.ini (219.90M parameters, seq 2048, batch 16, bf16) with gdn-train, then fla's
# GatedDeltaNetForCausalLM at the same shapes with bench/fla_model.py, then a comparison table:
# seconds from process start to the first finished step, tokens/s over steps 10..60, median
# step time, peak GPU memory (nvidia-smi memory.used sampled every 100 ms, minus the reading
# before the run; for fla also torch's max_memory_allocated / reserved), loss at the first and
# last step (random tokens: ~ln 32000 = 10.37 for both; a sanity check, not a quality one).
#
#   bench/run_model_vs_fla.sh            on the GPU machine, from the repo root; logs in $OUT
#
# Needs: ./fla (fla's source, bench/README.md), python3 with numpy and h5py for the synthetic
# token file data/synth-32000.h5 (made here when absent); .devdeps/env.sh, where present, puts
# libinih on the paths of a machine that lacks it.
# Binaries: GDN_BIN=DIR uses DIR/gdn-train built elsewhere for sm_90a (DIR/*.gz are gunzipped
# first); otherwise gdn-train is built here with CMake into build-dev (its time is reported).
# Environment (defaults): STEPS=61 (gdn-train's last step also evaluates, so the window ends at
# STEPS-1; fla runs STEPS-1 steps), WINDOW=10, OURS_TIMEOUT=180, FLA_TIMEOUT=420 (fla's first
# step takes ~230-270 s of Triton compilation and autotuning when its cache is cold), FLA_MASTER=bf16 (as
# fla's own benchmark: bf16 parameters and AdamW state under autocast), FLA_SECOND=fp32 (a
# second fla run with fp32 parameters and AdamW state, as gdn.c keeps them, if at least
# FLA_SECOND_MIN=150 s are left; "" = none), CALL_LIMIT=570 (seconds this script may take in
# all: phases are shortened or skipped to end before it), PROFILE_STEPS=20 (a short extra
# gdn-train run with --profile, and --profile-events, when `gdn-train --help` lists them), GDN_ARGS="" (more
# gdn-train options for both gdn-train runs, e.g. "--set train.recompute=light"),
# FLA_CACHE_IN="" (a .tar.xz of a Triton cache that an earlier call's FLA_CACHE_OUT wrote: fla's
# compiled kernels and autotuning results, so its first step takes seconds, not minutes; its
# first-step time is then not a cold start, and the summary says so), FLA_CACHE_OUT="" (1: save
# this call's Triton cache as $OUT/triton_cache.tar.xz when it is under 16 MiB).
# fla's Hopper backward guard is bypassed inside bench/fla_model.py, for timing only.
# Files in $OUT (at most 8 come back): summary.md, gdn_train.log (each line prefixed with the
# epoch time it was read), gdn_metrics.jsonl, gdn_profile.log, fla_model.log, smi.csv,
# build.log, triton_cache.tar.xz (FLA_CACHE_OUT).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-/tmp/out}
mkdir -p "$out"
STEPS=${STEPS:-61}
WINDOW=${WINDOW:-10}
OURS_TIMEOUT=${OURS_TIMEOUT:-180}
FLA_TIMEOUT=${FLA_TIMEOUT:-420}
FLA_MASTER=${FLA_MASTER:-bf16}
FLA_SECOND=${FLA_SECOND-fp32}
FLA_SECOND_MIN=${FLA_SECOND_MIN:-150}
CALL_LIMIT=${CALL_LIMIT:-570}
GDN_ARGS=${GDN_ARGS:-}
PROFILE_STEPS=${PROFILE_STEPS:-20}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# shellcheck source=/dev/null
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
left() { echo $((CALL_LIMIT - SECONDS)); }
# the smaller of a phase's own limit and what the call has left minus a reserve
# (at least 5 s: timeout 0 would mean no limit)
budget() {
    local l=$(($(left) - $2))
    [ "$l" -lt "$1" ] || l=$1
    [ "$l" -ge 5 ] || l=5
    echo "$l"
}
stamp() { local l; while IFS= read -r l || [ -n "$l" ]; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
smi_start() {  # smi_start PHASE: sample memory.used of GPU 0 every 100 ms into $tmp/smi.PHASE
    nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$tmp/smi.$1" 2>/dev/null &
    smi_pid=$!
}
smi_stop() { kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null; }
mem_now() { nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
    echo "# gdn.c vs fla, whole model (configs/fla-220m.ini), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "GPU: $(nvidia-smi -i 0 --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1)"
    if c=$(git rev-parse --short HEAD 2>/dev/null); then
        echo "tree: $c$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
    else echo "tree: no .git on this machine (name the binaries' commit yourself)"; fi
} >"$tmp/head.md"

# ---- binaries
# shellcheck source=bench/lib.sh
. bench/lib.sh
gdn_binaries "$out/build.log" gdn-train
echo "build: $(tail -1 "$out/build.log")" >>"$tmp/head.md"
[ -x "$b/gdn-train" ] || { tail -20 "$out/build.log"; exit 1; }

# ---- data: uniform random tokens at vocab 32000
data=data/synth-32000.h5
if [ ! -f "$data" ]; then
    mkdir -p data
    python3 bench/make_tokens.py "$data" --vocab 32000 || { echo "cannot make $data"; exit 1; }
fi
# run folders in RAM when /dev/shm has room for a checkpoint (~5.3 GB) and more, else runs/
runs=/dev/shm/gdn-bench
if ! mkdir -p "$runs" 2>/dev/null || [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -lt $((16 << 20)) ]; then
    runs=$root/runs/bench
fi
rm -rf "$runs/fla-220m" "$runs/fla-220m-prof"
mkdir -p "$runs"

# ---- gdn-train
echo "== gdn-train configs/fla-220m.ini, $STEPS steps${GDN_ARGS:+, $GDN_ARGS}"
base_ours=$(mem_now)
smi_start ours
t_launch=$EPOCHREALTIME
timeout -k 30 "$(budget "$OURS_TIMEOUT" 60)" "$b/gdn-train" configs/fla-220m.ini --set train.device=cuda \
    --set "train.steps=$STEPS" --set "train.out_dir=$runs/fla-220m" $GDN_ARGS 2>&1 | stamp >"$out/gdn_train.log"
rc_ours=${PIPESTATUS[0]}
smi_stop
echo "gdn-train exit $rc_ours"
grep -E "^[0-9.]+ (model:|memory:|training:|error|done:)" "$out/gdn_train.log" | cut -d' ' -f2- | head -8
grep -E "^[0-9.]+ step " "$out/gdn_train.log" | cut -d' ' -f2- | sed -n '1p;10p;$p'
cp "$runs/fla-220m/metrics.jsonl" "$out/gdn_metrics.jsonl" 2>/dev/null
rm -rf "$runs/fla-220m"   # its checkpoint is ~5.3 GB

# ---- per-op profile (only if this gdn-train has --profile)
help=$("$b/gdn-train" --help 2>&1)   # (not piped into grep -q: pipefail + SIGPIPE)
if grep -q -- '--profile' <<<"$help"; then
    pev=""   # the per-op table from CUDA events (no syncs) where this gdn-train has it
    grep -q -- '--profile-events' <<<"$help" && pev="--profile-events"
    pl=$(budget 120 $((FLA_TIMEOUT / 2 + 30)))
    if [ "$pl" -ge 40 ]; then
        echo "== gdn-train --profile $PROFILE_STEPS $pev ($((PROFILE_STEPS + 10)) steps)"
        {
            grep -A2 -- '--profile' <<<"$help"
            timeout -k 20 "$pl" "$b/gdn-train" configs/fla-220m.ini --set train.device=cuda \
                --set "train.steps=$((PROFILE_STEPS + 10))" --set "train.out_dir=$runs/fla-220m-prof" --set log.every=10 \
                --profile "$PROFILE_STEPS" $pev $GDN_ARGS
            echo "exit $?"
        } >"$out/gdn_profile.log" 2>&1
        rm -rf "$runs/fla-220m-prof"
    else
        echo "no time left for the profile run" >"$out/gdn_profile.log"
    fi
else
    echo "this gdn-train has no --profile flag: no per-op table" | tee "$out/gdn_profile.log"
fi

# ---- fla (its Triton cache in $tmp/triton: an earlier call's when FLA_CACHE_IN is given)
: >"$out/fla_model.log"
export TRITON_CACHE_DIR="$tmp/triton"
mkdir -p "$TRITON_CACHE_DIR"
if [ -n "${FLA_CACHE_IN:-}" ]; then
    if tar xJf "$FLA_CACHE_IN" -C "$TRITON_CACHE_DIR"; then
        echo "fla: warm Triton cache from $FLA_CACHE_IN (fla's first step is not a cold start)" |
            tee -a "$out/fla_model.log" >>"$tmp/head.md"
    else
        echo "fla: cannot read the Triton cache $FLA_CACHE_IN: cold start" | tee -a "$out/fla_model.log"
    fi
fi
run_fla() {  # run_fla MASTER LIMIT
    local base rc
    base=$(mem_now)
    echo "== fla GatedDeltaNetForCausalLM, master $1, $((STEPS - 1)) steps, limit $2 s"
    smi_start "fla-$1"
    (PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" timeout -k 10 "$2" \
        python3 bench/fla_model.py --steps $((STEPS - 1)) --window "$WINDOW" --master "$1") \
        >>"$out/fla_model.log" 2>&1
    rc=$?
    smi_stop
    echo "fla ($1) exit $rc" | tee -a "$out/fla_model.log"
    echo "$base" >"$tmp/base.fla-$1"
    grep -E '^\[fla_model' "$out/fla_model.log" | tail -2
}
if [ -d fla ]; then
    run_fla "$FLA_MASTER" "$(budget "$FLA_TIMEOUT" 20)"
    if [ -n "$FLA_SECOND" ] && [ "$FLA_SECOND" != "$FLA_MASTER" ]; then
        if [ "$(left)" -ge "$((FLA_SECOND_MIN + 20))" ]; then
            run_fla "$FLA_SECOND" "$(budget "$FLA_TIMEOUT" 20)"
        else
            echo "fla ($FLA_SECOND): skipped, $(left) s left" | tee -a "$out/fla_model.log"
        fi
    fi
else
    echo "no ./fla: fla not run (carry its source in ./fla: see bench/README.md)" | tee "$out/fla_model.log"
fi
if [ -n "${FLA_CACHE_OUT:-}" ] && [ -n "$(ls -A "$TRITON_CACHE_DIR")" ]; then
    tar cJf "$tmp/tc.tar.xz" -C "$TRITON_CACHE_DIR" . &&
        if [ "$(stat -c %s "$tmp/tc.tar.xz")" -lt $((16 << 20)) ]; then
            mv "$tmp/tc.tar.xz" "$out/triton_cache.tar.xz"
            echo "fla: Triton cache saved, $(du -k "$out/triton_cache.tar.xz" | cut -f1) KiB"
        else
            echo "fla: Triton cache $(du -k "$tmp/tc.tar.xz" | cut -f1) KiB compressed: over 16 MiB, not saved"
        fi
fi

# ---- memory samples: one file, "phase,MiB" (baseline first, as phase "<phase>-base")
{
    echo "phase,memory_used_mib"
    echo "ours-base,${base_ours:-}"
    for f in "$tmp"/base.*; do [ -e "$f" ] && echo "${f##*/base.}-base,$(cat "$f")"; done
    for f in "$tmp"/smi.*; do [ -e "$f" ] && sed "s/^/${f##*/smi.},/" "$f"; done
} >"$out/smi.csv"

# ---- table
python3 - "$out" "$t_launch" "$rc_ours" "$WINDOW" "$STEPS" "$tmp/head.md" <<'PY' | tee "$out/summary.md"
import json, sys
out, t_launch, rc_ours, W, S, head = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
print(open(head).read().rstrip())
ours = {"rc": rc_ours}
for line in open(f"{out}/gdn_train.log", errors="replace"):
    ts, _, text = line.rstrip("\n").partition(" ")
    if text.startswith("step ") and "first" not in ours:
        ours["first"] = float(ts) - t_launch
    if text.startswith("model: ") and "parameters" in text:
        ours["params"] = text.split()[1]
    if text.startswith("memory: "):
        ours["plan"] = text
    if "error" in text.lower() and "err" not in ours:
        ours["err"] = text
rows = {}
try:
    for line in open(f"{out}/gdn_metrics.jsonl"):
        r = json.loads(line)
        if "loss" in r:
            rows[r["step"]] = r
except OSError:
    pass
last = S - 1  # the last step before the evaluating one
if W in rows and last in rows:
    a, b = rows[W], rows[last]
    ours["tok_s"] = (b["tokens"] - a["tokens"]) / (b["time"] - a["time"])
    dts = sorted(rows[s]["time"] - rows[s - 1]["time"] for s in range(W + 1, last + 1) if s - 1 in rows and s in rows)
    if dts:
        n = len(dts)
        ours["med_ms"] = 1e3 * (dts[n // 2] if n % 2 else 0.5 * (dts[n // 2 - 1] + dts[n // 2]))
if rows:
    ours["loss0"], ours["loss1"] = rows[min(rows)]["loss"], rows[max(rows)]["loss"]
# nvidia-smi peaks per phase, minus that phase's baseline
peak, base = {}, {}
for line in open(f"{out}/smi.csv").readlines()[1:]:
    ph, _, v = line.strip().partition(",")
    try:
        v = float(v)
    except ValueError:
        continue
    if ph.endswith("-base"):
        base[ph[:-5]] = v
    else:
        peak[ph] = max(peak.get(ph, 0.0), v)
def smi_gib(ph):
    return (peak[ph] - base.get(ph, 0.0)) / 1024 if ph in peak else None
ours["smi"] = smi_gib("ours")
flas = []
for line in open(f"{out}/fla_model.log", errors="replace"):
    if line.startswith("{"):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        r["smi"] = smi_gib("fla-" + r["master"])
        flas.append(r)
def f(x, fmt):
    return "-" if x is None else fmt % x
def ratio(a, b, fmt="%.2fx"):
    return "-" if a is None or b is None or b == 0 else fmt % (a / b)
print()
if ours["rc"] != 0:
    print(f"gdn-train exit status {ours['rc']}" + (f": {ours['err']}" if "err" in ours else ""))
    print()
hdr = "| metric | gdn.c |" + "".join(f" fla ({r['master']} master) | gdn.c / fla |" for r in flas) + " target |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
def row(name, ov, fkey, fmt, target, with_ratio=True):
    cells = f"| {name} | {f(ov, fmt)} |"
    for r in flas:
        fv = r.get(fkey)
        cells += f" {f(fv, fmt)} | {ratio(ov, fv) if with_ratio else ''} |"
    print(cells + f" {target} |")
for r in flas:
    r["params_m"] = r["params"] / 1e6
row("parameters (M)", float(ours["params"].rstrip("M")) if "params" in ours else None, "params_m", "%.3f", "219.90 both", False)
row(f"seconds from start to first finished step", ours.get("first"), "first_step_s", "%.1f", "gdn.c <= 10 s")
row(f"tokens/s, steps {W}..{last}", ours.get("tok_s"), "tok_s", "%.0f", "gdn.c / fla >= 1.7x")
row("median step ms", ours.get("med_ms"), "median_step_ms", "%.1f", "")
row("peak GPU memory, nvidia-smi GiB", ours.get("smi"), "smi", "%.2f", "gdn.c / fla <= 0.75x")
row("fla torch max_memory_allocated GiB", None, "peak_alloc_gib", "%.2f", "fla published: 16.7")
row("fla torch max_memory_reserved GiB", None, "peak_reserved_gib", "%.2f", "")
row("loss, first step", ours.get("loss0"), "loss_first", "%.4f", "~10.37 (ln 32000)", False)
row("loss, last step", ours.get("loss1"), "loss_last", "%.4f", "~10.37", False)
print()
if "plan" in ours:
    print("gdn-train " + ours["plan"])
if not flas:
    print("fla: no result line (see fla_model.log: timed out, failed, or not run)")
print("fla's Hopper backward guard was bypassed for timing only (bench/fla_model.py).")
PY
echo "call time so far: $SECONDS s"
