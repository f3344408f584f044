#!/usr/bin/env bash
# test_run.sh — `moe run` end to end: each family × dtype vs `moe route` and float64; errors.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"
# Python starts slowly, so each call does many things (run_ref.py batch).
py() { python3 "$here/run_ref.py" "$@"; }
differ() { ! cmp -s "$1" "$2"; }
# run_ok WHAT ARGS...: moe run exits 0 with nothing on stderr; its stdout in $tmp/stdout.
run_ok() {
  local what=$1 rc=0
  shift
  "$moe" run "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  first_line "$tmp/stderr"
  check "$what: exit 0 (got $rc: ${line:0:300})" test "$rc" -eq 0
  check "$what: nothing on stderr" test "$nlines" -eq 0
}

# ---- Every family × dtype of this issue ---------------------------------------------------

# NAME FAMILY DTYPE REF GEN-OPTIONS: REF "ref" runs the float64 block reference on 3 rows.
# DeepSeek-V3 FP8 gets hidden 192 and intermediate 80: partial 128×128 scale blocks on
# both axes. Kimi-K2 keeps its one group.
cases=(
  "v2-bf16 deepseek_v2 bf16 - --groups 4 --topk-group 2"
  "v2-fp8 deepseek_v2 fp8 - --groups 1"
  "v3-bf16 deepseek_v3 bf16 - --groups 4 --topk-group 2"
  "v3-fp8 deepseek_v3 fp8 ref --groups 4 --topk-group 2 --hidden 192 --intermediate 80"
  "kimi-bf16 kimi_k2 bf16 - --experts 16 --topk 4"
  "kimi-fp8 kimi_k2 fp8 - --experts 16 --topk 4"
  "qwen3-bf16 qwen3_moe bf16 ref --experts 16 --topk 4"
  "qwen3-fp8 qwen3_moe fp8 - --experts 16 --topk 4"
  "mixtral-bf16 mixtral bf16 - --experts 8 --topk 2"
  "mixtral-fp8 mixtral fp8 ref --experts 8 --topk 2"
  "gptoss-bf16 gpt_oss bf16 ref --experts 8 --topk 4"
  "gptoss-mxfp4 gpt_oss mxfp4 ref --experts 8 --topk 4"
  "v4-mxfp4 deepseek_v4 mxfp4 ref --experts 16 --topk 4"
)
T=13

