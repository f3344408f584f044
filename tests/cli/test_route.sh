#!/usr/bin/env bash
# test_route.sh — `moe route` end to end: each family's routing vs a float64 reference, every error.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"
cfgs=$data/configs
# Python starts slowly here, so route_ref.py does many things per call (make-many,
# check-many, batch) and the hundreds of checks below use shell builtins only.
py() { python3 "$here/route_ref.py" "$@"; }
starts() { [[ $1 == "$2"* ]]; }

v3=$cfgs/deepseek-v3.json
v4=$cfgs/deepseek-v4-flash.json
mixtral=$cfgs/mixtral-8x7b.json

# Configs written here for what the real ones do not cover: Qwen3 without renormalisation,
# a small DeepSeek-V4 (hash layers with a small vocabulary, groups on the score layers), and
# one without any routed layer.
small=$tmp/configs
mkdir -p "$small"
sed 's/"norm_topk_prob": true/"norm_topk_prob": false/' "$cfgs/qwen3-30b-a3b.json" \
  >"$small/qwen3-no-norm.json"
check "qwen3-no-norm config written" grep -q '"norm_topk_prob": false' "$small/qwen3-no-norm.json"
small_v4=$small/v4-small.json
cat >"$small_v4" <<'EOF'
{"model_type": "deepseek_v4", "hidden_size": 256, "moe_intermediate_size": 128,
 "n_routed_experts": 64, "n_shared_experts": 1, "num_experts_per_tok": 4,
 "num_hash_layers": 2, "num_hidden_layers": 4, "vocab_size": 1000,
 "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true,
 "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "expert_dtype": "fp4",
 "n_group": 8, "topk_group": 2}
EOF
cat >"$small/all-dense.json" <<'EOF'
{"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 512,
 "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
 "num_hidden_layers": 2, "mlp_only_layers": [0, 1], "vocab_size": 1000}
EOF

# ERNIE-4.5 written by moe gen with a renormalisation floor that binds: top-2 of 64 experts,
# whose two largest probabilities mostly sum below 0.5 (route_ref.py counts the rows where
# the floor bound, checked after the comparison).
"$moe" gen --family ernie4_5_moe --experts 64 --topk 2 --hidden 64 --intermediate 32 \
  --norm-min 0.5 --out "$tmp/gen-ernie-floor" >/dev/null
ernie_floor=$tmp/gen-ernie-floor/config.json
check "gen --norm-min 0.5 writes moe_norm_min 0.5" grep -q '"moe_norm_min": 0.5,' "$ernie_floor"

# ---- Routing against the reference ------------------------------------------------------

# Each case: NAME CONFIG LAYER T SEED OPTIONS (route_ref.py make-many); the inputs go to
# $tmp/NAME/. --special adds rows of equal logits, NaN, ±Inf, ±1e30 and an all-NaN row.
cases=$tmp/cases.tsv
: >"$cases"
add_case() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${*:6}" >>"$cases"; }
add_case v3 "$v3" 3 203 1 --special
add_case v3-last-layer "$v3" 60 61 2 --special
add_case v3-negative-bias "$v3" 5 97 3 --special --bias negative
add_case r1 "$cfgs/deepseek-r1.json" 10 31 4
add_case kimi-k2 "$cfgs/kimi-k2.json" 1 101 5 --special
add_case qwen3 "$cfgs/qwen3-30b-a3b.json" 0 99 6 --special
add_case qwen3-fp8 "$cfgs/qwen3-30b-a3b-fp8.json" 47 9 7
add_case qwen3-no-norm "$small/qwen3-no-norm.json" 3 37 8 --special
add_case mixtral "$mixtral" 0 257 9 --special
add_case gpt-oss-120b "$cfgs/gpt-oss-120b.json" 0 65 10 --special
add_case gpt-oss-20b "$cfgs/gpt-oss-20b.json" 23 33 11 --special
add_case v2 "$cfgs/deepseek-v2.json" 1 77 12 --special
add_case v2-lite "$cfgs/deepseek-v2-lite.json" 1 41 13 --special
add_case v4-score "$v4" 3 129 14 --special
add_case v4-score-last "$v4" 42 15 15
add_case v4-hash "$v4" 0 67 16 --special --table i64 --ids i32
add_case v4-small-hash "$small_v4" 1 301 17 --special --table i32 --ids i32
add_case v4-small-hash-i64 "$small_v4" 0 45 18 --table i64 --ids i64
add_case v4-small-hash-mixed "$small_v4" 1 23 19 --table i32 --ids i64
add_case v4-small-grouped-score "$small_v4" 2 211 20 --special
add_case ernie "$cfgs/ernie-4.5-21b-a3b.json" 1 97 21 --special
add_case ernie-floor "$ernie_floor" 1 199 22 --special
add_case t0-mixtral "$mixtral" 0 0 1
add_case t0-v3 "$v3" 3 0 1
add_case t0-v4-hash "$small_v4" 0 0 1
py make-many "$cases"

