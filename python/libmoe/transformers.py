# transformers — libmoe's MoE layers as drop-in blocks of a loaded transformers model.
"""Run the MoE blocks of a Hugging Face transformers model with libmoe.

``patch(model)`` replaces the MoE block of every MoE layer of a loaded transformers model
(DeepSeek-V2, DeepSeek-V3 / Kimi-K2, DeepSeek-V4, Qwen3-MoE, Mixtral, gpt-oss, DeepSeek-V3.2,
GLM-4.5 / GLM-5 / GLM-4.7-Flash, MiniMax-M2, Qwen3-Next, ERNIE-4.5; and the language model of
the vision-language Kimi-K2.5, Qwen3.5-MoE and Llama-4, whole or as their text-only
``Qwen3_5MoeForCausalLM`` / ``Llama4ForCausalLM`` loaded from the same folder) with a
``LibmoeBlock``: a ``torch.nn.Module`` that runs libmoe's layer, built from the same
checkpoint, and keeps the block's forward contract, so ``model(...)`` and
``model.generate(...)`` run with libmoe's MoE blocks. ``unpatch(model)`` puts the original
blocks back. Everything it cannot serve exactly is a ``PatchError``, never a silent fallback.

What the block returns (``hidden_states`` is ``[B, S, H]`` or ``[T, H]``, any float dtype):

- every family but gpt-oss and Llama-4: the block output, same shape and dtype as the input;
- gpt-oss (``GptOssMLP`` returns ``(hidden_states, router_scores)``): the same tuple, where
  the second element is libmoe's ``[T, K]`` combine weights (the softmax over the k
  selected logits, as transformers' ``router_scores``) in the input's dtype, in libmoe's id
  order (transformers' decoder discards it);
- Llama-4 (``Llama4TextMoe`` returns ``(hidden_states [T, H], router_logits [T, E])``): the
  same tuple, the output flattened to ``[T, H]`` as transformers' is, and the logits the
  router weight the block held gives (``x @ W.T``, checked equal to the checkpoint's; the
  decoder discards them).

The router logits transformers records for ``output_router_logits`` come from forward
hooks on its router module; a patched block has no router module, so they are absent for
patched layers. The block computes no gradients (inference only). Inputs on another
device are copied to the CPU and the output copied back.

DeepSeek-V4's hash layers route by token id: its decoder passes ``input_ids`` to the block
(``mlp(hidden, input_ids=input_ids)``), and the patched block hands them to libmoe; a hash
layer called without ``input_ids`` (e.g. ``inputs_embeds`` only) raises ``ValueError``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import libmoe

__all__ = ["PatchError", "LibmoeBlock", "patch", "unpatch", "register_experts_backend"]


class PatchError(Exception):
    """A model, block, config or checkpoint that patch() cannot serve exactly."""


@dataclass(frozen=True)
class _Family:
    block: str  # the MoE block class on decoder_layer.mlp
    dense: tuple[str, ...]  # the dense MLP classes a non-MoE layer may hold
    returns_scores: bool  # the block returns (hidden, router_scores)
    attr: str = "mlp"  # the decoder layer's attribute that holds the block
    returns_logits: bool = False  # the block returns (hidden [T, H], router_logits [T, E])


_FAMILIES = {
    "deepseek_v2": _Family("DeepseekV2Moe", ("DeepseekV2MLP",), False),
    "deepseek_v3": _Family("DeepseekV3MoE", ("DeepseekV3MLP",), False),
    "deepseek_v4": _Family("DeepseekV4SparseMoeBlock", (), False),
    "qwen3_moe": _Family("Qwen3MoeSparseMoeBlock", ("Qwen3MoeMLP",), False),
    "mixtral": _Family("MixtralSparseMoeBlock", (), False),
    "gpt_oss": _Family("GptOssMLP", (), True),
    # DeepSeek-V3's block under newer model_types, and MiniMax-M2's: libmoe refuses at open
    # every field their blocks hard-code (topk_method, scoring_func, use_routing_bias, ...).
    "deepseek_v32": _Family("DeepseekV32MoE", ("DeepseekV32MLP",), False),
    "glm4_moe": _Family("Glm4MoeMoE", ("Glm4MoeMLP",), False),
    "glm_moe_dsa": _Family("GlmMoeDsaMoE", ("GlmMoeDsaMLP",), False),
    "glm4_moe_lite": _Family("Glm4MoeLiteMoE", ("Glm4MoeLiteMLP",), False),
    "minimax_m2": _Family("MiniMaxM2SparseMoeBlock", (), False),
    "qwen3_next": _Family("Qwen3NextSparseMoeBlock", ("Qwen3NextMLP",), False),
    "ernie4_5_moe": _Family("Ernie4_5_MoeSparseMoeBlock", ("Ernie4_5_MoeMLP",), False),
    # Language models of vision-language wrappers (their text config in config.text_config).
    "qwen3_5_moe": _Family("Qwen3_5MoeSparseMoeBlock", (), False),
    "llama4": _Family("Llama4TextMoe", ("Llama4TextMLP",), False, "feed_forward", True),
}
# The wrappers and text-only classes whose language model is one of _FAMILIES: model_type ->
# (the _FAMILIES entry of its decoder's block, libmoe's family of the checkpoint folder).
# Kimi-K2.5's language model is transformers' DeepSeek-V3 (its text_config says deepseek_v3);
# Qwen3_5MoeForCausalLM and Llama4ForCausalLM load the text model from the wrapper's folder.
_TEXT_MODELS = {"kimi_k25": ("deepseek_v3", "kimi_k25"),
                "qwen3_5_moe": ("qwen3_5_moe", "qwen3_5_moe"),
                "qwen3_5_moe_text": ("qwen3_5_moe", "qwen3_5_moe"),
                "llama4": ("llama4", "llama4"), "llama4_text": ("llama4", "llama4")}
# libmoe's family names a transformers model_type may correspond to (Kimi-K2 loads as V3).
_LIBMOE_FAMILIES = {"deepseek_v3": ("deepseek_v3", "kimi_k2")}
_BLOCK_ATTRS = tuple(sorted({f.attr for f in _FAMILIES.values()}))


class LibmoeBlock(nn.Module):
    """One MoE block run by libmoe; holds the libmoe layer and the block it replaced."""

    def __init__(self, layer, index: int, kind: str, hidden_size: int, returns_scores: bool,
                 original: nn.Module, returns_logits: bool = False):
        super().__init__()
        self.layer = layer
        self.layer_index = index
        self.kind = kind
        self.hidden_size = hidden_size
        self.returns_scores = returns_scores
        self.returns_logits = returns_logits
        object.__setattr__(self, "original", original)  # not a submodule: no parameters

    def extra_repr(self) -> str:
        return f"layer={self.layer_index}, kind={self.kind}, hidden_size={self.hidden_size}"

    @torch.no_grad()
    def forward(self, hidden_states: torch.Tensor, input_ids: torch.Tensor | None = None):
        shape, dtype, device = hidden_states.shape, hidden_states.dtype, hidden_states.device
        if shape[-1] != self.hidden_size:
            raise ValueError(f"layer {self.layer_index}: hidden_states has last dimension "
                             f"{shape[-1]}; the layer's hidden size is {self.hidden_size}")
        x = hidden_states.reshape(-1, self.hidden_size).to("cpu")
        if x.dtype not in (torch.float32, torch.bfloat16):
            x = x.to(torch.float32)
        x = x.contiguous()
        ids = None
        if self.kind == "hash":
            if input_ids is None:
                raise ValueError(f"layer {self.layer_index} routes by token id (hash) and was "
                                 "called without input_ids")
            ids = input_ids.reshape(-1).to("cpu", torch.int64).contiguous()
            if ids.numel() != x.shape[0]:
                raise ValueError(f"layer {self.layer_index}: {ids.numel()} input_ids for "
                                 f"{x.shape[0]} tokens")
        if self.returns_scores:
            out, _, weights = self.layer(x, ids, return_routing=True)
            return (out.to(device, dtype).reshape(shape), weights.to(device, dtype))
        out = self.layer(x, ids).to(device, dtype)
        if self.returns_logits:  # Llama4TextMoe: ([T, H], router_logits [T, E])
            flat = hidden_states.reshape(-1, self.hidden_size)
            weight = self.original.router.weight
            return out, nn.functional.linear(flat.to(weight.dtype), weight).to(dtype)
        return out.reshape(shape)


def _family(config):
    """(the _FAMILIES key of the decoder's block, its _Family, the language model's config,
    the libmoe families the checkpoint may be) of a model's CONFIG."""
    model_type = getattr(config, "model_type", None)
    if model_type == "kimi_k2":
        model_type = "deepseek_v3"
    if model_type in _TEXT_MODELS:
        family, libmoe_family = _TEXT_MODELS[model_type]
        text = getattr(config, "text_config", None) or config
        return family, _FAMILIES[family], text, (libmoe_family,)
    if model_type not in _FAMILIES:
        known = sorted(set(_FAMILIES) | set(_TEXT_MODELS))
        raise PatchError(f"model_type {model_type!r} is not a family libmoe.transformers "
                         f"serves (known: {', '.join(known)})")
    return model_type, _FAMILIES[model_type], config, _LIBMOE_FAMILIES.get(model_type,
                                                                          (model_type,))


