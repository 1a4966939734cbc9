#!/usr/bin/env bash
# The environment's faults are not the candidates': with no usable TMPDIR, no C compiler, a compiler
# that fails on everything, or a bad KGEN_NVRTC / KGEN_CUDA_LIB, `kgen tune` stops with a clear message and a
# non-zero exit, and its log blames no candidate; fixed, the next run measures them all. A tune in which nothing
# succeeds exits non-zero. --save works on the emulator and with --measure (outputs checked against an independent
# reference), --load there too. Build folders go with a SIGTERM'd kgen, and a dead kgen's are removed at start.
# (A worker killed from outside is retried once: tests/test_envfaults.c.)
set -u
. "$(dirname "$0")/common.inc"

W=(matmul -D M=16 -D N=12 -D K=8)
OPTS=(--trials 6 --per-round 3 --population 32 --min-repeat-ms 2 --quiet --confirm 0)
# the number of records of a log ("0" when it has none or does not exist)
records() {
  local n
  n=$($K show "$1" 2>/dev/null | grep -oE "records: [0-9]+" | grep -oE "[0-9]+" | head -1)
  echo "${n:-0}"
}
no_blame() {
  local n
  n=$(records "$1")
  [ "$n" = 0 ] || { echo "FAIL ($2): the log holds $n records blaming candidates"; $K show "$1" | head; fail=1; }
}

# --- each fault: non-zero exit, a message saying what, nothing logged against the candidates; then fixed
L="$T/c.kglog"
expect 1 "TMPDIR unusable" -- env TMPDIR="$T/no/such/dir" $K tune "${W[@]}" --target c "${OPTS[@]}" --log "$L"
has err "fault of the environment" "said to be the environment's"
has err "TMPDIR" "names TMPDIR"
no_blame "$L" "TMPDIR unusable"

expect 1 "CC missing" -- env CC=/nonexistent/kgen-cc $K tune "${W[@]}" --target c "${OPTS[@]}" --log "$L"
has err "cannot run the C compiler '/nonexistent/kgen-cc'" "names the compiler"
no_blame "$L" "CC missing"

expect 1 "no compiler on PATH" -- env -u CC PATH=/nonexistent $K tune "${W[@]}" --target c "${OPTS[@]}" --log "$L"
has err "cannot run the C compiler 'cc'" "says cc is not there"
no_blame "$L" "no compiler on PATH"

expect 1 "CC=/bin/false" -- env CC=/bin/false $K tune "${W[@]}" --target c "${OPTS[@]}" --log "$L"
has err "the C compiler '/bin/false' exited with status 1" "the compiler's exit status, not errno"
has err "fault of the environment" "said to be the environment's"
no_blame "$L" "CC=/bin/false"
expect 1 "run with CC=/bin/false" -- env CC=/bin/false $K run "${W[@]}" --target c
has err "the C compiler '/bin/false' exited with status 1" "run reports the exit status"
if grep -q "No such file" "$T/err"; then echo "FAIL: errno in the message of CC=/bin/false"; fail=1; fi

expect 1 "compiler flags that break every build" -- env KGEN_CFLAGS=-march=no-such-cpu $K tune "${W[@]}" \
  --target c "${OPTS[@]}" --log "$L"
has err "cannot build a trivial kernel" "the toolchain check found it"
no_blame "$L" "bad KGEN_CFLAGS"

# a compiler that builds the toolchain check's kernel but fails on all else alike: the default schedule, kgen's
# naive code, fails first, which is the toolchain's fault
printf '#!/bin/sh\ngrep -q "kgen_entry(float \\*restrict a)" kernel.c && exec cc "$@"\necho "fakecc: internal error" >&2\nexit 1\n' >"$T/fakecc"
chmod +x "$T/fakecc"
expect 1 "a compiler that fails on kgen's code only" -- env CC="$T/fakecc" $K tune "${W[@]}" --target c "${OPTS[@]}" \
  --log "$L"
has err "the default schedule, kgen's naive code, fails" "the default schedule's failure stops tuning"
has err "fakecc: internal error" "the compiler's message"
no_blame "$L" "fake compiler"

