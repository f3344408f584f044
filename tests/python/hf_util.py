# hf_util — tiny transformers MoE models, checkpoints and float64 references for the hf tests.
import copy
import os
import subprocess
import warnings

import torch
import transformers as tf

warnings.filterwarnings("ignore")
tf.logging.set_verbosity_error()
tf.utils.logging.disable_progress_bar()

FAMILIES = ["deepseek_v2", "deepseek_v3", "deepseek_v4", "qwen3_moe", "mixtral", "gpt_oss"]
FAMILIES += ["deepseek_v32", "glm4_moe", "glm_moe_dsa", "glm4_moe_lite", "minimax_m2", "kimi_k25"]
FAMILIES += ["qwen3_next", "qwen3_5_moe", "ernie4_5_moe", "llama4"]
# libmoe.transformers.patch() serves every family, the vision-language wrappers' language
# models (Kimi-K2.5, Qwen3.5-MoE, Llama-4) included (test_hf_patch).
PATCHED = list(FAMILIES)
# The vision-language families whose text model transformers also loads alone from the
# wrapper's folder (AutoModelForCausalLM: Qwen3_5MoeForCausalLM, Llama4ForCausalLM).
TEXT_ONLY = ["qwen3_5_moe", "llama4"]
# The families whose MoE block is DeepSeek-V3's router (sigmoid keys + correction bias, groups
# by top-2 sum) and MiniMax-M2's (the same keys in one group, the bias on the block).
V3_ROUTERS = ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa", "glm4_moe_lite",
              "kimi_k25", "minimax_m2")
HIDDEN = 64
# Attention shapes small enough for a test, per family (the MoE shapes come from each config).
_ATTN = {
    "deepseek_v2": dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
    "deepseek_v3": dict(num_key_value_heads=4, head_dim=8, kv_lora_rank=16, q_lora_rank=None,
                        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
    "deepseek_v4": dict(q_lora_rank=16, o_lora_rank=16, o_groups=2, index_n_heads=2,
                        index_head_dim=16, index_topk=8, sliding_window=8),
    "qwen3_moe": {}, "mixtral": {}, "gpt_oss": {},
    "deepseek_v32": dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16,
                         qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=2,
                         index_head_dim=16, index_topk=8),
    "glm4_moe": {},
    "glm_moe_dsa": dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16,
                        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=2,
                        index_head_dim=16, index_topk=8),
    "glm4_moe_lite": dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=16,
                          qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
    "minimax_m2": {},
    # head_dim is the rope width DeepSeek-V3's attention rotates (as for deepseek_v3 above).
    "kimi_k25": dict(num_key_value_heads=4, head_dim=8, kv_lora_rank=16, q_lora_rank=16,
                     qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16),
    "qwen3_next": dict(linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                       linear_value_head_dim=16,
                       layer_types=["linear_attention", "full_attention", "linear_attention"]),
    # A full-attention layer, as Qwen3-Next's above: transformers' generate needs one.
    "qwen3_5_moe": dict(linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
                        linear_value_head_dim=16,
                        layer_types=["linear_attention", "full_attention", "linear_attention"]),
    "ernie4_5_moe": {}, "llama4": {},
}
# Families whose text model sits inside a vision-language model: their fields go to
# text_config, and this vision tower (the smallest the config accepts) beside it.
_NESTED = {"qwen3_5_moe": dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                                out_hidden_size=HIDDEN),
           "llama4": dict(num_hidden_layers=1, hidden_size=32, intermediate_size=32,
                          num_attention_heads=2, vision_output_dim=32, projector_input_dim=32,
                          projector_output_dim=32, image_size=28, patch_size=14)}
