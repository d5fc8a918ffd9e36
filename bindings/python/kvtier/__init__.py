"""kvtier: a ctypes binding of libkvtier (include/kvtier.h) and two adapters.

- Engine: the whole C API (engine.py); errors are KvtError subclasses.
- KVTierCache: a transformers Cache whose K/V live in kvtier pages (cache.py).
- KVTierStorage: a HiCache/LMCache-shaped storage backend keyed by content
  hashes (storage.py); kvtier.sglang registers it with SGLang.
- The engine plug-ins: kvtier.sglang, kvtier.lmcache, kvtier.vllm (each
  imports its engine).

The library is found through KVTIER_LIB, beside this package, in the
repository's build/ directory, or on the system library path. Importing this
package does not load it; the first call does. The adapters import torch and
transformers only when they are used.
"""

from __future__ import annotations

from typing import Any

from ._lib import (KVT_CODEC_FP8, KVT_CODEC_INT4, KVT_CODEC_INT8, KVT_DTYPE_BF16, KVT_DTYPE_FP16,
                   KVT_KV_HEAD_MAJOR, KVT_KV_INTERLEAVED, KVT_KV_MLA, KVT_KV_SINGLE,
                   KVT_KV_SPLIT_LAYERS, KVT_KV_TOKEN_MAJOR)
from ._lib import (KVT_ALL_LAYERS, KVT_FLAG_EVICT, KVT_CODEC_NONE, KVT_CODEC_ZSTD, KVT_CODEC_ZSTD_SHUFFLE16,
                   KVT_DEVICE_AUTO, KVT_DEVICE_HOST, KVT_IO_AUTO, KVT_IO_PSYNC, KVT_IO_URING,
                   KVT_ORDER_LAYER_MAJOR, KVT_ORDER_SEQ_MAJOR, KVT_TIER_DRAM, KVT_TIER_HBM,
                   KVT_TIER_NONE, KVT_TIER_REMOTE, KVT_TIER_SSD, KVT_PUBLISH_EVICT,
                   KVT_PUBLISH_EXPLICIT, KVT_PUBLISH_PUT, KvtBusy, KvtConfigError, KvtCorrupt,
                   KvtDeviceError, KvtError, KvtExists, KvtFailed, KvtFingerprint, KvtFull,
                   KvtInvalid, KvtNotFound, KvtNotSupported, find_library, last_error,
                   strerror)
from .engine import (CONFIG_FIELDS, DevicePage, Engine, Exists, Key, OutOfRange, Pinned, Stats,
                     Ticket, ViewsAlive, make_config, version)


def __getattr__(name: str) -> Any:
    # The adapters pull in torch (and transformers); load them on first use so
    # that the plain binding works without either installed.
    if name == "KVTierCache":
        from .cache import KVTierCache
        return KVTierCache
    if name in ("KVTierStorage", "key_hash"):
        from . import storage
        return getattr(storage, name)
    raise AttributeError(f"module 'kvtier' has no attribute {name!r}")


__all__ = [
    "Engine", "Key", "Exists", "Stats", "Pinned", "Ticket", "DevicePage", "CONFIG_FIELDS",
    "OutOfRange", "ViewsAlive",
    "make_config", "version", "find_library", "strerror", "last_error",
    "KvtError", "KvtCorrupt", "KvtFingerprint", "KvtNotFound", "KvtFull", "KvtDeviceError",
    "KvtConfigError", "KvtNotSupported", "KvtFailed", "KvtBusy", "KvtExists", "KvtInvalid",
    "KVTierCache", "KVTierStorage", "key_hash",
    "KVT_ALL_LAYERS", "KVT_TIER_NONE", "KVT_TIER_HBM", "KVT_TIER_DRAM", "KVT_TIER_SSD", "KVT_TIER_REMOTE",
    "KVT_PUBLISH_PUT", "KVT_PUBLISH_EVICT", "KVT_PUBLISH_EXPLICIT",
    "KVT_DEVICE_HOST", "KVT_DEVICE_AUTO", "KVT_CODEC_NONE", "KVT_CODEC_ZSTD",
    "KVT_CODEC_ZSTD_SHUFFLE16", "KVT_IO_AUTO", "KVT_IO_URING", "KVT_IO_PSYNC",
    "KVT_ORDER_LAYER_MAJOR", "KVT_ORDER_SEQ_MAJOR", "KVT_FLAG_EVICT",
    "KVT_CODEC_FP8", "KVT_CODEC_INT8", "KVT_CODEC_INT4", "KVT_DTYPE_BF16", "KVT_DTYPE_FP16",
    "KVT_KV_HEAD_MAJOR", "KVT_KV_TOKEN_MAJOR", "KVT_KV_INTERLEAVED", "KVT_KV_MLA",
    "KVT_KV_SPLIT_LAYERS", "KVT_KV_SINGLE",
]
