"""What kvtier's engine plug-ins and its store share (kvtier.storage and
kvtier.sglang, kvtier.lmcache, kvtier.vllm).

For plug-in code (none of this is public API):

- read_settings(raw, prefix="", strict=False) -> dict: the kvtier keys of an
  engine's own config mapping (SETTINGS names them; with prefix, e.g.
  "kvtier." or "storage_plugin.kvtier.", only keys starting with it are read).
  Sizes accept ints or "512MiB"/"8GB"/"1.5GiB"-style text (rounded down to
  a whole byte; a size under 1 byte other than 0 is refused), counts ints or
  digits; text is ASCII only (digits 0-9). A bad value or, with
  strict=True, an unknown key under the prefix raises ValueError naming the
  key and the value.
- model_fingerprint(**parts) -> str: stable text of the model/dtype/layout
  facts the engine gives; Engine hashes it to 64 bits (another model misses).
- default_spill_dir(engine, fingerprint, rank=None) -> str:
  $XDG_CACHE_HOME/kvtier/<engine>/<fp hash>[-r<rank>], else
  $HOME/.cache/kvtier/...; each only when set to an absolute path (an empty
  HOME is unset), else ValueError asking for spill_dir.
- default_capacities(page_bytes, spill_dir) -> dict(dram_bytes, ssd_bytes):
  from MemAvailable and the free space of the spill directory's file system.
- chunk_layout(chunk_bytes, page_bytes=None) -> (page_bytes, n_pages): how a
  chunk of the engine's size is cut into kvtier pages (the last may be padded).
- page_keys(name, n_pages, layers="pages") -> [Key]: the kvtier keys of one
  chunk's pages; the package's one scheme from names (str/bytes) to
  kvt_keys. layers="all": one page holding every layer's block (its layer
  KVT_ALL_LAYERS); "opaque": pages that are no layout's blocks (stored raw
  under a lossy codec).
- kv_layout(dtype, order, page_tokens, kv_heads, head_dim, n_layers=0, ...)
  -> dict: the page layout as Engine keywords (docs/codecs.md); LayoutRefused
  (a ValueError) naming why for an element type the lossy codecs do not take.
- open_engine(settings, page_bytes, fingerprint, engine, rank=None,
  layout=None) -> (Engine, dict): an Engine on the host back-end with
  defaults filled in (the dict is the configuration used, for logs and
  get_stats()); layout, a kv_layout() dict or the text saying why the
  plug-in has none, is what a lossy codec needs.
- close_engine(engine, persist, log, who) -> int: the shutdown of a plug-in's
  engine: no flush without persist (nothing outlives the close), with persist
  a flush whose failure (a full cache) is a warning naming how many pages are
  not durable, never an exception; then close. Returns that count.
- ChunkIO(engine, chunk_bytes, all_layers=False): put / get / exists of whole
  chunks given as host addresses (the engine's own memory: kvt_put and
  kvt_get read and write it in place); a padded last page goes through a
  bounce page. all_layers: a chunk in one page is keyed layers="all".
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Union

from ._lib import KVT_ALL_LAYERS, KVT_FLAG_EVICT, KvtBusy, KvtError, KvtFull

# The codecs that quantise, and so need the page layout.
LOSSY_CODECS = ("fp8", "int8", "int4")

# The first key layer of "opaque" pages (bytes that are no layout's block,
# such as a header): past any model's layer count, so that a lossy codec on
# a layout with n_layers set keeps them as they are (io/quant.c quantises a
# page of key.layer < n_layers, or of KVT_ALL_LAYERS, only).
OPAQUE_LAYER = 1 << 31


class LayoutRefused(ValueError):
    """The engine's KV cannot be described to kvtier's lossy codecs; the
    message says why."""


_KV_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
              "half": "fp16"}


def kv_dtype(dtype: object) -> str:
    """'bf16' or 'fp16' for the engine's KV element type (a torch dtype or
    its name: 'torch.bfloat16', 'float16', ...); LayoutRefused naming the
    type otherwise (an fp8 KV cache is already quantised with the engine's
    own scales, which kvtier's page does not hold; fp32 or others are not
    what the codecs read)."""
    name = str(dtype).removeprefix("torch.").lower()
    if name in _KV_DTYPES:
        return _KV_DTYPES[name]
    if "fp8" in name or "float8" in name or "e4m3" in name or "e5m2" in name:
        why = ("is already 8-bit (the engine quantises it with scales of its own, which "
               "kvtier's pages do not carry)")
    else:
        why = "is not a 16-bit float"
    raise LayoutRefused(f"the engine's KV dtype {dtype} {why}; kvtier's lossy codecs read "
                        "bfloat16 or float16 KV only")


def kv_layout(dtype: object, order: str, page_tokens: int, kv_heads: int, head_dim: int,
              n_layers: int = 0, v_head_dim: int = 0, rope_dim: int = 0) -> dict[str, Any]:
    """The page layout as Engine keywords (kvt_config's kv_* fields,
    docs/codecs.md): dtype the engine's KV type (kv_dtype()), order an
    Engine kv_order name. LayoutRefused for a KV type the codecs do not
    take; the dimensions are checked by kvtier when the engine opens."""
    return dict(kv_dtype=kv_dtype(dtype), kv_order=order, page_tokens=page_tokens,
                kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim,
                rope_dim=rope_dim, n_layers=n_layers)


def one_page_for_codec(settings: Mapping[str, Any], chunk_bytes: int) -> int | None:
    """The page size a plug-in whose layout covers a whole chunk uses: with
    a lossy codec and no page_bytes set, the chunk rounded up to 4 KiB
    (quantising needs the chunk's blocks in one page, past
    MAX_DEFAULT_PAGE too); else the page_bytes setting (None: the default)."""
    if settings.get("codec") in LOSSY_CODECS and "page_bytes" not in settings:
        return (chunk_bytes + 4095) // 4096 * 4096
    return settings.get("page_bytes")
from .engine import Engine, Key

# key -> (kind, meaning); kinds: bytes, str, bool, int, codec.
SETTINGS: dict[str, tuple[str, str]] = {
    "spill_dir": ("str", "directory of the SSD tier (made if missing)"),
    "dram_bytes": ("bytes", "capacity of kvtier's DRAM tier"),
    "ssd_bytes": ("bytes", "capacity of the SSD tier (0: no SSD tier)"),
    "page_bytes": ("bytes", "kvtier page size (a multiple of 4096; default: the chunk's size)"),
    "codec": ("str", "none | zstd | zstd_shuffle16 | fp8 | int8 | int4 (pages on SSD; the lossy "
                     "three quantise K/V pages whose layout the plug-in takes from its engine: "
                     "LMCache's full chunks, SGLang's MHA and MLA host pools, not vLLM's "
                     "blocks; bf16 or fp16 KV only: docs/codecs.md#plugins)"),
    "persist": ("bool", "keep pages across restarts (fsync'd on flush and close)"),
    "io_backend": ("str", "auto | uring | psync"),
    "queue_depth": ("int", "SSD requests in flight"),
    "policy": ("str", "prefix (default: a prefix cache's policy) | lru | arc"),
    "remote_url": ("str", "redis://host:port[,host:port...] of a Redis Cluster that engine "
                          "instances share (docs/remote.md); credentials in remote_auth_file"),
    "remote_auth_file": ("str", "a file holding \"password\" or \"user password\" for the "
                                "cluster"),
    "remote_prefix": ("str", "key prefix in the cluster (default kvtier)"),
    "remote_timeout_ms": ("int", "the most one call to the cluster may take (default 200)"),
    "remote_publish": ("str", "put (default: every chunk stored) | evict | explicit"),
    "remote_ttl_s": ("int", "values expire in the cluster after this long (default: never)"),
}

# The settings passed to the engine as they are.
_REMOTE = ("remote_url", "remote_auth_file", "remote_prefix", "remote_timeout_ms",
           "remote_publish", "remote_ttl_s")


def redact_url(url: str) -> str:
    """url with any user and password replaced by '***' (for logs): all from
    the scheme to the last '@', as kvtier's URL parser splits it (a raw '@'
    or '/' in a password is the password's), whatever the scheme."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://).*@", r"\1***@", url, flags=re.S)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1000**4, "tib": 1 << 40}

