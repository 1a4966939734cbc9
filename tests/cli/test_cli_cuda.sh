#!/usr/bin/env bash
# The CLI's CUDA contract: --target cuda|auto, --emulate, --arch, --measure, `lower --dump cuda`, and exit status
# 3 when a GPU run finds no device. Runs without a GPU (the emulator stands in); on a machine with a GPU the
# no-device checks are skipped.
set -u
. "$(dirname "$0")/common.inc"
MM="matmul -D M=33 -D N=20 -D K=17"

# usage errors
expect 2 "unknown target" -- $K run $MM --target tpu
expect 2 "unknown arch" -- $K run $MM --target cuda --emulate --arch sm_1
expect 2 "emulate with the C target" -- $K run $MM --target c --emulate
expect 2 "dump cuda with the C target" -- $K lower $MM --target c --dump cuda
expect 2 "dump c with the CUDA target" -- $K lower $MM --target cuda --dump c
expect 2 "measure on lower" -- $K lower $MM --measure
expect 2 "arch with the C target" -- $K run $MM --target c --arch sm_90
# --save works on CUDA too (tests/cli/test_cli_envfaults.sh checks the files)
expect 0 "save with cuda" -- $K run $MM --target cuda --emulate --save "$T/s"
for f in A B C; do [ -s "$T/s/$f.npy" ] || { echo "FAIL: $f.npy not saved on the emulator"; fail=1; }; done

# lower prints CUDA with the launch table; the default CUDA schedule maps threads
expect 0 "lower cuda" -- $K lower $MM --target cuda --dump cuda
has out "__global__" "a kernel"
has out "// launch kgen_k0: grid \(3, 1, 1\) block \(256, 1, 1\)" "naive mapping: 660 elements, 256 threads"
has out "threadIdx.x" "thread index"

# the emulator runs and verifies
expect 0 "run on the emulator" -- $K run $MM --emulate
has out "^target: cuda on CUDA emulator" "target line"
has out "^schedule: naive GPU mapping" "naive mapping"
has out "^verify: ok" "verified"
expect 0 "random GPU schedule on the emulator" -- $K run softmax -D N=7 -D D=33 --emulate --random-schedule 3
has out "^verify: ok" "random schedule verified"
expect 0 "measure on the emulator" -- $K run $MM --emulate --measure --min-repeat-ms 5
has out "^kernel kgen_k0: [1-9][0-9]* registers, 0 B spill stores" "NVRTC resources of the emulated kernel"
has out "^throughput: " "emulator throughput line"
# what ranks an emulated kernel: the analytical estimate for its arch, said to be one
has out "^estimate on sm_[0-9]+ \(.* figures, a model, not a measurement\): [0-9.]+ (us|ms); kernel 0 [0-9.]+ (us|ms), bound by " \
  "the emulated kernel's estimate"
expect 0 "measure on the C target" -- $K run $MM --target c --measure --min-repeat-ms 5
has out "^throughput: [0-9.e+]+ GFLOP/s" "throughput line"
has out "^verify: ok" "measured and verified"

# no device: exit 3 with a one-line reason (skipped where a GPU answers)
$K run $MM --target cuda >"$T/out" 2>"$T/err"; rc=$?
if [ $rc -eq 3 ]; then
  has err "^kgen: cannot run on a GPU: " "reason line"
  [ "$(wc -l < "$T/err")" -eq 1 ] || { echo "FAIL (one line): $(cat "$T/err")"; fail=1; }
  # auto falls back to C
  expect 0 "auto without a device" -- $K run $MM --min-repeat-ms 5
  has out "^verify: ok" "auto verified"
elif [ $rc -ne 0 ]; then
  echo "FAIL (cuda run): exit $rc"; cat "$T/out" "$T/err" | head; fail=1
else
  echo "a CUDA device answered: no-device checks skipped"
  # a log tuned on the emulator (ranked by estimate) and then on the GPU: the GPU measures the estimate's best
  # first, once each
  L="$T/first.kglog"
  expect 0 "emulator tuning for the device's arch" -- $K tune $MM --emulate --trials 6 --per-round 6 --seed 2 \
    --log "$L" --quiet
  expect 0 "GPU tuning on the emulator's log" -- $K tune $MM --target cuda --trials 6 --per-round 3 --seed 2 \
    --log "$L" --quiet
  has out "^measured first: [1-3] schedules? that the log's emulator records ranked best by estimate" \
    "the estimate's top measured first"
fi

# --dump report: each kernel's static quality for --arch, compiled with NVRTC, no device needed
expect 0 "static quality report" -- $K lower matmul -D M=256 -D N=256 -D K=64 --target cuda --arch sm_86 \
  --schedule examples/schedules/matmul_shared.sched --dump report
has out "^// ---- static quality \(sm_86, NVRTC " "the report's header"
has out "^kernel kgen_k0 \(sm_86\): 256 threads, [0-9]+ registers, no spills, 8192 B shared; [1-9] blocks/SM \(limited by [a-z ]+\), occupancy [0-9]+%; global loads 128-bit, stores 128-bit; shared staging; FMA [0-9]+% of [0-9]+ PTX instructions \(main loop: [0-9]+% of [0-9]+\); shared accesses up to 2-way bank conflicts \(A_shared load\)$" \
  "the tiled matmul's report"
has out "^estimate on sm_86 \(RTX A6000 figures, a model, not a measurement\): [0-9.]+ us; kernel 0 [0-9.]+ us, bound by [a-z2 ]+ \(compute hidden [0-9]+%, memory [0-9]+%, waves [0-9]+%\)$" \
  "the tiled matmul's estimate"
# the variants device-check.sh measures, each verified on the emulator at a small size of its workload (the first
# word of its "# bench:" line) that its tiles do not all divide
for f in bench/cuda-schedules/*.sched; do
  w=$(sed -n 's/^# bench: *\([a-z_0-9]*\).*/\1/p' "$f" | head -1)
  case "$w" in
    matmul) sizes="-D M=256 -D N=128 -D K=64" ;;
    softmax) sizes="-D N=7 -D D=1030" ;;
    *) echo "FAIL: $f: no small sizes for workload '$w'"; fail=1; continue ;;
  esac
  # the element type the bench line gives (--dtype bf16: a schedule of the retyped program's stages; --tf32)
  dt=$(sed -n 's/^# bench: .*\(--dtype [a-z0-9]*\|--tf32\).*/\1/p' "$f" | head -1)
  # shellcheck disable=SC2086
  expect 0 "$f on the emulator" -- $K run "$w" $sizes $dt --emulate --schedule "$f"
  has out "^verify: ok" "$f verified"
done
expect 2 "--dump report on C" -- $K lower matmul -D M=8 -D N=8 -D K=8 --target c --dump report
has err "--dump report goes with --target cuda" "refused on the C target"
exit $fail
