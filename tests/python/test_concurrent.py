"""Callers at once on one engine, as an engine's plug-in drives it from its
worker threads: a put waits for what other calls hold (a page another get is
reading, the DRAM slots other calls stage pages in) instead of refusing, so
no store is lost while the engine has room (api/buffers.c), and every page
read back is one whole version of its key."""

import struct
import threading

import kvtier

PAGE = 4096
IDS = 48          # keys shared by the threads: they store and read the same ones
THREADS = 4
ROUNDS = 150
CHAIN = 4


def page(kid, version):
    return struct.pack("<QQ", kid, version) * (PAGE // 16)


def whole_version_of(buf, kid):
    """The version buf holds, when it is one whole version of key kid."""
    head = bytes(buf[:16])
    got, version = struct.unpack("<QQ", head)
    if got != kid or bytes(buf) != head * (PAGE // 16):
        return None
    return version


def test_threads_store_and_read_without_refusals(make_engine):
    # 8 DRAM pages for 4 threads each moving 4: the calls hold every slot
    # between them, while the engine (HBM 1 + DRAM 8 + SSD 256 pages) has
    # room for every key.
    e = make_engine(hbm_bytes=PAGE, dram_bytes=8 * PAGE, ssd_bytes=256 * PAGE,
                    flags=kvtier.KVT_FLAG_EVICT, policy="lru")
    errors, torn = [], []

    def worker(tid):
        seed = 0x9E3779B97F4A7C15 * (tid + 1) & (2**64 - 1)
        for r in range(ROUNDS):
            seed ^= seed << 13 & (2**64 - 1)
            seed ^= seed >> 7
            seed ^= seed << 17 & (2**64 - 1)
            first = seed % (IDS - CHAIN)
            kids = list(range(first, first + CHAIN))
            keys = [(k, 0, 0) for k in kids]
            try:
                e.put(keys, [page(k, tid * ROUNDS + r) for k in kids])
                for k, got in zip(kids, e.get(keys)):
                    if got is None:
                        errors.append(f"t{tid} r{r}: key {k} missing after its put")
                    elif whole_version_of(got, k) is None:
                        torn.append(k)
            except kvtier.KvtError as x:
                errors.append(f"t{tid} r{r}: {x!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not torn, f"pages read back torn or under the wrong key: {torn[:5]}"
    assert not errors, f"{len(errors)} calls failed; first: {errors[0]}"
    st = e.stats()
    assert st.evicted_pages == 0  # never full: nothing had to go
    assert st.pages <= IDS
