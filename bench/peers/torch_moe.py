#!/usr/bin/env python3
# torch_moe.py — a `moe bench` preset side by side with the same MoE layer run in plain torch.
"""Runs `moe bench --json` for a preset (its real shapes, synthetic weights in the model's own
format, as many experts resident as fit), then loads the checkpoint that run generated into
torch, bf16 weights (FP8 and MXFP4 dequantised once at load, as a torch user runs them on a
CPU), and times the same block at the same token and thread counts: Hugging Face's eager
per-expert loop over F.linear, a sorted variant (one contiguous slice per expert) and
torch._grouped_mm where this torch has it. Each time is the median of forwards taken the
way `moe bench` takes its own: one warm-up forward, then forwards until --time-ms have passed
(at least 3), a buffer twice the last-level cache read before each one so the weights come
from memory. Prints one table with the ratios torch / libmoe (above 1: libmoe is faster).

Optional tooling: without torch it prints one line and exits 0. Standard library + torch.
"""
import argparse
import ast
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("eager", "sorted", "grouped_mm")
torch = block = checkpoint = None  # imported by import_torch(), after the options are read


def parse_args(argv):
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(
        prog="torch_moe.py",
        description="A `moe bench` preset side by side with the same layer in plain torch.",
    )
    ap.add_argument("--moe", default="build/moe", help="the moe binary [build/moe]")
    ap.add_argument("--preset", default="qwen3-30b-a3b", help="a `moe bench --list` preset")
    ap.add_argument("--model", help="a checkpoint folder instead of a preset (its first MoE layer)")
    ap.add_argument("--format", help="bf16, fp8 or mxfp4 [the format the model ships in]")
    ap.add_argument("--tokens", default="1,16,128", help="tokens per forward [1,16,128]")
    ap.add_argument(
        "--threads", default="1" if cores == 1 else f"1,{cores}", help="thread counts [1,cores]"
    )
    ap.add_argument("--memory-gb", type=int, help="passed to moe bench: resident weights, GB")
    ap.add_argument("--time-ms", type=int, default=1000, help="timed forwards per case [1000]")
    ap.add_argument("--dir", help="keep the generated checkpoint in DIR (reused when there)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="also run `moe run` on 16 tokens and compare its output and ids with torch's",
    )
    return ap.parse_args(argv)


def int_list(text):
    return [int(v) for v in text.split(",")]


# ---- libmoe ----------------------------------------------------------------------------------


