#!/usr/bin/env python3
# route_ref.py — inputs and a float64 reference of every routing method, for test_route.sh.
"""Standard library only. The reference reads the Hugging Face config itself (its own reading
of the fields and defaults, not libmoe's) and routes in float64 with the literal formulas of
the routing methods, then compares with what `moe route` wrote:

  make-many CASES   for each line "NAME CONFIG LAYER T SEED OPTIONS" (tab-separated; the
                    options: --special, --bias normal|negative, --table i32|i64,
                    --ids i32|i64) write NAME/logits.npy, and bias.npy, tid2eid.npy and
                    ids.npy as the layer needs them, next to CASES
  check-many CASES  compare each NAME/out_ids.npy and NAME/out_w.npy with the reference
  npy PATH DTYPE SHAPE [--fill X | --seed S]   write any array (SHAPE "2,3"; "" for 0-d)
  set PATH INDEX VALUE   overwrite one element (flat index) of an array, same dtype
  dup PATH DST SRC       element DST takes the value of element SRC
  head SRC DST N         write the first N rows of a 2-D array
  batch CMD ARGS ; CMD ARGS ; ...   several of the above in one process

Tolerances (docs/design.md): ids exact except where two of the reference's keys that decide the
selection are within 1e-5 (relative) without being equal; weights within 1e-5 relative.
"""
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_lib import DESCR, main, npy_read, npy_write  # noqa: E402

TIE = 1e-5
WTOL = 1e-5

# ---- The config, read independently -------------------------------------------------------


def layer_plan(cfg, layer):
    """The routing of one layer: a dict, or None for a dense layer."""
    mt = cfg["model_type"]
    g = cfg.get
    r = {"n_group": 1, "topk_group": 1, "rsf": 1.0, "bias": False}
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        if layer < g("first_k_dense_replace", 0) or layer % g("moe_layer_freq", 1):
            return None
        v2 = mt == "deepseek_v2"
        r.update(E=cfg["n_routed_experts"], K=cfg["num_experts_per_tok"],
                 method=g("topk_method", "greedy" if v2 else "noaux_tc"),
                 score=g("scoring_func", "softmax" if v2 else "sigmoid"),
                 n_group=g("n_group", 1), topk_group=g("topk_group", 1),
                 norm=g("norm_topk_prob", False), rsf=g("routed_scaling_factor", 1.0))
        r["bias"] = r["method"] == "noaux_tc"
    elif mt == "deepseek_v4":
        r.update(E=cfg["n_routed_experts"], K=cfg["num_experts_per_tok"],
                 score=g("scoring_func", "sqrtsoftplus"), norm=g("norm_topk_prob", False),
                 rsf=g("routed_scaling_factor", 1.0), vocab=cfg.get("vocab_size"))
        if layer < g("num_hash_layers", 0):
            r["method"] = "hash"
        else:
            r.update(method="noaux_tc", bias=True, n_group=g("n_group", 1),
                     topk_group=g("topk_group", 1))
    elif mt == "qwen3_moe":
        step = g("decoder_sparse_step", 1)
        if layer in g("mlp_only_layers", []) or cfg["num_experts"] == 0 or (layer + 1) % step:
            return None
        r.update(E=cfg["num_experts"], K=cfg["num_experts_per_tok"], method="softmax_topk",
                 score="softmax", norm=g("norm_topk_prob", False))
    elif mt == "mixtral":
        r.update(E=cfg["num_local_experts"], K=cfg["num_experts_per_tok"],
                 method="softmax_topk", score="softmax", norm=True)
    elif mt == "ernie4_5_moe":
        # Ernie4_5_MoeDecoderLayer: MoE iff start <= layer <= end (-1: the last layer) and
        # (layer + 1) % interval == 0; Ernie4_5_MoeSparseMoeBlock selects the top-k of the
        # softmax plus e_score_correction_bias and divides the unbiased softmax at the selected
        # by max(their sum, moe_norm_min).
        end = g("moe_layer_end_index", -1)
        end = cfg["num_hidden_layers"] - 1 if end == -1 else end
        if (not g("moe_layer_start_index", 1) <= layer <= end
                or (layer + 1) % g("moe_layer_interval", 1)):
            return None
        r.update(E=g("moe_num_experts", g("num_experts")),
                 K=g("moe_k", g("num_experts_per_tok")), method="softmax_bias",
                 score="softmax", norm=True, norm_min=g("moe_norm_min", 1e-12), bias=True)
    elif mt == "gpt_oss":
        k = cfg.get("num_experts_per_tok", cfg.get("experts_per_token"))
        r.update(E=cfg["num_local_experts"], K=k, method="topk_softmax", score="softmax",
                 norm=True)
    else:
        raise SystemExit("route_ref.py: unknown model_type %r" % mt)
    if not 0 <= layer < cfg["num_hidden_layers"]:
        raise SystemExit("route_ref.py: layer %d out of range" % layer)
    return r


