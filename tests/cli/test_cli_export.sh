#!/usr/bin/env bash
# `kgen replay` and `kgen export`: usage errors; replay of the best record (the exact trace `kgen show --best`
# names), of a workload the log lacks (the default schedule, with a warning) and of a log whose program is gone;
# headers exported from every committed log (every library workload) for C and CUDA compiling under gcc, g++ and
# nvcc; a CUDA log of several archs and sizes (tuned on the emulator) exported into one header whose dispatcher and
# variants run on the emulator against examples/kernels/check_cuda.cu's plain loops.
set -u
. "$(dirname "$0")/common.inc"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
FAST="--min-repeat-ms 5"

expect 2 "export without log" -- $K export
expect 2 "export bad target" -- $K export tuning_logs/matmul.c.kglog --target tpu
expect 2 "export bad arch" -- $K export tuning_logs/matmul.c.kglog --target cuda --arch sm_99x
expect 2 "export --arch on C" -- $K export tuning_logs/matmul.c.kglog --target c --arch sm_90
expect 1 "export a missing log" -- $K export "$T/none.kglog"
has err "no such log" "says the log is missing"
expect 1 "export into a file" -- $K export tuning_logs/matmul.c.kglog --out tuning_logs/README.md
expect 1 "export a workload the log lacks" -- $K export tuning_logs/matmul.c.kglog --workload softmax --out "$T"
has err "no record of workload 'softmax'" "names the workload"
expect 2 "replay without log" -- $K replay
expect 2 "replay bad option" -- $K replay tuning_logs/matmul.c.kglog --frob

# ---- replay ----
L="$T/sm.kglog"
expect 0 "tune a small log" -- $K tune softmax -D N=64 -D D=200 --target c --trials 12 --per-round 6 \
  --population 64 $FAST --log "$L" --quiet
expect 0 "show --best" -- $K show "$L" --best
# the best may be the default schedule itself (an empty trace: show says "(default schedule)", replay prints no
# step) when a busy machine times every candidate slower
sed -n 's/^    //p' "$T/out" | grep -vx '(default schedule)' > "$T/best.trace"
[ -s "$T/best.trace" ] || grep -q "^    (default schedule)" "$T/out" || { echo "FAIL: show --best printed no trace"; fail=1; }
expect 0 "replay the best record" -- $K replay "$L" softmax -D N=64 -D D=200 --target c $FAST
has out "softmax N=64 D=200 on c" "workload and target"
has out "record [0-9]+ of $L" "names the record"
has out "verify: ok" "verified"
has out "time: .* now, .* logged" "time beside the logged one"
sed -n 's/^    //p' "$T/out" > "$T/replayed.trace"
cmp -s "$T/best.trace" "$T/replayed.trace" || { echo "FAIL: replay's trace differs from show --best's:"; \
  diff "$T/best.trace" "$T/replayed.trace" | head; fail=1; }
expect 0 "replay every workload of the log" -- $K replay "$L" $FAST   # --target auto: the GPU when there is one
has out "softmax N=64 D=200 on (c|cuda)" "the logged binding"
if ! $K run matmul -D M=2 -D N=2 -D K=2 --target cuda >/dev/null 2>&1; then
  has out "softmax N=64 D=200 on c" "no GPU: the C target"
  expect 3 "replay on a GPU without one" -- $K replay "$L" --target cuda
  has err "CUDA|cuda|driver|device" "says why"
fi
# a committed log, one of its bindings
expect 0 "replay a committed log" -- $K replay tuning_logs/softmax.c.kglog softmax -D N=1024 -D D=1024 --target c $FAST
has out "record [0-9]+ of tuning_logs/softmax.c.kglog" "names the record"
has out "verify: ok" "verified"
# a workload outside the library, found with --lib (by name, with and without sizes)
expect 0 "replay a bench workload" -- $K replay tuning_logs/conv2d_3x3.c.kglog conv2d_3x3 -D N=1 -D C=64 -D H=56 \
  -D W=56 -D F=64 --lib bench/workloads --target c $FAST