# The largest kvtier page a chunk is stored in by default: bigger chunks span
# several pages, so one page never needs more than this much DRAM at once.
MAX_DEFAULT_PAGE = 64 << 20


# The grammar of every setting given as text is ASCII: str.isdigit(), int()
# and \d also take other scripts' digits (U+0663 ARABIC-INDIC THREE,
# U+FF11 FULLWIDTH ONE) and superscripts (U+00B2, which isdigit() accepts and
# int() refuses), so a paste would pass as a number. Blanks are spaces, tabs.
_SIZE_RE = re.compile(r"[ \t]*([0-9]+)(?:\.([0-9]+))?[ \t]*([A-Za-z]*)[ \t]*")
_COUNT_RE = re.compile(r"[ \t]*([0-9]+)[ \t]*")


def parse_bytes(value: object, what: str) -> int:
    """An int of bytes from an int or text like '512MiB', '8GB', '4096'
    (digits 0-9, an optional fraction, a unit of _UNITS, any case). A
    fraction is exact and the bytes are rounded down: '1.5KiB' is 1536,
    '0.3KiB' 307; a size that is not 0 but under 1 byte ('0.5') is refused.
    ValueError naming the setting (what) and the value otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"kvtier setting {what}: {value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"kvtier setting {what}: {value} is negative")
        return value
    if isinstance(value, str):
        m = _SIZE_RE.fullmatch(value)
        if m and m.group(3).lower() in _UNITS:
            whole, frac, unit = m.group(1), m.group(2) or "", m.group(3).lower()
            exact = Fraction(int(whole + frac), 10 ** len(frac)) * _UNITS[unit]
            if 0 < exact < 1:
                raise ValueError(f"kvtier setting {what}: {value!r} is less than 1 byte")
            return math.floor(exact)
    raise ValueError(f"kvtier setting {what}: {value!r} is not a size "
                     "(an int of bytes, or e.g. '512MiB', '8GB', '1.5GiB')")


def _parse_count(value: object, what: str) -> int:
    """A whole number >= 0 from an int or text of ASCII digits."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        m = _COUNT_RE.fullmatch(value)
        if m:
            return int(m.group(1))
    raise ValueError(f"kvtier setting {what}: {value!r} is not a whole number "
                     "(digits 0-9)")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _parse_bool(value: object, what: str) -> bool:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    if isinstance(value, str):
        word = value.strip(" \t").lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
    raise ValueError(f"kvtier setting {what}: {value!r} is not a boolean (true/false, 1/0)")


