#!/usr/bin/python3
"""Reads the tuning logs and raw outputs of bench/tune-cpu.sh and writes its table (and a plot of the curves).

  tune_report.py best-trace LOG            the best successful record's trace, as schedule text (kgen run --schedule)
  tune_report.py report --logdir DIR --workloads "matmul conv2d softmax" --models "xgb random" --trials N
                        --out FILE.md [--png FILE.png]

A log is a sequence of msgpack maps with the keys of tlog/tlog.h (v, workload, target, trace, result, time, kgen,
sketch, knobs). This reader keeps every intact record and skips what does not decode, as kgen's own reader does, so
a log cut short by a killed tuner still reports. Record order is measurement order: the tuning curve is the best
median so far after each record.

LOGDIR holds, per workload W and model M: W-M.msgpack (the log), W-M.tune.txt (the tuner's output), W-M.best.txt
(`kgen run --measure` of the best trace); and peers-openblas.txt, peers-halide.txt, runs.tsv, commands.txt and
machine.txt as bench/tune-cpu.sh writes them.
"""
import argparse
import datetime
import math
import os
import re
import statistics
import sys

try:
    import msgpack
except ImportError:
    sys.exit('tune_report: the msgpack Python package is missing (Debian: apt-get install python3-msgpack)')

# Workload key (bench/tune-cpu.sh) -> label, and the figures the project's targets were set against.
LABELS = {'matmul': 'matmul 1024x1024x1024', 'conv2d': 'conv2d N1 C64 56x56 F64 3x3 pad1',
          'softmax': 'softmax 4096x4096'}


# ---- logs

class _View:
    """A read-only file over a memoryview, so that an Unpacker restarted at any offset copies nothing up front."""

    def __init__(self, mv, pos):
        self.mv, self.pos = mv, pos

    def read(self, n=-1):
        end = len(self.mv) if n < 0 else min(len(self.mv), self.pos + n)
        chunk = bytes(self.mv[self.pos:end])
        self.pos = end
        return chunk


def read_log(path):
    """The intact records of a log (dicts) in file order, and the number of bytes skipped.

    Where something does not decode, or decodes to what is not a record (garbage that happens to open an array
    would swallow the records after it), decoding starts again one byte further on."""
    with open(path, 'rb') as f:
        mv = memoryview(f.read())
    recs, skipped, start = [], 0, 0
    while start < len(mv):
        unp = msgpack.Unpacker(_View(mv, start), raw=False, strict_map_key=False)
        pos = start
        while True:
            try:
                obj = unp.unpack()
            except msgpack.OutOfData:
                skipped += len(mv) - pos   # the end, or a truncated tail
                start = len(mv)
                break
            except Exception:
                obj = None
            if not valid_record(obj):
                skipped += 1
                start = pos + 1
                break
            recs.append(obj)
            pos = start + unp.tell()
    return recs, skipped


def valid_record(r):
    if not isinstance(r, dict) or not isinstance(r.get('v'), int):
        return False
    w, res, tr = r.get('workload'), r.get('result'), r.get('trace')
    return (isinstance(w, dict) and isinstance(w.get('name'), str) and isinstance(res, dict)
            and isinstance(res.get('status'), str) and isinstance(tr, list))


def median_s(r):
    """A record's median time in seconds, or None when it is not a successful measurement; for best_record's
    record, its schedule's median over all its records."""
    if isinstance(r.get('trace_median_s'), float):
        return r['trace_median_s']
    res = r['result']
    times = res.get('times') or []
    if res.get('status') != 'ok' or not times or not all(isinstance(t, (int, float)) for t in times):
        return None
    return statistics.median(times)


def trace_text(trace):
    """A record's trace as kgen's schedule text: one step a line, 'name stage names... ints...'."""
    lines = []
    for step in trace:
        if not (isinstance(step, list) and len(step) == 4 and isinstance(step[0], str) and isinstance(step[1], str)):
            raise ValueError(f'malformed trace step {step!r}')
        lines.append(' '.join([step[0], step[1]] + [str(x) for x in step[2]] + [str(int(x)) for x in step[3]]))
    return ''.join(line + '\n' for line in lines)


