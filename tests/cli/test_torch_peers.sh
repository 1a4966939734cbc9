#!/usr/bin/env bash
# bench/torch_peers.py (the PyTorch peers of the benchmark suite) at tiny sizes on the CPU: four workloads run
# eagerly on the inputs `kgen run --save` wrote, each verified against kgen's saved output; softmax through
# torch.compile and writing into a given output (eager with out=, and compiled), verified too, with a compile time;
# the frozen-weights and out= modes refused where they do not apply; a folder whose inputs do not go with its
# output reported as a mismatch (exit 1); the JSON; the usage errors; the dynamic subcommand's eager sequence;
# --device cuda without a device.
# PyTorch is the benchmark's own (2 GB, not installed by the tests): the virtual environment `make bench`'s setup
# step makes (bench/torch-venv.sh, $BUILD/venv-torch), or TORCH_PEERS_PYTHON; the test skips without it.
set -u
. "$(dirname "$0")/common.inc"
PY=${TORCH_PEERS_PYTHON:-${BUILD:-build}/venv-torch/bin/python}
TP=bench/torch_peers.py
[ -x "$PY" ] || { echo "skip: no PyTorch at $PY (make bench's setup step installs it: bench/torch-venv.sh)"; exit 0; }
# one probe (each torch import costs a second or two): torch.compile present, a CUDA device present
PROBE=$("$PY" -c 'import numpy, torch; print(int(hasattr(torch, "compile")), int(torch.cuda.is_available()))' \
  2>/dev/null) || { echo "skip: torch or numpy not importable by $PY (bench/torch-venv.sh makes it again)"; exit 0; }
read -r HAS_COMPILE HAS_CUDA <<<"$PROBE"
FAST="--min-ms 2 --samples 2"

expect 2 "no subcommand" -- "$PY" $TP
expect 2 "unknown workload" -- "$PY" $TP time nosuch
has err "unknown workload 'nosuch'" "names the workload"
expect 2 "unknown size" -- "$PY" $TP time matmul -D Q=3 --small
has err "'Q' is not a size variable of matmul" "names the size"

# ---- verified against kgen's saved inputs and outputs ----
run_one() {  # NAME DIR MODES -D...
  local w=$1 d=$2 modes=$3; shift 3
  expect 0 "kgen run $w --save" -- $K run "$w" "$@" --save "$d"
  expect 0 "torch peer of $w" -- "$PY" $TP time "$w" --verify "$d" --modes $modes $FAST --out "$T/$w.json"
  has out "^torch $w mode=eager device=cpu sizes=.* median_ms=[0-9.e+-]+ min_ms=.* verify=ok max_rel_err=.* ref=kgen" \
    "$w verifies against kgen"
}
# torch.compile: where torch lacks it an error line and eager still runs; where it has it, compiled softmax
# verifies too, plain and into a given output (a few seconds of compiling each)
run_one softmax "$T/softmax" eager,eager-out,compile,compile-out,max-autotune-frozen -D N=7 -D D=33
has out "mode=eager-out .*verify=ok" "softmax with out= verifies"
frozen_only="mode max-autotune-frozen applies to matmul, mlp_gelu, mlp_epilogue only"
has out "mode=max-autotune-frozen device=cpu error=\"$frozen_only\"" "frozen weights refused for softmax"
if [ "$HAS_COMPILE" = 0 ]; then
  has out "mode=compile device=cpu error=\"unavailable: torch .* has no torch.compile\"" "compile unavailable"
else
  has out "mode=compile .*compile_s=[0-9.e+-]+ .*verify=ok" "compiled softmax verifies"
  has out "mode=compile-out .*compile_s=[0-9.e+-]+ .*verify=ok" "compiled softmax into a given output verifies"
  "$PY" - "$T/softmax.json" <<'EOF' || fail=1
import json, sys
rows = {r['mode']: r for r in json.load(open(sys.argv[1]))}
for m in ('compile', 'compile-out'):
    r = rows[m]
    # the compile time is the first call's excess over a steady call
    assert abs(r['compile_s'] - (r['first_s'] - r['median_ms'] * 1e-3)) < 1e-9 and r['compile_s'] > 0, r
    # Inductor's one-time start, paid apart before the first compiled mode
    assert r['inductor_start_s'] > 0, r
