"""KVTierCache against DynamicCache: same tokens, same logits, same tensors."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

import kvtier  # noqa: E402
from kvtier.cache import KVTierCache, page_bytes_for  # noqa: E402

PROMPT, NEW, BATCH, PAGE_TOKENS = 40, 64, 2, 16


def tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, attn_implementation="eager")
    return cfg, LlamaForCausalLM(cfg).eval()


def test_generate_matches_dynamic_cache_through_three_tiers(tmp_path):
    cfg, model = tiny_llama()
    ids = torch.randint(3, 256, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones_like(ids), return_dict_in_generate=True,
              output_logits=True, output_scores=True)
    ref = model.generate(ids, past_key_values=DynamicCache(), **kw)

    head_dim = cfg.hidden_size // cfg.num_attention_heads
    pb = page_bytes_for(cfg.num_key_value_heads, head_dim, torch.float32, PAGE_TOKENS)
    assert pb == 4096  # 2 (K,V) * 2 heads * 16 tokens * 16 dims * 4 bytes: no padding
    total = PROMPT + NEW
    # HBM 4 pages, DRAM 4 pages, SSD the rest: the 2 rows * 3 layers * 6 full
    # pages = 36 pages cannot stay above SSD.
    with kvtier.Engine(page_bytes=pb, hbm_bytes=4 * pb, dram_bytes=4 * pb,
                       ssd_bytes=128 * pb, ssd_dir=str(tmp_path / "ssd"), device="host") as e:
        cache = KVTierCache(e, page_tokens=PAGE_TOKENS, config=cfg)
        out = model.generate(ids, past_key_values=cache, **kw)

        assert torch.equal(out.sequences, ref.sequences)
        assert out.sequences.shape[1] == PROMPT + NEW
        assert len(out.logits) == len(ref.logits) == NEW
        for a, b in zip(out.logits, ref.logits):
            assert torch.equal(a, b)  # bit-identical, every step
        for a, b in zip(out.scores, ref.scores):
            assert torch.equal(a, b)

        s = e.stats()
        print("kvtier stats after generate:", s)
        # The generated tail is token total-1; the cache holds total-1 tokens.
        assert cache.get_seq_length() == total - 1
        assert s.pages == BATCH * cfg.num_hidden_layers * ((total - 1) // PAGE_TOKENS)
        assert s.pages > s.capacity_pages[0] + s.capacity_pages[1]
        # Traffic through every tier (kvt_stats):
        #  bytes_down[1] > 0  pages were written from DRAM down to SSD,
        #  bytes_up[1]   > 0  and read back from SSD into DRAM,
        #  hits[2]       > 0  acquires found pages only on SSD,
        #  bytes_up[0]   > 0  pages were copied DRAM -> HBM for every acquire,
        #  misses[0]     > 0  acquires missed HBM (the working set is 9x HBM),
        #  resident_pages: HBM and DRAM are full, SSD holds the rest.
        assert s.bytes_down[1] > 0 and s.bytes_up[1] > 0 and s.hits[2] > 0
        assert s.bytes_up[0] > 0 and s.misses[0] > 0
        assert s.resident_pages[0] > 0 and s.resident_pages[1] > 0 and s.resident_pages[2] > 0
        assert s.bytes_put == s.pages * pb  # each full page was put exactly once
        assert s.pinned_pages == 0 and s.errors_io == 0 and s.errors_corrupt == 0
        cache.close()
        assert e.stats().pages == 0  # close() dropped every row's pages


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_update_returns_what_dynamic_cache_returns(tmp_path, dtype):
    B, H, D, L = 2, 3, 8, 2
    # page_tokens 5: 2*3*5*8*2 = 480 bytes for 16-bit types, padded to 4096.
    cache = KVTierCache(page_tokens=5, hbm_bytes=2 * 4096,
                        dram_bytes=3 * 4096, ssd_bytes=64 * 4096,
                        ssd_dir=str(tmp_path / "ssd"), device="host")
    ref = DynamicCache()
    g = torch.Generator().manual_seed(2)
    # Prefill of 12 tokens, single-token decode, then chunks that cross pages.
    for step, t in enumerate([12, 1, 1, 1, 4, 9, 1, 16, 1]):
        for layer in range(L):
            # As in Llama: [B, T, H, D] memory seen as [B, H, T, D] (not contiguous).
            k = torch.randn(B, t, H, D, generator=g).to(dtype).transpose(1, 2)
            v = torch.randn(B, t, H, D, generator=g).to(dtype).transpose(1, 2)
            gk, gv = cache.update(k, v, layer)
            rk, rv = ref.update(k, v, layer)
            for got, want in ((gk, rk), (gv, rv)):
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.stride() == want.stride()
                assert got.is_contiguous() == want.is_contiguous()
                assert torch.equal(got, want)
            if step == 0:
                assert gk is k and gv is v  # DynamicCache hands back the inputs too
            assert cache.get_seq_length(layer) == ref.get_seq_length(layer)
    assert len(cache) == L
    assert cache.engine.page_bytes == 4096
    # The layer count was learned from the first pass and the schedule set.
    assert cache._n_layers == L and cache._schedule_set
    k0, v0 = cache[1]
    assert torch.equal(k0, ref[1][0]) and torch.equal(v0, ref[1][1])
    s = cache.engine.stats()
    assert s.pages == B * L * (ref.get_seq_length() // 5) and s.resident_pages[2] > 0
    with pytest.raises(ValueError, match="cannot change shape"):
        cache.update(torch.zeros(B, H, 1, D + 1, dtype=dtype),
                     torch.zeros(B, H, 1, D + 1, dtype=dtype), 0)
    with pytest.raises(NotImplementedError):
        cache.reorder_cache(torch.tensor([1, 0]))
    engine = cache.engine
    cache.close()
    assert engine.closed  # the cache opened it, so the cache closed it


def test_borrowed_engine_too_small_is_refused(make_engine):
    e = make_engine()
    cache = KVTierCache(e, page_tokens=64)
    k = torch.zeros(1, 4, 1, 16)  # 2*4*64*16*4 = 32 KiB > 4 KiB pages
    with pytest.raises(ValueError, match="need"):
        cache.update(k, k, 0)
    assert not e.closed and e.stats().pages == 0


@pytest.mark.parametrize("seq_ids,exc", [([1.5], TypeError), (["7"], TypeError),
                                         ([True], TypeError), ([-1], ValueError),
                                         ([1 << 64], OverflowError)])
def test_seq_ids_are_key_ids(make_engine, seq_ids, exc):
    # They were int(i) & (2**64 - 1): 1.5 became row id 1 and -1 wrapped to
    # 2**64 - 1, each another sequence's pages.
    e = make_engine()
    with pytest.raises(exc, match="seq_ids"):
        KVTierCache(e, seq_ids=seq_ids)


def test_page_tokens_is_an_integer(make_engine):
    with pytest.raises(TypeError, match="page_tokens"):
        KVTierCache(make_engine(), page_tokens=2.5)


def test_seq_ids_must_differ(make_engine):
    # Two rows with one id write the same keys and read each other's K/V.
    with pytest.raises(ValueError, match="repeat"):
        KVTierCache(make_engine(), seq_ids=[5, 6, 5])