expect 0 "fixed: tuning measures them" -- $K tune "${W[@]}" --target c "${OPTS[@]}" --log "$L"
has out "trials: 6 this run \(0 failed\), 0 from the log" "every candidate measured, none from the faulty runs"
[ "$(records "$L")" = 6 ] || { echo "FAIL: $(records "$L") records after the fixed run, want 6"; fail=1; }

# --- libraries named by the environment: an error naming the path, never a silent fallback
E="$T/e.kglog"
expect 1 "KGEN_NVRTC not NVRTC (tune, emulator)" -- env KGEN_NVRTC=/etc/passwd $K tune "${W[@]}" --emulate \
  "${OPTS[@]}" --log "$E"
has err "KGEN_NVRTC=/etc/passwd" "names the path"
no_blame "$E" "KGEN_NVRTC"
expect 1 "KGEN_NVRTC not NVRTC (run, emulator)" -- env KGEN_NVRTC=/etc/passwd $K run "${W[@]}" --target cuda --emulate
has err "KGEN_NVRTC=/etc/passwd" "run names the path"
expect 1 "KGEN_NVRTC missing (tune, auto)" -- env KGEN_NVRTC=/nonexistent/libnvrtc.so $K tune "${W[@]}" \
  "${OPTS[@]}" --log "$E"
has err "KGEN_NVRTC=/nonexistent/libnvrtc.so" "auto target: still an error"
expect 1 "KGEN_CUDA_LIB bad (tune, auto)" -- env KGEN_CUDA_LIB=/etc/passwd $K tune "${W[@]}" "${OPTS[@]}" --log "$E"
has err "KGEN_CUDA_LIB=/etc/passwd" "auto target: an error naming the path, not a fallback to C"
no_blame "$E" "KGEN_CUDA_LIB"
expect 1 "KGEN_CUDA_LIB bad (run, cuda)" -- env KGEN_CUDA_LIB=/nonexistent/libcuda.so.1 $K run "${W[@]}" --target cuda
has err "KGEN_CUDA_LIB=/nonexistent/libcuda.so.1" "run names the path"
expect 1 "KGEN_CUDA_LIB bad (replay, auto)" -- env KGEN_CUDA_LIB=/etc/passwd $K replay "$L"
has err "KGEN_CUDA_LIB=/etc/passwd" "replay names the path"
expect 1 "no C++ compiler (emulator)" -- env CXX=/nonexistent/kgen-c++ $K tune "${W[@]}" --emulate "${OPTS[@]}" \
  --log "$E"
has err "cannot run the C\+\+ compiler '/nonexistent/kgen-c\+\+'" "names the C++ compiler"
no_blame "$E" "CXX missing"
expect 0 "fixed: tuning on the emulator" -- $K tune "${W[@]}" --emulate "${OPTS[@]}" --log "$E"
has out "trials: 6 this run \(0 failed\), 0 from the log" "every emulated candidate measured"

# --- nothing succeeded: non-zero (the candidates' own faults: every run exceeds a tiny time limit)
expect 1 "no candidate succeeded" -- $K tune "${W[@]}" --target c "${OPTS[@]}" --timeout 0.000001 \
  --log "$T/none.kglog"
has err "no candidate of matmul .* ran correctly" "says nothing succeeded"

