#!/usr/bin/env python3
"""The prefix-cache policy ideas tried before kvtier's `prefix` policy, on the
model `kvtier sim` uses for JSONL traces (docs/sim.md#prefix-cache-policies):
a cache of C blocks; a request hits the leading blocks present, then every
block of it is stored or touched; a victim is never a block of the request
being served. LRU and Belady MIN here agree with `kvtier sim` to the third
decimal; the shipped policies (lru, arc, prefix) run in `kvtier sim` itself.
Prototypes, slow (minutes): not the engine's code.

Usage: policy_lab.py TRACE [--capacity 0.05,0.1,0.2,0.4] [--ideas a,b,...]
"""
import argparse
import heapq
import json
import math
import random
from collections import Counter, OrderedDict, defaultdict


def load(path):
    reqs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                reqs.append(json.loads(line)["hash_ids"])
    return reqs


def hit_len(h, present):
    k = 0
    while k < len(h) and h[k] in present:
        k += 1
    return k


def run_heap(R, C, key):
    """Evict the smallest key(state) first; state per block: (count, first,
    last, class info). Keys are static between uses (no rescoring)."""
    present, heap, hits, tot, clock = {}, [], 0, 0, 0
    cnt, first = defaultdict(int), {}
    st = {"L": 0.0}
    for h in R:
        k = hit_len(h, present)
        hits += k
        tot += len(h)
        m = 0
        while m < len(h) and cnt[h[m]] > 0:
            m += 1
        for b in h:
            cnt[b] += 1
        for d, b in enumerate(h):
            clock += 1
            first.setdefault(b, clock)
            p = (key(st, cnt[b], clock, first[b], d, len(h), m, C), -d)
            present[b] = p
            heapq.heappush(heap, (p, b))
        cur, keep = set(h), []
        while len(present) > C:
            p, b = heapq.heappop(heap)
            if present.get(b) != p:
                continue
            if b in cur:
                keep.append((p, b))
                continue
            del present[b]
            st["L"] = max(st["L"], p[0] if isinstance(p[0], (int, float)) else 0)
        for x in keep:
            heapq.heappush(heap, x)
    return hits / tot


def lrfu_key(T):
    vals = {}

    def key(st, n, clock, first, d, ln, m, C):
        b = (n, first)  # identity of the block's history
        lv = vals.get(b[1])
        v = clock / (T * C) if lv is None else math.log(math.exp(lv - clock / (T * C)) + 1) + clock / (T * C)
        vals[b[1]] = v
        return v
    return key


RANK = {"S": 3, "F": 2, "C": 1, "T": 0}


def cls(n, d, ln, m):
    return "S" if n >= 2 else ("T" if d == ln - 1 else ("C" if m > 0 else "F"))


def run_oracle_admit(R, C):
    fut = Counter(b for h in R for b in h)
    seen, c, hits, tot = Counter(), OrderedDict(), 0, 0
    for h in R:
        k = hit_len(h, c)
        hits += k
        tot += len(h)
        for b in h:
            seen[b] += 1
            if b in c:
                c.move_to_end(b)
            elif fut[b] > seen[b]:
                c[b] = 1
        while len(c) > C:
            c.popitem(last=False)
    return hits / tot


def run_static_top(R, C):
    tot_cnt = Counter(b for h in R for b in h)
    top = set(b for b, _ in tot_cnt.most_common(C))
    present, hits, tot = set(), 0, 0
    for h in R:
        k = hit_len(h, present)
        hits += k
        tot += len(h)
        present.update(b for b in h if b in top)
    return hits / tot


