# test_hf_patch — libmoe.transformers.patch(): generation, the block contract, refusals.
import pytest
import torch

import libmoe
import libmoe.transformers as lt
import hf_util as hu

# DeepSeek-V4 as transformers saves it is not readable by libmoe (test_hf_blocks' V4_SAVED):
# its patched model comes from a `moe gen` FP8 checkpoint loaded by transformers.
SAVED = [f for f in hu.FAMILIES if f != "deepseek_v4"]


def saved_model(tmp_path, family):
    """A tiny f32 model whose MoE weights are bf16 values, saved in bf16 and loaded in f32."""
    folder = hu.save(hu.round_moe_to_bf16(hu.make_model(family)), tmp_path / family,
                     torch.bfloat16)
    return hu.load(folder, torch.float32)


def patched_model(tmp_path, family):
    if family == "deepseek_v4":
        torch.manual_seed(0)  # the attention weights the gen checkpoint lacks
        return hu.load(hu.gen(tmp_path / family, family, "fp8"), torch.float32, family)
    return saved_model(tmp_path, family)


def greedy(model, ids):
    return model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                          pad_token_id=0)


@pytest.mark.parametrize("family", hu.FAMILIES)
def test_generate_equals_unpatched(tmp_path, family):
    model = patched_model(tmp_path, family)
    ids = torch.randint(1, 64, (1, 8), generator=torch.Generator().manual_seed(3))
    want = greedy(model, ids)
    assert lt.patch(model) is model
    n = sum(isinstance(layer.mlp, lt.LibmoeBlock) for layer in model.model.layers)
    assert n == len([k for k in range(3) if model.model.layers[k].mlp.__class__ is
                     lt.LibmoeBlock]) and n >= 2
    got = greedy(model, ids)
    assert got.shape == (1, 24)
    assert torch.equal(got, want)
    lt.unpatch(model)
    assert not any(isinstance(layer.mlp, lt.LibmoeBlock) for layer in model.model.layers)


@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
def test_block_contract(tmp_path, family):
    model = saved_model(tmp_path, family)
    i, original = hu.moe_blocks(model)[0]
    lt.patch(model)
    block = model.model.layers[i].mlp
    x = torch.randn(2, 5, hu.HIDDEN, generator=torch.Generator().manual_seed(1))
    want = original(x)
    got = block(x.to(torch.bfloat16))
    if family == "gpt_oss":  # (hidden_states, router_scores [T, K])
        assert isinstance(got, tuple) and got[1].shape == want[1].shape
        assert got[1].dtype == torch.bfloat16
        assert torch.allclose(got[1].float().sort(-1)[0], want[1].sort(-1)[0], atol=1e-2)
        got, want = got[0], want[0]
    assert got.shape == x.shape and got.dtype == torch.bfloat16
    assert hu.rel_error(got.float(), want.double()) < 2e-2  # bf16 input and output
    f32 = block(x)
    f32 = f32[0] if isinstance(f32, tuple) else f32
    assert f32.dtype == torch.float32 and hu.rel_error(f32, want.double()) < 1e-5


def test_changed_weight_is_refused(tmp_path):
    model = saved_model(tmp_path, "deepseek_v3")
    with torch.no_grad():
        model.model.layers[2].mlp.experts.down_proj[3, 5, 7] += 1.0
    with pytest.raises(lt.PatchError, match="experts.3.down_proj.weight"):
        lt.patch(model)
    assert not any(isinstance(layer.mlp, lt.LibmoeBlock) for layer in model.model.layers)


def test_changed_correction_bias_is_refused(tmp_path):
    model = saved_model(tmp_path, "deepseek_v3")
    with torch.no_grad():
        model.model.layers[1].mlp.gate.e_score_correction_bias[0] += 0.5
    with pytest.raises(lt.PatchError, match="e_score_correction_bias"):
        lt.patch(model)


def test_unknown_family_is_refused():
    import transformers as tf
    cfg = tf.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, vocab_size=32)
    with pytest.raises(lt.PatchError, match="llama"):
        lt.patch(tf.LlamaForCausalLM(cfg))


def test_model_without_folder_needs_path():
    with pytest.raises(lt.PatchError, match="path="):
        lt.patch(hu.make_model("mixtral"))


def test_deepseek_v2_norm_topk_prob_is_refused(tmp_path):
    model = saved_model(tmp_path, "deepseek_v2")
    model.config.norm_topk_prob = True
    with pytest.raises(lt.PatchError, match="norm_topk_prob"):
        lt.patch(model)


def test_hash_layer_needs_input_ids(tmp_path):
    model = patched_model(tmp_path, "deepseek_v4")
    lt.patch(model)
    block = model.model.layers[0].mlp
    assert block.kind == "hash"
    with pytest.raises(ValueError, match="input_ids"):
        block(torch.randn(1, 3, 128))


def test_experts_backend_matches_transformers(tmp_path):
    model = saved_model(tmp_path, "qwen3_moe")
    x = torch.randn(1, 7, hu.HIDDEN, generator=torch.Generator().manual_seed(2))
    blocks = hu.moe_blocks(model)
    want = [block(x) for _, block in blocks]
    lt.register_experts_backend(model)
    assert model.config._experts_implementation == "libmoe"
    for (_, block), w in zip(blocks, want):
        assert block.experts.libmoe_layer is not None
        assert hu.rel_error(block(x), w.double()) < 1e-5
    lt.unpatch(model)
    assert "libmoe_layer" not in blocks[0][1].experts.__dict__
