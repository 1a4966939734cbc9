#!/usr/bin/env bash
# `kgen tune --no-fuse`: unfused search (every stage its own loop nest, none inlined or computed inside another).
# A short softmax run on the C target verifies its candidates, and its best trace (written by --best-out, printed
# by the summary and by `kgen show`) neither inlines a program stage nor computes one at another stage's loop (the
# program's stages from `kgen check`); the usage texts list the option. (tests/test_unfused.c checks every record
# of such runs, and that the fusing space does fuse.)
set -u
. "$(dirname "$0")/common.inc"

# the stage names of softmax (m, e, Y.r0, Y): the temp and output lines of --dump stages
expect 0 "stages" -- $K check softmax -D N=64 -D D=64 --dump stages
stages=$(sed -nE 's/^(temp|output) ([^[ ]+).*/\2/p' "$T/out")
[ -n "$stages" ] || { echo "FAIL: no stages read"; fail=1; }

# fusing steps of program stages in a trace file ("compute_inline S" or "compute_at S ..." with S a stage)
fusing() {
  local s
  for s in $stages; do grep -E "^[[:space:]]*(compute_inline|compute_at) $(printf '%s' "$s" | sed 's/\./\\./g')( |$)" "$1"; done
}

L="$T/nf.kglog"
expect 0 "no-fuse tuning" -- $K tune softmax -D N=64 -D D=64 --target c --trials 6 --no-fuse --log "$L" \
  --per-round 3 --population 64 --min-repeat-ms 5 --timeout 120 --best-out "$T/best.sched" --confirm 0
has out "trials: 6 this run \(0 failed\)" "every candidate ran correctly"
has out "best: " "a best"
has err "unfused" "the run says it is unfused"
# the best may be the default schedule: an empty trace
[ -e "$T/best.sched" ] || { echo "FAIL: no best trace written"; fail=1; }
sed -nE 's/^    //p' "$T/out" > "$T/summary"
if [ -n "$(fusing "$T/summary")" ]; then echo "FAIL: the summary's best trace fuses:"; cat "$T/out"; fail=1; fi
if [ -e "$T/best.sched" ] && [ -n "$(fusing "$T/best.sched")" ]; then
  echo "FAIL: the best trace fuses a program stage:"; cat "$T/best.sched"; fail=1
fi
expect 0 "best trace runs" -- $K run softmax -D N=64 -D D=64 --target c --schedule "$T/best.sched"
has out "verify: ok" "the best schedule verifies"
expect 0 "show" -- $K show "$L"
has out "records: 6 \(ok 6\)" "six records, all ok"
sed -nE 's/^ +//p' "$T/out" > "$T/shown"
if [ -n "$(fusing "$T/shown")" ]; then echo "FAIL: the logged best fuses:"; cat "$T/out"; fail=1; fi
# a fusing trace is caught by the check above
printf 'parallel Y i\ncompute_inline e\n' > "$T/fused.sched"
[ -n "$(fusing "$T/fused.sched")" ] || { echo "FAIL: the check misses compute_inline e"; fail=1; }

expect 0 "help" -- $K --help
has out "--no-fuse" "usage lists --no-fuse"
expect 2 "tune usage" -- $K tune --frob
has err "--no-fuse" "tune usage lists --no-fuse"

exit $fail
