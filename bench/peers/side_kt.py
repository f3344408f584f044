# side_kt.py — kt-kernel's side of experts_side_by_side.py: kt_kernel_ext's AMX MoE classes.
"""Drives the low-level binding the way kt-kernel's own wrapper (kt_kernel/utils/amx.py,
NativeMoEWrapper) does, without the wrapper (it needs CUDA) and without torch: the extension
variant kt_kernel/_cpu_detect.py picks for this CPU is loaded by path (importing the kt_kernel
package would import torch), a CPUInfer worker pool of THREADS threads, a MOEConfig with
per-expert pointers straight into the checkpoint's tensors (bf16 [N, K]; or E4M3 codes [N, K]
and their float32 128x128 block scales [N/128, K/128]), AMXBF16_MOE or AMXFP8_MOE, then
load_weights_task (kt packs its own copy) and per forward forward_task + sync on bf16 hidden
states, int64 ids, float32 weights, bf16 output."""
import glob
import importlib.util
import json
import os

import numpy as np

import st_numpy


def load_ext():
    """The kt_kernel_ext module for this CPU, its variant and kt-kernel's version."""
    spec = importlib.util.find_spec("kt_kernel")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("kt_kernel is not installed in this interpreter")
    pkg = list(spec.submodule_search_locations)[0]
    detect_py = os.path.join(pkg, "_cpu_detect.py")
    det = importlib.util.spec_from_file_location("kt_cpu_detect", detect_py)
    detect = importlib.util.module_from_spec(det)
    det.loader.exec_module(detect)
    variant = detect.detect_cpu_features()
    so = glob.glob(os.path.join(pkg, f"_kt_kernel_ext_{variant}.*.so"))
    if not so:
        raise ImportError(f"no kt_kernel_ext build for the {variant} variant in {pkg}")
    ext_spec = importlib.util.spec_from_file_location("kt_kernel_ext", so[0])
    ext = importlib.util.module_from_spec(ext_spec)
    ext_spec.loader.exec_module(ext)
    from importlib.metadata import version

    return ext, getattr(ext, "__cpu_variant__", variant), version("kt-kernel")


class AmxMoe:
    def __init__(self, ext, cpu, folder, max_tokens, label):
        t = st_numpy.Tensors(folder)
        layer, experts = t.first_expert_layer()
        with open(os.path.join(folder, "config.json")) as f:
            self.top_k = json.load(f)["num_experts_per_tok"]
        names = [st_numpy.expert_names(layer, e) for e in range(experts)]
        mats = [[t.get(n) for n in trio] for trio in names]
        g0, _, d0 = mats[0]
        inter, hidden = g0.shape
        fp8 = g0.dtype == np.uint8
        self.keep = [mats]  # kt reads the checkpoint's pages during load_weights
        self.mask = np.zeros(experts, dtype=np.uint8)  # no expert on a GPU
        cfg = ext.moe.MOEConfig(experts, self.top_k, hidden, inter, self.mask.ctypes.data)
        cfg.layer_idx = 0
        cfg.pool = cpu.backend_
        cfg.max_len = max_tokens
        ptrs = [[[m[j].ctypes.data for m in mats]] for j in range(3)]
        cfg.gate_projs, cfg.up_projs, cfg.down_projs = ptrs
        if fp8:
            scales = [[np.ascontiguousarray(t.get(n + "_scale_inv"), np.float32) for n in trio]
                      for trio in names]
            self.keep.append(scales)
            sp = [[[s[j].ctypes.data for s in scales]] for j in range(3)]
            cfg.gate_scales, cfg.up_scales, cfg.down_scales = sp
            cfg.quant_config.bits = 8
            cfg.quant_config.group_size = st_numpy.FP8_BLOCK
            cfg.quant_config.zero_point = False
            cls = "AMXFP8_MOE"
        else:
            zero = [[0] * experts]
            cfg.gate_scales, cfg.up_scales, cfg.down_scales = zero, zero, zero
            cls = "AMXBF16_MOE"
        self.moe = getattr(ext.moe, cls)(cfg)
        self.cpu = cpu
        self.map = np.arange(experts, dtype=np.int64)  # physical to logical expert ids
        cpu.submit(self.moe.load_weights_task(self.map.ctypes.data))
        cpu.sync()
        self.keep = None
        self.name = f"kt {cls}"
        self.note = f"{label}, {cls}" + (f" (FP8 kernel {ext.__fp8_kernel__})" if fp8 else "")

    def bind(self, x, ids, w):
        xb = st_numpy.f32_bf16(x)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        w = np.ascontiguousarray(w, dtype=np.float32)
        out = np.empty(x.shape, dtype=np.uint16)
        qlen = np.array([x.shape[0]], dtype=np.int64)
        k = ids.shape[1]
        args = (qlen.ctypes.data, k, ids.ctypes.data, w.ctypes.data, xb.ctypes.data,
                out.ctypes.data, False)

        def call():
            self.cpu.submit(self.moe.forward_task(*args))
            self.cpu.sync()

        self.inputs = (xb, ids, w, qlen)  # alive while kt reads them by address
        return call, lambda: st_numpy.bf16_f32(out)

    def close(self):
        self.moe = None


def implementations(folder, threads, max_tokens, options):
    try:
        ext, variant, ver = load_ext()
    except Exception as e:  # noqa: BLE001 — any failure to load is reported as n/a
        yield ("kt", f"kt-kernel does not load here ({type(e).__name__}: {e})")
        return
    cpu = ext.CPUInfer(threads)
    yield AmxMoe(ext, cpu, folder, max_tokens,
                 f"kt-kernel {ver}, kt_kernel_ext variant {variant}, CPUInfer({threads})")
