#!/usr/bin/env bash
# The Makefile's contract with the README: a bare `make` builds kgen and libkgen (the first goal is `all`, not a
# packages stamp) and never runs the package manager: it reports what is missing and stops, `make deps` installs,
# `make test`, `make check`, `make tune` and `make test-deps` install what they need. Also: the user's CFLAGS
# cannot drop the required flags, every binary's dependency file is read, `make clean` removes the BUILD in use,
# and the kernel flags are read from codegen/kernel_flags.h.
set -u
. "$(dirname "$0")/common.inc"
command -v make > /dev/null || { echo "skip: no make"; exit 0; }
# The makes here are a user's, not part of the make running the tests: its variables (the sanitizer pass's OPT and
# BUILD, which make exports to its recipes' environment) must not leak into them.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES OPT CFLAGS LDFLAGS LDLIBS
make -np -f Makefile BUILD="$T/b" 2> /dev/null > "$T/db"
grep -qx '.DEFAULT_GOAL := all' "$T/db" || { echo "FAIL: a bare make does not build 'all':"; grep DEFAULT_GOAL "$T/db"; fail=1; }
grep -qE "^all: .*$T/b/kgen" "$T/db" || { echo "FAIL: 'all' does not build kgen"; fail=1; }
# Every bench tool (bench/*.c) is built by `all`, through bench-tools: the bench scripts and their tests run them.
grep -qE "^all: .*bench-tools" "$T/db" || { echo "FAIL: 'all' does not build the bench tools"; fail=1; }
for c in bench/*.c; do
  t=$(basename "$c" .c)
  grep -qE "^bench-tools: .*$T/b/bench/$t( |\$)" "$T/db" || { echo "FAIL: bench-tools does not build $T/b/bench/$t"; fail=1; }
done
grep -qE "^test-unit: .*$T/b/\.test-deps-ok" "$T/db" || { echo "FAIL: make test does not install the tests' packages"; fail=1; }
grep -qE "^check: .*$T/b/\.test-deps-ok" "$T/db" || { echo "FAIL: make check does not install the tests' packages"; fail=1; }

# A package manager that must not be called by a bare make: dpkg says libxgboost-dev is missing and libmsgpack-dev
# removed with its configuration files left (dpkg -s still knows it), apt-get and sudo only log their arguments.
mkdir -p "$T/bin"
printf '#!/bin/sh\n[ "$2" = libxgboost-dev ] && exit 1\n[ "$2" = libmsgpack-dev ] && { echo "Status: deinstall ok config-files"; exit 0; }\necho "Status: install ok installed"\n' > "$T/bin/dpkg"
printf '#!/bin/sh\necho "apt-get $*" >> "%s/apt.log"\n' "$T" > "$T/bin/apt-get"
printf '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n' > "$T/bin/sudo"
chmod +x "$T/bin/dpkg" "$T/bin/apt-get" "$T/bin/sudo"
fake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH="$T/bin:$PATH" "$@"; }
expect 2 "a bare make with a package missing" -- fake make --no-print-directory BUILD="$T/b1"
has out "libxgboost-dev" "the missing package is named"
has out "libmsgpack-dev" "a removed package is missing too"
has out "make deps" "the way to get it is said"
[ ! -e "$T/apt.log" ] || { echo "FAIL: a bare make ran apt-get:"; cat "$T/apt.log"; fail=1; }
[ -z "$(find "$T/b1" -name '*.o' 2> /dev/null)" ] || { echo "FAIL: a bare make compiled with a package missing"; fail=1; }
expect 0 "make deps" -- fake make --no-print-directory BUILD="$T/b2" deps
grep -q "apt-get install .*libxgboost-dev" "$T/apt.log" 2> /dev/null || { echo "FAIL: make deps did not install the missing package"; fail=1; }
grep -q "apt-get install .*libmsgpack-dev" "$T/apt.log" 2> /dev/null || { echo "FAIL: make deps did not install the removed package"; fail=1; }
# The README's commands install (seen in what they would run, without running it).
for goal in test check tune test-deps; do
  fake make -n --no-print-directory BUILD="$T/b3" $goal > "$T/n.$goal" 2>&1
  grep -q "apt-get install -y" "$T/n.$goal" || { echo "FAIL: make $goal would not install the missing packages"; fail=1; }
done
fake make -n --no-print-directory BUILD="$T/b3" > "$T/n.all" 2>&1
if grep -q "apt-get install -y" "$T/n.all"; then echo "FAIL: a bare make would run apt-get"; fail=1; fi

# The user's CFLAGS add to the required flags, and their optimization comes last.
make -n --no-print-directory BUILD="$T/b4" CFLAGS="-O0 -g3" "$T/b4/base/arena.o" > "$T/n.cflags" 2>&1
line=$(grep -- "-c base/arena.c" "$T/n.cflags")
for f in -std=c11 -Werror -Wall -Wextra -D_GNU_SOURCE -fopenmp -MMD; do
  printf '%s\n' "$line" | grep -q -- " $f " || { echo "FAIL: make CFLAGS=... dropped $f: $line"; fail=1; }
done
printf '%s\n' "$line" | grep -qE -- "-O2 .*-O0 -g3" || { echo "FAIL: the user's CFLAGS do not come last: $line"; fail=1; }

# Dependency files of the library, the CLI, tests, fuzz replayers and bench tools are all read: each marker
# assignment below is seen only if its file is included.
mkdir -p "$T/b5/cli" "$T/b5/tests" "$T/b5/bench" "$T/b5/base"
for d in base/arena cli/main tests/test_eval tests/fuzz_replay_npy tests/fuzz_replay_main bench/gpu_peers; do
  echo "KG_MARK_$(echo $d | tr / _) := yes" > "$T/b5/$d.d"
done
make -np -f Makefile BUILD="$T/b5" 2> /dev/null > "$T/db5"
for d in base/arena cli/main tests/test_eval tests/fuzz_replay_npy tests/fuzz_replay_main bench/gpu_peers; do
  grep -q "^KG_MARK_$(echo $d | tr / _) := yes" "$T/db5" || { echo "FAIL: $d.d is not included"; fail=1; }
done

# make clean removes the BUILD in use, and refuses one that is the source tree.
mkdir -p "$T/b6/x" && touch "$T/b6/x/y.o"
expect 0 "make clean" -- make --no-print-directory BUILD="$T/b6" clean
[ ! -e "$T/b6" ] || { echo "FAIL: make clean left BUILD=$T/b6"; fail=1; }
expect 2 "make clean BUILD=." -- make --no-print-directory BUILD=. clean
[ -f Makefile ] || { echo "FAIL: make clean BUILD=. removed the tree"; exit 1; }

# The kernel flags the Makefile uses are codegen/kernel_flags.h's (kgen's own).
want=$(sed -n 's/^#define KG_KERNEL_CFLAGS "\(.*\)"$/\1/p' codegen/kernel_flags.h)
[ -n "$want" ] || { echo "FAIL: codegen/kernel_flags.h has no one-line KG_KERNEL_CFLAGS"; fail=1; }
grep -qxF "KERNEL_CFLAGS := $want" "$T/db" || { echo "FAIL: the Makefile's KERNEL_CFLAGS is not '$want':"; grep '^KERNEL_CFLAGS' "$T/db"; fail=1; }
grep -qE '^EXAMPLE_C_FLAGS = \$\(KERNEL_CFLAGS\)' "$T/db" || { echo "FAIL: the example is not built with KERNEL_CFLAGS"; fail=1; }

# tests/run.sh runs a test again once when LeakSanitizer's own tracer crashed at exit, and only then: a second crash,
# a leak report or a plain failure fails.
mkdir -p "$T/rt"
crash='echo "Tracer caught signal 11: addr=0x1 pc=0x2 sp=0x3"; echo "==9==LeakSanitizer has encountered a fatal error."; exit 1'
printf '#!/bin/sh\nif [ ! -e "%s/rt/once" ]; then touch "%s/rt/once"; %s; fi\necho "t: 2 passed, 0 failed"\n' "$T" "$T" "$crash" > "$T/rt/flaky"
printf '#!/bin/sh\n%s\n' "$crash" > "$T/rt/always"
printf '#!/bin/sh\necho "==9==ERROR: LeakSanitizer: detected memory leaks"; %s\n' "$crash" > "$T/rt/leak"
printf '#!/bin/sh\necho "t: 0 passed, 1 failed"; exit 1\n' > "$T/rt/plain"
chmod +x "$T"/rt/*
BUILD="$T/rt/none" CLI_TESTS="$T/rt/none" bash tests/run.sh "$T/rt/flaky" "$T/rt/always" "$T/rt/leak" "$T/rt/plain" > "$T/rt/out" 2>&1
grep -qxE "ok: t: 2 passed, 0 failed \([0-9]+ s\)" "$T/rt/out" || { echo "FAIL: the run whose tracer crashed once did not pass on its retry"; cat "$T/rt/out"; fail=1; }
[ "$(grep -c 'running it again once' "$T/rt/out")" = 2 ] || { echo "FAIL: not exactly the two tracer crashes retried"; cat "$T/rt/out"; fail=1; }
tail -1 "$T/rt/out" | grep -qx "2 passed, 3 failed" || { echo "FAIL: the runner's tally:"; tail -3 "$T/rt/out"; fail=1; }
# a test that hangs fails at TEST_TIMEOUT, and what it started in the background goes with it
printf '#!/bin/sh
(sleep 4; touch "%s/rt/late") &
echo started; sleep 60
' "$T" > "$T/rt/hang"
chmod +x "$T/rt/hang"
s0=$SECONDS
TEST_TIMEOUT=1 BUILD="$T/rt/none" CLI_TESTS="$T/rt/none" bash tests/run.sh "$T/rt/hang" > "$T/rt/out" 2>&1
[ $((SECONDS - s0)) -lt 30 ] || { echo "FAIL: a hanging test was not stopped at TEST_TIMEOUT=1"; fail=1; }
grep -q "^timed out: still running after 1 s" "$T/rt/out" && grep -q "^started" "$T/rt/out" &&
  grep -qE "^FAIL: .*/rt/hang \(exit 124\)" "$T/rt/out" && tail -1 "$T/rt/out" | grep -qx "0 passed, 1 failed" ||
  { echo "FAIL: the hanging test's report:"; cat "$T/rt/out"; fail=1; }
sleep 5
[ ! -e "$T/rt/late" ] || { echo "FAIL: the hanging test's background job outlived it"; fail=1; }
exit $fail
