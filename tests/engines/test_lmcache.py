"""kvtier.lmcache.KVTierStoragePlugin loaded by LMCache 0.5.6 itself: a YAML
config with storage_plugins/extra_config, read by LMCacheEngineConfig, and
LMCache's StorageManager putting chunks, its CPU backend evicting them, and
gets served by kvtier. Byte-exact, across a process restart (persist), a
different model missing, a damaged page missing."""

import ctypes
import logging
from pathlib import Path

import pytest
import torch

from conftest import assert_loss_reported, damage_pages

from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.event_manager import EventManager  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.storage_manager import StorageManager  # noqa: E402

from kvtier.lmcache import KVTierStoragePlugin  # noqa: E402

# A small model: 4 layers, 2 KV heads of 64, chunks of 16 tokens, bfloat16:
# a full chunk is 2 * 4 * 16 * 128 * 2 = 32 KiB (8 kvtier pages of 4 KiB
# when page_bytes is set, else one page).
LAYERS, HEADS, HDIM, CHUNK = 4, 2, 64, 16
DTYPE = torch.bfloat16

CONFIG = """\
chunk_size: {chunk}
local_cpu: true
max_local_cpu_size: 0.05
storage_plugins: ["kvtier"]
extra_config:
  storage_plugin.kvtier.module_path: kvtier.lmcache
  storage_plugin.kvtier.class_name: KVTierStoragePlugin
{settings}"""


def write_config(path, **settings):
    lines = "".join(f"  storage_plugin.kvtier.{k}: {v}\n" for k, v in settings.items())
    path.write_text(CONFIG.format(chunk=CHUNK, settings=lines))
    return str(path)


def open_manager(config_path, model="kvtier-test/tiny", mla_row=0):
    """mla_row: an MLA model of that row (latent + RoPE) a token and layer."""
    config = LMCacheEngineConfig.from_file(config_path)
    shape = (LAYERS, 1, CHUNK, 1, mla_row) if mla_row else (LAYERS, 2, CHUNK, HEADS, HDIM)
    meta = LMCacheMetadata(model_name=model, world_size=1, local_world_size=1, worker_id=0,
                           local_worker_id=0, kv_dtype=DTYPE, kv_shape=shape,
                           chunk_size=CHUNK, role="worker", use_mla=bool(mla_row))
    sm = StorageManager(config, meta, EventManager())
    plugin = sm.storage_backends.get("kvtier")
    assert isinstance(plugin, KVTierStoragePlugin), \
        f"LMCache did not load the plug-in: backends {list(sm.storage_backends)}"
    return sm, plugin, meta


def key(meta, h):
    return CacheEngineKey(meta.model_name, meta.world_size, meta.worker_id, h, DTYPE)


def chunk_data(seed, n, size):
    """n chunks of size seeded random bytes (the same in every process)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (size,), dtype=torch.uint8, generator=g).numpy().tobytes()
            for _ in range(n)]


def make_chunks(sm, meta, n, seed, tokens=CHUNK):
    """n MemoryObjs from LMCache's allocator holding chunk_data(); returns
    (keys, objs, their bytes)."""
    shape = meta.get_shapes(tokens)[0]
    objs = [sm.allocate(shape, DTYPE) for _ in range(n)]
    assert all(o is not None for o in objs)
    data = chunk_data(seed, n, objs[0].get_size())
    for o, d in zip(objs, data):
        ctypes.memmove(o.data_ptr, d, len(d))
    return [key(meta, seed * 1000 + i) for i in range(n)], objs, data


FULL_BYTES = 2 * LAYERS * CHUNK * HEADS * HDIM * 2


def put_and_evict(sm, plugin, keys, objs):
    """StorageManager puts; the plug-in finishes in the background; LMCache's
    CPU backend then evicts the chunks (its own remove)."""
    sm.batched_put(keys, objs)
    plugin.wait_puts()
    cpu = sm.storage_backends["LocalCPUBackend"]
    for k in keys:
        assert cpu.remove(k, force=True)
        assert not cpu.contains(k)


def retrieve(sm, keys):
    """LMCache's retrieve path: batched_contains gives the block mapping
    (which backend holds which leading keys), batched_get reads each
    backend's keys from it. Chunks past the hit prefix are None."""
    hit, mapping = sm.batched_contains(list(keys))
    out = []
    for backend, ks in mapping.items():
        out += sm.batched_get(list(ks), location=backend)
    return out + [None] * (len(keys) - hit)


