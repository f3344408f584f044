# test_api.py — the Python API's descriptions and life cycle: version, CPU, model, layer, router.
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import libmoe
from conftest import ROOT


def test_version_is_the_header_version():
    header = open(os.path.join(ROOT, "include", "moe.h")).read()
    assert libmoe.__version__ == re.search(r'#define MOE_VERSION_STRING "([^"]+)"', header)[1]


def test_cpu_info():
    info = libmoe.cpu_info()
    assert set(info) == {"detected", "compiled", "allowed", "cap", "cap_from_env", "brand"}
    for flags in (info["detected"], info["compiled"], info["allowed"]):
        assert set(flags) == {"avx2", "avx512", "avx512_bf16", "avx512_vnni", "avx512_fp16",
                              "avx512_vbmi", "avx_vnni", "amx_int8", "amx_bf16"}
    # allowed = detected ∩ compiled (∩ the cap)
    for k, v in info["allowed"].items():
        assert not v or (info["detected"][k] and info["compiled"][k])
    assert info["cap"] in ("scalar", "avx2", "avx512", "avx512bf16")
    assert isinstance(info["brand"], str)


def test_model_info_from_config(checkpoint):
    d = checkpoint("deepseek_v3", "fp8")
    cfg = json.load(open(os.path.join(d, "config.json")))
    with libmoe.open(d) as model:
        assert model.info == libmoe.ModelInfo(
            family="deepseek_v3", n_layers=cfg["num_hidden_layers"],
            hidden_size=cfg["hidden_size"], vocab_size=cfg["vocab_size"],
            n_moe_layers=cfg["num_hidden_layers"] - cfg["first_k_dense_replace"],
            n_experts=cfg["n_routed_experts"], top_k=cfg["num_experts_per_tok"])
        assert len(model) == cfg["num_hidden_layers"]
        dense, moe = model.layer_info(0), model.layer_info(1)
    assert (dense.kind, dense.n_experts, dense.top_k, dense.route_method) == \
        ("dense", 0, 0, None)
    assert dense.intermediate_size == cfg["intermediate_size"]
    assert moe == libmoe.LayerInfo(
        index=1, kind="moe", hidden_size=128, n_experts=8, top_k=2,
        intermediate_size=cfg["moe_intermediate_size"], expert_format="fp8_block",
        n_shared_experts=1, shared_intermediate_size=cfg["moe_intermediate_size"],
        shared_format="fp8_block", route_method="noaux_tc", score_func="sigmoid")
    with pytest.raises(AttributeError):
        moe.kind = "dense"  # frozen


@pytest.mark.parametrize("family,dtype,kinds,fmt,method,score", [
    ("deepseek_v4", "mxfp4", ["hash", "moe"], "mxfp4", "noaux_tc", "sqrtsoftplus"),
    ("qwen3_moe", "bf16", ["moe", "moe"], "bf16", "softmax_topk", "softmax"),
    ("mixtral", "bf16", ["moe", "moe"], "bf16", "softmax_topk", "softmax"),
    ("gpt_oss", "mxfp4", ["moe", "moe"], "mxfp4", "topk_softmax", "softmax"),
])
def test_layer_info_per_family(checkpoint, family, dtype, kinds, fmt, method, score):
    with libmoe.open(checkpoint(family, dtype)) as model:
        assert model.info.family == family
        infos = [model.layer_info(i) for i in range(len(model))]
        layer = model.layer(1)
    assert [i.kind for i in infos] == kinds
    assert infos[1].expert_format == fmt
    assert (infos[1].route_method, infos[1].score_func) == (method, score)
    assert layer.info == infos[1]
    assert layer.info.hidden_size == 128


def test_layer_explain_and_workspace(checkpoint):
    with libmoe.open(checkpoint("deepseek_v3", "fp8")) as model:
        one = model.layer(1, threads=1, logits_dtype="bf16")
        two = model.layer(1, threads=2)
        fixed = model.layer(1, threads=2, fixed_threads=True)
    assert "threads: 1" in one.explain() and "threads: 2" in two.explain()
    assert "logits dtype: bf16" in one.explain()
    # fixed_threads reaches the library (the option after experts_recipe in the C struct).
    assert "while preempted: fewer threads" in two.explain()
    assert "while preempted: every forward on all threads" in fixed.explain()
    assert one.workspace_size(64) > one.workspace_size(1) > 0
    assert repr(one).startswith("libmoe.Layer(1, moe")


def test_layers_outlive_a_closed_model(checkpoint):
    model = libmoe.open(checkpoint("mixtral", "bf16"))
    layer, router = model.layer(0), model.router(0)
    model.close()
    model.close()  # a second close is a no-op
    x = np.ones((2, 128), np.float32)
    y, ids, w = layer(x, return_routing=True)
    assert router(np.zeros((1, 8), np.float32))[0].shape == (1, 2)
    assert np.isfinite(y).all() and ids.shape == (2, 2) and "closed" in repr(model)


def test_no_mmap_gives_the_same_bits(checkpoint):
    d = checkpoint("qwen3_moe", "bf16")
    x = np.random.default_rng(0).standard_normal((3, 128)).astype(np.float32)
    with libmoe.open(d) as a, libmoe.open(d, no_mmap=True) as b:
        assert np.array_equal(a.layer(1)(x), b.layer(1)(x))


def test_zero_tokens(checkpoint):
    with libmoe.open(checkpoint("deepseek_v3", "fp8")) as model:
        layer = model.layer(1)
    y, ids, w = layer(np.zeros((0, 128), np.float32), return_routing=True)
    assert y.shape == (0, 128) and ids.shape == (0, 2) and w.shape == (0, 2)