# The moe route arguments of case folder D (whatever inputs make-many wrote there), with the
# outputs D/PREFIXids.npy and D/PREFIXw.npy.
case_args() { # case_args D CONFIG LAYER [PREFIX] -> sets args
  local d=$1 p=${4:-out_}
  args=(--config "$2" --logits "$d/logits.npy" --ids-out "$d/${p}ids.npy"
    --weights-out "$d/${p}w.npy")
  [[ -z $3 ]] || args+=(--layer "$3")
  [[ ! -f $d/bias.npy ]] || args+=(--bias "$d/bias.npy")
  [[ ! -f $d/tid2eid.npy ]] || args+=(--tid2eid "$d/tid2eid.npy" --input-ids "$d/ids.npy")
}

while IFS=$'\t' read -r name cfg layer t _; do
  d=$tmp/$name
  case_args "$d" "$cfg" "$layer"
  rc=0
  "$moe" route "${args[@]}" >"$d/stdout" 2>"$d/stderr" || rc=$?
  first_line "$d/stderr"
  check "$name: exit 0 (got $rc: ${line:0:300})" test "$rc" -eq 0
  check "$name: nothing on stderr" test "$nlines" -eq 0
  first_line "$d/stdout"
  check "$name: the summary line ($line)" starts "$line" "routed $t token"
done <"$cases"

# Ids and weights against the reference, dtypes and shapes ([T, K] int32 and f32).
rc=0
py check-many "$cases" >"$tmp/check.log" || rc=$?
while IFS= read -r l; do
  case $l in
  "ok "*) checks=$((checks + 1)) && echo "$l" ;;
  "FAIL "*) fail "${l#FAIL }" ;;
  *) echo "$l" >&2 ;;
  esac
done <"$tmp/check.log"
check "route_ref.py check-many: exit 0 (got $rc)" test "$rc" -eq 0
check "ernie-floor: the floor bound on some rows" \
  grep -qE '^ok ernie-floor: .*the floor 0.5 bound on [1-9]' "$tmp/check.log"

# The default layer is the first routed one: DeepSeek-V3's layer 3 (first_k_dense_replace),
# DeepSeek-V4's layer 0 (a hash layer). The same inputs without --layer give the same bytes.
for c in "v3 $v3" "v4-hash $v4"; do
  name=${c%% *}
  d=$tmp/$name
  case_args "$d" "${c#* }" "" default_
  check "$name: default layer" "$moe" route "${args[@]}" >/dev/null
  check "$name: default layer gives the same ids" cmp -s "$d/out_ids.npy" "$d/default_ids.npy"
  check "$name: default layer gives the same weights" cmp -s "$d/out_w.npy" "$d/default_w.npy"
done

