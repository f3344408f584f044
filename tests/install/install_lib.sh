# install_lib.sh — what the install tests share: their environment, a scratch folder, check and fail, a model, the example's expected output.
# Sourced, not run (CMake runs only test_*.sh). tests.cmake sets MOE_SOURCE_DIR, MOE_BUILD_DIR,
# MOE_PREFIX (the scratch install tree), MOE_LIBDIR (relative to it), MOE_CC and MOE_CFLAGS
# (the build's compiler and flags: a sanitizer build's consumers need its runtime too).
# shellcheck shell=bash disable=SC2034 # the variables are for the test that sources this

src=${MOE_SOURCE_DIR:?MOE_SOURCE_DIR is not set (run through ctest)}
build=${MOE_BUILD_DIR:?MOE_BUILD_DIR is not set}
prefix=${MOE_PREFIX:?MOE_PREFIX is not set}
libdir=$prefix/${MOE_LIBDIR:-lib}
cc=${MOE_CC:-cc}
read -r -a cflags <<<"${MOE_CFLAGS:-}"
# shellcheck source=tests/check_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../check_lib.sh"

# make_model DIR: a small DeepSeek-V3 checkpoint (3 layers, the first dense) from the
# moe tool, the installed one unless the test sets moe_tool.
moe_tool=$prefix/bin/moe
make_model() {
  "$moe_tool" gen --family deepseek_v3 --out "$1" --layers 3 >/dev/null
}

# expect_layers MODEL_DIR OUTPUT: run_model's OUTPUT describes the model that config.json (read
# here with Python, not libmoe) describes: the family and hidden size, and one "layer i:" line
# with a finite checksum for exactly the MoE layers (i >= first_k_dense_replace, i a multiple
# of moe_layer_freq), each with the config's expert count and top-k.
expect_layers() {
  python3 - "$1" "$2" <<'PY'
import json, math, re, sys
cfg = json.load(open(sys.argv[1] + "/config.json"))
out = open(sys.argv[2]).read().splitlines()
want = [i for i in range(cfg["num_hidden_layers"])
        if i >= cfg.get("first_k_dense_replace", 0) and i % cfg.get("moe_layer_freq", 1) == 0]
errors = []
head = out[0] if out else ""
if f": {cfg['model_type']}," not in head or f"hidden {cfg['hidden_size']}," not in head:
    errors.append(f"first line {head!r} does not name {cfg['model_type']} and hidden {cfg['hidden_size']}")
got = []
for line in out[1:]:
    m = re.fullmatch(r"layer (\d+): \w+, (\d+) experts, top (\d+), .*: checksum (\S+)", line)
    if not m:
        errors.append(f"unexpected line {line!r}")
        continue
    got.append(int(m[1]))
    if (int(m[2]), int(m[3])) != (cfg["n_routed_experts"], cfg["num_experts_per_tok"]):
        errors.append(f"layer {m[1]}: {m[2]} experts, top {m[3]}; config.json says "
                      f"{cfg['n_routed_experts']}, top {cfg['num_experts_per_tok']}")
    if not math.isfinite(float(m[4])):
        errors.append(f"layer {m[1]}: checksum {m[4]} is not finite")
if got != want:
    errors.append(f"layers run: {got}; config.json's MoE layers: {want}")
for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
}

# runs_model NAME BINARY MODEL_DIR: BINARY runs on the model (output in $tmp/NAME.out) and
# prints what expect_layers wants.
runs_model() {
  local name=$1 bin=$2 model=$3
  if ! "$bin" "$model" 3 >"$tmp/$name.out" 2>"$tmp/$name.err"; then
    echo "  $bin failed:" >&2
    cat "$tmp/$name.err" >&2
    return 1
  fi
  expect_layers "$model" "$tmp/$name.out"
}
