#!/usr/bin/env python3
"""fleet_model.py — the calculations and the small simulations behind
docs/remote.md ("At fleet scale"): kvtier's remote tier on a Redis Cluster of 100 masters
shared by 1,000 serving instances.

Nothing here is measured on a fleet. Each figure is computed from the inputs
at the top of this file (model shapes from the models' published configs,
GPU peak FLOPs from NVIDIA's data sheets, link rates, the kvtier design of
issue 34), from a stated assumption (marked ASSUMED), or from a measurement
on the development machine (marked MEASURED, with how). The simulations use
random.Random with a fixed seed: every run prints the same numbers.

Usage (Python 3.9+, standard library only):
  tools/remote/fleet_model.py                 every section, as Markdown
  tools/remote/fleet_model.py fanout memory   the named sections only
  tools/remote/fleet_model.py --json          the same figures as JSON
  tools/remote/fleet_model.py --trace PATH    the Mooncake trace for the
      hit-rate section (default ../shared/traces/mooncake_synthetic_trace.jsonl
      beside the repository; the section is skipped when it is missing)
Sections: connections fanout failover hotprefix memory hitrate network.
Runs in about ten seconds (the simulations are most of it).
"""

import argparse
import json
import math
import os
import random
import statistics
import sys
from collections import OrderedDict

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
SEED = 34

# ------------------------------------------------------------------ inputs

FLEET = {
    "masters": 100,
    "replicas_per_master": 1,
    "instances": 1000,
    # issue 34's design: one connection per node per using thread; the
    # engine uses three (the publisher thread, two callers' handles).
    "threads_per_instance": 3,
    "slots": 16384,
    "master_memory_gib": 64,
}

# Redis 7.0 defaults (redis.conf of 7.0.15).
REDIS = {
    "maxclients": 10000,
    "reserved_fds": 32,           # CONFIG_MIN_RESERVED_FDS: kept for files, the bus...
    "cluster_node_timeout_s": 15,  # cluster-node-timeout 15000
}

# MEASURED on the development machine (Redis 7.0.15, jemalloc 5.3.0):
# MEMORY USAGE of a key after SET of a value of N bytes (redis-cli -x set):
#   262,144 and 262,192 -> 327,768; 1,048,576 and 1,048,624 -> 1,310,808;
#   2,097,152 and 2,097,200 -> 2,621,528. A value that is a power of two, or
# one plus kvtier's 48-byte header, lands in jemalloc's next size class:
# 1.25x. (The next classes above 2^k are 2^k * 5/4, 6/4, 7/4.)
JEMALLOC_STEPS_PER_DOUBLING = 4
REDIS_KEY_OVERHEAD = 88          # MEASURED: 327,768 - 327,680 (key, dict entry, object)
KVT_HEADER = 48

# MEASURED with tools/remote/measure_clients.py (1,000 connections to one
# master of a local Redis 7.0.15 cluster): used_memory grows by 38,090 bytes
# per connected client (after one command; its query and reply buffers), and
# by a further ~564,000 bytes per client that left one 2 MiB GET reply
# unread (loopback, tcp_wmem max 4 MiB: the kernel took the rest); 256 KiB
# replies were taken whole by the kernel. One descriptor per connection.
MEASURED_IDLE_CLIENT_BYTES = 38090
MEASURED_UNREAD_2MIB_REPLY_BYTES = 564000

# MEASURED with tools/remote/measure_slots.py on a local cluster of 100
# masters, no replicas (Redis 7.0.15, 127.0.0.1, a loaded 2-core machine):
# CLUSTER SLOTS reply 9,568 bytes for 100 ranges; Redis's own time 48..54 us
# per call (INFO commandstats). Each node had 209 descriptors open, 198 of
# them the cluster bus's TCP sockets (2 per peer).
MEASURED_SLOTS_BYTES_100x0 = 9568
MEASURED_SLOTS_USEC_100x0 = 54

