#!/usr/bin/env bash
# NaN in max and min through `kgen run` (docs/language.md: a NaN operand gives NaN): both operand orders of
# the max(A[i], log(-1.0)), the min ones, and a NaN at each position of a max[j] / min[j] reduction verify
# on the C target and on the CUDA emulator. (tests/test_nan.c covers the rule in depth.)
set -u
. "$(dirname "$0")/common.inc"

cat > "$T/ew.te" <<'TE'
def ew(A: f32[N]) -> (Y1: f32[N], Y2: f32[N], Y3: f32[N], Y4: f32[N]) {
  Y1[i] = max(A[i], log(-1.0))
  Y2[i] = max(log(-1.0), A[i])
  Y3[i] = min(A[i], log(-1.0))
  Y4[i] = min(log(-1.0), A[i])
}
TE
cat > "$T/red.te" <<'TE'
def red(A: f32[N, D]) -> (M: f32[D, N], L: f32[D, N]) {
  M[p, i] = max[j](select(j == p, log(-1.0), A[i, j]))
  L[p, i] = min[j](select(j == p, log(-1.0), A[i, j]))
}
TE
for f in ew red; do
  for target in "--target c" "--emulate"; do
    expect 0 "$f $target" -- $K run "$T/$f.te" -D N=9 $([ $f = red ] && echo -D D=7) $target
    has out "verify: ok" "$f $target verifies"
  done
done
printf 'rfactor M j 2\nrfactor L j 2\n' > "$T/rf.sched"
expect 0 "red rfactor" -- $K run "$T/red.te" -D N=9 -D D=7 --target c --schedule "$T/rf.sched"
has out "verify: ok" "red with rfactor verifies"
# the outputs are NaN indeed: saved, every element is a NaN (read without numpy: a version 1 .npy of <f4)
expect 0 "ew saved" -- $K run "$T/ew.te" -D N=9 --target c --save "$T/saved"
if command -v python3 >/dev/null; then
  expect 0 "all NaN" -- python3 -c '
import math, struct, sys
for k in (1, 2, 3, 4):
    b = open(sys.argv[1] + "/Y%d.npy" % k, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    v = struct.unpack("<9f", b[10 + n:10 + n + 36])
    if not all(math.isnan(x) for x in v): sys.exit("Y%d: %r" % (k, v))
' "$T/saved"
else
  echo "skip: the saved outputs are not read (python3 missing: Debian package python3)"
fi
# the rule costs no vectorization: a row max with rfactor partials in a vectorized loop still compiles to packed
# max instructions (with kgen's compile flags, runtime/cpu.c)
if [ "$(uname -m)" = x86_64 ]; then
  cat > "$T/rowmax.te" <<'TE'
def rowmax(X: f32[N, D]) -> (Y: f32[N]) {
  Y[i] = max[j](X[i, j])
}
TE
  printf 'rfactor Y j 16\nreorder Y.rf i j.o j.i\nvectorize Y.rf j.i\ncompute_at Y.rf Y i\n' > "$T/rm.sched"
  expect 0 "row max C" -- $K lower "$T/rowmax.te" -D N=64 -D D=1024 --schedule "$T/rm.sched" --dump c
  cp "$T/out" "$T/rowmax.c"
  expect 0 "row max compiles" -- cc $(sed -n 's/^#define KG_KERNEL_CFLAGS "\(.*\)"$/\1/p' codegen/kernel_flags.h) -S "$T/rowmax.c" -o "$T/rowmax.s"
  grep -qE 'v?maxps' "$T/rowmax.s" || { echo "FAIL: the row max is not vectorized (no maxps)"; fail=1; }
fi
exit $fail
