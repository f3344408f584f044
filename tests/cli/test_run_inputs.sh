#!/usr/bin/env bash
# test_run_inputs.sh — `moe run`'s inputs: --ids/--weights (experts only), --input-ids on every layer, hidden dtypes.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"
py() { python3 "$here/run_ref.py" "$@"; }
edit() { python3 "$here/npy_edit.py" "$@"; }
# run_ok WHAT ARGS...: moe run exits 0 with nothing on stderr.
run_ok() {
  local what=$1 rc=0
  shift
  "$moe" run "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  first_line "$tmp/stderr"
  check "$what: exit 0 (got $rc: ${line:0:300})" test "$rc" -eq 0
  check "$what: nothing on stderr" test "$nlines" -eq 0
}
# expect_error WHAT CODE NEEDLE... -- ARGS...: exit CODE, one line on stderr holding every
# NEEDLE, nothing on stdout, no --out file.
expect_error() {
  local what=$1 code=$2 rc=0 needles=()
  shift 2
  while [ "$1" != -- ]; do
    needles+=("$1")
    shift
  done
  shift
  rm -f "$tmp/err_y.npy"
  "$moe" run "$@" --out "$tmp/err_y.npy" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  first_line "$tmp/stderr"
  check "$what: exit $code (got $rc)" test "$rc" -eq "$code"
  check "$what: one line on stderr (got $nlines: ${line:0:300})" test "$nlines" -eq 1
  check "$what: 'moe run: ' prefix" has "$line" "moe run: "
  for n in "${needles[@]}"; do
    check "$what: message contains '$n' (${line:0:300})" has "$line" "$n"
  done
  check "$what: nothing on stdout" test ! -s "$tmp/stdout"
  check "$what: no --out file" test ! -e "$tmp/err_y.npy"
}

# ---- --ids and --weights: the experts-only forward ------------------------------------------

T=7
v3=$tmp/v3
"$moe" gen --family deepseek_v3 --dtype bf16 --layers 2 --hidden 256 --experts 8 --topk 2 \
  --groups 4 --topk-group 2 --intermediate 64 --seed 3 --out "$v3" >/dev/null
py batch hidden "$tmp/x.npy" $T 256 5
run_ok "routed run" --model "$v3" --hidden "$tmp/x.npy" --out "$tmp/y.npy" --ids-out "$tmp/i.npy" \
  --weights-out "$tmp/w.npy"
edit batch retype "$tmp/i.npy" "$tmp/i64.npy" '<i8' \; retype "$tmp/i.npy" "$tmp/if.npy" '<f4' \; \
  retype "$tmp/w.npy" "$tmp/w64.npy" '<f8' \; retype "$tmp/w.npy" "$tmp/wi.npy" '<i4' \; \
  set "$tmp/i.npy" "$tmp/i_big.npy" 3 1 8 \; set "$tmp/i.npy" "$tmp/i_neg.npy" 0 0 -1 \; \
  repeat "$tmp/i.npy" "$tmp/i_rep.npy" 2 1 0 \; cols "$tmp/i.npy" "$tmp/i_k1.npy" 1 \; \
  cols "$tmp/w.npy" "$tmp/w_k1.npy" 1 \; set "$tmp/w.npy" "$tmp/w_nan.npy" 4 0 nan \; \
  set "$tmp/w.npy" "$tmp/w_inf.npy" 6 1 inf
python3 - "$here" "$tmp/w.npy" "$tmp/w0.npy" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from npy_edit import write
from ref_lib import npy_read
_, shape, data = npy_read(sys.argv[2])
write(sys.argv[3], "<f4", shape, [0.0] * len(data))
PY

run_ok "--ids/--weights from --ids-out/--weights-out" --model "$v3" --hidden "$tmp/x.npy" \
  --ids "$tmp/i.npy" --weights "$tmp/w.npy" --out "$tmp/yx.npy"