def _check_config(family: str, config) -> None:
    """Refuses configs where transformers' block and libmoe would compute different things:
    fields transformers' block fixes or ignores where libmoe honours them. Fields both read
    alike (gpt-oss ``swiglu_alpha`` and ``swiglu_limit``, DeepSeek-V4 ``swiglu_limit``) need no
    check here, and libmoe refuses at open what it does not support (e.g. a ``hidden_act``
    other than silu, ``mlp_bias``, DeepSeek-V4 ``norm_topk_prob`` false)."""
    def get(name, default=None):
        value = getattr(config, name, default)
        return default if value is None else value

    problems = []
    if family == "deepseek_v2":
        # transformers' V2 router: softmax, never renormalised, greedy or group-limited.
        if get("norm_topk_prob", False):
            problems.append("norm_topk_prob is true, but transformers' DeepSeek-V2 router "
                            "never renormalises (libmoe would)")
        if get("scoring_func", "softmax") != "softmax":
            problems.append(f"scoring_func {get('scoring_func')!r}: transformers' DeepSeek-V2 "
                            "router always uses softmax")
        if get("topk_method", "greedy") not in ("greedy", "group_limited_greedy"):
            problems.append(f"topk_method {get('topk_method')!r} is not one transformers' "
                            "DeepSeek-V2 router runs")
    elif family == "deepseek_v3":
        # transformers' V3 router: always sigmoid + noaux_tc with groups by top-2 sum.
        if get("scoring_func", "sigmoid") != "sigmoid":
            problems.append(f"scoring_func {get('scoring_func')!r}: transformers' DeepSeek-V3 "
                            "router always uses sigmoid")
        if get("topk_method", "noaux_tc") != "noaux_tc":
            problems.append(f"topk_method {get('topk_method')!r}: transformers' DeepSeek-V3 "
                            "router always runs noaux_tc")
    elif family == "deepseek_v4":
        # transformers' V4 block: one shared expert of moe_intermediate_size, whatever the
        # config says; libmoe reads n_shared_experts.
        if get("n_shared_experts", 1) != 1:
            problems.append(f"n_shared_experts {get('n_shared_experts')}: transformers' "
                            "DeepSeek-V4 block has exactly one shared expert")
    if problems:
        raise PatchError("; ".join(problems))


