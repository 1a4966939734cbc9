#!/usr/bin/env bash
# Tunes every workload of the library (te/lib/*.te) at its realistic sizes (the file's "# bench-sizes:" line) on
# the C target, appending to tuning_logs/NAME.c.kglog: how the committed C logs were made. A log already holding
# records for a workload and sizes resumes (nothing is measured twice), so rerunning adds TRIALS more per workload.
#   TRIALS=64 (per workload and size binding)   WORKLOADS="matmul softmax" (default: all)   KGEN=build/kgen
#   EXTRA="matmul:M=512,N=512,K=512 ..." extra size bindings (default: a second binding of matmul and softmax,
#   so that the exported headers hold a size dispatcher)
set -euo pipefail
cd "$(dirname "$0")/.."
KGEN=${KGEN:-build/kgen}
TRIALS=${TRIALS:-64}
WORKLOADS=${WORKLOADS:-$(ls te/lib/*.te | sed 's#.*/##; s#\.te$##')}
EXTRA=${EXTRA:-"matmul:M=512,N=512,K=512 softmax:N=1024,D=1024"}
[ -x "$KGEN" ] || make -s "$KGEN"
tune() { # NAME "NAME=V NAME=V ..."
  local name=$1 defs=() s
  for s in $2; do defs+=(-D "$s"); done
  echo "== $name $2 ($TRIALS trials)"
  local t0=$SECONDS
  "$KGEN" tune "$name" "${defs[@]}" --target c --trials "$TRIALS" --log "tuning_logs/$name.c.kglog" --quiet
  echo "   $((SECONDS - t0)) s"
}
for w in $WORKLOADS; do
  sizes=$(sed -n 's/^# bench-sizes: *//p' "te/lib/$w.te")
  [ -n "$sizes" ] || { echo "te/lib/$w.te names no bench-sizes" >&2; exit 1; }
  tune "$w" "$sizes"
  for e in $EXTRA; do
    [ "${e%%:*}" = "$w" ] && tune "$w" "$(echo "${e#*:}" | tr , ' ')"
  done
done