def routed_plan(cfg_path, layer):
    r = layer_plan(json.load(open(cfg_path)), layer)
    if r is None:
        raise SystemExit("route_ref.py: layer %d of %s is dense" % (layer, cfg_path))
    return r


# ---- Reference routing in float64 ---------------------------------------------------------


def finite(x):
    return not (math.isnan(x) or math.isinf(x))


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def sqrtsoftplus(z):
    return math.sqrt(max(z, 0.0) + math.log1p(math.exp(-abs(z))))


def softmax(z):
    """Over the finite entries; a non-finite logit gets 0."""
    live = [x for x in z if finite(x)]
    if not live:
        return [0.0] * len(z)
    m = max(live)
    e = [math.exp(x - m) if finite(x) else 0.0 for x in z]
    s = sum(e)
    return [x / s for x in e]


def order(keys):
    """Expert ids by key, largest first, lower id on ties; None (excluded) last, by id."""
    real = sorted((i for i, k in enumerate(keys) if k is not None), key=lambda i: (-keys[i], i))
    return real + [i for i, k in enumerate(keys) if k is None]


def close(a, b):
    return a != b and abs(a - b) <= TIE * max(abs(a), abs(b))


def near_tie(keys, ranked, n):
    """True when two adjacent keys among the first n + 1 of RANKED are close but not equal."""
    top = [keys[i] for i in ranked[:n + 1] if keys[i] is not None]
    return any(close(a, b) for a, b in zip(top, top[1:]))


def scores(r, z):
    if r["score"] == "softmax":
        return softmax(z)
    f = sigmoid if r["score"] == "sigmoid" else sqrtsoftplus
    return [f(x) if finite(x) else 0.0 for x in z]