for c in "${cases[@]}"; do
  read -r name family dtype ref gen_opts <<<"$c"
  d=$tmp/$name
  ck=$d/ckpt
  mkdir -p "$d"
  # shellcheck disable=SC2086 # gen_opts is a list of options
  check "$name: gen" "$moe" gen --family "$family" --dtype "$dtype" --layers 2 --seed 11 \
    $gen_opts --out "$ck" >/dev/null
  H=$(sed -n 's/.*"hidden_size": \([0-9]*\).*/\1/p' "$ck/config.json")
  # The first MoE layer: layer 1 behind DeepSeek's one dense layer (DeepSeek-V4: its one
  # hash layer, run below), else layer 0.
  case $family in
  deepseek_v4) layer=1 dense= bias_name=layers.1.ffn.gate.bias ;;
  deepseek_* | kimi_k2) layer=1 dense=0 bias_name=layers.1.mlp.gate.e_score_correction_bias ;;
  *) layer=0 dense= bias_name= ;;
  esac
  bias=()
  if grep -q '"topk_method": "noaux_tc"' "$ck/config.json"; then
    bias=(--bias "$d/bias.npy")
  fi
  py batch hidden "$d/x.npy" $T "$H" 7 \; rows "$d/x.npy" "$d/x0.npy" 0 3 \; \
    rows "$d/x.npy" "$d/x5.npy" 5 6 \; rows "$d/x.npy" "$d/x12.npy" 12 13 \; \
    rows "$d/x.npy" "$d/x3.npy" 3 10 \; \
    ${bias:+extract "$ck" "$bias_name" "$d/bias.npy"}

  # The batch on 2 threads with every output and the trace, then 1 thread.
  outs() { echo --out "$d/$1y.npy" --logits-out "$d/$1l.npy" --ids-out "$d/$1i.npy" --weights-out "$d/$1w.npy"; }
  # shellcheck disable=SC2046 # outs prints options
  run_ok "$name: batch, 2 threads" --model "$ck" --hidden "$d/x.npy" $(outs a_) --threads 2 --trace
  first_line "$tmp/stdout"
  summary=$(tail -n 1 "$tmp/stdout")
  check "$name: the summary line ($summary)" has "$summary" "ran $T tokens through layer $layer of $family"
  check "$name: tokens/s in the summary" has "$summary" "tokens/s"
  check "$name: the trace table ($line)" has "$line" "trace: layer $layer, $T tokens"
  check "$name: trace has a gate step" grep -qE '^  gate' "$tmp/stdout"
  check "$name: trace has the steps total" grep -qE '^  steps ' "$tmp/stdout"
  # shellcheck disable=SC2046
  run_ok "$name: batch, 1 thread" --model "$ck" --hidden "$d/x.npy" $(outs b_) --threads 1
  for o in y l i w; do
    check "$name: 1 thread = 2 threads ($o)" cmp -s "$d/a_$o.npy" "$d/b_$o.npy"
  done

  # Rows alone and in a smaller batch: the same bits as in the batch of 13.
  for part in 0 5 12 3; do
    # shellcheck disable=SC2046
    run_ok "$name: rows from $part" --model "$ck" --hidden "$d/x$part.npy" $(outs "p${part}_")
  done

  # ids and weights = moe route on the logits the run wrote, with the checkpoint's bias.
  rc=0
  "$moe" route --config "$ck/config.json" --layer "$layer" --logits "$d/a_l.npy" "${bias[@]}" \
    --ids-out "$d/r_i.npy" --weights-out "$d/r_w.npy" >/dev/null 2>"$tmp/stderr" || rc=$?
  check "$name: moe route on the logits exits 0 ($(head -c 300 "$tmp/stderr"))" test "$rc" -eq 0
  check "$name: ids = moe route's" cmp -s "$d/a_i.npy" "$d/r_i.npy"
  check "$name: weights = moe route's" cmp -s "$d/a_w.npy" "$d/r_w.npy"

  E=$(sed -nE 's/.*"(n_routed_experts|num_experts|num_local_experts)": ([0-9]*).*/\2/p' "$ck/config.json")
  K=$(sed -nE 's/.*"num_experts_per_tok": ([0-9]*).*/\1/p' "$ck/config.json")
  checks_py=(expect "$d/a_y.npy" f32 "$T,$H" \; expect "$d/a_l.npy" f32 "$T,$E" \;
    expect "$d/a_i.npy" i32 "$T,$K" \; expect "$d/a_w.npy" f32 "$T,$K" \;
    ids-valid "$d/a_i.npy" "$E" \;)
  for part in "0 0" "5 5" "12 12" "3 3"; do
    read -r p a <<<"$part"
    for o in y l i w; do checks_py+=(same-rows "$d/a_$o.npy" "$d/p${p}_$o.npy" "$a" \;); done
  done
  if [ "$ref" = ref ]; then
    checks_py+=(block "$ck" "$layer" "$d/x0.npy" "$d/p0_l.npy" "$d/p0_i.npy" "$d/p0_w.npy" "$d/p0_y.npy" \;)
  fi
  what="shapes, dtypes, batch invariance"
  [ "$ref" = ref ] && what+=", float64 reference"
  check "$name: $what" py batch "${checks_py[@]}"

  # A dense layer runs when asked: the same engine, one always-on MLP.
  if [ -n "$dense" ]; then
    run_ok "$name: dense layer 0, 2 threads" --model "$ck" --layer 0 --hidden "$d/x.npy" --out "$d/dy2.npy" --threads 2
    check "$name: dense summary" has "$(tail -n 1 "$tmp/stdout")" "through layer 0 of $family (dense MLP)"
    run_ok "$name: dense layer 0, 1 thread" --model "$ck" --layer 0 --hidden "$d/x.npy" --out "$d/dy1.npy" --threads 1
    check "$name: dense: 1 thread = 2 threads" cmp -s "$d/dy1.npy" "$d/dy2.npy"
    run_ok "$name: dense row 5 alone" --model "$ck" --layer 0 --hidden "$d/x5.npy" --out "$d/dy5.npy"
    check "$name: dense: shape, and row 5 alone = row 5 of the batch" \
      py batch expect "$d/dy2.npy" f32 "$T,$H" \; same-rows "$d/dy2.npy" "$d/dy5.npy" 5
  fi
