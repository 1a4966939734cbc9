#!/usr/bin/env python3
"""TVM MetaSchedule peer of kgen's benchmark suite: the suite's workloads written in TVM's tensor expressions
(TE -> PrimFunc), tuned by MetaSchedule for this CPU (LLVM target) with the same trial budget as kgen, the best
kernel timed and checked against kgen's saved output. MetaSchedule is the tuner of kgen's own kind (a search over
schedules guided by a learned cost model), so its best-so-far curve goes beside kgen's.

  tvm_peers.py host-cpu
  tvm_peers.py time WORKLOAD --trials N [-D NAME=VALUE]... [--threads N] [--per-iter 64] [--seed 1]
               [--work-dir DIR] [--verify DIR] [--rtol 1e-4] [--small] [--mcpu CPU] [--repeat 10]
               [--min-repeat-ms 100] [--build-timeout 120] [--run-timeout 60] [--out FILE.json]
  tvm_peers.py curve WORK_DIR [--start UNIX_SECONDS]

WORKLOAD is a name or a .te path: matmul, conv2d_3x3 (stride 1, the suite's conv2d), conv2d (stride 2, as
te/lib/conv2d.te), softmax, layernorm, rmsnorm, bias_gelu_residual, reduce_rows, mlp_gelu, attention; each
computes what its .te file does, stage for stage. Sizes not given with -D come from the --verify files' shapes,
else the .te file's "# bench-sizes:" line ("# sizes:" with --small).

host-cpu: imports MetaSchedule and prints the CPU name LLVM detects (the target's mcpu); exit 1 when it cannot.

time: tunes (--trials 0: no tuning, TVM's default schedule) with `tune_tir` (XGBoost cost model, evolutionary search, --per-iter candidates per round) for
--trials trials in --work-dir (default: a temporary folder), target {"kind": "llvm", "mcpu": <host cpu>,
"num-cores": --threads}, TVM_NUM_THREADS=--threads (TVM's runtime otherwise uses half the CPUs on x86). The best
record is compiled and timed with time_evaluator (--repeat samples of at least --min-repeat-ms each: median, min,
max per call), and its output checked against kgen's (--verify DIR, from `kgen run ... --save DIR`) or, without it,
against numpy in float64, with kgen's rule (runtime/verify.c): per element |got - ref| / max(|ref|, 1e-2 max|ref|)
<= rtol, rtol scaled by sqrt(L / 256) for a reduction of L > 256 terms. tune_s is the wall time of tune_tir alone;
importing the tuner is not counted (the import of the tensor intrinsics of the non-x86 targets, over a minute of
CPU on these machines and unused by an x86 LLVM target, is skipped).

curve (no TVM needed): the best-so-far curve of a work folder: MetaSchedule's records
(database_tuning_record.json, one line per measured candidate in trial order, its run_secs; a candidate that
failed to build or run has 1e10 s or none) and the trial lines of its task log (logs/*task_0*.log, a timestamp per
trial) for the wall time of each trial since --start.

Output: a last line on stdout, after MetaSchedule's own progress tables ("tvm WORKLOAD key=value ..." or "tvm WORKLOAD error=\"...\""); --out FILE.json gets a
dict with the same fields and the curves (best_s: best mean seconds after each trial, null before the first
valid one; wall_s: seconds since the tuning started at each trial, null where the log has none). Exit status: 0; 1
when the output did not verify or tuning found no valid kernel; 2 on a usage error; 3 when TVM is missing.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
import types

from peer_sizes import UsageError, parse_binds, te_sizes, tolerance

FAILED_S = 1e9  # MetaSchedule records a candidate that did not build or run as 1e10 s

tvm = None
te = None
np = None


# ---- the best-so-far curve of a work folder (no TVM needed) -----------------------------------------------------

def read_records(work_dir):
    """Mean run seconds of each measured candidate, in the order they were measured (None: failed)."""
    path = os.path.join(work_dir, 'database_tuning_record.json')
    out = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            secs = rec[1][1]
        except (ValueError, IndexError, TypeError, KeyError):
            out.append(None)
            continue
        if not isinstance(secs, list) or not secs or not all(isinstance(s, (int, float)) for s in secs):
            out.append(None)
            continue
        mean = sum(float(s) for s in secs) / len(secs)
        out.append(mean if 0 < mean < FAILED_S else None)
    return out


def best_so_far(secs):
    best, out = None, []
    for s in secs:
        if s is not None and (best is None or s < best):
            best = s
        out.append(best)
    return out


TRIAL_RE = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](\d+))? \[\w+\] \[[^\]]*\] '
                      r'\[Task #\d+: [^\]]*\] Trial #(\d+):')


def read_trial_times(work_dir):
    """{trial number (from 1): Unix time} from the task logs' "Trial #N:" lines (local time, as the log writes it)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(work_dir, 'logs', '*task_0*.log'))):
        try:
            with open(path, errors='replace') as f:
                for line in f:
                    m = TRIAL_RE.match(line)
                    if m:
                        t = time.mktime(time.strptime(m.group(1), '%Y-%m-%d %H:%M:%S'))
                        if m.group(2):
                            t += float('0.' + m.group(2))
                        out.setdefault(int(m.group(3)), t)
        except OSError:
            continue
    return out


