#!/usr/bin/env bash
# bench.sh — `make bench`: a short `moe bench` set (one bf16, one FP8 and one MXFP4 preset);
# `make bench-kernels` (bench.sh BUILD kernels) runs every bench_* program instead.
set -euo pipefail
build=${1:-build}
if [ "${2:-}" = kernels ]; then
  shopt -s nullglob
  for b in "$build"/bench_*; do
    [ -x "$b" ] || continue
    echo "== $(basename "$b")"
    "$b"
  done
  exit 0
fi
moe=$build/moe
for preset in "qwen3-30b-a3b --format bf16" "deepseek-v3 --format fp8" "gpt-oss-20b --format mxfp4"; do
  echo "== moe bench --preset $preset"
  # shellcheck disable=SC2086 # the preset and its format are two words on purpose
  "$moe" bench --preset $preset --tokens 1,4,16,128,512 --memory-gb 2 --time-ms 300
  echo
done
