#!/usr/bin/env bash
# The shape-transition benchmark's driver (bench/dynamic_shapes) and report (bench/dynamic_report.py) at tiny
# sizes: usage errors, a range tuning of matmul with M dynamic, then a short sequence run three ways, checked for
# the outputs' structure (every call of every approach present and verified, cumulative costs adding up, one
# compile per distinct size for specialize, one for the dynamic kernel, at most one per bucket), and the report;
# then the CUDA target's kernels on the emulator, and without a GPU, --target cuda's exit status 3.
set -u
. "$(dirname "$0")/common.inc"
D=${BUILD:-build}/bench/dynamic_shapes
[ -x "$D" ] || { echo "FAIL: no $D (make bench-tools)"; exit 1; }
# the outputs' checks and the report run in Debian's python3 (standard library only; `make test-deps` installs it)
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || { echo "skip: the outputs' checks and the report (no $PY: Debian package python3)"; PY=; }
py() { [ -z "$PY" ] || "$PY" "$@"; }

expect 2 "no arguments" -- $D
expect 2 "bad range" -- $D --workload matmul --log x --out "$T/o" --range 5..2
expect 2 "bad calls" -- $D --workload matmul --log x --out "$T/o" --calls 0
expect 2 "emulate without cuda" -- $D --workload matmul --log x --out "$T/o" --emulate
expect 2 "unknown option" -- $D --workload matmul --log x --out "$T/o" --frob 1
expect 1 "missing log" -- $D --workload matmul -D K=128 -D N=128 --log "$T/none.kglog" --out "$T/o"
has err "no such log" "the missing log named"

L="$T/mm.kglog"
expect 0 "range tuning" -- $K tune matmul -D K=128 -D N=128 --dynamic M=1..256 --buckets 2 --trials 10 --per-round 5 \
  --target c --min-repeat-ms 2 --log "$L" --quiet
expect 1 "a log of other bindings" -- $D --workload matmul -D K=128 -D N=96 --log "$L" --out "$T/o"
has err "no successful range-tuned record" "records of other bindings do not count"

O="$T/res"
CALLS=12
expect 0 "the sequence" -- $D --workload matmul -D K=128 -D N=128 --log "$L" --out "$O" --calls $CALLS --seed 3 \
  --min-ms 1
has out "M=1\.\.256 dynamic" "the range read from the log"
has out "every call verified" "verified"
for f in calls.tsv steady.tsv summary.tsv meta.tsv; do
  [ -s "$O/$f" ] || { echo "FAIL: no $O/$f"; fail=1; }
done
# the schedules used (a trace may be empty: the default schedule can win at these sizes)
for f in tuned.sched bucket-1-15.sched bucket-16-256.sched; do
  [ -f "$O/$f" ] || { echo "FAIL: no $O/$f"; fail=1; }
done
py - "$O" "$CALLS" <<'EOF' || fail=1
import csv, sys
d, calls = sys.argv[1], int(sys.argv[2])
def tsv(name):
    with open(f'{d}/{name}', newline='') as f:
        return list(csv.DictReader(f, delimiter='\t'))
meta = {}
buckets = []
for line in open(f'{d}/meta.tsv'):
    k, _, v = line.rstrip('\n').partition('\t')
    if k == 'bucket':
        buckets.append(v.split('\t'))
    else:
        meta[k] = v
seq = [int(x) for x in meta['sequence'].split(',')]
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
check(len(seq) == calls and all(1 <= m <= 256 for m in seq), f'sequence {seq}')
check(meta['range'] == '1..256' and meta['size'] == 'M' and meta['bindings'] == 'K=128 N=128', f'meta {meta}')
check(len(buckets) == 2, f'buckets {buckets}')
rows = tsv('calls.tsv')
check(list(rows[0].keys()) == ['call', 'M', 'approach', 'kernel', 'compile_s', 'run_s', 'cumulative_s', 'verify'],
      f'calls.tsv columns {list(rows[0].keys())}')
