"""kvtier.vllm.KVTierTier loaded by vLLM 0.33.0 itself: an OffloadingConfig
whose kv_connector_extra_config names TieringOffloadingSpec and a secondary
tier {"type": "KVTierTier", "module_path": "kvtier.vllm", ...}, built by
OffloadingSpecFactory, the tier made by vLLM's SecondaryTierFactory, and
TieringOffloadingManager driving it: store to the CPU primary tier (cascade
to kvtier) -> the primary tier evicts -> lookup -> promotion (load back) ->
read from the primary tier. Byte-exact, across a process restart (persist),
a different model missing, a damaged page missing."""

import hashlib
import logging
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_loss_reported, damage_pages

from vllm.v1.kv_offload.base import (LookupResult, ReqContext, ScheduleEndContext,  # noqa: E402
                                     make_offload_key)
from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig,  # noqa: E402
                                       OffloadingGroupConfig, OffloadingModelConfig,
                                       OffloadingParallelConfig)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402
from vllm.v1.kv_offload.tiering.manager import TieringOffloadingManager  # noqa: E402

from kvtier import KvtError  # noqa: E402
from kvtier.vllm import KVTierTier  # noqa: E402

# Blocks of 16 KiB (all layers of one worker), 2 blocks per offloaded chunk,
# a primary CPU tier of 4 chunks.
BLOCK, BLOCKS_PER_CHUNK, PRIMARY_CHUNKS = 16384, 2, 4
MODEL = "kvtier-test/tiny"


def make_config(tier, model=MODEL, dtype="bfloat16"):
    extra = {"spec_name": "TieringOffloadingSpec",
             "cpu_bytes_to_use": PRIMARY_CHUNKS * BLOCK * BLOCKS_PER_CHUNK,
             "secondary_tiers": [dict(type="KVTierTier", module_path="kvtier.vllm", **tier)]}
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0", "l1"),
                                      group_id=0),),
        worker_kv_bytes_per_block=BLOCK, enable_kv_cache_events=False, extra_config=extra,
        engine_id=f"kvtier-test-{uuid.uuid4().hex}",
        model=OffloadingModelConfig(name=model, dtype=dtype),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=BLOCKS_PER_CHUNK),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False))


class Offload:
    """vLLM's offloading stack as its scheduler-side connector builds it,
    stepped by hand."""

    def __init__(self, tier, model=MODEL, dtype="bfloat16"):
        self.spec = OffloadingSpecFactory.create_spec(make_config(tier, model, dtype))
        self.m = self.spec.get_manager()
        assert isinstance(self.m, TieringOffloadingManager)
        self.tier = self.m.secondary_tiers[0]
        assert isinstance(self.tier, KVTierTier)
        self.region = np.asarray(self.m.primary_tier.get_kv_memoryview()).view(np.uint8)
        self.region = self.region.reshape(self.region.shape[0], -1)
        self.chunk = self.tier.block_size_bytes
        self.ctx = ReqContext(req_id="r0")
        self.m.on_new_request(self.ctx)

    def step(self):
        self.m.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))

    def settle(self):
        """Every tier job finished and processed by the manager."""
        self.tier.drain_jobs()
        self.step()

    def store(self, keys, data):
        """GPU -> primary (the bytes written where the manager says), then
        complete_store, which cascades to kvtier."""
        out = self.m.prepare_store(keys, self.ctx)
        assert out is not None
        for k, cid in zip(out.keys_to_store, out.store_spec.chunk_ids):
            self.region[int(cid)] = np.frombuffer(data[k], dtype=np.uint8)
        self.m.complete_store(out.keys_to_store, self.ctx, success=True)
        return out

    def fetch(self, keys):
        """lookup until HIT or MISS, stepping the promotions in between;
        then the bytes read from the primary tier (None for a miss)."""
        result = {}
        for _ in range(10):
            pending = False
            for k in keys:
                if k in result:
                    continue
                r = self.m.lookup(k, self.ctx)
                if r is LookupResult.HIT:
                    spec = self.m.prepare_load([k], self.ctx)
                    result[k] = self.region[int(spec.chunk_ids[0])].tobytes()
                    self.m.complete_load([k], self.ctx)
                elif r is LookupResult.MISS:
                    result[k] = None
                else:
                    pending = True
            if not pending:
                break
            self.step()
            self.settle()
        return [result.get(k, "pending") for k in keys]

    def close(self):
        """vLLM's shutdown order: the tiers, then the primary tier, which
        unmaps its shared memory unless something still exports it. This
        helper's own view of it goes first."""
        self.region = None
        self.m.on_request_finished(self.ctx)
        self.settle()
        self.m.shutdown()