done

# ---- A DeepSeek-V4 hash layer (MXFP4 experts): token ids through --input-ids ---------------

d=$tmp/v4-mxfp4
ck=$d/ckpt
py batch ids "$d/t.npy" i64 $T 2048 5 \; ids "$d/t32.npy" i32 $T 2048 5 \; \
  rows "$d/t.npy" "$d/t0.npy" 0 3 \; rows "$d/t.npy" "$d/t5.npy" 5 6 \; \
  extract "$ck" layers.0.ffn.gate.tid2eid "$d/tid2eid.npy"
hout() { echo --out "$d/h$1y.npy" --logits-out "$d/h$1l.npy" --ids-out "$d/h$1i.npy" --weights-out "$d/h$1w.npy"; }
# shellcheck disable=SC2046
run_ok "v4 hash layer: batch, 2 threads" --model "$ck" --layer 0 --hidden "$d/x.npy" --input-ids "$d/t.npy" $(hout a) --threads 2
check "v4 hash layer: the summary" has "$(tail -n 1 "$tmp/stdout")" "through layer 0 of deepseek_v4 (hash"
# shellcheck disable=SC2046
run_ok "v4 hash layer: batch, 1 thread, i32 ids" --model "$ck" --layer 0 --hidden "$d/x.npy" --input-ids "$d/t32.npy" $(hout b) --threads 1
for o in y l i w; do
  check "v4 hash layer: 1 thread and i32 ids = 2 threads and i64 ids ($o)" cmp -s "$d/ha$o.npy" "$d/hb$o.npy"
done
# shellcheck disable=SC2046
run_ok "v4 hash layer: rows 0-2" --model "$ck" --layer 0 --hidden "$d/x0.npy" --input-ids "$d/t0.npy" $(hout p0)
# shellcheck disable=SC2046
run_ok "v4 hash layer: row 5" --model "$ck" --layer 0 --hidden "$d/x5.npy" --input-ids "$d/t5.npy" $(hout p5)
rc=0
"$moe" route --config "$ck/config.json" --layer 0 --logits "$d/hal.npy" --tid2eid "$d/tid2eid.npy" \
  --input-ids "$d/t.npy" --ids-out "$d/hri.npy" --weights-out "$d/hrw.npy" >/dev/null 2>"$tmp/stderr" || rc=$?
check "v4 hash layer: moe route exits 0 ($(head -c 300 "$tmp/stderr"))" test "$rc" -eq 0
check "v4 hash layer: ids = moe route's (the table's rows)" cmp -s "$d/hai.npy" "$d/hri.npy"
check "v4 hash layer: weights = moe route's" cmp -s "$d/haw.npy" "$d/hrw.npy"
checks_py=()
for o in y l i w; do
  checks_py+=(same-rows "$d/ha$o.npy" "$d/hp0$o.npy" 0 \; same-rows "$d/ha$o.npy" "$d/hp5$o.npy" 5 \;)
done
check "v4 hash layer: batch invariance, float64 reference" py batch "${checks_py[@]}" \
  block "$ck" 0 "$d/x0.npy" "$d/hp0l.npy" "$d/hp0i.npy" "$d/hp0w.npy" "$d/hp0y.npy"

# ---- More of the contract on one checkpoint ------------------------------------------------

q=$tmp/qwen3-bf16
qk=$q/ckpt
py batch hidden "$q/special.npy" 5 256 3 --special \; hidden "$q/empty.npy" 0 256 1
# NaN, ±Inf and 1e30 in the hidden states: no crash, valid ids.
run_ok "special values" --model "$qk" --hidden "$q/special.npy" --out "$q/sy.npy" --ids-out "$q/si.npy"
check "special values: ids in range and distinct" py ids-valid "$q/si.npy" 16
# T = 0.
run_ok "T = 0" --model "$qk" --hidden "$q/empty.npy" --out "$q/ey.npy" --logits-out "$q/el.npy" \
  --ids-out "$q/ei.npy" --weights-out "$q/ew.npy"
