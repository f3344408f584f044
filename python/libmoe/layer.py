# layer.py — one created MoE block (moe_layer): the full forward and the experts-only forward.
"""A :class:`Layer` is created once (kernels chosen, weights packed) and then called with
hidden states, from any number of Python threads at once: ctypes releases the GIL during the
forward, and each thread gets its own workspace and argument struct.

Buffers are read and written in place: hidden states, token ids and expert ids are passed to
the library by address, and a non-contiguous array is refused (no hidden copy). The output is
numpy for numpy input and torch for torch input.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import numpy as np

from . import _buffers, _lib
from ._buffers import (ID_DTYPES, NUMPY, TORCH, aligned_bytes, kind_of, new_routing,
                       np_address, rows, view)
from ._handle import Handle
from .errors import InvalidArgumentError, ShapeError, SizeOverflowError
from .model import LayerInfo, layer_info_from_c

if TYPE_CHECKING:
    from .model import Model

_NP_F32 = np.dtype(np.float32)
_F32, _BF16 = _lib.DTYPE_F32, _lib.DTYPE_BF16
_HIDDEN_DTYPES = (_F32, _BF16)
_WEIGHT_DTYPES = (_F32,)
_ITEMSIZE = {_F32: 4, _BF16: 2}
_forward = _lib.lib.moe_layer_forward
_forward_experts = _lib.lib.moe_layer_forward_experts
_workspace_size = _lib.lib.moe_layer_workspace_size

Array = Any  # a numpy.ndarray or a CPU torch.Tensor


class _ThreadState:
    """One thread's argument structs and workspace for one layer: built once, reused by every
    call of that thread, so a call allocates only its outputs."""

    def __init__(self, hidden_size: int, top_k: int) -> None:
        self.args = _lib.ForwardArgs(size=ctypes.sizeof(_lib.ForwardArgs),
                                     hidden_size=hidden_size)
        self.args_address = ctypes.addressof(self.args)
        self.eargs = _lib.ExpertsArgs(size=ctypes.sizeof(_lib.ExpertsArgs),
                                      hidden_size=hidden_size, top_k=top_k)
        self.eargs_address = ctypes.addressof(self.eargs)
        self.buffer: Optional[np.ndarray] = None  # holds the workspace memory
        self.capacity = 0                          # its usable bytes from workspace
        self.workspace = 0                         # its 64-byte aligned address
        self.tokens = -1                           # T of the last size query
        self.need = 0                              # moe_layer_workspace_size(T)


class Layer(Handle):
    """A created MoE block (or dense MLP) of a model. Call it; close it when done (or use it
    as a context manager). Closing while another thread runs a forward is the caller's bug."""

    def __init__(self, model: "Model", index: int, threads: Optional[int] = None,
                 recipe: Optional[str] = None, logits_dtype: Optional[str] = None,
                 fixed_threads: bool = False) -> None:
        """Create layer INDEX of MODEL (see :meth:`libmoe.Model.layer`)."""
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            _lib.fail(InvalidArgumentError, "threads: a positive int or None, got %r" % threads)
        if recipe not in _lib.RECIPES:
            _lib.fail(InvalidArgumentError,
                      "recipe: 'f32', 'bf16', 'tile' or None, got %r" % (recipe,))
        if logits_dtype not in _lib.LOGITS_DTYPES:
            _lib.fail(InvalidArgumentError,
                      "logits_dtype: 'f32', 'bf16' or None, got %r" % (logits_dtype,))
        opts = _lib.LayerOptions(size=ctypes.sizeof(_lib.LayerOptions), threads=threads or 0,
                                 logits_dtype=_lib.LOGITS_DTYPES[logits_dtype],
                                 experts_recipe=_lib.RECIPES[recipe],
                                 fixed_threads=bool(fixed_threads))
        self._create("layer %d" % index, _lib.lib.moe_layer_create, _lib.lib.moe_layer_destroy,
                     model.handle, index, ctypes.byref(opts))
        c = _lib.LayerInfo(size=ctypes.sizeof(_lib.LayerInfo))
        _lib.check(_lib.lib.moe_layer_get_info(self._handle, ctypes.byref(c)))
        self.info: LayerInfo = layer_info_from_c(c)
        self._hidden_size = c.hidden_size
        self._top_k = c.top_k
        self._tls = threading.local()

    # ---- Per-thread state ----------------------------------------------------------------

    def _state(self, tokens: int) -> _ThreadState:
        """This thread's state, its workspace large enough for TOKENS rows."""
        st = getattr(self._tls, "state", None)
        if st is None:
            st = self._tls.state = _ThreadState(self._hidden_size, self._top_k)
        if tokens != st.tokens:
            need = _workspace_size(self._handle, tokens)
            if need == 0 and tokens > 0:
                _lib.fail(SizeOverflowError, "hidden: %d tokens: the workspace size overflows"
                          % tokens)
            if need > st.capacity:
                st.buffer, st.workspace = aligned_bytes(need)
                st.capacity = need
            st.tokens, st.need = tokens, need
            for a in (st.args, st.eargs):
                a.n_tokens, a.workspace, a.workspace_size = tokens, st.workspace, need
        return st

    def workspace_size(self, tokens: int) -> int:
        """Bytes of workspace a forward of TOKENS rows needs (the binding allocates it, per
        thread, and grows it as needed)."""
        return _workspace_size(self._live(), tokens)

    # ---- Forwards --------------------------------------------------------------------------

    def _hidden(self, hidden: Array) -> Tuple[int, int, int, int]:
        """(kind, address, dtype, T) of the hidden states, checked."""
        if type(hidden) is np.ndarray:  # the common case in a few attribute reads
            shape, flags = hidden.shape, hidden.flags
            if hidden.dtype is _NP_F32 and len(shape) == 2 and shape[1] == self._hidden_size \
                    and flags.c_contiguous and flags.aligned:
                return NUMPY, np_address(hidden), _F32, shape[0]
        fast = _buffers.torch_hidden_types
        if fast is not None and type(hidden) is fast[0]:
            shape, dt = hidden.shape, hidden.dtype
            if (dt is fast[1] or dt is fast[2]) and len(shape) == 2 and \
                    shape[1] == self._hidden_size and hidden.is_cpu and hidden.is_contiguous():
                return TORCH, hidden.data_ptr(), (_F32 if dt is fast[1] else _BF16), shape[0]
        kind = kind_of(hidden, "hidden")
        address, dtype, shape = view(hidden, kind, "hidden", _HIDDEN_DTYPES, 2)
        if shape[1] != self._hidden_size:
            _lib.fail(ShapeError, "hidden: shape %s, expected [T, %d] (the layer's hidden size)"
                      % (list(shape), self._hidden_size))
        return kind, address, dtype, shape[0]

    def _out(self, out: Optional[Array], kind: int, tokens: int, hidden_address: int,
             hidden_dtype: int) -> Tuple[Array, int]:
        """OUT (checked) or a new float32 [T, H] buffer of KIND, and its address."""
        H = self._hidden_size
        if out is None:
            # torch.from_numpy shares the array's memory and costs less than torch.empty.
            a = np.empty((tokens, H), _NP_F32)
            return (a if kind == NUMPY else sys.modules["torch"].from_numpy(a)), np_address(a)
        if kind_of(out, "out") != kind:
            _lib.fail(InvalidArgumentError, "out: must be the same kind of array as hidden "
                      "(numpy or torch)")
        address, _, shape = view(out, kind, "out", _WEIGHT_DTYPES, 2, writable=True)
        if shape != (tokens, H):
            _lib.fail(ShapeError, "out: shape %s, expected %s" % (list(shape), [tokens, H]))
        if tokens and address < hidden_address + tokens * H * _ITEMSIZE[hidden_dtype] and \
                hidden_address < address + tokens * H * 4:
            _lib.fail(InvalidArgumentError, "out: overlaps hidden; the forward reads hidden "
                      "while it writes out")
        return out, address

    def __call__(self, hidden: Array, input_ids: Optional[Array] = None, *,
                 out: Optional[Array] = None, return_routing: bool = False
                 ) -> Union[Array, Tuple[Array, Array, Array]]:
        """Run the block on HIDDEN, [T, H] float32 (numpy or torch) or bfloat16 (torch); only
        2-D input is accepted (flatten batch and sequence into T first).

        ``input_ids``: [T] int32 or int64 token ids, read in their own width; required by hash
        layers, ignored by the others. ``out``: an optional float32 [T, H] buffer of the same
        kind as HIDDEN, written in place. Returns the output [T, H] float32 (OUT itself when
        given); with ``return_routing``, (out, ids [T, K] int32, weights [T, K] float32), the
        experts each token visited and their combine weights."""
        handle = self._live()
        kind, hidden_address, hidden_dtype, tokens = self._hidden(hidden)
        st = self._state(tokens)
        a = st.args
        if input_ids is None:
            a.token_ids = None
        else:
            a.token_ids, a.token_id_dtype = rows(input_ids, "input_ids", tokens, 0, ID_DTYPES, 1)
        out, a.out = self._out(out, kind, tokens, hidden_address, hidden_dtype)
        if return_routing:
            if not self._top_k:
                _lib.fail(InvalidArgumentError, "return_routing: layer %d is dense; it routes "
                          "nothing" % self.info.index)
            ids, weights, a.ids_out, a.weights_out = new_routing(kind, tokens, self._top_k)
        else:
            a.ids_out = a.weights_out = None
        a.hidden = hidden_address
        a.hidden_dtype = hidden_dtype
        status = _forward(handle, st.args_address)
        if status:
            _lib.raise_status(status)
        return (out, ids, weights) if return_routing else out

    def experts(self, hidden: Array, ids: Array, weights: Array, *, shared: bool = True,
                out: Optional[Array] = None) -> Array:
        """The experts-only forward: the caller routed (ids [T, K] int32 or int64, read in
        place; weights [T, K] float32, used as given, other float dtypes converted). Returns
        sum over k of weights[t, k] · expert(ids[t, k]) [T, H] float32, plus the shared
        experts when ``shared`` (then bit for bit the full forward for the ids and weights it
        returned). An id outside [0, E) or repeated in a row raises RangeError."""
        handle = self._live()
        kind, hidden_address, hidden_dtype, tokens = self._hidden(hidden)
        K = self._top_k
        if not K:
            _lib.fail(InvalidArgumentError, "layer %d is dense: it has no routed experts"
                      % self.info.index)
        weights = _float32_weights(weights)
        st = self._state(tokens)
        a = st.eargs
        a.ids, a.ids_dtype = rows(ids, "ids", tokens, K, ID_DTYPES, 2)
        a.weights, _ = rows(weights, "weights", tokens, K, _WEIGHT_DTYPES, 2)
        out, a.out = self._out(out, kind, tokens, hidden_address, hidden_dtype)
        a.hidden = hidden_address
        a.hidden_dtype = hidden_dtype
        a.shared = bool(shared)
        status = _forward_experts(handle, st.eargs_address)
        if status:
            _lib.raise_status(status)
        return out

    # ---- Description ---------------------------------------------------------------------------

    def explain(self) -> str:
        """Every kernel chosen and why, the recipe, packed bytes, every default resolved."""
        return _lib.text(_lib.lib.moe_layer_explain(self._live()))

    def __repr__(self) -> str:
        i = self.info
        return "libmoe.Layer(%d, %s, hidden %d, experts %d, top_k %d%s)" % (
            i.index, i.kind, i.hidden_size, i.n_experts, i.top_k,
            ", closed" if self._handle is None else "")


def _float32_weights(weights: Array) -> Array:
    """WEIGHTS, or a float32 copy of it when it holds another float dtype (the small [T, K]
    array only; the hidden states are never converted)."""
    if isinstance(weights, np.ndarray):
        if weights.dtype != np.float32 and weights.dtype.kind == "f":
            return np.ascontiguousarray(weights, dtype=np.float32)
        return weights
    if getattr(weights, "is_floating_point", None) is not None and \
            weights.is_floating_point() and str(weights.dtype) != "torch.float32":
        return weights.float().contiguous()
    return weights