def trace_key(r):
    """What makes records measurements of one schedule: the workload, the target and the trace."""
    w, t = r.get('workload') or {}, r.get('target') or {}
    return (str(w.get('name')), str(w.get('hash')), str(t.get('kind')), str(t.get('arch')), str(t.get('device')),
            str(t.get('versions')), repr(r['trace']))


def trials(recs):
    """The records that were trials: the first of each schedule. `kgen tune` measures its fastest schedules again
    at the end of a run (its confirmation, --confirm), and those records are not trials."""
    seen, out = set(), []
    for r in recs:
        k = trace_key(r)
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def best_record(recs):
    """The first record of the best schedule, ranked as kgen ranks a log (tlog.h, kg_tlog_trace_times): by the
    median of its records' medians, a failed record counting as infinitely slow, and a schedule measured once by its
    time times the median over the re-measured schedules of their later records' median over their first (at least
    1). The record returned carries its median as 'trace_median_s' (median_s reads it)."""
    by = {}
    for i, r in enumerate(recs):
        by.setdefault(trace_key(r), []).append(i)
    traces, ratios = [], []
    for idx in by.values():
        ts = [median_s(recs[i]) for i in idx]
        if all(t is None for t in ts):
            continue
        ts = [math.inf if t is None else t for t in ts]
        if len(ts) >= 2 and math.isfinite(ts[0]):
            later = statistics.median(ts[1:])
            if math.isfinite(later):
                ratios.append(later / ts[0])
        first = next(i for i in idx if median_s(recs[i]) is not None)
        traces.append((statistics.median(ts), len(ts), first))
    single = max(1.0, statistics.median(ratios)) if ratios else 1.0
    best = None
    for m, n, first in traces:
        rank = m * single if n == 1 else m
        if math.isfinite(m) and (best is None or (rank, first) < best[:2]):
            best = (rank, first, m)
    return dict(recs[best[1]], trace_median_s=best[2]) if best else None


def curve(recs):
    """Best median so far (seconds, None before the first success) after each trial (trials(recs))."""
    out, best = [], None
    for r in trials(recs):
        t = median_s(r)
        if t is not None and (best is None or t < best):
            best = t
        out.append(best)
    return out


def trials_to_reach(c, goal):
    """The 1-based trial after which curve c is at or below goal (None if never)."""
    for i, t in enumerate(c):
        if t is not None and t <= goal:
            return i + 1
    return None


# ---- raw outputs

def read_text(path):
    try:
        with open(path, encoding='utf-8', errors='replace') as f:
            return f.read()
    except FileNotFoundError:
        return None


def parse_peers(logdir):
    """{(peer, workload key): seconds} from the peers' outputs."""
    peers = {}
    txt = read_text(os.path.join(logdir, 'peers-openblas.txt')) or ''
    m = re.search(r'^openblas sgemm (\d+)x\d+x\d+\s+([\d.]+) ms', txt, re.M)
    if m and m.group(1) == '1024':
        peers[('OpenBLAS', 'matmul')] = float(m.group(2)) / 1e3
    # one file for all workloads (bench/tune-cpu.sh) or one per workload, peers-halide-W.txt (bench/suite.sh)
    names = sorted(f for f in os.listdir(logdir)
                   if f == 'peers-halide.txt' or (f.startswith('peers-halide-') and f.endswith('.txt')))
    txt = ''.join(read_text(os.path.join(logdir, f)) or '' for f in names)
    for m in re.finditer(r'^(\w+)\s+(\w+) .*?\s([\d.]+) ms\s+[\d.]+ .*verify: (.*)$', txt, re.M):
        sched, work, ms, verify = m.groups()
        if verify.strip() != 'ok':
            continue   # a wrong answer is no reference point
        peers[(f'Halide {sched}', work)] = float(ms) / 1e3
    return peers


def parse_run_time(path):
    """(median, min) of a `kgen run` output in seconds, or None (no output, or it did not verify)."""
    txt = read_text(path)
    if not txt or not re.search(r'^verify: ok', txt, re.M):
        return None
    m = re.search(r'^time: ([\d.eE+-]+) (ms|us) \(median of \d+ runs, min ([\d.eE+-]+)', txt, re.M)
    if not m:
        return None
    unit = 1e3 if m.group(2) == 'ms' else 1e6
    return float(m.group(1)) / unit, float(m.group(3)) / unit


