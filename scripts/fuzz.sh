#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a set time.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]   (default: every target)
# Each target starts from its in-tree seeds (tests/fuzz/corpus/<target>/, read only) and grows
# a scratch corpus in BUILD_DIR/fuzz-corpus/<target>/. A crash, leak, sanitizer report or broken
# invariant stops that target, leaves the input in BUILD_DIR/fuzz-artifacts/<target>/, and makes
# this script fail after the other targets ran: add the input to the in-tree corpus with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do
    t=${f#tests/fuzz/fuzz_}
    targets+=("${t%.c}")
  done
fi

# The library is instrumented for coverage (fuzzer-no-link); only the targets link libFuzzer.
# UBSan's pointer-overflow check is left out: on the intrinsic kernels it triples clang's
# compile time (a kernels/avx512*/ file takes two minutes), while ASan still catches every
# access outside a buffer and the gcc sanitizer build of .ci/run keeps the check.
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined"
flags+=" -fno-sanitize=pointer-overflow -fno-sanitize-recover=all"
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMOE_FUZZ=ON \
  -DCMAKE_C_FLAGS="$flags" >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/#/fuzz_}" >/dev/null

export OMP_WAIT_POLICY=passive
failed=()
summary=()
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  art="$build/fuzz-artifacts/$t"
  log="$build/fuzz-$t.log"
  mkdir -p "$work" "$art"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=tests/fuzz/$t.dict")
  echo "fuzz_$t: ${seconds}s" >&2
  # 2 GB of RSS and 512 MB per allocation are far above what a valid small input needs, so
  # hitting either is an allocation bomb: a finding like any other.
  rc=0
  "$build/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$art/" \
    "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  summary+=("fuzz_$t: ${execs:-?} executions, exit $rc")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    tail -40 "$log" >&2
  fi
done
printf '%s\n' "${summary[@]}" >&2
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs under $build/fuzz-artifacts/)" >&2
  exit 1
fi
