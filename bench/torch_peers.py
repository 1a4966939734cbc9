#!/usr/bin/python3
"""PyTorch peers of kgen's benchmark suite: the same workloads written as a PyTorch user would, timed eagerly and
through torch.compile (default and max-autotune), plus the vendor-library peers on a GPU (cuBLAS with and without
TF32, cuDNN, a device-to-device copy).

  torch_peers.py time WORKLOAD [-D NAME=VALUE]... [--device cpu|cuda] [--modes eager,compile,max-autotune]
                 [--dtype f32|f16|bf16] [--threads N] [--min-ms 100] [--samples 5] [--verify DIR] [--rtol 1e-4] [--small]
                 [--mode-timeout S] [--inductor-cache DIR] [--out FILE.json]
  torch_peers.py dynamic WORKLOAD --seq FILE [-D NAME=VALUE]... [--var NAME] [--device cpu|cuda]
                 [--modes eager,static,dynamic] [--compile-mode MODE] [--steady-min-ms 50] [--out FILE.json]

WORKLOAD is a name (softmax) or a .te path (te/lib/softmax.te): every te/lib workload (conv2d is its stride-2
layer), mlp_gelu and conv2d_3x3 of bench/workloads, and for `time` also copy (-D BYTES=N). Sizes not given with -D
come from the --verify files' shapes, else the .te file's "# bench-sizes:" line ("# sizes:" with --small).

time modes: eager; compile (torch.compile default), max-autotune, reduce-overhead, max-autotune-no-cudagraphs
(torch.compile with that mode); max-autotune-frozen (matmul, mlp_gelu: max-autotune with
torch._inductor.config.freezing, the weights and bias module parameters, the activation the one argument); eager-out
(the workload writing into an output allocated once, with out= or in-place ops: bias_gelu_residual, layernorm,
rmsnorm, softmax, mlp_gelu, matmul, reduce_rows) and compile-out (torch.compile of a function that copies the
workload's result into an output allocated once: Inductor stores into it); on cuda only: cublas / cublas-tf32
(matmul: torch.mm with TF32 off / on), cudnn (conv2d_3x3: cudnn.benchmark on, TF32 off), sdpa (attention:
F.scaled_dot_product_attention), copy (workload copy). TF32 is off in every mode but cublas-tf32, so every peer
computes in f32 as kgen does; each line says tf32=0|1.

--dtype f16|bf16 runs the workload on inputs of that type (torch.float16 / torch.bfloat16, as kgen's `--dtype`:
every input and output), PyTorch computing as it does for that type; the tolerance then also allows one unit in the
last place of the type (2^-10, 2^-7), as kgen's verification does.

Timing (../shared/DESIGN.md, "Measuring"): the first call's wall time is first_s (for compiled modes the compile
time compile_s is first_s minus the steady-state median; unless --inductor-cache is given, each compiled mode starts
from empty Inductor caches, and Inductor's one-time start in the process is paid first on a tiny function and
reported apart, inductor_start_s); warm-up calls for --min-ms (at least two: CUDA graphs record there); then the
number of calls per sample is doubled until a sample lasts --min-ms, and --samples samples give the median, min and
max per call (CUDA events on cuda, perf_counter on cpu). The output is checked against kgen's saved output (--verify
DIR, from `kgen run ... --save DIR`) or, without it, against the workload computed in float64 by PyTorch, with
kgen's rule (runtime/verify.c): per element |got - ref| / max(|ref|, 1e-2 max|ref|) <= rtol, rtol scaled by sqrt(L /
256) for a reduction of L > 256 terms (TF32 modes: rtol 1e-2).

dynamic: the shape-transition experiment's peer. --seq FILE lists the dynamic size of each call (one per line, or
comma-separated, or dynamic_shapes' meta.tsv with its "sequence" line); --var names the size (default: matmul and
mlp_gelu M, attention S, conv2d_3x3 H, others N). Modes: eager; static (torch.compile dynamic=False: one compile per
new size, the recompile limit raised so it never falls back to eager); dynamic (dynamic=True); auto (dynamic=None).
Each mode runs the whole sequence once, every call timed (synchronized) including its compiles; then the steady
state per distinct size (calls timed one by one for --steady-min-ms in 5 rounds, the lowest round median), and each
size's output is verified against float64.

Output: one line per mode on stdout ("torch WORKLOAD mode=... key=value ..." or "... error=\"...\""); --out FILE
gets the same as JSON (time: a list of dicts; dynamic: one dict), rewritten after every mode so a killed run keeps
what it measured. Exit status: 0; 1 when an output did not verify; 2 on a usage error; 3 when torch or the device
is missing (every mode then reported as an error line). A mode that fails is an error line, never the whole run.
"""
import argparse
import contextlib
import importlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time

from peer_sizes import UsageError, parse_binds, te_sizes, tolerance

torch = None  # imported in main(), after the inductor cache folder is chosen
COLD_DIR = None  # where each compiled mode gets a fresh Inductor cache (None: --inductor-cache, caches kept)
F = None
np = None



# ---- the workloads, as a PyTorch user writes them --------------------------------------------------------------

def f_bias_gelu_residual(X, bias, R):
    return F.gelu(X + bias) + R


def f_layernorm(X, gamma, beta):
    return F.layer_norm(X, (X.shape[-1],), gamma, beta, eps=1e-5)


def f_rmsnorm(X, gamma):
    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma


def f_softmax(X):
    return torch.softmax(X, -1)


def f_mlp_gelu(X, W, b):
    return F.gelu(X @ W + b)


def f_attention(Q, K, V):
    return torch.softmax(Q @ K.transpose(-1, -2) * (Q.shape[-1] ** -0.5), -1) @ V


def f_sdpa(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V)


def f_matmul(A, B):
    return A @ B


def f_mm(A, B):
    return torch.mm(A, B)


def f_conv2d_3x3(X, K):
    return F.conv2d(X, K, padding=1)


def f_conv2d(X, K):
    # te/lib/conv2d.te: 3x3, padding 1, stride 2
    return F.conv2d(X, K, padding=1, stride=2)


