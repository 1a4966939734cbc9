#!/usr/bin/env bash
# Makes the virtual environment of the TVM MetaSchedule peer (bench/tvm_peers.py): apache-tvm from PyPI with the
# pins that work on these machines, and the packages MetaSchedule's tuner needs but the wheel does not declare
# (xgboost for its cost model, psutil and cloudpickle for its builder and runner pools). Idempotent: a stamp
# holding the pins marks a venv that was made and checked; a venv with another stamp is made again.
#
# usage: bench/tvm-venv.sh [DIR]     (default: $BUILD/bench/tvm-venv, BUILD=build)
# environment (the pins; override to try other versions):
#   TVM_PKG=apache-tvm==0.27.0.post1
#   TVM_FFI_PKG=apache-tvm-ffi==0.1.14.post0   (0.1.15.post2 crashes when MetaSchedule saves its IR)
#   TVM_EXTRA_PKGS="xgboost-cpu psutil cloudpickle numpy"
#   TVM_VENV_PYTHON=python3                    the interpreter the venv is made from
# Prints the venv's python and the host CPU LLVM sees (the peer's -mcpu) on its last line; exit status 0 when the
# venv imports MetaSchedule, 1 otherwise (the suite then leaves the peer out).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
DIR=${1:-$BUILD/bench/tvm-venv}
TVM_PKG=${TVM_PKG:-apache-tvm==0.27.0.post1}
TVM_FFI_PKG=${TVM_FFI_PKG:-apache-tvm-ffi==0.1.14.post0}
TVM_EXTRA_PKGS=${TVM_EXTRA_PKGS:-xgboost-cpu psutil cloudpickle numpy}
TVM_VENV_PYTHON=${TVM_VENV_PYTHON:-python3}
STAMP="$DIR/.kgen-tvm-stamp"
want="$TVM_PKG $TVM_FFI_PKG $TVM_EXTRA_PKGS"

check() { # the import the peer needs, and the CPU name it tunes for
  "$DIR/bin/python" "$ROOT/bench/tvm_peers.py" host-cpu
}

if [ -x "$DIR/bin/python" ] && [ "$(cat "$STAMP" 2> /dev/null)" = "$want" ]; then
  if cpu=$(check 2> /dev/null); then
    echo "tvm-venv: $DIR/bin/python ready (mcpu $cpu)"
    exit 0
  fi
  echo "tvm-venv: $DIR exists but does not import MetaSchedule: making it again" >&2
fi
rm -rf "$DIR"
mkdir -p "$(dirname "$DIR")"
echo "tvm-venv: making $DIR ($want)"
"$TVM_VENV_PYTHON" -m venv "$DIR" || { echo "tvm-venv: $TVM_VENV_PYTHON -m venv failed" >&2; exit 1; }
# shellcheck disable=SC2086  # the package lists are words on purpose
"$DIR/bin/pip" install -q --disable-pip-version-check $TVM_PKG $TVM_FFI_PKG $TVM_EXTRA_PKGS ||
  { echo "tvm-venv: pip install failed" >&2; exit 1; }
if ! cpu=$(check); then
  echo "tvm-venv: $DIR does not import tvm.s_tir.meta_schedule" >&2
  exit 1
fi
echo "$want" > "$STAMP"
echo "tvm-venv: $DIR/bin/python ready (mcpu $cpu)"
