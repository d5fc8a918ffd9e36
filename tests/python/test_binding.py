"""The ctypes binding against the header: layouts, every call, every buffer kind."""

import array
import ctypes
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import kvtier
from kvtier import _lib
from conftest import HEADER, PAGE, subprocess_env


def header_struct_fields(name):
    """Field names of `typedef struct name {...}` in kvtier.h, in order."""
    text = HEADER.read_text()
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        # "uint64_t hits[3], misses[3]" -> hits, misses ; "const char *ssd_dir" -> ssd_dir
        first, *rest = decl.split(",")
        for part in [first.split()[-1]] + rest:
            names.append(re.sub(r"[\s*]|\[.*\]", "", part))
    return names


@pytest.mark.parametrize("cname,ctype", [("kvt_key", _lib.KvtKey), ("kvt_config", _lib.KvtConfig),
                                          ("kvt_schedule", _lib.KvtSchedule),
                                          ("kvt_stats", _lib.KvtStats),
                                          ("kvt_transfer_event", _lib.KvtTransferEvent)])
def test_struct_fields_follow_header_order(cname, ctype):
    assert [f[0] for f in ctype._fields_] == header_struct_fields(cname)


def test_struct_layout_matches_c_compiler(tmp_path):
    # offsetof/sizeof from the real compiler against ctypes, field by field.
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to compute offsetof (ctypes layout still checked by order)")
    structs = {"kvt_key": _lib.KvtKey, "kvt_config": _lib.KvtConfig,
               "kvt_transfer_event": _lib.KvtTransferEvent,
               "kvt_schedule": _lib.KvtSchedule, "kvt_stats": _lib.KvtStats}
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "kvtier.h"', "int main(void){"]
    expect = []
    for cname, ctype in structs.items():
        lines.append(f'printf("%zu\\n", sizeof({cname}));')
        expect.append(ctypes.sizeof(ctype))
        for fname, _ in ctype._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cname}, {fname}));')
            expect.append(getattr(ctype, fname).offset)
    lines.append("return 0;}")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", str(HEADER.parent), str(src), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True,
                                          text=True).stdout.split()]
    assert got == expect


def test_version_matches_header():
    number, text = kvtier.version()
    h = HEADER.read_text()
    major, minor, patch = (int(re.search(r"#define KVT_VERSION_%s (\d+)" % p, h).group(1))
                           for p in ("MAJOR", "MINOR", "PATCH"))
    assert number == major * 10000 + minor * 100 + patch
    assert text == f"{major}.{minor}.{patch}"


def test_config_defaults_come_from_kvt_config_init():
    cfg, _keep = kvtier.make_config()
    # The defaults kvtier.h documents for kvt_config_init().
    assert cfg.page_bytes == 256 << 10
    assert cfg.hbm_bytes == 1 << 30 and cfg.dram_bytes == 4 << 30 and cfg.ssd_bytes == 0
    assert cfg.device == kvtier.KVT_DEVICE_AUTO and cfg.policy == b"decode"
    assert cfg.queue_depth == 32 and cfg.persist == 0 and cfg.fingerprint == 0
    cfg, _keep = kvtier.make_config(page_bytes=8192, device="host", codec="zstd",
                                    io_backend="psync", policy="lru", persist=True,
                                    fingerprint=7, queue_depth=4, host_link_gbps=2.5,
                                    prefetch_bytes=16384, ssd_dir="/x")
    assert (cfg.page_bytes, cfg.device, cfg.codec, cfg.io_backend, cfg.policy, cfg.persist,
            cfg.fingerprint, cfg.queue_depth, cfg.host_link_gbps, cfg.prefetch_bytes,
            cfg.ssd_dir) == (8192, -1, 1, 2, b"lru", 1, 7, 4, 2.5, 16384, b"/x")
    with pytest.raises(TypeError, match="page_size"):
        kvtier.make_config(page_size=4096)
    with pytest.raises(ValueError, match="hbm_bytes"):
        kvtier.make_config(hbm_bytes=-1)


def test_open_reports_geometry_and_capacity(make_engine):
    e = make_engine(page_bytes=2 * PAGE, hbm_bytes=3 * 2 * PAGE, dram_bytes=5 * 2 * PAGE,
                    ssd_bytes=7 * 2 * PAGE)
    assert e.page_bytes == 2 * PAGE and e.device_name == "host"
    s = e.stats()
    assert s.capacity_pages == (3, 5, 7)
    assert s.pages == 0 and s.pinned_pages == 0 and s.bytes_put == 0


