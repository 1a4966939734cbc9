#!/usr/bin/env bash
# kgen's benchmark suite: one driver for the suite against the peers, the fusion experiment, the
# compile-cost amortization experiment, the dynamic-shape experiment and the tuning curves. `make bench` runs it
# on the CPU; bench/device-check.sh runs it on a GPU with a smaller budget. bench/suite_report.py then writes
# bench/results/suite-TARGET-DATE.md and its PNG plots.
#
# Per workload (realistic sizes: transformer blocks at batch x sequence 4096, a ResNet-50 layer, norms, softmax):
#   tune      kgen tune fused (the whole search space) and --no-fuse (every stage its own loop nest or kernel,
#             each tuned: kgen's "unfused" baseline), TRIALS each, one log per variant, wall time recorded
#   measure   the default schedule (naive), the best unfused and the best fused trace, each verified against the
#             reference evaluator and timed by `kgen run --measure`; the fused kernel's inputs and outputs saved
#             as .npy for the peers to check their answers against
#   build     the amortization costs of the fused kernel: `kgen replay` (re-apply, compile, verify, time), `kgen
#             export` and compiling the exported header (a build-time cost; no compile at run time)
#   peers     PyTorch eager, torch.compile default and max-autotune (TorchInductor), and max-autotune with frozen
#             weights for the GEMM workloads, each with its compile time and checked against kgen's saved outputs;
#             for the memory-bound workloads PyTorch writing into an output it was given (eager with out=, and
#             compiled), since a fresh output each call costs page faults kgen's caller-owned buffers do not; on
#             the CPU OpenBLAS, Halide 14's autoschedulers (../shared/peers) and the copy bandwidth at each
#             memory-bound workload's footprint (copy_bw) and the FMA peak beside each compute-bound one
#             (bench/hand/fma_peak.c), on the GPU cuBLAS (FP32 and TF32), cuDNN and a
#             device-to-device copy
#             on the CPU also TVM MetaSchedule (bench/tvm_peers.py, in the venv bench/tvm-venv.sh makes at setup)
#             for TVM_WORKLOADS, tuned with the same TRIALS, its best kernel checked against kgen's saved outputs
#   curves    tuning with --model random at the same trials for CURVE_WORKLOADS (the model-vs-random curves)
#   dynamic   bench/dynamic-shapes.sh, and beside it torch.compile(dynamic=False / True) on the same sequence
#   report    bench/suite_report.py
#
# A benchmark, not a test: run it on an otherwise idle machine. At TRIALS=64 it takes about an hour on a 2-core
# machine. Every command that produced a figure is listed in LOGDIR/commands.txt and in the report.
#
# usage (from anywhere; it works in the repository root):
#   bench/suite.sh
# environment:
#   TARGET=auto              c, cuda, or auto (cuda when nvidia-smi sees a GPU)
#   WORKLOADS="bias_gelu_residual layernorm rmsnorm softmax mlp_gelu attention matmul conv2d reduce_rows
#              batch_matmul depthwise_conv2d matvec maxpool2d transpose mlp_epilogue"  (every library workload)
#   TRIALS=64                trials of each tuning run (fused, unfused, random)
#   CURVE_WORKLOADS="matmul conv2d softmax"   workloads also tuned with --model random
#   TORCH_MODES=auto         the PyTorch modes (bench/torch_peers.py): auto is eager, compile, max-autotune where
#                            torch has torch.compile, plus max-autotune-frozen (GEMM) and eager-out, compile-out
#                            (memory-bound workloads)
#   TORCH_AUTOTUNE=1         0 leaves the max-autotune modes out of auto (their compile takes minutes: a short GPU
#                            lease cannot afford them)
#   TORCH_VENV=$BUILD/venv-torch   where the setup step installs PyTorch 2.x from PyPI (bench/torch-venv.sh, whose
#                            header lists its pins and knobs; a second run reuses it)
#   TORCH_PYTHON=            an existing interpreter with torch 2.x for the PyTorch peers (then nothing is
#                            installed); default: TORCH_VENV's
#   MEMBOUND_WORKLOADS="bias_gelu_residual layernorm rmsnorm softmax reduce_rows matvec transpose maxpool2d
#                        depthwise_conv2d"   the workloads that only move data: on the CPU each gets the copy
#                            bandwidth at its footprint and PyTorch's out= modes
#   STEPS="setup tune measure build peers curves dynamic report"
#   DYN_TRIALS=64            trials of the dynamic-shape experiment's range tuning (DYN_WORKLOADS="matmul softmax")
#   TUNE_LIMIT=0             seconds a tuning run may take before it is stopped (0: no limit; its log is kept)
#   PEER_LIMIT=900           seconds one peer command may take
#   RUN_TIMEOUT=60           kgen's --timeout (seconds one verification run or timing loop may take) for the single
#                            measurements (run, replay); tuning keeps kgen's default unless TUNE_TIMEOUT is set
#   TUNE_TIMEOUT=            kgen tune's --timeout for each candidate (empty: kgen's default)
#   DEADLINE=0               Unix time after which no command starts, and to which running ones are cut
#                            (0: none); what is left is reported as not run (bench/device-check.sh sets it)
#   ARGS_<workload>="FILE.te -D N=..."   other sizes for a workload (e.g. ARGS_softmax="te/lib/softmax.te -D N=64 -D D=64")
#   TVM_WORKLOADS="matmul conv2d softmax"   workloads also tuned by TVM MetaSchedule (CPU; "" for none)
#   TVM_TRIALS=$TRIALS       MetaSchedule's trial budget; TVM_VENV=$BUILD/bench/tvm-venv (made by the setup step)
#   SEED=1, LOGDIR=$BUILD/suite/STAMP (an existing one resumes: logs already there are not tuned again),
#   RESULTS=bench/results, BUILD=build, PYTHON=/usr/bin/python3, PEERS_DIR=../shared/peers, THREADS=<cores>
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
KGEN=$BUILD/kgen
TARGET=${TARGET:-auto}
if [ "$TARGET" = auto ]; then
  if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q GPU; then TARGET=cuda; else TARGET=c; fi
