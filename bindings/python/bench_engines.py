#!/usr/bin/env python3
"""bench_engines.py — kvtier beside each engine's own disk store, and beside
the raw disk, in one run, on the same chunks.

For each chunk size, every subject stores the same chunks (random bytes),
has its files synced and dropped from the page cache, loads them back, and
the loaded bytes are checked against what was stored. Subjects:

  raw            O_DIRECT pwritev/preadv of the chunks over a preallocated file,
                 from a pool of threads: the disk's own speed in this run
  kvtier         kvt_put / kvt_get through the Python binding (kvtier.Engine),
                 persist=0 (non-durable) and persist=1 (flushed: fsync'd);
                 the load of the persisted store runs in a reopened engine
  lmcache        LMCache 0.5.6 LocalDiskBackend, default (buffered) and
                 use_odirect
  sglang         SGLang 0.5.23 HiCacheFile
  vllm           vLLM 0.33.0 kv_offload `fs` secondary tier, one request and
                 eight concurrent requests

The engines' subjects run when their package imports (run this with the
engines' venv python, see tools/engines-venv.sh); a missing one is reported
and skipped. Figures: store GB/s (until the store says done), durable GB/s
(the store followed by fsync of every file it made; kvtier persist=1 fsyncs
itself), load GB/s (disk -> host buffer the caller can use), and CPU seconds
per GB (getrusage of this process, its threads and children; the kernel's
write-back threads are not counted). Subjects are interleaved, their order
rotated each repetition, and every ratio is taken within one repetition and
then the median over repetitions: the machine is shared.

Page cache: after the sync, every file of the subject is dropped with
posix_fadvise(POSIX_FADV_DONTNEED) (its pages are clean by then), and with
--drop-caches also through /proc/sys/vm/drop_caches (root; the whole
machine's cache).

Usage: bench_engines.py [--help] (see --help). Exit 0, 1 on a failure
(wrong bytes loaded are a failure), 2 on bad usage.
"""

import argparse
import ctypes
import json
import mmap
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
HUGE_PAGE = 2 * MiB


# ----------------------------------------------------------------- helpers

