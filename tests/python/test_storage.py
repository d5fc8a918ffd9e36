"""KVTierStorage: HiCache-shaped get/set/exists, persistence across processes,
fingerprints."""

import hashlib
import json
import subprocess
import sys

import pytest
import torch

import kvtier
from kvtier import _plugin
from kvtier.storage import KVTierStorage, key_hash
from conftest import PAGE, subprocess_env

PB = 2 * PAGE  # 8 KiB pages: 2048 float32 values


def doc_keys(n, doc="the long document"):
    # Prefix hashes, as HiCache computes them: each key covers every page before it.
    keys, h = [], b""
    for i in range(n):
        h = hashlib.sha256(h + f"{doc}:{i}".encode()).digest()
        keys.append(h.hex())
    return keys


def doc_pages(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(PB // 4, generator=g) for _ in range(n)]


def config(tmp_path, **kw):
    cfg = dict(page_bytes=PB, hbm_bytes=2 * PB, dram_bytes=4 * PB, ssd_bytes=64 * PB,
               ssd_dir=str(tmp_path / "kv"), persist=True, fingerprint="tiny-llama/fp32/v1",
               device="host")
    cfg.update(kw)
    return cfg


READER = r"""
import json, sys, torch
from kvtier.storage import KVTierStorage
args = json.loads(sys.argv[1])
with KVTierStorage(dtype=torch.float32, **args["cfg"]) as s:
    prefix = s.batch_exists(args["keys"] + ["not stored"])
    out = s.batch_get(args["keys"][:prefix])
    print(json.dumps({"prefix": prefix,
                      "pages": [None if o is None else o.numpy().tobytes().hex() for o in out],
                      "stats": s.get_stats()}))
"""


def read_in_new_process(cfg, keys):
    r = subprocess.run([sys.executable, "-c", READER, json.dumps({"cfg": cfg, "keys": keys})],
                       env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_document_survives_a_new_process(tmp_path):
    n = 10  # more than HBM + DRAM (6 pages): part of it lives only on SSD
    keys, pages = doc_keys(n), doc_pages(n)
    cfg = config(tmp_path)
    with KVTierStorage(**cfg) as s:
        assert s.batch_exists(keys) == 0
        assert s.batch_set(keys, pages)
        assert s.batch_exists(keys) == n
        st = s.get_stats()
        assert st["set_stored"] == n and st["resident_pages"][2] > 0

    got = read_in_new_process(cfg, keys)
    assert got["prefix"] == n
    assert [bytes.fromhex(p) for p in got["pages"]] == [p.numpy().tobytes() for p in pages]
    assert got["stats"]["get_hit"] == n

    # Another model (fingerprint) never sees these pages.
    other = read_in_new_process(config(tmp_path, fingerprint="tiny-llama/fp16/v1"), keys)
    assert other["prefix"] == 0 and other["pages"] == []


def test_second_request_reuses_the_stored_prefix(tmp_path):
    keys, pages = doc_keys(6), doc_pages(6)
    with KVTierStorage(**config(tmp_path, persist=False)) as s:
        assert s.batch_set(keys[:4], pages[:4])
        # A longer request over the same document: only the 2 new pages are stored.
        assert s.batch_set(keys, pages)
        st = s.get_stats()
        assert st["set_stored"] == 6 and st["set_skipped"] == 4 and st["bytes_put"] == 6 * PB
        # A request that diverges after page 3 hits a prefix of 3.
        branch = keys[:3] + doc_keys(3, doc="another question")
        assert s.batch_exists(branch) == 3
        assert s.exists(keys[5]) and s.contains(keys[0]) and not s.exists(branch[3])


def test_get_forms(tmp_path):
    keys, pages = doc_keys(3), doc_pages(3)
    with KVTierStorage(dtype=torch.float32, shape=(2, PB // 8), **config(tmp_path)) as s:
        assert s.set(keys[0], pages[0])
        assert s.set(keys[1], target_location=pages[1])  # HiCache's zero-copy form
        target = torch.empty(PB // 4)
        assert s.get(keys[0], target) is target and torch.equal(target, pages[0])
        fresh = s.get(keys[1])
        assert fresh.shape == (2, PB // 8) and torch.equal(fresh.flatten(), pages[1])
        assert s.get(keys[2]) is None
        out = s.batch_get(keys, [torch.empty(PB // 4) for _ in keys], [PB] * 3)
        assert out[2] is None and torch.equal(out[1], pages[1])
        with pytest.raises(ValueError):
            s.batch_get(keys, None, [PB - 1] * 3)
        with pytest.raises(TypeError):
            s.exists(42)


def test_wrong_sized_value_stores_nothing(tmp_path):
    keys, pages = doc_keys(3), doc_pages(3)
    bad = pages[:2] + [torch.zeros(PB // 4 - 1)]
    with KVTierStorage(**config(tmp_path)) as s:
        with pytest.raises(ValueError, match="bytes, the page is"):
            s.batch_set(keys, bad)
        assert s.batch_exists(keys) == 0 and s.get_stats()["bytes_put"] == 0


def test_value_for_the_wrong_side_stores_nothing(tmp_path):
    # Puts go in parts (here one page each); a CUDA value on a host engine was
    # found only when its part came, after the parts before were stored.
    class FakeCudaArray:
        __cuda_array_interface__ = {"shape": (PB,), "typestr": "|u1", "version": 3,
                                    "data": (0xdead0000, False), "strides": None}

    keys, pages = doc_keys(3), doc_pages(3)
    with KVTierStorage(**config(tmp_path, dram_bytes=2 * PB)) as s:
        assert s.io.part == 1
        with pytest.raises(ValueError, match="CUDA"):
            s.batch_set(keys, pages[:2] + [FakeCudaArray()])
        assert s.batch_exists(keys) == 0 and s.get_stats()["bytes_put"] == 0


def test_full_store_returns_false(tmp_path):
    cfg = config(tmp_path, ssd_bytes=0, ssd_dir=None, persist=False)
    keys, pages = doc_keys(8), doc_pages(8)
    with KVTierStorage(**cfg) as s:  # HBM 2 + DRAM 4 pages, no SSD
        assert s.batch_set(keys, pages) is False
        held = s.batch_exists(keys)
        assert 0 < held < 8 and s.get_stats()["set_failed"] > 0


def test_clear_wipes_persisted_pages(tmp_path):
    keys, pages = doc_keys(4), doc_pages(4)
    cfg = config(tmp_path)
    with KVTierStorage(**cfg) as s:
        s.batch_set(keys, pages)
        s.clear()
        assert s.batch_exists(keys) == 0
        s.set(keys[0], pages[0])
    assert read_in_new_process(cfg, keys)["prefix"] == 1


def test_clear_on_a_borrowed_engine_drops_own_keys(make_engine):
    e = make_engine(page_bytes=PB, hbm_bytes=2 * PB, dram_bytes=4 * PB, ssd_bytes=16 * PB)
    e.put([(1, 0, 0)], [bytes(PB)])
    s = KVTierStorage(e)
    s.batch_set(doc_keys(2), doc_pages(2))
    s.clear()
    assert s.batch_exists(doc_keys(2)) == 0 and e.exists([(1, 0, 0)]).prefix == 1
    s.close()
    assert not e.closed


def test_key_hash_is_stable():
    # Fixed expectations: a change of hash would orphan every persisted page.
    # The package's one scheme (kvtier._plugin.page_keys, used by this store
    # and the LMCache, SGLang and vLLM plug-ins): blake2b-96, person
    # "kvtier-chunk", little-endian id then index, layer = page number.
    k = key_hash("abc")
    assert k == (15698866219942942924, 0, 345938653)
    assert key_hash(b"abc") == k and key_hash("abd") != k
    assert _plugin.page_keys("abc", 2) == [k, (k.id, 1, k.index)]
    with pytest.raises(TypeError):
        key_hash(42)


def old_key_hash(key):
    """The scheme KVTierStorage used before it and the plug-ins shared one:
    person "kvtier-key", layer KVT_ALL_LAYERS."""
    d = hashlib.blake2b(key.encode(), digest_size=12, person=b"kvtier-key").digest()
    return (int.from_bytes(d[:8], "little"), kvtier.KVT_ALL_LAYERS,
            int.from_bytes(d[8:], "little"))


def test_pages_of_the_old_key_scheme_read_as_misses(tmp_path):
    # A spill directory persisted under the old scheme: its pages load, but
    # no key of the current scheme names them (their layer, KVT_ALL_LAYERS,
    # is never a page number), so every lookup misses; clear() removes them.
    keys, pages = doc_keys(3), doc_pages(3)
    cfg = config(tmp_path)
    with kvtier.Engine(**cfg) as e:
        e.put([old_key_hash(k) for k in keys], pages)
    with KVTierStorage(**cfg) as s:
        assert s.batch_exists(keys) == 0 and s.get(keys[0]) is None
        assert s.engine.exists([old_key_hash(k) for k in keys]).prefix == 3
        assert s.batch_set(keys, doc_pages(3, seed=1))
        assert torch.equal(s.get(keys[0]).view(torch.float32), doc_pages(3, seed=1)[0])
        s.clear()
        assert s.engine.stats().pages == 0


def test_shard_names_are_sglangs(make_engine):
    # The SGLang plug-in's names (key NUL shard NUL region) as it persisted
    # them before it became this class.
    e = make_engine(page_bytes=PB)
    e.put(_plugin.page_keys("k\0tp0of1\x000", 1), [bytes(PB)])
    s = KVTierStorage(e, shard="tp0of1")
    assert s.exists("k") and s.exists(b"k") and not s.exists("j")


class HostPool:
    """The part of SGLang's host pool (HostKVCache) the store reads: a
    layer_first pool of 2 layers, whose page is 4 regions (K and V of each
    layer) listed per layer, (K0, V0, K1, V1), while its flat page is all K
    then all V. Regions of 6000 bytes: two 4 KiB kvtier pages, the last
    padded."""

    page_size, layout, layer_num, region = 4, "layer_first", 2, 6000

    def __init__(self, pages):
        self.buf = torch.zeros((pages, 2 * self.layer_num, self.region), dtype=torch.uint8)

    def get_page_buffer_meta(self, indices):
        pages = (indices[::self.page_size] // self.page_size).tolist()
        ptrs = [self.buf[p, j].data_ptr() for p in pages for j in range(2 * self.layer_num)]
        return ptrs, [self.region] * len(ptrs)

    def get_dummy_flat_data_page(self):
        return torch.zeros(2 * self.layer_num * self.region, dtype=torch.uint8)

    def flat(self, p):
        return torch.cat([self.buf[p, j] for j in (0, 2, 1, 3)])


def token_indices(pages, page_size=HostPool.page_size):
    return torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in pages])


def test_host_pool_v1_and_flat_pages(tmp_path):
    # What the SGLang plug-in does, on a store of its own engine: regions
    # in chunks of two kvtier pages, written from and read into the pool in
    # place (batch_*_v1), and flat pages that read what either stored.
    pool = HostPool(10)
    g = torch.Generator().manual_seed(3)
    pool.buf[:4] = torch.randint(0, 256, pool.buf[:4].shape, dtype=torch.uint8, generator=g)
    keys = doc_keys(5)
    with KVTierStorage(**config(tmp_path, page_bytes=PAGE, persist=False)) as s:
        s.register_mem_pool_host(pool)
        assert s.value_bytes == 4 * pool.region and s.io.n_pages == 2 and s.io.padded
        assert s.batch_set_v1(keys[:4], token_indices(range(4))) == [True] * 4
        assert s.batch_exists(keys) == 4
        assert s.batch_get_v1(keys, token_indices(range(5, 10))) == [True] * 4 + [False]
        assert torch.equal(pool.buf[5:9], pool.buf[:4])
        flat = s.batch_get(keys)
        assert all(torch.equal(flat[i], pool.flat(i)) for i in range(4)) and flat[4] is None
        assert s.set(keys[4], pool.flat(2))
        assert s.batch_get_v1([keys[4]], token_indices([9])) == [True]
        assert torch.equal(pool.buf[9], pool.buf[2])
        st = s.get_stats()
        assert st["set_stored"] == 5 and st["get_hit"] == 9