fi
ALL_WORKLOADS="bias_gelu_residual layernorm rmsnorm softmax mlp_gelu attention matmul conv2d reduce_rows batch_matmul
depthwise_conv2d matvec maxpool2d transpose mlp_epilogue"
ALL_WORKLOADS=${ALL_WORKLOADS//$'\n'/ } # one line: the list is printed in messages
WORKLOADS=${WORKLOADS:-$ALL_WORKLOADS}
TRIALS=${TRIALS:-64}
CURVE_WORKLOADS=${CURVE_WORKLOADS:-matmul conv2d softmax}
TORCH_MODES=${TORCH_MODES:-auto}
TORCH_AUTOTUNE=${TORCH_AUTOTUNE:-1}
STEPS=${STEPS:-setup tune measure build peers curves dynamic report}
DYN_TRIALS=${DYN_TRIALS:-64}
DYN_WORKLOADS=${DYN_WORKLOADS:-matmul softmax}
TUNE_LIMIT=${TUNE_LIMIT:-0}
PEER_LIMIT=${PEER_LIMIT:-900}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
TUNE_TIMEOUT=${TUNE_TIMEOUT:-}
DEADLINE=${DEADLINE:-0}
SEED=${SEED:-1}
LOGDIR=${LOGDIR:-$BUILD/suite/$(date '+%Y%m%d-%H%M%S')}
RESULTS=${RESULTS:-bench/results}
PYTHON=${PYTHON:-/usr/bin/python3}
TORCH_VENV=${TORCH_VENV:-$BUILD/venv-torch}
TORCH_PY=${TORCH_PYTHON:-$TORCH_VENV/bin/python}
MEMBOUND_DEFAULT="bias_gelu_residual layernorm rmsnorm softmax reduce_rows matvec transpose maxpool2d depthwise_conv2d"
MEMBOUND_WORKLOADS=${MEMBOUND_WORKLOADS:-$MEMBOUND_DEFAULT}
PEERS_DIR=${PEERS_DIR:-../shared/peers}
THREADS=${THREADS:-$(nproc)}
TVM_WORKLOADS=${TVM_WORKLOADS-matmul conv2d softmax}
TVM_TRIALS=${TVM_TRIALS:-$TRIALS}
TVM_VENV=${TVM_VENV:-$BUILD/bench/tvm-venv}
# python3-venv: the PyTorch peers' virtual environment (bench/torch-venv.sh) is made from Debian's python3
DEB_PKGS="libopenblas-dev python3-halide libhalide14-0-dev python3-numpy python3-msgpack python3-matplotlib python3-venv"

die() { echo "suite: error: $*" >&2; exit 1; }
say() { echo "suite: $*"; }

# The workloads: the program and its sizes on each target. The GPU gets the sizes its peers are usually quoted
# at (SGEMM 4096^3, a ResNet layer at batch 32); the CPU the ones a 2-core machine tunes in minutes.
workload_args() {
  local o="ARGS_$1"
  if [ -n "${!o:-}" ]; then echo "${!o}"; return; fi # ARGS_W="FILE.te -D ...": other sizes (tests use it)
  case "$1" in
    bias_gelu_residual) echo "te/lib/bias_gelu_residual.te -D N=4096 -D D=4096" ;;
    layernorm) echo "te/lib/layernorm.te -D N=4096 -D D=1024" ;;
    rmsnorm) echo "te/lib/rmsnorm.te -D N=4096 -D D=1024" ;;
    softmax) echo "te/lib/softmax.te -D N=4096 -D D=1024" ;;
    mlp_gelu) echo "bench/workloads/mlp_gelu.te -D M=4096 -D K=1024 -D N=1024" ;;
    attention) echo "te/lib/attention.te -D B=16 -D S=512 -D T=512 -D D=64 -D E=64" ;;
    matmul) [ "$TARGET" = cuda ] && echo "te/lib/matmul.te -D M=4096 -D N=4096 -D K=4096" ||
      echo "te/lib/matmul.te -D M=1024 -D N=1024 -D K=1024" ;;
    conv2d) [ "$TARGET" = cuda ] && echo "bench/workloads/conv2d_3x3.te -D N=32 -D C=64 -D H=56 -D W=56 -D F=64" ||
      echo "bench/workloads/conv2d_3x3.te -D N=1 -D C=64 -D H=56 -D W=56 -D F=64" ;;
    reduce_rows) echo "te/lib/reduce_rows.te -D N=4096 -D D=4096" ;;
    # the rest of the library at its files' bench sizes: the workloads a user brings beyond the table's
    batch_matmul) echo "te/lib/batch_matmul.te -D L=16 -D M=512 -D N=512 -D K=64" ;;
    depthwise_conv2d) echo "te/lib/depthwise_conv2d.te -D N=1 -D C=256 -D H=56 -D W=56" ;;
    matvec) echo "te/lib/matvec.te -D M=4096 -D K=4096" ;;
    maxpool2d) echo "te/lib/maxpool2d.te -D N=8 -D C=64 -D H=112 -D W=112" ;;
    transpose) echo "te/lib/transpose.te -D M=4096 -D N=4096" ;;
    mlp_epilogue) echo "te/lib/mlp_epilogue.te -D M=1024 -D N=4096 -D K=1024" ;;
    *) die "unknown workload '$1' (known: $ALL_WORKLOADS)" ;;
  esac
}
# The value of -D NAME=V in a workload's arguments (empty when not there).
dval() { sed -n "s/.*-D $2=\([0-9]*\).*/\1/p" <<< "$1"; }
# what the fusion experiment calls it: friendly (several stages a compiler should fuse) or neutral (one heavy
# operator: fusion has little to gain); a workload of one stage has no unfused variant to tune
workload_kind() {
  case "$1" in matmul | conv2d | reduce_rows | batch_matmul | matvec | maxpool2d | transpose) echo neutral ;;
    *) echo friendly ;; esac
}
membound() { case " $MEMBOUND_WORKLOADS " in *" $1 "*) return 0 ;; esac; return 1; }
footprint() { # bytes of a workload's inputs and outputs (kgen check --dump stages: "input X : f32[4096, 1024]")
  # shellcheck disable=SC2046
  "$KGEN" check $(workload_args "$1") --dump stages 2> /dev/null | awk '/^(input|output) / {
      n = 4; if (match($0, /\[[0-9, ]+\]/)) { k = split(substr($0, RSTART + 1, RLENGTH - 2), d, /, */); for (i = 1; i <= k; i++) n *= d[i] }
      t += n } END { if (t > 0) printf "%.0f\n", t }'
}
nstages() { # stages of the program (kgen check --dump stages prints one "temp" or "output" line each)
  # shellcheck disable=SC2046
  "$KGEN" check $(workload_args "$1") --dump stages 2> /dev/null | grep -cE '^(temp|output) ' || true
}
for w in $WORKLOADS $CURVE_WORKLOADS $TVM_WORKLOADS; do workload_args "$w" > /dev/null; done
case "$TARGET" in c | cuda) ;; *) die "TARGET is c, cuda or auto, not '$TARGET'" ;; esac
for v in TRIALS TVM_TRIALS DYN_TRIALS TUNE_LIMIT PEER_LIMIT DEADLINE SEED THREADS; do
  case "${!v}" in '' | *[!0-9]*) die "$v must be a non-negative integer, not '${!v}'" ;; esac