def got_bytes(objs):
    return [None if o is None else ctypes.string_at(o.data_ptr, o.get_size()) for o in objs]


@pytest.fixture
def lm(tmp_path, spill_dir):
    path = write_config(tmp_path / "lmcache.yaml", spill_dir=spill_dir, page_bytes=4096,
                        dram_bytes="128KiB", ssd_bytes="8MiB")
    sm, plugin, meta = open_manager(path)
    yield sm, plugin, meta
    sm.close()


def test_put_evict_get_served_by_kvtier(lm):
    sm, plugin, meta = lm
    keys, objs, data = make_chunks(sm, meta, 6, seed=1)
    put_and_evict(sm, plugin, keys, objs)
    assert [sm.contains(k) for k in keys] == ["kvtier"] * 6
    assert sm.batched_contains(keys) == (6, {"kvtier": keys})
    got = retrieve(sm, keys)
    assert got_bytes(got) == data
    # More than kvtier's DRAM tier holds (128 KiB: 32 pages of 4 KiB; 48
    # went by): some chunks were on the SSD tier.
    assert plugin.engine.stats().hits[2] + plugin.engine.stats().resident_pages[2] > 0
    for o in got:
        o.ref_count_down()


def test_partial_chunk_round_trip(lm):
    sm, plugin, meta = lm
    keys, objs, data = make_chunks(sm, meta, 2, seed=2, tokens=5)
    put_and_evict(sm, plugin, keys, objs)
    got = retrieve(sm, keys)
    assert got_bytes(got) == data
    assert [tuple(o.get_shape()) for o in got] == [tuple(meta.get_shapes(5)[0])] * 2


def test_put_does_not_block_on_kvtier_io(lm):
    sm, plugin, meta = lm
    keys, objs, data = make_chunks(sm, meta, 2, seed=3)
    with plugin._io_lock:  # the worker cannot store while this is held
        sm.batched_put(keys, objs)
        assert all(plugin.exists_in_put_tasks(k) for k in keys)
        assert not any(plugin.contains(k) for k in keys)
    plugin.wait_puts()
    assert not any(plugin.exists_in_put_tasks(k) for k in keys)
    assert all(plugin.contains(k) for k in keys)


def test_remove(lm):
    sm, plugin, meta = lm
    keys, objs, _ = make_chunks(sm, meta, 2, seed=4)
    put_and_evict(sm, plugin, keys, objs)
    assert plugin.remove(keys[0])
    assert sm.contains(keys[0]) is None and sm.contains(keys[1]) == "kvtier"
    assert retrieve(sm, [keys[0]]) == [None]


def test_unknown_setting_is_refused(tmp_path, spill_dir):
    config = LMCacheEngineConfig.from_file(
        write_config(tmp_path / "c.yaml", spill_dir=spill_dir, dram_byte="1GiB"))
    meta = LMCacheMetadata("m", 1, 1, 0, 0, DTYPE, (LAYERS, 2, CHUNK, HEADS, HDIM),
                           chunk_size=CHUNK, role="worker")
    with pytest.raises(ValueError, match="storage_plugin.kvtier.dram_byte"):
        KVTierStoragePlugin(dst_device="cpu", config=config, metadata=meta,
                            local_cpu_backend=object())


def test_no_settings(tmp_path, monkeypatch):
    """Registration only: the spill directory goes under $XDG_CACHE_HOME/kvtier
    and the capacities are sized by kvtier."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sm, plugin, meta = open_manager(write_config(tmp_path / "c.yaml"))
    try:
        cfg = plugin.kvtier_config
        assert cfg["ssd_dir"].startswith(str(tmp_path / "xdg" / "kvtier" / "lmcache"))
        assert cfg["dram_bytes"] > 0 and cfg["ssd_bytes"] > 0
        keys, objs, data = make_chunks(sm, meta, 3, seed=5)
        put_and_evict(sm, plugin, keys, objs)
        assert got_bytes(retrieve(sm, keys)) == data
    finally:
        sm.close()


STORE = """
import sys, hashlib
sys.path.insert(0, {tests!r})
import test_lmcache as t
sm, plugin, meta = t.open_manager({config!r})
try:
    keys, objs, data = t.make_chunks(sm, meta, 4, seed=9)
    t.put_and_evict(sm, plugin, keys, objs)
    for d in data:
        print(hashlib.sha256(d).hexdigest())
