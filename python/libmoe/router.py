# router.py — a layer's router (moe_router): logits in, expert ids and combine weights out.
"""``model.router(i)`` builds the router of layer i alone, for callers that compute the gate
logits themselves; :class:`libmoe.Layer` already routes inside its forward."""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import _buffers, _lib
from ._buffers import NUMPY, empty, kind_of, view
from .errors import ShapeError, StateError

if TYPE_CHECKING:
    from .model import Model

Array = Any  # a numpy.ndarray or a CPU torch.Tensor
_route = _lib.lib.moe_router_forward


class Router:
    """The routing of one MoE or hash layer. Immutable; any number of threads may call it."""

    def __init__(self, model: "Model", index: int) -> None:
        """Create the router of layer INDEX of MODEL (a dense layer is InvalidArgumentError)."""
        self._handle: Optional[int] = None
        info = model.layer_info(index)
        out = ctypes.c_void_p()
        _lib.check(_lib.lib.moe_router_create_from_model(model.handle, index,
                                                         ctypes.byref(out)))
        self._handle = out.value
        self.index = index
        self.n_experts = info.n_experts
        self.top_k = info.top_k
        self.method = info.route_method

    def __call__(self, logits: Array, input_ids: Optional[Array] = None
                 ) -> Tuple[Array, Array]:
        """Route LOGITS [T, E] float32 (numpy or torch): returns (ids [T, K] int32, weights
        [T, K] float32) of the same kind. ``input_ids`` [T] int32/int64: required by hash
        routers, ignored by the others."""
        handle = self._handle
        if handle is None:
            _lib.fail(StateError, "router of layer %d: closed" % self.index)
        kind = kind_of(logits, "logits")
        address, _, shape = view(logits, kind, "logits", (_lib.DTYPE_F32,), 2)
        if shape[1] != self.n_experts:
            _lib.fail(ShapeError, "logits: shape %s, expected [T, %d] (the layer's experts)"
                      % (list(shape), self.n_experts))
        tokens = shape[0]
        ids_address, ids_dtype = None, _lib.DTYPE_INVALID
        if input_ids is not None:
            ids_address, ids_dtype, ishape = view(input_ids, kind_of(input_ids, "input_ids"),
                                                  "input_ids", (_lib.DTYPE_I32, _lib.DTYPE_I64), 1)
            if ishape != (tokens,):
                _lib.fail(ShapeError, "input_ids: shape %s, expected [%d]" % (list(ishape),
                                                                              tokens))
        ids = empty(kind, (tokens, self.top_k), _lib.DTYPE_I32)
        weights = empty(kind, (tokens, self.top_k), _lib.DTYPE_F32)
        if kind == NUMPY:
            ia, wa = _buffers.np_address(ids), _buffers.np_address(weights)
        else:
            ia, wa = ids.data_ptr(), weights.data_ptr()
        _lib.check(_route(handle, tokens, address, ids_address, ids_dtype, ia, wa))
        return ids, weights

    def explain(self) -> str:
        """One line: the method, its parameters, the kernels chosen and why."""
        if self._handle is None:
            _lib.fail(StateError, "router of layer %d: closed" % self.index)
        return _lib.text(_lib.lib.moe_router_explain(self._handle))

    def close(self) -> None:
        """Destroy the router (a no-op when already closed)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _lib.lib.moe_router_destroy(handle)

    def __enter__(self) -> "Router":
        """The router itself; leaving the block destroys it."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()
