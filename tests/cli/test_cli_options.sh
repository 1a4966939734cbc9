#!/usr/bin/env bash
# The commands' options come from one table (cli/options.c): an option shared by several commands refuses the same
# bad value in each of them, with the same message (exit 2, the message naming the option or the value); an
# option of another command is refused naming the commands it goes with; --min-repeat-ms 0 is refused everywhere
# (the measurer reads 0 as its default of 100 ms, a plain C run as no minimum: it has no one meaning); and each
# command's --help lists exactly its own options, every one of which the command takes.
set -u
. "$(dirname "$0")/common.inc"

# Positional arguments each command needs before it looks further (none of them is read: the options are
# refused first).
pos() {
  case $1 in
    check|lower|run|tune) echo "matmul" ;;
    replay|export|show) echo "$T/none.kglog" ;;
  esac
}

# refused "MESSAGE" "CMD..." OPTION... : every command listed refuses the options with exit 2 and the message.
refused() {
  local msg=$1 cmds=$2; shift 2
  for c in $cmds; do
    expect 2 "$c $*" -- $K $c $(pos $c) "$@"
    has err "^kgen $c: $msg\$" "$c $*: the message"
    has err "^usage: kgen $c " "$c $*: its usage"
  done
}

MEASURING="run tune replay"
refused "unknown arch 'sm_1' \(e\.g\. sm_86, sm_90\)" "$MEASURING export" --arch sm_1
refused "unknown arch 'sm_1' \(e\.g\. sm_86, sm_90\)" "export" --arch sm_86,sm_1
refused "unknown target 'tpu' \(c, cuda, auto\)" "check lower $MEASURING export" --target tpu
refused "bad size binding 'M' \(want -D NAME=VALUE\)" "check lower $MEASURING" -D M
refused "bad size binding 'M=x' \(want -D NAME=VALUE\)" "check lower $MEASURING" -DM=x
refused "bad --dynamic 'M=5\.\.2' \(want NAME or NAME=LO\.\.HI\)" "check lower run tune" --dynamic M=5..2
refused "bad --dynamic 'M=1,5' \(want NAME or NAME=LO\.\.HI\)" "check lower run tune" --dynamic M=1,5
refused "bad --dtype 'f64' \(want f32, f16 or bf16\)" "check lower run tune" --dtype f64
for v in 0 -1 x 1e7; do
  refused "bad --timeout '$v' \(want a number over 0, at most 1e\+06\)" "$MEASURING" --timeout $v
  refused "bad --min-repeat-ms '$v' \(want a number over 0, at most 1e\+06\)" "$MEASURING" --min-repeat-ms $v
done
refused "bad --seed 'x' \(want a number from 0 to 2\^64-1\)" "run tune" --seed x
refused "bad --seed '-1' \(want a number from 0 to 2\^64-1\)" "run tune" --seed -1
refused "option --lib needs a value" "replay export" --lib
refused "option --def needs a value" "check lower $MEASURING" --def
refused "--emulate goes with --target cuda" "$MEASURING" --emulate --target c
refused "--arch goes with --target cuda" "$MEASURING export" --target c --arch sm_90
refused "unknown option '--frob'" "check lower $MEASURING show export" --frob
# an option of other commands names them
refused "--trials goes with tune" "check lower run replay export show" --trials 3
refused "--emulate goes with run, tune and replay" "check lower show export" --emulate
refused "--lib goes with replay and export" "check lower run tune show" --lib x

# --arch with --target auto: for the GPU if one answers, else unused; the same in run, tune and replay (they go on
# to read their missing input, with or without a device)
for c in $MEASURING; do
  expect 1 "$c --arch sm_90 (auto)" -- $K $c "$T/none.te" --arch sm_90
  has err "$T/none" "$c with --arch and auto goes on to its input"
done

# --min-repeat-ms: the smallest value over 0 is taken by every measuring command (they go on to their next check)
for c in $MEASURING; do
  expect 2 "$c --min-repeat-ms 0.001" -- $K $c --min-repeat-ms 0.001
  has err "^kgen $c: missing " "$c takes --min-repeat-ms 0.001 (then misses its argument)"
