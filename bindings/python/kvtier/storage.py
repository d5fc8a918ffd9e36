"""KVTierStorage: kvtier as the storage backend of a prefix-caching engine.

The method shapes follow SGLang HiCache's HiCacheStorage (get / batch_get /
set / batch_set / exists / batch_exists returning the hit-prefix length /
clear / get_stats) and answer LMCache's contains() as well. Keys are content
hashes (str or bytes, e.g. the sha256 of a token prefix that HiCache and
LMCache compute); a value is one page of page_bytes (a torch tensor, numpy
array or any bytes-like object), typically the KV of one token block for all
layers (page-first layout, so the key's layer is KVT_ALL_LAYERS).

Because the key names the content, a document's KV is stored once: set() of
a key that exists is skipped. With persist=True and an ssd_dir the pages
survive the process; the fingerprint (model, dtype, layout identity) makes a
page stored by another model read as a miss.
"""

import hashlib

from ._convert import Borrowed, buffer_addresses
from ._lib import KVT_ALL_LAYERS, KvtBusy, KvtFull
from .engine import Engine, Key, make_config


def key_hash(key):
    """The kvt_key of a content key (str or bytes): (id, KVT_ALL_LAYERS, index).

    Collision stance: blake2b gives 96 bits — 64 in id, 32 more in index — so
    among n stored pages some two collide with probability about n**2 / 2**97
    (about 1e-11 at a billion pages). We treat that as impossible and do not
    store the full key to check it; a collision would serve one prefix's KV
    for another's. The hash is stable across processes and machines (no
    PYTHONHASHSEED), which persistence needs."""
    if isinstance(key, str):
        key = key.encode("utf-8")
    elif not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"storage keys are str or bytes, not {type(key).__name__}")
    d = hashlib.blake2b(bytes(key), digest_size=12, person=b"kvtier-key").digest()
    return Key(int.from_bytes(d[:8], "little"), KVT_ALL_LAYERS, int.from_bytes(d[8:], "little"))


