"""kvtier as a storage plug-in of LMCache 0.5.6 (KVTierStoragePlugin).

LMCache loads it itself, from its own configuration:

    storage_plugins: ["kvtier"]
    extra_config:
      storage_plugin.kvtier.module_path: kvtier.lmcache
      storage_plugin.kvtier.class_name: KVTierStoragePlugin
      # optional, all of them (kvtier._plugin.SETTINGS):
      storage_plugin.kvtier.spill_dir: /nvme/kvtier
      storage_plugin.kvtier.dram_bytes: 8GiB
      storage_plugin.kvtier.ssd_bytes: 500GB
      storage_plugin.kvtier.codec: none
      storage_plugin.kvtier.persist: true

("kvtier" is whatever name the plug-in has in storage_plugins; the settings
are read under that name.) With no settings the spill directory is
$XDG_CACHE_HOME/kvtier/lmcache/<model hash>-r<worker>, else $HOME/.cache/...
(with neither set to an absolute path the plug-in refuses: set spill_dir),
and the capacities come from free memory and disk (_plugin.default_capacities).

What a chunk is. LMCache hands over MemoryObjs from its CPU backend: one per
chunk of chunk_size tokens, [2, layers, tokens, hidden] of the KV dtype. A
chunk of exactly the shape LMCacheMetadata gives (the full chunk) is stored
in ceil(bytes / page_bytes) kvtier pages read and written in place: kvt_put
copies the MemoryObj's memory into kvtier's DRAM tier and kvt_get copies back
into a MemoryObj allocated from LMCache's CPU backend (one copy each way; the
SSD side is DMA). Any other chunk (the last, partial chunk of a request, a
multi-group or layer-wise chunk) is stored self-describing: a 256-byte header
(shape, dtype, format) and the bytes, staged through one buffer (one more
copy), under other keys, so a full-chunk lookup never reads it as one.

Identity. Keys are blake2b of "lmcache:" + CacheEngineKey.to_string() (model,
world size, worker, chunk hash, dtype, tags); kvtier's fingerprint is the
model name, world size, worker, KV dtype, KV shape, MLA and chunk size: an
engine of another model or layout opened on the same spill directory drops
(persist) or never sees (no persist) these pages, and its keys differ anyway.

Codecs. With codec fp8, int8 or int4 a full chunk is one page (by
default the chunk's size; a page_bytes that splits it is refused), keyed
KVT_ALL_LAYERS, its layout KV_2LTD's (KVT_KV_SPLIT_LAYERS: every layer's
K, then every layer's V; MLA chunks KVT_KV_MLA) taken from LMCacheMetadata;
self-describing chunks are opaque pages, kept raw. A KV dtype other than
bfloat16/float16 is refused with the reason (docs/codecs.md#plugins).

Asynchrony. batched_submit_put_task returns at once with a Future: one
worker thread stores the batch (chunks in the order given, one kvt_put per
part, so kvtier's prefix policy sees the chain) while the MemoryObjs are
held by a reference; exists_in_put_tasks answers for the chunks in flight.
get_blocking/batched_get_blocking read on the caller's thread (LMCache's
retrieve path is blocking by contract); batched_get_non_blocking runs the
same read on the worker thread.

Pinning. pin()/unpin() are accepted and answer whether the chunk is held;
kvtier does not evict on LMCache's pins (a chunk evicted between lookup and
retrieve is a miss, which LMCache recomputes).

Not for the scheduler role: the scheduler process has no CPU backend to
allocate from, and kvtier's directory is owned by one process; the plug-in
refuses there with a message (LMCache logs it and runs without the tier).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import torch
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface

from ._lib import KvtBusy, KvtFull
from ._plugin import (SETTINGS, ChunkIO, LayoutRefused, chunk_layout, close_engine, kv_layout,
                      model_fingerprint, one_page_for_codec, open_engine, page_keys,
                      read_settings)

if TYPE_CHECKING:
    from lmcache.utils import CacheEngineKey
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.memory_management import MemoryObj
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend import LocalCPUBackend

log = logging.getLogger("kvtier.lmcache")

# Self-describing chunks: header length (u32) + JSON, in the first 256 bytes.
_HEADER = 256
_NAME_KEYS = ("module_path", "class_name")


def _plugin_name(config, cls):
    """The name this class was registered under in storage_plugins (the
    prefix of its settings); 'kvtier' when it cannot be told."""
    extra = config.extra_config or {}
    for name in (config.storage_plugins or []):
        if extra.get(f"storage_plugin.{name}.class_name") == cls.__name__ and \
                extra.get(f"storage_plugin.{name}.module_path") == cls.__module__:
            return name
    return "kvtier"


def _settings(config, name):
    """kvtier's settings under storage_plugin.<name>.; an unknown key there
    is refused, naming it (a misspelt capacity must not pass silently)."""
    prefix = f"storage_plugin.{name}."
    extra = dict(config.extra_config or {})
    for key in extra:
        if isinstance(key, str) and key.startswith(prefix):
            rest = key[len(prefix):]
            if rest not in SETTINGS and rest not in _NAME_KEYS:
                raise ValueError(f"unknown kvtier setting {key!r} in LMCache extra_config; "
                                 "known: " + ", ".join(prefix + k for k in
                                                       (*_NAME_KEYS, *SETTINGS)))
    return read_settings(extra, prefix=prefix)


def _dtype(text):
    d = getattr(torch, text.rsplit(".", 1)[-1], None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"not a torch dtype: {text!r}")
    return d


class _Desc:
    """What a chunk's bytes are: shapes, dtypes (one per layer group) and
    LMCache's memory format; hashable, comparable."""

    __slots__ = ("shapes", "dtypes", "fmt", "nbytes")

    def __init__(self, shapes, dtypes, fmt):
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self.dtypes = tuple(dtypes)
        self.fmt = fmt
        self.nbytes = sum(_numel(s) * torch.empty((), dtype=t).element_size()
                          for s, t in zip(self.shapes, self.dtypes))

    @classmethod
    def of(cls, obj):
        meta = obj.metadata
        shapes = meta.shapes if meta.shapes else [meta.shape]
        dtypes = meta.dtypes if meta.dtypes else [meta.dtype]
        return cls(shapes, dtypes, meta.fmt)

    def key(self):
        return (self.shapes, self.dtypes, self.fmt)

    def __eq__(self, other):
        return isinstance(other, _Desc) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def encode(self, nbytes):
        text = json.dumps({"shapes": self.shapes, "dtypes": [str(t) for t in self.dtypes],
                           "fmt": self.fmt.name, "nbytes": nbytes}).encode()
        if len(text) > _HEADER - 4:
            raise ValueError(f"chunk descriptor of {len(text)} bytes")
        return struct.pack("<I", len(text)) + text

    @classmethod
    def decode(cls, head):
        """(desc, nbytes), or None when head is not a header kvtier wrote."""
        try:
            (n,) = struct.unpack_from("<I", head)
            if n > _HEADER - 4:
                return None
            d = json.loads(bytes(head[4:4 + n]))
            desc = cls(d["shapes"], [_dtype(t) for t in d["dtypes"]], MemoryFormat[d["fmt"]])
            return desc, int(d["nbytes"])
        except (ValueError, KeyError, TypeError, struct.error):
            return None

    def allocate(self, backend):
        shapes = [torch.Size(s) for s in self.shapes]
        dtypes = list(self.dtypes)
        if len(shapes) == 1:
            return backend.allocate(shapes[0], dtypes[0], self.fmt)
        return backend.allocate(shapes, dtypes, self.fmt)


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _heads(metadata, hidden):
    """(K/V heads, head size) of a chunk row of hidden elements: from
    kv_shape (layers, 2, tokens, heads, head size), else from the one layer
    group LMCache registered; None when neither multiplies to hidden."""
    shape = tuple(metadata.kv_shape or ())
    if len(shape) == 5 and shape[3] * shape[4] == hidden:
        return int(shape[3]), int(shape[4])
    groups = getattr(metadata.kv_layer_groups_manager, "kernel_groups", None) or []
    sd = getattr(groups[0], "shape_desc", None) if len(groups) == 1 else None
    if sd is not None and sd.nh * sd.hs == hidden:
        return int(sd.nh), int(sd.hs)
    return None


