#!/usr/bin/env bash
# test_timeline.sh — gdn-train --timeline N (the overlap of the gradient all-reduce with the
# backward, seen per step and stream; src/dist/grad_sync.c, src/diag/timeline.h). A 3-layer
# micro model on CPUs, under `mpirun -np 2` with 4 KiB buckets (several all-reduces a step) when
# mpirun is there, else on one process:
#   - --timeline 2 of 6 steps records steps 3 and 4 (2 warm-up steps), one file per rank
#     (timeline.csv, timeline.rank1.csv), header step,rank,stream,name,start_ms,end_ms;
#   - every step has forward, bwd lm_head+norm_f (tied embeddings), bwd layer 2, 1, 0 in that
#     order, bwd embed, norm+update on the compute row, which tiles [0, step end] without a gap;
#     start <= end everywhere; with 2 ranks also the wait and >= 1 all-reduce on the comm row,
#     each inside the step, the first starting before the backward of layer 0 ends (sent from
#     the hook, i.e. overlapped: not all after the backward);
#   - the run's checkpoint is bitwise that of the same run without --timeline;
#   - a run shorter than the warm-up records from its first step; with grad_accum 2 the first
#     micro-batch is "forward mb 0" + "backward mb 0", then "forward mb 1" and the ranges; bitwise
#     as without --timeline as well;
#   - --timeline 0 is refused;
#   - tools/plot-timeline makes a non-empty PNG (skipped, said so, without gnuplot).
# Control (the checks can fail): the checker rejects the file with its "bwd layer 1" rows removed,
# and with two spans of the compute row swapped.
. "$(dirname "$0")/lib.sh"
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_timeline; }
write_micro "$WORK/m.ini" "$WORK/d.h5" "$WORK/unused"
common=(--set model.n_layers=3 --set model.dropout=0 --set train.steps=6 --set train.eval_every=0
        --set dist.bucket_mb=0.00390625)
if command -v mpirun >/dev/null; then
    np=2
    # OpenMPI's own modules leak at exit under AddressSanitizer (see test_train_mpi.sh)
    launch=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" mpirun --allow-run-as-root --oversubscribe -np 2)
    common+=(--set train.batch_size=2)
    echo "== 2 ranks (mpirun)"
else
    np=1
    launch=()
    echo "== 1 process (mpirun not found: no all-reduce to see; apt-get install openmpi-bin)"
fi

# check_timeline FILE RANK FIRST LAST DIST FWD: the rows of one rank's file for steps
# FIRST..LAST; DIST=1: wait and all-reduces expected; FWD: the compute names before the
# backward ranges, '|'-separated. Prints each problem; non-zero when there is one.
check_timeline() {
    awk -F, -v rank="$2" -v first="$3" -v last="$4" -v dist="$5" -v fwd="$6" -v L=3 '
    function bad(msg) { print "    " FILENAME ": " msg; nbad++ }
    NR == 1 { if ($0 != "step,rank,stream,name,start_ms,end_ms") bad("header: " $0); next }
    NF != 6 { bad("line " NR ": " NF " fields"); next }
    {
        s = $1
        if ($2 != rank) bad("line " NR ": rank " $2 ", want " rank)
        if (s < first || s > last) bad("line " NR ": step " s " outside " first ".." last)
        if ($5 + 0 > $6 + 0) bad("line " NR ": " $4 " starts at " $5 " after its end " $6)
        seen[s] = 1
        if ($3 == "compute") {
            want0 = (s in cend) ? cend[s] : "0.0000"
            if ($5 != want0) bad("step " s ": compute span " $4 " starts at " $5 ", the row is at " want0)
            cend[s] = $6
            n[s, $4]++
            seq[s] = seq[s] "|" $4
            if ($4 ~ /^bwd layer /) layers[s] = layers[s] " " substr($4, 11)
            if ($4 == "bwd layer 0") l0end[s] = $6
            if ($4 == "norm+update") send[s] = $6
        } else if ($3 == "comm") {
            if ($4 !~ /^allreduce [0-9.e+-]+ MB$/) bad("line " NR ": comm span " $4)
            nc[s]++
            if (!(s in c0) || $5 + 0 < c0[s]) c0[s] = $5 + 0
            if (!(s in c1) || $6 + 0 > c1[s]) c1[s] = $6 + 0
            if ($5 + 0 < 0) bad("step " s ": all-reduce starts before the step, at " $5)
        } else bad("line " NR ": stream " $3)
    }
    END {
        want_layers = ""
        for (l = L - 1; l >= 0; l--) want_layers = want_layers " " l
        nf = split(fwd, fw, "|")
        for (s = first; s <= last; s++) {
            if (!(s in seen)) { bad("step " s ": no rows"); continue }
            # the compute row in order: FWD, the ranges, [wait,] norm+update
            want = ""
            for (i = 1; i <= nf; i++) want = want "|" fw[i]
            want = want "|bwd lm_head+norm_f"
            for (l = L - 1; l >= 0; l--) want = want "|bwd layer " l
            want = want "|bwd embed"
            got = seq[s]
            gsub(/\|wait \(hook\)/, "", got)  # host clock: stalls in the hook, where buckets went
            if (dist) want = want "|wait"
            want = want "|norm+update"
            if (got != want) bad("step " s ": compute row " got ", want " want)
            if (layers[s] != want_layers) bad("step " s ": layer ranges" layers[s] ", want" want_layers)
            if (dist) {
                if (nc[s] < 1) bad("step " s ": no all-reduce")
                else {
                    if (c1[s] > send[s] + 0) bad("step " s ": an all-reduce ends at " c1[s] ", after the step (" send[s] ")")
                    if (c0[s] >= l0end[s] + 0) bad("step " s ": the first all-reduce starts at " c0[s] ", after the backward of layer 0 (" l0end[s] "): not overlapped")
                }
            } else if (nc[s] > 0) bad("step " s ": " nc[s] " all-reduces on one process")
        }
        exit nbad > 0
    }' "$1"
}

