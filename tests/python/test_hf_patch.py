# test_hf_patch — libmoe.transformers.patch(): generation, the block contract, refusals.
import copy
import json
import os

import pytest
import torch

import libmoe
import libmoe.transformers as lt
import hf_util as hu


def saved_model(hf_saved, family):
    """hf_util's tiny f32 model of FAMILY as transformers saved it, loaded in f32 (a fresh
    copy: patch() changes it)."""
    return hu.load(hf_saved(family, "f32"), torch.float32)


def greedy(model, ids):
    return model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                          pad_token_id=0)


def text_only_model(hf_saved, family):
    """The text-only class transformers loads from FAMILY's vision-language folder
    (Qwen3_5MoeForCausalLM, Llama4ForCausalLM), in f32."""
    import transformers as tf
    return tf.AutoModelForCausalLM.from_pretrained(hf_saved(family, "f32"),
                                                   dtype=torch.float32).eval()


def blocks(model):
    return [hu.block_of(layer) for layer in hu.decoder_layers(model)]


def is_patched(model):
    return [isinstance(b, lt.LibmoeBlock) for b in blocks(model)]


# Every family patch() serves as transformers saves it (f32; the vision-language ones whole,
# and as the text-only class loaded from the same folder), and DeepSeek-V4 and Kimi-K2.5 FP8
# `moe gen` checkpoints loaded by transformers (dequantised to f32; Kimi-K2.5's tensors under
# the hub's language_model.model.layers, where transformers saves language_model.model.blocks).
GENERATE = [(f, "saved") for f in hu.PATCHED] + [(f, "text-only") for f in hu.TEXT_ONLY]
GENERATE += [("deepseek_v4", "gen-fp8"), ("kimi_k25", "gen-fp8")]


def source_model(hf_saved, hf_gen, family, source):
    if source == "saved":
        return saved_model(hf_saved, family)
    if source == "text-only":
        return text_only_model(hf_saved, family)
    torch.manual_seed(0)  # the attention weights the gen checkpoint lacks
    return hu.load(hf_gen(family, "fp8"), torch.float32, family)


@pytest.mark.parametrize("family,source", GENERATE, ids=[f"{f}-{s}" for f, s in GENERATE])
def test_generate_equals_unpatched(hf_saved, hf_gen, family, source):
    model = source_model(hf_saved, hf_gen, family, source)
    ids = torch.randint(1, 64, (1, 8), generator=torch.Generator().manual_seed(3))
    want = greedy(model, ids)
    assert lt.patch(model) is model
    patched = is_patched(model)
    assert patched == [hasattr(b.original if p else b, "experts")
                       for p, b in zip(patched, blocks(model))]
    assert sum(patched) >= 2
    got = greedy(model, ids)
    assert got.shape == (1, 24)
    assert torch.equal(got, want)
    lt.unpatch(model)
    assert not any(is_patched(model))


# The vision-language families (whole and text-only): the logits of a patched f32 model
# against the unpatched model run in float64 (experts eager: grouped_mm has no float64).
LOGITS = [(f, "saved") for f in ("kimi_k25", "qwen3_5_moe", "llama4")]
LOGITS += [(f, "text-only") for f in hu.TEXT_ONLY]


@pytest.mark.parametrize("family,source", LOGITS, ids=[f"{f}-{s}" for f, s in LOGITS])
def test_logits_equal_unpatched_float64(hf_saved, family, source):
    model = source_model(hf_saved, None, family, source)
    ref = copy.deepcopy(model).to(torch.float64)
    ref.config._experts_implementation = "eager"
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = ref(ids).logits
        unpatched = model(ids).logits
        lt.patch(model)
        assert sum(is_patched(model)) >= 2
        got = model(ids).logits
    assert got.dtype == torch.float32 and got.shape == want.shape
    # f32 arithmetic's bound, which transformers' own f32 model meets too (both measured
    # <= 2.8e-7; the MoE blocks move these logits by 9-16%, so a 1e-4 error in them fails).
    assert hu.rel_error(unpatched, want) < 1e-6
    assert hu.rel_error(got, want) < 1e-6


