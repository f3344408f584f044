#!/usr/bin/env bash
# test_pkgconfig.sh — examples/run_model.c built with plain cc against the installed libmoe.pc, shared and static, run on a generated model.
set -uo pipefail
# shellcheck source=tests/install/install_lib.sh
source "$(dirname "$0")/install_lib.sh"
export PKG_CONFIG_PATH=$libdir/pkgconfig
example=$src/examples/run_model.c
# A consumer's strict flags: the installed header must compile clean under them.
strict=(-std=c11 -pedantic -Wall -Wextra -Werror)

read -r -a pc_cflags <<<"$(pkg-config --cflags libmoe)"
read -r -a pc_libs <<<"$(pkg-config --libs libmoe)"
# libmoe.a: -l:libmoe.a (GNU ld) where pkg-config says -lmoe, which would pick libmoe.so.
read -r -a pc_static_libs <<<"$(pkg-config --static --libs libmoe | sed 's/-lmoe\b/-l:libmoe.a/')"

check "cc builds run_model.c against libmoe.so" \
  "$cc" "${cflags[@]}" "${strict[@]}" "${pc_cflags[@]}" "$example" -o "$tmp/run_model" \
  "${pc_libs[@]}" -Wl,-rpath,"$libdir"
check "cc builds run_model.c against libmoe.a with pkg-config --static" \
  "$cc" "${cflags[@]}" "${strict[@]}" "${pc_cflags[@]}" "$example" -o "$tmp/run_model_static" \
  "${pc_static_libs[@]}"
check "the shared build needs libmoe.so.0" \
  grep -q 'NEEDED.*\[libmoe\.so\.0\]' <<<"$(readelf -d "$tmp/run_model" 2>/dev/null)"
check "the static build needs no libmoe.so" \
  bash -c "! readelf -d '$tmp/run_model_static' | grep -q 'NEEDED.*libmoe'"
check "the shared build loads the installed libmoe.so.0" \
  grep -q "libmoe\.so\.0 => $libdir/libmoe\.so\.0" <<<"$(ldd "$tmp/run_model" 2>/dev/null)"

check "moe gen writes a model" make_model "$tmp/model"
check "run_model (libmoe.so) describes the model and runs its MoE layers" runs_model shared "$tmp/run_model" "$tmp/model"
check "run_model (libmoe.a) describes the model and runs its MoE layers" runs_model static "$tmp/run_model_static" "$tmp/model"
check "the shared and static builds print the same" cmp -s "$tmp/shared.out" "$tmp/static.out"
finish