def f_reduce_rows(X):
    return X.sum(-1)


def f_batch_matmul(A, B):
    return torch.bmm(A, B)


def f_depthwise_conv2d(X, K):
    return F.conv2d(X, K.unsqueeze(1), padding=1, groups=X.shape[1])


def f_matvec(A, x):
    return torch.mv(A, x)


def f_maxpool2d(X):
    return F.max_pool2d(X, 3, stride=2)


def f_transpose(X):
    # .t() alone is a view: a user who needs the transposed matrix in memory (kgen's output) asks for the copy
    return X.t().contiguous()


def f_mlp_epilogue(A, W, bias):
    return torch.relu(A @ W + bias)


# The same workloads writing into an output the caller owns (as kgen's kernels do), with out= where the ops have
# it: PyTorch allocates a fresh output on every call otherwise, and on the CPU a large fresh buffer costs its page
# faults, which would make a comparison of the allocator, not of the code. Only what has an out= form is here.

def o_bias_gelu_residual(X, bias, R, out):
    torch.add(X, bias, out=out)
    torch._C._nn.gelu_(out)
    return out.add_(R)


def o_layernorm(X, gamma, beta, out):
    # the functional layer_norm has no out=; its aten op does (the row mean and rstd are small)
    stats = torch.empty(X.shape[:-1] + (1,), device=X.device)
    torch.ops.aten.native_layer_norm.out(X, [X.shape[-1]], gamma, beta, 1e-5, out0=out, out1=stats,
                                         out2=torch.empty_like(stats))
    return out


def o_rmsnorm(X, gamma, out):
    # the row statistic is small; the full-size pass writes into out
    r = torch.linalg.vector_norm(X, 2, -1, keepdim=True).pow_(2).div_(X.shape[-1]).add_(1e-6).rsqrt_()
    return torch.mul(X, r, out=out).mul_(gamma)


def o_softmax(X, out):
    return torch.softmax(X, -1, out=out)


def o_mlp_gelu(X, W, b, out):
    torch.addmm(b, X, W, out=out)
    return torch._C._nn.gelu_(out)


def o_matmul(A, B, out):
    return torch.matmul(A, B, out=out)


def o_reduce_rows(X, out):
    return torch.sum(X, -1, out=out)


def o_batch_matmul(A, B, out):
    return torch.bmm(A, B, out=out)


def o_matvec(A, x, out):
    return torch.mv(A, x, out=out)


def o_transpose(X, out):
    return out.copy_(X.t())


def o_mlp_epilogue(A, W, bias, out):
    torch.addmm(bias, A, W, out=out)
    return out.relu_()


OUT_FNS = {'bias_gelu_residual': o_bias_gelu_residual, 'layernorm': o_layernorm, 'rmsnorm': o_rmsnorm,
           'softmax': o_softmax, 'mlp_gelu': o_mlp_gelu, 'matmul': o_matmul, 'reduce_rows': o_reduce_rows,
           'batch_matmul': o_batch_matmul, 'matvec': o_matvec, 'transpose': o_transpose,
           'mlp_epilogue': o_mlp_epilogue}
# the GEMM workloads whose weight (the second input, and the bias) can be a frozen module parameter
FROZEN_WEIGHTS = {'matmul': 1, 'mlp_gelu': 2, 'mlp_epilogue': 2}   # inputs after the first that become parameters


