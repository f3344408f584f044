#!/usr/bin/env python3
# ep_cluster_model.py — a model of expert parallelism on a real cluster: per-layer decode and prefill time from the layer's bytes, the link and the costs measured here.
"""Usage: python3 bench/ep_cluster_model.py [--bw-gbs 250] [--eff 0.85] [--tflops 23]
                                      [--latency-us 10,3,3] [--row-us 4] [--seed 1]

A model, not a measurement: it prints, for DeepSeek-V3 FP8 and Kimi-K2 (FP8 and INT4), the
per-layer decode time over 2, 4, 8 and 16 ranks with 25, 100 and 400 Gb/s links, the decode
tokens/s per rank, where prefill becomes communication-bound, and what fits on two 512 GB
servers. One rank is one NUMA node (a socket) of BW GB/s, holding 1/n of the routed experts
and a copy of everything else; the rows move as docs/parallel.md says (bf16 rows out with
their expert id, f32 outputs back, once per (token, slot)), every exchange an all-to-all
with n - 1 peers at the stated per-message latency. Per layer, in order and without overlap
(the steps as libmoe runs them): the gate and the shared expert on the home rank, the
dispatch, the slowest rank's experts, the return, the combine. Attention, the KV cache and
everything outside the MoE block are left out. Defaults:

  --bw-gbs 250      one socket's DDR5 read bandwidth, GB/s (8 channels of DDR5-4800: 307
                    peak), of which libmoe reaches --eff (0.85: the decode fraction of the read
                    floor bench/NOTES.md measures for the FP8 and INT4 sets)
  --tflops 23       prefill FLOP/s of one socket: 0.42 TFLOP/s per core (the tile recipe's
                    DeepSeek-V3 layer at T = 2048 on this machine's two cores, NOTES v21)
                    times 56 cores
  --latency-us      per-message latency for the 25, 100 and 400 Gb/s links (TCP on 25 GbE;
                    RDMA on the faster ones)
  --row-us 4        libmoe's own cost per row moved: a 14 KB bf16 row out and a 28 KB f32
                    row back, each copied once at about 10 GB/s per core. `mpirun -np 2 moe
                    bench --ep` on this machine's shared memory measured 45 us per row at
                    T = 512 under load (NOTES v24): an upper bound, MPI's own copies included

Standard library only."""
import argparse
import random

GB = 1e9
MODELS = {
    # routed experts E, top-k K, hidden H, expert width I, MoE layers, bytes per weight of the
    # routed experts, everything else held on every rank (GB: attention, embeddings, dense
    # layers, shared experts, gates), the shared expert's width
    "DeepSeek-V3 FP8": dict(E=256, K=8, H=7168, I=2048, L=58, wbytes=1 + 4 / 128 / 128,
                            rest_gb=25, shared_I=2048),
    "Kimi-K2 FP8": dict(E=384, K=8, H=7168, I=2048, L=60, wbytes=1 + 4 / 128 / 128,
                        rest_gb=25, shared_I=2048),
    "Kimi-K2 INT4": dict(E=384, K=8, H=7168, I=2048, L=60, wbytes=0.5 + 2 / 32,
                         rest_gb=25, shared_I=2048),
}
RANKS = (2, 4, 8, 16, 32, 64)
LINKS_GBIT = (25, 100, 400)


def expert_bytes(m):
    return 3 * m["H"] * m["I"] * m["wbytes"]


def home_bytes(m):
    """The gate (bf16) and the shared expert (FP8 or bf16-width FP8 here) the home rank reads."""
    return m["E"] * m["H"] * 2 + 3 * m["H"] * m["shared_I"] * (1 + 4 / 128 / 128)


