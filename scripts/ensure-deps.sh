#!/usr/bin/env bash
# ensure-deps.sh — check that what the named Debian packages provide is here; install what is missing with apt-get where there is one.
#
# usage: scripts/ensure-deps.sh PACKAGE...   (Debian names: cmake gcc libgomp1 libjansson-dev ...)
#
# Each name is checked by what it provides, not by dpkg: a tool on the PATH, jansson through
# pkg-config, a C compiler (CC, else cc: the one CMake picks) that compiles and links a program,
# with -fopenmp an OpenMP one. So any system on which everything is present passes. For what is
# missing: as root with apt-get, it installs those packages; without root it prints the
# apt-get command; without apt-get it says what is missing and fails.
set -euo pipefail
cc=${CC:-cc}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/moe-deps.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# links COMPILER FLAGS... < PROGRAM: whether COMPILER compiles and links PROGRAM with FLAGS.
links() {
  local compiler=$1
  shift
  cat >"$scratch/probe.c"
  command -v "$compiler" >/dev/null 2>&1 &&
    "$compiler" "$@" "$scratch/probe.c" -o "$scratch/probe" >/dev/null 2>&1
}
hello='#include <stdio.h>
int main(void) { puts("hello"); return 0; }'
openmp='#include <omp.h>
int main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }'
mpi='#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); return MPI_Finalize(); }'
fuzz_target='#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { (void)data; (void)size; return 0; }'

# have PACKAGE: whether what PACKAGE provides works here.
have() {
  case $1 in
  cmake | make | pkg-config | python3 | clang) command -v "$1" >/dev/null 2>&1 ;;
  llvm) command -v llvm-symbolizer >/dev/null 2>&1 ;;
  gcc | libc6-dev) links "$cc" <<<"$hello" ;;
  libgomp1) links "$cc" -fopenmp <<<"$openmp" ;;
  libjansson-dev) command -v pkg-config >/dev/null 2>&1 && pkg-config --exists jansson ;;
  libomp-dev) links clang -fopenmp <<<"$openmp" ;;
  libopenmpi-dev) command -v mpicc >/dev/null 2>&1 && links mpicc <<<"$mpi" ;;
  openmpi-bin) command -v mpirun >/dev/null 2>&1 ;;
  libclang-rt-dev) links clang -fsanitize=fuzzer,address,undefined <<<"$fuzz_target" ;;
  *) command -v "$1" >/dev/null 2>&1 ||
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" ;;
  esac
}

# what PACKAGE: what it stands for, for a machine that has no apt-get.
what() {
  case $1 in
  gcc | libc6-dev) echo "a C compiler ($cc) with the C library's headers" ;;
  libgomp1) echo "OpenMP for $cc (-fopenmp)" ;;
  libjansson-dev) echo "jansson, found by pkg-config" ;;
  libomp-dev) echo "OpenMP for clang (-fopenmp)" ;;
  libopenmpi-dev) echo "MPI's C compiler wrapper and headers (mpicc, mpi.h)" ;;
  openmpi-bin) echo "MPI's launcher (mpirun)" ;;
  libclang-rt-dev) echo "clang's libFuzzer and sanitizer runtimes" ;;
  llvm) echo "llvm-symbolizer" ;;
  *) echo "$1" ;;
  esac
}

missing=()
for pkg in "$@"; do
  have "$pkg" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "libmoe needs what is missing here (Debian package names in brackets):" >&2
  for pkg in "${missing[@]}"; do
    echo "  $(what "$pkg") [$pkg]" >&2
  done
  echo "Install them with this system's package manager (CC=... chooses the compiler)." >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "libmoe needs missing packages; run:" >&2
  echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
for pkg in "${missing[@]}"; do
  if ! have "$pkg"; then
    echo "ensure-deps.sh: installed $pkg, but $(what "$pkg") still does not work" >&2
    exit 1
  fi
done
