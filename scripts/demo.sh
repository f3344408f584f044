#!/usr/bin/env bash
# demo.sh — `make run`: generate a small DeepSeek-V3-style checkpoint, inspect it, run its MoE layer, bench it.
# usage: scripts/demo.sh [path/to/moe | BUILD_DIR]. Given a build folder, builds moe there first,
# quietly (the compiler's output goes to a log). The first screen is the result: the important
# lines of each step; every command's whole output is kept in a folder named at the end.
set -euo pipefail
arg=${1:-build/moe}
if [ -d "$arg" ]; then
  mkdir -p "$arg/demo"
  if ! cmake --build "$arg" -j "$(nproc 2>/dev/null || echo 2)" --target moe_cli >"$arg/demo/build.log" 2>&1; then
    tail -n 20 "$arg/demo/build.log"
    echo "build failed: the whole log is $arg/demo/build.log" >&2
    exit 1
  fi
  echo "built $arg/moe (log: $arg/demo/build.log)"
  moe=$arg/moe
else
  moe=$arg
fi
out=${MOE_DEMO_OUT:-$(dirname "$moe")/demo} # the whole outputs, kept
mkdir -p "$out"
dir=$(mktemp -d "${TMPDIR:-/tmp}/moe-demo.XXXXXX") # the checkpoint and arrays, removed
trap 'rm -rf "$dir"' EXIT
short() { sed "s|$dir|\$TMP|g"; }
# step NAME COMMAND...: runs COMMAND, its whole output to $out/NAME.txt; prints the command.
step() {
  local name=$1
  shift
  echo "\$ $*" | short
  if ! "$@" 2>&1 | short >"$out/$name.txt"; then
    tail -n 5 "$out/$name.txt" >&2
    echo "failed: the whole output is in $out/$name.txt" >&2
    exit 1
  fi
}
# Hidden states [T, H] f32, N(0, 1), as .npy (standard-library Python: no numpy needed).
hidden() { # hidden PATH T H
  python3 - "$@" <<'PY'
import array, random, sys
path, t, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(t)
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (t, h)
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode("latin1"))
    f.write(array.array("f", (rng.gauss(0, 1) for _ in range(t * h))).tobytes())
PY
}

step caps "$moe" caps
grep -E '^(cpu|level) ' "$out/caps.txt" | sed 's/^/  /'
ckpt=$dir/deepseek-v3-mini
step gen "$moe" gen --family deepseek_v3 --dtype fp8 --layers 3 --hidden 1024 --experts 16 --topk 4 \
  --groups 4 --topk-group 2 --intermediate 256 --shards 2 --seed 1 --out "$ckpt"
sed 's/^/  /' "$out/gen.txt"
step inspect "$moe" inspect "$ckpt"
grep -E '^(layers +[0-9]|experts |formats |result )' "$out/inspect.txt" | sed 's/^/  /'
grep -m1 -E 'kernel set: moe_expert_' "$out/inspect.txt" |
  sed -E 's/.*kernel set: ([^:]*):.*; recipe ([a-z0-9]+).*/  expert kernels: \1, recipe \2/'

# The first MoE layer (layer 1; layer 0 is dense) on a batch of 8 tokens, with the trace of
# the median of 5 forwards (the first one also pays for starting the threads).
hidden "$dir/x8.npy" 8 1024
step run "$moe" run --model "$ckpt" --hidden "$dir/x8.npy" --out "$dir/y8.npy" --ids-out "$dir/ids8.npy" \
  --weights-out "$dir/w8.npy" --trace --repeat 5
tail -n 1 "$out/run.txt" | sed 's/^/  /'
python3 - "$dir/ids8.npy" "$dir/w8.npy" <<'PY'
import array, sys
def load(p, code):
    raw = open(p, "rb").read()
    n = int.from_bytes(raw[8:10], "little")
    a = array.array(code)
    a.frombytes(raw[10 + n:])
    return a
ids, w = load(sys.argv[1], "i"), load(sys.argv[2], "f")
for t in range(2):
    row = ", ".join("%d: %.3f" % (ids[t * 4 + k], w[t * 4 + k]) for k in range(4))
    print("  token %d -> experts {%s}" % (t, row))
PY

# Tokens per second: decode (one token per forward) and prefill (128 tokens per forward),
# the median of repeated forwards of one created layer (packing is not timed).
hidden "$dir/x1.npy" 1 1024
hidden "$dir/x128.npy" 128 1024
step decode "$moe" run --model "$ckpt" --hidden "$dir/x1.npy" --out "$dir/y1.npy" --repeat 51
sed -E 's/.*: ([0-9.]+ ms per forward.*tokens\/s).*/  decode, 1 token per forward: \1/' "$out/decode.txt"
step prefill "$moe" run --model "$ckpt" --hidden "$dir/x128.npy" --out "$dir/y128.npy" --repeat 9
sed -E 's/.*: ([0-9.]+ ms per forward.*tokens\/s).*/  prefill, 128 tokens per forward: \1/' "$out/prefill.txt"

# `moe bench` on the same layer: every result against this machine's floors.
step bench "$moe" bench --model "$ckpt" --tokens 1,4,16,128 --threads 1 --time-ms 200 --plot "$out/roofline.svg"
grep -E '^moe bench: warning' "$out/bench.txt" || true
sed -n '/^  tokens /,/^$/p' "$out/bench.txt" | sed '/^$/d'
echo
echo "every command's whole output: $out/{caps,gen,inspect,run,decode,prefill,bench}.txt; the roofline: $out/roofline.svg"
