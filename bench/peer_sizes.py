"""What the benchmark's peers (bench/torch_peers.py, bench/tvm_peers.py) share about kgen's workloads: where their
.te files are, the sizes a run binds (-D NAME=VALUE, a file's "# bench-sizes:" / "# sizes:" line), the usage error
both report, and the tolerance of kgen's verification rule (runtime/verify.c) for a reduction's length. No
third-party import: each peer runs in its own interpreter (the PyTorch venv, the TVM venv)."""
import math
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TE_DIRS = (os.path.join(ROOT, 'te', 'lib'), os.path.join(ROOT, 'bench', 'workloads'))


class UsageError(Exception):
    pass


def parse_binds(items):
    out = {}
    for it in items:
        m = re.fullmatch(r'([A-Za-z_]\w*)=(\d+)', it.strip())
        if not m:
            raise UsageError("bad size binding '%s' (want NAME=VALUE)" % it)
        out[m.group(1)] = int(m.group(2))
    return out


def te_sizes(name, small):
    """The .te file's "# bench-sizes:" (or "# sizes:") binding, or {} when the file cannot be read."""
    key = '# sizes:' if small else '# bench-sizes:'
    for d in TE_DIRS:
        try:
            with open(os.path.join(d, name + '.te')) as f:
                for line in f:
                    if line.startswith(key):
                        return parse_binds(line[len(key):].split())
        except OSError:
            continue
    return {}


def tolerance(rtol, red_len):
    """kgen's relative tolerance for a value reduced over red_len terms: rtol scaled by sqrt(L / 256) past 256."""
    return rtol * math.sqrt(red_len / 256.0) if red_len > 256 else rtol
