#!/usr/bin/env bash
# `kgen tune` and `kgen show`: usage errors, a short run on the C target with its summary, the log read back by
# show (whole and --best), resuming from the log, a corrupt log, and the best trace written with --best-out
# running and verifying with `kgen run`.
set -u
. "$(dirname "$0")/common.inc"

expect 2 "tune without workload" -- $K tune --target c
expect 2 "bad trials" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --trials x
expect 2 "bad model" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --model forest
expect 2 "unknown option" -- $K tune matmul --frob
expect 1 "unbound size" -- $K tune matmul -D M=8 --target c --log "$T/x.kglog"
has err "not bound" "the checker's message"
expect 2 "show without log" -- $K show
expect 1 "show a missing log" -- $K show "$T/none.kglog"

L="$T/mm.kglog"
expect 0 "short tuning" -- $K tune matmul -D M=64 -D N=48 -D K=40 --target c --trials 20 --per-round 10 \
  --population 64 --min-repeat-ms 5 --log "$L" --seed 2 --best-out "$T/best.sched"
has out "matmul M=64 K=40 N=48 on c" "summary header"
has out "trials: 20 this run" "trial count"
has out "default schedule: " "default time"
has out "best: .*GFLOP/s" "best line"
has out "log: $L" "where the log went"
has err "\[20/20 trials\]" "progress line"
# the confirmation (default: the 3 fastest, 2 more runs each; more when a trace measured once then ranks first)
has err "confirming the 3 fastest schedules \(2 more runs each\)" "the confirmation is announced"
has out "confirmed: [0-9]+ more measurements of the fastest" "the confirmation's summary"
NC=$(sed -n 's/.*confirmed: \([0-9]*\) more.*/\1/p' "$T/out")
[ "${NC:-0}" -ge 6 ] && [ "${NC:-0}" -le 12 ] || { echo "FAIL: $NC confirmation measurements, want 6 to 12"; fail=1; NC=6; }
[ -s "$L.model" ] || { echo "FAIL: no model beside the log"; fail=1; }
expect 0 "best trace runs" -- $K run matmul -D M=64 -D N=48 -D K=40 --target c --schedule "$T/best.sched"
has out "verify: ok" "the best schedule verifies"

expect 0 "show" -- $K show "$L"
has out "matmul" "workload named"
has out "M=64" "sizes shown"
has out "records: $((20 + NC)) " "record count: the trials and the confirmation's"
expect 0 "show --best" -- $K show "$L" --best
has out "ms|us" "a time"
has out "median of 3 records" "the best is a confirmed trace, ranked by its median"
# tune's best is the log's best (show names the default schedule, whose trace has no steps, so; on a loaded
# machine the confirmation can find the tuned schedules slower than the default)
sed -n 's/^    //p' "$T/out" | grep -v '^(default schedule)$' > "$T/show-best.sched"
grep -v '^#' "$T/best.sched" | sed '/^$/d' > "$T/best-steps.sched"
cmp -s "$T/show-best.sched" "$T/best-steps.sched" || { echo "FAIL: --best-out and show --best differ"; fail=1; }
expect 2 "bad --confirm" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --confirm x
expect 2 "bad --confirm-runs" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --confirm-runs 0

# (--timeout 120: a busy machine must not make a slow candidate a failed one)
expect 0 "resume" -- $K tune matmul -D M=64 -D N=48 -D K=40 --target c --trials 5 --per-round 5 \
  --population 64 --min-repeat-ms 5 --log "$L" --seed 2 --quiet --timeout 120 --confirm 0
has out "trials: 5 this run \(0 failed\), $((20 + NC)) from the log" "resumed from the log"

# garbage appended: the tuner warns, keeps every intact record and goes on
head -c 300 /dev/urandom >> "$L"
expect 0 "resume after garbage" -- $K tune matmul -D M=64 -D N=48 -D K=40 --target c --trials 2 --per-round 2 \
  --population 64 --min-repeat-ms 5 --log "$L" --quiet --confirm 0
