#!/usr/bin/env python3
"""Synthetic prefix-cache traces in Mooncake's JSONL format, for checking a
policy away from the one real trace we have (docs/sim.md#other-traces).

  chat   multi-turn chats: each turn extends the previous one's chain by a
         few blocks (its answer and the next question), so the blocks a
         turn adds are the next turn's prefix;
  twice  documents each queried exactly twice, never again: a block used by
         two requests is dead;
  zipf   independent questions over documents of Zipf popularity, each with
         a shared system prompt and a private suffix.

Usage: gen_traces.py KIND [--requests N] [--seed S] > trace.jsonl
"""
import argparse
import json
import random
import sys


def chat(n, rnd):
    nxt = [0]

    def new(k):
        ids = list(range(nxt[0], nxt[0] + k))
        nxt[0] += k
        return ids

    live, t = [], 0
    for _ in range(n):
        t += int(rnd.expovariate(1 / 200))
        if live and rnd.random() < 0.7:
            i = rnd.randrange(len(live))
            chain = live[i] + new(rnd.randint(1, 4))
            if rnd.random() < 0.2:
                live.pop(i)
            else:
                live[i] = chain
        else:
            chain = new(rnd.randint(2, 20))
            live.append(chain)
            if len(live) > 400:
                live.pop(0)
        yield t, chain


def twice(n, rnd):
    nxt, pending, t = 0, [], 0
    for _ in range(n):
        t += int(rnd.expovariate(1 / 200))
        if pending and rnd.random() < 0.5:
            chain = pending.pop(rnd.randrange(len(pending)))
        else:
            k = rnd.randint(4, 40)
            chain = list(range(nxt, nxt + k))
            nxt += k
            pending.append(chain)
        yield t, chain


def zipf(n, rnd, docs=2000, s=1.0):
    weights = [1 / (i + 1) ** s for i in range(docs)]
    lens = [rnd.randint(4, 60) for _ in range(docs)]
    base = 2 * sum(lens) + 10
    nxt, t = base, 0
    for _ in range(n):
        t += int(rnd.expovariate(1 / 200))
        d = rnd.choices(range(docs), weights)[0]
        start = sum(lens[:d]) + 8
        chain = list(range(8)) + list(range(start, start + lens[d]))
        q = rnd.randint(1, 3)
        chain += list(range(nxt, nxt + q))
        nxt += q
        yield t, chain


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["chat", "twice", "zipf"])
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    gen = {"chat": chat, "twice": twice, "zipf": zipf}[a.kind]
    for t, chain in gen(a.requests, rnd):
        sys.stdout.write(json.dumps({"timestamp": t, "input_length": 512 * len(chain),
                                     "output_length": 64, "hash_ids": chain}) + "\n")


if __name__ == "__main__":
    main()
