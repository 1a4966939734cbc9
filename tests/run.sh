#!/usr/bin/env bash
# Runs every test binary given, then the CLI tests and the fuzz corpus replay; prints one closing line
# "N passed, N failed" over all of them and exits non-zero if any failed. A test that skips a part for want of a
# package or a device says so in a line starting with "skip" (or saying "skipped"); those lines are shown under
# the test's "ok" line, so that a green run says what it did not check. CLI_TESTS, when set, lists the CLI test
# scripts to run instead of every tests/cli/*.sh (`make check`, the fast tier).
set -u
passed=0; failed=0; skips=0
show_skips() { # a passing test's output: its skip lines, indented
  local s
  s=$(printf '%s\n' "$1" | grep -E '^skip|skipped|skipping' | head -20)
  [ -n "$s" ] || return 0
  printf '%s\n' "$s" | sed 's/^/    /'
  skips=$((skips + $(printf '%s\n' "$s" | wc -l)))
}
for t in "$@"; do
  out=$("$t" 2>&1); rc=$?
  line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -1)
  p=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/'); f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  [ -n "$p" ] || p=0; [ -n "$f" ] || f=0
  if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
  if [ $rc -ne 0 ]; then printf '%s\n' "$out" | tail -40; echo "FAIL: $t (exit $rc)"; else echo "ok: $line"; show_skips "$out"; fi
done
for s in ${CLI_TESTS:-tests/cli/*.sh}; do
  [ -e "$s" ] || continue
  out=$(bash "$s" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "ok: $s"; show_skips "$out"; else failed=$((failed + 1)); printf '%s\n' "$out" | tail -30; echo "FAIL: $s"; fi
done
for r in "$BUILD"/tests/fuzz_replay_*; do
  [ -x "$r" ] || continue
  name=${r##*/fuzz_replay_}
  out=$("$r" "tests/fuzz/$name-corpus" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "ok: fuzz corpus $name: $(printf '%s' "$out" | tail -1)"; else failed=$((failed + 1)); printf '%s\n' "$out" | tail -30; echo "FAIL: fuzz corpus $name"; fi
done
[ $skips -eq 0 ] || echo "($skips skip lines above: parts not checked on this machine)"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