def read_settings(raw: Optional[Mapping[str, object]], prefix: str = "",
                  strict: bool = False) -> Dict[str, object]:
    """The kvtier settings found in raw (a mapping or None), converted and
    checked; keys not given are absent from the result. A bad value raises
    ValueError naming the key as given (with its prefix) and the value."""
    out: Dict[str, object] = {}
    for full, value in (raw or {}).items():
        if not isinstance(full, str) or not full.startswith(prefix):
            continue
        name = full[len(prefix):]
        if name not in SETTINGS:
            if strict:
                raise ValueError(f"unknown kvtier setting {full!r}; known: "
                                 + ", ".join(prefix + k for k in SETTINGS))
            continue
        if value is None:
            continue
        kind = SETTINGS[name][0]
        if kind == "bytes":
            out[name] = parse_bytes(value, full)
        elif kind == "bool":
            out[name] = _parse_bool(value, full)
        elif kind == "int":
            out[name] = _parse_count(value, full)
        else:
            if not isinstance(value, str) or not value:
                raise ValueError(f"kvtier setting {full}: {value!r} is not a non-empty string")
            # Codec names are the Engine's, which takes any case: the
            # plug-ins' own checks (LOSSY_CODECS) must see the same name.
            out[name] = value.lower() if name == "codec" else value
    return out


def model_fingerprint(**parts: object) -> str:
    """'k1=v1;k2=v2' over the sorted parts: the identity of what a chunk's
    bytes mean (model, dtype, layout, shard). Stable across processes."""
    return ";".join(f"{k}={parts[k]}" for k in sorted(parts))


def _short_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=6, person=b"kvtier-dir").hexdigest()


def _home() -> Path:
    """$HOME, which must be set to an absolute path. Empty (or relative) is
    treated as unset: Python's Path.home() would make "" the root directory
    (the spill directory would land in /.cache) and a relative one would
    follow the working directory. There is no guess after it (no passwd
    entry, no temporary directory, which a persisted store must not land in):
    ValueError saying what to set."""
    home = os.environ.get("HOME", "")
    if home and os.path.isabs(home):
        return Path(home)
    state = "unset or empty" if not home else f"{home!r}, not an absolute path"
    raise ValueError(f"kvtier: no directory for the default spill_dir: XDG_CACHE_HOME is "
                     f"not an absolute path and HOME is {state}; set the spill_dir setting, "
                     "or XDG_CACHE_HOME or HOME to an absolute path")


