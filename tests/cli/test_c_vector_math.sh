#!/usr/bin/env bash
# The C target's math vectorizes: kernels are compiled (runtime/cpu.c) so that sqrt needs no errno (a scalar call
# otherwise, in every norm's rsqrt); with gcc on x86-64 exp and erf have kgen's own vector variants
# (tests/test_vmath.c), which the tuned softmax's and GELU's loops must call. A CC wrapper keeps the kernel kgen
# compiles and its flags; the kernel is compiled again with those flags to assembly, which must call the vector erf
# and no scalar sqrt or erf. A register tile's accumulators stay in registers around the reduction loop: gcc, left
# to turn the tile's copy in and out into memcpy calls, keeps the tile in memory on AVX2 (codegen/c.c's pragma says
# so).
set -u
. "$(dirname "$0")/common.inc"
cat > "$T/cc" << 'W'
#!/usr/bin/env bash
# records the flags and the source of the kernel kgen compiles, then compiles it
for a in "$@"; do case "$a" in *.c) cp "$a" "$KEEP/kernel.c" ;; esac; done
printf '%s\n' "$@" > "$KEEP/flags"
exec cc "$@"
W
chmod +x "$T/cc"
asm_of() { # workload -D... [--schedule F]: the assembly of the kernel kgen built (flags: its compile flags)
  rm -f "$T/kernel.c" "$T/flags" "$T/k.s"
  KEEP="$T" CC="$T/cc" "$K" run "$@" --target c > "$T/run.txt" 2>&1 || { echo "FAIL: kgen run $*"; cat "$T/run.txt"; fail=1; return 1; }
  [ -s "$T/kernel.c" ] || { echo "FAIL: no kernel compiled for $*"; fail=1; return 1; }
  flags=()
  while IFS= read -r f; do
    case "$f" in -shared | -fPIC | -o | kernel.so | kernel.c | -lm | *.c | *.so) ;; *) flags+=("$f") ;; esac
  done < "$T/flags"
  cc "${flags[@]}" -S "$T/kernel.c" -o "$T/k.s" || { echo "FAIL: recompiling with ${flags[*]}"; fail=1; return 1; }
}
if asm_of layernorm -D N=64 -D D=256; then
  grep -q -- '-fno-math-errno' "$T/flags" || { echo "FAIL: kernels are compiled without -fno-math-errno"; fail=1; }
  if grep -qE 'call\s+sqrtf' "$T/k.s"; then echo "FAIL: layernorm's rsqrt calls sqrtf"; fail=1; fi
  grep -qE 'v?sqrt[sp]s' "$T/k.s" || { echo "FAIL: no sqrt instruction in layernorm"; fail=1; }
  # vector math is defined for the functions a kernel calls only (each definition costs build time)
  if grep -q 'KG_C_VEXP_' "$T/kernel.c"; then echo "FAIL: layernorm's unit defines vector math it never calls"; fail=1; fi
fi
cat > "$T/tile.sched" << 'S'
split C i 48
split C i.i 6
split C j 16
split C j.i 16
split C k 64
reorder C i.o k.o j.o i.i.o j.i.o k.i i.i.i j.i.i
parallel C i.o
cache_read B local C
compute_at B.local C j.o
vectorize B.local ax1
cache_read A local C
compute_at A.local C k.o
vectorize A.local ax1
unroll C i.i.i
vectorize C j.i.i
S
if [ "$(uname -m)" != x86_64 ] || ! cc --version 2> /dev/null | grep -q 'Free Software Foundation'; then
  echo "skip: the register tile's assembly (x86-64 and gcc only: the pragma and the -march levels are gcc's)"
elif asm_of matmul -D M=96 -D N=64 -D K=256 --schedule "$T/tile.sched"; then
  grep -q 'register accumulator of C' "$T/kernel.c" || { echo "FAIL: the 6 x 16 tile has no register accumulator"; fail=1; }
  for m in haswell x86-64-v3 x86-64-v4; do
    # the kernel's flags, then this -march (the last one counts); the preprocessor and the compiler only
    cc "${flags[@]}" -march=$m -S "$T/kernel.c" -o "$T/t.s" || { echo "FAIL: compiling for $m"; fail=1; continue; }
    nfma=$(grep -cE 'vfmadd[0-9]+ps' "$T/t.s")
    nspill=$(grep -cE 'vfmadd[0-9]+ps\s+-?[0-9]*\(%rsp\)' "$T/t.s")
    [ "$nfma" -gt 0 ] || { echo "FAIL ($m): no FMA in the register tile"; fail=1; }
    [ "$nspill" -eq 0 ] || { echo "FAIL ($m): $nspill of $nfma FMAs take their accumulator from the stack"; fail=1; }
  done
fi
if [ "$(uname -m)" != x86_64 ] || ! cc --version 2> /dev/null | grep -q 'Free Software Foundation'; then
  echo "skip: kgen's vector exp and erf (x86-64 and gcc only)"
else
  sm=bench/results/traces/standing-amd-2026-12-07/softmax-4096x4096-fused-tuned256.sched
  if asm_of softmax -D N=64 -D D=1024 --schedule "$sm"; then
    grep -qE 'call\s+_ZGV[b-e]N[0-9]+v_kg_expf' "$T/k.s" || { echo "FAIL: softmax's exp is not vectorized"; fail=1; }
    if grep -qE 'call\s+_ZGV[b-e]N[0-9]+v_expf' "$T/k.s"; then echo "FAIL: softmax calls libmvec's exp"; fail=1; fi
    if grep -qE 'KG_C_VEXP_(ERFF|TANHF)' "$T/kernel.c"; then echo "FAIL: softmax defines erf or tanh"; fail=1; fi
  fi
  if asm_of bias_gelu_residual -D N=64 -D D=256; then
    grep -qE 'call\s+_ZGV[b-e]N[0-9]+v_kg_erff' "$T/k.s" || { echo "FAIL: GELU's erf is not vectorized"; fail=1; }
    if grep -qE 'call\s+(erff|_ZGV[b-e]N[0-9]+v_erff)' "$T/k.s"; then echo "FAIL: GELU calls libm's erf"; fail=1; fi
  fi
fi
exit $fail