def work_dir_curve(work_dir, start=None):
    """{'trials', 'valid', 'best_s', 'wall_s'} of a MetaSchedule work folder."""
    secs = read_records(work_dir)
    times = read_trial_times(work_dir)
    wall = [(times[i + 1] - start if start is not None else times[i + 1]) if (i + 1) in times else None
            for i in range(len(secs))]
    return {'trials': len(secs), 'valid': sum(s is not None for s in secs), 'best_s': best_so_far(secs),
            'wall_s': wall}


# ---- sizes -------------------------------------------------------------------------------------------------------

def conv_out(n, stride):
    return (n + 2 - 3) // stride + 1


def w_matmul(s):
    A = te.placeholder((s['M'], s['K']), name='A')
    B = te.placeholder((s['K'], s['N']), name='B')
    k = te.reduce_axis((0, s['K']), 'k')
    C = te.compute((s['M'], s['N']), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name='C')
    return [A, B], C


def conv(s, stride):
    N, C, H, W, F = s['N'], s['C'], s['H'], s['W'], s['F']
    X = te.placeholder((N, C, H, W), name='X')
    K = te.placeholder((F, C, 3, 3), name='K')
    P = te.compute((N, C, H + 2, W + 2), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h <= H, w >= 1, w <= W), X[n, c, h - 1, w - 1], tvm.tirx.const(0.0, 'float32')), name='P')
    c = te.reduce_axis((0, C), 'c')
    r = te.reduce_axis((0, 3), 'r')
    q = te.reduce_axis((0, 3), 'q')
    Y = te.compute((N, F, conv_out(H, stride), conv_out(W, stride)), lambda n, f, y, x: te.sum(
        P[n, c, y * stride + r, x * stride + q] * K[f, c, r, q], axis=[c, r, q]), name='Y')
    return [X, K], Y


def w_conv2d_3x3(s):
    return conv(s, 1)


def w_conv2d(s):
    return conv(s, 2)


def w_softmax(s):
    N, D = s['N'], s['D']
    X = te.placeholder((N, D), name='X')
    j = te.reduce_axis((0, D), 'j')
    m = te.compute((N,), lambda i: te.max(X[i, j], axis=j), name='m')
    e = te.compute((N, D), lambda i, j: te.exp(X[i, j] - m[i]), name='e')
    j2 = te.reduce_axis((0, D), 'j2')
    z = te.compute((N,), lambda i: te.sum(e[i, j2], axis=j2), name='z')
    Y = te.compute((N, D), lambda i, j: e[i, j] / z[i], name='Y')
    return [X], Y