def slowest_rank_experts(m, n, tokens, trials, rng):
    """The expected largest number of distinct experts one rank runs when TOKENS tokens each
    pick K distinct experts uniformly (contiguous placement: E / n experts per rank)."""
    e, k = m["E"], m["K"]
    per = e // n
    total = 0
    for _ in range(trials):
        hit = set()
        for _ in range(tokens):
            hit.update(rng.sample(range(e), k))
        counts = [0] * n
        for x in hit:
            counts[min(x // per, n - 1)] += 1
        total += max(counts)
    return total / trials


def exchange_s(bytes_per_rank, n, link_bps, latency_s):
    """One all-to-all: every rank sends (and receives) BYTES_PER_RANK, n - 1 messages."""
    return bytes_per_rank / link_bps + (n - 1) * latency_s


def decode_layer_s(m, n, tokens, home_tokens, link_bps, latency_s, a, rng):
    """TOKENS in the whole cluster, HOME_TOKENS of them on the busiest home rank."""
    bw = a.bw_gbs * GB * a.eff
    slow = slowest_rank_experts(m, n, tokens, a.trials, rng)
    rows_off = home_tokens * m["K"] * (n - 1) / n
    out = rows_off * (m["H"] * 2 + 4)
    back = rows_off * m["H"] * 4
    counts = exchange_s(8 * n, n, link_bps, latency_s)
    t = home_bytes(m) / bw  # gate and shared expert
    t += counts + exchange_s(out, n, link_bps, latency_s)  # dispatch
    t += slow * expert_bytes(m) / bw  # the slowest rank's experts
    t += exchange_s(back, n, link_bps, latency_s)  # return
    t += home_tokens * m["K"] * a.row_us * 1e-6  # libmoe's own cost per row
    return t


def one_rank_layer_s(m, tokens, a, rng):
    bw = a.bw_gbs * GB * a.eff
    slow = slowest_rank_experts(m, 1, tokens, a.trials, rng)
    return (home_bytes(m) + slow * expert_bytes(m)) / bw


def prefill_ratio(m, n, link_bps, a):
    """Communication time over compute time for prefill (large T per rank; latency negligible):
    per token, K (n-1)/n rows of 6H bytes each way against (K + 1) experts' 6 H I FLOPs."""
    comm = m["K"] * (n - 1) / n * (m["H"] * 2 + 4 + m["H"] * 4) / link_bps
    compute = (m["K"] + 1) * 6 * m["H"] * m["I"] / (a.tflops * 1e12)
    return comm / compute


def table(m, routed_gb, lat, a, rng, load, per_rank):
    """A decode table: rows of ranks, columns of links; LOAD(n) = (cluster tokens, home
    tokens), PER_RANK the tokens one rank's rate counts."""
    print("| ranks | GB per rank | " + " | ".join(f"{g} Gb/s" for g in LINKS_GBIT) + " |")
    print("|---|---|" + "---|" * len(LINKS_GBIT))
    for n in RANKS:
        cells = []
        for g, l in zip(LINKS_GBIT, lat):
            t = decode_layer_s(m, n, *load(n), g * 1e9 / 8, l, a, rng)
            cells.append(f"{t * 1e3:.2f} ({per_rank / (t * m['L']):.1f})")
        print(f"| {n} | {routed_gb / n + m['rest_gb']:.0f} | " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--bw-gbs", type=float, default=250)
    p.add_argument("--eff", type=float, default=0.85)
    p.add_argument("--tflops", type=float, default=23)
    p.add_argument("--latency-us", default="10,3,3")
    p.add_argument("--row-us", type=float, default=4)
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    lat = [float(x) * 1e-6 for x in a.latency_us.split(",")]
    rng = random.Random(a.seed)
    print(f"# one rank: {a.bw_gbs:g} GB/s x {a.eff:g}, {a.tflops:g} TFLOP/s prefill; latency "
          f"{a.latency_us} us for {LINKS_GBIT} Gb/s; {a.row_us:g} us per row in libmoe\n")
    for name, m in MODELS.items():
        routed_gb = m["E"] * expert_bytes(m) * m["L"] / GB
        print(f"## {name}: routed experts {routed_gb:.0f} GB, {expert_bytes(m) / 1e6:.1f} MB "
              f"each; held on every rank {m['rest_gb']} GB")
        one = one_rank_layer_s(m, 1, a, rng)
        print(f"\ndecode, one stream (one token in the whole cluster): ms per layer (tokens/s "
              f"over {m['L']} MoE layers); one rank alone {one * 1e3:.2f} ms "
              f"({1 / (one * m['L']):.1f} tok/s)")
        table(m, routed_gb, lat, a, rng, lambda n: (1, 1), 1)
        b = 32
        one = one_rank_layer_s(m, b, a, rng)
        print(f"\ndecode, {b} tokens per rank (data-parallel attention): ms per layer (tokens/s "
              f"per rank); one rank alone {one * 1e3:.2f} ms ({b / (one * m['L']):.1f} tok/s)")
        table(m, routed_gb, lat, a, rng, lambda n: (n * b, b), b)
        print("\nprefill: communication time / compute time (> 1: communication-bound)")
        print("| ranks | " + " | ".join(f"{g} Gb/s" for g in LINKS_GBIT) + " |")
        print("|---|" + "---|" * len(LINKS_GBIT))
        for n in RANKS:
            print(f"| {n} | " + " | ".join(
                f"{prefill_ratio(m, n, g * 1e9 / 8, a):.2f}" for g in LINKS_GBIT) + " |")
        print()


if __name__ == "__main__":
    main()