check "experts only on the routed run's ids and weights = the routed run's --out" cmp -s "$tmp/y.npy" "$tmp/yx.npy"
check "the summary says experts only" has "$(tail -n 1 "$tmp/stdout")" "experts only, on --ids and --weights"
run_ok "--ids in i64" --model "$v3" --hidden "$tmp/x.npy" --ids "$tmp/i64.npy" --weights "$tmp/w.npy" \
  --out "$tmp/yx64.npy" --threads 1
check "i64 ids on 1 thread = the routed run's --out" cmp -s "$tmp/y.npy" "$tmp/yx64.npy"
# --no-shared: with every weight 0 the routed part is 0, so --out is exactly zero without the
# shared expert and is the shared expert's output with it (not zero).
run_ok "--no-shared, zero weights" --model "$v3" --hidden "$tmp/x.npy" --ids "$tmp/i.npy" \
  --weights "$tmp/w0.npy" --no-shared --out "$tmp/y0n.npy"
check "--no-shared in the summary" has "$(tail -n 1 "$tmp/stdout")" "no shared experts"
run_ok "shared, zero weights" --model "$v3" --hidden "$tmp/x.npy" --ids "$tmp/i.npy" \
  --weights "$tmp/w0.npy" --out "$tmp/y0s.npy"
check "zero weights: --no-shared gives zeros, the shared expert alone does not" python3 - \
  "$here" "$tmp/y0n.npy" "$tmp/y0s.npy" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ref_lib import npy_read
_, sn, n = npy_read(sys.argv[2])
_, ss, s = npy_read(sys.argv[3])
assert sn == ss == (7, 256), (sn, ss)
assert all(v == 0.0 for v in n), "routed part of zero weights is not zero"
assert sum(v * v for v in s) > 0, "the shared expert's output is zero"
PY
run_ok "--no-shared, the routed weights" --model "$v3" --hidden "$tmp/x.npy" --ids "$tmp/i.npy" \
  --weights "$tmp/w.npy" --no-shared --out "$tmp/yn.npy"
check "--no-shared differs from the full block" bash -c "! cmp -s '$tmp/y.npy' '$tmp/yn.npy'"

X=(--model "$v3" --hidden "$tmp/x.npy")
expect_error "--ids: an id = E" 1 "--ids $tmp/i_big.npy: " "ids[3][1] = 8 is outside [0, 8)" -- \
  "${X[@]}" --ids "$tmp/i_big.npy" --weights "$tmp/w.npy"
expect_error "--ids: a negative id" 1 "--ids $tmp/i_neg.npy: " "ids[0][0] = -1 is outside [0, 8)" -- \
  "${X[@]}" --ids "$tmp/i_neg.npy" --weights "$tmp/w.npy"
expect_error "--ids: a repeated id" 1 "--ids $tmp/i_rep.npy: " "ids[2][1] = " "repeats ids[2][0]" -- \
  "${X[@]}" --ids "$tmp/i_rep.npy" --weights "$tmp/w.npy"
expect_error "--ids: K = 1 of top-2" 1 "--ids $tmp/i_k1.npy: shape [7, 1], want [7, 2]" -- \
  "${X[@]}" --ids "$tmp/i_k1.npy" --weights "$tmp/w.npy"
expect_error "--weights: K = 1 of top-2" 1 "--weights $tmp/w_k1.npy: shape [7, 1], want [7, 2]" -- \
  "${X[@]}" --ids "$tmp/i.npy" --weights "$tmp/w_k1.npy"
py rows "$tmp/i.npy" "$tmp/i_3rows.npy" 0 3
expect_error "--ids: rows != --hidden's" 1 "--ids $tmp/i_3rows.npy: shape [3, 2], want [7, 2]" -- \
  "${X[@]}" --ids "$tmp/i_3rows.npy" --weights "$tmp/w.npy"
expect_error "--ids of f32" 1 "--ids $tmp/if.npy: dtype f32, want i32 or i64" -- \
  "${X[@]}" --ids "$tmp/if.npy" --weights "$tmp/w.npy"
