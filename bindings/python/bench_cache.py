#!/usr/bin/env python3
"""Per-token overhead of KVTierCache over DynamicCache, on CPU.

Greedy generate() of a small random-weight Llama, once with DynamicCache and
once with KVTierCache (host back-end), measured in the same run; prints
tokens/s both ways, the ratio and the overhead per generated token. With
--spill the tiers are sized so that the KV spills to DRAM and SSD. Nothing is
asserted: this is a measurement, not a test (tests/python checks results).
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402

import kvtier  # noqa: E402
from kvtier.cache import KVTierCache, page_bytes_for  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8, help="query heads")
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens")
    p.add_argument("--new", type=int, default=128, help="generated tokens")
    p.add_argument("--page-tokens", type=int, default=16)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--spill", action="store_true",
                   help="HBM and DRAM a quarter of the KV each: pages go through SSD")
    p.add_argument("--repeat", type=int, default=3, help="runs per cache; the best counts")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p.parse_args()


def run(model, ids, cache, new):
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                         max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         pad_token_id=0)
    return time.perf_counter() - t0, out


def main():
    a = parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=a.hidden, intermediate_size=2 * a.hidden,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.kv_heads,
                      max_position_embeddings=a.prompt + a.new + 8,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval().to(dtype)
    ids = torch.randint(3, 256, (a.batch, a.prompt))
    head_dim = a.hidden // a.heads
    pb = page_bytes_for(a.kv_heads, head_dim, dtype, a.page_tokens)
    total_pages = a.batch * a.layers * ((a.prompt + a.new) // a.page_tokens + 1)
    if a.spill:
        hbm = dram = max(2, total_pages // 4)
    else:
        hbm, dram = total_pages + 8, 8
    tmp = tempfile.TemporaryDirectory(prefix="kvtier-bench-")

    run(model, ids, DynamicCache(), 4)  # warm-up (allocator, lazy init)
    best_dyn, best_kvt, same, stats = float("inf"), float("inf"), True, None
    for _ in range(a.repeat):
        t_dyn, ref = run(model, ids, DynamicCache(), a.new)
        best_dyn = min(best_dyn, t_dyn)
        with kvtier.Engine(page_bytes=pb, hbm_bytes=hbm * pb, dram_bytes=dram * pb,
                           ssd_bytes=(total_pages + 16) * pb, ssd_dir=tmp.name,
                           device="host") as e:
            cache = KVTierCache(e, page_tokens=a.page_tokens, config=cfg)
            t_kvt, out = run(model, ids, cache, a.new)
            stats = e.stats()
            cache.close()
        best_kvt = min(best_kvt, t_kvt)
        same = same and torch.equal(out, ref)
    tokens = a.batch * a.new
    res = {
        "tokens": tokens, "page_bytes": pb, "hbm_pages": hbm, "dram_pages": dram,
        "dynamic_tokens_per_s": tokens / best_dyn, "kvtier_tokens_per_s": tokens / best_kvt,
        "ratio": best_dyn / best_kvt,
        "overhead_ms_per_token": 1e3 * (best_kvt - best_dyn) / a.new,
        "identical_tokens": same,
        "stall_ms": stats.stall_ns / 1e6,
        "bytes_up": list(stats.bytes_up), "bytes_down": list(stats.bytes_down),
    }
    if a.json:
        print(json.dumps(res))
        return
    print(f"model: {a.layers} layers, hidden {a.hidden}, {a.heads}/{a.kv_heads} heads, "
          f"{a.dtype}; batch {a.batch}, prompt {a.prompt}, {a.new} new tokens")
    print(f"pages: {pb} bytes ({a.page_tokens} tokens), HBM {hbm} / DRAM {dram} pages"
          f"{' (spilling to SSD)' if a.spill else ''}")
    print(f"DynamicCache  {res['dynamic_tokens_per_s']:9.1f} tokens/s")
    print(f"KVTierCache   {res['kvtier_tokens_per_s']:9.1f} tokens/s")
    print(f"ratio (kvtier/dynamic) {res['ratio']:.3f}; overhead "
          f"{res['overhead_ms_per_token']:.2f} ms per generated token "
          f"(kvtier stall {res['stall_ms']:.1f} ms)")
    print(f"identical tokens: {same}")


if __name__ == "__main__":
    main()