_COMMON = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               max_position_embeddings=256)
# Tiny MoE configs: dense + MoE layers where the family has them, groups for DeepSeek-V3.
_MOE = {
    "deepseek_v2": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                        n_shared_experts=1, first_k_dense_replace=1, intermediate_size=96,
                        routed_scaling_factor=1.5),
    "deepseek_v3": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                        n_shared_experts=1, first_k_dense_replace=1, intermediate_size=96,
                        n_group=4, topk_group=2),
    "deepseek_v4": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                        n_shared_experts=1, mlp_layer_types=["hash_moe", "moe", "moe"],
                        swiglu_limit=0.25),
    "qwen3_moe": dict(moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                      intermediate_size=96, mlp_only_layers=[0], norm_topk_prob=True),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=48),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=32,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                    swiglu_alpha=1.25, swiglu_limit=0.25),
    # Not the config classes' defaults either (groups, scaling, shared width, dense layers).
    "deepseek_v32": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                         n_shared_experts=2, first_k_dense_replace=1, intermediate_size=96,
                         n_group=4, topk_group=2, routed_scaling_factor=1.75),
    "glm4_moe": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=3,
                     n_shared_experts=1, first_k_dense_replace=1, intermediate_size=96,
                     n_group=2, topk_group=1, routed_scaling_factor=2.5),
    "glm_moe_dsa": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                        n_shared_experts=1, mlp_layer_types=["dense", "sparse", "sparse"],
                        intermediate_size=96, routed_scaling_factor=1.25, norm_topk_prob=False),
    "glm4_moe_lite": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                          n_shared_experts=1, intermediate_size=96, routed_scaling_factor=1.8),
    "minimax_m2": dict(num_local_experts=8, num_experts_per_tok=3, intermediate_size=48),
    "kimi_k25": dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                     n_shared_experts=1, first_k_dense_replace=1, intermediate_size=96,
                     n_group=1, topk_group=1, routed_scaling_factor=2.827, norm_topk_prob=True),
    # norm_topk_prob false: not Qwen3NextConfig's default, so libmoe must read it.
    "qwen3_next": dict(moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                       shared_expert_intermediate_size=48, intermediate_size=96,
                       mlp_only_layers=[0], norm_topk_prob=False),
    "qwen3_5_moe": dict(moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                        shared_expert_intermediate_size=48),
    # moe_norm_min 0.3 (the default is 1e-12): the floor binds on some tokens.
    "ernie4_5_moe": dict(moe_intermediate_size=32, moe_num_experts=8, moe_k=2,
                         moe_num_shared_experts=2, intermediate_size=96, moe_layer_start_index=1,
                         moe_norm_min=0.3),
    # Layers 0 and 2 MoE, 1 dense (moe_layers overrides interleave_moe_layer_step).
    "llama4": dict(intermediate_size=32, intermediate_size_mlp=96, num_local_experts=8,
                   num_experts_per_tok=1, moe_layers=[0, 2], interleave_moe_layer_step=2),
}
# Kimi-K2.5's vision tower and projector, as small as transformers allows.
_VISION = dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
               patch_size=2, pos_emb_height=4, pos_emb_width=4)
# The GLU constants above are not transformers' defaults (gpt-oss 1.702 and 7, DeepSeek-V4's
# limit 10): libmoe must read them from config.json. The limit clamps a share of the
# projections of these tiny models (pre-activations of order 0.2). `moe gen` checkpoints
# keep the defaults.


def config(family, **over):
    kw = dict(_COMMON, **_ATTN[family], **_MOE[family], hidden_size=HIDDEN, num_hidden_layers=3,
              vocab_size=96, **over)
    if family == "kimi_k25":  # a vision-language wrapper around a kimi_k2 text model
        return tf.AutoConfig.for_model(family, text_config=dict(kw, model_type="kimi_k2"),
                                       vision_config=_VISION, projection_hidden_size=32)
    if family in _NESTED:
        return tf.AutoConfig.for_model(family, text_config=kw, vision_config=_NESTED[family])
    return tf.AutoConfig.for_model(family, **kw)


def text_config(model):
    """The language model's config (the vision-language wrappers nest it)."""
    return getattr(model.config, "text_config", None) or model.config


def auto_class(family):
    """The transformers auto class of FAMILY's checkpoints (the vision-language ones whole)."""
    if family in _NESTED or family == "kimi_k25":
        return tf.AutoModelForImageTextToText
    return tf.AutoModelForCausalLM


