#!/usr/bin/env bash
# The benchmark suite's driver (bench/suite.sh) and report (bench/suite_report.py) at tiny sizes on the C target:
# usage errors; a run of softmax (four stages: fused and --no-fuse tuning) and matmul (one stage: no unfused run)
# through tuning, measurement, replay/export/header compile, the random-search curve and the report, checked for
# what each step leaves (logs, verified kernels, build times) and for the report's figures agreeing with them;
# then a run whose DEADLINE has passed: nothing starts, nothing counts as failed, and the report says what was cut;
# then a step cut by a time limit, reported as cut (not as a wrong answer). The report needs Debian's python3 with
# msgpack (the test skips without them); the plots need matplotlib (without it they are skipped, said in one line).
# Time limits are generous (RUN_TIMEOUT): a busy machine is not a failure, and a step cut anyway is named as cut.
set -u
. "$(dirname "$0")/common.inc"
B=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3} # Debian's, which has the python3-* packages (`make test-deps` installs them)
[ -x "$PY" ] || { echo "skip: $PY not found (Debian package python3; make test-deps installs it)"; exit 0; }
"$PY" -c 'import msgpack' 2> /dev/null ||
  { echo "skip: $PY has no msgpack (Debian package python3-msgpack; make test-deps installs it)"; exit 0; }
PLOTS=1
"$PY" -c 'import matplotlib' 2> /dev/null ||
  { PLOTS=0; echo "skip: the report's plots ($PY has no matplotlib: Debian package python3-matplotlib)"; }
export PYTHON=$PY RUN_TIMEOUT=600
# a step's output that does not say "verify: ok": cut by a time limit (said as such) or a failure
not_verified() { # name file
  if grep -qE '^(cut: |run: FAILED \(timeout\)|not run: out of time)' "$2" 2> /dev/null; then
    echo "FAIL: $1 was cut by a time limit (a slow or busy machine, not a wrong answer):"
  else
    echo "FAIL: $1 not verified:"
  fi
  tail -5 "$2" 2> /dev/null || echo "(no $2)"
  fail=1
}
SMALL=(ARGS_softmax="te/lib/softmax.te -D N=64 -D D=256" ARGS_matmul="te/lib/matmul.te -D M=48 -D N=64 -D K=32")

expect 1 "unknown workload" -- env BUILD="$B" WORKLOADS=frob LOGDIR="$T/x" bench/suite.sh
has err "unknown workload 'frob'" "the workload named"
expect 1 "unknown step" -- env BUILD="$B" STEPS="tune frob" LOGDIR="$T/x" bench/suite.sh
has err "unknown step 'frob'" "the step named"
expect 1 "bad trials" -- env BUILD="$B" TRIALS=0 LOGDIR="$T/x" bench/suite.sh
expect 1 "bad target" -- env BUILD="$B" TARGET=tpu LOGDIR="$T/x" bench/suite.sh
expect 1 "bad RUN_TIMEOUT" -- env BUILD="$B" RUN_TIMEOUT=0 LOGDIR="$T/x" bench/suite.sh
has err "RUN_TIMEOUT must be a positive number" "the bad limit named"

# a workload name run with another program (ARGS_conv2d=te/lib/conv2d.te, the stride-2 layer) is labelled by the
# program the suite ran, not by the name's default
mkdir -p "$T/lbl"
printf '%s\n' "build/kgen tune te/lib/conv2d.te -D N=1 -D C=8 -D H=9 -D W=9 -D F=4 --log $T/lbl/conv2d.fused.kglog" \
  "build/kgen tune bench/workloads/mlp_gelu.te -D M=8 -D K=8 -D N=8 --log $T/lbl/mlp_gelu.fused.kglog" > "$T/lbl/commands.txt"
"$PY" - "$T/lbl" <<'EOF' || { echo "FAIL: the report's labels by program"; fail=1; }
import sys
sys.path.insert(0, 'bench')
import suite_report as r
d = sys.argv[1]
assert r.program_of(d, 'conv2d') == 'conv2d' and r.program_of(d, 'softmax') == '', r.program_of(d, 'conv2d')
for w in ('conv2d', 'mlp_gelu', 'softmax'):
    r.PROGRAMS[w] = r.program_of(d, w)
assert r.label('conv2d') == 'conv2d 3x3 stride 2', r.label('conv2d')
assert r.label('mlp_gelu') == 'MLP epilogue (matmul+bias+GELU)' and r.label('softmax') == 'softmax'
r.PROGRAMS['conv2d'] = 'conv2d_3x3'
assert r.label('conv2d') == 'conv2d 3x3 (ResNet-50 layer)', r.label('conv2d')
EOF

