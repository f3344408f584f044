#!/usr/bin/env bash
# test_find_package.sh — examples/CMakeLists.txt (find_package(libmoe)) built against the installed package, both targets run on a generated model.
set -uo pipefail
# shellcheck source=tests/install/install_lib.sh
source "$(dirname "$0")/install_lib.sh"

configure() {
  cmake -S "$src/examples" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${MOE_CFLAGS:-} -Wall -Wextra -Werror" \
    >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log" >&2; return 1; }
}
build() {
  cmake --build "$tmp/build" -j 2 >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; return 1; }
}
check "cmake configures examples/ with find_package(libmoe) from the prefix" configure
check "the package found is the installed one" \
  grep -qx "libmoe_DIR:PATH=$libdir/cmake/libmoe" "$tmp/build/CMakeCache.txt"
check "cmake builds run_model (libmoe::moe) and run_model_static (libmoe::moe_static)" build
check "libmoe::moe is libmoe.so" \
  grep -q 'NEEDED.*\[libmoe\.so\.0\]' <<<"$(readelf -d "$tmp/build/run_model" 2>/dev/null)"
check "libmoe::moe_static is libmoe.a" \
  bash -c "! readelf -d '$tmp/build/run_model_static' | grep -q 'NEEDED.*libmoe'"

check "moe gen writes a model" make_model "$tmp/model"
check "run_model (libmoe::moe) describes the model and runs its MoE layers" runs_model shared "$tmp/build/run_model" "$tmp/model"
check "run_model_static (libmoe::moe_static) does too" runs_model static "$tmp/build/run_model_static" "$tmp/model"
check "the shared and static builds print the same" cmp -s "$tmp/shared.out" "$tmp/static.out"
finish
