# router.py — a layer's router (moe_router): logits in, expert ids and combine weights out.
"""``model.router(i)`` builds the router of layer i alone, for callers that compute the gate
logits themselves; :class:`libmoe.Layer` already routes inside its forward."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import _lib
from ._buffers import ID_DTYPES, kind_of, new_routing, rows, view
from ._handle import Handle
from .errors import ShapeError

if TYPE_CHECKING:
    from .model import Model

Array = Any  # a numpy.ndarray or a CPU torch.Tensor
_route = _lib.lib.moe_router_forward


class Router(Handle):
    """The routing of one MoE or hash layer. Immutable; any number of threads may call it."""

    def __init__(self, model: "Model", index: int) -> None:
        """Create the router of layer INDEX of MODEL (a dense layer is InvalidArgumentError)."""
        info = model.layer_info(index)
        self._create("router of layer %d" % index, _lib.lib.moe_router_create_from_model,
                     _lib.lib.moe_router_destroy, model.handle, index)
        self.index = index
        self.n_experts = info.n_experts
        self.top_k = info.top_k
        self.method = info.route_method

    def __call__(self, logits: Array, input_ids: Optional[Array] = None
                 ) -> Tuple[Array, Array]:
        """Route LOGITS [T, E] float32 (numpy or torch): returns (ids [T, K] int32, weights
        [T, K] float32) of the same kind. ``input_ids`` [T] int32/int64: required by hash
        routers, ignored by the others."""
        handle = self._live()
        kind = kind_of(logits, "logits")
        address, _, shape = view(logits, kind, "logits", (_lib.DTYPE_F32,), 2)
        if shape[1] != self.n_experts:
            _lib.fail(ShapeError, "logits: shape %s, expected [T, %d] (the layer's experts)"
                      % (list(shape), self.n_experts))
        tokens = shape[0]
        ids_address, ids_dtype = None, _lib.DTYPE_INVALID
        if input_ids is not None:
            ids_address, ids_dtype = rows(input_ids, "input_ids", tokens, 0, ID_DTYPES, 1)
        ids, weights, ia, wa = new_routing(kind, tokens, self.top_k)
        _lib.check(_route(handle, tokens, address, ids_address, ids_dtype, ia, wa))
        return ids, weights

    def explain(self) -> str:
        """One line: the method, its parameters, the kernels chosen and why."""
        return _lib.text(_lib.lib.moe_router_explain(self._live()))
