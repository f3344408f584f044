# reference.py — a float64 MoE block from a checkpoint's tensors (safetensors + numpy), for the tests.
"""An independent reading of the checkpoint: the config's fields and defaults are read here,
the tensors decoded from their stored bits (FP8 codes times their 128×128 block scales, MXFP4
codes times their 32-element E8M0 scales, INT4 pack-quantized words times their group
scales), and the block computed in float64 with the routing formulas of docs/routing.md:
scores, group masking, top-k, renormalisation (with ERNIE's floor), scaling, then each
expert's MLP (Llama-4: on the input scaled by the routing weight, docs/layer.md) and the
shared experts (Qwen3-Next / Qwen3.5-MoE: times the sigmoid of their gate)."""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from safetensors import safe_open

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
TIE = 1e-5  # relative gap under which two selection keys are a near tie (the order may differ)


def mxfp4(codes: np.ndarray, scale_exponents: np.ndarray) -> np.ndarray:
    """[rows, K] from codes [rows, K/2] (two per byte, low nibble = even column) and E8M0
    exponents [rows, K/32]."""
    c = codes.astype(np.uint8)
    v = np.empty((c.shape[0], c.shape[1] * 2))
    v[:, 0::2] = E2M1[c & 15]
    v[:, 1::2] = E2M1[c >> 4]
    return v * np.repeat(2.0 ** (scale_exponents.astype(np.float64) - 127), 32, axis=1)