def w_layernorm(s):
    N, D = s['N'], s['D']
    X = te.placeholder((N, D), name='X')
    gamma = te.placeholder((D,), name='gamma')
    beta = te.placeholder((D,), name='beta')
    j = te.reduce_axis((0, D), 'j')
    mu = te.compute((N,), lambda i: te.sum(X[i, j], axis=j), name='mu')
    xc = te.compute((N, D), lambda i, j: X[i, j] - mu[i] / float(D), name='xc')
    j2 = te.reduce_axis((0, D), 'j2')
    v = te.compute((N,), lambda i: te.sum(xc[i, j2] * xc[i, j2], axis=j2), name='v')
    Y = te.compute((N, D), lambda i, j: xc[i, j] * te.rsqrt(v[i] / float(D) + 1e-5) * gamma[j] + beta[j], name='Y')
    return [X, gamma, beta], Y


def w_rmsnorm(s):
    N, D = s['N'], s['D']
    X = te.placeholder((N, D), name='X')
    gamma = te.placeholder((D,), name='gamma')
    j = te.reduce_axis((0, D), 'j')
    ms = te.compute((N,), lambda i: te.sum(X[i, j] * X[i, j], axis=j), name='ms')
    Y = te.compute((N, D), lambda i, j: X[i, j] * te.rsqrt(ms[i] / float(D) + 1e-6) * gamma[j], name='Y')
    return [X, gamma], Y


def gelu(h):
    return 0.5 * h * (1.0 + te.erf(h * 0.7071067811865476))


def w_bias_gelu_residual(s):
    N, D = s['N'], s['D']
    X = te.placeholder((N, D), name='X')
    bias = te.placeholder((D,), name='bias')
    R = te.placeholder((N, D), name='R')
    h = te.compute((N, D), lambda i, j: X[i, j] + bias[j], name='h')
    Y = te.compute((N, D), lambda i, j: gelu(h[i, j]) + R[i, j], name='Y')
    return [X, bias, R], Y


def w_reduce_rows(s):
    X = te.placeholder((s['N'], s['D']), name='X')
    j = te.reduce_axis((0, s['D']), 'j')
    Y = te.compute((s['N'],), lambda i: te.sum(X[i, j], axis=j), name='Y')
    return [X], Y


def w_mlp_gelu(s):
    M, K, N = s['M'], s['K'], s['N']
    X = te.placeholder((M, K), name='X')
    W = te.placeholder((K, N), name='W')
    b = te.placeholder((N,), name='b')
    k = te.reduce_axis((0, K), 'k')
    t = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name='t')
    Y = te.compute((M, N), lambda i, j: gelu(t[i, j] + b[j]), name='Y')
    return [X, W, b], Y


def w_attention(s):
    B, S, T, D, E = s['B'], s['S'], s['T'], s['D'], s['E']
    Q = te.placeholder((B, S, D), name='Q')
    K = te.placeholder((B, T, D), name='K')
    V = te.placeholder((B, T, E), name='V')
    d = te.reduce_axis((0, D), 'd')
    q = te.compute((B, S, T), lambda b, i, j: te.sum(Q[b, i, d] * K[b, j, d], axis=d), name='q')
    sc = te.compute((B, S, T), lambda b, i, j: q[b, i, j] * (1.0 / math.sqrt(D)), name='s')
    j = te.reduce_axis((0, T), 'j')
    m = te.compute((B, S), lambda b, i: te.max(sc[b, i, j], axis=j), name='m')
    e = te.compute((B, S, T), lambda b, i, j: te.exp(sc[b, i, j] - m[b, i]), name='e')
    j2 = te.reduce_axis((0, T), 'j2')
    z = te.compute((B, S), lambda b, i: te.sum(e[b, i, j2], axis=j2), name='z')
    j3 = te.reduce_axis((0, T), 'j3')
    o = te.compute((B, S, E), lambda b, i, c: te.sum(e[b, i, j3] * V[b, j3, c], axis=j3), name='o')
    O = te.compute((B, S, E), lambda b, i, c: o[b, i, c] / z[b, i], name='O')
    return [Q, K, V], O


# the numpy float64 reference (when there is no --verify folder) and the longest reduction (kgen's tolerance grows
# past 256 terms); flops for the GFLOP/s figure (None: memory-bound)
def erf64(x):
    import math as m
    return np.vectorize(m.erf)(x)


