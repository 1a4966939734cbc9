#!/usr/bin/env bash
# The one script run on a lent GPU machine (see ../shared/device/README.md). Within about 9 minutes it:
#   1. prints the device and runs the GPU tests (each skips with a message when it finds no device);
#   2. runs the benchmark suite on the GPU (bench/suite.sh, TARGET=cuda) under a deadline: per workload a short
#      fused and --no-fuse tuning, the naive/unfused/fused kernels verified and timed, replay and export costs,
#      and the peers (PyTorch eager, torch.compile default and max-autotune, cuBLAS FP32 and TF32, cuDNN, a
#      device-to-device copy); then the shape-transition experiment beside torch.compile(dynamic=False/True);
#      the workloads run in order of importance (SGEMM first), and whatever the deadline cuts is reported as not run;
#   3. exports the tuned matmul and softmax logs as CUDA headers and runs them from a plain CUDA program
#      (examples/kernels/check_cuda.cu, the one small nvcc build of a program);
#   4. cuBLAS SGEMM, cuBLAS bf16 GEMM (f32 accumulation) and a copy through bench/gpu_peers (no PyTorch), a
#      cross-check of PyTorch's figures and the peer of the tensorized bf16 GEMM schedules of step 1b;
#   5. the analytical estimate's ranking of the suite's GPU-measured records (bench/estimate_rank: Spearman's rho,
#      OUT/estimate-rank.tsv).
# Everything else comes from the carried build folder. Writes the log, the suite's report (suite-cuda-DATE.md and
# its plots), the tuning logs and the raw outputs under $OUT.
#
# usage (from the repository root, LD_LIBRARY_PATH set as the device README says):
#   OUT=/some/dir bench/device-check.sh [BUILD_DIR]
# From a session that holds a GPU: `make`, `../shared/device/prepare.sh`, then one call of the device tool's run
# with carry [".device-libs", "build/kgen", "build/tests/test_gpu", "build/tests/test_gpu_random",
# "build/bench/gpu_peers", "build/bench/dynamic_shapes"], timeout_s 600 and the command
#   L=$(mktemp -d) && for f in .device-libs/*.deb; do dpkg -x "$f" $L; done &&
#   export LD_LIBRARY_PATH=$L/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}; bench/device-check.sh
# then commit $OUT/suite-cuda-*.md and its PNGs under bench/results/ and the logs worth keeping under tuning_logs/.
# environment: BUDGET=540 (seconds for the whole script), TRIALS=24 (per tuning run), TUNE_LIMIT=15 (seconds per
# tuning run), PEER_LIMIT=100 (seconds per peer command), KGEN_ARCH=sm_90; WORKLOADS, STEPS, CURVE_WORKLOADS,
# DYN_WORKLOADS and TORCH_AUTOTUNE (0: no max-autotune) as bench/suite.sh takes them, to fit a shorter lease;
# PACK=FILE.tgz packs OUT into one archive at the end; TESTS (default "test_gpu test_gpu_random"), EXAMPLES=0 skips
# the hand-written schedules, LOG=FILE (default OUT/device-check.log: a file outside OUT survives a cut-off run).
set -u
B=${1:-build}
OUT=${OUT:-/tmp/kgen-device-check}
BUDGET=${BUDGET:-540}
START=$(date +%s)
mkdir -p "$OUT"
LOG=${LOG:-$OUT/device-check.log}
: > "$LOG"
say() { printf '%s\n' "$*" | tee -a "$LOG"; }
# runs a command with a time limit, its output appended to the log; prints nothing else
run() { local limit=$1; shift; say "\$ $*"; timeout "$limit" "$@" >> "$LOG" 2>&1; local rc=$?; say "(exit $rc)"; return $rc; }

say "# kgen device check, $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv >> "$LOG" 2>&1
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
say "device: ${DEVICE:-unknown}"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >> "$LOG" 2>&1

# 1. GPU tests
for t in ${TESTS:-test_gpu test_gpu_random}; do
  [ -x "$B/tests/$t" ] && run 90 env KGEN_GPU_RANDOM_SCHEDULES=${KGEN_GPU_RANDOM_SCHEDULES:-6} "$B/tests/$t"
done

