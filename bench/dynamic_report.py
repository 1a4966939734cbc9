#!/usr/bin/python3
"""Writes the table (and a plot) of the shape-transition benchmark (bench/dynamic-shapes.sh).

  dynamic_report.py --out FILE.md [--png FILE.png] [--machine FILE] [--commands FILE] DIR...

Each DIR is one run of bench/dynamic_shapes (one workload): calls.tsv, steady.tsv, summary.tsv and meta.tsv as the
driver writes them. The report has, per workload, the three approaches' cumulative cost over the call sequence,
their compile time, the cut in cumulative cost against specializing at every new size, the steady-state time per
call against the specialized kernels (geometric mean over the distinct sizes of the per-size median ratios), and
whether the project's target holds: one dynamic kernel or the range-tuned buckets cut the cumulative cost by at least
70% with a steady state within 15% of the specialized kernels. The PNG plots cumulative cost over the sequence.
"""
import argparse
import csv
import datetime
import math
import os
import sys

APPROACHES = ('specialize', 'dynamic', 'buckets')
LABELS = {'specialize': '(a) specialize per size', 'dynamic': '(b) one dynamic kernel',
          'buckets': '(c) range-tuned buckets'}
CUT_TARGET = 70.0      # % cumulative cost cut against (a)
STEADY_TARGET = 1.15   # steady state at most this times (a)'s


def read_tsv(path):
    with open(path, newline='') as f:
        return list(csv.DictReader(f, delimiter='\t'))


def read_meta(path):
    """meta.tsv: key, tab, value; 'bucket' lines repeat (range, tuned at, best there, kernel shared with)."""
    meta = {'bucket': []}
    with open(path) as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if parts[0] == 'bucket':
                meta['bucket'].append(parts[1:])
            elif len(parts) >= 2:
                meta[parts[0]] = parts[1]
    return meta


def read_run(d):
    need = ('calls.tsv', 'steady.tsv', 'summary.tsv', 'meta.tsv')
    missing = [n for n in need if not os.path.exists(os.path.join(d, n))]
    if missing:
        sys.exit(f'dynamic_report: {d}: missing {", ".join(missing)} (did bench/dynamic_shapes finish?)')
    return {'dir': d, 'meta': read_meta(os.path.join(d, 'meta.tsv')),
            'calls': read_tsv(os.path.join(d, 'calls.tsv')),
            'steady': read_tsv(os.path.join(d, 'steady.tsv')),
            'summary': {r['approach']: r for r in read_tsv(os.path.join(d, 'summary.tsv'))}}


def fmt_s(s):
    """Seconds as the driver's reports print them: 3 significant digits in us, ms or s."""
    s = float(s)
    if s <= 0:
        return '—'
    if s < 1e-3:
        return f'{s * 1e6:.3g} us'
    if s < 1:
        return f'{s * 1e3:.3g} ms'
    return f'{s:.3g} s'


def verdict(run):
    """Per approach (b, c): (cut %, steady ratio, cut ok, steady ok); and whether the project's target holds."""
    sm = run['summary']
    base = float(sm['specialize']['cumulative_s'])
    out = {}
    for a in ('dynamic', 'buckets'):
        cut = 100.0 * (1 - float(sm[a]['cumulative_s']) / base) if base > 0 else 0.0
        ratio = float(sm[a]['steady_ratio'])
        out[a] = (cut, ratio, cut >= CUT_TARGET, 0 < ratio <= STEADY_TARGET)
    return out, any(v[2] and v[3] for v in out.values())


