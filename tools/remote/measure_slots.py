#!/usr/bin/env python3
"""measure_slots.py — what one CLUSTER SLOTS costs on a running cluster: the
reply's bytes, the client's wall time per call, and Redis's own time per call
(INFO commandstats, cmdstat_cluster|slots usec_per_call, after a CONFIG
RESETSTAT of that node). Standard library only.

  tools/remote/measure_slots.py --port 7300 [--host 127.0.0.1] [--calls 2000]

Feeds docs/remote.md ("At fleet scale"), "Failover and the slot map". RESETSTAT clears
that node's command statistics: run it on a test cluster.
"""
import argparse
import socket
import sys
import time


def send(sock, *args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    sock.sendall(b"".join(out))


def read_reply(f):
    """One RESP2 reply from file f; returns (value, raw byte count)."""
    line = f.readline()
    n = len(line)
    kind, body = line[:1], line[1:-2]
    if kind in (b"+", b"-", b":"):
        return body, n
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None, n
        data = f.read(size + 2)
        return data[:-2], n + size + 2
    if kind == b"*":
        items = []
        for _ in range(max(0, int(body))):
            v, k = read_reply(f)
            items.append(v)
            n += k
        return items, n
    raise ValueError(f"unexpected reply {line[:40]!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    s = socket.create_connection((a.host, a.port))
    f = s.makefile("rb")
    send(s, "CONFIG", "RESETSTAT")
    read_reply(f)
    t0 = time.perf_counter()
    for _ in range(a.calls):
        send(s, "CLUSTER", "SLOTS")
        slots, size = read_reply(f)
    t1 = time.perf_counter()
    send(s, "INFO", "commandstats")
    stats, _ = read_reply(f)
    usec = None
    for line in stats.decode().splitlines():
        if line.startswith("cmdstat_cluster|slots:"):
            usec = float(line.split("usec_per_call=")[1].split(",")[0])
    nodes = len({(n[0], n[1]) for r in slots for n in r[2:]})
    print(f"{len(slots)} slot ranges, {nodes} nodes: reply {size:,} bytes; "
          f"{(t1 - t0) / a.calls * 1e6:.0f} us per call at the client (one connection, "
          f"one at a time), Redis usec_per_call {usec}")
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
