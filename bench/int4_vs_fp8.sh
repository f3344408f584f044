#!/usr/bin/env bash
# int4_vs_fp8.sh — Kimi-K2 FP8 against Kimi-K2.5 INT4 in one run: the two presets' `moe bench` alternate, and the tokens/s ratio per round.
#
# usage: bench/int4_vs_fp8.sh [MOE] [ROUNDS]      (MOE default build/moe, ROUNDS default 3)
# environment: TOKENS (default 1), THREADS (default 2), MEMORY_GB (default 2), TIME_MS (default
# 1000), DIR (checkpoints kept and reused; default a temporary folder, removed at the end),
# BENCH_LOCK (a lock file: each `moe bench` runs under `flock BENCH_LOCK`, so on a shared
# machine no other benchmark runs beside it; default none).
#
# Each round runs `moe bench --preset kimi-k2 --format fp8`, then `--preset kimi-k2.5-int4`
# (bf16 shared expert), with --json, at the same tokens and threads; the rounds alternate the
# two, so a change in the machine's load falls on both. Per round and case it prints each
# preset's ms per forward and efficiency (floor / ms, against that run's floors), and the
# ratio FP8 ms / INT4 ms (= INT4 tokens/s / FP8 tokens/s); then the median ratio per case.
set -euo pipefail
moe=${1:-build/moe}
rounds=${2:-3}
tokens=${TOKENS:-1}
threads=${THREADS:-2}
memory=${MEMORY_GB:-2}
time_ms=${TIME_MS:-1000}
[ -x "$moe" ] || { echo "int4_vs_fp8.sh: $moe is not an executable moe" >&2; exit 1; }
out=$(mktemp -d)
dir=${DIR:-$out/ckpt}
trap 'rm -rf "$out"' EXIT
mkdir -p "$dir"

bench() { # bench ROUND NAME PRESET FORMAT
    local lock=()
    [ -n "${BENCH_LOCK:-}" ] && lock=(flock "$BENCH_LOCK")
    "${lock[@]}" "$moe" bench --preset "$3" --format "$4" --tokens "$tokens" --threads "$threads" \
        --memory-gb "$memory" --time-ms "$time_ms" --dir "$dir" --json >"$out/$1.$2.json"
}

echo "uptime before: $(uptime)"
for r in $(seq 1 "$rounds"); do
    bench "$r" fp8 kimi-k2 fp8
    bench "$r" int4 kimi-k2.5-int4 int4
    echo "round $r done: $(uptime)"
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def cases(path):
    with open(path) as f:
        doc = json.load(f)
    return {(c["tokens"], c["threads"]): c for c in doc["cases"]}
ratios = {}
print("round  T  thr   fp8 ms  effic   int4 ms  effic   fp8/int4 (int4 tok/s / fp8 tok/s)")
for r in range(1, rounds + 1):
    a, b = cases(f"{out}/{r}.fp8.json"), cases(f"{out}/{r}.int4.json")
    for key in sorted(a):
        fa, fb = a[key], b[key]
        ratio = fa["ms_per_forward"] / fb["ms_per_forward"]
        ratios.setdefault(key, []).append(ratio)
        print(f"{r:5d} {key[0]:2d} {key[1]:4d} {fa['ms_per_forward']:8.2f} {fa['efficiency']:6.2f}"
              f" {fb['ms_per_forward']:9.2f} {fb['efficiency']:6.2f}   {ratio:.2f}")
for key, v in sorted(ratios.items()):
    print(f"T = {key[0]}, {key[1]} threads: median fp8/int4 over {len(v)} rounds {statistics.median(v):.2f}"
          f" (min {min(v):.2f}, max {max(v):.2f})")
EOF
echo "uptime after: $(uptime)"
