#!/usr/bin/env python3
# experts_side_by_side.py — routed experts only: libmoe, kt-kernel and torch on the same inputs.
"""Times the routed experts alone (no router: every implementation gets the same expert ids and
combine weights) at DeepSeek-V3 expert shapes, for bf16 weights and FP8 E4M3 weights with
128x128 block scales, through

  libmoe   python/libmoe's Layer.experts(hidden, ids, weights, shared=False), once per recipe
           in --recipes (a recipe the layer refuses is printed as n/a with the reason);
  kt       KTransformers' kt-kernel: kt_kernel_ext's AMXBF16_MOE / AMXFP8_MOE (side_kt.py);
  torch    bf16 F.linear per expert over rows sorted by expert (block.experts_sorted).

The checkpoints are made by `moe gen` (one layer, R resident experts, no shared expert); the
inputs (hidden states with bf16 values, ids drawn once from a seeded generator so that every
expert gets tokens as evenly as possible, positive weights summing to 1 per token) are
written once as .npy. Each side runs in its own process and interpreter (libmoe and torch:
--python; kt-kernel: --kt-python), which re-invokes this script with --child and writes
its timings as JSON; this process prints one table per weight format: tokens x
implementation, median ms, GFLOP/s (2*3*H*I*T*K / time) and the ratio to libmoe's best
(above 1: libmoe is faster). --check first compares each implementation's output on 16
tokens with a float64 numpy reference of the same experts (relative Frobenius error).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SIDES = ("libmoe", "kt", "torch")
CHECK_TOKENS = 16


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="experts_side_by_side.py",
        description="Routed experts only: libmoe, kt-kernel and torch on the same inputs.",
    )
    ap.add_argument("--tokens", default="1,8,64,512,2048", help="tokens per forward [%(default)s]")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="[all cores]")
    ap.add_argument("--kt-threads", type=int,
                    help="kt-kernel's CPUInfer worker threads [--threads]")
    ap.add_argument("--dtypes", default="bf16,fp8", help="expert weights: bf16, fp8 [%(default)s]")
    ap.add_argument("--recipes", default="f32,tile", help="libmoe recipes [%(default)s]")
    ap.add_argument("--sides", default=",".join(SIDES), help="[%(default)s]")
    ap.add_argument("--hidden", type=int, default=7168, help="[%(default)s]")
    ap.add_argument("--intermediate", type=int, default=2048, help="[%(default)s]")
    ap.add_argument("--experts", type=int, default=32, help="resident experts R [%(default)s]")
    ap.add_argument("--topk", type=int, default=8, help="[%(default)s]")
    ap.add_argument("--seed", type=int, default=1, help="weights and inputs [%(default)s]")
    ap.add_argument("--time-ms", type=int, default=1000, help="timed calls per cell [1000]")
    ap.add_argument("--cold", action="store_true",
                    help="read a buffer twice the last-level cache before each call")
    ap.add_argument("--check", action="store_true",
                    help="first compare every output on 16 tokens with a float64 reference")
    ap.add_argument("--moe", default=os.path.join(REPO, "build", "moe"), help="the moe binary")
    ap.add_argument("--lib", default=os.path.join(REPO, "build", "libmoe.so"),
                    help="libmoe.so for the Python package [build/libmoe.so]")
    ap.add_argument("--python", default=default_python(),
                    help="interpreter with numpy (libmoe) and torch [/tmp/venvtest/bin/python]")
    ap.add_argument("--kt-python", default="/tmp/ktenv/bin/python",
                    help="interpreter with kt-kernel and numpy [%(default)s]")
    ap.add_argument("--dir", help="keep the checkpoints in DIR (reused when there)")
    ap.add_argument("--json", help="also write every record to this file")
    a = ap.parse_args(argv)
    a.token_list = [int(v) for v in a.tokens.split(",")]
    for name, values, known in (("--dtypes", a.dtypes, ("bf16", "fp8")),
                                ("--sides", a.sides, SIDES)):
        if any(v not in known for v in values.split(",")):
            ap.error(f"{name}: each of {', '.join(known)}")
    a.kt_threads = a.kt_threads or a.threads
    if min(a.token_list) < 1 or min(a.threads, a.kt_threads) < 1 or a.topk > a.experts:
        ap.error("tokens and threads must be positive, --topk at most --experts")
    return a


def default_python():
    for p in ("/tmp/venvtest/bin/python", os.path.join(REPO, ".venv", "bin", "python")):
        if os.access(p, os.X_OK):
            return p
    return sys.executable


# ---- Inputs ----------------------------------------------------------------------------------


def checkpoint(a, dtype, root):
    """A one-layer DeepSeek-V3 checkpoint of R experts in DTYPE, made by `moe gen`."""
    name = f"ds-v3-{dtype}-h{a.hidden}-i{a.intermediate}-e{a.experts}-k{a.topk}-s{a.seed}"
    folder = os.path.join(root, name)
    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    cmd = [a.moe, "gen", "--family", "deepseek_v3", "--dtype", dtype, "--layers", "1",
           "--first-dense", "0", "--hidden", str(a.hidden), "--experts", str(a.experts),
           "--topk", str(a.topk), "--groups", "1", "--intermediate", str(a.intermediate),
           "--shared", "0", "--seed", str(a.seed), "--out", folder, "--force"]
    print("running: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return folder


def balanced_ids(rng, tokens, experts, k):
    """[T, K] distinct expert ids per row, each row taking the K least-used experts so far
    (ties broken at random): every expert gets tokens once T*K >= R, counts within 1."""
    counts = np.zeros(experts)
    ids = np.empty((tokens, k), dtype=np.int64)
    for t in range(tokens):
        row = np.argpartition(counts + rng.random(experts), k - 1)[:k]
        ids[t] = row
        counts[row] += 1
    return ids


def inputs(a, rng, tokens):
    import st_numpy

    x = st_numpy.round_bf16(rng.standard_normal((tokens, a.hidden), dtype=np.float32))
    ids = balanced_ids(rng, tokens, a.experts, a.topk)
    w = rng.random((tokens, a.topk)) + 0.05
    return x, ids, (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def write_inputs(a, work):
    rng = np.random.default_rng(a.seed)
    for tag, tokens in (("run", max(a.token_list)), ("check", CHECK_TOKENS)):
        for name, arr in zip(("x", "ids", "w"), inputs(a, rng, tokens)):
            np.save(os.path.join(work, f"{tag}-{name}.npy"), arr)


def read_inputs(work, tag):
    return [np.load(os.path.join(work, f"{tag}-{n}.npy")) for n in ("x", "ids", "w")]


# ---- One side, in its own process -------------------------------------------------------------


def parse_child(argv):
    ap = argparse.ArgumentParser(prog="experts_side_by_side.py --child")
    ap.add_argument("--child", choices=SIDES, required=True)
    for name in ("--folder", "--work", "--result", "--tokens", "--recipes", "--tag"):
        ap.add_argument(name, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--time-ms", type=int, required=True)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--check", action="store_true")
    return ap.parse_args(argv)


def child(argv):
    c = parse_child(argv)
    sys.path.insert(0, HERE)
    import torch_moe  # its timing loop and cache size (standard library only at import)

    side = __import__(f"side_{c.child}")
    tokens = [int(v) for v in c.tokens.split(",")]
    x, ids, w = read_inputs(c.work, "run")
    records = []
    evict_buf = np.ones(2 * torch_moe.llc_bytes() // 4, dtype=np.float32) if c.cold else None

    def evict():
        if evict_buf is not None:
            evict_buf.sum()

    def emit(rec):
        records.append(rec)
        print(f"[{c.child}] {json.dumps(rec)}", file=sys.stderr, flush=True)

    for impl in side.implementations(c.folder, c.threads, max(tokens + [CHECK_TOKENS]), c):
        if isinstance(impl, tuple):
            emit({"impl": impl[0], "na": impl[1]})
            continue
        emit({"impl": impl.name, "note": impl.note})
        try:
            if c.check:
                call, result = impl.bind(*read_inputs(c.work, "check"))
                call()
                path = os.path.join(c.work, f"out-{c.tag}-{impl.name.replace(' ', '_')}.npy")
                np.save(path, np.asarray(result(), dtype=np.float32))
                emit({"impl": impl.name, "check": path})
            for t in tokens:
                call, _ = impl.bind(x[:t], ids[:t], w[:t])
                emit({"impl": impl.name, "tokens": t,
                      "ms": torch_moe.time_ms(call, evict, c.time_ms)})
        except Exception as e:  # noqa: BLE001 — a refusal becomes an n/a cell with its reason
            emit({"impl": impl.name, "na": f"{type(e).__name__}: {e}"})
        finally:
            impl.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    emit({"impl": c.child, "peak_rss_gb": round(peak, 2)})
    with open(c.result, "w") as f:
        json.dump(records, f)
    return 0


def run_side(a, side, folder, dtype, work):
    python = a.kt_python if side == "kt" else a.python
    if not os.access(python, os.X_OK):
        return [{"impl": side, "na": f"no interpreter at {python}"}]
    result = os.path.join(work, f"result-{dtype}-{side}.json")
    threads = a.kt_threads if side == "kt" else a.threads
    cmd = [python, os.path.abspath(__file__), "--child", side, "--folder", folder, "--work",
           work, "--result", result, "--tokens", a.tokens, "--recipes", a.recipes, "--tag",
           dtype, "--threads", str(threads), "--time-ms", str(a.time_ms)]
    cmd += (["--cold"] if a.cold else []) + (["--check"] if a.check else [])
    env = dict(os.environ, LIBMOE_LIBRARY=os.path.abspath(a.lib))
    p = subprocess.run(cmd, env=env, stdout=sys.stderr)
    if p.returncode != 0 or not os.path.exists(result):
        return [{"impl": side, "na": f"its process exited with status {p.returncode}"}]
    with open(result) as f:
        return json.load(f)


# ---- Report ----------------------------------------------------------------------------------


def check_report(a, dtype, folder, work, records):
    from experts_f64 import experts_f64

    x, ids, w = read_inputs(work, "check")
    ref = experts_f64(folder, x, ids, w)
    for r in records:
        if "check" in r:
            y = np.load(r["check"]).astype(np.float64)
            err = np.linalg.norm(y - ref) / np.linalg.norm(ref)
            print(f"check {dtype} {r['impl']:18s}: relative Frobenius error {err:.2e} against "
                  f"float64 of the stored weights ({CHECK_TOKENS} tokens)")


def table(a, dtype, records):
    impls = list(dict.fromkeys(r["impl"] for r in records if "peak_rss_gb" not in r))
    ms = {(r["impl"], r["tokens"]): r["ms"] for r in records if "ms" in r}
    na = {r["impl"]: r["na"] for r in records if "na" in r}
    print(f"\n{dtype} weights — cell: median ms, GFLOP/s, ratio to libmoe's best at that T "
          "(above 1: libmoe is faster)")
    print(f"{'tokens':>6s} " + " ".join(f"{i:>24s}" for i in impls))
    for t in a.token_list:
        best = [ms[i, t] for i in impls if i.startswith("libmoe") and (i, t) in ms]
        cells = []
        for i in impls:
            if (i, t) not in ms:
                cells.append(f"{'n/a':>24s}")
                continue
            gf = 2 * 3 * a.hidden * a.intermediate * t * a.topk / (ms[i, t] * 1e-3) / 1e9
            ratio = f"{ms[i, t] / min(best):5.2f}x" if best else "    -"
            cells.append(f"{ms[i, t]:10.3f} {gf:7.1f} {ratio:>5s}")
        print(f"{t:6d} " + " ".join(cells), flush=True)
    for r in records:
        if "note" in r:
            print(f"  {r['impl']}: {r['note']}")
    rss = [f"{r['impl']} {r['peak_rss_gb']:.2f}" for r in records if "peak_rss_gb" in r]
    print("  peak resident memory of each side's process, GB (mapped checkpoint pages included): "
          + ", ".join(rss))
    for i, why in na.items():
        print(f"  {i}: n/a — {why}")


def compare(a, root, work):
    write_inputs(a, work)
    load0 = os.getloadavg()[0]
    bytes_per = {"bf16": 2, "fp8": 1}
    print(f"routed experts only: hidden {a.hidden}, intermediate {a.intermediate}, top-{a.topk} "
          f"of {a.experts} resident, {a.threads} threads"
          + (f" ({a.kt_threads} for kt-kernel)" if a.kt_threads != a.threads else "") + ", "
          + ("cold (2x LLC read before each call)" if a.cold else "hot loop")
          + f", median of calls over {a.time_ms} ms")
    everything = []
    for dtype in a.dtypes.split(","):
        folder = checkpoint(a, dtype, root)
        gb = 3 * a.hidden * a.intermediate * a.experts * bytes_per[dtype] / 1e9
        print(f"\n{dtype}: checkpoint {folder} ({gb:.2f} GB of expert weights)")
        records = []
        for side in a.sides.split(","):
            records += run_side(a, side, folder, dtype, work)
        if a.check:
            check_report(a, dtype, folder, work, records)
        table(a, dtype, records)
        everything.append({"dtype": dtype, "records": records})
    print(f"\nload average (1 min) at the start {load0:.2f}, at the end {os.getloadavg()[0]:.2f}, "
          f"on {os.cpu_count()} cores (above the thread count: other work shared the cores)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": everything}, f, indent=1)


def main(argv):
    sys.path.insert(0, HERE)
    a = parse_args(argv)
    if not os.access(a.moe, os.X_OK):
        sys.exit(f"experts_side_by_side.py: no moe binary at {a.moe} (build it, or --moe PATH)")
    root = a.dir or tempfile.mkdtemp(prefix="experts-sbs.")
    work = tempfile.mkdtemp(prefix="experts-sbs-work.")
    try:
        compare(a, root, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv[1:]) if sys.argv[1:2] == ["--child"] else main(sys.argv[1:]))