def decoder_layers(model):
    lm = getattr(model, "language_model", None)
    if lm is not None and hasattr(getattr(lm, "model", None), "layers"):  # Llama-4
        return lm.model.layers
    inner = model.model  # Kimi-K2.5, Qwen3.5-MoE: model.language_model.layers
    return inner.language_model.layers if hasattr(inner, "language_model") else inner.layers


def moe_blocks(model):
    """(layer index, block) for every MoE block of a transformers model."""
    out = []
    for i, layer in enumerate(decoder_layers(model)):
        block = layer.mlp if hasattr(layer, "mlp") else layer.feed_forward
        if hasattr(block, "experts"):
            out.append((i, block))
    return out


def block_of(layer):
    """The MoE block or dense MLP of a decoder layer (Llama-4 names it feed_forward)."""
    return layer.mlp if hasattr(layer, "mlp") else layer.feed_forward


def router(block):
    return block.router if hasattr(block, "router") else block.gate


def correction_bias(block):
    """The correction bias the router selects with (MiniMax-M2 keeps it on the block), or
    None."""
    if hasattr(block, "e_score_correction_bias"):
        return block.e_score_correction_bias
    return getattr(router(block), "e_score_correction_bias", None)


@torch.no_grad()
def make_model(family, seed=0):
    """A random tiny f32 model with non-zero correction biases, router and expert biases
    (transformers initialises them to zero) and a random tid2eid."""
    torch.manual_seed(seed)
    model = auto_class(family).from_config(config(family), dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed + 1)
    for _, block in moe_blocks(model):
        r = router(block)
        r.weight.normal_(0.0, 0.3, generator=g)  # logits of order 1: distinct routes
        if correction_bias(block) is not None:
            correction_bias(block).normal_(0.0, 0.1, generator=g)
        if hasattr(r, "moe_statics"):  # ERNIE: added to probabilities of order 1/E
            r.moe_statics.e_score_correction_bias.normal_(0.0, 0.05, generator=g)
        if hasattr(r, "bias") and isinstance(r.bias, torch.Tensor):
            r.bias.normal_(0.0, 0.3, generator=g)
        if hasattr(r, "tid2eid"):
            e, k = r.num_experts, r.top_k
            r.tid2eid.copy_(torch.stack([torch.randperm(e, generator=g)[:k]
                                         for _ in range(r.tid2eid.shape[0])]))
        for name in ("gate_up_proj_bias", "down_proj_bias"):
            if hasattr(block.experts, name):
                getattr(block.experts, name).normal_(0.0, 0.1, generator=g)
        if hasattr(block, "shared_expert_gate"):  # sigmoids across (0, 1), not all near 0.5
            block.shared_expert_gate.weight.normal_(0.0, 0.3, generator=g)
    return model


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def save(model, folder, dtype):
    """save_pretrained in DTYPE ('bf16', 'f16' or 'f32'), the config.json as transformers
    writes it; returns the folder."""
    model.to(DTYPES[dtype]).save_pretrained(folder)
    return str(folder)


def load(folder, dtype, family=None, **overrides):
    """transformers' model from FOLDER in DTYPE, the config's fields OVERRIDES replaced (and
    FAMILY's test attention shapes added: a `moe gen` config has none); FP8 and MXFP4
    checkpoints dequantised."""
    attn = dict(_COMMON, **_ATTN[family]) if family and family not in _NESTED else {}
    cfg = tf.AutoConfig.from_pretrained(folder, **attn, **overrides)
    if cfg.model_type == "kimi_k25" and family:  # the test shapes belong to the text model
        cfg = tf.AutoConfig.from_pretrained(folder, **overrides)
        for k, v in attn.items():
            setattr(cfg.text_config, k, v)
    kw = {}
    qc = getattr(cfg, "quantization_config", None) or {}
    if qc.get("quant_method") == "fp8":
        kw["quantization_config"] = tf.FineGrainedFP8Config(
            dequantize=True, weight_block_size=tuple(qc["weight_block_size"]))
    elif qc.get("quant_method") == "mxfp4":
        kw["quantization_config"] = tf.Mxfp4Config(dequantize=True)
    cls = auto_class(cfg.model_type)
    return cls.from_pretrained(folder, config=cfg, dtype=dtype, **kw).eval()


