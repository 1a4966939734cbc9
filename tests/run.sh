#!/usr/bin/env bash
# Runs every test binary given, then the CLI tests and the fuzz corpus replay; prints one closing line
# "N passed, N failed" over all of them and exits non-zero if any failed. A test that skips a part for want of a
# package or a device says so in a line starting with "skip" (or saying "skipped"); those lines are shown under
# the test's "ok" line, so that a green run says what it did not check. CLI_TESTS, when set, lists the CLI test
# scripts to run instead of every tests/cli/*.sh (`make check`, the fast tier).
# Each test runs under a time limit (TEST_TIMEOUT seconds, 1200 by default: the slowest takes a few minutes), so
# that a test that hangs fails, with its output so far, instead of stalling the whole run past CI's limit; each
# line says how long its test took.
set -u
passed=0; failed=0; skips=0
limit=${TEST_TIMEOUT:-1200}
# Runs a test into $out and $rc. LeakSanitizer's stop-the-world tracer itself sometimes crashes at a process's exit
# ("Tracer caught signal 11", a sanitizer-runtime flake on busy machines: google/sanitizers#1353) and fails a run
# that was otherwise clean; such a run, and only such a run (no leak report, no other sanitizer report), is run
# again once, and the retry is said in the output. A second crash fails the test.
retried=0
# timeout gives the test a process group of its own, so that it can kill everything the test started; a ^C or a
# kill of this script is passed on to it (through timeout) for the same reason.
outf=$(mktemp); tpid=
trap 'rm -f "$outf"' EXIT
trap '[ -z "$tpid" ] || kill -TERM "$tpid" 2>/dev/null; exit 130' INT TERM HUP
run_once() { # the test's output into $out and its status into $rc, killed (with what it started) past the limit
  local t0=$SECONDS
  timeout -k 30 "$limit" "$@" > "$outf" 2>&1 < /dev/null &
  tpid=$!
  wait "$tpid"; rc=$?
  tpid=
  out=$(cat "$outf")
  if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ $((SECONDS - t0)) -ge "$limit" ]; then out="$out
timed out: still running after $limit s (TEST_TIMEOUT), killed"; fi
}
run_test() {
  local t0=$SECONDS
  run_once "$@"
  if [ $rc -ne 0 ] && lsan_tracer_crash "$out"; then
    echo "note: $*: LeakSanitizer's tracer crashed at exit; running it again once"
    retried=$((retried + 1))
    run_once "$@"
  fi
  took="($((SECONDS - t0)) s)"
}
lsan_tracer_crash() {
  printf '%s\n' "$1" | grep -q '^Tracer caught signal' || return 1
  printf '%s\n' "$1" | grep -q 'LeakSanitizer has encountered a fatal error' || return 1
  ! printf '%s\n' "$1" | grep -qE 'ERROR: (LeakSanitizer|AddressSanitizer)|runtime error:'
}
show_skips() { # a passing test's output: its skip lines, indented
  local s
  s=$(printf '%s\n' "$1" | grep -E '^skip|skipped|skipping' | head -20)
  [ -n "$s" ] || return 0
  printf '%s\n' "$s" | sed 's/^/    /'
  skips=$((skips + $(printf '%s\n' "$s" | wc -l)))
}
for t in "$@"; do
  run_test "$t"
  line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -1)
  p=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/'); f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  [ -n "$p" ] || p=0; [ -n "$f" ] || f=0
  if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ]; then printf '%s\n' "$out" | tail -40; echo "FAIL: $t (exit $rc) $took"; else echo "ok: $line $took"; show_skips "$out"; fi
done
for s in ${CLI_TESTS:-tests/cli/*.sh}; do
  [ -e "$s" ] || continue
  run_test bash "$s"
  # a run inside the script retried after LeakSanitizer's tracer crashed (tests/cli/common.inc) is said, and counted
  n=$(printf '%s\n' "$out" | grep -c "LeakSanitizer's tracer crashed at exit; running it again")
  [ "$n" -eq 0 ] || { printf '%s\n' "$out" | grep "LeakSanitizer's tracer crashed at exit" | sed 's/^/    /'; retried=$((retried + n)); }
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "ok: $s $took"; show_skips "$out"; else failed=$((failed + 1)); printf '%s\n' "$out" | tail -30; echo "FAIL: $s $took"; fi
done
for r in "$BUILD"/tests/fuzz_replay_*; do
  [ -x "$r" ] || continue
  name=${r##*/fuzz_replay_}
  run_test "$r" "tests/fuzz/$name-corpus"
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "ok: fuzz corpus $name: $(printf '%s' "$out" | tail -1) $took"; else failed=$((failed + 1)); printf '%s\n' "$out" | tail -30; echo "FAIL: fuzz corpus $name $took"; fi
done
[ $retried -eq 0 ] || echo "($retried tests or CLI runs run twice after LeakSanitizer's tracer crashed at exit)"
[ $skips -eq 0 ] || echo "($skips skip lines above: parts not checked on this machine)"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