# ---- weights: the block's parameters against the checkpoint --------------------------------

class _Checkpoint:
    """The checkpoint's tensors by name (model.safetensors or a sharded index), read lazily."""

    def __init__(self, path: str):
        from safetensors import safe_open

        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = json.load(f)["weight_map"]
        elif os.path.exists(os.path.join(path, "model.safetensors")):
            files = None
        else:
            raise PatchError(f"{path}: neither model.safetensors nor "
                             "model.safetensors.index.json")
        self._path, self._files, self._open = path, files, {}
        self._safe_open = safe_open
        single = None if files is not None else self._handle("model.safetensors")
        self._names = set(files) if files is not None else set(single.keys())

    def _handle(self, file: str):
        if file not in self._open:
            self._open[file] = self._safe_open(os.path.join(self._path, file), "pt")
        return self._open[file]

    # Other spellings of a name transformers' save-time conversion gives: (prefix, stored
    # prefix). DeepSeek-V4 files may drop the leading 'model.'; the text-only Llama-4 and
    # Qwen3.5-MoE classes name the wrapper's tensors without its prefix; transformers saves
    # Kimi-K2.5's layers as 'blocks', the hub's files say 'layers'.
    _SPELLINGS = (("model.", ""), ("model.layers.", "language_model.model.layers."),
                  ("model.layers.", "model.language_model.layers."),
                  ("language_model.model.blocks.", "language_model.model.layers."))

    def name(self, name: str) -> str | None:
        """The stored spelling of NAME."""
        if name in self._names:
            return name
        for prefix, stored in self._SPELLINGS:
            if name.startswith(prefix) and stored + name[len(prefix):] in self._names:
                return stored + name[len(prefix):]
        return None

    def get(self, name: str) -> torch.Tensor:
        file = self._files[name] if self._files is not None else "model.safetensors"
        return self._handle(file).get_tensor(name)


