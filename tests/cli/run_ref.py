#!/usr/bin/env python3
# run_ref.py — inputs, checkpoint tensors and a float64 MoE block reference, for test_run.sh.
"""Standard library only (the .npy and safetensors readers are ref_lib.py's). Commands:

  hidden PATH T H SEED [--special]  f32 [T, H] hidden states, N(0, 1); --special puts a NaN
                                    in row 0, +Inf and -Inf in row 1 and 1e30 in row 2
  ids PATH DTYPE T V SEED           token ids [T] (i32 or i64) in [0, V)
  extract DIR SUFFIX OUT            the checkpoint tensor whose name ends with SUFFIX, as
                                    .npy (f32 for float dtypes, exact; i64/i32 as stored)
  rows SRC DST A B                  rows [A, B) of a 1-D or 2-D array
  expect PATH DTYPE SHAPE           fail unless the array has this dtype (f32, i32, i64) and
                                    shape ("4,256"; "0,256" for no rows)
  same-rows BIG SMALL A             SMALL's rows equal BIG's rows from A on, byte for byte
  ids-valid IDS E                   every id in [0, E), distinct within its row
  bf16-valued PATH                  every f32 value is a bf16 value (low 16 bits zero)
  block DIR LAYER X L IDS W Y [tile]
                                    the float64 reference of the block: logits from the
                                    router weight (per token, normwise relative error
                                    ||l - ref|| / ||ref|| <= 1e-5: an elementwise bound
                                    would fail on logits near 0, where fp32 accumulation's
                                    absolute error is the right measure), then, with
                                    the library's ids and weights (checked elsewhere against
                                    `moe route`), the routed experts and shared experts from
                                    the checkpoint's weights: relative Frobenius error of Y
                                    <= 1e-2 (bf16 activations), <= 2e-2 for MXFP4 experts
                                    (activations quantised per 32-block to int8: docs/design.md),
                                    and <= 1e-4 against a reference that quantises x and h
                                    as the q8 recipe does; with "tile" (the run asked for the
                                    tile recipe, which MXFP4 experts take with bf16
                                    activations) <= 1e-2 for every format.
                                    qwen3_moe, mixtral, deepseek_v2/v3, kimi_k2 (bf16 or FP8
                                    block scales), gpt_oss (bf16 or MXFP4) and deepseek_v4
                                    (MXFP4 or FP8 experts, FP8 shared experts, clamped GLU).
  batch CMD ARGS ; CMD ARGS ; ...   several of the above in one process

Every failed check prints one line on stderr and exits 1.
"""
import array
import json
import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_lib import DESCR, main, npy_read, npy_write, st_tensors  # noqa: E402

LOGIT_TOL = 1e-5
OUT_TOL = 1e-2
OUT_TOL_Q8 = 2e-2
# Against a reference that quantises x and h as the q8 recipe does (kernels/expert.h): what
# is left is fp32 accumulation, and an h value that lands on the other side of a rounding
# step now and then.
OUT_TOL_Q8_EMULATED = 1e-4


def fail(msg):
    print("run_ref.py: " + msg, file=sys.stderr)
    sys.exit(1)


# ---- Checkpoint tensors --------------------------------------------------------------------


def e4m3(c):
    """E4M3 "fn" from its fields: bias 7, subnormals, 0x7F/0xFF NaN."""
    if c & 0x7F == 0x7F:
        return float("nan")
    e, m = (c >> 3) & 15, c & 7
    v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if c & 0x80 else v


E4M3 = [e4m3(c) for c in range(256)]


def e2m1(c):
    """E2M1 from its fields: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0."""
    e, m = (c >> 1) & 3, c & 1
    v = m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1)
    return -v if c & 8 else v


E2M1 = [e2m1(c) for c in range(16)]


