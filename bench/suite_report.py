#!/usr/bin/python3
"""Writes the report of bench/suite.sh: the suite against the peers, the fusion experiment, the amortization
experiment, the tuning curves and the shape-transition experiment, as one markdown file and PNG plots beside it.

  suite_report.py --logdir DIR --out FILE.md

DIR is bench/suite.sh's LOGDIR. Every figure comes from a file there (kgen's logs and `kgen run` outputs, the
peers' outputs); a figure whose source is missing or did not verify is shown as a dash, never guessed. The plots
(FILE-curves.png, FILE-fusion.png, FILE-dynamic.png, FILE-tvm.png) need matplotlib; without it the report says so.
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tune_report import read_log, median_s, curve, best_record, trials, parse_peers, parse_run_time, ms, ratio, \
    table, read_text  # noqa: E402  (the log reader and formatting of the CPU tuning benchmark)

LABELS = {
    'bias_gelu_residual': 'bias+GELU+residual', 'layernorm': 'layernorm', 'rmsnorm': 'RMSNorm',
    'softmax': 'softmax', 'mlp_gelu': 'MLP epilogue (matmul+bias+GELU)', 'attention': 'attention',
    'matmul': 'matmul', 'conv2d': 'conv2d 3x3 (ResNet-50 layer)', 'reduce_rows': 'row sums',
    'batch_matmul': 'batch matmul', 'depthwise_conv2d': 'depthwise conv2d 3x3', 'matvec': 'matvec',
    'maxpool2d': 'max pool 3x3 stride 2', 'transpose': 'transpose', 'mlp_epilogue': 'MLP epilogue (matmul+bias+ReLU)',
}
# Labels by program file, where a workload name can run more than one (ARGS_conv2d=te/lib/conv2d.te): the stride-2
# layer must not be reported as the suite's stride-1 one
FILE_LABELS = {'conv2d_3x3': 'conv2d 3x3 (ResNet-50 layer)', 'conv2d': 'conv2d 3x3 stride 2'}
PROGRAMS = {}  # workload -> the stem of the .te file the suite ran for it (load() fills it)


def label(w):
    return FILE_LABELS.get(PROGRAMS.get(w), LABELS.get(w, w))


NEUTRAL = {'matmul', 'conv2d', 'reduce_rows', 'batch_matmul', 'matvec', 'maxpool2d', 'transpose'}
# Halide's peers program names its workloads by these keys (../shared/peers/halide_peers.py)
HALIDE_KEY = {'matmul': 'matmul', 'conv2d': 'conv2d', 'softmax': 'softmax'}
TARGET_PCT = 0.80   # the project's GPU targets: SGEMM >= 80% of cuBLAS FP32, memory-bound >= 80% of copy bandwidth
CPU_COPY_PCT = 0.70  # on the CPU: every memory-bound kernel at >= 70% of the copy rate at its footprint
# the PyTorch columns of the suite's table: (bench/torch_peers.py mode, heading); the compiled ones show their
# compile time beside the steady-state time
TORCH_COLS = (('eager', 'PyTorch eager'), ('compile', 'torch.compile'), ('max-autotune', 'max-autotune'),
              ('max-autotune-frozen', 'max-autotune, frozen weights'))


# ---- inputs

def run_out(path):
    """A `kgen run --measure` output: median and min (s), compile (s), GFLOP/s, GB/s; None unless it verified."""
    t = parse_run_time(path)
    if t is None:
        return None
    txt = read_text(path)
    out = {'median': t[0], 'min': t[1], 'compile': None, 'gflops': None, 'gbps': None}
    m = re.search(r'^compile: ([\d.]+) s', txt, re.M)
    if m:
        out['compile'] = float(m.group(1))
    m = re.search(r'^throughput: ([\d.]+) GFLOP/s, ([\d.]+) GB/s', txt, re.M)
    if m:
        out['gflops'], out['gbps'] = float(m.group(1)), float(m.group(2))
    return out


def sizes_of(logdir, w):
    """The -D bindings of a workload, from the command that tuned or measured it."""
    for line in (read_text(os.path.join(logdir, 'commands.txt')) or '').splitlines():
        if f'/{w}.' in line or f'{w}.te' in line:
            b = re.findall(r'-D (\w+=\d+)', line)
            if b:
                return ' '.join(b)
    return ''


def program_of(logdir, w):
    """The stem of the .te file the suite tuned or measured for a workload ('' when no command names one)."""
    for line in (read_text(os.path.join(logdir, 'commands.txt')) or '').splitlines():
        if f'/{w}.' in line:
            m = re.search(r'(?:^|\s)\S*?([\w-]+)\.te(?:\s|$)', line)
            if m:
                return m.group(1)
    return ''


def torch_rows(path):
    """{mode: row} from bench/torch_peers.py's JSON; rows with an error or a wrong answer keep their reason."""
    try:
        with open(path) as f:
            rows = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, dict) and isinstance(r.get('mode'), str):
            out[r['mode']] = r
    return out


def torch_s(rows, mode):
    """A torch mode's median in seconds, or None (missing, failed, or its answer did not match kgen's)."""
    r = rows.get(mode)
    if not r or r.get('error') or r.get('median_ms') is None:
        return None
    if r.get('verify') not in (None, 'ok', 'skipped'):
        return None
    return float(r['median_ms']) / 1e3