echo "== --timeline 2 of 6 steps, and the same run without it"
"${launch[@]}" "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.out_dir="$WORK/tl" --timeline 2 >"$WORK/tl.log" 2>&1 &&
    pass "with --timeline 2: exit 0" || { fail "with --timeline 2"; tail -20 "$WORK/tl.log"; }
"${launch[@]}" "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" --set train.out_dir="$WORK/plain" >"$WORK/plain.log" 2>&1 &&
    pass "without: exit 0" || { fail "without --timeline"; tail -20 "$WORK/plain.log"; }
grep -q "^timeline: steps 3\.\.4 (host clock) -> $WORK/tl/timeline.csv$" "$WORK/tl.log" &&
    pass "says: steps 3..4, host clock, the file" || { fail "no timeline line"; grep timeline "$WORK/tl.log"; }
"$BIN/gdn-ckpt" diff "$WORK/plain/checkpoint.h5" "$WORK/tl/checkpoint.h5" >"$WORK/d0.log" 2>&1 &&
    pass "checkpoint with --timeline == without, bitwise: $(tail -1 "$WORK/d0.log")" || { fail "--timeline changes the weights"; cat "$WORK/d0.log"; }
for r in $(seq 0 $((np - 1))); do
    f=$WORK/tl/timeline.csv
    [ "$r" -gt 0 ] && f=$WORK/tl/timeline.rank$r.csv
    if [ ! -s "$f" ]; then fail "rank $r: no $(basename "$f")"; continue; fi
    check_timeline "$f" "$r" 3 4 $((np > 1)) forward &&
        pass "rank $r: $(basename "$f"): $(($(wc -l <"$f") - 1)) spans, steps 3-4 complete, ordered, contiguous$([ "$np" -gt 1 ] && echo ", $(grep -c ',comm,' "$f") all-reduces inside their steps, overlapped")" ||
        fail "rank $r: $(basename "$f")"
done
if [ "$np" -eq 1 ]; then [ ! -e "$WORK/tl/timeline.rank1.csv" ] && pass "one process: no rank-1 file" || fail "a rank-1 file on one process"; fi

echo "== control: the checker can fail"
f=$WORK/tl/timeline.csv
grep -v ',bwd layer 1,' "$f" >"$WORK/c1.csv"
check_timeline "$WORK/c1.csv" 0 3 4 $((np > 1)) forward >/dev/null && fail "missing bwd layer 1 not caught" || pass "rejects a file without the layer-1 ranges"
awk -F, 'NR > 1 && $3 == "compute" && ++k == 2 { held = $0; next } { print } k == 3 && !done && held != "" { print held; done = 1 }' "$f" >"$WORK/c2.csv"
check_timeline "$WORK/c2.csv" 0 3 4 $((np > 1)) forward >/dev/null && fail "swapped compute spans not caught" || pass "rejects swapped compute spans"

