#!/usr/bin/env bash
# test_inspect_errors.sh — `moe inspect` on broken checkpoints and on the malformed-file corpora.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"

# expect_error WHAT SUBSTRING PATH [inspect options]: exit 1 (no signal), exactly one line on
# stderr, starting "moe inspect: " and containing SUBSTRING.
expect_error() {
  local what=$1 sub=$2 path=$3 rc=0
  shift 3
  "$moe" inspect "$@" "$path" >"$tmp/out" 2>"$tmp/err" || rc=$?
  check "$what: exit 1, not a signal (got $rc)" test "$rc" -eq 1
  check "$what: exactly one line on stderr ($(head -c 300 "$tmp/err"))" test "$(wc -l <"$tmp/err")" -eq 1
  check "$what: 'moe inspect: ' prefix" grep -q '^moe inspect: ' "$tmp/err"
  check "$what: message contains '$sub' ($(head -c 300 "$tmp/err"))" grep -qF -- "$sub" "$tmp/err"
}

# A fresh copy of the good checkpoint to break.
base=$tmp/base
"$moe" gen --family deepseek_v3 --dtype fp8 --layers 3 --shards 3 --seed 3 --out "$base" >/dev/null
"$moe" gen --family deepseek_v3 --dtype fp8 --layers 3 --seed 3 --out "$base-1" >/dev/null
check "the unbroken checkpoints inspect clean" "$moe" inspect "$base" >/dev/null

# A file that is not a safetensors file says what it looks like and what is wanted (not a
# header length of 7e18 bytes); a real safetensors file whose first byte is '{' is still read.
expect_error "config.json as the file" "$base-1/config.json looks like JSON, not a safetensors file: give the model folder (moe inspect $base-1)" "$base-1/config.json"
printf '\x93NUMPY\x01\x00\x10\x00{}              \n' >"$tmp/a.npy"
expect_error "a .npy as the file" "$tmp/a.npy is a NumPy .npy array, not a safetensors file" "$tmp/a.npy"
printf 'hello, this is text\n' >"$tmp/notes.txt"
expect_error "a text file" "$tmp/notes.txt looks like text, not a safetensors file" "$tmp/notes.txt"
check "the messages do not quote an impossible header length" bash -c "! grep -q 'header length' '$tmp/err'"
python3 - "$tmp/brace.safetensors" <<'PY'
import json, struct, sys
hdr = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
hdr += b" " * (0x7B - len(hdr))  # a header of 123 bytes: the file starts with '{'
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"\0\0\x80\x3f")
PY
check "a safetensors file whose first byte is '{' inspects clean" \
  bash -c "'$moe' inspect '$tmp/brace.safetensors' | grep -qE '^  w +f32 +\\[1\\]\$'"
# What only a folder has is a usage error on a single file: exit 2, one line naming it.
for opt in --tensors --pack "--recipe bf16" "--recipe f32"; do
  rc=0
  # shellcheck disable=SC2086 # the option and its value are words
  "$moe" inspect $opt "$base-1/model.safetensors" >"$tmp/out" 2>"$tmp/err" || rc=$?
  check "inspect $opt FILE: exit 2 (got $rc)" test "$rc" -eq 2
  check "inspect $opt FILE: one line naming ${opt%% *}" \
    test "$(wc -l <"$tmp/err")" -eq 1 -a "$(grep -cF -- "${opt%% *} applies to a model folder; $base-1/model.safetensors is a file" "$tmp/err")" -eq 1
  check "inspect $opt FILE: nothing on stdout" test ! -s "$tmp/out"
done
check "the unbroken single file inspects clean" "$moe" inspect "$base-1" >/dev/null
n=0
fresh() { # fresh [SRC]: sets d to a new copy of SRC (the sharded base by default)
  n=$((n + 1))
  d=$tmp/case$n
  cp -r "${1:-$base}" "$d"
}
s1=model-00001-of-00003.safetensors
s2=model-00002-of-00003.safetensors
s3=model-00003-of-00003.safetensors

fresh
rm "$d/$s2"
expect_error "shard deleted" "$s2" "$d"

fresh
printf '\377\377\377\377\377\377\377\177' | dd of="$d/$s1" bs=1 conv=notrunc status=none
expect_error "header length corrupted" "header length" "$d"

fresh
printf '\010\000\000\000\000\000\000\000' | dd of="$d/$s1" bs=1 conv=notrunc status=none
expect_error "header length too short for the header" "$s1" "$d"

fresh
truncate -s -100 "$d/$s3"
expect_error "shard truncated" "$s3" "$d"

