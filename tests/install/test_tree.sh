#!/usr/bin/env bash
# test_tree.sh — `cmake --install` into a scratch prefix (the other install tests' fixture), and what lands there.
set -uo pipefail
# shellcheck source=tests/install/install_lib.sh
source "$(dirname "$0")/install_lib.sh"

rm -rf "$prefix"
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log" >&2
  echo "FAIL: cmake --install $build --prefix $prefix" >&2
  exit 1
fi

# The version the header promises, read from it, not from the build.
version=$(sed -n 's/^#define MOE_VERSION_STRING "\(.*\)"$/\1/p' "$src/include/moe.h")
major=${version%%.*}
check "the header gives a version ($version)" test -n "$version"

check "include/moe.h is the source's" cmp -s "$src/include/moe.h" "$prefix/include/moe.h"
check "libmoe.a is installed" test -f "$libdir/libmoe.a"
check "libmoe.so.$version is a file" test -f "$libdir/libmoe.so.$version" -a ! -L "$libdir/libmoe.so.$version"
check "libmoe.so.$major -> libmoe.so.$version" test "$(readlink "$libdir/libmoe.so.$major")" = "libmoe.so.$version"
check "libmoe.so -> libmoe.so.$major" test "$(readlink "$libdir/libmoe.so")" = "libmoe.so.$major"
soname=$(readelf -d "$libdir/libmoe.so.$version" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "the SONAME is libmoe.so.$major (it is '$soname')" test "$soname" = "libmoe.so.$major"
check "bin/moe runs" "$prefix/bin/moe" gen --help >/dev/null 2>&1

cmake_dir=$libdir/cmake/libmoe
for f in libmoeConfig.cmake libmoeConfigVersion.cmake libmoeTargets.cmake; do
  check "$f is installed" test -f "$cmake_dir/$f"
done

export PKG_CONFIG_PATH=$libdir/pkgconfig
check "pkg-config finds libmoe" pkg-config --exists libmoe
check "libmoe.pc's version is $version" test "$(pkg-config --modversion libmoe 2>/dev/null)" = "$version"
check "libmoe.pc's prefix is the one installed into" test "$(pkg-config --variable=prefix libmoe 2>/dev/null)" = "$prefix"
check "libmoe.pc's Cflags name the installed include folder" \
  grep -qx -- "-I$prefix/include" <<<"$(pkg-config --cflags-only-I libmoe | tr ' ' '\n')"
finish
