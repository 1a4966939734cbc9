#!/usr/bin/env bash
# The CLI's contract: exit statuses (0 ok, 1 user error / failed verification, 2 usage), diagnostics with a
# caret, `kgen run` output lines, --save/--load as .npy files, --schedule and --random-schedule.
# Every run names --target c: on a machine with a GPU the default (auto) would pick CUDA.
set -u
. "$(dirname "$0")/common.inc"

expect 2 "no command" -- $K
expect 2 "unknown command" -- $K frobnicate x.te
expect 2 "unknown option" -- $K check matmul --bogus
expect 2 "bad binding" -- $K check matmul -D M
expect 2 "missing file" -- $K run
expect 2 "blank in a size value" -- $K check matmul -D "M= 5" -D N=2 -D K=2
expect 2 "--random-steps alone" -- $K run --target c matmul -D M=2 -D N=2 -D K=2 --random-steps 3
expect 2 "run does not dump" -- $K run --target c matmul -D M=2 -D N=2 -D K=2 --dump ir
expect 1 "a directory as the program" -- $K check "$T"
has err "Is a directory" "directory named"
expect 0 "help" -- $K --help
expect 0 "version" -- $K --version
has out "^kgen [0-9]+\.[0-9]+\.[0-9]+" "version line"

expect 0 "check matmul" -- $K check matmul -D M=8 -D N=6 -D K=5
has out "C: f32\[8, 6\]" "check prints shapes"

cat > "$T/bad.te" <<'TE'
def f(A: f32[N]) -> (B: f32[N]) {
  B[i] = A[i + 1]
}
TE
expect 1 "out of bounds read" -- $K check "$T/bad.te" -D N=4
has err "bad.te:2:10: error: .*out of bounds" "diagnostic position"
has err "^ +\^" "caret line"

expect 1 "more memory than the machine has" -- $K run --target c matmul -D M=1000000 -D N=1000000 -D K=2
has err "not enough memory: matmul at these sizes .* needs 14901.2 GiB; .* allows" "memory error names the need"
expect 1 "unbound size" -- $K check matmul -D M=8
expect 1 "missing file" -- $K check "$T/nope.te"

expect 0 "run default" -- $K run --target c matmul -D M=17 -D N=9 -D K=13 --min-repeat-ms 1
has out "^verify: ok max_rel_err=" "verify line"
has out "^time: " "time line"
has out "^reference: [0-9.]+ s" "reference time line"

expect 1 "verification failure exits 1" -- $K run --target c matmul -D M=8 -D N=8 -D K=300 --rtol 1e-12 --min-repeat-ms 1
has out "^verify: FAILED max_rel_err=[0-9.e-]+ C\[[0-9]+,[0-9]+\]: got .* expected .*tolerance" "failed verify line"

cat > "$T/sched.txt" <<'S'
# tile and vectorize
tile C i j 4 8
vectorize C j.i
parallel C i.o
S
expect 0 "run with --schedule" -- $K run --target c matmul -D M=17 -D N=9 -D K=13 --schedule "$T/sched.txt" --min-repeat-ms 1
has out "^verify: ok" "scheduled run verifies"
printf '# a comment\nsplit C i 2\n\nvectorize C k\n' > "$T/illegal.txt"
expect 1 "illegal schedule step" -- $K run --target c matmul -D M=8 -D N=8 -D K=8 --schedule "$T/illegal.txt"
has err "illegal.txt:4: error: vectorize: stage C: loop k is a reduction loop" "illegal step: its line, primitive, stage and loop"
printf 'splat C i 4\n' > "$T/malformed.txt"
expect 1 "malformed schedule" -- $K lower matmul -D M=8 -D N=8 -D K=8 --schedule "$T/malformed.txt"
has err "malformed.txt:1" "schedule error position"

expect 0 "random schedule" -- $K run --target c softmax -D N=7 -D D=13 --random-schedule 42 --min-repeat-ms 1
has out "schedule: random seed 42" "seed printed"
has out "^verify: ok" "random schedule verifies"