def parse_runs(logdir):
    runs = {}
    for line in (read_text(os.path.join(logdir, 'runs.tsv')) or '').splitlines():
        f = line.split('\t')
        if len(f) == 4:
            runs[(f[0], f[1])] = (int(f[2]), int(f[3]))   # the last run of a pair wins
    return runs


# ---- formatting

def ms(t):
    return '—' if t is None else (f'{t * 1e3:.3g} ms' if t >= 1e-3 else f'{t * 1e6:.3g} us')


def rate(r, t):
    """GFLOP/s (and GB/s where the workload moves more bytes than it computes) for a record's workload at time t."""
    if t is None or r is None:
        return ''
    res = r['result']
    flops, nbytes = float(res.get('flops') or 0), float(res.get('bytes') or 0)
    parts = []
    if flops > 0:
        parts.append(f'{flops / t / 1e9:.1f} GFLOP/s')
    if nbytes > 0 and nbytes * 4 > flops:
        parts.append(f'{nbytes / t / 1e9:.1f} GB/s')
    return ', '.join(parts)


def ratio(a, b):
    return '—' if a is None or b is None or b == 0 else f'{a / b:.2f}'


def hms(s):
    return f'{s // 3600}h{s % 3600 // 60:02d}m' if s >= 3600 else f'{s // 60}m{s % 60:02d}s'


def table(head, rows):
    out = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    out += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(out) + '\n'


# ---- the report

def load(a):
    """Everything the report needs, per (workload, model)."""
    runs = {}
    for w in a.workloads:
        for m in a.models:
            path = os.path.join(a.logdir, f'{w}-{m}.msgpack')
            recs, skipped = read_log(path) if os.path.exists(path) else ([], 0)
            runs[(w, m)] = {
                'path': path, 'recs': recs, 'trials': trials(recs), 'skipped': skipped, 'best': best_record(recs),
                'curve': curve(recs),
                'remeasured': parse_run_time(os.path.join(a.logdir, f'{w}-{m}.best.txt')),
                'default': next((median_s(r) for r in recs if r['trace'] == [] and median_s(r) is not None), None),
            }
    return runs


def kgen_time(run):
    """The figure compared with the peers: the best kernel measured again beside them, else its tuning median."""
    if run['remeasured'] is not None:
        return run['remeasured'][0]
    return median_s(run['best']) if run['best'] else None


