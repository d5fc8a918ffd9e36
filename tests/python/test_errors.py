"""Errors surface as exceptions carrying the library's own text, and a bad
buffer is refused before the engine is touched."""

import errno

import numpy as np
import pytest
import torch

import kvtier
from conftest import PAGE


def test_bad_config_names_the_field(tmp_path):
    with pytest.raises(kvtier.KvtConfigError) as ei:
        kvtier.Engine(page_bytes=1000, hbm_bytes=PAGE, dram_bytes=PAGE, device="host")
    err = ei.value
    assert err.code == -30505 and err.name == "KVT_ECONFIG"
    assert err.message == kvtier.strerror(-30505)
    assert "page_bytes" in err.detail and "page_bytes" in str(err)
    assert isinstance(err, ValueError)  # a config error is also a ValueError

    with pytest.raises(kvtier.KvtConfigError, match="ssd_dir"):
        kvtier.Engine(page_bytes=PAGE, hbm_bytes=PAGE, dram_bytes=PAGE, ssd_bytes=8 * PAGE,
                      device="host")
    with pytest.raises(kvtier.KvtNotSupported, match="belady"):
        kvtier.Engine(page_bytes=PAGE, hbm_bytes=PAGE, dram_bytes=PAGE, policy="belady",
                      device="host")


def test_ssd_dir_in_use_is_ebusy(make_engine, tmp_path):
    make_engine(ssd_dir=str(tmp_path / "shared"))
    with pytest.raises(kvtier.KvtBusy) as ei:
        make_engine(ssd_dir=str(tmp_path / "shared"))
    assert ei.value.errno == errno.EBUSY and ei.value.name == "EBUSY"


def test_acquire_missing_key_is_enotfound_and_pins_nothing(make_engine):
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    with pytest.raises(kvtier.KvtNotFound) as ei:
        e.acquire([(1, 0, 0), (1, 0, 1)])
    assert ei.value.code == -30502 and "(1,0,1)" in ei.value.detail.replace(" ", "")
    assert isinstance(ei.value, LookupError)
    assert e.stats().pinned_pages == 0


def test_efull_when_pins_fill_hbm(make_engine):
    e = make_engine(hbm_bytes=2 * PAGE)
    e.put([(1, 0, i) for i in range(3)], [bytes(PAGE)] * 3)
    with pytest.raises(kvtier.KvtFull):
        e.acquire([(1, 0, i) for i in range(3)])
    assert e.stats().pinned_pages == 0


def test_key_out_of_range_is_refused_not_wrapped(make_engine):
    e = make_engine()
    for bad in [(-1, 0, 0), (1 << 64, 0, 0), (1, 1 << 32, 0), (1, 0, -1),
                (np.int64(-1), 0, 0), (1, np.int64(1 << 32), 0)]:
        # OverflowError (does not fit the C field), and a ValueError as before.
        with pytest.raises(OverflowError):
            e.put([bad], [bytes(PAGE)])
        with pytest.raises(ValueError):
            e.put([bad], [bytes(PAGE)])
    with pytest.raises(TypeError, match="sequence of keys"):
        e.exists((1, 0, 0))
    assert e.stats().pages == 0


NOT_INTEGERS = [1.5, 1.0, np.float64(2.0), "7", b"7", None, 2 + 0j, torch.tensor(1.0)]
BOOLS = [True, False, np.True_, torch.tensor(True)]


@pytest.mark.parametrize("bad", NOT_INTEGERS + BOOLS, ids=repr)
@pytest.mark.parametrize("slot", [0, 1, 2], ids=["id", "layer", "index"])
def test_key_fields_must_be_integers(make_engine, bad, slot):
    # A float key id used to be truncated (1.5 -> key 1, 1.0 -> key 1) and "7"
    # parsed: another key's page would be read or overwritten. bool is refused
    # too: True is an int to Python, but a flag where an id belongs is a bug.
    e = make_engine()
    key = [1, 0, 0]
    key[slot] = bad
    with pytest.raises(TypeError, match="bool" if any(bad is b for b in BOOLS) else "integer"):
        e.put([tuple(key)], [bytes(PAGE)])
    for call in (lambda: e.get([tuple(key)]), lambda: e.exists([tuple(key)]),
                 lambda: e.acquire([tuple(key)]), lambda: e.drop([tuple(key)]),
                 lambda: e.create(tuple(key)), lambda: e.acquire_async([tuple(key)])):
        with pytest.raises(TypeError):
            call()
    assert e.stats().pages == 0 and e.stats().pinned_pages == 0


