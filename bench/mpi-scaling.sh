#!/usr/bin/env bash
# Distributed tuning's scaling (dist/, docs/distributed.md): trials per minute of `mpirun -np N kgen tune` against N
# for a compile-bound CPU workload (the ResNet conv2d layer: N=1 C=64 56x56 F=64, 3x3), each run a fresh log with
# the same seed and budget; N=1 is the plain local tune users run without MPI. Then what one candidate costs rank 0
# beyond the search (bench/mpi_pingpong.c, built by make: a message round trip on this machine's loopback, one fsynced record),
# and bench/mpi_model.py projects throughput to 8, 64 and 512 ranks and says where rank 0 becomes the bottleneck.
# Writes bench/results/mpi-scaling-DATE.{md,tsv,png}.
#
# On one machine the ranks share its cores, so the measured points show the overhead of distribution more than its
# gain (two cores here: at most a 2x of building); the projection is for ranks with cores of their own.
#
# usage: bench/mpi-scaling.sh
# environment:
#   RANKS="1 2 3 4"   the rank counts to measure
#   TRIALS=48         trials per run
#   SEED=1
#   BUILD=build       kgen's build folder (built with MPI: `make deps && make`)
#   RESULTS=bench/results
#   OUT=$BUILD/mpi-scaling/STAMP   logs and raw outputs
#   PYTHON=/usr/bin/python3        (python3-matplotlib for the plot)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RANKS=${RANKS:-1 2 3 4}
TRIALS=${TRIALS:-48}
SEED=${SEED:-1}
BUILD=${BUILD:-build}
RESULTS=${RESULTS:-bench/results}
OUT=${OUT:-$BUILD/mpi-scaling/$(date '+%Y%m%d-%H%M%S')}
PYTHON=${PYTHON:-/usr/bin/python3}
K=$BUILD/kgen
DATE=$(date '+%Y-%m-%d')
mkdir -p "$OUT" "$RESULTS"

[ -x "$K" ] && [ -x "$BUILD/bench/mpi_pingpong" ] || make -s BUILD="$BUILD"
if ! "$K" --version | grep -q "built with MPI" || ! command -v mpirun >/dev/null; then
  echo "bench/mpi-scaling.sh: needs kgen built with MPI and mpirun (make deps installs them; then make)" >&2
  exit 1
fi
MPIRUN=(mpirun --oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
W=(conv2d -D N=1 -D C=64 -D H=56 -D W=56 -D F=64 --target c --trials "$TRIALS" --seed "$SEED" --quiet)
CORES=$(nproc)

TSV="$RESULTS/mpi-scaling-c-$DATE.tsv"
printf 'ranks\ttrials\twall_s\tbuild_s\tmeasure_s\tsearch_s\tper_rank\n' > "$TSV"
for n in $RANKS; do
  log="$OUT/conv2d-np$n.kglog"
  rm -f "$log" "$log.model"
  if [ "$n" = 1 ]; then cmd=("$K" tune "${W[@]}" --log "$log")
  else cmd=("${MPIRUN[@]}" -np "$n" "$K" tune "${W[@]}" --log "$log"); fi
  echo "== $n rank(s): ${cmd[*]}"
  "${cmd[@]}" > "$OUT/np$n.out" 2> "$OUT/np$n.err" || { tail "$OUT/np$n.err"; exit 1; }
  trials=$(sed -n 's/^  trials: \([0-9]*\) this run.*/\1/p' "$OUT/np$n.out")
  read -r wall build meas search < <(sed -n 's/^time: \([0-9.]*\) s (build \([0-9.]*\) s, measure \([0-9.]*\) s, search and model \([0-9.]*\) s).*/\1 \2 \3 \4/p' "$OUT/np$n.out")
  per=$(sed -n 's/^ranks: .*results per rank: //p' "$OUT/np$n.out" | tr ' ' ',')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$trials" "$wall" "$build" "$meas" "$search" "${per:-$trials}" >> "$TSV"
  echo "   $trials trials in $wall s"
done

"${MPIRUN[@]}" -np 2 "$BUILD/bench/mpi_pingpong" "$OUT" 3000 > "$OUT/pingpong.txt"
cat "$OUT/pingpong.txt"
CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
MPIV=$(mpirun --version 2>/dev/null | head -1)
"$PYTHON" bench/mpi_model.py "$TSV" "$OUT/pingpong.txt" "$RESULTS/mpi-scaling-c-$DATE" \
  --cores "$CORES" --cpu "$CPU" --mpi "$MPIV" --date "$DATE" --command "RANKS=\"$RANKS\" TRIALS=$TRIALS bench/mpi-scaling.sh"
echo "wrote $RESULTS/mpi-scaling-c-$DATE.md"