if [ "$np" -gt 1 ]; then
    echo "== ZeRO-1: gradient pieces reduced to their shard's owner during the backward, then the update and the all-gather"
    z=(--set dist.zero1=true)
    "${launch[@]}" "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${z[@]}" --set train.out_dir="$WORK/ztl" --timeline 2 >"$WORK/ztl.log" 2>&1 &&
        pass "ZeRO-1 with --timeline 2: exit 0" || { fail "ZeRO-1 with --timeline 2"; tail -20 "$WORK/ztl.log"; }
    "${launch[@]}" "$BIN/gdn-train" "$WORK/m.ini" "${common[@]}" "${z[@]}" --set train.out_dir="$WORK/zplain" >"$WORK/zplain.log" 2>&1 ||
        fail "ZeRO-1 without --timeline"
    "$BIN/gdn-ckpt" diff "$WORK/zplain/checkpoint.h5" "$WORK/ztl/checkpoint.h5" >"$WORK/dz.log" 2>&1 &&
        pass "ZeRO-1: checkpoint with --timeline == without, bitwise" || { fail "ZeRO-1: --timeline changes the weights"; cat "$WORK/dz.log"; }
    for f in "$WORK/ztl/timeline.csv" "$WORK/ztl/timeline.rank1.csv"; do
        tail_want="|bwd embed|wait|norm+update|all-gather"
        got=$(awk -F, 'NR > 1 && $3 == "compute" && $4 != "wait (hook)" { seq[$1] = seq[$1] "|" $4 }
                       END { for (s = 3; s <= 4; s++) print s ":" seq[s] }' "$f" 2>/dev/null)
        ok=1
        for s in 3 4; do
            row=$(grep "^$s:" <<<"$got")
            [[ "$row" == "$s:|forward|"*"$tail_want" ]] || { ok=0; echo "    step $s: $row"; }
        done
        [ $ok -eq 1 ] && pass "$(basename "$f"): steps 3-4 end with bwd embed, wait, norm+update, all-gather" ||
            fail "$(basename "$f"): ZeRO-1 compute row, want ...$tail_want"
        # the sums go out during the backward, each piece to the rank owning it
        nr0=$(grep -c ',comm,reduce [0-9.e+-]* MB to 0,' "$f"); nr1=$(grep -c ',comm,reduce [0-9.e+-]* MB to 1,' "$f")
        nar=$(grep -c ',comm,allreduce' "$f")
        [ "$nr0" -gt 0 ] && [ "$nr1" -gt 0 ] && [ "$nar" -eq 0 ] &&
            pass "$(basename "$f"): $nr0 reduces to rank 0 and $nr1 to rank 1, no all-reduce" ||
            fail "$(basename "$f"): reduces to rank 0 / 1: $nr0 / $nr1, all-reduces $nar"
    done
fi

echo "== a run shorter than the warm-up, grad_accum 2, one process"
short=(--set model.n_layers=3 --set model.dropout=0 --set train.steps=3 --set train.eval_every=0 --set train.grad_accum=2)
"$BIN/gdn-train" "$WORK/m.ini" "${short[@]}" --set train.out_dir="$WORK/ga" --timeline 5 >"$WORK/ga.log" 2>&1 &&
    pass "--timeline 5 of 3 steps: exit 0" || { fail "--timeline 5 of 3 steps"; tail -20 "$WORK/ga.log"; }
"$BIN/gdn-train" "$WORK/m.ini" "${short[@]}" --set train.out_dir="$WORK/ga0" >"$WORK/ga0.log" 2>&1 || fail "grad_accum 2 without --timeline"
check_timeline "$WORK/ga/timeline.csv" 0 1 3 0 "forward mb 0|backward mb 0|forward mb 1" &&
    pass "steps 1-3 recorded: forward mb 0, backward mb 0, forward mb 1, the ranges, norm+update" || fail "grad_accum 2 timeline"
"$BIN/gdn-ckpt" diff "$WORK/ga0/checkpoint.h5" "$WORK/ga/checkpoint.h5" >"$WORK/d1.log" 2>&1 &&
    pass "grad_accum 2: with --timeline == without, bitwise" || { fail "grad_accum 2: --timeline changes the weights"; cat "$WORK/d1.log"; }
"$BIN/gdn-train" "$WORK/m.ini" --timeline 0 >/dev/null 2>"$WORK/e0"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--timeline takes a step count" "$WORK/e0" && pass "--timeline 0: exit 2, says why" || fail "--timeline 0: exit $rc"

echo "== tools/plot-timeline"
if command -v gnuplot >/dev/null; then
    "$SRC/tools/plot-timeline" "$WORK/tl" "$WORK/tl.png" >"$WORK/plot.log" 2>&1 &&
        [ -s "$WORK/tl.png" ] && [ "$(head -c 4 "$WORK/tl.png" | tail -c 3)" = PNG ] &&
        pass "PNG of $(wc -c <"$WORK/tl.png") bytes from every rank's file" || { fail "plot-timeline"; cat "$WORK/plot.log"; }
    "$SRC/tools/plot-timeline" "$WORK/plain" "$WORK/none.png" >/dev/null 2>"$WORK/e1" && fail "plot without a timeline succeeded" ||
        { grep -q "no timeline.csv" "$WORK/e1" && pass "no timeline.csv: fails, says so" || fail "no timeline.csv: $(cat "$WORK/e1")"; }
else
    echo "  skip  tools/plot-timeline: gnuplot not found (apt-get install gnuplot-nox; scripts/setup does)"
fi
finish test_timeline
