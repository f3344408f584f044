# transformers_e2e.py — a transformers MoE model's CPU decode and prefill, with and without libmoe.
# transformers_e2e.py — a transformers MoE model's CPU decode and prefill, as is and libmoe-patched.
"""End-to-end benchmark of ``libmoe.transformers.patch`` (issue 29); a benchmark, not a test.

What it measures. For each shape it builds a transformers (5.x) model at the released model's
real widths with few decoder layers, a small vocabulary and as many routed experts as fit in
memory (random bf16 weights, ``save_pretrained`` to a temporary folder, loaded back with
``from_pretrained``), and times, on the CPU:

- prefill: one forward of ``--prompt`` tokens (default 512) that builds the KV cache;
- decode: single-token forwards (T = 1) continuing from that cache (``cache=``),
  each feeding back the greedy token, so decode runs at a context of about ``--prompt``;

first with each of transformers' experts implementations that run on the CPU (``eager``:
a loop over the hit experts; ``grouped_mm``: ``torch.nn.functional.grouped_mm``;
``batched_mm``: one batched matmul over gathered copies of every (token, expert) pair's
weights — decode only where the gather would exceed ``--batched-mm-gb``), then with the
MoE blocks replaced by libmoe's layers (``libmoe.transformers.patch``, one row per
``--recipes`` entry). Forward hooks on every MoE block (transformers' block, or the patched
``LibmoeBlock``: router, routed and shared experts alike) sum the time spent inside the
blocks, so every row has the MoE-block time beside the whole-model time of the same forwards.

Every figure is a median: prefill over ``--reps`` forwards, decode over ``--reps`` ×
``--steps`` steps, after one untimed warm-up round (a prefill and its decode steps). Threads:
``torch.set_num_threads(--threads)`` and ``patch(..., threads=--threads)`` (default 2).
libmoe's layer may run a forward on fewer threads while its cores are busy with other work
(docs/layer.md); the figures include that, as a user would see it. The ratios are against
the fastest transformers implementation of each column. The last line is one JSON object
with every figure. The logits of the prompt's last position are compared with the
``eager`` row's (bf16 model: expect ~1e-2 relative).

Shapes (``--shapes``):

- ``qwen3-30b-a3b``: qwen3_moe, hidden 2048, 32 query / 4 KV heads of 128, all 128 experts of
  moe_intermediate 768, top-8, norm_topk_prob; 2 decoder layers, vocabulary 1024
  (about 2.5 GB of bf16 weights).
- ``deepseek-v3``: deepseek_v3, hidden 7168, MLA (q_lora 1536, kv_lora 512, 128 heads),
  moe_intermediate 2048, top-8, 1 shared expert, routed_scaling_factor 2.5; 16 of the 256
  routed experts, in 4 groups keeping 3 (12 candidates for the top-8; the real model's 8
  groups keeping 4 would leave exactly 8 of 16 candidates); one decoder layer, an MoE one
  (first_k_dense_replace 0, so the whole model has the real model's MoE/attention mix per
  layer; a second layer would take the peak past 10 GB), vocabulary 1024 (about 1.9 GB of
  bf16 weights).

Peak memory (printed at the end) is the model, the checkpoint's mapped pages, libmoe's packed
copy of the experts and patch()'s weight check: 10.3 GB RSS for qwen3-30b-a3b (2.6 GB of it
the checkpoint's file pages), 7.0 GB for deepseek-v3.

Run with ``OMP_WAIT_POLICY=PASSIVE`` (torch's bundled OpenMP runtime and the one libmoe links
both read it). With the default spin-waiting, a patched model's decode was slower than the
unpatched one here: after each MoE block libmoe's idle OpenMP worker spins on a core torch's
next operators need (and torch's on libmoe's), and on a machine busy with other work every
spinning or descheduled thread stalls the other threads' parallel regions (bench/NOTES.md,
issue 29, has both runs).

Run it (about 2 minutes per shape on two cores, far longer when they are busy):

    make build BUILD=build        # libmoe.so: the moe_shared target, or where there is none
    gcc -shared -o libmoe.so -Wl,--whole-archive build/libmoe.a -Wl,--no-whole-archive \\
        $(pkg-config --libs jansson) -fopenmp -lm
    OMP_WAIT_POLICY=PASSIVE LIBMOE_LIBRARY=path/to/libmoe.so PYTHONPATH=python \\
        /path/to/venv/bin/python bench/transformers_e2e.py --shapes qwen3-30b-a3b,deepseek-v3

Needs torch, transformers (5.x, with experts implementations), safetensors and libmoe.
"""
import argparse
import gc
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
import transformers

