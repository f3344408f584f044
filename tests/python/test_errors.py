# test_errors.py — bad input raises the right exception class with a message naming the culprit.
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import libmoe

X = np.zeros((2, 128), np.float32)


def test_class_hierarchy():
    assert issubclass(libmoe.InvalidArgumentError, ValueError)
    assert issubclass(libmoe.DtypeError, TypeError)
    assert issubclass(libmoe.ShapeError, ValueError)
    assert issubclass(libmoe.OutOfMemoryError, MemoryError)
    assert issubclass(libmoe.MoeIOError, OSError)
    errors = [getattr(libmoe, n) for n in libmoe.__all__ if n.endswith("Error")]
    assert all(issubclass(c, libmoe.MoeError) for c in errors)
    statuses = sorted(c.status for c in errors if c is not libmoe.MoeError)
    assert statuses == list(range(1, 19))  # one class per moe_status of include/moe.h
    # C statuses are raised as the class of that status (a failing call picks it from here)
    assert libmoe.errors.ERROR_CLASSES == {c.status: c for c in errors if c is not libmoe.MoeError}
    assert libmoe.InvalidArgumentError.status_name == "invalid argument"


@pytest.mark.parametrize("bad,cls,words", [
    (np.zeros((2, 128), np.float64), libmoe.DtypeError, ["hidden", "float64"]),
    (np.zeros((2, 128), np.float16), libmoe.DtypeError, ["hidden", "float16"]),
    (torch.zeros(2, 128, dtype=torch.float16), libmoe.DtypeError, ["hidden", "float16"]),
    (np.zeros((2, 64), np.float32), libmoe.ShapeError, ["hidden", "128"]),
    (np.zeros(128, np.float32), libmoe.ShapeError, ["hidden", "2 dimensions"]),
    (np.zeros((2, 3, 128), np.float32), libmoe.ShapeError, ["hidden"]),
    (np.zeros((128, 2), np.float32).T, libmoe.InvalidArgumentError, ["hidden", "contiguous"]),
    (torch.zeros(128, 2).t(), libmoe.InvalidArgumentError, ["hidden", "contiguous"]),
    (np.zeros((2, 256), np.float32)[:, ::2], libmoe.InvalidArgumentError, ["contiguous"]),
    ([[0.0] * 128] * 2, libmoe.InvalidArgumentError, ["hidden", "list"]),
])
def test_bad_hidden(layer, bad, cls, words):
    with pytest.raises(cls) as e:
        layer(bad)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("kwargs,cls,words", [
    ({"out": np.zeros((2, 128), np.float64)}, libmoe.DtypeError, ["out", "float64"]),
    ({"out": np.zeros((3, 128), np.float32)}, libmoe.ShapeError, ["out", "[2, 128]"]),
    ({"out": np.zeros((128, 2), np.float32).T}, libmoe.InvalidArgumentError, ["out"]),
    ({"out": torch.zeros(2, 128)}, libmoe.InvalidArgumentError, ["out", "same kind"]),
    ({"input_ids": np.zeros(2, np.float32)}, libmoe.DtypeError, ["input_ids"]),
    ({"input_ids": np.zeros(3, np.int32)}, libmoe.ShapeError, ["input_ids"]),
])
def test_bad_arguments(layer, kwargs, cls, words):
    with pytest.raises(cls) as e:
        layer(X, **kwargs)
    for w in words:
        assert w in str(e.value)


def test_read_only_and_aliased_out(layer):
    ro = np.zeros((2, 128), np.float32)
    ro.flags.writeable = False
    with pytest.raises(libmoe.InvalidArgumentError, match="out: the array is read-only"):
        layer(X, out=ro)
    x = np.ones((2, 128), np.float32)
    with pytest.raises(libmoe.InvalidArgumentError, match="out: overlaps hidden"):
        layer(x, out=x)
    assert (x == 1).all()


def test_nothing_is_written_on_error(layer):
    out = np.full((2, 128), 7.0, np.float32)
    ids = np.array([[0, 99], [1, 2]], np.int32)
    with pytest.raises(libmoe.RangeError) as e:
        layer.experts(X, ids, np.ones((2, 2), np.float32), out=out)
    assert e.value.status == 7 and e.value.status_name == "value out of range"
    assert "ids[0][1] = 99" in str(e.value)
    assert (out == 7.0).all()


