#!/usr/bin/env bash
# test_gen_inspect.sh — `moe gen` then `moe inspect` for every family and dtype; determinism; usage errors.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"

# ---- gen -> inspect for every family x dtype, one file and 3 shards -----------------------

# The plan the options below must produce, written from the options (3 layers; DeepSeek
# V2/V3/Kimi: first_k_dense_replace 1 by default; V4: num_hash_layers 1 by default).
kinds_of() {
  case $1 in
  deepseek_v2 | deepseek_v3 | kimi_k2) echo "layer 0: dense|layers 1-2: moe" ;;
  deepseek_v32 | glm4_moe | glm_moe_dsa | glm4_moe_lite | kimi_k25) echo "layer 0: dense|layers 1-2: moe" ;;
  deepseek_v4) echo "layer 0: hash|layers 1-2: moe" ;;
  *) echo "layers 0-2: moe" ;;
  esac
}
# The routing method of the MoE layers (default groups: deepseek_v2 4 -> group_limited_greedy).
method_of() {
  case $1 in
  deepseek_v2) echo group_limited_greedy ;;
  deepseek_v3 | kimi_k2 | deepseek_v4) echo noaux_tc ;;
  deepseek_v32 | glm4_moe | glm_moe_dsa | glm4_moe_lite | minimax_m2 | kimi_k25) echo noaux_tc ;;
  qwen3_moe | mixtral) echo softmax_topk ;;
  gpt_oss) echo topk_softmax ;;
  esac
}
dtypes_of() {
  case $1 in
  gpt_oss) echo "mxfp4 bf16" ;;
  deepseek_v4) echo "mxfp4 fp8" ;;
  *) echo "bf16 fp8" ;;
  esac
}
# A dtype name inspect must show among the routed experts' tensors.
expert_dtype_of() { # family dtype
  case $1/$2 in
  gpt_oss/mxfp4) echo u8 ;;
  deepseek_v4/mxfp4) echo i8 ;;
  */fp8) echo f8_e4m3 ;;
  */bf16) echo bf16 ;;
  esac
}

# inspect_ok DIR FAMILY DTYPE: exit 0, the family, every layer kind, the methods, the dtypes.
inspect_ok() {
  local dir=$1 family=$2 dtype=$3 out rc=0
  out=$("$moe" inspect "$dir" 2>"$tmp/stderr") || rc=$?
  check "$family/$dtype: inspect exits 0 (got $rc: $(cat "$tmp/stderr"))" test "$rc" -eq 0
  check "$family/$dtype: inspect prints no error" test ! -s "$tmp/stderr"
  check "$family/$dtype: family line" grep -q "^family  *$family\$" <<<"$out"
  local IFS='|'
  for k in $(kinds_of "$family"); do
    check "$family/$dtype: plan has '$k'" grep -qx "  $k" <<<"$out"
  done
  unset IFS
  local moe_head
  moe_head=$(grep -E '^  layers? [0-9-]+: moe$' <<<"$out" | head -1)
  check "$family/$dtype: a moe layer" test -n "$moe_head"
  check "$family/$dtype: moe layers route with $(method_of "$family")" \
    grep -qE "^    routing   $(method_of "$family"): " <<<"$(grep -A1 -x "$moe_head" <<<"$out")"
  if [ "$family" = deepseek_v4 ]; then
    check "$family/$dtype: hash layer routes by hash with tid2eid" \
      grep -qE '^    routing   hash: .*tid2eid' <<<"$(grep -A1 -x '  layer 0: hash' <<<"$out")"
    check "$family/$dtype: tid2eid tensor listed" grep -qE '^    ffn\.gate\.tid2eid +i64 +\[2048, 2\]' <<<"$out"
  fi
  check "$family/$dtype: expert tensors in $(expert_dtype_of "$family" "$dtype")" \
    grep -qE "experts.* $(expert_dtype_of "$family" "$dtype") " <<<"$out"
  check "$family/$dtype: verdict OK" grep -q '^result  *OK' <<<"$out"
  check "$family/$dtype: kernels section" grep -q '^kernels' <<<"$out"
}

