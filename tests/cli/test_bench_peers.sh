#!/usr/bin/env bash
# The CPU peers' plumbing of the benchmark suite, without PyTorch and without a network:
#   - bench/copy_bw (the copy rate a memory-bound kernel is reported against): a positive, finite rate that agrees
#     with its own time and footprint, and its usage errors;
#   - bench/suite_report.py on a forged LOGDIR: each memory-bound kernel's fraction of the copy rate, each
#     compute-bound kernel's (and its peers') fraction of the FMA peak, the PyTorch
#     given-output table and the compile times beside the TorchInductor columns, computed from the raw files;
#   - bench/suite.sh's peers step: the copy rate measured at the workload's exact footprint, the FMA peak beside a
#     compute-bound workload (and each only there), and one line saying that the PyTorch peers are left out when
#     there is no PyTorch;
#   - bench/paired.py (paired timing on a noisy machine): per-round times and ratios, a silent command named;
#   - bench/torch-venv.sh's decisions, with a fake Python and a fake pip: the light install checked and stamped,
#     reused on a second run, made again when a pin changes, the full install in a clean folder when the light one
#     fails, nothing left behind when neither works, TORCH_PYTHON checked and nothing installed.
# The report needs Debian's python3 with msgpack (that part skips without it).
set -u
. "$(dirname "$0")/common.inc"
B=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
CB=$B/bench/copy_bw

# ---- copy_bw ----
if [ -x "$CB" ]; then
  expect 0 "copy of 1 MiB" -- "$CB" 1048576 --threads 2 --samples 3 --min-ms 5
  has out "^copy_bw bytes=1048576 threads=2 samples=3 reps=[0-9]+ median_ms=.* gbps=" "the copy line"
  awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         if (!(v["gbps"] > 0 && v["gbps"] < 1e5 && v["min_ms"] <= v["median_ms"] && v["median_ms"] <= v["max_ms"])) exit 1
         r = v["bytes"] / (v["median_ms"] * 1e-3) / 1e9; d = r - v["gbps"]; if (d < 0) d = -d
         if (d > 1e-4 * r) exit 1 }' "$T/out" ||
    { echo "FAIL: copy_bw's rate is not positive, finite and bytes / median:"; cat "$T/out"; fail=1; }
  # the footprint is two float arrays: rounded down to 8 bytes, and said
  expect 0 "an odd footprint" -- "$CB" 1001 --samples 1 --min-ms 0
  has out "^copy_bw bytes=1000 .*samples=1 " "the footprint copied"
  expect 2 "no footprint" -- "$CB"
  has err "usage: copy_bw BYTES" "the usage"
  expect 2 "a footprint too small" -- "$CB" 4
  has err "BYTES wants an integer >= 8, not '4'" "the bad footprint named"
  expect 2 "zero threads" -- "$CB" 4096 --threads 0
  has err "\-\-threads wants an integer >= 1" "the bad option named"
else
  echo "FAIL: no $CB (make bench-tools builds it)"
  fail=1
fi

# ---- the report on forged raw outputs ----
if "$PY" -c 'import msgpack' 2> /dev/null; then
  L="$T/logs"
  mkdir -p "$L"
  echo c > "$L/target.txt"
  echo "softmax reduce_rows matmul" > "$L/workloads.txt"
  runout() { printf 'time: %s ms (median of 10 runs, min %s, max %s)\nverify: ok max_rel_err=1e-07\n' "$1" "$1" "$1"; }
  runout 2.0 > "$L/softmax.fused.txt"
  runout 1.6 > "$L/reduce_rows.fused.txt"
  { runout 5.0; echo "throughput: 400 GFLOP/s, 1.2 GB/s; spread (max-min)/median 1.0%"; } > "$L/matmul.fused.txt"
  # matmul: 2 GFLOP a call (400 GFLOP/s at 5 ms), 80% of a 500 GFLOP/s peak (the faster width's); eager at 10 ms
  # 40%, frozen max-autotune at 6 ms 67%
  printf '512-bit: one thread 3.60 G FMA/s (115.2 GFLOP/s); 2 threads 15.63 G FMA/s (500.0 GFLOP/s)\n256-bit: one thread 7.00 G FMA/s (112.0 GFLOP/s); 2 threads 14.00 G FMA/s (224.0 GFLOP/s)\n' \
    > "$L/matmul.peak.txt"
  # softmax 4096x1024 moves 32 MiB: at 2 ms that is 16.78 GB/s, half of this copy rate; row sums 4096^2 (64 MiB
  # and 16 KiB) at 1.6 ms is 41.95 GB/s, 80% of its copy rate; PyTorch's best eager (2.5 ms) is 40% of softmax's
  echo "copy_bw bytes=33554432 threads=2 samples=11 reps=1 median_ms=1 min_ms=1 max_ms=1 gbps=33.554432" > "$L/softmax.copy.txt"
  echo "copy_bw bytes=67125248 threads=2 samples=11 reps=1 median_ms=1.28 min_ms=1 max_ms=2 gbps=52.44160" > "$L/reduce_rows.copy.txt"
  row() { printf '{"workload": "%s", "mode": "%s", "device": "cpu", "median_ms": %s, "compile_s": %s, "verify": "%s"}' "$@"; }
  printf '[%s, %s, %s, %s, %s]\n' "$(row softmax eager 4.0 0 ok)" "$(row softmax eager-out 2.5 0 ok)" \
    "$(row softmax compile 3.0 4.25 ok)" "$(row softmax compile-out 1.0 5.5 ok)" \
    "$(row softmax max-autotune 0.5 9 mismatch)" > "$L/softmax.torch.json"
  printf '[%s, %s]\n' "$(row matmul eager 10.0 0 ok)" "$(row matmul max-autotune-frozen 6.0 12.34 ok | sed 's/}$/, "inductor_start_s": 3.5}/')" \
    > "$L/matmul.torch.json"
  expect 0 "the report" -- "$PY" bench/suite_report.py --logdir "$L" --out "$T/r.md"
  "$PY" - "$T/r.md" << 'EOF' || fail=1
