#!/usr/bin/env bash
# demo.sh — `make run`: generate a small DeepSeek-V3-style checkpoint, inspect it, run its MoE layer, bench it.
set -euo pipefail
moe=${1:-build/moe}
dir=$(mktemp -d "${TMPDIR:-/tmp}/moe-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
run() {
  echo "\$ $*" | sed "s|$dir|\$TMP|g"
  "$@" | sed "s|$dir|\$TMP|g"
  echo
}
# quiet COMMAND...: runs it, printing only its last line (the summary) with the paths shortened.
quiet() {
  echo "\$ $*" | sed "s|$dir|\$TMP|g"
  "$@" | tail -n 1 | sed "s|$dir|\$TMP|g"
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

ckpt=$dir/deepseek-v3-mini
run "$moe" caps
run "$moe" gen --family deepseek_v3 --dtype fp8 --layers 3 --hidden 1024 --experts 16 --topk 4 \
  --groups 4 --topk-group 2 --intermediate 256 --shards 2 --seed 1 --out "$ckpt"
run "$moe" inspect "$ckpt"

# The first MoE layer (layer 1; layer 0 is dense) on a batch of 8 tokens, with the trace of
# the median of 5 forwards (the first one also pays for starting the threads).
hidden "$dir/x8.npy" 8 1024
run "$moe" run --model "$ckpt" --hidden "$dir/x8.npy" --out "$dir/y8.npy" --ids-out "$dir/ids8.npy" \
  --weights-out "$dir/w8.npy" --trace --repeat 5
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
    print("token %d -> experts {%s}" % (t, row))
print()
PY

# Tokens per second: decode (one token per forward) and prefill (128 tokens per forward),
# the median of repeated forwards of one created layer (packing is not timed).
hidden "$dir/x1.npy" 1 1024
hidden "$dir/x128.npy" 128 1024
echo "decode, one token per forward:"
quiet "$moe" run --model "$ckpt" --hidden "$dir/x1.npy" --out "$dir/y1.npy" --repeat 51
echo
echo "prefill, 128 tokens per forward:"
quiet "$moe" run --model "$ckpt" --hidden "$dir/x128.npy" --out "$dir/y128.npy" --repeat 9
echo

# One screen of `moe bench` on the same layer: every result against this machine's floors.
run "$moe" bench --model "$ckpt" --tokens 1,4,16,128 --threads 1 --time-ms 200