expect 0 "lower" -- $K lower conv2d --random-schedule 3 $(sed -n 's/^# sizes://p' te/lib/conv2d.te | sed 's/\([A-Za-z_0-9]*=[0-9]*\)/-D \1/g')
has out "loop-nest IR" "lower prints the IR"
has out "kgen_entry" "lower prints C"
expect 0 "dump tokens" -- $K check softmax --dump tokens
has out "^[0-9]+:1 ident def" "token dump"
expect 0 "dump ast" -- $K check softmax -D N=3 -D D=5 --dump ast
has out "Y\[i, j\] : f32\[3, 5\] = e\[i, j\] / sum\[j2 in 0..5\]" "ast dump keeps nested reductions"
expect 0 "dump stages" -- $K lower softmax -D N=3 -D D=5 --dump stages
has out "Y.r0\[i\] : f32\[3\] = sum" "stage dump extracts reductions"
expect 2 "check cannot dump ir" -- $K check matmul -D M=2 -D N=2 -D K=2 --dump ir
expect 2 "bad dump" -- $K lower matmul -D M=2 -D N=2 -D K=2 --dump nonsense

expect 0 "save" -- $K run --target c matmul -D M=5 -D N=4 -D K=3 --save "$T/npy" --seed 9 --min-repeat-ms 1
for f in A B C; do [ -s "$T/npy/$f.npy" ] || { echo "FAIL: $f.npy not saved"; fail=1; }; done
head -c 6 "$T/npy/A.npy" | grep -q "NUMPY" || { echo "FAIL: A.npy has no NumPy magic"; fail=1; }
expect 0 "load" -- $K run --target c matmul -D M=5 -D N=4 -D K=3 --load "$T/npy" --save "$T/npy2" --seed 1 --min-repeat-ms 1
cmp -s "$T/npy/A.npy" "$T/npy2/A.npy" || { echo "FAIL: --load did not use the saved inputs"; fail=1; }
cmp -s "$T/npy/C.npy" "$T/npy2/C.npy" || { echo "FAIL: same inputs, same schedule, different outputs"; fail=1; }
mkdir -p "$T/dirnpy/A.npy"
expect 1 "load a directory as .npy" -- $K run --target c matmul -D M=5 -D N=4 -D K=3 --load "$T/dirnpy"
has err "A.npy: Is a directory" "npy directory"
expect 1 "load with wrong shape" -- $K run --target c matmul -D M=6 -D N=4 -D K=3 --load "$T/npy"

# the CPU schedules bench/cpu-schedules.sh measures, each verified at small sizes of its workload that its tiles
# do not all divide (partial tiles: versioned register tiles and dot products), with the type its bench line gives
for f in bench/cpu-schedules/*.sched; do
  w=$(sed -n 's/^# bench: *\([^ ]*\).*/\1/p' "$f" | head -1)
  case "$w" in
    matmul) sizes="-D M=264 -D N=96 -D K=264" ;;
    bench/workloads/mlp_gelu.te) sizes="-D M=300 -D N=100 -D K=264" ;;
    bench/workloads/conv2d_3x3.te) sizes="-D N=1 -D C=20 -D H=5 -D W=19 -D F=32" ;;
    *) echo "FAIL: $f: no small sizes for workload '$w'"; fail=1; continue ;;
  esac
  dt=$(sed -n 's/^# bench: .*\(--dtype [a-z0-9]*\).*/\1/p' "$f" | head -1)
  # shellcheck disable=SC2086
  expect 0 "$f" -- $K run "$w" $sizes $dt --target c --schedule "$f"
  has out "^verify: ok" "$f verified"
done
# bf16 dot products whose strides follow a dynamic size (the row operand's rows K apart, the column operand's and
# the accumulators' N apart), with partial tiles
for d in K N; do
  expect 0 "bfdot with a dynamic $d" -- $K run matmul -D M=70 -D N=80 -D K=98 --dtype bf16 --dynamic $d=1..512 \
    --target c --schedule bench/cpu-schedules/matmul_bf16_bfdot.sched
  has out "^verify: ok" "bfdot with a dynamic $d verified"
done

exit $fail
