# _lib.py — loads the libmoe shared library and declares its structs and functions for ctypes.
"""The C side of the binding: the shared library, the structs of include/moe.h, every function's
argument and result types, and :func:`check`, which turns a moe_status into an exception.

The library is ``$LIBMOE_LIBRARY`` when that is set (the tests of a build tree point it at the
freshly built library), else the ``libmoe.so*`` next to this file (where ``pip install``
puts it). ctypes releases the GIL during every call below, so several Python threads can run
layers at once.
"""
from __future__ import annotations

import ctypes
import glob
import os
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_float, c_int,
                    c_int64, c_size_t, c_uint64, c_void_p)
from typing import NoReturn, Type

from .errors import ERROR_CLASSES, MoeError

# ---- Enumerations (include/moe.h; the values are stable) ---------------------------------

DTYPE_INVALID, DTYPE_F32, DTYPE_BF16, DTYPE_I32, DTYPE_I64 = 0, 1, 3, 15, 17
LAYER_KINDS = {0: "dense", 1: "moe", 2: "hash"}
RECIPES = {None: 0, "f32": 1, "bf16": 2, "tile": 3}
LOGITS_DTYPES = {None: DTYPE_INVALID, "f32": DTYPE_F32, "bf16": DTYPE_BF16}
ISA_LEVELS = {0: "scalar", 1: "avx2", 2: "avx512", 3: "avx512bf16"}
TRACE_MAX_STEPS = 32
c_enum = c_int  # a C enum whose values fit int is an int on x86-64 (System V ABI)


# ---- Structs ----------------------------------------------------------------------------


class CpuCaps(Structure):
    _fields_ = [(name, c_bool) for name in (
        "avx2", "avx512", "avx512_bf16", "avx512_vnni", "avx512_fp16", "avx512_vbmi",
        "avx_vnni", "amx_int8", "amx_bf16")]


class CpuInfo(Structure):
    _fields_ = [("detected", CpuCaps), ("compiled", CpuCaps), ("allowed", CpuCaps),
                ("cap", c_enum), ("cap_from_env", c_bool), ("brand", c_char * 64)]


class OpenOptions(Structure):
    _fields_ = [("size", c_size_t), ("no_mmap", c_bool)]


class ModelInfo(Structure):
    _fields_ = [("size", c_size_t), ("family", c_char_p), ("n_layers", c_int),
                ("hidden_size", c_int64), ("vocab_size", c_int64), ("n_moe_layers", c_int),
                ("n_experts", c_int), ("top_k", c_int)]


class LayerInfo(Structure):
    _fields_ = [("size", c_size_t), ("index", c_int), ("kind", c_enum),
                ("hidden_size", c_int64), ("n_experts", c_int), ("top_k", c_int),
                ("intermediate_size", c_int64), ("expert_format", c_enum),
                ("n_shared_experts", c_int), ("shared_intermediate_size", c_int64),
                ("shared_format", c_enum), ("route_method", c_enum), ("score_func", c_enum)]


class LayerOptions(Structure):
    _fields_ = [("size", c_size_t), ("threads", c_int), ("logits_dtype", c_enum),
                ("experts_recipe", c_enum), ("fixed_threads", c_bool)]


class TraceStep(Structure):
    _fields_ = [("name", c_char * 32), ("kernel", c_char * 64), ("bytes_read", c_uint64),
                ("bytes_written", c_uint64), ("ns", c_uint64)]


class Trace(Structure):
    _fields_ = [("count", c_size_t), ("steps", TraceStep * TRACE_MAX_STEPS)]


class ForwardArgs(Structure):
    _fields_ = [("size", c_size_t), ("n_tokens", c_size_t), ("hidden_size", c_size_t),
                ("hidden", c_void_p), ("hidden_dtype", c_enum), ("token_ids", c_void_p),
                ("token_id_dtype", c_enum), ("out", c_void_p), ("logits_out", c_void_p),
                ("ids_out", c_void_p), ("weights_out", c_void_p), ("workspace", c_void_p),
                ("workspace_size", c_size_t), ("trace", POINTER(Trace))]


class ExpertsArgs(Structure):
    _fields_ = [("size", c_size_t), ("n_tokens", c_size_t), ("hidden_size", c_size_t),
                ("hidden", c_void_p), ("hidden_dtype", c_enum), ("top_k", c_size_t),
                ("ids", c_void_p), ("ids_dtype", c_enum), ("weights", c_void_p),
                ("shared", c_bool), ("out", c_void_p), ("workspace", c_void_p),
                ("workspace_size", c_size_t), ("trace", POINTER(Trace))]


class RouterParams(Structure):
    _fields_ = [("size", c_size_t), ("method", c_enum), ("score", c_enum),
                ("n_experts", c_int), ("top_k", c_int), ("n_group", c_int),
                ("topk_group", c_int), ("norm_topk_prob", c_bool),
                ("routed_scaling_factor", c_float), ("correction_bias", c_void_p),
                ("correction_bias_dtype", c_enum), ("tid2eid", c_void_p),
                ("tid2eid_dtype", c_enum), ("vocab_size", c_int64), ("renorm_min", c_float)]


