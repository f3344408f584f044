#!/usr/bin/env bash
# test_add_subdirectory.sh — a scratch project that embeds the source tree with add_subdirectory: no tests of libmoe's built, libmoe::moe links and runs.
set -uo pipefail
# shellcheck source=tests/install/install_lib.sh
source "$(dirname "$0")/install_lib.sh"
moe_tool=${MOE_CLI:?MOE_CLI is not set} # the build's: this test installs nothing

mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.21)
project(consumer LANGUAGES C)
enable_testing()
add_subdirectory("$src" libmoe)
add_executable(run_model "$src/examples/run_model.c")
target_link_libraries(run_model PRIVATE libmoe::moe)
CMAKE

configure() {
  cmake -S "$tmp/consumer" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_C_FLAGS="${MOE_CFLAGS:-}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log" >&2; return 1; }
}
build() {
  cmake --build "$tmp/build" -j 2 --target run_model >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; return 1; }
}
check "a project that add_subdirectory()s libmoe configures" configure
check "libmoe's tests are off when it is not the top-level project" \
  grep -qx "MOE_BUILD_TESTS:BOOL=OFF" "$tmp/build/CMakeCache.txt"
check "no test of libmoe's is registered" bash -c "! ctest --test-dir '$tmp/build' -N | grep -q 'Test *#'"
check "run_model builds against libmoe::moe" build
check "run_model links libmoe.so" \
  grep -q 'NEEDED.*\[libmoe\.so\.0\]' <<<"$(readelf -d "$tmp/build/run_model" 2>/dev/null)"
check "moe gen writes a model" make_model "$tmp/model"
check "run_model describes the model and runs its MoE layers" runs_model shared "$tmp/build/run_model" "$tmp/model"
finish
