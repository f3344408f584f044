#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets (clang, ASan + UBSan) and runs each for a set time.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]   (default: every target)
# Each target starts from its in-tree seeds (tests/fuzz/corpus/<target>/, read only) and grows
# a corpus in FUZZ_CORPUS/<target>/ (default BUILD_DIR/fuzz-corpus; `make fuzz-long` keeps it
# outside the build, so a campaign resumes where the last one stopped). A crash, leak, sanitizer
# report, broken invariant or memory limit stops that target, leaves the input in
# BUILD_DIR/fuzz-artifacts/<target>/, and makes this script fail after the other targets ran:
# add the input (minimised: fuzz_<target> -minimize_crash=1 -runs=10000 INPUT) to the in-tree
# corpus with the fix.
# jansson is compiled from its Debian source package (scripts/fetch-jansson.sh, pinned) with the
# same flags, so coverage and the sanitizers reach inside the JSON parser; if it cannot be
# fetched, or with FUZZ_JANSSON=system, the targets link the system libjansson instead.
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
jansson=
if [ "${FUZZ_JANSSON:-source}" != system ]; then
  jansson=$(scripts/fetch-jansson.sh "$build/jansson") ||
    { echo "fuzz: WARNING: no jansson source package; fuzzing against the system libjansson," \
      "so coverage stops at the JSON parser" >&2; jansson=; }
fi
cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMOE_FUZZ=ON \
  -DCMAKE_C_FLAGS="$flags" -DMOE_JANSSON_SOURCE="$jansson" >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/#/fuzz_}" >/dev/null

export OMP_WAIT_POLICY=passive
failed=()
summary=()
corpus=${FUZZ_CORPUS:-$build/fuzz-corpus}
# The longest input per target: each JSON format's own size limit (config.json 16 MiB; a
# safetensors header or an index 100 MB, plus the 8-byte prefix and room for other files).
max_len() {
  case $1 in
  config) echo 16777216 ;;
  safetensors | index | json | open_create) echo 100001024 ;;
  *) echo 1048576 ;;
  esac
}
for t in "${targets[@]}"; do
  work="$corpus/$t"
  art="$build/fuzz-artifacts/$t"
  log="$build/fuzz-$t.log"
  mkdir -p "$work" "$art"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=tests/fuzz/$t.dict")
  echo "fuzz_$t: ${seconds}s" >&2
  # The documented bound on reading any input is 4 x its bytes + 64 MiB (docs/errors.md); 1 GiB
  # of RSS (ASan's own overhead included) and 256 MiB in one allocation are far above what an
  # input within the limits needs, while the tree of a 16 MiB text of {} took 1.3 GB: hitting
  # either is a memory blow-up, a finding like any other.
  rc=0
  "$build/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=1024 \
    -malloc_limit_mb=256 -max_len="$(max_len "$t")" -print_final_stats=1 \
    -artifact_prefix="$art/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  summary+=("fuzz_$t: ${execs:-?} executions, ${cov:-cov: ?}, exit $rc")
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
