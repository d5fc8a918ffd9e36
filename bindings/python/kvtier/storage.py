"""KVTierStorage: kvtier as the storage tier of a prefix cache, in the shape
of SGLang HiCache's HiCacheStorage.

The one HiCache-shaped store of the package: used on its own, and as the
SGLang plug-in (kvtier.sglang.KVTierHiCacheStorage is this class registered
with SGLang). Methods: get / batch_get / set / batch_set / exists /
batch_exists (the hit-prefix length) / clear / get_stats, the zero-copy
batch_get_v1 / batch_set_v1 on a registered host pool, and LMCache's
contains().

Keys are content hashes (str or bytes, e.g. the sha256 of a token prefix
that HiCache and LMCache compute). A key's value is either
- one kvtier page of page_bytes (a torch tensor, numpy array or any
  bytes-like object; on the cuda back-end CUDA tensors too): the store on
  its own, or
- once a host pool is registered (register_mem_pool_host, as SGLang's
  controller does), one page of that pool: regions of equal size
  (get_page_buffer_meta: K and V of all layers for the page-first layouts,
  K and V of each layer for layer_first), each one kvtier chunk of whole
  kvtier pages. The flat page of batch_get / batch_set
  (get_data_page(flat=True)) is the same regions end to end, so both
  interfaces read what either wrote.
A value is named in kvtier by page_keys (kvtier._plugin, the package's one
key scheme): the key itself for a one-region value without a shard, else
key NUL shard NUL region.

Because the key names the content, a value is stored once: set() of a key
that is held is skipped. With persist and an ssd_dir the pages survive the
process; the fingerprint (model, dtype, layout identity) makes a page
stored by another model read as a miss, and a damaged page reads as a miss
(kvtier checks a CRC32C of every page it reads back from disk).

Copies: kvtier reads and writes the value's memory in place (kvt_put into
its DRAM tier, kvt_get out of it: one copy each way; the SSD side is DMA).
A region that is not a multiple of 4 KiB copies its last page once more
through a bounce page.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Sequence

from ._convert import Borrowed, buffer_addresses
from ._plugin import ChunkIO, close_engine, page_keys
from .engine import Engine, Key, make_config

if TYPE_CHECKING:
    import torch

#: open_for_pool(pool, region_bytes, regions) -> (Engine, the config used).
PoolOpener = Callable[[Any, int, int], "tuple[Engine, dict[str, Any]]"]

_BATCH_METRICS = ("prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth")


def key_hash(key: str | bytes) -> Key:
    """The kvt_key of a one-page value stored under key (str or bytes):
    page_keys(key, 1)[0], i.e. (id, 0, index) with 96 bits of blake2b in id
    and index. TypeError for any other key type. Stable across processes
    and machines; the collision stance is page_keys's."""
    return page_keys(key, 1)[0]


