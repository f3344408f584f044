# check_lib.sh — what the shell tests share: a scratch folder removed at exit, check and fail, finish.
# Sourced, not run: sets tmp and the counts that check and fail keep; a test ends with finish.
# shellcheck shell=bash disable=SC2034 # the variables are for the test that sources this

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
# finish: the counts on stderr; the test's status (0: no check failed, at least one ran).
finish() {
  echo "$(basename "$0" .sh): $checks checks, $failures failed" >&2
  [ "$failures" -eq 0 ] && [ "$checks" -gt 0 ]
}
