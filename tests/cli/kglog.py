# A minimal msgpack reader/writer (Python's standard library has none) for tests/cli/test_cli_logs.sh:
#   kglog.py dups LOG [FROM [SKIP]]  how many records (starting at byte FROM or later, but for the first SKIP of
#                                  them) repeat a schedule (same workload, target and trace) an earlier record holds
#   kglog.py broken|newer|implausible LOG   writes to stdout a record derived from LOG's records: the best by far
#                                  but naming a loop the program lacks; the same of format version 2; the slowest
#                                  schedule claiming 1e-15 s
import struct, sys

def unpack(b, p):
    c = b[p]; p += 1
    if c <= 0x7f: return c, p
    if c >= 0xe0: return c - 0x100, p
    if 0x80 <= c <= 0x8f: return unmap(b, p, c & 15)
    if 0x90 <= c <= 0x9f: return unarr(b, p, c & 15)
    if 0xa0 <= c <= 0xbf: n = c & 31; return b[p:p + n].decode('utf-8', 'replace'), p + n
    if c == 0xc0: return None, p
    if c in (0xc2, 0xc3): return c == 0xc3, p
    if c in (0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb):
        k = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}[c]
        n = int.from_bytes(b[p:p + k], 'big'); p += k
        v = b[p:p + n]
        return (v if c < 0xd0 else v.decode('utf-8', 'replace')), p + n
    if c == 0xca: return struct.unpack('>f', b[p:p + 4])[0], p + 4
    if c == 0xcb: return struct.unpack('>d', b[p:p + 8])[0], p + 8
    if 0xcc <= c <= 0xcf: k = 1 << (c - 0xcc); return int.from_bytes(b[p:p + k], 'big'), p + k
    if 0xd0 <= c <= 0xd3: k = 1 << (c - 0xd0); return int.from_bytes(b[p:p + k], 'big', signed=True), p + k
    if c in (0xdc, 0xdd): k = 2 if c == 0xdc else 4; return unarr(b, p + k, int.from_bytes(b[p:p + k], 'big'))
    if c in (0xde, 0xdf): k = 2 if c == 0xde else 4; return unmap(b, p + k, int.from_bytes(b[p:p + k], 'big'))
    raise ValueError('unsupported byte %#x' % c)

def unarr(b, p, n):
    out = []
    for _ in range(n):
        v, p = unpack(b, p); out.append(v)
    return out, p

def unmap(b, p, n):
    out = {}
    for _ in range(n):
        k, p = unpack(b, p); v, p = unpack(b, p); out[k] = v
    return out, p

def pack(o):
    if o is None: return b'\xc0'
    if o is True: return b'\xc3'
    if o is False: return b'\xc2'
    if isinstance(o, int):
        if 0 <= o <= 0x7f: return bytes([o])
        return (b'\xd3' + o.to_bytes(8, 'big', signed=True))
    if isinstance(o, float): return b'\xcb' + struct.pack('>d', o)
    if isinstance(o, str):
        e = o.encode(); return (bytes([0xa0 | len(e)]) if len(e) < 32 else b'\xdb' + len(e).to_bytes(4, 'big')) + e
    if isinstance(o, list): return b'\xdd' + len(o).to_bytes(4, 'big') + b''.join(pack(x) for x in o)
    if isinstance(o, dict):
        items = list(o.items())
        if 'v' in o: items = [('v', o['v'])] + [kv for kv in items if kv[0] != 'v']  # "v" first, as kgen writes
        head = bytes([0x80 | len(items)]) if len(items) < 16 else b'\xdf' + len(items).to_bytes(4, 'big')
        return head + b''.join(pack(k) + pack(v) for k, v in items)
    raise TypeError(type(o))

def records(path, offsets=None):
    """The records of a log whose every byte is a record (the logs kgen itself wrote), and where each starts."""
    b = open(path, 'rb').read(); p = 0; out = []
    while p < len(b):
        if offsets is not None: offsets.append(p)
        r, p = unpack(b, p); out.append(r)
    return out

def median(t):
    t = sorted(t); n = len(t)
    return t[n // 2] if n % 2 else 0.5 * (t[n // 2 - 1] + t[n // 2])

def key(r):
    w, t = r['workload'], r['target']
    return (w['name'], w['hash'], t['kind'], t['arch'], t['device'], repr(r['trace']))

def main():
    cmd, path = sys.argv[1], sys.argv[2]
    offs = []
    recs = records(path, offs)
    if cmd == 'dups':  # how many records (from byte FROM on, but for the first SKIP of them) repeat a schedule
        start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
        skip = int(sys.argv[4]) if len(sys.argv) > 4 else 0
        seen, dups, n = set(), 0, 0
        for r, o in zip(recs, offs):
            if o >= start:
                if skip: skip -= 1
                else: dups += key(r) in seen; n += 1
            seen.add(key(r))
        print('records %d duplicates %d' % (n, dups)); return
    ok = [r for r in recs if r['result']['status'] == 'ok' and r['result']['times']]
    best = min(ok, key=lambda r: median(r['result']['times']))
    worst = max(ok, key=lambda r: median(r['result']['times']))
    fast = median(best['result']['times']) / 10
    if cmd == 'broken':    # the best by far, naming a loop the program does not have
        r = dict(best); r['trace'] = [['split', 'C', ['nosuchloop'], [4]]]
    elif cmd == 'newer':   # the best by far, of a format version this kgen does not know
        r = dict(best); r['v'] = 2; r['trace'] = [['split', 'C', ['newerloop'], [4]]]
    elif cmd == 'implausible':  # the slowest schedule, claiming a time no machine reaches
        r = dict(worst); fast = 1e-15
    else:
        raise SystemExit('unknown command ' + cmd)
    r['result'] = dict(r['result']); r['result']['times'] = [fast] * 3
    sys.stdout.buffer.write(pack(r))

if __name__ == '__main__':
    main()
