#!/usr/bin/env bash
# `make install` as a user would use it: into a fresh PREFIX, then the two examples built against the installed tree
# alone (examples/make through pkg-config and kgen.mk, examples/cmake through find_package(kgen)), their programs
# run and checked, the exports redone when a log changes and only then; a DESTDIR-staged install; and `make
# uninstall` leaving no file behind. The installed kgen is run from another folder, so it must find its workload
# library in the installed tree. Both examples also export a CUDA log (tuned here on the emulator, for sm_86 and
# sm_90) into a C program: on a GPU it must verify its results, without one fail with the header's no-driver error.
set -u
. "$(dirname "$0")/common.inc"
B=${BUILD:-build}
for tool in make pkg-config; do
  command -v $tool > /dev/null || { echo "skip: no $tool (Debian package $tool)"; exit 0; }
done
# A sanitizer build's libkgen links only with the sanitizer runtime, which a user's program does not have.
if nm "$B/libkgen.a" 2> /dev/null | grep -q __asan_init; then echo "skip: install of a sanitizer build ($B)"; exit 0; fi
# The inner makes are not part of the make running the tests: its flags and variables (BUILD, OPT) stay out.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@"; }
P=$T/prefix
mkdir -p "$T/logs" "$T/away"
cp tuning_logs/matvec.c.kglog tuning_logs/reduce_rows.c.kglog "$T/logs/"
expect 0 "make install" -- mk BUILD="$B" PREFIX="$P" install
for f in bin/kgen lib/libkgen.a include/kgen.h include/kgen/te/te.h include/kgen/base/arena.h share/kgen/lib/matmul.te \
  share/kgen/kgen.mk share/kgen/cuda_emu.h lib/pkgconfig/kgen.pc lib/cmake/kgen/kgenConfig.cmake \
  lib/cmake/kgen/kgenConfigVersion.cmake; do
  [ -f "$P/$f" ] || { echo "FAIL: make install did not install $f"; fail=1; }
done
# Workloads are found relative to the installed executable, from anywhere, with no KGEN_LIB.
(cd "$T/away" && env -u KGEN_LIB "$P/bin/kgen" export "$T/logs/matvec.c.kglog" --out "$T/away/h" > "$T/out" 2> "$T/err")
[ -s "$T/away/h/matvec.h" ] || { echo "FAIL: the installed kgen does not find matvec.te:"; cat "$T/err"; fail=1; }
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
expect 0 "pkg-config --cflags" -- pkg-config --cflags kgen
has out "^-I$P/include *$" "kgen's headers are under PREFIX/include"
expect 0 "pkg-config --libs --static" -- pkg-config --libs --static kgen
has out "-lkgen .*-lmsgpackc" "static link line"
has out "-lxgboost" "static link line"
has out "-fopenmp" "static link line"

# A CUDA log for the examples' CUDA programs: tuned at test time on the emulator (NVRTC compiles, the CPU runs), so
# that no GPU is needed; one small binding, tuned for two archs, exported with cubins for both.
CL=$T/logs/reduce_rows.cuda.kglog
for sm in sm_86 sm_90; do
  (cd "$T/away" && "$P/bin/kgen" tune reduce_rows -D N=37 -D D=41 --emulate --arch $sm --trials 2 --per-round 2 \
    --population 16 --log "$CL" --quiet > "$T/out" 2> "$T/err")
  rc=$?
  if [ $rc -ne 0 ] && grep -q "NVRTC" "$T/err"; then
    echo "skip: the examples' CUDA programs ($(head -1 "$T/err"))"
    CL=
    break
  fi
  [ $rc -eq 0 ] || { echo "FAIL: emulated tuning of reduce_rows for $sm, exit $rc:"; cat "$T/err"; fail=1; CL=; break; }
done
if [ -n "$CL" ]; then
  # the CUDA programs verify the kernels on a GPU; without one, the header's first call fails with KG_ERR_NO_DRIVER
  if "$P/bin/kgen" run reduce_rows -D N=2 -D D=2 --target cuda > /dev/null 2>&1; then GPU=1; else GPU=0; fi
fi
# The header CUDA_PROGRAM includes carries both archs' cubins; CUDA_PROGRAM runs them (GPU) or says it cannot.
check_cuda() { # WHAT HEADER PROGRAM
  for sm in sm_86 sm_90; do
    grep -q "kg_reduce_rows_N37_D41_v[0-9]*_cubin_$sm" "$2" || { echo "FAIL ($1): $2 has no $sm cubin"; fail=1; }
  done
  if [ "$GPU" = 1 ]; then
    expect 0 "$1 on the GPU" -- "$3"
    has out "^reduce_rows N=37 D=41 ok \(CUDA\)$" "$1 verified on the GPU"
  else
    expect 3 "$1 without a GPU" -- "$3"
    has out "^reduce_rows \(CUDA\): error -3: the CUDA driver cannot be loaded or has no device$" "$1: no driver"
  fi
}

