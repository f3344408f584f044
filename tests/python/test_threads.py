# test_threads.py — several Python threads on one layer: the serial results, bit for bit.
from __future__ import annotations

import threading

import numpy as np
import torch

import libmoe


def test_threads_share_a_layer(checkpoint):
    with libmoe.open(checkpoint("deepseek_v3", "fp8")) as model:
        layer = model.layer(1, threads=1)
        experts = model.layer(1, threads=2)
    rng = np.random.default_rng(8)
    # Different batch sizes per thread, so the per-thread workspaces differ in size.
    xs = [rng.standard_normal((1 + 5 * i, 128)).astype(np.float32) for i in range(6)]
    serial = [layer(x, return_routing=True) for x in xs]
    results = [[] for _ in xs]
    errors = []
    start = threading.Barrier(len(xs))

    def work(i):
        try:
            start.wait()
            for r in range(20):
                x = xs[i] if r % 2 else torch.from_numpy(xs[i])
                y, ids, w = layer(x, return_routing=True)
                e = experts.experts(xs[i], np.asarray(ids), np.asarray(w))
                results[i].append((np.asarray(y), np.asarray(ids), np.asarray(w), e))
        except Exception as exc:  # reported below with the thread's index
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, (y, ids, w) in enumerate(serial):
        assert len(results[i]) == 20
        for gy, gids, gw, ge in results[i]:
            assert np.array_equal(gy, y) and np.array_equal(gids, ids)
            assert np.array_equal(gw, w)
            assert np.array_equal(ge, y)  # the experts-only forward with the layer's routing
