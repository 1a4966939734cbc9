#!/usr/bin/env bash
# Dynamic sizes end to end on the C target: `kgen run --dynamic` (one kernel, run at the -D value), the user errors,
# `kgen tune --shapes` (buckets, one shared search, the exchange, records naming the size each was measured at),
# `kgen replay` of those records, and `kgen export` of a dynamic header whose dispatcher a plain C program calls at
# sizes no kernel was tuned at, against plain loops.
set -u
. "$(dirname "$0")/common.inc"
FAST="--min-repeat-ms 5"

# ---- run ----
printf 'split C i 8\nsplit C j 4\nreorder C i.o j.o k i.i j.i\nvectorize C j.i\nparallel C i.o\n' > "$T/mm.sched"
for m in 1 7 77 130; do
  expect 0 "run matmul M=$m dynamic" -- $K run matmul -D M=$m -D N=20 -D K=17 --dynamic M=1..4096 --schedule "$T/mm.sched"
  has out "verify: ok" "matmul M=$m verifies"
done
expect 0 "lower shows the size parameter" -- $K lower matmul -D M=77 -D N=20 -D K=17 --dynamic M=1..4096 \
  --schedule "$T/mm.sched" --dump ir
has out "size M in \[1, 4096\]" "the size is a parameter"
has out "min\(8, \(M - \(i_o \* 8\)\)\)" "the edge tile is bounded by M at run time"
expect 0 "the C code takes M" -- $K lower matmul -D M=77 -D N=20 -D K=17 --dynamic M --schedule "$T/mm.sched" --dump c
has out "int64_t M" "int64_t M parameter"
expect 0 "run attention with the key length dynamic" -- $K run attention -D B=2 -D S=9 -D T=13 -D D=7 -D E=5 --dynamic T
has out "verify: ok" "attention verifies"
expect 0 "run transpose with an inner dynamic dimension" -- $K run transpose -D M=5 -D N=31 --dynamic N
has out "verify: ok" "transpose verifies"
expect 1 "a size inside an expression" -- $K run conv2d -D N=2 -D C=3 -D H=9 -D W=11 -D F=4 --dynamic H
has err "error: --dynamic H: dimension 3 of tensor 'Y' depends on H but is not H itself" "names the dimension"
expect 1 "an unknown size" -- $K run matmul -D M=7 -D N=2 -D K=3 --dynamic Q
has err "'Q' is not a size variable of matmul" "names the size"
expect 1 "a value outside the range" -- $K run matmul -D M=7000 -D N=2 -D K=3 --dynamic M=1..4096
has err "outside the range" "says so"
expect 2 "a bad range" -- $K run matmul -D M=7 -D N=2 -D K=3 --dynamic M=5..2
printf 'reorder C j i k\ncache_read A local C\ncompute_at A.local C j\n' > "$T/span.sched"
expect 1 "a region spanning the dynamic dimension" -- $K run matmul -D M=6 -D N=4 -D K=10 --dynamic M \
  --schedule "$T/span.sched"
has err "region spans a whole dimension that follows a dynamic size" "says why"

# ---- tune a range, replay, export ----
L="$T/mm.dyn.kglog"
expect 0 "tune for three shapes" -- $K tune matmul -D K=16 -D N=24 --shapes M=1,9,40 --target c --trials 18 \
  --population 64 $FAST --log "$L" --quiet
has out "matmul, M dynamic, on c: 3 buckets" "three buckets"
has out "^  1\.\.2 +M=1 " "the first bucket ends below the geometric mean of 1 and 9 (3)"
has out "^  19\.\.40 +M=40 " "the last bucket starts at the geometric mean of 9 and 40"
expect 0 "show the log" -- $K show "$L"
has out "M=9 K=16 N=24" "records name the size they were measured at"
# the records' fields, read with msgpack in Debian's python3 (`make test-deps` installs python3-msgpack)
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import msgpack' 2> /dev/null; then
  echo "skip: the records' fields ($PY has no msgpack: Debian package python3-msgpack)"
else "$PY" - "$L" <<'EOF' || fail=1
import sys
import msgpack
recs = list(msgpack.Unpacker(open(sys.argv[1], 'rb'), raw=False))
dyn = [r for r in recs if 'dynamic' in r]
assert len(dyn) == len(recs) and recs, 'every record is a dynamic kernel'
for r in dyn:
    lo, hi, blo, bhi = r['dynamic']['M']
    m = r['workload']['sizes']['M']
    assert (lo, hi) == (1, 40) and blo <= m <= bhi, (r['dynamic'], m)