# --opt=VALUE works like --opt VALUE.
d=$tmp/mixtral
check "--opt=VALUE" "$moe" route --config="$mixtral" --logits="$d/logits.npy" --layer=0 \
  --ids-out="$d/eq_ids.npy" --weights-out="$d/eq_w.npy" >/dev/null
check "--opt=VALUE: same ids" cmp -s "$d/eq_ids.npy" "$d/out_ids.npy"

# --explain prints the router's explanation, then the summary line.
case_args "$tmp/v3" "$v3" 3 explain_
"$moe" route "${args[@]}" --explain >"$tmp/explain" 2>&1
first_line "$tmp/explain"
check "--explain: two lines on stdout" test "$nlines" -eq 2
check "--explain names the method ($line)" has "$line" noaux_tc
mapfile -t lines <"$tmp/explain"
check "--explain: then the summary line" starts "${lines[1]-}" "routed 203 tokens through layer 3"

# ---- Inputs for the error cases (one python call) ---------------------------------------

V3=$tmp/v3                    # DeepSeek-V3 layer 3: logits [203, 256], bias [256]
MX=$tmp/mixtral               # Mixtral: logits [257, 8]
H4=$tmp/v4-small-hash         # small V4 hash layer 1: logits [301, 64], tid2eid i32 [1000, 4],
                              # ids i32 [301]
S4=$tmp/v4-small-grouped-score # small V4 score layer 2: logits [211, 64], bias [64]
e=$tmp/inputs
mkdir -p "$e"
for f in t_range t_neg t_rep; do cp "$H4/tid2eid.npy" "$e/$f.npy"; done
cp "$V3/bias.npy" "$e/bnan.npy"
py batch \
  head "$V3/logits.npy" "$e/v3-7-logits.npy" 7 \; \
  head "$V3/out_ids.npy" "$e/v3-7-ids-want.npy" 7 \; \
  head "$V3/out_w.npy" "$e/v3-7-w-want.npy" 7 \; \
  npy "$e/l1d.npy" f32 256 --seed 1 \; npy "$e/l257.npy" f32 4,257 --seed 1 \; \
  npy "$e/l3d.npy" f32 2,2,256 --seed 1 \; npy "$e/li32.npy" i32 4,256 \; \
  npy "$e/b255.npy" f32 255 --seed 2 \; npy "$e/b2d.npy" f32 1,256 --seed 2 \; \
  npy "$e/bi64.npy" i64 256 \; npy "$e/bsmall.npy" f32 8 --seed 2 \; set "$e/bnan.npy" 17 nan \; \
  npy "$e/t_rows.npy" i32 999,4 --fill 0 \; npy "$e/t_cols.npy" i32 1000,5 --fill 0 \; \
  npy "$e/t_f32.npy" f32 1000,4 --fill 0 \; npy "$e/t_1d.npy" i32 4000 --fill 0 \; \
  set "$e/t_range.npy" 3997 64 \; set "$e/t_neg.npy" 7 -1 \; dup "$e/t_rep.npy" 2003 2000 \; \
  npy "$e/ids_short.npy" i32 300 --fill 0 \; npy "$e/ids_2d.npy" i32 301,1 --fill 0 \; \
  npy "$e/ids_f32.npy" f32 301 --fill 0 \; \
  npy "$e/ids_vocab_i32.npy" i32 301 --fill 5 \; set "$e/ids_vocab_i32.npy" 123 1000 \; \
  npy "$e/ids_vocab_i64.npy" i64 301 --fill 5 \; set "$e/ids_vocab_i64.npy" 123 1000 \; \
  npy "$e/ids_neg_i32.npy" i32 301 --fill 5 \; set "$e/ids_neg_i32.npy" 123 -7 \; \
  npy "$e/ids_neg_i64.npy" i64 301 --fill 5 \; set "$e/ids_neg_i64.npy" 123 -7 \; \
  npy "$e/ids_huge.npy" i64 301 --fill 5 \; set "$e/ids_huge.npy" 300 4294967296

