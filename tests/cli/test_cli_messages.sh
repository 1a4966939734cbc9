#!/usr/bin/env bash
# Messages that name the actual problem: an unknown function or reducer (at its name), a name too long for kgen's
# limits (in a program, in a schedule, or grown by splits), a --best-out path that cannot be written (refused
# before tuning), a size out of range (one message for 0 and -1, in every subcommand that takes -D), --dynamic
# errors at the signature; and export --out creating its folder.
set -u
. "$(dirname "$0")/common.inc"

# ---- unknown functions and reducers ----
prog() { printf 'def f(A: f32[N, M]) -> (B: f32[N, M]) {\n  B[i, j] = %s\n}\n' "$1" > "$T/p.te"; }
prog 'max2(A[i, j], 1.0)'
expect 1 "unknown function" -- $K check "$T/p.te" -D N=4 -D M=4
has err "p.te:2:13: error: unknown function 'max2' \(functions: exp, log, " "names the function, at its name"
has err "^              \^" "caret under the name"
prog 'A[i, j] + foo(A[i, j])'
expect 1 "unknown function in a sum" -- $K check "$T/p.te" -D N=4 -D M=4
has err "p.te:2:23: error: unknown function 'foo'" "names foo"
prog 'A[i, j] - mean[k](A[i, k])'
expect 1 "unknown reducer" -- $K check "$T/p.te" -D N=4 -D M=4
has err "p.te:2:23: error: unknown reducer 'mean' \(reducers: sum, max, min, prod\)" "names the reducer"
prog 'A(i, j)'
expect 1 "a tensor called like a function" -- $K check "$T/p.te" -D N=4 -D M=4
has err "unknown function 'A'" "says A is no function"
for c in lower run tune; do
  prog 'max2(A[i, j], 1.0)'
  expect 1 "unknown function ($c)" -- $K $c "$T/p.te" -D N=4 -D M=4 --target c
  has err "unknown function 'max2'" "$c names it"
done

# ---- names too long ----
long=$(printf 'x%.0s' $(seq 65))
printf 'def f(A: f32[N]) -> (B: f32[N]) {\n  B[%s] = A[%s]\n}\n' "$long" "$long" > "$T/long.te"
expect 1 "a 65-character index name" -- $K check "$T/long.te" -D N=8
has err "long.te:2:5: error: name 'xxxxxxxxxxxxxxxxxxxx\.\.\.' too long \(max 64 characters\)" "the program's limit"
name64=$(printf 'y%.0s' $(seq 64))
printf 'def f(A: f32[N]) -> (B: f32[N]) {\n  B[%s] = A[%s] * 2.0\n}\n' "$name64" "$name64" > "$T/l64.te"
expect 0 "a 64-character index name" -- $K check "$T/l64.te" -D N=8
# a trace naming a loop longer than any loop can be
printf 'split B %s 2\n' "$(printf 'z%.0s' $(seq 300))" > "$T/long.sched"
expect 1 "a 300-character loop name in a schedule" -- $K lower "$T/l64.te" -D N=8 --schedule "$T/long.sched" --target c
has err "long.sched:1: error: split: name 'zzzz.*' too long \(max 256 characters\)" "the schedule's limit"
# a name that grows past the limit by splits: refused as too long, never as a duplicate
: > "$T/grow.sched"; loop=$name64
for k in $(seq 97); do echo "split B $loop 1" >> "$T/grow.sched"; loop="$loop.o"; done
expect 1 "splits growing a loop name" -- $K lower "$T/l64.te" -D N=8 --schedule "$T/grow.sched" --target c
has err "grow.sched:97: error: split: stage B: loop y+\.\.\.: the new loops' names would be too long \(max 256" \
  "the split that would pass the limit"
grep -q "already exists" "$T/err" && { echo "FAIL: a long name reported as a duplicate"; fail=1; }
# fuses: each joins two names, so the name doubles
w64=$(printf 'w%.0s' $(seq 64))
printf 'def f(A: f32[N, M]) -> (B: f32[N, M]) {\n  B[%s, %s] = A[%s, %s]\n}\n' "$name64" "$w64" "$name64" "$w64" > "$T/f2.te"
y=$name64
{ echo "split B $y 1"; echo "split B $w64 1"; echo "split B $y.o 1"; echo "split B $w64.o 1";
  echo "fuse B $y.o.o $y.o.i"; echo "fuse B $y.o.o*$y.o.i $y.i"; echo "fuse B $y.o.o*$y.o.i*$y.i $w64.o.o"; } > "$T/fuse.sched"
