# cli_lib.sh — what the CLI tests share: the moe argument, a scratch folder, check and fail, the summary.
# Sourced, not run (CMake runs only test_*.sh): source "$(dirname "$0")/cli_lib.sh" "$@" sets
# moe (the binary, $1), here (this folder), data (the test data), tmp (removed at exit), and
# the counts that check and fail keep; the test ends with finish.
# shellcheck shell=bash disable=SC2034 # the variables are for the test that sources this

moe=${1:?usage: bash tests/cli/$(basename "$0") path/to/moe}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=${MOE_TEST_DATA:-$(pwd)/tests/data}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe-$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  checks=$((checks + 1))
  "$@" || fail "$what"
}
# finish: the counts on stderr; the test's status (0: no check failed).
finish() {
  echo "$(basename "$0" .sh): $checks checks, $failures failed" >&2
  [ "$failures" -eq 0 ]
}

has() { [[ $1 == *"$2"* ]]; }
# first_line FILE: sets line (the first line of FILE) and nlines (its number of lines).
first_line() {
  local lines=()
  mapfile -t lines <"$1"
  nlines=${#lines[@]}
  line=${lines[0]-}
}
