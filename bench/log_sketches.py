#!/usr/bin/python3
"""How a tuning spent its trials: per log, the records of each sketch (the confirmation's re-measurements have no
sketch and are counted as "-") and the fastest record's median time of each.

  log_sketches.py [--step TEXT] LOG...
  log_sketches.py --remeasured LOG...

--remeasured: instead, for every trace measured more than once (the confirmation), the median of each later record
over its first record's (>1: slower when measured again).

--step TEXT: each sketch's records split in two, those whose trace has a step containing TEXT (e.g.
"compute_inline P") and the rest. Reads the logs with tests/cli/kglog.py's msgpack reader (no package needed).
The figures of bench/results/sketch-share-avx2-2026-12-06.md were counted so.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'cli'))
import kglog  # noqa: E402


def step_text(s):
    """One trace step as its words: primitive, stage, loop names, integers."""
    words = []
    for part in s:
        words.extend(str(x) for x in part) if isinstance(part, list) else words.append(str(part))
    return ' '.join(words)


def main(argv):
    step = None
    if argv and argv[0] == '--remeasured':
        for path in argv[1:]:
            first, ratios = {}, []
            for r in kglog.records(path):
                times = r['result'].get('times') or []
                if r['result'].get('status') != 'ok' or not times:
                    continue
                k, m = kglog.key(r), kglog.median(times)
                if k in first:
                    ratios.append('%.2f' % (m / first[k]))
                else:
                    first[k] = m
            print(path, ' '.join(ratios) if ratios else '(none)')
        return
    if len(argv) >= 2 and argv[0] == '--step':
        step, argv = argv[1], argv[2:]
    if not argv:
        sys.exit(__doc__)
    for path in argv:
        groups = {}
        for r in kglog.records(path):
            times = r['result'].get('times') or []
            name = r.get('sketch') or '-'
            if step is not None:
                has = any(step in step_text(s) for s in r['trace']) if isinstance(r['trace'], list) else False
                name += ' (with)' if has else ' (without)'
            g = groups.setdefault(name, [0, None])
            g[0] += 1
            if r['result'].get('status') == 'ok' and times:
                m = kglog.median(times) * 1e3
                g[1] = m if g[1] is None or m < g[1] else g[1]
        print(path)
        for name in sorted(groups):
            n, best = groups[name]
            print('  %-28s %4d records  fastest %s' % (name, n, '%.3f ms' % best if best is not None else '-'))


if __name__ == '__main__':
    main(sys.argv[1:])