check "T = 0: the summary" has "$(tail -n 1 "$tmp/stdout")" "ran 0 tokens"
check "T = 0: empty outputs of the right shapes" py batch expect "$q/ey.npy" f32 0,256 \; \
  expect "$q/el.npy" f32 0,16 \; expect "$q/ei.npy" i32 0,4 \; expect "$q/ew.npy" f32 0,4
# bf16 logits (parity mode): bf16 values, and the routing of exactly those logits.
run_ok "--logits-dtype bf16" --model "$qk" --hidden "$q/x.npy" --logits-dtype bf16 --out "$q/hy.npy" \
  --logits-out "$q/hl.npy" --ids-out "$q/hi.npy" --weights-out "$q/hw.npy"
check "--logits-dtype bf16: every logit is a bf16 value" py bf16-valued "$q/hl.npy"
"$moe" route --config "$qk/config.json" --logits "$q/hl.npy" --ids-out "$q/hri.npy" \
  --weights-out "$q/hrw.npy" >/dev/null
check "--logits-dtype bf16: ids = moe route's" cmp -s "$q/hi.npy" "$q/hri.npy"
check "--logits-dtype bf16: weights = moe route's" cmp -s "$q/hw.npy" "$q/hrw.npy"
run_ok "--logits-dtype f32" --model "$qk" --hidden "$q/x.npy" --logits-dtype f32 --out "$q/fy.npy" \
  --logits-out "$q/fl.npy"
check "--logits-dtype f32 = the default" cmp -s "$q/fl.npy" "$q/a_l.npy"
check "--logits-dtype f32: the same output" cmp -s "$q/fy.npy" "$q/a_y.npy"
# --recipe bf16: the bf16 and FP8 experts take bf16 activations (the float64 reference's
# bf16-activation tolerance, batch invariance); f32 is the default; MXFP4 experts run q8 either
# way.
for name in qwen3-bf16 mixtral-fp8; do
  r=$tmp/$name
  run_ok "$name: --recipe bf16" --model "$r/ckpt" --hidden "$r/x.npy" --recipe bf16 --explain \
    --out "$r/by.npy"
  check "$name: --recipe bf16 in the explain text" grep -q 'recipe asked of the expert kernels: bf16 (options->experts_recipe)' "$tmp/stdout"
  run_ok "$name: --recipe bf16, rows 0-2" --model "$r/ckpt" --hidden "$r/x0.npy" --recipe bf16 \
    --out "$r/b0y.npy" --logits-out "$r/b0l.npy" --ids-out "$r/b0i.npy" --weights-out "$r/b0w.npy"
  check "$name: --recipe bf16 differs from f32" differ "$r/by.npy" "$r/a_y.npy"
  check "$name: --recipe bf16: batch invariance, float64 reference" py batch \
    same-rows "$r/by.npy" "$r/b0y.npy" 0 \; block "$r/ckpt" 0 "$r/x0.npy" "$r/b0l.npy" "$r/b0i.npy" "$r/b0w.npy" "$r/b0y.npy"
  run_ok "$name: --recipe f32" --model "$r/ckpt" --hidden "$r/x.npy" --recipe f32 --out "$r/fy.npy"
  check "$name: --recipe f32 = the default" cmp -s "$r/fy.npy" "$r/a_y.npy"