import sys
md = open(sys.argv[1]).read()
def row(start, after=None):
    text = md if after is None else md[md.index(after):].split('\n#', 1)[0]  # that section only
    line = next((l for l in text.splitlines() if l.startswith(start)), None)
    return [c.strip() for c in line.strip('|').split('|')] if line else None
bad = []
mb = '### Memory-bound kernels against the copy rate'
s, r = row('| softmax |', mb), row('| row sums |', mb)
if s is None or r is None:
    bad.append('no memory-bound rows')
else:
    # footprint, copy rate, kgen, kgen rate, fraction, target, Inductor fraction (best), eager fraction (best)
    if s[1:9] != ['32 MiB', '33.6 GB/s', '2 ms', '16.8 GB/s', '50%', 'NOT met', '100%', '40%']:
        bad.append(f'softmax copy row {s}')
    if r[1:8] != ['64 MiB', '52.4 GB/s', '1.6 ms', '42 GB/s', '80%', 'met', '—']:
        bad.append(f'row sums copy row {r}')
if row('| matmul |', mb) is not None:
    bad.append('matmul (no copy rate) has a memory-bound row')
pk = '### Compute-bound kernels against the FMA peak'
c = row('| matmul |', pk) if pk in md else None
# GFLOP per call, peak, kgen, kgen rate, fraction, Inductor (best), eager, OpenBLAS
if c is None or c[1:9] != ['2', '500 GFLOP/s', '5 ms', '400 GFLOP/s', '80%', '67%', '40%', '—']:
    bad.append(f'matmul peak row {c}')
if pk in md and row('| softmax |', pk) is not None:
    bad.append('softmax (no FMA peak measured) has a compute-bound row')
a = row('| softmax |', '### PyTorch writing into a given output')
# kgen, eager, eager out=, speedup, compile, compile into a given output, speedup, best / kgen
if a is None or a[1:9] != ['2 ms', '4 ms', '2.5 ms', '1.60x', '3 ms (compile 4.2 s)', '1 ms (compile 5.5 s)',
                           '3.00x', '0.50']:
    bad.append(f'given-output row {a}')
m = row('| matmul |')
if m is None or '6 ms (compile 12.3 s)' not in m:
    bad.append(f'the frozen-weights column of matmul: {m}')
s = row('| softmax |')
if s is None or s[6] != '—':
    bad.append(f'a max-autotune answer that did not verify is shown: {s}')
if "Inductor's one-time start in a process (3.5 s here" not in md:
    bad.append("Inductor's one-time start not said")
for b in bad:
    print('FAIL (report):', b)
