#!/usr/bin/env python3
"""bench_remote_lmcache.py — LMCache 0.5.6's own Redis remote backend, driven
the way an engine drives it, against a running Redis (Cluster) given by URL:
the figures that `kvtier bench remote URL` is set beside (issue 34).

What runs: LMCache's RemoteBackend (lmcache.v1.storage_backend.remote_backend),
built with the arguments its StorageManager passes for a legacy `remote_url`
(config, metadata, its asyncio loop in a thread, a LocalCPUBackend as the
buffer, dst_device "cpu"), remote_serde "naive", local_cpu off. RemoteBackend
makes the connector from the URL through LMCache's own adapters:

  redis-cluster://h:p[,h:p]  RedisClusterConnector (redis-py's asyncio
                             RedisCluster: slot map, MOVED/ASK, a pool per
                             node of up to 150 connections)
  redis://h:p                RedisConnector (redis-py, one server, no cluster)

A kvtier-style URL `redis://h:p[,h:p...]` is given to LMCache as
redis-cluster:// when its first seed answers cluster_enabled:1. LMCache's
native RESP connector (resp://, lmcache.lmcache_redis) speaks to one server
and does not follow MOVED, so it cannot run on a cluster and is not a
subject here; --standalone measures RedisConnector on a non-cluster Redis.

Per chunk, LMCache's Redis connectors do (read in redis_connector.py):
  store  SET <key>kv_bytes <chunk>, then SET <key>metadata <28+ bytes:
         length, format, dtype, 4-d shape>, one after the other;
  load   GET <key>metadata, allocate a memory object of the CPU backend,
         GET <key>kv_bytes (redis-py returns a new bytes object), copy it
         into the memory object.
So two round trips per chunk each way, one of them on a tiny value, and one
extra copy on load. No checksum: a damaged value is returned as it is.

Timed, per chunk size and repetition:
  store  the chunks, already in memory objects of LMCache's CPU backend (the
         engine's KV after its GPU->CPU copy), given to
         RemoteBackend.batched_submit_put_task in batches of --concurrency
         chunks; a batch is done when its completion callback ran for every
         key, and the next batch starts then. In flight: <= --concurrency.
  load   RemoteBackend.batched_get_blocking(batch of --concurrency keys) (the
         call StorageManager makes to retrieve), batch after batch: the
         chunks end in memory objects of the CPU backend (DRAM).
Every loaded byte is compared with what was stored (after the clock): a
wrong byte stops the run; a chunk missing on load (its put failed, which
LMCache's batched put logs but does not report) is counted as lost, and a
run with any lost chunk exits 1 after its figures. Keys are deleted after each
repetition (untimed). CPU seconds per GB: getrusage of this process (all its
threads: the caller, LMCache's event loop, redis-py's parsing). Server CPU
seconds per GB: the sum over every node of the cluster of INFO cpu
(used_cpu_user + used_cpu_sys) before and after, replicas included.

Chunk geometry: llama3-8b bf16 KV (32 layers x 2 x 8 heads x 128 = 128 KiB a
token), so a 256 KiB chunk is LMCache chunk_size 2 tokens and 1 MiB is 8; the
bytes on the wire do not depend on how they are split into tokens.

Needs: LMCache 0.5.6 and torch (the engines' venv, tools/engines-venv.sh) and
redis-py, which LMCache requires but the engines' venv does not install
(LMCache is installed --no-deps there); with redis-py in a directory of its
own. Its version matters and is printed: with 8.1.0 (the release of the
day) LMCache's concurrent puts fail now and then and are reported done (the
run counts them as lost); 5.2.1 lost none (docs/remote-lmcache.md):
  python3 -m pip install --target /tmp/redis-py redis==5.2.1
  PYTHONPATH=/tmp/redis-py ~/.cache/kvtier-dev/engines-venv/bin/python \\
      bindings/python/bench_remote_lmcache.py --url redis://127.0.0.1:7300

Exit 0; 1 on a failure (a chunk lost or loaded wrong);
2 on bad usage or a missing package.
"""

import argparse
import asyncio
import ctypes
import json
import os
import random
import resource
import statistics
import sys
import threading
import time

KiB = 1 << 10
MiB = 1 << 20
TOKEN_BYTES = 128 * KiB   # llama3-8b bf16: 32 layers x 2 x 8 x 128 x 2 bytes
KV_SHAPE_LAYERS, KV_HEADS, HEAD_DIM = 32, 8, 128