done
r=$tmp/gptoss-mxfp4
run_ok "gptoss-mxfp4: --recipe bf16" --model "$r/ckpt" --hidden "$r/x.npy" --recipe bf16 --out "$r/by.npy"
check "gptoss-mxfp4: --recipe bf16 = the default (q8)" cmp -s "$r/by.npy" "$r/a_y.npy"
# --recipe tile: bf16, FP8 and MXFP4 experts take bf16 activations with the tile unit's
# arithmetic (the float64 reference's bf16-activation tolerance, batch invariance, not the bf16
# recipe's bits, nor q8's for MXFP4; the explain text names the tile sets).
for name in qwen3-bf16 mixtral-fp8 gptoss-mxfp4; do
  r=$tmp/$name
  fmt=bf16
  [ "$name" = mixtral-fp8 ] && fmt=fp8
  [ "$name" = gptoss-mxfp4 ] && fmt=mxfp4
  run_ok "$name: --recipe tile" --model "$r/ckpt" --hidden "$r/x.npy" --recipe tile --explain \
    --out "$r/ty.npy"
  check "$name: --recipe tile in the explain text" grep -q 'recipe asked of the expert kernels: tile (options->experts_recipe)' "$tmp/stdout"
  check "$name: --recipe tile runs the ${fmt} tile sets" grep -q "moe_expert_${fmt}_tile_" "$tmp/stdout"
  run_ok "$name: --recipe tile, rows 0-2" --model "$r/ckpt" --hidden "$r/x0.npy" --recipe tile \
    --out "$r/t0y.npy" --logits-out "$r/t0l.npy" --ids-out "$r/t0i.npy" --weights-out "$r/t0w.npy"
  check "$name: --recipe tile differs from bf16" differ "$r/ty.npy" "$r/by.npy"
  check "$name: --recipe tile: batch invariance, float64 reference" py batch \
    same-rows "$r/ty.npy" "$r/t0y.npy" 0 \; block "$r/ckpt" 0 "$r/x0.npy" "$r/t0l.npy" "$r/t0i.npy" "$r/t0w.npy" "$r/t0y.npy" tile
done
# --repeat: the same outputs; --explain prints the layer's description first.
run_ok "--repeat 3 --explain" --model "$qk" --hidden "$q/x.npy" --out "$q/ry.npy" --repeat 3 --explain
check "--repeat 3: the same output" cmp -s "$q/ry.npy" "$q/a_y.npy"
check "--repeat 3: median in the summary" has "$(tail -n 1 "$tmp/stdout")" "(median of 3)"
check "--explain prints the layer before the summary" test "$(wc -l <"$tmp/stdout")" -gt 2
run_ok "--no-mmap" --model "$qk" --hidden "$q/x.npy" --out "$q/ny.npy" --no-mmap
check "--no-mmap: the same output" cmp -s "$q/ny.npy" "$q/a_y.npy"

# ---- Errors: one line on stderr, exit 1 or 2, no output file --------------------------------

e=$tmp/err
mkdir -p "$e"
v3=$tmp/v3-bf16/ckpt
py batch hidden "$e/h100.npy" 2 100 1 \; ids "$e/xi.npy" i32 512 100 1 \; ids "$e/ids2.npy" i64 2 100 1 \
  \; hidden "$e/x2.npy" 2 256 1 \; ids "$e/ids3.npy" i32 3 2048 1