def moe_bench(a, root):
    cmd = [a.moe, "bench"] + (["--model", a.model] if a.model else ["--preset", a.preset])
    cmd += ["--tokens", a.tokens, "--threads", a.threads, "--time-ms", str(a.time_ms), "--json"]
    if not a.model:
        cmd += ["--dir", root]
    if a.format:
        cmd += ["--format", a.format]
    if a.memory_gb:
        cmd += ["--memory-gb", str(a.memory_gb)]
    print("running: " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(p.returncode)
    return json.loads(p.stdout)


def npy_write(path, t):
    """A 2-D f32 tensor as .npy (format 1.0)."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({t.shape[0]}, {t.shape[1]}), }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(bytes(t.to(torch.float32).contiguous().view(torch.uint8).flatten().tolist()))


def npy_read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<H", data[8:10])[0]
    h = ast.literal_eval(data[10 : 10 + n].decode())
    dtype = {"<f4": torch.float32, "<i4": torch.int32, "<i8": torch.int64}[h["descr"]]
    return torch.frombuffer(bytearray(data[10 + n :]), dtype=dtype).reshape(h["shape"])


def moe_run(a, folder, x, threads, logits_dtype, work):
    """libmoe's output and ids for hidden states x, through `moe run`."""
    xp, yp, ip = (os.path.join(work, n) for n in ("x.npy", "y.npy", "ids.npy"))
    npy_write(xp, x)
    cmd = [a.moe, "run", "--model", folder, "--hidden", xp, "--out", yp, "--ids-out", ip]
    cmd += ["--threads", str(threads), "--logits-dtype", logits_dtype]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return npy_read(yp), npy_read(ip)


# ---- torch -----------------------------------------------------------------------------------


def llc_bytes():
    """The largest cache's size from sysfs (64 MiB when unknown)."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for d in os.listdir(base) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, d, "size")) as f:
                s = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
        best = max(best, int(s.rstrip("KMG")) * mult)
    return best or 64 << 20


def time_ms(fn, evict, budget_ms):
    fn()  # warm-up: code, allocator, the thread team
    ns = []
    while len(ns) < 64 and (len(ns) < 3 or sum(ns) < budget_ms * 1e6):
        evict()
        t0 = time.perf_counter_ns()
        fn()
        ns.append(time.perf_counter_ns() - t0)
    return statistics.median(ns) / 1e6


def hidden(tokens, h, seed=1):
    g = torch.Generator().manual_seed(seed + tokens)
    return torch.randn((tokens, h), generator=g).to(torch.bfloat16)


def check(a, lay, folder, threads, variants):
    """Compares torch's output with `moe run` on the same 16 tokens (bf16 inputs; bf16 router
    logits in libmoe too where the model code rounds them). A token whose logits sit near a
    tie can pick another expert in either, so the error is taken over the tokens that both
    sent to the same experts, and their count is printed."""
    x = hidden(16, lay.hidden, seed=7)
    logits = "f32" if lay.router.dtype == torch.float32 else "bf16"
    work = tempfile.mkdtemp(prefix="torch-moe-check.")
    try:
        y_ref, ids_ref = moe_run(a, folder, x, threads, logits, work)
    finally:
        shutil.rmtree(work)
    for v in variants:
        y, ids = block.forward(lay, v, x)
        same = torch.tensor([set(r) == set(s) for r, s in zip(ids.tolist(), ids_ref.tolist())])
        d, r = y[same] - y_ref[same], y_ref[same]
        err = float(d.norm() / r.norm()) if same.any() else float("nan")
        print(f"check {v:10s}: {int(same.sum())}/{len(same)} tokens routed to the same experts "
              f"as `moe run --logits-dtype {logits}`; their relative Frobenius error {err:.2e}")


def bench_torch(a, lay, cases, variants):
    evict_buf = torch.ones(2 * llc_bytes() // 4, dtype=torch.float32)

    def evict():
        evict_buf.sum()

    rows = []
    for c in cases:
        torch.set_num_threads(c["threads"])
        x = hidden(c["tokens"], lay.hidden)
        row = {"case": c, "ms": {}}
        for v in variants:
            row["ms"][v] = time_ms(lambda: block.forward(lay, v, x), evict, a.time_ms)
        row["hit"] = int(torch.unique(block.route(lay, x)[0]).numel())
        rows.append(row)
        print_row(row, variants)
    return rows


# ---- Report ----------------------------------------------------------------------------------


def print_head(variants):
    ms = " ".join(f"{v + ' ms':>13s}" for v in variants)
    ratio = " ".join(f"{v + '/moe':>14s}" for v in variants)
    print(f"{'tokens':>6s} {'threads':>7s} {'libmoe ms':>10s} {'hit':>4s} {ms} {'hit':>4s} {ratio}")


def print_row(row, variants):
    c = row["case"]
    libmoe = c["ms_per_forward"]
    ms = " ".join(f"{row['ms'][v]:13.3f}" for v in variants)
    ratio = " ".join(f"{row['ms'][v] / libmoe:14.2f}" for v in variants)
    print(f"{c['tokens']:6d} {c['threads']:7d} {libmoe:10.3f} {c['experts_hit']:4d} {ms} "
          f"{row['hit']:4d} {ratio}", flush=True)


def describe(c0, lay, load_s, variants):
    print(f"preset {c0['preset']} {c0['format']}: hidden {lay.hidden}, intermediate "
          f"{lay.inter}, {lay.experts} experts resident, top-{lay.top_k}"
          + (", shared experts" if lay.shared_gate_up is not None else ""))
    print(f"libmoe: kernel {c0['kernel']}, recipe {c0['recipe']}")
    how = "bf16 as stored"
    if lay.dequantised:
        how = f"dequantised from {lay.dequantised} to bf16 once at load"
    print(f"torch {torch.__version__}: weights {how} ({load_s:.1f} s); activations bf16; "
          f"variants: {', '.join(variants)}"
          + ("" if "grouped_mm" in variants else " (no torch._grouped_mm on this CPU)"))


def compare(a, root):
    load0 = os.getloadavg()[0]
    cases = moe_bench(a, root)["cases"]
    c0 = cases[0]
    name = f"{c0['preset']}-{c0['format']}-{c0['resident_experts']}"  # moe bench's folder
    folder = a.model or os.path.join(root, name)
    t0 = time.perf_counter()
    lay = checkpoint.load(folder)
    load_s = time.perf_counter() - t0
    variants = [v for v in VARIANTS if v != "grouped_mm" or block.grouped_mm_works(lay)]
    describe(c0, lay, load_s, variants)
    with torch.inference_mode():
        if a.check:
            check(a, lay, folder, max(int_list(a.threads)), variants)
        print("hit: distinct routed experts a forward used (libmoe's, then torch's); "
              "X/moe: torch ms / libmoe ms")
        print_head(variants)
        bench_torch(a, lay, cases, variants)
    print(f"load average (1 min) at the start {load0:.2f}, at the end {os.getloadavg()[0]:.2f}, "
          f"on {os.cpu_count()} cores (well above the largest thread count: other work shared "
          "the cores, the times are noisy)")


def main(argv):
    a = parse_args(argv)
    for lst in (a.tokens, a.threads):
        if not all(v.isdigit() and int(v) > 0 for v in lst.split(",")):
            sys.exit(f"torch_moe.py: '{lst}' is not a comma-separated list of positive numbers")
    if not import_torch():
        return 0
    if not os.access(a.moe, os.X_OK):
        sys.exit(f"torch_moe.py: no moe binary at {a.moe} (build it, or give --moe PATH)")
    root = a.dir or (None if a.model else tempfile.mkdtemp(prefix="torch-moe."))
    try:
        compare(a, root)
    finally:
        if root and not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def import_torch():
    """torch and this folder's modules into the globals; False (with one line) without torch."""
    global torch, block, checkpoint
    try:
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
    except (ImportError, OSError) as e:
        print(f"torch_moe.py: torch is not installed or does not load ({e}); nothing to compare")
        return False
    sys.path.insert(0, HERE)
    import block
    import checkpoint

    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
