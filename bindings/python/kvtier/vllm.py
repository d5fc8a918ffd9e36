"""kvtier as a secondary tier of vLLM 0.33.0's KV offloading (KVTierTier).

vLLM loads it itself, from the OffloadingConnector's configuration:

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both",
      "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec",
        "cpu_bytes_to_use": 8589934592,
        "secondary_tiers": [{"type": "KVTierTier", "module_path": "kvtier.vllm",
                             "spill_dir": "/nvme/kvtier", "ssd_bytes": "500GB",
                             "persist": true}]}}'

Every key of the tier's entry other than type, module_path, backpressure and
locality is a kvtier setting (kvtier._plugin.SETTINGS: spill_dir,
dram_bytes, ssd_bytes, page_bytes, codec, persist, io_backend, queue_depth,
policy); an unknown one is refused, named. With none, the spill directory is
$XDG_CACHE_HOME/kvtier/vllm/<model hash>, else $HOME/.cache/... (with
neither set to an absolute path the tier refuses: set spill_dir), with
-d<index> for data-parallel replicas, and the capacities come from free
memory and disk.

What is stored. vLLM's primary tier is a CPU region of fixed-size chunks
(the stride of primary_kv_view: blocks_per_chunk blocks of every layer);
TieringOffloadingManager hands this tier slots of that region to store from
(cascade) and to load into (promotion). kvtier reads and writes those slots
in place: kvt_put copies a slot into kvtier's DRAM tier, kvt_get copies
back into the slot (one copy each way; the SSD side is DMA). A chunk larger
than kvtier's largest default page spans several pages.

Identity. A chunk's key is blake2b of its OffloadKey (block hash + group);
kvtier's fingerprint is the storage identity vLLM's own file tier uses
(FileMapper's run config: model, dtype, tokens per hash, blocks per chunk,
parallel layout and rank, KV cache groups, canonical format) plus the chunk
size, so another model or layout never matches.

Codecs. fp8, int8 and int4 are refused at open, saying why: the tier is
not given the heads, head size or layout of vLLM's blocks
(docs/codecs.md#plugins). none, zstd and zstd_shuffle16 work on any dtype.

Asynchrony. submit_store/submit_load queue the job for one worker thread
and return; get_finished_jobs() hands back the JobResults of jobs done since
the last call; drain_jobs() waits for all of them. lookup() asks kvtier's
in-memory index (no I/O) and answers HIT or MISS at once. A chunk that is
damaged on disk reads as a miss: its load job fails with the chunks that
did load named in successful_keys, and kvtier drops the bad entry, so the
next lookup misses and vLLM recomputes.

Shutdown. vLLM shuts its secondary tiers down, then the primary tier, which
unmaps its shared memory (/dev/shm/vllm_offload_*.mmap) only when nothing
exports it any more: shutdown() drops this tier's array over it (so does a
failed __init__), and never raises because the cache is full
(_plugin.close_engine: no flush without persist; with persist, the pages
that could not be made durable are one warning).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Tuple

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, Medium, RequestOffloadingContext
from vllm.v1.kv_offload.file_mapper import FileMapper
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec, OffloadKey, ReqContext
    from vllm.v1.kv_offload.tiering.backpressure import BackpressureDetector
    from vllm.v1.kv_offload.tiering.base import TransferJob

from ._plugin import (ChunkIO, LayoutRefused, chunk_layout, close_engine, default_spill_dir,
                      kv_dtype, model_fingerprint, open_engine, read_settings)

log = logging.getLogger("kvtier.vllm")


def _region_address(view: memoryview, block_bytes: int) -> Tuple[int, int, np.ndarray]:
    """(address of slot 0, slots, array over the region) of the primary
    tier's region, checked to be one C-contiguous block of whole slots (slot
    i is at base + i * stride). The array holds a buffer export of vLLM's
    shared memory: its owner must drop it before vLLM unmaps the region
    (KVTierTier.shutdown). Checked before the array is made, so that a
    refused view leaves no export behind in the traceback."""
    if not view.c_contiguous:
        raise ValueError("kvtier.vllm: the primary tier's memoryview is not contiguous")
    if view.nbytes % block_bytes:
        raise ValueError(f"kvtier.vllm: the primary region ({view.nbytes} bytes) is not whole "
                         f"chunks of {block_bytes} bytes")
    arr = np.asarray(view)
    return arr.__array_interface__["data"][0], arr.nbytes // block_bytes, arr


def _fingerprint(spec: OffloadingSpec, block_bytes: int) -> str:
    """vLLM's own storage identity (the fs tier's, with the rank kept) plus
    the chunk size."""
    try:
        fields = FileMapper.from_offloading_spec(root_dir="", offloading_spec=spec).get_run_config()
        parallel = spec.config.parallel
        extra = dict(rank=parallel.rank, dp=parallel.data_parallel_index)
    except AttributeError as exc:
        raise ValueError(f"kvtier.vllm: the offloading spec lacks the model identity "
                         f"({exc}); it is needed so that another model never matches") from None
    return model_fingerprint(engine="vllm", chunk_bytes=block_bytes, **extra,
                             **{k: repr(v) for k, v in fields.items()})


def _no_layout(spec: OffloadingSpec) -> str:
    """Why this tier gives kvtier no page layout (a lossy codec is refused
    with it). A chunk is blocks of every layer in RFC 42082's [L, B, H, N,
    C] (a cell C a head's K and V for one token) in the worker's stride
    order; the tier, made by the scheduler, is given the dtype, tokens per
    block, layer names and bytes per block (OffloadingConfig), not the K/V
    heads, head size or MLA of the worker's KV cache spec, nor that order
    (docs/codecs.md#plugins)."""
    try:
        kv_dtype(spec.config.model.dtype)
    except LayoutRefused as exc:
        return str(exc)
    except AttributeError:
        pass
    return ("vLLM's offloading config gives a secondary tier the dtype, tokens per block, "
            "layer names and bytes of a block, but not the K/V heads, head size, MLA or "
            "physical layout of the worker's KV cache spec, which the codecs need to find "
            "K and V in a block")


class KVTierTier(SecondaryTierManager):
    """A vLLM secondary tier backed by a kvtier engine (module doc). Called
    under the tiering manager's lock (never concurrently); the transfers run
    on one worker thread of its own."""

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(self, offloading_spec: OffloadingSpec, primary_kv_view: memoryview,
                 tier_type: str, backpressure_detector: BackpressureDetector | None = None,
                 locality: Any = None, **tier_params: Any) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        if locality is not None:
            from vllm.v1.kv_offload.base import Locality
            self.locality = Locality(locality)
        settings = read_settings(tier_params, strict=True)
        self._base, self._slots, self._region = _region_address(primary_kv_view,
                                                                self.block_size_bytes)
        try:
            self._open(offloading_spec, settings)
        except BaseException:
            # vLLM shuts its primary tier down, unmapping the region, while
            # this exception (and this half-made tier in its traceback) lives.
            self._region = None
            if getattr(self, "engine", None) is not None:
                self.engine.close()
            raise
        log.info("kvtier tier %r: %s", tier_type, self.kvtier_config)

    def _open(self, offloading_spec: OffloadingSpec, settings: Dict[str, object]) -> None:
        """The rest of __init__: kvtier opened for this model and chunk size,
        the worker thread."""
        block = self.block_size_bytes
        page_bytes, _ = chunk_layout(block, settings.get("page_bytes"))
        fp = _fingerprint(offloading_spec, block)
        parallel = offloading_spec.config.parallel
        replica = parallel.data_parallel_index if parallel.data_parallel_size > 1 else None
        if replica is not None and "spill_dir" not in settings:
            # Replicas of one model would otherwise share (and contend for)
            # one directory.
            settings["spill_dir"] = default_spill_dir("vllm", fp) + f"-d{replica}"
        self.engine, self.kvtier_config = open_engine(settings, page_bytes, fp, "vllm",
                                                      layout=_no_layout(offloading_spec))
        self._io = ChunkIO(self.engine, block)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvtier-vllm")
        self._done = queue.SimpleQueue()
        self._pending = set()
        self._pending_lock = threading.Lock()
        self._idle = threading.Condition(self._pending_lock)
        self._closed = False

    # ------------------------------------------------------------- naming

    @staticmethod
    def _name(key):
        return b"vllm:" + bytes(key)

    def _addrs(self, chunk_ids):
        out = []
        for cid in chunk_ids:
            cid = int(cid)
            if not 0 <= cid < self._slots:
                raise ValueError(f"kvtier.vllm: chunk id {cid} outside the primary region "
                                 f"of {self._slots} chunks")
            out.append(self._base + cid * self.block_size_bytes)
        return out

    # ------------------------------------------------------------ lookups

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        return LookupResult.HIT if self._io.exists([self._name(key)])[0] else LookupResult.MISS

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        return RequestOffloadingContext()

    # --------------------------------------------------------------- jobs

    def _submit(self, job, fn):
        keys = list(job.keys)
        addrs = self._addrs(job.chunk_ids)
        if len(keys) != len(addrs):
            raise ValueError(f"kvtier.vllm: job {job.job_id} has {len(keys)} keys and "
                             f"{len(addrs)} chunk ids")
        with self._pending_lock:
            self._pending.add(job.job_id)
        self._pool.submit(self._run, job.job_id, fn, keys, addrs)

    def _run(self, job_id, fn, keys, addrs):
        start = time.monotonic()
        try:
            result = fn(job_id, keys, addrs)
        except Exception:
            log.exception("kvtier: job %d failed", job_id)
            result = JobResult(job_id=job_id, success=False)
        result.transfer_time = time.monotonic() - start
        self._done.put(result)
        with self._pending_lock:
            self._pending.discard(job_id)
            self._idle.notify_all()

    def _store(self, job_id, keys, addrs):
        ok = self._io.put([self._name(k) for k in keys], addrs)
        return JobResult(job_id=job_id, success=all(ok),
                         transfer_bytes=sum(ok) * self.block_size_bytes)

    def _load(self, job_id, keys, addrs):
        ok = self._io.get([self._name(k) for k in keys], addrs)
        loaded = [k for k, good in zip(keys, ok) if good]
        if all(ok):
            return JobResult(job_id=job_id, success=True,
                             transfer_bytes=len(keys) * self.block_size_bytes)
        return JobResult(job_id=job_id, success=False, successful_keys=tuple(loaded) or None,
                         transfer_bytes=len(loaded) * self.block_size_bytes)

    def submit_store(self, job_metadata: TransferJob) -> None:
        self._submit(job_metadata, self._store)

    def submit_load(self, job_metadata: TransferJob) -> None:
        self._submit(job_metadata, self._load)

    def get_finished_jobs(self) -> list[JobResult]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def has_pending_work(self) -> bool:
        with self._pending_lock:
            return bool(self._pending)

    def drain_jobs(self) -> None:
        with self._pending_lock:
            self._idle.wait_for(lambda: not self._pending)

    # ---------------------------------------------------------- lifecycle

    def shutdown(self) -> None:
        """Finishes the queued jobs, lets go of the primary tier's memory
        (vLLM unmaps it next) and closes kvtier: with persist, flushed first
        (pages that cannot be made durable, as in a full cache, are a logged
        warning, not an exception); without, nothing to flush. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        # The array over the primary tier's region holds a buffer export of
        # vLLM's shared memory (/dev/shm/vllm_offload_*.mmap): while it
        # lives, the primary tier's cleanup cannot close the mmap and keeps
        # it mapped. No job is left to use the region's addresses.
        self._region = None
        close_engine(self.engine, self.kvtier_config["persist"], log, "vllm tier")
