#!/usr/bin/env bash
# The CPU tuning benchmark: kgen's tuner on matmul 1024^3, a ResNet conv2d layer (N=1 C=64 56x56 F=64,
# 3x3, pad 1) and softmax 4096x4096, model-guided and with `--model random` at equal trials, in the same run as
# the peers (OpenBLAS sgemm, Halide 14's Adams2019 and Mullapudi2016 autoschedulers from ../shared/peers/). Then
# the best kernel of each tuning run is measured again beside the peers, and bench/tune_report.py writes the table
# bench/results/tune-cpu-DATE.md (and a PNG of the tuning curves when matplotlib is there).
#
# A benchmark, not a test: at 500 trials a workload and model it took 20 minutes on a 2-core machine (2026-12-02),
# peers included. Run it on an otherwise idle machine; every program uses both cores.
#
# usage (from anywhere; it works in the repository root):
#   bench/tune-cpu.sh
# environment:
#   TRIALS=500                    trials per workload and model (e.g. TRIALS=40 for a quick run)
#   WORKLOADS="matmul conv2d softmax"   a subset, in any order
#   MODELS="xgb random"           the tuners' --model values to compare
#   SEED=1                        --seed of every tuning run
#   STEPS="setup tune remeasure peers report"   which parts to run (e.g. STEPS="setup peers" for the peers alone)
#   LOGDIR=build/tune-cpu/STAMP   where logs and raw outputs go; naming an existing one resumes its logs (each
#                                 tuning run then adds TRIALS new trials to its log)
#   RESULTS=bench/results         where the table and the plot go
#   BUILD=build                   kgen's build folder (make BUILD=...)
#   PEERS_DIR=../shared/peers     halide_peers.py and openblas_sgemm.c
#   PYTHON=/usr/bin/python3       Debian's Python (python3-halide, python3-msgpack, python3-matplotlib live there)
#   THREADS=<cores>               threads for the peers (kgen's OpenMP kernels use every core)
# The autoscheduler plugins are in libhalide14-0-dev (python3-halide alone lacks them).
# Needs network only when Debian packages are missing (apt-get; pip for msgpack where there is no apt).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TRIALS=${TRIALS:-500}
WORKLOADS=${WORKLOADS:-matmul conv2d softmax}
MODELS=${MODELS:-xgb random}
SEED=${SEED:-1}
STEPS=${STEPS:-setup tune remeasure peers report}
BUILD=${BUILD:-build}
LOGDIR=${LOGDIR:-$BUILD/tune-cpu/$(date '+%Y%m%d-%H%M%S')}
RESULTS=${RESULTS:-bench/results}
PEERS_DIR=${PEERS_DIR:-../shared/peers}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-$(nproc)}
KGEN=$BUILD/kgen
DEB_PKGS="libopenblas-dev python3-halide libhalide14-0-dev python3-numpy python3-msgpack python3-matplotlib"

die() { echo "tune-cpu: error: $*" >&2; exit 1; }
say() { echo "tune-cpu: $*"; }

# The workloads: the .te file and its size bindings.
workload_args() {
  case "$1" in
    matmul) echo "te/lib/matmul.te -D M=1024 -D N=1024 -D K=1024" ;;
    conv2d) echo "bench/workloads/conv2d_3x3.te -D N=1 -D C=64 -D H=56 -D W=56 -D F=64" ;;
    softmax) echo "te/lib/softmax.te -D N=4096 -D D=4096" ;;
    *) die "unknown workload '$1' (known: matmul conv2d softmax)" ;;
  esac
}
for w in $WORKLOADS; do workload_args "$w" > /dev/null; done
for m in $MODELS; do case "$m" in xgb | random) ;; *) die "unknown model '$m' (known: xgb random)" ;; esac; done
case "$TRIALS" in '' | *[!0-9]*) die "TRIALS must be a positive integer, not '$TRIALS'" ;; esac
[ "$TRIALS" -gt 0 ] || die "TRIALS must be positive"

mkdir -p "$LOGDIR"
CMDS="$LOGDIR/commands.txt"   # every command that produced a figure, for the report
RUNS="$LOGDIR/runs.tsv"       # workload, model, exit status, wall seconds of each tuning run
touch "$CMDS" "$RUNS"
if [ ! -s "$LOGDIR/machine.txt" ]; then   # what the report names as the machine (the first run in LOGDIR's)
  hv=$(lscpu | sed -n 's/^Hypervisor vendor: *//p')
  hv=${hv:+virtualised, $hv}
  printf '%s, %s cores (%s), Linux %s, %s\n' "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" \
    "${hv:-bare metal}" "$(uname -r)" "$(${CC:-cc} --version | head -1)" > "$LOGDIR/machine.txt"
fi
# runs a command, its output to a file (and the terminal), recorded in commands.txt; returns its exit status
record() {
  local out=$1; shift
  echo "$*" >> "$CMDS"
  say "\$ $*"
  local rc=0
  "$@" 2>&1 | tee "$out" || rc=$?
  return "$rc"
}