# A row's result does not depend on the rows that share its batch: the first 7 rows alone.
check "batch: 7 rows alone" "$moe" route --config "$v3" --layer 3 --logits "$e/v3-7-logits.npy" \
  --bias "$V3/bias.npy" --ids-out "$e/v3-7-ids.npy" --weights-out "$e/v3-7-w.npy" >/dev/null
check "batch invariance: ids" cmp -s "$e/v3-7-ids.npy" "$e/v3-7-ids-want.npy"
check "batch invariance: weights" cmp -s "$e/v3-7-w.npy" "$e/v3-7-w-want.npy"

# ---- Errors: exit 1 (2 for usage), one line on stderr, no output file -------------------

n=0
# expect_error WHAT RC SUBSTRING... -- ARGS: `moe route --ids-out O/ids.npy --weights-out
# O/w.npy ARGS` (O a fresh folder) exits RC with one line "moe route: ..." on stderr that
# contains every SUBSTRING, and leaves neither output. expect_raw: the same without the
# output options (the caller names them, using $o for the folder).
expect_error() { run_error yes "$@"; }
expect_raw() { run_error no "$@"; }
run_error() {
  local add=$1 what=$2 want=$3 rc=0 s
  shift 3
  local subs=()
  while [[ $1 != -- ]]; do
    subs+=("$1")
    shift
  done
  shift
  n=$((n + 1))
  local out=$tmp/err$n
  mkdir -p "$out"
  if [[ $add == yes ]]; then
    set -- --ids-out "$out/ids.npy" --weights-out "$out/w.npy" "$@"
  fi
  "$moe" route "$@" >"$out/stdout" 2>"$out/stderr" || rc=$?
  first_line "$out/stderr"
  check "$what: exit $want, not a signal (got $rc)" test "$rc" -eq "$want"
  check "$what: exactly one line on stderr (${line:0:300})" test "$nlines" -eq 1
  check "$what: 'moe route: ' prefix" starts "$line" "moe route: "
  for s in "${subs[@]}"; do
    check "$what: message contains '$s' (${line:0:300})" has "$line" "$s"
  done
  check "$what: no ids output" test ! -e "$out/ids.npy"
  check "$what: no weights output" test ! -e "$out/w.npy"
  o=$tmp/err$((n + 1))
}
o=$tmp/err1

v3_ok=(--config "$v3" --logits "$V3/logits.npy" --bias "$V3/bias.npy")
# The good arguments of the hash layer with another table (h4_t), other token ids (h4_i);
# of DeepSeek-V3 with another bias (v3_b).
h4_t() { a=(--config "$small_v4" --layer 1 --logits "$H4/logits.npy" --tid2eid "$1"
  --input-ids "$H4/ids.npy"); }
h4_i() { a=(--config "$small_v4" --layer 1 --logits "$H4/logits.npy" --tid2eid "$H4/tid2eid.npy"
  --input-ids "$1"); }
h4_i "$H4/ids.npy"
h4_ok=("${a[@]}")
v3_b() { a=(--config "$v3" --logits "$V3/logits.npy" --bias "$1"); }

# Options the layer needs, and options it does not use: errors, never ignored.
expect_error "V3 without --bias" 1 "--bias" "correction bias" -- \
  --config "$v3" --logits "$V3/logits.npy"
expect_error "--bias on Mixtral" 1 "--bias" "mixtral" -- \
  --config "$mixtral" --logits "$MX/logits.npy" --bias "$V3/bias.npy"
expect_error "--bias on gpt-oss" 1 "--bias" "router bias" -- \
  --config "$cfgs/gpt-oss-120b.json" --logits "$tmp/gpt-oss-120b/logits.npy" --bias "$V3/bias.npy"
