#!/usr/bin/env bash
# test_overlap.sh — gradient all-reduce overlapped with the backward (src/dist/grad_sync.c over
# the model's gradient-ready hook, test_grad_hook.c tests the hook itself), on CPUs through MPI,
# with 2 micro-batches per step (the hook armed on the last) and 4 KiB buckets (many buckets,
# tensors split across them):
#   - 2 ranks overlapped == 2 ranks with dist.overlap = false (one all-reduce pass after the
#     backward), bitwise: every element is summed once over 2 ranks, a + b either way;
#   - both within 1e-12 (relative, per tensor) of 1 rank with the whole batch;
#   - ZeRO-1 (each piece reduced to its shard's owner) overlapped == after the backward,
#     bitwise, and within 1e-12 of plain data parallel (the gradient norm is summed per shard).
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "test_overlap: SKIPPED: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# OpenMPI's own modules leak at exit under AddressSanitizer (see test_train_mpi.sh)
MPI="env ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np"
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_overlap; }
write_micro "$WORK/m.ini" "$WORK/d.h5" "$WORK/one"
common=(--set model.dropout=0 --set train.steps=5 --set train.eval_every=0 --set train.grad_accum=2
        --set dist.bucket_mb=0.00390625)
"$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" >"$WORK/one.log" 2>&1 && pass "1 rank, batch 4, grad_accum 2" || { fail "1 rank"; tail -20 "$WORK/one.log"; }
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.batch_size=2 --set train.out_dir="$WORK/ov" >"$WORK/ov.log" 2>&1 && pass "2 ranks, batch 2 each, overlapped" || { fail "2 ranks overlapped"; tail -20 "$WORK/ov.log"; }
grep -q "gradients: all-reduce in 0.00390625 MB buckets, overlapped with the backward" "$WORK/ov.log" && pass "says: overlapped with the backward" || { fail "not overlapped"; grep gradients "$WORK/ov.log"; }
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set dist.overlap=false --set train.batch_size=2 --set train.out_dir="$WORK/no" >"$WORK/no.log" 2>&1 && pass "2 ranks, dist.overlap = false" || { fail "2 ranks, no overlap"; tail -20 "$WORK/no.log"; }
grep -q "gradients: all-reduce in 0.00390625 MB buckets, after the backward (dist.overlap = false)" "$WORK/no.log" && pass "says: after the backward" || { fail "dist.overlap = false not taken"; grep gradients "$WORK/no.log"; }
"$BIN/gdn-ckpt" diff "$WORK/no/checkpoint.h5" "$WORK/ov/checkpoint.h5" >"$WORK/d0.log" && pass "overlapped == after the backward: $(tail -1 "$WORK/d0.log")" || { fail "overlap changes the result"; cat "$WORK/d0.log"; }
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/one/checkpoint.h5" "$WORK/ov/checkpoint.h5" >"$WORK/d1.log" && pass "overlapped 2 x B/2 == 1 x B: $(tail -1 "$WORK/d1.log")" || { fail "2 ranks differ from 1"; cat "$WORK/d1.log"; }
echo "== ZeRO-1: each piece summed to its shard's owner during the backward"
z=(--set dist.zero1=true)
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${z[@]}" --set train.batch_size=2 --set train.out_dir="$WORK/zov" >"$WORK/zov.log" 2>&1 && pass "ZeRO-1, 2 ranks, overlapped" || { fail "ZeRO-1 overlapped"; tail -20 "$WORK/zov.log"; }
grep -q "gradients: reduce to each shard's owner in 0.00390625 MB buckets, overlapped with the backward; AdamW on this rank's shard" "$WORK/zov.log" && pass "says: reduce to the owners, overlapped" || { fail "ZeRO-1 not overlapped"; grep gradients "$WORK/zov.log"; }
$MPI 2 "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${z[@]}" --set dist.overlap=false --set train.batch_size=2 --set train.out_dir="$WORK/zno" >"$WORK/zno.log" 2>&1 && pass "ZeRO-1, 2 ranks, dist.overlap = false" || { fail "ZeRO-1 no overlap"; tail -20 "$WORK/zno.log"; }
grep -q "gradients: reduce to each shard's owner in 0.00390625 MB buckets, after the backward (dist.overlap = false)" "$WORK/zno.log" && pass "says: reduce to the owners, after the backward" || { fail "ZeRO-1: dist.overlap = false not taken"; grep gradients "$WORK/zno.log"; }
"$BIN/gdn-ckpt" diff "$WORK/zno/checkpoint.h5" "$WORK/zov/checkpoint.h5" >"$WORK/dz0.log" && pass "ZeRO-1 overlapped == after the backward: $(tail -1 "$WORK/dz0.log")" || { fail "ZeRO-1 overlap changes the result"; cat "$WORK/dz0.log"; }
# not bitwise: ZeRO-1 sums the squared gradient norm per shard, then over the ranks
"$BIN/gdn-ckpt" diff --rtol 1e-12 "$WORK/ov/checkpoint.h5" "$WORK/zov/checkpoint.h5" >"$WORK/dz1.log" && pass "ZeRO-1 == plain data parallel on 2 ranks: $(tail -1 "$WORK/dz1.log")" || { fail "ZeRO-1 differs from plain"; cat "$WORK/dz1.log"; }
finish test_overlap