@pytest.mark.parametrize("bad", [1.5, "7", True, np.True_], ids=repr)
def test_ids_outside_keys_must_be_integers(make_engine, bad):
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    with pytest.raises(TypeError):
        e.drop_id(bad)
    with pytest.raises(TypeError):
        e.advance(bad, 0)
    with pytest.raises(TypeError):
        e.advance(1, bad)
    with pytest.raises(TypeError):
        e.set_schedule([1, bad], 1)
    with pytest.raises(TypeError):
        e.set_schedule([1], bad)
    assert e.exists([(1, 0, 0)]).prefix == 1  # drop_id(1.5) did not drop id 1


def test_numpy_and_torch_integers_are_key_fields(make_engine):
    e = make_engine()
    key = (np.uint64((1 << 64) - 1), np.int32(3), torch.tensor(4))
    e.put([key], [bytes([9]) * PAGE])
    assert e.get([((1 << 64) - 1, 3, 4)])[0] == bytes([9]) * PAGE
    e.drop_id(np.uint64((1 << 64) - 1))
    assert e.exists([((1 << 64) - 1, 3, 4)]).prefix == 0


def test_malformed_key_names_the_key(make_engine):
    e = make_engine()
    with pytest.raises(TypeError, match=r"key 1: want \(id, layer, index\)"):
        e.exists([(1, 0, 0), (1, 0)])


