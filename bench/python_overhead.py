#!/usr/bin/env python3
# python_overhead.py — what the Python binding adds to one forward at T = 1, in microseconds.
"""The same forward three ways on a tiny layer (hidden 64, 4 experts, top-1, one thread, so the
C work is small and steady), each timed over N calls in interleaved rounds. The clock is the
calling thread's CPU time (time.thread_time: with one thread the forward runs on the caller),
so time the thread spends descheduled on a shared machine is not counted; the fastest round
of each is reported:

  raw      lib.moe_layer_forward(handle, args) through ctypes with a prebuilt struct and
           buffers: the C forward plus the ctypes call itself (the floor for any binding)
  numpy    layer(x) with numpy x, out allocated per call (and with out= given)
  torch    layer(x) with a torch tensor

overhead = API time − raw time. On the development machine (two cores of an AVX-512 Xeon,
shared): raw 2.7 µs per call; numpy +2.1 µs, numpy with out= +2.6 µs, torch +3.7 µs. Run: LIBMOE_LIBRARY=build/libmoe.so python3
bench/python_overhead.py [--moe build/moe] [--calls N]. Not a test: timings vary with the load.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import libmoe  # noqa: E402
from libmoe import _lib  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    t0 = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moe", default=os.path.join("build", "moe"))
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([a.moe, "gen", "--family", "qwen3_moe", "--out", d, "--layers", "1",
                        "--hidden", "64", "--intermediate", "32", "--experts", "4", "--topk",
                        "1"], check=True, capture_output=True)
        with libmoe.open(d) as model:
            layer = model.layer(0, threads=1)
    H = layer.info.hidden_size
    x = np.random.default_rng(0).standard_normal((1, H)).astype(np.float32)
    out = np.empty((1, H), np.float32)
    ws_size = layer.workspace_size(1)
    ws, ws_addr = libmoe._buffers.aligned_bytes(ws_size)
    args = _lib.ForwardArgs(size=ctypes.sizeof(_lib.ForwardArgs), n_tokens=1, hidden_size=H,
                            hidden=x.ctypes.data, hidden_dtype=_lib.DTYPE_F32,
                            out=out.ctypes.data, workspace=ws_addr, workspace_size=ws_size)
    forward, handle, addr = _lib.lib.moe_layer_forward, layer._handle, ctypes.addressof(args)
    assert forward(handle, addr) == 0 and np.array_equal(out, layer(x))

    ways = {"raw ctypes call": lambda: forward(handle, addr),
            "layer(x) numpy": lambda: layer(x),
            "layer(x, out=out) numpy": lambda: layer(x, out=out)}
    try:
        import torch
        xt = torch.from_numpy(x.copy())
        ways["layer(x) torch"] = lambda: layer(xt)
    except ImportError:
        pass
    times = {k: [] for k in ways}
    for _ in range(a.rounds):
        for k, fn in ways.items():
            times[k].append(per_call_us(fn, a.calls))
    raw = min(times["raw ctypes call"])
    print("T = 1, hidden %d, one thread, %d calls x %d rounds, fastest round, CPU time per call:"
          % (H, a.calls, a.rounds))
    for k, v in times.items():
        m = min(v)
        extra = "" if k.startswith("raw") else "   overhead %.2f us" % (m - raw)
        print("  %-26s %7.2f us%s" % (k, m, extra))


if __name__ == "__main__":
    main()