for family in deepseek_v2 deepseek_v3 kimi_k2 deepseek_v4 qwen3_moe mixtral gpt_oss \
  deepseek_v32 glm4_moe glm_moe_dsa glm4_moe_lite minimax_m2 kimi_k25; do
  for dtype in $(dtypes_of "$family"); do
    one=$tmp/$family-$dtype-1
    three=$tmp/$family-$dtype-3
    check "$family/$dtype: gen single file" "$moe" gen --family "$family" --dtype "$dtype" \
      --layers 3 --seed 5 --out "$one" >"$tmp/gen.out"
    check "$family/$dtype: gen prints one summary line" test "$(wc -l <"$tmp/gen.out")" -eq 1
    check "$family/$dtype: config.json" test -s "$one/config.json"
    check "$family/$dtype: model.safetensors" test -s "$one/model.safetensors"
    check "$family/$dtype: no index for one file" test ! -e "$one/model.safetensors.index.json"
    inspect_ok "$one" "$family" "$dtype"

    check "$family/$dtype: gen 3 shards" "$moe" gen --family "$family" --dtype "$dtype" \
      --layers 3 --seed 5 --shards 3 --out "$three" >/dev/null
    for k in 1 2 3; do
      check "$family/$dtype: shard $k" test -s "$three/model-0000$k-of-00003.safetensors"
    done
    check "$family/$dtype: index" test -s "$three/model.safetensors.index.json"
    check "$family/$dtype: no model.safetensors next to shards" test ! -e "$three/model.safetensors"
    check "$family/$dtype: index has total_size" grep -q '"total_size"' "$three/model.safetensors.index.json"
    inspect_ok "$three" "$family" "$dtype"
  done
done

# More shapes of the plan: several dense / hash layers, and DeepSeek-V2's greedy.
"$moe" gen --family deepseek_v3 --layers 5 --first-dense 2 --out "$tmp/v3-d2" >/dev/null
out=$("$moe" inspect "$tmp/v3-d2")
check "first-dense 2: layers 0-1 dense" grep -qx '  layers 0-1: dense' <<<"$out"
check "first-dense 2: layers 2-4 moe" grep -qx '  layers 2-4: moe' <<<"$out"
"$moe" gen --family deepseek_v4 --layers 4 --hash-layers 2 --vocab 100 --topk 3 --out "$tmp/v4-h2" >/dev/null
out=$("$moe" inspect "$tmp/v4-h2")
check "hash-layers 2: layers 0-1 hash" grep -qx '  layers 0-1: hash' <<<"$out"
check "hash-layers 2: layers 2-3 moe" grep -qx '  layers 2-3: moe' <<<"$out"
check "hash-layers 2: tid2eid [100, 3]" grep -qE 'tid2eid +i64 +\[100, 3\]' <<<"$out"
"$moe" gen --family deepseek_v2 --groups 1 --out "$tmp/v2-greedy" >/dev/null
check "deepseek_v2 --groups 1: greedy" grep -qE '^    routing   greedy: ' <<<"$("$moe" inspect "$tmp/v2-greedy")"
"$moe" gen --family deepseek_v3 --experts 16 --topk 4 --groups 4 --topk-group 2 --out "$tmp/v3-g" >/dev/null
check "deepseek_v3 groups in the plan" grep -qE 'routing   noaux_tc: .*top-4 of 16 experts, n_group 4, topk_group 2' \
  <<<"$("$moe" inspect "$tmp/v3-g")"
check "16 experts grouped as one line" grep -qE 'mlp\.experts\.\{0\.\.15\}\.gate_proj\.weight +f8_e4m3 +\[128, 256\] ×16' \
  <<<"$("$moe" inspect "$tmp/v3-g")"