class KVTierStorage:
    """A HiCache-shaped key-value store of KV pages on kvtier (module doc).

    engine: an Engine to use (borrowed: close() leaves it open, clear()
      drops only the keys set through this object), or None to open one
      from **engine_config (page_bytes, ssd_dir, persist, fingerprint, ...;
      owned: close() closes it, clear() empties it).
    dtype, shape: what get() without a target returns before a host pool is
      registered (a torch tensor over a new page-sized buffer); default a
      flat uint8 tensor.
    shard: the name of this process's part of a sharded model (SGLang's
      tp/pp/cp/dp ranks), part of every name: shards never read each other.
    open_for_pool: instead of an engine, a callable (pool, region_bytes,
      regions) -> (Engine, config) that opens kvtier when a host pool is
      registered, as the pool fixes the page geometry (the SGLang
      plug-in's way); the store owns that engine.
    batch_metrics: keep the pages and GB/s of every batch for
      take_batch_metrics() (SGLang's storage metrics).
    Thread-safe as the Engine is (SGLang calls it from its prefetch and
    backup threads), except register_mem_pool_host, clear and close.
    """

    log: ClassVar[logging.Logger] = logging.getLogger("kvtier.storage")
    who: ClassVar[str] = "storage"

    def __init__(self, engine: Engine | None = None, *, dtype: torch.dtype | None = None,
                 shape: Sequence[int] | None = None, shard: str | None = None,
                 open_for_pool: PoolOpener | None = None, batch_metrics: bool = False,
                 **engine_config: Any) -> None:
        if engine is not None and engine_config:
            raise TypeError("pass either an engine or engine configuration, not both")
        if open_for_pool is not None and (engine is not None or engine_config):
            raise TypeError("open_for_pool opens the engine itself: pass no engine or "
                            "engine configuration with it")
        self.engine: Engine | None = None
        self.engine_config: dict[str, Any] | None = None
        self.io: ChunkIO | None = None
        self.mem_pool_host: Any = None
        self.shard = shard
        self.regions = 1
        self.region_bytes = 0
        self.value_bytes = 0
        self.page_bytes = 0
        self._order = [0]
        # A region holds every layer's block (set by open_for_pool's caller
        # for such pools): its one page is keyed KVT_ALL_LAYERS.
        self.region_all_layers = False
        self._owns = False
        self._closed = False
        self._open_for_pool = open_for_pool
        self._dtype = dtype
        self._shape = shape
        self._lock = threading.Lock()
        # Pages set through this object: what clear() drops on a borrowed engine.
        self._known: set[Key] = set()
        self._counts = {"get": 0, "get_hit": 0, "set": 0, "set_stored": 0, "set_skipped": 0,
                        "set_failed": 0}
        self._batches: dict[str, list[float]] | None = (
            {k: [] for k in _BATCH_METRICS} if batch_metrics else None)
        if open_for_pool is not None:
            return  # kvtier opens in register_mem_pool_host
        if engine is None:
            make_config(**engine_config)  # reject unknown fields before opening
            self.engine_config = dict(engine_config)
            self._attach(Engine(**engine_config), True, None)
        else:
            self._attach(engine, False, None)

    def _attach(self, engine: Engine, owns: bool, region_bytes: int | None) -> None:
        """Uses engine for values of self.regions regions of region_bytes
        (None: one kvtier page)."""
        self.engine = engine
        self._owns = owns
        self._closed = False
        self.page_bytes = engine.page_bytes
        self.region_bytes = region_bytes or engine.page_bytes
        self.value_bytes = self.regions * self.region_bytes
        self.io = ChunkIO(engine, self.region_bytes, all_layers=self.region_all_layers)

    # ------------------------------------------------------------ host pool

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Takes SGLang's host pool (a HostKVCache): from now on a value is
        one page of it, and batch_get_v1 / batch_set_v1 read and write its
        pages in place. With open_for_pool, kvtier opens now for the pool's
        page geometry (an engine opened before is closed first); otherwise
        the store's engine holds each region in whole kvtier pages."""
        pool = mem_pool_host
        if pool.page_size <= 0:
            raise ValueError(f"kvtier: host pool page_size {pool.page_size}")
        _, sizes = pool.get_page_buffer_meta(_page_indices(pool, [0]))
        if not sizes or len(set(sizes)) != 1:
            raise NotImplementedError(f"kvtier: host pool {type(pool).__name__} describes a "
                                      f"page as regions of sizes {sorted(set(sizes))}")
        regions, region_bytes = len(sizes), int(sizes[0])
        flat = pool.get_dummy_flat_data_page()
        flat_bytes = flat.numel() * flat.element_size()
        if flat_bytes != regions * region_bytes:
            raise NotImplementedError(
                f"kvtier: host pool {type(pool).__name__}'s flat page is {flat_bytes} bytes, "
                f"not its {regions} regions of {region_bytes}")
        if self._open_for_pool is not None:
            if self.engine is not None:
                self.close()
            engine, self.engine_config = self._open_for_pool(pool, region_bytes, regions)
            owns = True
        else:
            engine, owns = self._engine_or_closed(), self._owns
        self.mem_pool_host = pool
        self.regions = regions
        self._order = _flat_order(pool, regions)
        self._attach(engine, owns, region_bytes)

    def _engine_or_closed(self) -> Engine:
        if self.engine is None:
            raise ValueError("kvtier: the store is closed")
        return self.engine

    def _ready(self) -> ChunkIO:
        if self.io is None:
            if self._closed or self._open_for_pool is None:
                raise ValueError("kvtier: the store is closed")
            raise RuntimeError("kvtier: register_mem_pool_host() first (SGLang's controller "
                               "calls it right after creating the backend)")
        return self.io

    def _pool_addrs(self, keys: Sequence[Any], host_indices: torch.Tensor) -> list[int]:
        """Region addresses of each key's page in the host pool, flat order."""
        pool = self.mem_pool_host
        if pool is None:
            raise RuntimeError("kvtier: the _v1 calls need a host pool (register_mem_pool_host)")
        ps = pool.page_size
        if host_indices.numel() != len(keys) * ps:
            raise ValueError(f"kvtier: {len(keys)} keys but {host_indices.numel()} host "
                             f"indices (page_size {ps})")
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        if len(ptrs) != len(keys) * self.regions or any(s != self.region_bytes for s in sizes):
            raise ValueError("kvtier: the host pool's page regions changed since registration")
        out = [0] * len(ptrs)
        for k in range(len(keys)):
            base = k * self.regions
            for j in range(self.regions):
                out[base + self._order[j]] = int(ptrs[base + j])
        return out

    # ------------------------------------------------------------ naming

    def _names(self, keys: Sequence[Any]) -> list[Any]:
        """The chunk name of every region of every key, in flat-page order."""
        if self.shard is None and self.regions == 1:
            return list(keys)
        shard = (self.shard or "").encode()
        out = []
        for k in keys:
            if isinstance(k, str):
                k = k.encode("utf-8")
            elif not isinstance(k, (bytes, bytearray, memoryview)):
                raise TypeError(f"storage keys are str or bytes, not {type(k).__name__}")
            out.extend(b"%s\0%s\0%d" % (bytes(k), shard, r) for r in range(self.regions))
        return out

    def _by_key(self, flags: Sequence[bool]) -> list[bool]:
        n = self.regions
        return [all(flags[i * n:(i + 1) * n]) for i in range(len(flags) // n)]

    # ------------------------------------------------------------ moving pages

    def _values(self, borrowed: Borrowed, values: Sequence[Any], writable: bool,
                what: str) -> tuple[list[int], bool]:
        """Addresses of every region of every value (flat order), all checked
        (size value_bytes, contiguous, one side) before any is used, and
        whether they are CUDA memory."""
        addrs, on_device = buffer_addresses(borrowed, values, self.value_bytes,
                                            self._engine_or_closed().device_name, writable, what)
        rb = self.region_bytes
        return [a + r * rb for a in addrs for r in range(self.regions)], bool(on_device)

    def _put(self, keys: list[Any], addrs: list[int], on_device: bool) -> list[bool]:
        """Stores the regions not held yet; [bool] per key: held after."""
        io = self._ready()
        t0 = time.perf_counter()
        names = self._names(keys)
        before = io.exists(names)
        todo = [j for j, held in enumerate(before) if not held]
        put = io.put([names[j] for j in todo], [addrs[j] for j in todo], skip_existing=False,
                     on_device=on_device)
        after = list(before)
        for j, good in zip(todo, put):
            after[j] = good
        ok = self._by_key(after)
        skipped = sum(self._by_key(before))
        stored = [] if self._owns else io.keys([names[j] for j, good in zip(todo, put) if good])
        with self._lock:
            c = self._counts
            c["set"] += len(keys)
            c["set_skipped"] += skipped
            c["set_stored"] += sum(ok) - skipped
            c["set_failed"] += len(keys) - sum(ok)
            self._known.update(stored)
        self._record("backup", sum(ok), t0)
        return ok

    def _get(self, keys: list[Any], addrs: list[int], on_device: bool) -> list[bool]:
        """Copies the keys held into addrs; [bool] per key (a missing or
        damaged page is False)."""
        io = self._ready()
        t0 = time.perf_counter()
        ok = self._by_key(io.get(self._names(keys), addrs, on_device=on_device))
        with self._lock:
            self._counts["get"] += len(keys)
            self._counts["get_hit"] += sum(ok)
        self._record("prefetch", sum(ok), t0)
        return ok

    def _record(self, kind: str, pages: int, t0: float) -> None:
        if self._batches is not None and pages:
            dt = max(time.perf_counter() - t0, 1e-9)
            with self._lock:
                self._batches[f"{kind}_pgs"].append(pages)
                self._batches[f"{kind}_bandwidth"].append(pages * self.value_bytes / dt / 1e9)

    def _new_target(self) -> torch.Tensor:
        if self.mem_pool_host is not None:
            return self.mem_pool_host.get_dummy_flat_data_page()
        import torch
        t = torch.empty(self.value_bytes, dtype=torch.uint8)
        if self._dtype is not None:
            t = t.view(self._dtype)
        if self._shape is not None:
            t = t.view(self._shape)
        return t

    # ------------------------------------------------------------ reads

    def get(self, key: str | bytes, target_location: Any = None,
            target_sizes: Any = None) -> Any | None:
        """The value of key copied into target_location (borrowed, value_bytes,
        writable; returned) or into a new tensor (caller owns it); None when
        the key is in no tier. target_sizes is accepted for HiCache's
        signature and must be None or value_bytes."""
        return self.batch_get([key], None if target_location is None else [target_location],
                              None if target_sizes is None else [target_sizes])[0]

    def batch_get(self, keys: Iterable[str | bytes], target_locations: Sequence[Any] | None = None,
                  target_sizes: Sequence[Any] | None = None) -> list[Any | None]:
        """get() for many keys: the target per key, or None where it is
        missing (or damaged)."""
        self._ready()
        keys = list(keys)
        if target_sizes is not None:
            bad = [s for s in target_sizes if s is not None and int(s) != self.value_bytes]
            if bad:
                raise ValueError(f"target size {bad[0]} differs from the value's "
                                 f"{self.value_bytes} bytes")
        targets = (list(target_locations) if target_locations is not None
                   else [self._new_target() for _ in keys])
        if len(targets) != len(keys):
            raise ValueError(f"kvtier: {len(keys)} keys but {len(targets)} targets")
        with Borrowed() as b:
            addrs, on_device = self._values(b, targets, True, "get")
            ok = self._get(keys, addrs, on_device)
        return [t if f else None for t, f in zip(targets, ok)]

    def exists(self, key: str | bytes) -> bool:
        """True when every page of key's value is held in some tier."""
        return self.batch_exists([key]) == 1

    contains = exists  # LMCache's name

    def batch_exists(self, keys: Iterable[str | bytes], extra_info: Any = None) -> int:
        """The number of leading keys whose value is held (the hit prefix)."""
        io = self._ready()
        ok = self._by_key(io.exists(self._names(list(keys))))
        return ok.index(False) if False in ok else len(ok)

    def batch_get_v1(self, keys: Iterable[str], host_indices: torch.Tensor,
                     extra_info: Any = None) -> list[bool]:
        """Reads keys' values straight into the host pool's pages at
        host_indices (page_size indices per key). [bool] per key; a missing
        or damaged page is False."""
        keys = list(keys)
        if not keys:
            return []
        return self._get(keys, self._pool_addrs(keys, host_indices), False)

    # ------------------------------------------------------------ writes

    def set(self, key: str | bytes, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """Stores one value (value, or target_location when value is None:
        HiCache's zero-copy form). Returns True when the key is held after
        the call, False when kvtier is full or busy."""
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_set(self, keys: Iterable[str | bytes], values: Sequence[Any] | None = None,
                  target_locations: Sequence[Any] | None = None,
                  target_sizes: Any = None) -> bool:
        """Stores the values of keys not held yet (content keys: a held key
        already holds these bytes). Values are borrowed for the call, each
        value_bytes (a non-contiguous tensor is copied first); all are
        checked before anything is stored (ValueError). True when every key
        is held after the call; False if kvtier was full or busy (keys of
        the parts before the failing one are stored)."""
        self._ready()
        keys = list(keys)
        values = values if values is not None else target_locations
        if values is None:
            raise ValueError("batch_set needs values (or target_locations)")
        values = [v.contiguous() if hasattr(v, "data_ptr") and hasattr(v, "contiguous") else v
                  for v in values]
        if len(values) != len(keys):
            raise ValueError(f"kvtier: {len(keys)} keys but {len(values)} values")
        with Borrowed() as b:
            addrs, on_device = self._values(b, values, False, "set")
            return all(self._put(keys, addrs, on_device))

    def batch_set_v1(self, keys: Iterable[str], host_indices: torch.Tensor,
                     extra_info: Any = None) -> list[bool]:
        """Stores the host pool's pages at host_indices under keys, straight
        from the pool. [bool] per key: held after the call."""
        keys = list(keys)
        if not keys:
            return []
        return self._put(keys, self._pool_addrs(keys, host_indices), False)

    # ------------------------------------------------------------ upkeep

    def clear(self) -> None:
        """Removes every page. An owned engine is reopened once with
        persist off, which wipes its ssd_dir (pages of earlier processes
        too); on a borrowed engine only the pages set through this object
        are dropped."""
        if self.engine is None:
            return
        if self._owns:
            cfg = dict(self.engine_config or {})
            self.engine.close()
            Engine(**dict(cfg, persist=False)).close()
            self._attach(Engine(**cfg), True, self.region_bytes)
        else:
            with self._lock:
                known, self._known = list(self._known), set()
            self.engine.drop(known)

    def flush(self) -> None:
        """kvt_flush(): with persist, every page stored so far is durable."""
        if self.engine is not None:
            self.engine.flush()

    def get_stats(self) -> dict[str, Any]:
        """A dict: the engine's kvt_stats fields (none before kvtier opens)
        plus this object's counters (get, get_hit, set, set_stored,
        set_skipped, set_failed)."""
        d = self.engine.stats().as_dict() if self.engine is not None else {}
        with self._lock:
            d.update(self._counts)
        return d

    def take_batch_metrics(self) -> dict[str, list[float]]:
        """With batch_metrics: the pages and GB/s of each get (prefetch_*) and
        set (backup_*) since the last call; empty lists otherwise."""
        out: dict[str, list[float]] = {k: [] for k in _BATCH_METRICS}
        if self._batches is not None:
            with self._lock:
                out, self._batches = self._batches, {k: [] for k in _BATCH_METRICS}
        return out

    def close(self) -> None:
        """Closes an owned engine; idempotent; a borrowed one stays open.
        With persist, flushed first: pages that cannot be made durable (a
        full cache) are a logged warning, never an exception."""
        if self._owns and self.engine is not None:
            engine, self.engine, self.io = self.engine, None, None
            self._closed = True
            close_engine(engine, bool((self.engine_config or {}).get("persist")), self.log,
                         self.who)

    def __enter__(self) -> KVTierStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _page_indices(pool: Any, pages: Sequence[int]) -> torch.Tensor:
    import torch
    ps = pool.page_size
    return torch.cat([torch.arange(p * ps, (p + 1) * ps, dtype=torch.int64) for p in pages])


def _flat_order(pool: Any, regions: int) -> list[int]:
    """Where region j of get_page_buffer_meta sits in the flat page: the
    layer_first MHA pool lists (K, V) per layer, its flat page is all K then
    all V; every other layout lists them in flat order."""
    layers = getattr(pool, "layer_num", 0)
    if pool.layout == "layer_first" and layers and regions == 2 * layers:
        return [(j % 2) * layers + j // 2 for j in range(regions)]
    return list(range(regions))