# A 3-D array of zeros, which no run_ref.py command writes.
PYTHONPATH=$here python3 -c 'import sys; from ref_lib import npy_write
npy_write(sys.argv[1], "<f4", (1, 2, 256), [0.0] * 512)' "$e/x3d.npy"
outs_e=(--out "$e/y.npy" --logits-out "$e/l.npy" --ids-out "$e/i.npy" --weights-out "$e/w.npy")
no_outputs() { [ ! -e "$e/y.npy" ] && [ ! -e "$e/l.npy" ] && [ ! -e "$e/i.npy" ] && [ ! -e "$e/w.npy" ]; }
# expect_error WHAT CODE SUBSTRING ARGS...
expect_error() {
  local what=$1 code=$2 sub=$3 rc=0
  shift 3
  "$moe" run "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  first_line "$tmp/stderr"
  check "$what: exit $code (got $rc)" test "$rc" -eq "$code"
  check "$what: one line on stderr (got $nlines: ${line:0:300})" test "$nlines" -eq 1
  check "$what: 'moe run: ' prefix" has "$line" "moe run: "
  check "$what: message contains '$sub' (${line:0:300})" has "$line" "$sub"
  check "$what: nothing on stdout" test ! -s "$tmp/stdout"
  check "$what: no output file" no_outputs
}
expect_error "no --model" 2 "--model" --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "no --hidden" 2 "--hidden" --model "$qk" "${outs_e[@]}"
expect_error "no --out" 2 "--out" --model "$qk" --hidden "$q/x.npy" --ids-out "$e/i.npy"
expect_error "unknown option" 2 "--bogus" --model "$qk" --hidden "$q/x.npy" "${outs_e[@]}" --bogus
expect_error "an option twice" 2 "--hidden" --model "$qk" --hidden "$q/x.npy" --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "a stray argument" 2 "stray" --model "$qk" --hidden "$q/x.npy" "${outs_e[@]}" stray
expect_error "a flag twice" 2 "option --trace given twice" --model "$qk" --hidden "$q/x.npy" "${outs_e[@]}" --trace --trace
expect_error "an empty value" 2 "option --hidden has an empty value" --model "$qk" --hidden= "${outs_e[@]}"
expect_error "--layer not a number" 2 "--layer" --model "$qk" --layer x --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--layer negative" 2 "--layer" --model "$qk" --layer -1 --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--threads 0" 2 "--threads" --model "$qk" --threads 0 --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--threads junk" 2 "--threads" --model "$qk" --threads 2x --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--repeat 0" 2 "--repeat" --model "$qk" --repeat 0 --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--logits-dtype f16" 2 "--logits-dtype" --model "$qk" --logits-dtype f16 --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--recipe f16" 2 "--recipe 'f16' is not f32, bf16 or tile" --model "$qk" --recipe f16 --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "the same output twice" 2 "same file" --model "$qk" --hidden "$q/x.npy" --out "$e/y.npy" --weights-out "$e/y.npy"
expect_error "no such model" 1 "$e/nothing" --model "$e/nothing" --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "--layer out of range" 1 "--layer 2 is out of range" --model "$qk" --layer 2 --hidden "$q/x.npy" "${outs_e[@]}"
expect_error "hidden size mismatch" 1 "hidden size 100, but the model's hidden_size is 256" \
  --model "$qk" --hidden "$e/h100.npy" "${outs_e[@]}"
expect_error "hidden of i32" 1 "dtype i32: want f32" --model "$qk" --hidden "$e/xi.npy" "${outs_e[@]}"
expect_error "hidden of 3 dimensions" 1 "want 2" --model "$qk" --hidden "$e/x3d.npy" "${outs_e[@]}"
expect_error "no such hidden file" 1 "$e/none.npy" --model "$qk" --hidden "$e/none.npy" "${outs_e[@]}"
expect_error "hidden not a .npy" 1 "--hidden" --model "$qk" --hidden "$qk/config.json" "${outs_e[@]}"
expect_error "--input-ids on a family without hash layers" 1 "--input-ids: qwen3_moe routes every layer by router scores" \
  --model "$qk" --hidden "$e/x2.npy" --input-ids "$e/ids2.npy" "${outs_e[@]}"
for opt in --logits-out --ids-out --weights-out; do
  expect_error "$opt on a dense layer" 1 "$opt: layer 0 of $v3 is dense" \
    --model "$v3" --layer 0 --hidden "$e/x2.npy" --out "$e/y.npy" "$opt" "$e/w.npy"
done
expect_error "--logits-dtype on a dense layer" 1 "--logits-dtype: layer 0" \
  --model "$v3" --layer 0 --hidden "$e/x2.npy" --out "$e/y.npy" --logits-dtype bf16
# An output in a missing folder, or a folder as the output: exit 1 before the layer is built.
expect_error "an output in a missing folder" 1 "--weights-out $e/no/such/dir/w.npy: cannot write there" \
  --model "$qk" --hidden "$q/x.npy" --out "$e/y.npy" --ids-out "$e/i.npy" \
  --weights-out "$e/no/such/dir/w.npy"
expect_error "a folder as the output" 1 "--out $e: cannot write there" --model "$qk" \
  --hidden "$q/x.npy" --out "$e"
# An output that fails as it is written (its name fits the file system, its temporary file's
# does not): the ones written before it are removed.
long=$e/$(printf 'w%.0s' {1..250}).npy
expect_error "an output that fails as it is written" 1 "--weights-out: cannot create" \
  --model "$qk" --hidden "$q/x.npy" --out "$e/y.npy" --ids-out "$e/i.npy" --weights-out "$long"
