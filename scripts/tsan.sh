#!/usr/bin/env bash
# tsan.sh — the concurrency test under ThreadSanitizer, and an audit of the library's writable globals.
#
# usage: scripts/tsan.sh [BUILD_DIR]   (default build-tsan; JOBS=N for the build, default 2)
#
# 1. Builds libmoe and tests/layer/test_concurrency.c with -fsanitize=thread in BUILD_DIR.
# 2. Lists every writable global of libmoe.a (.data, .bss, common; thread-locals excluded)
#    and fails on any name outside the allowlist below: the library keeps no mutable global
#    state beyond capability detection done once under pthread_once.
# 3. Runs test_concurrency (eight threads: layer forward, router forward, open/create/close)
#    with OMP_THREAD_LIMIT=1. libgomp is not built with TSan: its barriers and work sharing
#    synchronise through futexes TSan cannot see, so a team of two or more threads reports
#    races that are not there. One thread per team keeps every OpenMP region on its calling
#    thread, and the eight callers are plain pthreads, which TSan follows.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-tsan}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS='-fsanitize=thread -fno-omit-frame-pointer' >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target moe test_concurrency >/dev/null

# Name -> why it may be written after load.
allowed='detect_once detected_caps detected_brand detected_l2 tmp_counter'
#   detect_once, detected_caps, detected_brand, src/cpu/cpu_detect.c: written once, under
#   detected_l2                                 pthread_once, read-only afterwards
#   tmp_counter                                 src/io/file.c: an atomic counter that makes
#                                               temporary file names unique
#   .gomp_critical_user_*                       libgomp's lock of a named omp critical
# objdump -t lines: "ADDRESS FLAGS SECTION<TAB>SIZE NAME"; "O" among the flags marks an object.
globals=$(objdump -t "$build/libmoe.a" | awk -F'\t' '
  NF == 2 && $1 ~ / O / {
    n = split($1, left, " "); m = split($2, right, " "); sec = left[n]
    if ((sec ~ /^\.(data|bss)/ && sec !~ /^\.data\.rel\.ro/) || sec == "*COM*") print right[m]
  }' | sort -u)
bad=0
for g in $globals; do
  case " $allowed " in *" $g "*) continue ;; esac
  case $g in .gomp_critical_user_*) continue ;; esac
  echo "tsan.sh: libmoe.a has a writable global '$g' that is not in the allowlist" >&2
  bad=1
done
if [ "$bad" -ne 0 ]; then
  echo "tsan.sh: make it const, thread-local, per handle, or (once-only) add it to the allowlist with the reason" >&2
  exit 1
fi
echo "tsan.sh: writable globals: $(echo $globals)"

OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 OMP_WAIT_POLICY=passive \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  MOE_TEST_DATA="$PWD/tests/data" "$build/test_concurrency"
echo "tsan.sh: test_concurrency passed under ThreadSanitizer"