import libmoe.transformers as lt

SHAPES = {
    "qwen3-30b-a3b": dict(
        model_type="qwen3_moe", hidden_size=2048, num_attention_heads=32, num_key_value_heads=4,
        head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
        num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        rms_norm_eps=1e-6, rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
        max_position_embeddings=4096, num_hidden_layers=2, vocab_size=1024,
        tie_word_embeddings=False),
    "deepseek-v3": dict(
        model_type="deepseek_v3", hidden_size=7168, num_attention_heads=128,
        num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, intermediate_size=18432, moe_intermediate_size=2048,
        n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=8, n_group=4, topk_group=3,
        norm_topk_prob=True, routed_scaling_factor=2.5, first_k_dense_replace=0,
        rms_norm_eps=1e-6, max_position_embeddings=4096, num_hidden_layers=1, vocab_size=1024,
        tie_word_embeddings=False),
}
MOE_BLOCKS = ("Qwen3MoeSparseMoeBlock", "DeepseekV3MoE", "LibmoeBlock")
IMPLEMENTATIONS = ("eager", "grouped_mm", "batched_mm")
WARM_TOKENS = 16  # the warm-up round's prefill
OMP_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="transformers_e2e.py", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="qwen3-30b-a3b", help=f"of {','.join(SHAPES)} "
                    "[qwen3-30b-a3b]")
    ap.add_argument("--prompt", type=int, default=512, help="prefill tokens [512]")
    ap.add_argument("--steps", type=int, default=8, help="decode steps per round [8]")
    ap.add_argument("--reps", type=int, default=3, help="timed rounds per row [3]")
    ap.add_argument("--threads", type=int, default=2, help="torch and libmoe threads [2]")
    ap.add_argument("--recipes", default="default", help="libmoe recipes, one row each: "
                    "default (f32), f32, bf16, tile [default]")
    ap.add_argument("--implementations", default=",".join(IMPLEMENTATIONS),
                    help=f"transformers experts implementations [{','.join(IMPLEMENTATIONS)}]")
    ap.add_argument("--batched-mm-gb", type=float, default=2.0, help="largest weight gather "
                    "batched_mm may do; a prefill above it is skipped [2]")
    ap.add_argument("--dir", help="parent folder of the temporary checkpoint [TMPDIR]")
    args = ap.parse_args(argv)
    args.shapes = args.shapes.split(",")
    for s in args.shapes:
        if s not in SHAPES:
            ap.error(f"unknown shape {s!r} (known: {', '.join(SHAPES)})")
    args.recipes = args.recipes.split(",")
    args.implementations = args.implementations.split(",")
    return args


class BlockTimer:
    """Sums the wall time spent inside every MoE block of a model, by forward hooks."""

    def __init__(self, model):
        self.total, self._start, self._handles = 0.0, 0.0, []
        for module in model.modules():
            if type(module).__name__ in MOE_BLOCKS:
                self._handles.append(module.register_forward_pre_hook(self._enter))
                self._handles.append(module.register_forward_hook(self._leave))
        self.blocks = len(self._handles) // 2

    def _enter(self, module, args):
        self._start = time.perf_counter()

    def _leave(self, module, args, output):
        self.total += time.perf_counter() - self._start

    def remove(self):
        for h in self._handles:
            h.remove()


