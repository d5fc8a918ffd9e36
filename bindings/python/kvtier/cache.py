"""KVTierCache: a transformers Cache whose keys and values live in kvtier pages.

Layout (layer-first, docs/design.md#concepts): one page holds the K and the V of
page_tokens consecutive tokens of one batch row for one layer, as
[2][kv_heads][page_tokens][head_dim] in the model's dtype, zero-padded up to
page_bytes (a multiple of 4096). Key: id = the row's sequence id, layer =
layer_idx, index = page number.

Per layer the cache keeps, in Python, only the tail (the last, partial page).
update() does what DynamicCache.update() does — returns the layer's K/V with
the new tokens appended — by:
  1. kvt_advance(id, layer) for each row, so the decode policy prefetches what
     comes next, then acquiring that row's full pages (in chunks that fit
     HBM), copying them into the result and releasing them;
  2. appending the tail and the new tokens;
  3. storing every page that became full with kvt_put (one batch per layer)
     and keeping the new tail.
The result is freshly allocated and contiguous, like torch.cat in
DynamicCache; on a layer's first update the inputs themselves are returned,
as DynamicCache does. So the values, dtype, shape and strides are the same.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator

import torch
from transformers.cache_utils import Cache

from ._convert import integer, key_id
from .engine import Engine

_MASK64 = (1 << 64) - 1


def page_bytes_for(num_kv_heads: int, head_dim: int, dtype: torch.dtype, page_tokens: int) -> int:
    """page_bytes for pages of page_tokens tokens (K and V, all kv heads) of
    dtype, rounded up to the next multiple of 4096 (kvt_config requires it)."""
    esize = torch.empty((), dtype=dtype).element_size()
    raw = 2 * num_kv_heads * page_tokens * head_dim * esize
    return -(-raw // 4096) * 4096


class _Layer:
    __slots__ = ("length", "pages", "tail_k", "tail_v")

    def __init__(self):
        self.length = 0      # tokens held for this layer
        self.pages = 0       # full pages in kvtier (per row)
        self.tail_k = None   # [B, H, length - pages*P, D], owned here
        self.tail_v = None


class KVTierCache(Cache):
    """A transformers Cache backed by a kvtier Engine.

    engine: an Engine to use (borrowed: close() leaves it open); or None, and
      the engine is opened at the first update() from **engine_config, with
      page_bytes (unless given) computed from the K/V shapes and page_tokens
      (owned: close() closes it).
    page_tokens: tokens per page.
    n_layers / config: the layer count for kvt_set_schedule (config may be the
      model's PretrainedConfig); when neither is given it is learned at the
      end of the first forward pass, and the schedule is set then.
    seq_ids: one 64-bit id per batch row (default: random, so caches sharing
      an engine never collide).
    An engine opened here is told the pages' layout (kv_dtype, kv_order,
    page_tokens, kv_heads, head_dim, n_layers when known), so engine_config
    may name a lossy codec (codec="int4", "int8", "fp8"): pages are then
    quantised on their way to SSD and come back close, not equal
    (docs/codecs.md). Layout fields given in engine_config win.
    Call close() (or use ``with``) to drop the pages from the engine.
    Not supported: beam search (reorder_cache), crop, contrastive search.
    """

    def __init__(self, engine: Engine | None = None, *, page_tokens: int = 16,
                 n_layers: int | None = None, config: Any = None,
                 seq_ids: Iterable[int] | None = None, **engine_config: Any) -> None:
        super().__init__()
        page_tokens = integer(page_tokens, "page_tokens")
        if page_tokens < 1:
            raise ValueError("page_tokens must be at least 1")
        if engine is not None and engine_config:
            raise TypeError("pass either an engine or engine configuration, not both")
        if n_layers is None and config is not None:
            n_layers = config.num_hidden_layers
        self.page_tokens = page_tokens
        self._engine = engine
        self._owns_engine = engine is None
        self._engine_config = engine_config
        self._n_layers = n_layers
        # Key ids: integers in 0..2**64-1, refused otherwise (never truncated or wrapped).
        self._seq_ids = (None if seq_ids is None else
                         [key_id(i, f"seq_ids[{n}]") for n, i in enumerate(seq_ids)])
        if self._seq_ids is not None and len(set(self._seq_ids)) != len(self._seq_ids):
            # Two rows with one id would write the same keys: each would read
            # the other's K/V.
            raise ValueError(f"seq_ids {self._seq_ids} repeat an id; each row needs its own")
        self._layers = []
        self._shape = None          # (B, H, D, dtype) fixed at the first update
        self._schedule_set = False
        self._max_layer_seen = -1
        self._seen_tokens = 0       # what DynamicCache counts, for code that reads it

    # ---------------------------------------------------------- Cache API

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               cache_kwargs: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Appends the new K/V ([batch, kv_heads, tokens, head_dim]) of layer
        layer_idx and returns that layer's full K and V (caller owns them)."""
        if layer_idx == 0:
            self._seen_tokens += key_states.shape[-2]
        self._setup(key_states, value_states, layer_idx)
        while len(self._layers) <= layer_idx:
            self._layers.append(_Layer())
        st = self._layers[layer_idx]
        P = self.page_tokens
        if st.length == 0:
            # DynamicCache returns the inputs themselves on a layer's first update.
            out_k, out_v = key_states, value_states
            pend_k, pend_v = key_states, value_states
        else:
            out_k, out_v = self._gather(layer_idx, st, key_states, value_states)
            pend_k = out_k[:, :, st.pages * P:]
            pend_v = out_v[:, :, st.pages * P:]
        full = pend_k.shape[2] // P
        if full:
            self._store(layer_idx, st.pages, pend_k[:, :, :full * P], pend_v[:, :, :full * P])
            st.pages += full
        # The tail is copied out: a view would keep the whole result alive.
        st.tail_k = pend_k[:, :, full * P:].clone(memory_format=torch.contiguous_format)
        st.tail_v = pend_v[:, :, full * P:].clone(memory_format=torch.contiguous_format)
        st.length += key_states.shape[2]
        return out_k, out_v

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        """Tokens cached for layer layer_idx (0 when it has none)."""
        if layer_idx is None:
            layer_idx = 0
        return self._layers[layer_idx].length if layer_idx < len(self._layers) else 0

    def get_max_length(self) -> None:
        """None: the cache grows without bound (as DynamicCache)."""
        return None

    def get_max_cache_shape(self) -> None:
        """None (the name transformers >= 4.46 uses for get_max_length)."""
        return None

    def __len__(self) -> int:
        # As DynamicCache: the number of layers that hold state.
        return len(self._layers)

    def __getitem__(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) of a layer, gathered from kvtier (new tensors, caller owns)."""
        if layer_idx >= len(self._layers):
            raise KeyError(f"Cache only has {len(self._layers)} layers, attempted to access "
                           f"layer with index {layer_idx}")
        st = self._layers[layer_idx]
        if st.pages == 0:
            return st.tail_k.clone(), st.tail_v.clone()
        return self._gather(layer_idx, st, None, None)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(len(self._layers)):
            yield self[i]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("KVTierCache does not support beam search: pages are keyed "
                                  "by sequence id and would have to be copied per beam")

    def crop(self, max_length: int) -> None:
        raise NotImplementedError("KVTierCache does not support crop (assisted decoding)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("KVTierCache does not support contrastive search")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("KVTierCache does not support contrastive search")

    # ---------------------------------------------------------- lifetime

    @property
    def engine(self) -> Engine | None:
        """The Engine (None before the first update when it is opened lazily)."""
        return self._engine

    @property
    def seq_ids(self) -> list[int] | None:
        """The per-row sequence ids (the kvt_key.id of each row's pages)."""
        return list(self._seq_ids) if self._seq_ids is not None else None

    def close(self) -> None:
        """Drops this cache's pages from the engine (kvt_drop_id per row) and
        closes the engine if the cache opened it. Idempotent."""
        e = self._engine
        if e is not None and not e.closed:
            if self._owns_engine:
                e.close()
            elif self._seq_ids is not None:
                for sid in self._seq_ids:
                    e.drop_id(sid)
        self._layers = []
        if self._owns_engine:
            self._engine = None

    def __enter__(self) -> KVTierCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- internals

    def _setup(self, k, v, layer_idx):
        B, H, _, D = k.shape
        if self._shape is None:
            if v.shape[:2] != k.shape[:2] or v.shape[3] != D or v.dtype != k.dtype:
                raise ValueError("key and value states differ in shape or dtype")
            self._shape = (B, H, D, k.dtype)
            need = page_bytes_for(H, D, k.dtype, self.page_tokens)
            if self._engine is None:
                cfg = dict(self._engine_config)
                cfg["page_bytes"] = cfg.get("page_bytes") or need  # larger ones are allowed
                cfg.update({f: v for f, v in self._layout(H, D, k.dtype).items()
                            if cfg.get(f) is None})
                self._engine = Engine(**cfg)
            if self._engine.page_bytes < need:
                raise ValueError(f"engine pages are {self._engine.page_bytes} bytes; "
                                 f"{self.page_tokens} tokens of K and V need {need}")
            if self._seq_ids is None:
                base = int.from_bytes(os.urandom(8), "little")
                self._seq_ids = [(base + b) & _MASK64 for b in range(B)]
            elif len(self._seq_ids) != B:
                raise ValueError(f"{len(self._seq_ids)} seq_ids for a batch of {B}")
            s = self._engine.stats()
            # Pin at most half of HBM at once, so the policy keeps room to
            # prefetch.
            self._acquire_chunk = max(1, s.capacity_pages[0] // 2)
            e = self._engine
            self._esize = k.element_size()
            self._page_elems = e.page_bytes // self._esize
            self._stage_device = k.device if e.device_name == "cuda" and k.is_cuda else "cpu"
        elif (B, H, D, k.dtype) != self._shape:
            raise ValueError(f"K/V of shape {tuple(k.shape)} {k.dtype} after "
                             f"{self._shape}: the cache cannot change shape")
        if not self._schedule_set:
            if self._n_layers is None and layer_idx <= self._max_layer_seen and layer_idx == 0:
                self._n_layers = self._max_layer_seen + 1  # a second pass has begun
            if self._n_layers is not None:
                self._engine.set_schedule(self._seq_ids, self._n_layers, order="layer")
                self._schedule_set = True
        self._max_layer_seen = max(self._max_layer_seen, layer_idx)

    def _layout(self, H, D, dtype):
        """The page layout for kvt_config (the lossy codecs need it): these
        pages are [2][H][page_tokens][D], head-major, one layer each. A dtype
        other than bf16/fp16 has none (a lossy codec is then refused)."""
        kv_dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype)
        if kv_dtype is None:
            return {}
        return {"kv_dtype": kv_dtype, "kv_order": "head_major", "page_tokens": self.page_tokens,
                "kv_heads": H, "head_dim": D, "n_layers": self._n_layers or 0}

    def _page_view(self, pinned, i):
        # [2, H, P, D] over page i's memory, no copy.
        B, H, D, dtype = self._shape
        n = 2 * H * self.page_tokens * D
        return pinned.torch(i).view(dtype)[:n].view(2, H, self.page_tokens, D)

    def _gather(self, layer_idx, st, new_k, new_v):
        """A new [B, H, length (+ new), D] K and V: the layer's full pages from
        kvtier, then the tail, then new_k/new_v when given."""
        B, H, D, dtype = self._shape
        P = self.page_tokens
        new = 0 if new_k is None else new_k.shape[2]
        dev = st.tail_k.device
        out_k = torch.empty((B, H, st.length + new, D), dtype=dtype, device=dev)
        out_v = torch.empty_like(out_k)
        e = self._engine
        for b, sid in enumerate(self._seq_ids):
            if self._schedule_set:
                e.advance(sid, layer_idx)
            for first in range(0, st.pages, self._acquire_chunk):
                count = min(self._acquire_chunk, st.pages - first)
                keys = [(sid, layer_idx, first + j) for j in range(count)]
                with e.acquire(keys) as pinned:
                    for j in range(count):
                        page = self._page_view(pinned, j)
                        lo = (first + j) * P
                        out_k[b, :, lo:lo + P].copy_(page[0])
                        out_v[b, :, lo:lo + P].copy_(page[1])
        at = st.pages * P
        r = st.tail_k.shape[2]
        out_k[:, :, at:at + r] = st.tail_k
        out_v[:, :, at:at + r] = st.tail_v
        if new:
            out_k[:, :, at + r:] = new_k
            out_v[:, :, at + r:] = new_v
        return out_k, out_v

    def _store(self, layer_idx, first_page, k, v):
        """kvt_put of the full pages in k/v ([B, H, n*P, D]) as pages
        first_page.. of each row."""
        B, H, D, dtype = self._shape
        P = self.page_tokens
        n = k.shape[2] // P
        # Zeroed staging: the padding of every page is deterministic (codec,
        # checksums, and no stale process memory in persisted files).
        stage = torch.zeros((n * B, self._page_elems), dtype=dtype, device=self._stage_device)
        body = stage[:, :2 * H * P * D].view(n, B, 2, H, P, D)
        body[:, :, 0] = k.reshape(B, H, n, P, D).permute(2, 0, 1, 3, 4)
        body[:, :, 1] = v.reshape(B, H, n, P, D).permute(2, 0, 1, 3, 4)
        keys = [(sid, layer_idx, first_page + j) for j in range(n) for sid in self._seq_ids]
        # One call: kvt_put batches by itself what HBM and DRAM cannot hold.
        self._engine.put(keys, list(stage.unbind(0)))
