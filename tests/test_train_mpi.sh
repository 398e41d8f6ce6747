#!/usr/bin/env bash
# test_train_mpi.sh — data parallelism on CPUs through MPI: 2 ranks with batch B/2 each give
# the weights of 1 rank with batch B (float64, relative <= 1e-12 per tensor), with and
# without ZeRO-1; a checkpoint written at world size 2 resumes at world size 1; the same at 4
# ranks (ZeRO-1 pieces crossing shard boundaries, ranks x micro-batches, 4 -> 2 ranks resume).
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "test_train_mpi: SKIPPED: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
MPI="mpirun --allow-run-as-root --oversubscribe -np"
# Under AddressSanitizer, OpenMPI's own modules leak at exit (~100 KB a rank, none of it ours:
# test_dist.sh shows the same); leak detection stays on for the single-process runs.
MPI="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 $MPI"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_train_mpi; }
write_micro "$WORK/m.ini" "$WORK/d.h5" "$WORK/one"
common=(--set model.dropout=0 --set train.steps=6 --set train.eval_every=3)
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" >"$WORK/one.log" 2>&1 && pass "1 rank, batch 4" || { fail "1 rank"; cat "$WORK/one.log"; }
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set train.out_dir="$WORK/two" >"$WORK/two.log" 2>&1 && pass "2 ranks, batch 2 each" || { fail "2 ranks"; tail -20 "$WORK/two.log"; }
grep -q "(2 ranks, mpi)" "$WORK/two.log" && pass "runs as 2 MPI ranks" || fail "not 2 MPI ranks"
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/two/checkpoint.h5" >"$WORK/d1.log" && pass "2 x B/2 == 1 x B: $(tail -1 "$WORK/d1.log")" || { fail "2 ranks differ from 1"; cat "$WORK/d1.log"; }
# gradient accumulation splits a step's windows like ranks do: 1 rank x 2 micro-batches of 2
# == 2 ranks x 2 == 1 rank x 4 (the same windows, the same sums up to rounding)
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set train.grad_accum=2 --set train.out_dir="$WORK/acc" >"$WORK/acc.log" 2>&1 && pass "1 rank, batch 2, grad_accum 2" || { fail "grad_accum run"; tail -20 "$WORK/acc.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/acc/checkpoint.h5" >"$WORK/da1.log" && pass "1 x 2 micro-batches of B/2 == 1 x B: $(tail -1 "$WORK/da1.log")" || { fail "grad_accum differs from the whole batch"; cat "$WORK/da1.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/two/checkpoint.h5" "$WORK/acc/checkpoint.h5" >"$WORK/da2.log" && pass "1 x 2 micro-batches of B/2 == 2 ranks x B/2: $(tail -1 "$WORK/da2.log")" || { fail "grad_accum differs from 2 ranks"; cat "$WORK/da2.log"; }
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set train.grad_accum=2 --set train.out_dir="$WORK/accr" --stop-after 3 >"$WORK/accr1.log" 2>&1 &&
    "$BIN/gdn-train" --resume "$WORK/accr/checkpoint.h5" >"$WORK/accr2.log" 2>&1 && pass "grad_accum 2: stop after 3, resume" || { fail "grad_accum stop/resume"; tail "$WORK/accr2.log"; }
"$BIN/gdn-ckpt" diff "$WORK/acc/checkpoint.h5" "$WORK/accr/checkpoint.h5" >"$WORK/dar.log" && grep -q "^IDENTICAL" "$WORK/dar.log" && pass "grad_accum 2: 3 + 3 steps == 6 steps, bitwise" || { fail "grad_accum resume differs"; cat "$WORK/dar.log"; }
# validation: the ranks split each val batch like a training batch, so 2 x B/2 evaluates the
# windows 1 x B does (steps 3 and 6)
vals() { grep -o '"val_loss": [^,]*' "$1/metrics.jsonl" | cut -d' ' -f2 | tr '\n' ' '; }
same_vals() {  # same_vals DIR_A DIR_B LABEL: the 2 evaluations agree to 1e-12
    local v1 v2
    v1=$(vals "$1") v2=$(vals "$2")
    awk -v a="$v1" -v b="$v2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != 2 || m != 2) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-12 * x[i]) exit 1 } }' &&
        pass "$3 val losses == 1 x B: $v2" || fail "$3 val losses differ from 1 x B: $v1 vs $v2"
}
same_vals "$WORK/one" "$WORK/two" "2 x B/2"
same_vals "$WORK/one" "$WORK/acc" "1 x 2 micro-batches of B/2"
# eval_batches = 0: the whole validation split in evenly spaced windows, split like a batch
full=(--set train.eval_batches=0)
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${full[@]}" --set train.out_dir="$WORK/f1" >"$WORK/f1.log" 2>&1 &&
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${full[@]}" --set train.batch_size=2 --set train.out_dir="$WORK/f2" >"$WORK/f2.log" 2>&1 &&
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${full[@]}" --set train.batch_size=2 --set train.grad_accum=2 --set train.out_dir="$WORK/fa" >"$WORK/fa.log" 2>&1 &&
    pass "eval_batches 0: 1 x 4, 2 x 2, 1 x 2 micro-batches of 2" || { fail "eval_batches 0 runs"; tail "$WORK/f1.log" "$WORK/f2.log" "$WORK/fa.log"; }
vl=$(grep '^validation: the whole split' "$WORK/f1.log")
[[ $vl =~ ^validation:\ the\ whole\ split,\ ([0-9]+)\ tokens\ in\ ([0-9]+)\ windows\ of\ ([0-9]+)\ \(([0-9]+)\ batches\)$ ]] &&
    awk -v n="${BASH_REMATCH[1]}" -v w="${BASH_REMATCH[2]}" -v t1="${BASH_REMATCH[3]}" -v nb="${BASH_REMATCH[4]}" 'BEGIN {
        T = t1 - 1; need = int((n - 1 + T - 1) / T); exit !(w == nb * 4 && w >= need && w < need + 4) }' &&
    pass "says: $vl (ceil((n - 1) / T) windows, rounded up to batches of 4)" || fail "validation line: '$vl'"
same_vals "$WORK/f1" "$WORK/f2" "whole split, 2 x B/2:"
same_vals "$WORK/f1" "$WORK/fa" "whole split, 1 x 2 micro-batches of B/2:"
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set dist.zero1=true --set train.out_dir="$WORK/z" >"$WORK/z.log" 2>&1 && pass "2 ranks with ZeRO-1" || { fail "ZeRO-1 run"; tail -20 "$WORK/z.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/z/checkpoint.h5" >"$WORK/d2.log" && pass "ZeRO-1 2 x B/2 == 1 x B: $(tail -1 "$WORK/d2.log")" || { fail "ZeRO-1 differs"; cat "$WORK/d2.log"; }
# ZeRO-1 keeps m and v for the rank's shard only: about half the optimizer memory on 2 ranks
# (a wider model for 1 step, so that the MiB figures have digits to compare)
opt_mib() { sed -n 's/^memory:.*optimizer \([0-9.]*\) MiB.*/\1/p' "$1" | head -1; }
wide=(--set model.d_model=256 --set model.mlp_hidden=512 --set train.steps=1 --set train.batch_size=2)
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${wide[@]}" --set train.out_dir="$WORK/mw1" >"$WORK/mw1.log" 2>&1 || fail "wide run without ZeRO-1"
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${wide[@]}" --set dist.zero1=true --set train.out_dir="$WORK/mw2" >"$WORK/mw2.log" 2>&1 || fail "wide run with ZeRO-1"
o1=$(opt_mib "$WORK/mw1.log"); o2=$(opt_mib "$WORK/mw2.log")
awk -v a="$o1" -v b="$o2" 'BEGIN { exit !(a > 0 && b > 0 && b <= 0.55 * a) }' && pass "ZeRO-1 optimizer memory per rank $o2 MiB of $o1 (2 ranks)" || fail "ZeRO-1 optimizer memory $o2 MiB vs $o1 MiB"
# a ZeRO-1 run stopped at step 3 and resumed on 2 ranks == the same run uninterrupted (bitwise),
# and its checkpoint (gathered m, v) resumes on 1 rank without ZeRO-1
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set dist.zero1=true --set train.out_dir="$WORK/zr" --stop-after 3 >"$WORK/zr1.log" 2>&1 && pass "ZeRO-1 2 ranks stop after step 3" || { fail "ZeRO-1 stop"; tail "$WORK/zr1.log"; }
cp "$WORK/zr/checkpoint.h5" "$WORK/zr3.h5"
$MPI 2 "$BIN/gdn-train" --resume "$WORK/zr/checkpoint.h5" >"$WORK/zr2.log" 2>&1 && pass "ZeRO-1 resumes on 2 ranks" || { fail "ZeRO-1 resume"; tail "$WORK/zr2.log"; }
"$BIN/gdn-ckpt" diff "$WORK/z/checkpoint.h5" "$WORK/zr/checkpoint.h5" >"$WORK/dzr.log" && grep -q "^IDENTICAL" "$WORK/dzr.log" && pass "ZeRO-1 3 + 3 steps == 6 steps, bitwise" || { fail "ZeRO-1 resume differs"; cat "$WORK/dzr.log"; }
"$BIN/gdn-train" --resume "$WORK/zr3.h5" --set dist.zero1=false --set train.batch_size=4 --set train.out_dir="$WORK/zr1w" >"$WORK/zr1w.log" 2>&1 && grep -q "^done:" "$WORK/zr1w.log" && pass "ZeRO-1 checkpoint of 2 ranks resumes on 1 rank" || { fail "ZeRO-1 checkpoint on 1 rank"; tail "$WORK/zr1w.log"; }
# the data-parallel path at world 1 (dist.backend = mpi under mpirun -np 1): the all-reduces and
# the ZeRO-1 shards run over one rank and must leave the plain run's bits
for z in false true; do
  $MPI 1 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set dist.backend=mpi --set dist.zero1=$z --set train.out_dir="$WORK/w1$z" >"$WORK/w1$z.log" 2>&1 && pass "1 MPI rank, dist.backend=mpi, zero1 $z" || { fail "world-1 mpi run (zero1 $z)"; tail -20 "$WORK/w1$z.log"; }
  grep -q "(1 rank, mpi" "$WORK/w1$z.log" && pass "runs the mpi path at world 1" || fail "world-1 run did not use mpi"
  "$BIN/gdn-ckpt" diff "$WORK/one/checkpoint.h5" "$WORK/w1$z/checkpoint.h5" >"$WORK/dw1$z.log" && grep -q "^IDENTICAL" "$WORK/dw1$z.log" && pass "world-1 mpi (zero1 $z) == no dist, bitwise" || { fail "world-1 mpi differs (zero1 $z)"; cat "$WORK/dw1$z.log"; }
done
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set dist.backend=nccl --set train.device=cpu >"$WORK/nc.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "backend = nccl needs the GPU" "$WORK/nc.log" && pass "dist.backend=nccl on the CPU is refused" || { fail "nccl on the CPU not refused (rc $rc)"; cat "$WORK/nc.log"; }
# world size 2 -> 1
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set train.out_dir="$WORK/w" --stop-after 3 >"$WORK/w1.log" 2>&1 && pass "2 ranks stop after step 3" || fail "2-rank stop"
"$BIN/gdn-train" --resume "$WORK/w/checkpoint.h5" --set train.batch_size=4 >"$WORK/w2.log" 2>&1 && pass "resumes on 1 rank" || { fail "resume on 1 rank"; tail "$WORK/w2.log"; }
grep -q "checkpoint written by 2 ranks, resuming on 1" "$WORK/w2.log" && pass "says the world size changed" || fail "no world-size note"
"$BIN/gdn-ckpt" info "$WORK/w/checkpoint.h5" | grep -q "^step = 6$" && pass "finished at step 6" || fail "did not finish"
# the same global batch (1 x 4 == 2 x 2) continues the same data: == 6 steps on 2 ranks
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/two/checkpoint.h5" "$WORK/w/checkpoint.h5" >"$WORK/dw.log" 2>&1 &&
    pass "2 ranks x 3 steps, then 1 rank x batch 4 x 3 steps == 2 ranks x 6 steps: $(tail -1 "$WORK/dw.log")" || { fail "resume on 1 rank with the same global batch differs"; cat "$WORK/dw.log"; }
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set train.out_dir="$WORK/wa" --stop-after 3 >"$WORK/wa1.log" 2>&1 &&
    "$BIN/gdn-train" --resume "$WORK/wa/checkpoint.h5" --set train.grad_accum=2 >"$WORK/wa2.log" 2>&1 && pass "2 ranks stop after 3, resume on 1 rank with grad_accum 2" || { fail "resume with grad_accum"; tail "$WORK/wa2.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/two/checkpoint.h5" "$WORK/wa/checkpoint.h5" >"$WORK/dwa.log" 2>&1 &&
    pass "... == 2 ranks x 6 steps: $(tail -1 "$WORK/dwa.log")" || { fail "resume with grad_accum differs"; cat "$WORK/dwa.log"; }

echo "== 4 ranks (what 4 GPUs run through NCCL): batch 1 each, 4 KiB buckets (pieces cross shards)"
small=(--set dist.bucket_mb=0.00390625)
$MPI 4 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${small[@]}" --set train.batch_size=1 --set train.out_dir="$WORK/four" >"$WORK/four.log" 2>&1 &&
    grep -q "(4 ranks, mpi)" "$WORK/four.log" && pass "4 ranks, batch 1 each" || { fail "4 ranks"; tail -20 "$WORK/four.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/four/checkpoint.h5" >"$WORK/d4.log" && pass "4 x B/4 == 1 x B: $(tail -1 "$WORK/d4.log")" || { fail "4 ranks differ from 1"; cat "$WORK/d4.log"; }
same_vals "$WORK/one" "$WORK/four" "4 x B/4"
$MPI 4 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${small[@]}" --set train.batch_size=1 --set dist.zero1=true --set train.out_dir="$WORK/four-z" >"$WORK/four-z.log" 2>&1 && pass "4 ranks, ZeRO-1" || { fail "4 ranks ZeRO-1"; tail -20 "$WORK/four-z.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/four-z/checkpoint.h5" >"$WORK/d4z.log" && pass "ZeRO-1 4 x B/4 == 1 x B: $(tail -1 "$WORK/d4z.log")" || { fail "ZeRO-1 on 4 ranks differs"; cat "$WORK/d4z.log"; }
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${small[@]}" --set train.batch_size=1 --set train.grad_accum=2 --set train.out_dir="$WORK/two-acc" >"$WORK/two-acc.log" 2>&1 && pass "2 ranks x 2 micro-batches of 1" || { fail "2 ranks with grad_accum"; tail -20 "$WORK/two-acc.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/two-acc/checkpoint.h5" >"$WORK/d2a.log" && pass "2 ranks x 2 micro-batches of B/4 == 1 x B: $(tail -1 "$WORK/d2a.log")" || { fail "2 ranks x grad_accum 2 differ"; cat "$WORK/d2a.log"; }
$MPI 4 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${small[@]}" --set train.batch_size=1 --set dist.zero1=true --set train.out_dir="$WORK/four-r" --stop-after 3 >"$WORK/four-r1.log" 2>&1 &&
    $MPI 2 "$BIN/gdn-train" --resume "$WORK/four-r/checkpoint.h5" --set train.batch_size=2 >"$WORK/four-r2.log" 2>&1 &&
    grep -q "checkpoint written by 4 ranks, resuming on 2" "$WORK/four-r2.log" && pass "a 4-rank ZeRO-1 checkpoint of step 3 resumes on 2 ranks (batch 2), says so" || { fail "4 -> 2 ranks resume"; tail "$WORK/four-r2.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/four-r/checkpoint.h5" >"$WORK/d4r.log" && pass "... == 1 x B for 6 steps: $(tail -1 "$WORK/d4r.log")" || { fail "4 -> 2 resume differs"; cat "$WORK/d4r.log"; }
finish test_train_mpi