def gelu64(h):
    return 0.5 * h * (1.0 + erf64(h / math.sqrt(2.0)))


def ref_conv(X, K, stride):
    N, C, H, W = X.shape
    F = K.shape[0]
    P = np.zeros((N, C, H + 2, W + 2))
    P[:, :, 1:H + 1, 1:W + 1] = X
    Ho, Wo = conv_out(H, stride), conv_out(W, stride)
    Y = np.zeros((N, F, Ho, Wo))
    for r in range(3):
        for q in range(3):
            win = P[:, :, r:r + stride * (Ho - 1) + 1:stride, q:q + stride * (Wo - 1) + 1:stride]
            Y += np.einsum('nchw,fc->nfhw', win, K[:, :, r, q])
    return Y


def ref_softmax(X):
    e = np.exp(X - X.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


WORKLOADS = {
    'matmul': dict(build=w_matmul, ref=lambda A, B: A @ B, red=lambda s: s['K'],
                   flops=lambda s: 2 * s['M'] * s['N'] * s['K']),
    'conv2d_3x3': dict(build=w_conv2d_3x3, ref=lambda X, K: ref_conv(X, K, 1), red=lambda s: 9 * s['C'],
                       flops=lambda s: 2 * s['N'] * s['F'] * s['H'] * s['W'] * s['C'] * 9),
    'conv2d': dict(build=w_conv2d, ref=lambda X, K: ref_conv(X, K, 2), red=lambda s: 9 * s['C'],
                   flops=lambda s: 2 * s['N'] * s['F'] * conv_out(s['H'], 2) * conv_out(s['W'], 2) * s['C'] * 9),
    'softmax': dict(build=w_softmax, ref=ref_softmax, red=lambda s: s['D'], flops=None),
    'layernorm': dict(build=w_layernorm, red=lambda s: s['D'], flops=None,
                      ref=lambda X, g, b: (X - X.mean(-1, keepdims=True)) / np.sqrt(
                          X.var(-1, keepdims=True) + 1e-5) * g + b),
    'rmsnorm': dict(build=w_rmsnorm, red=lambda s: s['D'], flops=None,
                    ref=lambda X, g: X / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6) * g),
    'bias_gelu_residual': dict(build=w_bias_gelu_residual, red=lambda s: 1, flops=None,
                               ref=lambda X, b, R: gelu64(X + b) + R),
    'reduce_rows': dict(build=w_reduce_rows, ref=lambda X: X.sum(-1), red=lambda s: s['D'], flops=None),
    'mlp_gelu': dict(build=w_mlp_gelu, ref=lambda X, W, b: gelu64(X @ W + b), red=lambda s: s['K'],
                     flops=lambda s: 2 * s['M'] * s['N'] * s['K']),
    'attention': dict(build=w_attention, red=lambda s: max(s['D'], s['T']),
                      ref=lambda Q, K, V: ref_softmax(Q @ K.transpose(0, 2, 1) / math.sqrt(Q.shape[-1])) @ V,
                      flops=lambda s: 2 * s['B'] * s['S'] * s['T'] * (s['D'] + s['E'])),
}


# ---- verification (kgen's rule, runtime/verify.c) ---------------------------------------------------------------

