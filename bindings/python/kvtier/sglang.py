"""KVTierHiCacheStorage: kvtier as the storage tier (L3) of SGLang's HiCache.

Pinned against SGLang 0.5.23 (sglang/srt/mem_cache/hicache_storage.py). SGLang
loads it itself, through StorageBackendFactory's "dynamic" backend:

  --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
  '{"backend_name":"kvtier","module_path":"kvtier.sglang",
    "class_name":"KVTierHiCacheStorage","interface_v1":1}'

Settings are keys of that same extra-config object (kvtier._plugin.SETTINGS:
spill_dir, dram_bytes, ssd_bytes, page_bytes, codec, persist, io_backend,
queue_depth, policy); none is needed.

What is stored. SGLang names each page of its host pool by a content hash
(one key per page of page_size tokens). The host pool describes a page's
memory as regions (get_page_buffer_meta: K and V of all layers for the
page-first layouts, K and V of each layer for layer_first), all of one size;
each region is one kvtier chunk of whole kvtier pages, named by
(key, region) under this rank's shard. The flat page of the older batch_get /
batch_set (get_data_page(flat=True)) is the same regions end to end, so both
interfaces read what either wrote.

Copies. batch_set_v1 / batch_get_v1 hand kvtier the host pool's own memory:
one copy each way (pool -> kvtier's DRAM tier on set, DRAM tier -> pool on
get), the disk side is DMA (O_DIRECT). batch_set / batch_get work on the flat
pages SGLang's controller builds (a gather and a scatter of its own, before
and after) and add nothing to them. A region that is not a multiple of 4 KiB
copies its last page once more through a bounce page.

Identity. The kvtier fingerprint is the model name and the pool's dtype,
layout, page size and geometry plus this rank's shard: another model, dtype,
layout or shard reads as a miss, never as wrong data; a damaged page reads as
a miss (kvtier checks a CRC32C of every page it reads back from disk).
"""

import logging
import os
import threading
import time

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from . import _plugin

logger = logging.getLogger(__name__)

# Keys of the extra config that SGLang itself reads; not kvtier settings.
_SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size"}