done
[ "$TRIALS" -gt 0 ] || die "TRIALS must be positive"
[[ $RUN_TIMEOUT =~ ^[0-9]*\.?[0-9]+$ && ! $RUN_TIMEOUT =~ ^[0.]+$ ]] ||
  die "RUN_TIMEOUT must be a positive number of seconds, not '$RUN_TIMEOUT'"
[[ -z $TUNE_TIMEOUT || ($TUNE_TIMEOUT =~ ^[0-9]*\.?[0-9]+$ && ! $TUNE_TIMEOUT =~ ^[0.]+$) ]] ||
  die "TUNE_TIMEOUT must be a positive number of seconds, not '$TUNE_TIMEOUT'"
TUNE_TIMEOUT_ARGS=()
[ -z "$TUNE_TIMEOUT" ] || TUNE_TIMEOUT_ARGS=(--timeout "$TUNE_TIMEOUT")

mkdir -p "$LOGDIR"
CMDS="$LOGDIR/commands.txt"
RUNS="$LOGDIR/runs.tsv" # workload, variant, exit status, start and end (Unix seconds) of each tuning run
touch "$CMDS" "$RUNS"
echo "$TARGET" > "$LOGDIR/target.txt"
echo "$WORKLOADS" > "$LOGDIR/workloads.txt"
if [ ! -s "$LOGDIR/machine.txt" ]; then
  hv=$(lscpu | sed -n 's/^Hypervisor vendor: *//p')
  hv=${hv:+virtualised, $hv}
  printf '%s, %s cores (%s), Linux %s, %s\n' "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" \
    "${hv:-bare metal}" "$(uname -r)" "$(${CC:-cc} --version | head -1)" > "$LOGDIR/machine.txt"
  if [ "$TARGET" = cuda ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -1 |
      sed 's/^/GPU: /' >> "$LOGDIR/machine.txt"
  fi
fi
now() { date '+%s.%N'; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; } # seconds since $1
# runs a command under a time limit (0: none) and DEADLINE, its output to a file, recorded in commands.txt;
# returns its status (124 when a limit stopped it, 125 when the deadline had passed and it did not start). A command
# stopped by the limit gets a last line "cut: ..." in its output file, so that a reader (the report, the tests) can
# tell a cut-off from a failure; CUT_BY names the limit for the warning.
SKIPPED=0 # set when the last record did not start for want of time: warn then counts no failure
CUT_BY=
record() {
  local limit=$1 out=$2; shift 2
  SKIPPED=0
  CUT_BY=
  local why="its time limit"
  if [ "$DEADLINE" -gt 0 ]; then
    local left=$((DEADLINE - $(date +%s)))
    if [ "$left" -le 2 ]; then
      say "out of time (DEADLINE): not run: $*"
      echo "not run: out of time" > "$out"
      SKIPPED=1
      return 125
    fi
    if [ "$limit" = 0 ] || [ "$limit" -gt "$left" ]; then limit=$left why="the DEADLINE"; fi
  fi
  echo "$*" >> "$CMDS"
  say "\$ $*"
  local rc=0
  if [ "$limit" -gt 0 ]; then timeout "$limit" "$@" > "$out" 2>&1 || rc=$?; else "$@" > "$out" 2>&1 || rc=$?; fi
  if [ "$limit" -gt 0 ] && [ "$rc" = 124 ]; then
    CUT_BY="cut by $why ($limit s)"
    echo "cut: $CUT_BY, not a failure of its own" >> "$out"
  elif grep -q '^run: FAILED (timeout)' "$out" 2> /dev/null; then
    CUT_BY="cut by kgen's --timeout $RUN_TIMEOUT s (a time limit, not a wrong answer)"
  fi
  tail -3 "$out" | sed 's/^/    /'
  return "$rc"
}
FAILED=0
warn() {
  if [ "$SKIPPED" = 1 ]; then SKIPPED=0; return 0; fi
  say "warning: $*${CUT_BY:+ ($CUT_BY)}"
  FAILED=$((FAILED + 1))
}

# 1. Packages and kgen.
setup() {
  local missing=() p sudo=""
  for p in $DEB_PKGS; do dpkg -s "$p" 2> /dev/null | grep -q "^Status: install ok installed" || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ] && command -v apt-get > /dev/null; then
    [ "$(id -u)" = 0 ] || sudo=sudo
    say "installing missing Debian packages: ${missing[*]}"
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
      --no-install-recommends "${missing[@]}"; } > "$LOGDIR/apt.txt" 2>&1 ||
      say "could not install them (see $LOGDIR/apt.txt): the peers they provide are left out"
  fi
  say "building kgen (make BUILD=$BUILD)"
  make --no-print-directory BUILD="$BUILD" -j"$(nproc)" > "$LOGDIR/make.txt" 2>&1 ||
    { tail -30 "$LOGDIR/make.txt" >&2; die "make failed (full output: $LOGDIR/make.txt)"; }
  # PyTorch 2.x for the peers, in its own virtual environment (or TORCH_PYTHON, checked)
  if record 1800 "$LOGDIR/torch-venv.txt" env BUILD="$BUILD" TORCH_VENV="$TORCH_VENV" TORCH_PYTHON="${TORCH_PYTHON:-}" \
    bench/torch-venv.sh; then
    TORCH_PY=$(tail -1 "$LOGDIR/torch-venv.txt")
  else
    say "no working PyTorch 2.x (see $LOGDIR/torch-venv.txt): the PyTorch peers are left out"
  fi
  if [ "$TARGET" = c ] && [ -f "$PEERS_DIR/openblas_sgemm.c" ]; then
    mkdir -p "$BUILD/bench/peers"
    ${CC:-cc} -O2 "$PEERS_DIR/openblas_sgemm.c" -o "$BUILD/bench/peers/openblas_sgemm" -lopenblas 2> /dev/null ||
      say "could not build the OpenBLAS peer (libopenblas-dev?): left out"
  fi
}

