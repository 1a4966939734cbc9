#!/usr/bin/env bash
# The PyTorch of the benchmark's peers (eager, TorchInductor's torch.compile): PyTorch 2.x from PyPI in a virtual
# environment of its own under the build folder, so that the machine's Python is left as it is. bench/suite.sh's
# setup step runs it; it can be run alone.
#
# The default Linux wheel of torch pulls several GB of CUDA wheels. The light install takes torch without its
# dependencies, its pure-Python requirements and the four small CUDA packages its libraries cannot be loaded
# without; the other CUDA libraries come from the installed CUDA toolkit (about 1 minute and 2 GB). It is then
# checked: torch imports and torch.compile compiles and runs a tiny function (Inductor's C++ code, on the CPU).
# When the light install fails or does not pass that check (no CUDA toolkit, another torch build), the folder is
# made again from scratch with the full `pip install torch` and checked the same way.
#
# A stamp in the folder records what was installed; a second run with the same pins finds it, checks that torch
# still imports, and installs nothing. Changing a pin (or TORCH_INSTALL) makes the folder again.
#
# usage: bench/torch-venv.sh [DIR]      (prints the interpreter to use as its last line)
# environment:
#   TORCH_VENV=$BUILD/venv-torch   the folder (DIR overrides it); BUILD=build
#   TORCH_PYTHON=                  an existing interpreter with torch 2.x (another venv's bin/python): checked,
#                                  nothing installed
#   TORCH_INSTALL=auto             auto (light, then full if the light one fails), light, or full
#   BASE_PYTHON=/usr/bin/python3   the interpreter the folder is made from (Debian's, with python3-venv)
#   the pins (one place; each variable overrides its default):
#   TORCH_VERSION=2.15.0
#   TORCH_CUDA_PKGS="nvidia-cufile==1.17.1.22.* nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2
#                    nvidia-nccl-cu13==2.30.7"       (the light install's CUDA packages, for torch's CUDA 13 build)
#   TORCH_PY_PKGS="filelock typing-extensions>=4.13 sympy>=1.13.3 networkx jinja2 fsspec setuptools>=77.0.3
#                  mpmath markupsafe numpy"          (torch's pure-Python requirements, and numpy for the peers)
# exit status: 0 with a working interpreter, 1 when neither install works (the log of each attempt is named).
set -uo pipefail

TORCH_VERSION=${TORCH_VERSION:-2.15.0}
TORCH_CUDA_PKGS=${TORCH_CUDA_PKGS:-nvidia-cufile==1.17.1.22.* nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7}
TORCH_PY_PKGS=${TORCH_PY_PKGS:-filelock typing-extensions>=4.13 sympy>=1.13.3 networkx jinja2 fsspec setuptools>=77.0.3 mpmath markupsafe numpy}
TORCH_INSTALL=${TORCH_INSTALL:-auto}
BASE_PYTHON=${BASE_PYTHON:-/usr/bin/python3}
DIR=${1:-${TORCH_VENV:-${BUILD:-build}/venv-torch}}

say() { echo "torch-venv: $*" >&2; }
case "$TORCH_INSTALL" in auto | light | full) ;; *)
  say "error: TORCH_INSTALL is auto, light or full, not '$TORCH_INSTALL'"; exit 2 ;;
esac

# what a working interpreter must do: torch 2.x imports, and torch.compile (Inductor, C++ on the CPU) compiles a
# tiny function whose answer is right; its own cache folder, so that a stale cache cannot make it pass
CHECK='import sys, tempfile, os
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torch-venv-check-")
import numpy, torch
f = torch.compile(lambda x: x * 2 + 1)
x = torch.randn(8)
assert torch.allclose(f(x), x * 2 + 1), "torch.compile gave a wrong answer"
print("torch", torch.__version__, "imports and compiles")'
check() { # python log: the import and compile check, its output appended to the log
  timeout 600 "$1" -c "$CHECK" >> "$2" 2>&1
}

