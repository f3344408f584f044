#!/usr/bin/env bash
# bench.sh — `make bench`: run every benchmark program of the build, one after another.
set -euo pipefail
build=${1:-build}
shopt -s nullglob
for b in "$build"/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b"
done
