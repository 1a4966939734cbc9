#!/usr/bin/env bash
# Inputs that are not regular files or are enormous, and memory limits: devices, FIFOs, directories and
# oversized files given as programs, schedules, logs or .npy are refused at once with the path (exit 1); a log
# path that cannot be a log is refused before tuning; a trace past 1000 steps is refused; run, tune and replay
# under `ulimit -v` end with the one "not enough memory" message and exit 1, never an abort. Commands that used to
# hang run under `timeout`, so a regression fails (status 124) instead of hanging.
set -u
. "$(dirname "$0")/common.inc"
TO="timeout 20"
S="-D M=8 -D N=8 -D K=8"
mkfifo "$T/fifo"
mkdir "$T/dir"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' > "$T/big.te"

for f in /dev/zero /dev/urandom "$T/fifo" "$T/dir" "$T/big.te"; do
  expect 1 "check $f" -- $TO $K check "$f"
  has err "$f" "check $f names the path"
done
has err "too large.*16 MiB" "an oversized program names the limit"
expect 1 "show /dev/zero" -- $TO $K show /dev/zero
has err "/dev/zero: is a character device" "show names the device"
expect 1 "replay a FIFO" -- $TO $K replay "$T/fifo" matmul $S
has err "FIFO" "replay says FIFO"
for f in /dev/zero "$T/fifo" "$T/dir"; do
  expect 1 "--schedule $f" -- $TO $K run matmul $S --schedule "$f"
  has err "cannot read schedule $f" "--schedule $f names the path"
  expect 1 "lower --schedule $f" -- $TO $K lower matmul $S --schedule "$f"
done

# logs that cannot be logs: refused before tuning (nothing measured)
for f in /dev/full /dev/null "$T/dir" "$T/fifo"; do
  expect 1 "tune --log $f" -- $TO $K tune matmul $S --trials 2 --log "$f"
  has err "log $f: [Ii]s a" "tune --log $f names the path and the kind"
done
expect 1 "tune --log in a missing folder" -- $TO $K tune matmul $S --trials 2 --log "$T/none/x.kglog"
has err "$T/none/x.kglog" "names the log"
# a write error during tuning (a file-size limit, SIGXFSZ ignored: EFBIG) ends the run, the log's records intact
expect 0 "tune a small log" -- $TO $K tune matmul $S --trials 4 --log "$T/w.kglog" --min-repeat-ms 1
size=$(stat -c %s "$T/w.kglog")
expect 1 "tune past a file-size limit" -- bash -c "trap '' XFSZ; ulimit -f $(( (size + 1023) / 1024 )); exec $TO $K tune matmul $S --trials 64 --seed 2 --log '$T/w.kglog' --min-repeat-ms 1"
has err "cannot write $T/w.kglog" "says the write failed, with the path"
expect 0 "the log is still readable" -- $K show "$T/w.kglog"

# .npy inputs: a FIFO and an oversized file are refused at once
mkdir "$T/load" "$T/load2"
$K run matmul $S --save "$T/save" >/dev/null 2>&1
cp "$T/save/B.npy" "$T/load/B.npy"
mkfifo "$T/load/A.npy"
expect 1 "--load a FIFO" -- $TO $K run matmul $S --load "$T/load"
has err "A.npy: is a FIFO" "names the FIFO"
cp "$T/save/B.npy" "$T/load2/B.npy"
{ cat "$T/save/A.npy"; head -c 10000000 /dev/zero; } > "$T/load2/A.npy"
expect 1 "--load an oversized .npy" -- $TO $K run matmul $S --load "$T/load2"
has err "A.npy: file too large" "names the oversized file"

mkdir "$T/save2"
mkfifo "$T/save2/A.npy"
expect 1 "--save onto a FIFO" -- $TO $K run matmul $S --save "$T/save2"
has err "A.npy: is a FIFO" "names the FIFO it will not write into"

# traces past the limit: refused at parse time naming the limit; at the limit: lowered in time
yes 'cache_write C local' | head -n 1001 > "$T/long.sched"
expect 1 "1001 steps" -- $TO $K lower matmul $S --schedule "$T/long.sched"
has err "long.sched:1001: error: too many steps: a trace holds at most 1000" "names the line and the limit"
head -n 1000 "$T/long.sched" > "$T/limit.sched"
expect 0 "1000 steps" -- $TO $K lower matmul $S --schedule "$T/limit.sched"

# memory limits: the one message and exit 1 from run, tune and replay (not 134, not 3). AddressSanitizer cannot
# start under `ulimit -v` (it reserves terabytes of shadow), so the sanitizer build skips these, saying so.
if grep -q __asan_init "$K" 2>/dev/null; then
  echo "skipped under AddressSanitizer: run, tune and replay under ulimit -v"
  [ $fail -eq 0 ] && echo "ok: cli inputs"
  exit $fail
fi
BIG="-D N=8192 -D M=8192"
expect 1 "run under ulimit -v" -- bash -c "ulimit -v 1000000; exec $TO $K run transpose $BIG"
has err "not enough memory: transpose at these sizes .* needs 1.5 GiB; the address-space limit \(ulimit -v\) allows" "run: the message"
expect 1 "tune under ulimit -v" -- bash -c "ulimit -v 1000000; exec $TO $K tune transpose $BIG --trials 2 --log '$T/t.kglog'"
has err "not enough memory: transpose at these sizes .* needs 1.5 GiB; the address-space limit" "tune: the same message"
expect 1 "replay under ulimit -v" -- bash -c "ulimit -v 1000000; exec $TO $K replay tuning_logs/transpose.c.kglog transpose $BIG"
has err "not enough memory: transpose at these sizes .* needs 1.5 GiB; the address-space limit" "replay: the same message"

[ $fail -eq 0 ] && echo "ok: cli inputs"
exit $fail