expect_error "--weights of f64" 1 "--weights $tmp/w64.npy: descr '<f8' is not supported: want f32" -- \
  "${X[@]}" --ids "$tmp/i.npy" --weights "$tmp/w64.npy"
expect_error "--weights of i32" 1 "--weights $tmp/wi.npy: dtype i32, want f32" -- \
  "${X[@]}" --ids "$tmp/i.npy" --weights "$tmp/wi.npy"
expect_error "--weights: a NaN" 1 "--weights $tmp/w_nan.npy: " "weights[4][0] = nan is not finite" -- \
  "${X[@]}" --ids "$tmp/i.npy" --weights "$tmp/w_nan.npy"
expect_error "--weights: an Inf" 1 "--weights $tmp/w_inf.npy: " "weights[6][1] = inf is not finite" -- \
  "${X[@]}" --ids "$tmp/i.npy" --weights "$tmp/w_inf.npy"
expect_error "--ids without --weights" 2 "--ids needs --weights" -- "${X[@]}" --ids "$tmp/i.npy"
expect_error "--weights without --ids" 2 "--weights needs --ids" -- "${X[@]}" --weights "$tmp/w.npy"
expect_error "--no-shared without --ids" 2 "--no-shared needs --ids and --weights" -- "${X[@]}" --no-shared
for opt in --ids-out --weights-out --logits-out --input-ids; do
  expect_error "$opt with --ids" 2 "$opt is for the router, which --ids replaces" -- \
    "${X[@]}" --ids "$tmp/i.npy" --weights "$tmp/w.npy" "$opt" "$tmp/o.npy"
done
expect_error "--ids on a dense layer" 1 "--ids: layer 0 of $v3 is dense" -- \
  "${X[@]}" --layer 0 --ids "$tmp/i.npy" --weights "$tmp/w.npy"

# ---- DeepSeek-V4: --input-ids on every layer; the caller's ids on a hash layer --------------

v4=$tmp/v4
"$moe" gen --family deepseek_v4 --dtype mxfp4 --layers 2 --hash-layers 1 --hidden 256 \
  --experts 8 --topk 2 --intermediate 64 --vocab 1000 --seed 9 --out "$v4" >/dev/null
py batch ids "$tmp/t.npy" i64 $T 1000 2 \; ids "$tmp/tbig.npy" i32 $T 5000 4
python3 - "$tmp/t.npy" "$tmp/t_vocab.npy" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-8:] = (1000).to_bytes(8, "little")  # the last token id is vocab_size itself
open(sys.argv[2], "wb").write(bytes(b))
PY
run_ok "v4 score layer without --input-ids" --model "$v4" --layer 1 --hidden "$tmp/x.npy" \
  --out "$tmp/v4s.npy" --ids-out "$tmp/v4si.npy"
run_ok "v4 score layer with --input-ids (as a whole-model run passes them)" --model "$v4" \
  --layer 1 --hidden "$tmp/x.npy" --input-ids "$tmp/t.npy" --out "$tmp/v4s_t.npy" \
  --ids-out "$tmp/v4si_t.npy"
check "v4 score layer: the ids change nothing (--out)" cmp -s "$tmp/v4s.npy" "$tmp/v4s_t.npy"
check "v4 score layer: the ids change nothing (--ids-out)" cmp -s "$tmp/v4si.npy" "$tmp/v4si_t.npy"
run_ok "v4 hash layer, routed" --model "$v4" --layer 0 --hidden "$tmp/x.npy" --input-ids "$tmp/t.npy" \
  --out "$tmp/v4h.npy" --ids-out "$tmp/v4hi.npy" --weights-out "$tmp/v4hw.npy"
run_ok "v4 hash layer, experts only (no --input-ids needed)" --model "$v4" --layer 0 \
  --hidden "$tmp/x.npy" --ids "$tmp/v4hi.npy" --weights "$tmp/v4hw.npy" --out "$tmp/v4hx.npy"
