# errors.py — every moe_status as a Python exception class, MoeError at the root.
"""Exceptions of libmoe.

Every failing libmoe call raises a :class:`MoeError` subclass chosen by its ``moe_status``;
the message is ``moe_last_error()`` of the calling thread, read right after the failing call.
Checks made in Python before any C call (an argument of the wrong kind, dtype or shape) raise
the same classes with their own message naming the argument. Each class also derives from
the built-in exception a Python caller would expect (``ValueError``, ``TypeError``, ...).
"""
from __future__ import annotations

from typing import Dict, Optional, Type


class MoeError(Exception):
    """A libmoe failure: ``status`` is the moe_status value, ``status_name`` its description
    (moe_status_string), ``str(error)`` the message naming what was wrong."""

    status: int = -1
    status_name: str = ""  # moe_status_string(status), filled in when the library loads

    def __init__(self, message: str, status: Optional[int] = None,
                 status_name: Optional[str] = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(MoeError, ValueError):
    """MOE_EINVAL: a NULL, missing or disallowed argument (also: a buffer of the wrong kind,
    a non-contiguous array, a closed model or layer)."""
    status = 1


class OutOfMemoryError(MoeError, MemoryError):
    """MOE_ENOMEM: an allocation failed."""
    status = 2


class MoeIOError(MoeError, OSError):
    """MOE_EIO: a file could not be opened, read, written or mapped."""
    status = 3


class StateError(MoeError, RuntimeError):
    """MOE_ESTATE: a call in the wrong order."""
    status = 4


class UnsupportedError(MoeError):
    """MOE_EUNSUPPORTED: well-formed but not supported (model type, format, ISA)."""
    status = 5


class SizeOverflowError(MoeError, OverflowError):
    """MOE_EOVERFLOW: size arithmetic overflows 64 bits or a documented limit."""
    status = 6


class RangeError(MoeError, ValueError):
    """MOE_ERANGE: a value out of range (expert id, token id, table entry)."""
    status = 7


class MissingError(MoeError, LookupError):
    """MOE_EMISSING: a required file, tensor or config field is absent."""
    status = 8


class TruncatedError(MoeError):
    """MOE_ETRUNCATED: a file is shorter than its own header says."""
    status = 9


class HeaderError(MoeError):
    """MOE_EHEADER: a malformed file header."""
    status = 10


class JsonError(MoeError, ValueError):
    """MOE_EJSON: JSON that does not parse, or a value of the wrong JSON type."""
    status = 11


class DuplicateError(MoeError):
    """MOE_EDUPLICATE: a name or key that appears twice."""
    status = 12


class OffsetError(MoeError):
    """MOE_EOFFSET: tensor offsets with holes, overlaps, or bytes past the end."""
    status = 13


class DtypeError(MoeError, TypeError):
    """MOE_EDTYPE: an unknown or disallowed dtype (also: an array of the wrong dtype)."""
    status = 14


class ShapeError(MoeError, ValueError):
    """MOE_ESHAPE: a shape that disagrees with its byte size, config or peers."""
    status = 15


class PathError(MoeError, ValueError):
    """MOE_EPATH: a path that is not a plain file name."""
    status = 16


class ConfigError(MoeError, ValueError):
    """MOE_ECONFIG: an inconsistent config.json or a bad field."""
    status = 17


class BadValueError(MoeError, ValueError):
    """MOE_EVALUE: a bad value inside tensor data (a NaN block scale, a non-finite weight)."""
    status = 18


ERROR_CLASSES: Dict[int, Type[MoeError]] = {
    cls.status: cls
    for cls in (InvalidArgumentError, OutOfMemoryError, MoeIOError, StateError,
                UnsupportedError, SizeOverflowError, RangeError, MissingError, TruncatedError,
                HeaderError, JsonError, DuplicateError, OffsetError, DtypeError, ShapeError,
                PathError, ConfigError, BadValueError)
}
