#!/usr/bin/env bash
# bf16 GEMM on the CPU beside PyTorch (issue 19): kgen's matmul with every tensor bf16 (`--dtype bf16`: f32
# arithmetic, bf16 loads and rounded stores) tuned for TRIALS trials, its best schedule replayed and timed, in the
# same run as PyTorch's bf16 matmul (eager: oneDNN, which uses AVX-512 BF16 dot products where the CPU has them;
# torch.compile) and, for scale, both in f32. Writes bench/results/bf16-gemm-cpu-DATE.md with the command.
#
# A benchmark, not a test: run it on an otherwise idle machine (every program uses both cores).
# usage: bench/bf16-gemm-cpu.sh
# environment: SIZE=1024 (M = N = K), TRIALS=64, BUILD=build, RESULTS=bench/results, LOGDIR=$BUILD/bf16-gemm/STAMP
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SIZE=${SIZE:-1024}
TRIALS=${TRIALS:-64}
BUILD=${BUILD:-build}
RESULTS=${RESULTS:-bench/results}
LOGDIR=${LOGDIR:-$BUILD/bf16-gemm/$(date '+%Y%m%d-%H%M%S')}
mkdir -p "$LOGDIR" "$RESULTS"
K="$BUILD/kgen"
[ -x "$K" ] || make -j"$(nproc)" > /dev/null
PY=$(bench/torch-venv.sh | tail -1)
D="-D M=$SIZE -D N=$SIZE -D K=$SIZE"

kgen_time() { # dtype -> median seconds of the replayed best
  local dt=$1 log="$LOGDIR/matmul-$1.kglog"
  # shellcheck disable=SC2086
  "$K" tune matmul $D --dtype "$dt" --target c --trials "$TRIALS" --log "$log" --quiet > "$LOGDIR/tune-$dt.txt" 2>&1
  "$K" replay "$log" > "$LOGDIR/replay-$dt.txt" 2>&1
  sed -n 's/^ *time: \([0-9.e+-]*\) \([a-z]*\) now.*/\1 \2/p' "$LOGDIR/replay-$dt.txt" | head -1
}
torch_time() { # dtype -> "eager_ms compile_ms"
  # shellcheck disable=SC2086
  "$PY" bench/torch_peers.py time matmul $D --dtype "$1" --modes eager,compile --min-ms 200 --samples 5 \
    > "$LOGDIR/torch-$1.txt" 2>&1 || true
  local e c
  e=$(sed -n 's/.*mode=eager .*median_ms=\([0-9.e+-]*\).*/\1/p' "$LOGDIR/torch-$1.txt" | head -1)
  c=$(sed -n 's/.*mode=compile .*median_ms=\([0-9.e+-]*\).*/\1/p' "$LOGDIR/torch-$1.txt" | head -1)
  echo "${e:-?} ${c:-?}"
}
to_ms() { awk -v v="$1" -v u="$2" 'BEGIN { f = u == "s" ? 1e3 : u == "ms" ? 1 : u == "us" ? 1e-3 : 0; printf "%.3f", v * f }'; }

read -r kb ub <<< "$(kgen_time bf16)"
read -r kf uf <<< "$(kgen_time f32)"
read -r te tc <<< "$(torch_time bf16)"
read -r fe fc <<< "$(torch_time f32)"
kb=$(to_ms "$kb" "$ub")
kf=$(to_ms "$kf" "$uf")
flags=$(grep -o 'avx512_bf16\|avx512f\|f16c' /proc/cpuinfo | sort -u | tr '\n' ' ')
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", b / a; else print "?" }'; }
out="$RESULTS/bf16-gemm-cpu-$(date '+%Y-%m-%d').md"
{
  echo "# bf16 GEMM on the CPU, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "matmul ${SIZE}^3, 2 threads, on $cpu ($flags), one run. kgen tuned $TRIALS trials per type (\`--dtype\`),"
  echo "its best replayed; PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2> /dev/null) in the same run."
  echo
  echo "| type | kgen (ms) | PyTorch eager (ms) | torch.compile (ms) | kgen vs eager |"
  echo "|---|---|---|---|---|"
  echo "| bf16 | $kb | $te | $tc | $(ratio "$kb" "$te") |"
  echo "| f32 | $kf | $fe | $fc | $(ratio "$kf" "$fe") |"
  echo
  echo "A ratio above 1x: kgen faster. kgen's bf16 kernel widens each element to f32 and multiplies on the f32 FMA"
  echo "units; PyTorch's bf16 matmul (oneDNN) uses the CPU's bf16 dot-product instructions where it has them."
  echo
  echo "Reproduce: \`SIZE=$SIZE TRIALS=$TRIALS bench/bf16-gemm-cpu.sh\` (raw outputs in $LOGDIR)."
} > "$out"
cat "$out"
