"""The Pythonic face of kvt_engine: configuration as keyword arguments, errors
as exceptions, pages in and out as buffers.

Buffers. put() reads and get() writes any object that exposes its memory
without a copy: bytes/bytearray/memoryview/array/numpy arrays (the buffer
protocol, C-contiguous), torch tensors (contiguous, CPU or CUDA, through
data_ptr()) and objects with __cuda_array_interface__. The object must be
exactly page_bytes long; every buffer of a batch is checked before the engine
is called, so a wrong one changes nothing. The engine reads or writes the
memory in place; the binding never copies.

Views of engine memory. Pinned.memoryview()/numpy()/torch()/cuda_array() are
zero-copy windows on pages the engine owns; kvt_close() unmaps that memory,
and a view read afterwards crashes the process or returns garbage. So:
  - every view keeps its Pinned and its Engine alive (a forgotten engine is
    not closed by the garbage collector under a live view);
  - Engine.close() refuses, with ValueError naming them, while any view of
    the engine exists; the engine stays open and usable. Drop the views
    (del; copy first what must be kept: bytes(v), a.copy(), t.clone()) and
    close again;
  - after Engine.close() or Pinned.release(), making a view raises
    ValueError. A view made before release() still reads mapped memory, but
    the page may by then hold another key's data: it is the caller's bug to
    read it, as with any borrowed pointer;
  - raw addresses (Pinned.ptrs, DevicePage.ptr, a.ctypes.data,
    t.data_ptr()) are plain ints, not tracked.
A with-block that ends by an exception does not replace it with the close()
refusal: the engine then closes when the views and the engine are garbage.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import hashlib
import itertools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, Sequence

from . import _lib
from ._convert import (Borrowed, OutOfRange, buffer_addresses, cint, integer, key_array, key_id,
                       uint)
from ._lib import KvtConfig, KvtSchedule, KvtStats, check

if TYPE_CHECKING:
    import numpy
    import torch

__all__ = ["CONFIG_FIELDS", "DevicePage", "Engine", "Exists", "Key", "OutOfRange", "Pinned",
           "Stats", "Ticket", "ViewsAlive", "make_config", "version"]

# A key as the calls take it: a Key or any (id, layer, index) of integers.
KeyLike = Sequence[int]


class Key(NamedTuple):
    """The identity of one page: (id, layer, index); see kvt_key."""
    id: int
    layer: int
    index: int


class Exists(NamedTuple):
    """Result of Engine.exists(): prefix = number of leading keys held,
    where[i] = fastest tier holding key i (0 HBM, 1 DRAM, 2 SSD, 3 the shared tier,
    -1 none)."""
    prefix: int
    where: list[int]


def version() -> tuple[int, str]:
    """(number, string) of the linked library, e.g. (100, '0.1.0')."""
    L = _lib.lib()
    return int(L.kvt_version_number()), L.kvt_version_string().decode()


# ----------------------------------------------------------------- views

class DevicePage:
    """A CUDA page exposed through __cuda_array_interface__ (version 3), so
    torch.as_tensor(page, device='cuda') / cupy wrap it without a copy (they
    keep this object alive as long as their tensor).

    Made by Pinned.cuda_array() it is a view of engine memory (see the module
    doc): Engine.close() refuses while it lives, and once its page is released
    or its engine closed, reading __cuda_array_interface__ raises ValueError.
    Made by hand (owner None) it only describes ptr."""

    def __init__(self, ptr: int, nbytes: int, device_ordinal: int = 0,
                 owner: Pinned | None = None) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self._owner = owner
        self._cai = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                     "version": 3, "strides": None, "stream": None}

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if self._owner is not None:
            self._owner._check_usable()
        return self._cai


_PAGE_TYPES = {}


def _page_memory_type(nbytes):
    """c_ubyte[nbytes] as a Python subclass, so that its instances take a weak
    reference and attributes. An instance made with from_address() is the
    exporter of one host page: every memoryview, numpy array and torch tensor
    of the page refers to it (numpy and torch keep a reference to the object
    they were given; a memoryview's buffer holds its exporter), so it is alive
    exactly as long as some view of the page might still be read."""
    t = _PAGE_TYPES.get(nbytes)
    if t is None:
        t = _PAGE_TYPES.setdefault(nbytes, type("PageMemory", (ctypes.c_ubyte * nbytes,), {}))
    return t


# ---------------------------------------------------------------- keys

def _fingerprint(fp):
    # An int is used as is; text/bytes (a model name, a hash of the config) are
    # hashed to 64 bits so callers need not invent numbers.
    if isinstance(fp, str):
        fp = fp.encode()
    if isinstance(fp, (bytes, bytearray)):
        return int.from_bytes(hashlib.blake2b(fp, digest_size=8, person=b"kvtier-fp").digest(), "little")
    return uint(fp, 64, "fingerprint")


_DEVICES = {"host": _lib.KVT_DEVICE_HOST, "auto": _lib.KVT_DEVICE_AUTO}
_CODECS = {"none": _lib.KVT_CODEC_NONE, "zstd": _lib.KVT_CODEC_ZSTD,
           "zstd_shuffle16": _lib.KVT_CODEC_ZSTD_SHUFFLE16, "fp8": _lib.KVT_CODEC_FP8,
           "int8": _lib.KVT_CODEC_INT8, "int4": _lib.KVT_CODEC_INT4}
_KV_DTYPES = {"none": 0, "bf16": _lib.KVT_DTYPE_BF16, "bfloat16": _lib.KVT_DTYPE_BF16,
              "fp16": _lib.KVT_DTYPE_FP16, "float16": _lib.KVT_DTYPE_FP16}
_KV_ORDERS = {"head_major": _lib.KVT_KV_HEAD_MAJOR, "token_major": _lib.KVT_KV_TOKEN_MAJOR,
              "interleaved": _lib.KVT_KV_INTERLEAVED, "mla": _lib.KVT_KV_MLA,
              "split_layers": _lib.KVT_KV_SPLIT_LAYERS, "single": _lib.KVT_KV_SINGLE}
_IOS = {"auto": _lib.KVT_IO_AUTO, "uring": _lib.KVT_IO_URING, "io_uring": _lib.KVT_IO_URING,
        "psync": _lib.KVT_IO_PSYNC}
_ORDERS = {"layer": _lib.KVT_ORDER_LAYER_MAJOR, "layer_major": _lib.KVT_ORDER_LAYER_MAJOR,
           "seq": _lib.KVT_ORDER_SEQ_MAJOR, "seq_major": _lib.KVT_ORDER_SEQ_MAJOR}


def _choice(value, table, what):
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise ValueError(f"{what} {value!r}: one of {sorted(table)}") from None
    # An int goes to a C int field: 1.7 must not become 1, nor 2**32-1 wrap
    # to -1 (KVT_DEVICE_HOST).
    return cint(value, what)


def _device(value):
    if isinstance(value, str) and value.lower().startswith("cuda"):
        _, sep, n = value.partition(":")
        if value.lower() != "cuda" and not (sep and n.isascii() and n.isdigit()):
            # "cuda:-1" would be KVT_DEVICE_HOST, "cuda:-2" KVT_DEVICE_AUTO.
            raise ValueError(f"device {value!r}: want 'cuda' or 'cuda:N' with N >= 0")
        return cint(int(n or 0), "device")
    return _choice(value, _DEVICES, "device")


def _stream(stream):
    """The cudaStream_t of wait_stream()'s argument (None: the legacy default
    stream): an object with .cuda_stream, or a pointer-sized int."""
    raw = getattr(stream, "cuda_stream", stream)
    if raw is None:
        return None
    return uint(raw, 8 * ctypes.sizeof(ctypes.c_void_p), "stream") or None


CONFIG_FIELDS = ("page_bytes", "hbm_bytes", "dram_bytes", "ssd_bytes", "ssd_dir", "device",
                 "policy", "codec", "persist", "fingerprint", "io_backend", "queue_depth",
                 "host_link_gbps", "prefetch_bytes", "flags", "remote_url", "remote_prefix",
                 "remote_auth_file", "remote_timeout_ms", "remote_publish", "remote_ttl_s",
                 "remote_queue_bytes",
                 # the page layout (kvtier.h), which the lossy codecs need
                 "kv_dtype", "kv_order", "page_tokens", "kv_heads", "head_dim", "v_head_dim",
                 "rope_dim", "n_layers", "full_first_layers", "full_last_layers")
LAYOUT_FIELDS = CONFIG_FIELDS[-10:]

# kvt_config.remote_publish by name.
_PUBLISH = {"put": 0, "evict": 1, "explicit": 2}


def make_config(**kw: Any) -> tuple[KvtConfig, list[bytes]]:
    """A kvt_config from keyword arguments (names as in kvt_config); fields not
    given keep kvt_config_init()'s defaults. Returns (config, keepalive): the
    config's char pointers point into keepalive, which must outlive its use.
    Strings accepted: device 'host'/'auto'/'cuda[:N]', codec 'none'/'zstd'/
    'zstd_shuffle16'/'fp8'/'int8'/'int4', io_backend 'auto'/'uring'/'psync',
    kv_dtype 'bf16'/'fp16' (or a torch dtype), kv_order 'head_major'/
    'token_major'/'interleaved'/'mla'/'split_layers'/'single'; fingerprint an int or str/bytes (hashed
    to 64 bits). Unknown names raise TypeError."""
    unknown = set(kw) - set(CONFIG_FIELDS)
    if unknown:
        raise TypeError(f"unknown kvtier config field(s): {', '.join(sorted(unknown))}")
    cfg = KvtConfig()
    check(_lib.lib().kvt_config_init_sized(ctypes.byref(cfg), ctypes.sizeof(cfg)),
          "kvt_config_init_sized")
    keep = []
    for name, value in kw.items():
        if value is None:
            continue
        if name in ("ssd_dir", "policy", "remote_url", "remote_prefix", "remote_auth_file"):
            b = os.fsencode(value)
            if b"\0" in b:
                # C would read only up to the NUL: another directory or policy.
                raise ValueError(f"{name} {value!r} contains a NUL byte")
            keep.append(b)
            setattr(cfg, name, b)
        elif name == "device":
            cfg.device = _device(value)
        elif name == "codec":
            cfg.codec = _choice(value, _CODECS, "codec")
        elif name == "kv_dtype":
            if not isinstance(value, (str, int)):
                value = str(value).rpartition(".")[2]  # torch.bfloat16 -> "bfloat16"
            cfg.kv_dtype = _choice(value, _KV_DTYPES, "kv_dtype")
        elif name == "kv_order":
            cfg.kv_order = _choice(value, _KV_ORDERS, "kv_order")
        elif name == "io_backend":
            cfg.io_backend = _choice(value, _IOS, "io_backend")
        elif name == "remote_publish":
            cfg.remote_publish = _choice(value, _PUBLISH, "remote_publish")
        elif name == "fingerprint":
            cfg.fingerprint = _fingerprint(value)
        elif name == "persist":
            cfg.persist = 1 if value else 0
        elif name == "host_link_gbps":
            cfg.host_link_gbps = float(value)
        else:
            # size_t / unsigned fields: refuse negatives rather than let ctypes wrap them.
            bits = (32 if name in ("queue_depth", "remote_timeout_ms", "remote_ttl_s")
                    or name in LAYOUT_FIELDS else 8 * ctypes.sizeof(ctypes.c_size_t))
            setattr(cfg, name, uint(value, bits, name))
    return cfg, keep


# ---------------------------------------------------------------- stats

@dataclasses.dataclass(frozen=True)
class Stats:
    """kvt_stats, every field in header order. Per-tier fields are 3-tuples
    indexed by tier (0 HBM, 1 DRAM, 2 SSD)."""
    resident_pages: tuple[int, int, int]
    hits: tuple[int, int, int]
    misses: tuple[int, int, int]
    bytes_up: tuple[int, int, int]
    bytes_down: tuple[int, int, int]
    stall_ns: int
    errors_io: int
    errors_corrupt: int
    capacity_pages: tuple[int, int, int]
    pinned_pages: int
    pages: int
    meta_bytes: int
    errors_device: int
    bytes_put: int
    bytes_get: int
    ssd_bad_slots: int
    io_fallback: int
    prefetch_pages: int
    prefetch_wasted: int
    prefetch_inflight_max: int
    evicted_pages: int
    remote_hits: int
    remote_misses: int
    remote_lost: int
    remote_bytes_in: int
    remote_bytes_out: int
    remote_published: int
    remote_unpublished: int
    remote_corrupt: int
    remote_timeouts: int
    remote_redirects: int
    remote_errors: int
    remote_nodes: int
    remote_nodes_down: int

    @classmethod
    def _from_c(cls, s: KvtStats) -> Stats:
        vals = {}
        for name, ctype in KvtStats._fields_:
            v = getattr(s, name)
            vals[name] = tuple(int(x) for x in v) if isinstance(v, ctypes.Array) else int(v)
        return cls(**vals)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (header order)."""
        return dataclasses.asdict(self)