expect_error "--tid2eid on V3" 1 "--tid2eid" "hash" -- "${v3_ok[@]}" --tid2eid "$H4/tid2eid.npy"
expect_error "--input-ids on Mixtral" 1 "--input-ids" "hash" -- \
  --config "$mixtral" --logits "$MX/logits.npy" --input-ids "$H4/ids.npy"
expect_error "hash layer without --input-ids" 1 "--input-ids" "hash-routed" -- \
  --config "$small_v4" --layer 1 --logits "$H4/logits.npy" --tid2eid "$H4/tid2eid.npy"
expect_error "hash layer without --tid2eid" 1 "--tid2eid" "hash-routed" -- \
  --config "$small_v4" --layer 1 --logits "$H4/logits.npy" --input-ids "$H4/ids.npy"
expect_error "hash layer without either" 1 "hash-routed" -- \
  --config "$small_v4" --logits "$H4/logits.npy"
expect_error "--bias on a hash layer" 1 "--bias" "no correction bias" -- \
  "${h4_ok[@]}" --bias "$S4/bias.npy"
expect_error "V4 score layer without --bias" 1 "--bias" -- \
  --config "$small_v4" --layer 2 --logits "$S4/logits.npy"
expect_error "V4 score layer with --input-ids" 1 "--input-ids" -- \
  --config "$small_v4" --layer 2 --logits "$S4/logits.npy" --bias "$S4/bias.npy" \
  --input-ids "$H4/ids.npy"

# --layer: dense, out of range; a config with no routed layer.
expect_error "dense --layer" 1 "--layer 0" "dense" -- "${v3_ok[@]}" --layer 0
expect_error "dense --layer 2" 1 "--layer 2" "dense" "first routed layer is 3" -- \
  "${v3_ok[@]}" --layer 2
expect_error "--layer past the end" 1 "--layer 61" "61 layers" -- "${v3_ok[@]}" --layer 61
expect_error "--layer far past the end" 1 "--layer 2147483647" -- "${v3_ok[@]}" --layer 2147483647
expect_error "hash config --layer past the end" 1 "--layer 4" "4 layers" -- \
  --config "$small_v4" --layer 4 --logits "$H4/logits.npy" --tid2eid "$H4/tid2eid.npy" \
  --input-ids "$H4/ids.npy"
expect_error "a config without routed layers" 1 "dense" -- \
  --config "$small/all-dense.json" --logits "$MX/logits.npy"

# Logits and bias: rank, E against the config (both numbers and the config field), dtype.
expect_error "1-D logits" 1 "--logits" "l1d.npy" "[256]" "want 2" -- \
  --config "$v3" --logits "$e/l1d.npy" --bias "$V3/bias.npy"
expect_error "3-D logits" 1 "--logits" "[2, 2, 256]" -- \
  --config "$v3" --logits "$e/l3d.npy" --bias "$V3/bias.npy"
expect_error "E mismatch" 1 "--logits" "257" "256" "n_routed_experts" -- \
  --config "$v3" --logits "$e/l257.npy" --bias "$V3/bias.npy"
expect_error "E mismatch, Mixtral" 1 "--logits" "256" "8" "num_local_experts" -- \
  --config "$mixtral" --logits "$V3/logits.npy"
expect_error "E mismatch, Qwen3" 1 "--logits" "8" "128" "num_experts" -- \
  --config "$cfgs/qwen3-30b-a3b.json" --logits "$MX/logits.npy"
expect_error "i32 logits" 1 "--logits" "i32" "f32" -- \
  --config "$v3" --logits "$e/li32.npy" --bias "$V3/bias.npy"
v3_b "$e/b255.npy"
expect_error "bias too short" 1 "--bias" "255" "256" -- "${a[@]}"
v3_b "$e/b2d.npy"
expect_error "2-D bias" 1 "--bias" "[1, 256]" -- "${a[@]}"
v3_b "$e/bi64.npy"
expect_error "i64 bias" 1 "--bias" "i64" "f32" -- "${a[@]}"
v3_b "$e/bsmall.npy"
expect_error "bias of another model" 1 "--bias" "8" "256" -- "${a[@]}"
v3_b "$e/bnan.npy"
expect_error "NaN in the bias" 1 "17" -- "${a[@]}"

