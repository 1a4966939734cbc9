"""Distributed tuning's throughput: the measured points of bench/mpi-scaling.sh and a model that projects them.

usage: mpi_model.py SCALING.tsv PINGPONG.txt OUT_PREFIX --cores N --cpu TEXT --mpi TEXT --date D --command TEXT
writes OUT_PREFIX.md (and OUT_PREFIX.png when matplotlib is there)

The model, per candidate: every rank builds its batch on its c cores in parallel (b core-seconds a candidate, from
the local run: its build wall time times the cores it used), then runs it (m seconds, measured one at a time); so a
rank delivers c / (b + c*m) candidates a second, and N ranks N times that. Rank 0 spends r0 on each candidate
whoever measures it: its share of the search and the model's retraining (the largest run's "search and model"
time per trial), a message round trip on the interconnect, and one fsynced log record. Throughput is the smaller
of the two: N c / (b + c m) and 1 / r0; rank 0 becomes the bottleneck at N* = (b/c + m) / r0 ranks."""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('tsv')
    ap.add_argument('pingpong')
    ap.add_argument('out')
    ap.add_argument('--cores', type=int, required=True)
    ap.add_argument('--cpu', default='')
    ap.add_argument('--mpi', default='')
    ap.add_argument('--date', default='')
    ap.add_argument('--command', default='')
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.tsv), delimiter='\t'))
    if not rows:
        sys.exit('no measurements in %s' % a.tsv)
    for r in rows:
        for k in ('ranks', 'trials'):
            r[k] = int(r[k])
        for k in ('wall_s', 'build_s', 'measure_s', 'search_s'):
            r[k] = float(r[k])
        r['per_min'] = r['trials'] / r['wall_s'] * 60 if r['wall_s'] > 0 else 0
    pp = {}
    for line in open(a.pingpong):
        k, v = line.split()
        pp[k] = float(v) * 1e-6
    base = min(rows, key=lambda r: r['ranks'])
    c = a.cores
    b = base['build_s'] * min(c, base['trials']) / base['trials']  # core-seconds a candidate
    m = base['measure_s'] / base['trials']
    big = max(rows, key=lambda r: r['ranks'])
    search = big['search_s'] / big['trials']
    r0 = search + pp['rtt_us'] + pp['fsync_us']
    t_cand = b / c + m
    rank_rate = 1 / t_cand  # candidates a second per rank
    cap = 1 / r0
    nstar = t_cand / r0

    def proj(n):
        return min(n * rank_rate, cap) * 60

    md = []
    md.append('# Distributed tuning: trials per minute against MPI ranks (%s)\n' % a.date)
    md.append('Machine: %s, %d cores; %s. Workload: conv2d N=1 C=64 56x56 F=64 (3x3, stride 2) on the C target, '
              'a fresh log and the same seed per run; 1 rank is the plain local `kgen tune`.\n' % (a.cpu, c, a.mpi))
    md.append('Command: `%s`\n' % a.command)
    md.append('## Measured on this machine\n')
    md.append('| ranks | trials | wall | trials/min | build (all ranks) | measure (all ranks) | search+model (rank 0) | results per rank |')
    md.append('|---|---|---|---|---|---|---|---|')
    for r in rows:
        md.append('| %d | %d | %.1f s | %.1f | %.1f s | %.1f s | %.1f s | %s |' % (
            r['ranks'], r['trials'], r['wall_s'], r['per_min'], r['build_s'], r['measure_s'], r['search_s'],
            r['per_rank'].replace(',', ' ')))
    md.append('')
    md.append('All ranks share the same %d cores here, so more ranks cannot build faster than one rank with %d '
              'build threads: these points show what distribution costs and what overlapping the search with the '
              'measurements gains, not the scaling of a cluster. Ranks on one machine take turns at timing runs '
              '(a lock), so their times stay comparable; their builds overlap.\n' % (c, c))
    md.append('## Model\n')
    md.append('| parameter | value | from |')
    md.append('|---|---|---|')
    md.append('| b, build core-seconds per candidate | %.3f s | the 1-rank run: build wall %.1f s x %d cores / %d |' % (
        b, base['build_s'], min(c, base['trials']), base['trials']))
    md.append('| m, run seconds per candidate | %.3f s | the 1-rank run: measure %.1f s / %d |' % (
        m, base['measure_s'], base['trials']))
    md.append('| search and model per trial (rank 0) | %.2f ms | the %d-rank run: %.1f s / %d |' % (
        search * 1e3, big['ranks'], big['search_s'], big['trials']))
    md.append('| message round trip (1 KB out, 0.4 KB back) | %.1f us | bench/mpi_pingpong.c on this machine |' % (
        pp['rtt_us'] * 1e6))
    md.append('| one log record fsynced | %.0f us | bench/mpi_pingpong.c |' % (pp['fsync_us'] * 1e6))
    md.append('| r0, rank 0 per candidate | %.2f ms | the three above |' % (r0 * 1e3))
    md.append('')
    md.append('A rank of %d cores delivers %.1f trials/min (b/c + m = %.3f s a candidate); rank 0 can take %.0f '
              'trials/min (1/r0). **Rank 0 becomes the bottleneck at about %.0f ranks** of %d cores each.\n' % (
                  c, rank_rate * 60, t_cand, cap * 60, nstar, c))
    md.append('| ranks (of %d cores each) | projected trials/min | bound by |' % c)
    md.append('|---|---|---|')
    for n in (1, 2, 4, 8, 64, 512):
        md.append('| %d | %.0f | %s |' % (n, proj(n), 'rank 0' if n * rank_rate > cap else 'the ranks'))
    md.append('')
    md.append('Caveats: the search and model cost per trial is this budget\'s; XGBoost\'s retraining grows with '
              'the rows it learns from (every measured record), so a long run\'s rank 0 saturates earlier. A '
              'network adds its round trip (tens of microseconds on Ethernet, a few on InfiniBand) to r0, '
              'negligible beside the search. A rank whose candidates take long to build (a large kernel) moves N* '
              'up; GPU ranks, whose candidates build in seconds and run in milliseconds, move it down.\n')
    open(a.out + '.md', 'w').write('\n'.join(md))
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('no matplotlib: no plot')
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    ax.plot(xs, [proj(n) for n in xs], '-', label='model: ranks of %d cores each' % c)
    ax.axhline(cap * 60, color='gray', ls=':', label='rank 0 limit (1/r0)')
    ax.plot([r['ranks'] for r in rows], [r['per_min'] for r in rows], 'o', label='measured here (%d cores shared)' % c)
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    ax.set_xlabel('MPI ranks')
    ax.set_ylabel('trials per minute')
    ax.set_title('kgen tune under mpirun: conv2d on the CPU (%s)' % a.date)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out + '.png', dpi=110)


if __name__ == '__main__':
    main()