def keys_of(tag, n):
    return [make_offload_key(hashlib.sha256(f"{tag}{i}".encode()).digest(), 0)
            for i in range(n)]


def chunk_data(keys, size, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.integers(0, 256, size, dtype=np.uint8).tobytes() for k in keys}


def store_and_evict(o, keys, data):
    """Stores keys (cascaded to kvtier), then as many other chunks as the
    primary tier holds, so that it evicts every one of keys."""
    o.store(keys, data)
    o.settle()
    filler = keys_of("filler", PRIMARY_CHUNKS)
    out = o.store(filler, chunk_data(filler, o.chunk, 99))
    o.settle()
    assert set(keys) <= set(out.evicted_keys), "the primary tier did not evict the chunks"
    assert all(o.m.primary_tier.lookup(k, o.ctx) is LookupResult.MISS for k in keys)


@pytest.fixture
def off(spill_dir):
    o = Offload(dict(spill_dir=spill_dir, page_bytes=8192, dram_bytes="64KiB",
                     ssd_bytes="4MiB"))
    yield o
    o.close()


def test_store_evict_lookup_load(off):
    keys = keys_of("a", 3)
    data = chunk_data(keys, off.chunk, 1)
    store_and_evict(off, keys, data)
    assert [off.tier.lookup(k, off.ctx) for k in keys] == [LookupResult.HIT] * 3
    assert off.fetch(keys) == [data[k] for k in keys]
    # The chunk spans several kvtier pages (page_bytes 8192) and went
    # through kvtier's SSD tier (64 KiB of DRAM hold 8 pages; 28 went by).
    st = off.tier.engine.stats()
    assert off.chunk > 8192 and st.resident_pages[2] > 0


def test_jobs_complete_in_the_background(off):
    keys = keys_of("b", 2)
    data = chunk_data(keys, off.chunk, 2)
    gate = threading.Event()
    off.tier._pool.submit(gate.wait)  # the tier's worker is busy until set
    try:
        off.store(keys, data)  # cascades: submit_store returns at once
        assert off.tier.has_pending_work()
        assert list(off.tier.get_finished_jobs()) == []
        assert [off.tier.lookup(k, off.ctx) for k in keys] == [LookupResult.MISS] * 2
    finally:
        gate.set()
    off.tier.drain_jobs()
    done = list(off.tier.get_finished_jobs())
    assert len(done) == 1 and done[0].success and done[0].transfer_bytes == 2 * off.chunk
    assert [off.tier.lookup(k, off.ctx) for k in keys] == [LookupResult.HIT] * 2
    off.step()


def test_unknown_setting_is_refused(spill_dir):
    with pytest.raises(ValueError, match="ssd_byte"):
        Offload(dict(spill_dir=spill_dir, ssd_byte="4MiB"))


@pytest.mark.parametrize("codec", ["int4", "fp8"])
def test_lossy_codec_refused_without_the_block_layout(spill_dir, codec):
    """The tier is given no heads, head size or physical layout of vLLM's
    blocks, so a lossy codec is refused at open, saying so."""
    with pytest.raises(ValueError, match=f"codec {codec} quantises .*not the K/V heads, head "
                                         "size, MLA or physical layout"):
        Offload(dict(spill_dir=spill_dir, codec=codec))


@pytest.mark.parametrize("dtype,why", [("fp8_e4m3", "already 8-bit"),
                                       ("float32", "not a 16-bit float")])
def test_lossy_codec_refused_for_the_kv_dtype(spill_dir, dtype, why):
    with pytest.raises(ValueError, match=f"codec int8 quantises .*KV dtype {dtype} is {why}"):
        Offload(dict(spill_dir=spill_dir, codec="int8"), dtype=dtype)


def test_no_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    o = Offload({})
    try:
        assert o.tier.kvtier_config["ssd_dir"].startswith(str(tmp_path / "xdg" / "kvtier" / "vllm"))
        keys = keys_of("c", 2)
        data = chunk_data(keys, o.chunk, 3)
        store_and_evict(o, keys, data)
        assert o.fetch(keys) == [data[k] for k in keys]
    finally:
        o.close()


