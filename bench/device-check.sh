#!/usr/bin/env bash
# The one script run on a lent GPU machine (see ../shared/device/README.md): prints the device, runs the GPU
# tests, then measures naive vs hand-scheduled kernels beside their peers (cuBLAS SGEMM FP32 without TF32, or a
# device-to-device copy of the same bytes), tunes matmul 4096^3 and softmax 8192^2 for a couple of minutes each
# (`kgen tune --target cuda`, logs kept under $OUT), exports the tuned kernels as CUDA headers and runs them from a
# plain CUDA program (examples/kernels/check_cuda.cu, the one small nvcc build), runs the shape-transition
# benchmark of dynamic shapes on the GPU (bench/dynamic-shapes.sh, TARGET=cuda), and prints a table of ratios.
# Everything else comes from the carried build folder. Writes the full log and the table under $OUT. Ends within
# about 9 minutes.
#
# usage (from the repository root, LD_LIBRARY_PATH set as the device README says):
#   OUT=/some/dir bench/device-check.sh [BUILD_DIR]
# From a session that holds a GPU: `make`, `../shared/device/prepare.sh`, then one call of the device tool's run
# with carry [".device-libs", "build/kgen", "build/tests/test_gpu", "build/tests/test_gpu_random",
# "build/bench/gpu_peers", "build/bench/dynamic_shapes"], timeout_s 600 and the command
#   L=$(mktemp -d) && for f in .device-libs/*.deb; do dpkg -x "$f" $L; done &&
#   export LD_LIBRARY_PATH=$L/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}; bench/device-check.sh
# then commit $OUT/device-check.md as bench/results/device-check-DATE.md.
set -u
B=${1:-build}
OUT=${OUT:-/tmp/kgen-device-check}
mkdir -p "$OUT"
LOG="$OUT/device-check.log"
TABLE="$OUT/device-check.md"
: > "$LOG"
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
# runs a command with a time limit, its output appended to the log; prints nothing else
run() { local limit=$1; shift; say "\$ $*"; timeout "$limit" "$@" >> "$LOG" 2>&1; local rc=$?; say "(exit $rc)"; return $rc; }

say "# kgen device check, $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv >> "$LOG" 2>&1
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
say "device: ${DEVICE:-unknown}"

# 1. GPU tests (each skips with a message when it finds no device)
for t in test_gpu test_gpu_random; do
  [ -x "$B/tests/$t" ] && run 240 env KGEN_GPU_RANDOM_SCHEDULES=${KGEN_GPU_RANDOM_SCHEDULES:-10} "$B/tests/$t"
done

# 2. naive vs hand-scheduled, beside the peer
ms_of() { # the median of a `kgen run --measure` output, in ms
  awk '/^time: /{ v=$2; u=$3; if (u=="us") v=v/1000; print v; exit }' "$1"
}
peer_ms() { awk -v k="$2" '$1==k { for (i=2;i<=NF;i++) if ($i ~ /^median_ms=/) { sub("median_ms=","",$i); print $i; exit } }' "$1"; }
kgen_run() { # name out-file args...
  local out="$OUT/$1.txt"; shift
  say "\$ $B/kgen run $* --target cuda --measure"
  timeout 150 "$B/kgen" run "$@" --target cuda --measure > "$out" 2>&1
  say "(exit $?)"; cat "$out" >> "$LOG"
}
kgen_run matmul-naive matmul -D M=4096 -D N=4096 -D K=4096
kgen_run matmul-hand matmul -D M=4096 -D N=4096 -D K=4096 --schedule examples/schedules/matmul_shared.sched
kgen_run softmax-naive softmax -D N=8192 -D D=8192
kgen_run softmax-hand softmax -D N=8192 -D D=8192 --schedule examples/schedules/softmax_cross_thread.sched
kgen_run layernorm-naive layernorm -D N=8192 -D D=8192
kgen_run layernorm-hand layernorm -D N=8192 -D D=8192 --schedule examples/schedules/layernorm_fused.sched

# 3. tuning on the device: a short run each (TUNE_TRIALS, default 128), its best trace measured again
TUNE_TRIALS=${TUNE_TRIALS:-128}
kgen_tune() { # name trials args...
  local name=$1 trials=$2; shift 2
  say "\$ $B/kgen tune $* --target cuda --trials $trials --log $OUT/$name.cuda.kglog"
  timeout 140 "$B/kgen" tune "$@" --target cuda --trials "$trials" --log "$OUT/$name.cuda.kglog" --per-round 64 \
    --best-out "$OUT/$name.best.sched" > "$OUT/$name-tune.txt" 2>&1
  say "(exit $?)"; cat "$OUT/$name-tune.txt" >> "$LOG"
  if [ -s "$OUT/$name.best.sched" ]; then
    kgen_run "$name-tuned" "$@" --schedule "$OUT/$name.best.sched"
  else
    say "no best trace for $name"; : > "$OUT/$name-tuned.txt"
  fi
}
kgen_tune matmul "$TUNE_TRIALS" matmul -D M=4096 -D N=4096 -D K=4096
kgen_tune softmax "$TUNE_TRIALS" softmax -D N=8192 -D D=8192
# 4. the tuned logs exported as CUDA headers (cubin for the device's arch, sm_90 on an H200) and used by a plain
# CUDA program built with nvcc: examples/kernels/check_cuda.cu runs every kernel and checks it on the host
mkdir -p "$OUT/kernels"
for name in matmul softmax; do
  [ -s "$OUT/$name.cuda.kglog" ] && run 60 "$B/kgen" export "$OUT/$name.cuda.kglog" --target cuda \
    --arch "${KGEN_ARCH:-sm_90}" --workload "$name" --out "$OUT/kernels"