check "v4 hash layer: experts only = routed" cmp -s "$tmp/v4h.npy" "$tmp/v4hx.npy"
# A bad token id is blamed on --input-ids, not on --hidden.
expect_error "v4 hash layer: a token id = vocab_size" 1 \
  "--input-ids $tmp/t_vocab.npy: " "token_ids[6] = 1000 is outside [0, 1000)" -- \
  --model "$v4" --layer 0 --hidden "$tmp/x.npy" --input-ids "$tmp/t_vocab.npy"
check "a bad token id: --hidden not named" bash -c "! grep -qF -- '--hidden' '$tmp/stderr'"

# ---- --hidden in f64 and f16: converted to f32 at the door ----------------------------------

edit batch retype "$tmp/x.npy" "$tmp/x64.npy" '<f8' \; retype "$tmp/x.npy" "$tmp/x64n.npy" '<f8' 5e-8 \; \
  round "$tmp/x.npy" "$tmp/x64n_f32.npy" '<f8:5e-8' \; retype "$tmp/x.npy" "$tmp/x16.npy" '<f2' \; \
  round "$tmp/x.npy" "$tmp/x16_f32.npy" '<f2' \; retype "$tmp/x.npy" "$tmp/xbf.npy" '<V2' \; \
  retype "$tmp/x.npy" "$tmp/xi.npy" '<i8'
check "the nudged f64 values are not all f32 values" bash -c "! cmp -s '$tmp/x.npy' '$tmp/x64n_f32.npy'"
run_ok "--hidden f64 (f32 values)" --model "$v3" --hidden "$tmp/x64.npy" --out "$tmp/y64.npy"
check "--hidden f64 holding f32 values = f32" cmp -s "$tmp/y.npy" "$tmp/y64.npy"
run_ok "--hidden f64 (nudged)" --model "$v3" --hidden "$tmp/x64n.npy" --out "$tmp/y64n.npy"
run_ok "--hidden: the nudged f64 rounded to f32 by Python" --model "$v3" --hidden "$tmp/x64n_f32.npy" \
  --out "$tmp/y64n_ref.npy"
check "--hidden f64 = its values rounded to nearest f32" cmp -s "$tmp/y64n.npy" "$tmp/y64n_ref.npy"
run_ok "--hidden f16" --model "$v3" --hidden "$tmp/x16.npy" --out "$tmp/y16.npy"
run_ok "--hidden: the f16 values as f32" --model "$v3" --hidden "$tmp/x16_f32.npy" --out "$tmp/y16_ref.npy"
check "--hidden f16 = its values in f32" cmp -s "$tmp/y16.npy" "$tmp/y16_ref.npy"
check "--hidden f16 differs from f32 (the rounding is real)" bash -c "! cmp -s '$tmp/y.npy' '$tmp/y16.npy'"
expect_error "--hidden of bf16 bits ('<V2')" 1 "--hidden $tmp/xbf.npy: descr '<V2' is not supported: want f32 ('<f4'), or f64 ('<f8') or f16 ('<f2')" \
  ".npy has no bf16 dtype" -- --model "$v3" --hidden "$tmp/xbf.npy"
expect_error "--hidden of i64" 1 "--hidden $tmp/xi.npy: dtype i64: want f32 ('<f4'), or f64" -- \
  --model "$v3" --hidden "$tmp/xi.npy"
check "--hidden of i64: the message wants no integer dtype" bash -c "! grep -qE 'want.*(i32|i64|<i)' '$tmp/stderr'"
# A truncated f16 file: the header's shape is checked as for f32.
head -c -6 "$tmp/x16.npy" >"$tmp/x16_short.npy"
expect_error "--hidden f16, truncated" 1 "--hidden $tmp/x16_short.npy: " "are not the '<f2' array its header's shape describes" -- \
  --model "$v3" --hidden "$tmp/x16_short.npy"
head -c -1 "$tmp/x16.npy" >"$tmp/x16_odd.npy"
expect_error "--hidden f16, half an element" 1 "--hidden $tmp/x16_odd.npy: " "are not whole '<f2' elements" -- \
  --model "$v3" --hidden "$tmp/x16_odd.npy"

finish
