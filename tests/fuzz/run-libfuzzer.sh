#!/usr/bin/env bash
# Fuzzes the parser and checker with libFuzzer (clang -fsanitize=fuzzer; libclang-rt-14-dev provides it).
#   tests/fuzz/run-libfuzzer.sh [SECONDS]        (default 60)
# Seeds: tests/fuzz/corpus (left untouched); new inputs go to build/fuzz/work; a crashing input is written to
# build/fuzz/crash-* -- fix the bug, then copy the input into tests/fuzz/corpus so `make test` replays it.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build/fuzz
mkdir -p "$out/work"
CC=${FUZZ_CC:-clang}
srcs="$root/tests/fuzz_check.c $root/base/arena.c $root/base/diag.c $root/base/strbuf.c"
for f in lex parse check stages program print tables; do srcs="$srcs $root/te/$f.c"; done
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" $srcs -lm -o "$out/fuzz_check"
# Tokens of the language, so that mutations speak it.
cat > "$out/te.dict" <<'DICT'
"def"
"->"
".."
"in"
"f32"
"f16"
"sum"
"max"
"min"
"prod"
"select"
"exp"
"pow"
"sqrt"
"&&"
"||"
"<="
">="
"=="
"!="
"["
"]"
"("
")"
"{"
"}"
":"
","
"#"
"1.5e3"
DICT
echo "fuzzing for ${secs}s (seed $$)"
"$out/fuzz_check" -seed=$$ -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
  -dict="$out/te.dict" -artifact_prefix="$out/" -print_final_stats=1 "$out/work" "$root/tests/fuzz/corpus"