PERSIST = dict(page_bytes=8192, dram_bytes="64KiB", ssd_bytes="4MiB", persist=True)

STORE = """
import sys
sys.path.insert(0, {tests!r})
import test_vllm as t
o = t.Offload(dict(t.PERSIST, spill_dir={spill!r}))
try:
    keys = t.keys_of("p", 4)
    t.store_and_evict(o, keys, t.chunk_data(keys, o.chunk, 7))
finally:
    o.close()
"""


def read_back(spill, model=MODEL):
    o = Offload(dict(PERSIST, spill_dir=spill), model=model)
    try:
        return o.fetch(keys_of("p", 4)), o.chunk
    finally:
        o.close()


def test_restart_persist_other_model_and_damage(spill_dir, run_child):
    run_child(STORE.format(tests=str(Path(__file__).parent), spill=spill_dir))
    keys = keys_of("p", 4)
    got, chunk = read_back(spill_dir)  # another process than the one that stored
    data = chunk_data(keys, chunk, 7)
    assert got == [data[k] for k in keys]
    # One page of chunk 2 damaged in kvtier's segment file: a miss (its load
    # job fails, kvtier drops it), never other bytes; the rest read exact.
    assert damage_pages(spill_dir, data[keys[2]][8192:8192 + 64]) == 1
    got, _ = read_back(spill_dir)
    assert got[2] is None
    assert [g for i, g in enumerate(got) if i != 2] == [data[k] for i, k in enumerate(keys) if i != 2]
    # Another model opening the same directory finds nothing of this one.
    assert read_back(spill_dir, model="kvtier-test/other")[0] == [None] * 4


# A cache that fills: chunks of 4 pages, 8 pages of DRAM and 16 of SSD; 16
# chunks stored (64 pages) make kvtier evict.
SMALL = dict(page_bytes=8192, dram_bytes="64KiB", ssd_bytes="128KiB")


def fill(o, tag, n=16, seed=21):
    """Stores n chunks, two at a time, each cascaded to kvtier; returns the
    tier's stats after."""
    keys = keys_of(tag, n)
    data = chunk_data(keys, o.chunk, seed)
    for i in range(0, n, 2):
        o.store(keys[i:i + 2], data)
        o.settle()
    return o.tier.engine.stats()


def test_shutdown_of_a_full_cache(spill_dir, caplog):
    """Without persist a full cache shuts down quietly: nothing is to be
    made durable (issue 32: KvtFull from every shutdown of a cache that had
    filled, and vLLM then skipped its primary tier's cleanup)."""
    o = Offload(dict(SMALL, spill_dir=spill_dir))
    assert fill(o, "full").evicted_pages > 0
    with caplog.at_level(logging.WARNING, logger="kvtier.vllm"):
        o.close()
    assert o.tier.engine.closed
    assert [r for r in caplog.records if r.name == "kvtier.vllm"] == []


def test_shutdown_of_a_full_persisted_cache_warns(spill_dir, caplog, pages_at_close):
    """With persist: no exception; the pages that could not be made durable
    are counted in one warning, and a reopen finds all the others."""
    o = Offload(dict(SMALL, spill_dir=spill_dir, persist=True))
    assert fill(o, "full").evicted_pages > 0
    with caplog.at_level(logging.WARNING, logger="kvtier.vllm"):
        o.close()
    assert o.tier.engine.closed and len(pages_at_close) == 1
    assert_loss_reported(caplog.records, "kvtier.vllm", pages_at_close[0],
                         o.tier.kvtier_config)


def test_shutdown_lets_vllm_unmap_the_primary_tier(spill_dir):
    """After the tier's shutdown nothing of kvtier's exports the CPU tier's
    shared memory, so vLLM's cleanup unmaps it (issue 32: "Keeping
    /dev/shm/vllm_offload_....mmap mapped")."""
    o = Offload(dict(SMALL, spill_dir=spill_dir))
    fill(o, "shm", n=4)
    region = o.m.primary_tier._mmap_region
    o.close()
    assert region.mmap_obj is None, "vLLM kept the shared memory mapped"


