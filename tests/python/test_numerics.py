# test_numerics.py — layer, experts-only and router outputs against the float64 reference.
"""Every family and expert format through the Python API, checked against reference.py (an
independent float64 reading of the checkpoint): routing exact up to near ties, weights to
1e-5, the block output to 1e-5 relative (f32 recipe: fp32 accumulation only), 1e-2 with bf16
activations, 2e-2 for MXFP4 and INT4 experts (activations quantised per 32-block to int8,
docs/layer.md). The last test checks the binding adds no arithmetic: the CLI's `moe run`
output, bit for bit."""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import numpy as np
import pytest
import torch

import libmoe
from conftest import run_cli
from reference import Checkpoint, LayerRef, rel_error, same_routing

# (family, dtype, layer, output tolerance)
CASES = [
    ("deepseek_v3", "fp8", 1, 1e-5),
    ("deepseek_v3", "bf16", 1, 1e-5),
    ("deepseek_v3", "fp8", 0, 1e-5),     # the dense first layer
    ("deepseek_v4", "mxfp4", 0, 2e-2),   # hash-routed
    ("deepseek_v4", "mxfp4", 1, 2e-2),
    ("deepseek_v4", "fp8", 1, 1e-5),
    ("qwen3_moe", "bf16", 1, 1e-5),
    ("qwen3_moe", "fp8", 0, 1e-5),
    ("mixtral", "bf16", 0, 1e-5),
    ("gpt_oss", "mxfp4", 1, 2e-2),
    ("gpt_oss", "bf16", 0, 1e-5),
    # DeepSeek-V3's router under other model_types (groups, scaling, mlp_layer_types).
    ("deepseek_v32", "fp8", 1, 1e-5),
    ("deepseek_v32", "fp8", 0, 1e-5),
    ("glm4_moe", "bf16", 1, 1e-5),
    ("glm4_moe", "fp8", 1, 1e-5),
    ("glm_moe_dsa", "fp8", 1, 1e-5),
    ("glm_moe_dsa", "bf16", 0, 1e-5),
    ("glm4_moe_lite", "bf16", 1, 1e-5),
    ("kimi_k25", "bf16", 1, 1e-5),       # text_config, language_model.model.layers
    ("kimi_k25", "fp8", 1, 1e-5),
    ("kimi_k25", "bf16", 0, 1e-5),
    ("minimax_m2", "fp8", 1, 1e-5),      # noaux_tc in one group, the bias on the block
    ("minimax_m2", "bf16", 0, 1e-5),
    # The shared expert times sigmoid(x · shared_expert_gate).
    ("qwen3_next", "bf16", 1, 1e-5),
    ("qwen3_next", "fp8", 0, 1e-5),
    ("qwen3_5_moe", "bf16", 0, 1e-5),    # text_config, model.language_model.layers
    ("qwen3_5_moe", "fp8", 1, 1e-5),
    # softmax_bias: the bias on the probabilities, the floor moe_norm_min.
    ("ernie4_5_moe", "bf16", 1, 1e-5),
    ("ernie4_5_moe", "fp8", 1, 1e-5),
    ("ernie4_5_moe", "bf16", 0, 1e-5),
    # sigmoid_top1, the weight scaling the expert's input; stacked input-major experts.
    ("llama4", "bf16", 0, 1e-5),
    ("llama4", "bf16", 1, 1e-5),
    # INT4 pack-quantized routed experts (q8 recipe), bf16 shared experts and dense layer.
    ("kimi_k2", "int4", 1, 2e-2),
    ("deepseek_v3", "int4", 1, 2e-2),
    ("kimi_k2", "int4", 0, 1e-5),
]
T = 7
# The routed experts' format each `moe gen --dtype` gives.
EXPERT_FORMAT = {"bf16": "bf16", "fp8": "fp8_block", "mxfp4": "mxfp4", "int4": "int4_group"}
# `moe gen` options a family needs beyond conftest's GEN_SHAPE (Llama-4 routes one expert).
GEN_EXTRA = {"llama4": ("--topk", "1")}


def inputs(seed: int, H: int, vocab: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, H)).astype(np.float32), \
        rng.integers(0, vocab, T).astype(np.int64)


def with_reference(checkpoint, family: str, dtype: str, index: int,
                   make: Callable[[libmoe.Model, int], Any] = libmoe.Model.layer):
    """(MAKE(model, INDEX), the float64 reference of layer INDEX, the model's info) for the
    generated FAMILY/DTYPE checkpoint; the model is closed, what MAKE built outlives it."""
    d = checkpoint(family, dtype, *GEN_EXTRA.get(family, ()))
    with libmoe.open(d) as model:
        return make(model, index), LayerRef(Checkpoint(d), index), model.info


