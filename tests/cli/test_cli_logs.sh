#!/usr/bin/env bash
# Tuning logs read robustly by the CLI: show, replay and export of a log with no usable record exit 1 saying so;
# what the reader skips is noted on stderr with its offset; a best record whose trace no longer applies, of a
# newer format version, or with an implausible time is passed over by tune (--best-out), replay and export; a
# tuner picks up the records another tuner appends to its log between rounds and never measures them again.
set -u
. "$(dirname "$0")/common.inc"
# records are forged by kglog.py in Debian's python3 (standard library only; `make test-deps` installs python3)
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || { echo "skip: test_cli_logs (no $PY: Debian package python3)"; exit 0; }
PYLOG="$PY $(dirname "$0")/kglog.py"
MM="matmul -D M=64 -D N=48 -D K=40"
# (--confirm 0: the search alone, whose records these checks count; test_cli_tune.sh has the confirmation)
FAST="--target c --per-round 4 --population 64 --min-repeat-ms 5 --confirm 0"

# logs with nothing usable: exit 1 and a message, for every reader
: > "$T/empty.kglog"
head -c 2000 /dev/urandom > "$T/garbage.kglog"
for cmd in show replay export; do
  expect 1 "$cmd of an empty log" -- $K $cmd "$T/empty.kglog"
  has err "empty.kglog: no record \(the log is empty\)" "$cmd says the log is empty"
  expect 1 "$cmd of garbage" -- $K $cmd "$T/garbage.kglog"
  has err "garbage.kglog: no usable record \(2000 bytes skipped\)" "$cmd says nothing was usable"
  has err "kgen $cmd: warning: .*garbage.kglog: skipped [0-9]+ bytes at offset 0 \(not a record\)" "$cmd notes the skip"
done

L="$T/mm.kglog"
expect 0 "tune" -- $K tune $MM $FAST --trials 12 --log "$L" --seed 1 --quiet
size=$(stat -c %s "$L")
head -c 300 /dev/urandom >> "$L"
expect 0 "show with garbage appended" -- $K show "$L"
has err "^kgen show: warning: $L: skipped 300 bytes at offset $size \(not a record\)$" "show's note on stderr"
grep -q skipped "$T/out" && { echo "FAIL: show writes notes about skipped bytes to stdout"; fail=1; }
cp "$T/out" "$T/show.out"

# a record of a newer format version: skipped with a note, never used
L0="$T/clean.kglog"
head -c "$size" "$L" > "$L0"
$PYLOG newer "$L0" > "$T/newer.rec"
cat "$L0" "$T/newer.rec" > "$T/newer.kglog"
expect 0 "show with a newer record" -- $K show "$T/newer.kglog" --best
has err "skipped [0-9]+ bytes at offset $size \(a record of format version 2; this kgen reads version 1 and older\)" \
  "the newer record is named as such"
grep -q newerloop "$T/out" && { echo "FAIL: show used a record of a newer format"; fail=1; }
expect 0 "replay with a newer record" -- $K replay "$T/newer.kglog" $MM --target c
grep -q newerloop "$T/out" && { echo "FAIL: replay used a record of a newer format"; fail=1; }

# the best record names a loop the program does not have: tune's best, --best-out, replay and export pass it over
$PYLOG broken "$L0" > "$T/broken.rec"
cat "$L0" "$T/broken.rec" > "$T/broken.kglog"
expect 0 "tune on a log with a broken best" -- $K tune $MM $FAST --trials 1 --log "$T/broken.kglog" --seed 1 \
  --quiet --best-out "$T/best.sched"
has err "record 13: its trace no longer applies .*nosuchloop" "tune says which record it passed over"
grep -q nosuchloop "$T/out" "$T/best.sched" && { echo "FAIL: tune took the broken record as best"; fail=1; }
expect 0 "the best-out schedule runs" -- $K run $MM --target c --schedule "$T/best.sched"
expect 0 "replay passes over the broken record" -- $K replay "$T/broken.kglog" $MM --target c
has err "record 13: its trace no longer applies.*passed over" "replay's warning"
has out "verify: ok" "the next best replays"
grep -q nosuchloop "$T/out" && { echo "FAIL: replay used the broken record"; fail=1; }
mkdir -p "$T/hdr"
expect 0 "export passes over the broken record" -- $K export "$T/broken.kglog" --out "$T/hdr"
has err "record 13: its trace no longer applies.*passed over" "export's warning"
has hdr/matmul.h "record [0-9]+ of" "the header holds a logged record"
grep -q nosuchloop "$T/hdr/matmul.h" && { echo "FAIL: export used the broken record"; fail=1; }

# an implausible time (1e-15 s) is never the best
$PYLOG implausible "$L0" > "$T/fast.rec"
cat "$L0" "$T/fast.rec" > "$T/fast.kglog"
expect 0 "show --best of the clean log" -- $K show "$L0" --best
sed 1d "$T/out" > "$T/best.clean"
expect 0 "show with an implausible record" -- $K show "$T/fast.kglog" --best
sed 1d "$T/out" | sed 's/ at record [0-9]*//' > "$T/best.fast"
sed -i 's/ at record [0-9]*//' "$T/best.clean"
cmp -s "$T/best.clean" "$T/best.fast" || { echo "FAIL: show took an implausible time as best:"; cat "$T/best.fast"; fail=1; }
expect 0 "replay with an implausible record" -- $K replay "$T/fast.kglog" $MM --target c
has err "record 13: implausible time 1e-15 s" "replay says why it passed the record over"
expect 0 "tune with an implausible record" -- $K tune $MM $FAST --trials 1 --log "$T/fast.kglog" --seed 1 --quiet
has err "record 13: implausible time" "tune passes it over"
grep -q "best: 1e-15\|best: 0.000" "$T/out" && { echo "FAIL: tune took an implausible time as best"; fail=1; }

# Two tuners on one log. A runs alone (its own log); B starts on an empty log with the same seed and arguments
# (two workloads), and right after B's first record (its first default schedule) A's records are appended to B's
# log under the log's lock. B re-reads the log before each measurement of a default schedule and before each
# round: after the one measurement that may have been in flight when the records landed, none of B's records
# repeats a schedule the log holds. (Before re-reading, B's rounds measured A's schedules again.)
TWO="$MM matmul -D M=40 -D N=24 -D K=32 $FAST --trials 16 --seed 3 --quiet --model random"
expect 0 "tuner A alone" -- $K tune $TWO --log "$T/a.kglog"
LB="$T/b.kglog"
$K tune $TWO --log "$LB" > "$T/b.out" 2>&1 &
b=$!
for _ in $(seq 3000); do [ -s "$LB" ] && break; sleep 0.01; done
from=$(flock "$LB" sh -c "cat '$T/a.kglog' >> '$LB'; stat -c %s '$LB'")
wait $b || { echo "FAIL: tuner B"; cat "$T/b.out"; fail=1; }
d=$($PYLOG dups "$LB" "$from" 1)
case "$d" in
  "records "*" duplicates 0") ;;
  *) echo "FAIL: tuner B measured schedules that A's appended records hold: $d"; fail=1 ;;
esac
grep -q "records 0 " <<<"$d" && { echo "FAIL: tuner B measured nothing after the append"; fail=1; }

exit $fail