# Models: (name, layers, kv_heads, head_dim, params_active, attn_heads,
#          kv_bytes_per_token_per_layer override for MLA or None)
# From the models' config.json on their model cards.
MODELS = [
    ("Llama-3.1-8B", 32, 8, 128, 8.03e9, 32, None),
    ("Qwen2.5-7B", 28, 4, 128, 7.62e9, 28, None),
    ("Llama-3.1-70B", 80, 8, 128, 70.6e9, 64, None),
    ("Qwen2.5-72B", 80, 8, 128, 72.7e9, 64, None),
    ("Llama-3.1-405B", 126, 8, 128, 405.9e9, 128, None),
    # DeepSeek-V3: MLA caches one latent of kv_lora_rank 512 + rope 64 per
    # layer and token; 37B parameters active per token (MoE).
    ("DeepSeek-V3", 61, None, None, 37e9, 128, 576),
]

# Dense BF16 tensor peak without sparsity, from NVIDIA's data sheets: H100
# SXM and H200 SXM both 989 TFLOP/s (the H200 differs in HBM, not compute).
GPU_PEAK_FLOPS = {"H100 SXM": 989e12, "H200 SXM": 989e12}
PREFILL_MFU = 0.5      # ASSUMED: a prefill reaching half of peak
LINKS_GBIT = [25, 100, 400]

# Per-node round-trip latency of one pipelined round (network + Redis),
# ASSUMED log-normal: median 0.2 ms, p99 1 ms. Not measured on a fleet; the
# section shows how the round's latency follows from any such distribution.
NODE_LAT_MEDIAN_MS = 0.2
NODE_LAT_P99_MS = 1.0

# Redis cluster failover: a replica starts its election after the master is
# marked FAIL (node timeout) plus 500 ms + random(0..500) ms + rank * 1 s
# (Redis Cluster specification, "Replica election and promotion").
ELECTION_DELAY_S = (0.5, 1.0)

# ------------------------------------------------------------------ helpers


def bf16_bytes_per_token(m):
    name, layers, kv_heads, head_dim, _, _, mla = m
    if mla is not None:
        return layers * mla * 2
    return 2 * layers * kv_heads * head_dim * 2


def four_bit_factor(group=64, meta_bits=32):
    """Bytes of a 4-bit code with a bf16 scale and zero per group of
    elements, per byte of bf16: (4 + meta_bits / group) / 16."""
    return (4 + meta_bits / group) / 16