# tid2eid: shape against vocab_size and top-k, dtype, entries (checked by the router).
h4_t "$e/t_rows.npy"
expect_error "tid2eid rows != vocab_size" 1 "--tid2eid" "999" "1000" "vocab_size" -- "${a[@]}"
h4_t "$e/t_cols.npy"
expect_error "tid2eid columns != top-k" 1 "--tid2eid" "5" "4" "num_experts_per_tok" -- "${a[@]}"
h4_t "$e/t_f32.npy"
expect_error "f32 tid2eid" 1 "--tid2eid" "f32" -- "${a[@]}"
h4_t "$e/t_1d.npy"
expect_error "1-D tid2eid" 1 "--tid2eid" "[4000]" -- "${a[@]}"
h4_t "$e/t_range.npy" # row 999, column 1 = E
expect_error "tid2eid entry = E" 1 "tid2eid" "999" "64" -- "${a[@]}"
h4_t "$e/t_neg.npy" # row 1, column 3 = -1
expect_error "tid2eid entry < 0" 1 "tid2eid" "-1" -- "${a[@]}"
h4_t "$e/t_rep.npy" # row 500 repeats its first id in its last column
expect_error "tid2eid row with a repeated id" 1 "tid2eid" "500" -- "${a[@]}"

# Token ids: shape, dtype, values outside [0, vocab) in both widths.
h4_i "$e/ids_short.npy"
expect_error "input-ids shorter than the logits" 1 "--input-ids" "300" "301" -- "${a[@]}"
h4_i "$e/ids_2d.npy"
expect_error "2-D input-ids" 1 "--input-ids" "[301, 1]" -- "${a[@]}"
h4_i "$e/ids_f32.npy"
expect_error "f32 input-ids" 1 "--input-ids" "f32" -- "${a[@]}"
for dt in i32 i64; do
  h4_i "$e/ids_vocab_$dt.npy"
  expect_error "token id = vocab ($dt)" 1 "1000" -- "${a[@]}"
  h4_i "$e/ids_neg_$dt.npy"
  expect_error "token id < 0 ($dt)" 1 "-7" -- "${a[@]}"
done
h4_i "$e/ids_huge.npy"
expect_error "token id 2^32 (i64; 0 if narrowed to 32 bits)" 1 "4294967296" -- "${a[@]}"

# Files that cannot be read or parsed, and every malformed .npy of the corpus as each input.
expect_error "missing logits" 1 "--logits" "$tmp/nope.npy" -- \
  --config "$mixtral" --logits "$tmp/nope.npy"
expect_error "missing config" 1 "--config" "$tmp/nope.json" -- \
  --config "$tmp/nope.json" --logits "$MX/logits.npy"
echo '{"model_type": "mixtral",' >"$e/broken.json"
expect_error "malformed config" 1 "--config" "broken.json" -- \
  --config "$e/broken.json" --logits "$MX/logits.npy"
echo '{"model_type": "llama", "num_hidden_layers": 2}' >"$e/llama.json"
expect_error "config of an unknown family" 1 "--config" "llama" -- \
  --config "$e/llama.json" --logits "$MX/logits.npy"
