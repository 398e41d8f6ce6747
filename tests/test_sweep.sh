#!/usr/bin/env bash
# test_sweep.sh — tools/sweep on three micro configs (a few steps each) and a broken one:
# results.md has one row per config with the broken one FAILED (and its error), the finished
# ones with parameters, final and best val loss, tokens/s and wall time; val_loss.png is a PNG;
# a rerun skips the finished runs untouched and runs the broken one again; --jobs 2 reruns a
# deleted run and the broken one at once; an unfinished run (a checkpoint, no "done:") starts
# again from scratch in its directory; --seeds runs each config per seed and adds the mean
# and standard deviation per config.
. "$(dirname "$0")/lib.sh"
export GDN_BUILD=$BIN OPENBLAS_NUM_THREADS=1
sweep=$SRC/tools/sweep
make_text "$WORK/text.txt"
"$BIN/gdn-prepare" --input "$WORK/text.txt" --out "$WORK/d.h5" >/dev/null || { fail "gdn-prepare"; finish test_sweep; }
mkdir -p "$WORK/cfg"
write_micro "$WORK/cfg/micro.ini" "$WORK/d.h5" "$WORK/unused"
printf 'include = micro.ini\n' >"$WORK/cfg/m-gs.ini"
printf 'include = micro.ini\n[model]\npattern = G\n' >"$WORK/cfg/m-g.ini"
printf 'include = micro.ini\n[model]\npattern = A\n[train]\nseed = 8\n' >"$WORK/cfg/m-a.ini"
printf 'include = micro.ini\n[gdn]\nno_such_key = 1\n' >"$WORK/cfg/broken.ini"
cfgs=("$WORK/cfg/m-gs.ini" "$WORK/cfg/broken.ini" "$WORK/cfg/m-g.ini" "$WORK/cfg/m-a.ini")
args=(--out "$WORK/sw" --set train.steps=6 --set train.eval_every=3)
md=$WORK/sw/results.md png=$WORK/sw/val_loss.png

# field N (1 = run) of the table row of run $2 in results.md
field() { awk -F' [|] ' -v r="$2" -v n="$1" '$1 == "| " r { print $n }' "$md"; }
num() { awk -v x="$1" 'BEGIN { exit !(x ~ /^[0-9.]+[kM]?$/ && x + 0 > 0) }'; }

echo "== first sweep: 3 micro configs + 1 broken"
"$sweep" "${args[@]}" "${cfgs[@]}" >"$WORK/s1.log" 2>&1
rc=$?
[ $rc -eq 1 ] && pass "exit 1 (a run failed)" || { fail "exit $rc, expected 1"; cat "$WORK/s1.log"; }
[ -f "$md" ] && pass "results.md written" || fail "no results.md"
cat "$md" 2>/dev/null
rows=$(grep -c '^| \(m-gs\|m-g\|m-a\|broken\) |' "$md" 2>/dev/null)
[ "$rows" = 4 ] && pass "4 rows, one per config" || fail "$rows rows, expected 4"
st=$(field 2 broken)
[[ $st == "FAILED (exit 2)"*"no_such_key: unknown key"* ]] && pass "broken config: $st" || fail "broken row status '$st'"
for r in m-gs m-g m-a; do
  ok=1
  [ "$(field 2 $r)" = ok ] || { ok=0; fail "$r: status '$(field 2 $r)'"; }
  for k in 3 4 5 6 7; do num "$(field $k $r)" || { ok=0; fail "$r: column $k is '$(field $k $r)'"; }; done
  [ "$(field 4 $r)" = 960 ] || { ok=0; fail "$r: tokens $(field 4 $r), expected 6 x 4 x 40 = 960"; }
  awk -v f="$(field 5 $r)" -v b="$(field 6 $r)" 'BEGIN { exit !(b <= f + 5e-5) }' || { ok=0; fail "$r: best val $(field 6 $r) > final $(field 5 $r)"; }
  [[ $(field 8 $r) =~ ^[0-9.]+s$ ]] || { ok=0; fail "$r: wall time '$(field 8 $r)'"; }
  [ $ok = 1 ] && pass "$r: ok, $(field 3 $r) params, $(field 4 $r) tokens, val $(field 5 $r) (best $(field 6 $r)), $(field 7 $r) tok/s, $(field 8 $r)"
done
[ "$(field 3 m-a)" != "$(field 3 m-gs)" ] && pass "parameters differ per run (A $(field 3 m-a), GS $(field 3 m-gs))" || fail "same parameter count for A and GS"
want=$(sed -n 's/^done: .*final val loss \([^,]*\),.*/\1/p' "$WORK/sw/m-g/train.log")
[ -n "$want" ] && [ "$(field 5 m-g)" = "$want" ] && pass "final val = the done line's ($want)" || fail "final val '$(field 5 m-g)' vs log '$want'"
magic=$(head -c 8 "$png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$magic" = 89504e470d0a1a0a ] && pass "val_loss.png is a PNG ($(wc -c <"$png") bytes)" || fail "val_loss.png missing or not a PNG (magic '$magic')"

