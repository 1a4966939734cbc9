#!/usr/bin/env bash
# The stream primitive through the CLI: a cache-blocked transpose and bias+GELU+residual with streamed stores
# verify against the reference evaluator (`kgen run --schedule`), --dump ir and --dump c show them, GCC compiles
# them to non-temporal stores (vmovntps, where the machine has AVX), and an illegal use is an error naming the
# primitive and the stage; `kgen tune` reports the elementwise space's size.
set -u
. "$(dirname "$0")/common.inc"

cat > "$T/tr.sched" <<'S'
tile Y j i 16 64
fuse Y j.o i.o
parallel Y j.o*i.o
vectorize Y i.i
stream Y
S
expect 0 "streamed transpose verifies" -- $K run --target c transpose -D M=200 -D N=77 --schedule "$T/tr.sched" --min-repeat-ms 1
has out "verify: ok" "transpose verify line"
expect 0 "dump ir" -- $K lower transpose -D M=200 -D N=77 --schedule "$T/tr.sched" --dump ir
has out "stream Y\[" "streamed store in the IR"
expect 0 "dump c" -- $K lower transpose -D M=200 -D N=77 --schedule "$T/tr.sched" --dump c
has out "kg_stream16\(kg_ntp_i_i" "non-temporal vectors in the C"
has out "kg_stream_fence\(\);" "fence in the C"
if grep -q avx /proc/cpuinfo 2>/dev/null && command -v gcc >/dev/null; then
  cp "$T/out" "$T/k.c"
  if gcc -std=c11 -O3 -march=native -fopenmp -S "$T/k.c" -o "$T/k.s" 2>"$T/err"; then
    has k.s "vmovntps" "non-temporal stores in the assembly"
  else
    echo "FAIL (compile): $(head -5 "$T/err")"; fail=1
  fi
else
  echo "skip: no AVX or no gcc: the assembly is not checked"
fi

cat > "$T/bgr.sched" <<'S'
compute_inline h
split Y j 64
parallel Y i
vectorize Y j.i
stream Y
S
expect 0 "streamed bias_gelu_residual verifies" -- $K run --target c bias_gelu_residual -D N=9 -D D=300 --schedule "$T/bgr.sched" --min-repeat-ms 1
has out "verify: ok" "bias_gelu_residual verify line"

printf 'stream Y\n' > "$T/bad.sched"
expect 1 "stream of a reduction" -- $K run --target c reduce_rows -D N=4 -D D=8 --schedule "$T/bad.sched"
has err "stream: stage Y: is a reduction \(loop j\)" "error names the primitive and the stage"
printf 'stream h\n' > "$T/bad2.sched"
expect 1 "stream of a stage that is not an output" -- $K lower bias_gelu_residual -D N=4 -D D=8 --schedule "$T/bad2.sched"
has err "stream: stage h: is not an output" "not an output"

exit $fail
