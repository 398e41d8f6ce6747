#!/usr/bin/env bash
# run_pending.sh — on the GPU machine: validate main and the docs/pending patches from the
# binaries of bench/build_pending.sh (carry BIN, default .gpubin-pending, and .devdeps).
#   bench/run_pending.sh [SECTION...]      sections: mainchecks (the default), main, hgemm
#   (bench/hopper_gemm.cu); the others need their sessions' patches, in git history: hgemmlin,
#   hgemmdx, attntma, attnbwd3 (session 10, at de27b4a), attnclean (session 8), gdnprefetch
#   (session 6), gdnfinal, gdnscan (session 5), residual, narrow, attention (session 4); gdnfg
#   (session 8) and gdnwgmma (session 7) went with GDN_BWD_WGMMA's levels 1-3 (session 15)
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
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(mainchecks)
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
        # session 9: S1 recompute bwd ~3.66 ms with the then default final kernel, WG 3)
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
