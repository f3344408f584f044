# errors.py — every moe_status as a Python exception class, MoeError at the root.
"""Exceptions of libmoe.

Every failing libmoe call raises a :class:`MoeError` subclass chosen by its ``moe_status``;
the message is ``moe_last_error()`` of the calling thread, read right after the failing call.
Checks made in Python before any C call (an argument of the wrong kind, dtype or shape) raise
the same classes with their own message naming the argument. Each class also derives from
the built-in exception a Python caller would expect (``ValueError``, ``TypeError``, ...).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Type

# moe_status value -> its class; each class below adds itself as it is defined.
ERROR_CLASSES: Dict[int, Type["MoeError"]] = {}


class MoeError(Exception):
    """A libmoe failure: ``status`` is the moe_status value, ``status_name`` its description
    (moe_status_string), ``str(error)`` the message naming what was wrong."""

    status: int = -1
    status_name: str = ""  # moe_status_string(status), filled in when the library loads

    def __init_subclass__(cls, status: Optional[int] = None, **kwargs: Any) -> None:
        """``class X(MoeError, status=N)`` makes X the class of moe_status N; a subclass
        without ``status`` (a caller's own) inherits its parent's."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
            ERROR_CLASSES[status] = cls

    def __init__(self, message: str, status: Optional[int] = None,
                 status_name: Optional[str] = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(MoeError, ValueError, status=1):
    """MOE_EINVAL: a NULL, missing or disallowed argument (also: a buffer of the wrong kind,
    a non-contiguous array, a closed model or layer)."""


class OutOfMemoryError(MoeError, MemoryError, status=2):
    """MOE_ENOMEM: an allocation failed."""


class MoeIOError(MoeError, OSError, status=3):
    """MOE_EIO: a file could not be opened, read, written or mapped."""


class StateError(MoeError, RuntimeError, status=4):
    """MOE_ESTATE: a call in the wrong order."""


class UnsupportedError(MoeError, status=5):
    """MOE_EUNSUPPORTED: well-formed but not supported (model type, format, ISA)."""


class SizeOverflowError(MoeError, OverflowError, status=6):
    """MOE_EOVERFLOW: size arithmetic overflows 64 bits or a documented limit."""


class RangeError(MoeError, ValueError, status=7):
    """MOE_ERANGE: a value out of range (expert id, token id, table entry)."""


class MissingError(MoeError, LookupError, status=8):
    """MOE_EMISSING: a required file, tensor or config field is absent."""


class TruncatedError(MoeError, status=9):
    """MOE_ETRUNCATED: a file is shorter than its own header says."""


class HeaderError(MoeError, status=10):
    """MOE_EHEADER: a malformed file header."""


class JsonError(MoeError, ValueError, status=11):
    """MOE_EJSON: JSON that does not parse, or a value of the wrong JSON type."""


class DuplicateError(MoeError, status=12):
    """MOE_EDUPLICATE: a name or key that appears twice."""


class OffsetError(MoeError, status=13):
    """MOE_EOFFSET: tensor offsets with holes, overlaps, or bytes past the end."""


class DtypeError(MoeError, TypeError, status=14):
    """MOE_EDTYPE: an unknown or disallowed dtype (also: an array of the wrong dtype)."""


class ShapeError(MoeError, ValueError, status=15):
    """MOE_ESHAPE: a shape that disagrees with its byte size, config or peers."""


class PathError(MoeError, ValueError, status=16):
    """MOE_EPATH: a path that is not a plain file name."""


class ConfigError(MoeError, ValueError, status=17):
    """MOE_ECONFIG: an inconsistent config.json or a bad field."""


class BadValueError(MoeError, ValueError, status=18):
    """MOE_EVALUE: a bad value inside tensor data (a NaN block scale, a non-finite weight)."""