def cpu_seconds():
    """User + system CPU of this process, all threads."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    return s.ru_utime + s.ru_stime


def parse_size(text):
    units = {"": 1, "k": KiB, "m": MiB, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in units else ""
    n = int(t[:-1] if unit else t)
    if n <= 0:
        raise ValueError(text)
    return n * units[unit]


def seeds_of(url):
    """[(host, port)] from redis://[user[:pw]@]h:p[,h:p] or redis-cluster://."""
    rest = url.split("://", 1)[1] if "://" in url else url
    rest = rest.rsplit("@", 1)[-1].split("/", 1)[0]
    out = []
    for hp in rest.split(","):
        hp = hp.split("://", 1)[-1]
        host, _, port = hp.rpartition(":")
        out.append((host or "127.0.0.1", int(port or 6379)))
    return out


def auth_of(url):
    rest = url.split("://", 1)[1] if "://" in url else url
    if "@" not in rest:
        return "", ""
    cred = rest.rsplit("@", 1)[0]
    user, _, pw = cred.partition(":") if ":" in cred else ("", "", cred)
    return user, pw


class Servers:
    """A plain redis-py view of the same deployment: cluster detection,
    INFO cpu of every node, and deleting the benchmark's keys (untimed)."""

    def __init__(self, url, standalone):
        import redis
        from redis.cluster import ClusterNode, RedisCluster
        user, pw = auth_of(url)
        seeds = seeds_of(url)
        kw = {"username": user or None, "password": pw or None}
        first = redis.Redis(host=seeds[0][0], port=seeds[0][1], **kw)
        self.cluster = not standalone and first.info("cluster").get("cluster_enabled") == 1
        if self.cluster:
            self.client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in seeds], **kw)
            self.nodes = [redis.Redis(host=n.host, port=n.port, **kw)
                          for n in self.client.get_nodes()]
            first.close()
        else:
            self.client = first
            self.nodes = [first]
        self.lmcache_url = ("redis-cluster://" if self.cluster else "redis://") + \
            (f"{user}:{pw}@" if pw else "") + ",".join(f"{h}:{p}" for h, p in seeds)
        if not self.cluster:
            self.lmcache_url = self.lmcache_url.split(",")[0]

    def cpu(self):
        total = 0.0
        for n in self.nodes:
            i = n.info("cpu")
            total += float(i["used_cpu_user"]) + float(i["used_cpu_sys"])
        return total

    def delete(self, names):
        for i in range(0, len(names), 256):
            if self.cluster:
                for k in names[i:i + 256]:
                    self.client.delete(k)
            else:
                self.client.delete(*names[i:i + 256])

    def close(self):
        for n in self.nodes:
            n.close()
        self.client.close()


