#!/usr/bin/env bash
# The library's layers point one way: a module includes only itself and modules to its left in LAYERS (the
# README's layout table in the same order). An include upward or sideways fails here with the offending line.
set -u
cd "$(dirname "$0")/../.."
LAYERS="base te schedule lower codegen tlog runtime costmodel gen search replay dist cli"
rank() { local i=0 m; for m in $LAYERS; do [ "$m" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
fail=0; checked=0
for m in $LAYERS; do
  [ -d "$m" ] || { echo "FAIL: layer $m has no folder"; fail=1; continue; }
  r=$(rank "$m")
  for f in "$m"/*.c "$m"/*.h; do
    [ -e "$f" ] || continue
    while IFS= read -r line; do
      inc=$(printf '%s' "$line" | sed -E 's/.*#include "([^"]+)".*/\1/')
      case "$inc" in
      ../*/*) dep=${inc#../}; dep=${dep%%/*} ;;
      */*) dep=${inc%%/*} ;;
      kgen.h) dep=umbrella ;;
      *) dep=$m ;;
      esac
      checked=$((checked + 1))
      if [ "$dep" = umbrella ]; then
        # The umbrella header includes every layer: only the top (the CLI) may use it.
        [ "$m" = cli ] || { echo "FAIL: $f includes the umbrella kgen.h: $line"; fail=1; }
        continue
      fi
      d=$(rank "$dep")
      if [ "$d" -lt 0 ]; then echo "FAIL: $f includes $inc from no known layer"; fail=1
      elif [ "$d" -gt "$r" ]; then echo "FAIL: $f ($m) includes $inc from $dep, a layer above it"; fail=1; fi
    done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
  done
done
# Every library folder the Makefile builds is a layer here, so that a new folder cannot escape the check.
mods=$(sed -n 's/^MODULES = //p' Makefile)
for m in $mods; do case " $LAYERS " in *" $m "*) ;; *) echo "FAIL: Makefile module $m is not in LAYERS"; fail=1 ;; esac; done
[ $checked -gt 100 ] || { echo "FAIL: only $checked includes checked"; fail=1; }
echo "$checked includes checked"
exit $fail
