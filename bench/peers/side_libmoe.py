# side_libmoe.py — libmoe's side of experts_side_by_side.py: Layer.experts() per recipe.
"""Runs in an interpreter with numpy (the libmoe package needs nothing else); the package is
python/ of this repository and the library $LIBMOE_LIBRARY (set by the parent). Hidden states
go in as float32 numpy (the values are bf16 numbers), the output comes back float32; the
shared experts are left out (shared=False): only the routed experts are timed."""
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Recipe:
    def __init__(self, model, index, threads, recipe):
        import libmoe

        self.name = f"libmoe {recipe}"
        self.layer = model.layer(index, threads=threads, recipe=recipe)
        sets = [ln.split("kernel set:")[1].split(":")[0].strip()
                for ln in self.layer.explain().splitlines() if "kernel set:" in ln]
        self.note = f"libmoe {libmoe.__version__}, recipe {recipe}, {threads} threads" + (
            f", routed experts on {sets[0]}" if sets else "")

    def bind(self, x, ids, w):
        out = np.empty(x.shape, dtype=np.float32)

        def call():
            self.layer.experts(x, ids, w, shared=False, out=out)

        return call, lambda: out

    def close(self):
        self.layer.close()


def implementations(folder, threads, max_tokens, options):
    """One Recipe per recipe in options.recipes, or (name, reason) where creation refuses.
    The model is closed once its layer is created (the layer stays valid), so the mapped
    checkpoint does not stay resident beside the packed weights."""
    sys.path.insert(0, os.path.join(REPO, "python"))
    import libmoe

    for recipe in options.recipes.split(","):
        with libmoe.open(folder) as model:
            index = next(i for i in range(len(model)) if model.layer_info(i).kind == "moe")
            try:
                impl = Recipe(model, index, threads, recipe)
            except libmoe.MoeError as e:
                impl = (f"libmoe {recipe}", str(e))
        yield impl