# 1b. the hand-written schedules (examples/schedules, and the variants of bench/cuda-schedules) at the sizes their
# "# bench:" line names, each verified and timed; a table of them in OUT/schedules.tsv
if [ "${EXAMPLES:-1}" = 1 ]; then
  printf 'schedule\tsizes\ttime\tthroughput\tkernels\n' > "$OUT/schedules.tsv"
  for f in examples/schedules/*.sched bench/cuda-schedules/*.sched; do
    args=$(sed -n 's/^# bench: *//p' "$f" | head -1)
    [ -n "$args" ] || continue
    o="$OUT/sched-$(basename "$f" .sched).txt"
    say "\$ $B/kgen run $args --target cuda --measure --schedule $f"
    # shellcheck disable=SC2086
    timeout 60 "$B/kgen" run $args --target cuda --measure --schedule "$f" > "$o" 2>&1
    say "(exit $?)"
    cat "$o" >> "$LOG"
    printf '%s\t%s\t%s\t%s\t%s\n' "$(basename "$f")" "${args#* }" "$(sed -n 's/^time: //p' "$o" | tail -1)" \
      "$(sed -n 's/^throughput: \([^;]*\);.*/\1/p' "$o" | tail -1)" "$(grep -c '^kernel [^ ]*: ' "$o")" >> "$OUT/schedules.tsv"
  done
  if command -v column > /dev/null; then column -t -s "$(printf '\t')" "$OUT/schedules.tsv"; else cat "$OUT/schedules.tsv"; fi | tee -a "$LOG"
fi

# 2. the suite, leaving RESERVE (70) s of the budget for steps 3 and 4
S="$OUT/suite"
say "\$ TARGET=cuda bench/suite.sh (deadline in $((START + BUDGET - ${RESERVE:-70} - $(date +%s))) s)"
env BUILD="$B" TARGET=cuda LOGDIR="$S" RESULTS="$OUT" DEADLINE=$((START + BUDGET - ${RESERVE:-70})) PYTHON=python3 TORCH_PYTHON=python3 \
  TRIALS="${TRIALS:-24}" TUNE_LIMIT="${TUNE_LIMIT:-15}" PEER_LIMIT="${PEER_LIMIT:-100}" DYN_TRIALS=16 \
  CURVE_WORKLOADS="${CURVE_WORKLOADS-matmul}" DYN_WORKLOADS="${DYN_WORKLOADS-matmul}" \
  STEPS="${STEPS:-tune measure build peers curves dynamic report}" TORCH_AUTOTUNE="${TORCH_AUTOTUNE:-1}" \
  WORKLOADS="${WORKLOADS:-matmul softmax layernorm bias_gelu_residual rmsnorm mlp_gelu attention conv2d reduce_rows}" \
  bench/suite.sh >> "$LOG" 2>&1
say "(exit $?)"

# 3. the tuned logs exported as CUDA headers (cubin for the device's arch) and used by a plain CUDA program
mkdir -p "$OUT/kernels"
for name in matmul softmax; do
  [ -s "$S/$name.fused.kglog" ] && run 30 "$B/kgen" export "$S/$name.fused.kglog" --target cuda \
    --arch "${KGEN_ARCH:-sm_90}" --workload "$name" --out "$OUT/kernels"
done
if [ -s "$OUT/kernels/matmul.h" ] && [ -s "$OUT/kernels/softmax.h" ]; then
  if run 40 nvcc -O2 -I"$OUT/kernels" examples/kernels/check_cuda.cu -o "$OUT/check_cuda"; then
    run 30 "$OUT/check_cuda"
  fi
else
  say "no exported headers: the CUDA example was not built"
fi

# 4. cuBLAS and a copy without PyTorch
if [ -x "$B/bench/gpu_peers" ]; then
  run 30 "$B/bench/gpu_peers" sgemm 4096 4096 4096
  # bf16 A and B, f32 accumulation: the peer of the tensorized bf16 GEMM (bench/cuda-schedules/matmul_bf16_mma*)
  run 30 "$B/bench/gpu_peers" bgemm 4096 4096 4096
  # f32 operands as TF32: the peer of the tensorized TF32 GEMM (bench/cuda-schedules/matmul_tf32_mma.sched, --tf32)
  run 30 "$B/bench/gpu_peers" tgemm 4096 4096 4096
  run 15 "$B/bench/gpu_peers" copy $((64 * 1024 * 1024))
  # the footprint of the 8192 x 8192 row-wise schedules: 256 MiB read, 256 MiB written
  run 15 "$B/bench/gpu_peers" copy $((256 * 1024 * 1024))
fi
# 5. how the analytical estimate (what ranks candidates on the emulator) ranks what this GPU just measured
if [ -x "$B/bench/estimate_rank" ] && ls "$S"/*.kglog > /dev/null 2>&1; then
  run 60 "$B/bench/estimate_rank" "$S"/*.kglog --tsv "$OUT/estimate-rank.tsv"
fi
say "done in $(($(date +%s) - START)) s; report: $(ls "$OUT"/suite-cuda-*.md 2> /dev/null)"
# PACK=FILE.tgz: everything above in one archive (the device tool brings back at most 8 files from $OUT)
if [ -n "${PACK:-}" ]; then
  # the saved tensors (.npy, hundreds of MB) stay behind; PACK must lie outside OUT
  tar czf "$PACK" --exclude='*.npy' --warning=no-file-changed -C "$(dirname "$OUT")" "$(basename "$OUT")" &&
    say "packed into $PACK ($(du -h "$PACK" | cut -f1))"
fi
cat "$OUT"/suite-cuda-*.md 2> /dev/null | head -60
