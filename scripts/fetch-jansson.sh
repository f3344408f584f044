#!/usr/bin/env bash
# fetch-jansson.sh — jansson's Debian source package (2.14-2, pinned and verified), unpacked and configured for the fuzz build.
# Usage: scripts/fetch-jansson.sh DEST   (prints the source folder, DEST/jansson-2.14, on success)
# apt-get fetches the source package with the archive's signed Sources index (it checks the
# signature and every file's hash) from a private state folder, leaving the machine's apt setup
# alone; the upstream tarball's SHA-256 is checked here as well. Debian's one patch touches only
# jansson's own test suite, so the upstream sources are what Debian's libjansson4 is built from.
# Nothing of jansson is committed. Exits non-zero with a message when anything fails (no network,
# no apt-get): the caller falls back to the system library.
set -euo pipefail
dest=${1:?usage: scripts/fetch-jansson.sh DEST}
version=2.14
debian=2.14-2
sha256=c739578bf6b764aa0752db9a2fdadcfe921c78f1228c7ec0bb47fa804c55d17b
src=$dest/jansson-$version
if [ -f "$src/src/jansson_private_config.h" ]; then
  echo "$src"
  exit 0
fi
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
src=$dest/jansson-$version
apt=$dest/apt
tarball=$apt/jansson_$version.orig.tar.gz
if [ ! -f "$tarball" ]; then
  command -v apt-get >/dev/null || { echo "fetch-jansson: no apt-get" >&2; exit 1; }
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  printf '%s\n' "Types: deb-src" "URIs: http://deb.debian.org/debian" "Suites: bookworm" \
    "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$apt/src.sources"
  opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" -qq update >"$apt/update.log" 2>&1 ||
    { echo "fetch-jansson: apt-get update failed (see $apt/update.log)" >&2; exit 1; }
  (cd "$apt" && apt-get "${opts[@]}" -qq source --download-only "jansson=$debian") >"$apt/source.log" 2>&1 ||
    { echo "fetch-jansson: apt-get source jansson=$debian failed (see $apt/source.log)" >&2; exit 1; }
fi
echo "$sha256  $tarball" | sha256sum -c --quiet - >&2 ||
  { echo "fetch-jansson: $tarball does not have the pinned SHA-256" >&2; exit 1; }
rm -rf "$src"
tar -xzf "$tarball" -C "$dest"
# What jansson's CMake build would write for this platform (x86-64 Linux, glibc, gcc/clang).
sed -e 's/@json_inline@/inline/' -e 's/@json_have_long_long@/1/' -e 's/@json_have_localeconv@/1/' \
  -e 's/@json_have_atomic_builtins@/1/' -e 's/@json_have_sync_builtins@/1/' \
  "$src/src/jansson_config.h.in" >"$src/src/jansson_config.h"
{
  for h in ENDIAN_H FCNTL_H SCHED_H UNISTD_H SYS_PARAM_H SYS_STAT_H SYS_TIME_H SYS_TYPES_H STDINT_H \
    CLOSE GETPID GETTIMEOFDAY OPEN READ SCHED_YIELD SYNC_BUILTINS ATOMIC_BUILTINS LOCALE_H \
    SETLOCALE INT32_T UINT32_T UINT16_T UINT8_T SSIZE_T; do
    echo "#define HAVE_$h 1"
  done
  echo "#define USE_URANDOM 1"
  echo "#define INITIAL_HASHTABLE_ORDER 3"
} >"$src/src/jansson_private_config.h"
echo "$src"