def cpu_seconds():
    """User + system CPU of this process (all threads) and its waited children."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def parse_size(text, what):
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in "kmg" else (t, "")
    try:
        v = int(num) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} {text!r}: want a size like 32M or 1G") from None
    if v <= 0 or v % 4096:
        raise argparse.ArgumentTypeError(f"{what} {text!r}: want a positive multiple of 4 KiB")
    return v


def files_under(path):
    for root, _dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not os.path.islink(p):
                yield p


def fsync_tree(path):
    """fsync of every regular file under path, then of the directories."""
    for p in files_under(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for root, _dirs, _names in os.walk(path):
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def drop_tree(path, whole_machine):
    """Drops the files under path from the page cache (they are clean: synced
    first). Returns the method used."""
    for p in files_under(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if whole_machine:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "posix_fadvise(DONTNEED) + /proc/sys/vm/drop_caches"
    return "posix_fadvise(DONTNEED)"


class Chunks:
    """n chunks of size bytes in one page-aligned anonymous mapping (O_DIRECT
    can read and write it in place). Chunk i is a random block rotated by
    i * 4 KiB + 64 bytes, its first 8 bytes replaced by i: every chunk, and
    every page of every chunk, differs from the others."""

    def __init__(self, n, size, seed=17):
        self.n, self.size = n, size
        # In 2 MiB pages where the kernel allows, as kvtier's own DMA buffers
        # and `kvtier bench ssd`'s raw side are: on a virtual disk, reads
        # into 4 KiB pages are served several times slower
        # (docs/performance.md#huge-pages). Private anonymous memory, from a
        # 2 MiB boundary: mmap.mmap(-1, n) alone is a shared mapping (shmem),
        # which kernels back with huge pages only where
        # transparent_hugepage/shmem_enabled allows (never, by default).
        flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
        extra = HUGE_PAGE
        self.map = (mmap.mmap(-1, n * size + extra, flags=flags) if flags
                    else mmap.mmap(-1, n * size + extra))
        if hasattr(mmap, "MADV_HUGEPAGE"):
            self.map.madvise(mmap.MADV_HUGEPAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        off = -base % HUGE_PAGE
        self.view = memoryview(self.map)[off:off + n * size]
        self.addr = base + off
        rnd = random.Random(seed)
        base = b"".join(rnd.randbytes(min(size, 8 * MiB)) for _ in range(-(-size // (8 * MiB))))
        base = base[:size]
        for i in range(n):
            r = (i * 4096 + 64) % size
            c = self.view[i * size:(i + 1) * size]
            c[:size - r] = base[r:]
            c[size - r:] = base[:r]
            c[:8] = i.to_bytes(8, "little")

    def chunk(self, i):
        return self.view[i * self.size:(i + 1) * self.size]

    def zero(self):
        z = bytes(min(self.n * self.size, 64 * MiB))
        for off in range(0, self.n * self.size, len(z)):
            m = min(len(z), self.n * self.size - off)
            self.view[off:off + m] = z[:m]

    def close(self):
        self.view.release()
        # ctypes' from_buffer export keeps the map busy until collected.
        self.addr = None
        try:
            self.map.close()
        except BufferError:
            pass


def memcpy_gbps(nbytes=64 * MiB, reps=5):
    """Host memcpy speed now (median of reps copies of nbytes between two
    touched mappings): the cost of each copy a store or load path makes."""
    a, b = mmap.mmap(-1, nbytes), mmap.mmap(-1, nbytes)
    a.write(b"\1" * nbytes)
    b.write(b"\2" * nbytes)
    pa = ctypes.addressof(ctypes.c_char.from_buffer(a))
    pb = ctypes.addressof(ctypes.c_char.from_buffer(b))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        ctypes.memmove(pb, pa, nbytes)
        times.append(time.perf_counter() - t)
    return nbytes / statistics.median(times) / 1e9


def mismatch(src, dst):
    """The first chunk whose loaded bytes differ from what was stored, or None."""
    for i in range(src.n):
        if src.chunk(i) != dst.chunk(i):
            return i
    return None


# ----------------------------------------------------------------- subjects
#
# A subject is made per measurement in a fresh directory of its own and used
# once: open(), store(), sync(), evict(), load(), close(). store/load get the
# source and destination Chunks; load must fill dst with the chunks in order.
# Only store, sync and load are timed.

class Subject:
    name = "?"
    family = "?"          # raw, kvtier, or the engine's name
    durable_store = False  # store() alone makes the data durable

    def __init__(self, args, chunk_bytes, workdir):
        self.args, self.chunk, self.dir = args, chunk_bytes, workdir
        self.extra = {}

    def open(self, src):
        pass

    def store(self, src):
        raise NotImplementedError

    def sync(self):
        fsync_tree(self.dir)

    def evict(self):
        return drop_tree(self.dir, self.args.drop_caches)

    def load(self, dst):
        raise NotImplementedError

    def collect(self, dst):
        """Untimed, after load: copies into dst what load left in the
        engine's own memory (for the check)."""

    def close(self):
        pass


class Raw(Subject):
    """The disk itself: the chunks at their offsets in one preallocated file,
    O_DIRECT, in blocks of --raw-block from --raw-threads threads (the
    syscalls drop the GIL). Stored is when every write returned; durable adds
    fdatasync."""
    name = family = "raw"

    def open(self, src):
        self.path = os.path.join(self.dir, "raw.dat")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
        # Preallocated, as kvtier's segments are: first writes into
        # unwritten extents cost the same on both sides.
        os.posix_fallocate(self.fd, 0, src.n * src.size)
        self.blocks = [(off, min(self.args.raw_block, src.n * src.size - off))
                       for off in range(0, src.n * src.size, self.args.raw_block)]
        self.pool = ThreadPoolExecutor(self.args.raw_threads)

    def _run(self, buf, write):
        view = buf.view
        op = os.pwritev if write else os.preadv

        def one(b):
            off, n = b
            done = op(self.fd, [view[off:off + n]], off)
            if done != n:
                raise OSError(f"raw {'write' if write else 'read'} at {off}: {done} of {n} bytes")
        for _ in self.pool.map(one, self.blocks):
            pass

    def store(self, src):
        self._run(src, True)

    def sync(self):
        os.fdatasync(self.fd)

    def load(self, dst):
        self._run(dst, False)

    def close(self):
        self.pool.shutdown()
        os.close(self.fd)


