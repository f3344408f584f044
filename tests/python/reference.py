# reference.py — a float64 MoE block from a checkpoint's tensors (safetensors + numpy), for the tests.
"""An independent reading of the checkpoint: the config's fields and defaults are read here,
the tensors decoded from their stored bits (FP8 codes times their 128×128 block scales, MXFP4
codes times their 32-element E8M0 scales), and the block computed in float64 with the routing
formulas of docs/routing.md: scores, group masking, top-k, renormalisation, scaling, then
each expert's MLP and the shared experts."""
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
        t = self.raw(name)
        base = name[:-len("weight")]
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


@dataclass
class Routing:
    ids: np.ndarray      # [T, K] the reference's selection, in the library's slot order
    weights: np.ndarray  # [T, K]
    near_tie: np.ndarray  # [T] bool: a selection key within TIE of the one it beat


class LayerRef:
    """One layer of a checkpoint, in float64."""

    def __init__(self, ck: Checkpoint, index: int) -> None:
        self.ck, self.i = ck, index
        cfg, g = ck.cfg, ck.cfg.get
        mt = cfg["model_type"]
        self.family = mt
        self.limit: Optional[float] = None
        self.shared: Optional[str] = None
        self.bias: Optional[np.ndarray] = None
        self.router_bias: Optional[np.ndarray] = None
        self.n_group, self.topk_group, self.rsf, self.norm = 1, 1, 1.0, True
        self.names = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")
        if mt in ("deepseek_v3", "qwen3_moe"):
            p = "model.layers.%d.mlp." % index
            if mt == "deepseek_v3":
                dense = index < g("first_k_dense_replace", 0)
                self.method, self.score = "noaux_tc", g("scoring_func", "sigmoid")
                self.n_group, self.topk_group = g("n_group", 1), g("topk_group", 1)
                self.rsf, self.norm = g("routed_scaling_factor", 1.0), g("norm_topk_prob", False)
            else:
                dense = index in g("mlp_only_layers", [])
                self.method, self.score, self.norm = "softmax_topk", "softmax", \
                    g("norm_topk_prob", False)
            if ck.has(p + "shared_experts.up_proj.weight"):
                self.shared = p + "shared_experts."
        elif mt == "mixtral":
            p = "model.layers.%d.block_sparse_moe." % index
            dense, self.method, self.score = False, "softmax_topk", "softmax"
            self.names = ("w1.weight", "w3.weight", "w2.weight")
        elif mt == "gpt_oss":
            p = "model.layers.%d.mlp." % index
            dense, self.method, self.score = False, "topk_softmax", "softmax"
            self.limit = g("swiglu_limit", 7.0)
            self.router_bias = ck.array(p + "router.bias")
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
            if ck.has(p + "shared_experts.w1.weight"):
                self.shared = p + "shared_experts."
        else:
            raise ValueError("no reference for %s" % mt)
        self.p, self.dense = p, dense
        if dense:
            return
        router = p + ("router.weight" if mt == "gpt_oss" else "gate.weight")
        self.router = ck.matrix(router)
        self.E = self.router.shape[0]
        self.K = g("num_experts_per_tok", g("experts_per_token"))
        if self.method == "noaux_tc":
            bname = p + ("gate.e_score_correction_bias" if mt == "deepseek_v3" else "gate.bias")
            self.bias = ck.array(bname)
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
            keys = s + self.bias if self.method == "noaux_tc" else z.copy()
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
            if self.norm:
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

    def expert(self, e: int, x: np.ndarray) -> np.ndarray:
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
        """sum_k w[t, k] expert(ids[t, k])(x[t]) (+ the shared experts)."""
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            for k in range(ids.shape[1]):
                out[t] += w[t, k] * self.expert(int(ids[t, k]), x[t:t + 1])[0]
        if shared and self.shared:
            out += self.glu(self.shared, x)
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