def test_experts_errors(layer, model):
    w = np.ones((2, 2), np.float32)
    with pytest.raises(libmoe.RangeError, match=r"ids\[1\]\[1\] = 3 repeats"):
        layer.experts(X, np.array([[0, 1], [3, 3]], np.int64), w)  # repeated in a row
    with pytest.raises(libmoe.BadValueError):
        layer.experts(X, np.array([[0, 1], [2, 3]]), np.array([[1, np.nan], [1, 1]]))
    with pytest.raises(libmoe.DtypeError, match="ids"):
        layer.experts(X, np.zeros((2, 2), np.float32), w)
    with pytest.raises(libmoe.DtypeError, match="weights"):
        layer.experts(X, np.zeros((2, 2), np.int32), np.ones((2, 2), np.int32))
    with pytest.raises(libmoe.ShapeError, match="ids"):
        layer.experts(X, np.zeros((2, 3), np.int32), w)
    with pytest.raises(libmoe.InvalidArgumentError, match="dense"):
        model.layer(0).experts(X, np.zeros((2, 2), np.int32), w)
    with pytest.raises(libmoe.InvalidArgumentError, match="dense"):
        model.layer(0)(X, return_routing=True)


def test_hash_layer_needs_ids_in_range(checkpoint):
    with libmoe.open(checkpoint("deepseek_v4", "mxfp4")) as m:
        hash_layer = m.layer(0)
        router = m.router(0)
    with pytest.raises(libmoe.InvalidArgumentError, match="token_ids"):
        hash_layer(X)
    with pytest.raises(libmoe.RangeError, match="512"):
        hash_layer(X, np.array([0, 512], np.int64))  # vocab_size 512
    with pytest.raises(libmoe.RangeError):
        hash_layer(X, np.array([-1, 0], np.int32))
    with pytest.raises(libmoe.InvalidArgumentError):
        router(np.zeros((2, 8), np.float32))


def test_router_errors(model):
    with pytest.raises(libmoe.InvalidArgumentError):
        model.router(0)  # dense
    r = model.router(1)
    with pytest.raises(libmoe.ShapeError, match="logits"):
        r(np.zeros((2, 7), np.float32))
    with pytest.raises(libmoe.DtypeError, match="logits"):
        r(np.zeros((2, 8), np.float64))


def test_missing_folder_and_bad_layers(tmp_path, model):
    with pytest.raises(libmoe.MissingError) as e:
        libmoe.open(tmp_path / "nowhere")
    assert "nowhere" in str(e.value) and e.value.status == 8
    with pytest.raises(libmoe.MoeError, match="layer"):
        model.layer(2)
    with pytest.raises(libmoe.MoeError):
        model.layer_info(-1)
    with pytest.raises(libmoe.InvalidArgumentError, match="recipe"):
        model.layer(1, recipe="fp16")
    with pytest.raises(libmoe.InvalidArgumentError, match="threads"):
        model.layer(1, threads=0)
    with pytest.raises(libmoe.InvalidArgumentError, match="layer"):
        model.layer("1")


def test_bad_config(checkpoint, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(checkpoint("mixtral", "bf16"), d)
    cfg = json.load(open(d / "config.json"))
    cfg["num_experts_per_tok"] = 99
    json.dump(cfg, open(d / "config.json", "w"))
    with pytest.raises(libmoe.ConfigError, match="num_experts_per_tok"):
        libmoe.open(d)
    (d / "config.json").write_text("{")
    with pytest.raises(libmoe.JsonError):
        libmoe.open(d)


def test_closed_model_layer_and_router(checkpoint):
    d = checkpoint("mixtral", "bf16")
    model = libmoe.open(d)
    layer, router = model.layer(0), model.router(1)
    model.close()
    for call in (lambda: model.layer(0), lambda: model.layer_info(0), lambda: model.router(0)):
        with pytest.raises(libmoe.StateError, match="model .*mixtral.*: closed"):
            call()
    layer.close()
    router.close()
    router.close()  # a second close is a no-op
    for call in (lambda: layer(X), layer.explain, lambda: layer.workspace_size(1)):
        with pytest.raises(libmoe.StateError, match="^layer 0: closed$"):
            call()
    for call in (lambda: router(np.zeros((2, 8), np.float32)), router.explain):
        with pytest.raises(libmoe.StateError, match="^router of layer 1: closed$"):
            call()
    # each is its own context manager, closed when the block ends
    with libmoe.open(d) as m, m.layer(1) as lay, m.router(1) as r:
        assert isinstance(m, libmoe.Model) and isinstance(lay, libmoe.Layer)
        assert isinstance(r, libmoe.Router) and "closed" not in repr(lay)
    assert "closed" in repr(lay) and "closed" in repr(m)
    for call in (lambda: m.layer(0), lambda: lay(X), r.explain):
        with pytest.raises(libmoe.StateError, match="closed"):
            call()