# An error before the outputs leaves files already there untouched.
echo old >"$e/keep.npy"
rc=0
"$moe" run --model "$qk" --hidden "$e/h100.npy" --out "$e/keep.npy" >/dev/null 2>&1 || rc=$?
check "an earlier file at --out: exit 1" test "$rc" -eq 1
check "an earlier file at --out: untouched" test "$(cat "$e/keep.npy")" = old

# A hash layer (DeepSeek-V4, layer 0) needs the token ids.
v4=$tmp/v4
"$moe" gen --family deepseek_v4 --dtype fp8 --layers 2 --seed 4 --out "$v4" >/dev/null
expect_error "hash layer without --input-ids" 1 "--input-ids is required" \
  --model "$v4" --layer 0 --hidden "$e/x2.npy" "${outs_e[@]}"
expect_error "--input-ids rows != hidden rows" 1 "3 ids, but --hidden" \
  --model "$v4" --layer 0 --hidden "$e/x2.npy" --input-ids "$e/ids3.npy" "${outs_e[@]}"
expect_error "--input-ids of f32" 1 "dtype f32, want i32 or i64" \
  --model "$v4" --layer 0 --hidden "$e/x2.npy" --input-ids "$e/x2.npy" "${outs_e[@]}"

# MXFP4 hash layer: token ids outside the vocabulary; a NaN E8M0 scale, named at load.
v4m=$tmp/v4-mxfp4/ckpt
py batch ids "$e/big.npy" i32 2 5000 1 \; ids "$e/ok2.npy" i64 2 2048 1
python3 - "$e/big.npy" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-4:] = (2048).to_bytes(4, "little")  # the last id is vocab_size itself
open(sys.argv[1], "wb").write(bytes(b))
PY
expect_error "mxfp4 hash layer: token id = vocab_size" 1 "--input-ids $e/big.npy: moe_layer_forward: layer 0: token_ids[1] = 2048 is outside [0, 2048)" \
  --model "$v4m" --layer 0 --hidden "$e/x2.npy" --input-ids "$e/big.npy" "${outs_e[@]}"
expect_error "mxfp4 hash layer without --input-ids" 1 "--input-ids is required" \
  --model "$v4m" --layer 0 --hidden "$e/x2.npy" "${outs_e[@]}"
"$moe" gen --family gpt_oss --dtype mxfp4 --layers 1 --seed 2 --out "$tmp/gpt_oss-mxfp4" >/dev/null
cp -r "$tmp/gpt_oss-mxfp4" "$tmp/nan-mxfp4"
python3 - "$tmp/nan-mxfp4/model.safetensors" model.layers.0.mlp.experts.down_proj_scales 1000 <<'PY'
import json, struct, sys
path, name, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + json.loads(b[8:8 + n])[name]["data_offsets"][0] + at] = 0xFF
open(path, "wb").write(bytes(b))
PY
H=$(sed -n 's/.*"hidden_size": \([0-9]*\).*/\1/p' "$tmp/gpt_oss-mxfp4/config.json")
py hidden "$e/xm.npy" 2 "$H" 1
# down_proj_scales [8, 256, 4]: byte 1000 is expert 0, row 250, block 0.
expect_error "mxfp4: a NaN E8M0 scale" 1 \
  "tensor 'model.layers.0.mlp.experts.down_proj_scales' holds the E8M0 scale 0xFF (NaN) at [0, 250, 0]" \
  --model "$tmp/nan-mxfp4" --hidden "$e/xm.npy" "${outs_e[@]}"

# ---- moe inspect: what moe_layer_create chooses for each layer ---------------------------

