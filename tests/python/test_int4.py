# test_int4.py — INT4 (compressed-tensors pack-quantized) experts against compressed-tensors itself.
"""compressed-tensors is the oracle: it quantises and packs random bf16 expert weights into a
checkpoint libmoe then reads, and its own unpacking decodes what ``moe gen --dtype int4``
writes; the expert outputs are compared with float64 sums over those decoded weights, within
docs/design.md's 2e-2 for the Q8 recipe (1e-2 for the tile recipe)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import libmoe
from conftest import run_cli

ct = pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors.pack_quantized.base import (  # noqa: E402
    PackedQuantizationCompressor)
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32  # noqa: E402
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

H, I, E, K, G = 256, 128, 8, 2, 32
SHAPE = ["--layers", "2", "--first-dense", "1", "--hidden", str(H), "--intermediate", str(I),
         "--experts", str(E), "--topk", str(K), "--shared", "1", "--vocab", "512"]
PROJ = ("gate_proj", "up_proj", "down_proj")


def scheme() -> QuantizationScheme:
    return QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=True, strategy="group", group_size=G))


def compress(w: torch.Tensor) -> dict:
    """The library's own path: group min / max, calculate_qparams, the pack-quantized
    compressor (quantise, pack_to_int32, weight_shape)."""
    s = scheme()
    g = w.float().reshape(w.shape[0], -1, G)
    scale, _ = calculate_qparams(g.amin(-1), g.amax(-1), s.weights)
    state = {"weight": w, "weight_scale": scale.to(torch.bfloat16)}
    return PackedQuantizationCompressor.compress(state, s)


def expert_names(layer: int, e: int, proj: str) -> str:
    return "model.layers.%d.mlp.experts.%d.%s" % (layer, e, proj)


def decoded(tensors: dict, name: str) -> np.ndarray:
    """q x scale in float64 from compressed-tensors' unpack_from_int32 (exact)."""
    shape = torch.Size(tensors[name + ".weight_shape"].tolist())
    q = unpack_from_int32(tensors[name + ".weight_packed"], 4, shape).double()
    scale = tensors[name + ".weight_scale"].double().repeat_interleave(G, dim=1)
    return (q * scale).numpy()


def silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


def experts_ref(weights, x, ids, w) -> np.ndarray:
    """sum_k w_k · down(silu(gate x) · up x) in float64."""
    out = np.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            g, u, d = weights[int(ids[t, k])]
            h = silu(g @ x[t]) * (u @ x[t])
            out[t] += w[t, k] * (d @ h)
    return out


def rel_error(got, want) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def routed(rng, T):
    ids = np.stack([rng.permutation(E)[:K] for _ in range(T)])
    return ids, rng.uniform(0.1, 1.0, (T, K))


@pytest.fixture(scope="module")
def gen_model(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("kimi_int4")
    run_cli("gen", "--family", "kimi_k2", "--dtype", "int4", "--out", str(d), *SHAPE)
    return str(d)


def test_gen_config_is_compressed_tensors(gen_model):
    """moe gen writes what compressed-tensors reads: its config parses as the library's
    QuantizationConfig, and only the routed experts are INT4."""
    from compressed_tensors.config import CompressionFormat
    from compressed_tensors.quantization import QuantizationConfig
    q = json.load(open(os.path.join(gen_model, "config.json")))["quantization_config"]
    cfg = QuantizationConfig.model_validate(q)
    assert cfg.format == CompressionFormat.pack_quantized.value
    args = cfg.config_groups["group_0"].weights
    assert (args.num_bits, args.symmetric, args.group_size) == (4, True, G)
    t = load_file(os.path.join(gen_model, "model.safetensors"))
    assert "model.layers.1.mlp.shared_experts.gate_proj.weight" in t
    assert "model.layers.0.mlp.gate_proj.weight" in t


def test_gen_file_against_unpack(gen_model):
    """libmoe reads moe gen's words and scales as compressed-tensors' unpack_from_int32 and
    its own decompress do: the experts' output against float64 of both."""
    t = load_file(os.path.join(gen_model, "model.safetensors"))
    exact, lib = {}, {}
    for e in range(E):
        exact[e] = [decoded(t, expert_names(1, e, p)) for p in PROJ]
        lib[e] = []
        for p in PROJ:
            n = expert_names(1, e, p)
            st = {k[len(n) + 1:]: v for k, v in t.items() if k.startswith(n + ".")}
            lib[e].append(PackedQuantizationCompressor.decompress(st, scheme())["weight"]
                          .double().numpy())
    # The library's unpacking is the exact q x scale up to its bf16 multiply (~4e-3).
    for e in range(E):
        for p in range(3):
            assert rel_error(lib[e][p], exact[e][p]) < 5e-3
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, H)).astype(np.float32)
    ids, w = routed(rng, 7)
    with libmoe.open(gen_model) as m:
        got = m.layer(1).experts(x, ids.astype(np.int32), w, shared=False)
    xd = x.astype(np.float64)
    wf = w.astype(np.float32).astype(np.float64)
    assert rel_error(got, experts_ref(exact, xd, ids, wf)) <= 2e-2
    assert rel_error(got, experts_ref(lib, xd, ids, wf)) <= 2e-2