# 2. Tuning: fused and unfused (and random for the curves); a log already in LOGDIR is kept as it is.
tune_one() { # workload variant extra-args...
  local w=$1 v=$2; shift 2
  local log="$LOGDIR/$w.$v.kglog" t0 rc=0
  if [ -s "$log" ]; then say "$log exists: not tuned again"; return 0; fi
  t0=$(now)
  # shellcheck disable=SC2046  # the workload's arguments are words on purpose
  record "$TUNE_LIMIT" "$LOGDIR/$w.$v.tune.txt" "$KGEN" tune $(workload_args "$w") --target "$TARGET" \
    --trials "$TRIALS" --seed "$SEED" --log "$log" --best-out "$LOGDIR/$w.$v.sched" "${TUNE_TIMEOUT_ARGS[@]}" "$@" ||
    rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$w" "$v" "$rc" "$t0" "$(now)" >> "$RUNS"
  # a run stopped by TUNE_LIMIT (124, 125) still leaves its records; the best trace is then taken from the log (the
  # --best-out file a stopped tuner leaves is empty: it opened it at its start). Otherwise an empty trace is a
  # result (the default schedule won), so it is the file's absence that is tested here and below.
  if { [ ! -f "$LOGDIR/$w.$v.sched" ] || [ "$rc" = 124 ] || [ "$rc" = 125 ]; } && [ -s "$log" ]; then
    "$PYTHON" bench/tune_report.py best-trace "$log" > "$LOGDIR/$w.$v.sched" 2> /dev/null || rm -f "$LOGDIR/$w.$v.sched"
  fi
  case $rc in 0 | 124 | 125) ;; *) warn "tuning $w ($v) exited with status $rc" ;; esac
}
tune() { # workload
  tune_one "$1" fused
  if [ "$(nstages "$1")" -gt 1 ]; then tune_one "$1" unfused --no-fuse; fi
}