def mxfp4_rows(codes, scales, rows_, k):
    """[rows][k] floats from packed E2M1 codes (two per byte, low nibble = even column) and
    one E8M0 scale byte per row and 32 columns."""
    out = []
    for r in range(rows_):
        cb, sb = codes[r * k // 2:(r + 1) * k // 2], scales[r * k // 32:(r + 1) * k // 32]
        out.append([E2M1[(cb[c // 2] >> (4 * (c % 2))) & 15] * 2.0 ** (sb[c // 32] - 127)
                    for c in range(k)])
    return out


def values(dtype, b):
    """The stored values as Python floats (or ints), decoded from their bit fields."""
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(b) // 4), b))
    if dtype == "BF16":
        return list(struct.unpack("<%df" % (len(b) // 2),
                                  b"".join(b"\0\0" + b[i:i + 2] for i in range(0, len(b), 2))))
    if dtype == "F16":
        return list(struct.unpack("<%de" % (len(b) // 2), b))
    if dtype == "F8_E4M3":
        return [E4M3[c] for c in b]
    if dtype == "F8_E8M0":
        return [float("nan") if c == 255 else 2.0 ** (c - 127) for c in b]
    if dtype == "I64":
        return list(struct.unpack("<%dq" % (len(b) // 8), b))
    if dtype == "I32":
        return list(struct.unpack("<%di" % (len(b) // 4), b))
    fail("unexpected tensor dtype %s" % dtype)


def find(tensors, suffix):
    hits = [n for n in tensors if n.endswith(suffix)]
    if len(hits) != 1:
        fail("%d tensors end with %r" % (len(hits), suffix))
    return hits[0]


def extract(argv):
    d, suffix, out = argv
    t = st_tensors(d)
    dtype, shape, b = t[find(t, suffix)]
    descr = {"I64": "<i8", "I32": "<i4"}.get(dtype, "<f4")
    npy_write(out, descr, tuple(shape), values(dtype, b))


# ---- Inputs and array checks ---------------------------------------------------------------


def hidden(argv):
    path, T, H, seed = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    rng = random.Random(seed)
    v = [rng.gauss(0, 1) for _ in range(T * H)]
    if "--special" in argv[4:] and T >= 3:
        v[0] = float("nan")
        v[H], v[H + 1] = float("inf"), float("-inf")
        v[2 * H + 3] = 1e30
    npy_write(path, "<f4", (T, H), v)


def ids(argv):
    path, dt, T, V, seed = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    rng = random.Random(seed)
    npy_write(path, DESCR[dt], (T,), [rng.randrange(V) for _ in range(T)])


def rows(argv):
    src, dst, a, b = argv[0], argv[1], int(argv[2]), int(argv[3])
    descr, shape, data = npy_read(src)
    w = shape[1] if len(shape) > 1 else 1
    npy_write(dst, descr, (b - a,) + tuple(shape[1:]), data[a * w:b * w])


def expect(argv):
    path, dt = argv[0], argv[1]
    shape = tuple(int(x) for x in argv[2].split(",") if x != "")
    descr, got, _ = npy_read(path)
    if descr != DESCR[dt] or tuple(got) != shape:
        fail("%s: %s %s, want %s %s" % (path, descr, tuple(got), DESCR[dt], shape))


def same_rows(argv):
    big, small, a = argv[0], argv[1], int(argv[2])
    _, bs, bd = npy_read(big)
    _, ss, sd = npy_read(small)
    w = ss[1]
    if bs[1] != w or a + ss[0] > bs[0]:
        fail("%s %s does not fit %s %s at row %d" % (small, ss, big, bs, a))
    if bd[a * w:(a + ss[0]) * w].tobytes() != sd.tobytes():
        for r in range(ss[0]):
            if bd[(a + r) * w:(a + r + 1) * w].tobytes() != sd[r * w:(r + 1) * w].tobytes():
                fail("row %d of %s differs from row %d of %s" % (r, small, a + r, big))


def ids_valid(argv):
    path, E = argv[0], int(argv[1])
    _, shape, data = npy_read(path)
    K = shape[1]
    for r in range(shape[0]):
        row = list(data[r * K:(r + 1) * K])
        if len(set(row)) != K or any(not 0 <= x < E for x in row):
            fail("%s row %d: ids %s (E = %d)" % (path, r, row, E))


def bf16_valued(argv):
    _, _, data = npy_read(argv[0])
    bits = array.array("I", data.tobytes())
    for i, b in enumerate(bits):
        if b & 0xFFFF:
            fail("%s[%d] = %r is not a bf16 value" % (argv[0], i, data[i]))


# ---- The float64 block reference -----------------------------------------------------------


class Weights:
    """Dequantised weights of one checkpoint, decoded lazily per tensor."""

    def __init__(self, d):
        self.t = st_tensors(d)
        self.cache = {}

    def matrix(self, name):
        """[rows][cols] floats; FP8 codes times their 128x128 block's scale."""
        if name in self.cache:
            return self.cache[name]
        dtype, shape, b = self.t[name]
        if dtype in ("I8", "U8"):  # DeepSeek-V4 fp4: codes [out, in/2], .scale [out, in/32]
            sb = self.t[name[:-len("weight")] + "scale"][2]
            m = mxfp4_rows(b, sb, shape[0], shape[1] * 2)
            self.cache[name] = m
            return m
        v = values(dtype, b)
        rows_, cols = shape
        m = [v[r * cols:(r + 1) * cols] for r in range(rows_)]
        if dtype == "F8_E4M3":
            sname = name + "_scale_inv" if name + "_scale_inv" in self.t else \
                name[:-len("weight")] + "scale"
            sdt, sshape, sb = self.t[sname]
            s = values(sdt, sb)
            sc = sshape[1]
            m = [[x * s[(r // 128) * sc + c // 128] for c, x in enumerate(row)]
                 for r, row in enumerate(m)]
        self.cache[name] = m
        return m

    def vector(self, name):
        dtype, _, b = self.t[name]
        return values(dtype, b)

    def stacked(self, name, e):
        """Expert E's slice of a stacked [E, ...] tensor, as a flat list."""
        dtype, shape, b = self.t[name]
        n = len(b) // shape[0]
        return values(dtype, b[e * n:(e + 1) * n])

    def stacked_mxfp4(self, name, e):
        """Expert E's [rows][K] of gpt-oss's NAME_blocks [E, rows, K/32, 16] and
        NAME_scales [E, rows, K/32]."""
        _, shape, b = self.t[name + "_blocks"]
        sb = self.t[name + "_scales"][2]
        rows_, k = shape[1], shape[2] * 32
        return mxfp4_rows(b[e * rows_ * k // 2:(e + 1) * rows_ * k // 2],
                          sb[e * rows_ * k // 32:(e + 1) * rows_ * k // 32], rows_, k)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def q8(x):
    """The values the q8 recipe's kernels see for the f32 row X: per 32-block d = amax / 127
    in f32, q = x / d in f32 rounded to the nearest integer, ties to even (Python's round),
    clamped to [-127, 127]; each value becomes q · d. (Finite rows only.)"""
    out = []
    for b in range(0, len(x), 32):
        blk = [f32(v) for v in x[b:b + 32]]
        d = f32(max(abs(v) for v in blk) / 127.0)
        out += [0.0] * len(blk) if d == 0 else \
            [max(-127, min(127, round(f32(v / d)))) * d for v in blk]
    return out


def matvec(m, x):
    return [math.fsum(a * b for a, b in zip(row, x)) for row in m]


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def silu(z):
    return z * sigmoid(z)


def glu_mlp(w, prefix, names, x, limit=None, quant=None):
    """down(silu(gate x) * up x) with names (gate, up, down) below PREFIX; with LIMIT
    (DeepSeek-V4's swiglu_limit) gate is clamped to <= LIMIT and up to [-LIMIT, LIMIT];
    QUANT (q8 or None) applied to x and to h."""
    if quant:
        x = quant(x)
    g = matvec(w.matrix(prefix + names[0]), x)
    u = matvec(w.matrix(prefix + names[1]), x)
    if limit is not None:
        g = [min(a, limit) for a in g]
        u = [max(-limit, min(b, limit)) for b in u]
    h = [silu(a) * b for a, b in zip(g, u)]
    if quant:
        h = quant([f32(v) for v in h])
    return matvec(w.matrix(prefix + names[2]), h)


def gptoss_expert(w, p, e, x, limit, alpha, quant=None):
    """gpt-oss bf16: gate_up [H, 2I] (gate in the even columns, up in the odd), down [I, H];
    MXFP4: gate_up_proj_blocks rows [2I][H] (gate in the even rows, up in the odd), down rows
    [H][I]."""
    H = len(x)
    if quant:
        x = quant(x)
    gub = w.stacked(p + "experts.gate_up_proj_bias", e)
    n2 = len(gub)
    if p + "experts.gate_up_proj_blocks" in w.t:
        z = [a + b for a, b in zip(matvec(w.stacked_mxfp4(p + "experts.gate_up_proj", e), x),
                                   gub)]
    else:
        gu = w.stacked(p + "experts.gate_up_proj", e)
        z = [math.fsum(gu[h * n2 + c] * x[h] for h in range(H)) + gub[c] for c in range(n2)]
    act = []
    for i in range(n2 // 2):
        g = min(z[2 * i], limit)
        u = max(-limit, min(z[2 * i + 1], limit))
        act.append(g * sigmoid(alpha * g) * (u + 1.0))
    if quant:
        act = quant([f32(v) for v in act])
    db = w.stacked(p + "experts.down_proj_bias", e)
    if p + "experts.down_proj_blocks" in w.t:
        return [a + b for a, b in zip(matvec(w.stacked_mxfp4(p + "experts.down_proj", e), act),
                                      db)]
    down = w.stacked(p + "experts.down_proj", e)
    return [math.fsum(down[i * H + h] * act[i] for i in range(len(act))) + db[h]
            for h in range(H)]


def block(argv):
    d, layer, xp, lp, ip, wp, yp = argv[0], int(argv[1]), *argv[2:7]
    tile = argv[7:8] == ["tile"]
    cfg = json.load(open(os.path.join(d, "config.json")))
    mt = cfg["model_type"]
    w = Weights(d)
    _, (T, H), x = npy_read(xp)
    _, (_, E), lib_logits = npy_read(lp)
    _, (_, K), lib_ids = npy_read(ip)
    _, _, lib_w = npy_read(wp)
    _, _, y = npy_read(yp)
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2", "qwen3_moe"):
        p = "model.layers.%d.mlp." % layer
        router, rbias = p + "gate.weight", None
        names, expert = ("gate_proj.weight", "up_proj.weight", "down_proj.weight"), \
            lambda e: p + "experts.%d." % e
        shared = p + "shared_experts." if p + "shared_experts.up_proj.weight" in w.t else None
    elif mt == "mixtral":
        p = "model.layers.%d.block_sparse_moe." % layer
        router, rbias = p + "gate.weight", None
        names, expert = ("w1.weight", "w3.weight", "w2.weight"), lambda e: p + "experts.%d." % e
        shared = None
    elif mt == "gpt_oss":
        p = "model.layers.%d.mlp." % layer
        router, rbias, shared = p + "router.weight", p + "router.bias", None
    elif mt == "deepseek_v4":
        p = "layers.%d.ffn." % layer
        if p + "gate.weight" not in w.t:
            p = "model." + p
        router, rbias = p + "gate.weight", None
        names, expert = ("w1.weight", "w3.weight", "w2.weight"), lambda e: p + "experts.%d." % e
        shared = p + "shared_experts." if p + "shared_experts.w1.weight" in w.t else None
    else:
        fail("no block reference for %s" % mt)
    wr = w.matrix(router)
    rb = w.vector(rbias) if rbias else [0.0] * E
    limit = cfg.get("swiglu_limit") if mt == "deepseek_v4" else None
    mx = not tile and ((cfg.get("quantization_config") or {}).get("quant_method") == "mxfp4" or
                       (mt == "deepseek_v4" and cfg.get("expert_dtype", "fp4") == "fp4"))
    tol = OUT_TOL_Q8 if mx else OUT_TOL
    err2 = ref2 = emu2 = 0.0
    for t in range(T):
        xt = [float(v) for v in x[t * H:(t + 1) * H]]
        z = [a + b for a, b in zip(matvec(wr, xt), rb)]
        got = lib_logits[t * E:(t + 1) * E]
        dz = math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(got, z)))
        nz = math.sqrt(math.fsum(b * b for b in z))
        if not dz <= LOGIT_TOL * nz:
            fail("token %d: logits %s, float64 reference %s: relative error %.3g > %g"
                 % (t, list(got), z, dz / nz if nz else dz, LOGIT_TOL))
        # The exact reference; for MXFP4 experts also one with the q8 recipe's quantisation.
        refs = []
        for quant in (None, q8) if mx else (None,):
            acc = [0.0] * H
            for k in range(K):
                e, wk = lib_ids[t * K + k], lib_w[t * K + k]
                if mt == "gpt_oss":
                    o = gptoss_expert(w, p, e, xt, cfg.get("swiglu_limit", 7.0), 1.702, quant)
                else:
                    o = glu_mlp(w, expert(e), names, xt, limit, quant)
                acc = [a + wk * b for a, b in zip(acc, o)]
            if shared:
                acc = [a + b for a, b in zip(acc, glu_mlp(w, shared, names, xt, limit))]
            refs.append(acc)
        acc = refs[0]
        for h in range(H):
            err2 += (y[t * H + h] - acc[h]) ** 2
            ref2 += acc[h] ** 2
            if mx:
                emu2 += (y[t * H + h] - refs[1][h]) ** 2
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    if not rel <= tol:
        fail("%s layer %d: output relative Frobenius error %.3g > %g" % (d, layer, rel, tol))
    emu = math.sqrt(emu2 / ref2) if ref2 > 0 else math.sqrt(emu2)
    if mx and not emu <= OUT_TOL_Q8_EMULATED:
        fail("%s layer %d: output relative Frobenius error %.3g against the q8-quantising "
             "reference > %g" % (d, layer, emu, OUT_TOL_Q8_EMULATED))
    if os.environ.get("RUN_REF_VERBOSE"):
        print("%s layer %d: output relative Frobenius error %.3g (tolerance %g)%s"
              % (d, layer, rel, tol, ", %.3g against the q8-quantising reference" % emu
                 if mx else ""), file=sys.stderr)


CMDS = {"hidden": hidden, "ids": ids, "extract": extract, "rows": rows, "expect": expect,
        "same-rows": same_rows, "ids-valid": ids_valid, "bf16-valued": bf16_valued,
        "block": block}

if __name__ == "__main__":
    main(CMDS, __doc__)
