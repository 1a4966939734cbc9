#!/usr/bin/env bash
# The benchmark suite's driver (bench/suite.sh) and report (bench/suite_report.py) at tiny sizes on the C target:
# usage errors; a run of softmax (four stages: fused and --no-fuse tuning) and matmul (one stage: no unfused run)
# through tuning, measurement, replay/export/header compile, the random-search curve and the report, checked for
# what each step leaves (logs, verified kernels, build times) and for the report's figures agreeing with them;
# then a run whose DEADLINE has passed: nothing starts, nothing counts as failed, and the report says what was cut.
set -u
. "$(dirname "$0")/common.inc"
B=${BUILD:-build}
PY=/usr/bin/python3
SMALL=(ARGS_softmax="te/lib/softmax.te -D N=64 -D D=256" ARGS_matmul="te/lib/matmul.te -D M=48 -D N=64 -D K=32")

expect 1 "unknown workload" -- env BUILD="$B" WORKLOADS=frob LOGDIR="$T/x" bench/suite.sh
has err "unknown workload 'frob'" "the workload named"
expect 1 "unknown step" -- env BUILD="$B" STEPS="tune frob" LOGDIR="$T/x" bench/suite.sh
has err "unknown step 'frob'" "the step named"
expect 1 "bad trials" -- env BUILD="$B" TRIALS=0 LOGDIR="$T/x" bench/suite.sh
expect 1 "bad target" -- env BUILD="$B" TARGET=tpu LOGDIR="$T/x" bench/suite.sh

L="$T/logs"
R="$T/res"
expect 0 "a small suite" -- env BUILD="$B" TARGET=c TRIALS=4 WORKLOADS="softmax matmul" CURVE_WORKLOADS=matmul \
  STEPS="tune measure build curves report" LOGDIR="$L" RESULTS="$R" "${SMALL[@]}" bench/suite.sh
has out "suite_report: wrote" "the report written"
for f in softmax.fused.kglog softmax.unfused.kglog softmax.fused.sched softmax.unfused.sched matmul.fused.kglog \
  matmul.random.kglog softmax.naive.txt softmax.fused.txt softmax.unfused.txt softmax.build.tsv \
  softmax.kernels/softmax.h softmax.kernels/use.o softmax.data/Y.npy; do
  [ -s "$L/$f" ] || { echo "FAIL (suite output): no $L/$f"; fail=1; }
done
[ ! -e "$L/matmul.unfused.kglog" ] || { echo "FAIL: matmul has one stage and no unfused run"; fail=1; }
# the unfused search kept every stage at root
if grep -qE '^(inline|compute_at) (m|e|Y\.r0) ' "$L/softmax.unfused.sched"; then
  echo "FAIL: the unfused softmax schedule fuses a stage:"; cat "$L/softmax.unfused.sched"; fail=1
fi
for f in softmax.naive softmax.unfused softmax.fused matmul.fused; do
  grep -q '^verify: ok' "$L/$f.txt" || { echo "FAIL: $f not verified"; fail=1; }
done
MD=$(ls "$R"/suite-c-*.md 2> /dev/null | head -1)
[ -n "$MD" ] && [ -s "${MD%.md}-curves.png" ] && [ -s "${MD%.md}-fusion.png" ] ||
  { echo "FAIL: no report or plots in $R"; ls "$R"; fail=1; }
# the report's figures are the raw outputs': the fused and unfused medians, their ratio, the build times and the
# break-even counts computed from them
"$PY" - "$L" "$MD" << 'EOF' || fail=1
import re, sys
L, md = sys.argv[1], open(sys.argv[2]).read()
def med(f):
    m = re.search(r'^time: ([\d.]+) (ms|us)', open(f'{L}/{f}.txt').read(), re.M)
    return float(m.group(1)) / (1e3 if m.group(2) == 'ms' else 1e6)
def fmt(t):
    return f'{t * 1e3:.3g} ms' if t >= 1e-3 else f'{t * 1e6:.3g} us'
u, f, n = med('softmax.unfused'), med('softmax.fused'), med('softmax.naive')
bad = []
row = next((l for l in md.splitlines() if l.startswith('| softmax | friendly')), None)
if not row:
    bad.append('no softmax row in the fusion table')
else:
    cells = [c.strip() for c in row.strip('|').split('|')]
    if cells[2] != fmt(u) or cells[3] != fmt(f) or cells[4] != f'{u / f:.2f}x':
        bad.append(f'fusion row {cells[:5]} != unfused {fmt(u)}, fused {fmt(f)}, {u / f:.2f}x')
if not re.search(r'^\| matmul \| neutral \| \(one stage\)', md, re.M):
    bad.append('matmul is not marked as one stage')
b = dict(l.split('\t') for l in open(f'{L}/softmax.build.tsv').read().split('\n') if l)
if set(b) != {'replay', 'export', 'header_cc'} or not all(0 < float(v) < 60 for v in b.values()):
    bad.append(f'build times {b}')
arow = next((l for l in md.splitlines() if l.startswith('| softmax |') and 'kgen naive' in l), None)
if not arow:
    bad.append('no softmax row in the amortization table')
else:
    cells = [c.strip() for c in arow.strip('|').split('|')]
    if not cells[5].startswith(f"{float(b['replay']):.2f} s"):
        bad.append(f'replay cell {cells[5]} != {b["replay"]}')
    if n > f and not re.fullmatch(r'[\d,]+', cells[10]):
        bad.append(f'no break-even count for tuning from scratch: {cells[10]}')
if not re.search(r'^\| matmul \| XGBoost \| 4 \|', md, re.M) or not re.search(r'^\| matmul \| random \| 4 \|', md, re.M):
    bad.append('the curves table lacks the 4-trial runs of matmul')
for m in bad:
    print('FAIL (report):', m)
sys.exit(1 if bad else 0)
EOF

# a run whose deadline has passed starts nothing, fails nothing and says so
L2="$T/late"
expect 0 "past the deadline" -- env BUILD="$B" TARGET=c TRIALS=4 WORKLOADS="softmax" STEPS="tune measure report" \
  DEADLINE=$(($(date +%s) - 1)) LOGDIR="$L2" RESULTS="$T/res2" "${SMALL[@]}" bench/suite.sh
has out "out of time \(DEADLINE\): not run" "the cut commands named"
[ ! -e "$L2/softmax.fused.kglog" ] || { echo "FAIL: a tuning run started after the deadline"; fail=1; }
grep -q "Not run, out of time" "$T"/res2/suite-c-*.md || { echo "FAIL: the report does not say what was cut"; fail=1; }
exit $fail
