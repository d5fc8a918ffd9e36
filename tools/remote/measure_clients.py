#!/usr/bin/env python3
"""measure_clients.py — what one client connection costs a Redis node:
used_memory (INFO memory) and the process's open descriptors before and
after N idle connections, then after each of them sends one GET of a large
value and does not read the reply (the reply waits in Redis's output buffer
beyond what the kernel's socket buffers took). Standard library only; talks
RESP over a socket. The figures feed docs/remote.md ("At fleet scale"), "Connections".

  tools/remote/measure_clients.py --port 7300 [--host 127.0.0.1] [--n 1000]
      [--value-bytes 2097152] [--pid PID]

The node must be a master or a standalone Redis with room for one value; the
key it writes (--key, default kvtier-measure-clients) is deleted at the end. With
--pid, the node's open descriptors are counted from /proc/PID/fd.
"""
import argparse
import os
import socket
import sys
import time


def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def call(sock, *args):
    sock.sendall(cmd(*args))
    buf = b""
    while True:
        buf += sock.recv(1 << 20)
        if buf[:1] in (b"+", b"-", b":") and buf.endswith(b"\r\n"):
            return buf
        if buf[:1] == b"$":
            head, _, rest = buf.partition(b"\r\n")
            n = int(head[1:])
            if n < 0 or len(rest) >= n + 2:
                return rest[:n] if n >= 0 else None


def info_field(sock, section, field):
    text = call(sock, "INFO", section).decode()
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise KeyError(field)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd")) if pid else -1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=2 * 1024 * 1024)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--key", default="kvtier-measure-clients")
    a = ap.parse_args()
    ctl = socket.create_connection((a.host, a.port))
    key = a.key
    r = call(ctl, "SET", key, b"x" * a.value_bytes)
    if not r.startswith(b"+OK"):
        print(f"measure_clients: SET answered {r[:80]!r} (a cluster replica, or the key's slot "
              "is elsewhere: use the node that owns it)", file=sys.stderr)
        return 1
    time.sleep(0.2)
    m0, f0 = info_field(ctl, "memory", "used_memory"), fds(a.pid)
    socks = [socket.create_connection((a.host, a.port)) for _ in range(a.n)]
    for s in socks:                      # one round trip each: accepted and set up
        call(s, "PING")
    time.sleep(0.5)
    m1, f1 = info_field(ctl, "memory", "used_memory"), fds(a.pid)
    for s in socks:
        s.sendall(cmd("GET", key))       # replies left unread
    time.sleep(2)
    m2 = info_field(ctl, "memory", "used_memory")
    out = info_field(ctl, "memory", "mem_clients_normal")
    print(f"idle: {(m1 - m0) / a.n:,.0f} bytes of used_memory per connection, "
          f"{(f1 - f0) / a.n if a.pid else float('nan'):.2f} descriptors per connection")
    print(f"one unread GET of {a.value_bytes:,} bytes each: {(m2 - m1) / a.n:,.0f} more bytes "
          f"per connection; mem_clients_normal {out:,} for {a.n} clients")
    for s in socks:
        s.close()
    call(ctl, "DEL", key)
    ctl.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
