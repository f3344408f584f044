# __init__.py — libmoe for Python: open a checkpoint, create layers, run them on numpy or torch.
"""libmoe runs the Mixture-of-Experts block of large language models (DeepSeek-V2/V3, Kimi-K2,
DeepSeek-V4, Qwen3-MoE, Mixtral, gpt-oss) from their Hugging Face checkpoints on x86-64 CPUs.

>>> import libmoe, numpy as np
>>> with libmoe.open("DeepSeek-V3") as model:
...     layer = model.layer(3)
>>> y = layer(np.random.randn(4, model.info.hidden_size).astype(np.float32))

The package calls the C library through ctypes: buffers are passed by address (no copies),
the GIL is released during each forward, and every failure is a :class:`MoeError` subclass
carrying the library's message. numpy is the only requirement; torch CPU tensors (float32,
bfloat16) are accepted when torch is installed.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Union

from . import _lib
from .errors import (BadValueError, ConfigError, DtypeError, DuplicateError, HeaderError,
                     InvalidArgumentError, JsonError, MissingError, MoeError, MoeIOError,
                     OffsetError, OutOfMemoryError, PathError, RangeError, ShapeError,
                     SizeOverflowError, StateError, TruncatedError, UnsupportedError)
from .layer import Layer
from .model import LayerInfo, Model, ModelInfo
from .router import Router

__version__: str = _lib.text(_lib.lib.moe_version_string())

__all__ = [
    "__version__", "open", "cpu_info", "Model", "ModelInfo", "LayerInfo", "Layer", "Router",
    "MoeError", "InvalidArgumentError", "OutOfMemoryError", "MoeIOError", "StateError",
    "UnsupportedError", "SizeOverflowError", "RangeError", "MissingError", "TruncatedError",
    "HeaderError", "JsonError", "DuplicateError", "OffsetError", "DtypeError", "ShapeError",
    "PathError", "ConfigError", "BadValueError",
]


def open(path: Union[str, "os.PathLike[str]"], no_mmap: bool = False) -> Model:  # noqa: A001
    """Open a Hugging Face model folder (config.json and its safetensors): every header and
    the config are validated, the files mapped, nothing packed. ``no_mmap`` reads the tensors
    into memory instead (e.g. on network file systems)."""
    return Model(path, no_mmap)


def _caps(c: _lib.CpuCaps) -> Dict[str, bool]:
    return {name: bool(getattr(c, name)) for name, _ in _lib.CpuCaps._fields_}


def cpu_info() -> Dict[str, Any]:
    """What the CPU has (``detected``), what this build compiled kernels for (``compiled``)
    and what libmoe will use (``allowed``: both, capped by $MOE_ISA), each a dict of feature
    flags; ``cap``, the ISA level cap ("scalar", "avx2", "avx512", "avx512bf16");
    ``cap_from_env``, whether $MOE_ISA set it; ``brand``, the CPU brand string."""
    c = _lib.CpuInfo()
    _lib.check(_lib.lib.moe_cpu_query(c))
    return {"detected": _caps(c.detected), "compiled": _caps(c.compiled),
            "allowed": _caps(c.allowed), "cap": _lib.ISA_LEVELS.get(c.cap, "unknown"),
            "cap_from_env": bool(c.cap_from_env),
            "brand": c.brand.decode("utf-8", "replace").strip()}