def kvtier_layout(chunk, page):
    """(page_bytes, pages per chunk): the plug-ins' default is one page per
    chunk up to 64 MiB (kvtier._plugin.chunk_layout); --kvtier-page sets it."""
    if page:
        if chunk % page:
            raise ValueError(f"--kvtier-page {page} does not divide the chunk ({chunk})")
        return page, chunk // page
    n = -(-chunk // (64 * MiB))
    while chunk % n or (chunk // n) % 4096:
        n += 1
    return chunk // n, n


class Kvtier(Subject):
    """kvtier.Engine on the host back-end: chunks of several pages put and
    got with kvt_put / kvt_get straight from and into the caller's memory (the
    binding borrows the buffers, no copy in Python). HBM is one page (put
    lands in DRAM); DRAM is --kvtier-dram, smaller than the data, so the
    store goes to disk; persist=1 ends the store with kvt_flush (written and
    fsync'd) and loads in a reopened engine (every page from disk)."""
    family = "kvtier"

    def __init__(self, args, chunk_bytes, workdir, persist):
        super().__init__(args, chunk_bytes, workdir)
        self.persist = persist
        self.durable_store = persist
        self.name = "kvtier persist" if persist else "kvtier"
        self.page, self.ppc = kvtier_layout(chunk_bytes, args.kvtier_page)

    def _engine(self):
        from kvtier import Engine
        pb = self.page
        dram = max(self.args.kvtier_dram // pb, 8) * pb
        return Engine(page_bytes=pb, hbm_bytes=pb, dram_bytes=dram,
                      ssd_bytes=self.n * self.chunk + 2 * dram,
                      ssd_dir=os.path.join(self.dir, "spill"), device="host",
                      persist=self.persist, fingerprint="bench_engines", policy="lru",
                      queue_depth=self.args.kvtier_depth)

    def open(self, src):
        self.n = src.n
        self.e = self._engine()
        self.keys = [[(i + 1, 0, p) for p in range(self.ppc)] for i in range(src.n)]

    def _pages(self, buf, i):
        c = buf.chunk(i)
        return [c[p * self.page:(p + 1) * self.page] for p in range(self.ppc)]

    def _batches(self, n):
        b = self.args.kvtier_batch
        return [range(i, min(n, i + b)) for i in range(0, n, b)]

    def store(self, src):
        for ids in self._batches(src.n):
            self.e.put([k for i in ids for k in self.keys[i]],
                       [p for i in ids for p in self._pages(src, i)])
        if self.persist:
            self.e.flush()
        self.st_store = self.e.stats()

    def sync(self):
        if not self.persist:
            fsync_tree(self.dir)

    def evict(self):
        if self.persist:
            # A restart: every page comes from disk.
            self.e.close()
            how = drop_tree(self.dir, self.args.drop_caches)
            t = time.perf_counter()
            self.e = self._engine()
            self.extra["reopen_s"] = time.perf_counter() - t
            return how
        return drop_tree(self.dir, self.args.drop_caches)

    def load(self, dst):
        st0 = self.e.stats()
        callers = self.args.kvtier_callers

        def one(ids):
            got = self.e.get([k for i in ids for k in self.keys[i]],
                             [p for i in ids for p in self._pages(dst, i)])
            if any(g is None for g in got):
                raise RuntimeError(f"kvtier: a page of chunks {ids[0]}-{ids[-1]} missing")
        batches = self._batches(dst.n)
        if callers <= 1:
            for ids in batches:
                one(ids)
        else:
            with ThreadPoolExecutor(callers) as ex:
                for _ in ex.map(one, batches):
                    pass
        st = self.e.stats()
        # How much of the load the SSD served (the rest was still in DRAM).
        self.extra["load_from_ssd"] = (st.bytes_up[1] - st0.bytes_up[1]) / (dst.n * dst.size)

    def close(self):
        self.e.close()


# ----------------------------------------------------------------- engines
#
# Each engine's own disk store, driven through its own classes. Chunk sizes:
# a llama3-8b bf16 token is 128 KiB of KV over its 32 layers; LMCache's
# default chunk is 256 tokens (32 MiB), SGLang's HiCache storage page is
# taken at 64 tokens (8 MiB), vLLM's offloading block at 16 tokens (2 MiB).

TOKEN_BYTES = 128 << 10


def _tensor(buf, i):
    """A torch uint8 tensor over chunk i of buf (no copy)."""
    import torch
    return torch.frombuffer(buf.view, dtype=torch.uint8, count=buf.size, offset=i * buf.size)


class LMCacheDisk(Subject):
    """LMCache 0.5.6 LocalDiskBackend: one file per chunk, written by its
    4 disk threads (batched_submit_put_task; stored = every put's completion
    callback ran), read by batched_get_blocking (its 4 read threads) into
    memory objects of its LocalCPUBackend. Default: buffered I/O;
    use_odirect: O_DIRECT."""
    family = "lmcache"

    def __init__(self, args, chunk_bytes, workdir, odirect):
        super().__init__(args, chunk_bytes, workdir)
        self.odirect = odirect
        self.name = "lmcache odirect" if odirect else "lmcache"

    def open(self, src):
        import asyncio
        import torch
        from lmcache.utils import CacheEngineKey
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator
        from lmcache.v1.memory_management import MemoryFormat
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
        from lmcache.v1.storage_backend.local_disk_backend import LocalDiskBackend
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        total = src.n * src.size
        gib = total / 2**30
        extra = {"use_odirect": True} if self.odirect else {}
        cfg = LMCacheEngineConfig.from_defaults(
            chunk_size=self.chunk // TOKEN_BYTES or 1, local_cpu=False,
            max_local_cpu_size=2 * gib + 0.25, local_disk=os.path.join(self.dir, "lmcache"),
            max_local_disk_size=2 * gib + 1, lmcache_instance_id="bench", extra_config=extra)
        # Pages for 2 x the data (the chunks to store, then the loaded ones),
        # page-aligned so that O_DIRECT can use them.
        # Touched now, as kvtier's and raw's buffers are: no first-touch
        # page faults inside the timed load.
        self.pool = torch.zeros(2 * total + 4096, dtype=torch.uint8)
        off = (-self.pool.data_ptr()) % 4096
        alloc = TensorMemoryAllocator(self.pool[off:off + 2 * total], align_bytes=4096)
        self.cpu = LocalCPUBackend(cfg, memory_allocator=alloc)
        self.disk = LocalDiskBackend(cfg, self.loop, self.cpu, dst_device="cpu")
        shape, dtype, fmt = torch.Size([self.chunk // 2]), torch.bfloat16, MemoryFormat.KV_2LTD
        self.keys = [CacheEngineKey("bench", 1, 0, i + 1, torch.bfloat16) for i in range(src.n)]
        self.objs = []
        for i in range(src.n):
            o = self.cpu.allocate(shape, dtype, fmt)
            if o is None:
                raise RuntimeError("lmcache: its CPU allocator is out of memory")
            # The engine's KV, in its own memory.
            ctypes.memmove(o.data_ptr, src.addr + i * src.size, src.size)
            self.objs.append(o)

    def store(self, src):
        done = threading.Semaphore(0)
        self.disk.batched_submit_put_task(self.keys, self.objs,
                                          on_complete_callback=lambda _k: done.release())
        for _ in range(src.n):
            if not done.acquire(timeout=600):
                raise RuntimeError("lmcache: a put did not complete in 600 s")
        for o in self.objs:
            o.ref_count_down()
        self.objs = []

    def load(self, dst):
        self.got = self.disk.batched_get_blocking(self.keys)
        if any(o is None for o in self.got):
            raise RuntimeError("lmcache: a chunk was not loaded")

    def collect(self, dst):
        for i, o in enumerate(self.got):
            ctypes.memmove(dst.addr + i * dst.size, o.data_ptr, dst.size)
            o.ref_count_down()
        self.got = []

    def close(self):
        try:
            self.disk.close()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()


class SGLangFile(Subject):
    """SGLang 0.5.23 HiCacheFile: batch_set (one file per page, written
    buffered through numpy.tofile to a temporary name, then renamed) and
    batch_get (readinto the target tensor, page after page)."""
    name = family = "sglang"

    def open(self, src):
        from sglang.srt.mem_cache.hicache_storage import HiCacheFile, HiCacheStorageConfig
        cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                   attn_cp_size=1, is_mla_model=False,
                                   enable_storage_metrics=False, is_page_first_layout=False,
                                   model_name="bench")
        self.store_ = HiCacheFile(cfg, file_path=os.path.join(self.dir, "hicache"))
        self.keys = [f"{i + 1:064x}" for i in range(src.n)]

    def store(self, src):
        if not self.store_.batch_set(self.keys, [_tensor(src, i) for i in range(src.n)]):
            raise RuntimeError("sglang: batch_set failed")

    def load(self, dst):
        got = self.store_.batch_get(self.keys, [_tensor(dst, i) for i in range(dst.n)])
        if any(g is None for g in got):
            raise RuntimeError("sglang: a page was not loaded")


class VllmFs(Subject):
    """vLLM 0.33.0 FileSystemTierManager (kv_offload tiering `fs`): its
    thread pool (16 read + 16 write threads) runs one task per job, and a
    task writes or reads its blocks one after the other (O_DIRECT, a file
    per block). A job is one request's blocks: "1 request" puts every chunk
    in one job, "8 requests" splits them into eight jobs. The primary
    (CPU) tier's memory is the source buffer for stores and the destination
    for loads (a second manager over the same directory, as after a
    restart)."""
    family = "vllm"

    def __init__(self, args, chunk_bytes, workdir, requests):
        super().__init__(args, chunk_bytes, workdir)
        self.requests = requests
        self.name = f"vllm fs {requests} req"

    def _manager(self, buf):
        from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
        view = buf.view.cast("B", [buf.n, buf.size])
        return FileSystemTierManager(_vllm_spec(self.chunk), view, "fs",
                                     root_dir=os.path.join(self.dir, "vllm"))

    def open(self, src):
        self.keys = [_vllm_key(i) for i in range(src.n)]
        self.m = self._manager(src)

    def _run(self, n, load):
        import numpy as np
        from vllm.v1.kv_offload.tiering.base import TransferJob
        parts = np.array_split(np.arange(n), self.requests)
        for j, ids in enumerate(p for p in parts if len(p)):
            job = TransferJob(job_id=j, keys=[self.keys[i] for i in ids], chunk_ids=ids,
                              is_promotion=load, req_context=_vllm_req(j))
            (self.m.submit_load if load else self.m.submit_store)(job)
        self.m.drain_jobs()
        bad = [r for r in self.m.get_finished_jobs() if not r.success]
        if bad:
            raise RuntimeError(f"vllm: {len(bad)} job(s) failed")

    def store(self, src):
        self._run(src.n, False)

    def evict(self):
        self.m.shutdown()
        self.m = None
        return drop_tree(self.dir, self.args.drop_caches)

    def load(self, dst):
        self.m = self._manager(dst)
        self._run(dst.n, True)

    def close(self):
        if self.m is not None:
            self.m.shutdown()


def _vllm_spec(chunk):
    """The part of vLLM's OffloadingSpec that FileSystemTierManager reads
    (its FileMapper's identity fields and blocks_per_chunk): one KV group of
    chunk / TOKEN_BYTES tokens per block, tp 1, bf16."""
    from types import SimpleNamespace as NS
    par = NS(tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, rank=0,
             is_parallelism_agnostic=True)
    cfg = NS(groups=[NS(tokens_per_block=max(1, chunk // TOKEN_BYTES), layer_names=["all"])],
             parallel=par, canonical_layout=False, kv_cache_layout=None, replicated_layout=False,
             model=NS(name="bench/llama3-8b", dtype="bfloat16"),
             cache=NS(tokens_per_hash=max(1, chunk // TOKEN_BYTES)))
    return NS(config=cfg, blocks_per_chunk=1, kv_events_config=NS(enable_kv_cache_events=False))


def _vllm_key(i):
    from vllm.v1.kv_offload.base import make_offload_key
    import hashlib
    return make_offload_key(hashlib.sha256(i.to_bytes(8, "little")).digest(), 0)


def _vllm_req(j):
    from vllm.v1.kv_offload.base import ReqContext
    return ReqContext(req_id=f"bench-{j}")


def _why_not(module):
    """None if module imports, else a short reason."""
    try:
        __import__(module)
        return None
    except Exception as exc:  # an engine's import may fail in any way
        return f"{module} does not import here ({type(exc).__name__}: {exc})"


ENGINES = {}    # family -> (None or why it is skipped, [(name, default chunk, factory)])


def find_engines(only):
    """Fills ENGINES with the engines of only, each with why it is skipped
    (None: its modules import)."""
    _find_engines()
    for fam in list(ENGINES):
        if fam not in only:
            del ENGINES[fam]


def _find_engines():
    ENGINES["lmcache"] = (_why_not("lmcache.v1.storage_backend.local_disk_backend"), [
        ("lmcache", 256 * TOKEN_BYTES, lambda a, c, d: LMCacheDisk(a, c, d, False)),
        ("lmcache odirect", 256 * TOKEN_BYTES, lambda a, c, d: LMCacheDisk(a, c, d, True))])
    ENGINES["sglang"] = (_why_not("sglang.srt.mem_cache.hicache_storage"), [
        ("sglang", 64 * TOKEN_BYTES, lambda a, c, d: SGLangFile(a, c, d))])
    ENGINES["vllm"] = (_why_not("vllm.v1.kv_offload.tiering.fs.manager"), [
        ("vllm fs 1 req", 16 * TOKEN_BYTES, lambda a, c, d: VllmFs(a, c, d, 1)),
        ("vllm fs 8 req", 16 * TOKEN_BYTES, lambda a, c, d: VllmFs(a, c, d, 8))])


# ----------------------------------------------------------------- driver

def measure(subject, src, dst):
    """One measurement; returns a dict of figures (GB/s, CPU s per GB)."""
    gb = src.n * src.size / 1e9
    subject.open(src)
    try:
        c0, t0 = cpu_seconds(), time.perf_counter()
        subject.store(src)
        c1, t1 = cpu_seconds(), time.perf_counter()
        subject.sync()
        c2, t2 = cpu_seconds(), time.perf_counter()
        how = subject.evict()
        dst.zero()
        c3, t3 = cpu_seconds(), time.perf_counter()
        subject.load(dst)
        c4, t4 = cpu_seconds(), time.perf_counter()
        subject.collect(dst)
    finally:
        subject.close()
    bad = mismatch(src, dst)
    if bad is not None:
        raise RuntimeError(f"{subject.name}: chunk {bad} loaded wrong bytes")
    fig = {"store_gbps": gb / (t1 - t0), "durable_gbps": gb / (t2 - t0),
           "load_gbps": gb / (t4 - t3),
           "store_cpu_s_per_gb": (c1 - c0) / gb, "durable_cpu_s_per_gb": (c2 - c0) / gb,
           "load_cpu_s_per_gb": (c4 - c3) / gb, "evict": how}
    fig.update(subject.extra)
    return fig


def subjects_for(args, chunk):
    """[(name, family, factory)] measured at this chunk size."""
    out = [("raw", "raw", lambda d: Raw(args, chunk, d))]
    if "kvtier" in args.only:
        out.append(("kvtier", "kvtier", lambda d: Kvtier(args, chunk, d, False)))
        out.append(("kvtier persist", "kvtier", lambda d: Kvtier(args, chunk, d, True)))
    for fam, (why_not, makers) in ENGINES.items():
        if fam not in args.only or why_not is not None:
            continue
        for name, default_chunk, make in makers:
            if chunk in (args.chunk, default_chunk):
                out.append((name, fam, lambda d, make=make: make(args, chunk, d)))
    return out


def med(xs):
    return statistics.median(xs) if xs else None


def summarize(chunk, names, reps):
    """Medians of each subject's figures and of the per-repetition ratios."""
    figs = {}
    for name in names:
        rows = [r[name] for r in reps if name in r]
        figs[name] = {k: med([row[k] for row in rows]) for k in rows[0]
                      if isinstance(rows[0][k], (int, float))}
        figs[name]["runs"] = len(rows)
        for k in ("load_gbps", "store_gbps", "durable_gbps"):
            figs[name][k + "_range"] = [min(row[k] for row in rows), max(row[k] for row in rows)]

    def ratio(a, ka, b, kb):
        vals = [r[a][ka] / r[b][kb] for r in reps if a in r and b in r]
        return med(vals)
    vs_raw = {n: {"load": ratio(n, "load_gbps", "raw", "load_gbps"),
                  "store": ratio(n, "store_gbps", "raw", "store_gbps"),
                  "durable": ratio(n, "durable_gbps", "raw", "durable_gbps")}
              for n in names if n != "raw"}
    vs_engine = {}
    if "kvtier persist" in names:
        for n in names:
            if n in ("raw", "kvtier", "kvtier persist"):
                continue
            vs_engine[n] = {
                # The load of the persisted store, in a reopened engine: every page from disk.
                "load": ratio("kvtier persist", "load_gbps", n, "load_gbps"),
                "store": ratio("kvtier", "store_gbps", n, "store_gbps"),
                "durable": ratio("kvtier persist", "durable_gbps", n, "durable_gbps")}
    return {"chunk_bytes": chunk, "subjects": figs, "vs_raw": vs_raw, "kvtier_vs": vs_engine}


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def report_text(res, out):
    p = lambda *a: print(*a, file=out)
    p(f"bench_engines: {res['dir']}, {res['bytes'] >> 20} MiB per figure, median of "
      f"{res['reps']}; page cache dropped by {res['evict']}")
    for why in res["skipped"]:
        p(f"  skipped: {why}")
    for c in res["chunks"]:
        p(f"\nchunk {c['chunk_bytes'] / MiB:g} MiB (host memcpy {fmt(c['memcpy_gbps'])} GB/s "
          "in this run)")
        p(f"  {'subject':<22}{'store':>7}{'durable':>9}{'load':>7}   "
          f"{'cpu s/GB: store':>15}{'durable':>8}{'load':>7}   {'load/raw':>8}{'store/raw':>10}")
        for name, f in c["subjects"].items():
            vr = c["vs_raw"].get(name, {})
            p(f"  {name:<22}{fmt(f['store_gbps']):>7}{fmt(f['durable_gbps']):>9}"
              f"{fmt(f['load_gbps']):>7}   {fmt(f['store_cpu_s_per_gb'], '.3f'):>15}"
              f"{fmt(f['durable_cpu_s_per_gb'], '.3f'):>8}{fmt(f['load_cpu_s_per_gb'], '.3f'):>7}"
              f"   {fmt(vr.get('load'), '.3f'):>8}{fmt(vr.get('store'), '.3f'):>10}")
        if c["kvtier_vs"]:
            p("  kvtier ÷ engine (load: kvtier persist, reopened; store: persist=0 vs the "
              "engine's store; durable: persist=1 vs the engine's store + fsync)")
            for name, v in c["kvtier_vs"].items():
                p(f"    vs {name:<20} load {fmt(v['load'], '.3f')}  store {fmt(v['store'], '.3f')}"
                  f"  durable {fmt(v['durable'], '.3f')}")
    p("  (GB/s = 1e9 bytes/s; ratios are medians of per-repetition ratios)")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench_engines.py",
        description="kvtier beside the engines' own disk stores and the raw disk, in one run, "
                    "on the same chunks: store / durable store / load GB/s, CPU s per GB, "
                    "and ratios (raw disk, kvtier vs each engine).",
        epilog="Run with the engines' venv python (tools/engines-venv.sh) to include them; "
               "engines that do not import are skipped and named.")
    ap.add_argument("--dir", default=os.environ.get("TMPDIR") or "/tmp",
                    help="an existing directory to work in (a temporary directory is made "
                         "inside it and removed; default $TMPDIR or /tmp)")
    ap.add_argument("--bytes", type=lambda v: parse_size(v, "--bytes"), default=512 * MiB,
                    help="data stored and loaded per figure (default 512M)")
    ap.add_argument("--chunk", type=lambda v: parse_size(v, "--chunk"), default=32 * MiB,
                    help="the chunk every subject is measured at (default 32M: 256 tokens of "
                         "llama3-8b bf16); each engine is also measured at its own default "
                         "chunk size")
    ap.add_argument("--no-engine-chunks", action="store_true",
                    help="measure only --chunk, not also each engine's default chunk size")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--only", default="kvtier,lmcache,sglang,vllm",
                    help="comma-separated subjects besides raw (default "
                         "kvtier,lmcache,sglang,vllm)")
    ap.add_argument("--raw-block", type=lambda v: parse_size(v, "--raw-block"), default=MiB,
                    help="raw baseline: bytes per request (default 1M)")
    ap.add_argument("--raw-threads", type=int, default=16,
                    help="raw baseline: requests in flight (threads; default 16)")
    ap.add_argument("--kvtier-page", type=lambda v: parse_size(v, "--kvtier-page"), default=0,
                    help="kvtier page size (default: the plug-ins' choice, one page per chunk "
                         "up to 64M)")
    ap.add_argument("--kvtier-dram", type=lambda v: parse_size(v, "--kvtier-dram"),
                    default=256 * MiB,
                    help="kvtier DRAM tier (default 256M, under the data so the store goes to "
                         "disk; at least 8 pages)")
    ap.add_argument("--kvtier-depth", type=int, default=32, help="kvtier queue depth (default 32)")
    ap.add_argument("--kvtier-batch", type=int, default=8,
                    help="chunks per kvt_put / kvt_get call (default 8: the plug-ins "
                         "serve an engine's batched get, LMCache's batched_get_blocking "
                         "or a vLLM load job, with one kvt_get; 1 = one chunk a call, "
                         "as a lone get_blocking asks)")
    ap.add_argument("--kvtier-callers", type=int, default=1,
                    help="threads calling kvt_get at once, a batch each (default 1)")
    ap.add_argument("--drop-caches", action="store_true",
                    help="also write 1 to /proc/sys/vm/drop_caches before each load (root; "
                         "drops the whole machine's page cache)")
    ap.add_argument("--json", action="store_true",
                    help="one JSON object on stdout; the text goes to stderr")
    args = ap.parse_args(argv)
    for name in ("reps", "raw_threads", "kvtier_depth", "kvtier_callers", "kvtier_batch"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)}: want 1 or more")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    known = {"kvtier", "lmcache", "sglang", "vllm"}
    for s in only:
        if s not in known:
            ap.error(f"--only: unknown subject {s!r}; known: {', '.join(sorted(known))}")
    args.only = only
    if args.bytes < args.chunk:
        ap.error(f"--bytes {args.bytes} is less than one chunk ({args.chunk})")
    if not os.path.isdir(args.dir):
        ap.error(f"--dir {args.dir!r} is not a directory")
    if args.drop_caches and not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        ap.error("--drop-caches: /proc/sys/vm/drop_caches is not writable (not root?)")
    return args


def progress(args, text):
    if not args.json and sys.stderr.isatty():
        print(f"\r{text:<70}", end="", file=sys.stderr, flush=True)


def main(argv=None):
    args = parse_args(argv)
    # The engines' INFO lines would bury the report.
    os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    find_engines(args.only)
    skipped = [f"{fam}: {why}" for fam, (why, _m) in ENGINES.items()
               if fam in args.only and why is not None]
    chunks = {args.chunk}
    if not args.no_engine_chunks:
        for fam, (why, makers) in ENGINES.items():
            if fam in args.only and why is None:
                chunks.update(dc for _n, dc, _m in makers)
    top = tempfile.mkdtemp(prefix="kvtier-bench-engines-", dir=args.dir)
    res = {"dir": args.dir, "bytes": 0, "reps": args.reps, "skipped": skipped, "chunks": [],
           "evict": None, "raw": {"block": args.raw_block, "threads": args.raw_threads},
           "kvtier": {"dram": args.kvtier_dram, "depth": args.kvtier_depth,
                      "batch": args.kvtier_batch, "callers": args.kvtier_callers}}
    try:
        for chunk in sorted(chunks):
            n = max(1, args.bytes // chunk)
            res["bytes"] = n * chunk
            src, dst = Chunks(n, chunk), Chunks(n, chunk)
            subs = subjects_for(args, chunk)
            reps = []
            copies = []
            for rep in range(args.reps):
                copies.append(memcpy_gbps())
                k = rep % len(subs)
                order = subs[k:] + subs[:k]
                row = {}
                for j, (name, _fam, make) in enumerate(order):
                    progress(args, f"chunk {chunk // MiB} MiB, rep {rep + 1}/{args.reps}: {name}")
                    d = tempfile.mkdtemp(prefix="s-", dir=top)
                    try:
                        row[name] = measure(make(d), src, dst)
                    finally:
                        shutil.rmtree(d, ignore_errors=True)
                    res["evict"] = row[name]["evict"]
                reps.append(row)
            src.close()
            dst.close()
            res["chunks"].append(summarize(chunk, [s[0] for s in subs], reps))
            res["chunks"][-1]["memcpy_gbps"] = med(copies)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        progress(args, "")
        if not args.json and sys.stderr.isatty():
            print("\r", end="", file=sys.stderr)
    report_text(res, sys.stderr if args.json else sys.stdout)
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
