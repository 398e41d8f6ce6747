#!/usr/bin/env bash
# test_rank_agree.sh — under mpirun the ranks agree before the first step: a rank given another
# d_model, n_layers or seed, another data file behind the same data.path, or another checkpoint
# to resume stops every rank with exit 1 (never a signal or a heap error), the differing rank
# naming the key with its value and rank 0's (or the data file, or the loop state). Each case
# gives rank 1 other arguments than rank 0 through a wrapper that picks them by
# OMPI_COMM_WORLD_RANK.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "test_rank_agree: SKIPPED: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# Under AddressSanitizer, OpenMPI's own modules leak at exit (see test_train_mpi.sh).
MPI="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2"
make_text "$WORK/text.txt"
mkdir -p "$WORK/d0" "$WORK/d1"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d0/d.h5" >/dev/null &&
  head -c 200000 "$WORK/text.txt" >"$WORK/text1.txt" && "$BIN/gdn-prepare" --input "$WORK/text1.txt" --out "$WORK/d1/d.h5" >/dev/null ||
  { fail "gdn-prepare"; finish test_rank_agree; }
write_micro "$WORK/m.ini" "$WORK/d0/d.h5" "$WORK/run"
# per_rank.sh CMD0 CMD1: rank 0 runs the shell command CMD0, rank 1 CMD1
cat >"$WORK/per_rank.sh" <<'SH'
#!/usr/bin/env bash
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then eval "$2"; else eval "$1"; fi
SH
chmod +x "$WORK/per_rank.sh"
common="--set model.dropout=0 --set train.steps=4 --set train.eval_every=0 --set train.batch_size=2"

# disagree NAME PATTERN CMD0 CMD1: the job exits 1, the output holds PATTERN and no crash
disagree() {
  local name=$1 pat=$2
  $MPI "$WORK/per_rank.sh" "$3" "$4" >"$WORK/out.log" 2>"$WORK/err.log"  # apart: lines stay whole
  local rc=$?
  cat "$WORK/err.log" >>"$WORK/out.log"
  if [ $rc -eq 1 ] && grep -qF -- "$pat" "$WORK/out.log" && ! grep -qE "free\(\)|corrupt|Segmentation|signal [0-9]|core dumped|AddressSanitizer|runtime error" "$WORK/out.log"; then
    pass "$name: exit 1, \"$(grep -F -- "$pat" "$WORK/out.log" | head -1 | cut -c1-140)\""
  else
    fail "$name: exit $rc (want 1 and \"$pat\", no crash):"; grep -v "^ \|^\[\|^;\|= " "$WORK/out.log" | tail -8 | sed 's/^/        /'
  fi
}
T="$BIN/gdn-train $WORK/m.ini $common"

disagree "rank 1 with another d_model" "error: rank 1: [model] d_model = 48 on this rank, 32 on rank 0" \
  "exec $T --set train.out_dir=$WORK/a" "exec $T --set train.out_dir=$WORK/a --set model.d_model=48"
grep -q "1 of 2 ranks run another config or data file than rank 0; stopping every rank" "$WORK/out.log" && pass "rank 0 says how many ranks differ" || fail "no summary from rank 0"
[ ! -e "$WORK/a" ] && pass "nothing written" || fail "the run directory was made"
disagree "rank 1 with another n_layers" "error: rank 1: [model] n_layers = 3 on this rank, 2 on rank 0" \
  "exec $T --set train.out_dir=$WORK/b" "exec $T --set train.out_dir=$WORK/b --set model.n_layers=3"
disagree "rank 1 with another seed" "error: rank 1: [train] seed = 8 on this rank, 7 on rank 0" \
  "exec $T --set train.out_dir=$WORK/c" "exec $T --set train.out_dir=$WORK/c --set train.seed=8"
disagree "rank 1 with another file behind data.path" "error: rank 1: the data file differs from rank 0's: 'd.h5': " \
  "cd $WORK/d0 && exec $T --set data.path=d.h5 --set train.out_dir=$WORK/e" "cd $WORK/d1 && exec $T --set data.path=d.h5 --set train.out_dir=$WORK/e"

# resuming: rank 0 the step-2 checkpoint, rank 1 the step-3 one of the same run (same config)
$MPI "$BIN/gdn-train" "$WORK/m.ini" $common --set train.out_dir="$WORK/p" --stop-after 2 >/dev/null 2>&1 &&
  $MPI "$BIN/gdn-train" "$WORK/m.ini" $common --set train.out_dir="$WORK/q" --stop-after 3 >/dev/null 2>&1 || fail "2-rank runs to resume from"
disagree "rank 1 resuming another checkpoint" "error: rank 1: the loop state differs from rank 0's: step 3, " \
  "exec $BIN/gdn-train --resume $WORK/p/checkpoint.h5" "exec $BIN/gdn-train --resume $WORK/q/checkpoint.h5 --set train.out_dir=$WORK/p"

$MPI "$WORK/per_rank.sh" "exec $T --set train.out_dir=$WORK/ok" "exec $T --set train.out_dir=$WORK/ok" >"$WORK/ok.log" 2>&1 &&
  grep -q "^done:" "$WORK/ok.log" && pass "ranks that agree train (exit 0)" || { fail "agreeing ranks"; tail -5 "$WORK/ok.log"; }
finish test_rank_agree