v3f=$tmp/v3-fp8/ckpt # layer 0 dense, layer 1 moe
"$moe" inspect "$v3f" >"$tmp/inspect" 2>"$tmp/stderr" || fail "inspect $v3f exits 0"
sed -n '/^layers (/,/^$/p' "$tmp/inspect" >"$tmp/layers"
check "inspect: a layers section" test -s "$tmp/layers"
for want in "  layer 0: dense" "  layer 1: moe" "    threads: 2 (default" "    logits dtype: f32 (default" \
  "    gate: weight bf16 [8, 192]" "    dense mlp: 1 ×" "    routed experts: 8 ×" "    shared experts: 1 ×" \
  "      kernel set: moe_expert_fp8_" "      recipe: " "      packed: " "    packed total: " "    workspace: "; do
  check "inspect layers: '$want'" grep -qF -- "$want" "$tmp/layers"
done
# The same plan function: inspect's text for layer 1 is moe run --explain's, line for line.
"$moe" run --model "$v3f" --hidden "$tmp/v3-fp8/x0.npy" --out "$tmp/ex.npy" --explain >"$tmp/explain"
sed '1d;$d;/^$/d;s/^/  /' "$tmp/explain" >"$tmp/explain.body"
sed -n '/^  layer 1: moe$/,/^  layer\|^$/p' "$tmp/layers" | sed '1d;/^  layer\|^$/d' >"$tmp/inspect.body"
check "inspect layer 1 = moe run --explain (describe = create)" cmp -s "$tmp/explain.body" "$tmp/inspect.body"
check "... and it is not empty" test "$(wc -l <"$tmp/inspect.body")" -gt 10
# Identical layers fold; MOE_ISA changes the kernels; MXFP4 layers show their kernel set and
# the q8 recipe; a checkpoint with problems is not described.
"$moe" gen --family qwen3_moe --layers 3 --out "$tmp/q3" >/dev/null
check "inspect: layers 0-2 fold" grep -qx "  layers 0-2: moe" <<<"$(sed -n '/^layers (/,$p' <<<"$("$moe" inspect "$tmp/q3")")"
check "MOE_ISA=avx2: avx2 expert kernels" grep -qE "kernel set: moe_expert_bf16_f32_[0-9x]+__avx2" \
  <<<"$(MOE_ISA=avx2 "$moe" inspect "$tmp/q3")"
check "MOE_ISA=scalar: reference expert kernels" grep -qE "kernel set: moe_expert_bf16_f32_[0-9x]+__ref" \
  <<<"$(MOE_ISA=scalar "$moe" inspect "$tmp/q3")"
for m in gpt_oss-mxfp4 v4-mxfp4/ckpt; do
  rc=0
  "$moe" inspect "$tmp/$m" >"$tmp/inspect" 2>"$tmp/stderr" || rc=$?
  check "inspect $m: exit 0 (got $rc)" test "$rc" -eq 0
  check "inspect $m: the MXFP4 kernel set" \
    grep -qE "^      kernel set: moe_expert_mxfp4_q8_[0-9x]+__[a-z0-9]+: .*recipe q8" "$tmp/inspect"
  check "inspect $m: the q8 recipe" grep -qE "^      recipe: q8 \(" "$tmp/inspect"
done
check "inspect v4-mxfp4: the hash layer and the score layer" \
  grep -qE "^  layer 0: hash" "$tmp/inspect"
check "MOE_ISA=scalar: the reference MXFP4 set" grep -qE "kernel set: moe_expert_mxfp4_q8_[0-9x]+__ref" \
  <<<"$(MOE_ISA=scalar "$moe" inspect "$tmp/gpt_oss-mxfp4")"
"$moe" gen --family mixtral --layers 1 --omit model.layers.0.block_sparse_moe.experts.1.w2.weight \
  --out "$tmp/broken" >/dev/null
"$moe" inspect "$tmp/broken" >"$tmp/inspect" 2>/dev/null || true
check "inspect with problems: layers not described" grep -qx "  not described: the checkpoint has problems (below)" "$tmp/inspect"

# ---- help ------------------------------------------------------------------------------------

check "moe --help lists run" grep -q '^  run ' <<<"$("$moe" --help)"
"$moe" run --help >"$tmp/h"
for opt in --model --layer --hidden --input-ids --out --logits-out --ids-out --weights-out \
  --ids --weights --no-shared --threads --logits-dtype --recipe --trace --explain --repeat --no-mmap --help; do
  check "moe run --help lists $opt" grep -qe "^  $opt " "$tmp/h"
done

finish
