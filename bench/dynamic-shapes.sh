#!/usr/bin/env bash
# The shape-transition benchmark: a serving-like sequence of calls whose size changes (matmul's M
# over 1..4096 with K=N=512; softmax's rows N with D=1024) run three ways by bench/dynamic_shapes: (a) a kernel
# specialized and compiled at each new size, (b) one dynamic kernel compiled once, (c) the range-tuned bucket set.
# First the range tuning (`kgen tune --dynamic ... --buckets`) of each workload, unless LOG names one; then the
# driver; then bench/dynamic_report.py writes bench/results/dynamic-shapes-TARGET-DATE.md (and .png when matplotlib
# is there).
#
# A benchmark, not a test: run it on an otherwise idle machine (every kernel uses all cores). Builds nothing: run
# `make BUILD=...` first.
#
# usage (from anywhere; it works in the repository root):
#   bench/dynamic-shapes.sh
# environment:
#   TARGET=c                 c or cuda (cuda needs a GPU)
#   WORKLOADS=matmul         matmul and/or softmax, in any order
#   RANGE=1..4096            the dynamic size's range
#   TRIALS=64                trials of each range tuning
#   BUCKETS=4                buckets of the range tuning
#   CALLS=60                 calls in the sequence
#   SEED=1                   the sequence's seed (and the tuning's)
#   MIN_MS=20                steady state: milliseconds of timed calls per size and approach
#   LOG=FILE                 a range-tuning log to use instead of tuning (one workload; its range is used)
#   LOGDIR=$BUILD/dynamic-shapes/STAMP   where logs and raw outputs go; a log already there is used as it is
#   RESULTS=bench/results    where the table and the plot go
#   BUILD=build              kgen's build folder (make BUILD=...)
#   PYTHON=/usr/bin/python3  for the report (Debian's python3-matplotlib lives there)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${TARGET:-c}
WORKLOADS=${WORKLOADS:-matmul}
RANGE=${RANGE:-1..4096}
TRIALS=${TRIALS:-64}
BUCKETS=${BUCKETS:-4}
CALLS=${CALLS:-60}
SEED=${SEED:-1}
MIN_MS=${MIN_MS:-20}
LOG=${LOG:-}
BUILD=${BUILD:-build}
LOGDIR=${LOGDIR:-$BUILD/dynamic-shapes/$(date '+%Y%m%d-%H%M%S')}
RESULTS=${RESULTS:-bench/results}
PYTHON=${PYTHON:-/usr/bin/python3}
KGEN=$BUILD/kgen
DRIVER=$BUILD/bench/dynamic_shapes

die() { echo "dynamic-shapes: error: $*" >&2; exit 1; }
say() { echo "dynamic-shapes: $*"; }

# The workloads: the .te file, the static sizes, the dynamic size.
workload_args() {
  case "$1" in
    matmul) echo "te/lib/matmul.te -D K=512 -D N=512" ;;
    softmax) echo "te/lib/softmax.te -D D=1024" ;;
    *) die "unknown workload '$1' (known: matmul softmax)" ;;
  esac
}
workload_size() {
  case "$1" in matmul) echo M ;; softmax) echo N ;; esac
}
for w in $WORKLOADS; do workload_args "$w" > /dev/null; done
case "$TARGET" in c | cuda) ;; *) die "TARGET is c or cuda, not '$TARGET'" ;; esac
for v in TRIALS BUCKETS CALLS SEED MIN_MS; do
  case "${!v}" in '' | *[!0-9]*) die "$v must be a positive integer, not '${!v}'" ;; esac
done
case "$RANGE" in *..*) ;; *) die "RANGE is LO..HI, not '$RANGE'" ;; esac
[ -z "$LOG" ] || [ "$(echo "$WORKLOADS" | wc -w)" = 1 ] || die "LOG goes with one workload"
[ -z "$LOG" ] || [ -s "$LOG" ] || die "no log $LOG"
if [ ! -x "$KGEN" ] || [ ! -x "$DRIVER" ]; then die "no $KGEN or $DRIVER: run make BUILD=$BUILD first"; fi

mkdir -p "$LOGDIR" "$RESULTS"
CMDS="$LOGDIR/commands.txt" # every command that produced a figure, for the report
: > "$CMDS"
if [ ! -s "$LOGDIR/machine.txt" ]; then
  hv=$(lscpu | sed -n 's/^Hypervisor vendor: *//p')
  hv=${hv:+virtualised, $hv}
  printf '%s, %s cores (%s), Linux %s, %s\n' "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" \
    "${hv:-bare metal}" "$(uname -r)" "$(${CC:-cc} --version | head -1)" > "$LOGDIR/machine.txt"
fi
if [ "$TARGET" = cuda ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 |
    sed 's/^/GPU: /' >> "$LOGDIR/machine.txt" || true
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

FAILED=0
DIRS=()
say "logs and raw outputs in $LOGDIR; target $TARGET; workloads: $WORKLOADS; $RANGE, $TRIALS trials, $CALLS calls"
for w in $WORKLOADS; do
  size=$(workload_size "$w")
  log=${LOG:-$LOGDIR/$w.$TARGET.kglog}
  if [ -z "$LOG" ] && [ ! -s "$log" ]; then
    # shellcheck disable=SC2046  # the workload's arguments are words on purpose
    record "$LOGDIR/$w.tune.txt" "$KGEN" tune $(workload_args "$w") --target "$TARGET" --dynamic "$size=$RANGE" \
      --buckets "$BUCKETS" --trials "$TRIALS" --seed "$SEED" --log "$log" --quiet ||
      die "the range tuning of $w failed (see $LOGDIR/$w.tune.txt)"
  fi
  rangearg=(--range "$RANGE")
  [ -z "$LOG" ] || rangearg=() # the log's own range
  rc=0
  # shellcheck disable=SC2046
  record "$LOGDIR/$w.driver.txt" "$DRIVER" --workload $(workload_args "$w") --size "$size" "${rangearg[@]}" \
    --log "$log" --out "$LOGDIR/$w" --calls "$CALLS" --seed "$SEED" --min-ms "$MIN_MS" --target "$TARGET" || rc=$?
  case $rc in
    0) ;;
    3) die "the $TARGET target cannot run here (see $LOGDIR/$w.driver.txt)" ;;
    *)
      say "warning: the driver exited with status $rc for $w"
      FAILED=$((FAILED + 1))
      ;;
  esac
  [ -s "$LOGDIR/$w/summary.tsv" ] && DIRS+=("$LOGDIR/$w")
done
[ "${#DIRS[@]}" -gt 0 ] || die "no results to report"

day=$(date '+%Y-%m-%d')
out="$RESULTS/dynamic-shapes-$TARGET-$day"
if ! "$PYTHON" -c 'import matplotlib' 2> /dev/null; then
  say "no matplotlib for $PYTHON: trying apt-get install python3-matplotlib once"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-matplotlib > "$LOGDIR/apt.txt" 2>&1 ||
    say "could not install matplotlib (see $LOGDIR/apt.txt): the report will have no plot"
fi
"$PYTHON" bench/dynamic_report.py --out "$out.md" --png "$out.png" --machine "$LOGDIR/machine.txt" \
  --commands "$CMDS" "${DIRS[@]}"
if [ "$FAILED" -gt 0 ]; then
  say "$FAILED driver run(s) failed (see $LOGDIR)"
  exit 1
fi
say "done: $out.md; raw outputs in $LOGDIR"
