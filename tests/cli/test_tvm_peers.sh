#!/usr/bin/env bash
# The TVM MetaSchedule peer of the benchmark suite (bench/tvm_peers.py) and its part of the report
# (bench/suite_report.py): the best-so-far curve read from a synthetic MetaSchedule work folder (records with
# failed candidates, the task log's trial timestamps), the usage errors and TVM reported as unavailable without
# it; the report's TVM table and plots from a tiny kgen tuning run and a TVM result file. Then, only where the
# suite's setup step has made the TVM venv (bench/tvm-venv.sh; never installed here: it is large), the peer itself
# tunes softmax at a tiny size for 2 trials and checks its kernel against kgen's saved output, and three more
# workloads run untuned (TVM's default schedule) check their tensor expressions against kgen's and numpy's answers.
set -u
. "$(dirname "$0")/common.inc"
B=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
TP=bench/tvm_peers.py
[ -x "$PY" ] || { echo "skip: $PY not found (Debian package python3)"; exit 0; }

# ---- the curve of a work folder: trial order, failed candidates (1e10 s, no times, a broken line), timestamps ----
W="$T/work"
mkdir -p "$W/logs"
tgt='{"kind": "llvm", "mcpu": "znver5", "num-cores": 2, "keys": ["cpu"]}'
cat > "$W/database_tuning_record.json" <<EOF
[0, [[[], []], [10000000000.0], $tgt, []]]
[0, [[[], []], [0.002, 0.004], $tgt, []]]
[0, [[[], []], [0.0025], $tgt, []]]
[0, [[[], []], [], $tgt, []]]
not json
[0, [[[], []], [0.005], $tgt, []]]
EOF
cat > "$W/logs/tvm.s_tir.meta_schedule.logging.task_0_main.log" <<'EOF'
2026-12-03 10:00:01 [INFO] [task_scheduler.cc:175] Initializing Task #0: "main"
2026-12-03 10:00:05 [INFO] [task_scheduler.cc:134] [Task #0: main] Trial #1: Error in building:
LocalBuilder: Timeout, killed after 30.0 seconds
2026-12-03 10:00:05 [INFO] [task_scheduler.cc:144] [Task #0: main] Trial #2: GFLOPs: 1.0. Time: 3000 us. Best GFLOPs: 1.0
2026-12-03 10:00:05 [INFO] [task_scheduler.cc:144] [Task #0: main] Trial #3: GFLOPs: 1.2. Time: 2500 us. Best GFLOPs: 1.2
2026-12-03 10:00:17 [INFO] [task_scheduler.cc:134] [Task #0: main] Trial #4: Error in running:
2026-12-03 10:00:17 [INFO] [task_scheduler.cc:144] [Task #0: main] Trial #6: GFLOPs: 0.6. Time: 5000 us. Best GFLOPs: 1.2
EOF
START=$(TZ=UTC date -d '2026-12-03 10:00:00' +%s)
expect 0 "curve of a work folder" -- env TZ=UTC "$PY" $TP curve "$W" --start "$START"
"$PY" - "$T/out" <<'EOF' || fail=1
import json, sys
c = json.load(open(sys.argv[1]))
assert c['trials'] == 6 and c['valid'] == 3, c
want = [None, 0.003, 0.0025, 0.0025, 0.0025, 0.0025]
assert len(c['best_s']) == 6 and all((a is None and b is None) or abs(a - b) < 1e-12
                                     for a, b in zip(c['best_s'], want)), c['best_s']
assert c['wall_s'] == [5.0, 5.0, 5.0, 17.0, None, 17.0], c['wall_s']
EOF
expect 2 "curve of no folder" -- "$PY" $TP curve "$T/nosuch"
expect 2 "unknown workload" -- "$PY" $TP time nosuch --trials 2
has err "unknown workload 'nosuch'" "the workload named"
expect 2 "no trial budget" -- "$PY" $TP time matmul
if ! "$PY" -c 'import tvm' 2> /dev/null && "$PY" -c 'import numpy' 2> /dev/null; then
  expect 3 "no TVM" -- "$PY" $TP time matmul --trials 2 --small --out "$T/none.json"
  has out '^tvm matmul error="unavailable: ' "TVM reported as unavailable"
  "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["error"].startswith("unavailable"), r' \
    "$T/none.json" || fail=1
fi

expect 1 "suite: unknown TVM workload" -- env BUILD="$B" TVM_WORKLOADS=frob LOGDIR="$T/x" bench/suite.sh
has err "unknown workload 'frob'" "the suite names it"
expect 1 "suite: bad TVM_TRIALS" -- env BUILD="$B" TVM_TRIALS=x LOGDIR="$T/x" bench/suite.sh
has err "TVM_TRIALS must be a non-negative integer" "the suite names the variable"

# ---- the report: kgen's tiny tuning run beside a TVM result ----
if "$PY" -c 'import msgpack' 2> /dev/null; then
  L="$T/suite"
  mkdir -p "$L"
  echo c > "$L/target.txt"
  echo "matmul softmax" > "$L/workloads.txt"
  echo "$K tune te/lib/matmul.te -D M=16 -D N=16 -D K=16 --log $L/matmul.fused.kglog" > "$L/commands.txt"
  t0=$(date +%s.%N)
  expect 0 "kgen tune" -- $K tune te/lib/matmul.te -D M=16 -D N=16 -D K=16 --trials 3 --log "$L/matmul.fused.kglog"
  printf 'matmul\tfused\t0\t%s\t%s\n' "$t0" "$(date +%s.%N)" > "$L/runs.tsv"
  cat > "$L/matmul.tvm.json" <<'EOF'
{"workload": "matmul", "threads": 2, "trials_budget": 4, "tvm": "0.27.0.post1", "sizes": "M=16,K=16,N=16",
 "mcpu": "znver5", "tune_s": 12.4, "trials": 4, "valid": 3, "best_s": [null, 0.003, 0.0025, 0.0025],
 "wall_s": [5.0, 5.0, 5.0, 11.5], "compile_s": 0.2, "median_ms": 1.5, "min_ms": 1.4, "max_ms": 1.9,
 "verify": "ok", "max_rel_err": 1e-6, "tol": 1e-4, "ref": "kgen"}
EOF
  cat > "$L/softmax.tvm.json" <<'EOF'
{"workload": "softmax", "tune_s": 3.0, "trials": 2, "valid": 2, "best_s": [0.001, 0.001], "wall_s": [1.0, 2.0],
 "median_ms": 0.9, "verify": "mismatch", "max_rel_err": 0.25, "tol": 1e-4}
EOF
  expect 0 "report" -- "$PY" bench/suite_report.py --logdir "$L" --out "$T/r.md"
  has r.md '^## 6\. TVM MetaSchedule at equal trials' "the TVM section"
  has r.md '^\| matmul \| — \| [0-9]+ s \(3\) \| 1\.5 ms \| 12 s \(4, 3\) \| — \| [0-9.]+ (us|ms) \| 2\.5 ms \|' \
    "the TVM row: best, tuning time, trials, its best after 4 trials beside kgen's after its 3"
  has r.md '^\| softmax \| — \| — \| — \(output mismatch, max rel\. error 0\.25\) \| 3 s \(2, 2\) \|' \
    "a TVM kernel that differs from kgen's is no figure"
  has r.md 'mcpu=znver5' "the target CPU named"
  if "$PY" -c 'import matplotlib' 2> /dev/null; then
    [ -s "$T/r-curves.png" ] || { echo "FAIL: no tuning-curve plot with TVM's curve"; fail=1; }
    [ -s "$T/r-tvm.png" ] || { echo "FAIL: no wall-time plot"; fail=1; }
  else
    echo "skip: the report's plots ($PY has no matplotlib: Debian package python3-matplotlib)"
  fi
else
  echo "skip: the report ($PY has no msgpack: Debian package python3-msgpack)"
fi

# ---- the peer itself, where the bench's setup step made its venv ----
VENV=${TVM_VENV:-$B/bench/tvm-venv}
if [ ! -x "$VENV/bin/python" ]; then
  echo "skip: the TVM peer's run (no $VENV: bench/tvm-venv.sh, the suite's setup step, makes it)"
  exit $fail
fi
expect 0 "kgen run softmax --save" -- $K run softmax -D N=7 -D D=33 --save "$T/sm"
expect 0 "TVM peer of softmax" -- "$VENV/bin/python" $TP time softmax --trials 2 --threads 1 --verify "$T/sm" \
  --work-dir "$T/sm.work" --repeat 2 --min-repeat-ms 1 --out "$T/sm.json"
has out '^tvm softmax sizes=N=7,D=33 median_ms=[0-9.e+-]+ .*trials=2 valid=[12] .*verify=ok .*ref=kgen' \
  "tuned for 2 trials, verified against kgen"
"$PY" - "$T/sm.json" "$T/sm.work" <<'EOF' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert r['trials'] == 2 and len(r['best_s']) == 2 and len(r['wall_s']) == 2, r
assert r['best_s'][-1] is not None and r['tune_s'] > 0 and r['threads'] == 1 and r['mcpu'], r
assert r['work_dir'] == sys.argv[2] and r['max_rel_err'] <= r['tol'], r
EOF
# untuned (TVM's default schedule): the stages TE splits (a reduction divided afterwards) against kgen's output, and
# the stride-2 convolution against numpy's
expect 0 "kgen run layernorm --save" -- $K run layernorm -D N=9 -D D=300 --save "$T/ln"
expect 0 "TVM layernorm untuned" -- "$VENV/bin/python" $TP time layernorm --trials 0 --verify "$T/ln" --repeat 2 \
  --min-repeat-ms 1
has out '^tvm layernorm sizes=N=9,D=300 .*trials=0 .*verify=ok .*ref=kgen' "layernorm verified against kgen"
expect 0 "kgen run attention --save" -- $K run attention -D B=2 -D S=9 -D T=11 -D D=7 -D E=5 --save "$T/at"
expect 0 "TVM attention untuned" -- "$VENV/bin/python" $TP time attention --trials 0 --verify "$T/at" --repeat 2 \
  --min-repeat-ms 1
has out '^tvm attention sizes=B=2,S=9,T=11,D=7,E=5 .*verify=ok .*ref=kgen' "attention verified against kgen"
expect 0 "TVM conv2d untuned" -- "$VENV/bin/python" $TP time conv2d --trials 0 --small --repeat 2 --min-repeat-ms 1
has out '^tvm conv2d sizes=N=2,C=3,H=9,W=11,F=4 .*verify=ok .*ref=numpy-f64' "stride-2 conv2d verified against numpy"
exit $fail