class KVTierStorage:
    """A HiCache/LMCache-style key-value store of fixed-size KV pages.

    engine: an Engine to use (borrowed; close() leaves it open), or None to
      open one from **engine_config (page_bytes, ssd_dir, persist, fingerprint,
      ...; owned, closed by close()).
    dtype, shape: what get() without a target returns (a torch tensor viewing
      a new page-sized buffer); default a flat uint8 tensor.
    """

    def __init__(self, engine=None, *, dtype=None, shape=None, **engine_config):
        if engine is not None and engine_config:
            raise TypeError("pass either an engine or engine configuration, not both")
        if engine is None:
            make_config(**engine_config)  # reject unknown fields before opening
            engine = Engine(**engine_config)
            self._owns = True
        else:
            self._owns = False
        self.engine = engine
        self._config = engine_config
        self.page_bytes = engine.page_bytes
        self._dtype = dtype
        self._shape = shape
        self._known = set()   # keys set through this object (for clear() on a borrowed engine)
        s = engine.stats()
        # Puts go in parts of half a DRAM's worth, the batch kvt_put itself
        # commits all or nothing: when the store fills, the counts and _known
        # then say exactly which keys were stored.
        self._put_chunk = max(1, s.capacity_pages[1] // 2)
        self._counts = {"get": 0, "get_hit": 0, "set": 0, "set_stored": 0, "set_skipped": 0,
                        "set_failed": 0}

    # ------------------------------------------------------------- reads

    def _new_target(self):
        import torch
        t = torch.empty(self.page_bytes, dtype=torch.uint8)
        if self._dtype is not None:
            t = t.view(self._dtype)
        if self._shape is not None:
            t = t.view(self._shape)
        return t

    def get(self, key, target_location=None, target_sizes=None):
        """The page of key copied into target_location (borrowed, page_bytes,
        writable; returned) or into a new tensor (caller owns it); None when
        the key is in no tier. target_sizes is accepted for HiCache's
        signature and must be None or page_bytes."""
        return self.batch_get([key], None if target_location is None else [target_location],
                              None if target_sizes is None else [target_sizes])[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """get() for many keys in one kvt_get: a list of targets or None."""
        keys = list(keys)
        if target_sizes is not None:
            bad = [s for s in target_sizes if s is not None and int(s) != self.page_bytes]
            if bad:
                raise ValueError(f"target size {bad[0]} differs from page_bytes {self.page_bytes}")
        if target_locations is None:
            target_locations = [self._new_target() for _ in keys]
        out = self.engine.get([key_hash(k) for k in keys], target_locations)
        self._counts["get"] += len(keys)
        self._counts["get_hit"] += sum(o is not None for o in out)
        return out

    def exists(self, key):
        """True when key is held in some tier."""
        return self.engine.exists([key_hash(key)]).prefix == 1

    contains = exists  # LMCache's name

    def batch_exists(self, keys, extra_info=None):
        """The number of leading keys that exist (the hit prefix)."""
        keys = list(keys)
        if not keys:
            return 0
        return self.engine.exists([key_hash(k) for k in keys]).prefix

    # ------------------------------------------------------------- writes

    def set(self, key, value=None, target_location=None, target_sizes=None):
        """Stores one page (value, or target_location when value is None:
        HiCache's zero-copy form). Returns True when the key is held after
        the call, False when kvtier is full or the page is busy."""
        return self.batch_set([key], None if value is None else [value],
                              None if target_location is None else [target_location],
                              target_sizes)

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """Stores pages whose keys are not held yet (content keys: an existing
        key already holds these bytes). Values are borrowed for the call and
        each must be page_bytes — all are checked before anything is stored
        (ValueError). Returns True when every key is held after the call;
        False if kvtier was full or busy (the keys before the failing batch
        are stored)."""
        keys = list(keys)
        values = values if values is not None else target_locations
        if values is None:
            raise ValueError("batch_set needs values (or target_locations)")
        values = list(values)
        if len(values) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        kk = [key_hash(k) for k in keys]
        self._counts["set"] += len(keys)
        where = self.engine.exists(kk).where
        todo = [i for i, w in enumerate(where) if w < 0]
        self._counts["set_skipped"] += len(keys) - len(todo)
        # Sizes of every value first: a wrong one must not leave a partial batch.
        self._check_sizes(values)
        for start in range(0, len(todo), self._put_chunk):
            part = todo[start:start + self._put_chunk]
            try:
                self.engine.put([kk[i] for i in part], [values[i] for i in part])
            except (KvtFull, KvtBusy):
                # HiCache's contract is a bool: a full store is not a crash.
                self._counts["set_failed"] += len(todo) - start
                return False
            self._counts["set_stored"] += len(part)
            self._known.update(kk[i] for i in part)
        return True

    def _check_sizes(self, values):
        # What engine.put() checks per part, for the whole batch at once:
        # sizes, and host/CUDA sides (mixed, or CUDA on a host engine).
        with Borrowed() as b:
            buffer_addresses(b, values, self.page_bytes, self.engine.device_name,
                             writable=False, what="set")

    # ------------------------------------------------------------- upkeep

    def clear(self):
        """Removes every page. An owned engine is reopened once with
        persist=0, which wipes its ssd_dir (pages of earlier processes too);
        on a borrowed engine only the keys set through this object are
        dropped."""
        if self._owns:
            self.engine.close()
            wipe = dict(self._config, persist=False)
            Engine(**wipe).close()
            self.engine = Engine(**self._config)
        else:
            self.engine.drop(list(self._known))
        self._known.clear()

    def flush(self):
        """kvt_flush(): with persist, every page is durable on return."""
        self.engine.flush()

    def get_stats(self):
        """A dict: the engine's kvt_stats fields plus this object's counters
        (get, get_hit, set, set_stored, set_skipped, set_failed)."""
        d = self.engine.stats().as_dict()
        d.update(self._counts)
        return d

    def close(self):
        """Closes an owned engine (flushing persisted pages); idempotent."""
        if self._owns:
            self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