def _layout(metadata, full, page_bytes):
    """The layout of a full chunk's page (kv_layout()), or the text saying
    why there is none. KV_2LTD [2, layers, tokens, heads * head size]: every
    layer's K then every layer's V, KVT_KV_SPLIT_LAYERS; KV_MLA_FMT [1,
    layers, tokens, latent + RoPE]: a KVT_KV_MLA block a layer, whose two
    widths LMCache does not tell apart (they are quantised alike, one row a
    token). The chunk's page is keyed KVT_ALL_LAYERS."""
    if full is None:
        return ("LMCache's metadata has several layer groups, whose chunks kvtier stores as "
                "opaque bytes")
    shape = full.shapes[0]
    if full.nbytes > page_bytes:
        return (f"a chunk of {full.nbytes} bytes spans several pages of {page_bytes} "
                "(page_bytes); quantising needs a chunk's layers in one page")
    try:
        if full.fmt == MemoryFormat.KV_MLA_FMT:
            return kv_layout(full.dtypes[0], "mla", shape[2], 1, shape[3], n_layers=shape[1])
        heads = _heads(metadata, shape[3])
        if full.fmt != MemoryFormat.KV_2LTD or shape[0] != 2 or heads is None:
            return f"LMCache's chunk {tuple(shape)} ({full.fmt.name}) is not [2, L, T, H * D]"
        return kv_layout(full.dtypes[0], "split_layers", shape[2], heads[0], heads[1],
                         n_layers=shape[1])
    except LayoutRefused as exc:
        return str(exc)