def moe_cli():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("MOE_CLI") or os.path.join(here, "..", "..", "build", "moe")
    if not os.path.exists(path):
        raise RuntimeError(f"the moe tool is not at {path}: build it or set MOE_CLI")
    return path


def gen(folder, family, dtype, **opts):
    args = [moe_cli(), "gen", "--family", family, "--dtype", dtype, "--out", str(folder),
            "--layers", "3", "--hidden", "128", "--intermediate", "64", "--vocab", "64"]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args, check=True, capture_output=True)
    return str(folder)


# ---- float64 references --------------------------------------------------------------------

@torch.no_grad()
def reference(block, x, input_ids=None):
    """transformers' block forward in float64 on X [T, H]: (output [T, H], ids [T, K])."""
    b = copy.deepcopy(block).to(torch.float64)
    if hasattr(b.experts, "config"):  # the plain per-expert loop: grouped_mm has no float64
        b.experts.config = copy.copy(b.experts.config)
        b.experts.config._experts_implementation = "eager"
    x64 = x.to(torch.float64).reshape(1, -1, x.shape[-1])
    kw = {"input_ids": input_ids.reshape(1, -1)} if input_ids is not None else {}
    out = b(x64, **kw)
    out = out[0] if isinstance(out, tuple) else out
    r = router(b)
    if hasattr(r, "tid2eid"):
        ids = r(x64, input_ids.reshape(1, -1))[2]
    elif hasattr(b, "e_score_correction_bias"):  # MiniMax-M2: the block passes its bias
        ids = r(x64.reshape(-1, x.shape[-1]), b.e_score_correction_bias)[2]
    else:
        got = r(x64.reshape(-1, x.shape[-1]))
        # Llama4Router returns (scores, logits): its ids are the top-k of the logits.
        ids = got[2] if len(got) > 2 else got[1].topk(r.top_k, dim=-1)[1]
    return out.reshape(-1, x.shape[-1]), ids


@torch.no_grad()
def selection_keys(family, block, x):
    """The float64 keys each router ranks [T, E] (-inf outside the kept groups), and per token
    the smallest gap between the kept and dropped groups' scores (inf without groups)."""
    r = router(block)
    x = x.to(torch.float64)
    logits = x @ r.weight.to(torch.float64).T
    if getattr(r, "bias", None) is not None and isinstance(r.bias, torch.Tensor):
        logits = logits + r.bias.to(torch.float64)
    group_gap = torch.full((x.shape[0],), float("inf"), dtype=torch.float64)
    if family in V3_ROUTERS:
        keys = torch.sigmoid(logits) + correction_bias(block).to(torch.float64)
        n_group, topk_group = getattr(r, "num_group", 1), getattr(r, "topk_group", 1)
        if 1 < n_group and topk_group < n_group:
            g = keys.view(x.shape[0], n_group, -1).topk(2, dim=-1)[0].sum(-1)
            gs = g.sort(dim=-1, descending=True)[0]
            group_gap = gs[:, topk_group - 1] - gs[:, topk_group]
            kept = g.topk(topk_group, dim=-1)[1]
            mask = torch.zeros_like(g, dtype=torch.bool).scatter_(1, kept, True)
            keys = keys.masked_fill(~mask.repeat_interleave(keys.shape[1] // n_group, 1),
                                    float("-inf"))
    elif family == "ernie4_5_moe":
        keys = torch.softmax(logits, dim=-1) + \
            r.moe_statics.e_score_correction_bias.to(torch.float64).reshape(-1)
    elif family == "deepseek_v4":
        keys = torch.sqrt(torch.nn.functional.softplus(logits)) + \
            r.e_score_correction_bias.to(torch.float64)
    else:  # softmax / logits orderings
        keys = logits
    return keys, group_gap


def near_tie(keys, group_gap, k, tol=1e-5):
    """Per token: whether the k-th and (k+1)-th keys (or the group choice) are within TOL."""
    s = keys.sort(dim=-1, descending=True)[0]
    return ((s[:, k - 1] - s[:, k]).abs() < tol) | (group_gap < tol)


def rel_error(got, want):
    return float((got.to(torch.float64) - want).norm() / want.norm())