def _buffers(i):
    """One page of byte value i in each kind of buffer the binding accepts."""
    return {
        "bytes": bytes([i]) * PAGE,
        "bytearray": bytearray([i]) * PAGE,
        "memoryview": memoryview(bytearray([i]) * PAGE),
        "array": array.array("B", [i]) * PAGE,
        "numpy": np.full(PAGE, i, np.uint8),
        "numpy_f32": np.full(PAGE // 4, i, np.float32),
        "torch": torch.full((PAGE,), i, dtype=torch.uint8),
        "torch_f16_2d": torch.full((16, PAGE // 32), i, dtype=torch.float16),
    }


def test_put_get_every_buffer_kind(make_engine):
    e = make_engine()
    kinds = list(_buffers(0))
    srcs = {k: _buffers(n + 1)[k] for n, k in enumerate(kinds)}
    keys = {k: (100 + n, 0, 0) for n, k in enumerate(kinds)}
    for k in kinds:
        e.put([keys[k]], [srcs[k]])
    for k in kinds:
        if k == "bytes":
            continue  # bytes is read-only: a source, never a target
        dst = _buffers(0)[k]
        out = e.get([keys[k]], [dst])
        assert out[0] is dst
        assert bytes(memoryview(np.asarray(dst)).cast("B")) == bytes(memoryview(np.asarray(srcs[k])).cast("B"))
    # get without targets allocates bytearrays; a miss is None.
    got = e.get([keys["bytes"], (999, 0, 0)])
    assert got[0] == srcs["bytes"] and got[1] is None
    s = e.stats()
    assert s.bytes_put == len(kinds) * PAGE
    assert s.bytes_get == len(kinds) * PAGE  # every kind but bytes, plus the allocated one


def test_put_reads_source_without_copy_and_get_writes_in_place(make_engine):
    e = make_engine()
    t = torch.arange(PAGE // 4, dtype=torch.float32)
    e.put([(1, 2, 3)], [t])
    dst = torch.zeros(PAGE // 4, dtype=torch.float32)
    ptr = dst.data_ptr()
    e.get([(1, 2, 3)], [dst])
    assert dst.data_ptr() == ptr and torch.equal(dst, t)
    # A slice of a larger buffer is written exactly there, nothing around it.
    big = bytearray(3 * PAGE)
    e.get([(1, 2, 3)], [memoryview(big)[PAGE:2 * PAGE]])
    assert big[:PAGE] == bytes(PAGE) and big[2 * PAGE:] == bytes(PAGE)
    assert big[PAGE:2 * PAGE] == t.numpy().tobytes()


def test_exists_hit_prefix_and_tiers(make_engine):
    e = make_engine()
    pages = [np.full(PAGE, i, np.uint8) for i in range(12)]
    keys = [(7, 0, i) for i in range(12)]
    for i in range(0, 12, 4):
        e.put(keys[i:i + 4], pages[i:i + 4])
    r = e.exists(keys)
    assert r.prefix == 12 and len(r.where) == 12
    # 12 pages with 4 HBM + 4 DRAM slots: some must have gone down to SSD.
    assert set(r.where) <= {0, 1, 2} and 2 in r.where
    gap = keys[:5] + [(7, 0, 99)] + keys[5:]
    r = e.exists(gap)
    assert r.prefix == 5 and r.where[5] == kvtier.KVT_TIER_NONE
    assert e.exists([]).prefix == 0


def test_stats_fields_are_the_header_fields(make_engine):
    e = make_engine()
    s = e.stats()
    assert list(s.as_dict()) == header_struct_fields("kvt_stats")
    for name in ("resident_pages", "hits", "misses", "bytes_up", "bytes_down", "capacity_pages"):
        assert isinstance(getattr(s, name), tuple) and len(getattr(s, name)) == 3
    e.put([(1, 0, 0)], [bytes(PAGE)])
    s2 = e.stats()
    assert s2.pages == 1 and s2.bytes_put == PAGE and sum(s2.resident_pages) >= 1


def test_acquire_views_are_zero_copy(make_engine):
    e = make_engine()
    e.put([(1, 0, 0), (1, 0, 1)], [bytes([5]) * PAGE, bytes([6]) * PAGE])
    with e.acquire([(1, 0, 0), (1, 0, 1)]) as p:
        assert e.stats().pinned_pages == 2
        a, b = p.numpy(0), p.torch(1)
        assert a.ctypes.data == p.ptrs[0] and b.data_ptr() == p.ptrs[1]
        assert (a == 5).all() and bool((b == 6).all())
        assert p.memoryview(0)[0] == 5 and p.numpy(1, dtype=np.uint32).size == PAGE // 4
        # Writing through the view and releasing dirty changes the page.
        a[:] = 9
        p.dirty = True
    assert e.stats().pinned_pages == 0 and p.released
    assert e.get([(1, 0, 0)])[0] == bytes([9]) * PAGE
    with pytest.raises(ValueError, match="released"):
        p.numpy(0)


def test_create_writes_a_new_page(make_engine):
    e = make_engine()
    with e.create((3, 1, 0)) as p:
        p.torch(0, dtype=torch.int32)[:] = torch.arange(PAGE // 4, dtype=torch.int32)
    back = np.frombuffer(e.get([(3, 1, 0)])[0], dtype=np.int32)
    assert (back == np.arange(PAGE // 4)).all()
    with pytest.raises(kvtier.KvtExists):
        e.create((3, 1, 0))


def test_acquire_async_and_wait(make_engine):
    e = make_engine()
    e.put([(4, 0, i) for i in range(3)], [bytes([i]) * PAGE for i in range(3)])
    t = e.acquire_async([(4, 0, i) for i in range(3)])
    p = t.wait()
    assert [p.memoryview(i)[0] for i in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="already waited"):
        e.wait(t)
    p.release()
    t2 = e.acquire_async([(4, 0, 0)])
    p2 = e.wait_stream(t2)  # host back-end: the calling thread waits
    assert p2.numpy()[0] == 0
    p2.release()
    # A ticket never waited for is waited by close(), which must not hang or fail.
    e.acquire_async([(4, 0, 1)])
    e.close()
    assert e.closed


def test_drop_release_schedule_flush(make_engine):
    e = make_engine()
    keys = [(8, 0, i) for i in range(3)] + [(9, 0, 0)]
    e.put(keys, [bytes(PAGE)] * 4)
    e.drop(keys[:1] + [(12345, 0, 0)])  # absent keys are ignored
    assert e.exists(keys).where[0] == -1
    p = e.acquire([keys[1]])
    with pytest.raises(kvtier.KvtBusy):
        e.drop_id(8)
    p.release()
    e.drop_id(8)
    assert e.exists(keys).where == [-1, -1, -1, e.exists([(9, 0, 0)]).where[0]]
    with pytest.raises(kvtier.KvtInvalid):
        e.release([(9, 0, 0)])  # not pinned
    e.set_schedule([9, 8], 2, order="seq", window_pages=0, sink_pages=0)
    e.set_schedule([9], 1, order=kvtier.KVT_ORDER_LAYER_MAJOR)
    with pytest.raises(kvtier.KvtInvalid):
        e.set_schedule([9], 0)
    e.advance(9, 0)
    e.flush()
    assert e.stats().resident_pages[1] + e.stats().resident_pages[2] >= 1


def test_closed_engine_refuses_calls(make_engine):
    e = make_engine()
    e.close()
    e.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        e.stats()


def test_library_lookup_honours_kvtier_lib(tmp_path):
    env = subprocess_env()
    env["KVTIER_LIB"] = str(tmp_path / "nope.so")
    r = subprocess.run([sys.executable, "-c", "import kvtier; kvtier.version()"], env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "nope.so" in r.stderr
    env["KVTIER_LIB"] = _lib.lib_path if _lib.lib_path else kvtier.find_library()
    r = subprocess.run([sys.executable, "-c", "import kvtier; print(kvtier.version()[1])"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == kvtier.version()[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA torch and GPU")
def test_cuda_tensors_on_a_cuda_engine(tmp_path):
    with kvtier.Engine(page_bytes=PAGE, hbm_bytes=8 * PAGE, dram_bytes=8 * PAGE,
                       device="cuda") as e:
        if e.device_name != "cuda":
            pytest.skip("library built without the CUDA back-end")
        src = torch.arange(PAGE, dtype=torch.uint8, device="cuda")
        e.put([(1, 0, 0)], [src])
        dst = torch.zeros_like(src)
        e.get([(1, 0, 0)], [dst])
        assert torch.equal(dst, src)
        with e.acquire([(1, 0, 0)]) as p:
            t = torch.as_tensor(p.cuda_array(0), device="cuda")
            assert t.data_ptr() == p.ptrs[0] and torch.equal(t, src)
            with pytest.raises(ValueError, match="view"):
                e.close()  # t views the engine's memory
            del t