sys.exit(1 if bad else 0)
EOF

  # ---- the suite's peers step: the copy at the exact footprint, and no PyTorch said in one line ----
  L2="$T/suite"
  expect 0 "the peers step without PyTorch" -- env BUILD="$B" PYTHON="$PY" TARGET=c WORKLOADS=reduce_rows \
    STEPS="peers report" LOGDIR="$L2" RESULTS="$T/res" TORCH_PYTHON="$T/no/python" RUN_TIMEOUT=600 \
    ARGS_reduce_rows="te/lib/reduce_rows.te -D N=40 -D D=100" bench/suite.sh
  has out "no PyTorch for $T/no/python \(the setup step installs it, bench/torch-venv.sh\): its peers are left out" \
    "no PyTorch said"
  [ "$(grep -c 'no PyTorch' "$T/out")" = 1 ] || { echo "FAIL: 'no PyTorch' said more than once"; fail=1; }
  grep -q "^copy_bw bytes=16160 threads=" "$L2/reduce_rows.copy.txt" 2> /dev/null ||
    { echo "FAIL: the copy was not run at row sums' footprint (40*100*4 + 40*4 bytes):"; cat "$L2/reduce_rows.copy.txt"; fail=1; }
  grep -q "^| row sums | 0.0154 MiB |" "$T"/res/suite-c-*.md ||
    { echo "FAIL: the suite's report has no copy row for row sums"; fail=1; }
  [ ! -e "$L2/reduce_rows.peak.txt" ] || { echo "FAIL: an FMA peak beside a memory-bound workload"; fail=1; }
  # a compute-bound workload gets the FMA peak instead (where the CPU has AVX2)
  L5="$T/suite_mm"
  expect 0 "the peers step of a compute-bound workload" -- env BUILD="$B" PYTHON="$PY" TARGET=c WORKLOADS=matmul \
    STEPS="peers" LOGDIR="$L5" TORCH_PYTHON="$T/no/python" TVM_WORKLOADS= RUN_TIMEOUT=600 \
    ARGS_matmul="te/lib/matmul.te -D M=40 -D N=24 -D K=8" bench/suite.sh
  [ ! -e "$L5/matmul.copy.txt" ] || { echo "FAIL: a copy rate beside a compute-bound workload"; fail=1; }
  if grep -qw avx2 /proc/cpuinfo 2> /dev/null; then
    grep -qE "^(512|256)-bit: one thread [0-9.]+ G FMA/s \([0-9.]+ GFLOP/s\); [0-9]+ threads" "$L5/matmul.peak.txt" 2> /dev/null ||
      { echo "FAIL: no FMA peak beside matmul:"; cat "$L5/matmul.peak.txt"; fail=1; }
  fi
else
  echo "skip: the report's checks ($PY has no msgpack: Debian package python3-msgpack; make test-deps installs it)"
fi

# ---- torch-venv.sh with a fake Python and pip ----
FK="$T/fake"
mkdir -p "$FK"
# the base python: `-m venv DIR` makes DIR/bin/python and DIR/bin/pip (these fakes)
cat > "$FK/base" << 'EOF'
#!/bin/bash
[ "$1 $2" = "-m venv" ] || exit 9
mkdir -p "$3/bin" && cp "$FAKE/python" "$FAKE/pip" "$3/bin/"
EOF
# pip: records its arguments in the venv (and in FAKE/pip.log); fails when they include FAKE_PIP_FAIL
cat > "$FK/pip" << 'EOF'
#!/bin/bash
echo "$*" >> "$(dirname "$0")/../installed"
echo "$*" >> "$FAKE/pip.log"
case " $* " in *" ${FAKE_PIP_FAIL:-never} "*) echo "pip: no network"; exit 1 ;; esac
EOF
# python: the import-and-compile check passes when FAKE_CHECK=ok, or (FAKE_CHECK=full) when torch was not installed
# with --no-deps; the reuse check (import torch, numpy) when something was installed
cat > "$FK/python" << 'EOF'
#!/bin/bash
inst="$(dirname "$0")/../installed"
case "$2" in
  *torch.compile*)
    if [ "${FAKE_CHECK:-ok}" = ok ] || { [ "$FAKE_CHECK" = full ] && ! grep -q -- --no-deps "$inst"; }; then
      echo "torch 2.99 imports and compiles"; exit 0; fi
    echo "ImportError: libcudart.so.13: cannot open shared object file"; exit 1 ;;
  *) [ -s "$inst" ] ;;
esac
EOF
chmod +x "$FK/base" "$FK/pip" "$FK/python"
V="$T/b/venv-torch"
venv() { expect "$1" "$2" -- env FAKE="$FK" BASE_PYTHON="$FK/base" TORCH_VENV="$V" "${@:4}" bench/torch-venv.sh; }
npip() { wc -l < "$FK/pip.log" 2> /dev/null || echo 0; }

venv 0 "a light install" -- FAKE_CHECK=ok
has err "installing torch 2.15.0 into .*, the light way" "the light way said"
has err "ready: .*/venv-torch/bin/python \(light install; torch 2.99 imports and compiles\)" "ready said"
[ "$(tail -1 "$T/out")" = "$V/bin/python" ] || { echo "FAIL: the last line is not the interpreter"; cat "$T/out"; fail=1; }
grep -q -- "^install -q --no-deps torch==2.15.0 nvidia-cufile==1.17.1.22.\* nvidia-cusparselt-cu13==0.8.1" "$V/installed" ||
  { echo "FAIL: torch not installed without its dependencies:"; cat "$V/installed"; fail=1; }
