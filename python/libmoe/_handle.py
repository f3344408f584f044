# _handle.py — the life cycle shared by Model, Layer and Router: one owned C handle.
"""Each of :class:`~libmoe.Model`, :class:`~libmoe.Layer` and :class:`~libmoe.Router` owns one
pointer the library created (moe_model, moe_layer, moe_router). This base class creates it,
hands it to the calls (StateError once closed), frees it once on :meth:`close`, at the end of a
``with`` block or when the object is collected, and never after that."""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Optional, TypeVar

from . import _lib
from .errors import StateError

_Self = TypeVar("_Self", bound="Handle")


class Handle:
    """Owner of one library object; a subclass's ``__init__`` makes it with :meth:`_create`."""

    _handle: Optional[int] = None  # None before creation succeeds and after close()

    def _create(self, name: str, create: Callable[..., int], destroy: Callable[[int], None],
                *args: Any) -> None:
        """Call ``CREATE(*ARGS, &handle)``, raise its error, and own the handle it made, which
        ``DESTROY(handle)`` frees; NAME is what the "closed" error calls this object."""
        out = ctypes.c_void_p()
        _lib.check(create(*args, ctypes.byref(out)))
        self._handle = out.value
        self._destroy = destroy
        self._name = name

    def _live(self) -> int:
        """The handle; StateError naming this object once it is closed."""
        handle = self._handle
        if handle is None:
            _lib.fail(StateError, "%s: closed" % self._name)
        return handle

    def close(self) -> None:
        """Free the library object (a no-op when already closed)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._destroy(handle)

    def __enter__(self: _Self) -> _Self:
        """The object itself; leaving the block closes it."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
