#!/usr/bin/env bash
# test_special_files.sh — FIFOs, sockets, devices and folders where the CLI wants a file: an error, never a hang.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"

# A reader blocked on a FIFO with no writer, or reading /dev/zero, never returns: each command
# runs under timeout, whose status 124 fails the check instead of holding up the suite.
limit=20

# refused WHAT PATH -- COMMAND...: within the limit, exit 1 with one stderr line that names
# PATH and says it is not a regular file ($want: what it is not).
want="not a regular file"
refused() {
  local what=$1 path=$2 rc=0
  shift 3
  timeout "$limit" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
  check "$what: exit 1 within ${limit}s (got $rc; 124 is a hang)" test "$rc" -eq 1
  check "$what: one line naming $path ($(head -c 300 "$tmp/err"))" \
    test "$(wc -l <"$tmp/err")" -eq 1 -a "$(grep -cF -- "'$path' is " "$tmp/err")" -eq 1
  check "$what: $want ($(head -c 300 "$tmp/err"))" grep -qF "$want" "$tmp/err"
}

specials=$tmp/specials
mkdir "$specials" "$specials/folder"
mkfifo "$specials/fifo"
ln -s /dev/zero "$specials/zero"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$specials/socket"
for k in fifo folder zero socket; do ln -s "$specials/$k" "$specials/link_$k"; done

# One shard and three shards, small; a good input for run and route.
one=$tmp/one
sharded=$tmp/sharded
"$moe" gen --family deepseek_v3 --dtype bf16 --layers 2 --hidden 256 --experts 8 --topk 2 \
  --groups 4 --topk-group 2 --intermediate 64 --seed 3 --out "$one" >/dev/null
"$moe" gen --family deepseek_v3 --dtype bf16 --layers 2 --hidden 256 --experts 8 --topk 2 \
  --groups 4 --topk-group 2 --intermediate 64 --seed 3 --shards 3 --out "$sharded" >/dev/null
python3 - "$here" "$tmp/x.npy" "$tmp/ids.npy" "$tmp/bias.npy" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from npy_edit import write
write(sys.argv[2], "<f4", [3, 256], [0.25] * (3 * 256))
write(sys.argv[3], "<i4", [3, 2], [0, 1] * 3)
write(sys.argv[4], "<f4", [8], [0.0] * 8)
PY
refused "run --hidden /dev/null" /dev/null -- "$moe" run --model "$one" --hidden /dev/null --out "$tmp/y.npy"

# Each kind as the file inspected, and under each name a model folder reads.
for k in fifo folder zero socket link_fifo link_folder link_zero link_socket; do
  p=$specials/$k
  [[ $k == *folder ]] || want="not a folder" refused "inspect $k" "$p" -- "$moe" inspect "$p"
  for name in model.safetensors config.json; do
    d=$tmp/model_${k}_${name%%.*}
    cp -r "$one" "$d"
    rm "$d/$name"
    ln -s "$p" "$d/$name"
    refused "inspect, $name -> $k" "$d/$name" -- "$moe" inspect "$d"
  done
  d=$tmp/sharded_$k
  cp -r "$sharded" "$d"
  rm "$d/model.safetensors.index.json"
  ln -s "$p" "$d/model.safetensors.index.json"
  refused "inspect, the index -> $k" "$d/model.safetensors.index.json" -- "$moe" inspect "$d"
  shard=$(ls "$sharded" | grep -m1 '^model-.*safetensors$')
  d=$tmp/shard_$k
  cp -r "$sharded" "$d"
  rm "$d/$shard"
  ln -s "$p" "$d/$shard"
  refused "inspect, a shard -> $k" "$d/$shard" -- "$moe" inspect "$d"
  refused "run --hidden $k" "$p" -- "$moe" run --model "$one" --hidden "$p" --out "$tmp/y.npy"
  refused "run --ids $k" "$p" -- "$moe" run --model "$one" --hidden "$tmp/x.npy" --ids "$p" \
    --weights "$tmp/x.npy" --out "$tmp/y.npy"
  refused "run --weights $k" "$p" -- "$moe" run --model "$one" --hidden "$tmp/x.npy" --ids "$tmp/ids.npy" \
    --weights "$p" --out "$tmp/y.npy"
  refused "route --logits $k" "$p" -- "$moe" route --config "$one/config.json" --logits "$p" \
    --bias "$tmp/bias.npy" --ids-out "$tmp/i.npy" --weights-out "$tmp/w.npy"
  refused "route --config $k" "$p" -- "$moe" route --config "$p" --logits "$tmp/none.npy" \
    --ids-out "$tmp/i.npy" --weights-out "$tmp/w.npy"
done
# A FIFO under the very name, not through a link (the case first reported).
d=$tmp/fifo_named
cp -r "$one" "$d"
rm "$d/model.safetensors"
mkfifo "$d/model.safetensors"
refused "inspect, model.safetensors is a FIFO" "$d/model.safetensors" -- "$moe" inspect "$d"
refused "run, model.safetensors is a FIFO" "$d/model.safetensors" -- \
  "$moe" run --model "$d" --hidden "$tmp/none.npy" --out "$tmp/y.npy"
check "nothing written by the refused runs" test ! -e "$tmp/y.npy" -a ! -e "$tmp/i.npy"

finish