# 1. Packages, kgen, the OpenBLAS peer.
install_missing() {
  local missing=() p
  for p in $DEB_PKGS; do dpkg -s "$p" 2> /dev/null | grep -q "^Status: install ok installed" || missing+=("$p"); done
  [ "${#missing[@]}" = 0 ] && return 0
  command -v apt-get > /dev/null || return 1
  say "installing missing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
setup() {
  if ! install_missing; then
    say "no apt-get: install OpenBLAS, Halide 14's Python bindings, NumPy, msgpack and matplotlib by hand"
  fi
  [ -x "$PYTHON" ] || die "no Python at $PYTHON (set PYTHON)"
  if ! "$PYTHON" -c 'import msgpack' 2> /dev/null; then
    say "msgpack missing for $PYTHON: pip install --user msgpack"
    "$PYTHON" -m pip install --user -q msgpack || die "could not install the msgpack Python package"
  fi
  "$PYTHON" -c 'import matplotlib' 2> /dev/null || say "note: no matplotlib for $PYTHON; the report will have no plot"
  if [ ! -f "$PEERS_DIR/halide_peers.py" ] || [ ! -f "$PEERS_DIR/openblas_sgemm.c" ]; then
    die "peer programs not found in $PEERS_DIR (set PEERS_DIR)"
  fi
  say "building kgen (make BUILD=$BUILD)"
  make --no-print-directory BUILD="$BUILD" -j"$(nproc)" > "$LOGDIR/make.txt" 2>&1 ||
    { tail -30 "$LOGDIR/make.txt" >&2; die "make failed (full output: $LOGDIR/make.txt)"; }
  mkdir -p "$BUILD/bench/peers"
  ${CC:-cc} -O2 "$PEERS_DIR/openblas_sgemm.c" -o "$BUILD/bench/peers/openblas_sgemm" -lopenblas ||
    die "could not build the OpenBLAS peer (libopenblas-dev installed?)"
}

# 2. Tuning: every workload with every model, each into its own log.
tune() {
  [ -x "$KGEN" ] || die "no $KGEN: run with STEPS including setup, or make first"
  local w m rc t0
  for w in $WORKLOADS; do
    for m in $MODELS; do
      t0=$(date +%s)
      rc=0
      # shellcheck disable=SC2046  # the workload's arguments are words on purpose
      record "$LOGDIR/$w-$m.tune.txt" "$KGEN" tune $(workload_args "$w") --target c --trials "$TRIALS" \
        --log "$LOGDIR/$w-$m.msgpack" --seed "$SEED" --model "$m" || rc=$?
      printf '%s\t%s\t%s\t%s\n' "$w" "$m" "$rc" "$(($(date +%s) - t0))" >> "$RUNS"
      # a failed run still leaves its records: the report shows what there is and says the run failed
      [ "$rc" = 0 ] || { say "warning: tuning $w with --model $m exited with status $rc"; FAILED=$((FAILED + 1)); }
    done
  done
}

# 3. The best kernel of each log measured again, in the measurement harness, right before the peers.
remeasure() {
  [ -x "$KGEN" ] || die "no $KGEN"
  local w m log sched
  for w in $WORKLOADS; do
    for m in $MODELS; do
      log="$LOGDIR/$w-$m.msgpack"
      sched="$LOGDIR/$w-$m.best.sched"
      if [ ! -s "$log" ]; then say "no log $log: nothing to measure again"; continue; fi
      if ! "$PYTHON" bench/tune_report.py best-trace "$log" > "$sched"; then
        say "warning: no successful record in $log"; rm -f "$sched"; continue
      fi
      # shellcheck disable=SC2046
      record "$LOGDIR/$w-$m.best.txt" "$KGEN" run $(workload_args "$w") --target c --measure \
        --min-repeat-ms 1000 --schedule "$sched" ||
        { say "warning: measuring the best $w kernel ($m) again failed"; FAILED=$((FAILED + 1)); }
    done
  done
}

# 4. The peers, on the same threads.
peers() {
  local blas="$BUILD/bench/peers/openblas_sgemm"
  [ -x "$blas" ] || die "no $blas: run with STEPS including setup"
  case " $WORKLOADS " in
    *" matmul "*) record "$LOGDIR/peers-openblas.txt" bench/openblas-peer.sh "$blas" "$THREADS" 1024 ||
      die "the OpenBLAS peer failed" ;;
  esac
  local hw=() w
  for w in $WORKLOADS; do
    case "$w" in matmul) hw+=(matmul 1024) ;; conv2d) hw+=(conv2d) ;; softmax) hw+=(softmax 4096 4096) ;; esac
  done
  [ "${#hw[@]}" -gt 0 ] || return 0
  record "$LOGDIR/peers-halide.txt" "$PYTHON" "$PEERS_DIR/halide_peers.py" --threads "$THREADS" \
    --schedulers Adams2019,Mullapudi2016 "${hw[@]}" || die "the Halide peers failed"
}

report() {
  mkdir -p "$RESULTS"
  local day
  day=$(date '+%Y-%m-%d')
  "$PYTHON" bench/tune_report.py report --logdir "$LOGDIR" --workloads "$WORKLOADS" --models "$MODELS" \
    --trials "$TRIALS" --out "$RESULTS/tune-cpu-$day.md" --png "$RESULTS/tune-cpu-$day.png"
}

FAILED=0   # tuning runs and measurements that failed: the script still reports, then exits 1
say "logs and raw outputs in $LOGDIR; trials $TRIALS; workloads: $WORKLOADS; models: $MODELS; steps: $STEPS"
for s in $STEPS; do
  case "$s" in
    setup | tune | remeasure | peers | report) "$s" ;;
    *) die "unknown step '$s' (known: setup tune remeasure peers report)" ;;
  esac
done
if [ "$FAILED" -gt 0 ]; then
  say "$FAILED tuning run(s) or measurement(s) failed (see $LOGDIR)"
  exit 1
fi
say "done: logs in $LOGDIR"
