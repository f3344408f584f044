#!/usr/bin/env bash
# test_caps.sh — `moe caps`: the report, the MOE_ISA cap and its errors (test_caps.sh path/to/moe).
set -u
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"

# Plain run: every section is there and every family has a selection with a reason.
env -u MOE_ISA "$moe" caps >"$tmp/out" 2>"$tmp/err"
check "moe caps exits 0" test $? -eq 0
check "no stderr" test ! -s "$tmp/err"
for label in cpu detected compiled MOE_ISA allowed level features selected; do
    check "section '$label'" grep -q "^ *$label" "$tmp/out"
done
check "MOE_ISA unset is reported" grep -q "^MOE_ISA *unset" "$tmp/out"
for feat in avx2 avx_vnni avx512 avx512_bf16 avx512_vnni avx512_fp16 avx512_vbmi; do
    check "feature '$feat' has a line" grep -Eq "^  $feat +[a-z]" "$tmp/out"
done
for fam in cvt_bf16_f32 cvt_f16_f32 cvt_e4m3_f32 cvt_mxfp4_f32; do
    check "$fam selected with a reason" grep -Eq "^  $fam +moe_${fam}__[a-z0-9]+: .+" "$tmp/out"
done

# MOE_ISA=scalar: every family falls back to its reference, and the cap is named as the cause.
MOE_ISA=scalar "$moe" caps >"$tmp/out" 2>"$tmp/err"
check "MOE_ISA=scalar exits 0" test $? -eq 0
check "MOE_ISA=scalar is reported" grep -q "^MOE_ISA *scalar (from the environment)" "$tmp/out"
check "allowed is none" grep -q "^allowed *none" "$tmp/out"
nref=$(grep -c '^  cvt_[a-z0-9_]* *moe_cvt_[a-z0-9_]*__ref:' "$tmp/out")
check "four reference kernels" test "$nref" -eq 4
if grep -q "^compiled.*avx2" "$tmp/out"; then
    check "the cap is named as the cause" grep -q "capped by MOE_ISA=scalar" "$tmp/out"
fi

# MOE_ISA=avx2 never selects an AVX-512 kernel.
MOE_ISA=avx2 "$moe" caps >"$tmp/out" 2>&1
check "MOE_ISA=avx2 exits 0" test $? -eq 0
check "no avx512 kernel under MOE_ISA=avx2" bash -c "! grep -q '__avx512:' '$tmp/out'"

# An unknown MOE_ISA: exit 1, exactly one line on stderr naming the value, nothing on stdout.
MOE_ISA=avx3 "$moe" caps >"$tmp/out" 2>"$tmp/err"
check "unknown MOE_ISA exits 1" test $? -eq 1
check "one stderr line" test "$(wc -l <"$tmp/err")" -eq 1
check "the value is named" grep -q "avx3" "$tmp/err"
check "nothing on stdout" test ! -s "$tmp/out"

# --help and a stray argument.
"$moe" caps --help >"$tmp/out" 2>&1
check "--help exits 0" test $? -eq 0
check "--help prints usage" grep -q "^usage: moe caps" "$tmp/out"
"$moe" caps extra >"$tmp/out" 2>"$tmp/err"
check "a stray argument exits 2" test $? -eq 2
check "usage error on stderr" grep -q "extra" "$tmp/err"

finish
