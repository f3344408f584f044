#!/usr/bin/env bash
# demo.sh — `make run`: generate a small DeepSeek-V3-style checkpoint and inspect it.
set -euo pipefail
moe=${1:-build/moe}
dir=$(mktemp -d "${TMPDIR:-/tmp}/moe-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
run() {
  echo "\$ $*" | sed "s|$dir|\$TMP|g"
  "$@"
  echo
}
run "$moe" caps
run "$moe" gen --family deepseek_v3 --dtype fp8 --layers 3 --hidden 1024 --experts 16 --topk 4 \
  --groups 4 --topk-group 2 --intermediate 256 --shards 2 --seed 1 --out "$dir/deepseek-v3-mini"
run "$moe" inspect "$dir/deepseek-v3-mini"