done
if [ -s "$OUT/kernels/matmul.h" ] && [ -s "$OUT/kernels/softmax.h" ]; then
  if run 120 nvcc -O2 -I"$OUT/kernels" examples/kernels/check_cuda.cu -o "$OUT/check_cuda"; then
    say "\$ $OUT/check_cuda"
    timeout 120 "$OUT/check_cuda" > "$OUT/check_cuda.txt" 2>&1
    say "(exit $?)"; cat "$OUT/check_cuda.txt" >> "$LOG"
  fi
else
  say "no exported headers: the CUDA example was not built"
fi
# 5. dynamic shapes: a 60-call sequence of matmul M in 1..4096 (K=N=512), specialized per size vs one dynamic
# kernel vs the range-tuned buckets (a short range tuning first)
if [ -x "$B/bench/dynamic_shapes" ]; then
  say "\$ TARGET=cuda TRIALS=${DYN_TRIALS:-24} bench/dynamic-shapes.sh"
  timeout 150 env BUILD="$B" TARGET=cuda WORKLOADS=matmul TRIALS="${DYN_TRIALS:-24}" CALLS=60 \
    LOGDIR="$OUT/dynamic" RESULTS="$OUT/dynamic" bench/dynamic-shapes.sh >> "$LOG" 2>&1
  say "(exit $?)"
fi
PEERS="$OUT/peers.txt"
: > "$PEERS"
if [ -x "$B/bench/gpu_peers" ]; then
  timeout 120 "$B/bench/gpu_peers" sgemm 4096 4096 4096 >> "$PEERS" 2>&1
  # softmax and layernorm read 8192 x 8192 floats once and write as many: the traffic of a copy of that size
  timeout 60 "$B/bench/gpu_peers" copy $((8192 * 8192 * 4)) >> "$PEERS" 2>&1
fi
cat "$PEERS" >> "$LOG"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
row() { # workload naive-file hand-file peer-name peer-key
  local n h p
  n=$(ms_of "$OUT/$2.txt"); h=$(ms_of "$OUT/$3.txt"); p=$(peer_ms "$PEERS" "$5")
  printf '| %s | %s | %s | %s: %s | %s | %s |\n' "$1" "${n:-failed}" "${h:-failed}" "$4" "${p:-n/a}" \
    "$(ratio "${n:-0}" "${h:-0}")" "$(ratio "${p:-0}" "${h:-0}")"
}
header() { # the kind of the schedules compared with the naive one: "hand-scheduled" or "tuned"
  echo "| workload | naive ms | $1 ms | peer ms | naive / $1 | peer / $1 (>1: kgen faster) |"
  echo "|---|---|---|---|---|---|"
}
{
  echo "# kgen device check: ${DEVICE:-unknown}, $(date -u '+%Y-%m-%d')"
  echo
  echo "Command: \`OUT=DIR bench/device-check.sh\` (medians in ms of \`kgen run --target cuda --measure\`, >= 100 ms of repeats each)."
  echo
  header hand
  row "matmul 4096x4096x4096" matmul-naive matmul-hand "cuBLAS SGEMM FP32" cublas_sgemm
  row "softmax 8192x8192" softmax-naive softmax-hand "D2D copy" d2d_copy
  row "layernorm 8192x8192" layernorm-naive layernorm-hand "D2D copy" d2d_copy
  echo
  echo "Tuned with \`kgen tune --target cuda --trials $TUNE_TRIALS\` (logs: \`*.cuda.kglog\` beside this table):"
  echo
  header tuned
  row "matmul 4096x4096x4096" matmul-naive matmul-tuned "cuBLAS SGEMM FP32" cublas_sgemm
  row "softmax 8192x8192" softmax-naive softmax-tuned "D2D copy" d2d_copy
  echo
  echo "The tuned kernels exported (\`kgen export --target cuda\`) and run by examples/kernels/check_cuda.cu (nvcc):"
  echo
  echo '```'
  cat "$OUT/check_cuda.txt" 2>/dev/null || echo "(not run)"
  echo '```'
  echo
  echo "Dynamic shapes (\`TARGET=cuda bench/dynamic-shapes.sh\`):"
  echo
  cat "$OUT"/dynamic/dynamic-shapes-cuda-*.md 2>/dev/null || echo "(not run)"
} > "$TABLE"
cat "$TABLE" | tee -a "$LOG"