has out "record [0-9]+ of tuning_logs/conv2d_3x3.c.kglog" "names the record"
has out "verify: ok" "verified"
# a workload the log lacks: the default schedule, with a warning, not a failure
expect 0 "replay a missing binding" -- $K replay "$L" softmax -D N=7 -D D=9 --target c $FAST
has err "warning: no successful record of softmax N=7 D=9 for the c target" "warns"
has out "the default schedule" "says it replays the default"
has out "verify: ok" "the default schedule verifies"
expect 1 "replay a missing workload without sizes" -- $K replay "$L" matmul --target c
has err "holds no record of matmul" "says so"
# a log whose program is nowhere to be found: a warning per workload
mkdir -p "$T/lib"
cp "$L" "$T/orphan.kglog"
sed 's/exp(/sigmoid(/' te/lib/softmax.te > "$T/lib/softmax.te"
KGEN_LIB="$T/lib" expect 1 "replay with a changed program" -- $K replay "$T/orphan.kglog" --target c $FAST
has err "the program changed since the log was written" "says the program changed"
# the C target's records replayed on CUDA (the emulator): nothing fits, the default GPU schedule
expect 0 "replay a C log on the emulator" -- $K replay "$L" softmax -D N=64 -D D=200 --emulate
has err "no successful record of softmax N=64 D=200 for the cuda target" "warns about the target"
has out "verify: ok" "the default GPU schedule verifies"