@pytest.fixture(scope="module")
def ct_model(gen_model, tmp_path_factory):
    """moe gen's checkpoint with every routed expert replaced by compressed-tensors' own
    compression of random bf16 weights (Kimi-like std 0.02)."""
    d = tmp_path_factory.mktemp("kimi_int4_ct")
    for f in ("config.json",):
        with open(os.path.join(gen_model, f)) as a, open(os.path.join(d, f), "w") as b:
            b.write(a.read())
    t = load_file(os.path.join(gen_model, "model.safetensors"))
    torch.manual_seed(5)
    for e in range(E):
        for p, shape in zip(PROJ, ((I, H), (I, H), (H, I))):
            n = expert_names(1, e, p)
            c = compress((0.02 * torch.randn(shape)).to(torch.bfloat16))
            for k in ("weight_packed", "weight_scale", "weight_shape"):
                t[n + "." + k] = c[k].contiguous()
    save_file(t, os.path.join(d, "model.safetensors"))
    return str(d), t


def test_library_compressed_experts(ct_model):
    """Experts compressed by the library: libmoe's output against float64 of the library's
    decompressed weights, at 1 and 13 tokens, and the same bits for a token alone and in the
    batch."""
    d, t = ct_model
    lib = {}
    for e in range(E):
        lib[e] = []
        for p in PROJ:
            n = expert_names(1, e, p)
            st = {k[len(n) + 1:]: v for k, v in t.items() if k.startswith(n + ".")}
            lib[e].append(PackedQuantizationCompressor.decompress(st, scheme())["weight"]
                          .double().numpy())
    rng = np.random.default_rng(11)
    with libmoe.open(d) as m:
        layer = m.layer(1)
        for T in (1, 13):
            x = rng.standard_normal((T, H)).astype(np.float32)
            ids, w = routed(rng, T)
            got = layer.experts(x, ids, w, shared=False)
            want = experts_ref(lib, x.astype(np.float64), ids, w.astype(np.float32))
            assert rel_error(got, want) <= 2e-2
        alone = layer.experts(x[4:5], ids[4:5], w[4:5], shared=False)
        assert np.array_equal(alone[0], got[4])


def test_library_compressed_experts_tile(ct_model):
    """The same experts under the tile recipe (bf16 activations, per group the tile unit's sums,
    then one FMA with the group scale): within docs/design.md's 1e-2 of float64, the same bits
    for a token alone and in the batch."""
    d, t = ct_model
    lib = {}
    for e in range(E):
        lib[e] = []
        for p in PROJ:
            n = expert_names(1, e, p)
            st = {k[len(n) + 1:]: v for k, v in t.items() if k.startswith(n + ".")}
            lib[e].append(PackedQuantizationCompressor.decompress(st, scheme())["weight"]
                          .double().numpy())
    rng = np.random.default_rng(12)
    with libmoe.open(d) as m:
        layer = m.layer(1, recipe="tile")
        assert "moe_expert_int4_tile_" in layer.explain()
        for T in (1, 13):
            x = rng.standard_normal((T, H)).astype(np.float32)
            ids, w = routed(rng, T)
            got = layer.experts(x, ids, w, shared=False)
            want = experts_ref(lib, x.astype(np.float64), ids, w.astype(np.float32))
            assert rel_error(got, want) <= 1e-2
        alone = layer.experts(x[4:5], ids[4:5], w[4:5], shared=False)
        assert np.array_equal(alone[0], got[4])


def test_nan_scale_is_refused(ct_model, tmp_path):
    """A NaN group scale: an error naming the tensor, not NaN outputs."""
    _, t = ct_model
    bad = dict(t)
    n = expert_names(1, 3, "up_proj") + ".weight_scale"
    s = bad[n].clone()
    s[5, 2] = float("nan")
    bad[n] = s
    src = str(tmp_path)
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(json.load(open(os.path.join(ct_model[0], "config.json"))), f)
    save_file(bad, os.path.join(src, "model.safetensors"))
    with libmoe.open(src) as m:
        with pytest.raises(libmoe.errors.MoeError) as err:
            m.layer(1)
    assert n in str(err.value) and "[5, 2]" in str(err.value)