# 3. Naive, unfused and fused kernels, each verified and timed; the fused one's data saved for the peers.
measure() { # workload
  local w=$1 v sched
  # shellcheck disable=SC2046
  record 600 "$LOGDIR/$w.naive.txt" "$KGEN" run $(workload_args "$w") --target "$TARGET" --measure \
    --timeout "$RUN_TIMEOUT" ||
    warn "measuring the default schedule of $w failed"
  for v in unfused fused; do
    sched="$LOGDIR/$w.$v.sched"
    [ -f "$sched" ] || continue
    # shellcheck disable=SC2046
    record 600 "$LOGDIR/$w.$v.txt" "$KGEN" run $(workload_args "$w") --target "$TARGET" --measure \
      --min-repeat-ms 1000 --timeout "$RUN_TIMEOUT" --schedule "$sched" || warn "measuring the $v kernel of $w failed"
  done
  if [ -f "$LOGDIR/$w.fused.sched" ]; then
    rm -rf "$LOGDIR/$w.data"
    # shellcheck disable=SC2046
    record 600 "$LOGDIR/$w.save.txt" "$KGEN" run $(workload_args "$w") --target "$TARGET" \
      --schedule "$LOGDIR/$w.fused.sched" --timeout "$RUN_TIMEOUT" --save "$LOGDIR/$w.data" || warn "saving the data of $w failed"
  fi
}