# The Makefile example: kgen.mk exports at build time; reference.c links with pkg-config's static line.
M=$T/mk
expect 0 "the Makefile example builds" -- mk -C examples/make OUT="$M" LOG="$T/logs/reduce_rows.c.kglog" CUDA_LOG="$CL"
has out "export .*reduce_rows.c.kglog" "kgen.mk exported the log"
if [ -n "$CL" ]; then
  has out "export .*reduce_rows.cuda.kglog --out .*--target cuda --arch sm_86,sm_90" "kgen.mk exported the CUDA log"
  check_cuda "the Makefile example's CUDA program" "$M/gen_cuda/reduce_rows.h" "$M/kernels_cuda"
fi
expect 0 "the Makefile example's kernels" -- "$M/kernels"
has out "reduce_rows N=4096 D=4096 ok" "the exported reduce_rows"
expect 0 "the Makefile example's library program" -- "$M/reference"
has out "the reference of axpy matches" "libkgen through pkg-config"
expect 0 "the Makefile example is up to date" -- mk -q -C examples/make OUT="$M" LOG="$T/logs/reduce_rows.c.kglog" \
  CUDA_LOG="$CL"
touch "$T/logs/reduce_rows.c.kglog"
expect 0 "the Makefile example again" -- mk -C examples/make OUT="$M" LOG="$T/logs/reduce_rows.c.kglog" CUDA_LOG="$CL"
has out "export .*reduce_rows.c.kglog" "a changed log is exported again"
if grep -q "reduce_rows.cuda.kglog" "$T/out"; then echo "FAIL: an unchanged CUDA log is exported again"; fail=1; fi

# kgen.mk's own compile and link flags for libkgen, without pkg-config.
printf 'include %s\nprint: ; @echo "$(KGEN_CFLAGS)|$(KGEN_LIBS)"\n' "$P/share/kgen/kgen.mk" > "$T/flags.mk"
flags=$(mk -f "$T/flags.mk" print)
expect 0 "libkgen with kgen.mk's KGEN_CFLAGS and KGEN_LIBS" -- sh -c "cc -std=c11 ${flags%%|*} examples/library/reference.c \
  -o '$T/reference-mk' ${flags#*|} && '$T/reference-mk'"
has out "the reference of axpy matches" "libkgen through kgen.mk"

# The CMake example: find_package(kgen), kgen_add_kernels, kgen::kgen.
if ! command -v cmake > /dev/null; then
  echo "skip: the CMake example (no cmake; Debian package cmake)"
else
  C=$T/cm
  expect 0 "the CMake example configures" -- env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL cmake -S examples/cmake -B "$C" \
    -DCMAKE_PREFIX_PATH="$P" -DKGEN_EXAMPLE_LOG="$T/logs/matvec.c.kglog" -DKGEN_EXAMPLE_CUDA_LOG="$CL"
  expect 0 "the CMake example builds" -- env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL cmake --build "$C"
  has out "kgen: exporting matvec.c.kglog" "kgen_add_kernels exported the log"
  if [ -n "$CL" ]; then
    has out "kgen: exporting reduce_rows.cuda.kglog \(cuda\)" "kgen_add_kernels exported the CUDA log"
    check_cuda "the CMake example's CUDA program" "$C/reduce_rows_cuda/reduce_rows.h" "$C/kernels_cuda"
  fi
  expect 0 "the CMake example's kernels" -- "$C/kernels"
  has out "matvec M=4096 K=4096 ok" "the exported matvec"
  expect 0 "the CMake example's library program" -- "$C/reference"
  has out "the reference of axpy matches" "libkgen through kgen::kgen"
  expect 0 "the CMake example rebuilt" -- env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL cmake --build "$C"
  if grep -q "kgen: exporting" "$T/out"; then echo "FAIL: an unchanged log is exported again"; fail=1; fi
  touch "$T/logs/matvec.c.kglog"
  expect 0 "the CMake example after the log changed" -- env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL cmake --build "$C"
  has out "kgen: exporting matvec.c.kglog" "a changed log is exported again"
fi

expect 0 "make uninstall" -- mk BUILD="$B" PREFIX="$P" uninstall
left=$(find "$P" -type f 2> /dev/null)
[ -z "$left" ] || { echo "FAIL: make uninstall left files:"; echo "$left"; fail=1; }
for d in include/kgen share/kgen lib/cmake/kgen; do
  [ ! -e "$P/$d" ] || { echo "FAIL: make uninstall left $d"; fail=1; }
done

# Staged: PREFIX as it will be, DESTDIR where the files go now; the same files, and uninstall takes them all.
S=$T/stage
expect 0 "make install with DESTDIR" -- mk BUILD="$B" PREFIX=/usr DESTDIR="$S" install
[ -x "$S/usr/bin/kgen" ] && [ -f "$S/usr/include/kgen.h" ] || { echo "FAIL: DESTDIR install missed files"; fail=1; }
grep -qx "prefix=/usr" "$S/usr/lib/pkgconfig/kgen.pc" || { echo "FAIL: kgen.pc's prefix is not PREFIX"; fail=1; }
expect 0 "make uninstall with DESTDIR" -- mk BUILD="$B" PREFIX=/usr DESTDIR="$S" uninstall
left=$(find "$S" -type f 2> /dev/null)
[ -z "$left" ] || { echo "FAIL: make uninstall (DESTDIR) left files:"; echo "$left"; fail=1; }
exit $fail
