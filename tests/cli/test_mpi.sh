#!/usr/bin/env bash
# Distributed tuning (dist/, docs/distributed.md): `mpirun -np 3 kgen tune` on this machine (shared memory, no
# network): every trial logged once, records from several ranks and `kgen show` spreading them, resume adding only
# new schedules, a rank that stops answering dropped and its candidates measured by the others, and a rank killed
# in the middle ending the job with every received result in the log. The refusal of a kgen built without MPI is
# tests/test_dist_nompi.c's.
set -u
. "$(dirname "$0")/common.inc"

if ! $K --version | grep -q "built with MPI"; then
  echo "skip: $K is built without MPI (make deps installs libopenmpi-dev and openmpi-bin, then rebuild)"
  exit 0
fi
if ! command -v mpirun >/dev/null; then
  echo "skip: no mpirun (Debian: openmpi-bin)"
  exit 0
fi
# Every run is bounded: a hang fails this test (exit 124) instead of holding up `make test`; a run here takes seconds.
LIMIT=300
# one machine: ranks talk through shared memory (no single-copy mechanism: containers often forbid the ptrace it
# needs); as root OpenMPI wants to be told; three ranks on fewer cores need --oversubscribe
MPIRUN=(timeout -k 10 $LIMIT mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np 3)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
# under the sanitizers: leaks inside the MPI libraries are theirs. Their plugins stay loaded and stacks are unwound
# the slow way (the libraries have no frame pointers), so that each leak names its library, which the suppressions
# match; kgen's own leaks are still reported.
if nm "$K" 2>/dev/null | grep -q __asan_init; then
  printf 'leak:libmpi\nleak:libopen-pal\nleak:libopen-rte\nleak:libpmix\nleak:libevent\nleak:libhwloc\nleak:mca_\n' \
    > "$T/lsan.supp"
  export LSAN_OPTIONS="suppressions=$T/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
  MPIRUN+=(--mca mca_base_component_disable_dlclose 1)
fi
export TMPDIR="$T" # the ranks' run lock (and build folders) this test's own
export KGEN_TEST_TAG="$T" # marks this test's ranks, to find rank 2 among the machine's processes
# (--confirm 0: the search alone, whose records the checks count; the rank-0-idle run below confirms)
W=(matmul -D M=64 -D N=48 -D K=40 --target c --per-round 4 --population 64 --min-repeat-ms 5 --timeout 120 --confirm 0)
PY=/usr/bin/python3
L="$T/mpi.kglog"