has err "corrupt part" "warning about the corrupt part"
has out "$((25 + NC)) from the log" "intact records kept"
expect 0 "show a log with garbage" -- $K show "$L"
has err "warning: .*: skipped [0-9]+ bytes at offset [0-9]+ \(not a record\)" "show says what it skipped, on stderr"

# a tuning stopped in the middle of a round keeps what it had measured: a round is measured and logged a few
# candidates at a time (search/tune.c), not all at its end (a cut 7-minute round of a large MLP once left a log
# holding the default schedule alone). One round of 48; stopped once a first part of it is in the log, the log
# must hold that part and not the whole round.
records_of() { $K show "$1" 2> /dev/null | sed -n 's/^  records: \([0-9]*\).*/\1/p' | head -1; }
$K tune matmul -D M=160 -D N=160 -D K=160 --target c --trials 48 --per-round 48 --min-repeat-ms 200 \
  --log "$T/cut.kglog" --quiet > "$T/cut.out" 2>&1 &
pid=$!
for _ in $(seq 1800); do # up to 3 minutes (the sanitizers)
  n=$(records_of "$T/cut.kglog")
  [ "${n:-0}" -ge 3 ] && break
  kill -0 $pid 2> /dev/null || break
  sleep 0.1
done
kill -TERM $pid 2> /dev/null
wait $pid 2> /dev/null
n=$(records_of "$T/cut.kglog")
# (a part is at most 32 candidates; the old tuner logged the whole round, 48 records, at once)
if [ "${n:-0}" -lt 3 ] || [ "$n" -gt 40 ]; then
  echo "FAIL: a tuning stopped in its first round left ${n:-no} records (wanted 3 to 40: the default schedule and the" \
    "parts of the round measured before the stop)"
  cat "$T/cut.out"
  fail=1
fi

# the CUDA target's search space, measured on the emulator (no GPU needed): every candidate verifies
expect 0 "tuning on the emulator" -- $K tune matmul -D M=33 -D N=20 -D K=17 --emulate --trials 8 --per-round 4 \
  --population 64 --log "$T/emu.kglog" --quiet --timeout 120
has out "on emulator" "emulator named"
has out "trials: 8 this run \(0 failed\)" "every emulated candidate ran correctly"
expect 0 "show the emulator log" -- $K show "$T/emu.kglog"
has out "records: 8 \(ok 8\)" "all ok"
has out "sketch gpu/" "a GPU sketch won"
if ! $K run matmul -D M=2 -D N=2 -D K=2 --target cuda >/dev/null 2>&1; then
  expect 3 "tuning on a GPU without one" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target cuda --log "$T/g.kglog"
fi

# bench/confirm-bias.sh: the search's pick and the confirmed pick of one log, measured again side by side
if /usr/bin/python3 -c 'import msgpack' 2> /dev/null; then
  expect 0 "bench/confirm-bias.sh" -- env KGEN="$K" TRIALS=6 ROUNDS=1 bench/confirm-bias.sh "$T/cb" matmul -D M=64 \
    -D N=48 -D K=40
  has out "confirmed: [0-9]+ more measurements" "it tuned with the confirmation"
  for pick in search confirmed; do
    grep -qE "^$pick: logged [0-9.]+ ms, measured again [0-9.]+ ms \(logged / again [0-9.]+\)" "$T/cb/result.txt" ||
      { echo "FAIL: no figures for the $pick pick in result.txt"; cat "$T/cb/result.txt" 2> /dev/null; fail=1; }
  done
  $K run matmul -D M=64 -D N=48 -D K=40 --target c --schedule "$T/cb/confirmed.sched" | grep -q "verify: ok" ||
    { echo "FAIL: the confirmed pick does not run"; fail=1; }
else
  echo "skip: bench/confirm-bias.sh (/usr/bin/python3 has no msgpack: Debian package python3-msgpack)"
fi

exit $fail
