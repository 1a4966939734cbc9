#!/usr/bin/env bash
# The hand-written CPU schedules of bench/cpu-schedules/ side by side: each timed at its "# bench:" workload and
# sizes with the measurement harness (`kgen run ... --measure`), in turn, ROUNDS times; each keeps its best round,
# so that a neighbour's burst during one run does not decide a ratio (the machines are shared). Writes
# bench/results/cpu-schedules-DATE-VENDOR.md with every round and the command.
#
# A benchmark, not a test: run it on an otherwise idle machine (every kernel uses both cores).
# usage: bench/cpu-schedules.sh [FILE.sched...]      (default: every schedule of bench/cpu-schedules/)
# environment: ROUNDS=3, BUILD=build, RESULTS=bench/results
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-3}
BUILD=${BUILD:-build}
RESULTS=${RESULTS:-bench/results}
K="$BUILD/kgen"
[ -x "$K" ] || make -j"$(nproc)" > /dev/null
mkdir -p "$RESULTS"
if [ $# -gt 0 ]; then files=("$@"); else files=(bench/cpu-schedules/*.sched); fi
declare -A best
table=""
for r in $(seq 1 "$ROUNDS"); do
  row="| $r |"
  for f in "${files[@]}"; do
    bench=$(sed -n 's/^# bench: *//p' "$f" | head -1)
    [ -n "$bench" ] || { echo "$f: no '# bench:' line" >&2; exit 2; }
    # shellcheck disable=SC2086
    out=$("$K" run $bench --target c --measure --schedule "$f" 2>&1) || { echo "$f: $out" >&2; exit 1; }
    grep -q '^verify: ok' <<< "$out" || { echo "$f: not verified: $out" >&2; exit 1; }
    ms=$(sed -n 's/^time: \([0-9.e+-]*\) \([a-z]*\) .*/\1 \2/p' <<< "$out" | head -1 |
      awk '{ f = $2 == "s" ? 1e3 : $2 == "ms" ? 1 : $2 == "us" ? 1e-3 : 0; printf "%.3f", $1 * f }')
    row="$row $ms |"
    b=${best[$f]:-}
    if [ -z "$b" ] || awk -v a="$ms" -v b="$b" 'BEGIN { exit !(a + 0 < b + 0) }'; then best[$f]=$ms; fi
  done
  table="$table$row"$'\n'
done
vendor=$(sed -n 's/^vendor_id\s*: //p' /proc/cpuinfo | head -1)
case "$vendor" in GenuineIntel) tag=intel ;; AuthenticAMD) tag=amd ;; *) tag=cpu ;; esac
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
flags=$(grep -o 'avx512_bf16\|avx512f\|avx512_fp16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
out="$RESULTS/cpu-schedules-$(date '+%Y-%m-%d')-$tag.md"
{
  echo "# Hand-written CPU schedules side by side, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "$(nproc) threads on $cpu ($flags), $(gcc --version | head -1); each schedule timed by \`$K run WORKLOAD"
  echo "SIZES --target c --measure --schedule FILE\` (its \"# bench:\" line), in turn, $ROUNDS rounds; the best round."
  echo
  echo "| schedule | bench | best (ms) |"
  echo "|---|---|---|"
  for f in "${files[@]}"; do echo "| [$(basename "$f")](../cpu-schedules/$(basename "$f")) | \`$(sed -n 's/^# bench: *//p' "$f" | head -1)\` | ${best[$f]} |"; done
  echo
  printf '| round |'; for f in "${files[@]}"; do printf ' %s |' "$(basename "$f" .sched)"; done; echo
  printf '|---|'; for f in "${files[@]}"; do printf -- '---|'; done; echo
  printf '%s' "$table"
  echo
  echo "Reproduce: \`ROUNDS=$ROUNDS bench/cpu-schedules.sh\`."
} > "$out"
cat "$out"