records() { $K show "$1" 2>/dev/null | sed -n 's/^  records: \([0-9]*\).*/\1/p' | head -1; }
dups() { "$PY" "$(dirname "$0")/kglog.py" dups "$1" | sed -n "s/.*duplicates \([0-9]*\).*/\1/p"; }
# the pid of this test's rank R (its environment holds the tag and its rank)
rank_pid() {
  local p
  for p in $(pgrep -f "kgen tune matmul"); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "KGEN_TEST_TAG=$T" || continue
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
# waits (at most 120 s) until log $1 holds at least $2 records
wait_records() {
  local i n
  for i in $(seq 600); do
    n=$(records "$1"); [ "${n:-0}" -ge "$2" ] && return 0
    sleep 0.2
  done
  return 1
}

expect 0 "3-rank tune" -- "${MPIRUN[@]}" $K tune "${W[@]}" --trials 24 --log "$L" --seed 3
has err "distributed over 3 MPI ranks: 3 measure, on 1 target" "the ranks and their targets"
has out "trials: 24 this run \(0 failed\), 0 from the log" "the budget, all of it"
has out "^ranks: 3 measuring of 3; results per rank: [0-9]+ [0-9]+ [0-9]+" "results per rank"
expect 0 "show" -- $K show "$L"
has out "records: 24 \(ok 24\)" "every trial logged once"
has out "measured by 3 workers: " "the spread over the ranks"
n0=$(grep -oE "rank 0 on [^ ]+ [0-9]+" "$T/out" | awk '{print $NF}')
n1=$(grep -oE "rank 1 on [^ ]+ [0-9]+" "$T/out" | awk '{print $NF}')
n2=$(grep -oE "rank 2 on [^ ]+ [0-9]+" "$T/out" | awk '{print $NF}')
[ "${n0:-0}" -gt 0 ] && [ "${n1:-0}" -gt 0 ] && [ "${n2:-0}" -gt 0 ] && [ $((n0 + n1 + n2)) -eq 24 ] ||
  { echo "FAIL (every rank measured, 24 in all): $n0 + $n1 + $n2"; fail=1; }
d=$(dups "$L"); [ "$d" = 0 ] || { echo "FAIL (no schedule measured twice): $d"; fail=1; }

expect 0 "resume" -- "${MPIRUN[@]}" $K tune "${W[@]}" --trials 8 --log "$L" --seed 3 --quiet
has out "trials: 8 this run \(0 failed\), 24 from the log" "resumed from the log"
[ "$(records "$L")" = 32 ] || { echo "FAIL (resume adds 8 records): $(records "$L")"; fail=1; }
d=$(dups "$L"); [ "$d" = 0 ] || { echo "FAIL (resume measures nothing again): $d"; fail=1; }

# rank 2 stops (SIGSTOP) after a few records, while it holds the run lock that ranks sharing a machine take turns
# on (runtime/measure.h: run_lock; the run's own, under TMPDIR): the others do not wait for a stopped holder, rank
# 2 alone is dropped after --worker-timeout, and the others finish the budget. (A stopped holder once left the
# others waiting on the lock for ever, and the whole run hung.)
L2="$T/stop.kglog"
LOCK="$T/kgen-runs-$(id -u).lock"
# the timeout leaves a running rank room for a batch: its builds, a second's wait before it sees the holder stopped,
# its runs; 4 s once dropped rank 1 too under the sanitizers on a loaded 2-core machine
WT=10
"${MPIRUN[@]}" $K tune "${W[@]}" --trials 40 --log "$L2" --seed 4 --worker-timeout $WT \
  --min-repeat-ms 40 >"$T/stop.out" 2>"$T/stop.err" &
job=$! t0=$SECONDS
if wait_records "$L2" 6 && p=$(rank_pid 2) && [ -n "$p" ]; then
  held=0
  # stopped at a moment when it holds the lock: the file names it and the lock is taken, and both still hold a
  # moment later (another rank that has just taken the lock writes its own pid within microseconds; rank 2,
  # stopped, can change nothing)
  holds2() { [ "$(head -1 "$LOCK" 2>/dev/null)" = "$p" ] && ! flock -n "$LOCK" true; }
  for i in $(seq 300); do
    kill -STOP "$p"
    holds2 && sleep 0.1 && holds2 && { held=1; break; }
    kill -CONT "$p"
    sleep 0.03
  done
  [ $held = 1 ] || { echo "FAIL (rank 2 never seen holding the run lock $LOCK)"; fail=1; }
  # rank 0 ends the run with MPI_Abort once its summary is out (a dropped rank cannot join MPI_Finalize); a rank
  # that stays stopped can keep OpenMPI's launcher from finishing the abort (seen once in CI: mpirun stuck after an
  # ORTE show_help error), so the stopped rank is killed then, as whoever stopped it would, and mpirun's exit status
  # (which then depends on which it hears of first) is not asserted beyond "not hung"
  for i in $(seq 1200); do
    grep -q "trials: 40 this run" "$T/stop.out" 2>/dev/null && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$p" 2>/dev/null
  wait $job; rc=$?
  [ $((SECONDS - t0)) -lt $LIMIT ] || { echo "FAIL (the run with a stopped rank hung): exit $rc"; tail -20 "$T/stop.err"; fail=1; }
  grep -q "rank 2 on .* gave no answer for $WT s" "$T/stop.err" || { echo "FAIL (the drop said)"; tail "$T/stop.err"; fail=1; }
  ! grep -qE "rank [01] on .* gave no answer" "$T/stop.err" ||
    { echo "FAIL (only the stopped rank is dropped)"; tail "$T/stop.err"; fail=1; }
  grep -qE "rank [01] on .*: the process holding the run lock .* is stopped" "$T/stop.err" ||
    { echo "FAIL (measuring without the lock said)"; tail "$T/stop.err"; fail=1; }
  grep -q "trials: 40 this run" "$T/stop.out" || { echo "FAIL (the budget spent without rank 2)"; tail "$T/stop.out"; fail=1; }
  [ "$(records "$L2")" = 40 ] || { echo "FAIL (40 records): $(records "$L2")"; fail=1; }
  d=$(dups "$L2"); [ "$d" = 0 ] || { echo "FAIL (re-sent candidates logged once): $d"; fail=1; }
else
  echo "FAIL (the run with a stopped rank did not start: no rank 2 or no records)"; fail=1
  kill $job 2>/dev/null; wait $job
fi

# rank 2 killed: the launcher ends the job; what rank 0 received is in the log, and a resume goes on from it
L3="$T/kill.kglog"
"${MPIRUN[@]}" $K tune "${W[@]}" --trials 400 --log "$L3" --seed 5 --min-repeat-ms 40 >"$T/kill.out" 2>"$T/kill.err" &
job=$!
if wait_records "$L3" 6 && p=$(rank_pid 2) && [ -n "$p" ]; then
  kill -KILL "$p"
  wait $job; rc=$?
  [ $rc -ne 0 ] || { echo "FAIL (a killed rank ends the job with an error)"; fail=1; }
  n=$(records "$L3")
  got=$(sed -n 's/^  trials: \([0-9]*\) this run.*/\1/p' "$T/kill.out")
  [ -n "$got" ] && [ "$n" = "$got" ] ||
    { echo "FAIL (every result rank 0 took is in the log): log $n, rank 0 took ${got:-?}"; tail "$T/kill.err"; fail=1; }
  $K show "$L3" >/dev/null 2>"$T/show.err"
  ! grep -q "corrupt" "$T/show.err" || { echo "FAIL (the log intact)"; cat "$T/show.err"; fail=1; }
  expect 0 "resume after the kill" -- "${MPIRUN[@]}" $K tune "${W[@]}" --trials 6 --log "$L3" --seed 5 --quiet
  has out "trials: 6 this run \(0 failed\), $n from the log" "resumed"
  d=$(dups "$L3"); [ "$d" = 0 ] || { echo "FAIL (nothing measured twice after the kill): $d"; fail=1; }
else
  echo "FAIL (the run to kill did not start)"; fail=1
  kill $job 2>/dev/null; wait $job
fi

# a range tuning (dynamic M): its buckets' searches measured by the ranks too
expect 0 "3-rank range tuning" -- "${MPIRUN[@]}" $K tune matmul -D N=32 -D K=32 --dynamic M=1..64 --buckets 2 \
  --target c --trials 12 --per-round 4 --population 32 --min-repeat-ms 5 --timeout 120 --log "$T/dyn.kglog" --quiet \
  --confirm 0
has out "2 buckets, .* 1[2-9] trials" "the buckets tuned"
has out "^ranks: 3 measuring of 3; results per rank: [0-9]+ [0-9]+ [0-9]+" "results per rank"
d=$(dups "$T/dyn.kglog"); [ "$d" = 0 ] || { echo "FAIL (range tuning: nothing measured twice): $d"; fail=1; }

# options of a distributed run refuse without a launcher
expect 2 "--rank0-idle alone" -- $K tune "${W[@]}" --trials 2 --log "$T/x.kglog" --rank0-idle
has err "go with a tuning under mpirun" "said why"
# rank 0 only searching: the two others measure everything, the confirmation too
expect 0 "rank 0 idle" -- "${MPIRUN[@]}" $K tune "${W[@]}" --trials 8 --log "$T/idle.kglog" --rank0-idle --quiet \
  --confirm 2 --confirm-runs 1
has out "results per rank: 0 [0-9]+ [0-9]+" "rank 0 measured nothing"
has out "confirmed: [2-4] more measurements of the fastest" "the workers measured the confirmation"
[ "$(records "$T/idle.kglog")" -ge 10 ] || { echo "FAIL (8 trials and the confirmation logged): $(records "$T/idle.kglog")"; fail=1; }
exit $fail
