"""KVTierCache with each lossy codec against DynamicCache: the logits' largest
difference and the greedy tokens' agreement, within stated bounds.

The tiny Llama of test_cache.py, in bf16 (the lossy codecs quantise bf16 or
fp16 KV), with so little HBM and DRAM that most pages go to SSD and come back
dequantised. Both caches are fed the same tokens (the reference's own greedy
continuation, teacher-forced), so every step's logits compare like with like:
a step whose argmax differs does not change what the next step sees.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

import kvtier  # noqa: E402
from kvtier.cache import KVTierCache, page_bytes_for  # noqa: E402

PROMPT, NEW, BATCH, PAGE_TOKENS = 48, 48, 2, 32

# Bounds per codec: the largest |logit difference| over every step and row,
# relative to the reference logits' own spread (their standard deviation),
# and the share of steps whose greedy token agrees. Measured (docs/codecs.md):
# fp8 0.037 / 1.0, int8 0.028 / 1.0, int4 0.061 / 0.96-0.97 on this model; the bounds
# leave room, and a page served wrong (another key's, zeros) lands far out.
BOUNDS = {"fp8": (0.25, 0.9), "int8": (0.05, 0.97), "int4": (0.6, 0.85)}


def tiny_llama_bf16():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, attn_implementation="eager")
    return cfg, LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


def teacher_forced_logits(model, cache, ids, new_ids):
    """Logits of the prompt's last position, then of each forced token."""
    out = []
    with torch.no_grad():
        r = model(input_ids=ids, past_key_values=cache, use_cache=True)
        out.append(r.logits[:, -1].float())
        for t in range(new_ids.shape[1] - 1):
            r = model(input_ids=new_ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            out.append(r.logits[:, -1].float())
    return torch.stack(out, 1)  # [batch, steps, vocab]


@pytest.mark.parametrize("codec", ["fp8", "int8", "int4"])
def test_lossy_codec_against_dynamic_cache(tmp_path, codec):
    cfg, model = tiny_llama_bf16()
    ids = torch.randint(3, 256, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        gen = model.generate(ids, past_key_values=DynamicCache(), max_new_tokens=NEW,
                             min_new_tokens=NEW, do_sample=False, pad_token_id=0,
                             attention_mask=torch.ones_like(ids))
    new_ids = gen[:, PROMPT:]
    ref = teacher_forced_logits(model, DynamicCache(), ids, new_ids)

    head_dim = cfg.hidden_size // cfg.num_attention_heads
    pb = page_bytes_for(cfg.num_key_value_heads, head_dim, torch.bfloat16, PAGE_TOKENS)
    assert pb == 4096  # 2 (K, V) x 2 heads x 32 tokens x 16 dims x 2 bytes
    cache = KVTierCache(page_tokens=PAGE_TOKENS, config=cfg, page_bytes=pb, hbm_bytes=2 * pb,
                        dram_bytes=2 * pb, ssd_bytes=64 * pb, ssd_dir=str(tmp_path / "ssd"),
                        device="host", codec=codec)
    with cache:
        got = teacher_forced_logits(model, cache, ids, new_ids)
        s = cache.engine.stats()
        # Pages went down to SSD (quantised) and came back (dequantised).
        assert s.bytes_down[1] > 0 and s.bytes_up[1] > 0 and s.hits[2] > 0

    spread = ref.std().item()
    max_diff = (got - ref).abs().max().item()
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(f"{codec}: logits max |diff| {max_diff:.4f} ({max_diff / spread:.4f} of the logits' "
          f"std {spread:.4f}), greedy agreement {agree:.4f} over {got.shape[1]} steps x {BATCH}")
    rel_bound, agree_bound = BOUNDS[codec]
    assert max_diff / spread <= rel_bound
    assert agree >= agree_bound


def test_lossy_codec_needs_a_layout(tmp_path):
    """An fp32 cache has no layout a lossy codec can use: refused at open, saying why."""
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    cache = KVTierCache(page_tokens=PAGE_TOKENS, config=cfg, hbm_bytes=1 << 20,
                        dram_bytes=1 << 20, ssd_bytes=4 << 20, ssd_dir=str(tmp_path / "ssd"),
                        device="host", codec="int4")
    ids = torch.randint(3, 256, (1, 8))
    with pytest.raises(kvtier.KvtConfigError, match="needs the page layout"):
        with torch.no_grad():
            model(input_ids=ids, past_key_values=cache, use_cache=True)
    cache.close()
