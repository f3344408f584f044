# _buffers.py — numpy arrays and CPU torch tensors as (pointer, dtype, shape), without copies.
"""The library reads and writes the caller's memory in place. This module checks a buffer
(kind, device, dtype, shape, C-contiguity) and returns its address; it never copies, so a
buffer that does not fit raises an exception naming the argument. torch is never imported
here: a torch tensor can only reach us if the caller imported torch, so ``sys.modules`` is
where we look for it.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional, Tuple

import numpy as np

from . import _lib
from .errors import DtypeError, InvalidArgumentError, ShapeError

NUMPY, TORCH = 0, 1

_NP_F32 = np.dtype(np.float32)
_NP_I32 = np.dtype(np.int32)
_NP_DTYPES = {np.dtype(np.float32): _lib.DTYPE_F32, np.dtype(np.int32): _lib.DTYPE_I32,
              np.dtype(np.int64): _lib.DTYPE_I64}
_TORCH_NAMES = {"float32": _lib.DTYPE_F32, "bfloat16": _lib.DTYPE_BF16,
                "int32": _lib.DTYPE_I32, "int64": _lib.DTYPE_I64}
_torch_dtypes: dict = {}  # torch.dtype -> moe dtype, filled once torch is seen
ID_DTYPES = (_lib.DTYPE_I32, _lib.DTYPE_I64)  # token and expert ids, read in their own width
_DTYPE_NAMES = {_lib.DTYPE_F32: "float32", _lib.DTYPE_BF16: "bfloat16",
                _lib.DTYPE_I32: "int32", _lib.DTYPE_I64: "int64"}


def _probe_data_offset() -> Optional[int]:
    """The offset of an ndarray's data pointer in its object (right after the object header,
    PyArrayObject_fields in numpy's public ABI), confirmed against ``ndarray.ctypes.data`` on
    two arrays; None where it does not match (then the slower ctypes.data is used). Reading it
    takes about 0.3 µs where ``.ctypes.data`` takes 1.5-2.5 µs, a third of a decode step's
    budget per array."""
    offset = object.__basicsize__
    probes = [np.zeros(3, np.float32), np.zeros((2, 5), np.int64)[1:]]
    for a in probes:
        if ctypes.c_void_p.from_address(id(a) + offset).value != a.ctypes.data:
            return None
    return offset


_DATA_OFFSET = _probe_data_offset()
_from_address = ctypes.c_void_p.from_address


def np_address(a: np.ndarray) -> int:
    """The address of A's first element."""
    if _DATA_OFFSET is None:
        return a.ctypes.data
    return _from_address(id(a) + _DATA_OFFSET).value or 0


# (torch.Tensor, torch.float32, torch.bfloat16) once a tensor has been seen, for the fast path
# of Layer's hidden states; None before.
torch_hidden_types: Optional[Tuple[Any, Any, Any]] = None


def _torch_dtype(t: Any) -> int:
    global torch_hidden_types
    code = _torch_dtypes.get(t.dtype)
    if code is None:
        torch = sys.modules["torch"]
        for name, moe in _TORCH_NAMES.items():
            _torch_dtypes[getattr(torch, name)] = moe
        torch_hidden_types = (torch.Tensor, torch.float32, torch.bfloat16)
        code = _torch_dtypes.get(t.dtype, _lib.DTYPE_INVALID)
    return code


def kind_of(x: Any, name: str) -> int:
    """NUMPY or TORCH for an ndarray or a CPU torch.Tensor; InvalidArgumentError otherwise."""
    if type(x) is np.ndarray or isinstance(x, np.ndarray):
        return NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if not x.is_cpu:
            _lib.fail(InvalidArgumentError, "%s: a torch tensor on %s; libmoe reads CPU memory "
                      "(move it with .cpu())" % (name, x.device))
        return TORCH
    _lib.fail(InvalidArgumentError, "%s: expected a numpy.ndarray or a CPU torch.Tensor, got %s"
              % (name, type(x).__name__))


def view(x: Any, kind: int, name: str, allowed: Tuple[int, ...], ndim: int,
         writable: bool = False) -> Tuple[int, int, Tuple[int, ...]]:
    """(address, moe dtype, shape) of X, a buffer of KIND: its dtype must be one of ALLOWED,
    it must have NDIM dimensions and be C-contiguous (and writable when WRITABLE)."""
    if kind == NUMPY:
        dtype = _NP_DTYPES.get(x.dtype, _lib.DTYPE_INVALID)
        shape = x.shape
        flags = x.flags
        contiguous = flags.c_contiguous and flags.aligned
        if writable and not flags.writeable:
            _lib.fail(InvalidArgumentError, "%s: the array is read-only" % name)
    else:
        dtype = _torch_dtype(x)
        shape = tuple(x.shape)
        contiguous = x.is_contiguous()
    if dtype not in allowed:
        _lib.fail(DtypeError, "%s: dtype %s, expected %s" % (
            name, x.dtype, " or ".join(_DTYPE_NAMES[d] for d in allowed)))
    if len(shape) != ndim:
        _lib.fail(ShapeError, "%s: shape %s, expected %d dimensions" % (name, list(shape), ndim))
    if not contiguous:
        _lib.fail(InvalidArgumentError, "%s: not C-contiguous; libmoe reads buffers in place "
                  "and copies nothing (pass a contiguous copy)" % name)
    return (np_address(x) if kind == NUMPY else x.data_ptr()), dtype, shape


def rows(x: Any, name: str, tokens: int, width: int, allowed: Tuple[int, ...],
         ndim: int) -> Tuple[int, int]:
    """(address, moe dtype) of X, an id or weight buffer of shape [TOKENS] (NDIM 1) or
    [TOKENS, WIDTH] and a dtype in ALLOWED, checked as :func:`view` checks."""
    address, dtype, shape = view(x, kind_of(x, name), name, allowed, ndim)
    want = (tokens,) if ndim == 1 else (tokens, width)
    if shape != want:
        _lib.fail(ShapeError, "%s: shape %s, expected %s" % (name, list(shape), list(want)))
    return address, dtype


def new_routing(kind: int, tokens: int, k: int) -> Tuple[Any, Any, int, int]:
    """New uninitialised ids [TOKENS, K] int32 and weights [TOKENS, K] float32 of KIND, and
    their addresses."""
    ids = np.empty((tokens, k), _NP_I32)
    weights = np.empty((tokens, k), _NP_F32)
    ids_address, weights_address = np_address(ids), np_address(weights)
    if kind == TORCH:
        # torch.from_numpy shares the array's memory and costs less than torch.empty(dtype=...).
        torch = sys.modules["torch"]
        ids, weights = torch.from_numpy(ids), torch.from_numpy(weights)
    return ids, weights, ids_address, weights_address


def aligned_bytes(n: int, alignment: int = 64) -> Tuple[np.ndarray, int]:
    """A buffer of at least N bytes and the address in it that is ALIGNMENT-aligned."""
    raw = np.empty(n + alignment, np.uint8)
    base = np_address(raw)
    return raw, base + (-base % alignment)