@pytest.mark.parametrize("bad", [
    bytes(PAGE - 1),
    bytearray(PAGE + 1),
    np.zeros(PAGE // 2, np.uint16)[::2],               # right size? no: and not contiguous
    np.zeros((2, PAGE), np.uint8)[:, ::2],             # PAGE bytes, but not contiguous
    torch.zeros(PAGE // 4 + 1, dtype=torch.float32),
    torch.zeros((PAGE, 2), dtype=torch.uint8).t()[0],  # PAGE bytes, strided view
])
def test_wrong_buffer_refused_before_anything_is_written(make_engine, bad):
    e = make_engine()
    good = bytes([1]) * PAGE
    keys = [(5, 0, 0), (5, 0, 1)]
    with pytest.raises(ValueError):
        e.put(keys, [good, bad])  # the good first buffer must not be stored either
    s = e.stats()
    assert s.bytes_put == 0 and s.pages == 0 and e.exists(keys).prefix == 0


def test_get_into_wrong_buffer_leaves_targets_untouched(make_engine):
    e = make_engine()
    e.put([(5, 0, 0), (5, 0, 1)], [bytes([1]) * PAGE, bytes([2]) * PAGE])
    ok = bytearray(PAGE)
    for bad in [bytearray(PAGE - 4096 + 1), bytes(PAGE), np.zeros(PAGE, np.uint8)[::-1]]:
        with pytest.raises(ValueError):
            e.get([(5, 0, 0), (5, 0, 1)], [ok, bad])
        assert ok == bytearray(PAGE)
    ro = np.zeros(PAGE, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        e.get([(5, 0, 0)], [ro])
    assert e.stats().bytes_get == 0
    with pytest.raises(TypeError):
        e.put([(6, 0, 0)], [object()])
    with pytest.raises(ValueError, match="2 keys but 1"):
        e.put([(6, 0, 0), (6, 0, 1)], [bytes(PAGE)])


class FakeCudaArray:
    """A __cuda_array_interface__ exporter; the host engine must refuse it
    before dereferencing the (bogus) address."""

    def __init__(self, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (0xdead0000, False), "version": 3,
                                         "strides": None}


def test_cuda_buffers_refused_by_a_host_engine(make_engine):
    e = make_engine()
    with pytest.raises(ValueError, match="CUDA buffers given to an engine on the host"):
        e.put([(1, 0, 0)], [FakeCudaArray(PAGE)])
    with pytest.raises(ValueError, match="bytes, the page is"):
        e.put([(1, 0, 0)], [FakeCudaArray(PAGE - 1)])
    with pytest.raises(ValueError, match="mixed"):
        e.put([(1, 0, 0), (1, 0, 1)], [bytes(PAGE), FakeCudaArray(PAGE)])
    assert e.stats().pages == 0


def test_error_code_mapping_covers_the_library_block():
    for code, cls in [(-30500, kvtier.KvtCorrupt), (-30501, kvtier.KvtFingerprint),
                      (-30502, kvtier.KvtNotFound), (-30503, kvtier.KvtFull),
                      (-30504, kvtier.KvtDeviceError), (-30505, kvtier.KvtConfigError),
                      (-30506, kvtier.KvtNotSupported), (-30507, kvtier.KvtFailed)]:
        err = kvtier._lib.make_error(code, "f")
        assert type(err) is cls and err.code == code and err.errno is None
        assert err.message == kvtier.strerror(code) and err.message
    err = kvtier._lib.make_error(-errno.EIO, "f")
    assert type(err) is kvtier.KvtError and err.errno == errno.EIO and err.name == "EIO"


@pytest.mark.parametrize("field", ["ssd_dir", "policy"])
def test_config_strings_with_nul_are_refused(tmp_path, field):
    # C reads up to the NUL: "DIR\0/../x" would open DIR (a spill directory
    # that the engine may wipe), "lru\0junk" the lru policy.
    value = str(tmp_path / "spill") + "\0/../other" if field == "ssd_dir" else "lru\0x"
    with pytest.raises(ValueError, match="NUL"):
        kvtier.make_config(**{field: value})


@pytest.mark.parametrize("field,value,exc", [
    ("device", (1 << 32) - 1, OverflowError),   # wrapped to -1 = KVT_DEVICE_HOST
    ("device", "cuda:-1", ValueError),          # -1 = host
    ("device", "cuda:1.5", ValueError),
    ("device", "cudax", ValueError),
    ("device", 0.5, TypeError),
    ("codec", 1.7, TypeError),                  # was codec 1 (zstd)
    ("codec", (1 << 32) + 1, OverflowError),    # was codec 1 (zstd)
    ("io_backend", True, TypeError),
    ("hbm_bytes", 1.5e6, TypeError),            # a size is an integer, not truncated
    ("queue_depth", 1 << 32, OverflowError),
    ("fingerprint", -1, ValueError),
])
def test_config_numbers_are_checked_not_wrapped(field, value, exc):
    with pytest.raises(exc):
        kvtier.make_config(**{field: value})


def test_config_device_forms_still_accepted():
    assert kvtier.make_config(device="cuda")[0].device == 0
    assert kvtier.make_config(device="CUDA:3")[0].device == 3
    assert kvtier.make_config(device=np.int32(2))[0].device == 2
    assert kvtier.make_config(device="host")[0].device == kvtier.KVT_DEVICE_HOST
    assert kvtier.make_config(hbm_bytes=np.int64(8192))[0].hbm_bytes == 8192


@pytest.mark.parametrize("make,why", [
    (lambda: torch.empty(PAGE, dtype=torch.uint8, device="meta"), "device meta"),
    (lambda: torch.zeros(PAGE // 8, dtype=torch.complex64).conj(), "conj"),
    (lambda: torch.zeros(PAGE, dtype=torch.uint8).to_sparse(), "sparse"),
], ids=["meta", "conj", "sparse"])
def test_tensors_without_plain_memory_are_refused(make_engine, make, why):
    # meta has data_ptr() 0 (only the library's NULL check stopped it; any
    # other device's pointer would be read as host memory); a conj view's
    # bytes are not its values; a sparse tensor has no data_ptr().
    e = make_engine()
    with pytest.raises(ValueError, match=why):
        e.put([(1, 0, 0)], [make()])
    e.put([(1, 0, 0)], [bytes(PAGE)])
    with pytest.raises(ValueError, match=why):
        e.get([(1, 0, 0)], [make()])
    assert e.stats().bytes_put == PAGE and e.stats().bytes_get == 0


@pytest.mark.parametrize("cai,why", [
    (dict(shape=(-1, -PAGE), typestr="|u1", data=(0xdead0000, False)), "shape"),
    (dict(shape=(PAGE,), typestr="|u1", data=(0, False)), "not a pointer"),
    (dict(shape=(PAGE,), typestr="|u1", data=(-4096, False)), "not a pointer"),
    (dict(shape=(PAGE,), typestr="|ux", data=(0xdead0000, False)), "malformed"),
    (dict(shape=(PAGE,), typestr="|u1"), "malformed"),
    (dict(shape=(PAGE,), typestr="|u1", data=(0xdead0000, False), mask=object()), "mask"),
])
def test_malformed_cuda_array_interface_is_refused_as_such(make_engine, cai, why):
    e = make_engine()
    a = FakeCudaArray(PAGE)
    a.__cuda_array_interface__ = dict(cai, version=3, strides=None)
    with pytest.raises(ValueError, match=why):
        e.put([(1, 0, 0)], [a])
    assert e.stats().pages == 0


@pytest.mark.parametrize("stream,exc", [(1.5, TypeError), (-1, ValueError), ("s", TypeError)])
def test_bad_stream_keeps_the_ticket(make_engine, stream, exc):
    # The ticket was consumed before the stream was converted: the TypeError
    # left it never waited in C, its pin held for good.
    e = make_engine()
    e.put([(1, 0, 0)], [bytes(PAGE)])
    t = e.acquire_async([(1, 0, 0)])
    with pytest.raises(exc, match="stream"):
        e.wait_stream(t, stream)
    t.wait().release()
    assert e.stats().pinned_pages == 0