class LMCacheRemote:
    """LMCache's RemoteBackend with its own connector for the URL."""

    def __init__(self, url, chunk, n, run_id):
        import torch
        from lmcache.utils import CacheEngineKey
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend
        if chunk % TOKEN_BYTES:
            raise ValueError(f"chunk size must be a multiple of {TOKEN_BYTES} bytes")
        tokens = chunk // TOKEN_BYTES
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        total = n * chunk
        gib = total / 2**30
        self.cfg = LMCacheEngineConfig.from_defaults(
            chunk_size=tokens, local_cpu=False, max_local_cpu_size=2 * gib + 0.25,
            remote_url=url, remote_serde="naive", lmcache_instance_id="bench-remote")
        self.meta = LMCacheMetadata(
            model_name=f"kvtier-bench-{run_id}", world_size=1, local_world_size=1,
            worker_id=0, local_worker_id=0, kv_dtype=torch.bfloat16,
            kv_shape=(KV_SHAPE_LAYERS, 2, tokens, KV_HEADS, HEAD_DIM), chunk_size=tokens)
        # The CPU backend's pages: the chunks to store and the loaded ones.
        # Touched now, so that no first-touch fault lands in a timed phase.
        self.pool = torch.zeros(2 * total + 4096, dtype=torch.uint8)
        off = (-self.pool.data_ptr()) % 4096
        alloc = TensorMemoryAllocator(self.pool[off:off + 2 * total], align_bytes=4096)
        self.cpu = LocalCPUBackend(self.cfg, self.meta, dst_device="cpu", memory_allocator=alloc)
        self.backend = RemoteBackend(self.cfg, self.meta, self.loop, self.cpu, dst_device="cpu")
        if self.backend.connection is None:
            raise RuntimeError(f"lmcache: no connection to {url}")
        # RemoteBackend wraps the connector in its InstrumentedRemoteConnector.
        self.conn = getattr(self.backend.connection, "_connector", self.backend.connection)
        self.connector = type(self.conn).__name__
        self.chunk = chunk
        self.key = lambda i: CacheEngineKey(self.meta.model_name, 1, 0, i + 1, torch.bfloat16)

    def fill(self, src, n):
        """The engine's KV in the CPU backend's memory objects (untimed)."""
        from lmcache.v1.memory_management import MemoryFormat
        objs = []
        for i in range(n):
            o = self.cpu.allocate(self.meta.get_shapes(), self.meta.get_dtypes(),
                                  MemoryFormat.KV_2LTD)
            if o is None:
                raise RuntimeError("lmcache: its CPU allocator is out of memory")
            ctypes.memmove(o.data_ptr, src.addr + i * self.chunk, self.chunk)
            objs.append(o)
        return objs

    def store(self, keys, objs, batch):
        for b in range(0, len(keys), batch):
            done = threading.Semaphore(0)
            k = keys[b:b + batch]
            self.backend.batched_submit_put_task(k, objs[b:b + batch],
                                                 on_complete_callback=lambda _k: done.release())
            for _ in k:
                if not done.acquire(timeout=120):
                    raise RuntimeError("lmcache: a put did not complete in 120 s")
        failed = self.backend.put_failed_count
        if failed:
            raise RuntimeError(f"lmcache: {failed} puts failed")

    def load(self, keys, batch):
        got = []
        for b in range(0, len(keys), batch):
            got.extend(self.backend.batched_get_blocking(keys[b:b + batch]))
        return got

    def close(self):
        # Not RemoteBackend.close(): in LMCache 0.5.6 the Redis connectors'
        # close() awaits pq_executor.shutdown(), which blocks the event loop's
        # own thread on a future that loop must run, so it never returns.
        # The same two steps, without the deadlock: drain the job queue, then
        # close the client's connections.
        conn = self.conn
        client = getattr(conn, "cluster", None) or getattr(conn, "connection", None)

        async def shut():
            await conn.pq_executor.shutdown_async(wait=True)
            await client.aclose()
        try:
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(30)
        except Exception as e:  # a job that never ends keeps the queue from draining
            print(f"bench_remote_lmcache: LMCache's connector did not close in 30 s "
                  f"({type(e).__name__}); its loop is stopped", file=sys.stderr)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()


class Source:
    """n chunks of deterministic pseudo-random bytes (seeded)."""

    def __init__(self, n, size, seed):
        rnd = random.Random(seed)
        self.buf = bytearray(n * size)
        for i in range(n):
            self.buf[i * size:(i + 1) * size] = rnd.randbytes(size)
        self.addr = ctypes.addressof((ctypes.c_char * len(self.buf)).from_buffer(self.buf))
        self.view = memoryview(self.buf)
        self.size = size


def verify(src, got, chunk):
    """(chunks not loaded, chunks loaded with other bytes), as index lists."""
    missing, wrong = [], []
    for i, o in enumerate(got):
        if o is None:
            missing.append(i)
        elif ctypes.string_at(o.data_ptr, chunk) != src.view[i * chunk:(i + 1) * chunk]:
            wrong.append(i)
    return missing, wrong


