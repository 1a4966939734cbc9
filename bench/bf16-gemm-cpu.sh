#!/usr/bin/env bash
# bf16 GEMM on the CPU beside PyTorch (issue 19): kgen's matmul with every tensor bf16 (`--dtype bf16`: f32
# arithmetic, bf16 loads and rounded stores) tuned for TRIALS trials, its best schedule replayed and timed, in the
# same run as PyTorch's bf16 matmul (eager: oneDNN, which uses AVX-512 BF16 dot products where the CPU has them;
# torch.compile) and, for scale, both in f32. Writes bench/results/bf16-gemm-cpu-DATE-VENDOR.md with the command.
#
# A benchmark, not a test: run it on an otherwise idle machine (every program uses both cores).
# usage: bench/bf16-gemm-cpu.sh
# environment: SIZE=1024 (M = N = K), TRIALS=64, ROUNDS=3, BUILD=build, RESULTS=bench/results, LOGDIR=$BUILD/bf16-gemm/STAMP
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SIZE=${SIZE:-1024}
TRIALS=${TRIALS:-64}
ROUNDS=${ROUNDS:-3}
BUILD=${BUILD:-build}
RESULTS=${RESULTS:-bench/results}
LOGDIR=${LOGDIR:-$BUILD/bf16-gemm/$(date '+%Y%m%d-%H%M%S')}
mkdir -p "$LOGDIR" "$RESULTS"
K="$BUILD/kgen"
[ -x "$K" ] || make -j"$(nproc)" > /dev/null
PY=$(bench/torch-venv.sh | tail -1)
D="-D M=$SIZE -D N=$SIZE -D K=$SIZE"

kgen_tune() { # dtype: tunes TRIALS trials into $LOGDIR/matmul-DTYPE.kglog
  # shellcheck disable=SC2086
  "$K" tune matmul $D --dtype "$1" --target c --trials "$TRIALS" --log "$LOGDIR/matmul-$1.kglog" --quiet \
    > "$LOGDIR/tune-$1.txt" 2>&1
}
kgen_time() { # dtype round -> milliseconds of the replayed best
  "$K" replay "$LOGDIR/matmul-$1.kglog" > "$LOGDIR/replay-$1-$2.txt" 2>&1
  local v u
  read -r v u <<< "$(sed -n 's/^ *time: \([0-9.e+-]*\) \([a-z]*\) now.*/\1 \2/p' "$LOGDIR/replay-$1-$2.txt" | head -1)"
  to_ms "${v:-0}" "${u:-ms}"
}
torch_time() { # dtype round -> "eager_ms compile_ms"
  # shellcheck disable=SC2086
  "$PY" bench/torch_peers.py time matmul $D --dtype "$1" --modes eager,compile --min-ms 200 --samples 5 \
    > "$LOGDIR/torch-$1-$2.txt" 2>&1 || true
  local e c
  e=$(sed -n 's/.*mode=eager .*median_ms=\([0-9.e+-]*\).*/\1/p' "$LOGDIR/torch-$1-$2.txt" | head -1)
  c=$(sed -n 's/.*mode=compile .*median_ms=\([0-9.e+-]*\).*/\1/p' "$LOGDIR/torch-$1-$2.txt" | head -1)
  echo "${e:-0} ${c:-0}"
}
to_ms() { awk -v v="$1" -v u="$2" 'BEGIN { f = u == "s" ? 1e3 : u == "ms" ? 1 : u == "us" ? 1e-3 : 0; printf "%.3f", v * f }'; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 <= 0) print b; else if (b + 0 <= 0 || a + 0 <= b + 0) print a; else print b }'; }

kgen_tune bf16
kgen_tune f32
# The machines are shared: the four programs are timed in turn, ROUNDS times, and each keeps its best round, so
# that a neighbour's burst during one of them does not decide the ratio.
kb=0 kf=0 te=0 tc=0 fe=0 fc=0 rounds=""
for r in $(seq 1 "$ROUNDS"); do
  a=$(kgen_time bf16 "$r")
  b=$(kgen_time f32 "$r")
  read -r x y <<< "$(torch_time bf16 "$r")"
  read -r u v <<< "$(torch_time f32 "$r")"
  rounds="$rounds| $r | $a | $x | $y | $b | $u | $v |"$'\n'
  kb=$(min "$kb" "$a") kf=$(min "$kf" "$b") te=$(min "$te" "$x") tc=$(min "$tc" "$y") fe=$(min "$fe" "$u") fc=$(min "$fc" "$v")
done
flags=$(grep -o 'avx512_bf16\|avx512f\|f16c\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
vendor=$(sed -n 's/^vendor_id\s*: //p' /proc/cpuinfo | head -1)
case "$vendor" in GenuineIntel) tag=intel ;; AuthenticAMD) tag=amd ;; *) tag=cpu ;; esac
widened=$(grep -c '^ *widen ' "$LOGDIR/replay-bf16-1.txt" || true)
dots=$(grep -c '^ *bfdot ' "$LOGDIR/replay-bf16-1.txt" || true)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", b / a; else print "?" }'; }
out="$RESULTS/bf16-gemm-cpu-$(date '+%Y-%m-%d')-$tag.md"
{
  echo "# bf16 GEMM on the CPU, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "matmul ${SIZE}^3, 2 threads, on $cpu ($flags), one run. kgen tuned $TRIALS trials per type (\`--dtype\`),"
  echo "its best replayed; PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2> /dev/null) in the same run."
  echo "The four programs were timed in turn, $ROUNDS rounds; each figure is its best round (all rounds below)."
  echo
  echo "| type | kgen (ms) | PyTorch eager (ms) | torch.compile (ms) | kgen vs eager |"
  echo "|---|---|---|---|---|"
  echo "| bf16 | $kb | $te | $tc | $(ratio "$kb" "$te") |"
  echo "| f32 | $kf | $fe | $fc | $(ratio "$kf" "$fe") |"
  echo
  if [ "$dots" -gt 0 ]; then how="multiplies with bf16 pair dot products (\`bfdot\`)"; else how="multiplies on the f32 FMA units"; fi
  if [ "$widened" -gt 0 ]; then wide="widens $widened of its packed copies to f32 (\`widen\`)"; else wide="keeps its packed copies bf16"; fi
  echo "A ratio above 1x: kgen faster. kgen's bf16 schedule $wide and"
  echo "$how. PyTorch's bf16 matmul (oneDNN) uses the CPU's bf16 dot-product instructions where it has them."
  echo
  echo "| round | kgen bf16 | eager bf16 | compile bf16 | kgen f32 | eager f32 | compile f32 |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s' "$rounds"
  echo
  echo "kgen's bf16 schedule:"
  echo
  echo '```'
  sed -n '/trace (/,/^ *[a-z]*:/p' "$LOGDIR/replay-bf16-1.txt" | sed '1d;$d' | sed 's/^ *//'
  echo '```'
  echo
  echo "Reproduce: \`SIZE=$SIZE TRIALS=$TRIALS ROUNDS=$ROUNDS bench/bf16-gemm-cpu.sh\` (raw outputs in $LOGDIR)."
} > "$out"
cat "$out"
