# experts_f64.py — the routed experts of a checkpoint in float64 numpy: the reference for --check.
"""out[t] = sum over k of w[t, k] * down(silu(gate(x[t])) * up(x[t])) with expert ids[t, k],
every product and sum in float64, on the exact stored weights (bf16 as stored; E4M3 codes
times their block scales). One expert's three matrices are in memory at a time."""
import numpy as np

import st_numpy


def experts_f64(folder, x, ids, w):
    t = st_numpy.Tensors(folder)
    layer, _ = t.first_expert_layer()
    x64 = x.astype(np.float64)
    out = np.zeros(x.shape, dtype=np.float64)
    for e in np.unique(ids):
        tok, slot = np.nonzero(ids == e)
        g, u, d = (st_numpy.weight_f64(t, n) for n in st_numpy.expert_names(layer, int(e)))
        a, b = x64[tok] @ g.T, x64[tok] @ u.T
        h = a / (1 + np.exp(-a)) * b
        np.add.at(out, tok, (h @ d.T) * w[tok, slot, None].astype(np.float64))
    return out