class KVTierHiCacheStorage(HiCacheStorage):
    """A HiCacheStorage on kvtier (DRAM tier + SSD files).

    storage_config: SGLang's HiCacheStorageConfig (ranks, model name, the
    extra config). kwargs: what the factory passes along (unused). The kvtier
    engine opens when SGLang registers its host pool (register_mem_pool_host),
    which fixes the page geometry; close() closes it (flushing with persist)."""

    def __init__(self, storage_config, kwargs=None):
        self.storage_config = storage_config
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        unknown = sorted(k for k in extra if k not in _SGLANG_KEYS and k not in _plugin.SETTINGS
                         and not k.startswith("_"))
        if unknown:
            raise ValueError(f"kvtier: unknown key(s) in the HiCache extra config: "
                             f"{', '.join(unknown)}; kvtier reads "
                             + ", ".join(sorted(_plugin.SETTINGS)))
        self.settings = _plugin.read_settings(extra)
        c = storage_config
        if c.is_mla_model and (c.tp_size > 1 or getattr(c, "dcp_size", 1) > 1):
            # SGLang writes replicated MLA pages from one rank only and lets the
            # others read that rank's copy; kvtier's store belongs to one process.
            raise NotImplementedError("kvtier: an MLA model with tensor parallelism needs a "
                                      "store shared between processes; use tp_size 1")
        self.shard = (f"tp{c.tp_rank}of{c.tp_size}-pp{c.pp_rank}of{c.pp_size}"
                      f"-cp{c.attn_cp_rank}of{c.attn_cp_size}-dp{getattr(c, 'dp_rank', 0)}")
        self.metrics = bool(getattr(c, "enable_storage_metrics", False))
        self.engine = None
        self.engine_config = None
        self.io = None
        self.region_bytes = None
        self.regions = None
        self._lock = threading.Lock()
        self._m = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [],
                   "backup_bandwidth": []}

    # ------------------------------------------------------------ setup

    def register_mem_pool_host(self, mem_pool_host):
        """Records the host pool and opens kvtier for its page geometry."""
        super().register_mem_pool_host(mem_pool_host)
        pool = mem_pool_host
        if pool.page_size <= 0:
            raise ValueError(f"kvtier: host pool page_size {pool.page_size}")
        probe = _page_indices(pool, [0])
        ptrs, sizes = pool.get_page_buffer_meta(probe)
        if not sizes or len(set(sizes)) != 1:
            raise NotImplementedError(f"kvtier: host pool {type(pool).__name__} describes a "
                                      f"page as regions of sizes {sorted(set(sizes))}")
        self.regions = len(sizes)
        self.region_bytes = int(sizes[0])
        flat = pool.get_dummy_flat_data_page()
        flat_bytes = flat.numel() * flat.element_size()
        if flat_bytes != self.regions * self.region_bytes:
            raise NotImplementedError(
                f"kvtier: host pool {type(pool).__name__}'s flat page is {flat_bytes} bytes, "
                f"not its {self.regions} regions of {self.region_bytes}")
        self.flat_bytes = flat_bytes
        self.order = _flat_order(pool, self.regions)
        page_bytes, _ = _plugin.chunk_layout(self.region_bytes, self.settings.get("page_bytes"))
        self.fingerprint = _plugin.model_fingerprint(
            engine="sglang", model=self.storage_config.model_name or "", pool=type(pool).__name__,
            dtype=str(pool.dtype), layout=pool.layout, page_tokens=pool.page_size,
            layers=getattr(pool, "layer_num", ""), heads=getattr(pool, "head_num", ""),
            head_dim=getattr(pool, "head_dim", ""), v_head_dim=getattr(pool, "v_head_dim", ""),
            format=getattr(pool, "storage_format_tag", None) or "", regions=self.regions,
            region_bytes=self.region_bytes, shard=self.shard)
        rank = None if self.shard == "tp0of1-pp0of1-cp0of1-dp0" else self.shard
        settings = dict(self.settings)
        if rank is not None and "spill_dir" in settings:
            # One directory per process: kvtier locks its spill directory.
            settings["spill_dir"] = os.path.join(settings["spill_dir"], rank)
        if self.engine is not None:
            self.close()
        self.engine, self.engine_config = _plugin.open_engine(
            settings, page_bytes, self.fingerprint, "sglang", rank=rank)
        self.io = _plugin.ChunkIO(self.engine, self.region_bytes)
        logger.info("kvtier HiCache storage: %s, pages of %d bytes (%d per region of %d), "
                    "DRAM %d, SSD %d bytes in %s", self.fingerprint, page_bytes, self.io.n_pages,
                    self.region_bytes, self.engine_config["dram_bytes"],
                    self.engine_config["ssd_bytes"], self.engine_config["ssd_dir"])

    def _ready(self):
        if self.io is None:
            raise RuntimeError("kvtier: register_mem_pool_host() first (SGLang's controller "
                               "calls it right after creating the backend)")
        return self.io

    def _names(self, keys):
        """Chunk names of every region of every key, in flat-page order."""
        return [f"{k}\0{self.shard}\0{r}" for k in keys for r in range(self.regions)]

    def _by_key(self, flags):
        n = self.regions
        return [all(flags[i * n:(i + 1) * n]) for i in range(len(flags) // n)]

    def _record(self, kind, pages, t0):
        if self.metrics and pages:
            dt = max(time.perf_counter() - t0, 1e-9)
            with self._lock:
                self._m[f"{kind}_pgs"].append(pages)
                self._m[f"{kind}_bandwidth"].append(pages * self.flat_bytes / dt / 1e9)

    # ------------------------------------------------- zero-copy (interface_v1)

    def _pool_addrs(self, keys, host_indices):
        """Region addresses of each key's page in the host pool, flat order."""
        pool = self.mem_pool_host
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
                out[base + self.order[j]] = int(ptrs[base + j])
        return out

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Stores the pages of host_indices under keys, straight from the host
        pool. [bool] per key: held after the call."""
        io = self._ready()
        keys = list(keys)
        if not keys:
            return []
        t0 = time.perf_counter()
        ok = self._by_key(io.put(self._names(keys), self._pool_addrs(keys, host_indices)))
        self._record("backup", sum(ok), t0)
        return ok

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Reads keys' pages straight into the host pool at host_indices.
        [bool] per key; a missing or damaged page is False."""
        io = self._ready()
        keys = list(keys)
        if not keys:
            return []
        t0 = time.perf_counter()
        ok = self._by_key(io.get(self._names(keys), self._pool_addrs(keys, host_indices)))
        self._record("prefetch", sum(ok), t0)
        return ok

    # ------------------------------------------------- flat pages (older calls)

    def _flat_addr(self, t, what):
        n = t.numel() * t.element_size()
        if n != self.flat_bytes:
            raise ValueError(f"kvtier: {what} holds {n} bytes, a page is {self.flat_bytes}")
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"kvtier: {what} must be a contiguous CPU tensor")
        return t.data_ptr()

    def _flat_regions(self, addrs):
        rb = self.region_bytes
        return [a + r * rb for a in addrs for r in range(self.regions)]

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """Stores flat pages (values: one CPU tensor of a whole page per key).
        True when every key is held after the call."""
        io = self._ready()
        keys = list(keys)
        values = list(values if values is not None else target_locations or [])
        if len(values) != len(keys):
            raise ValueError(f"kvtier: {len(keys)} keys but {len(values)} values")
        values = [v.contiguous() for v in values]
        addrs = [self._flat_addr(v, f"value {i}") for i, v in enumerate(values)]
        t0 = time.perf_counter()
        ok = self._by_key(io.put(self._names(keys), self._flat_regions(addrs)))
        self._record("backup", sum(ok), t0)
        return all(ok)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self.batch_set([key], [value if value is not None else target_location])

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Reads flat pages into target_locations (CPU tensors of a page each;
        new ones when None). The tensor per key, or None where it is missing."""
        io = self._ready()
        keys = list(keys)
        if target_locations is None:
            target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
        targets = list(target_locations)
        if len(targets) != len(keys):
            raise ValueError(f"kvtier: {len(keys)} keys but {len(targets)} targets")
        addrs = [self._flat_addr(t, f"target {i}") for i, t in enumerate(targets)]
        t0 = time.perf_counter()
        ok = self._by_key(io.get(self._names(keys), self._flat_regions(addrs)))
        self._record("prefetch", sum(ok), t0)
        return [t if f else None for t, f in zip(targets, ok)]

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    # ------------------------------------------------------------ queries

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys, extra_info=None):
        """The number of leading keys whose every region is held."""
        io = self._ready()
        keys = list(keys)
        ok = self._by_key(io.exists(self._names(keys)))
        return ok.index(False) if False in ok else len(ok)

    def clear(self):
        """Removes every page of this store: kvtier is reopened once without
        persist, which empties its spill directory."""
        if self.engine is None:
            return
        cfg = dict(self.engine_config)
        self.engine.close()
        _plugin.Engine(**dict(cfg, persist=False)).close()
        self.engine = _plugin.Engine(**cfg)
        self.io = _plugin.ChunkIO(self.engine, self.region_bytes)

    def get_stats(self):
        """SGLang's StorageMetrics (the pages and GB/s of each batch since the
        last call) with .kvtier, kvtier's own counters (kvt_stats)."""
        from sglang.srt.observability.metrics_collector import StorageMetrics
        m = StorageMetrics()
        with self._lock:
            for name, vals in self._m.items():
                getattr(m, name).extend(vals)
                vals.clear()
        m.kvtier = self.engine.stats().as_dict() if self.engine is not None else {}
        return m

    def flush(self):
        """kvt_flush(): with persist, every page stored so far is durable."""
        if self.engine is not None:
            self.engine.flush()

    def close(self) -> None:
        """Closes kvtier; idempotent. With persist, flushed first: pages that
        cannot be made durable (a full cache) are a logged warning, never an
        exception."""
        if self.engine is not None:
            engine, self.engine, self.io = self.engine, None, None
            _plugin.close_engine(engine, self.engine_config["persist"], logger, "HiCache storage")


def _page_indices(pool, pages):
    import torch
    ps = pool.page_size
    return torch.cat([torch.arange(p * ps, (p + 1) * ps, dtype=torch.int64) for p in pages])


def _flat_order(pool, regions):
    """Where region j of get_page_buffer_meta sits in the flat page: the
    layer_first MHA pool lists (K, V) per layer, its flat page is all K then
    all V; every other layout lists them in flat order."""
    layers = getattr(pool, "layer_num", 0)
    if pool.layout == "layer_first" and layers and regions == 2 * layers:
        return [(j % 2) * layers + j // 2 for j in range(regions)]
    return list(range(regions))
