#!/usr/bin/env bash
# Runs kgen's own setup and tests in a fresh Debian 12 root, to prove that `make tune` and `make test` need nothing
# that a session installed by hand: every package they use must come from the repository's own steps (the Makefile's
# deps and test-deps stamps). The root holds what a new machine of the project's kind is guaranteed to have for a
# C project (Debian 12's minimal base with gcc, g++, make, git and ca-certificates, and the CUDA toolkit, bind-mounted
# read-only from this machine with its ld.so.conf entry and on PATH) and nothing else: no python3, no valgrind, no
# clang, no libxgboost. A clean clone of the repository's committed HEAD is built and tested inside, by chroot.
#
# usage (as root): tests/fresh-root.sh [--root DIR] [--reuse] [COMMAND...]
#   --root DIR   where the root lives (default /work/fresh-root); its pristine base is kept in DIR.base (debootstrap
#                runs once, needing Debian's archive; later runs copy the base)
#   --reuse      keep the root as the last run left it (packages installed, the clone built) instead of starting
#                again from the pristine base: for trying a command quickly, not for the proof
#   COMMAND      run in the clone (/root/kgen) instead of the default `make tune && make test`
# examples:
#   tests/fresh-root.sh                                   # the proof: a fresh root, make tune, then make test
#   tests/fresh-root.sh 'make -j2 all && make tune TUNE_TRIALS=8'
#   tests/fresh-root.sh --reuse 'KGEN=build/kgen BUILD=build bash tests/cli/test_valgrind.sh'
# Its output goes to the terminal and to DIR.log. Mounts (proc, sys, dev, the CUDA toolkit) are made in a private
# mount namespace, so they vanish when the script ends, whatever happens; the root itself is left in place.
set -euo pipefail
ROOT=/work/fresh-root
REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ROOT=${2:?--root needs a folder}; shift 2 ;;
    --reuse) REUSE=1; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    --) shift; break ;;
    -*) echo "fresh-root: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
CMD=${*:-make tune && make test}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BASE_PKGS=gcc,g++,make,git,ca-certificates
[ "$(id -u)" = 0 ] || { echo "fresh-root: run as root (debootstrap, mount, chroot)" >&2; exit 2; }
case "$ROOT" in /*) ;; *) ROOT=$PWD/$ROOT ;; esac
[ "$ROOT" != / ] || { echo "fresh-root: --root / is not a fresh root" >&2; exit 2; }

# Inside the private mount namespace (the script runs itself again under unshare, below).
if [ "${FRESH_ROOT_INNER:-}" = 1 ]; then
  mount --make-rprivate /
  mount -t proc proc "$ROOT/proc"
  mount -t sysfs sys "$ROOT/sys"
  mount --bind /dev "$ROOT/dev"
  mount -t devpts devpts "$ROOT/dev/pts" 2> /dev/null || true
  mount -t tmpfs tmpfs "$ROOT/dev/shm"
  if [ -d "$CUDA_HOME" ]; then
    real=$(readlink -f "$CUDA_HOME")
    mkdir -p "$ROOT$real"
    mount --bind "$real" "$ROOT$real"
    mount -o remount,bind,ro "$ROOT$real"
  fi
  exec chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH="$CUDA_HOME/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    /bin/bash -c 'ldconfig && cd /root/kgen && echo "fresh-root: \$ $1" && eval "$1"' fresh-root "$CMD"
fi

# The pristine base: debootstrap once.
if [ ! -e "$ROOT.base/etc/debian_version" ]; then
  command -v debootstrap > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
  rm -rf "$ROOT.base"
  echo "fresh-root: debootstrap of Debian 12 (bookworm) into $ROOT.base, with $BASE_PKGS"
  debootstrap --variant=minbase --include="$BASE_PKGS" bookworm "$ROOT.base" "$MIRROR" > "$ROOT.base.debootstrap.log" 2>&1 ||
    { tail -20 "$ROOT.base.debootstrap.log"; echo "fresh-root: debootstrap failed (log: $ROOT.base.debootstrap.log)" >&2; exit 1; }
fi
# Nothing may be mounted in the root we remove (the mounts live in the namespace of a run that has ended, but a
# root mounted by hand would take /dev with it).
if grep -qF " $ROOT/" /proc/mounts; then echo "fresh-root: something is mounted under $ROOT: unmount it first" >&2; exit 1; fi
if [ "$REUSE" = 0 ] || [ ! -e "$ROOT/etc/debian_version" ]; then
  rm -rf "$ROOT"
  cp -a "$ROOT.base" "$ROOT"
fi
# What the machine's setup would have: name resolution for apt, the CUDA toolkit's library path and its symlink.
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
if [ -d "$CUDA_HOME" ]; then
  if [ -L "$CUDA_HOME" ]; then mkdir -p "$ROOT$(dirname "$CUDA_HOME")"; ln -sfn "$(readlink "$CUDA_HOME")" "$ROOT$CUDA_HOME"; fi
  for f in /etc/ld.so.conf.d/*cuda*; do [ -e "$f" ] && cp "$f" "$ROOT/etc/ld.so.conf.d/"; done
fi
# A clean clone of the committed HEAD (work not committed is not tested).
if [ "$REUSE" = 0 ] || [ ! -d "$ROOT/root/kgen" ]; then
  rm -rf "$ROOT/root/kgen"
  git clone -q --no-hardlinks "$REPO" "$ROOT/root/kgen"
  git -C "$ROOT/root/kgen" checkout -q --detach "$(git -C "$REPO" rev-parse HEAD)"
fi
echo "fresh-root: $ROOT ($(cat "$ROOT/etc/debian_version")), kgen at $(git -C "$ROOT/root/kgen" rev-parse --short HEAD)"
rc=0
FRESH_ROOT_INNER=1 ROOT="$ROOT" CUDA_HOME="$CUDA_HOME" CMD="$CMD" \
  unshare --mount --propagation private bash "$0" --root "$ROOT" -- "$CMD" 2>&1 | tee "$ROOT.log" || rc=$?
echo "fresh-root: exit $rc (output in $ROOT.log)"
exit "$rc"
