#!/usr/bin/env bash
# Limits on what a program may cost downstream: a def makes at most 256 stages (te/te.h KG_MAX_STAGES: compilers
# take superlinear time in a kernel's size), and a compiler running past KGEN_COMPILE_TIMEOUT is stopped, its build
# reported as failed (the code's fault, not the environment's), its build folder removed.
set -u
. "$(dirname "$0")/common.inc"
chain() { # N FILE: a def of N elementwise stages in a chain (N-1 temporaries, then the output)
  { echo "def chain(A: f32[N]) -> (B: f32[N]) {"; echo "  T1[i] = A[i] + 1.0"
    for k in $(seq 2 $(($1 - 1))); do echo "  T$k[i] = T$((k - 1))[i] * 0.5 + 1.0"; done
    echo "  B[i] = T$(($1 - 1))[i] + 2.0"; echo "}"; } > "$2"
}
chain 256 "$T/ok.te"
chain 257 "$T/over.te"
expect 0 "256 stages check" -- $K check "$T/ok.te" -D N=8
expect 1 "257 stages refused" -- $K check "$T/over.te" -D N=8
has err "over.te:258:3: error: too many stages: a def makes at most 256" "the first stage too many, at its statement"
# nested reductions count too: 300 reductions inside one statement
{ echo "def red(A: f32[N, M]) -> (B: f32[N]) {"; printf '  B[i] = 0.0'
  for k in $(seq 1 300); do printf ' + sum[j](A[i, j])'; done; echo; echo "}"; } > "$T/red.te"
expect 1 "nested reductions counted" -- $K check "$T/red.te" -D N=2 -D M=3
has err "too many stages" "reductions are stages"

# a compiler past its time limit: stopped at once, said as such, nothing left in TMPDIR
mkdir -p "$T/tmp"
start=$(date +%s)
expect 1 "C compile past the limit" -- env TMPDIR="$T/tmp" KGEN_COMPILE_TIMEOUT=0.2 $K run "$T/ok.te" -D N=8 --target c
has err "C compiler 'cc' ran past its time limit of 0.2 s \(KGEN_COMPILE_TIMEOUT\) and was stopped" "C timeout said"
expect 1 "emulator compile past the limit" -- env TMPDIR="$T/tmp" KGEN_COMPILE_TIMEOUT=0.2 $K run "$T/ok.te" -D N=8 \
  --target cuda --emulate
has err "C\+\+ compiler 'g\+\+' ran past its time limit of 0.2 s" "emulator timeout said"
[ $(( $(date +%s) - start )) -lt 120 ] || { echo "FAIL: the compiles were not stopped in time"; fail=1; }
[ -z "$(ls -A "$T/tmp")" ] || { echo "FAIL: build folders left behind:"; ls "$T/tmp"; fail=1; }
# a limit of 0 is none: a small program builds
expect 0 "no limit" -- env KGEN_COMPILE_TIMEOUT=0 $K run "$T/ok.te" -D N=8 --target c --min-repeat-ms 1
exit $fail