# 4. What the tuned kernel costs to get when it is not tuned again: replay from the log, export, the header's
# compile. Wall times in W.build.tsv.
build() { # workload
  local w=$1 log="$LOGDIR/$1.fused.kglog" t0 hdir="$LOGDIR/$1.kernels" name
  [ -s "$log" ] || return 0
  name=$(basename "$(workload_args "$w" | cut -d' ' -f1)" .te)
  : > "$LOGDIR/$w.build.tsv"
  t0=$(now)
  # shellcheck disable=SC2046
  record 600 "$LOGDIR/$w.replay.txt" "$KGEN" replay "$log" $(workload_args "$w") --target "$TARGET" \
    --lib bench/workloads --timeout "$RUN_TIMEOUT" && printf 'replay\t%s\n' "$(since "$t0")" >> "$LOGDIR/$w.build.tsv" ||
    warn "replaying $w failed"
  mkdir -p "$hdir"
  t0=$(now)
  record 600 "$LOGDIR/$w.export.txt" "$KGEN" export "$log" --target "$TARGET" --lib bench/workloads \
    --out "$hdir" && printf 'export\t%s\n' "$(since "$t0")" >> "$LOGDIR/$w.build.tsv" ||
    { warn "exporting $w failed"; return 0; }
  printf '#define KG_IMPLEMENTATION\n#include "%s.h"\n' "$name" > "$hdir/use.c"
  t0=$(now)
  if [ "$TARGET" = cuda ]; then
    record 600 "$LOGDIR/$w.hcc.txt" nvcc -O3 -x cu -c "$hdir/use.c" -I"$hdir" -o "$hdir/use.o"
  else
    record 600 "$LOGDIR/$w.hcc.txt" "${CC:-cc}" $(sed -n 's/^#define KG_KERNEL_CFLAGS "\(.*\)"$/\1/p' codegen/kernel_flags.h) -c "$hdir/use.c" \
      -I"$hdir" -o "$hdir/use.o"
  fi && printf 'header_cc\t%s\n' "$(since "$t0")" >> "$LOGDIR/$w.build.tsv" ||
    warn "compiling the exported header of $w failed"
}