@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
def test_block_contract(hf_saved, family):
    model = saved_model(hf_saved, family)
    i, original = hu.moe_blocks(model)[0]
    lt.patch(model)
    block = model.model.layers[i].mlp
    x = torch.randn(2, 5, hu.HIDDEN, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
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
    # transformers' f32 block against libmoe's, both on the f32 weights.
    assert f32.dtype == torch.float32 and hu.rel_error(f32, want.double()) < 1e-6


def test_changed_weight_is_refused(hf_saved):
    model = saved_model(hf_saved, "deepseek_v3")
    with torch.no_grad():
        model.model.layers[2].mlp.experts.down_proj[3, 5, 7] += 1.0
    with pytest.raises(lt.PatchError, match="experts.3.down_proj.weight"):
        lt.patch(model)
    assert not any(isinstance(layer.mlp, lt.LibmoeBlock) for layer in model.model.layers)


def test_changed_correction_bias_is_refused(hf_saved):
    model = saved_model(hf_saved, "deepseek_v3")
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


def test_deepseek_v2_norm_topk_prob_is_refused(hf_saved):
    model = saved_model(hf_saved, "deepseek_v2")
    model.config.norm_topk_prob = True
    with pytest.raises(lt.PatchError, match="norm_topk_prob"):
        lt.patch(model)


def test_deepseek_v4_shared_experts_other_than_one_is_refused(hf_saved):
    model = saved_model(hf_saved, "deepseek_v4")
    model.config.n_shared_experts = 2
    with pytest.raises(lt.PatchError, match="n_shared_experts"):
        lt.patch(model)


@pytest.mark.parametrize("family,field,module", [("gpt_oss", "swiglu_alpha", "experts.alpha"),
                                                 ("deepseek_v4", "swiglu_limit", "experts.limit")])
def test_glu_constant_other_than_the_checkpoints_is_refused(hf_saved, family, field, module):
    """transformers' block computes with the config it was built from; libmoe reads
    config.json: a load-time override makes them differ."""
    model = hu.load(hf_saved(family, "f32"), torch.float32, **{field: 0.5})
    with pytest.raises(lt.PatchError, match=f"{module} is 0.5, but {field}"):
        lt.patch(model)
    assert not any(isinstance(layer.mlp, lt.LibmoeBlock) for layer in model.model.layers)


def test_what_libmoe_refuses_is_a_patch_error(hf_saved, tmp_path):
    """A config field libmoe refuses at open (DeepSeek-V4 norm_topk_prob false: transformers'
    V4 router renormalises whatever it says) is a PatchError chaining libmoe's error."""
    folder = hf_saved("deepseek_v4", "f32")
    model = saved_model(hf_saved, "deepseek_v4")
    other = tmp_path / "v4"
    other.mkdir()
    (other / "model.safetensors").symlink_to(os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    cfg["norm_topk_prob"] = False
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(lt.PatchError, match="norm_topk_prob") as e:
        lt.patch(model, other)
    assert isinstance(e.value.__cause__, libmoe.MoeError)
    assert not any(isinstance(layer.mlp, lt.LibmoeBlock) for layer in model.model.layers)


def test_hash_layer_needs_input_ids(hf_saved):
    model = saved_model(hf_saved, "deepseek_v4")
    lt.patch(model)
    block = model.model.layers[0].mlp
    assert block.kind == "hash"
    with pytest.raises(ValueError, match="input_ids"):
        block(torch.randn(1, 3, hu.HIDDEN))


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen3_5_moe"])
def test_experts_backend_matches_transformers(hf_saved, family):
    model = saved_model(hf_saved, family)
    x = torch.randn(1, 7, hu.HIDDEN, generator=torch.Generator().manual_seed(2))
    blocks = hu.moe_blocks(model)
    with torch.no_grad():
        want = [block(x) for _, block in blocks]
        lt.register_experts_backend(model)
        assert model.config._experts_implementation == "libmoe"
        assert hu.text_config(model)._experts_implementation == "libmoe"
        for (_, block), w in zip(blocks, want):
            assert block.experts.libmoe_layer is not None
            assert hu.rel_error(block(x), w.double()) < 1e-6
    lt.unpatch(model)
    assert "libmoe_layer" not in blocks[0][1].experts.__dict__


@pytest.mark.parametrize("source", ["saved", "text-only"])
def test_llama4_block_contract(hf_saved, source):
    """Llama4TextMoe returns (output [T, H], router_logits [T, E]); so does the patched block
    (its decoder flattens nothing: it views the output back to [B, S, H])."""
    model = source_model(hf_saved, None, "llama4", source)
    i, original = hu.moe_blocks(model)[0]
    lt.patch(model)
    block = hu.block_of(hu.decoder_layers(model)[i])
    assert isinstance(block, lt.LibmoeBlock) and block.original is original
    x = torch.randn(2, 5, hu.HIDDEN, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want_out, want_logits = original(x)
    got_out, got_logits = block(x)
    assert got_out.shape == want_out.shape == (10, hu.HIDDEN)
    assert got_logits.shape == want_logits.shape == (10, 8)
    assert got_out.dtype == got_logits.dtype == torch.float32
    assert hu.rel_error(got_out, want_out.double()) < 1e-6
    assert hu.rel_error(got_logits, want_logits.double()) < 1e-6


def test_llama4_experts_backend_is_refused(hf_saved):
    model = saved_model(hf_saved, "llama4")
    with pytest.raises(lt.PatchError, match="Llama4TextExperts"):
        lt.register_experts_backend(model)
    assert not any(is_patched(model))


def test_kimi_k25_text_config_is_checked(hf_saved):
    """Kimi-K2.5's language model is transformers' DeepSeek-V3: its text_config gets V3's
    checks (the router always sigmoid + noaux_tc)."""
    model = saved_model(hf_saved, "kimi_k25")
    model.config.text_config.scoring_func = "softmax"
    with pytest.raises(lt.PatchError, match="scoring_func 'softmax'"):
        lt.patch(model)
    assert not any(is_patched(model))


def test_text_only_llama4_saved_alone_is_refused(hf_saved, tmp_path):
    """Llama4ForCausalLM saved by itself writes a llama4_text config and the text model's
    tensor names, which is not a checkpoint libmoe reads: PatchError chaining libmoe's."""
    text_only_model(hf_saved, "llama4").save_pretrained(tmp_path)
    model = hu.tf.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert model.config.model_type == "llama4_text"
    with pytest.raises(lt.PatchError, match="llama4_text") as e:
        lt.patch(model)
    assert isinstance(e.value.__cause__, libmoe.MoeError)
    assert not any(is_patched(model))
