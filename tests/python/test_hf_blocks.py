# test_hf_blocks — libmoe's layers against transformers' own MoE blocks in float64.
"""Each family's MoE block, as transformers implements it, run in float64 on the same hidden
states as libmoe's layer built from the same checkpoint: routing ids identical (except
tokens whose k-th and (k+1)-th keys, computed here in float64, are within 1e-5), and the
output within the numeric contract (docs/transformers.md), as relative Frobenius error:
1e-6 for f32 arithmetic on exact weights (the f32 recipe; f32 and f16 weights under any
recipe, which libmoe runs in f32), 1e-2 for the bf16 and tile recipes (activations rounded to
bf16) on bf16 and FP8 weights, 2e-2 for MXFP4 experts.

Both directions: transformers' save_pretrained (bf16, f16, f32) read by libmoe, and `moe gen`
checkpoints (FP8, MXFP4) read by transformers (dequantised by transformers on the CPU).
"""
import copy
import json
import os

import pytest
import torch

import libmoe
import hf_util as hu

T = 24
EXACT = 1e-6  # f32 arithmetic on weights held exactly (measured <= 3.5e-7 at these sizes)
BF16 = 1e-2  # the bf16 recipe: activations rounded to bf16 (measured <= 3.5e-3)
MXFP4 = 2e-2  # MXFP4 experts, q8 activations (measured 1.1-1.3e-2)


def compare(family, model, folder, bounds, formats, seed=0):
    """libmoe's layer of every MoE block of MODEL, built from FOLDER with each recipe of
    BOUNDS (recipe -> error bound), against transformers' block in float64; FORMATS is the
    (routed, shared) weight format every layer must resolve to."""
    lib = libmoe.open(folder)
    g = torch.Generator().manual_seed(seed)
    checked = 0
    for i, block in hu.moe_blocks(model):
        x = torch.randn(T, hu.text_config(model).hidden_size, generator=g)
        ids_in = torch.randint(0, hu.text_config(model).vocab_size, (T,), generator=g)
        hashed = getattr(block, "is_hash", False)
        ref, ref_ids = hu.reference(block, x, ids_in if hashed else None)
        k = ref_ids.shape[1]
        if hashed:
            tie = torch.zeros(T, dtype=torch.bool)
        else:
            keys, gap = hu.selection_keys(family, block, x)
            tie = hu.near_tie(keys, gap, k)
        assert int(tie.sum()) < T // 4, f"layer {i}: too many near ties to test"
        for recipe, bound in bounds.items():
            layer = lib.layer(i, recipe=recipe)
            info = layer.info
            got_formats = (info.expert_format, info.shared_format or formats[1])
            assert got_formats == formats, f"layer {i}: formats {got_formats}"
            out, ids, _ = layer(x, ids_in if hashed else None, return_routing=True)
            same = (ids.to(torch.int64).sort(-1)[0] == ref_ids.sort(-1)[0]).all(-1)
            assert bool((same | tie).all()), \
                f"layer {i}, {recipe}: ids differ at {(~same & ~tie).nonzero()}"
            err = hu.rel_error(out[~tie], ref[~tie])
            assert err <= bound, f"layer {i}, {recipe}: relative error {err:.3g} > {bound}"
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("family", hu.FAMILIES)
def test_save_pretrained_read_by_libmoe(hf_saved, family, dtype):
    folder = hf_saved(family, dtype)
    model = hu.load(folder, torch.float32)  # the saved values, held exactly in f32
    # f32 and f16 weights run in f32 whatever the recipe asks (the format of the stored dtype).
    bounds = {"f32": EXACT, "bf16": BF16 if dtype == "bf16" else EXACT,
              "tile": BF16 if dtype == "bf16" else EXACT}
    compare(family, model, folder, bounds, (dtype, dtype))


def saved_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def test_qwen3_expert_count_as_transformers_writes_it(hf_saved):
    folder = hf_saved("qwen3_moe", "bf16")
    cfg = saved_config(folder)
    assert cfg["num_local_experts"] == 8 and "num_experts" not in cfg
    assert libmoe.open(folder).info.n_experts == 8