assert rows['eager']['compile_s'] == 0 and rows['eager-out']['compile_s'] == 0, rows
EOF
fi
run_one layernorm "$T/layernorm" eager -D N=9 -D D=300
run_one matmul "$T/matmul" eager -D M=33 -D N=20 -D K=17
run_one attention "$T/attention" eager,eager-out -D B=2 -D S=9 -D T=11 -D D=7 -D E=5
has out "mode=eager-out device=cpu error=\"mode eager-out: attention has no out= form" "no out= form said"
has out "sizes=B=2,S=9,D=7,T=11,E=5" "the sizes read from the saved files"
# the rest of the library: an output whose extents are computed from the sizes (maxpool2d's (H - 3) / 2 + 1), a
# transpose materialized (eager) and copied into a given output, a depthwise convolution by groups
run_one maxpool2d "$T/maxpool2d" eager -D N=2 -D C=3 -D H=13 -D W=10
run_one transpose "$T/transpose" eager,eager-out -D M=5 -D N=7
has out "mode=eager-out .*verify=ok" "transpose into a given output verifies"
run_one depthwise_conv2d "$T/depthwise" eager -D N=2 -D C=3 -D H=5 -D W=6
run_one mlp_epilogue "$T/mlp_epilogue" eager,eager-out -D M=9 -D N=5 -D K=7
run_one batch_matmul "$T/batch_matmul" eager -D L=2 -D M=5 -D N=7 -D K=3
run_one matvec "$T/matvec" eager,eager-out -D M=9 -D K=13
# the stride-2 convolution of te/lib/conv2d.te (odd sizes: the output's extent rounds up)
run_one conv2d "$T/conv2d" eager -D N=2 -D C=3 -D H=9 -D W=11 -D F=4
# a saved output whose computed extent disagrees with the inputs' sizes
mkdir -p "$T/pool_bad" && cp "$T/maxpool2d/Y.npy" "$T/pool_bad/"
expect 0 "kgen run maxpool2d, other sizes" -- $K run maxpool2d -D N=2 -D C=3 -D H=15 -D W=10 --save "$T/pool_other"
cp "$T/pool_other/X.npy" "$T/pool_bad/"
expect 2 "a computed extent that disagrees" -- "$PY" $TP time maxpool2d --verify "$T/pool_bad" --modes eager $FAST
has err "Y.npy has shape \\(2, 3, 6, 4\\), want \\(2, 3, 7, 4\\)" "the computed extent checked"
"$PY" - "$T/matmul.json" <<'EOF' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert isinstance(r, list) and len(r) == 1, r
r = r[0]
assert r['workload'] == 'matmul' and r['mode'] == 'eager' and r['verify'] == 'ok', r
assert r['min_ms'] <= r['median_ms'] <= r['max_ms'] and len(r['samples_ms']) == 2, r
assert r['max_rel_err'] < 1e-4 and r['ref'] == 'kgen' and r['tf32'] == 0, r
assert abs(r['gflops'] - 2 * 33 * 20 * 17 / (r['median_ms'] * 1e-3) / 1e9) < 1e-6 * r['gflops'], r
EOF

# ---- a folder whose output belongs to other inputs ----
expect 0 "kgen run softmax, another seed" -- $K run softmax -D N=7 -D D=33 --seed 99 --save "$T/other"
mkdir -p "$T/wrong" && cp "$T/other/X.npy" "$T/wrong/" && cp "$T/softmax/Y.npy" "$T/wrong/"
expect 1 "wrong inputs" -- "$PY" $TP time softmax --verify "$T/wrong" --modes eager $FAST
has out "mode=eager .* verify=mismatch" "reported as a mismatch"
expect 2 "a folder of another workload" -- "$PY" $TP time softmax --verify "$T/matmul"
has err "no X.npy" "the missing file named"

# ---- dynamic: the call sequence ----
printf '16\n3\n# a comment\n16, 40\n3\n' > "$T/seq"
MODES=eager; [ "$HAS_COMPILE" = 0 ] && MODES=eager,static,dynamic
expect 0 "dynamic eager" -- "$PY" $TP dynamic matmul --seq "$T/seq" -D K=24 -D N=8 --modes $MODES \
  --steady-min-ms 2 --out "$T/dyn.json"
has out "^torch-dynamic matmul mode=eager device=cpu var=M calls=5 distinct=3 total_s=.* verify=ok" "sequence run"
"$PY" - "$T/dyn.json" <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
assert d['sequence'] == [16, 3, 16, 40, 3] and d['distinct'] == [3, 16, 40] and d['fixed'] == {'K': 24, 'N': 8}, d
m = d['modes'][0]
assert m['mode'] == 'eager' and m['verify'] == 'ok' and len(m['calls_s']) == 5 and m['graphs'] == 0, m
assert abs(m['cumulative_s'][-1] - sum(m['calls_s'])) < 1e-9 and sorted(m['steady']) == ['16', '3', '40'], m
EOF
if [ "$HAS_COMPILE" = 0 ]; then
  has out "mode=static .*error=\"unavailable: torch .* has no torch.compile\"" "static unavailable"
  has out "mode=dynamic .*error=\"unavailable: torch .* has no torch.compile\"" "dynamic unavailable"
fi
expect 2 "bad sequence" -- "$PY" $TP dynamic softmax --seq "$T/softmax/X.npy"
if [ "$HAS_CUDA" = 0 ]; then
  expect 3 "no CUDA device" -- "$PY" $TP time softmax --small --device cuda --modes eager,cublas
  has out "mode=cublas device=cuda error=\"unavailable: no CUDA device" "every mode reported"
fi

exit $fail