L="$T/logs"
R="$T/res"
expect 0 "a small suite" -- env BUILD="$B" TARGET=c TRIALS=4 WORKLOADS="softmax matmul" CURVE_WORKLOADS=matmul \
  STEPS="tune measure build curves report" LOGDIR="$L" RESULTS="$R" "${SMALL[@]}" bench/suite.sh
has out "suite_report: wrote" "the report written"
for f in softmax.fused.kglog softmax.unfused.kglog softmax.fused.sched softmax.unfused.sched matmul.fused.kglog \
  matmul.random.kglog softmax.naive.txt softmax.fused.txt softmax.unfused.txt softmax.build.tsv \
  softmax.kernels/softmax.h softmax.kernels/use.o softmax.data/Y.npy; do
  # a best trace may be empty (the default schedule won: likely on a busy machine), and is measured all the same
  case $f in *.sched) [ -f "$L/$f" ] ;; *) [ -s "$L/$f" ] ;; esac || { echo "FAIL (suite output): no $L/$f"; fail=1; }
done
[ ! -e "$L/matmul.unfused.kglog" ] || { echo "FAIL: matmul has one stage and no unfused run"; fail=1; }
# the unfused search kept every stage at root
if grep -qE '^(inline|compute_at) (m|e|Y\.r0) ' "$L/softmax.unfused.sched"; then
  echo "FAIL: the unfused softmax schedule fuses a stage:"; cat "$L/softmax.unfused.sched"; fail=1
fi
for f in softmax.naive softmax.unfused softmax.fused matmul.fused; do
  grep -q '^verify: ok' "$L/$f.txt" || not_verified "$f" "$L/$f.txt"
done
MD=$(ls "$R"/suite-c-*.md 2> /dev/null | head -1)
[ -n "$MD" ] && { [ "$PLOTS" = 0 ] || { [ -s "${MD%.md}-curves.png" ] && [ -s "${MD%.md}-fusion.png" ]; }; } ||
  { echo "FAIL: no report or plots in $R"; ls "$R"; fail=1; }
[ "$PLOTS" = 1 ] || grep -q 'no matplotlib' "$MD" || { echo "FAIL: the report does not say why it has no plots"; fail=1; }
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

# one trial: the default schedule wins, the best trace is empty, and the fused kernel is measured all the same (an
# empty trace is a result, not a missing one)
L4="$T/one"
expect 0 "one trial" -- env BUILD="$B" TARGET=c TRIALS=1 WORKLOADS=matmul STEPS="tune measure" LOGDIR="$L4" \
  "${SMALL[@]}" bench/suite.sh
[ -f "$L4/matmul.fused.sched" ] && [ ! -s "$L4/matmul.fused.sched" ] ||
  { echo "FAIL: one trial should leave an empty best trace"; fail=1; }
grep -q '^verify: ok' "$L4/matmul.fused.txt" 2> /dev/null || not_verified "matmul.fused (empty trace)" "$L4/matmul.fused.txt"
[ -s "$L4/matmul.data/C.npy" ] || { echo "FAIL: the fused kernel's data not saved for an empty trace"; fail=1; }

# a measurement cut by a time limit (here kgen's --timeout: 1 ms for a kernel of 268 MFLOP in a cache-hostile loop
# order) is reported as cut: a warning naming the limit, the report's "Cut by a time limit" line, no wrong answer
L3="$T/cut"
mkdir -p "$L3"
printf 'reorder C j i\n' > "$L3/matmul.fused.sched"
expect 1 "a step cut by kgen's --timeout" -- env BUILD="$B" TARGET=c TRIALS=4 WORKLOADS=matmul STEPS="measure report" \
  RUN_TIMEOUT=0.001 ARGS_matmul="te/lib/matmul.te -D M=512 -D N=512 -D K=512" LOGDIR="$L3" RESULTS="$T/res3" \
  bench/suite.sh
has out "warning: measuring the fused kernel of matmul failed \(cut by kgen's --timeout 0.001 s \(a time limit, not a wrong answer\)\)" \
  "the cut named in the warning"
grep -q "^Cut by a time limit (no figure; not a wrong answer): .*matmul.fused" "$T"/res3/suite-c-*.md ||
  { echo "FAIL: the report does not name the cut step"; grep -i cut "$T"/res3/suite-c-*.md; fail=1; }
if grep -qiE 'wrong|verify: FAILED' "$L3/matmul.fused.txt"; then echo "FAIL: a cut reported as a wrong answer"; fail=1; fi
exit $fail