assert len({tuple(r['dynamic']['M'][2:]) for r in dyn}) == 3, 'three buckets'
EOF
fi
expect 0 "replay the dynamic records" -- $K replay "$L" $FAST
has out "verify: ok" "replayed kernels verify"
expect 0 "export the buckets" -- $K export "$L" --out "$T"
has out "matmul.h" "writes the header"
has matmul.h "int kg_matmul_M1to2_K16_N24\(int64_t M, const float" "a kernel per bucket taking M"
has matmul.h "if \(M >= 1 && M <= 2 && K == 16 && N == 24\)" "the dispatcher checks the bucket"
cat > "$T/use.c" <<'EOF'
#define KG_IMPLEMENTATION
#include "matmul.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  const int K = 16, N = 24;
  int bad = 0;
  for (int M = 1; M <= 40; M++) {
    float *A = (float *)malloc(sizeof(float) * M * K), *B = (float *)malloc(sizeof(float) * K * N);
    float *C = (float *)malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7 % 13) - 6) / 7.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((i * 5 % 11) - 5) / 5.0f;
    int rc = kg_matmul(M, K, N, A, B, C);
    if (rc != KG_OK) { printf("M=%d: %s\n", M, kg_strerror(rc)); bad++; }
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float s = 0;
        for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
        if (fabsf(s - C[i * N + j]) > 1e-4f * (1 + fabsf(s))) { printf("M=%d: C[%d,%d] %g != %g\n", M, i, j, C[i * N + j], s); bad++; i = M; break; }
      }
    free(A); free(B); free(C);
  }
  int none = kg_matmul(41, K, N, NULL, NULL, NULL) == KG_ERR_NO_KERNEL && kg_matmul(5, K, 7, NULL, NULL, NULL) == KG_ERR_NO_KERNEL;
  int64_t lo[3], hi[3];
  int ranges = kg_matmul_ranges(0, lo, hi) == 0 && lo[0] == 1 && hi[0] == 2 && lo[1] == 16 && hi[1] == 16 &&
               kg_matmul_ranges(3, lo, hi) == -1;
  int size = kg_matmul_M1to2_K16_N24(0, NULL, NULL, NULL) == KG_ERR_SIZE && kg_matmul_M1to2_K16_N24(41, NULL, NULL, NULL) == KG_ERR_SIZE;
  printf("%d mismatches, untuned sizes %s, ranges %s, out-of-range %s\n", bad, none ? "refused" : "ACCEPTED",
         ranges ? "ok" : "WRONG", size ? "refused" : "ACCEPTED");
  return bad || !none || !ranges || !size;
}
EOF
expect 0 "compile a program using the dynamic header" -- cc -std=c11 -Wall -Wextra -Werror -O2 -fopenmp -I"$T" \
  -o "$T/use" "$T/use.c" -lm
expect 0 "run it at every M from 1 to 40" -- "$T/use"
has out "0 mismatches, untuned sizes refused, ranges ok, out-of-range refused" "every size matches the loops"

# ---- the same on the CUDA emulator: a range tuned, exported for two archs, called at every size ----
LC="$T/mm.cuda.dyn.kglog"
expect 0 "tune for three shapes on the emulator" -- $K tune matmul -D K=16 -D N=24 --shapes M=1,9,40 --emulate \
  --trials 9 --population 64 $FAST --log "$LC" --quiet
has out "matmul, M dynamic, on emulator: 3 buckets" "three buckets"
mkdir -p "$T/cuda"
expect 0 "export them for sm_86 and sm_90" -- $K export "$LC" --arch sm_86,sm_90 --out "$T/cuda" --allow-emulated
has cuda/matmul.h "int kg_matmul_M1to2_K16_N24\(CUstream stream, int64_t M, const float" "launchers take M"
# (the emulator's header brings its own math functions and clashes with <math.h>)
sed -e 's/#include "matmul.h"/#include "cuda\/matmul.h"/' -e '/#include <math.h>/d' -e 's/kg_matmul(M, K, N,/kg_matmul(0, M, K, N,/' \
  -e 's/kg_matmul(41, K, N,/kg_matmul(0, 41, K, N,/' -e 's/kg_matmul(5, K, 7,/kg_matmul(0, 5, K, 7,/' \
  -e 's/kg_matmul_M1to2_K16_N24(\([0-9]*\), /kg_matmul_M1to2_K16_N24(0, \1, /g' "$T/use.c" > "$T/use_cuda.cc"
expect 0 "build it for the emulator" -- g++ -std=c++17 -O1 -DKG_EMULATE -include runtime/cuda_emu.h -I"$T" \
  -o "$T/use_cuda" -x c++ "$T/use_cuda.cc" -lpthread
for sm in 86 90; do
  expect 0 "run it at every M from 1 to 40 (sm_$sm)" -- env KG_EMULATE_SM=$sm "$T/use_cuda"
  has out "0 mismatches, untuned sizes refused, ranges ok, out-of-range refused" "every size matches (sm_$sm)"
done
exit $fail