def torch_best(rows, modes):
    """The fastest of torch's modes in seconds (missing, failed or unverified ones left out), or None."""
    return min((x for x in (torch_s(rows, m) for m in modes) if x is not None), default=None)


def copy_run(path):
    """bench/copy_bw's line: {'bytes', 'median' (s), 'gbps'}, or None."""
    m = re.search(r'^copy_bw bytes=(\d+) .*?median_ms=([\d.eE+-]+) .*?gbps=([\d.eE+-]+)', read_text(path) or '', re.M)
    if not m:
        return None
    return {'bytes': int(m.group(1)), 'median': float(m.group(2)) / 1e3, 'gbps': float(m.group(3))}


def peak_run(path):
    """bench/hand/fma_peak's lines: {'gflops' (all threads, the widest width's or the best), 'threads', 'width'},
    or None."""
    best = None
    for m in re.finditer(r'^(\d+)-bit: one thread [\d.]+ G FMA/s \([\d.]+ GFLOP/s\); (\d+) threads [\d.]+ G FMA/s '
                         r'\(([\d.]+) GFLOP/s\)', read_text(path) or '', re.M):
        g = float(m.group(3))
        if best is None or g > best['gflops']:
            best = {'gflops': g, 'threads': int(m.group(2)), 'width': int(m.group(1))}
    return best


def runs_tsv(logdir):
    runs = {}
    for line in (read_text(os.path.join(logdir, 'runs.tsv')) or '').splitlines():
        f = line.split('\t')
        if len(f) == 5:
            runs[(f[0], f[1])] = {'rc': int(f[2]), 'start': float(f[3]), 'end': float(f[4])}
    return runs


def build_tsv(logdir, w):
    out = {}
    for line in (read_text(os.path.join(logdir, f'{w}.build.tsv')) or '').splitlines():
        f = line.split('\t')
        if len(f) == 2:
            out[f[0]] = float(f[1])
    txt = read_text(os.path.join(logdir, f'{w}.replay.txt')) or ''
    m = re.search(r'time: .* compile ([\d.]+) s', txt)
    if m and re.search(r'verify: ok', txt):
        out['replay_compile'] = float(m.group(1))
    return out


def load(a):
    d = a.logdir
    target = (read_text(os.path.join(d, 'target.txt')) or 'c').strip()
    workloads = (read_text(os.path.join(d, 'workloads.txt')) or '').split()
    runs = runs_tsv(d)
    W = {}
    for w in workloads + [k[0] for k in runs if k[0] not in workloads]:
        PROGRAMS[w] = program_of(d, w)
        e = {'sizes': sizes_of(d, w), 'torch': torch_rows(os.path.join(d, f'{w}.torch.json')),
             'build': build_tsv(d, w), 'copy': copy_run(os.path.join(d, f'{w}.copy.txt')),
             'peak': peak_run(os.path.join(d, f'{w}.peak.txt'))}
        for v in ('naive', 'unfused', 'fused'):
            e[v] = run_out(os.path.join(d, f'{w}.{v}.txt'))
        for v in ('fused', 'unfused', 'random'):
            p = os.path.join(d, f'{w}.{v}.kglog')
            recs = read_log(p)[0] if os.path.exists(p) else []
            # 'recs': the trials (the tuner's confirmation measures its fastest again: those are not trials)
            e[v + '_log'] = {'recs': trials(recs), 'curve': curve(recs), 'best': best_record(recs),
                             'run': runs.get((w, v))}
        e['tvm'] = tvm_result(os.path.join(d, f'{w}.tvm.json'))
        W[w] = e
    return target, workloads, W, parse_peers(d), torch_rows(os.path.join(d, 'copy.torch.json'))


