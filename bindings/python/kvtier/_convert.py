"""Python values checked and converted for the C calls (for the package's own
modules; none of this is public API): integers for C fields, key arrays, and
the memory of buffers borrowed for one call.

- integer(value, what) -> int: ints and numpy/torch integer scalars only.
- uint(value, bits, what), cint(value, what), key_id(value, what) -> int:
  checked against the C field's range (OutOfRange otherwise).
- key_array(keys) -> kvt_key[n] from (id, layer, index) triples.
- Borrowed: the raw memory of a batch of buffers, held for one call;
  buffer_addresses(borrowed, bufs, nbytes, device_name, writable, what)
  -> (void*[n], on_device) checks a whole batch before anything is called.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Iterable, Sequence

from ._lib import KvtKey


class OutOfRange(OverflowError, ValueError):
    """An integer that does not fit the C field it is meant for (a negative
    key id, a layer past 2**32-1, ...). Both an OverflowError (Python's word
    for "does not fit the C type") and a ValueError (what this binding raised
    before), so either except clause catches it."""


def is_bool(value: object) -> bool:
    # bool, numpy.bool_ and 0-d bool tensors all pass operator.index() (numpy
    # only warns), and would silently become key 0 or 1.
    if isinstance(value, bool):
        return True
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def integer(value: object, what: str) -> int:
    """value as a Python int: ints and numpy/torch integer scalars
    (operator.index) only. A float, str or bool raises TypeError rather than
    being truncated or parsed (1.5 would become 1, "7" would become 7)."""
    if is_bool(value):
        raise TypeError(f"{what} must be an integer, not a bool ({value!r}): a flag passed "
                        "where a number belongs would silently mean 0 or 1")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer (int or numpy integer), not "
                        f"{type(value).__name__} {value!r}") from None


def uint(value: object, bits: int, what: str) -> int:
    """value checked as a C unsigned integer of the given width; ctypes would
    silently wrap a negative or oversized int."""
    v = integer(value, what)
    if not 0 <= v < (1 << bits):
        raise OutOfRange(f"{what} {v} is outside 0..2**{bits}-1 (an unsigned {bits}-bit field)")
    return v


def cint(value: object, what: str) -> int:
    """value checked as a C int (ctypes wraps out-of-range ints silently)."""
    v = integer(value, what)
    bits = 8 * ctypes.sizeof(ctypes.c_int)
    if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
        raise OutOfRange(f"{what} {v} does not fit a C int")
    return v


def key_id(value: object, what: str = "key id") -> int:
    """A key id (kvt_key.id, a sequence or hash id): an integer in 0..2**64-1."""
    return uint(value, 64, what)


def key_array(keys: Iterable[Sequence[int]]) -> ctypes.Array:
    """A ctypes kvt_key[n] from (id, layer, index) triples of integers:
    TypeError for a non-integer (float, str, bool), OutOfRange (a ValueError)
    for a value outside uint64 id / uint32 layer and index."""
    if isinstance(keys, tuple) and len(keys) == 3 and not isinstance(keys[0], (tuple, list)):
        raise TypeError("pass a sequence of keys, e.g. [key], not a single key")
    keys = list(keys)
    arr = (KvtKey * len(keys))()
    for i, k in enumerate(keys):
        try:
            kid, layer, index = k
        except (TypeError, ValueError):
            raise TypeError(f"key {i}: want (id, layer, index), got {k!r}") from None
        arr[i].id = key_id(kid, f"key {i}: id")
        arr[i].layer = uint(layer, 32, f"key {i}: layer")
        arr[i].index = uint(index, 32, f"key {i}: index")
    return arr


class _PyBuffer(ctypes.Structure):
    # Py_buffer from Include/pybuffer.h; part of the stable ABI since 3.11 and
    # unchanged in layout since 3.3.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_PyBUF_WRITABLE = 0x0001
_PyBUF_C_CONTIGUOUS = 0x0020 | 0x0010 | 0x0008
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class Borrowed:
    """The raw memory of a batch of buffers, held for the duration of one call.

    Buffer-protocol exports are kept (a bytearray cannot be resized under the
    engine) and released by close(). Torch tensors and CUDA-array objects are
    only referenced."""

    def __init__(self) -> None:
        self.views: list[_PyBuffer] = []

    def add(self, obj: Any, nbytes: int, writable: bool, what: str) -> tuple[int, bool]:
        """Returns (address, on_device) of obj after checking it is exactly
        nbytes of contiguous memory (writable when asked). Raises ValueError
        (or TypeError for an object with no memory to borrow)."""
        if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):  # torch.Tensor
            return self._tensor(obj, nbytes, what)
        cai = getattr(obj, "__cuda_array_interface__", None)
        if cai is not None:
            return self._cuda_array(cai, nbytes, writable, what)
        view = _PyBuffer()
        flags = _PyBUF_C_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
        try:
            _get_buffer(obj, ctypes.byref(view), flags)
        except (BufferError, ValueError) as exc:  # numpy says ValueError for read-only
            raise ValueError(f"{what}: {exc} (need a C-contiguous"
                             f"{' writable' if writable else ''} buffer)") from None
        except TypeError:
            raise TypeError(f"{what}: {type(obj).__name__} exposes no memory "
                            "(want bytes-like, numpy array, torch tensor)") from None
        self.views.append(view)
        if view.len != nbytes:
            raise ValueError(f"{what}: buffer holds {view.len} bytes, the page is {nbytes}")
        # A zero-length buffer may have buf == NULL; nbytes > 0 here always.
        return view.buf, False

    @staticmethod
    def _tensor(t, nbytes, what):
        # The engine dereferences data_ptr() as host memory (cpu) or device
        # memory (cuda); any other device's pointer (meta: NULL, mps, xpu, ...)
        # would be read as one of those. Sparse and other layouts have no
        # plain block; a lazy conj/neg bit means the bytes are not the values.
        kind = t.device.type
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"{what}: tensor on device {t.device}; only cpu and cuda "
                             "tensors can be read or written")
        if str(t.layout) != "torch.strided":
            raise ValueError(f"{what}: a {t.layout} tensor has no plain block of memory")
        if (hasattr(t, "is_conj") and t.is_conj()) or (hasattr(t, "is_neg") and t.is_neg()):
            raise ValueError(f"{what}: tensor has a lazy conj/neg bit, its memory does not "
                             "hold its values (resolve_conj()/resolve_neg() first)")
        if not t.is_contiguous():
            raise ValueError(f"{what}: tensor is not contiguous")
        size = t.numel() * t.element_size()
        if size != nbytes:
            raise ValueError(f"{what}: tensor holds {size} bytes, the page is {nbytes}")
        ptr = t.data_ptr()
        if not ptr:
            raise ValueError(f"{what}: tensor has no memory (data_ptr() is 0)")
        return ptr, kind == "cuda"

    @staticmethod
    def _cuda_array(cai, nbytes, writable, what):
        try:
            item = int(cai["typestr"][2:])  # "|u1", "<f2": the item size in bytes
            shape = [operator.index(d) for d in cai["shape"]]
            ptr, readonly = cai["data"]
            ptr = 0 if ptr is None else operator.index(ptr)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"{what}: malformed __cuda_array_interface__ "
                             f"({type(exc).__name__}: {exc})") from None
        if cai.get("strides") is not None:
            raise ValueError(f"{what}: CUDA array is not contiguous")
        if cai.get("mask") is not None:
            raise ValueError(f"{what}: CUDA array has a mask")
        # A negative extent (two of them multiply to a positive size) or
        # item size is a lie about the memory, not a shape.
        if item <= 0 or any(d < 0 for d in shape):
            raise ValueError(f"{what}: CUDA array of item size {item}, shape {tuple(shape)}")
        size = item
        for d in shape:
            size *= d
        if size != nbytes:
            raise ValueError(f"{what}: CUDA array holds {size} bytes, the page is {nbytes}")
        if writable and readonly:
            raise ValueError(f"{what}: CUDA array is read-only")
        if not 0 < ptr < (1 << (8 * ctypes.sizeof(ctypes.c_void_p))):
            raise ValueError(f"{what}: CUDA array address {ptr:#x} is not a pointer")
        return ptr, True

    def close(self) -> None:
        for v in self.views:
            _release_buffer(ctypes.byref(v))
        self.views.clear()

    def __enter__(self) -> Borrowed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def buffer_addresses(borrowed: Borrowed, bufs: Sequence[Any], nbytes: int, device_name: str,
                     writable: bool, what: str) -> tuple[ctypes.Array, int]:
    """(void*[n], on_device 0/1) of bufs, each checked to be nbytes of
    contiguous memory (writable when asked), all on one side (host, or CUDA
    on an engine of the cuda back-end). Borrowed holds the buffers until it
    closes. Raises ValueError (TypeError for an object with no memory)
    before anything is called with any of them."""
    addrs = (ctypes.c_void_p * len(bufs))()
    sides = set()
    for i, obj in enumerate(bufs):
        addrs[i], dev = borrowed.add(obj, nbytes, writable, f"{what}: buffer {i}")
        sides.add(dev)
    if len(sides) > 1:
        raise ValueError(f"{what}: host and CUDA buffers mixed in one call")
    on_device = sides.pop() if sides else False
    if on_device and device_name != "cuda":
        raise ValueError(f"{what}: CUDA buffers given to an engine on the "
                         f"{device_name} back-end")
    return addrs, 1 if on_device else 0
