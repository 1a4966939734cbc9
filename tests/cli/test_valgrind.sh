#!/usr/bin/env bash
# valgrind over the CLI: parse/check, lowering of random schedules, a run (generated code compiled for a
# baseline x86-64 since valgrind does not decode AVX-512), `show` and `export` on tuning logs. Definite leaks and memory
# errors fail; libgomp's thread pool is "possibly lost" by design. Skipped for sanitizer builds (valgrind and
# ASan do not mix).
set -u
K=${KGEN:-build/kgen}
case "$K" in */san/*) echo "skip: sanitizer build"; exit 0;; esac
command -v valgrind >/dev/null || { echo "skip: no valgrind (Debian package valgrind; make test-deps installs it)"; exit 0; }
vg() { valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite "$@" >/dev/null; }
fail=0
vg $K check attention -D B=2 -D S=3 -D T=4 -D D=5 -D E=3 || { echo "FAIL: valgrind check"; fail=1; }
for seed in 1 2 3; do
  vg $K lower softmax -D N=5 -D D=9 --random-schedule $seed || { echo "FAIL: valgrind lower seed $seed"; fail=1; }
done
printf 'def f(A: f32[N]) -> (B: f32[N]) {\n  B[i] = A[i + 1]\n}\n' > /tmp/kg_vg_bad.te
valgrind -q --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite $K check /tmp/kg_vg_bad.te -D N=4 >/dev/null 2>&1
[ $? -eq 1 ] || { echo "FAIL: valgrind on a user error (want exit 1)"; fail=1; }
rm -f /tmp/kg_vg_bad.te
KGEN_CFLAGS=-march=x86-64-v2 vg $K run --target c conv2d -D N=1 -D C=2 -D H=7 -D W=6 -D F=3 --random-schedule 4 --min-repeat-ms 1 \
  || { echo "FAIL: valgrind run"; fail=1; }
# the tuning-log reader on a real log (the tuner itself cannot run under valgrind: its measurement worker
# re-executes /proc/self/exe, which under valgrind is valgrind's own launcher)
VL=$(mktemp -d)
$K tune --target c matmul -D M=24 -D N=20 -D K=16 --trials 6 --per-round 3 --population 16 --min-repeat-ms 1 \
  --log "$VL/v.kglog" --quiet >/dev/null 2>&1 || { echo "FAIL: tune for the valgrind log"; fail=1; }
vg $K show "$VL/v.kglog" || { echo "FAIL: valgrind show"; fail=1; }
# export (in process: record choice, trace replay, lowering, printing) of that log and of a committed one
vg $K export "$VL/v.kglog" --out "$VL" || { echo "FAIL: valgrind export"; fail=1; }
vg $K export tuning_logs/softmax.c.kglog --out "$VL" || { echo "FAIL: valgrind export of a committed log"; fail=1; }
rm -rf "$VL"
exit $fail