@pytest.mark.parametrize("family,dtype,index,tol", CASES)
def test_forward_matches_reference(checkpoint, family, dtype, index, tol):
    layer, ref, info = with_reference(checkpoint, family, dtype, index)
    x, tok = inputs(index + 11, info.hidden_size, info.vocab_size)
    want, routing = ref.forward(x.astype(np.float64), tok)
    if routing is None:
        assert layer.info.kind == "dense"
        got = layer(x)
    else:
        assert layer.info.expert_format == EXPERT_FORMAT[dtype]
        got, ids, w = layer(x, tok, return_routing=True)
        assert ids.dtype == np.int32 and w.dtype == np.float32 and ids.shape == (T, ref.K)
        assert same_routing(ids, w, routing) == []
    assert got.shape == x.shape and got.dtype == np.float32
    assert rel_error(got, want) <= tol


def rewritten(checkpoint, tmp_path, family: str, dtype: str, **fields) -> str:
    """A folder with the generated FAMILY/DTYPE checkpoint's tensors and its config.json with
    FIELDS replaced (a value `moe gen` does not write)."""
    d = checkpoint(family, dtype)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(fields)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "model.safetensors").symlink_to(os.path.join(d, "model.safetensors"))
    return str(tmp_path)


@pytest.mark.parametrize("family,field,value", [("ernie4_5_moe", "moe_norm_min", 0.6),
                                                ("qwen3_next", "norm_topk_prob", False)])
def test_routing_field_not_generated(checkpoint, tmp_path, family, field, value):
    """Routing fields whose generated value changes nothing visible: ERNIE's moe_norm_min
    floor where it binds (the selected probabilities sum below it on some tokens, checked),
    Qwen3-Next without renormalisation."""
    d = rewritten(checkpoint, tmp_path, family, "bf16", **{field: value})
    ref = LayerRef(Checkpoint(d), 1)
    with libmoe.open(d) as model:
        layer = model.layer(1)
    x, _ = inputs(6, 128, 512)
    want, routing = ref.forward(x.astype(np.float64))
    got, ids, w = layer(x, return_routing=True)
    assert same_routing(ids, w, routing) == []
    assert rel_error(got, want) <= 1e-5
    s = np.take_along_axis(ref.scores(ref.logits(x.astype(np.float64))), routing.ids, 1)
    if field == "moe_norm_min":
        assert 0 < int((s.sum(1) < value).sum()) < T  # the floor binds on some tokens only
    else:
        assert np.allclose(routing.weights, s) and (s.sum(1) < 0.99).all()


@pytest.mark.parametrize("family,dtype,index", [("deepseek_v3", "fp8", 1),
                                                ("qwen3_moe", "bf16", 1),
                                                ("deepseek_v4", "mxfp4", 0)])
def test_torch_bf16_input(checkpoint, family, dtype, index):
    """bf16 hidden states are read as they are: the reference sees the same bf16 values."""
    layer, ref, info = with_reference(checkpoint, family, dtype, index)
    x, tok = inputs(5, info.hidden_size, info.vocab_size)
    xb = torch.from_numpy(x).to(torch.bfloat16)
    want, routing = ref.forward(xb.to(torch.float64).numpy(), tok)
    got, ids, w = layer(xb, torch.from_numpy(tok), return_routing=True)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int32
    assert same_routing(ids.numpy(), w.numpy(), routing) == []
    assert rel_error(got.numpy(), want) <= (2e-2 if dtype == "mxfp4" else 1e-5)


def test_bf16_recipe(checkpoint):
    """recipe='bf16' rounds the activations to bf16: within 1e-2 of the exact block, and not
    the f32 recipe's result."""
    d = checkpoint("qwen3_moe", "bf16")
    ref = LayerRef(Checkpoint(d), 1)
    with libmoe.open(d) as model:
        bf = model.layer(1, recipe="bf16")
        f32 = model.layer(1, recipe="f32")
    x, _ = inputs(3, 128, 512)
    want, _ = ref.forward(x.astype(np.float64))
    got = bf(x)
    assert rel_error(got, want) <= 1e-2
    assert not np.array_equal(got, f32(x))
    assert "bf16" in bf.explain()


@pytest.mark.parametrize("family,dtype,index", [("qwen3_moe", "bf16", 1),
                                                ("deepseek_v3", "bf16", 1),
                                                ("deepseek_v3", "bf16", 0),
                                                ("gpt_oss", "bf16", 0),
                                                ("deepseek_v3", "fp8", 1),
                                                ("deepseek_v3", "fp8", 0),
                                                ("gpt_oss", "mxfp4", 1),
                                                ("deepseek_v4", "mxfp4", 1)])