# The structs whose layout tests/python/test_structs.py compares with the C compiler's.
STRUCTS = {"moe_cpu_caps": CpuCaps, "moe_cpu_info": CpuInfo, "moe_open_options": OpenOptions,
           "moe_model_info": ModelInfo, "moe_layer_info": LayerInfo,
           "moe_layer_options": LayerOptions, "moe_trace_step": TraceStep, "moe_trace": Trace,
           "moe_forward_args": ForwardArgs, "moe_experts_args": ExpertsArgs,
           "moe_router_params": RouterParams}


# ---- The library ------------------------------------------------------------------------


def library_path() -> str:
    """Where the shared library is: $LIBMOE_LIBRARY, else libmoe.so* beside this file."""
    env = os.environ.get("LIBMOE_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libmoe.so*")))
    if not found:
        raise ImportError("libmoe: no libmoe.so* in %s and LIBMOE_LIBRARY is not set "
                          "(install the package with pip, or point LIBMOE_LIBRARY at the "
                          "shared library of a build)" % here)
    return found[0]


def _load() -> ctypes.CDLL:
    """Loads the library with its OpenMP runtime's idle workers sleeping, not spinning.

    In a Python process libmoe's OpenMP runtime shares the cores with PyTorch's (torch bundles
    its own): the default wait policy keeps each runtime's idle workers spinning after its
    work, taking the cores from the other's threads (a patched model decoded slower than the
    unpatched one; bench/NOTES.md). The runtime reads OMP_WAIT_POLICY once, as it loads, so
    it is set to PASSIVE for the load alone when the caller has not set it, and removed
    again: torch, or anything loaded later, sees the environment as it was.
    """
    path = library_path()
    passive = "OMP_WAIT_POLICY" not in os.environ
    if passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError("libmoe: cannot load %s: %s" % (path, e)) from e
    finally:
        if passive:
            del os.environ["OMP_WAIT_POLICY"]


lib = _load()

_PROTOTYPES = {
    # name: (result, [arguments]); handles and buffers travel as c_void_p (plain ints).
    "moe_version_string": (c_char_p, []),
    "moe_status_string": (c_char_p, [c_int]),
    "moe_last_error": (c_char_p, []),
    "moe_cpu_query": (c_int, [POINTER(CpuInfo)]),
    "moe_isa_level_name": (c_char_p, [c_int]),
    "moe_model_open": (c_int, [c_char_p, POINTER(OpenOptions), POINTER(c_void_p)]),
    "moe_model_close": (None, [c_void_p]),
    "moe_model_layer_count": (c_int, [c_void_p]),
    "moe_model_get_info": (c_int, [c_void_p, POINTER(ModelInfo)]),
    "moe_model_get_layer_info": (c_int, [c_void_p, c_int, POINTER(LayerInfo)]),
    "moe_layer_kind_name": (c_char_p, [c_int]),
    "moe_weight_format_name": (c_char_p, [c_int]),
    "moe_route_method_name": (c_char_p, [c_int]),
    "moe_score_func_name": (c_char_p, [c_int]),
    "moe_layer_create": (c_int, [c_void_p, c_int, POINTER(LayerOptions), POINTER(c_void_p)]),
    "moe_layer_destroy": (None, [c_void_p]),
    "moe_layer_workspace_size": (c_size_t, [c_void_p, c_size_t]),
    "moe_layer_get_info": (c_int, [c_void_p, POINTER(LayerInfo)]),
    "moe_layer_explain": (c_char_p, [c_void_p]),
    # The forwards take their args struct's address as an int: no byref() per call.
    "moe_layer_forward": (c_int, [c_void_p, c_void_p]),
    "moe_layer_forward_experts": (c_int, [c_void_p, c_void_p]),
    "moe_router_create_from_model": (c_int, [c_void_p, c_int, POINTER(c_void_p)]),
    "moe_router_destroy": (None, [c_void_p]),
    "moe_router_forward": (c_int, [c_void_p, c_size_t, c_void_p, c_void_p, c_int, c_void_p,
                                   c_void_p]),
    "moe_router_explain": (c_char_p, [c_void_p]),
}

for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args

for _cls in ERROR_CLASSES.values():
    _cls.status_name = lib.moe_status_string(_cls.status).decode()


def text(b: bytes) -> str:
    """A C string the library returned, as str."""
    return b.decode("utf-8", "replace")


def check(status: int) -> None:
    """Raise the exception of STATUS (nothing for MOE_OK) with the calling thread's
    moe_last_error(); call it right after the C call that returned STATUS."""
    if status:
        raise_status(status)


def raise_status(status: int) -> NoReturn:
    """Raise the exception class of a nonzero STATUS with moe_last_error() as its message."""
    message = text(lib.moe_last_error())
    cls: Type[MoeError] = ERROR_CLASSES.get(status, MoeError)
    raise cls(message, status, text(lib.moe_status_string(status)))


def fail(cls: Type[MoeError], message: str) -> NoReturn:
    """Raise CLS for a check made in Python, before any C call."""
    raise cls(message)
