# test_buffers.py — zero copy: the library reads the caller's buffers and writes into `out`.
from __future__ import annotations

import numpy as np
import torch

import libmoe


def test_out_is_written_in_place(layer):
    x = np.random.default_rng(1).standard_normal((4, 128)).astype(np.float32)
    out = np.full((4, 128), np.nan, np.float32)
    ret = layer(x, out=out)
    assert ret is out and np.isfinite(out).all()
    assert np.array_equal(out, layer(x))


def test_out_may_be_a_view_of_a_larger_buffer(layer):
    """A contiguous slice of rows is written where it lies; the rows around it stay."""
    x = np.random.default_rng(2).standard_normal((3, 128)).astype(np.float32)
    big = np.zeros((5, 128), np.float32)
    layer(x, out=big[1:4])
    assert np.array_equal(big[1:4], layer(x))
    assert not big[0].any() and not big[4].any()


def test_the_callers_hidden_buffer_is_read(layer):
    """A row of a larger array is passed by address: changing the array between two calls
    changes the result to that of the new values."""
    buf = np.random.default_rng(3).standard_normal((6, 128)).astype(np.float32)
    x = buf[2:4]
    first = layer(x).copy()
    buf[2:4] *= -2.0
    second = layer(x)
    assert not np.array_equal(first, second)
    assert np.array_equal(second, layer(buf[2:4].copy()))


def test_torch_out_and_hidden_share_memory_with_the_caller(layer):
    x = torch.randn(4, 128)
    out = torch.empty(4, 128)
    ptr = out.data_ptr()
    ret = layer(x, out=out)
    assert ret is out and ret.data_ptr() == ptr
    assert torch.equal(out, layer(x))
    assert torch.equal(out, torch.from_numpy(layer(x.numpy())))


def test_mixed_kinds_of_ids(layer, checkpoint):
    """Token ids may be numpy or torch whatever the hidden states are; ids in their own
    width (int32 or int64) give the same result."""
    with libmoe.open(checkpoint("deepseek_v4", "mxfp4")) as model:
        hash_layer = model.layer(0)
    x = np.random.default_rng(5).standard_normal((4, 128)).astype(np.float32)
    ids = np.array([3, 1, 4, 1], np.int64)
    a = hash_layer(x, ids)
    assert np.array_equal(a, hash_layer(x, ids.astype(np.int32)))
    assert np.array_equal(a, hash_layer(torch.from_numpy(x), torch.from_numpy(ids)).numpy())


def test_workspace_grows_and_shrinks(layer):
    """Per-thread workspace: T = 1, then 300, then 1 again give each row's result."""
    x = np.random.default_rng(6).standard_normal((300, 128)).astype(np.float32)
    small = layer(x[:1])
    big = layer(x)
    assert np.array_equal(big[:1], small)
    assert np.array_equal(layer(x[:1]), small)


def test_the_routing_arrays_are_new_buffers(layer):
    x = np.ones((2, 128), np.float32)
    _, ids1, w1 = layer(x, return_routing=True)
    _, ids2, w2 = layer(x, return_routing=True)
    assert not np.shares_memory(ids1, ids2) and not np.shares_memory(w1, w2)
    assert np.array_equal(ids1, ids2)


def test_no_copy_of_the_hidden_states(layer):
    """With out given and the workspace grown, a forward allocates (in numpy, which reports to
    tracemalloc) far less than the hidden states' size: they are not copied."""
    import tracemalloc
    x = np.random.default_rng(7).standard_normal((2048, 128)).astype(np.float32)
    out = np.empty_like(x)
    ids = np.arange(2048, dtype=np.int64)
    layer(x, ids, out=out)  # grows this thread's workspace
    tracemalloc.start()
    try:
        layer(x, ids, out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes // 16
    # The check sees copies: converting the input would allocate all of it.
    tracemalloc.start()
    try:
        np.ascontiguousarray(x[:, ::-1])
        _, copy_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert copy_peak >= x.nbytes
