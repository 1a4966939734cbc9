#!/bin/bash
# The winner's curse, and what the tuner's confirmation does about it (docs/tuning.md, "The confirmation").
#
#   bench/confirm-bias.sh OUTDIR WORKLOAD [-D NAME=VALUE ...]     env: TRIALS (64), ROUNDS (7), SEED (1),
#                                                                  KGEN (build/kgen), PYTHON (/usr/bin/python3)
#
# Tunes WORKLOAD on the C target for TRIALS trials with the default confirmation, then takes two schedules from
# the one log: the search's pick (the fastest single measurement among the trials: what kgen picked before the
# confirmation) and the confirmed pick (the lowest ranking time of a schedule's records: what tune, replay and export
# pick now). Both are then measured again, alternately, ROUNDS rounds of `kgen run --measure --min-repeat-ms 500`
# (bench/paired.py). Written to OUTDIR: the log, the tuner's output, both schedules, and result.txt with each
# pick's logged time beside its re-measured median: the search's logged time understates its kernel by the
# luck that made it the pick, the confirmed median much less so.
set -u
[ $# -ge 2 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT=$1; shift
W=("$@")
K=${KGEN:-build/kgen}
TRIALS=${TRIALS:-64}
ROUNDS=${ROUNDS:-7}
SEED=${SEED:-1}
PY=${PYTHON:-/usr/bin/python3} # Debian's, where python3-msgpack lives
if ! "$PY" -c 'import msgpack' 2> /dev/null; then
  make --no-print-directory test-deps > /dev/null # installs python3-msgpack (Makefile: TEST_DEB_PKGS)
  "$PY" -c 'import msgpack' 2> /dev/null || { echo "confirm-bias: $PY has no msgpack (python3-msgpack)" >&2; exit 1; }
fi
mkdir -p "$OUT" || exit 1
LOG="$OUT/tune.kglog"
rm -f "$LOG" "$LOG.model"
echo "== $K tune ${W[*]} --target c --trials $TRIALS --seed $SEED --log $LOG" | tee "$OUT/commands.txt"
"$K" tune "${W[@]}" --target c --trials "$TRIALS" --seed "$SEED" --log "$LOG" > "$OUT/tune.txt" 2> "$OUT/tune.err" ||
  { cat "$OUT/tune.err" >&2; exit 1; }
grep -E "^  (best|confirmed):" "$OUT/tune.txt"

# the two picks of the one log
"$PY" - "$LOG" "$OUT" <<'EOF' || exit 1
import sys
sys.path.insert(0, 'bench')
from tune_report import read_log, trials, best_record, median_s, trace_text
log, out = sys.argv[1], sys.argv[2]
recs = read_log(log)[0]
ok = [r for r in trials(recs) if median_s(r) is not None]
search = min(ok, key=median_s)
confirmed = best_record(recs)
for name, r in (('search', search), ('confirmed', confirmed)):
    with open(f'{out}/{name}.sched', 'w') as f:
        f.write(trace_text(r['trace']))
    with open(f'{out}/{name}.logged', 'w') as f:
        f.write(f'{median_s(r) * 1e3:.4f}\n')
same = trace_text(search['trace']) == trace_text(confirmed['trace'])
with open(f'{out}/same.txt', 'w') as f:
    f.write('same\n' if same else 'different\n')
EOF

run() { echo "$K run ${W[*]} --target c --schedule $OUT/$1.sched --measure --min-repeat-ms 500"; }
echo "== bench/paired.py --rounds $ROUNDS search=\"$(run search)\" confirmed=\"$(run confirmed)\"" >> "$OUT/commands.txt"
"$PY" bench/paired.py --rounds "$ROUNDS" search="$(run search)" confirmed="$(run confirmed)" > "$OUT/paired.txt" ||
  exit 1

"$PY" - "$OUT" <<'EOF'
import re, sys
out = sys.argv[1]
txt = open(f'{out}/paired.txt').read()
lines = [f'picks: {open(f"{out}/same.txt").read().strip()} schedules']
for name in ('search', 'confirmed'):
    logged = float(open(f'{out}/{name}.logged').read())
    m = re.search(rf'^\| {name} \| ([0-9.e+-]+) ms', txt, re.M)
    again = float(m.group(1)) if m else float('nan')
    lines.append(f'{name}: logged {logged:.3f} ms, measured again {again:.3f} ms (logged / again {logged / again:.3f})')
m = re.search(r'^\| confirmed \| .*? \| .*? \| ([0-9.]+ \([0-9.-]+\)) \|', txt, re.M)
lines.append(f'confirmed / search, per round: {m.group(1) if m else "-"}')
open(f'{out}/result.txt', 'w').write('\n'.join(lines) + '\n')
print('\n'.join(lines))
EOF
