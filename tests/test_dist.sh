#!/usr/bin/env bash
# test_dist.sh — the communicator under real launchers (tests/test_dist_mpi.c does the checks):
#   mpirun -np 1, 2, 3: collectives on MPI (closed forms, 1e-12 vs the rank-order sum, bytes
#     identical on every rank, reduce-scatter + allgather == allreduce, bcast, scalars);
#   failure paths, each must end the whole job, non-zero, never hang:
#     rank 1 skips a collective -> rank 0's watchdog aborts after timeout_s (message names the
#       collective and the rank; elapsed within timeout_s + 5 s),
#     rank 1 exits 3 before a collective -> mpirun ends rank 0 long before its watchdog;
#   dist_init("nccl") under mpirun sends rank 0's NCCL id by MPI_Bcast (stand-in NCCL backend);
#   dist_spawn_local (--gpus N): 3 local workers with RANK/WORLD_SIZE/... and the NCCL-id file
#     exchange; a worker that exits 3 -> the parent stops the others and returns 3 at once.
# Exit 77 (skipped) only when mpirun is absent (scripts/setup installs openmpi-bin).
set -u
BIN="${GDN_BINARY_DIR:-$(pwd)}/test_dist_mpi"
[ -x "$BIN" ] || { echo "test_dist_mpi not built at $BIN"; exit 1; }
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: mpirun not found (install openmpi-bin: scripts/setup does)"
    exit 77
fi
if ! "$BIN" has-mpi; then
    echo "FAIL: mpirun is installed but gdn was built without MPI (CMake's find_package(MPI)"
    echo "      failed: install libopenmpi-dev, then reconfigure)"
    exit 1
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/gdn-test-dist-XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# Containers often forbid the cross-memory-attach copy of OpenMPI's shared-memory transport.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# OpenMPI's own allocations at exit are not ours to report (AddressSanitizer builds).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
fails=0
checks=0

report() {  # report OK(0/1) DESCRIPTION
    checks=$((checks + 1))
    if [ "$1" -eq 1 ]; then printf '  %-86s pass\n' "$2"
    else printf '  %-86s FAIL\n' "$2"; fails=$((fails + 1)); fi
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
show() {  # show FILE: the lines a reader needs when something fails
    sed 's/^/    | /' "$1" | head -n 40
}

echo "== collectives under mpirun"
for np in 1 2 3; do
    t0=$(now_ms)
    timeout 120 "${MPIRUN[@]}" -np "$np" "$BIN" >"$TMP/np$np.log" 2>&1
    rc=$?
    ms=$(( $(now_ms) - t0 ))
    summaries=$(grep -c "^test_dist_mpi (mpirun): [0-9]* checks, 0 failed" "$TMP/np$np.log")
    ran=$(grep -m1 -o "^test_dist_mpi (mpirun): [0-9]* checks" "$TMP/np$np.log" |
          grep -o "[0-9]* checks")
    ok=0; [ "$rc" -eq 0 ] && [ "$summaries" -eq "$np" ] && ok=1
    report $ok "mpirun -np $np: rc $rc, $summaries of $np ranks passed all ${ran:-?} (${ms} ms)"
    [ $ok -eq 1 ] || show "$TMP/np$np.log"
done
grep -h "random\|identical\|n=1001 " "$TMP/np2.log" | sed 's/^/    /'

echo "== NCCL id by MPI_Bcast under mpirun (stand-in NCCL backend)"
timeout 60 "${MPIRUN[@]}" -np 3 "$BIN" nccl-id >"$TMP/ncclid.log" 2>&1
rc=$?
n_ok=$(grep -c "NCCL id by MPI_Bcast: same on every rank" "$TMP/ncclid.log")
ok=0; [ "$rc" -eq 0 ] && [ "$n_ok" -eq 3 ] && ok=1
report $ok "mpirun -np 3: rc $rc, $n_ok of 3 ranks hold rank 0's id"
[ $ok -eq 1 ] || show "$TMP/ncclid.log"

echo "== a rank skips a collective: the watchdog ends the job"
T=2
t0=$(now_ms)
timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" timeout $T >"$TMP/timeout.log" 2>&1
rc=$?
ms=$(( $(now_ms) - t0 ))
msg="rank 0/2 (mpi): watchdog: collective allreduce_sum_f64 (n=4) has not finished after"
ok=0
grep -qF "$msg" "$TMP/timeout.log" && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
    [ $ms -ge $((T * 1000)) ] && [ $ms -le $(((T + 5) * 1000)) ] && ok=1
report $ok "timeout_s=$T: rc $rc after $ms ms (want non-zero within [$T, $((T + 5))] s), message"
grep -F "watchdog" "$TMP/timeout.log" | sed 's/^/    /'
[ $ok -eq 1 ] || show "$TMP/timeout.log"

echo "== a rank dies before a collective: the launcher ends the job"
t0=$(now_ms)
timeout 60 "${MPIRUN[@]}" -np 2 "$BIN" die >"$TMP/die.log" 2>&1
rc=$?
ms=$(( $(now_ms) - t0 ))
ok=0
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ $ms -le 10000 ] &&
    grep -qF "rank 1: exiting with 3" "$TMP/die.log" && ! grep -qF ": FAIL" "$TMP/die.log" && ok=1
report $ok "rank 1 exits 3: rc $rc after $ms ms (want non-zero within 10 s; watchdog at 60 s)"
[ $ok -eq 1 ] || show "$TMP/die.log"

echo "== dist_spawn_local (--gpus N): local workers"
t0=$(now_ms)
timeout 60 "$BIN" spawn >"$TMP/spawn.log" 2>&1
rc=$?
ms=$(( $(now_ms) - t0 ))
n_ok=$(grep -c "env ok, id from .* matches rank 0's" "$TMP/spawn.log")
ok=0
[ "$rc" -eq 0 ] && [ "$n_ok" -eq 3 ] && grep -qF "id file removed" "$TMP/spawn.log" && ok=1
report $ok "3 workers: rc $rc, $n_ok of 3 got env + NCCL id by file, rank 0 removed it ($ms ms)"
sed 's/^/    /' "$TMP/spawn.log"

t0=$(now_ms)
timeout 60 "$BIN" spawn-fail >"$TMP/spawnf.log" 2>&1
rc=$?
ms=$(( $(now_ms) - t0 ))
ok=0
[ "$rc" -eq 3 ] && [ $ms -le 10000 ] &&
    grep -qF "worker 1 exited with 3; stopping the other 2 worker(s)" "$TMP/spawnf.log" && ok=1
report $ok "worker 1 exits 3, others hang: parent returns $rc after $ms ms (want 3 within 10 s)"
[ $ok -eq 1 ] || show "$TMP/spawnf.log"

echo
echo "test_dist.sh: $checks checks, $fails failed"
[ $fails -eq 0 ]