def write_report(a):
    runs, peers, walls = load(a), parse_peers(a.logdir), parse_runs(a.logdir)
    main_model = a.models[0]
    out = []
    day = datetime.date.today().isoformat()
    out.append(f'# kgen CPU tuning benchmark, {day}\n')
    machine = (read_text(os.path.join(a.logdir, 'machine.txt')) or '').strip()
    out.append(f'Machine: {machine or "unknown"}.\n')
    versions = sorted({r.get('kgen') for run in runs.values() for r in run['recs'] if isinstance(r.get('kgen'), str)})
    out.append(f'kgen {", ".join(versions) or "(no records)"}; {a.trials} trials per workload and model '
               f'(models: {", ".join(a.models)}); the peers ran in the same run on the same threads. '
               'kgen\'s times are medians: its best kernel of each run measured again right before the peers '
               '(`kgen run --measure --min-repeat-ms 1000`), or the median from tuning where that measurement is '
               'missing (marked *). The peers report their best run (OpenBLAS of 10, Halide of 5), which favours '
               'them slightly.\n')
    out.append('The targets were set from figures seen on a 2-core AMD EPYC (Adams2019: 123 GFLOP/s, '
               '4.4 ms, 7.8 ms; OpenBLAS 196 GFLOP/s); here each target is checked against the peers of this run.\n')

    # 1. per tuning run
    rows = []
    for (w, m), run in runs.items():
        recs, best = run['recs'], run['best']
        nok = sum(1 for r in recs if median_s(r) is not None)
        errs = {}
        for r in recs:
            if median_s(r) is None:
                errs[r['result']['status']] = errs.get(r['result']['status'], 0) + 1
        rc, wall = walls.get((w, m), (None, None))
        status = ', '.join(x for x in ('' if rc in (0, None) else f'exit {rc}',
                                       '' if os.path.exists(run['path']) else 'no log') if x) or 'ok'
        bt = median_s(best) if best else None
        rows.append([LABELS[w], m, status, len(recs), nok, ', '.join(f'{k} {v}' for k, v in sorted(errs.items())) or '—',
                     ms(run['default']), ms(bt), rate(best, bt),
                     f'{ms(run["remeasured"][0])} (min {ms(run["remeasured"][1])})' if run['remeasured'] else '—',
                     ratio(run['default'], bt), hms(wall) if wall is not None else '—'])
        if run['skipped']:
            rows[-1][2] += f' ({run["skipped"]} B of the log skipped)'
    out.append('## Tuning runs\n')
    out.append(table(['workload', 'model', 'run', 'records', 'ok', 'errors', 'default schedule', 'best (tuning)',
                      'rate', 'best measured again', 'speedup over default', 'wall time'], rows))
    short = [f'{LABELS[w]} ({m})' for (w, m), run in sorted(runs.items()) if 0 < len(run['trials']) < a.trials]
    if short:
        out.append('\nFewer records than trials: the search space ran dry (`kgen tune` says "search space exhausted" '
                   'when no schedule it can reach is left unmeasured) for ' + ', '.join(short) + '.\n')

    # 2. beside the peers
    peer_names = ['Halide Adams2019', 'Halide Mullapudi2016', 'OpenBLAS']
    rows = []
    for w in a.workloads:
        row = [LABELS[w]]
        for m in a.models:
            t = kgen_time(runs[(w, m)])
            row.append(ms(t) + ('' if runs[(w, m)]['remeasured'] is not None or t is None else '*'))
        t = kgen_time(runs[(w, main_model)])
        row.append(rate(runs[(w, main_model)]['best'], t))
        row += [ms(peers.get((p, w))) for p in peer_names]
        row += [ratio(peers.get(('Halide Adams2019', w)), t), ratio(peers.get(('OpenBLAS', w)), t)]
        rows.append(row)
    out.append('## Beside the peers\n')
    out.append(f'Speedups are the peer\'s time over kgen\'s ({main_model}); above 1, kgen is faster.\n')
    out.append(table(['workload'] + [f'kgen {m}' for m in a.models] + [f'kgen {main_model} rate'] + peer_names +
                     ['Adams2019 / kgen', 'OpenBLAS / kgen'], rows))

    # 3. model vs random
    reach = {}
    if 'random' in a.models and main_model != 'random':
        out.append(f'## {main_model} vs random search\n')
        marks = sorted({c for c in (10, 25, 50, 100, 200, 250, 300, 400, 500, a.trials // 2, a.trials)
                        if 0 < c <= a.trials})
        rows = []
        for w in a.workloads:
            cm, cr = runs[(w, main_model)]['curve'], runs[(w, 'random')]['curve']
            goal = cr[-1] if cr else None
            need = trials_to_reach(cm, goal) if goal is not None else None
            reach[w] = (need, len(cr), goal)
            at = lambda c, n: ms(c[n - 1]) if len(c) >= n else '—'
            rows.append([LABELS[w], ms(goal), f'{need} of {len(cr)}' if need else 'not reached',
                         '—' if goal is None else ('yes' if need and need <= len(cr) / 2 else 'no')] +
                        [f'{at(cm, n)} / {at(cr, n)}' for n in marks])
        out.append(f'Best median so far after n trials ({main_model} / random), in record order; "trials to match" '
                   f'is when {main_model} first reached random search\'s final best.\n')
        out.append(table(['workload', 'random\'s best', 'trials to match', '<= half'] +
                         [f'n={n}' for n in marks], rows))

    # 4. targets
    out.append('## Targets\n')
    lines = []
    for w in a.workloads:
        t, adams = kgen_time(runs[(w, main_model)]), peers.get(('Halide Adams2019', w))
        lines.append(target_line(f'{LABELS[w]} at least as fast as Halide Adams2019',
                                 None if t is None or adams is None else t <= adams,
                                 f'kgen {ms(t)}, Adams2019 {ms(adams)}'))
    if 'matmul' in a.workloads:
        t, blas = kgen_time(runs[('matmul', main_model)]), peers.get(('OpenBLAS', 'matmul'))
        lines.append(target_line('matmul at least 50% of OpenBLAS', None if t is None or blas is None else blas / t >= 0.5,
                                 f'{100 * blas / t:.0f}% ({ms(t)} vs {ms(blas)})' if t and blas else 'missing figures'))
    for w, (need, n, goal) in reach.items():
        lines.append(target_line(f'{LABELS[w]}: {main_model} reaches random search\'s best in at most half the trials',
                                 None if goal is None else (need is not None and need <= n / 2),
                                 f'{need} of {n} trials' if need else f'not reached in {len(runs[(w, main_model)]["curve"])}'))
    out.append(''.join(lines))

    if a.png:
        out.append(plot(a, runs, peers))
    cmds = list(dict.fromkeys((read_text(os.path.join(a.logdir, 'commands.txt')) or '').splitlines()))
    out.append('## Commands\n')
    out.append('```\n' + '\n'.join(cmds + [f'bench/tune_report.py report --logdir {a.logdir} ...']) + '\n```\n')
    with open(a.out, 'w') as f:
        f.write('\n'.join(out))
    print(f'tune_report: wrote {a.out}')


def target_line(what, met, detail):
    verdict = 'n/a (missing figures)' if met is None else ('**met**' if met else '**not met**')
    return f'- {what}: {verdict} — {detail}\n'


def plot(a, runs, peers):
    """Writes the tuning curves to a.png; returns the report's line about it."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return 'No plot: matplotlib is not installed (Debian: python3-matplotlib).\n'
    fig, axes = plt.subplots(1, len(a.workloads), figsize=(5 * len(a.workloads), 4), squeeze=False)
    for ax, w in zip(axes[0], a.workloads):
        for m in a.models:
            c = runs[(w, m)]['curve']
            xs = [i + 1 for i, t in enumerate(c) if t is not None]
            ax.plot(xs, [c[x - 1] * 1e3 for x in xs], drawstyle='steps-post', label=f'kgen {m}')
        for p, style in (('Halide Adams2019', '--'), ('Halide Mullapudi2016', ':'), ('OpenBLAS', '-.')):
            if (p, w) in peers:
                ax.axhline(peers[(p, w)] * 1e3, color='gray', linestyle=style, label=p)
        ax.set_yscale('log')
        ax.set_title(LABELS[w])
        ax.set_xlabel('trials')
        ax.set_ylabel('best median so far (ms)')
        ax.legend(fontsize='small')
    fig.tight_layout()
    fig.savefig(a.png, dpi=100)
    plt.close(fig)
    print(f'tune_report: wrote {a.png}')
    return f'![tuning curves]({os.path.basename(a.png)})\n'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    b = sub.add_parser('best-trace')
    b.add_argument('log')
    r = sub.add_parser('report')
    r.add_argument('--logdir', required=True)
    r.add_argument('--workloads', default='matmul conv2d softmax')
    r.add_argument('--models', default='xgb random')
    r.add_argument('--trials', type=int, default=500)
    r.add_argument('--out', required=True)
    r.add_argument('--png')
    a = ap.parse_args()
    if a.cmd == 'best-trace':
        try:
            recs, _ = read_log(a.log)
        except OSError as e:
            sys.exit(f'tune_report: {e}')
        best = best_record(recs)
        if best is None:
            sys.exit(f'tune_report: no successful record in {a.log}')
        sys.stdout.write(trace_text(best['trace']))
        return
    a.workloads, a.models = a.workloads.split(), a.models.split()
    unknown = [w for w in a.workloads if w not in LABELS]
    if unknown:
        sys.exit(f'tune_report: unknown workloads {unknown} (known: {" ".join(LABELS)})')
    write_report(a)


if __name__ == '__main__':
    main()
