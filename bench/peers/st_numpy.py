# st_numpy.py — a checkpoint's expert tensors as numpy arrays (no torch), bf16 and E4M3 decoded.
"""Tensors maps a folder's safetensors files read-only and hands out numpy views without a
copy: BF16 as uint16 bit patterns, F8_E4M3 as uint8 codes, F32 as float32 (what a C kernel
wants a pointer to). bf16_f32() and e4m3_f32() decode them exactly; expert_names() gives the
gate / up / down tensor names of one routed expert in a DeepSeek-style checkpoint.
Standard library and numpy only.
"""
import re

import numpy as np

from st_files import mapped_headers

DTYPES = {"BF16": np.uint16, "F8_E4M3": np.uint8, "F32": np.float32, "I64": np.int64}
PROJ = ("gate_proj", "up_proj", "down_proj")
FP8_BLOCK = 128


class Tensors:
    def __init__(self, folder):
        self.where = {}
        for mm, base, header in mapped_headers(folder):
            for key, info in header.items():
                self.where[key] = (mm, base, info)

    def __contains__(self, name):
        return name in self.where

    def get(self, name):
        mm, base, info = self.where[name]
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{name}: dtype {info['dtype']} is not handled here")
        start, end = info["data_offsets"]
        dtype, shape = np.dtype(DTYPES[info["dtype"]]), info["shape"]
        count = int(np.prod(shape))
        if end - start != count * dtype.itemsize:
            raise ValueError(f"{name}: {end - start} bytes for shape {shape} {info['dtype']}")
        return np.frombuffer(mm, dtype=dtype, count=count, offset=base + start).reshape(shape)

    def first_expert_layer(self):
        """The index of the first layer with routed experts, and their count."""
        pat = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.gate_proj\.weight$")
        hits = [tuple(map(int, m.groups())) for m in map(pat.match, self.where) if m]
        if not hits:
            raise ValueError("no model.layers.L.mlp.experts.E... tensors in the checkpoint")
        layer = min(h[0] for h in hits)
        return layer, 1 + max(h[1] for h in hits if h[0] == layer)


def expert_names(layer, e):
    """The gate, up and down weight names of routed expert E of LAYER."""
    return [f"model.layers.{layer}.mlp.experts.{e}.{p}.weight" for p in PROJ]


def bf16_f32(bits):
    """bf16 bit patterns (uint16) as float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_bf16(x):
    """float32 values that are bf16 numbers (low 16 bits zero) as their bf16 bit patterns."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def round_bf16(x):
    """float32 values rounded to the nearest bf16 (ties to even), still as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def e4m3_table():
    """The 256 E4M3 (fn) codes as float64: sign, 4 exponent bits (bias 7), 3 mantissa bits;
    exponent 0 subnormal; 0x7F and 0xFF NaN."""
    c = np.arange(256)
    exp, man = (c >> 3) & 15, (c & 7).astype(np.float64)
    v = np.where(exp == 0, man / 8 * 2.0**-6, (1 + man / 8) * 2.0 ** (exp - 7))
    v = np.where(c & 0x80, -v, v)
    v[(c & 0x7F) == 0x7F] = np.nan
    return v


def weight_f64(t, name):
    """One projection [N, K] as float64: bf16 as stored, or E4M3 codes times their 128x128
    block scale (weight_scale_inv)."""
    w = t.get(name)
    if w.dtype == np.uint16:
        return bf16_f32(w).astype(np.float64)
    if w.dtype == np.uint8:
        s = t.get(name + "_scale_inv").astype(np.float64)
        n, k = w.shape
        s = np.repeat(np.repeat(s, FP8_BLOCK, 0)[:n], FP8_BLOCK, 1)[:, :k]
        return e4m3_table()[w] * s
    return w.astype(np.float64)