def test_tile_recipe(checkpoint, family, dtype, index):
    """recipe='tile' on bf16, FP8 and MXFP4 experts (routed, shared, dense; gpt-oss's biases;
    MXFP4 weights widened with their block scales to bf16): activations rounded to bf16, the
    tile unit's arithmetic: within 1e-2 of the exact block, not the f32 recipe's result (for
    MXFP4: q8's), and the same bits in a batch as token by token."""
    d = checkpoint(family, dtype)
    ref = LayerRef(Checkpoint(d), index)
    with libmoe.open(d) as model:
        tile = model.layer(index, recipe="tile")
        f32 = model.layer(index, recipe="f32")
        info = model.info
    x, tok = inputs(4, info.hidden_size, info.vocab_size)
    want, _ = ref.forward(x.astype(np.float64), tok)
    got = tile(x, tok)
    assert rel_error(got, want) <= 1e-2
    assert not np.array_equal(got, f32(x, tok))
    for t in range(T):
        assert np.array_equal(tile(x[t:t + 1], tok[t:t + 1]), got[t:t + 1])
    assert "recipe: tile (" in tile.explain()
    assert f"moe_expert_{dtype}_tile_" in tile.explain()


@pytest.mark.parametrize("family,dtype,index,tol", [("deepseek_v3", "fp8", 1, 1e-5),
                                                    ("gpt_oss", "mxfp4", 1, 2e-2),
                                                    ("qwen3_5_moe", "bf16", 1, 1e-5),
                                                    ("llama4", "bf16", 1, 1e-5),
                                                    ("kimi_k2", "int4", 1, 2e-2)])
def test_experts_only(checkpoint, family, dtype, index, tol):
    """The caller's ids (int32 and int64) and weights (float64, converted): the reference's
    sum over those experts, with and without the shared experts (Qwen3.5-MoE's gated;
    Llama-4's weights scale each expert's input, docs/layer.md)."""
    layer, ref, _ = with_reference(checkpoint, family, dtype, index)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((T, 128)).astype(np.float32)
    ids = np.stack([rng.permutation(ref.E)[:ref.K] for _ in range(T)])
    w = rng.uniform(0.1, 1.0, (T, ref.K))
    for ids_dtype in (np.int32, np.int64):
        for shared in (True, False):
            got = layer.experts(x, ids.astype(ids_dtype), w, shared=shared)
            want = ref.experts(x.astype(np.float64), ids, w.astype(np.float32), shared)
            assert rel_error(got, want) <= tol


@pytest.mark.parametrize("family,dtype,index", [("deepseek_v3", "fp8", 1),
                                                ("mixtral", "bf16", 1),
                                                ("gpt_oss", "mxfp4", 0),
                                                ("deepseek_v4", "mxfp4", 0),
                                                ("deepseek_v4", "mxfp4", 1),
                                                ("minimax_m2", "fp8", 0),
                                                ("ernie4_5_moe", "bf16", 1),
                                                ("llama4", "bf16", 0)])
def test_router(checkpoint, family, dtype, index):
    router, ref, _ = with_reference(checkpoint, family, dtype, index, libmoe.Model.router)
    rng = np.random.default_rng(4)
    z = (rng.standard_normal((33, ref.E)) * 3).astype(np.float32)
    tok = rng.integers(0, 512, 33).astype(np.int32)
    ids, w = router(z, tok)
    assert ids.shape == (33, ref.K) and ids.dtype == np.int32 and w.dtype == np.float32
    want = ref.route_logits(z.astype(np.float64), tok)
    assert same_routing(ids, w, want, ordered=ref.method == "hash") == []
    assert ref.method.split("_")[0] in router.explain()


def test_binding_adds_no_numerics(checkpoint, tmp_path):
    """The same bits as the C library run by the CLI (`moe run`), for f32 input."""
    d = checkpoint("deepseek_v3", "fp8")
    x = np.random.default_rng(2).standard_normal((5, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run_cli("run", "--model", d, "--layer", "1", "--hidden", str(tmp_path / "x.npy"),
            "--out", str(tmp_path / "y.npy"), "--ids-out", str(tmp_path / "ids.npy"),
            "--weights-out", str(tmp_path / "w.npy"))
    with libmoe.open(d) as model:
        y, ids, w = model.layer(1)(x, return_routing=True)
    assert np.array_equal(y, np.load(tmp_path / "y.npy"))
    assert np.array_equal(ids, np.load(tmp_path / "ids.npy"))
    assert np.array_equal(w, np.load(tmp_path / "w.npy"))
    assert os.path.getsize(tmp_path / "y.npy") > 0
