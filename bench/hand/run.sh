#!/usr/bin/env bash
# Builds and runs a hand-written reference kernel of this folder with the kernel flags kgen compiles its own
# kernels with (codegen/kernel_flags.h), on 2 threads. transpose and expf need AVX-512; without it the script says
# so and exits 0.
#   bench/hand/run.sh transpose [TI TJ]   16 x 16 in-register transpose, 4096^2 (transpose16.c)
#   bench/hand/run.sh expf                 libmvec's exp against an inline vscalefps one (expf_vscalef.c)
#   bench/hand/run.sh vmath                libmvec's exp and erf against kgen's prelude's (vmath.c; needs build/kgen)
#   bench/hand/run.sh fma_peak [SECONDS]   the FMA peak of one thread and of all (fma_peak.c; AVX2 or AVX-512)
#   bench/hand/run.sh conv2d_s2 [XT]       stride-2 conv, channels in lanes, XT pixels a tile (conv2d_s2.c)
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-cc}
flags=$(sed -n 's/^#define KG_KERNEL_CFLAGS "\(.*\)"$/\1/p' codegen/kernel_flags.h)
out=${BUILD:-build}/bench/hand
mkdir -p "$out"
extra=()
case "${1:-}" in
  transpose) src=transpose16.c ;;
  expf) src=expf_vscalef.c ;;
  fma_peak) src=fma_peak.c ;;
  conv2d_s2) src=conv2d_s2.c; extra=(-DXT="${2:-7}") ;;
  vmath)
    src=vmath.c
    # the prelude as kgen prints it for a kernel that calls exp, erf and tanh (a unit defines the vector variants
    # of the functions it calls)
    printf 'def vmath(X: f32[N]) -> (Y: f32[N]) {\n  Y[i] = exp(X[i]) + erf(X[i]) + tanh(X[i])\n}\n' > "$out/vmath.te"
    "${BUILD:-build}/kgen" lower "$out/vmath.te" -D N=16 --target c --dump c > "$out/prelude.c"
    extra=(-include "$out/prelude.c")
    ;;
  *) echo "usage: bench/hand/run.sh transpose [TI TJ] | expf | vmath | fma_peak [SECONDS] | conv2d_s2 [XT]" >&2; exit 2 ;;
esac
if [ "$src" = fma_peak.c ] && ! grep -qw avx2 /proc/cpuinfo 2> /dev/null; then
  echo "bench/hand: no AVX2 on this CPU: skipped"
  exit 0
fi
if [ "$src" != vmath.c ] && [ "$src" != fma_peak.c ] && ! grep -qw avx512f /proc/cpuinfo 2> /dev/null; then
  echo "bench/hand: no AVX-512 on this CPU: skipped"
  exit 0
fi
# shellcheck disable=SC2086
$CC $flags "${extra[@]}" "bench/hand/$src" -o "$out/${src%.c}" -lm
shift
OMP_NUM_THREADS=${THREADS:-2} "$out/${src%.c}" "$@"