def section(run):
    m, sm = run['meta'], run['summary']
    size = m.get('size', 'M')
    lines = [f"## {m.get('workload', '?')} ({size}={m.get('range', '?')} dynamic, {m.get('bindings', '')})", '']
    buckets = m['bucket']
    lines.append(f"Sequence: {m.get('calls')} calls, {m.get('distinct')} distinct sizes (seed {m.get('seed')}: "
                 f"log-uniform draws over {m.get('range')}, each call repeating an earlier size with probability "
                 f"{m.get('recur')}). Range tuning ({m.get('log')}): {len(buckets)} buckets, "
                 f"{m.get('bucket_kernels')} distinct schedules. The tuned schedule of (a) and (b) is the best of "
                 f"bucket {m.get('tuned_bucket')} (holding the largest size of the sequence).")
    lines.append('')
    lines.append('| approach | cumulative cost | compile | kernels compiled | calls (first runs) | cut vs (a) | '
                 'steady state vs (a) | verified |')
    lines.append('|---|---|---|---|---|---|---|---|')
    base = float(sm['specialize']['cumulative_s'])
    for a in APPROACHES:
        r = sm[a]
        cut = '—' if a == 'specialize' else f"{100.0 * (1 - float(r['cumulative_s']) / base):.1f}%"
        lines.append(f"| {LABELS[a]} | {fmt_s(r['cumulative_s'])} | {fmt_s(r['compile_s'])} | {r['compiles']} | "
                     f"{fmt_s(r['run_s'])} | {cut} | {float(r['steady_ratio']):.3f}x | {r['verified']}/{r['calls']} |")
    lines.append('')
    v, ok = verdict(run)
    lines.append(f'Target: (b) or (c) cuts the cumulative cost by >= {CUT_TARGET:.0f}% against (a) with '
                 f'a steady state within {100 * (STEADY_TARGET - 1):.0f}% of (a)\'s.')
    lines.append('')
    for a in ('dynamic', 'buckets'):
        cut, ratio, c_ok, s_ok = v[a]
        lines.append(f"- {LABELS[a]}: cut {cut:.1f}% ({'pass' if c_ok else 'fail'}), steady state {ratio:.3f}x "
                     f"({'pass' if s_ok else 'fail'}): {'PASS' if c_ok and s_ok else 'FAIL'}")
    failed = sum(1 for r in run['calls'] if r['verify'] != 'ok')
    lines.append(f"- **{'PASS' if ok else 'FAIL'}**" + (f' (but {failed} calls did not verify)' if failed else ''))
    lines.append('')
    # per size: the medians and the ratios
    by = {}
    for r in run['steady']:
        by.setdefault(int(r['M']), {})[r['approach']] = r
    lines.append('Steady state per size (time per call of the warmed kernel: the lowest median of its interleaved '
                 'timing rounds; calls timed in parentheses):')
    lines.append('')
    lines.append(f'| {size} | (a) specialize | (b) dynamic | (c) buckets | (b) / (a) | (c) / (a) |')
    lines.append('|---|---|---|---|---|---|')
    for s in sorted(by):
        row = by[s]
        cells = [f"{fmt_s(row[a]['median_s'])} ({row[a]['runs']})" if a in row else '—' for a in APPROACHES]
        ratios = [f"{float(row[a]['ratio_vs_specialize']):.2f}" if a in row else '—' for a in ('dynamic', 'buckets')]
        lines.append(f'| {s} | ' + ' | '.join(cells + ratios) + ' |')
    lines.append('')
    lines.append('Buckets (the value each was tuned at, its best median there, the bucket whose kernel it shares):')
    lines.append('')
    lines.append('| bucket | tuned at | best there | kernel of bucket |')
    lines.append('|---|---|---|---|')
    for b in buckets:
        rng, value, best, owner = (b + ['', '', '', ''])[:4]
        lines.append(f'| {rng} | {size}={value} | {fmt_s(best)} | {owner} |')
    lines.append('')
    return lines, ok


def plot(runs, png):
    """Cumulative cost over the sequence per approach, one panel per workload; returns the report's line."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return 'No plot: matplotlib is not installed (Debian: python3-matplotlib).'
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), squeeze=False)
    for ax, run in zip(axes[0], runs):
        for a, style in zip(APPROACHES, ('-', '--', '-.')):
            rows = [r for r in run['calls'] if r['approach'] == a]
            ax.plot([int(r['call']) + 1 for r in rows], [float(r['cumulative_s']) for r in rows], style,
                    drawstyle='steps-post', label=LABELS[a])
        m = run['meta']
        ax.set_yscale('log')
        ax.set_title(f"{m.get('workload')} {m.get('size')}={m.get('range')} ({m.get('bindings')})")
        ax.set_xlabel('call')
        ax.set_ylabel('cumulative cost: compile + run (s)')
        ax.grid(True, which='both', alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return f'Plot: cumulative cost over the call sequence, `{os.path.basename(png)}`.'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('dirs', nargs='+', help='output folders of bench/dynamic_shapes, one per workload')
    ap.add_argument('--out', required=True, help='the markdown report')
    ap.add_argument('--png', help='the plot (skipped without matplotlib)')
    ap.add_argument('--machine', help='a file with one line naming the machine')
    ap.add_argument('--commands', help='a file with the commands that produced the figures')
    a = ap.parse_args()
    runs = [read_run(d) for d in a.dirs]
    target = runs[0]['meta'].get('target', '?')
    day = datetime.date.today().isoformat()
    out = [f'# kgen dynamic shapes: specialize vs one dynamic kernel vs range-tuned buckets ({target}), {day}', '']
    machine = None
    if a.machine and os.path.exists(a.machine):
        with open(a.machine) as f:
            machine = f.read().strip()
    out.append(f"Machine: {machine or runs[0]['meta'].get('device', '?')}.")
    out.append('')
    out.append('A serving-like sequence of calls whose size changes from call to call, run three ways: (a) at each '
               'new size the tuned schedule compiled with every size static (repeated sizes reuse their kernel); '
               '(b) the same schedule compiled once with the size dynamic; (c) the range-tuned bucket set, each '
               "bucket's kernel compiled at the first call that needs it. Cumulative cost = compile (scheduling, "
               'lowering, printing and the compiler) + the calls, over the sequence. Steady state = per distinct '
               'size, the time per call of the warmed kernel (the lowest median of interleaved timing rounds, so a '
               'round disturbed by another process does not count), then the geometric mean over sizes of the ratio '
               "to (a). Every call's output is verified against the reference evaluator.")
    out.append('')
    all_ok = True
    for run in runs:
        lines, ok = section(run)
        out += lines
        all_ok &= ok
    if a.png:
        out.append(plot(runs, a.png))
        out.append('')
    if a.commands and os.path.exists(a.commands):
        with open(a.commands) as f:
            cmds = f.read().strip()
        if cmds:
            out += ['## Commands', '', '```', cmds, '```', '']
    with open(a.out, 'w') as f:
        f.write('\n'.join(out))
    print(f"dynamic_report: {a.out}: target {'PASS' if all_ok else 'FAIL'}")


if __name__ == '__main__':
    main()