def one_rep(args, chunk, rep, servers, src):
    n = len(src.buf) // chunk
    run_id = f"{os.getpid()}-{chunk}-{rep}"
    subject = LMCacheRemote(servers.lmcache_url, chunk, n, run_id)
    keys = [subject.key(i) for i in range(n)]
    names = [k.to_string() + s for k in keys for s in ("kv_bytes", "metadata")]
    out = {"connector": subject.connector}
    try:
        objs = subject.fill(src, n)
        for phase in ("store", "load"):
            s0, c0, t0 = servers.cpu(), cpu_seconds(), time.perf_counter()
            if phase == "store":
                subject.store(keys, objs, args.concurrency)
            else:
                got = subject.load(keys, args.concurrency)
            t1, c1, s1 = time.perf_counter(), cpu_seconds(), servers.cpu()
            gb = n * chunk / 1e9
            out[phase] = {"gbps": gb / (t1 - t0), "cpu_s_per_gb": (c1 - c0) / gb,
                          "server_cpu_s_per_gb": (s1 - s0) / gb, "seconds": t1 - t0}
            if phase == "store":
                for o in objs:
                    o.ref_count_down()
        missing, wrong = verify(src, got, chunk)
        for o in got:
            if o is not None:
                o.ref_count_down()
        if wrong:
            raise RuntimeError(f"lmcache: chunk {wrong[0]} of {n} was loaded with other bytes")
        # A chunk whose put failed is a miss on load: LMCache's batched put
        # logs the error and still reports the batch done (its callback
        # does not look at the result). Counted, and the run fails.
        out["lost"] = len(missing)
    finally:
        subject.close()
        servers.delete(names)
    return out


def median_of(reps, phase, field):
    return statistics.median(r[phase][field] for r in reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True,
                    help="redis://[user[:pw]@]h:p[,h:p...] (cluster detected) or redis-cluster://...")
    ap.add_argument("--sizes", default="256k,1m", help="chunk sizes, comma-separated (multiples of 128 KiB)")
    ap.add_argument("--total", default="256m", help="bytes stored and loaded per size and repetition")
    ap.add_argument("--concurrency", type=int, default=8,
                    help="chunks per batched call, so chunks in flight at most (default 8)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions; figures are medians")
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--standalone", action="store_true",
                    help="a single non-cluster Redis: LMCache's RedisConnector")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        total = parse_size(args.total)
    except ValueError as e:
        ap.error(f"bad size: {e}")
    if args.concurrency < 1 or args.reps < 1:
        ap.error("--concurrency and --reps must be >= 1")
    for s in sizes:
        if s % TOKEN_BYTES or total < s:
            ap.error(f"chunk {s}: a multiple of {TOKEN_BYTES} bytes, at most --total")
    # LMCache reads its log level once, at import; its INFO lines per
    # connector and allocator would bury the figures.
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    try:
        import lmcache  # noqa: F401
        import redis  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"bench_remote_lmcache: {e.name} is not importable here (see --help: "
              "LMCache and torch come with the engines' venv, redis-py must be added)",
              file=sys.stderr)
        return 2
    from importlib.metadata import version

    servers = Servers(args.url, args.standalone)
    result = {"lmcache": version("lmcache"), "redis_py": version("redis"),
              "url": servers.lmcache_url.rsplit("@", 1)[-1], "cluster": servers.cluster,
              "nodes": len(servers.nodes), "concurrency": args.concurrency,
              "reps": args.reps, "sizes": []}
    status = 0
    try:
        for chunk in sizes:
            n = total // chunk
            src = Source(n, chunk, args.seed)
            reps = [one_rep(args, chunk, r, servers, src) for r in range(args.reps)]
            row = {"chunk_bytes": chunk, "chunks": n, "connector": reps[0]["connector"],
                   "lost": sum(r["lost"] for r in reps), "reps": reps}
            if row["lost"]:
                status = 1
            for phase in ("store", "load"):
                row[phase] = {f: median_of(reps, phase, f)
                              for f in ("gbps", "cpu_s_per_gb", "server_cpu_s_per_gb")}
            result["sizes"].append(row)
            if not args.json:
                print(f"{chunk // KiB:>6} KiB x {n}  {row['connector']}  concurrency "
                      f"{args.concurrency}  median of {args.reps}:")
                for phase in ("store", "load"):
                    p = row[phase]
                    print(f"    {phase:5}  {p['gbps']:6.2f} GB/s   {p['cpu_s_per_gb']:5.2f} CPU s/GB"
                          f" (this process)   {p['server_cpu_s_per_gb']:5.2f} CPU s/GB (servers)")
                if row["lost"]:
                    print(f"    LOST   {row['lost']} of {n * args.reps} chunks stored were "
                          "missing on load (LMCache logged the put errors)")
    except RuntimeError as e:
        print(f"bench_remote_lmcache: {e}", file=sys.stderr)
        status = 1
    finally:
        servers.close()
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    return status


if __name__ == "__main__":
    sys.exit(main())