expect 1 "fuses growing a loop name" -- $K lower "$T/f2.te" -D N=4 -D M=4 --schedule "$T/fuse.sched" --target c
has err "fuse.sched:7: error: fuse: .*the fused loop's name would be too long \(max 256" "fuse refuses the name"

# ---- --best-out that cannot be written: refused before any tuning ----
expect 1 "--best-out in a missing folder" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --trials 4 \
  --log "$T/bo.kglog" --best-out "$T/no/such/best.trace" --quiet
has err "cannot write --best-out '$T/no/such/best.trace': No such file or directory" "names the path"
[ -e "$T/bo.kglog" ] && { echo "FAIL: tuning ran (a log was written) before the --best-out check"; fail=1; }
expect 1 "--best-out a folder" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --trials 4 --log "$T/bo.kglog" \
  --best-out "$T" --quiet
has err "cannot write --best-out '$T': Is a directory" "a folder"
expect 2 "--best-out with a range tuning" -- $K tune matmul -D M=8 -D N=8 -D K=8 --dynamic M=1..64 --target c \
  --trials 2 --log "$T/bo-dyn.kglog" --best-out "$T/bo-dyn.trace" --quiet
has err "--best-out goes with a tuning of fixed sizes" "a range has no single best"
[ -e "$T/bo-dyn.kglog" ] && { echo "FAIL: a range tuning ran despite --best-out"; fail=1; }
expect 0 "--best-out a new file" -- $K tune matmul -D M=8 -D N=8 -D K=8 --target c --trials 2 --per-round 2 \
  --population 16 --log "$T/bo.kglog" --best-out "$T/best.trace" --quiet --min-repeat-ms 2
[ -f "$T/best.trace" ] || { echo "FAIL: --best-out was not written"; fail=1; }

# ---- sizes out of range: one message whatever the value and the subcommand ----
for v in 0 -1 -7 2147483648; do
  if [ "$v" = 2147483648 ]; then want="size M must be at most 2147483647 \(got $v\)"; else want="size M must be at least 1 \(got $v\)"; fi
  for c in check lower run tune replay; do
    case $c in
      tune) args=(tune matmul --trials 1 --log "$T/sz.kglog") ;;
      replay) args=(replay tuning_logs/matmul.c.kglog matmul) ;;
      *) args=($c matmul) ;;
    esac
    expect 1 "-D M=$v ($c)" -- $K "${args[@]}" -D M=$v -D N=8 -D K=8 --target c
    has err "matmul.te:4:19: error: -D M=$v: $want" "$c, M=$v: at the signature"
  done
done
printf 'def g(A: f32[N + P]) -> (B: f32[N + P]) {\n  B[i] = A[i]\n}\n' > "$T/pad.te"
expect 0 "a size used only in expressions may be 0" -- $K check "$T/pad.te" -D N=4 -D P=0
expect 1 "but not negative" -- $K check "$T/pad.te" -D N=4 -D P=-1
has err "pad.te:1:18: error: -D P=-1: size P must be at least 0 \(got -1\)" "its own minimum"

# ---- --dynamic errors point at the signature ----
for d in Q "K=1..99999999999" "M=9..12"; do
  expect 1 "--dynamic $d" -- $K run matmul -D M=8 -D N=8 -D K=8 --target c --dynamic "$d"
  has err "matmul.te:4:[0-9]+: error: --dynamic" "--dynamic $d at the def line"
  has err "^  def matmul\(" "--dynamic $d quotes the signature"
done
has err "matmul.te:4:19: error" "a size's error at its declaration"

# ---- export --out creates its folder ----
expect 0 "export into a new nested folder" -- $K export tuning_logs/matmul.c.kglog --out "$T/new/deep/dir"
[ -f "$T/new/deep/dir/matmul.h" ] || { echo "FAIL: export did not create --out"; fail=1; }
expect 1 "export under a file" -- $K export tuning_logs/matmul.c.kglog --out tuning_logs/README.md/x
has err "cannot create the folder 'tuning_logs/README.md/x'" "names the folder"
exit $fail