def build_checkpoint(shape, folder):
    """A random bf16 model of SHAPE saved to FOLDER; returns its config."""
    spec = dict(SHAPES[shape])
    config = transformers.AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    del model
    gc.collect()
    if shape == "qwen3-30b-a3b":
        # transformers writes the expert count as num_local_experts; libmoe reads the hub's
        # num_experts (docs/transformers.md, known gaps).
        path = os.path.join(folder, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg.setdefault("num_experts", cfg["num_local_experts"])
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
    return config


def gather_gb(config, tokens):
    """Bytes batched_mm gathers for TOKENS tokens: every (token, expert) pair's weights."""
    h, i, k = config.hidden_size, config.moe_intermediate_size, config.num_experts_per_tok
    return tokens * k * 3 * h * i * 2 / 1e9


def rounds(model, prompt, steps, reps, prefill_impl=None, decode_impl=None):
    """Medians of prefill and decode (whole model and MoE blocks), and the first timed
    prefill's logits."""
    timer = BlockTimer(model)
    prefill, prefill_moe, decode, decode_moe = [], [], [], []
    logits = None
    try:
        for r in range(reps + 1):  # round 0 warms up, on the prompt's first WARM_TOKENS
            if prefill_impl:
                model.set_experts_implementation(prefill_impl)
            timer.total = 0.0
            t0 = time.perf_counter()
            out = model(input_ids=prompt if r else prompt[:, :WARM_TOKENS], use_cache=True,
                        logits_to_keep=1)
            t = time.perf_counter() - t0
            if r:
                prefill.append(t)
                prefill_moe.append(timer.total)
            if r == 1:
                logits = out.logits[0, -1].float().clone()
            cache, token = out.cache, out.logits[:, -1:].argmax(-1)
            if decode_impl:
                model.set_experts_implementation(decode_impl)
            for _ in range(steps):
                timer.total = 0.0
                t0 = time.perf_counter()
                out = model(input_ids=token, cache=cache, use_cache=True)
                t = time.perf_counter() - t0
                if r:
                    decode.append(t)
                    decode_moe.append(timer.total)
                token = out.logits[:, -1:].argmax(-1)
            del out, cache
    finally:
        timer.remove()
    med = lambda xs: statistics.median(xs) * 1e3 if xs else None  # noqa: E731
    return dict(prefill_ms=med(prefill), prefill_moe_ms=med(prefill_moe), decode_ms=med(decode),
                decode_moe_ms=med(decode_moe), moe_blocks=timer.blocks), logits


def run_shape(shape, args):
    with tempfile.TemporaryDirectory(prefix="transformers_e2e-", dir=args.dir) as folder:
        t0 = time.perf_counter()
        config = build_checkpoint(shape, folder)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
        model.eval()
        setup_s = time.perf_counter() - t0
        progress(f"{shape} built, saved and loaded in {setup_s:.0f} s")
        g = torch.Generator().manual_seed(1)
        prompt = torch.randint(0, config.vocab_size, (1, args.prompt), generator=g)
        rows, ref = [], None
        with torch.inference_mode():
            for impl in args.implementations:
                skip_prefill = impl == "batched_mm" and \
                    gather_gb(config, args.prompt) > args.batched_mm_gb
                model.set_experts_implementation(impl)
                actual = model.config._experts_implementation
                # batched_mm past the gather limit: the cache is built by grouped_mm, untimed.
                res, logits = rounds(model, prompt, args.steps, args.reps,
                                     prefill_impl="grouped_mm" if skip_prefill else None,
                                     decode_impl=impl if skip_prefill else None)
                if skip_prefill:
                    res["prefill_ms"] = res["prefill_moe_ms"] = None
                    res["note"] = (f"prefill skipped: gathers {gather_gb(config, args.prompt):.1f}"
                                   " GB of weights")
                ref = logits if ref is None else ref
                rows.append(dict(row=f"transformers {impl}", backend="transformers",
                                 implementation=actual, **res,
                                 logits_rel_diff=rel_diff(logits, ref)))
                progress(rows[-1]["row"])
            model.set_experts_implementation("grouped_mm")
            for recipe in args.recipes:
                t1 = time.perf_counter()
                lt.patch(model, folder, threads=args.threads,
                         recipe=None if recipe == "default" else recipe)
                patch_s = time.perf_counter() - t1
                res, logits = rounds(model, prompt, args.steps, args.reps)
                rows.append(dict(row=f"libmoe {recipe}", backend="libmoe", recipe=recipe, **res,
                                 patch_s=round(patch_s, 1),
                                 logits_rel_diff=rel_diff(logits, ref)))
                lt.unpatch(model)
                gc.collect()
                progress(rows[-1]["row"])
        del model
        gc.collect()
    return dict(shape=shape, layers=config.num_hidden_layers, prompt=args.prompt,
                setup_s=round(setup_s, 1), rows=rows, ratios=ratios(rows))


def progress(what):
    """One line on stderr with the resident and peak memory so far."""
    with open("/proc/self/status") as f:
        mem = {k: v.split()[0] for k, v in (line.split(":", 1) for line in f) if k in
               ("VmRSS", "VmHWM", "RssAnon")}
    print(f"  {what}: RSS {int(mem['VmRSS']) >> 10} MB ({int(mem['RssAnon']) >> 10} MB anonymous),"
          f" peak {int(mem['VmHWM']) >> 10} MB",
          file=sys.stderr, flush=True)


def rel_diff(a, b):
    return float((a - b).abs().max() / b.abs().max()) if b is not None else None


def ratios(rows):
    """Each libmoe row against the fastest transformers row of each column (above 1: faster)."""
    out = {}
    base = [r for r in rows if r["backend"] == "transformers"]
    for r in rows:
        if r["backend"] != "libmoe":
            continue
        cols = {}
        for col in ("decode_ms", "decode_moe_ms", "prefill_ms", "prefill_moe_ms"):
            have = [(b[col], b["row"]) for b in base if b[col] is not None]
            if have and r[col]:
                best, name = min(have)
                cols[col.removesuffix("_ms")] = dict(speedup=round(best / r[col], 2),
                                                     against=name)
        out[r["row"]] = cols
    return out


def fmt(ms, tokens=1):
    return "n/a" if ms is None else f"{ms:9.2f} {tokens * 1e3 / ms:8.1f}"


def share(part, whole):
    return "n/a" if part is None or not whole else f"{part:8.2f} {100 * part / whole:4.0f}%"


def print_table(result):
    p = result["prompt"]
    print(f"\n{result['shape']}: {result['layers']} decoder layers, prefill {p} tokens, "
          f"decode at context ~{p}; medians; ms, tokens/s, MoE blocks ms and share")
    print(f"{'row':26} | {'decode ms':>9} {'tok/s':>8} | {'MoE ms':>8} {'share':>5} | "
          f"{'prefill ms':>9} {'tok/s':>8} | {'MoE ms':>8} {'share':>5} | logits Δ")
    for r in result["rows"]:
        print(f"{r['row']:26} | {fmt(r['decode_ms'])} | {share(r['decode_moe_ms'], r['decode_ms'])}"
              f" | {fmt(r['prefill_ms'], p):>18} | "
              f"{share(r['prefill_moe_ms'], r['prefill_ms']):>14} | {r['logits_rel_diff']:.1e}"
              + (f"  ({r['note']})" if r.get("note") else ""))
    for name, cols in result["ratios"].items():
        text = ", ".join(f"{c} {v['speedup']:.2f}× (vs {v['against']})" for c, v in cols.items())
        print(f"{name} speedup: {text}")


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    results = [run_shape(s, args) for s in args.shapes]
    for result in results:
        print_table(result)
    load_end = os.getloadavg()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nthreads {args.threads} (torch.set_num_threads and libmoe), load average "
          f"{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end, "
          f"peak RSS {peak_mb:.0f} MB")
    env = {k: os.environ[k] for k in OMP_ENV if k in os.environ}
    print(f"OpenMP environment: {env or 'none set'}")
    print(json.dumps(dict(bench="transformers_e2e", torch=torch.__version__, omp_env=env,
                          transformers=transformers.__version__, threads=args.threads,
                          steps=args.steps, reps=args.reps, load_start=load_start[0],
                          load_end=load_end[0], peak_rss_mb=round(peak_mb), shapes=results)))


if __name__ == "__main__":
    main(sys.argv[1:])