# ---------------------------------------------------------------- pinned pages

class Pinned:
    """Pages pinned in HBM by acquire()/create() (or a waited acquire_async()).

    Holds the keys and the device addresses (ptrs: plain ints). The views
    (memoryview(), numpy(), torch(), cuda_array()) follow the rules of the
    module doc: none can be made after release() or the engine's close()
    (ValueError); a live one keeps the engine open (close() refuses); one
    made before release() and read after it reads memory the engine reuses.
    Used as a context manager it releases on exit, with dirty=self.dirty
    (True for create())."""

    def __init__(self, engine: Engine, keys: Iterable[Any], ptrs: Iterable[int],
                 dirty: bool = False) -> None:
        self._engine = engine
        self.keys = [Key(k.id, k.layer, k.index) for k in keys]
        self.ptrs = list(ptrs)
        self.dirty = dirty
        self.released = False
        self.page_bytes = engine.page_bytes
        self.on_device = engine.device_name == "cuda"

    def __len__(self) -> int:
        return len(self.ptrs)

    def _check_usable(self):
        """Raises ValueError unless the pages are pinned in an open engine."""
        if self._engine._closing:
            raise ValueError("the kvtier engine is closed: its page memory is unmapped, "
                             "no view of it can be made")
        if self.released:
            raise ValueError("pages were released; their addresses are no longer valid")

    def _host_page(self, i, what):
        if self.on_device:
            raise ValueError(f"a CUDA page has no host {what}; use cuda_array() or torch()")
        return self._engine._export(self, i, what)

    def memoryview(self, i: int = 0) -> memoryview:
        """A writable memoryview of page i (host back-end only), no copy. A
        view: see the class doc."""
        return memoryview(self._host_page(i, "memoryview()")).cast("B")

    def numpy(self, i: int = 0, dtype: Any = "uint8") -> numpy.ndarray:
        """A writable numpy view of page i (host back-end), no copy. A view:
        see the class doc."""
        import numpy as np
        return np.frombuffer(self._host_page(i, "numpy()"), dtype=np.uint8).view(dtype)

    def cuda_array(self, i: int = 0) -> DevicePage:
        """A DevicePage (``__cuda_array_interface__``) for page i on the CUDA
        back-end. A view: see the class doc."""
        if not self.on_device:
            raise ValueError("the host back-end has no CUDA pages; use numpy()/memoryview()")
        return self._engine._export(self, i, "cuda_array()")

    def torch(self, i: int = 0, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A torch tensor viewing page i (uint8, or dtype), no copy: CPU on the
        host back-end, CUDA on the cuda back-end. A view: see the class doc."""
        import torch
        if self.on_device:
            t = torch.as_tensor(self._engine._export(self, i, "torch()"), device="cuda")
        else:
            # Given the exporter itself (not a memoryview of it): torch keeps a
            # reference to what it is given but no buffer export, so only the
            # exporter's lifetime tells that the tensor still exists.
            t = torch.frombuffer(self._host_page(i, "torch()"), dtype=torch.uint8)
        return t if dtype is None else t.view(dtype)

    def release(self, dirty: bool | None = None) -> None:
        """kvt_release() of these pages (dirty defaults to self.dirty). Once
        only; later calls are no-ops."""
        if self.released:
            return
        self._engine.release(self.keys, self.dirty if dirty is None else dirty)
        self.released = True

    def __enter__(self) -> Pinned:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # After close() the engine freed the pins itself: nothing to release.
        if not self.released and not self._engine.closed:
            self.release()


class ViewsAlive(ValueError):
    """Engine.close() refused: views of the engine's memory are alive."""


class Ticket:
    """An asynchronous acquire: wait() (or Engine.wait) once, then use .pages.
    Owned by the engine until waited; close() waits for forgotten tickets."""

    def __init__(self, engine: Engine, value: int, pinned: Pinned) -> None:
        self._engine = engine
        self.value = value
        self._pinned = pinned
        self.done = False

    def wait(self) -> Pinned:
        """kvt_wait(); returns the Pinned pages. On error the pins are gone."""
        return self._engine.wait(self)

    def wait_stream(self, stream: Any = None) -> Pinned:
        """kvt_wait_stream(); returns the Pinned pages (usable by work queued
        on the stream after this call)."""
        return self._engine.wait_stream(self, stream)


# ---------------------------------------------------------------- engine

class Engine:
    """An open kvt_engine. Configuration is keyword arguments named as the
    fields of kvt_config (see CONFIG_FIELDS); omitted ones keep the library's
    defaults. The engine owns the library handle until close() (also via
    ``with``). Thread-safe like kvt_engine, except close()."""

    def __init__(self, **config: Any) -> None:
        # First, so that __del__ of an engine whose open failed finds a closed one.
        self._h = None
        self._closing = True
        self._lock = threading.Lock()
        self._tickets = {}
        # serial -> weak reference to each live view exporter (_export); an
        # entry leaves when its exporter dies.
        self._views = {}
        self._view_serial = itertools.count()
        cfg, keep = make_config(**config)
        L = _lib.lib()
        handle = ctypes.c_void_p()
        check(L.kvt_open_sized(ctypes.byref(cfg), ctypes.sizeof(cfg), ctypes.byref(handle)),
              "kvt_open")
        del keep  # kvt_open copied the strings
        self._L = L
        self._h = handle
        self._closing = False
        self.page_bytes = int(L.kvt_page_bytes(handle))
        self.device_name = L.kvt_device_name(handle).decode()

    # ---- lifetime

    @property
    def closed(self) -> bool:
        return self._h is None

    def _handle(self):
        if self._h is None:
            raise ValueError("the kvtier engine is closed")
        return self._h

    def close(self) -> None:
        """kvt_close(): waits for forgotten tickets, flushes, frees. Idempotent.

        Refuses with ValueError, changing nothing, while a view made by a
        Pinned of this engine (memoryview(), numpy(), torch(), cuda_array())
        is alive anywhere, and names them: kvt_close unmaps their memory. Raw
        addresses (Pinned.ptrs, DevicePage.ptr) are not tracked and become
        invalid."""
        if self._h is None:
            return
        if self._views:
            # Views held only by garbage cycles (a stored traceback, ...) are
            # no reason to refuse: collect them first. Only on this path,
            # which would otherwise raise.
            gc.collect()
        with self._lock:
            live = self._live_views()
            if live:
                shown = "; ".join(live[:4]) + ("; ..." if len(live) > 4 else "")
                raise ViewsAlive(
                    f"Engine.close(): {len(live)} view(s) of this engine's memory are still "
                    f"alive ({shown}); closing would unmap the memory under them. Delete them "
                    "(copy first what must be kept: bytes(v), a.copy(), t.clone()) and close "
                    "again; the engine is still open")
            # From here on no view can be made (_export checks under this lock).
            self._closing = True
        for t in list(self._tickets.values()):
            try:
                self.wait(t)
            except _lib.KvtError:
                pass  # the ticket's pins are dropped either way; close must go on
        h, self._h = self._h, None
        self._L.kvt_close(h)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        # An exception is leaving the block: never replace it with close()'s
        # refusal. If views made in the block are still alive, the engine
        # stays open; they keep it referenced, and __del__ closes it once
        # they and the engine are garbage.
        try:
            self.close()
        except ViewsAlive:
            pass

    def _export(self, pinned, i, what):
        """The object that exports page i of pinned to a view: a PageMemory
        (host) or DevicePage (CUDA), registered in _views so that close()
        refuses while it lives, and holding pinned (and so this engine).
        The check and the registration are under the lock close() checks
        under: no view is made after close() has decided to unmap."""
        i = integer(i, "page number")
        with self._lock:
            pinned._check_usable()
            ptr = pinned.ptrs[i]
            if pinned.on_device:
                obj = DevicePage(ptr, self.page_bytes, owner=pinned)
            else:
                obj = _page_memory_type(self.page_bytes).from_address(ptr)
                obj._owner = pinned
            obj._what = f"{what} of page {i} {tuple(pinned.keys[i])}"
            n = next(self._view_serial)
            views = self._views
            views[n] = weakref.ref(obj, lambda _ref, n=n: views.pop(n, None))
        return obj

    def _live_views(self):
        """What each view exporter still alive is (for close()'s message)."""
        return [o._what for o in (r() for r in list(self._views.values())) if o is not None]

    def __del__(self):
        # Best effort for engines never closed; close() is the contract. A
        # live view holds this engine, so this runs only once none is left
        # (or inside a garbage cycle, where nothing can read them any more).
        try:
            self.close()
        except Exception:
            pass

    # ---- engine-managed pages

    def create(self, key: KeyLike) -> Pinned:
        """kvt_create(): a new pinned page in HBM, contents undefined. Returns a
        Pinned (dirty=True) of one page; write it, then release()."""
        k = key_array([key])
        ptr = ctypes.c_void_p()
        check(self._L.kvt_create(self._handle(), k[0], ctypes.byref(ptr)), "kvt_create")
        return Pinned(self, k, [ptr.value], dirty=True)

    def acquire(self, keys: Iterable[KeyLike]) -> Pinned:
        """kvt_acquire(): pins the pages in HBM (blocking until resident) and
        returns them as Pinned. On error nothing is pinned."""
        k = key_array(keys)
        ptrs = (ctypes.c_void_p * len(k))()
        check(self._L.kvt_acquire(self._handle(), k, len(k), ptrs), "kvt_acquire")
        return Pinned(self, k, ptrs)

    def acquire_async(self, keys: Iterable[KeyLike]) -> Ticket:
        """kvt_acquire_async(): returns a Ticket at once; the pins are held from
        now on and the contents are valid after wait()."""
        k = key_array(keys)
        ptrs = (ctypes.c_void_p * len(k))()
        t = ctypes.c_uint64()
        check(self._L.kvt_acquire_async(self._handle(), k, len(k), ptrs, ctypes.byref(t)),
              "kvt_acquire_async")
        ticket = Ticket(self, t.value, Pinned(self, k, ptrs))
        with self._lock:
            self._tickets[t.value] = ticket
        return ticket

    def _consume(self, ticket):
        self._handle()  # a closed engine says so, not "already waited"
        with self._lock:
            if ticket.done or self._tickets.pop(ticket.value, None) is None:
                raise ValueError("ticket already waited for (or from another engine)")
            ticket.done = True

    def wait(self, ticket: Ticket) -> Pinned:
        """kvt_wait(); returns the ticket's Pinned pages. On error the pins
        have been dropped and the KvtError is raised."""
        self._consume(ticket)
        rc = self._L.kvt_wait(self._handle(), ticket.value)
        if rc < 0:
            ticket._pinned.released = True
            check(rc, "kvt_wait")
        return ticket._pinned

    def wait_stream(self, ticket: Ticket, stream: Any = None) -> Pinned:
        """kvt_wait_stream(); stream is a torch.cuda.Stream, a raw cudaStream_t
        int, or None (the legacy default stream). Returns the Pinned pages.
        A bad stream raises before the ticket is consumed (it can be waited
        again)."""
        raw = _stream(stream)
        self._consume(ticket)
        rc = self._L.kvt_wait_stream(self._handle(), ticket.value, ctypes.c_void_p(raw))
        if rc < 0:
            ticket._pinned.released = True
            check(rc, "kvt_wait_stream")
        return ticket._pinned

    def release(self, keys: Iterable[KeyLike], dirty: bool = False) -> None:
        """kvt_release() of pinned keys; dirty=True says the caller wrote them."""
        k = key_array(keys)
        check(self._L.kvt_release(self._handle(), k, len(k), 1 if dirty else 0), "kvt_release")

    def drop(self, keys: Iterable[KeyLike]) -> None:
        """kvt_drop(): removes the pages from every tier (absent keys ignored)."""
        k = key_array(keys)
        check(self._L.kvt_drop(self._handle(), k, len(k)), "kvt_drop")

    def drop_id(self, id: int) -> None:
        """kvt_drop_id(): removes every page of sequence/hash id."""
        check(self._L.kvt_drop_id(self._handle(), key_id(id, "id")), "kvt_drop_id")

    # ---- engine-owned buffers

    def put(self, keys: Iterable[KeyLike], srcs: Iterable[Any]) -> None:
        """kvt_put(): copies one page_bytes buffer per key into kvtier. The
        buffers are borrowed for the call; all must live on the same side
        (host, or CUDA when the engine runs on CUDA). Wrong sizes raise
        ValueError before the engine is touched."""
        k = key_array(keys)
        srcs = list(srcs)
        if len(srcs) != len(k):
            raise ValueError(f"{len(k)} keys but {len(srcs)} buffers")
        with Borrowed() as b:
            ptrs, on_device = self._addresses(b, srcs, writable=False, what="put")
            check(self._L.kvt_put(self._handle(), k, len(k), ptrs, on_device), "kvt_put")

    def get(self, keys: Iterable[KeyLike], dsts: Iterable[Any] | None = None) -> list[Any | None]:
        """kvt_get(): copies each page into dsts[i] (borrowed, page_bytes,
        writable). Returns a list with dsts[i] where found, None where the key
        is in no tier. Without dsts, new bytearrays are allocated (owned by the
        caller). A miss is not an error; KVT_ECORRUPT reads as a miss."""
        k = key_array(keys)
        if dsts is None:
            dsts = [bytearray(self.page_bytes) for _ in range(len(k))]
        dsts = list(dsts)
        if len(dsts) != len(k):
            raise ValueError(f"{len(k)} keys but {len(dsts)} buffers")
        found = (ctypes.c_int * len(k))()
        with Borrowed() as b:
            ptrs, on_device = self._addresses(b, dsts, writable=True, what="get")
            check(self._L.kvt_get(self._handle(), k, len(k), ptrs, on_device, found), "kvt_get")
        return [d if f else None for d, f in zip(dsts, found)]

    def put_addresses(self, keys: Iterable[KeyLike], addrs: Iterable[int],
                      on_device: bool = False) -> None:
        """kvt_put() from raw addresses (ints), page_bytes of memory each:
        host memory, or CUDA memory with on_device (cuda back-end). They are
        not checked: each must be valid and unchanged for the call (a wrong
        one crashes the process). For code that hands kvtier memory it
        manages itself, such as an engine's KV pool; put() takes buffers."""
        k = key_array(keys)
        ptrs = self._pointers(addrs, len(k))
        check(self._L.kvt_put(self._handle(), k, len(k), ptrs, 1 if on_device else 0),
              "kvt_put")

    def get_addresses(self, keys: Iterable[KeyLike], addrs: Iterable[int],
                      on_device: bool = False) -> list[bool]:
        """kvt_get() into raw addresses (ints), page_bytes of writable memory
        each, unchecked as for put_addresses(). Returns [bool] per key: True
        where the page was copied, False where the key is in no tier (or its
        page was damaged: KVT_ECORRUPT reads as a miss)."""
        k = key_array(keys)
        ptrs = self._pointers(addrs, len(k))
        found = (ctypes.c_int * len(k))()
        check(self._L.kvt_get(self._handle(), k, len(k), ptrs, 1 if on_device else 0, found),
              "kvt_get")
        return [bool(f) for f in found]

    @staticmethod
    def _pointers(addrs: Iterable[int], n: int) -> ctypes.Array:
        addrs = [uint(a, 8 * ctypes.sizeof(ctypes.c_void_p), "address") for a in addrs]
        if len(addrs) != n:
            raise ValueError(f"{n} keys but {len(addrs)} addresses")
        return (ctypes.c_void_p * n)(*addrs)

    def exists(self, keys: Iterable[KeyLike]) -> Exists:
        """kvt_exists(): Exists(prefix, where) — the hit-prefix length and the
        fastest tier of each key (-1 when none)."""
        k = key_array(keys)
        where = (ctypes.c_int * len(k))()
        n = check(self._L.kvt_exists(self._handle(), k, len(k), where), "kvt_exists")
        return Exists(n, [int(w) for w in where])

    def _addresses(self, borrowed, bufs, writable, what):
        return buffer_addresses(borrowed, bufs, self.page_bytes, self.device_name, writable, what)

    # ---- decode position

    def set_schedule(self, ids: Iterable[int], n_layers: int, order: str | int = "layer",
                     window_pages: int = 0, sink_pages: int = 0) -> None:
        """kvt_set_schedule(): the sequences of the batch in compute order, the
        layer count and the loop order ('layer' = for layer {for seq}, 'seq' =
        for seq {for layer}, or a KVT_ORDER_* int). Everything is copied."""
        ids = [key_id(i, f"ids[{n}]") for n, i in enumerate(ids)]
        arr = (ctypes.c_uint64 * len(ids))(*ids)
        s = KvtSchedule(ids=ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint64)) if ids else None,
                        n_ids=len(ids), n_layers=uint(n_layers, 32, "n_layers"),
                        order=_choice(order, _ORDERS, "order"),
                        window_pages=uint(window_pages, 32, "window_pages"),
                        sink_pages=uint(sink_pages, 32, "sink_pages"))
        check(self._L.kvt_set_schedule(self._handle(), ctypes.byref(s)), "kvt_set_schedule")

    def advance(self, id: int, layer: int) -> None:
        """kvt_advance(): "now computing (id, layer)"."""
        check(self._L.kvt_advance(self._handle(), key_id(id, "id"), uint(layer, 32, "layer")),
              "kvt_advance")

    # ---- statistics

    def stats(self) -> Stats:
        """kvt_get_stats() as a Stats dataclass (a snapshot; owned by the caller)."""
        s = KvtStats()
        check(self._L.kvt_get_stats_sized(self._handle(), ctypes.byref(s), ctypes.sizeof(s)),
              "kvt_get_stats")
        return Stats._from_c(s)

    def flush(self) -> None:
        """kvt_flush(): every dirty page gets a copy below HBM (durable with persist);
        with a shared tier, what is queued for it is sent."""
        check(self._L.kvt_flush(self._handle()), "kvt_flush")

    def publish(self, keys: Iterable[KeyLike]) -> int:
        """kvt_publish(): queues the pages of keys (read from the local tiers)
        for the shared tier; returns how many were queued."""
        k = key_array(keys)
        return check(self._L.kvt_publish(self._handle(), k, len(k)), "kvt_publish")