# 5. The peers, on the same machine and threads, right after kgen's kernels of the workload.
torch_modes() { # workload: eager and the vendor libraries first, the compilers (slow to start) last
  local vendor="" out="" frozen=""
  case "$1:$TARGET" in
    matmul:cuda) vendor=,cublas,cublas-tf32 ;; conv2d:cuda) vendor=,cudnn ;; attention:cuda) vendor=,sdpa ;;
  esac
  case "$1" in matmul | mlp_gelu) frozen=,max-autotune-frozen ;; esac
  membound "$1" && out=,eager-out
  if [ "$TORCH_MODES" != auto ]; then echo "$TORCH_MODES"; return; fi
  if "$TORCH_PY" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)' 2> /dev/null; then
    if [ "$TORCH_AUTOTUNE" = 0 ]; then echo "eager$vendor$out,compile${out:+,compile-out}"; return; fi
    echo "eager$vendor$out,compile,max-autotune$frozen${out:+,compile-out}"
  else
    echo "eager$vendor$out"
  fi
}
HAVE_TORCH=
peers() { # workload
  local w=$1 dev=cpu name sizes vf=()
  [ "$TARGET" = cuda ] && dev=cuda
  [ -n "$HAVE_TORCH" ] || { "$TORCH_PY" -c 'import torch' 2> /dev/null && HAVE_TORCH=yes || HAVE_TORCH=no; }
  if [ "$HAVE_TORCH" = yes ]; then
    [ -d "$LOGDIR/$w.data" ] && vf=(--verify "$LOGDIR/$w.data")
    name=$(basename "$(workload_args "$w" | cut -d' ' -f1)" .te)
    sizes=$(workload_args "$w" | cut -d' ' -f2-)
    # shellcheck disable=SC2086
    record "$PEER_LIMIT" "$LOGDIR/$w.torch.txt" "$TORCH_PY" bench/torch_peers.py time "$name" $sizes \
      --device "$dev" --modes "$(torch_modes "$w")" --threads "$THREADS" --mode-timeout "$((PEER_LIMIT * 2 / 3))" \
      "${vf[@]}" --out "$LOGDIR/$w.torch.json" ||
      warn "the PyTorch peers of $w failed"
  elif [ ! -e "$LOGDIR/no-torch.txt" ]; then
    say "no PyTorch for $TORCH_PY (the setup step installs it, bench/torch-venv.sh): its peers are left out" |
      tee "$LOGDIR/no-torch.txt"
  fi
  [ "$TARGET" = c ] || return 0
  local blas="$BUILD/bench/peers/openblas_sgemm" hw=() bytes
  # the copy rate at this workload's footprint, right after its kernels: the ceiling a memory-bound kernel is
  # reported against
  if membound "$w"; then
    bytes=$(footprint "$w")
    if [ -x "$BUILD/bench/copy_bw" ] && [ -n "$bytes" ]; then
      record "$PEER_LIMIT" "$LOGDIR/$w.copy.txt" "$BUILD/bench/copy_bw" "$bytes" --threads "$THREADS" ||
        warn "the copy bandwidth at the footprint of $w failed"
    else
      say "no copy rate for $w (no $BUILD/bench/copy_bw, or no footprint): its fraction of it is left out"
    fi
  else
    # the FMA peak over the same threads, right after the kernels: the roof a compute-bound kernel is reported
    # against (bench/hand/fma_peak.c, built with the kernel flags)
    record "$PEER_LIMIT" "$LOGDIR/$w.peak.txt" env BUILD="$BUILD" THREADS="$THREADS" bench/hand/run.sh fma_peak 0.3 ||
      warn "the FMA peak beside $w failed"
  fi
  # OpenBLAS's and Halide's peers take their sizes from the workload's (a peer at other sizes than kgen's would
  # be compared with it all the same): a square matmul, softmax at any N and D, the convolution at the CPU's ResNet
  # layer only (the Halide script's one shape); left out otherwise, and said so
  local args m sq=
  args=$(workload_args "$w")
  m=$(dval "$args" M)
  [ -n "$m" ] && [ "$m" = "$(dval "$args" N)" ] && [ "$m" = "$(dval "$args" K)" ] && sq=$m
  if [ "$w" = matmul ] && [ -x "$blas" ] && [ -n "$sq" ]; then
    # OpenBLAS with its best kernels for this CPU (bench/openblas-peer.sh says why that needs saying)
    record "$PEER_LIMIT" "$LOGDIR/peers-openblas.txt" bench/openblas-peer.sh "$blas" "$THREADS" "$sq" ||
      warn "the OpenBLAS peer failed"
  fi
  case "$w" in
    matmul) [ -n "$sq" ] && hw=(matmul "$sq") ;;
    conv2d) [ "$args" = "bench/workloads/conv2d_3x3.te -D N=1 -D C=64 -D H=56 -D W=56 -D F=64" ] && hw=(conv2d) ;;
    softmax) hw=(softmax "$(dval "$args" N)" "$(dval "$args" D)") ;;
  esac
  case "$w" in matmul | conv2d | softmax)
    [ "${#hw[@]}" -gt 0 ] || say "$w at $args: no Halide or OpenBLAS peer at these sizes (left out)" ;;
  esac
  if [ "${#hw[@]}" -gt 0 ] && "$PYTHON" -c 'import halide' 2> /dev/null; then
    record "$PEER_LIMIT" "$LOGDIR/peers-halide-$w.txt" "$PYTHON" "$PEERS_DIR/halide_peers.py" --threads "$THREADS" \
      --schedulers Adams2019,Mullapudi2016 "${hw[@]}" || warn "the Halide peers of $w failed"
  fi
  tvm_peer "$w"
}