if [ -n "${TORCH_PYTHON:-}" ]; then
  log=$(mktemp)
  if check "$TORCH_PYTHON" "$log"; then
    say "using TORCH_PYTHON=$TORCH_PYTHON ($(tail -1 "$log")); nothing installed"
    rm -f "$log"
    echo "$TORCH_PYTHON"
    exit 0
  fi
  say "error: TORCH_PYTHON=$TORCH_PYTHON does not import torch or run torch.compile:"
  tail -5 "$log" | sed 's/^/    /' >&2
  rm -f "$log"
  exit 1
fi

mkdir -p "$(dirname "$DIR")"
DIR=$(cd "$(dirname "$DIR")" && pwd)/$(basename "$DIR")
STAMP=$DIR/.kgen-torch-venv
PY=$DIR/bin/python
# the stamp's first line: what was asked for (a changed pin or mode makes the folder again); its second line says
# which install it got
WANT="torch==$TORCH_VERSION mode=$TORCH_INSTALL cuda=[$TORCH_CUDA_PKGS] py=[$TORCH_PY_PKGS]"
if [ -f "$STAMP" ] && [ "$(head -1 "$STAMP")" = "$WANT" ] && [ -x "$PY" ] &&
  "$PY" -c 'import torch, numpy' > /dev/null 2>&1; then
  say "reusing $DIR ($(sed -n 2p "$STAMP")); remove it to install again"
  echo "$PY"
  exit 0
fi
[ ! -e "$DIR" ] || say "$DIR is not a finished install of these pins: made again"

fresh() { # log: an empty virtual environment in DIR
  rm -rf "$DIR"
  "$BASE_PYTHON" -m venv "$DIR" >> "$1" 2>&1 || return 1
  # a newer pip resolves torch's wheels better; the venv's own pip is tried when it cannot be had
  "$DIR/bin/pip" install -q -U pip >> "$1" 2>&1 || echo "(pip not upgraded: going on with the venv's own)" >> "$1"
}
light() { # log
  # shellcheck disable=SC2086  # the package lists are words on purpose
  fresh "$1" &&
    "$DIR/bin/pip" install -q --no-deps "torch==$TORCH_VERSION" $TORCH_CUDA_PKGS >> "$1" 2>&1 &&
    "$DIR/bin/pip" install -q $TORCH_PY_PKGS >> "$1" 2>&1
}
full() { # log
  fresh "$1" && "$DIR/bin/pip" install -q "torch==$TORCH_VERSION" numpy >> "$1" 2>&1
}

# attempt MODE WHERE: install MODE's way (the function of that name) into WHERE, then check it; got=MODE when
# torch imports and compiles, else the log's tail is shown. The log: $(dirname "$DIR")/torch-venv-MODE.log
got=
attempt() {
  local log
  log=$(dirname "$DIR")/torch-venv-$1.log
  say "installing torch $TORCH_VERSION into $2"
  : > "$log"
  if "$1" "$log" && check "$PY" "$log"; then
    got=$1
  else
    say "the $1 install failed or does not import and compile (log: $log):"
    tail -5 "$log" | sed 's/^/    /' >&2
  fi
}
if [ "$TORCH_INSTALL" != full ]; then
  attempt light "$DIR, the light way (no CUDA wheels but four small ones; about 1 minute, 2 GB)"
fi
if [ -z "$got" ] && [ "$TORCH_INSTALL" != light ]; then
  attempt full "a clean $DIR, the full way (with its CUDA wheels: several GB)"
fi
if [ -z "$got" ]; then
  rm -rf "$DIR" # no half-made folder for the next run to mistake
  say "error: no working torch $TORCH_VERSION (TORCH_INSTALL=$TORCH_INSTALL): the PyTorch peers cannot run"
  exit 1
fi
printf '%s\n%s install, %s\n' "$WANT" "$got" "$(tail -1 "$(dirname "$DIR")/torch-venv-$got.log")" > "$STAMP"
say "ready: $PY ($got install; $(sed -n 2p "$STAMP" | cut -d, -f2- | sed 's/^ //'))"
echo "$PY"
