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

Codecs. With codec fp8, int8 or int4, each region of a host pool's page
(MHA: K or V; MLA: the latent + RoPE rows; layouts layer_first, page_first,
page_first_direct) is one page of layout KVT_KV_SINGLE or KVT_KV_MLA, from
the pool's dtype, page size, heads, head sizes and layers; other pools and
layouts, other dtypes and regions over several pages are refused with the
reason (docs/codecs.md#plugins).

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
    none; whether the page holds every layer's block). A region is part of
    one pool page of page_size tokens:
    - MHA pool: K and V are separate regions. layer_first a layer's K (or V)
      [tokens][heads][head_dim], page_first every layer's
      [tokens][layers][heads][head_dim], page_first_direct
      [layers][tokens][heads][head_dim]: KVT_KV_SINGLE (the region is K or
      V, quantised per channel), page_first's layers as more heads of a
      token's row.
    - MLA pool: one row of latent + RoPE key a token and layer.
      layer_first [tokens][row] and page_first_direct [layers][tokens][row]:
      KVT_KV_MLA; page_first [tokens][layers][row]: KVT_KV_SINGLE with a
      layer's row as a head (a token's rows of every layer are wider than
      one MLA row may be).
    page_first_direct's layers are the blocks of a page keyed KVT_ALL_LAYERS."""
    name, layout, ps = type(pool).__name__, pool.layout, pool.page_size
    if region_bytes > page_bytes:
        return (f"a region of {region_bytes} bytes spans several pages of {page_bytes} "
                "(page_bytes); quantising needs a region in one page"), False
    layers = pool.layer_num
    if name == "MHATokenToKVPoolHost":
        heads, hd = pool.head_num, pool.head_dim
        geometry = {"layer_first": ("single", heads, hd, 0, 0),
                    "page_first": ("single", layers * heads, hd, 0, 0),
                    "page_first_direct": ("single", heads, hd, 0, layers)}
    elif name == "MLATokenToKVPoolHost":
        lora, rope, row = pool.kv_lora_rank, pool.qk_rope_head_dim, pool.kv_cache_dim
        if row != lora + rope or getattr(pool, "dsa_kv_cache_store_fp8", False) or \
                getattr(pool, "dcp_size", 1) != 1:
            return (f"SGLang's MLA host pool with rows of {row} (latent {lora}, RoPE {rope}), "
                    "packed FP8 or decode context parallelism is not described to kvtier"), False
        geometry = {"layer_first": ("mla", 1, lora, rope, 0),
                    "page_first": ("single", layers, row, 0, 0),
                    "page_first_direct": ("mla", 1, lora, rope, layers)}
    else:
        return (f"SGLang's {name} is not described to kvtier (the MHA and MLA host pools "
                "are)"), False
    if layout not in geometry:
        return (f"SGLang's host pool layout {layout!r} is not described to kvtier "
                "(layer_first, page_first and page_first_direct are)"), False
    order, heads, hd, rope, n_layers = geometry[layout]
    try:
        if ps * heads * (hd + rope) * max(n_layers, 1) * pool.dtype.itemsize != region_bytes:
            return (f"a region of {region_bytes} bytes is not {layout}'s page of {ps} tokens, "
                    f"{max(n_layers, 1)} layers, {heads} rows of {hd + rope}"), False
        return kv_layout(pool.dtype, order, ps, heads, hd, n_layers=n_layers, rope_dim=rope), \
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