def select(r, z, bias, tok_row):
    """(reference ids, keys after group masking, expert near-tie, group near-tie, scores)."""
    E, K = r["E"], r["K"]
    s = scores(r, z)
    if r["method"] == "hash":
        return list(tok_row), None, False, False, s
    if r["method"] in ("noaux_tc", "softmax_bias"):
        keys = [s[i] + bias[i] if finite(z[i]) else None for i in range(E)]
    else:
        # topk_softmax selects on the logits; softmax is monotone in the logit, so the
        # softmax methods select on the exact logit too, free of ties that only rounding
        # (an underflow to 0) would create.
        keys = [x if finite(x) else None for x in z]
    group_tie = False
    G, TG = r["n_group"], r["topk_group"]
    if r["method"] in ("noaux_tc", "group_limited_greedy") and G > 1:
        m = E // G
        gscore = []
        for gi in range(G):
            ks = sorted((keys[i] for i in range(gi * m, (gi + 1) * m) if keys[i] is not None),
                        reverse=True)
            if r["method"] == "noaux_tc":  # the sum of the two largest biased keys
                gscore.append(ks[0] + ks[1] if len(ks) >= 2 else None)
            else:  # the largest score
                gscore.append(ks[0] if ks else None)
        granked = order(gscore)
        group_tie = near_tie(gscore, granked, TG)
        kept = set(granked[:TG])
        keys = [k if i // m in kept else None for i, k in enumerate(keys)]
    ranked = order(keys)
    return ranked[:K], keys, near_tie(keys, ranked, K), group_tie, s


def weights_for(r, z, s, ids):
    """The combine weights of the selection IDS (the library's or the reference's)."""
    if r["method"] == "topk_softmax":
        w = softmax([z[i] for i in ids])
    else:
        w = [s[i] if finite(z[i]) else 0.0 for i in ids]
        if r["norm"]:
            if r["method"] in ("greedy", "group_limited_greedy"):
                raise SystemExit("route_ref.py: deepseek_v2 with norm_topk_prob true: engines "
                                 "disagree on rsf (routing.md 3.4); not checked here")
            d = max(sum(w), r.get("norm_min", 0.0))
            w = [x / d if d > 0 else 0.0 for x in w]
    return [x * r["rsf"] for x in w]


# ---- make ---------------------------------------------------------------------------------


def special_rows(rng, E, K, G, T):
    """Rows that stress the contract; each is a list of E floats."""
    rows = []
    rows.append([0.25] * E)  # all equal: ties to the lower id
    row = [rng.gauss(0, 1) for _ in range(E)]
    for i in rng.sample(range(E), min(3, E - K)):
        row[i] = float("nan")
    rows.append(row)  # a few NaN
    row = [rng.gauss(0, 1) for _ in range(E)]
    i, j = rng.sample(range(E), 2)
    row[i], row[j] = float("inf"), float("-inf")
    rows.append(row)  # one +Inf, one -Inf: neither preferred, both weight 0
    row = [rng.gauss(0, 1) for _ in range(E)]
    # K huge logits inside one group, so that they are the selection whatever the group
    # rule, and every other softmax score underflows to 0 alike.
    m = E // G if E // G >= K else E
    g0 = rng.randrange(E // m) * m
    huge = rng.sample(range(g0, g0 + m), K)
    for i in huge:
        row[i] = 1e30
    for i in rng.sample([i for i in range(E) if i not in huge], min(2, E - K)):
        row[i] = -1e30
    rows.append(row)  # huge magnitudes
    rows.append([float("nan")] * E)  # all NaN: only validity is checked
    return rows[:T]


def make_case(d, cfg_path, layer, T, seed, opts):
    os.makedirs(d, exist_ok=True)
    r = routed_plan(cfg_path, layer)
    rng = random.Random(seed)
    E, K = r["E"], r["K"]
    sd = {"softmax": 2.0, "sigmoid": 1.5, "sqrtsoftplus": 2.0}[r["score"]]
    rows = special_rows(rng, E, K, r["n_group"], T) if "--special" in opts else []
    while len(rows) < T:
        rows.append([rng.gauss(0, sd) for _ in range(E)])
    rng.shuffle(rows)
    npy_write(d + "/logits.npy", "<f4", (T, E), [x for row in rows for x in row])
    if r["bias"]:
        mode = opts[opts.index("--bias") + 1] if "--bias" in opts else "normal"
        if mode == "negative":
            b = [rng.uniform(-3.0, -1.5) for _ in range(E)]
        elif r["score"] == "sqrtsoftplus":
            b = [8.0 + rng.uniform(-0.1, 0.1) for _ in range(E)]
        elif r["method"] == "softmax_bias":  # of the probabilities' size: both decide
            b = [rng.gauss(0, 1.0 / E) for _ in range(E)]
        else:
            b = [rng.gauss(0, 0.2) for _ in range(E)]
        npy_write(d + "/bias.npy", "<f4", (E,), b)
    if r["method"] == "hash":
        tdt = opts[opts.index("--table") + 1] if "--table" in opts else "i64"
        idt = opts[opts.index("--ids") + 1] if "--ids" in opts else "i32"
        V = r["vocab"]
        table = []
        for _ in range(V):
            table.extend(rng.sample(range(E), K))
        npy_write(d + "/tid2eid.npy", "<" + tdt[0] + ("4" if tdt == "i32" else "8"), (V, K),
                  table)
        ids = [rng.randrange(V) for _ in range(T)]
        if T > 2:
            ids[0], ids[1] = 0, V - 1  # the first and last rows of the table
        npy_write(d + "/ids.npy", "<" + idt[0] + ("4" if idt == "i32" else "8"), (T,), ids)


# ---- check --------------------------------------------------------------------------------


def check_case(d, cfg_path, layer):
    """A one-line summary; raises Mismatch with the details when the outputs are wrong."""
    r = routed_plan(cfg_path, layer)
    E, K = r["E"], r["K"]
    _, lshape, logits = npy_read(d + "/logits.npy")
    T = lshape[0]
    bias = npy_read(d + "/bias.npy")[2] if r["bias"] else None
    table = toks = None
    if r["method"] == "hash":
        table = npy_read(d + "/tid2eid.npy")[2]
        toks = npy_read(d + "/ids.npy")[2]
    idescr, ishape, out_ids = npy_read(d + "/out_ids.npy")
    wdescr, wshape, out_w = npy_read(d + "/out_w.npy")
    errors = []
    if (idescr, ishape) != ("<i4", (T, K)):
        errors.append("ids: %s %r, want <i4 (%d, %d)" % (idescr, ishape, T, K))
    if (wdescr, wshape) != ("<f4", (T, K)):
        errors.append("weights: %s %r, want <f4 (%d, %d)" % (wdescr, wshape, T, K))
    if errors:
        raise Mismatch("; ".join(errors))
    ties = nonfinite_rows = bias_moved = floored = 0
    for t in range(T):
        z = list(logits[t * E:(t + 1) * E])
        ids = list(out_ids[t * K:(t + 1) * K])
        w = list(out_w[t * K:(t + 1) * K])
        tok_row = None
        if table is not None:
            tok = toks[t]
            tok_row = table[tok * K:(tok + 1) * K]
        ref, keys, expert_tie, group_tie, s = select(r, z, bias, tok_row)
        where = "row %d" % t
        if len(set(ids)) != K or not all(0 <= i < E for i in ids):
            errors.append("%s: ids %r not %d distinct ids in [0, %d)" % (where, ids, K, E))
            continue
        if not any(finite(x) for x in z):
            nonfinite_rows += 1
            if any(x != 0.0 for x in w):
                errors.append("%s: all logits non-finite, weights %r not 0" % (where, w))
            # Without groups the order of excluded experts is defined (lower id first); hash
            # rows are the table's whatever the logits.
            if r["n_group"] == 1 and ids != ref:
                errors.append("%s: all logits non-finite, ids %r, want %r" % (where, ids, ref))
            continue
        if bias is not None and set(ref) != set(order([s[i] if finite(z[i]) else None
                                                       for i in range(E)])[:K]):
            bias_moved += 1
        if ids != ref:
            if not (expert_tie or group_tie):
                errors.append("%s: ids %r, reference %r" % (where, ids, ref))
                continue
            ties += 1
            kth = keys[ref[K - 1]] if keys is not None else None
            if not group_tie and kth is not None and any(
                    keys[i] is None or keys[i] < kth - TIE * abs(kth) for i in ids):
                errors.append("%s: ids %r, reference %r: not a near-tie" % (where, ids, ref))
                continue
        want = weights_for(r, z, s, ids)
        floored += sum(s[i] for i in ids if finite(z[i])) < r.get("norm_min", 0.0)
        for j in range(K):
            if not finite(w[j]) or abs(w[j] - want[j]) > WTOL * abs(want[j]) + 1e-30:
                errors.append("%s slot %d (id %d): weight %r, reference %r"
                              % (where, j, ids[j], w[j], want[j]))
                break
    if errors:
        raise Mismatch("%d of %d rows differ from the reference:\n    %s"
                       % (len(errors), T, "\n    ".join(errors[:20])))
    summary = ("%d rows, %d near-ties, %d all-non-finite rows, bias moved the selection of %d"
               % (T, ties, nonfinite_rows, bias_moved))
    if "norm_min" in r:
        summary += ", the floor %g bound on %d" % (r["norm_min"], floored)
    return summary


class Mismatch(Exception):
    pass


# ---- Many cases per process (python starts slowly) ----------------------------------------


def read_cases(path):
    """Lines "NAME<TAB>CONFIG<TAB>LAYER<TAB>T<TAB>SEED<TAB>OPTIONS"; the case folder is NAME
    under the folder of PATH."""
    base = os.path.dirname(os.path.abspath(path))
    for ln in open(path):
        f = ln.rstrip("\n").split("\t")
        yield f[0], os.path.join(base, f[0]), f[1], int(f[2]), int(f[3]), int(f[4]), f[5].split()


def make_many(argv):
    for _, d, cfg, layer, t, seed, opts in read_cases(argv[0]):
        make_case(d, cfg, layer, t, seed, opts)


def check_many(argv):
    """Prints "ok NAME: summary" or "FAIL NAME: why" per case; exit 1 if any failed."""
    bad = 0
    for name, d, cfg, layer, _, _, _ in read_cases(argv[0]):
        try:
            print("ok %s: %s" % (name, check_case(d, cfg, layer)))
        except (Mismatch, OSError, SystemExit) as e:
            print("FAIL %s: %s" % (name, e))
            bad += 1
    sys.exit(1 if bad else 0)


# ---- small tools --------------------------------------------------------------------------


def make_npy(argv):
    path, dtype, shape_txt = argv[0], argv[1], argv[2]
    shape = tuple(int(x) for x in shape_txt.split(",") if x != "")
    count = 1
    for n in shape:
        count *= n
    descr = DESCR[dtype]
    if "--fill" in argv:
        v = argv[argv.index("--fill") + 1]
        values = [float(v) if dtype == "f32" else int(v)] * count
    else:
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 1
        rng = random.Random(seed)
        values = [rng.gauss(0, 1) if dtype == "f32" else rng.randrange(100) for _ in range(count)]
    npy_write(path, descr, shape, values)


def set_value(argv):
    path, index, value = argv[0], int(argv[1]), argv[2]
    descr, shape, data = npy_read(path)
    data[index] = float(value) if descr == "<f4" else int(value)
    npy_write(path, descr, shape, data)


def dup(argv):
    """Element DST (flat index) takes the value of element SRC."""
    path, dst, src = argv[0], int(argv[1]), int(argv[2])
    descr, shape, data = npy_read(path)
    data[dst] = data[src]
    npy_write(path, descr, shape, data)


def head(argv):
    """The first N rows of a 2-D array."""
    src, dst, rows = argv[0], argv[1], int(argv[2])
    descr, shape, data = npy_read(src)
    npy_write(dst, descr, (rows, shape[1]), data[:rows * shape[1]])


CMDS = {"make-many": make_many, "check-many": check_many, "npy": make_npy, "set": set_value,
        "dup": dup, "head": head}

if __name__ == "__main__":
    main(CMDS, __doc__)
