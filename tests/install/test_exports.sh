#!/usr/bin/env bash
# test_exports.sh — libmoe.so exports exactly the functions include/moe.h and moe_ep.h declare: no internal symbol, none missing.
set -uo pipefail
# shellcheck source=tests/install/install_lib.sh
source "$(dirname "$0")/install_lib.sh"
lib=${MOE_SHARED_LIB:?MOE_SHARED_LIB is not set}
nm_tool=${MOE_NM:-nm}

# The header's functions, read from its text with Python (comments, preprocessor lines and
# brace bodies removed; each remaining declaration that is not a typedef names a function
# before its first parenthesis).
python3 - "$src/include/moe.h" "$src/include/moe_ep.h" >"$tmp/declared" <<'PY' || { echo "FAIL: parsing moe.h" >&2; exit 1; }
import re, sys
text = "".join(open(f).read() for f in sys.argv[1:])
text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
text = re.sub(r"//[^\n]*", " ", text)
text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
text = text.replace('extern "C" {', " ")
while re.search(r"\{[^{}]*\}", text):
    text = re.sub(r"\{[^{}]*\}", " ", text)
names = set()
for decl in text.split(";"):
    decl = " ".join(decl.split())
    if not decl or decl.startswith("typedef") or "(" not in decl:
        continue
    m = re.search(r"(\w+)\s*\($", decl[: decl.index("(") + 1])
    if m:
        names.add(m[1])
print("\n".join(sorted(names)))
PY

"$nm_tool" -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u >"$tmp/exported"

declared=$(wc -l <"$tmp/declared")
check "moe.h declares functions (found $declared)" test "$declared" -gt 20
check "every declared function is a moe_ name" bash -c "! grep -v '^moe_' '$tmp/declared'"
leaked=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
check "libmoe.so exports nothing moe.h does not declare; it exports: ${leaked//$'\n'/ }" test -z "$leaked"
check "libmoe.so exports every function moe.h declares; missing: ${missing//$'\n'/ }" test -z "$missing"
finish
