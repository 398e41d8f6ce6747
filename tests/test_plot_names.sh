#!/usr/bin/env bash
# test_plot_names.sh — tools/plot, tools/plot-timeline and tools/sweep hand run-directory and
# file names to gnuplot as data, never as command text. Hostile names: a plain quote, a quote
# followed by `system("touch ...")`, a double quote with system(), a backquote command, spaces,
# a backslash, a newline, a leading '|' (gnuplot's "pipe the output to a command" prefix), '@'
# (gnuplot's macro sign). For each: the PNG is made (PNG magic) and no marker file appears
# (no command ran). tools/plot-timeline also gets a CSV whose step and stream fields carry
# commands: refused with a message, nothing run. tools/sweep: a config file and an --out folder
# with hostile names; the run finishes and val_loss.png is made, nothing run.
# Control (the checks can fail): the marker check sees a `touch` that gnuplot's system() does run.
. "$(dirname "$0")/lib.sh"
command -v gnuplot >/dev/null || { echo "SKIPPED: gnuplot not found (apt-get install gnuplot-nox)"; exit 77; }
cd "$WORK" || exit 1
M=PWNED   # every injected command touches a file named so, relative: gnuplot runs in $WORK

# names: each a run directory under $WORK/runs (a relative name; '|' names stay relative so a
# path that gnuplot read as command text would be a pipe)
names=(
    "it's"
    "x'; system('touch $M-1'); '"
    "x\"; system(\"touch $M-2\"); \""
    "\`touch $M-3\`"
    "with spaces and  two"
    'back\slash\'
    $'new\nline'
    "|touch $M-4; true "
    "@x ;touch $M-5"
)
pwned() { ls "$WORK" | grep -q '^PWNED'; }
is_png() { [ -s "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '211PNG' ]; }

echo "== control: gnuplot's system() runs a command (the marker check can fail)"
printf 'system("touch %s-control")\n' "$M" | gnuplot
pwned && pass "marker seen" || fail "gnuplot did not run the control command"
rm -f "$WORK/$M"-*

echo "== tools/plot"
mkdir -p runs
for n in "${names[@]}"; do
    d=runs/$n
    mkdir -p "$d"
    for s in 1 2 3; do
        printf '{"step": %d, "tokens": %d, "loss": %s, "lr": 0.001}\n' $s $((s * 100)) "2.$s"
    done >"$d/metrics.jsonl"
    printf '{"step": 3, "tokens": 300, "val_loss": 2.5}\n' >>"$d/metrics.jsonl"
    shown=$(printf '%q' "$n")
    if "$SRC/tools/plot" "$d" >plot.log 2>&1 && is_png "$d/loss.png" && ! pwned; then
        pass "run dir $shown: PNG, no command ran"
    else
        fail "run dir $shown"; cat plot.log; ls "$WORK"
    fi
    rm -f "$WORK/$M"-*
    # the output named explicitly, relative, as hostile as the folder
    if "$SRC/tools/plot" "$d" "$n.png" >plot.log 2>&1 && is_png "$n.png" && ! pwned; then
        pass "output file $(printf '%q' "$n.png"): PNG, no command ran"
    else
        fail "output $(printf '%q' "$n.png")"; cat plot.log
    fi
    rm -f "$WORK/$M"-* "$n.png"
done

echo "== tools/plot-timeline"
tl_header="step,rank,stream,name,start_ms,end_ms"
for n in "${names[@]}"; do
    d=tl/$n
    mkdir -p "$d"
    printf '%s\n3,0,compute,forward,0.0000,1.5000\n3,0,compute,bwd layer 0,1.5000,3.0000\n' "$tl_header" >"$d/timeline.csv"
    printf '%s\n3,1,compute,forward,0.0000,1.4000\n3,1,comm,allreduce "x\x27,0.5000,2.0000\n' "$tl_header" >"$d/timeline.rank1.csv"
    if "$SRC/tools/plot-timeline" "$d" >plot.log 2>&1 && is_png "$d/timeline.png" && ! pwned; then
        pass "timeline dir $(printf '%q' "$n"): PNG, no command ran"
    else
        fail "timeline dir $(printf '%q' "$n")"; cat plot.log
    fi
    rm -f "$WORK/$M"-*
done
# fields gnuplot would have read as command text: the step (a panel's filter), rank and stream
# (the row labels)
for bad in "3) ; system(\"touch $M-6\"); (3,0,compute,forward,0,1" \
           "3,0,comp\"); system(\"touch $M-7\"); (\",forward,0,1" \
           "3,0 x'; system('touch $M-8'),compute,forward,0,1"; do
    printf '%s\n%s\n' "$tl_header" "$bad" >bad.csv
    if "$SRC/tools/plot-timeline" bad.csv bad.png >plot.log 2>&1; then
        fail "timeline row '$bad' accepted"
    elif pwned; then
        fail "timeline row '$bad': a command ran"
    elif grep -q "error: .*bad.csv line 2" plot.log; then
        pass "timeline row refused, naming the line: $(head -1 plot.log)"
    else
        fail "timeline row '$bad': no clear message"; cat plot.log
    fi
    rm -f "$WORK/$M"-*
done

echo "== tools/sweep"
make_text text.txt
"$BIN/gdn-prepare" --input text.txt --out d.h5 >/dev/null || { fail "gdn-prepare"; finish test_plot_names; }
mkdir -p cfg
write_micro cfg/micro.ini "$WORK/d.h5" "$WORK/unused"
cfgname="q'\"; system(\"touch $M-9\"); \`touch $M-10\` x"
printf 'include = micro.ini\n' >"cfg/$cfgname.ini"
out="sw it's \"; system(\"touch $M-11\")"
if OPENBLAS_NUM_THREADS=1 GDN_BUILD=$BIN "$SRC/tools/sweep" --out "$out" --set train.steps=4 \
        --set train.eval_every=2 "cfg/$cfgname.ini" >sweep.log 2>&1 &&
   is_png "$out/val_loss.png" && ! pwned; then
    pass "sweep of a hostile config name into a hostile --out: val_loss.png, no command ran"
else
    fail "sweep"; cat sweep.log; ls "$WORK"
fi
finish test_plot_names