def rel_error(got, ref):
    got = np.asarray(got, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if got.shape != ref.shape or not np.isfinite(got).all() or not np.isfinite(ref).all():
        return math.inf
    if ref.size == 0:
        return 0.0
    maxabs = float(np.abs(ref).max())
    den = np.maximum(np.abs(ref), 1e-2 * maxabs if maxabs > 0 else 1e-30)
    return float((np.abs(got - ref) / den).max())


# ---- TVM ---------------------------------------------------------------------------------------------------------

def import_tvm(threads):
    """Imports TVM and MetaSchedule with TVM_NUM_THREADS set (read when the runtime starts its pool)."""
    global tvm, te
    if threads:
        os.environ['TVM_NUM_THREADS'] = str(threads)
    # MetaSchedule's tuning context imports the tensor intrinsics of every target it knows; CUDA's alone take over
    # a minute of CPU on these machines, and an x86 LLVM target can use only x86's. The others are left empty.
    for sub in ('cuda', 'rocm', 'hexagon', 'arm_cpu', 'riscv_cpu', 'metal'):
        sys.modules.setdefault('tvm.s_tir.tensor_intrin.' + sub, types.ModuleType('tvm.s_tir.tensor_intrin.' + sub))
    import tvm as tvm_mod
    from tvm import te as te_mod
    import tvm.s_tir.meta_schedule  # noqa: F401
    import tvm.s_tir.tensor_intrin.x86  # noqa: F401
    tvm, te = tvm_mod, te_mod


def host_cpu():
    """The CPU name LLVM detects on this machine (what -mcpu=native picks), or 'generic' when it reports none."""
    from tvm.target import codegen
    try:
        cpu = str(codegen.llvm_get_system_cpu())
    except Exception:
        cpu = ''
    return cpu if cpu and cpu != 'generic' else 'generic'


def build_in_worker(mod, target, _params):
    """MetaSchedule's default build without its import of every target's tensor intrinsics (a minute of CPU per
    build batch here, since the builder starts fresh worker processes each batch: past its timeout)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def to_tensor(a, dev):
    return tvm.runtime.tensor(np.ascontiguousarray(a, dtype=np.float32), dev)


def cmd_time(a):
    name = os.path.basename(a.workload)[:-3] if a.workload.endswith('.te') else a.workload
    if name not in WORKLOADS:
        raise UsageError("unknown workload '%s' (one of %s)" % (name, ', '.join(WORKLOADS)))
    if a.trials < 0 or a.threads < 1 or a.per_iter < 1 or a.repeat < 1:
        raise UsageError('--threads, --per-iter and --repeat must be positive, --trials at least 0')
    w = WORKLOADS[name]
    given = parse_binds(a.D)
    saved = None
    r = dict(workload=name, threads=a.threads, trials_budget=a.trials)
    try:
        import numpy as np_mod
        global np
        np = np_mod
    except ImportError as e:
        return unavailable(r, a, e)
    try:
        import_tvm(a.threads)
    except Exception as e:
        return unavailable(r, a, e)
    r['tvm'] = tvm.__version__
    # the sizes: -D, else the saved files' shapes, else the .te file's
    ins, out = w['build']({n: 8 for n in size_vars(w)})
    names = [t.op.name for t in ins] + [out.op.name]
    if a.verify:
        saved = {}
        for n in names:
            p = os.path.join(a.verify, n + '.npy')
            if not os.path.exists(p):
                raise UsageError('--verify %s: no %s.npy' % (a.verify, n))
            saved[n] = np.load(p)
    sizes = dict(te_sizes(name, a.small))
    if saved is not None:
        sizes.update(sizes_from_shapes(w, saved))
    sizes.update(given)
    missing = [n for n in size_vars(w) if n not in sizes]
    if missing:
        raise UsageError('size %s of %s is not bound (use -D %s=VALUE)' % (missing[0], name, missing[0]))
    sizes = {k: sizes[k] for k in size_vars(w)}
    ins, out = w['build'](sizes)
    r['sizes'] = ','.join('%s=%d' % kv for kv in sizes.items())
    if saved is not None:
        for t in ins + [out]:
            want = tuple(int(x) for x in t.shape)
            if saved[t.op.name].shape != want:
                raise UsageError('--verify %s: %s.npy has shape %s, want %s' % (
                    a.verify, t.op.name, saved[t.op.name].shape, want))
        args = [saved[t.op.name] for t in ins]
        ref = saved[out.op.name].astype(np.float64)
        r['ref'] = 'kgen'
    else:
        rng = np.random.default_rng(a.seed)
        args = [rng.uniform(-1, 1, tuple(int(x) for x in t.shape)).astype(np.float32) for t in ins]
        ref = w['ref'](*(x.astype(np.float64) for x in args))
        r['ref'] = 'numpy-f64'

    from tvm.s_tir import meta_schedule as ms
    mod = tvm.IRModule({'main': te.create_prim_func(ins + [out])})
    r['mcpu'] = a.mcpu or host_cpu()
    target = tvm.target.Target({'kind': 'llvm', 'mcpu': r['mcpu'], 'num-cores': a.threads})
    tmp = None
    work_dir = a.work_dir
    if not work_dir:
        tmp = tempfile.TemporaryDirectory(prefix='tvm_peers_')
        work_dir = tmp.name
    os.makedirs(work_dir, exist_ok=True)
    r['work_dir'] = work_dir
    if a.trials == 0:  # no tuning: TVM's default schedule (the loop nests as written), as a check of the workload
        t1 = time.time()
        lib = tvm.tirx.build(mod, target=target)
        r.update(trials=0, valid=0, best_s=[], wall_s=[], tune_s=0.0, compile_s=time.time() - t1)
        return measure(r, a, w, sizes, lib, args, out, ref, tmp)
    builder = ms.builder.LocalBuilder(max_workers=a.threads, timeout_sec=a.build_timeout, f_build=build_in_worker)
    runner = ms.runner.LocalRunner(timeout_sec=a.run_timeout)
    t0 = time.time()
    try:
        db = ms.tune_tir(mod=mod, target=target, work_dir=work_dir, max_trials_global=a.trials,
                         num_trials_per_iter=min(a.per_iter, a.trials), seed=a.seed, builder=builder, runner=runner,
                         num_tuning_cores=a.threads)
    except Exception as e:
        r['error'] = one_line('tuning: %s: %s' % (type(e).__name__, e))
        return finish(r, a, 1)
    r['tune_s'] = time.time() - t0
    c = work_dir_curve(work_dir, t0)
    r.update(trials=c['trials'], valid=c['valid'], best_s=c['best_s'], wall_s=c['wall_s'])
    t1 = time.time()
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        r['error'] = 'no valid kernel in %d trials' % c['trials']
        return finish(r, a, 1)
    lib = tvm.tirx.build(sch.mod, target=target)
    r['compile_s'] = time.time() - t1
    return measure(r, a, w, sizes, lib, args, out, ref, tmp)


def measure(r, a, w, sizes, lib, args, out, ref, tmp):
    """Times the built kernel and checks its output: the result's exit status."""
    dev = tvm.cpu(0)
    targs = [to_tensor(x, dev) for x in args]
    tout = tvm.runtime.tensor(np.zeros(tuple(int(x) for x in out.shape), dtype=np.float32), dev)
    lib['main'](*targs, tout)
    got = tout.numpy()
    ev = lib.time_evaluator('main', dev, number=1, repeat=a.repeat, min_repeat_ms=a.min_repeat_ms)
    ms_ = [x * 1e3 for x in ev(*targs, tout).results]
    med = statistics.median(ms_)
    r.update(median_ms=med, min_ms=min(ms_), max_ms=max(ms_), samples=len(ms_), samples_ms=ms_)
    nbytes = 4 * (sum(x.size for x in args) + got.size)
    r['gbps'] = nbytes / (med * 1e-3) / 1e9
    if w['flops']:
        r['gflops'] = w['flops'](sizes) / (med * 1e-3) / 1e9
    err = rel_error(got, ref)
    tol = tolerance(a.rtol, w['red'](sizes))
    r.update(verify='ok' if err <= tol else 'mismatch', max_rel_err=err, tol=tol)
    if tmp is not None:
        tmp.cleanup()
        r['work_dir'] = None
    return finish(r, a, 0 if r['verify'] == 'ok' else 1)


def size_vars(w):
    """The size names a workload's builder reads, in the order it reads them."""
    seen = []

    class Rec(dict):
        def __getitem__(self, k):
            if k not in seen:
                seen.append(k)
            return 8
    w['build'](Rec())
    return seen


def sizes_from_shapes(w, saved):
    """Binds the size names to the saved arrays' dimensions, by building the workload with named sizes."""
    out = {}
    names = size_vars(w)
    # build with distinct primes per size so each dimension names its size unambiguously
    primes = [1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049, 1051, 1061, 1063, 1069]
    probe = {n: primes[i] for i, n in enumerate(names)}
    ins, o = w['build'](probe)
    back = {v: k for k, v in probe.items()}
    for t in ins + [o]:
        arr = saved[t.op.name]
        for dim, got in zip((int(x) for x in t.shape), arr.shape):
            if dim in back:
                out.setdefault(back[dim], int(got))
    return out


def unavailable(r, a, e):
    r['error'] = one_line('unavailable: %s: %s' % (type(e).__name__, e))
    finish(r, a, 3)
    return 3


LINE_ORDER = ('sizes', 'median_ms', 'min_ms', 'max_ms', 'tune_s', 'compile_s', 'trials', 'valid', 'trials_budget',
              'gflops', 'gbps', 'verify', 'max_rel_err', 'tol', 'ref', 'threads', 'mcpu', 'tvm')


def finish(r, a, status):
    best = [b for b in r.get('best_s') or [] if b is not None]
    if 'error' in r:
        line = 'tvm %s error="%s"' % (r['workload'], r['error'])
    else:
        line = 'tvm %s ' % r['workload'] + ' '.join(
            '%s=%s' % (k, ('%.6g' % r[k]) if isinstance(r[k], float) else r[k]) for k in LINE_ORDER if k in r)
        if best:
            line += ' best_tuned_ms=%.6g' % (best[-1] * 1e3)
    print(line, flush=True)
    if a.out:
        tmp = a.out + '.tmp'
        with open(tmp, 'w') as f:
            json.dump(r, f, indent=1)
            f.write('\n')
        os.replace(tmp, a.out)
    return status


def one_line(msg):
    return ' '.join(str(msg).split()).replace('"', "'")[:400]


def cmd_host_cpu(a):
    try:
        import_tvm(None)
        print(host_cpu())
    except Exception as e:
        print('tvm_peers.py: cannot import MetaSchedule: %s' % one_line(e), file=sys.stderr)
        return 1
    return 0


def cmd_curve(a):
    if not os.path.isdir(a.work_dir):
        raise UsageError('%s is not a folder' % a.work_dir)
    c = work_dir_curve(a.work_dir, a.start)
    print(json.dumps(c))
    return 0


def build_parser():
    p = argparse.ArgumentParser(prog='tvm_peers.py', description=__doc__.split('\n\n')[0])
    sub = p.add_subparsers(dest='cmd')
    sub.add_parser('host-cpu')
    c = sub.add_parser('curve')
    c.add_argument('work_dir')
    c.add_argument('--start', type=float, default=None)
    t = sub.add_parser('time')
    t.add_argument('workload')
    t.add_argument('-D', action='append', default=[], metavar='NAME=VALUE')
    t.add_argument('--trials', type=int, required=True)
    t.add_argument('--threads', type=int, default=os.cpu_count() or 1)
    t.add_argument('--per-iter', type=int, default=64)
    t.add_argument('--seed', type=int, default=1)
    t.add_argument('--work-dir', default=None)
    t.add_argument('--verify', default=None, metavar='DIR')
    t.add_argument('--rtol', type=float, default=1e-4)
    t.add_argument('--small', action='store_true')
    t.add_argument('--mcpu', default=None)
    t.add_argument('--repeat', type=int, default=10)
    t.add_argument('--min-repeat-ms', type=int, default=100)
    t.add_argument('--build-timeout', type=float, default=120)
    t.add_argument('--run-timeout', type=float, default=60)
    t.add_argument('--out', default=None)
    return p


def main(argv):
    p = build_parser()
    a = p.parse_args(argv)
    if not a.cmd:
        p.print_usage(sys.stderr)
        return 2
    try:
        return {'host-cpu': cmd_host_cpu, 'curve': cmd_curve, 'time': cmd_time}[a.cmd](a)
    except UsageError as e:
        print('tvm_peers.py: %s' % e, file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