_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                      -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float64)


def _e8m0(scale: torch.Tensor) -> torch.Tensor:
    e = scale.view(torch.uint8).to(torch.float64) if scale.dtype != torch.uint8 else \
        scale.to(torch.float64)
    return torch.exp2(e - 127.0)


def _scale64(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)):
        return _e8m0(scale)
    return scale.to(torch.float64)


def _dequant_fp8(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    s = _scale64(scale).repeat_interleave(128, 0).repeat_interleave(128, 1)
    return weight.to(torch.float64) * s[: weight.shape[0], : weight.shape[1]]


def _dequant_mxfp4(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Codes [..., n/2] (or gpt-oss blocks [..., n/32, 16]), E8M0 scales [..., n/32]."""
    b = codes.view(torch.uint8).reshape(*scale.shape, 16).to(torch.int64)
    v = torch.stack([_E2M1[b & 15], _E2M1[b >> 4]], dim=-1).reshape(*scale.shape, 32)
    return (v * _e8m0(scale).unsqueeze(-1)).reshape(*scale.shape[:-1], -1)


def _stored_value(ckpt: _Checkpoint, name: str) -> tuple[torch.Tensor, bool] | None:
    """The checkpoint's value of NAME in float64, and whether it was dequantised."""
    stored = ckpt.name(name)
    if stored is not None:
        t = ckpt.get(stored)
        if t.dtype == torch.float8_e4m3fn:
            scale = ckpt.name(name + "_scale_inv") or ckpt.name(name.removesuffix("weight") +
                                                                "scale")
            if scale is None:
                return None
            return _dequant_fp8(t, ckpt.get(scale)), True
        if t.dtype in (torch.int8, torch.uint8) and name.endswith(".weight"):
            scale = ckpt.name(name.removesuffix("weight") + "scale")
            if scale is None:
                return None
            return _dequant_mxfp4(t, ckpt.get(scale)), True
        return t.to(torch.float64), False
    blocks, scales = ckpt.name(name + "_blocks"), ckpt.name(name + "_scales")
    if blocks is None or scales is None:
        return None
    # gpt-oss MXFP4: [E, rows, K/32, 16] codes; transformers holds the [E, K, rows] transpose.
    return _dequant_mxfp4(ckpt.get(blocks), ckpt.get(scales)).transpose(-1, -2), True


def _check_weights(model: nn.Module, prefix: str, block: nn.Module, ckpt: _Checkpoint) -> None:
    from transformers.core_model_loading import revert_weight_conversion

    mine = {f"{prefix}.{k}": v.detach().to("cpu") for k, v in block.state_dict().items()}
    for name, value in revert_weight_conversion(model, mine).items():
        found = _stored_value(ckpt, name)
        if found is None:
            raise PatchError(f"{prefix}: the checkpoint has no tensor {name!r} for the "
                             "block's weights")
        stored, dequantised = found
        have = value.to(torch.float64)
        if tuple(have.shape) != tuple(stored.shape):
            raise PatchError(f"{name}: the module holds shape {tuple(have.shape)}, the "
                             f"checkpoint {tuple(stored.shape)}")
        if dequantised:
            # transformers rounded the dequantised value to its dtype: allow that rounding.
            eps = torch.finfo(value.dtype).eps if value.is_floating_point() else 0.0
            ok = bool(((have - stored).abs() <= eps * stored.abs()).all())
        else:
            ok = torch.equal(have, stored)
        if not ok:
            bad = int((have != stored).sum())
            raise PatchError(f"{name}: the module's values differ from the checkpoint's "
                             f"({bad} of {have.numel()} elements); libmoe runs the "
                             "checkpoint, so patch() refuses weights changed after loading")


# The GLU constants a block computes with (set from the model's config when the block was
# built), by family: (submodule, attribute, the config.json field libmoe reads).
_GLU_CONSTANTS = {
    "gpt_oss": (("experts", "alpha", "swiglu_alpha"), ("experts", "limit", "swiglu_limit")),
    "deepseek_v4": (("experts", "limit", "swiglu_limit"),
                    ("shared_experts", "limit", "swiglu_limit")),
}


def _check_glu_constants(family: str, config, prefix: str, block: nn.Module, path: str) -> None:
    """The block's GLU constants against the checkpoint's config.json (transformers' default
    where it has none), which is what libmoe reads: a model loaded with an override
    (``from_pretrained(..., swiglu_alpha=...)``) computes something else."""
    fields = _GLU_CONSTANTS.get(family, ())
    if not fields:
        return
    with open(os.path.join(path, "config.json")) as f:
        stored = json.load(f)
    for module, attr, key in fields:
        have = float(getattr(getattr(block, module), attr))
        want = stored.get(key)
        want = float(getattr(type(config), key) if want is None else want)
        if have != want:
            raise PatchError(f"{prefix}.{module}.{attr} is {have}, but {key} in "
                             f"{path}/config.json is {want} (what libmoe reads)")


# ---- patch / unpatch -----------------------------------------------------------------------

def _decoder_layers(model: nn.Module, text_config=None):
    """(index, name, decoder layer) of the language model's layers: the ``layers`` of the
    module built from TEXT_CONFIG (the model's own config, or a wrapper's text_config), not a
    vision tower's."""
    if text_config is None:
        text_config = getattr(model.config, "text_config", None) or model.config
    for name, module in model.named_modules():
        layers = getattr(module, "layers", None)
        if getattr(module, "config", None) is text_config and isinstance(layers, nn.ModuleList):
            prefix = f"{name}.layers" if name else "layers"
            return [(i, f"{prefix}.{i}", layer) for i, layer in enumerate(layers)]
    return []


def _model_path(model, path) -> str:
    if path is None:
        path = getattr(model.config, "_name_or_path", None) or getattr(model, "name_or_path",
                                                                        None)
    if not path or not os.path.isdir(path):
        raise PatchError(f"no checkpoint folder to build libmoe's layers from (got {path!r}): "
                         "a model not loaded from a local folder needs path=")
    return str(path)


def patch(model: nn.Module, path: str | os.PathLike | None = None, *, threads: int | None = None,
          recipe: str | None = None) -> nn.Module:
    """Replaces every MoE block of MODEL by a LibmoeBlock built from the checkpoint at PATH.

    PATH defaults to ``model.config._name_or_path`` (the folder the model was loaded from).
    ``threads`` and ``recipe`` (None, 'f32', 'bf16', 'tile') are passed to ``libmoe.Model.layer``.
    Returns MODEL, patched in place.

    Before replacing anything it checks, and raises PatchError on the first mismatch:

    - the family is one this module knows, and the config has no field transformers'
      block fixes or ignores where libmoe would honour it (e.g. DeepSeek-V2's
      ``norm_topk_prob``, DeepSeek-V4's ``n_shared_experts`` ≠ 1);
    - libmoe opens the checkpoint (its errors are chained: a config field it refuses, such
      as DeepSeek-V4's ``norm_topk_prob`` false, a ``hidden_act`` other than silu or
      ``mlp_bias``), it is the same family with the same layer count and hidden size;
    - every decoder layer of the language model (the ``layers`` of the module built from the
      model's config, or from a vision-language wrapper's ``text_config``) holds the family's
      MoE block on ``mlp`` (Llama-4: ``feed_forward``) exactly where libmoe's layer of the
      same index is 'moe' or 'hash' (DeepSeek-V4: hash exactly where transformers' block
      is), and a known dense MLP elsewhere;
    - gpt-oss ``swiglu_alpha`` and ``swiglu_limit``, DeepSeek-V4 ``swiglu_limit``: the
      values each block computes with equal the checkpoint's config.json, which libmoe reads;
    - weights: every parameter and buffer of every MoE block (router weight and bias,
      correction bias, ``tid2eid``, routed and shared experts), renamed to the checkpoint's
      names by transformers' own save-time conversion, equals the checkpoint tensor of that
      name exactly in value (compared as float64; dtypes may differ). Where the checkpoint
      stores it quantised (FP8 with 128×128 block scales, MXFP4), the module's value must
      equal the exact dequantised value within one unit of rounding of the module's dtype
      (transformers rounds the dequantised value to it).

    Nothing is replaced unless every check passes.
    """
    family, spec, text, libmoe_families = _family(model.config)
    _check_config(family, text)
    path = _model_path(model, path)
    try:
        lib = libmoe.open(path)
    except libmoe.MoeError as e:
        raise PatchError(f"libmoe cannot open {path}: {e}") from e
    info = lib.info
    if info.family not in libmoe_families:
        raise PatchError(f"{path} is a {info.family} checkpoint; the model is "
                         f"{model.config.model_type}")
    n_layers, hidden = text.num_hidden_layers, text.hidden_size
    if (info.n_layers, info.hidden_size) != (n_layers, hidden):
        raise PatchError(f"{path}: {info.n_layers} layers of hidden size {info.hidden_size}; "
                         f"the model has {n_layers} of {hidden}")
    layers = _decoder_layers(model, text)
    if sorted(i for i, _, _ in layers) != list(range(n_layers)):
        raise PatchError(f"found decoder layers {sorted(i for i, _, _ in layers)}, expected "
                         f"0..{n_layers - 1}")
    ckpt = _Checkpoint(path)
    plan = []
    for i, name, decoder in sorted(layers, key=lambda x: x[0]):
        where = f"{name}.{spec.attr}"
        mlp, kind = getattr(decoder, spec.attr, None), lib.layer_info(i).kind
        cls = type(mlp).__name__
        if isinstance(mlp, LibmoeBlock):
            raise PatchError(f"{where} is already patched")
        if cls == spec.block:
            if kind not in ("moe", "hash"):
                raise PatchError(f"{where} is {cls}, but libmoe's layer {i} is {kind}")
            if family == "deepseek_v4" and bool(mlp.is_hash) != (kind == "hash"):
                raise PatchError(f"{where} {'is' if mlp.is_hash else 'is not'} hash-routed, "
                                 f"but libmoe's layer {i} is {kind}")
            _check_weights(model, where, mlp, ckpt)
            _check_glu_constants(family, text, where, mlp, path)
            plan.append((i, decoder, mlp, kind))
        elif cls in spec.dense:
            if kind != "dense":
                raise PatchError(f"{where} is the dense {cls}, but libmoe's layer {i} is "
                                 f"{kind}")
        else:
            raise PatchError(f"{where} is a {cls}, not a block libmoe.transformers serves "
                             f"for {family} ({spec.block})")
    blocks = []
    for i, decoder, mlp, kind in plan:
        try:
            layer = lib.layer(i, threads=threads, recipe=recipe)
        except libmoe.MoeError as e:
            raise PatchError(f"libmoe cannot build layer {i} of {path}: {e}") from e
        blocks.append((decoder, LibmoeBlock(layer, i, kind, hidden, spec.returns_scores, mlp,
                                            spec.returns_logits)))
    for decoder, block in blocks:
        setattr(decoder, spec.attr, block)
    model._libmoe_model = lib
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Puts back every block patch() replaced and detaches register_experts_backend's layers;
    returns MODEL."""
    for _, _, decoder in _decoder_layers(model):
        for attr in _BLOCK_ATTRS:
            block = getattr(decoder, attr, None)
            if isinstance(block, LibmoeBlock):
                block = block.original
                setattr(decoder, attr, block)
            experts = getattr(block, "experts", None)
            if experts is not None and "libmoe_layer" in experts.__dict__:
                del experts.__dict__["libmoe_layer"]
    if hasattr(model, "_libmoe_model"):
        del model._libmoe_model
    if "_libmoe_previous_experts" in model.__dict__:
        model.config._experts_implementation = model.__dict__.pop("_libmoe_previous_experts")
    return model


# ---- transformers' experts-implementation registry -----------------------------------------

def _libmoe_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    layer = getattr(self, "libmoe_layer", None)
    if layer is None:
        raise PatchError("experts implementation 'libmoe' on an experts module with no libmoe "
                         "layer: use libmoe.transformers.register_experts_backend(model)")
    with torch.no_grad():
        x = hidden_states.to("cpu")
        if x.dtype not in (torch.float32, torch.bfloat16):
            x = x.to(torch.float32)
        out = layer.experts(x.contiguous(), top_k_index.to("cpu", torch.int64).contiguous(),
                            top_k_weights.to("cpu", torch.float32).contiguous(), shared=False)
    return out.to(hidden_states.device, hidden_states.dtype)


def register_experts_backend(model: nn.Module, path: str | os.PathLike | None = None, *,
                             threads: int | None = None, recipe: str | None = None) -> nn.Module:
    """The lighter alternative to patch(): libmoe runs only the routed experts.

    Registers ``"libmoe"`` in transformers' experts-implementation registry
    (``ALL_EXPERTS_FUNCTIONS``), attaches libmoe's layer to every MoE block's ``experts``
    module and sets ``config._experts_implementation = "libmoe"``. transformers keeps its
    own router and shared experts; each experts call runs libmoe's experts-only forward on
    transformers' ids and weights (``Layer.experts(..., shared=False)``). The same checks
    as patch() run first (family, config, kinds, weights). Returns MODEL.
    """
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    family, spec, text, _ = _family(model.config)
    if family == "llama4":
        raise PatchError("Llama4TextExperts is not dispatched through transformers' experts "
                         "registry (it takes no ids and weights): use patch()")
    patched = patch(model, path, threads=threads, recipe=recipe)
    ALL_EXPERTS_FUNCTIONS.register("libmoe", _libmoe_experts_forward)
    for _, _, decoder in _decoder_layers(patched, text):
        block = getattr(decoder, spec.attr)
        if isinstance(block, LibmoeBlock):
            setattr(decoder, spec.attr, block.original)
            object.__setattr__(block.original.experts, "libmoe_layer", block.layer)
    del model._libmoe_model
    model.__dict__["_libmoe_previous_experts"] = model.config._experts_implementation
    model.config._experts_implementation = "libmoe"
    return model
