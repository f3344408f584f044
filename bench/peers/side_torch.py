# side_torch.py — torch's side of experts_side_by_side.py: bf16 F.linear per expert, rows sorted.
"""block.experts_sorted on the weights checkpoint.load holds (bf16; FP8 dequantised to bf16
once at load, as a torch user runs such a checkpoint on a CPU): rows sorted by expert, one
fused gate_up F.linear and one down F.linear per expert, SiLU, a weighted index_add_ in f32."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class Sorted:
    def __init__(self, folder, threads):
        import torch

        import checkpoint

        self.torch = torch
        torch.set_num_threads(threads)
        self.lay = checkpoint.load(folder)
        how = f"dequantised from {self.lay.dequantised}" if self.lay.dequantised else "as stored"
        self.name = "torch sorted"
        self.note = (f"torch {torch.__version__}: bf16 weights {how}, F.linear per expert "
                     f"(rows sorted by expert), {threads} threads")

    def bind(self, x, ids, w):
        import block

        torch = self.torch
        xt = torch.from_numpy(x).to(torch.bfloat16)
        it, wt = torch.from_numpy(ids), torch.from_numpy(w)
        res = [None]

        def call():
            with torch.inference_mode():
                res[0] = block.experts_sorted(self.lay, xt, it, wt)

        return call, lambda: res[0].numpy()

    def close(self):
        self.lay = None


def implementations(folder, threads, max_tokens, options):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        yield ("torch sorted", f"torch does not import here ({e})")
        return
    yield Sorted(folder, threads)