finally:
    sm.close()
"""


def read_back(config, model="kvtier-test/tiny"):
    """Opens LMCache in this process and reads the 4 chunks STORE wrote:
    sha256 of each, or 'miss'."""
    import hashlib
    sm, plugin, meta = open_manager(config, model=model)
    try:
        keys = [key(meta, h) for h in range(9000, 9004)]
        return ["miss" if b is None else hashlib.sha256(b).hexdigest()
                for b in got_bytes(retrieve(sm, keys))]
    finally:
        sm.close()


def test_restart_persist_other_model_and_damage(tmp_path, spill_dir, run_child):
    from pathlib import Path
    config = write_config(tmp_path / "c.yaml", spill_dir=spill_dir, page_bytes=4096,
                          dram_bytes="128KiB", ssd_bytes="8MiB", persist="true")
    # Stored by another process, which then exits.
    stored = run_child(STORE.format(tests=str(Path(__file__).parent), config=config)).split()
    assert len(stored) == 4
    # This process reads every chunk back, exact.
    assert read_back(config) == stored
    # One page of chunk 1 damaged in kvtier's segment file: that chunk is a
    # miss, the others still read exact.
    data = chunk_data(9, 4, FULL_BYTES)
    assert damage_pages(spill_dir, data[1][4096:4096 + 64]) == 1
    got = read_back(config)
    assert got[1] == "miss"
    assert [g for i, g in enumerate(got) if i != 1] == [s for i, s in enumerate(stored) if i != 1]
    # Another model opening the same directory finds nothing of this one.
    assert read_back(config, model="kvtier-test/other") == ["miss"] * 4


# A cache that fills: full chunks of 8 pages of 4 KiB, 16 pages of DRAM and
# 32 of SSD; 12 chunks put (96 pages) make kvtier evict.
SMALL = dict(page_bytes=4096, dram_bytes="64KiB", ssd_bytes="128KiB")


def fill(sm, plugin, meta):
    keys, objs, _ = make_chunks(sm, meta, 12, seed=13)
    put_and_evict(sm, plugin, keys, objs)
    return plugin.engine.stats()


def test_close_of_a_full_cache(tmp_path, spill_dir, caplog):
    """Without persist a full cache closes quietly: nothing is to be made
    durable (issue 32: KvtFull from every close of a cache that had filled)."""
    sm, plugin, meta = open_manager(write_config(tmp_path / "c.yaml", spill_dir=spill_dir,
                                                 **SMALL))
    try:
        assert fill(sm, plugin, meta).evicted_pages > 0
        with caplog.at_level(logging.WARNING, logger="kvtier.lmcache"):
            plugin.close()   # what LMCache's StorageManager.close() calls
        assert plugin.engine.closed
        assert [r for r in caplog.records if r.name == "kvtier.lmcache"] == []
    finally:
        sm.close()


def test_close_of_a_full_persisted_cache_warns(tmp_path, spill_dir, caplog, pages_at_close):
    """With persist: no exception; the pages that could not be made durable
    are counted in one warning, and a reopen finds all the others."""
    sm, plugin, meta = open_manager(write_config(tmp_path / "c.yaml", spill_dir=spill_dir,
                                                 persist="true", **SMALL))
    try:
        assert fill(sm, plugin, meta).evicted_pages > 0
        with caplog.at_level(logging.WARNING, logger="kvtier.lmcache"):
            plugin.close()
        assert plugin.engine.closed and len(pages_at_close) == 1
    finally:
        sm.close()
    assert_loss_reported(caplog.records, "kvtier.lmcache", pages_at_close[0],
                         plugin.kvtier_config)


# ------------------------------------------ two instances sharing a cluster

# Two LMCache instances (two processes) whose kvtier plug-ins name one
# cluster in their extra_config; each has its own spill directory.
SHARE = dict(page_bytes=4096, dram_bytes="128KiB", ssd_bytes="8MiB")

SHARE_STORE = """
import sys
sys.path.insert(0, {tests!r})
import test_lmcache as t
sm, plugin, meta = t.open_manager({config!r})
try:
    for seed, tokens in ((41, t.CHUNK), (42, 5)):   # full chunks, and partial ones
        keys, objs, data = t.make_chunks(sm, meta, 3, seed=seed, tokens=tokens)
        t.put_and_evict(sm, plugin, keys, objs)