echo "== rerun: finished runs skipped, the broken one runs again"
sum() { cat "$WORK"/sw/m-*/train.log "$WORK"/sw/m-*/metrics.jsonl "$WORK"/sw/m-*/sweep.status | cksum; }
before=$(sum)
"$sweep" "${args[@]}" "${cfgs[@]}" >"$WORK/s2.log" 2>&1
rc=$?
[ $rc -eq 1 ] && pass "exit 1" || fail "rerun exit $rc"
n=$(grep -c '^skipped (finished): m-' "$WORK/s2.log")
[ "$n" = 3 ] && pass "3 runs 'skipped (finished)'" || { fail "$n skipped, expected 3"; cat "$WORK/s2.log"; }
grep -q '^running: broken' "$WORK/s2.log" && pass "broken run retried" || fail "broken run not retried"
[ "$(sum)" = "$before" ] && pass "finished runs untouched (logs, metrics, wall times)" || fail "a finished run was rewritten"
[ "$(grep -c '^| \(m-gs\|m-g\|m-a\|broken\) |' "$md")" = 4 ] && [[ $(field 2 broken) == FAILED* ]] && [ "$(field 2 m-a)" = ok ] &&
  pass "table again: 4 rows, skipped runs still reported ok" || fail "rerun table wrong"

echo "== --jobs 2: a deleted run is redone beside the broken one"
rm -rf "$WORK/sw/m-g"
"$sweep" --jobs 2 "${args[@]}" "${cfgs[@]}" >"$WORK/s3.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q '^running: m-g .* in slot' "$WORK/s3.log" && grep -q '^running: broken .* in slot' "$WORK/s3.log" &&
  pass "exit 1, m-g and broken run in slots" || { fail "--jobs 2 (exit $rc)"; cat "$WORK/s3.log"; }
[ "$(field 2 m-g)" = ok ] && [ "$(field 5 m-g)" = "$want" ] && pass "m-g redone: same final val $want (same seed)" || fail "m-g after --jobs: '$(field 2 m-g)' '$(field 5 m-g)'"
echo "== an unfinished run (its checkpoint and metrics there, no done line) starts again from scratch"
sed -i '/^done: /d' "$WORK/sw/m-gs/train.log"
"$sweep" "${args[@]}" "$WORK/cfg/m-gs.ini" >"$WORK/s5.log" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(field 2 m-gs)" = ok ] && [ "$(grep -c '"loss"' "$WORK/sw/m-gs/metrics.jsonl")" = 6 ] &&
  pass "exit 0, m-gs ok again, 6 steps in its metrics (train.overwrite)" || { fail "unfinished run rerun (exit $rc)"; tail -3 "$WORK/s5.log" "$WORK/sw/m-gs/stderr.log"; }
echo "== --seeds: every config once per seed, and the mean and spread per config"
"$sweep" --out "$WORK/ss" --seeds 1,2 --set train.steps=6 --set train.eval_every=3 "$WORK/cfg/m-gs.ini" "$WORK/cfg/broken.ini" >"$WORK/s4.log" 2>&1
rc=$?
md=$WORK/ss/results.md
[ $rc -eq 1 ] && pass "exit 1 (the broken config failed for both seeds)" || { fail "--seeds exit $rc"; cat "$WORK/s4.log"; }
cat "$md" 2>/dev/null
[ "$(field 2 m-gs-s1)" = ok ] && [ "$(field 2 m-gs-s2)" = ok ] && [[ $(field 2 broken-s1) == FAILED* ]] && [[ $(field 2 broken-s2) == FAILED* ]] &&
    pass "runs m-gs-s1, m-gs-s2 ok; broken-s1, broken-s2 FAILED" || fail "seeded run rows"
grep -q -- '--set train.seed=2 ' "$WORK/ss/m-gs-s2/sweep.cmd" && grep -q '^seed *= 2 ' "$WORK/ss/m-gs-s2/train.log" &&
    pass "m-gs-s2 trained with train.seed = 2" || { fail "seed not passed"; cat "$WORK/ss/m-gs-s2/sweep.cmd"; }
[ "$(field 6 m-gs-s1)" != "$(field 6 m-gs-s2)" ] && pass "the seeds give different runs ($(field 6 m-gs-s1), $(field 6 m-gs-s2))" || fail "two seeds, same best val"
row=$(grep '^| m-gs | ' "$md")
mean=$(awk -F' [|] ' '{ print $3 }' <<<"$row") sdv=$(awk -F' [|] ' '{ print $4 }' <<<"$row")
awk -v a="$(field 6 m-gs-s1)" -v b="$(field 6 m-gs-s2)" -v m="$mean" -v s="$sdv" 'BEGIN {
    mu = (a + b) / 2; d = a - b; sd = sqrt(d * d / 2); exit !(m - mu < 1e-4 && mu - m < 1e-4 && s - sd < 1.5e-4 && sd - s < 1.5e-4) }' &&
    [[ $row == "| m-gs | 2 of 2 | "* ]] && pass "over seeds: m-gs 2 of 2, best val mean $mean, std $sdv" || fail "over-seeds row: $row"
grep -q '^| broken | 0 of 2 | - | - | - |' "$md" && pass "over seeds: broken 0 of 2" || fail "broken over-seeds row: $(grep '^| broken |' "$md")"
"$sweep" --out "$WORK/ss" --seeds 1 --set train.seed=5 "$WORK/cfg/m-gs.ini" >"$WORK/s5.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "give one of them" "$WORK/s5.log" && pass "--seeds with --set train.seed: exit 2, says why" || fail "--seeds + train.seed: exit $rc"
"$sweep" --out "$WORK/ss" --seeds 1,x "$WORK/cfg/m-gs.ini" >"$WORK/s6.log" 2>&1
[ $? -eq 2 ] && pass "--seeds 1,x: exit 2" || fail "--seeds 1,x accepted"
finish test_sweep
