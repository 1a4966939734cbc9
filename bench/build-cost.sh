#!/usr/bin/env bash
# The tuner's build time with two kgen binaries side by side: the same tunings (same workload, sizes, trials and
# seed, so the same candidates) run with each in turn, ROUNDS times, and the "build" part of each tuning's time
# line gathered. What a change to the generated code costs or saves on the tuner's hot path, where every candidate
# is compiled.
#
#   bench/build-cost.sh OLD_KGEN NEW_KGEN [OUT.md]
#
# Settings (environment): WORKLOADS (library workloads; default "softmax bias_gelu_residual conv2d matmul"),
# TRIALS (default 32), ROUNDS (default 2), SEED (default 1). Sizes: each workload's "# sizes:" line (small: the
# builds, not the runs, are what is compared). Run it on an otherwise idle machine.
set -eu
old=${1:?usage: bench/build-cost.sh OLD_KGEN NEW_KGEN [OUT.md]} new=${2:?usage: bench/build-cost.sh OLD_KGEN NEW_KGEN [OUT.md]}
out=${3:-/dev/stdout}
WORKLOADS=${WORKLOADS:-softmax bias_gelu_residual conv2d matmul}
TRIALS=${TRIALS:-32} ROUNDS=${ROUNDS:-2} SEED=${SEED:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sizes() { sed -n 's/^# sizes: *//p' "te/lib/$1.te" | head -1 | sed 's/\([A-Za-z_][A-Za-z0-9_]*=\)/-D \1/g'; }
{
  echo "# The tuner's build time, two kgen binaries side by side"
  echo
  echo "$(date -u +%Y-%m-%d), $(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo | head -1), $(nproc) cores, $(cc --version | head -1)."
  echo "Old: \`$old\`; new: \`$new\`. $TRIALS trials per tuning, seed $SEED, $ROUNDS rounds (old then new in each)."
  echo "Command: \`WORKLOADS=\"$WORKLOADS\" TRIALS=$TRIALS ROUNDS=$ROUNDS SEED=$SEED bench/build-cost.sh OLD NEW\`"
  echo
  echo "| workload | sizes | round | old: build / tuning (s) | new: build / tuning (s) | build old / new |"
  echo "|---|---|---|---|---|---|"
} > "$out"
for w in $WORKLOADS; do
  d=$(sizes "$w")
  for r in $(seq 1 "$ROUNDS"); do
    row=""
    for k in "$old" "$new"; do
      # shellcheck disable=SC2086
      "$k" tune "te/lib/$w.te" $d --target c --trials "$TRIALS" --seed "$SEED" --log "$tmp/$w.kglog" \
        > "$tmp/tune.txt" 2>&1 || { echo "tune $w with $k failed:" >&2; tail -5 "$tmp/tune.txt" >&2; exit 1; }
      rm -f "$tmp/$w.kglog" "$tmp/$w.kglog.model"
      line=$(grep -E '^time: .*build' "$tmp/tune.txt" | tail -1)
      total=$(sed -E 's/^time: ([0-9.]+) s.*/\1/' <<< "$line")
      build=$(sed -E 's/.*build ([0-9.]+) s.*/\1/' <<< "$line")
      row="$row|$build / $total"
      eval "b_$([ "$k" = "$old" ] && echo old || echo new)=$build"
    done
    # shellcheck disable=SC2154
    echo "| $w | ${d//-D /} | $r $row | $(awk -v a="$b_old" -v b="$b_new" 'BEGIN { printf "%.2fx", a / b }') |" >> "$out"
  done
done