def cache_root() -> Path:
    """$XDG_CACHE_HOME/kvtier (when absolute: the XDG rule), else
    $HOME/.cache/kvtier; ValueError when neither is an absolute path."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else _home() / ".cache"
    return base / "kvtier"


def default_spill_dir(engine: str, fingerprint: str,
                      rank: Union[int, str, None] = None) -> str:
    """One directory per engine, model identity and rank: two models never
    share one (kvtier drops another fingerprint's pages when it opens a
    directory with persist), and two ranks never open the same one."""
    name = _short_hash(fingerprint) + ("" if rank is None else f"-r{rank}")
    return str(cache_root() / engine / name)


def _expand_home(path: str) -> str:
    """path with a leading "~" or "~/" taken from $HOME as _home() reads it
    (an empty HOME would make "~/kv" the root's /kv); "~user" as
    os.path.expanduser does."""
    if path == "~" or path.startswith("~/"):
        return str(_home()) + path[1:]
    return os.path.expanduser(path)


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _free_disk(path: str) -> int:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


def default_capacities(page_bytes: int, spill_dir: str) -> dict[str, int]:
    """DRAM: an eighth of the available memory, at most 8 GiB, at least 4
    pages (kvtier puts in batches of half its DRAM). SSD: a quarter of the free
    space where spill_dir lives (segment files are allocated as they fill, so
    an idle cache takes none of it), at least 16 pages."""
    dram = min(_mem_available() // 8, 8 << 30)
    dram = max(dram // page_bytes, 4) * page_bytes
    ssd = max(_free_disk(spill_dir) // 4 // page_bytes, 16) * page_bytes
    return {"dram_bytes": dram, "ssd_bytes": ssd}


def chunk_layout(chunk_bytes: int, page_bytes: int | None = None) -> tuple[int, int]:
    """(page_bytes, n_pages) for chunks of chunk_bytes. Default: one page per
    chunk (rounded up to 4 KiB) up to MAX_DEFAULT_PAGE, else the fewest equal
    pages of at most that size. n_pages * page_bytes >= chunk_bytes; only the
    last page of a chunk holds padding, and only when chunk_bytes is not a
    multiple of the page."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk of {chunk_bytes} bytes")
    if page_bytes is None:
        n = -(-chunk_bytes // MAX_DEFAULT_PAGE)
        page_bytes = (-(-chunk_bytes // n) + 4095) // 4096 * 4096
    elif page_bytes <= 0 or page_bytes % 4096:
        raise ValueError(f"kvtier setting page_bytes: {page_bytes} is not a positive "
                         "multiple of 4096")
    return page_bytes, -(-chunk_bytes // page_bytes)


def page_keys(name: str | bytes, n_pages: int, layers: str = "pages") -> list[Key]:
    """The kvtier keys of the n_pages pages stored under name (str, taken as
    UTF-8, or bytes): the package's one scheme from names to kvt_keys, used
    by every store of it (KVTierStorage and key_hash, the LMCache, SGLang and
    vLLM plug-ins). id and index carry 96 bits of blake2b(name, person
    "kvtier-chunk"), little-endian; layer is what the page holds, which a
    lossy codec reads (docs/codecs.md): with layers="pages" the page number;
    "all" (n_pages 1) KVT_ALL_LAYERS, a page of every layer's block;
    "opaque" OPAQUE_LAYER + the page number, bytes that are no layout's
    block. Stable across processes and machines (no PYTHONHASHSEED), which
    persistence needs.

    Collision stance: among n stored pages some two names collide with
    probability about n**2 / 2**97 (about 1e-11 at a billion pages). We
    treat that as impossible and do not store the full name to check it; a
    collision would serve one name's bytes for another's. TypeError for a
    name that is neither str nor bytes."""
    if isinstance(name, str):
        name = name.encode("utf-8")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        name = bytes(name)
    else:
        raise TypeError(f"kvtier keys are named by str or bytes, not {type(name).__name__}")
    if n_pages >= OPAQUE_LAYER or (layers == "all" and n_pages != 1):
        raise ValueError(f"a chunk of {n_pages} pages (layers={layers!r})")
    first = {"pages": 0, "all": KVT_ALL_LAYERS, "opaque": OPAQUE_LAYER}.get(layers)
    if first is None:
        raise ValueError(f"page_keys layers={layers!r}: 'pages', 'all' or 'opaque'")
    d = hashlib.blake2b(name, digest_size=12, person=b"kvtier-chunk").digest()
    i, x = int.from_bytes(d[:8], "little"), int.from_bytes(d[8:], "little")
    return [Key(i, first + p, x) for p in range(n_pages)]


def open_engine(settings: Mapping[str, Any], page_bytes: int, fingerprint: str, engine: str,
                rank: int | str | None = None, layout: dict[str, Any] | str | None = None
                ) -> tuple[Engine, dict[str, Any]]:
    """Opens kvtier for a plug-in: settings from read_settings() (page_bytes
    there is ignored: the plug-in has decided it), defaults for what is
    missing. layout: the pages' layout (kv_layout()) or, where the plug-in
    has none, the text saying why; a lossy codec without one is refused
    with a ValueError naming that reason. Only a lossy codec gets it (the
    others never read it). Returns (Engine, config used). Owned by the
    caller (close())."""
    codec = settings.get("codec", "none")
    if codec in LOSSY_CODECS and not isinstance(layout, dict):
        raise LayoutRefused(f"kvtier {engine}: codec {codec} quantises K and V and needs the "
                            f"pages' layout, which this plug-in cannot give: "
                            f"{layout or 'no layout'}; use codec none, zstd or zstd_shuffle16")
    spill = settings.get("spill_dir") or default_spill_dir(engine, fingerprint, rank)
    spill = os.path.abspath(_expand_home(spill))
    # kvtier makes the directory itself but not its parents.
    os.makedirs(os.path.dirname(spill), mode=0o700, exist_ok=True)
    cfg = dict(page_bytes=page_bytes, hbm_bytes=page_bytes, device="host",
               ssd_dir=spill, fingerprint=fingerprint,
               policy=settings.get("policy", "prefix"), codec=codec,
               persist=settings.get("persist", False),
               # A cache: when every tier is full, the policy's victims make room.
               flags=KVT_FLAG_EVICT)
    cfg.update(default_capacities(page_bytes, spill))
    if codec in LOSSY_CODECS:
        cfg.update(layout)
    for k in ("dram_bytes", "ssd_bytes", "io_backend", "queue_depth") + _REMOTE:
        if k in settings:
            cfg[k] = settings[k]
    engine = Engine(**cfg)
    # The configuration is logged by the plug-ins: never with a password.
    if cfg.get("remote_url"):
        cfg["remote_url"] = redact_url(cfg["remote_url"])
    return engine, cfg


def not_durable_pages(engine: Engine) -> int:
    """Pages the engine holds without a copy on its SSD tier: with persist,
    what a restart would not find."""
    st = engine.stats()
    return max(0, st.pages - st.resident_pages[2])


def close_engine(engine: Engine, persist: bool, log: logging.Logger, who: str) -> int:
    """Closes a plug-in's engine at the engine's shutdown; never raises
    because the cache is full. Returns the pages left not durable (0 without
    persist).

    Without persist nothing outlives the close, so there is nothing to flush
    (a full KVT_FLAG_EVICT engine answers KVT_EFULL to kvt_flush: a shutdown
    that flushed raised KvtFull every time the cache had filled). With
    persist it flushes first; a failure (full SSD tier, full disk, I/O
    error) is a warning naming how many pages will be missing after a
    restart, as a cache may lose pages, and the close goes on."""
    lost = 0
    if persist:
        try:
            engine.flush()
        except KvtError as exc:
            lost = not_durable_pages(engine)
            log.warning("kvtier %s: at shutdown %d page(s) could not be made durable and "
                        "will be missing after a restart (%s)", who, lost, exc)
    engine.close()
    return lost


class ChunkIO:
    """Whole chunks of chunk_bytes in the pages of an Engine (borrowed).

    Chunks are named (page_keys) and given as addresses that stay valid and
    unchanged during the call: host memory, or, with on_device, CUDA memory
    on an engine of the cuda back-end (whole pages only: a padded last page
    needs a host bounce page). The full pages of a chunk are read and
    written by kvtier in place (kvt_put copies them into its DRAM tier,
    kvt_get copies into them: one copy each way, the disk side is DMA). A
    last page that the chunk only partly fills is staged in a bounce page (a
    second copy of that page's bytes). Thread-safe as the Engine is (bounce
    pages are made per call)."""

    def __init__(self, engine: Engine, chunk_bytes: int, all_layers: bool = False) -> None:
        self.engine = engine
        self.chunk_bytes = chunk_bytes
        self.page_bytes = engine.page_bytes
        self.n_pages = -(-chunk_bytes // self.page_bytes)
        # A chunk of every layer's block in one page says so in its key, so
        # that a lossy codec finds each layer (docs/codecs.md).
        self.layers = "all" if all_layers and self.n_pages == 1 else "pages"
        self.tail = chunk_bytes - (self.n_pages - 1) * self.page_bytes
        self.padded = self.tail != self.page_bytes
        dram_pages = engine.stats().capacity_pages[1]
        # kvt_put commits in batches of half the DRAM tier, each all or
        # nothing: parts of at most that many pages say which chunks failed.
        self.part = max(1, (dram_pages - 1) // 2 // self.n_pages)

    def keys(self, names: Iterable[str | bytes]) -> list[Key]:
        """Every page key of the chunks, chunk by chunk."""
        return [k for n in names for k in page_keys(n, self.n_pages, self.layers)]

    def _page_addrs(self, addrs: Iterable[int]
                    ) -> tuple[list[int], list[tuple[ctypes.Array, int]]]:
        """Per-page addresses; the padded last pages point at bounce pages,
        returned as [(bounce, chunk address of the tail), ...]."""
        out, staged = [], []
        for a in addrs:
            out.extend(a + p * self.page_bytes for p in range(self.n_pages - 1))
            if self.padded:
                b = ctypes.create_string_buffer(self.page_bytes)
                staged.append((b, a + (self.n_pages - 1) * self.page_bytes))
                out.append(ctypes.addressof(b))
            else:
                out.append(a + (self.n_pages - 1) * self.page_bytes)
        return out, staged

    def _check_side(self, on_device: bool) -> None:
        if on_device and self.padded:
            raise ValueError(f"kvtier: chunks of {self.chunk_bytes} bytes in pages of "
                             f"{self.page_bytes} pass through a host bounce page; CUDA "
                             "memory cannot")

    def exists(self, names: Sequence[str | bytes]) -> list[bool]:
        """[bool] per chunk: every page of it is held."""
        if not names:
            return []
        where = self.engine.exists(self.keys(names)).where
        n = self.n_pages
        return [all(w >= 0 for w in where[i * n:(i + 1) * n]) for i in range(len(names))]

    def put(self, names: Iterable[str | bytes], addrs: Iterable[int], skip_existing: bool = True,
            on_device: bool = False) -> list[bool]:
        """Stores the chunks; [bool] per chunk (held after the call). Chunks
        already held are skipped when skip_existing (content-named keys hold
        the same bytes). A full or busy store fails the part it hit and every
        later one; earlier parts stay stored."""
        names, addrs = list(names), list(addrs)
        self._check_side(on_device)
        ok = self.exists(names) if skip_existing else [False] * len(names)
        todo = [i for i, held in enumerate(ok) if not held]
        for s in range(0, len(todo), self.part):
            part = todo[s:s + self.part]
            ptrs, staged = self._page_addrs([addrs[i] for i in part])
            for b, src in staged:
                ctypes.memmove(b, src, self.tail)   # the padding stays zero
            try:
                self.engine.put_addresses(self.keys([names[i] for i in part]), ptrs,
                                          on_device=on_device)
            except (KvtFull, KvtBusy):
                break
            for i in part:
                ok[i] = True
        return ok

    def get(self, names: Iterable[str | bytes], addrs: Iterable[int],
            on_device: bool = False) -> list[bool]:
        """Copies the chunks held into addrs; [bool] per chunk. A chunk with
        a page missing or damaged is False (its memory may have been partly
        written)."""
        names, addrs = list(names), list(addrs)
        self._check_side(on_device)
        if not names:
            return []
        ok = []
        for s in range(0, len(names), self.part):
            pn, pa = names[s:s + self.part], addrs[s:s + self.part]
            ptrs, staged = self._page_addrs(pa)
            found = self.engine.get_addresses(self.keys(pn), ptrs, on_device=on_device)
            n = self.n_pages
            got = [all(found[i * n:(i + 1) * n]) for i in range(len(pn))]
            for i, (b, dst) in enumerate(staged):
                if got[i]:
                    ctypes.memmove(dst, b, self.tail)
            ok.extend(got)
        return ok