def tvm_result(path):
    """bench/tvm_peers.py's JSON (a dict), or {} when missing or unreadable; an error or a wrong answer is kept
    with its reason."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError):
        return {}
    return r if isinstance(r, dict) else {}


def tvm_s(r):
    """TVM's best kernel's median in seconds, or None (missing, failed, or its answer differs from kgen's)."""
    if not r or r.get('error') or not isinstance(r.get('median_ms'), (int, float)) or r.get('verify') != 'ok':
        return None
    return float(r['median_ms']) / 1e3


def tvm_curve(r):
    """TVM's best-so-far seconds after each trial and the wall seconds of each trial since tuning began (None
    where unknown), equal lengths."""
    best = [b if isinstance(b, (int, float)) else None for b in r.get('best_s') or []] if r else []
    wall = [x if isinstance(x, (int, float)) else None for x in r.get('wall_s') or []] if r else []
    return best, (wall + [None] * len(best))[:len(best)]


# ---- sections

def fmt_rate(r):
    if not r:
        return ''
    if r['gflops'] and r['gflops'] * 1e9 > 4 * (r['gbps'] or 0) * 1e9:
        return f"{r['gflops']:.1f} GFLOP/s"
    return f"{r['gbps']:.1f} GB/s" if r['gbps'] else ''


def t(r):
    return r['median'] if r else None


def cell(x):
    return ms(x) if x is not None else '—'


def speed(a, b):
    """a / b as 'N.NNx' (how many times faster b is than a)."""
    return '—' if a is None or b is None or b <= 0 else f'{a / b:.2f}x'


def torch_cell(rows, mode):
    """A torch mode's time, with its compile time when it compiled (— when missing or not verified)."""
    s = torch_s(rows, mode)
    c = rows.get(mode, {}).get('compile_s') if s is not None else None
    return cell(s) + (f' (compile {c:.1f} s)' if c else '')


def suite_section(target, workloads, W, peers, copy):
    head = ['workload', 'sizes', 'kgen tuned', 'kgen naive'] + [h for _, h in TORCH_COLS]
    head += ['cuBLAS / cuDNN / SDPA, FP32', 'cuBLAS TF32'] if target == 'cuda' else \
        ['OpenBLAS', 'Halide Adams2019', 'Halide Mullapudi2016']
    head += ['best peer / kgen (>1: kgen faster)']
    rows = []
    for w in workloads:
        e = W[w]
        k = t(e['fused'])
        tr = e['torch']
        tcells = [torch_cell(tr, m) for m, _ in TORCH_COLS]
        ps = [torch_s(tr, m) for m, _ in TORCH_COLS]
        tf32 = None
        if target == 'cuda':
            ps += [torch_s(tr, 'cublas') or torch_s(tr, 'cudnn') or torch_s(tr, 'sdpa')]
            tf32 = torch_s(tr, 'cublas-tf32')
        else:
            hk = HALIDE_KEY.get(w)
            ps += [peers.get(('OpenBLAS', w)) if w == 'matmul' else None,
                   peers.get(('Halide Adams2019', hk)), peers.get(('Halide Mullapudi2016', hk))]
        fp32 = [p for p in ps if p is not None]
        best = min(fp32) if fp32 else None
        other = [cell(p) for p in ps[len(TORCH_COLS):]] + ([cell(tf32)] if target == 'cuda' else [])
        rows.append([label(w), e['sizes'], f"{cell(k)} {fmt_rate(e['fused'])}".strip(),
                     cell(t(e['naive']))] + tcells + other + [ratio(best, k)])
    out = table(head, rows)
    out += ('\nkgen tuned: the best fused schedule of the tuning log, verified against kgen\'s reference evaluator '
            'and timed again (`kgen run --measure`, median of >= 1 s of repeats). Peers are timed in the same run '
            'on the same inputs\' sizes; PyTorch\'s outputs are checked against kgen\'s saved outputs, and a peer '
            'whose answer differs is shown as a dash. TorchInductor\'s compile time is its first call\'s wall time '
            'minus a steady call\'s, each mode from empty Inductor caches (a cold compile)' + inductor_start(W) + '. '
            'Frozen weights: max-autotune with '
            '`torch._inductor.config.freezing` and the weights module parameters (the GEMM workloads). TF32 is '
            'not FP32: its column is left out of "best peer".\n')
    out += alloc_section(workloads, W)
    if target == 'cuda':
        out += targets_gpu(workloads, W, copy)
    else:
        out += copy_section(workloads, W)
        out += peak_section(workloads, W, peers)
    return out


def inductor_start(W):
    """What the compile times leave out: Inductor's one-time start in each peer process (bench/torch_peers.py pays
    it on a tiny function before the first compiled mode)."""
    st = [r['inductor_start_s'] for e in W.values() for r in e['torch'].values()
          if isinstance(r.get('inductor_start_s'), (int, float))]
    if not st:
        return ''
    span = f'{min(st):.1f}' + (f'-{max(st):.1f}' if max(st) - min(st) >= 0.05 else '')
    return (f'; Inductor\'s one-time start in a process ({span} s here: its imports, the C++ toolchain\'s probe '
            'and header precompile) is paid first on a tiny function and not counted')


def alloc_section(workloads, W):
    """PyTorch writing into an output it is given, beside its usual calls: what a fresh output costs."""
    rows = []
    for w in workloads:
        tr = W[w]['torch']
        if 'eager-out' not in tr and 'compile-out' not in tr:
            continue
        k = t(W[w]['fused'])
        eg, eo, ic, io = (torch_s(tr, m) for m in ('eager', 'eager-out', 'compile', 'compile-out'))
        best = torch_best(tr, ('eager', 'eager-out', 'compile', 'compile-out'))
        rows.append([label(w), cell(k), cell(eg), cell(eo), speed(eg, eo), torch_cell(tr, 'compile'),
                     torch_cell(tr, 'compile-out'), speed(ic, io), ratio(best, k)])
    if not rows:
        return ''
    return ('\n### PyTorch writing into a given output\n\n' + table(
        ['workload', 'kgen tuned', 'PyTorch eager', 'eager, out=', 'out= speedup', 'torch.compile',
         'torch.compile into a given output', 'speedup', 'best of the four / kgen (>1: kgen faster)'], rows) +
        '\nkgen\'s kernels write into buffers their caller owns; PyTorch allocates its output on every call, and on '
        'the CPU a fresh large buffer costs its page faults. Here PyTorch gets the same: eager with `out=` (or '
        'in-place ops) where the ops have it, and `torch.compile` of a function that copies its result into a '
        'given output (Inductor stores into it directly). A win that only this table removes is the allocator\'s, '
        'not the code\'s.\n')


def copy_section(workloads, W):
    """Every memory-bound kernel against a scaled copy of its footprint (bench/copy_bw, same run)."""
    rows = []
    for w in workloads:
        e = W[w]
        cp = e['copy']
        if not cp:
            continue
        b, k = cp['bytes'], t(e['fused'])

        def frac(sec):
            return (b / sec / 1e9) / cp['gbps'] if sec and cp['gbps'] > 0 else None

        def pct(x):
            return f'{x * 100:.0f}%' if x is not None else '—'
        fk = frac(k)
        tr = e['torch']
        ind = torch_best(tr, ('compile', 'compile-out'))
        eag = torch_best(tr, ('eager', 'eager-out'))
        rows.append([label(w), f'{b / 2**20:.3g} MiB', f"{cp['gbps']:.3g} GB/s", cell(k),
                     f'{b / k / 1e9:.3g} GB/s' if k else '—', pct(fk),
                     '—' if fk is None else ('met' if fk >= CPU_COPY_PCT else 'NOT met'),
                     pct(frac(ind)), pct(frac(eag))])
    if not rows:
        return ''
    return ('\n### Memory-bound kernels against the copy rate\n\n' + table(
        ['workload', 'footprint (inputs + outputs)', 'copy rate there', 'kgen tuned', 'kgen bytes / time',
         'kgen fraction of copy', f'target >= {CPU_COPY_PCT * 100:.0f}%', 'TorchInductor fraction (best)',
         'PyTorch eager fraction (best)'], rows) +
        '\nThe copy rate: `copy_bw` (bench/copy_bw.c), a scaled copy y = a*x over the same threads whose x and y '
        'together are the workload\'s footprint, median of repeats, counting the bytes read and written; run in '
        'the same suite run, right after the workload\'s kernels. A kernel\'s rate is its footprint over its '
        'median time (each input read and each output written once); the fraction is that rate over the copy '
        'rate. PyTorch\'s best is the faster of its plain and given-output variants.\n')


def peak_section(workloads, W, peers):
    """Every compute-bound kernel against the machine's FMA peak (bench/hand/fma_peak.c, same run)."""
    rows = []
    for w in workloads:
        e = W[w]
        pk, f = e['peak'], e['fused']
        if not pk or not f or not f.get('gflops') or not f.get('median'):
            continue
        flops = f['gflops'] * 1e9 * f['median']

        def pct(sec):
            return f"{flops / sec / 1e9 / pk['gflops'] * 100:.0f}%" if sec else '—'
        tr = e['torch']
        ind = torch_best(tr, ('compile', 'max-autotune', 'max-autotune-frozen'))
        eag = torch_s(tr, 'eager')
        blas = peers.get(('OpenBLAS', w)) if w == 'matmul' else None
        rows.append([label(w), f'{flops / 1e9:.3g}', f"{pk['gflops']:.0f} GFLOP/s", cell(f['median']),
                     f"{f['gflops']:.0f} GFLOP/s", pct(f['median']), pct(ind), pct(eag),
                     pct(blas)])
    if not rows:
        return ''
    return ('\n### Compute-bound kernels against the FMA peak\n\n' + table(
        ['workload', 'GFLOP per call', 'FMA peak there', 'kgen tuned', 'kgen GFLOP/s', 'kgen fraction of peak',
         'TorchInductor fraction (best)', 'PyTorch eager fraction', 'OpenBLAS fraction'], rows) +
        '\nThe FMA peak: `bench/hand/run.sh fma_peak` (bench/hand/fma_peak.c), independent chains of f32 '
        'multiply-adds on registers over the same threads, the faster of its vector widths, run in the same suite '
        'run right after the workload\'s kernels. A kernel\'s rate is the flops kgen counts for the workload (2 per '
        'multiply-add) over its median time; the fraction is that rate over the peak, for the peers too (the '
        'same flops over their time). No kernel can pass it; one near it has nothing left to gain from its '
        'schedule.\n')


def targets_gpu(workloads, W, copy):
    lines = ['\n### Targets on the GPU\n']
    mm = W.get('matmul')
    if mm:
        k, cb = t(mm['fused']), torch_s(mm['torch'], 'cublas')
        if k and cb:
            lines.append(f'- SGEMM 4096^3: kgen {ms(k)}, cuBLAS FP32 {ms(cb)}: {cb / k * 100:.0f}% of cuBLAS '
                         f'({"met" if cb / k >= TARGET_PCT else "NOT met"}; target >= 80%)')
        else:
            lines.append('- SGEMM 4096^3: not measured (a figure is missing)')
    cp = copy.get('copy') if copy else None
    bw = cp.get('gbps') if cp and not cp.get('error') else None
    for w in workloads:
        if w in NEUTRAL or w in ('mlp_gelu', 'attention'):
            continue
        r = W[w]['fused']
        if r and r['gbps'] and bw:
            lines.append(f'- {label(w)}: {r["gbps"]:.0f} GB/s against a device-to-device copy\'s '
                         f'{bw:.0f} GB/s: {r["gbps"] / bw * 100:.0f}% ({"met" if r["gbps"] / bw >= TARGET_PCT else "NOT met"}'
                         '; target >= 80%)')
    ahead = []
    for w in workloads:
        if w in NEUTRAL:
            continue
        k, ind = t(W[w]['fused']), torch_s(W[w]['torch'], 'compile')
        ahead.append(None if k is None or ind is None else k < ind)
    if ahead and None not in ahead:
        lines.append(f'- kgen ahead of TorchInductor (default mode) on every fusion-friendly workload: '
                     f'{"met" if all(ahead) else "NOT met"} ({sum(ahead)} of {len(ahead)})')
    else:
        lines.append('- kgen vs TorchInductor on the fusion-friendly workloads: some figures are missing')
    return '\n'.join(lines) + '\n'


def fusion_section(target, workloads, W):
    head = ['workload', 'kind', 'kgen unfused', 'kgen fused', 'kgen fused / unfused speedup', 'PyTorch eager',
            'TorchInductor', 'Inductor speedup over eager', 'kgen vs TorchInductor (>1: kgen faster)',
            'kgen vs eager']
    rows, bars = [], []
    for w in workloads:
        e = W[w]
        u, f = t(e['unfused']), t(e['fused'])
        one_stage = e['unfused_log']['run'] is None and e['unfused'] is None
        if one_stage and w in NEUTRAL:
            u = f   # one stage: nothing to fuse, the fused kernel is the unfused one
        eg, ind = torch_s(e['torch'], 'eager'), torch_s(e['torch'], 'compile')
        rows.append([label(w), 'neutral' if w in NEUTRAL else 'friendly',
                     '(one stage)' if one_stage and w in NEUTRAL else cell(u), cell(f), speed(u, f), cell(eg),
                     cell(ind), speed(eg, ind), speed(ind, f), speed(eg, f)])
        bars.append((w, u / f if u and f else None, eg / ind if eg and ind else None))
    out = table(head, rows)
    out += ('\nkgen unfused: `kgen tune --no-fuse`, every stage its own loop nest (kernel), each tuned, at the '
            'same trials as the fused search. Speedups are each compiler over its own baseline (kgen fused over '
            'kgen unfused; TorchInductor over PyTorch eager); the last two columns compare times across tools.\n')
    return out, bars


def first_reaching(recs, goal, start):
    """(trials, seconds since start) at the first record whose median is <= goal."""
    for i, r in enumerate(recs):
        m = median_s(r)
        if m is not None and m <= goal:
            ts = r.get('time')
            return i + 1, (ts - start if isinstance(ts, (int, float)) and start else None)
    return None, None


def count(x):
    if x is None:
        return '—'
    if x == math.inf:
        return 'never'
    return f'{math.ceil(x):,}'


def amort_section(workloads, W):
    head = ['workload', 'trials to 95%', 'tuning time to 95%', 'tuning run (trials)', 'compile of the tuned kernel',
            'replay from the log', 'export + header compile', 'baseline', 'kgen', 'saving per execution',
            'break-even (a) tune', '(b) replay', '(c) header', 'TorchInductor compile (default / max-autotune)',
            'Inductor break-even (default / max-autotune)']
    rows = []
    for w in workloads:
        e = W[w]
        lg = e['fused_log']
        best = median_s(lg['best']) if lg['best'] else None
        run = lg['run']
        n95 = s95 = None
        if best:
            n95, s95 = first_reaching(lg['recs'], best / 0.95, run['start'] if run else None)
        wall = (run['end'] - run['start']) if run else None
        k = t(e['fused'])
        comp = e['fused']['compile'] if e['fused'] else None
        eg = torch_s(e['torch'], 'eager')
        base, bname = (eg, 'PyTorch eager') if eg else (t(e['naive']), 'kgen naive')
        save = base - k if base and k else None
        b = e['build']

        def even(cost):
            if cost is None or save is None:
                return None
            return math.inf if save <= 0 else max(1, cost / save)
        hdr = (b.get('export', 0) + b['header_cc']) if 'header_cc' in b else None
        ic, im = (e['torch'].get(m, {}) for m in ('compile', 'max-autotune'))
        ics, ims = ic.get('compile_s') if torch_s(e['torch'], 'compile') else None, \
            im.get('compile_s') if torch_s(e['torch'], 'max-autotune') else None

        def ind_even(cs, mode):
            tt = torch_s(e['torch'], mode)
            if cs is None or tt is None or eg is None:
                return None
            return math.inf if eg - tt <= 0 else max(1, cs / (eg - tt))
        rows.append([label(w), n95 if n95 else '—', f'{s95:.0f} s' if s95 is not None else '—',
                     f'{wall:.0f} s ({len(lg["recs"])})' if wall else '—',
                     f'{comp * 1e3:.0f} ms' if comp is not None else '—',
                     f"{b['replay']:.2f} s (compile {b.get('replay_compile', 0):.2f} s)" if 'replay' in b else '—',
                     f'{hdr:.2f} s (build time)' if hdr is not None else '—', f'{cell(base)} ({bname})', cell(k),
                     cell(save) if save and save > 0 else ('none' if save is not None else '—'),
                     count(even((wall or 0) + (comp or 0)) if wall else None),
                     count(even(b.get('replay_compile', b.get('replay')))),
                     ('1 (no compile at run time)' if save and save > 0 else count(even(0.0))) if hdr else '—',
                     f"{f'{ics:.1f} s' if ics is not None else '—'} / {f'{ims:.1f} s' if ims is not None else '—'}",
                     f"{count(ind_even(ics, 'compile'))} / {count(ind_even(ims, 'max-autotune'))}"])
    out = table(head, rows)
    out += ('\nTrials and time to 95%: the first measured schedule within 95% of the run\'s best (time counted from '
            'the start of `kgen tune`). Break-even: executions after which the one-time cost is paid back by the '
            'saving per execution against the baseline: (a) the whole tuning run plus the compile, (b) replaying the '
            'committed log at build time (re-apply, compile; the replay\'s own verification and timing are not '
            'needed at build time and not counted), (c) an exported header, compiled with the program that includes '
            'it: nothing is compiled at run time, so it pays from the first execution. TorchInductor\'s compile '
            'time is its first call minus a steady call; its saving is against PyTorch eager.\n')
    return out


def curves_section(workloads, W):
    head = ['workload', 'model', 'trials', 'best', 'trials to 95% of the better search', 'best after 1/4 of the trials']
    rows = []
    for w, e in W.items():
        if not e['random_log']['recs']:
            continue
        bests = [median_s(e[m + '_log']['best']) for m in ('fused', 'random') if e[m + '_log']['best']]
        goal = min(bests) / 0.95 if bests else None
        for m, name in (('fused', 'XGBoost'), ('random', 'random')):
            lg = e[m + '_log']
            c = lg['curve']
            b = median_s(lg['best']) if lg['best'] else None
            n95 = first_reaching(lg['recs'], goal, None)[0] if goal else None
            q = c[len(c) // 4 - 1] if len(c) >= 4 else None
            rows.append([label(w), name, len(lg['recs']), cell(b), n95 or 'not reached', cell(q)])
    return table(head, rows) if rows else '(no model-vs-random runs)\n'


def tvm_section(workloads, W):
    """kgen against TVM MetaSchedule at the same trial budget, with both tuning times."""
    head = ['workload', 'kgen tuned', 'kgen tuning time (trials)', 'TVM MetaSchedule', 'TVM tuning time (trials, '
            'valid)', 'TVM / kgen (>1: kgen faster)', 'kgen best at TVM\'s trials', 'TVM best after its trials']
    rows = []
    for w in workloads:
        r = W[w].get('tvm') or {}
        if not r:
            continue
        k = t(W[w]['fused'])
        lg = W[w]['fused_log']
        run = lg['run']
        kt = f"{run['end'] - run['start']:.0f} s ({len(lg['recs'])})" if run else '—'
        tv = tvm_s(r)
        if r.get('error'):
            tcell = 'error: ' + str(r['error'])[:80]
        elif tv is None and r.get('verify') not in (None, 'ok'):
            tcell = f"— (output {r.get('verify')}, max rel. error {r.get('max_rel_err', float('nan')):.2g})"
        else:
            tcell = cell(tv)
        best, _ = tvm_curve(r)
        n = len(best)
        kn = lg['curve'][min(n, len(lg['curve'])) - 1] if n and lg['curve'] else None
        tt = f"{r['tune_s']:.0f} s ({r.get('trials', '?')}, {r.get('valid', '?')})" \
            if isinstance(r.get('tune_s'), (int, float)) else '—'
        rows.append([label(w), cell(k), kt, tcell, tt, ratio(tv, k), cell(kn), cell(best[-1] if best else None)])
    if not rows:
        return '(not run: no TVM venv, or TVM_WORKLOADS empty)\n'
    out = table(head, rows)
    mc = next((W[w]['tvm'].get('mcpu') for w in workloads if W[w].get('tvm', {}).get('mcpu')), None)
    out += ('\nTVM MetaSchedule (`bench/tvm_peers.py`, apache-tvm from PyPI, LLVM target' +
            (f' mcpu={mc}' if mc else '') + ', XGBoost cost model, evolutionary search) tunes the same workload '
            'with the same trial budget as kgen; its best kernel is timed by its time_evaluator (median of repeats) '
            'and checked against kgen\'s saved output. Tuning times are wall times of the tuning run alone (kgen '
            'tune; MetaSchedule\'s tune_tir, not counting its import). The last two columns are each tuner\'s own '
            'best measurement during tuning after the same number of trials. MetaSchedule measures its '
            'candidates in rounds (64 a round, `--per-iter`) and logs them when a round ends, so on the wall-time '
            'plot each of its rounds is one vertical step at that round\'s end (at 64 trials, one step at the end '
            'of the run); the plot against trials shows how its best grew candidate by candidate.\n')
    return out


def dynamic_section(logdir):
    d = os.path.join(logdir, 'dynamic')
    out = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.startswith('dynamic-shapes-') and f.endswith('.md'):
            txt = read_text(os.path.join(d, f)) or ''
            # the kgen tables, without the per-size detail (in the raw outputs)
            for part in re.split(r'\n(?=## )', txt)[1:]:
                out.append('#' + part.split('\nSteady state per size')[0].rstrip() + '\n')
    rows = []
    for w, res in torch_dynamic(d):
        modes = {m.get('mode'): m for m in res.get('modes') or [] if isinstance(m, dict)}
        static = modes.get('static')
        for mode, r in modes.items():
            if r.get('error'):
                rows.append([w, mode, r['error'], '', '', '', ''])
                continue
            g = steady_geomean(r)
            gs = steady_geomean(static) if static and not static.get('error') else None
            cut = (1 - r['total_s'] / static['total_s']) * 100 if mode != 'static' and gs and static.get('total_s') \
                else None
            rows.append([w, mode, cell(r.get('total_s')), r.get('graphs', '—'), cell(g),
                         f'{cut:.1f}%' if cut is not None else '—', speed(g, gs) if mode != 'static' and gs else '—'])
    if rows:
        out.append('### PyTorch on the same sequence\n\n' + table(
            ['workload', 'mode', 'cumulative cost', 'graphs compiled', 'steady state (geomean per call)',
             'cut vs static', 'steady state vs static'], rows))
        out.append('eager: no compile; static: `torch.compile(dynamic=False)`, recompiling at each new shape; '
                   'dynamic: `torch.compile(dynamic=True)`. Each call\'s wall time, compiles included, '
                   'synchronized; the steady state is the geometric mean over the distinct sizes of each size\'s '
                   'lowest median per call.\n')
    return '\n'.join(out) if out else '(not run)\n'


def torch_dynamic(d):
    """(workload, result) of bench/torch_peers.py dynamic's JSON files in the dynamic experiment's folder."""
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.endswith('.torch.json'):
            try:
                with open(os.path.join(d, f)) as fh:
                    res = json.load(fh)
            except (OSError, ValueError):
                continue
            if isinstance(res, dict):
                yield f[:-len('.torch.json')], res


def steady_geomean(r):
    st = [v.get('median_ms') for v in (r.get('steady') or {}).values() if isinstance(v, dict)]
    st = [x for x in st if isinstance(x, (int, float)) and x > 0]
    return math.exp(sum(math.log(x / 1e3) for x in st) / len(st)) if st else None


# ---- plots

def plots(a, target, W, bars):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        return ['(no matplotlib: no plots)']
    stem = a.out[:-3] if a.out.endswith('.md') else a.out
    made = []
    cw = [w for w, e in W.items() if e['fused_log']['recs'] and (e['random_log']['recs'] or tvm_curve(e['tvm'])[0])]
    if cw:
        fig, axs = plt.subplots(1, len(cw), figsize=(4.5 * len(cw), 3.6), squeeze=False)
        for ax, w in zip(axs[0], cw):
            fl = next((float(r['result'].get('flops') or 0) for r in W[w]['fused_log']['recs'] if median_s(r)), 0)
            for m, name in (('fused', 'kgen XGBoost model'), ('random', 'kgen random')):
                lg = W[w][m + '_log']
                if lg['recs']:
                    ys = [curve_y(c, fl) for c in lg['curve']]
                    ax.plot(range(1, len(ys) + 1), ys, label=name)
            tb = tvm_curve(W[w]['tvm'])[0]
            if tb:
                ys = [curve_y(c, fl) for c in tb]
                ax.plot(range(1, len(ys) + 1), ys, label='TVM MetaSchedule')
            ax.set_title(label(w), fontsize=9)
            ax.set_xlabel('trials')
            ax.set_ylabel('best GFLOP/s' if fl else 'best time (ms)')
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(stem + '-curves.png', dpi=110)
        made.append(stem + '-curves.png')
    made += tvm_wall_plot(plt, stem, W)
    if bars:
        fig, ax = plt.subplots(figsize=(9, 3.8))
        xs = range(len(bars))
        ax.bar([x - 0.2 for x in xs], [b[1] or 0 for b in bars], 0.4, label='kgen fused / kgen unfused')
        ax.bar([x + 0.2 for x in xs], [b[2] or 0 for b in bars], 0.4, label='TorchInductor / PyTorch eager')
        ax.axhline(1.0, color='gray', lw=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([label(b[0]).split(' (')[0] for b in bars], rotation=20, fontsize=8)
        ax.set_ylabel('speedup over own baseline')
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(stem + '-fusion.png', dpi=110)
        made.append(stem + '-fusion.png')
    d = os.path.join(a.logdir, 'dynamic')
    series = []
    for w in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        calls = os.path.join(d, w, 'calls.tsv')
        if not os.path.exists(calls):
            continue
        cum = {}
        for line in (read_text(calls) or '').splitlines()[1:]:
            f = line.split('\t')
            if len(f) >= 7:
                cum.setdefault(f[2], []).append(float(f[6]))
        for tw, res in torch_dynamic(d):
            for r in res.get('modes') or [] if tw == w else []:
                if isinstance(r, dict) and isinstance(r.get('cumulative_s'), list) and not r.get('error'):
                    cum['torch ' + str(r.get('mode'))] = r['cumulative_s']
        series.append((w, cum))
    if series:
        fig, axs = plt.subplots(1, len(series), figsize=(5.5 * len(series), 3.8), squeeze=False)
        for ax, (w, cum) in zip(axs[0], series):
            for k, ys in cum.items():
                ax.plot(range(1, len(ys) + 1), ys, label=('kgen ' + k) if not k.startswith('torch') else k)
            ax.set_yscale('log')
            ax.set_title(w, fontsize=9)
            ax.set_xlabel('call')
            ax.set_ylabel('cumulative seconds')
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(stem + '-dynamic.png', dpi=110)
        made.append(stem + '-dynamic.png')
    return made


def curve_y(c, fl):
    """A best-so-far time as the curve plot shows it: GFLOP/s when the workload counts its flops, else ms."""
    if not c:
        return float('nan')
    return fl / c / 1e9 if fl else c * 1e3


def tvm_wall_plot(plt, stem, W):
    """Best-so-far against tuning wall time, kgen (fused search) and TVM MetaSchedule, for the workloads TVM
    tuned: what each tuner's trials cost."""
    tw = [w for w, e in W.items() if tvm_curve(e['tvm'])[0] and e['fused_log']['recs'] and e['fused_log']['run']]
    if not tw:
        return []
    fig, axs = plt.subplots(1, len(tw), figsize=(4.5 * len(tw), 3.6), squeeze=False)
    for ax, w in zip(axs[0], tw):
        lg = W[w]['fused_log']
        fl = next((float(r['result'].get('flops') or 0) for r in lg['recs'] if median_s(r)), 0)
        start = lg['run']['start']
        pts = [(r.get('time') - start, curve_y(c, fl)) for r, c in zip(lg['recs'], lg['curve'])
               if isinstance(r.get('time'), (int, float)) and c]
        if pts:
            ax.step([p[0] for p in pts], [p[1] for p in pts], where='post', label='kgen')
        best, wall = tvm_curve(W[w]['tvm'])
        pts = [(x, curve_y(c, fl)) for c, x in zip(best, wall) if c and x is not None]
        if pts:
            # markers: MetaSchedule measures a round of candidates at once, so a round's trials share one time
            ax.step([p[0] for p in pts], [p[1] for p in pts], where='post', marker='o', ms=3, label='TVM MetaSchedule')
        ax.set_title(label(w), fontsize=9)
        ax.set_xlabel('tuning wall time (s)')
        ax.set_ylabel('best GFLOP/s' if fl else 'best time (ms)')
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(stem + '-tvm.png', dpi=110)
    return [stem + '-tvm.png']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--logdir', required=True)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    target, workloads, W, peers, copy = load(a)
    if not workloads:
        sys.exit(f'suite_report: {a.logdir} holds no workloads.txt: not a bench/suite.sh LOGDIR')
    machine = (read_text(os.path.join(a.logdir, 'machine.txt')) or 'unknown machine').strip()
    fus, bars = fusion_section(target, workloads, W)
    made = plots(a, target, W, bars)
    day = datetime.date.today().isoformat()
    cmds = (read_text(os.path.join(a.logdir, 'commands.txt')) or '').strip()
    cut = sorted(f[:-4] for f in os.listdir(a.logdir)
                 if f.endswith('.txt') and (read_text(os.path.join(a.logdir, f)) or '').startswith('not run: out of time'))
    # stopped by a time limit (bench/suite.sh's "cut: " line, or kgen's own --timeout): no figure, and no wrong answer
    timed_out = sorted(f[:-4] for f in os.listdir(a.logdir)
                       if f.endswith('.txt') and re.search(r'^(cut: |run: FAILED \(timeout\))',
                                                           read_text(os.path.join(a.logdir, f)) or '', re.M))
    doc = [f'# kgen benchmark suite ({target}), {day}\n',
           f'Machine: {machine.replace(chr(10), "; ")}.\n',
           f'Command: `bench/suite.sh` (`make bench` on the CPU; `bench/device-check.sh` on a GPU); raw outputs in '
           f'`{a.logdir}`; every command it ran is listed at the end.\n',
           (f'Not run, out of time (the run\'s DEADLINE): {", ".join(cut)}.\n' if cut else ''),
           (f'Cut by a time limit (no figure; not a wrong answer): {", ".join(timed_out)}.\n' if timed_out else ''),
           '## 1. kgen against the peers\n', suite_section(target, workloads, W, peers, copy),
           '## 2. Fusion\n', fus,
           '## 3. Amortization of tuning and compilation\n', amort_section(workloads, W),
           '## 4. Tuning curves: XGBoost model vs random search, equal trials\n', curves_section(workloads, W),
           '## 5. Shape transitions\n', dynamic_section(a.logdir),
           '## 6. TVM MetaSchedule at equal trials\n', tvm_section(workloads, W),
           '## Plots\n', '\n'.join(f'![{os.path.basename(p)}]({os.path.basename(p)})' for p in made) + '\n',
           '## Commands\n', '```\n' + cmds + '\n```\n']
    with open(a.out, 'w') as f:
        f.write('\n'.join(doc))
    print(f'suite_report: wrote {a.out}' + ''.join(f', {p}' for p in made))


if __name__ == '__main__':
    main()
