# cli_lib.sh — what the CLI tests share: the moe argument, a scratch folder, check and fail, the summary.
# Sourced, not run (CMake runs only test_*.sh): source "$(dirname "$0")/cli_lib.sh" "$@" sets
# moe (the binary, $1), here (this folder), data (the test data), tmp (removed at exit), and
# the counts that check and fail keep; the test ends with finish.
# shellcheck shell=bash disable=SC2034 # the variables are for the test that sources this

moe=${1:?usage: bash tests/cli/$(basename "$0") path/to/moe}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=${MOE_TEST_DATA:-$(pwd)/tests/data}
# shellcheck source=tests/check_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check_lib.sh"

has() { [[ $1 == *"$2"* ]]; }
# first_line FILE: sets line (the first line of FILE) and nlines (its number of lines).
first_line() {
  local lines=()
  mapfile -t lines <"$1"
  nlines=${#lines[@]}
  line=${lines[0]-}
}