# --- --save on every target: the outputs equal an independent reference (python, no numpy)
PY=${PYTHON:-/usr/bin/python3}
pycheck() { # DESCRIPTION DIR: the saved outputs against the reference, where Debian's python3 is there
  if [ -x "$PY" ]; then expect 0 "$1" -- "$PY" "$T/check.py" "$2"; else echo "skip: $1 (no $PY: Debian package python3)"; fi
}
cat > "$T/check.py" <<'EOF'
import ast, struct, sys
def load(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    hl = struct.unpack("<H", data[8:10])[0]
    hdr = ast.literal_eval(data[10:10 + hl].decode("latin1"))
    assert hdr["descr"] == "<f4" and not hdr["fortran_order"], hdr
    n = 1
    for d in hdr["shape"]:
        n *= d
    return hdr["shape"], struct.unpack("<%df" % n, data[10 + hl:10 + hl + 4 * n])
d = sys.argv[1]
(M, K), A = load(d + "/A.npy")
(K2, N), B = load(d + "/B.npy")
(M2, N2), C = load(d + "/C.npy")
assert (K, M, N) == (K2, M2, N2)
worst = 0
for i in range(M):
    for j in range(N):
        ref = sum(A[i * K + k] * B[k * N + j] for k in range(K))
        worst = max(worst, abs(C[i * N + j] - ref) / max(1e-3, abs(ref)))
print("max rel err %.3g" % worst)
sys.exit(0 if worst < 1e-4 else 1)
EOF
expect 0 "run --save on the emulator" -- $K run "${W[@]}" --target cuda --emulate --save "$T/se"
has out "verify: ok" "the emulated run verifies"
pycheck "emulator outputs = reference" "$T/se"
expect 0 "run --measure --save on C" -- $K run "${W[@]}" --target c --measure --save "$T/sm"
pycheck "measured outputs = reference" "$T/sm"
expect 0 "plain run --save on C" -- $K run "${W[@]}" --target c --save "$T/sc"
cmp -s "$T/sc/A.npy" "$T/se/A.npy" && cmp -s "$T/sc/B.npy" "$T/sm/B.npy" ||
  { echo "FAIL: the inputs saved by the emulator, --measure and a plain run differ"; fail=1; }
expect 0 "run --load on the emulator" -- $K run "${W[@]}" --target cuda --emulate --seed 9 --load "$T/sc" --save "$T/sl"
has out "verify: ok" "verified on the loaded inputs"
cmp -s "$T/sc/A.npy" "$T/sl/A.npy" || { echo "FAIL: --load did not use the given inputs"; fail=1; }
pycheck "loaded run's outputs = reference" "$T/sl"
expect 1 "run --load of a missing folder (emulator)" -- $K run "${W[@]}" --target cuda --emulate --load "$T/none"
has err "$T/none/A.npy" "names the file"

# --- build folders: removed with a SIGTERM'd kgen; a dead kgen's removed at start, a live one's kept
mkdir -p "$T/tmp"
TMPDIR="$T/tmp" $K tune matmul -D M=96 -D N=96 -D K=96 --target c --trials 400 --per-round 64 --population 64 \
  --log "$T/k.kglog" --quiet >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 300); do ls "$T/tmp" | grep -q "^kgen-$pid-" && break; sleep 0.05; done
ls "$T/tmp" | grep -q "^kgen-$pid-" || { echo "FAIL: no build folder kgen-$pid-* seen while tuning"; fail=1; }
kill -TERM $pid
wait $pid
st=$?
[ $st = 143 ] || { echo "FAIL: the SIGTERM'd tune ended with $st, want 143"; fail=1; }
sleep 0.2
left=$(ls "$T/tmp" | grep "^kgen-" || true)
[ -z "$left" ] || { echo "FAIL: build folders left after SIGTERM: $left"; fail=1; }

# a tuning that ends: its build folders gone, the precompiled header's (runtime/pch.c, made at the third build)
# with them
mkdir -p "$T/tmp2"
expect 0 "a tuning of 8 trials" -- env TMPDIR="$T/tmp2" $K tune "${W[@]}" --target c --trials 8 --log "$T/k2.kglog" --quiet
left=$(ls "$T/tmp2")
[ -z "$left" ] || { echo "FAIL: folders left after a tuning: $left"; fail=1; }

dead=$(sh -c 'echo $$')
mkdir "$T/tmp/kgen-$dead-abcdef" "$T/tmp/kgen-emu-$dead-ghijkl" "$T/tmp/kgen-$$-mnopqr"
touch "$T/tmp/kgen-$dead-abcdef/kernel.so" "$T/tmp/kgen-$$-mnopqr/kernel.so"
expect 0 "a kgen run" -- env TMPDIR="$T/tmp" $K check "${W[@]}"
[ ! -e "$T/tmp/kgen-$dead-abcdef" ] && [ ! -e "$T/tmp/kgen-emu-$dead-ghijkl" ] ||
  { echo "FAIL: a dead kgen's build folders were not removed"; fail=1; }
[ -e "$T/tmp/kgen-$$-mnopqr/kernel.so" ] || { echo "FAIL: a live process's build folder was removed"; fail=1; }

exit $fail