def test_deepseek_v4_layer_types_as_transformers_writes_them(hf_saved):
    folder = hf_saved("deepseek_v4", "bf16")
    cfg = saved_config(folder)
    assert cfg["mlp_layer_types"] == ["hash_moe", "moe", "moe"]
    assert "num_hash_layers" not in cfg and "quantization_config" not in cfg
    lib = libmoe.open(folder)
    assert [lib.layer_info(i).kind for i in range(3)] == ["hash", "moe", "moe"]


GEN = [("deepseek_v2", "fp8"), ("deepseek_v3", "fp8"), ("deepseek_v4", "mxfp4"),
       ("deepseek_v4", "fp8"), ("qwen3_moe", "fp8"), ("mixtral", "fp8"), ("gpt_oss", "mxfp4"),
       ("deepseek_v32", "fp8"), ("glm4_moe", "fp8"), ("glm_moe_dsa", "fp8"),
       ("glm4_moe_lite", "fp8"), ("minimax_m2", "fp8"), ("kimi_k25", "fp8"),
       ("qwen3_next", "fp8"), ("qwen3_5_moe", "fp8"), ("ernie4_5_moe", "fp8"), ("llama4", "bf16")]
# What `moe gen --dtype` writes per family: (routed experts, shared experts).
GEN_FORMATS = {"fp8": ("fp8_block", "fp8_block"), "mxfp4": ("mxfp4", "fp8_block"),
               "bf16": ("bf16", "bf16")}


@pytest.mark.parametrize("family,dtype", GEN, ids=[f"{f}-{d}" for f, d in GEN])
def test_moe_gen_read_by_transformers(hf_gen, family, dtype):
    folder = hf_gen(family, dtype)
    model = hu.load(folder, torch.float32, family)
    # The tile recipe: FP8 and MXFP4 experts (and MXFP4 checkpoints' FP8 shared experts) with
    # activations rounded to bf16; without it MXFP4 experts run q8.
    mx = dtype == "mxfp4"
    bounds = {"f32": MXFP4 if mx else EXACT, "tile": BF16}
    compare(family, model, folder, bounds, GEN_FORMATS[dtype])


def test_minimax_m2_router_is_noaux_tc_in_one_group(hf_saved):
    """MiniMax-M2's router (sigmoid, bias for the choice only, the unbiased scores of the chosen
    experts renormalised, no scaling) is libmoe's noaux_tc with one group and rsf 1: the same
    experts and combine weights as transformers' MiniMaxM2TopKRouter in float64, expert by
    expert, to 1e-6 relative (f32 routing arithmetic)."""
    folder = hf_saved("minimax_m2", "f32")
    model = hu.load(folder, torch.float32)
    lib = libmoe.open(folder)
    g = torch.Generator().manual_seed(5)
    for i, block in hu.moe_blocks(model):
        layer = lib.layer(i, recipe="f32")
        assert layer.info.route_method == "noaux_tc" and layer.info.score_func == "sigmoid"
        x = torch.randn(T, hu.HIDDEN, generator=g)
        b64 = copy.deepcopy(block).to(torch.float64)
        with torch.no_grad():
            _, want_w, want_ids = hu.router(b64)(x.to(torch.float64), b64.e_score_correction_bias)
        keys, gap = hu.selection_keys("minimax_m2", block, x)
        tie = hu.near_tie(keys, gap, want_ids.shape[1])
        _, ids, w = layer(x, return_routing=True)
        for t in range(T):
            if tie[t]:
                continue
            got = {int(e): float(v) for e, v in zip(ids[t], w[t])}
            want = {int(e): float(v) for e, v in zip(want_ids[t], want_w[t])}
            assert got.keys() == want.keys(), f"layer {i} token {t}: {got} vs {want}"
            for e, v in want.items():
                assert abs(got[e] - v) <= 1e-6 * abs(v), f"layer {i} token {t} expert {e}"