fresh "$base-1"
truncate -s -1 "$d/model.safetensors"
expect_error "single file truncated" "model.safetensors" "$d"

fresh
echo '{"metadata": {}, "weight_map": {"x": "../model.safetensors"}}' >"$d/model.safetensors.index.json"
expect_error "index with a path" "../model.safetensors" "$d"

fresh
sed -i 's/"num_experts_per_tok": 2/"num_experts_per_tok": 99/' "$d/config.json"
expect_error "config: top-k > experts" "num_experts_per_tok" "$d"

fresh
sed -i 's/"n_group": 4/"n_group": 3/' "$d/config.json"
expect_error "config: n_group does not divide the experts" "n_group" "$d"

fresh
sed -i 's/"scoring_func": "sigmoid"/"scoring_func": "tanh"/' "$d/config.json"
expect_error "config: unknown scoring_func" "scoring_func" "$d"

fresh
sed -i 's/"hidden_size": 256/"hidden_size": "256"/' "$d/config.json"
expect_error "config: a string for a number" "hidden_size" "$d"

fresh
sed -i '/"n_routed_experts"/d' "$d/config.json"
expect_error "config: a required field removed" "n_routed_experts" "$d"

fresh
echo '{"model_type": ' >"$d/config.json"
expect_error "config: not JSON" "config.json" "$d"

fresh
rm "$d/config.json"
expect_error "config.json missing" "config.json" "$d"

expect_error "no such folder" "$tmp/nothing-here" "$tmp/nothing-here"

# Tensors that disagree with a valid config: the whole report, then one summary line.
name=model.layers.1.mlp.experts.3.up_proj.weight
"$moe" gen --family deepseek_v3 --dtype fp8 --layers 3 --shards 3 --seed 3 --omit "$name" \
  --out "$tmp/omitted" >/dev/null
expect_error "one expert tensor missing" "$name" "$tmp/omitted"
check "missing: the summary says missing" grep -q 'missing' "$tmp/err"
check "missing: the report lists it" grep -qF "tensor '$name' is missing" "$tmp/out"
check "missing: the grouped view shows the gap" \
  grep -qE '^    mlp\.experts\.3\.up_proj\.weight +f8_e4m3 +\[128, 256\]  MISSING$' "$tmp/out"
check "missing: the other experts grouped around it" \
  grep -qE '^    mlp\.experts\.\{0\.\.7\}\.up_proj\.weight_scale_inv' "$tmp/out"
check "missing: the report ends with the verdict" grep -q '^result  *FAILED' "$tmp/out"
check "missing: layer 2 is still complete" grep -qx '  layer 2:' "$tmp/out"

fresh
sed -i 's/"moe_intermediate_size": 128/"moe_intermediate_size": 64/' "$d/config.json"
expect_error "expert shapes disagree with the config" "shape" "$d"
check "bad shape: the report says BAD SHAPE" grep -q 'BAD SHAPE' "$tmp/out"

fresh
sed -i 's/"torch_dtype": "bfloat16"/"torch_dtype": "float32"/' "$d/config.json"
sed -i '/"quantization_config"/,$d' "$d/config.json"
sed -i 's/"hidden_act": "silu",/"hidden_act": "silu"/' "$d/config.json"
echo '}' >>"$d/config.json"
expect_error "fp8 tensors for a bf16 config" "dtype" "$d"
check "bad dtype: the report says BAD DTYPE" grep -q 'BAD DTYPE' "$tmp/out"
check "bad dtype: scales are unexpected (warnings)" grep -qE "^warnings" "$tmp/out"
check "bad dtype: weight_scale_inv unexpected" grep -qE "unexpected tensor '.*weight_scale_inv'" "$tmp/out"

"$moe" gen --family mixtral --experts 8 --out "$tmp/mx8" >/dev/null
sed -i 's/"num_local_experts": 8/"num_local_experts": 4/' "$tmp/mx8/config.json"
expect_error "more experts than the config says" "block_sparse_moe.gate.weight" "$tmp/mx8"
check "extra experts are warnings" grep -qE "unexpected tensor 'model\.layers\.0\.block_sparse_moe\.experts\.7\.w1\.weight'" "$tmp/out"

# An empty but valid model.safetensors: an 8-byte header length, then "{}" padded to 8.
empty_st() { printf '\010\000\000\000\000\000\000\000{}      ' >"$1"; }

# ---- real configs without their tensors: the plan of the real models, every tensor missing