check(len(rows) == 3 * calls, f'{len(rows)} rows in calls.tsv')
check(all(r['verify'] == 'ok' for r in rows), 'a call did not verify')
distinct = sorted(set(seq))
summary = {r['approach']: r for r in tsv('summary.tsv')}
for a in ('specialize', 'dynamic', 'buckets'):
    mine = [r for r in rows if r['approach'] == a]
    check([int(r['call']) for r in mine] == list(range(calls)), f'{a}: calls out of order')
    check([int(r['M']) for r in mine] == seq, f'{a}: sizes differ from the sequence')
    total = 0.0
    for r in mine:
        c, t = float(r['compile_s']), float(r['run_s'])
        check(c >= 0 and t > 0, f'{a}: call {r["call"]}: compile {c} run {t}')
        total += c + t
        check(abs(total - float(r['cumulative_s'])) < 1e-6 * max(1, total), f'{a}: cumulative does not add up')
    compiled = [r for r in mine if float(r['compile_s']) > 0]
    s = summary[a]
    check(int(s['compiles']) == len(compiled), f'{a}: {s["compiles"]} compiles, {len(compiled)} in calls.tsv')
    check(int(s['verified']) == calls and int(s['calls']) == calls, f'{a}: summary {s}')
    check(abs(float(s['cumulative_s']) - total) < 1e-5 * max(1, total), f'{a}: summary cumulative')
    check(float(s['steady_ratio']) > 0, f'{a}: steady ratio {s["steady_ratio"]}')
    if a == 'specialize':
        # a kernel per new size, compiled at its first call
        firsts = sorted(seq.index(m) for m in distinct)
        check(sorted(int(r['call']) for r in compiled) == firsts, f'specialize compiled at {compiled}')
    elif a == 'dynamic':
        check([int(r['call']) for r in compiled] == [0], 'dynamic: one compile, at the first call')
    else:
        check(1 <= len(compiled) <= len(buckets), f'buckets: {len(compiled)} compiles for {len(buckets)} buckets')
steady = tsv('steady.tsv')
check(len(steady) == 3 * len(distinct), f'{len(steady)} rows in steady.tsv for {len(distinct)} sizes')
for r in steady:
    check(float(r['median_s']) > 0 and int(r['runs']) >= 9, f'steady {r}')
    if r['approach'] == 'specialize':
        check(float(r['ratio_vs_specialize']) == 1.0, f'steady ratio {r}')
for e in errors:
    print('FAIL:', e)
sys.exit(1 if errors else 0)
EOF

# the report: a table per workload and the verdict (the plot needs matplotlib: not asked for here)
if [ -n "$PY" ]; then
  expect 0 "the report" -- "$PY" bench/dynamic_report.py --out "$T/report.md" "$O"
  has out "target (PASS|FAIL)" "the verdict printed"
  has report.md "^\| \(a\) specialize per size \|" "the table's row for (a)"
  has report.md "^\| \(c\) range-tuned buckets \|.*\| 12/12 \|$" "the table's row for (c), verified"
  has report.md "^- \*\*(PASS|FAIL)\*\*" "the verdict"
  has report.md "^\| 1\.\.15 \| M=[0-9]+ \|" "the buckets"
fi

# the CUDA path's kernels (dynamic grids) on the emulator: a range tuning there, then the three approaches verified
LE="$T/emu.kglog"
expect 0 "range tuning on the emulator" -- $K tune matmul -D K=16 -D N=12 --dynamic M=1..40 --buckets 2 --trials 4 \
  --per-round 2 --target cuda --emulate --log "$LE" --quiet
expect 0 "the sequence on the emulator" -- $D --workload matmul -D K=16 -D N=12 --log "$LE" --out "$T/emu" \
  --calls 8 --seed 3 --min-ms 1 --target cuda --emulate
has out "on CUDA emulator" "the emulator named"
has out "every call verified" "verified on the emulator"
[ "$(grep -c $'\tok$' "$T/emu/calls.tsv")" = 24 ] || { echo "FAIL: not 24 verified calls on the emulator"; fail=1; }
grep -q $'^target\tcuda (emulator)$' "$T/emu/meta.tsv" || { echo "FAIL: meta.tsv names no emulator"; fail=1; }

if ! $K run matmul -D M=2 -D N=2 -D K=2 --target cuda >/dev/null 2>&1; then
  expect 3 "cuda without a GPU" -- $D --workload matmul -D K=128 -D N=128 --log "$L" --out "$T/g" --target cuda
fi
exit $fail
