"""ctypes declarations of include/kvtier.h, the library lookup and error mapping.

Everything here mirrors the header one to one; the Pythonic layer is engine.py.
Struct layouts are declared field by field in header order: ctypes applies the
same C alignment rules as the compiler, and tests/python/test_binding.py checks
every offset against offsetof() from a C compiler when one is installed.

kvt_config and kvt_stats grow at the end (kvtier.h, "growable structs"), so
they are passed to the *_sized calls with ctypes.sizeof() of the declarations
below, as a C caller's inline wrappers pass sizeof: a newer library reads and
writes only what these declarations hold; an older one zeroes the counters it
does not keep and refuses a config that sets a field it does not know.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import os
from pathlib import Path

# ------------------------------------------------------------------ constants

KVT_EBASE = -30500
KVT_ECORRUPT = -30500
KVT_EFINGERPRINT = -30501
KVT_ENOTFOUND = -30502
KVT_EFULL = -30503
KVT_FLAG_EVICT = 1  # kvt_config.flags: a cache, drops the policy's victims when full
KVT_EDEVICE = -30504
KVT_ECONFIG = -30505
KVT_ENOTSUP = -30506
KVT_EFAILED = -30507
KVT_ELAST = -30507

KVT_ALL_LAYERS = 0xFFFFFFFF

KVT_TIER_NONE = -1
KVT_TIER_HBM = 0
KVT_TIER_DRAM = 1
KVT_TIER_SSD = 2
KVT_TIER_REMOTE = 3  # kvt_exists only: the shared tier (remote_url)
KVT_PUBLISH_PUT = 0
KVT_PUBLISH_EVICT = 1
KVT_PUBLISH_EXPLICIT = 2
KVT_TIERS = 3

KVT_DEVICE_HOST = -1
KVT_DEVICE_AUTO = -2

KVT_CODEC_NONE = 0
KVT_CODEC_ZSTD = 1
KVT_CODEC_ZSTD_SHUFFLE16 = 2
KVT_CODEC_FP8 = 3   # lossy: need the page layout (kv_dtype, page_tokens, kv_heads, head_dim)
KVT_CODEC_INT8 = 4
KVT_CODEC_INT4 = 5

KVT_DTYPE_BF16 = 1
KVT_DTYPE_FP16 = 2

KVT_KV_HEAD_MAJOR = 0   # K[kv_heads][tokens][head_dim], then V (KVTierCache's pages)
KVT_KV_TOKEN_MAJOR = 1  # K[tokens][kv_heads][head_dim], then V
KVT_KV_INTERLEAVED = 2  # per token: K[kv_heads][head_dim], then V
KVT_KV_MLA = 3          # per token: latent[head_dim], then RoPE key[rope_dim]
KVT_KV_SPLIT_LAYERS = 4  # a page of every layer: all layers' K, then all layers' V (LMCache)
KVT_KV_SINGLE = 5       # K or V alone, [tokens][kv_heads][head_dim], per channel (SGLang)

KVT_IO_AUTO = 0
KVT_IO_URING = 1
KVT_IO_PSYNC = 2

KVT_ORDER_LAYER_MAJOR = 0
KVT_ORDER_SEQ_MAJOR = 1

U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF

# ---------------------------------------------------------------- structures


class KvtKey(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64),
                ("layer", ctypes.c_uint32),
                ("index", ctypes.c_uint32)]


class KvtTransferEvent(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int),
                ("pages", ctypes.c_uint32),
                ("bytes", ctypes.c_uint64),
                ("start_ns", ctypes.c_uint64),
                ("end_ns", ctypes.c_uint64)]


# void (*)(void *arg, const kvt_transfer_event *ev). Not exposed by Engine:
# kvtier calls it with its lock held, from its own threads.
KvtTransferFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(KvtTransferEvent))


class KvtConfig(ctypes.Structure):
    _fields_ = [("page_bytes", ctypes.c_size_t),
                ("hbm_bytes", ctypes.c_size_t),
                ("dram_bytes", ctypes.c_size_t),
                ("ssd_bytes", ctypes.c_size_t),
                ("ssd_dir", ctypes.c_char_p),
                ("device", ctypes.c_int),
                ("policy", ctypes.c_char_p),
                ("codec", ctypes.c_int),
                ("persist", ctypes.c_int),
                ("fingerprint", ctypes.c_uint64),
                ("io_backend", ctypes.c_int),
                ("queue_depth", ctypes.c_uint),
                ("host_link_gbps", ctypes.c_double),
                ("prefetch_bytes", ctypes.c_size_t),
                ("on_transfer", KvtTransferFn),
                ("on_transfer_arg", ctypes.c_void_p),
                ("flags", ctypes.c_uint64),
                ("remote_url", ctypes.c_char_p),
                ("remote_prefix", ctypes.c_char_p),
                ("remote_auth_file", ctypes.c_char_p),
                ("remote_timeout_ms", ctypes.c_uint),
                ("remote_publish", ctypes.c_int),
                ("remote_ttl_s", ctypes.c_uint),
                ("remote_queue_bytes", ctypes.c_size_t),
                # VER4: the page layout the lossy codecs need
                ("kv_dtype", ctypes.c_int),
                ("kv_order", ctypes.c_int),
                ("page_tokens", ctypes.c_uint32),
                ("kv_heads", ctypes.c_uint32),
                ("head_dim", ctypes.c_uint32),
                ("v_head_dim", ctypes.c_uint32),
                ("rope_dim", ctypes.c_uint32),
                ("n_layers", ctypes.c_uint32),
                ("full_first_layers", ctypes.c_uint32),
                ("full_last_layers", ctypes.c_uint32)]


class KvtSchedule(ctypes.Structure):
    _fields_ = [("ids", ctypes.POINTER(ctypes.c_uint64)),
                ("n_ids", ctypes.c_size_t),
                ("n_layers", ctypes.c_uint32),
                ("order", ctypes.c_int),
                ("window_pages", ctypes.c_uint32),
                ("sink_pages", ctypes.c_uint32)]


_U64xTiers = ctypes.c_uint64 * KVT_TIERS


class KvtStats(ctypes.Structure):
    # Header order.
    _fields_ = [("resident_pages", _U64xTiers),
                ("hits", _U64xTiers),
                ("misses", _U64xTiers),
                ("bytes_up", _U64xTiers),
                ("bytes_down", _U64xTiers),
                ("stall_ns", ctypes.c_uint64),
                ("errors_io", ctypes.c_uint64),
                ("errors_corrupt", ctypes.c_uint64),
                ("capacity_pages", _U64xTiers),
                ("pinned_pages", ctypes.c_uint64),
                ("pages", ctypes.c_uint64),
                ("meta_bytes", ctypes.c_uint64),
                ("errors_device", ctypes.c_uint64),
                ("bytes_put", ctypes.c_uint64),
                ("bytes_get", ctypes.c_uint64),
                ("ssd_bad_slots", ctypes.c_uint64),
                ("io_fallback", ctypes.c_uint64),
                ("prefetch_pages", ctypes.c_uint64),
                ("prefetch_wasted", ctypes.c_uint64),
                ("prefetch_inflight_max", ctypes.c_uint64),
                ("evicted_pages", ctypes.c_uint64),
                ("remote_hits", ctypes.c_uint64),
                ("remote_misses", ctypes.c_uint64),
                ("remote_lost", ctypes.c_uint64),
                ("remote_bytes_in", ctypes.c_uint64),
                ("remote_bytes_out", ctypes.c_uint64),
                ("remote_published", ctypes.c_uint64),
                ("remote_unpublished", ctypes.c_uint64),
                ("remote_corrupt", ctypes.c_uint64),
                ("remote_timeouts", ctypes.c_uint64),
                ("remote_redirects", ctypes.c_uint64),
                ("remote_errors", ctypes.c_uint64),
                ("remote_nodes", ctypes.c_uint64),
                ("remote_nodes_down", ctypes.c_uint64)]


# ------------------------------------------------------------ library lookup

_LIB_NAMES = ("libkvtier.so", "libkvtier.so.0", "libkvtier.dylib")


def _candidates():
    env = os.environ.get("KVTIER_LIB")
    if env:
        p = Path(env)
        # A directory or a file: both are accepted, the variable is explicit.
        if p.is_dir():
            yield from (p / n for n in _LIB_NAMES)
        else:
            yield p
        return  # an explicit choice is never silently replaced by another copy
    here = Path(__file__).resolve().parent
    yield from (here / n for n in _LIB_NAMES)                 # installed beside the package
    build = here.parent.parent.parent / "build"                # bindings/python/kvtier -> repo/build
    yield from (build / n for n in _LIB_NAMES)
    found = ctypes.util.find_library("kvtier")                 # system install (ldconfig)
    if found:
        yield Path(found)


def find_library() -> str:
    """The path of the libkvtier to load (KVTIER_LIB, beside the package, the
    repository's build/ directory, then the system). Raises OSError if none."""
    tried = []
    for p in _candidates():
        tried.append(str(p))
        if p.is_absolute() and not p.exists():
            continue
        return str(p)
    raise OSError("libkvtier not found; build it (cmake --build build) or set KVTIER_LIB. "
                  "Tried: " + ", ".join(tried))


def _declare(lib):
    c_int, c_size_t, c_uint64, c_uint32, c_void_p = (
        ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_void_p)
    P = ctypes.POINTER
    engine_p = c_void_p  # opaque struct kvt_engine *
    sigs = {
        "kvt_version_number": (ctypes.c_uint, []),
        "kvt_version_string": (ctypes.c_char_p, []),
        "kvt_strerror": (ctypes.c_char_p, [c_int]),
        "kvt_last_error": (ctypes.c_char_p, []),
        # The struct calls take ctypes.sizeof() of our declaration (module doc).
        "kvt_config_init_sized": (c_int, [P(KvtConfig), c_size_t]),
        "kvt_config_check_sized": (c_int, [P(KvtConfig), c_size_t]),
        "kvt_open_sized": (c_int, [P(KvtConfig), c_size_t, P(engine_p)]),
        "kvt_close": (None, [engine_p]),
        "kvt_create": (c_int, [engine_p, KvtKey, P(c_void_p)]),
        "kvt_acquire": (c_int, [engine_p, P(KvtKey), c_size_t, P(c_void_p)]),
        "kvt_acquire_async": (c_int, [engine_p, P(KvtKey), c_size_t, P(c_void_p), P(c_uint64)]),
        "kvt_wait": (c_int, [engine_p, c_uint64]),
        "kvt_wait_stream": (c_int, [engine_p, c_uint64, c_void_p]),
        "kvt_release": (c_int, [engine_p, P(KvtKey), c_size_t, c_int]),
        "kvt_drop": (c_int, [engine_p, P(KvtKey), c_size_t]),
        "kvt_drop_id": (c_int, [engine_p, c_uint64]),
        "kvt_put": (c_int, [engine_p, P(KvtKey), c_size_t, P(c_void_p), c_int]),
        "kvt_get": (c_int, [engine_p, P(KvtKey), c_size_t, P(c_void_p), c_int, P(c_int)]),
        "kvt_exists": (c_int, [engine_p, P(KvtKey), c_size_t, P(c_int)]),
        "kvt_set_schedule": (c_int, [engine_p, P(KvtSchedule)]),
        "kvt_advance": (c_int, [engine_p, c_uint64, c_uint32]),
        "kvt_get_stats_sized": (c_int, [engine_p, P(KvtStats), c_size_t]),
        "kvt_flush": (c_int, [engine_p]),
        "kvt_publish": (c_int, [engine_p, P(KvtKey), c_size_t]),
        "kvt_page_bytes": (c_size_t, [engine_p]),
        "kvt_device_name": (ctypes.c_char_p, [engine_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = None
lib_path = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded once, on first use, so that importing the
    package never fails just because the library is not built yet)."""
    global _lib, lib_path
    if _lib is None:
        path = find_library()
        # CDLL (not PyDLL): ctypes releases the GIL around every call, so a
        # blocking kvt_acquire does not stall other Python threads.
        _lib = _declare(ctypes.CDLL(path))
        lib_path = path
    return _lib


# --------------------------------------------------------------------- errors


class KvtError(Exception):
    """A kvtier call failed. Attributes: code (the negative return value),
    name ('KVT_ENOTFOUND', 'EBUSY', ...), message (kvt_strerror), detail
    (kvt_last_error, possibly empty), func (the C function)."""

    def __init__(self, code: int, message: str = "", detail: str = "", func: str = "") -> None:
        self.code = code
        self.name = error_name(code)
        self.message = message
        self.detail = detail
        self.func = func
        text = f"{func}: " if func else ""
        text += f"{message} [{self.name}]"
        if detail and detail != message:
            text += f": {detail}"
        super().__init__(text)

    @property
    def errno(self) -> int | None:
        """The OS errno (positive) for an OS error, else None."""
        return -self.code if KVT_EBASE < self.code < 0 else None


class KvtCorrupt(KvtError):
    pass


class KvtFingerprint(KvtError):
    pass


class KvtNotFound(KvtError, LookupError):
    pass


class KvtFull(KvtError):
    pass


class KvtDeviceError(KvtError):
    pass


class KvtConfigError(KvtError, ValueError):
    pass


class KvtNotSupported(KvtError):
    pass


class KvtFailed(KvtError):
    pass


class KvtBusy(KvtError):
    """-EBUSY: a page is pinned or being read; the call changed nothing, retry."""


class KvtExists(KvtError):
    pass


class KvtInvalid(KvtError):
    pass


_CLASSES = {
    KVT_ECORRUPT: KvtCorrupt, KVT_EFINGERPRINT: KvtFingerprint, KVT_ENOTFOUND: KvtNotFound,
    KVT_EFULL: KvtFull, KVT_EDEVICE: KvtDeviceError, KVT_ECONFIG: KvtConfigError,
    KVT_ENOTSUP: KvtNotSupported, KVT_EFAILED: KvtFailed,
    -_errno.EBUSY: KvtBusy, -_errno.EEXIST: KvtExists, -_errno.EINVAL: KvtInvalid,
}

_LIB_NAMES_BY_CODE = {
    KVT_ECORRUPT: "KVT_ECORRUPT", KVT_EFINGERPRINT: "KVT_EFINGERPRINT",
    KVT_ENOTFOUND: "KVT_ENOTFOUND", KVT_EFULL: "KVT_EFULL", KVT_EDEVICE: "KVT_EDEVICE",
    KVT_ECONFIG: "KVT_ECONFIG", KVT_ENOTSUP: "KVT_ENOTSUP", KVT_EFAILED: "KVT_EFAILED",
}


def error_name(code: int) -> str:
    """'KVT_EFULL' for library codes, 'EBUSY' for -EBUSY, else the number."""
    if code in _LIB_NAMES_BY_CODE:
        return _LIB_NAMES_BY_CODE[code]
    if KVT_EBASE < code < 0 and -code in _errno.errorcode:
        return _errno.errorcode[-code]
    return str(code)


def strerror(code: int) -> str:
    """kvt_strerror(code) as str."""
    return lib().kvt_strerror(int(code)).decode("utf-8", "replace")


def last_error() -> str:
    """kvt_last_error() of the calling thread as str ('' when there is none)."""
    return lib().kvt_last_error().decode("utf-8", "replace")


def make_error(code: int, func: str = "") -> KvtError:
    """The exception for a negative return value. Reads kvt_last_error()
    first: it is thread-local and only valid until this thread's next call."""
    detail = last_error()
    message = strerror(code)
    return _CLASSES.get(code, KvtError)(code, message, detail, func)


def check(rc: int, func: str) -> int:
    """Raises the mapped KvtError when rc < 0; returns rc otherwise."""
    if rc < 0:
        raise make_error(rc, func)
    return rc
