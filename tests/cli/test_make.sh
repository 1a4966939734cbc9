#!/usr/bin/env bash
# The Makefile's contract with the README: a bare `make` builds kgen and libkgen (the first goal is `all`, not a
# packages stamp), and `make test` installs the tests' packages before running them.
set -u
. "$(dirname "$0")/common.inc"
command -v make > /dev/null || { echo "skip: no make"; exit 0; }
make -np -f Makefile BUILD="$T/b" 2> /dev/null > "$T/db"
grep -qx '.DEFAULT_GOAL := all' "$T/db" || { echo "FAIL: a bare make does not build 'all':"; grep DEFAULT_GOAL "$T/db"; fail=1; }
grep -qE "^all: .*$T/b/kgen" "$T/db" || { echo "FAIL: 'all' does not build kgen"; fail=1; }
grep -qE "^test-unit: .*$T/b/\.test-deps-ok" "$T/db" || { echo "FAIL: make test does not install the tests' packages"; fail=1; }
exit $fail
