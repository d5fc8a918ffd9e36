"""KVTierHiCacheStorage: kvtier as the storage tier (L3) of SGLang's HiCache.

Pinned against SGLang 0.5.23 (sglang/srt/mem_cache/hicache_storage.py). SGLang
loads it itself, through StorageBackendFactory's "dynamic" backend:

  --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
  '{"backend_name":"kvtier","module_path":"kvtier.sglang",
    "class_name":"KVTierHiCacheStorage","interface_v1":1}'

Settings are keys of that same extra-config object (kvtier._plugin.SETTINGS:
spill_dir, dram_bytes, ssd_bytes, page_bytes, codec, persist, io_backend,
queue_depth, policy); none is needed.

The store is kvtier.storage.KVTierStorage (what is stored, the names, the
copies: its module doc); this module registers it with SGLang: the class
below reads SGLang's storage config and opens kvtier when SGLang registers
its host pool, with a fingerprint of that pool. SGLang names each page of
its host pool by a content hash (one key per page of page_size tokens); each
region of a page is one kvtier chunk named by (key, this rank's shard,
region). batch_set_v1 / batch_get_v1 hand kvtier the host pool's own memory:
one copy each way; batch_set / batch_get work on the flat pages SGLang's
controller builds (a gather and a scatter of its own) and add nothing.

Identity. The kvtier fingerprint is the model name and the pool's dtype,
layout, page size and geometry plus this rank's shard: another model, dtype,
layout or shard reads as a miss, never as wrong data; a damaged page reads as
a miss (kvtier checks a CRC32C of every page it reads back from disk).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from ._plugin import SETTINGS, chunk_layout, model_fingerprint, open_engine, read_settings
from .engine import Engine
from .storage import KVTierStorage

if TYPE_CHECKING:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.pool_host import HostKVCache
    from sglang.srt.observability.metrics_collector import StorageMetrics

logger = logging.getLogger(__name__)

# Keys of the extra config that SGLang itself reads; not kvtier settings.
_SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size"}


class KVTierHiCacheStorage(KVTierStorage, HiCacheStorage):
    """KVTierStorage as SGLang's HiCacheStorage (kvtier's DRAM tier + SSD files).

    storage_config: SGLang's HiCacheStorageConfig (ranks, model name, the
    extra config). kwargs: what the factory passes along (unused). The kvtier
    engine opens when SGLang registers its host pool (register_mem_pool_host),
    which fixes the page geometry; close() closes it (flushing with persist)."""

    log = logger
    who = "HiCache storage"

    def __init__(self, storage_config: HiCacheStorageConfig,
                 kwargs: dict[str, Any] | None = None) -> None:
        self.storage_config = storage_config
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        unknown = sorted(k for k in extra if k not in _SGLANG_KEYS and k not in SETTINGS
                         and not k.startswith("_"))
        if unknown:
            raise ValueError(f"kvtier: unknown key(s) in the HiCache extra config: "
                             f"{', '.join(unknown)}; kvtier reads "
                             + ", ".join(sorted(SETTINGS)))
        self.settings = read_settings(extra)
        c = storage_config
        if c.is_mla_model and (c.tp_size > 1 or getattr(c, "dcp_size", 1) > 1):
            # SGLang writes replicated MLA pages from one rank only and lets the
            # others read that rank's copy; kvtier's store belongs to one process.
            raise NotImplementedError("kvtier: an MLA model with tensor parallelism needs a "
                                      "store shared between processes; use tp_size 1")
        shard = (f"tp{c.tp_rank}of{c.tp_size}-pp{c.pp_rank}of{c.pp_size}"
                 f"-cp{c.attn_cp_rank}of{c.attn_cp_size}-dp{getattr(c, 'dp_rank', 0)}")
        super().__init__(shard=shard, open_for_pool=self._open_for_pool_geometry,
                         batch_metrics=bool(getattr(c, "enable_storage_metrics", False)))

    def _open_for_pool_geometry(self, pool: HostKVCache, region_bytes: int,
                                regions: int) -> tuple[Engine, dict[str, Any]]:
        """kvtier for the pool's regions, its fingerprint the model and the
        pool's dtype, layout, page size and geometry plus this rank's shard."""
        page_bytes, _ = chunk_layout(region_bytes, self.settings.get("page_bytes"))
        self.fingerprint = model_fingerprint(
            engine="sglang", model=self.storage_config.model_name or "", pool=type(pool).__name__,
            dtype=str(pool.dtype), layout=pool.layout, page_tokens=pool.page_size,
            layers=getattr(pool, "layer_num", ""), heads=getattr(pool, "head_num", ""),
            head_dim=getattr(pool, "head_dim", ""), v_head_dim=getattr(pool, "v_head_dim", ""),
            format=getattr(pool, "storage_format_tag", None) or "", regions=regions,
            region_bytes=region_bytes, shard=self.shard)
        rank = None if self.shard == "tp0of1-pp0of1-cp0of1-dp0" else self.shard
        settings = dict(self.settings)
        if rank is not None and "spill_dir" in settings:
            # One directory per process: kvtier locks its spill directory.
            settings["spill_dir"] = os.path.join(settings["spill_dir"], rank)
        engine, config = open_engine(settings, page_bytes, self.fingerprint, "sglang", rank=rank)
        n_pages = -(-region_bytes // page_bytes)
        logger.info("kvtier HiCache storage: %s, pages of %d bytes (%d per region of %d), "
                    "DRAM %d, SSD %d bytes in %s", self.fingerprint, page_bytes, n_pages,
                    region_bytes, config["dram_bytes"], config["ssd_bytes"], config["ssd_dir"])
        return engine, config

    def get_stats(self) -> StorageMetrics:
        """SGLang's StorageMetrics (the pages and GB/s of each batch since the
        last call) with .kvtier: KVTierStorage.get_stats() (kvt_stats and the
        store's counters)."""
        from sglang.srt.observability.metrics_collector import StorageMetrics
        m = StorageMetrics()
        for name, vals in self.take_batch_metrics().items():
            getattr(m, name).extend(vals)
        m.kvtier = super().get_stats()
        return m
