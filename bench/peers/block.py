# block.py — the MoE block in plain torch, three ways a PyTorch user writes it on a CPU.
"""route() follows each family's model code (router dtype, scoring, correction bias, group
limits, renormalisation, routed scaling). The experts run as

  eager       Hugging Face's per-expert loop: a one-hot expert mask, then for every expert
              hit, torch.where for its tokens, gate and up and down as three F.linear calls,
              and index_add_ of the weighted rows into the output;
  sorted      (token, slot) pairs sorted by expert once, then per expert one F.linear over a
              contiguous slice with the fused [2I, H] gate_up weight, one for down, and one
              index_add_ at the end;
  grouped_mm  the same sorted rows through torch._grouped_mm (one call for gate_up over all
              experts, one for down), where this torch has it on the CPU.

Shared experts run over every token with F.linear. Activations stay in bf16 as the model
code keeps them; the combine accumulates in f32 (as DeepSeek-V3's code does) and returns f32.
"""
import torch
import torch.nn.functional as F

GPT_OSS_ALPHA = 1.702  # fixed in the gpt-oss model code


def route(lay, x):
    """Expert ids [T, K] (int64) and combine weights [T, K] (f32) for hidden states x [T, H]."""
    xin = x.to(torch.float32) if lay.router.dtype == torch.float32 else x
    logits = F.linear(xin, lay.router, lay.router_bias)
    k = lay.top_k
    if lay.scoring == "topk_softmax":  # gpt-oss: top-k of the logits, softmax over the k
        top, ids = torch.topk(logits, k, dim=-1)
        return ids, torch.softmax(top.to(torch.float32), dim=-1)
    z = logits.to(torch.float32)
    if lay.scoring == "softmax":
        s = torch.softmax(z, dim=-1)
    elif lay.scoring == "sigmoid":
        s = torch.sigmoid(z)
    elif lay.scoring == "sqrtsoftplus":
        s = F.softplus(z).sqrt()
    else:
        raise ValueError(f"scoring_func {lay.scoring} is not handled by this script")
    key = s if lay.correction_bias is None else s + lay.correction_bias
    if lay.n_group > 1:
        t, e = key.shape
        group = key.view(t, lay.n_group, e // lay.n_group).topk(2, dim=-1).values.sum(-1)
        keep = group.topk(lay.topk_group, dim=-1).indices
        mask = torch.zeros_like(group, dtype=torch.bool).scatter_(1, keep, True)
        key = key.masked_fill(~mask.repeat_interleave(e // lay.n_group, dim=1), float("-inf"))
    ids = torch.topk(key, k, dim=-1).indices
    w = s.gather(1, ids)
    if lay.norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return ids, w * lay.routed_scaling_factor


def glu(lay, g, u):
    if lay.act == "silu":
        return F.silu(g) * u
    g = g.clamp(max=lay.limit)
    u = u.clamp(-lay.limit, lay.limit)
    if lay.act == "silu_clamp":  # DeepSeek-V4: gate clamped from above only
        return F.silu(g) * u
    return g * torch.sigmoid(g * GPT_OSS_ALPHA) * (u + 1)  # gpt-oss


def glu_fused(lay, y):
    """The activation on a fused [n, 2I] gate_up output (gate columns first)."""
    return glu(lay, y[:, : lay.inter], y[:, lay.inter :])


def shared(lay, x, out):
    if lay.shared_gate_up is not None:
        h = glu_fused(lay, F.linear(x, lay.shared_gate_up))
        out += F.linear(h, lay.shared_down).to(torch.float32)
    return out


def experts_eager(lay, x, ids, w):
    out = torch.zeros(x.shape, dtype=torch.float32)
    mask = F.one_hot(ids, lay.experts).permute(2, 1, 0)  # [E, K, T]
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().flatten().tolist()
    i = lay.inter
    for e in hit:
        slot, tok = torch.where(mask[e])
        h = x[tok]
        gb = ub = db = None
        if lay.gate_up_bias is not None:
            gb, ub, db = lay.gate_up_bias[e, :i], lay.gate_up_bias[e, i:], lay.down_bias[e]
        g = F.linear(h, lay.gate_up[e, :i], gb)
        u = F.linear(h, lay.gate_up[e, i:], ub)
        y = F.linear(glu(lay, g, u), lay.down[e], db)
        out.index_add_(0, tok, y.to(torch.float32) * w[tok, slot, None])
    return out


def sort_rows(lay, x, ids, w):
    """(token, slot) rows sorted by expert: the gathered hidden rows, their token, weight and
    expert, and the row count of every expert."""
    flat = ids.flatten()
    order = flat.argsort(stable=True)
    tok = order // lay.top_k
    counts = torch.bincount(flat, minlength=lay.experts)
    return x[tok], tok, w.flatten()[order], flat[order], counts


def experts_sorted(lay, x, ids, w):
    xs, tok, ws, eid, counts = sort_rows(lay, x, ids, w)
    ys = torch.empty(xs.shape, dtype=torch.bfloat16)
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n:
            gb = db = None
            if lay.gate_up_bias is not None:
                gb, db = lay.gate_up_bias[e], lay.down_bias[e]
            h = glu_fused(lay, F.linear(xs[start : start + n], lay.gate_up[e], gb))
            ys[start : start + n] = F.linear(h, lay.down[e], db)
            start += n
    out = torch.zeros(x.shape, dtype=torch.float32)
    return out.index_add_(0, tok, ys.to(torch.float32) * ws[:, None])


def experts_grouped_mm(lay, x, ids, w):
    xs, tok, ws, eid, counts = sort_rows(lay, x, ids, w)
    offs = counts.cumsum(0).to(torch.int32)
    y = torch._grouped_mm(xs, lay.gate_up.transpose(1, 2), offs=offs)
    if lay.gate_up_bias is not None:
        y = y + lay.gate_up_bias[eid]
    ys = torch._grouped_mm(glu_fused(lay, y), lay.down.transpose(1, 2), offs=offs)
    if lay.down_bias is not None:
        ys = ys + lay.down_bias[eid]
    out = torch.zeros(x.shape, dtype=torch.float32)
    return out.index_add_(0, tok, ys.to(torch.float32) * ws[:, None])


EXPERTS = {"eager": experts_eager, "sorted": experts_sorted, "grouped_mm": experts_grouped_mm}


def forward(lay, variant, x):
    """The block's output [T, H] f32 for bf16 hidden states x [T, H], and the ids routed."""
    ids, w = route(lay, x)
    return shared(lay, x, EXPERTS[variant](lay, x, ids, w)), ids


def grouped_mm_works(lay):
    """Whether torch._grouped_mm runs here on this layer's weights (CPU support is recent)."""
    try:
        x = torch.zeros((2, lay.hidden), dtype=torch.bfloat16)
        offs = torch.full((lay.experts,), 2, dtype=torch.int32)
        torch._grouped_mm(x, lay.gate_up.transpose(1, 2), offs=offs)
        return True
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
