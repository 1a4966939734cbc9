#!/usr/bin/env bash
# Runs the OpenBLAS sgemm peer (../shared/peers/openblas_sgemm.c, built by the bench scripts) with OpenBLAS's own
# best kernels for this CPU: the benches' peer, so that a ratio against it is against OpenBLAS at its best.
#   - These machines set OPENBLAS_CORETYPE=Haswell (and may cap OPENBLAS_L2_SIZE) for safety, which halves
#     OpenBLAS's speed on an AVX-512 CPU: both are unset, for this command only.
#   - Left to itself, Debian's OpenBLAS 0.3.21 took a virtualised Xeon with AVX-512 for a Prescott (33 ms at
#     1024^3 where its SkylakeX kernels take 7.0, 2026-12-05) and gives Zen its Haswell kernels: on a CPU with
#     AVX-512 it gets its AVX-512 kernels by name.
# usage: bench/openblas-peer.sh BLAS_BINARY THREADS N
set -u
blas=$1 threads=$2 n=$3
core=()
grep -qw avx512f /proc/cpuinfo 2> /dev/null && core=(OPENBLAS_CORETYPE=SkylakeX)
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "${core[@]}" OPENBLAS_NUM_THREADS="$threads" "$blas" "$n"