# inputs: (tensor name, shape of size names, ints, or functions of the sizes for a computed extent); out: the same
# for the output; red: the longest reduction (kgen's tolerance grows past 256 terms); flops: None for the
# memory-bound ones; fallback: bench-sizes if the .te file cannot be read; dyn: the default dynamic size.
WORKLOADS = {
    'bias_gelu_residual': dict(fn=f_bias_gelu_residual, inputs=[('X', ('N', 'D')), ('bias', ('D',)), ('R', ('N', 'D'))],
                               out=('Y', ('N', 'D')), red=lambda s: 1, flops=None, fallback='N=4096 D=4096', dyn='N'),
    'layernorm': dict(fn=f_layernorm, inputs=[('X', ('N', 'D')), ('gamma', ('D',)), ('beta', ('D',))],
                      out=('Y', ('N', 'D')), red=lambda s: s['D'], flops=None, fallback='N=4096 D=1024', dyn='N'),
    'rmsnorm': dict(fn=f_rmsnorm, inputs=[('X', ('N', 'D')), ('gamma', ('D',))], out=('Y', ('N', 'D')),
                    red=lambda s: s['D'], flops=None, fallback='N=4096 D=1024', dyn='N'),
    'softmax': dict(fn=f_softmax, inputs=[('X', ('N', 'D'))], out=('Y', ('N', 'D')), red=lambda s: s['D'],
                    flops=None, fallback='N=4096 D=1024', dyn='N'),
    'mlp_gelu': dict(fn=f_mlp_gelu, inputs=[('X', ('M', 'K')), ('W', ('K', 'N')), ('b', ('N',))],
                     out=('Y', ('M', 'N')), red=lambda s: s['K'], flops=lambda s: 2 * s['M'] * s['N'] * s['K'],
                     fallback='M=4096 K=1024 N=1024', dyn='M'),
    'attention': dict(fn=f_attention, inputs=[('Q', ('B', 'S', 'D')), ('K', ('B', 'T', 'D')), ('V', ('B', 'T', 'E'))],
                      out=('O', ('B', 'S', 'E')), red=lambda s: max(s['D'], s['T']),
                      flops=lambda s: 2 * s['B'] * s['S'] * s['T'] * (s['D'] + s['E']),
                      fallback='B=16 S=512 T=512 D=64 E=64', dyn='S'),
    'matmul': dict(fn=f_matmul, inputs=[('A', ('M', 'K')), ('B', ('K', 'N'))], out=('C', ('M', 'N')),
                   red=lambda s: s['K'], flops=lambda s: 2 * s['M'] * s['N'] * s['K'],
                   fallback='M=1024 N=1024 K=1024', dyn='M'),
    'conv2d_3x3': dict(fn=f_conv2d_3x3, inputs=[('X', ('N', 'C', 'H', 'W')), ('K', ('F', 'C', 3, 3))],
                       out=('Y', ('N', 'F', 'H', 'W')), red=lambda s: s['C'] * 9,
                       flops=lambda s: 2 * s['N'] * s['F'] * s['H'] * s['W'] * s['C'] * 9,
                       fallback='N=1 C=64 H=56 W=56 F=64', dyn='H'),
    'conv2d': dict(fn=f_conv2d, inputs=[('X', ('N', 'C', 'H', 'W')), ('K', ('F', 'C', 3, 3))],
                   out=('Y', ('N', 'F', lambda s: (s['H'] - 1) // 2 + 1, lambda s: (s['W'] - 1) // 2 + 1)),
                   red=lambda s: s['C'] * 9,
                   flops=lambda s: 2 * s['N'] * s['F'] * ((s['H'] - 1) // 2 + 1) * ((s['W'] - 1) // 2 + 1) * s['C'] * 9,
                   fallback='N=1 C=64 H=56 W=56 F=128', dyn='H'),
    'reduce_rows': dict(fn=f_reduce_rows, inputs=[('X', ('N', 'D'))], out=('Y', ('N',)), red=lambda s: s['D'],
                        flops=None, fallback='N=4096 D=4096', dyn='N'),
    'batch_matmul': dict(fn=f_batch_matmul, inputs=[('A', ('L', 'M', 'K')), ('B', ('L', 'K', 'N'))],
                         out=('C', ('L', 'M', 'N')), red=lambda s: s['K'],
                         flops=lambda s: 2 * s['L'] * s['M'] * s['N'] * s['K'],
                         fallback='L=16 M=512 N=512 K=64', dyn='M'),
    'depthwise_conv2d': dict(fn=f_depthwise_conv2d, inputs=[('X', ('N', 'C', 'H', 'W')), ('K', ('C', 3, 3))],
                             out=('Y', ('N', 'C', 'H', 'W')), red=lambda s: 9,
                             flops=lambda s: 2 * s['N'] * s['C'] * s['H'] * s['W'] * 9,
                             fallback='N=1 C=256 H=56 W=56', dyn='H'),
    'matvec': dict(fn=f_matvec, inputs=[('A', ('M', 'K')), ('x', ('K',))], out=('y', ('M',)),
                   red=lambda s: s['K'], flops=None, fallback='M=4096 K=4096', dyn='M'),
    'maxpool2d': dict(fn=f_maxpool2d, inputs=[('X', ('N', 'C', 'H', 'W'))],
                      out=('Y', ('N', 'C', lambda s: (s['H'] - 3) // 2 + 1, lambda s: (s['W'] - 3) // 2 + 1)),
                      red=lambda s: 1, flops=None, fallback='N=8 C=64 H=112 W=112', dyn='N'),
    'transpose': dict(fn=f_transpose, inputs=[('X', ('M', 'N'))], out=('Y', ('N', 'M')), red=lambda s: 1,
                      flops=None, fallback='M=4096 N=4096', dyn='M'),
    'mlp_epilogue': dict(fn=f_mlp_epilogue, inputs=[('A', ('M', 'K')), ('W', ('K', 'N')), ('bias', ('N',))],
                         out=('Y', ('M', 'N')), red=lambda s: s['K'], flops=lambda s: 2 * s['M'] * s['N'] * s['K'],
                         fallback='M=1024 N=4096 K=1024', dyn='M'),
}

COMPILE_MODES = {'compile': None, 'max-autotune': 'max-autotune', 'reduce-overhead': 'reduce-overhead',
                 'max-autotune-no-cudagraphs': 'max-autotune-no-cudagraphs'}
# the modes that compile on their first call: their compile time is that call's wall time minus a steady call's
COMPILED = set(COMPILE_MODES) | {'max-autotune-frozen', 'compile-out'}
TF32_RTOL = 1e-2


class Unavailable(Exception):
    """A peer this torch or machine lacks: reported as `error="unavailable: ..."`."""


class ModeTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so that inductor's `except Exception` fallbacks do not swallow it."""


def workload_name(arg):
    return os.path.basename(arg)[:-3] if arg.endswith('.te') else arg


def size_names(w):
    names = []
    for _, shape in w['inputs'] + [w['out']]:
        for s in shape:
            if isinstance(s, str) and s not in names:
                names.append(s)
    return names


def shape_of(shape, sizes):
    return tuple(s if isinstance(s, int) else s(sizes) if callable(s) else sizes[s] for s in shape)


def fmt_sizes(sizes):
    return ','.join('%s=%d' % kv for kv in sizes.items())


def resolve_sizes(name, w, given, small, from_files=None):
    """-D first, then the shapes of the --verify files, then the .te file's sizes; every size must end up bound."""
    sizes = {}
    te = te_sizes(name, small)
    if not te and not small:
        te = parse_binds(w['fallback'].split())
    for n in size_names(w):
        if n in given:
            sizes[n] = given[n]
        elif from_files and n in from_files:
            sizes[n] = from_files[n]
        elif n in te:
            sizes[n] = te[n]
        else:
            raise UsageError('size %s of %s is not bound (use -D %s=VALUE)' % (n, name, n))
    for n in given:
        if n not in sizes:
            raise UsageError("'%s' is not a size variable of %s" % (n, name))
    if from_files:
        for n, v in from_files.items():
            if sizes[n] != v:
                raise UsageError('-D %s=%d but the --verify files have %s=%d' % (n, sizes[n], n, v))
    return sizes


# ---- verification (kgen's rule, runtime/verify.c) ---------------------------------------------------------------

def rel_error(got, ref):
    """Max over elements of |got - ref| / max(|ref|, 1e-2 max|ref|); inf when a finite reference meets a non-finite
    value or a non-finite reference is not matched in class."""
    got = np.asarray(got, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if got.shape != ref.shape:
        return math.inf
    fin = np.isfinite(ref)
    if not fin.all():
        nf = ~fin
        same = (np.isnan(ref[nf]) & np.isnan(got[nf])) | (np.isinf(got[nf]) & (np.sign(got[nf]) == np.sign(ref[nf])))
        if not same.all():
            return math.inf
    if not np.isfinite(got[fin]).all():
        return math.inf
    if not fin.any():
        return 0.0
    maxabs = float(np.abs(ref[fin]).max())
    scale = 1e-2 * maxabs if maxabs > 0 else 1e-30
    den = np.maximum(np.abs(ref[fin]), scale)
    return float((np.abs(got[fin] - ref[fin]) / den).max())


# ---- device helpers ---------------------------------------------------------------------------------------------

def sync(device):
    if device == 'cuda':
        torch.cuda.synchronize()


def set_tf32(on):
    if hasattr(torch.backends, 'cuda') and hasattr(torch.backends.cuda, 'matmul'):
        torch.backends.cuda.matmul.allow_tf32 = on
    if hasattr(torch.backends, 'cudnn'):
        torch.backends.cudnn.allow_tf32 = on


def tf32_state():
    try:
        return int(bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32))
    except AttributeError:
        return 0


def dynamo():
    """torch._dynamo, imported (torch 2.x imports it lazily), or None."""
    if not hasattr(torch, 'compile'):
        return None
    try:
        d = importlib.import_module('torch._dynamo')
        importlib.import_module('torch._dynamo.utils')
        return d
    except Exception:
        return None


def reset_dynamo():
    """Forgets every compiled graph, so that each mode compiles afresh."""
    d = dynamo()
    if d is not None:
        try:
            d.reset()
        except Exception:
            pass


def graph_count():
    """Graphs dynamo has compiled so far (None when it cannot tell)."""
    try:
        return int(dynamo().utils.counters['stats']['unique_graphs'])
    except Exception:
        return None


def no_compile_msg():
    return 'unavailable: torch %s has no torch.compile' % torch.__version__


def timed_call(fn, args, device):
    """One synchronized call: (seconds, output)."""
    sync(device)
    t0 = time.perf_counter()
    out = fn(*args)
    sync(device)
    return time.perf_counter() - t0, out


def run_reps(fn, args, device, reps):
    """Seconds per call of `reps` back-to-back calls (CUDA events on cuda)."""
    if device == 'cuda':
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    return (time.perf_counter() - t0) / reps


def warm_up(fn, args, device, ms):
    """At least two calls (CUDA graphs record there) and `ms` of calls: a CPU thread pool takes a while to settle.
    Synchronized call by call, or a GPU's launch queue would fill with far more than `ms` of work."""
    t0, n = time.perf_counter(), 0
    while n < 2 or (time.perf_counter() - t0) * 1e3 < ms:
        fn(*args)
        sync(device)
        n += 1


def measure(fn, args, device, min_ms, samples):
    """Doubles the calls per sample until one sample lasts min_ms, then takes `samples` samples: (reps, [s/call])."""
    reps, cap = 1, 1 << 24
    while reps < cap:
        per = run_reps(fn, args, device, reps)
        if per * reps * 1e3 >= min_ms:
            break
        # at least double; jump to the estimate (plus 10%) when it is further, the loop re-checks it
        want = int(min_ms / (per * 1e3) * 1.1) + 1 if per > 0 else reps * 2
        reps = min(max(reps * 2, want), cap)
    return reps, [run_reps(fn, args, device, reps) for _ in range(samples)]


def to_numpy64(t):
    return t.detach().to('cpu', torch.float64).numpy()


def make_compiled(fn, mode, dynamic=None):
    if not hasattr(torch, 'compile'):
        raise Unavailable(no_compile_msg())
    kw = {}
    if mode is not None:
        kw['mode'] = mode
    if dynamic is not None:
        kw['dynamic'] = dynamic
    return torch.compile(fn, **kw)


def with_timeout(seconds, body):
    """Runs body(); a ModeTimeout after `seconds` (0: no limit)."""
    if seconds <= 0 or not hasattr(signal, 'SIGALRM'):
        return body()

    def on_alarm(signum, frame):
        raise ModeTimeout()
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(math.ceil(seconds)))
    try:
        return body()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_line(msg):
    msg = ' '.join(str(msg).split())
    return msg.replace('"', "'")[:400]


def fmt_value(v):
    if isinstance(v, float):
        return '%.6g' % v
    v = str(v)
    return '"%s"' % one_line(v) if (' ' in v or not v) else v


# the order of a result line's fields; the rest follow in the order they were set, torch= last
LINE_ORDER = ('sizes', 'median_ms', 'min_ms', 'max_ms', 'compile_s', 'first_s', 'reps', 'samples', 'gflops', 'gbps',
              'verify', 'max_rel_err', 'tol', 'ref', 'tf32', 'threads', 'gpu')


def print_result(r):
    head = ['torch', r['workload'], 'mode=' + r['mode'], 'device=' + r['device']]
    if 'error' in r:
        print(' '.join(head + ['error="%s"' % r['error'], 'torch=' + r['torch']]), flush=True)
        return
    skip = {'workload', 'mode', 'device', 'samples_ms', 'torch'}
    keys = [k for k in LINE_ORDER if k in r] + [k for k in r if k not in LINE_ORDER and k not in skip]
    body = ['%s=%s' % (k, fmt_value(r[k])) for k in keys if not isinstance(r[k], (list, dict))]
    print(' '.join(head + body + ['torch=' + r['torch']]), flush=True)


def write_json(path, obj):
    if not path:
        return
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(obj, f, indent=1)
        f.write('\n')
    os.replace(tmp, path)


# ---- time -------------------------------------------------------------------------------------------------------

def load_verify_dir(d, w):
    """Inputs and the expected output from `kgen run ... --save DIR`, and the sizes their shapes give."""
    arrays, from_files = {}, {}
    for tname, shape in w['inputs'] + [w['out']]:
        path = os.path.join(d, tname + '.npy')
        if not os.path.exists(path):
            raise UsageError('--verify %s: no %s.npy' % (d, tname))
        try:
            a = np.load(path)
        except Exception as e:
            raise UsageError('--verify %s: %s.npy: %s' % (d, tname, e))
        if a.ndim != len(shape):
            raise UsageError('--verify %s: %s.npy has %d dimensions, want %d' % (d, tname, a.ndim, len(shape)))
        for dim, s in zip(a.shape, shape):
            if callable(s):  # a computed extent: checked once the sizes are bound
                continue
            if isinstance(s, int):
                if dim != s:
                    raise UsageError('--verify %s: %s.npy has shape %s' % (d, tname, a.shape))
            elif from_files.setdefault(s, dim) != dim:
                raise UsageError('--verify %s: %s.npy disagrees on %s (%d vs %d)' % (d, tname, s, dim, from_files[s]))
        arrays[tname] = a
    return arrays, from_files


def frozen_module(name, w, args_t):
    """The GEMM workload as a module whose weights (and bias) are parameters, the activation its one argument: what
    Inductor's freezing (torch._inductor.config.freezing) folds into the compiled graph as constants."""
    nw = FROZEN_WEIGHTS[name]
    params = [torch.nn.Parameter(t, requires_grad=False) for t in args_t[1:1 + nw]]

    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = torch.nn.ParameterList(params)

        def forward(self, x):
            return w['fn'](x, *self.weights)
    return Frozen().eval()


def time_mode_fn(name, w, mode, device, args_t, sizes):
    """(callable, its arguments, tf32 on, undo or None, error message or None) for one mode of `time`; undo() puts
    back what the mode changed in torch's configuration."""
    base = w['fn']
    if mode == 'eager':
        return base, args_t, False, None, None
    if mode in ('eager-out', 'compile-out'):
        out = torch.empty(shape_of(w['out'][1], sizes), device=device)
        if mode == 'eager-out':
            if name not in OUT_FNS:
                return None, None, False, None, 'mode eager-out: %s has no out= form (%s have)' % (
                    name, ', '.join(OUT_FNS))
            return OUT_FNS[name], args_t + (out,), False, None, None
        if not hasattr(torch, 'compile'):
            return None, None, False, None, no_compile_msg()

        def into(*a):  # Inductor writes the result into the caller's buffer (the copy_ fuses into the kernel)
            return a[-1].copy_(base(*a[:-1]))
        return make_compiled(into, None), args_t + (out,), False, None, None
    if mode in COMPILE_MODES:
        if not hasattr(torch, 'compile'):
            return None, None, False, None, no_compile_msg()
        return make_compiled(base, COMPILE_MODES[mode]), args_t, False, None, None
    if mode == 'max-autotune-frozen':
        if name not in FROZEN_WEIGHTS:
            return None, None, False, None, 'mode max-autotune-frozen applies to %s only' % ', '.join(FROZEN_WEIGHTS)
        if not hasattr(torch, 'compile'):
            return None, None, False, None, no_compile_msg()
        mod = make_compiled(frozen_module(name, w, args_t), 'max-autotune')
        # read when the module compiles, on its first call
        cfg = importlib.import_module('torch._inductor.config')
        old = cfg.freezing
        cfg.freezing = True

        def undo():
            cfg.freezing = old
        return (lambda x: mod(x)), args_t[:1], False, undo, None
    cuda_only = {'cublas': 'matmul', 'cublas-tf32': 'matmul', 'cudnn': 'conv2d_3x3', 'sdpa': 'attention'}
    if mode in cuda_only:
        if name != cuda_only[mode]:
            return None, None, False, None, 'mode %s applies to %s only' % (mode, cuda_only[mode])
        if device != 'cuda':
            return None, None, False, None, 'mode %s needs --device cuda' % mode
        if mode == 'cublas':
            return f_mm, args_t, False, None, None
        if mode == 'cublas-tf32':
            return f_mm, args_t, True, None, None
        if mode == 'cudnn':
            return f_conv2d_3x3, args_t, False, None, None
        if not hasattr(F, 'scaled_dot_product_attention'):
            return None, None, False, None, \
                'unavailable: torch %s has no scaled_dot_product_attention' % torch.__version__
        return f_sdpa, args_t, False, None, None
    return None, None, False, None, "unknown mode '%s'" % mode


# per --dtype: one ulp (relative) and the element size
DTYPE_ULP_SIZE = {'f32': (0.0, 4), 'f16': (2.0 ** -10, 2), 'bf16': (2.0 ** -7, 2)}


def torch_dtype(name):
    return {'f32': torch.float32, 'f16': torch.float16, 'bf16': torch.bfloat16}[name]


def run_time_mode(name, w, mode, a, sizes, args_t, ref, red_len, common):
    device = a.device
    r = dict(common, mode=mode)
    reset_dynamo()
    try:
        fn, call_args, tf32, undo, err = time_mode_fn(name, w, mode, device, args_t, sizes)
    except Exception as e:
        fn, call_args, tf32, undo, err = None, None, False, None, one_line('%s: %s' % (type(e).__name__, e))
    if err:
        r['error'] = err
        return r
    set_tf32(tf32)
    if device == 'cuda' and hasattr(torch.backends, 'cudnn'):
        torch.backends.cudnn.benchmark = (mode == 'cudnn')
    try:
        def body():
            with torch.no_grad():
                first, out = timed_call(fn, call_args, device)
                got = to_numpy64(out)  # copied at once: CUDA-graph outputs are overwritten by the next call
                del out
                warm_up(fn, call_args, device, a.min_ms)
                reps, per = measure(fn, call_args, device, a.min_ms, a.samples)
            return first, got, reps, per
        with fresh_inductor_cache() if mode in COMPILED else contextlib.nullcontext():
            first, got, reps, per = with_timeout(a.mode_timeout, body)
    except ModeTimeout:
        r['error'] = 'timed out after %g s' % a.mode_timeout
        return r
    except Exception as e:  # one peer failing is a result, not the end of the run
        r['error'] = one_line('%s: %s' % (type(e).__name__, e))
        return r
    finally:
        if undo is not None:
            undo()
        set_tf32(False)
        if device == 'cuda' and hasattr(torch.backends, 'cudnn'):
            torch.backends.cudnn.benchmark = False
    ms = [p * 1e3 for p in per]
    med = statistics.median(ms)
    r.update(median_ms=med, min_ms=min(ms), max_ms=max(ms), reps=reps, samples=len(ms),
             compile_s=max(first - med * 1e-3, 0.0) if mode in COMPILED else 0.0, first_s=first)
    esize = DTYPE_ULP_SIZE[a.dtype][1]
    nbytes = esize * (sum(math.prod(shape_of(s, sizes)) for _, s in w['inputs']) + math.prod(shape_of(w['out'][1], sizes)))
    r['gbps'] = nbytes / (med * 1e-3) / 1e9
    if w['flops']:
        r['gflops'] = w['flops'](sizes) / (med * 1e-3) / 1e9
    tol = tolerance(TF32_RTOL if tf32 else a.rtol, red_len) + DTYPE_ULP_SIZE[a.dtype][0]
    err = rel_error(got, ref)
    r.update(verify='ok' if err <= tol else 'mismatch', max_rel_err=err, tol=tol)
    r['tf32'] = int(tf32)
    r['samples_ms'] = ms
    return r


def run_copy(a, given, common):
    """Device-to-device (or host memory) copy of BYTES bytes; GB/s counts the read and the write."""
    results = []
    nbytes = given.get('BYTES', 1 << 30)
    for mode in a.modes:
        r = dict(common, mode=mode, sizes='BYTES=%d' % nbytes)
        if mode not in ('copy', 'eager'):
            r['error'] = "mode %s does not apply to copy (use copy)" % mode
            results.append(r)
            print_result(r)
            continue
        try:
            n = max(1, nbytes // 4)
            src = torch.randn(n, device=a.device)
            dst = torch.empty_like(src)
            fn = dst.copy_
            fn(src)
            ok = bool(torch.equal(dst, src))
            warm_up(fn, (src,), a.device, a.min_ms)
            reps, per = measure(fn, (src,), a.device, a.min_ms, a.samples)
            ms = [p * 1e3 for p in per]
            med = statistics.median(ms)
            r.update(median_ms=med, min_ms=min(ms), max_ms=max(ms), reps=reps, samples=len(ms), compile_s=0.0,
                     gbps=2 * n * 4 / (med * 1e-3) / 1e9, verify='ok' if ok else 'mismatch', samples_ms=ms)
            del src, dst
        except Exception as e:
            r['error'] = one_line('%s: %s' % (type(e).__name__, e))
        results.append(r)
        print_result(r)
        write_json(a.out, results)
    return results


def plan_time(a):
    """What `time` runs, checked before torch is imported (usage errors are quick): a dict."""
    name = workload_name(a.workload)
    given = parse_binds(a.D)
    if name == 'copy':
        return dict(name=name, given=given)
    if name not in WORKLOADS:
        raise UsageError("unknown workload '%s' (one of %s, copy)" % (name, ', '.join(WORKLOADS)))
    w = WORKLOADS[name]
    saved, from_files = (load_verify_dir(a.verify, w) if a.verify else (None, None))
    sizes = resolve_sizes(name, w, given, a.small, from_files)
    if saved is not None:  # the extents computed from the sizes (maxpool2d's output) match the files too
        for tname, shape in w['inputs'] + [w['out']]:
            if saved[tname].shape != shape_of(shape, sizes):
                raise UsageError('--verify %s: %s.npy has shape %s, want %s' % (
                    a.verify, tname, saved[tname].shape, shape_of(shape, sizes)))
    return dict(name=name, given=given, w=w, saved=saved, sizes=sizes)


def cmd_time(a, plan):
    name, given = plan['name'], plan['given']
    common = dict(workload=name, device=a.device, torch=torch.__version__, dtype=a.dtype)
    if a.device == 'cpu':
        torch.set_num_threads(a.threads)
        common['threads'] = a.threads
    else:
        common['gpu'] = torch.cuda.get_device_name(0)
    if name == 'copy':
        results = run_copy(a, given, common)
        return 1 if any(r.get('verify') == 'mismatch' for r in results) else 0
    w, saved, sizes = plan['w'], plan['saved'], plan['sizes']
    common['sizes'] = fmt_sizes(sizes)
    if saved is not None:
        # kgen saves f16 as <f2 and bf16 as exact <f4: the values convert exactly
        args_t = tuple(torch.from_numpy(np.ascontiguousarray(saved[t], dtype=np.float32)).to(a.device)
                       .to(torch_dtype(a.dtype)) for t, _ in w['inputs'])
        ref = saved[w['out'][0]].astype(np.float64)
        common['ref'] = 'kgen'
    else:
        torch.manual_seed(a.seed)
        args_t = tuple(torch.randn(shape_of(s, sizes), device=a.device).to(torch_dtype(a.dtype))
                       for _, s in w['inputs'])
        with torch.no_grad():
            set_tf32(False)
            ref = to_numpy64(w['fn'](*(x.double() for x in args_t)))
            if a.dtype != 'f32':  # the exact result rounded to the output's type, as kgen's reference does
                ref = to_numpy64(torch.from_numpy(ref).to(torch_dtype(a.dtype)))
        common['ref'] = 'torch-f64'
    red_len = w['red'](sizes)
    if any(m in COMPILED for m in a.modes):
        st = inductor_start(a.device)
        if st is not None:
            common['inductor_start_s'] = st
    results = []
    for mode in a.modes:
        r = run_time_mode(name, w, mode, a, sizes, args_t, ref, red_len, common)
        results.append(r)
        print_result(r)
        write_json(a.out, results)
        if a.device == 'cuda':
            torch.cuda.empty_cache()
    return 1 if any(r.get('verify') == 'mismatch' for r in results) else 0


# ---- dynamic ----------------------------------------------------------------------------------------------------

def read_sequence(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError('--seq %s: %s' % (path, e))
    for line in lines:
        if line.startswith('sequence'):  # dynamic_shapes' meta.tsv
            lines = [line[len('sequence'):]]
            break
    seq = []
    for line in lines:
        line = line.split('#', 1)[0]
        for tok in re.split(r'[\s,]+', line.strip()):
            if tok:
                if not re.fullmatch(r'\d+', tok) or int(tok) < 1:
                    raise UsageError("--seq %s: '%s' is not a positive size" % (path, tok))
                seq.append(int(tok))
    if not seq:
        raise UsageError('--seq %s: no sizes' % path)
    return seq


def steady_time(fn, args, device, min_ms, rounds=5, min_calls=3):
    """Calls timed one by one, `rounds` rounds of at least min_ms / rounds and min_calls calls: the lowest round
    median (drift and a stray slow call do not move it), in seconds."""
    meds = []
    for _ in range(rounds):
        ts, spent = [], 0.0
        while len(ts) < min_calls or spent * 1e3 < min_ms / rounds:
            t, _ = timed_call(fn, args, device)
            ts.append(t)
            spent += t
            if len(ts) >= 100000:
                break
        meds.append(statistics.median(ts))
    return min(meds)


def plan_dynamic(a):
    """What `dynamic` runs, checked before torch is imported: a dict."""
    name = workload_name(a.workload)
    if name not in WORKLOADS:
        raise UsageError("unknown workload '%s' (one of %s)" % (name, ', '.join(WORKLOADS)))
    w = WORKLOADS[name]
    var = a.var or w['dyn']
    if var not in size_names(w):
        raise UsageError("'%s' is not a size variable of %s" % (var, name))
    seq = read_sequence(a.seq)
    given = parse_binds(a.D)
    given.pop(var, None)
    fixed = resolve_sizes(name, w, dict(given, **{var: seq[0]}), a.small)
    fixed.pop(var)
    return dict(name=name, w=w, var=var, seq=seq, fixed=fixed)


def cmd_dynamic(a, plan):
    name, w, var, seq, fixed = plan['name'], plan['w'], plan['var'], plan['seq'], plan['fixed']
    if a.device == 'cpu':
        torch.set_num_threads(a.threads)
    set_tf32(False)
    distinct = sorted(set(seq))
    torch.manual_seed(a.seed)
    inputs = {}
    for v in distinct:
        sizes = dict(fixed, **{var: v})
        inputs[v] = tuple(torch.randn(shape_of(s, sizes), device=a.device) for _, s in w['inputs'])
    doc = dict(workload=name, var=var, fixed=fixed, device=a.device, torch=torch.__version__, sequence=seq,
               distinct=distinct, compile_mode=a.compile_mode, modes=[])
    if a.device == 'cpu':
        doc['threads'] = a.threads
    else:
        doc['gpu'] = torch.cuda.get_device_name(0)
    status = 0
    for mode in a.modes:
        r = dict(mode=mode)
        head = 'torch-dynamic %s mode=%s device=%s var=%s calls=%d distinct=%d' % (
            name, mode, a.device, var, len(seq), len(distinct))
        try:
            r.update(run_dynamic_mode(a, w, mode, seq, distinct, inputs, var, fixed))
        except ModeTimeout:
            r['error'] = 'timed out after %g s' % a.mode_timeout
        except Unavailable as e:
            r['error'] = one_line(e)
        except Exception as e:
            r['error'] = one_line('%s: %s' % (type(e).__name__, e))
        doc['modes'].append(r)
        write_json(a.out, doc)
        if 'error' in r:
            print('%s error="%s"' % (head, r['error']), flush=True)
            continue
        if r['verify'] != 'ok':
            status = 1
        st = [r['steady'][str(v)]['median_ms'] for v in distinct]
        geo = math.exp(sum(math.log(max(x, 1e-9)) for x in st) / len(st))
        na = lambda v: 'na' if v is None else v
        print('%s total_s=%.6g first_s=%.6g max_call_s=%.6g graphs=%s recompiles=%s steady_geomean_ms=%.6g '
              'verify=%s max_rel_err=%.3g torch=%s' % (head, r['total_s'], r['calls_s'][0], max(r['calls_s']),
                                                       na(r['graphs']), na(r['recompiles']), geo, r['verify'],
                                                       r['max_rel_err'], torch.__version__), flush=True)
    return status


def run_dynamic_mode(a, w, mode, seq, distinct, inputs, var, fixed):
    if mode == 'eager':
        fn = w['fn']
    elif mode in ('static', 'dynamic', 'auto'):
        if not hasattr(torch, 'compile'):
            raise Unavailable(no_compile_msg())
        reset_dynamo()
        cfg = dynamo().config
        # one compiled graph per distinct size must fit, or dynamo silently falls back to eager for the rest
        limit = max(64, 2 * len(distinct) + 8)
        for knob in ('cache_size_limit', 'recompile_limit', 'accumulated_cache_size_limit',
                     'accumulated_recompile_limit'):
            if hasattr(cfg, knob):
                setattr(cfg, knob, max(getattr(cfg, knob), limit))
        fn = make_compiled(w['fn'], a.compile_mode, {'static': False, 'dynamic': True, 'auto': None}[mode])
    else:
        raise RuntimeError("unknown mode '%s' (eager, static, dynamic, auto)" % mode)

    def body():
        calls, compiled, cum, total = [], [], [], 0.0
        g0 = graph_count() if mode != 'eager' else 0
        with torch.no_grad():
            for v in seq:
                before = graph_count() if mode != 'eager' else 0
                t, out = timed_call(fn, inputs[v], a.device)
                del out
                after = graph_count() if mode != 'eager' else 0
                calls.append(t)
                compiled.append(bool(before is not None and after is not None and after > before))
                total += t
                cum.append(total)
            graphs = (graph_count() - g0) if (mode != 'eager' and g0 is not None) else (0 if mode == 'eager' else None)
            steady, worst, ok = {}, 0.0, True
            for v in distinct:
                s = steady_time(fn, inputs[v], a.device, a.steady_min_ms)
                out = fn(*inputs[v])
                got = to_numpy64(out)
                del out
                ref = to_numpy64(w['fn'](*(x.double() for x in inputs[v])))
                err = rel_error(got, ref)
                tol = tolerance(a.rtol, w['red'](dict(fixed, **{var: v})))
                worst = max(worst, err)
                ok = ok and err <= tol
                steady[str(v)] = dict(median_ms=s * 1e3, max_rel_err=err, tol=tol)
        return dict(calls_s=calls, compiled=compiled, cumulative_s=cum, total_s=total, graphs=graphs,
                    recompiles=max(graphs - 1, 0) if graphs is not None else None,
                    steady=steady, verify='ok' if ok else 'mismatch', max_rel_err=worst)
    return with_timeout(a.mode_timeout, body)


# ---- main -------------------------------------------------------------------------------------------------------

def build_parser():
    p = argparse.ArgumentParser(prog='torch_peers.py', description=__doc__.split('\n\n')[0])
    sub = p.add_subparsers(dest='cmd')

    def common(sp, modes):
        sp.add_argument('workload')
        sp.add_argument('-D', action='append', default=[], metavar='NAME=VALUE')
        sp.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
        sp.add_argument('--modes', default=modes)
        sp.add_argument('--threads', type=int, default=os.cpu_count() or 1)
        sp.add_argument('--rtol', type=float, default=1e-4)
        sp.add_argument('--seed', type=int, default=1)
        sp.add_argument('--small', action='store_true', help="unbound sizes from the .te file's '# sizes:' line")
        sp.add_argument('--mode-timeout', type=float, default=0, help='seconds one mode may take (0: no limit)')
        sp.add_argument('--inductor-cache', default=None,
                        help='inductor/triton cache folder (default: a fresh one, so compile times are cold)')
        sp.add_argument('--out', default=None)

    t = sub.add_parser('time')
    common(t, 'eager,compile,max-autotune')
    t.add_argument('--min-ms', type=float, default=100)
    t.add_argument('--samples', type=int, default=5)
    t.add_argument('--verify', default=None, metavar='DIR')
    t.add_argument('--dtype', choices=('f32', 'f16', 'bf16'), default='f32')
    d = sub.add_parser('dynamic')
    common(d, 'eager,static,dynamic')
    d.add_argument('--seq', required=True)
    d.add_argument('--var', default=None)
    d.add_argument('--compile-mode', default=None)
    d.add_argument('--steady-min-ms', type=float, default=50)
    return p


def fresh_inductor_cache():
    """A context in which Inductor starts from empty caches, on disk and in memory: without it, a mode whose
    generated code another mode of this process already compiled (max-autotune finds no GEMM in softmax, so its
    code is the default mode's) would load it, and its compile time would be a cache hit's."""
    if COLD_DIR is None:
        return contextlib.nullcontext()
    try:
        u = importlib.import_module('torch._inductor.utils')
    except Exception:
        return contextlib.nullcontext()
    fresh = getattr(u, 'fresh_cache', None) or getattr(u, 'fresh_inductor_cache', None)
    return fresh(dir=COLD_DIR) if fresh else contextlib.nullcontext()


def inductor_start(device):
    """Inductor's one-time start in a process (its imports, the C++ toolchain probe and header precompile) paid on
    a tiny function, so that it is not charged to the first compiled mode: seconds, or None."""
    if not hasattr(torch, 'compile'):
        return None
    try:
        with fresh_inductor_cache():
            x = torch.randn(8, device=device)
            t0 = time.perf_counter()
            torch.compile(lambda v: v * 2 + 1)(x)
            sync(device)
            return time.perf_counter() - t0
    except Exception:
        return None
    finally:
        reset_dynamo()


def main(argv):
    global torch, F, np, COLD_DIR
    p = build_parser()
    a = p.parse_args(argv)
    if not a.cmd:
        p.print_usage(sys.stderr)
        return 2
    a.modes = [m for m in a.modes.split(',') if m]
    if not a.modes or a.threads < 1 or getattr(a, 'samples', 1) < 1:
        p.print_usage(sys.stderr)
        return 2
    name = workload_name(a.workload)
    try:
        import numpy as np_mod
    except Exception as e:
        print('torch %s mode=%s device=%s error="unavailable: %s"' % (name, ','.join(a.modes), a.device, one_line(e)))
        return 3
    np = np_mod
    try:
        plan = plan_time(a) if a.cmd == 'time' else plan_dynamic(a)
    except UsageError as e:
        print('torch_peers.py: %s' % e, file=sys.stderr)
        return 2
    # inductor and triton read these when they first need a cache, so they are set before torch is imported; a
    # fresh folder by default, so that compile_s is a cold compile
    tmp = None if a.inductor_cache else tempfile.mkdtemp(prefix='torch_peers_')
    cache = a.inductor_cache or tmp
    os.environ.setdefault('TORCHINDUCTOR_CACHE_DIR', os.path.join(cache, 'inductor'))
    os.environ.setdefault('TRITON_CACHE_DIR', os.path.join(cache, 'triton'))
    try:
        try:
            import torch as torch_mod
            import torch.nn.functional as F_mod
        except Exception as e:
            for m in a.modes:
                print('torch %s mode=%s device=%s error="unavailable: %s"' % (name, m, a.device, one_line(e)))
            return 3
        torch, F = torch_mod, F_mod
        COLD_DIR = tmp
        if a.device == 'cuda' and not torch.cuda.is_available():
            for m in a.modes:
                print('torch %s mode=%s device=cuda error="unavailable: no CUDA device for torch %s"' % (
                    name, m, torch.__version__))
            return 3
        return cmd_time(a, plan) if a.cmd == 'time' else cmd_dynamic(a, plan)
    except UsageError as e:
        print('torch_peers.py: %s' % e, file=sys.stderr)
        return 2
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
