#!/usr/bin/env bash
# Exported headers under the strictest flags a user may build with: every committed log exported for C, and for
# CUDA (re-targeted: the default GPU schedules, cubins and PTX for two archs), compiled by gcc, g++, clang and
# clang++ at -O2 -fopenmp -Wall -Wextra -pedantic -Werror (clang: a simd hint it cannot apply must not become an
# error; CUDA: the PTX runs past C's 4095-character literal limit), and by nvcc with -Werror. Then the NULL
# pointer contract: every exported function with a tensor or out-pointer answers KG_ERR_ARG for NULL, before
# touching anything (C kernels, dispatchers, _sizes; CUDA kernels before loading any driver).
set -u
. "$(dirname "$0")/common.inc"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
STRICT="-O2 -fopenmp -Wall -Wextra -pedantic -Werror"

compile() { # DESCRIPTION -- command...: must succeed with no output (warnings fail it)
  local what=$1; shift 2
  if ! "$@" >"$T/cc.out" 2>&1 || [ -s "$T/cc.out" ]; then echo "FAIL ($what): $*"; head -20 "$T/cc.out"; fail=1; fi
}

mkdir -p "$T/c" "$T/cuda"
for log in tuning_logs/*.c.kglog; do
  name=$(basename "$log" .c.kglog)
  expect 0 "export $name (C)" -- $K export "$log" --out "$T/c" --lib bench/workloads
  expect 0 "export $name (CUDA)" -- $K export "$log" --target cuda --arch sm_86,sm_90 --out "$T/cuda" --lib bench/workloads
done
hc=$(ls "$T/c"/*.h | wc -l)
[ "$hc" -ge 15 ] || { echo "FAIL: $hc C headers, want one per committed log"; fail=1; }

# one translation unit per target holding every header: one compiler start per flavour
{ echo "#define KG_IMPLEMENTATION"; for h in "$T/c"/*.h; do printf '#include "%s"\n' "$h"; done; } > "$T/all_c.c"
{ echo "#define KG_IMPLEMENTATION"; for h in "$T/cuda"/*.h; do printf '#include "%s"\n' "$h"; done; } > "$T/all_cuda.c"
compile "gcc C headers" -- gcc -std=c11 $STRICT -c "$T/all_c.c" -o "$T/o.o"
compile "g++ C headers" -- g++ $STRICT -x c++ -c "$T/all_c.c" -o "$T/o.o"
compile "gcc CUDA headers" -- gcc -std=c11 $STRICT -c "$T/all_cuda.c" -o "$T/o.o"
compile "g++ CUDA headers" -- g++ $STRICT -x c++ -c "$T/all_cuda.c" -o "$T/o.o"
# the vector variants of exp, erf and tanh are defined in a unit for the kernels that call them, and only there:
# the unit of every header (softmax's exp, then GELU's erf after the helpers' guard) links into a program at the
# machine's level, and a unit of matmul alone defines none
printf 'int main(void) { return 0; }\n' > "$T/stub.c"
compile "gcc C headers at -march=native" -- gcc -std=c11 -O3 -march=native -fopenmp -c "$T/all_c.c" -o "$T/all_c.o"
compile "every C header linked" -- gcc -fopenmp "$T/all_c.o" "$T/stub.c" -o "$T/all_c" -lm
printf '#define KG_IMPLEMENTATION\n#include "%s/c/matmul.h"\n' "$T" > "$T/mm.c"
compile "matmul alone" -- gcc -std=c11 -O3 -march=native -fopenmp -c "$T/mm.c" -o "$T/mm.o"
if nm "$T/mm.o" | grep -qE 'kg_(expf|erff|tanhf)'; then echo "FAIL: matmul's unit defines vector math it never calls"; fail=1; fi
if [ "$(uname -m)" = x86_64 ] && gcc --version | grep -q 'Free Software' && ! nm "$T/all_c.o" | grep -q 'kg_erff'; then
  echo "FAIL: no erf variants in the unit of every header"
  fail=1
fi
if command -v clang >/dev/null 2>&1; then
  # each C header in its own unit as well: clang reports a missed simd hint once per unit
  for h in "$T/c"/*.h; do
    printf '#define KG_IMPLEMENTATION\n#include "%s"\n' "$h" > "$T/one.c"
    compile "clang $(basename "$h")" -- clang -std=c11 $STRICT -c "$T/one.c" -o "$T/o.o"
  done
  compile "clang++ C headers" -- clang++ $STRICT -x c++ -c "$T/all_c.c" -o "$T/o.o"
  compile "clang CUDA headers" -- clang -std=c11 $STRICT -c "$T/all_cuda.c" -o "$T/o.o"
  compile "clang++ CUDA headers" -- clang++ $STRICT -x c++ -c "$T/all_cuda.c" -o "$T/o.o"
else
  echo "skipped: clang compiles (clang not installed: Debian package clang)"
fi
if [ -x "$NVCC" ]; then
  # not -pedantic: nvcc's own preprocessed output uses GCC line markers, which -pedantic reports
  cp "$T/all_cuda.c" "$T/all_cuda.cu"
  compile "nvcc CUDA headers" -- "$NVCC" -c -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror "$T/all_cuda.cu" \
    -o "$T/o.o"
else
  echo "skipped: nvcc compiles ($NVCC not found)"
fi

# ---- one program, several units: -flto, and units built for different instruction sets ----
# gcc's vector exp is defined in every unit that holds a kernel (weak, hidden, named after the unit's level):
# under -flto static definitions were renamed and the vectorizer's calls left undefined, and a unit built for
# SSE2 must not call the variants of a unit built for the machine. Softmax twice (prefixes kg_ and kgb_), each
# unit's kernels checked against exp in double.
expect 0 "export softmax with another prefix" -- $K export tuning_logs/softmax.c.kglog --prefix kgb_ --out "$T/c2" \
  --lib bench/workloads
cat > "$T/units_main.c" <<'EOF'
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "softmax.h"
int kgb_softmax(int64_t N, int64_t D, const float *X, float *Y);
static double check(int (*f)(int64_t, int64_t, const float *, float *), const float *x, float *y) {
  enum { N = 1024, D = 1024 };
  if (f(N, D, x, y) != 0) return 1;
  double worst = 0;
  for (int r = 0; r < N; r++) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < D; j++) m = fmax(m, x[r * D + j]);
    for (int j = 0; j < D; j++) s += exp(x[r * D + j] - m);
    for (int j = 0; j < D; j++) {
      double want = exp(x[r * D + j] - m) / s, e = fabs(y[r * D + j] - want) / want;
      if (!(e <= worst)) worst = e;
    }
  }
  return worst;
}
int main(void) {
  float *x = malloc(sizeof(float) * 1024 * 1024), *y = malloc(sizeof(float) * 1024 * 1024);
  for (int i = 0; i < 1024 * 1024; i++) x[i] = (float)((i * 37) % 1001) / 40.0f - 12.0f;
  double a = check(kg_softmax, x, y), b = check(kgb_softmax, x, y);
  printf("units: largest relative errors %.3g and %.3g\n", a, b);
  free(x);
  free(y);
  return !(a < 1e-5 && b < 1e-5);
}
EOF
printf '#define KG_IMPLEMENTATION\n#include "softmax.h"\n' > "$T/units_a.c"
printf '#define KG_IMPLEMENTATION\n#include "%s/c2/softmax.h"\n' "$T" > "$T/units_b.c"
for how in "-flto" "-march=native -flto:-march=x86-64 -flto" "-march=native:-march=x86-64"; do
  fa=${how%%:*} fb=${how#*:}
  lto=""
  case "$how" in *-flto*) lto=-flto ;; esac
  compile "unit a ($how)" -- gcc -std=c11 -O3 -fopenmp $fa -I"$T/c" -c "$T/units_a.c" -o "$T/units_a.o"
  compile "unit b ($how)" -- gcc -std=c11 -O3 -fopenmp $fb -c "$T/units_b.c" -o "$T/units_b.o"
  compile "program ($how)" -- gcc -std=c11 -O3 -fopenmp $lto -I"$T/c" "$T/units_main.c" "$T/units_a.o" \
    "$T/units_b.o" -o "$T/units" -lm
  expect 0 "softmax right from both units ($how)" -- "$T/units"
  # the x86-64 unit's own variants, apart from the machine's
  if [ "$(uname -m)" = x86_64 ] && [ "$fa" != "$fb" ] && ! nm "$T/units" | grep -q '_ZGVbN4v_kg_expf_sse2$'; then
    echo "FAIL ($how): the x86-64 unit has no exp variants of its own level"
    fail=1
  fi
done

# ---- NULL pointers ----
cat > "$T/null_c.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#define KG_IMPLEMENTATION
#include "matmul.h"
#include "softmax.h"
static int fails;
static void want(int got, int code, const char *what) {
  if (got != code) printf("FAIL: %s: %d (%s), want %d\n", what, got, kg_strerror(got), code), fails++;
}
int main(void) {
  static float a[1024 * 1024], b[1024 * 1024], c[1024 * 1024];
  want(kg_matmul_M1024_K1024_N1024(NULL, b, c), KG_ERR_ARG, "matmul kernel, A NULL");
  want(kg_matmul_M1024_K1024_N1024(a, NULL, c), KG_ERR_ARG, "matmul kernel, B NULL");
  want(kg_matmul_M1024_K1024_N1024(a, b, NULL), KG_ERR_ARG, "matmul kernel, C NULL");
  want(kg_matmul_dispatch(1024, 1024, 1024, a, NULL, c), KG_ERR_ARG, "matmul dispatcher, B NULL");
  want(kg_matmul(512, 512, 512, a, b, NULL), KG_ERR_ARG, "matmul, C NULL");
  want(kg_matmul(3, 5, 7, a, b, c), KG_ERR_NO_KERNEL, "matmul, sizes it lacks");
  want(kg_matmul_sizes(0, NULL), KG_ERR_ARG, "matmul_sizes, NULL");
  want(kg_softmax_dispatch(1024, 1024, NULL, c), KG_ERR_ARG, "softmax dispatcher, X NULL");
  want(kg_softmax_dispatch(1024, 1024, a, NULL), KG_ERR_ARG, "softmax dispatcher, Y NULL");
  if (strstr(kg_strerror(KG_ERR_ARG), "NULL") == NULL) printf("FAIL: kg_strerror(KG_ERR_ARG) = %s\n", kg_strerror(KG_ERR_ARG)), fails++;
  want(kg_matmul(512, 512, 512, a, b, c), KG_OK, "matmul with every pointer");
  printf("%s\n", fails ? "null: failed" : "null: ok");
  return fails != 0;
}
EOF
compile "the NULL program (C)" -- gcc -std=c11 -O1 -Wall -Wextra -I"$T/c" "$T/null_c.c" -o "$T/null_c" -lm
expect 0 "NULL pointers answer KG_ERR_ARG (C)" -- "$T/null_c"
has out "null: ok" "every NULL refused"

cat > "$T/null_cuda.c" <<'EOF'
#include <stdio.h>
#include <stdint.h>
#define KG_IMPLEMENTATION
#include "matmul.h"
static int fails;
static void want(int got, int code, const char *what) {
  if (got != code) printf("FAIL: %s: %d (%s), want %d\n", what, got, kg_strerror(got), code), fails++;
}
int main(void) {
  float *p = (float *)(uintptr_t)0x1000; /* never dereferenced: no driver loads */
  want(kg_matmul_M1024_K1024_N1024(NULL, NULL, p, p), KG_ERR_ARG, "matmul kernel, A NULL");
  want(kg_matmul_M1024_K1024_N1024(NULL, p, p, NULL), KG_ERR_ARG, "matmul kernel, C NULL");
  want(kg_matmul_dispatch(NULL, 512, 512, 512, p, NULL, p), KG_ERR_ARG, "matmul dispatcher, B NULL");
  want(kg_matmul(NULL, 512, 512, 512, p, p, NULL), KG_ERR_ARG, "matmul, C NULL");
  want(kg_matmul_sizes(1, NULL), KG_ERR_ARG, "matmul_sizes, NULL");
  /* the stream may be NULL (the default stream): with every pointer the call reaches the (missing) driver */
  want(kg_matmul(NULL, 512, 512, 512, p, p, p), KG_ERR_NO_DRIVER, "matmul with every pointer, no driver");
  printf("%s\n", fails ? "null: failed" : "null: ok");
  return fails != 0;
}
EOF
# a driver that cannot load, so that the call with every pointer never launches on a real GPU
compile "the NULL program (CUDA)" -- gcc -std=c11 -O1 -Wall -Wextra '-DKG_CUDA_LIBRARY="/nonexistent/libcuda.so.1"' \
  -I"$T/cuda" "$T/null_cuda.c" -o "$T/null_cuda" -ldl -lpthread
expect 0 "NULL pointers answer KG_ERR_ARG (CUDA)" -- "$T/null_cuda"
has out "null: ok" "every NULL refused"
exit $fail
