"""Views of engine memory never outlive it (issue 15, item 6).

Pinned.memoryview()/numpy()/torch() are zero-copy views of pages the engine
owns; kvt_close() unmaps them. Before the fix a view made before close() or
after it read unmapped memory: SIGSEGV or garbage. Every test that would read
such memory on a broken binding runs it in a child process, so a crash fails
the test instead of killing pytest.
"""

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest
import torch

import kvtier
from conftest import PAGE, subprocess_env

# hbm 64 pages: a 256 KiB arena, mapped on its own and unmapped by kvt_close,
# so a read after close faults instead of finding the memory still there.
PRELUDE = """
import gc, sys, weakref
import kvtier
P = 4096
def engine():
    return kvtier.Engine(page_bytes=P, hbm_bytes=64 * P, dram_bytes=64 * P, device="host")
def pinned_page(e, byte=7):
    e.put([(1, 0, 0)], [bytes([byte]) * P])
    return e.acquire([(1, 0, 0)])
def head(v):  # the first 4 bytes of a numpy, memoryview or torch view
    import numpy as np
    return bytes(np.asarray(v)[:4])
"""


def run_child(body):
    """Runs PRELUDE + body in a new interpreter; returns its stdout. Fails on a
    crash (negative return code = the signal) or any non-zero exit."""
    code = PRELUDE + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code], env=subprocess_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (f"child exited {r.returncode}"
                               f"{' (signal %d)' % -r.returncode if r.returncode < 0 else ''}\n"
                               f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r.stdout


@pytest.mark.parametrize("kind", ["numpy", "memoryview", "torch"])
def test_close_refuses_while_a_view_lives(kind):
    out = run_child(f"""
        e = engine()
        p = pinned_page(e)
        v = getattr(p, "{kind}")()
        p.release()
        try:
            e.close()
        except ValueError as ex:
            print("refused:", ex)
        else:
            # The broken binding gets here: reading v faults or finds garbage.
            print("closed under a live view; it reads", head(v))
            sys.exit(3)
        assert not e.closed and e.stats().pages == 1  # nothing changed: still open
        assert head(v) == bytes([7]) * 4
        del v
        e.close()
        assert e.closed
        print("closed after del")
    """)
    assert f"refused: Engine.close(): 1 view(s)" in out and f"{kind}() of page 0 (1, 0, 0)" in out
    assert "closed after del" in out


def test_with_block_refuses_to_close_under_a_view():
    out = run_child("""
        try:
            with engine() as e:
                with pinned_page(e) as p:
                    a = p.numpy()
        except ValueError as ex:
            print("refused:", ex)
        else:
            print("closed; a reads", int(a.sum()))
            sys.exit(3)
        assert not e.closed and int(a.sum()) == 7 * P
        del a
        e.close()
        print("ok")
    """)
    assert "refused" in out and out.strip().endswith("ok")


def test_forgotten_engine_is_not_collected_under_a_view():
    # No close() at all: the engine's last reference goes while a view
    # lives. Its __del__ used to close it under the view.
    out = run_child("""
        e = engine()
        p = pinned_page(e)
        a = p.numpy()
        t = p.torch()
        wr = weakref.ref(e)
        del e, p
        gc.collect()
        assert wr() is not None, "engine collected under live views"
        assert int(a.sum()) == 7 * P and int(t.sum()) == 7 * P
        del a, t
        gc.collect()
        assert wr() is None, "engine outlived its views"
        print("ok")
    """)
    assert out.strip() == "ok"


def test_an_exception_is_not_masked_by_the_refusal():
    # The with-block ends by an exception while a view lives: that exception
    # comes out (not close()'s ValueError) and the engine stays open under the
    # view; it closes once the view and the engine are gone.
    out = run_child("""
        class Boom(Exception):
            pass
        try:
            with engine() as e:
                p = pinned_page(e)
                a = p.numpy()
                raise Boom()
        except Boom:
            print("Boom came out")
        assert not e.closed, "closed under a live view"
        assert int(a.sum()) == 7 * P
        wr = weakref.ref(e)
        del e, p, a
        gc.collect()
        assert wr() is None
        print("ok")
    """)
    assert "Boom came out" in out and out.strip().endswith("ok")


@pytest.mark.parametrize("kind", ["numpy", "memoryview", "torch"])
def test_no_view_after_close(kind):
    out = run_child(f"""
        e = engine()
        p = pinned_page(e)
        e.close()
        try:
            v = p.{kind}()
        except ValueError as ex:
            print("refused:", ex)
        else:
            print("made a view after close; it reads", head(v))
            sys.exit(3)
    """)
    assert "refused: the kvtier engine is closed" in out


def test_views_in_garbage_cycles_do_not_block_close(make_engine):
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    p = e.acquire([(1, 0, 0)])

    class Holder:
        pass

    h = Holder()
    h.me, h.view = h, p.numpy()  # a cycle: only the collector frees it
    del h
    p.release()
    e.close()
    assert e.closed


def test_close_names_every_live_view(make_engine):
    e = make_engine()
    e.put([(1, 0, i) for i in range(2)], [bytes(PAGE)] * 2)
    p = e.acquire([(1, 0, 0), (1, 0, 1)])
    a, m = p.numpy(1), p.memoryview(0)
    sl = m[10:20]
    del m  # the slice still views page 0
    with pytest.raises(kvtier.ViewsAlive) as ei:
        e.close()
    msg = str(ei.value)
    assert "2 view(s)" in msg and "numpy() of page 1 (1, 0, 1)" in msg
    assert "memoryview() of page 0 (1, 0, 0)" in msg
    assert isinstance(ei.value, ValueError)
    del a
    with pytest.raises(ValueError, match="1 view"):
        e.close()
    del sl
    p.release()
    e.close()
    assert e.closed


def test_views_stay_zero_copy_and_writable(make_engine):
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    with e.acquire([(1, 0, 0)]) as p:
        a, t, m = p.numpy(), p.torch(), p.memoryview()
        assert a.ctypes.data == t.data_ptr() == p.ptrs[0]
        assert a.flags.writeable and not m.readonly and m.format == "B" and len(m) == PAGE
        m[0] = 3
        assert a[0] == 3 and int(t[0]) == 3
        p.dirty = True
    del a, t, m
    assert e.get([(1, 0, 0)])[0][0] == 3


def test_no_view_after_release(make_engine):
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    p = e.acquire([(1, 0, 0)])
    p.release()
    for make in (p.numpy, p.memoryview, p.torch):
        with pytest.raises(ValueError, match="released"):
            make()


def test_device_page_refuses_after_release(make_engine):
    # A DevicePage made by Pinned.cuda_array(): torch/cupy read its
    # __cuda_array_interface__ when they wrap it, which must fail once its
    # page is released or its engine closed. Exercised with a host page (the
    # check does not depend on the back-end).
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    p = e.acquire([(1, 0, 0)])
    d = kvtier.DevicePage(p.ptrs[0], PAGE, owner=p)
    assert d.__cuda_array_interface__["data"] == (p.ptrs[0], False)
    p.release()
    with pytest.raises(ValueError, match="released"):
        d.__cuda_array_interface__
    with pytest.raises(ValueError):
        hasattr(d, "__cuda_array_interface__")  # not silently "no interface"
    # A DevicePage made by hand has no owner: a plain description.
    assert kvtier.DevicePage(0x1000, PAGE).__cuda_array_interface__["shape"] == (PAGE,)


def test_ticket_after_close_says_closed(make_engine):
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    t = e.acquire_async([(1, 0, 0)])
    e.close()  # waits for the ticket itself
    with pytest.raises(ValueError, match="closed"):
        t.wait()
    with pytest.raises(ValueError, match="closed"):
        t._pinned.numpy()


def test_cache_and_storage_leave_no_views(tmp_path):
    # The adapters view pages only inside their own calls: closing right after
    # works (a view kept by them would make close() refuse).
    from kvtier.cache import KVTierCache
    from kvtier.storage import KVTierStorage
    e = kvtier.Engine(page_bytes=PAGE, hbm_bytes=4 * PAGE, dram_bytes=4 * PAGE, device="host")
    cache = KVTierCache(e, page_tokens=4)
    k = torch.randn(1, 2, 9, 32)  # 2 full pages of 2*2*4*32*4 = 4 KiB
    cache.update(k, k, 0)
    gk, _ = cache.update(k[:, :, :1], k[:, :, :1], 0)
    assert gk.shape[2] == 10
    cache[0]
    s = KVTierStorage(e)
    s.set("a", np.zeros(PAGE, np.uint8))
    assert s.get("a") is not None
    e.close()
    assert e.closed


def test_engine_weakref_dies_without_views():
    # The exporter registry holds views weakly: an engine nobody references
    # (and no view) is collected, and its __del__ closes it.
    e = kvtier.Engine(page_bytes=PAGE, hbm_bytes=4 * PAGE, dram_bytes=4 * PAGE, device="host")
    e.put([(1, 0, 0)], [bytes(PAGE)])
    with e.acquire([(1, 0, 0)]) as p:
        p.numpy()[0]
    wr = weakref.ref(e)
    del e, p
    gc.collect()
    assert wr() is None