def test_failed_setup_lets_vllm_unmap_the_primary_tier(spill_dir, monkeypatch):
    """A tier that refuses its settings after seeing the primary region:
    vLLM shuts the primary tier down while the exception is raised, and
    nothing of kvtier's may still export the region then."""
    from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
    cleaned = []
    real_cleanup = SharedOffloadRegion.cleanup

    def cleanup(self):
        real_cleanup(self)
        cleaned.append(self.mmap_obj)

    monkeypatch.setattr(SharedOffloadRegion, "cleanup", cleanup)
    with pytest.raises(ValueError, match="page_bytes"):
        Offload(dict(SMALL, spill_dir=spill_dir, page_bytes=1000))
    assert cleaned == [None], "vLLM kept the shared memory mapped"


# ------------------------------------------ two instances sharing a cluster

# Two vLLM instances (two processes) whose kvtier tiers name one cluster in
# their secondary tier's entry; each has its own spill directory.
SHARE = dict(page_bytes=8192, dram_bytes="64KiB", ssd_bytes="4MiB")

SHARE_STORE = """
import sys
sys.path.insert(0, {tests!r})
import test_vllm as t
o = t.Offload(dict(t.SHARE, spill_dir={spill!r}, **{remote!r}))
try:
    keys = t.keys_of("shared", 4)
    o.store(keys, t.chunk_data(keys, o.chunk, 31))
    o.settle()
finally:
    o.close()   # vLLM's shutdown: what is queued for the cluster is sent
"""


def test_two_instances_share_through_the_cluster(tmp_path, run_child, redis_cluster):
    """Instance A (another process) stores chunks through vLLM's cascade
    and shuts down; instance B, with empty local tiers of its own, finds
    them (lookup HIT from the cluster) and promotes them byte-exact."""
    from kvtier._lib import KVT_TIER_REMOTE
    remote = redis_cluster.settings()
    run_child(SHARE_STORE.format(tests=str(Path(__file__).parent), spill=str(tmp_path / "a"),
                                 remote=remote))
    o = Offload(dict(SHARE, spill_dir=str(tmp_path / "b"), **remote))
    try:
        keys = keys_of("shared", 4)
        assert o.tier.engine.stats().pages == 0
        assert [o.tier.lookup(k, o.ctx) for k in keys] == [LookupResult.HIT] * 4
        assert o.tier.lookup(keys_of("never", 1)[0], o.ctx) is LookupResult.MISS
        where = o.tier.engine.exists(o.tier._io.keys([o.tier._name(k) for k in keys])).where
        assert set(where) == {KVT_TIER_REMOTE}
        data = chunk_data(keys, o.chunk, 31)
        assert o.fetch(keys) == [data[k] for k in keys]
        # Each page came from the cluster once, and none is sent back.
        st = o.tier.engine.stats()
        assert st.remote_hits == len(where) and st.remote_published == 0
        assert st.remote_corrupt == st.remote_errors == st.remote_timeouts == 0
    finally:
        o.close()


def test_remote_url_not_redis_is_refused(spill_dir):
    with pytest.raises(ValueError, match="remote_url must start with redis://") as ei:
        Offload(dict(SHARE, spill_dir=spill_dir,
                     remote_url="rediss://default:not-this-one@127.0.0.1:7400"))
    assert "not-this-one" not in str(ei.value)


def test_password_in_the_url_is_never_shown(tmp_path, redis_cluster, caplog):
    """The logged configuration carries the URL without its user and
    password; a wrong password is an error at setup naming the cluster,
    not the password."""
    remote = dict(remote_timeout_ms=redis_cluster.settings()["remote_timeout_ms"])
    with caplog.at_level(logging.INFO, logger="kvtier.vllm"):
        o = Offload(dict(SHARE, spill_dir=str(tmp_path / "a"),
                         remote_url=redis_cluster.url_with_password(), **remote))
    try:
        redacted = redis_cluster.url.replace("redis://", "redis://***@")
        assert o.tier.kvtier_config["remote_url"] == redacted
        logged = [r.getMessage() for r in caplog.records if r.name == "kvtier.vllm"]
        assert any(redacted in m for m in logged), logged
        assert not any("s3cret" in m for m in logged), logged
        assert o.tier.engine.stats().remote_nodes == 3   # it did log in
    finally:
        o.close()
    with pytest.raises(KvtError, match="authentication failed") as ei:
        Offload(dict(SHARE, spill_dir=str(tmp_path / "b"),
                     remote_url=redis_cluster.url_with_password("wrong-pass-4x"), **remote))
    assert "127.0.0.1:74" in str(ei.value) and "wrong-pass-4x" not in str(ei.value)