grep -q -- "^install -q filelock .*numpy$" "$V/installed" || { echo "FAIL: no pure-Python requirements"; fail=1; }
grep -q "^light install" "$V/.kgen-torch-venv" || { echo "FAIL: no stamp of the light install"; fail=1; }
n=$(npip)
venv 0 "a second run" -- FAKE_CHECK=ok
has err "reusing .*venv-torch \(light install" "the stamp reused"
[ "$(npip)" = "$n" ] || { echo "FAIL: the second run called pip"; fail=1; }
venv 0 "a changed pin" -- FAKE_CHECK=ok TORCH_VERSION=2.99.1
has err "is not a finished install of these pins: made again" "a changed pin installs again"
grep -q -- "--no-deps torch==2.99.1 " "$V/installed" || { echo "FAIL: the pin's override not used"; fail=1; }

rm -rf "$V"
venv 0 "a light install that does not import" -- FAKE_CHECK=full
has err "the light install failed or does not import and compile \(log: .*torch-venv-light.log\)" "the fallback said"
has err "libcudart.so.13: cannot open" "the reason shown"
has err "installing torch 2.15.0 into a clean .*, the full way" "the full way said"
grep -q "^full install" "$V/.kgen-torch-venv" || { echo "FAIL: no stamp of the full install"; fail=1; }
# a clean folder: the light attempt's packages are gone
if grep -q -- --no-deps "$V/installed" || ! grep -q "^install -q torch==2.15.0 numpy$" "$V/installed"; then
  echo "FAIL: the full install is not in a clean folder:"; cat "$V/installed"; fail=1
fi
rm -rf "$V"
venv 0 "a light install that pip cannot make" -- FAKE_CHECK=full FAKE_PIP_FAIL=--no-deps
grep -q "^full install" "$V/.kgen-torch-venv" || { echo "FAIL: pip's failure did not fall back to full"; fail=1; }
rm -rf "$V"
venv 1 "light only, not working" -- FAKE_CHECK=full TORCH_INSTALL=light
has err "error: no working torch 2.15.0 \(TORCH_INSTALL=light\)" "the failure said"
[ ! -e "$V" ] || { echo "FAIL: a failed install left its folder"; fail=1; }
if grep -q "the full way" "$T/err"; then echo "FAIL: TORCH_INSTALL=light fell back"; fail=1; fi
venv 1 "no network" -- FAKE_CHECK=ok FAKE_PIP_FAIL=install
has err "the full install failed or does not import and compile" "both attempts said"
[ ! -e "$V" ] || { echo "FAIL: a failed install left its folder"; fail=1; }
n=$(npip)
venv 0 "an existing interpreter" -- FAKE_CHECK=ok TORCH_PYTHON="$FK/python"
has err "using TORCH_PYTHON=.*/fake/python \(torch 2.99 imports and compiles\); nothing installed" "TORCH_PYTHON used"
if [ "$(tail -1 "$T/out")" != "$FK/python" ] || [ "$(npip)" != "$n" ] || [ -e "$V" ]; then
  echo "FAIL: TORCH_PYTHON installed something or is not the answer"; fail=1
fi
venv 1 "a broken interpreter" -- FAKE_CHECK=no TORCH_PYTHON="$FK/python"
has err "error: TORCH_PYTHON=.* does not import torch or run torch.compile" "the broken interpreter named"
venv 2 "a bad TORCH_INSTALL" -- TORCH_INSTALL=some
has err "TORCH_INSTALL is auto, light or full, not 'some'" "the bad mode named"
# ---- bench/paired.py: per-round ratios of commands that print times in the peers' formats ----
expect 0 "paired timing" -- "$PY" bench/paired.py --rounds 3 kgen="echo 'time: 2.0 ms (median of 9 runs)'" \
  torch="echo 'torch softmax median_ms=3.0 min_ms=2.5'" blas="echo 'openblas sgemm 1024x1024x1024  5.00 ms  1 GFLOP/s'"
has out "^round 3: kgen 2 ms, torch 3 ms, blas 5 ms$" "each round's times"
has out "^\| torch \| 3 ms \| 3 ms \| 1.500 \(1.500-1.500\) \| 3 \|$" "the per-round ratio"
has out "^\| blas \| 5 ms \| 5 ms \| 2.500 " "the OpenBLAS format"
expect 0 "a command without a time" -- "$PY" bench/paired.py --rounds 2 a="echo ms=1" b="echo nothing"
has err "round 2: b printed no time \(exit 0\): nothing" "the silent command named"
has out "^\| b \| - \| - \| - \| 0 \|$" "no ratio from it"
expect 2 "one command" -- "$PY" bench/paired.py a="echo ms=1"
has err "give at least two NAME=COMMAND" "the usage error"
exit $fail