done

# --help: exactly the options of the table's rows for the command, each of them taken
want_check="-D --def --dynamic --dtype --tf32 --target --dump --help"
want_lower="-D --def --dynamic --dtype --tf32 --schedule --random-schedule --random-steps --target --arch --dump --help"
want_run="-D --def --dynamic --dtype --tf32 --schedule --random-schedule --random-steps --target --emulate --arch --measure --flush-l2
  --timeout --min-repeat-ms --seed --rtol --save --load --help"
want_tune="-D --def --dynamic --dtype --tf32 --shapes --buckets --exchange --target --emulate --arch --timeout --min-repeat-ms --seed
  --trials --log --model --population --generations --per-round --best-out --confirm --confirm-runs --early-cut
  --sketch-share --no-fuse --quiet --rank0-idle --worker-timeout --help"
want_show="--best --help"
want_replay="-D --def --target --emulate --arch --timeout --min-repeat-ms --lib --help"
want_export="--target --arch --lib --out --workload --prefix --allow-emulated --help"
# a value each option takes (flags: none)
value() {
  case $1 in
    -D) echo "M=2" ;; --dynamic) echo "M=1..8" ;; --dtype) echo "bf16" ;; --shapes) echo "M=1,2" ;; --target) echo "c" ;; --arch) echo "sm_86" ;;
    --dump) echo "ast" ;; --model) echo "random" ;; --rtol|--sketch-share) echo "0.1" ;;
    --buckets|--exchange|--random-schedule|--random-steps|--timeout|--min-repeat-ms|--seed|--trials|--population|\
    --generations|--per-round|--worker-timeout|--confirm|--confirm-runs|--early-cut) echo "2" ;;
    --emulate|--measure|--flush-l2|--no-fuse|--quiet|--best|--rank0-idle|--tf32) ;;
    *) echo "$T/x" ;;
  esac
}
for c in check lower run tune show replay export; do
  expect 0 "$c --help" -- $K $c --help
  has out "^usage: kgen $c " "$c --help: its usage"
  got=$(sed -n '/^options:/,$p' "$T/out" | grep -oE '^  (-D|--[a-z0-9-]+)' | tr -d ' ' | sort | tr '\n' ' ')
  eval "want=\$want_$c"
  want=$(printf '%s\n' $want | sort | tr '\n' ' ')
  [ "$got" = "$want" ] || { echo "FAIL ($c --help): lists '$got', want '$want'"; fail=1; }
  for opt in $want; do
    [ "$opt" = --help ] && continue
    # alone, with a value it takes: whatever the command then says, it is not about the option
    $K $c $opt $(value $opt) >"$T/out" 2>"$T/err"
    if grep -qE "unknown option|goes with|not handled|needs a value|^kgen $c: bad |unknown (target|arch|model)" "$T/err"; then
      echo "FAIL ($c $opt): not taken:"; head -3 "$T/err"; fail=1
    fi
  done
done
# --early-cut: 0 (none) or a factor of at least 2, nothing else
for v in 0 2 4.5; do
  $K tune --early-cut $v >"$T/out" 2>"$T/err"
  if grep -q "bad --early-cut" "$T/err"; then echo "FAIL (tune --early-cut $v): refused"; fail=1; fi
done
for v in 1.5 -1 x; do
  expect 2 "tune --early-cut $v" -- $K tune --early-cut $v
  has err "bad --early-cut '$v' .want 0 for none, or a factor from 2 to 1000." "--early-cut $v refused"
done
# kgen --help lists every option once
expect 0 "kgen --help" -- $K --help
for opt in $(printf '%s\n' $want_check $want_lower $want_run $want_tune $want_show $want_replay $want_export | sort -u); do
  [ "$opt" = --help ] && continue
  n=$(grep -cE "^  $opt( |$)" "$T/out")
  [ "$n" = 1 ] || { echo "FAIL (kgen --help): $opt listed $n times"; fail=1; }
done
exit $fail
