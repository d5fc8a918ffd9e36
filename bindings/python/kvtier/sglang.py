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

Codecs. With codec fp8, int8 or int4, each region of an MHA host pool's
page (K or V; layer_first, page_first, page_first_direct) is one page of
layout KVT_KV_SINGLE, from the pool's dtype, page size, heads, head size and
layers; other pools and layouts, other dtypes and regions over several pages
are refused with the reason (docs/codecs.md#plugins).

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

from ._plugin import (SETTINGS, LayoutRefused, chunk_layout, kv_layout, model_fingerprint,
                      one_page_for_codec, open_engine, read_settings)
from .engine import Engine
from .storage import KVTierStorage

if TYPE_CHECKING:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.pool_host import HostKVCache
    from sglang.srt.observability.metrics_collector import StorageMetrics

logger = logging.getLogger(__name__)

# Keys of the extra config that SGLang itself reads; not kvtier settings.
_SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size"}


def _pool_layout(pool: HostKVCache, region_bytes: int, page_bytes: int
                 ) -> tuple[dict[str, Any] | str, bool]:
    """(the layout of one region's page, or the text saying why there is
    none; whether the page holds every layer's block). SGLang's MHA host
    pool hands K and V as separate regions of one page of page_size tokens:
    layer_first a layer's K (or V) [tokens][heads][head_dim], page_first
    every layer's [tokens][layers][heads][head_dim], page_first_direct
    [layers][tokens][heads][head_dim]. Each is KVT_KV_SINGLE (the region is
    K or V, quantised per channel); page_first's layers are more heads of a
    token's row, page_first_direct's are blocks of a page keyed
    KVT_ALL_LAYERS."""
    name, layout = type(pool).__name__, pool.layout
    if name != "MHATokenToKVPoolHost":
        return (f"SGLang's {name} is not described to kvtier (the MHA host pool is; MLA and "
                "quantised pools are not yet)"), False
    if region_bytes > page_bytes:
        return (f"a region of {region_bytes} bytes spans several pages of {page_bytes} "
                "(page_bytes); quantising needs a region in one page"), False
    ps, layers, heads, hd = pool.page_size, pool.layer_num, pool.head_num, pool.head_dim
    blocks = {"layer_first": (heads, 0), "page_first": (layers * heads, 0),
              "page_first_direct": (heads, layers)}
    if layout not in blocks:
        return (f"SGLang's host pool layout {layout!r} is not described to kvtier "
                "(layer_first, page_first and page_first_direct are)"), False
    kv_heads, n_layers = blocks[layout]
    try:
        item = pool.dtype.itemsize
        if ps * kv_heads * hd * max(n_layers, 1) * item != region_bytes:
            return (f"a region of {region_bytes} bytes is not {layout}'s page of {ps} tokens, "
                    f"{layers} layers, {heads} heads of {hd}"), False
        return kv_layout(pool.dtype, "single", ps, kv_heads, hd, n_layers=n_layers), \
            n_layers > 0
    except LayoutRefused as exc:
        return str(exc), False


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
        page_bytes, _ = chunk_layout(region_bytes, one_page_for_codec(self.settings, region_bytes))
        layout, self.region_all_layers = _pool_layout(pool, region_bytes, page_bytes)
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
        engine, config = open_engine(settings, page_bytes, self.fingerprint, "sglang", rank=rank,
                                     layout=layout)
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