def run_hit_density(R, C, samples=32, seed=1):
    """LHD (Beckmann et al., NSDI'18): evict the sampled block of lowest
    expected hits per unit of remaining lifetime, learned per class (uses
    so far, 1..3) and log-age bucket."""
    NB = 64

    def bk(age):
        return 0 if age <= 0 else min(int(math.log2(age) * 4), NB - 1)
    rnd = random.Random(seed)
    present, keys, pos, cnt = {}, [], {}, defaultdict(int)
    H = [[0.0] * NB for _ in range(3)]
    E = [[0.0] * NB for _ in range(3)]
    D = [[1.0] * NB for _ in range(3)]
    clock, hits, tot, nxt = 0, 0, 0, max(C // 2, 256)
    for h in R:
        k = hit_len(h, present)
        hits += k
        tot += len(h)
        for d, b in enumerate(h):
            clock += 1
            if b in present:
                la, c = present[b]
                (H if d < k else E)[c][bk(clock - la)] += 1
            else:
                pos[b] = len(keys)
                keys.append(b)
            cnt[b] += 1
            present[b] = (clock, min(cnt[b], 3) - 1)
        cur = set(h)
        while len(present) > C:
            best = None
            for _ in range(samples):
                b = keys[rnd.randrange(len(keys))]
                if b in cur:
                    continue
                la, c = present[b]
                if best is None or D[c][bk(clock - la)] < best[0]:
                    best = (D[c][bk(clock - la)], b)
            if best is None:
                continue
            b = best[1]
            la, c = present.pop(b)
            i = pos.pop(b)
            last = keys.pop()
            if i < len(keys):
                keys[i] = last
                pos[last] = i
            E[c][bk(clock - la)] += 1
        if clock >= nxt:
            nxt = clock + max(C // 2, 256)
            for c in range(3):
                ch = ce = life = 0.0
                for a in range(NB - 1, -1, -1):
                    ch += H[c][a]
                    ce += E[c][a]
                    life += ch + ce
                    D[c][a] = ch / life if life > 0 else 0.0
                    H[c][a] *= 0.9
                    E[c][a] *= 0.9
    return hits / tot


IDEAS = {
    "lru": ("LRU (baseline)", lambda R, C: run_heap(R, C, lambda st, n, c, f, d, ln, m, C_: c)),
    "lfu": ("LFU: uses so far (ghosts kept), LRU among equals",
            lambda R, C: run_heap(R, C, lambda st, n, c, f, d, ln, m, C_: (n, c))),
    "lfuda": ("LFU with dynamic aging (GDSF-style inflation)",
              lambda R, C: run_heap(R, C, lambda st, n, c, f, d, ln, m, C_: st["L"] + n)),
    "lrfu": ("LRFU: exponentially decayed use count, horizon 4 x capacity",
             lambda R, C: run_heap(R, C, lrfu_key(4.0))),
    "hit_density": ("hit density (LHD), 3 use classes x log age, 32 samples", run_hit_density),
    "classes_strict": ("reuse classes, strict order shared > fresh > continuation > tail",
                       lambda R, C: run_heap(R, C, lambda st, n, c, f, d, ln, m, C_:
                                             (RANK[cls(n, d, ln, m)], c))),
    "shared_first": ("two classes only: used by >= 2 requests, then the rest",
                     lambda R, C: run_heap(R, C, lambda st, n, c, f, d, ln, m, C_: (n >= 2, c))),
    "oracle_admit": ("LRU admitting only blocks that will be used again (offline bound)",
                     run_oracle_admit),
    "static_top": ("the C most used blocks of the whole trace, pinned (offline bound)",
                   run_static_top),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--capacity", default="0.05,0.1,0.2,0.4")
    ap.add_argument("--ideas", default=",".join(IDEAS))
    a = ap.parse_args()
    R = load(a.trace)
    distinct = len(set(b for h in R for b in h))
    caps = [float(x) for x in a.capacity.split(",")]
    print("| idea | " + " | ".join(f"{c:g}" for c in caps) + " |")
    print("|---|" + "---|" * len(caps))
    for name in a.ideas.split(","):
        label, fn = IDEAS[name]
        row = [f"{fn(R, int(c * distinct)):.3f}" for c in caps]
        print(f"| {label} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
