#!/usr/bin/python3
"""Paired timing of two or more commands on a noisy machine: the commands run one after the other, round after
round, so each round sees them under the same load, and the figure that counts is the per-round ratio.

  paired.py [--rounds N] NAME=COMMAND NAME=COMMAND...

Each COMMAND is a shell command printing one time. Recognized: kgen run --measure ("time: 2.61 ms (median ...",
or "time: 936.3 us"), bench/torch_peers.py ("median_ms=2.37"), the OpenBLAS peer ("openblas sgemm ... 9.03 ms
..."), Halide's peer ("... 35.3 ms ..."), or a line "ms=X". Prints each round's times, then per command the
median and minimum of its times and the median (with the range) of its per-round ratio to the first command's
time (>1: slower than the first). A round in which a command printed no time is left out of the ratios, and said
so.

The shared development machine's noise moves times by 30% or more between runs a few seconds apart (other
virtual machines share its cores): one-off timings of two tools do not compare, per-round ratios do.
"""
import re
import shlex
import statistics
import subprocess
import sys

PATTERNS = [
    re.compile(r"^time: ([0-9.]+) ms", re.M),
    re.compile(r"median_ms=([0-9.]+)"),
    re.compile(r"\bms=([0-9.]+)"),
    re.compile(r"\s([0-9.]+) ms\s"),
]


# kgen prints short kernels' times in microseconds ("time: 936.3 us (median ...")
US = re.compile(r"^time: ([0-9.]+) us", re.M)


def time_of(text):
    """The time a command printed, in ms."""
    for p in PATTERNS:
        m = p.search(text)
        if m:
            return float(m.group(1))
    m = US.search(text)
    return float(m.group(1)) * 1e-3 if m else None


def main(argv):
    rounds = 5
    cmds = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--rounds" and args:
            rounds = int(args.pop(0))
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        elif "=" in a and not a.startswith("-"):
            name, cmd = a.split("=", 1)
            cmds.append((name, cmd))
        else:
            print("paired.py: unknown argument %r (see --help)" % a, file=sys.stderr)
            return 2
    if len(cmds) < 2 or rounds < 1:
        print("paired.py: give at least two NAME=COMMAND and --rounds >= 1", file=sys.stderr)
        return 2
    times = {n: [] for n, _ in cmds}
    for r in range(rounds):
        row = []
        for name, cmd in cmds:
            p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
            t = time_of(p.stdout + "\n" + p.stderr)
            if t is None:
                print("paired.py: round %d: %s printed no time (exit %d): %s" % (r + 1, name, p.returncode,
                      (p.stdout + p.stderr).strip()[-300:]), file=sys.stderr)
            times[name].append(t)
            row.append("%s %s" % (name, "-" if t is None else "%.4g ms" % t))
        print("round %d: %s" % (r + 1, ", ".join(row)), flush=True)
    first = cmds[0][0]
    print("\n| command | median | min | ratio to %s: median (range) | rounds |" % first)
    print("|---|---|---|---|---|")
    for name, cmd in cmds:
        ts = [t for t in times[name] if t is not None]
        ratios = [t / f for t, f in zip(times[name], times[first]) if t is not None and f]
        med = "%.4g ms" % statistics.median(ts) if ts else "-"
        mn = "%.4g ms" % min(ts) if ts else "-"
        rr = ("%.3f (%.3f-%.3f)" % (statistics.median(ratios), min(ratios), max(ratios))) if ratios else "-"
        print("| %s | %s | %s | %s | %d |" % (name, med, mn, rr, len(ratios)))
    print("\ncommands:")
    for name, cmd in cmds:
        print("  %s=%s" % (name, shlex.quote(cmd)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