# real CONFIG PLAN-LINE...: the plan of routing.md §7 (written here from the model cards), a
# FAILED verdict and one summary line naming the missing tensors.
real() {
  local cfg=$1 d=$tmp/real-$1
  shift
  if [ ! -f "$data/configs/$cfg.json" ]; then
    fail "tests/data/configs/$cfg.json not found"
    return
  fi
  mkdir "$d"
  cp "$data/configs/$cfg.json" "$d/config.json"
  empty_st "$d/model.safetensors"
  expect_error "$cfg without tensors" "missing" "$d"
  for line in "$@"; do check "$cfg: plan has '$line'" grep -qF -- "$line" "$tmp/out"; done
  check "$cfg: verdict FAILED" grep -q '^result  *FAILED' "$tmp/out"
}
real deepseek-v3 "  layers 0-2: dense" "  layers 3-60: moe" \
  "routing   noaux_tc: scoring sigmoid, top-8 of 256 experts, n_group 8, topk_group 4, correction bias yes" \
  "routed_scaling_factor 2.5" "mlp.experts.{0..255}.gate_proj.weight                f8_e4m3  [2048, 7168] ×256  MISSING"
real kimi-k2 "  layer 0: dense" "  layers 1-60: moe" "top-8 of 384 experts" "routed_scaling_factor 2.827"
real deepseek-v2 "  layer 0: dense" "  layers 1-59: moe" \
  "routing   group_limited_greedy: scoring softmax, top-6 of 160 experts, n_group 8, topk_group 3" \
  "norm_topk_prob false, routed_scaling_factor 16"
real deepseek-v4-flash "  layers 0-2: hash" "  layers 3-42: moe" "routing   hash: scoring sqrtsoftplus, top-6 of 256" \
  "tid2eid [129280, 6]" "routing   noaux_tc: scoring sqrtsoftplus" "silu_glu_clamp (limit 10)"
real qwen3-30b-a3b "  layers 0-47: moe" "routing   softmax_topk: scoring softmax, top-8 of 128 experts" \
  "norm_topk_prob true"
real mixtral-8x7b "  layers 0-31: moe" "top-2 of 8 experts" "hidden 4096, intermediate 14336, bf16"
real gpt-oss-120b "  layers 0-35: moe" "routing   topk_softmax: scoring softmax, top-4 of 128 experts" \
  "router bias yes" "mxfp4 (e2m1 pairs, f8_e8m0 scales per 1x32 block), gptoss_glu (limit 7, alpha 1.702), biases"
real gpt-oss-20b "  layers 0-23: moe" "top-4 of 32 experts"

# ---- the corpora of the io and model modules -------------------------------------------

ncases=0
if [ -f "$data/corpus/io_manifest.tsv" ]; then
  while IFS=$'\t' read -r path status sub; do
    case $path in '#'* | '') continue ;; esac
    case $path in *.npy) continue ;; esac # inspect does not read .npy files
    full=$data/$path
    if [ "$status" = MOE_OK ]; then
      # A valid file inspects clean; a valid index folder has no config.json to go with it.
      if [ -f "$full" ]; then check "io corpus $path: valid, exit 0" "$moe" inspect "$full" >/dev/null; fi
      continue
    fi
    ncases=$((ncases + 1))
    expect_error "io corpus $path ($status)" "$sub" "$full"
  done <"$data/corpus/io_manifest.tsv"
  check "the io corpus has at least 20 malformed cases ($ncases)" test "$ncases" -ge 20
else
  echo "note: $data/corpus/io_manifest.tsv not found; io corpus skipped" >&2
fi

ncases=0
if [ -f "$data/corpus/config_manifest.tsv" ]; then
  while IFS=$'\t' read -r path status sub; do
    case $path in '#'* | '') continue ;; esac
    [ "$status" = MOE_OK ] && continue
    src=""
    for cand in "$data/$path" "$data/corpus/config/$path" "$data/corpus/$path"; do
      if [ -f "$cand" ]; then
        src=$cand
        break
      fi
    done
    check "config corpus $path exists" test -n "$src"
    [ -n "$src" ] || continue
    ncases=$((ncases + 1))
    d=$tmp/cfg$ncases
    mkdir "$d"
    cp "$src" "$d/config.json"
    empty_st "$d/model.safetensors"
    expect_error "config corpus $path ($status)" "$sub" "$d"
  done <"$data/corpus/config_manifest.tsv"
  check "the config corpus has cases ($ncases)" test "$ncases" -ge 1
else
  echo "note: $data/corpus/config_manifest.tsv not found; config corpus skipped" >&2
fi

finish
