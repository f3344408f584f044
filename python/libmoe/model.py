# model.py — an opened checkpoint folder (moe_model) and the descriptions of it and its layers.
"""``libmoe.open(path)`` returns a :class:`Model`: config.json parsed, every safetensors header
validated, the files mapped; nothing packed. Layers and routers are created from it."""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

from . import _lib
from ._handle import Handle
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .layer import Layer
    from .router import Router


@dataclass(frozen=True)
class ModelInfo:
    """A model as its config.json describes it (moe_model_get_info)."""

    family: str        #: the model_type: "deepseek_v3", "gpt_oss", ...
    n_layers: int      #: decoder layers
    hidden_size: int   #: H, the width of every forward's rows
    vocab_size: int
    n_moe_layers: int  #: layers of kind "moe" or "hash"
    n_experts: int     #: routed experts of the MoE layers (0 when there are none)
    top_k: int         #: experts per token of the MoE layers (0 when there are none)


@dataclass(frozen=True)
class LayerInfo:
    """One layer as creation builds it (moe_model_get_layer_info, moe_layer_get_info)."""

    index: int
    kind: str                      #: "dense", "moe" or "hash"
    hidden_size: int               #: H
    n_experts: int                 #: E; 0 for a dense layer
    top_k: int                     #: K, the width of ids and weights; 0 for a dense layer
    intermediate_size: int         #: each routed expert's (a dense layer: its MLP's)
    expert_format: str             #: "bf16", "fp8_block" or "mxfp4"
    n_shared_experts: int          #: 0 when the layer has none
    shared_intermediate_size: int  #: all shared experts together
    shared_format: Optional[str]   #: None when the layer has no shared experts
    route_method: Optional[str]    #: "noaux_tc", "softmax_topk", ...; None for a dense layer
    score_func: Optional[str]      #: "sigmoid", "softmax", ...; None for a dense layer


def layer_info_from_c(c: _lib.LayerInfo) -> LayerInfo:
    """The Python description of a filled moe_layer_info."""
    routed = c.kind != 0
    lib, text = _lib.lib, _lib.text
    return LayerInfo(
        index=c.index, kind=_lib.LAYER_KINDS.get(c.kind, "unknown"), hidden_size=c.hidden_size,
        n_experts=c.n_experts, top_k=c.top_k, intermediate_size=c.intermediate_size,
        expert_format=text(lib.moe_weight_format_name(c.expert_format)),
        n_shared_experts=c.n_shared_experts,
        shared_intermediate_size=c.shared_intermediate_size,
        shared_format=text(lib.moe_weight_format_name(c.shared_format))
        if c.n_shared_experts else None,
        route_method=text(lib.moe_route_method_name(c.route_method)) if routed else None,
        score_func=text(lib.moe_score_func_name(c.score_func)) if routed else None)


class Model(Handle):
    """An opened Hugging Face model folder. Use as a context manager or call :meth:`close`;
    layers and routers created from it stay valid after it is closed."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], no_mmap: bool = False) -> None:
        """Open PATH (config.json and model.safetensors or its shards); ``no_mmap`` reads
        the tensors into memory instead of mapping the files."""
        self.path = os.fspath(path)
        opts = _lib.OpenOptions(ctypes.sizeof(_lib.OpenOptions), bool(no_mmap))
        self._create("model %s" % self.path, _lib.lib.moe_model_open, _lib.lib.moe_model_close,
                     os.fsencode(path), ctypes.byref(opts))
        c = _lib.ModelInfo(size=ctypes.sizeof(_lib.ModelInfo))
        _lib.check(_lib.lib.moe_model_get_info(self._handle, ctypes.byref(c)))
        self.info = ModelInfo(family=_lib.text(c.family), n_layers=c.n_layers,
                              hidden_size=c.hidden_size, vocab_size=c.vocab_size,
                              n_moe_layers=c.n_moe_layers, n_experts=c.n_experts,
                              top_k=c.top_k)

    @property
    def handle(self) -> int:
        """The moe_model pointer; StateError once the model is closed."""
        return self._live()

    def _index(self, i: int, name: str = "layer") -> int:
        """I, checked to be an int (the C library checks its range)."""
        if not isinstance(i, int) or isinstance(i, bool):
            _lib.fail(InvalidArgumentError, "%s: an int, got %s" % (name, type(i).__name__))
        return i

    def layer_info(self, i: int) -> LayerInfo:
        """Layer I's description, from config.json only (nothing is packed)."""
        c = _lib.LayerInfo(size=ctypes.sizeof(_lib.LayerInfo))
        _lib.check(_lib.lib.moe_model_get_layer_info(self.handle, self._index(i),
                                                     ctypes.byref(c)))
        return layer_info_from_c(c)

    def layer(self, i: int, threads: Optional[int] = None, recipe: Optional[str] = None,
              logits_dtype: Optional[str] = None, fixed_threads: bool = False) -> "Layer":
        """Create layer I: choose its kernels and pack its weights once.

        ``threads``: worker threads per forward (None: the number of cores); ``recipe``:
        the bf16/FP8 experts' recipe, "f32" (default), "bf16", or "tile" (the AMX tile unit's
        arithmetic, tdpbf16ps where allowed, the same bits elsewhere; MXFP4 experts take it too,
        and run q8 otherwise); ``logits_dtype``: the router
        logits, "f32" (default) or "bf16" (parity with a bf16 gate); ``fixed_threads``: every
        forward on all ``threads`` (default False: fewer while the threads are being preempted,
        as when PyTorch's threads keep a core busy; the results are the same bits)."""
        from .layer import Layer
        return Layer(self, self._index(i), threads, recipe, logits_dtype, fixed_threads)

    def router(self, i: int) -> "Router":
        """The router of MoE or hash layer I (its correction bias or hash table read from the
        checkpoint)."""
        from .router import Router
        return Router(self, self._index(i))

    def __len__(self) -> int:
        """The number of decoder layers."""
        return self.info.n_layers

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else "%d layers" % self.info.n_layers
        return "libmoe.Model(%r, %s, %s)" % (self.path, self.info.family, state)
