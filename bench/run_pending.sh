#!/usr/bin/env bash
# run_pending.sh — on the GPU machine: validate main and the docs/pending patches from the
# binaries of bench/build_pending.sh (carry BIN, default .gpubin-pending, and .devdeps).
#   bench/run_pending.sh [SECTION...]      sections: hgemmlin (the default), hgemmdx, attntma (session 9's pending
#   patches), hgemm
#   (bench/hopper_gemm.cu), mainchecks, main; gdnfg, attnclean (session 8's pending
#   patches); gdnwgmma (session 7's patch, run in session 8; attnwin's section left with its
#   patch, in git history), gdnprefetch (session 6), gdnfinal, gdnscan (session 5) and residual, narrow, attention (session 4) need those
#   sessions' patches, in git history)
# Logs go to /tmp/pending, their tarball to $OUT; a summary of each section is printed. Estimated times on
# one H200: main ~3.5 min, residual ~2.5 min, narrow ~2.5 min, gdnfinal ~5 min, attention ~3 min;
# a call is at most 10 min, so run two sections per call.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${BIN:-$root/.gpubin-pending}
out=/tmp/pending   # logs here; only their tarball goes to $OUT (the device tool returns <= 8 files)
mkdir -p "$out" data
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
# (gunzip -k: the binaries land next to their .gz; on this machine only: delete them before
# carrying the folder again, or the carry exceeds its 64 MiB)
for z in "$B"/*/*.gz; do [ -e "$z" ] && gunzip -kf "$z"; done
chmod +x "$B"/*/* 2>/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
synth() { [ -f data/synth-32000.h5 ] || python3 bench/make_tokens.py data/synth-32000.h5 --vocab 32000 >/dev/null; }
# f220 DIR NAME: fla-220m, 81 steps: tokens/s at steps 40 and 80
f220() {
    timeout 60 "$B/$1/gdn-train" configs/fla-220m.ini --set train.device=cuda --set train.steps=81 \
        --set train.out_dir=/dev/shm/f220-$2 >"$out/f220-$2.log" 2>&1
    echo "fla-220m ($2): exit $?; $(grep -E '^step +(40|80)/' "$out/f220-$2.log" | cut -d'|' -f1,5,7 | tr '\n' ' ')"
}
# seeds DIR NAME: the bf16 A_log / dt_bias rows of the backend comparisons at four seeds
seeds() {
    for s in 1234 1 2 3; do
        GDN_COMPARE_SEED=$s GDN_COMPARE_ONLY=1 timeout 60 "$B/$1/test_model_cuda" >"$out/cmp-$2-$s.log" 2>&1
        echo "compare ($2, seed $s): exit $?; bf16 A_log rel_err: $(awk '/compare cuda-bf16/ {b=1} b && /gdn.A_log/ {printf "%s ", $4}' "$out/cmp-$2-$s.log")"
    done
}
# hashcmp BASE_LOG NEW_LOG DIFF_FILE: test_gdn_bwd's per-case hashes (GDN_TEST_HASH=1) of two
# runs: identical or how many cases differ (the diff in DIFF_FILE), then per gradient (ghash
# lines, when both print them) in how many cases each one moved
hashcmp() {
    if [ "$(grep -c '^hash' "$2")" -eq 0 ]; then
        echo "hashes: NONE (the tests did not run)"
    elif diff <(grep '^hash' "$1") <(grep '^hash' "$2") >"$3"; then
        echo "hashes: IDENTICAL ($(grep -c '^hash' "$2") cases)"
    else
        echo "hashes: DIFFER in $(grep -c '^>' "$3") of $(grep -c '^hash' "$2") cases"; head -4 "$3"
    fi
    if grep -q '^ghash' "$1" && grep -q '^ghash' "$2"; then
        paste -d' ' <(grep '^ghash' "$1") <(grep '^ghash' "$2") |
            awk '{ for (i = 3; i <= 8; i++) { split($i, a, ":"); split($(i + 8), b, ":"); if (a[2] != b[2]) d[a[1]]++ } }
                 END { printf "gradients that moved (cases):"; for (k in d) printf " %s %d", k, d[k]; print "" }'
    fi
}
# gdn_levels VARIANT "LEVELS" [main]: test_gdn_bwd of main (the base, hashes on) and of VARIANT at
# each GDN_BWD_WGMMA level, with hashcmp against the base and the moved cases by dtype/dk/mode;
# then gdn_bwd_bench twice at each level (first main's too with "main"), alternated
gdn_levels() {
    local v=$1 levels=$2 withmain=${3:-} w r
    GDN_TEST_HASH=1 timeout 240 "$B/main/test_gdn_bwd" >"$out/gdn-base.log" 2>&1
    echo "test_gdn_bwd (main): exit $?; $(tail -1 "$out/gdn-base.log")"
    for w in $levels; do
        GDN_BWD_WGMMA=$w GDN_TEST_HASH=1 timeout 240 "$B/$v/test_gdn_bwd" >"$out/gdn-$v$w.log" 2>&1
        echo "test_gdn_bwd ($v, GDN_BWD_WGMMA=$w): exit $?; $(tail -1 "$out/gdn-$v$w.log")"
        hashcmp "$out/gdn-base.log" "$out/gdn-$v$w.log" "$out/gdn-hashdiff-$v$w.txt"
        grep '^>' "$out/gdn-hashdiff-$v$w.txt" | awk '{print $3}' | cut -d/ -f1,5,8 | sort | uniq -c | head -8
        grep FAIL "$out/gdn-$v$w.log" | head -3
    done
    for r in 1 2; do
        if [ -n "$withmain" ]; then
            timeout 120 "$B/main/gdn_bwd_bench" >"$out/gbb-main-$r.log" 2>&1
            grep '^RESULT' "$out/gbb-main-$r.log" | awk '{print $2, $3, "bwd", $12}' | sed "s/^/main r$r: /"
        fi
        for w in $levels; do
            GDN_BWD_WGMMA=$w timeout 120 "$B/$v/gdn_bwd_bench" >"$out/gbb-$v$w-$r.log" 2>&1
            grep '^RESULT' "$out/gbb-$v$w-$r.log" | awk '{print $2, $3, "bwd", $12}' | sed "s/^/$v level $w r$r: /"
        done
    done
}
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(hgemmlin)
for sec in "${sections[@]}"; do
    echo "== $sec ($(date -u +%H:%M:%S))"
    case $sec in
    main)
        synth
        timeout 120 "$B/main/test_model_cuda" >"$out/test_model_cuda-main.log" 2>&1
        echo "test_model_cuda (main): exit $?; $(tail -1 "$out/test_model_cuda-main.log")"
        grep FAIL "$out/test_model_cuda-main.log" | head -5
        timeout 300 "$B/main/test_cuda_ops" >"$out/test_cuda_ops-main.log" 2>&1
        echo "test_cuda_ops (main): exit $?; $(tail -1 "$out/test_cuda_ops-main.log")"
        grep -E "FAIL|DIFFER" "$out/test_cuda_ops-main.log" | head -5
        f220 main main
        timeout 60 "$B/main/gdn-train" configs/fla-220m.ini --set train.device=cuda --set train.steps=25 \
            --set train.out_dir=/dev/shm/f220p --profile 20 >"$out/profile-main.log" 2>&1
        echo "profile (main): exit $?"; sed -n '/^op /,$p' "$out/profile-main.log" | head -45 ;;
    residual)
        synth
        seeds main main
        seeds residual residual
        f220 residual residual
        timeout 300 "$B/residual/test_cuda_ops" >"$out/test_cuda_ops-residual.log" 2>&1
        echo "test_cuda_ops (residual, with the linear tests): exit $?; $(tail -1 "$out/test_cuda_ops-residual.log")"
        grep -E "FAIL|DIFFER" "$out/test_cuda_ops-residual.log" | head -5
        grep -E "^linear" "$out/test_cuda_ops-residual.log" | awk '{print $NF}' | sort | uniq -c ;;
    narrow)
        synth
        timeout 300 "$B/narrow/test_cuda_ops" >"$out/test_cuda_ops-narrow.log" 2>&1
        echo "test_cuda_ops (narrow): exit $?; $(tail -1 "$out/test_cuda_ops-narrow.log")"
        grep -E "FAIL|DIFFER" "$out/test_cuda_ops-narrow.log" | head -5
        grep -E "^linear" "$out/test_cuda_ops-narrow.log" | awk '{print $NF}' | sort | uniq -c
        f220 narrow narrow
        timeout 60 "$B/narrow/gdn-train" configs/fla-220m.ini --set train.device=cuda --set train.steps=25 \
            --set train.out_dir=/dev/shm/f220pn --profile 20 >"$out/profile-narrow.log" 2>&1
        echo "profile (narrow): exit $?"; sed -n '/^matmuls by shape/,$p' "$out/profile-narrow.log" | head -16 ;;
    gdnfinal | gdnscan | gdnprefetch | gdnrecompute)  # the GDN backward patch $sec against main (hashes, per-gradient ghash, bench)
        GDN_TEST_HASH=1 timeout 240 "$B/main/test_gdn_bwd" >"$out/gdn-base.log" 2>&1
        echo "test_gdn_bwd (main): exit $?; $(tail -1 "$out/gdn-base.log")"
        GDN_TEST_HASH=1 timeout 240 "$B/$sec/test_gdn_bwd" >"$out/gdn-$sec.log" 2>&1
        echo "test_gdn_bwd ($sec): exit $?; $(tail -1 "$out/gdn-$sec.log")"
        hashcmp "$out/gdn-base.log" "$out/gdn-$sec.log" "$out/gdn-hashdiff-$sec.txt"
        for r in 1 2; do
            for v in main $sec; do
                timeout 120 "$B/$v/gdn_bwd_bench" >"$out/gdn_bwd_bench-$v-$r.log" 2>&1
                grep '^RESULT' "$out/gdn_bwd_bench-$v-$r.log" | cut -c1-150 | sed "s/^/$v round $r: /"
            done
        done ;;
    mainchecks)  # main's GPU tests and the GDN backward's speed (attention and GDN must pick wgmma;
        # session 9: S1 recompute bwd ~3.66 ms at GDN_BWD_WGMMA level 3, the default)
        synth
        timeout 200 "$B/main/test_model_cuda" >"$out/tmc-main.log" 2>&1
        echo "test_model_cuda (main): exit $?; $(tail -1 "$out/tmc-main.log")"; grep FAIL "$out/tmc-main.log" | head -3
        timeout 60 "$B/main/test_wgmma" >"$out/test_wgmma-main.log" 2>&1
        echo "test_wgmma (main): exit $?; $(tail -1 "$out/test_wgmma-main.log")"
        timeout 120 "$B/main/test_attention" >"$out/ta-main.log" 2>&1
        echo "test_attention (main): exit $?; $(tail -1 "$out/ta-main.log")"; grep FAIL "$out/ta-main.log" | head -3
        grep -m2 'wgmma' "$out/ta-main.log"
        timeout 120 "$B/main/gdn_bwd_bench" >"$out/gbb-mainchecks.log" 2>&1
        grep '^RESULT' "$out/gbb-mainchecks.log" | awk '{print $2, $3, "bwd", $12}' | sed "s/^/main: /" ;;
    gdnwgmma)  # session 7 patch: the final kernel's products on wgmma, GDN_BWD_WGMMA = 0 / 1 / 2 against main
        gdn_levels gdnwgmma "0 1 2" main ;;
    gdnfg)  # session 8 patch: rows f, g of the GDN final kernel on wgmma (GDN_BWD_WGMMA=3) against level 2
        timeout 60 "$B/gdnfg/test_wgmma" >"$out/test_wgmma-fg.log" 2>&1
        echo "test_wgmma (with m64n32): exit $?; $(tail -1 "$out/test_wgmma-fg.log")"
        gdn_levels gdnfg "2 3" ;;  # level 2: hashes identical to main's; 3: dv, dh0 never move
    hgemmlin | hgemmdx)  # session 9 patches (helpers): our GEMM in linear_cuda (GDN_HGEMM=1) with SwiGLU in
        # the gate/up epilogue (hgemmlin); + the backward's dx on it with SwiGLU's backward in the down
        # projection's dx epilogue (hgemmdx, stacked). Every check of main's test_cuda_ops must still pass.
        v=$sec
        synth
        timeout 300 "$B/$v/test_cuda_ops" >"$out/tco-$v.log" 2>&1
        echo "test_cuda_ops ($v): exit $?; $(tail -1 "$out/tco-$v.log")"
        grep -E "path: |FAIL" "$out/tco-$v.log" | head -40
        timeout 300 "$B/$v/test_model_cuda" >"$out/tmc-$v.log" 2>&1
        echo "test_model_cuda ($v): exit $?; $(tail -1 "$out/tmc-$v.log")"; grep -E "hgemm|FAIL" "$out/tmc-$v.log" | head -8
        for m in 0 1; do
            printf '#!/bin/sh\nGDN_HGEMM=%s exec %s "$@"\n' $m "$B/$v/gdn-train" >"$out/$v$m.sh"
            chmod +x "$out/$v$m.sh"
        done
        bash bench/ab_model.sh "$out/${v}0.sh" "$out/${v}1.sh" 2 2>&1 | tail -4 ;;
    attntma)  # session 9 patch (helper): the wgmma attention forward with a TMA producer warpgroup
        # (GDN_ATTN_WGMMA_FWD3 = 1 / 3 stages / pp / pp3 ping-pong; default off). The watchdog build first (a
        # stuck barrier traps), then the release build: 200/200 with =0, 248/248 with the others (48 bf16
        # forwards bitwise wgmma2's); a "GDN_ATTN_WGMMA_FWD3 ignored" line means it fell back: a failure.
        for w in attntma-wd attntma; do
            for v in 0 1 3 pp pp3; do
                [ $w = attntma-wd ] && [ $v = 0 ] && continue
                GDN_ATTN_WGMMA_FWD3=$v timeout 150 "$B/$w/test_attention" >"$out/ta-$w-$v.log" 2>&1
                echo "test_attention ($w, FWD3=$v): exit $?; $(tail -1 "$out/ta-$w-$v.log")" \
                    "$(grep -c 'FWD3 ignored' "$out/ta-$w-$v.log") fallbacks; $(grep -m1 -E 'bitwise|equal' "$out/ta-$w-$v.log")"
                grep -m3 FAIL "$out/ta-$w-$v.log"
            done
        done
        for v in ${ATTN_TMA_AB:-1 pp}; do  # each A/B ~3x a plain bench run; ATTN_TMA_AB="1 pp 3 pp3" for all
            ATTN_BENCH_FWD3_AB=$v timeout 200 "$B/attntma/attention_bench" >"$out/ab-tma-$v.log" 2>&1
            echo "attention_bench FWD3_AB=$v: exit $?"; grep FWD3_AB "$out/ab-tma-$v.log"
        done ;;
    attnbwd3)  # session 10 patch (helper): both wgmma backward passes fed by a TMA producer warpgroup
        # (GDN_ATTN_WGMMA_BWD3 = 1 / 3 / pp / pp3; default off). The watchdog build first, then the release
        # build: 248/248 with =0, 344/344 with the others (every bf16 backward's dq, dk, dv bitwise the old
        # kernels'; nondet: dk, dv); a "GDN_ATTN_WGMMA_BWD3 ignored" line means it fell back: a failure.
        for w in attnbwd3-wd attnbwd3; do
            for v in 0 1 3 pp pp3; do
                [ $w = attnbwd3-wd ] && [ $v = 0 ] && continue
                GDN_ATTN_WGMMA_BWD3=$v timeout 150 "$B/$w/test_attention" >"$out/tb-$w-$v.log" 2>&1
                echo "test_attention ($w, BWD3=$v): exit $?; $(tail -1 "$out/tb-$w-$v.log")" \
                    "$(grep -c 'BWD3 ignored' "$out/tb-$w-$v.log") fallbacks; $(grep -m1 'backward wgmma3 vs' "$out/tb-$w-$v.log")"
                grep -m3 FAIL "$out/tb-$w-$v.log"
            done
        done
        for v in ${ATTN_BWD3_AB:-1 pp}; do
            ATTN_BENCH_BWD3_AB=$v timeout 200 "$B/attnbwd3/attention_bench" >"$out/ab-bwd3-$v.log" 2>&1
            echo "attention_bench BWD3_AB=$v: exit $?"; grep BWD3_AB "$out/ab-bwd3-$v.log"
        done ;;
    hgemm)  # bench/hopper_gemm.cu (13 variants x 5 shapes; + a pending patch to it if any), bench only.
        # The watchdog build first, one process per variant (a trap ends only that variant's run),
        # then the timing build on the variants whose checks all passed, in one process.
        okv=()
        for v in c256 c128 t256 t256s t128 p256 p128 p256d m256 m256s m256d mp256 mp128; do
            HGEMM_VARIANTS=$v timeout 40 "$B/hgemm/hopper_gemm-wd" >"$out/hgemm-wd-$v.log" 2>&1
            rc=$?
            echo "hopper_gemm-wd $v: exit $rc; $(grep -c '^RESULT.* OK$' "$out/hgemm-wd-$v.log") of 5 OK; $(tail -1 "$out/hgemm-wd-$v.log")"
            grep -E "^RESULT.*FAIL$|error|failure" "$out/hgemm-wd-$v.log" | head -3
            [ $rc -eq 0 ] && grep -q "ALL OK" "$out/hgemm-wd-$v.log" && okv+=("$v")
        done
        if [ ${#okv[@]} -gt 0 ]; then  # the timing build only on variants that passed (no hang risk)
            HGEMM_VARIANTS=$(IFS=,; echo "${okv[*]}") timeout 300 "$B/hgemm/hopper_gemm" >"$out/hgemm.log" 2>&1
            echo "hopper_gemm (${okv[*]}): exit $?"; grep -E "^RESULT|ALL OK|SOME FAILED|error|failure" "$out/hgemm.log" | head -70
        fi ;;
    attnclean)  # session 8 patch: the first wgmma attention forward deleted (the kernels left: PTX identical)
        timeout 120 "$B/attnclean/test_attention" >"$out/ta-clean.log" 2>&1
        echo "test_attention: exit $?; $(grep -m1 'wgmma forward' "$out/ta-clean.log") | $(tail -1 "$out/ta-clean.log")"
        grep FAIL "$out/ta-clean.log" | head -3
        timeout 240 "$B/attnclean/test_model_cuda" >"$out/tmc-clean.log" 2>&1
        echo "test_model_cuda: exit $?; $(tail -1 "$out/tmc-clean.log")" ;;
    attnbwd)  # the wgmma attention backward (session 6 patch): both backwards, then the model
        A=$B/attnbwd
        timeout 30 $A/test_wgmma >"$out/test_wgmma.log" 2>&1
        echo "test_wgmma: exit $?; $(tail -1 "$out/test_wgmma.log")"
        timeout 60 $A/test_attention >"$out/ta-wgmma-bwd.log" 2>&1
        echo "test_attention (wgmma bwd): exit $?; $(tail -1 "$out/ta-wgmma-bwd.log")"; grep FAIL "$out/ta-wgmma-bwd.log" | head -6
        GDN_ATTN_WGMMA_BWD=0 timeout 60 $A/test_attention >"$out/ta-mma-bwd.log" 2>&1
        echo "test_attention (mma.sync bwd): exit $?; $(tail -1 "$out/ta-mma-bwd.log")"; grep FAIL "$out/ta-mma-bwd.log" | head -3
        for r in 1 2; do
            GDN_ATTN_WGMMA_BWD=0 timeout 60 $A/attention_bench >"$out/bench-mma-$r.log" 2>&1
            grep '^RESULT' "$out/bench-mma-$r.log" | sed "s/^/mma.sync bwd, round $r: /"
            timeout 60 $A/attention_bench >"$out/bench-wgmma-$r.log" 2>&1
            grep '^RESULT' "$out/bench-wgmma-$r.log" | sed "s/^/wgmma bwd, round $r: /"
        done
        synth
        timeout 150 $A/test_model_cuda >"$out/tmc-attnbwd.log" 2>&1
        echo "test_model_cuda (wgmma bwd): exit $?; $(tail -1 "$out/tmc-attnbwd.log")"; grep FAIL "$out/tmc-attnbwd.log" | head -3 ;;
    attnfwd2)  # the overlapped wgmma forward (session 6 patch): three forwards, tests and benches
        A=$B/attnfwd2
        for f in 1 0 2; do  # GDN_ATTN_WGMMA_FWD2: 1 = unset (new, 3 stages), 0 = current kernel, 2 = new, 2 stages
            if [ $f = 1 ]; then unset GDN_ATTN_WGMMA_FWD2; else export GDN_ATTN_WGMMA_FWD2=$f; fi
            timeout 60 $A/test_attention >"$out/ta-fwd2-$f.log" 2>&1
            echo "test_attention (FWD2 ${GDN_ATTN_WGMMA_FWD2-unset}): exit $?; $(tail -1 "$out/ta-fwd2-$f.log")"
            grep FAIL "$out/ta-fwd2-$f.log" | head -4
        done
        # meant bitwise equal to the current kernel: the error columns must match row for row
        if diff <(grep -E "pass|FAIL" "$out/ta-fwd2-0.log") <(grep -E "pass|FAIL" "$out/ta-fwd2-1.log") >"$out/ta-fwd2-diff.txt"; then
            echo "test_attention rows: identical (FWD2 0 vs default)"
        else
            echo "test_attention rows: $(grep -c '^>' "$out/ta-fwd2-diff.txt") differ (FWD2 0 vs default)"; head -4 "$out/ta-fwd2-diff.txt"
        fi
        for r in 1 2; do
            for f in 0 1 2; do
                if [ $f = 1 ]; then unset GDN_ATTN_WGMMA_FWD2; else export GDN_ATTN_WGMMA_FWD2=$f; fi
                timeout 60 $A/attention_bench >"$out/bench-fwd2-$f-$r.log" 2>&1
                grep '^RESULT' "$out/bench-fwd2-$f-$r.log" | cut -d' ' -f2-9 | sed "s/^/FWD2 ${GDN_ATTN_WGMMA_FWD2-unset}, round $r: /"
            done
        done
        unset GDN_ATTN_WGMMA_FWD2 ;;
    attention)
        for v in main attention; do
            mkdir -p "$out/attn-$v"
            timeout 240 "$B/$v/test_attention" >"$out/attn-$v/test_attention.log" 2>&1
            echo "test_attention ($v): exit $?; $(tail -1 "$out/attn-$v/test_attention.log")"
            grep -E "FAIL|DIFFER" "$out/attn-$v/test_attention.log" | head -5
            timeout 90 "$B/$v/attention_bench" >"$out/attn-$v/attention_bench.log" 2>&1
            grep '^RESULT' "$out/attn-$v/attention_bench.log" | sed "s/^/$v: /"
        done
        # the patched bench prints a mode column: the patch's own parser (copied by build_pending.sh)
        PYTHONUNBUFFERED=1 timeout 200 python3 "$B/attention/attention_torch.py" "$out/attn-attention/attention_bench.log" \
            >"$out/attn-attention/attention_torch.log" 2>&1
        echo "PyTorch: exit $?"; tail -12 "$out/attn-attention/attention_torch.log" ;;
    *) echo "run_pending: unknown section '$sec' (mainchecks, main; the others need their sessions' patches, in git history)"; exit 2 ;;
    esac
done
(cd "$out" && tar czf "${OUT:-$out}/pending-logs.tar.gz" --exclude=pending-logs.tar.gz . 2>/dev/null)