def _full_desc(metadata):
    """The descriptor of a full chunk of this engine (None when LMCache's
    metadata has several layer groups: all chunks are then self-describing)."""
    if metadata is None or metadata.get_num_groups() != 1:
        return None
    fmt = MemoryFormat.KV_MLA_FMT if metadata.use_mla else MemoryFormat.KV_2LTD
    return _Desc(metadata.get_shapes(), metadata.get_dtypes(), fmt)


class KVTierStoragePlugin(StoragePluginInterface):
    """LMCache storage plug-in backed by a kvtier engine (module doc).
    Thread-safe as LMCache uses it: the engine's calls are, and the chunk
    staging is under one lock."""

    def __init__(self, dst_device: str = "cpu", config: LMCacheEngineConfig | None = None,
                 metadata: LMCacheMetadata | None = None,
                 local_cpu_backend: LocalCPUBackend | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                         local_cpu_backend=local_cpu_backend, loop=loop)
        if config is None or metadata is None:
            raise ValueError("kvtier.lmcache: LMCache passes config and metadata to a "
                             "storage plug-in; both are needed")
        if local_cpu_backend is None:
            raise ValueError("kvtier.lmcache: no LocalCPUBackend to allocate from (the "
                             "scheduler role, or max_local_cpu_size <= 0); kvtier runs in "
                             "the worker with a CPU backend")
        self.name = _plugin_name(config, type(self))
        settings = _settings(config, self.name)
        self._full = _full_desc(metadata)
        chunk = self._full.nbytes if self._full else metadata.chunk_size * 4096
        page_bytes, self._full_pages = chunk_layout(chunk, one_page_for_codec(settings, chunk))
        fp = model_fingerprint(
            engine="lmcache", model=metadata.model_name, world_size=metadata.world_size,
            worker=metadata.worker_id, dtype=str(metadata.kv_dtype),
            kv_shape=tuple(metadata.kv_shape), mla=bool(metadata.use_mla),
            chunk_size=metadata.chunk_size,
            full=self._full.key() if self._full else None)
        self.engine, self.kvtier_config = open_engine(
            settings, page_bytes, fp, "lmcache", rank=metadata.worker_id,
            layout=_layout(metadata, self._full, page_bytes))
        self.page_bytes = page_bytes
        self._io = ChunkIO(self.engine, self._full.nbytes, all_layers=True) if self._full else None
        self._io_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._inflight = set()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvtier-lmcache")
        self._closed = False
        log.info("kvtier storage plug-in %r: %s", self.name, self.kvtier_config)

    def __str__(self) -> str:
        return self.__class__.__name__

    # ------------------------------------------------------------ naming

    @staticmethod
    def _name(key):
        return "lmcache:" + key.to_string()

    @staticmethod
    def _self_name(key):
        return "lmcache-self:" + key.to_string()

    def _self_keys(self, key, n):
        """A self-describing chunk's keys: opaque pages (a header, any
        shape), which a lossy codec stores as they are."""
        return page_keys(self._self_name(key), n, "opaque")

    def _self_pages(self, nbytes):
        return -(-(nbytes + _HEADER) // self.page_bytes)

    # ------------------------------------------------------------ lookups

    def _held(self, keys):
        """[bool] per key: a full chunk held whole, or the first page of a
        self-describing one (its size is in that page). One kvt_exists call,
        the keys in the order given."""
        if not keys:
            return []
        full = self._io.keys([self._name(k) for k in keys]) if self._io else []
        first = [self._self_keys(k, 1)[0] for k in keys]
        where = self.engine.exists(full + first).where
        n = self._full_pages if self._io else 0
        out = []
        for i in range(len(keys)):
            whole = n > 0 and all(w >= 0 for w in where[i * n:(i + 1) * n])
            out.append(whole or where[len(full) + i] >= 0)
        return out

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        return self._held([key])[0]

    def batched_contains(self, keys: Iterable[CacheEngineKey], pin: bool = False) -> int:
        held = self._held(list(keys))
        n = 0
        while n < len(held) and held[n]:
            n += 1
        return n

    async def batched_async_contains(self, lookup_id: str, keys: Iterable[CacheEngineKey],
                                     pin: bool = False) -> int:
        # kvt_exists reads kvtier's in-memory index only: no I/O to wait for.
        return self.batched_contains(keys, pin)

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        with self._state_lock:
            return key in self._inflight

    def pin(self, key: CacheEngineKey) -> bool:
        return self.contains(key)

    def unpin(self, key: CacheEngineKey) -> bool:
        return self.contains(key)

    def touch_cache(self) -> None:
        return None  # kvtier keeps its own recency on every get

    # --------------------------------------------------------------- puts

    def batched_submit_put_task(
            self, keys: Sequence[CacheEngineKey], objs: Sequence[MemoryObj],
            transfer_spec: Any = None,
            on_complete_callback: Callable[[CacheEngineKey], None] | None = None,
    ) -> list[Future] | None:
        """Queues the chunks for the worker thread and returns [Future] (the
        Future's result: the keys stored). None when there is nothing to do."""
        todo = []
        with self._state_lock:
            if self._closed:
                return None
            for k, o in zip(keys, objs):
                if k in self._inflight:
                    continue
                self._inflight.add(k)
                o.ref_count_up()  # LMCache drops its own reference on return
                todo.append((k, o))
        if not todo:
            return None
        return [self._pool.submit(self._put_job, todo, on_complete_callback)]

    def _put_job(self, todo, callback):
        stored = []
        try:
            with self._io_lock:
                stored = self._store(todo)
        except Exception:
            log.exception("kvtier: storing %d chunks failed", len(todo))
        finally:
            with self._state_lock:
                for k, o in todo:
                    self._inflight.discard(k)
            for _, o in todo:
                o.ref_count_down()
        if callback is not None:
            for k in stored:
                try:
                    callback(k)
                except Exception:
                    log.exception("kvtier: put completion callback failed")
        return stored

    def _store(self, todo):
        full, other = [], []
        for k, o in todo:
            (full if self._full is not None and _Desc.of(o) == self._full
             and o.get_size() == self._full.nbytes else other).append((k, o))
        stored = []
        if full:
            ok = self._io.put([self._name(k) for k, _ in full], [o.data_ptr for _, o in full])
            stored += [k for (k, _), good in zip(full, ok) if good]
        for k, o in other:
            if self._put_self(k, o):
                stored.append(k)
        return stored

    def _put_self(self, key, obj):
        nbytes = obj.get_size()
        n = self._self_pages(nbytes)
        buf = bytearray(n * self.page_bytes)
        head = _Desc.of(obj).encode(nbytes)
        buf[:len(head)] = head
        ctypes.memmove((ctypes.c_char * nbytes).from_buffer(buf, _HEADER), obj.data_ptr, nbytes)
        view = memoryview(buf)
        pages = [view[i * self.page_bytes:(i + 1) * self.page_bytes] for i in range(n)]
        keys = self._self_keys(key, n)
        try:
            if all(w >= 0 for w in self.engine.exists(keys).where):
                return True
            self.engine.put(keys, pages)
            return True
        except (KvtFull, KvtBusy):
            return False

    # --------------------------------------------------------------- gets

    def get_blocking(self, key: CacheEngineKey) -> MemoryObj | None:
        return self.batched_get_blocking([key])[0]

    def batched_get_blocking(self, keys: Iterable[CacheEngineKey]) -> list[MemoryObj | None]:
        """[MemoryObj or None] per key: allocated from LMCache's CPU backend
        (owned by the caller, one reference) and filled by kvt_get. A chunk
        missing, damaged or partly evicted is None, never wrong bytes."""
        keys = list(keys)
        out = [None] * len(keys)
        held = self._held(keys)
        with self._io_lock:
            full_idx, full_objs = [], []
            if self._io is not None:
                names = [self._name(k) for k in keys]
                whole = self._io.exists(names)
                for i, w in enumerate(whole):
                    if w:
                        obj = self._full.allocate(self.local_cpu_backend)
                        if obj is None:
                            break
                        full_idx.append(i)
                        full_objs.append(obj)
                ok = self._io.get([names[i] for i in full_idx], [o.data_ptr for o in full_objs])
                for i, o, good in zip(full_idx, full_objs, ok):
                    if good:
                        out[i] = o
                    else:
                        o.ref_count_down()
            for i, k in enumerate(keys):
                if out[i] is None and held[i] and i not in full_idx:
                    out[i] = self._get_self(k)
        return out

    def _get_self(self, key):
        first = self.engine.get(self._self_keys(key, 1))[0]
        if first is None:
            return None
        parsed = _Desc.decode(memoryview(first)[:_HEADER])
        if parsed is None:
            log.warning("kvtier: %s has no valid chunk header; read as a miss", key)
            return None
        desc, nbytes = parsed
        if nbytes != desc.nbytes:
            return None
        n = self._self_pages(nbytes)
        keys = self._self_keys(key, n)
        buf = bytearray(n * self.page_bytes)
        view = memoryview(buf)
        pages = [view[i * self.page_bytes:(i + 1) * self.page_bytes] for i in range(n)]
        if any(p is None for p in self.engine.get(keys, pages)):
            return None
        obj = desc.allocate(self.local_cpu_backend)
        if obj is None:
            return None
        ctypes.memmove(obj.data_ptr, (ctypes.c_char * nbytes).from_buffer(buf, _HEADER), nbytes)
        return obj

    def get_non_blocking(self, key: CacheEngineKey, location: str | None = None) -> Future | None:
        if not self.contains(key):
            return None
        return self._pool.submit(self.get_blocking, key)

    async def batched_get_non_blocking(self, lookup_id: str, keys: Iterable[CacheEngineKey],
                                       transfer_spec: Any = None) -> list[MemoryObj]:
        """The leading chunks found, read on the worker thread (the event
        loop is not blocked by the reads)."""
        objs = await asyncio.wrap_future(self._pool.submit(self.batched_get_blocking,
                                                           list(keys)))
        out = []
        for o in objs:
            if o is None:
                break
            out.append(o)
        for o in objs[len(out):]:
            if o is not None:
                o.ref_count_down()
        return out

    # ------------------------------------------------------------ removal

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        held = self.contains(key)
        keys = []
        if self._io is not None:
            keys += self._io.keys([self._name(key)])
        keys += self._self_keys(key, self._self_pages(
            self._full.nbytes if self._full else self.page_bytes) + 1)
        self.engine.drop(keys)
        return held

    # ---------------------------------------------------------- lifecycle

    def get_allocator_backend(self) -> LocalCPUBackend:
        return self.local_cpu_backend

    def wait_puts(self) -> None:
        """Blocks until every put queued so far has finished."""
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        """Finishes the queued puts and closes the kvtier engine: with
        persist, flushed first (pages that cannot be made durable, as in a
        full cache, are a logged warning, not an exception); without, nothing
        to flush. Idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True)
        close_engine(self.engine, self.kvtier_config["persist"], log, f"plug-in {self.name!r}")