# TVM MetaSchedule: its venv (apache-tvm from PyPI, too large for the Debian package list) at setup, then the
# workload tuned with kgen's budget; its work folder (MetaSchedule's records and logs) is kept for the curve.
tvm_setup() {
  [ "$TARGET" = c ] && [ -n "$TVM_WORKLOADS" ] || return 0
  record 1800 "$LOGDIR/tvm-venv.txt" env BUILD="$BUILD" bench/tvm-venv.sh "$TVM_VENV" ||
    say "no TVM venv (see $LOGDIR/tvm-venv.txt): the MetaSchedule peer is left out"
}
tvm_peer() { # workload
  local w=$1 name sizes vf=()
  [ "$TARGET" = c ] || return 0
  case " $TVM_WORKLOADS " in *" $w "*) ;; *) return 0 ;; esac
  if [ ! -x "$TVM_VENV/bin/python" ]; then
    [ -e "$LOGDIR/no-tvm.txt" ] || say "no $TVM_VENV (the setup step makes it): TVM is left out" | tee "$LOGDIR/no-tvm.txt"
    return 0
  fi
  if grep -q '"median_ms"' "$LOGDIR/$w.tvm.json" 2> /dev/null; then say "$LOGDIR/$w.tvm.json exists: not tuned again"; return 0; fi
  [ -d "$LOGDIR/$w.data" ] && vf=(--verify "$LOGDIR/$w.data")
  name=$(basename "$(workload_args "$w" | cut -d' ' -f1)" .te)
  sizes=$(workload_args "$w" | cut -d' ' -f2-)
  rm -rf "$LOGDIR/$w.tvm"
  # shellcheck disable=SC2086
  record "$PEER_LIMIT" "$LOGDIR/$w.tvm.txt" "$TVM_VENV/bin/python" bench/tvm_peers.py time "$name" $sizes \
    --trials "$TVM_TRIALS" --threads "$THREADS" --seed "$SEED" --work-dir "$LOGDIR/$w.tvm" "${vf[@]}" \
    --out "$LOGDIR/$w.tvm.json" || warn "the TVM MetaSchedule peer of $w failed"
}

# 6. Model-guided vs random search at equal trials (the fused logs are the model's curves).
curves() {
  local w
  for w in $CURVE_WORKLOADS; do
    case " $WORKLOADS " in *" $w "*) ;; *) tune_one "$w" fused ;; esac
    tune_one "$w" random --model random
  done
}

# 7. Shape transitions: kgen's three ways (bench/dynamic-shapes.sh), then torch.compile on the same sequence.
dynamic() {
  local d="$LOGDIR/dynamic" w dev=cpu fixed
  [ "$TARGET" = cuda ] && dev=cuda
  record 0 "$LOGDIR/dynamic.txt" env BUILD="$BUILD" TARGET="$TARGET" WORKLOADS="$DYN_WORKLOADS" \
    TRIALS="$DYN_TRIALS" SEED="$SEED" LOGDIR="$d" RESULTS="$d" bench/dynamic-shapes.sh ||
    warn "the dynamic-shape experiment failed"
  "$TORCH_PY" -c 'import torch' 2> /dev/null || return 0
  for w in $DYN_WORKLOADS; do
    [ -s "$d/$w/calls.tsv" ] || continue
    case "$w" in matmul) fixed="-D K=512 -D N=512" ;; softmax) fixed="-D D=1024" ;; *) continue ;; esac
    # the sequence of sizes the kgen driver ran, one a line
    awk -F'\t' 'NR > 1 && $3 == "specialize" { print $2 }' "$d/$w/calls.tsv" > "$d/$w/sequence.txt"
    # shellcheck disable=SC2086
    record "$PEER_LIMIT" "$d/$w.torch.txt" "$TORCH_PY" bench/torch_peers.py dynamic "$w" $fixed \
      --seq "$d/$w/sequence.txt" --device "$dev" --modes "eager,static,dynamic" --threads "$THREADS" \
      --out "$d/$w.torch.json" || warn "the torch.compile shape-transition peer of $w failed"
  done
}

report() { # runs past DEADLINE: what was measured is always reported
  mkdir -p "$RESULTS"
  "$PYTHON" bench/suite_report.py --logdir "$LOGDIR" --out "$RESULTS/suite-$TARGET-$(date '+%Y-%m-%d').md" ||
    warn "the report failed"
}

say "target $TARGET; logs and raw outputs in $LOGDIR; $TRIALS trials; workloads: $WORKLOADS; steps: $STEPS"
for s in $STEPS; do
  case "$s" in
    setup | tune | measure | build | peers | curves | dynamic | report) ;;
    *) die "unknown step '$s' (known: setup tune measure build peers curves dynamic report)" ;;
  esac
done
# setup, then workload after workload through its steps (so that a DEADLINE cuts whole workloads, not the last
# steps of all of them), then the steps over all workloads
case " $STEPS " in *" setup "*) setup ;; esac
case " $STEPS " in *" setup "*) tvm_setup ;; esac
[ -x "$KGEN" ] || die "no $KGEN: run with STEPS including setup, or make first"
for w in $WORKLOADS; do
  for s in $STEPS; do
    case "$s" in tune | measure | build | peers) "$s" "$w" ;; esac
  done
done
for s in $STEPS; do
  case "$s" in curves | dynamic | report) "$s" ;; esac
done
if [ "$FAILED" -gt 0 ]; then
  say "$FAILED command(s) failed (see $LOGDIR)"
  exit 1
fi
say "done: raw outputs in $LOGDIR"
