#!/usr/bin/env bash
# Fuzzes one target with libFuzzer (clang -fsanitize=fuzzer; Debian's libclang-rt-14-dev provides it):
#   tests/fuzz/run-libfuzzer.sh [check|trace|tlog|npy] [SECONDS]  (default: check, 60 s)
# check: the parser and checker (tests/fuzz_check.c); trace: the trace reader, the primitives and lowering
# (tests/fuzz_trace.c); tlog: the tuning-log reader (tests/fuzz_tlog.c); npy: the .npy reader (tests/fuzz_npy.c). Seeds: tests/fuzz/NAME-corpus (left untouched); new inputs go to build/fuzz/NAME-work;
# a crashing input is written to build/fuzz/NAME-crash-* -- fix the bug, then copy the input into
# tests/fuzz/NAME-corpus so `make test` replays it.
set -eu
name=${1:-check}
secs=${2:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/build/fuzz
mkdir -p "$out/$name-work"
CC=${FUZZ_CC:-clang}
# The whole library (the log reader needs the status and step tables of tlog/ and schedule/), the Makefile's
# module list, with the
# Makefile's generated sources: run `make` once first.
[ -f "$root/build/generated/cuda_emu_header.c" ] || make -C "$root" >/dev/null
srcs="$root/tests/fuzz_$name.c $root/build/generated/cuda_emu_header.c $root/build/generated/reserved_macros.c"
for m in $(sed -n 's/^MODULES = //p' "$root/Makefile"); do
  for f in "$root/$m"/*.c; do srcs="$srcs $f"; done
done
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fopenmp \
  -I"$root" -I"$root/include" $srcs -lxgboost -lmsgpackc -lm -ldl -lpthread -o "$out/fuzz_$name"
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
"split"
"tile"
"reorder"
"fuse"
"unroll"
"vectorize"
"parallel"
"bind"
"compute_at"
"compute_inline"
"compute_root"
"cache_read"
"cache_write"
"rfactor"
"local"
"shared"
"threadIdx.x"
"blockIdx.x"
" Y "
" P "
" m "
" e "
" x.o "
" y.i "
"\x0a"
DICT
echo "fuzzing for ${secs}s (seed $$)"
"$out/fuzz_$name" -seed=$$ -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
  -dict="$out/te.dict" -artifact_prefix="$out/$name-" -print_final_stats=1 "$out/$name-work" "$root/tests/fuzz/$name-corpus"