def int4_pack_quantized(words: np.ndarray, scale: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """[out, in] from compressed-tensors' pack-quantized int32 words [out, in/8] (element i
    of a row in bits 4(i mod 8) .. +3 of word i/8, stored as q + 8) and scales [out, in/G]
    (docs/formats.md, "INT4 (pack-quantized)")."""
    w = words.astype(np.int64) & 0xFFFFFFFF
    nib = np.stack([(w >> (4 * i)) & 15 for i in range(8)], axis=-1)  # [out, in/8, 8]
    q = nib.reshape(w.shape[0], -1).astype(np.float64) - 8.0
    out, cols = int(shape[0]), int(shape[1])
    assert q.shape == (out, cols), (q.shape, shape)
    return q * np.repeat(scale, cols // scale.shape[1], axis=1)


def silu(z: np.ndarray) -> np.ndarray:
    return z / (1.0 + np.exp(-z))


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class Checkpoint:
    """The tensors of a folder, decoded to float64 on first use."""

    def __init__(self, d: str) -> None:
        self.dir = d
        self.cfg = json.load(open(os.path.join(d, "config.json")))
        self.files: Dict[str, str] = {}
        for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
            with safe_open(f, "pt") as s:
                for k in s.keys():
                    self.files[k] = f
        self.cache: Dict[str, np.ndarray] = {}

    def raw(self, name: str) -> torch.Tensor:
        with safe_open(self.files[name], "pt") as s:
            return s.get_tensor(name)

    def has(self, name: str) -> bool:
        return name in self.files

    def array(self, name: str) -> np.ndarray:
        """A float tensor as float64 (integer tensors as they are)."""
        t = self.raw(name)
        if t.dtype.is_floating_point:
            return t.to(torch.float64).numpy()
        return t.numpy()

    def matrix(self, name: str) -> np.ndarray:
        """A weight [out, in] dequantised: FP8 with its block scale, DeepSeek-V4 FP4 codes
        (I8 [out, in/2]) with their E8M0 scale, or a plain float matrix."""
        if name in self.cache:
            return self.cache[name]
        base = name[:-len("weight")]
        if not self.has(name) and self.has(name + "_packed"):  # INT4 pack-quantized
            m = int4_pack_quantized(self.raw(name + "_packed").numpy(),
                                    self.array(name + "_scale"), self.raw(name + "_shape").numpy())
            self.cache[name] = m
            return m
        t = self.raw(name)
        if t.dtype == torch.int8:
            scale = self.raw(base + "scale").view(torch.uint8).numpy()
            m = mxfp4(t.view(torch.uint8).numpy(), scale)
        else:
            m = t.to(torch.float64).numpy()
            if t.dtype == torch.float8_e4m3fn:
                sname = name + "_scale_inv" if self.has(name + "_scale_inv") else base + "scale"
                s = self.array(sname)
                m = m * np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)[:m.shape[0], :m.shape[1]]
        self.cache[name] = m
        return m


# The families routed as DeepSeek-V3 (noaux_tc, the correction bias on the gate).
V3_ROUTED = ("deepseek_v3", "kimi_k2", "deepseek_v32", "glm4_moe", "glm_moe_dsa",
             "glm4_moe_lite", "kimi_k25")


@dataclass
class Routing:
    ids: np.ndarray      # [T, K] the reference's selection, in the library's slot order
    weights: np.ndarray  # [T, K]
    near_tie: np.ndarray  # [T] bool: a selection key within TIE of the one it beat


class LayerRef:
    """One layer of a checkpoint, in float64."""

    def __init__(self, ck: Checkpoint, index: int) -> None:
        self.ck, self.i = ck, index
        mt = ck.cfg["model_type"]
        # The vision-language families nest the language model's config (docs/models.md).
        cfg = ck.cfg["text_config"] if mt in ("kimi_k25", "qwen3_5_moe", "llama4") else ck.cfg
        g = cfg.get
        self.family = mt
        self.limit: Optional[float] = None
        self.shared: Optional[str] = None
        self.shared_gate: Optional[np.ndarray] = None  # [1, H]: the shared output's sigmoid gate
        self.scale_input = False  # Llama-4: the weight scales the expert's input
        self.renorm_min = 0.0  # ERNIE: the weights' divisor is max(sum, renorm_min)
        self.bias: Optional[np.ndarray] = None
        self.router_bias: Optional[np.ndarray] = None
        self.n_group, self.topk_group, self.rsf, self.norm = 1, 1, 1.0, True
        self.names = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")
        router_name, bias_name = "gate.weight", "gate.e_score_correction_bias"
        if mt in V3_ROUTED:
            p = ("language_model.model.layers.%d.mlp." if mt == "kimi_k25"
                 else "model.layers.%d.mlp.") % index
            types = g("mlp_layer_types")
            if types is not None:
                dense = types[index] == "dense"
            else:
                dense = index < g("first_k_dense_replace", 0) or index % g("moe_layer_freq", 1)
            self.method, self.score = "noaux_tc", g("scoring_func", "sigmoid")
            self.n_group, self.topk_group = g("n_group", 1), g("topk_group", 1)
            self.rsf, self.norm = g("routed_scaling_factor", 1.0), g("norm_topk_prob", False)
            if ck.has(p + "shared_experts.up_proj.weight") or \
                    ck.has(p + "shared_experts.up_proj.weight_packed"):
                self.shared = p + "shared_experts."
        elif mt in ("qwen3_moe", "qwen3_next", "qwen3_5_moe"):
            p = ("model.language_model.layers.%d.mlp." if mt == "qwen3_5_moe"
                 else "model.layers.%d.mlp.") % index
            dense = mt != "qwen3_5_moe" and (index in g("mlp_only_layers", []) or
                                             (index + 1) % g("decoder_sparse_step", 1) != 0)
            self.method, self.score = "softmax_topk", "softmax"
            self.norm = g("norm_topk_prob", mt != "qwen3_moe")  # Qwen3-MoE's default false
            if mt == "qwen3_moe":
                if ck.has(p + "shared_experts.up_proj.weight"):
                    self.shared = p + "shared_experts."
            elif not dense:
                self.shared = p + "shared_expert."
                self.shared_gate = ck.matrix(p + "shared_expert_gate.weight")
        elif mt == "ernie4_5_moe":
            p = "model.layers.%d.mlp." % index
            end = g("moe_layer_end_index", -1)
            dense = not (g("moe_layer_start_index", 1) <= index <=
                         (end if end >= 0 else g("num_hidden_layers") - 1)
                         and (index + 1) % g("moe_layer_interval", 1) == 0)
            self.method, self.score = "softmax_bias", "softmax"
            self.renorm_min = g("moe_norm_min", 1e-12)
            bias_name = "moe_statics.e_score_correction_bias"
            if ck.has(p + "shared_experts.up_proj.weight"):
                self.shared = p + "shared_experts."
        elif mt == "llama4":
            p = "language_model.model.layers.%d.feed_forward." % index
            step = g("interleave_moe_layer_step", 1)
            moe = g("moe_layers", list(range(step - 1, g("num_hidden_layers"), step)))
            dense = index not in moe
            self.method, self.score, self.norm = "sigmoid_top1", "sigmoid", False
            self.scale_input = True
            router_name = "router.weight"
            if not dense:
                self.shared = p + "shared_expert."
        elif mt == "mixtral":
            p = "model.layers.%d.block_sparse_moe." % index
            dense, self.method, self.score = False, "softmax_topk", "softmax"
            self.names = ("w1.weight", "w3.weight", "w2.weight")
        elif mt == "minimax_m2":
            # noaux_tc in one group, renormalised, unscaled; the bias on the block.
            p = "model.layers.%d.block_sparse_moe." % index
            dense, self.method, self.score = False, "noaux_tc", "sigmoid"
            self.names = ("w1.weight", "w3.weight", "w2.weight")
            bias_name = "e_score_correction_bias"
        elif mt == "gpt_oss":
            p = "model.layers.%d.mlp." % index
            dense, self.method, self.score = False, "topk_softmax", "softmax"
            self.limit = g("swiglu_limit", 7.0)
            self.router_bias = ck.array(p + "router.bias")
            router_name = "router.weight"
        elif mt == "deepseek_v4":
            p = "layers.%d.ffn." % index
            if not ck.has(p + "gate.weight"):
                p = "model." + p
            dense = False
            self.method = "hash" if index < g("num_hash_layers", 0) else "noaux_tc"
            self.score = g("scoring_func", "sqrtsoftplus")
            self.n_group, self.topk_group = g("n_group", 1), g("topk_group", 1)
            self.rsf, self.norm = g("routed_scaling_factor", 1.0), g("norm_topk_prob", False)
            self.limit = g("swiglu_limit")
            self.names = ("w1.weight", "w3.weight", "w2.weight")
            bias_name = "gate.bias"
            if ck.has(p + "shared_experts.w1.weight"):
                self.shared = p + "shared_experts."
        else:
            raise ValueError("no reference for %s" % mt)
        self.p, self.dense = p, dense
        if dense:
            return
        self.router = ck.matrix(p + router_name)
        self.E = self.router.shape[0]
        self.K = g("num_experts_per_tok", g("experts_per_token", g("moe_k")))
        if self.method in ("noaux_tc", "softmax_bias"):
            self.bias = ck.array(p + bias_name).reshape(-1)
        if self.method == "hash":
            self.tid2eid = ck.array(p + "gate.tid2eid")

    # ---- Routing ----------------------------------------------------------------------

    def logits(self, x: np.ndarray) -> np.ndarray:
        z = x @ self.router.T
        return z + self.router_bias if self.router_bias is not None else z

    def scores(self, z: np.ndarray) -> np.ndarray:
        if self.score == "softmax":
            return softmax(z)
        if self.score == "sigmoid":
            return sigmoid(z)
        return np.sqrt(np.logaddexp(0.0, z))  # sqrt(softplus(z))

    def route_logits(self, z: np.ndarray, token_ids: Optional[np.ndarray] = None) -> Routing:
        """The reference routing of logits Z [T, E]."""
        T, E, K = z.shape[0], self.E, self.K
        s = self.scores(z)
        tie = np.zeros(T, bool)
        if self.method == "hash":
            ids = self.tid2eid[np.asarray(token_ids)].astype(np.int64)
        else:
            keys = s + self.bias if self.method in ("noaux_tc", "softmax_bias") else z.copy()
            if self.n_group > 1:
                m = E // self.n_group
                grouped = keys.reshape(T, self.n_group, m)
                gscore = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)
                gorder = np.argsort(-gscore, axis=1, kind="stable")
                tie |= _near_tie(np.take_along_axis(gscore, gorder, 1), self.topk_group)
                masked = np.ones((T, self.n_group), bool)
                np.put_along_axis(masked, gorder[:, :self.topk_group], False, axis=1)
                keys = np.where(np.repeat(masked, m, axis=1), -np.inf, keys)
            order = np.argsort(-keys, axis=1, kind="stable")
            tie |= _near_tie(np.take_along_axis(keys, order, 1), K)
            ids = order[:, :K]
        if self.method == "topk_softmax":
            w = softmax(np.take_along_axis(z, ids, 1))
        else:
            w = np.take_along_axis(s, ids, 1)
            if self.method == "softmax_bias":
                w = w / np.maximum(w.sum(axis=1, keepdims=True), self.renorm_min)
            elif self.norm:
                w = w / w.sum(axis=1, keepdims=True)
        return Routing(ids, w * self.rsf, tie)

    # ---- Experts ----------------------------------------------------------------------

    def glu(self, prefix: str, x: np.ndarray) -> np.ndarray:
        ck, n = self.ck, self.names
        g = x @ ck.matrix(prefix + n[0]).T
        u = x @ ck.matrix(prefix + n[1]).T
        if self.limit is not None:
            g = np.minimum(g, self.limit)
            u = np.clip(u, -self.limit, self.limit)
        return (silu(g) * u) @ ck.matrix(prefix + n[2]).T

    def _gptoss(self, name: str, e: int) -> np.ndarray:
        """Expert E's [rows, K] of a stacked gpt-oss projection (MXFP4 or bf16 [E, K, rows])."""
        key = "%s#%d" % (name, e)
        if key not in self.ck.cache:
            if self.ck.has(name + "_blocks"):
                b = self.ck.raw(name + "_blocks")[e].numpy()
                s = self.ck.raw(name + "_scales")[e].numpy()
                self.ck.cache[key] = mxfp4(b.reshape(b.shape[0], -1), s)
            else:
                self.ck.cache[key] = self.ck.array(name)[e].T
        return self.ck.cache[key]

    def _llama4(self, e: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Expert E's gate, up [I, H] and down [H, I] from Llama-4's stacked input-major
        gate_up_proj [E, H, 2I] (gate the first I columns) and down_proj [E, I, H]."""
        key = "llama4#%d" % e
        if key not in self.ck.cache:
            gu = self.ck.raw(self.p + "experts.gate_up_proj")[e].to(torch.float64).numpy()
            down = self.ck.raw(self.p + "experts.down_proj")[e].to(torch.float64).numpy()
            n = gu.shape[1] // 2
            self.ck.cache[key] = (gu[:, :n].T, gu[:, n:].T, down.T)
        return self.ck.cache[key]

    def expert(self, e: int, x: np.ndarray) -> np.ndarray:
        if self.family == "llama4":
            gate, up, down = self._llama4(e)
            return (silu(x @ gate.T) * (x @ up.T)) @ down.T
        if self.family != "gpt_oss":
            return self.glu(self.p + "experts.%d." % e, x)
        p = self.p + "experts."
        z = x @ self._gptoss(p + "gate_up_proj", e).T + self.ck.array(p + "gate_up_proj_bias")[e]
        g = np.minimum(z[:, 0::2], self.limit)
        u = np.clip(z[:, 1::2], -self.limit, self.limit)
        h = g * sigmoid(1.702 * g) * (u + 1.0)
        return h @ self._gptoss(p + "down_proj", e).T + self.ck.array(p + "down_proj_bias")[e]

    def experts(self, x: np.ndarray, ids: np.ndarray, w: np.ndarray,
                shared: bool = True) -> np.ndarray:
        """sum_k w[t, k] expert(ids[t, k])(x[t]) (Llama-4: sum_k expert(ids[t, k])(x[t] w[t, k]))
        (+ the shared experts, times sigmoid(x · gate) where they have a gate)."""
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            for k in range(ids.shape[1]):
                e = int(ids[t, k])
                if self.scale_input:
                    out[t] += self.expert(e, x[t:t + 1] * w[t, k])[0]
                else:
                    out[t] += w[t, k] * self.expert(e, x[t:t + 1])[0]
        if shared and self.shared:
            y = self.glu(self.shared, x)
            if self.shared_gate is not None:
                y = sigmoid(x @ self.shared_gate.T) * y
            out += y
        return out

    def forward(self, x: np.ndarray, token_ids: Optional[np.ndarray] = None
                ) -> Tuple[np.ndarray, Optional[Routing]]:
        """The block output and (for a routed layer) the routing."""
        if self.dense:
            return self.glu(self.p, x), None
        r = self.route_logits(self.logits(x), token_ids)
        return self.experts(x, r.ids, r.weights), r


def _near_tie(sorted_keys: np.ndarray, n: int) -> np.ndarray:
    """[T] bool: among the first n + 1 sorted keys, two adjacent ones close but not equal."""
    top = sorted_keys[:, :n + 1]
    a, b = top[:, :-1], top[:, 1:]
    with np.errstate(invalid="ignore"):
        close = (a != b) & (np.abs(a - b) <= TIE * np.maximum(np.abs(a), np.abs(b)))
    return close.any(axis=1)


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """Relative Frobenius error ||got - want|| / ||want||."""
    got = np.asarray(got, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))


def same_routing(ids: np.ndarray, weights: np.ndarray, ref: Routing,
                 ordered: bool = False) -> List[str]:
    """Disagreements between the library's ids and weights and the reference (tokens with a
    near tie skipped): the same experts (as a set, or in order when ORDERED) and weights
    within 1e-5 relative, matched by expert."""
    bad = []
    for t in range(ids.shape[0]):
        if ref.near_tie[t]:
            continue
        got, want = [int(i) for i in ids[t]], [int(i) for i in ref.ids[t]]
        if (got != want) if ordered else (sorted(got) != sorted(want)):
            bad.append("token %d: ids %s, reference %s" % (t, got, want))
            continue
        for k, e in enumerate(got):
            rw = ref.weights[t, want.index(e)]
            if abs(weights[t, k] - rw) > 1e-5 * max(abs(rw), 1e-30):
                bad.append("token %d expert %d: weight %r, reference %r" % (t, e, weights[t, k],
                                                                          rw))
    return bad