finally:
    sm.close()   # the plug-in's close: what is queued for the cluster is sent
"""


def test_two_instances_share_through_the_cluster(tmp_path, run_child, redis_cluster):
    """Instance A (another process) puts chunks through LMCache's
    StorageManager and closes; instance B, with empty local tiers of its
    own, finds them (batched_contains: all in kvtier) and retrieves them
    byte-exact, full chunks and partial (self-describing) ones."""
    remote = redis_cluster.settings()
    run_child(SHARE_STORE.format(tests=str(Path(__file__).parent), config=write_config(
        tmp_path / "a.yaml", spill_dir=tmp_path / "a", **SHARE, **remote)))
    sm, plugin, meta = open_manager(write_config(tmp_path / "b.yaml", spill_dir=tmp_path / "b",
                                                 **SHARE, **remote))
    try:
        assert plugin.engine.stats().pages == 0
        for seed, tokens in ((41, CHUNK), (42, 5)):
            keys = [key(meta, seed * 1000 + i) for i in range(3)]
            assert sm.batched_contains(keys) == (3, {"kvtier": keys})
            got = retrieve(sm, keys)
            size = FULL_BYTES * tokens // CHUNK
            assert got_bytes(got) == chunk_data(seed, 3, size)
            assert [tuple(o.get_shape()) for o in got] == [tuple(meta.get_shapes(tokens)[0])] * 3
            for o in got:
                o.ref_count_down()
        assert not plugin.contains(key(meta, 7))
        # Each page came from the cluster once: 3 full chunks of 8 pages and
        # 3 partial ones of 3 (10 KiB and the 256-byte header); none of them
        # is sent back.
        st = plugin.engine.stats()
        assert st.remote_hits == 3 * 8 + 3 * 3 and st.remote_published == 0
        assert st.remote_corrupt == st.remote_errors == st.remote_timeouts == 0
    finally:
        sm.close()


def test_remote_url_not_redis_is_refused(tmp_path, spill_dir):
    config = LMCacheEngineConfig.from_file(write_config(
        tmp_path / "c.yaml", spill_dir=spill_dir,
        remote_url="rediss://default:not-this-one@127.0.0.1:7400"))
    meta = LMCacheMetadata("m", 1, 1, 0, 0, DTYPE, (LAYERS, 2, CHUNK, HEADS, HDIM),
                           chunk_size=CHUNK, role="worker")
    with pytest.raises(ValueError, match="remote_url must start with redis://") as ei:
        KVTierStoragePlugin(dst_device="cpu", config=config, metadata=meta,
                            local_cpu_backend=object())
    assert "not-this-one" not in str(ei.value)


def test_password_in_the_url_is_never_shown(tmp_path, redis_cluster, caplog):
    """The logged configuration carries the URL without its user and
    password (with '@' in it, unescaped, as kvtier takes it)."""
    url = redis_cluster.url_with_password()
    with caplog.at_level(logging.INFO, logger="kvtier.lmcache"):
        sm, plugin, meta = open_manager(write_config(
            tmp_path / "c.yaml", spill_dir=tmp_path / "a", **SHARE, remote_url=f'"{url}"',
            remote_timeout_ms=redis_cluster.settings()["remote_timeout_ms"]))
    try:
        redacted = redis_cluster.url.replace("redis://", "redis://***@")
        assert plugin.kvtier_config["remote_url"] == redacted
        logged = [r.getMessage() for r in caplog.records if r.name == "kvtier.lmcache"]
        assert any(redacted in m for m in logged), logged
        assert not any("s3cret" in m for m in logged), logged
        assert plugin.engine.stats().remote_nodes == 3   # it did log in
    finally:
        sm.close()


# ------------------------------------------------------------------ codecs
#
# A full chunk is one kvtier page keyed KVT_ALL_LAYERS, its layout LMCache's
# KV_2LTD (every layer's K, then every layer's V: KVT_KV_SPLIT_LAYERS). K has
# the outlier channels real keys have (one in 32 of every head, N(+-12, 3)
# against N(0, 1)): quantised along the wrong axis or at the wrong place
# they would cost K several times the error below (docs/codecs.md#axes).
# Measured here (12 chunks, 9 read back from the SSD tier), the largest
# chunk's RMS error relative to the data, K and V:
#   int4 0.031 / 0.091, int8 0.0018 / 0.0055, fp8 0.027 / 0.027;
# the same chunks described as token-major layers (V of layer 0 read as K
# of layer 1, ...): K int4 0.144, int8 0.0084, past the tolerances.
TOLERANCE = {"int4": (0.06, 0.12), "int8": (0.004, 0.008), "fp8": (0.04, 0.04)}


def kv_chunks(n, seed, dtype=DTYPE):
    """n chunks [2, LAYERS, CHUNK, HEADS * HDIM] of K with outlier channels
    and plain V."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        c = torch.randn(2, LAYERS, CHUNK, HEADS * HDIM, generator=g)
        col = torch.arange(HEADS * HDIM) % HDIM
        outlier = (col % 32) == 5
        sign = torch.where((col // 32) % 2 == 1, 12.0, -12.0)
        c[0][..., outlier] = c[0][..., outlier] * 3 + sign[outlier]
        out.append(c.to(dtype))
    return out


def put_kv_chunks(sm, meta, chunks, seed):
    objs = [sm.allocate(meta.get_shapes(CHUNK)[0], DTYPE) for _ in chunks]
    for o, c in zip(objs, chunks):
        o.tensor.copy_(c)
    return [key(meta, seed * 1000 + i) for i in range(len(chunks))], objs


def rms_rel(got, want):
    got, want = got.float(), want.float()
    return float(((got - want) ** 2).sum().sqrt() / (want ** 2).sum().sqrt())


@pytest.mark.parametrize("codec", ["int4", "fp8", "int8", "none"])
def test_codec_through_the_plugin(tmp_path, spill_dir, codec):
    """Chunks put through LMCache, evicted from its CPU backend and from
    kvtier's DRAM (4 pages of 12) to the SSD tier, read back through
    LMCache: within the codec's tolerance (none: bit-exact); the partial
    chunk, stored self-describing, exact under every codec."""
    path = write_config(tmp_path / "c.yaml", spill_dir=spill_dir, codec=codec,
                        dram_bytes="128KiB", ssd_bytes="8MiB")
    sm, plugin, meta = open_manager(path)
    try:
        cfg = plugin.kvtier_config
        assert plugin.page_bytes == FULL_BYTES
        if codec != "none":
            assert (cfg["kv_order"], cfg["n_layers"], cfg["page_tokens"], cfg["kv_heads"],
                    cfg["head_dim"], cfg["kv_dtype"]) == ("split_layers", LAYERS, CHUNK, HEADS,
                                                          HDIM, "bf16")
        chunks = kv_chunks(12, seed=11)
        keys, objs = put_kv_chunks(sm, meta, chunks, seed=11)
        pkeys, pobjs, pdata = make_chunks(sm, meta, 1, seed=12, tokens=5)
        put_and_evict(sm, plugin, keys + pkeys, objs + pobjs)
        st = plugin.engine.stats()
        assert st.resident_pages[2] >= 8
        got = retrieve(sm, keys + pkeys)
        assert got_bytes(got[-1:]) == pdata
        errs, quantised = [], 0
        for o, want in zip(got[:-1], chunks):
            t = o.tensor.view(want.shape)
            if codec == "none":
                assert torch.equal(t, want)
                continue
            quantised += not torch.equal(t, want)
            errs.append((rms_rel(t[0], want[0]), rms_rel(t[1], want[1])))
        for o in got:
            o.ref_count_down()
        if codec != "none":
            k = max(e[0] for e in errs)
            v = max(e[1] for e in errs)
            print(f"lmcache {codec}: {quantised} of 12 chunks quantised; RMS rel K {k:.4f} "
                  f"V {v:.4f}")
            assert quantised >= 8
            assert k <= TOLERANCE[codec][0] and v <= TOLERANCE[codec][1], (k, v)
    finally:
        sm.close()


@pytest.mark.parametrize("dtype,why", [(torch.float8_e4m3fn, "already 8-bit"),
                                       (torch.float32, "not a 16-bit float")])
def test_codec_refused_for_the_kv_dtype(tmp_path, spill_dir, dtype, why):
    config = LMCacheEngineConfig.from_file(
        write_config(tmp_path / "c.yaml", spill_dir=spill_dir, codec="int4"))
    meta = LMCacheMetadata("m", 1, 1, 0, 0, dtype, (LAYERS, 2, CHUNK, HEADS, HDIM),
                           chunk_size=CHUNK, role="worker")
    with pytest.raises(ValueError, match=f"codec int4 quantises .*KV dtype {dtype} is {why}"):
        KVTierStoragePlugin(dst_device="cpu", config=config, metadata=meta,
                            local_cpu_backend=object())


def test_codec_refused_when_a_chunk_spans_pages(tmp_path, spill_dir):
    config = LMCacheEngineConfig.from_file(
        write_config(tmp_path / "c.yaml", spill_dir=spill_dir, codec="fp8", page_bytes=4096))
    meta = LMCacheMetadata("m", 1, 1, 0, 0, DTYPE, (LAYERS, 2, CHUNK, HEADS, HDIM),
                           chunk_size=CHUNK, role="worker")
    with pytest.raises(ValueError, match="spans several pages of 4096"):
        KVTierStoragePlugin(dst_device="cpu", config=config, metadata=meta,
                            local_cpu_backend=object())


@pytest.mark.parametrize("codec", ["int4", "fp8", "none"])
def test_codec_through_the_plugin_mla(tmp_path, spill_dir, codec):
    """An MLA model's chunks ([1, layers, tokens, 576]-like rows, here 96):
    KVT_KV_MLA blocks of a page keyed KVT_ALL_LAYERS; the rows have K's
    outlier channels. Measured (8 of 12 chunks from the SSD tier), RMS
    relative: int4 0.031, fp8 0.028."""
    path = write_config(tmp_path / "c.yaml", spill_dir=spill_dir, codec=codec,
                        dram_bytes="64KiB", ssd_bytes="8MiB")
    sm, plugin, meta = open_manager(path, mla_row=96)
    try:
        shape = meta.get_shapes(CHUNK)[0]
        assert tuple(shape) == (1, LAYERS, CHUNK, 96)
        if codec != "none":
            cfg = plugin.kvtier_config
            assert (cfg["kv_order"], cfg["n_layers"], cfg["head_dim"]) == ("mla", LAYERS, 96)
        g = torch.Generator().manual_seed(21)
        chunks = []
        for _ in range(12):
            x = torch.randn(tuple(shape), generator=g)
            d = torch.arange(96)
            out = (d % 32) == 5
            x[..., out] = x[..., out] * 3 + torch.where((d[out] // 32) % 2 == 1, 12.0, -12.0)
            chunks.append(x.to(DTYPE))
        objs = [sm.allocate(shape, DTYPE, fmt=MemoryFormat.KV_MLA_FMT) for _ in chunks]
        for o, c in zip(objs, chunks):
            o.tensor.copy_(c)
        keys = [key(meta, 21000 + i) for i in range(12)]
        put_and_evict(sm, plugin, keys, objs)
        got = retrieve(sm, keys)
        ts = [o.tensor.view(c.shape).clone() for o, c in zip(got, chunks)]
        for o in got:
            o.ref_count_down()
        if codec == "none":
            assert all(torch.equal(t, c) for t, c in zip(ts, chunks))
            return
        quantised = sum(not torch.equal(t, c) for t, c in zip(ts, chunks))
        err = max(rms_rel(t, c) for t, c in zip(ts, chunks))
        print(f"lmcache mla {codec}: {quantised} of 12 chunks quantised; RMS rel {err:.4f}")
        assert quantised >= 6
        assert err <= TOLERANCE[codec][0], err
    finally:
        sm.close()