def jemalloc_class(n):
    """The jemalloc size class (large sizes) that n bytes are rounded up to."""
    if n <= 16 * KiB:
        return n
    p = 1 << (n.bit_length() - 1)
    step = p // JEMALLOC_STEPS_PER_DOUBLING
    return -(-n // step) * step


def redis_bytes(value):
    """Redis memory for one value: the sds (9-byte header + NUL for a 32-bit
    length, +1 more byte slack seen) in its jemalloc class, plus the key."""
    return jemalloc_class(value + 11) + REDIS_KEY_OVERHEAD


def lognormal(median, p99):
    mu = math.log(median)
    sigma = (math.log(p99) - mu) / statistics.NormalDist().inv_cdf(0.99)
    return mu, sigma


def lognormal_quantile(mu, sigma, q):
    return math.exp(mu + sigma * statistics.NormalDist().inv_cdf(q))


def expected_nodes(keys, nodes):
    """Expected distinct nodes touched by `keys` uniformly hashed keys."""
    return nodes * (1 - (1 - 1 / nodes) ** keys)


def fmt_bytes(n):
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ------------------------------------------------------------------ sections


def connections():
    f, r = FLEET, REDIS
    nodes = f["masters"] * (1 + f["replicas_per_master"])
    per_inst_masters = f["masters"] * f["threads_per_instance"]
    per_inst_all = nodes * f["threads_per_instance"]
    per_master = f["instances"] * f["threads_per_instance"]
    # The cluster bus: each node keeps one outgoing link to every other node
    # and accepts one from each (two sockets per peer), outside maxclients.
    bus = 2 * (nodes - 1)
    rows = [
        ["connections per instance, masters only", per_inst_masters],
        ["connections per instance, reading replicas too", per_inst_all],
        ["client connections per master (or per replica read)", per_master],
        ["Redis maxclients (default)", r["maxclients"]],
        ["cluster-bus sockets per node (2 per peer)", bus],
        ["file descriptors per node, clients + bus + reserved",
         per_master + bus + r["reserved_fds"]],
        ["client connections in the fleet, masters only",
         per_master * f["masters"]],
        ["Redis memory of idle clients per master (MEASURED per client)",
         fmt_bytes(per_master * MEASURED_IDLE_CLIENT_BYTES)],
    ]
    text = table(["what", "count"], rows)
    data = {k: v for k, v in rows}
    for inflight in (1, 4):
        for page in (256 * KiB, 2 * MiB):
            # Redis 7.0 copies a GET reply into the client's output buffer
            # until the socket takes it: a reply not yet read costs its size.
            data[f"reply buffers per master, {inflight} x {fmt_bytes(page)} in flight"
                 " per connection, all connections"] = per_master * inflight * page
    text += "\n\n" + table(["worst-case output buffers per master", "bytes"],
                           [[k.replace("reply buffers per master, ", ""), fmt_bytes(v)]
                            for k, v in data.items() if k.startswith("reply")])
    return text, data


def fanout():
    m = FLEET["masters"]
    mu, sigma = lognormal(NODE_LAT_MEDIAN_MS, NODE_LAT_P99_MS)
    rows, data = [], {}
    for p in (4, 16, 32, 64, 128, 256, 512, 1024):
        n = expected_nodes(p, m)
        # The round ends with its slowest node: P(max <= x) = F(x)^n, so its
        # q-quantile is F^-1(q^(1/n)) (n rounded to the nearest integer).
        k = max(1, round(n))
        q50 = lognormal_quantile(mu, sigma, 0.5 ** (1 / k))
        q99 = lognormal_quantile(mu, sigma, 0.99 ** (1 / k))
        rows.append([p, f"{n:.1f}", f"{0.5 ** (1 / k) * 100:.2f}", f"{q50:.2f}", f"{q99:.2f}"])
        data[p] = {"nodes": n, "p50_ms": q50, "p99_ms": q99}
    text = table(["blocks asked (P)", "masters touched (of 100)",
                  "round median = node percentile", "round p50 ms", "round p99 ms"], rows)
    # A deterministic simulation: the same with P keys on real slots (CRC16
    # of kvtier-like keys is uniform enough that random slots stand in).
    rng = random.Random(SEED)
    sim_rows = []
    slot_owner = [s * m // FLEET["slots"] for s in range(FLEET["slots"])]
    for p in (16, 64, 256):
        lat = []
        touched = []
        for _ in range(20000):
            nodes = {slot_owner[rng.randrange(FLEET["slots"])] for _ in range(p)}
            touched.append(len(nodes))
            lat.append(max(rng.lognormvariate(mu, sigma) for _ in nodes))
        lat.sort()
        sim_rows.append([p, f"{statistics.mean(touched):.1f}", f"{lat[len(lat) // 2]:.2f}",
                         f"{lat[int(len(lat) * 0.99)]:.2f}", f"{lat[int(len(lat) * 0.999)]:.2f}"])
        data[f"sim_{p}"] = {"nodes": statistics.mean(touched), "p50_ms": lat[len(lat) // 2],
                            "p99_ms": lat[int(len(lat) * 0.99)]}
    text += "\n\nSimulated (20,000 rounds each, seed %d):\n\n" % SEED + table(
        ["P", "mean masters", "p50 ms", "p99 ms", "p99.9 ms"], sim_rows)
    # Grouping: keys of G consecutive blocks of one prefix under one hash tag
    # share a slot, so P blocks touch at most ceil(P / G) masters.
    g_rows = []
    for g in (1, 8, 32):
        for p in (64, 256):
            groups = -(-p // g)
            n = expected_nodes(groups, m)
            k = max(1, round(n))
            g_rows.append([g, p, f"{n:.1f}",
                           f"{lognormal_quantile(mu, sigma, 0.5 ** (1 / k)):.2f}"])
    text += "\n\nBlocks grouped G to a slot (hash tag over the prefix's root and i // G):\n\n" + \
        table(["G", "P", "masters touched", "round p50 ms"], g_rows)
    text += (f"\n\nPer-node latency ASSUMED log-normal, median {NODE_LAT_MEDIAN_MS} ms, "
             f"p99 {NODE_LAT_P99_MS} ms (sigma {sigma:.3f}).")
    return text, data


def cluster_slots_bytes(masters, replicas, ranges_per_master=1):
    """RESP2 bytes of a CLUSTER SLOTS reply (Redis 7: ip, port, id, and an
    empty metadata map per node); IPv4 addresses of 8..15 characters taken
    as 12, ports as 4 digits."""
    node = 4 + (4 + 12 + 2) + (1 + 4 + 2) + (5 + 40 + 2) + 4   # *4, $ip, :port, $id, *0
    rng = 4 + 2 * (1 + 5 + 2) + node * (1 + replicas)
    return 4 + masters * ranges_per_master * rng


def failover():
    f = FLEET
    m = f["masters"]
    rows, data = [], {}
    for p in (16, 64, 256):
        touch = 1 - (1 - 1 / m) ** p
        rows.append([p, f"{touch * 100:.0f}%"])
        data[f"rounds_touching_failed_master_P{p}"] = touch
    text = ("Share of exists rounds that include the failed master's keys (and so, "
            "without a breaker, wait for the timeout):\n\n" + table(["P", "rounds"], rows))
    nt = REDIS["cluster_node_timeout_s"]
    lo, hi = nt + ELECTION_DELAY_S[0], nt + ELECTION_DELAY_S[1]
    data["unavailable_s"] = (lo, hi)
    size1 = cluster_slots_bytes(m, f["replicas_per_master"])
    size8 = cluster_slots_bytes(m, f["replicas_per_master"], 8)
    herd = f["instances"] * f["threads_per_instance"]
    # Redis's time per call scales with the reply (one node entry per range
    # and node); from the measured 100 x 0, in proportion to the bytes.
    usec = MEASURED_SLOTS_USEC_100x0 * size1 / cluster_slots_bytes(m, 0)
    rows = [
        ["slots unavailable after a master dies (node timeout 15 s)",
         f"{lo:.1f} .. {hi:.1f} s (+1 s per replica ranked ahead)"],
        ["CLUSTER SLOTS reply, 100 masters x 1 replica, 1 range each", fmt_bytes(size1)],
        ["the same after resharding left 8 ranges per master", fmt_bytes(size8)],
        ["the 100 x 0 reply, calculated / MEASURED",
         f"{cluster_slots_bytes(m, 0):,} / {MEASURED_SLOTS_BYTES_100x0:,} bytes"],
        ["Redis time per CLUSTER SLOTS, 100 x 1 (scaled from MEASURED 100 x 0)",
         f"{usec:.0f} us"],
        ["refreshes if every thread of every instance refreshes once", herd],
        ["  their Redis time, all sent to one seed node",
         f"{herd * usec / 1e3:.0f} ms of its one thread"],
        ["bytes those send", fmt_bytes(herd * size1)],
        ["refreshes if each MOVED triggers one (P=256: ~2.6 keys of the moved slots a round)",
         f"{herd * 2.56:.0f} per round of the fleet"],
        ["rate-limited: one per instance, jittered over 1 s",
         f"{f['instances']} per s, {f['instances'] / (m * (1 + f['replicas_per_master'])):.0f} per node per s"],
    ]
    data.update({"cluster_slots_bytes": size1, "cluster_slots_bytes_8ranges": size8,
                 "herd_refreshes": herd})
    text += "\n\n" + table(["what", "figure"], rows)
    return text, data


def hotprefix():
    data = {}
    rows = []
    # Every instance loads one hot prefix at about the same time (a fleet
    # start, a new system prompt): I x bytes, spread over the masters that
    # hold its keys.
    inst = FLEET["instances"]
    for model in (MODELS[0], MODELS[2]):
        bpt = bf16_bytes_per_token(model)
        for tokens in (2048, 8192):
            total = bpt * tokens
            for page in (2 * MiB,):
                keys = -(-total // page)
                masters = expected_nodes(keys, FLEET["masters"])
                per_master = inst * total / masters
                for gbit in (25, 100):
                    secs = per_master / (gbit / 8 * 1e9)
                    rows.append([model[0], tokens, fmt_bytes(total), keys, f"{masters:.0f}",
                                 fmt_bytes(per_master), gbit, f"{secs:.1f}",
                                 f"{secs / 2:.1f}"])
                    data[f"{model[0]}_{tokens}_{gbit}"] = secs
    text = table(["model", "prefix tokens", "bytes", "keys (2 MiB pages)", "masters",
                  "bytes per master (1,000 readers)", "Gb/s per master",
                  "s to serve, masters only", "s with 1 READONLY replica each"], rows)
    # One key read by every instance again and again: the key's master NIC.
    page = 2 * MiB
    krows = []
    for gbit in LINKS_GBIT:
        rate = gbit / 8 * 1e9 / page
        krows.append([gbit, f"{rate:,.0f}", f"{rate * 2:,.0f}", f"{rate * 8:,.0f}"])
    text += ("\n\nReads per second of one 2 MiB key that one master's NIC can carry, "
             "and with its copies:\n\n" + table(
                 ["Gb/s", "master only", "+1 replica", "8 suffix copies (on 8 masters)"], krows))
    return text, data


def memory():
    f = FLEET
    cap = f["masters"] * f["master_memory_gib"] * GiB
    rows, data = [], {}
    q = four_bit_factor()
    page = 2 * MiB
    for m in MODELS:
        bpt = bf16_bytes_per_token(m)
        # Redis bytes per byte of KV: a 2 MiB page plus the header, and the
        # same page coded to 4 bits (0.28 of it) plus the header.
        eff = redis_bytes(page + KVT_HEADER) / page
        q_page = int(page * q)
        eff4 = redis_bytes(q_page + KVT_HEADER) / q_page
        tokens = cap / (bpt * eff)
        tokens4 = cap / (bpt * q * eff4)
        rows.append([m[0], fmt_bytes(bpt), fmt_bytes(bpt * q), f"{eff:.3f} / {eff4:.3f}",
                     f"{tokens / 1e6:.0f}", f"{tokens4 / 1e6:.0f}"])
        data[m[0]] = {"bytes_per_token": bpt, "overhead_bf16": eff, "overhead_4bit": eff4,
                      "tokens_bf16": tokens, "tokens_4bit": tokens4}
    text = table(["model", "KV per token, bf16", "4-bit (g64)",
                  "Redis bytes per KV byte, bf16 / 4-bit (2 MiB pages)",
                  "M tokens held, bf16", "M tokens held, 4-bit"], rows)
    text += (f"\n\nCluster: {f['masters']} masters x {f['master_memory_gib']} GiB = "
             f"{fmt_bytes(cap)} of Redis memory (replicas hold copies on their own "
             f"machines). 4-bit: {q:.4f} of the bf16 bytes (4-bit codes, a bf16 scale and "
             "zero per group of 64). The Redis bytes per KV byte come from jemalloc's size "
             "classes (MEASURED, see the top of this file).")
    rows = []
    for p in (256 * KiB, 1 * MiB, 2 * MiB):
        fit = p - 11 - KVT_HEADER
        rows.append([fmt_bytes(p), f"{redis_bytes(p):,}", f"{redis_bytes(p + KVT_HEADER):,}",
                     f"{fit:,}", f"{redis_bytes(fit + KVT_HEADER):,}"])
    text += "\n\n" + table(["page", "Redis bytes, the page alone",
                            "the page + 48-byte header",
                            "largest payload that stays in the 2^k class", "its Redis bytes"], rows)
    # How long a published block survives: the cluster's tokens over the
    # fleet's rate of new (published) tokens. Per-instance rates ASSUMED as a
    # range: one H100 prefills ~25k Llama-3.1-8B tokens/s or ~3k
    # Llama-3.1-70B tokens/s at 50% MFU (section "network").
    rows = []
    for m in (MODELS[0], MODELS[2]):
        held = data[m[0]]
        for rate in (1000, 5000, 20000):
            fleet_rate = f["instances"] * rate
            rows.append([m[0], f"{rate:,}", f"{fleet_rate / 1e6:.0f} M",
                         f"{held['tokens_bf16'] / fleet_rate:.0f}",
                         f"{held['tokens_4bit'] / fleet_rate:.0f}"])
            data[f"retention_{m[0]}_{rate}"] = held["tokens_bf16"] / fleet_rate
    text += ("\n\nRetention when every new block is published (write-through): seconds "
             "before Redis evicts it, 1,000 instances:\n\n" + table(
                 ["model", "new tokens/s per instance", "fleet tokens/s",
                  "s held, bf16", "s held, 4-bit"], rows))
    data["capacity_bytes"] = cap
    return text, data


def load_trace(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def prefix_lru(reqs, capacity, instances=1):
    """Requests dealt round-robin to `instances` LRU caches of `capacity`
    blocks each. A block counts as a hit while every block before it in the
    request was one too (prefix reuse). Returns the hit fraction of block
    references."""
    caches = [OrderedDict() for _ in range(instances)]
    hits = refs = 0
    for i, r in enumerate(reqs):
        c = caches[i % instances]
        prefix = True
        for h in r["hash_ids"]:
            refs += 1
            if prefix and h in c:
                hits += 1
                c.move_to_end(h)
            else:
                prefix = False
                c[h] = True
                c.move_to_end(h)
                if len(c) > capacity:
                    c.popitem(last=False)
    return hits / refs


def hitrate(trace):
    if not trace or not os.path.exists(trace):
        return "(trace not found: section skipped)", {}
    reqs = load_trace(trace)
    distinct = len({h for r in reqs for h in r["hash_ids"]})
    tokens_per_block = 512
    rows, data = [], {}
    for frac in (0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0):
        cap = max(1, int(distinct * frac))
        shared = prefix_lru(reqs, cap)
        sep4 = prefix_lru(reqs, max(1, cap // 4), 4)
        sep16 = prefix_lru(reqs, max(1, cap // 16), 16)
        rows.append([f"{frac:.0%}", f"{cap:,}", f"{cap * tokens_per_block / 1e6:.1f}",
                     fmt_bytes(cap * tokens_per_block * 128 * KiB),
                     f"{shared * 100:.1f}%", f"{sep4 * 100:.1f}%", f"{sep16 * 100:.1f}%"])
        data[frac] = {"blocks": cap, "shared": shared, "4_separate": sep4,
                      "16_separate": sep16}
    for n in (4, 16):
        data[f"{n}_separate_unbounded"] = prefix_lru(reqs, 1 << 40, n)
    span = (reqs[-1]["timestamp"] - reqs[0]["timestamp"]) / 1000
    text = table(["size (of distinct blocks)", "blocks", "M tokens", "KV bytes, Llama-3.1-8B bf16",
                  "one shared LRU", "4 separate LRUs of 1/4", "16 separate of 1/16"], rows)
    text += (f"\n\nTrace: {len(reqs):,} requests over {span / 60:.1f} min, {distinct:,} "
             f"distinct 512-token blocks; requests dealt round-robin to the instances. "
             f"Separate caches without any bound: 4 instances "
             f"{data['4_separate_unbounded'] * 100:.1f}%, 16 instances "
             f"{data['16_separate_unbounded'] * 100:.1f}% (what no local size can pass "
             f"without sharing).")
    return text, data


def network():
    rows, data = [], {}
    # Mean prefill length of the Mooncake synthetic trace (15,325 tokens)
    # rounded: the attention term grows with it.
    ctx = 15000
    peak = GPU_PEAK_FLOPS["H100 SXM"]
    for m in MODELS:
        name, layers, _, head_dim, active, heads, mla = m
        bpt = bf16_bytes_per_token(m)
        # 2 FLOPs per active parameter per token, plus attention over the
        # prefix (QK^T and AV, 4 * layers * d * t at position t, mean t =
        # ctx / 2). Omitted for MLA's absorbed attention (an underestimate).
        attn = 0 if mla else 2 * layers * heads * head_dim * ctx
        flops = 2 * active + attn
        t_gpu = flops / (peak * PREFILL_MFU) * 1e6
        row = [name, f"{flops / 1e9:.0f}", f"{t_gpu:.1f}", f"{t_gpu / 8:.1f}", fmt_bytes(bpt)]
        links = {}
        for gbit in LINKS_GBIT:
            t_net = bpt / (gbit / 8 * 1e9) * 1e6
            links[gbit] = t_net
            row.append(f"{t_net:.1f}")
        row.append(f"{bpt * 8 / (t_gpu * 1e-6) / 1e9:.0f}")
        rows.append(row)
        data[name] = {"flops_per_token": flops, "recompute_us_1gpu": t_gpu,
                      "bytes_per_token": bpt, "load_us": links}
    text = table(["model", "GFLOP / token", "recompute µs/token, 1 GPU",
                  "8 GPUs", "KV bytes / token"] + [f"load µs/token @{g} Gb/s" for g in LINKS_GBIT]
                 + ["Gb/s to match 1 GPU"], rows)
    text += (f"\n\nRecompute: {peak / 1e12:.0f} TFLOP/s dense BF16 (H100 SXM and H200 SXM alike) "
             f"at an ASSUMED {PREFILL_MFU:.0%} MFU, prefix of {ctx:,} tokens. Load: KV bytes "
             "over the link at line rate, no protocol overhead, one stream per GPU. "
             "A 4-bit codec divides the load time by "
             f"{1 / four_bit_factor():.2f}.")
    return text, data


SECTIONS = OrderedDict([
    ("connections", ("Connections", lambda a: connections())),
    ("fanout", ("Fan-out of a batched exists", lambda a: fanout())),
    ("failover", ("Failover and the slot map", lambda a: failover())),
    ("hotprefix", ("A hot prefix", lambda a: hotprefix())),
    ("memory", ("Memory sizing", lambda a: memory())),
    ("hitrate", ("Hit rate against size (Mooncake trace, simple LRU)", lambda a: hitrate(a.trace))),
    ("network", ("Network against recompute", lambda a: network())),
])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_trace = os.path.normpath(os.path.join(
        here, "..", "..", "..", "shared", "traces", "mooncake_synthetic_trace.jsonl"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sections", nargs="*", help="any of: " + " ".join(SECTIONS))
    ap.add_argument("--trace", default=default_trace)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    names = args.sections or list(SECTIONS)
    for n in names:
        if n not in SECTIONS:
            ap.error(f"unknown section {n!r}")
    out = {}
    for n in names:
        title, fn = SECTIONS[n]
        text, data = fn(args)
        out[n] = data
        if not args.json:
            print(f"### {title}\n\n{text}\n")
    if args.json:
        json.dump(out, sys.stdout, indent=1, default=str)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