"$moe" gen --family qwen3_moe --torch-dtype float32 --out "$tmp/q-f32" >/dev/null
check "torch-dtype float32: f32 router" grep -q '^router  *f32$' <<<"$("$moe" inspect "$tmp/q-f32")"
"$moe" gen --family ernie4_5_moe --out "$tmp/ernie" >/dev/null
check "ernie4_5_moe: renorm_min 1e-12 by default" grep -q 'renorm_min=1e-12,' <<<"$("$moe" inspect "$tmp/ernie")"
"$moe" gen --family ernie4_5_moe --norm-min 0.25 --out "$tmp/ernie-floor" >/dev/null
check "--norm-min 0.25: renorm_min 0.25" grep -q 'renorm_min=0.25,' <<<"$("$moe" inspect "$tmp/ernie-floor")"

# ---- determinism ------------------------------------------------------------------------

for shards in 1 3; do
  for s in a b; do
    "$moe" gen --family deepseek_v3 --layers 3 --seed 42 --shards $shards --out "$tmp/det-$shards-$s" >/dev/null
  done
  for f in "$tmp/det-$shards-a"/*; do
    check "seed 42 twice, $shards shard(s): $(basename "$f") identical" cmp -s "$f" "$tmp/det-$shards-b/$(basename "$f")"
  done
done
"$moe" gen --family deepseek_v3 --layers 3 --seed 43 --out "$tmp/det-other" >/dev/null
check "seed 43 differs from seed 42" bash -c "! cmp -s '$tmp/det-1-a/model.safetensors' '$tmp/det-other/model.safetensors'"
check "config.json does not depend on the seed" cmp -s "$tmp/det-1-a/config.json" "$tmp/det-other/config.json"

# Tensor contents do not depend on the file split (nor on the writer's chunking: the
# 1.5 MiB tid2eid spans two 1 MiB chunks), and values are realistic. Needs python3 (stdlib).
if command -v python3 >/dev/null 2>&1; then
  "$moe" gen --family deepseek_v4 --layers 2 --vocab 65536 --topk 3 --seed 9 --out "$tmp/py-1" >/dev/null
  "$moe" gen --family deepseek_v4 --layers 2 --vocab 65536 --topk 3 --seed 9 --shards 4 \
    --out "$tmp/py-4" >/dev/null
  "$moe" gen --family deepseek_v3 --layers 2 --seed 9 --out "$tmp/py-v3" >/dev/null
  "$moe" gen --family gpt_oss --layers 1 --seed 9 --out "$tmp/py-oss" >/dev/null
  check "values: split-independent and realistic" env PYTHONPATH="$here" python3 - \
    "$tmp/py-1" "$tmp/py-4" "$tmp/py-v3" "$tmp/py-oss" <<'PY'
import math, struct, sys
from ref_lib import st_tensors

def e4m3(c):  # independent decode from the fields
    e, m = (c >> 3) & 15, c & 7
    v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if c & 0x80 else v

def bf16(b):
    return struct.unpack("<f", b"\0\0" + b)[0]

bad = []
one, four, v3, oss = (st_tensors(d) for d in sys.argv[1:5])
if one != four:
    bad.append("tensors differ between 1 file and 4 shards")
for name, (dt, shape, b) in list(one.items()) + list(v3.items()) + list(oss.items()):
    if dt == "F8_E4M3":
        if any(c in (0x7F, 0xFF) for c in b):
            bad.append(name + ": NaN E4M3 code")
        sd = math.sqrt(sum(e4m3(c) ** 2 for c in b) / len(b))
        if not 60 < sd < 300:
            bad.append(name + ": E4M3 code std %g" % sd)
    if dt == "F8_E8M0" or (dt == "U8" and name.endswith("_scales")):
        if any(not (127 - 13 <= c <= 127 - 4) for c in b):
            bad.append(name + ": E8M0 scale outside 2^-13..2^-4")
    if name.endswith("weight_scale_inv"):
        s = struct.unpack("<%df" % (len(b) // 4), b)
        if any(not (5e-5 < x < 5e-4) for x in s):
            bad.append(name + ": scale_inv out of range")
    if name.endswith("tid2eid"):
        ids = struct.unpack("<%dq" % (len(b) // 8), b)
        k = shape[1]
        for r in range(shape[0]):
            row = ids[r * k:(r + 1) * k]
            if len(set(row)) != k or any(not 0 <= x < 8 for x in row):
                bad.append(name + ": row %d = %s" % (r, row))
                break
    if dt == "BF16" and (name.endswith("gate.weight") or name.endswith("router.weight")):
        v = [bf16(b[i:i + 2]) for i in range(0, len(b), 2)]
        sd = math.sqrt(sum(x * x for x in v) / len(v))
        want = 1 / math.sqrt(shape[1])
        if not 0.8 * want < sd < 1.2 * want:
            bad.append(name + ": router std %g, want about %g" % (sd, want))
    if name.endswith("gate.bias") and dt == "F32":  # DeepSeek-V4 correction bias, about 8
        v = struct.unpack("<%df" % (len(b) // 4), b)
        if any(not 7 < x < 9 for x in v):
            bad.append(name + ": bias %s" % (v,))
for x in bad[:20]:
    print("  " + x, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  # --stored-experts 3: experts 0..2 as without it, the others all zeros (per-expert tensors
  # and gpt-oss's stacked ones), every other tensor unchanged.
  "$moe" gen --family deepseek_v3 --layers 2 --seed 9 --stored-experts 3 --out "$tmp/py-v3-3" >/dev/null
  "$moe" gen --family gpt_oss --layers 1 --seed 9 --stored-experts 3 --out "$tmp/py-oss-3" >/dev/null
  check "stored experts: the rest zero, the others unchanged" python3 - "$tmp/py-v3" "$tmp/py-v3-3" "$tmp/py-oss" "$tmp/py-oss-3" <<'PY'
import glob, json, re, struct, sys

def load(d):
    data = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    return {k: data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]
            for k, t in hdr.items() if k != "__metadata__"}, {k: t["shape"] for k, t in hdr.items() if k != "__metadata__"}

bad, zeroed = [], 0
for full_dir, part_dir in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    (full, shapes), (part, _) = load(full_dir), load(part_dir)
    if full.keys() != part.keys():
        bad.append(part_dir + ": other tensors")
    for name, b in full.items():
        m = re.search(r"\.experts\.(\d+)\.", name)
        if m:  # one expert's tensor
            want = bytes(len(b)) if int(m.group(1)) >= 3 else b
        elif ".experts." in name and shapes[name][0] == 8:  # gpt-oss: stacked over 8 experts
            cut = len(b) // 8 * 3
            want = b[:cut] + bytes(len(b) - cut)
        else:
            want = b
        zeroed += want != b
        if part[name] != want:
            bad.append(name)
if zeroed == 0:
    bad.append("no tensor has zeroed experts")
for x in bad[:20]:
    print("  " + x, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
else
  echo "note: python3 not found; skipped the tensor value checks" >&2
fi

# ---- usage errors: exit 2, one line naming the option, nothing written ------------------

usage_error() { # usage_error OPTION-NAMED ARGS...
  local opt=$1 rc=0
  shift
  "$moe" gen "$@" >"$tmp/u.out" 2>"$tmp/u.err" || rc=$?
  check "gen $* -> exit 2 (got $rc)" test "$rc" -eq 2
  check "gen $*: one line on stderr" test "$(wc -l <"$tmp/u.err")" -eq 1
  check "gen $*: message names $opt ($(cat "$tmp/u.err"))" grep -qe "$opt" "$tmp/u.err"
  check "gen $*: nothing on stdout" test ! -s "$tmp/u.out"
}
o=$tmp/never
usage_error --layers --family mixtral --out "$o" --layers 12x
usage_error --layers --family mixtral --out "$o" --layers -1
usage_error --layers --family mixtral --out "$o" --layers 0
usage_error --layers --family mixtral --out "$o" --layers 4097
usage_error --layers --family mixtral --out "$o" --layers ""
usage_error --layers --family mixtral --out "$o" --layers
usage_error --hidden --family mixtral --out "$o" --hidden 99999999999999999999999
usage_error --hidden --family mixtral --out "$o" --hidden=+5
usage_error --experts --family mixtral --out "$o" --experts " 8"
usage_error --stored-experts --family mixtral --out "$o" --experts 8 --stored-experts 9
usage_error --stored-experts --family mixtral --out "$o" --stored-experts 0
usage_error --seed --family mixtral --out "$o" --seed -5
usage_error --seed --family mixtral --out "$o" --seed 18446744073709551616
usage_error --seed --family mixtral --out "$o" --seed 0x10
usage_error --shards --family mixtral --out "$o" --shards 100000
usage_error --shards --family mixtral --out "$o" --layers 1 --shards 1000
usage_error --family --family llama --out "$o"
usage_error --family --out "$o"
usage_error --out --family mixtral
usage_error --bogus --family mixtral --out "$o" --bogus 1
usage_error --dtype --family gpt_oss --out "$o" --dtype fp8
usage_error --dtype --family deepseek_v4 --out "$o" --dtype bf16
usage_error --dtype --family mixtral --out "$o" --dtype mxfp4
usage_error --dtype --family qwen3_moe --out "$o" --dtype mxfp4
usage_error --dtype --family deepseek_v3 --out "$o" --dtype fp16
usage_error --topk --family mixtral --out "$o" --experts 8 --topk 9
usage_error --groups --family deepseek_v3 --out "$o" --groups 3
usage_error --groups --family deepseek_v3 --out "$o" --experts 6
usage_error --topk-group --family deepseek_v3 --out "$o" --groups 4 --topk-group 5
usage_error --topk --family deepseek_v3 --out "$o" --groups 4 --topk-group 1 --topk 3
usage_error --groups --family deepseek_v3 --out "$o" --groups 8
usage_error --groups --family mixtral --out "$o" --groups 2
usage_error --shared --family gpt_oss --out "$o" --shared 1
usage_error --hash-layers --family deepseek_v3 --out "$o" --hash-layers 1
usage_error --hash-layers --family deepseek_v4 --out "$o" --layers 2 --hash-layers 3
usage_error --first-dense --family deepseek_v3 --out "$o" --layers 2 --first-dense 3
usage_error --dense-intermediate --family mixtral --out "$o" --dense-intermediate 64
usage_error --hidden --family gpt_oss --out "$o" --hidden 100
usage_error --intermediate --family deepseek_v4 --out "$o" --intermediate 48
usage_error --torch-dtype --family mixtral --out "$o" --torch-dtype int8
usage_error --norm-min --family mixtral --out "$o" --norm-min 0.5
usage_error --norm-min --family ernie4_5_moe --out "$o" --norm-min -1
usage_error --norm-min --family ernie4_5_moe --out "$o" --norm-min nan
usage_error --norm-min --family ernie4_5_moe --out "$o" --norm-min 1e39
usage_error --omit --family mixtral --out "$o" --omit model.layers.0.mlp.nothing
check "usage errors wrote nothing" test ! -e "$o"

# ---- run-time errors: exit 1, one line, the folder left as it was -----------------------

"$moe" gen --family mixtral --out "$tmp/exists" >/dev/null
cp "$tmp/exists/model.safetensors" "$tmp/exists.before"
rc=0
"$moe" gen --family mixtral --seed 2 --out "$tmp/exists" >/dev/null 2>"$tmp/e.err" || rc=$?
check "gen into a checkpoint without --force -> exit 1 (got $rc)" test "$rc" -eq 1
check "... one line naming --force" grep -q -- '--force' "$tmp/e.err"
check "... the old checkpoint is untouched" cmp -s "$tmp/exists/model.safetensors" "$tmp/exists.before"
"$moe" gen --family mixtral --seed 2 --shards 2 --force --out "$tmp/exists" >/dev/null
check "--force replaces it (no stale model.safetensors)" test ! -e "$tmp/exists/model.safetensors"
check "--force replaces it (new shards)" test -s "$tmp/exists/model-00002-of-00002.safetensors"
check "--force: the result inspects clean" "$moe" inspect "$tmp/exists" >/dev/null
touch "$tmp/plainfile"
rc=0
"$moe" gen --family mixtral --out "$tmp/plainfile/sub" >/dev/null 2>"$tmp/e.err" || rc=$?
check "gen under a plain file -> exit 1 (got $rc)" test "$rc" -eq 1
check "... one line on stderr" test "$(wc -l <"$tmp/e.err")" -eq 1

# A write that fails half-way: a file size limit lets the first shard through and stops the
# second (the limit is computed from a reference run). Nothing of the run may be left.
"$moe" gen --family deepseek_v3 --layers 4 --shards 3 --out "$tmp/fz-ref" >/dev/null
size1=$(stat -c %s "$tmp/fz-ref/model-00001-of-00003.safetensors")
size2=$(stat -c %s "$tmp/fz-ref/model-00002-of-00003.safetensors")
limit=$(((size1 + 1023) / 1024)) # bash counts ulimit -f in KiB
if [ $((limit * 1024)) -lt "$size2" ]; then
  rc=0
  (
    trap '' XFSZ # an ignored SIGXFSZ makes write() fail with EFBIG instead of killing
    ulimit -f "$limit"
    exec "$moe" gen --family deepseek_v3 --layers 4 --shards 3 --out "$tmp/fz/new"
  ) >/dev/null 2>"$tmp/e.err" || rc=$?
  check "write failing at shard 2 -> exit 1 (got $rc)" test "$rc" -eq 1
  check "... one line naming the shard" grep -q 'model-00002-of-00003.safetensors' "$tmp/e.err"
  check "... nothing left, not even the folders it created" test ! -e "$tmp/fz"
else
  echo "note: shard sizes $size1/$size2 leave no room for the half-way write test" >&2
fi

# ---- help ----------------------------------------------------------------------------------

check "moe --help exits 0" "$moe" --help >"$tmp/h"
for c in caps inspect gen; do check "moe --help lists $c" grep -q "^  $c " "$tmp/h"; done
check "moe gen --help exits 0" "$moe" gen --help >"$tmp/h"
for opt in --family --out --layers --hidden --experts --topk --groups --topk-group --intermediate \
  --dtype --shards --seed --vocab --shared --first-dense --dense-intermediate --hash-layers \
  --torch-dtype --force --omit --help; do
  check "moe gen --help lists $opt" grep -qe "^  $opt " "$tmp/h"
done
check "moe inspect --help exits 0" "$moe" inspect --help >"$tmp/h"
for opt in --tensors --no-mmap --help; do check "moe inspect --help lists $opt" grep -qe "^  $opt " "$tmp/h"; done
rc=0
"$moe" inspect >/dev/null 2>&1 || rc=$?
check "moe inspect without DIR -> exit 2" test "$rc" -eq 2

# --tensors lists every tensor once; a single FILE lists its tensors and metadata.
"$moe" gen --family gpt_oss --layers 2 --shards 2 --out "$tmp/oss" >/dev/null
out=$("$moe" inspect --tensors "$tmp/oss")
check "--tensors lists all 16 tensors" test "$(grep -cE '^  model\.layers\.[01]\.mlp\.' <<<"$out")" -eq 16
out=$("$moe" inspect "$tmp/oss/model-00001-of-00002.safetensors")
check "inspect FILE: metadata" grep -q '^metadata  *format = pt$' <<<"$out"
check "inspect FILE: tensors" grep -qE '^  model\.layers\.0\.mlp\.router\.weight +bf16 +\[8, 256\]$' <<<"$out"

finish