corpus=0
while IFS=$'\t' read -r path status sub; do
  [[ $path == corpus/npy/* && $status != MOE_OK ]] || continue
  corpus=$((corpus + 1))
  expect_error "corpus $path as --logits" 1 "--logits" "$sub" -- \
    --config "$mixtral" --logits "$data/$path"
  v3_b "$data/$path"
  expect_error "corpus $path as --bias" 1 "--bias" "$sub" -- "${a[@]}"
  h4_t "$data/$path"
  expect_error "corpus $path as --tid2eid" 1 "--tid2eid" "$sub" -- "${a[@]}"
  h4_i "$data/$path"
  expect_error "corpus $path as --input-ids" 1 "--input-ids" "$sub" -- "${a[@]}"
done <"$data/corpus/io_manifest.tsv"
check "the corpus has malformed .npy files ($corpus)" test "$corpus" -ge 10

# Writing an output fails: nothing is left, not even the output written first.
expect_raw "ids output in a missing folder" 1 "--ids-out" "$tmp/no/dir" -- \
  --config "$mixtral" --logits "$MX/logits.npy" --ids-out "$tmp/no/dir/ids.npy" \
  --weights-out "$o/w.npy"
expect_raw "weights output in a missing folder" 1 "--weights-out" "$tmp/no/dir" -- \
  --config "$mixtral" --logits "$MX/logits.npy" --ids-out "$o/ids.npy" \
  --weights-out "$tmp/no/dir/w.npy"

# Files already at the output paths survive an error untouched.
d=$tmp/keep
mkdir -p "$d"
echo old-ids >"$d/ids.npy"
echo old-w >"$d/w.npy"
rc=0
"$moe" route --config "$v3" --logits "$V3/logits.npy" --ids-out "$d/ids.npy" \
  --weights-out "$d/w.npy" 2>/dev/null || rc=$?
check "keep: the failing run exits 1" test "$rc" -eq 1
first_line "$d/ids.npy"
check "keep: the earlier ids file is untouched" test "$line" = old-ids
first_line "$d/w.npy"
check "keep: the earlier weights file is untouched" test "$line" = old-w

# Usage errors: exit 2.
ok_args=(--config "$mixtral" --logits "$MX/logits.npy")
expect_raw "no arguments" 2 "--config" "required" --
expect_error "no --config" 2 "--config" "required" -- --logits "$MX/logits.npy"
expect_error "no --logits" 2 "--logits" "required" -- --config "$mixtral"
expect_raw "no --ids-out" 2 "--ids-out" "required" -- "${ok_args[@]}" --weights-out "$o/w.npy"
expect_raw "no --weights-out" 2 "--weights-out" "required" -- "${ok_args[@]}" --ids-out "$o/ids.npy"
expect_error "unknown option" 2 "--frobnicate" -- "${ok_args[@]}" --frobnicate
expect_error "stray argument" 2 "stray" -- "${ok_args[@]}" stray
expect_error "--layer without a value" 2 "--layer" "needs a value" -- "${ok_args[@]}" --layer
expect_error "--layer not a number" 2 "--layer" "abc" -- "${ok_args[@]}" --layer abc
expect_error "--layer negative" 2 "--layer" "-1" -- "${ok_args[@]}" --layer -1
expect_error "--layer with junk" 2 "--layer" "3x" -- "${ok_args[@]}" --layer 3x
expect_error "--layer beyond int" 2 "--layer" "99999999999" -- "${ok_args[@]}" --layer 99999999999
expect_error "--logits twice" 2 "--logits" "twice" -- "${ok_args[@]}" --logits "$MX/logits.npy"
expect_error "--explain twice" 2 "--explain" "twice" -- "${ok_args[@]}" --explain --explain
expect_error "empty --config" 2 "--config" "empty" -- --config= --logits "$MX/logits.npy"
expect_raw "the same output twice" 2 "--ids-out" "--weights-out" "same" -- \
  "${ok_args[@]}" --ids-out "$o/ids.npy" --weights-out "$o/ids.npy"

# --help lists every option, on stdout, exit 0.
"$moe" route --help >"$tmp/help"
help=$(<"$tmp/help")
for opt in --config --logits --bias --tid2eid --input-ids --layer --ids-out --weights-out \
  --explain --help; do
  check "--help lists $opt" has "$help" "$opt"
done
"$moe" --help >"$tmp/help"
check "moe --help lists route" grep -q '^  route ' "$tmp/help"

finish
