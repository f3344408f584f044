# checkpoint.py — one MoE layer of a Hugging Face checkpoint as torch tensors, weights in bf16.
"""What a PyTorch user holds in memory to run the layer: the router as the model's code runs
it, every expert's gate and up projections stacked into one [E, 2I, H] bf16 tensor (gate rows
first) and the down projections into [E, H, I], biases where the family has them, and the
shared experts likewise. FP8 (E4M3 with 128x128 block scales) and MXFP4 (E2M1 codes with an
E8M0 scale per 32) are dequantised to bf16 once, here, the way a torch user runs such a
checkpoint on a CPU. Standard library and torch only.
"""
import json
import mmap
import os
import re

import torch

from st_files import mapped_headers

ST_DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E8M0": torch.uint8,
    "U8": torch.uint8,
    "I8": torch.uint8,  # packed E2M1 nibbles: read as bytes
    "I32": torch.int32,
    "I64": torch.int64,
}

# The 16 E2M1 codes (sign bit 3, two exponent bits, one mantissa bit).
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
FP8_BLOCK = 128
MX_BLOCK = 32


class Tensors:
    """The tensors of a folder's safetensors files, mapped copy-on-write (nothing is read
    until a tensor is used, and torch may view the pages without copying them)."""

    def __init__(self, folder):
        self.where = {}
        for mm, base, header in mapped_headers(folder, mmap.ACCESS_COPY):
            for key, info in header.items():
                self.where[key] = (mm, base, info)

    def __contains__(self, name):
        return name in self.where

    def names(self):
        return self.where.keys()

    def get(self, name):
        mm, base, info = self.where[name]
        dtype, shape = ST_DTYPES[info["dtype"]], info["shape"]
        start, end = info["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        t = torch.frombuffer(mm, dtype=dtype, count=count, offset=base + start)
        assert end - start == t.nbytes, name
        return t.reshape(shape)


def e8m0(codes):
    """E8M0 scale bytes as f32 powers of two (2^(code - 127))."""
    return torch.pow(2.0, codes.to(torch.float32) - 127.0)


def block_scales(scale, rows, cols):
    """A [ceil(rows/128), ceil(cols/128)] block-scale tensor expanded to [rows, cols] f32."""
    s = e8m0(scale) if scale.dtype == torch.uint8 else scale.to(torch.float32)
    s = s.repeat_interleave(FP8_BLOCK, 0)[:rows]
    return s.repeat_interleave(FP8_BLOCK, 1)[:, :cols]


def fp8_block(weight, scale):
    rows, cols = weight.shape
    return (weight.to(torch.float32) * block_scales(scale, rows, cols)).to(torch.bfloat16)


def mxfp4(codes, scales):
    """Packed E2M1 bytes [..., K/2] (low nibble = even element) with E8M0 scales [..., K/32]
    as bf16 [..., K]."""
    lut = torch.tensor(E2M1, dtype=torch.float32)
    nib = torch.stack([codes & 15, codes >> 4], dim=-1).flatten(-2).to(torch.int64)
    v = lut[nib].unflatten(-1, (scales.shape[-1], MX_BLOCK)) * e8m0(scales).unsqueeze(-1)
    return v.flatten(-2).to(torch.bfloat16)


class Layer:
    """One MoE layer, ready for block.py: see the fields set by load()."""

    dequantised = None  # what was dequantised to bf16 at load, for the report
    router_bias = correction_bias = None
    gate_up_bias = down_bias = None
    shared_gate_up = shared_down = None
    n_group = topk_group = 1
    norm_topk_prob = True
    routed_scaling_factor = 1.0
    act = "silu"
    limit = None


def projection(t, weight, scale_names):
    """One nn.Linear weight [out, in] as bf16, dequantised with its scale if it has one."""
    w = t.get(weight)
    if w.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return w.to(torch.bfloat16), None
    scale = next((t.get(s) for s in scale_names if s in t), None)
    if scale is None:
        raise ValueError(f"{weight}: no scale tensor among {scale_names}")
    if w.dtype == torch.float8_e4m3fn:
        return fp8_block(w, scale), "FP8 (E4M3, 128x128 block scales)"
    return mxfp4(w, scale), "MXFP4 (E2M1, E8M0 per 32)"


def glu_stack(t, names, n):
    """gate/up/down name triples of N MLPs -> [N, 2I, H] and [N, H, I] bf16."""
    gate_up, down, what = None, None, set()
    for e in range(n):
        parts = []
        for name in names(e):
            w, how = projection(t, name, [name + "_scale_inv", name[: -len("weight")] + "scale"])
            parts.append(w)
            what.add(how)
        g, u, d = parts
        if gate_up is None:
            gate_up = torch.empty((n, 2 * g.shape[0], g.shape[1]), dtype=torch.bfloat16)
            down = torch.empty((n, d.shape[0], d.shape[1]), dtype=torch.bfloat16)
        gate_up[e, : g.shape[0]] = g
        gate_up[e, g.shape[0] :] = u
        down[e] = d
    what.discard(None)
    return gate_up, down, what


def first_routed_layer(t, pattern):
    layers = {int(m.group(1)) for m in map(pattern.match, t.names()) if m}
    if not layers:
        raise ValueError("no layer with routed experts in the checkpoint")
    return min(layers)


def load_deepseek_qwen_mixtral(t, cfg, lay, family):
    prefix = "block_sparse_moe" if family == "mixtral" else "mlp"
    li = first_routed_layer(t, re.compile(r"model\.layers\.(\d+)\." + prefix + r"\.experts\."))
    p = f"model.layers.{li}.{prefix}"
    proj = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    n = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts")
    lay.router = t.get(p + ".gate.weight")
    if family in ("deepseek_v3", "kimi_k2"):
        # The DeepSeek-V3 / Kimi-K2 model code computes router logits in f32.
        lay.router = lay.router.to(torch.float32)
        lay.scoring = cfg.get("scoring_func", "sigmoid")
        lay.correction_bias = t.get(p + ".gate.e_score_correction_bias").to(torch.float32)
        lay.n_group, lay.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
        lay.norm_topk_prob = cfg.get("norm_topk_prob", False)
        lay.routed_scaling_factor = cfg.get("routed_scaling_factor", 1.0)
        if cfg.get("topk_method", "noaux_tc") != "noaux_tc":
            raise ValueError(f"topk_method {cfg.get('topk_method')} is not handled here")
    else:
        lay.router = lay.router.to(torch.bfloat16)
        lay.scoring = "softmax"
        lay.norm_topk_prob = family == "mixtral" or cfg.get("norm_topk_prob", False)
    lay.gate_up, lay.down, what = glu_stack(
        t, lambda e: [f"{p}.experts.{e}.{x}.weight" for x in proj], n
    )
    if cfg.get("n_shared_experts", 0) and p + ".shared_experts.gate_proj.weight" in t:
        sgu, sd, swhat = glu_stack(t, lambda e: [f"{p}.shared_experts.{x}.weight" for x in proj], 1)
        lay.shared_gate_up, lay.shared_down = sgu[0], sd[0]
        what |= swhat
    return what


def load_deepseek_v4(t, cfg, lay):
    pat = re.compile(r"(?:model\.)?layers\.(\d+)\.ffn\.gate\.bias$")
    li = first_routed_layer(t, pat)
    p = f"layers.{li}.ffn" if f"layers.{li}.ffn.gate.bias" in t else f"model.layers.{li}.ffn"
    lay.router = t.get(p + ".gate.weight").to(torch.float32)  # the V4 model code: f32 logits
    lay.correction_bias = t.get(p + ".gate.bias").to(torch.float32)
    lay.scoring = cfg.get("scoring_func", "sqrtsoftplus")
    lay.n_group, lay.topk_group = cfg.get("n_group", 1), cfg.get("topk_group", 1)
    lay.norm_topk_prob = cfg.get("norm_topk_prob", False)
    lay.routed_scaling_factor = cfg.get("routed_scaling_factor", 1.0)
    if cfg.get("swiglu_limit") is not None:
        lay.act, lay.limit = "silu_clamp", float(cfg["swiglu_limit"])
    names = ("w1", "w3", "w2")
    lay.gate_up, lay.down, what = glu_stack(
        t, lambda e: [f"{p}.experts.{e}.{x}.weight" for x in names], cfg["n_routed_experts"]
    )
    if cfg.get("n_shared_experts", 0) and p + ".shared_experts.w1.weight" in t:
        shared = lambda e: [f"{p}.shared_experts.{x}.weight" for x in names]  # noqa: E731
        sgu, sd, swhat = glu_stack(t, shared, 1)
        lay.shared_gate_up, lay.shared_down = sgu[0], sd[0]
        what |= swhat
    return what


def deinterleave(rows):
    """gpt-oss stores gate and up interleaved (row 2i gate i, row 2i+1 up i): gate rows first."""
    return torch.cat([rows[:, 0::2], rows[:, 1::2]], dim=1).contiguous()


def stacked_mxfp4(t, name):
    """gpt-oss NAME_blocks [E, R, K/32, 16] and NAME_scales [E, R, K/32] as bf16 [E, R, K],
    one expert at a time (the f32 and index temporaries of all experts at once would not fit)."""
    blocks, scales = t.get(name + "_blocks"), t.get(name + "_scales")
    e, r, nb, _ = blocks.shape
    out = torch.empty((e, r, nb * MX_BLOCK), dtype=torch.bfloat16)
    for i in range(e):
        out[i] = mxfp4(blocks[i].flatten(-2), scales[i])
    return out


def load_gpt_oss(t, cfg, lay):
    li = first_routed_layer(t, re.compile(r"model\.layers\.(\d+)\.mlp\.router\.weight$"))
    p = f"model.layers.{li}.mlp"
    lay.router = t.get(p + ".router.weight").to(torch.bfloat16)
    lay.router_bias = t.get(p + ".router.bias").to(torch.bfloat16)
    lay.scoring = "topk_softmax"
    lay.act, lay.limit = "gpt_oss", float(cfg.get("swiglu_limit", 7.0))
    e = p + ".experts."
    what = set()
    if e + "gate_up_proj_blocks" in t:
        gu = stacked_mxfp4(t, e + "gate_up_proj")
        d = stacked_mxfp4(t, e + "down_proj")
        what.add("MXFP4 (E2M1, E8M0 per 32)")
    else:  # HF's dequantised layout is [E, in, out]: F.linear wants [out, in]
        gu = t.get(e + "gate_up_proj").to(torch.bfloat16).transpose(1, 2)
        d = t.get(e + "down_proj").to(torch.bfloat16).transpose(1, 2).contiguous()
    lay.gate_up, lay.down = deinterleave(gu), d
    lay.gate_up_bias = deinterleave(t.get(e + "gate_up_proj_bias").to(torch.bfloat16))
    lay.down_bias = t.get(e + "down_proj_bias").to(torch.bfloat16).contiguous()
    return what


def load(folder):
    """The first routed layer of the checkpoint in FOLDER as a Layer (raises ValueError for
    what this script does not handle)."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    t = Tensors(folder)
    lay = Layer()
    lay.family = family = cfg["model_type"]
    lay.top_k = cfg.get("num_experts_per_tok") or cfg["experts_per_token"]
    if family in ("deepseek_v3", "kimi_k2", "qwen3_moe", "mixtral"):
        what = load_deepseek_qwen_mixtral(t, cfg, lay, family)
    elif family == "deepseek_v4":
        what = load_deepseek_v4(t, cfg, lay)
    elif family == "gpt_oss":
        what = load_gpt_oss(t, cfg, lay)
    else:
        raise ValueError(f"model_type {family} is not handled by this script")
    lay.experts, inter2, lay.hidden = lay.gate_up.shape
    lay.inter = inter2 // 2
    lay.dequantised = " and ".join(sorted(what)) or None
    return lay