# ---- export: every committed log, both targets, every compiler ----
mkdir -p "$T/c" "$T/cuda"
for log in tuning_logs/*.c.kglog; do
  name=$(basename "$log" .c.kglog)
  expect 0 "export $name (C)" -- $K export "$log" --out "$T/c" --lib bench/workloads
  has out "$T/c/$name.h" "header path printed"
  expect 0 "export $name (CUDA, default schedules)" -- $K export "$log" --target cuda --arch sm_86,sm_90 \
    --out "$T/cuda" --lib bench/workloads
  has err "the default schedule" "warns that the log has no CUDA record"
done
hc=$(ls "$T/c"/*.h | wc -l)
[ "$hc" -ge 15 ] || { echo "FAIL: $hc C headers, want one per committed log"; fail=1; }
for h in "$T/c"/*.h "$T/cuda"/*.h; do
  grep -qE "^ \*  +trace:" "$h" || { echo "FAIL: $h: no trace in the opening comment"; fail=1; }
  grep -q "exported by kgen" "$h" || { echo "FAIL: $h: no kgen version"; fail=1; }
done
grep -q "split C" "$T/c/matmul.h" || { echo "FAIL: matmul.h does not show the tuned trace"; fail=1; }
grep -q "M=1024 K=1024 N=1024" "$T/c/matmul.h" && grep -q "M=512 K=512 N=512" "$T/c/matmul.h" || \
  { echo "FAIL: matmul.h lacks one of its size bindings"; fail=1; }
compile() { # DESCRIPTION -- command...: must succeed with no output (warnings fail it)
  local what=$1; shift 2
  if ! "$@" >"$T/cc.out" 2>&1 || [ -s "$T/cc.out" ]; then echo "FAIL ($what): $*"; head -20 "$T/cc.out"; fail=1; fi
}
for h in "$T/c"/*.h; do
  n=$(basename "$h")
  printf '#include "%s"\n' "$h" > "$T/use.c"
  compile "gcc $n" -- gcc -std=c11 -Wall -Wextra -c "$T/use.c" -o "$T/use.o"
  compile "gcc -fopenmp impl $n" -- gcc -std=c11 -Wall -Wextra -fopenmp -DKG_IMPLEMENTATION -c "$T/use.c" -o "$T/use.o"
  compile "gcc impl $n" -- gcc -std=c11 -Wall -Wextra -DKG_IMPLEMENTATION -c "$T/use.c" -o "$T/use.o"
  compile "g++ impl $n" -- g++ -Wall -Wextra -DKG_IMPLEMENTATION -x c++ -c "$T/use.c" -o "$T/use.o"
done
# one log holding a workload as f32, bf16 (--dtype) and TF32 (--tf32): three workloads, three headers (the
# sizes alike, so one header could not hold them), each saying what it is, compiled into one program together
V="$T/variants.kglog"
for opt in "" "--dtype bf16" "--tf32"; do
  # shellcheck disable=SC2086
  expect 0 "tune matmul $opt" -- $K tune matmul -D M=16 -D N=16 -D K=16 $opt --target c --trials 2 --log "$V" --quiet $FAST
done
expect 0 "export the three variants" -- $K export "$V" --out "$T/variants"
for v in matmul matmul_bf16 matmul_tf32; do
  [ -s "$T/variants/$v.h" ] || { echo "FAIL: no $v.h"; fail=1; }
  grep -q "^ \*   kg_${v}_M16_K16_N16: M=16 K=16 N=16" "$T/variants/$v.h" || { echo "FAIL: $v.h: not its binding"; fail=1; }
done
grep -q "def matmul(A: bf16\[M, K\], B: bf16\[K, N\]) -> (C: bf16\[M, N\])" "$T/variants/matmul_bf16.h" ||
  { echo "FAIL: matmul_bf16.h: not the bf16 signature"; fail=1; }
grep -q "), TF32 allowed (--tf32: " "$T/variants/matmul_tf32.h" || { echo "FAIL: matmul_tf32.h does not say TF32"; fail=1; }
grep -q "TF32" "$T/variants/matmul.h" && { echo "FAIL: matmul.h speaks of TF32"; fail=1; }
{ for v in matmul matmul_bf16 matmul_tf32; do printf '#include "%s"\n' "$T/variants/$v.h"; done; } > "$T/use.c"
compile "gcc impl, three variants in one program" -- gcc -std=c11 -Wall -Wextra -pedantic -DKG_IMPLEMENTATION -c "$T/use.c" \
  -o "$T/use.o"
for h in "$T/cuda"/*.h; do
  n=$(basename "$h")
  printf '#include "%s"\n' "$h" > "$T/use.c"
  compile "gcc cuda impl $n" -- gcc -std=c11 -Wall -Wextra -DKG_IMPLEMENTATION -c "$T/use.c" -o "$T/use.o"
  compile "g++ cuda impl $n" -- g++ -Wall -Wextra -DKG_IMPLEMENTATION -x c++ -c "$T/use.c" -o "$T/use.o"
done
if [ -x "$NVCC" ]; then
  # one translation unit including every header keeps nvcc's start-up cost to one run per target
  { for h in "$T/c"/*.h; do printf '#include "%s"\n' "$h"; done; } > "$T/all_c.cu"
  compile "nvcc, every C header" -- "$NVCC" -c -Xcompiler -Wall,-Wextra -DKG_IMPLEMENTATION "$T/all_c.cu" -o "$T/all_c.o"
  { for h in "$T/cuda"/*.h; do printf '#include "%s"\n' "$h"; done; } > "$T/all_cuda.cu"
  compile "nvcc, every CUDA header" -- "$NVCC" -c -Xcompiler -Wall,-Wextra -DKG_IMPLEMENTATION "$T/all_cuda.cu" -o "$T/all_cuda.o"
  compile "nvcc, the CUDA example" -- "$NVCC" -c -Xcompiler -Wall,-Wextra -I"$T/cuda" examples/kernels/check_cuda.cu \
    -o "$T/check_cuda.o"
else
  echo "skipped: nvcc compiles ($NVCC not found)"
fi

# ---- a CUDA log with several archs and sizes, exported and run on the emulator ----
E="$T/emu.kglog"
TUNE_EMU="--emulate --trials 4 --per-round 4 --population 32 --log $E --quiet"
expect 0 "emulator tuning, matmul sm_86" -- $K tune matmul -D M=33 -D N=20 -D K=17 --arch sm_86 --seed 1 $TUNE_EMU
expect 0 "emulator tuning, matmul sm_90" -- $K tune matmul -D M=33 -D N=20 -D K=17 --arch sm_90 --seed 7 $TUNE_EMU
expect 0 "emulator tuning, matmul 2nd size" -- $K tune matmul -D M=16 -D N=24 -D K=8 --arch sm_90 --seed 3 $TUNE_EMU
expect 0 "emulator tuning, softmax" -- $K tune softmax -D N=7 -D D=33 --arch sm_86 --seed 1 $TUNE_EMU
# the emulator verified them; the analytical estimate ranked them, and the summary, the log and the header say so
has out "^  best: estimated [0-9.]+ (us|ms) " "the best by estimate"
has out "^\(estimated: the analytical estimate of each candidate's time on the arch" "the summary says what ranked"
expect 0 "show the emulator log" -- $K show "$E"
has out "^  best: estimated [0-9.]+ (us|ms)" "kgen show names the estimate"
mkdir -p "$T/emu" "$T/emu0"
# records timed on the emulator are passed over unless asked for: its clock does not rank GPU kernels
expect 0 "export the emulator log, no --allow-emulated" -- $K export "$E" --arch sm_90 --out "$T/emu0"
has err "timed on the CUDA emulator, whose clock does not rank GPU kernels" "emulator records passed over, loudly"
has err "the default schedule" "the default schedule instead"
has out "$T/emu0/matmul.h" "a header all the same"
expect 0 "export the emulator log" -- $K export "$E" --arch sm_86,sm_90 --out "$T/emu" --allow-emulated
has out "$T/emu/matmul.h" "matmul header"
grep -q "estimated (a model, never measured on a GPU): " "$T/emu/matmul.h" || { echo "FAIL: the header does not say its time is an estimate"; fail=1; }
has out "$T/emu/softmax.h" "softmax header"
has err "kg_matmul_M16_K8_N24 \(sm_86\): no exact record: the nearest differs in arch sm_90 \(wanted sm_86\)" \
  "the binding tuned only for sm_90 warns for sm_86"
grep -q "kg_matmul_M33_K17_N20_v0_k0" "$T/emu/matmul.h" || { echo "FAIL: no kernel of the first binding"; fail=1; }
grep -q "kg_matmul_M16_K8_N24_v0_k0" "$T/emu/matmul.h" || { echo "FAIL: no kernel of the second binding"; fail=1; }
grep -q "kg_matmul_M33_K17_N20_v0_cubin_sm_86" "$T/emu/matmul.h" || { echo "FAIL: no sm_86 cubin"; fail=1; }
for sm in 86 90 89; do
  compile "emulated example, sm_$sm" -- g++ -std=c++17 -Wall -Wextra -x c++ -DKG_EMULATE -DKG_EMULATE_SM=$sm \
    -include runtime/cuda_emu.h -I"$T/emu" examples/kernels/check_cuda.cu -o "$T/check_emu_$sm"
  expect 0 "the emulated example on sm_$sm" -- "$T/check_emu_$sm"
  has out "matmul M=33 K=17 N=20 +ok" "first binding verified"
  has out "matmul M=16 K=8 N=24 +ok" "second binding verified"
  has out "softmax N=7 D=33 +ok" "softmax verified"
  has out "all kernels match" "the example passes"
done
# one binding, two archs: both records' schedules are there unless both archs chose the same trace
nv=$(grep -c "kg_matmul_M33_K17_N20_v[0-9]_k0(" "$T/emu/matmul.h")
t86=$($K show "$E" --best | awk '/M=33/ && /sm_86/ {f=1; next} f && /^    /{print} f && !/^    /{f=0}' | md5sum)
t90=$($K show "$E" --best | awk '/M=33/ && /sm_90/ {f=1; next} f && /^    /{print} f && !/^    /{f=0}' | md5sum)
if [ "$t86" != "$t90" ] && [ "$nv" -lt 2 ]; then echo "FAIL: two archs with different best traces, $nv variant"; fail=1; fi
exit $fail
