#!/usr/bin/env bash
# test_bench.sh — `moe bench`: usage errors, --list, and the JSON and SVG of a tiny run (no timing checked).
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"

# Usage errors: exit 2, one line on stderr naming the option, nothing on stdout.
usage() { # usage WHAT NEEDLE ARGS...
  local what=$1 needle=$2 rc=0
  shift 2
  "$moe" bench "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  check "$what: exit 2 (got $rc)" test "$rc" -eq 2
  check "$what: one line on stderr" test "$(wc -l <"$tmp/err")" -eq 1
  check "$what: stderr names '$needle'" grep -qF -- "$needle" "$tmp/err"
  check "$what: nothing on stdout" test ! -s "$tmp/out"
}
usage "no source" "--preset" 
usage "both sources" "exactly one" --preset gpt-oss-20b --model /nonexistent
usage "unknown preset" "no-such" --preset no-such
usage "format not offered" "mxfp4" --preset qwen3-30b-a3b --format mxfp4
usage "zero tokens" "--tokens" --preset qwen3-30b-a3b --tokens 0
usage "bad list" "--tokens" --preset qwen3-30b-a3b --tokens 1,,2
usage "threads 0" "--threads" --preset qwen3-30b-a3b --threads 0
usage "layer with preset" "--layer" --preset qwen3-30b-a3b --layer 1
usage "unknown option" "--bogus" --preset qwen3-30b-a3b --bogus
usage "unknown recipe" "--recipe 'q8' is not f32, bf16 or tile" --preset qwen3-30b-a3b --recipe q8
usage "recipe listed twice" "--recipe: 'tile' is listed twice" --preset qwen3-30b-a3b --recipe tile,f32,tile
usage "empty recipe" "--recipe 'f32,' is not a comma-separated list" --preset qwen3-30b-a3b --recipe f32,
usage "--plot into a .png" "--plot $tmp/roof.png: the roofline is written as SVG only" --preset qwen3-30b-a3b --plot "$tmp/roof.png"
usage "--plot without an extension" "--plot $tmp/roof: the roofline is written as SVG only" --preset qwen3-30b-a3b --plot "$tmp/roof"
check "--plot into a .png: nothing written" test ! -e "$tmp/roof.png"

# stderr_quiet FILE: nothing on stderr but the one warning a busy machine may get (the floors
# are measured, so whether it comes depends on the machine's load: its form is checked).
stderr_quiet() {
  ! grep -vqE '^moe bench: warning: the machine looks busy: .* peaks at [0-9.]+ GFLOP/s on [0-9]+ threads, [0-9.]+x its 1-thread [0-9.]+ ' "$1"
}

# --list: every preset the docs promise, with its real shape.
"$moe" bench --list >"$tmp/list"
for p in "deepseek-v3 .*7168 +2048 +256 +8 +1" "kimi-k2 .*7168 +2048 +384 +8 +1" \
  "deepseek-v4-flash .*4096 +2048 +256 +6 +1" "qwen3-30b-a3b .*2048 +768 +128 +8 +0" \
  "mixtral-8x7b .*4096 +14336 +8 +2 +0" "gpt-oss-20b .*2880 +2880 +32 +4 +0" \
  "gpt-oss-120b .*2880 +2880 +128 +4 +0" "glm-4.5 .*5120 +1536 +160 +8 +1" \
  "minimax-m2 .*3072 +1536 +256 +8 +0"; do
  check "--list has /$p/" grep -qE "^$p\$" "$tmp/list"
done

# A missing model is exit 1 naming the folder.
rc=0
"$moe" bench --model "$tmp/none" --tokens 1 --threads 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
check "missing model: exit 1 (got $rc)" test "$rc" -eq 1
check "missing model: names the folder" grep -qF "$tmp/none" "$tmp/err"
check "missing model: fails before measuring anything (nothing on stdout)" test ! -s "$tmp/out"

# A --plot that cannot be written is exit 1 before the run (nothing measured, nothing on stdout).
mkdir "$tmp/folder.svg"
for bad in "$tmp/no-folder/roof.svg" "$tmp/folder.svg"; do
  rc=0
  "$moe" bench --preset qwen3-30b-a3b --tokens 1 --threads 1 --plot "$bad" >"$tmp/out" \
    2>"$tmp/err" || rc=$?
  check "--plot $bad: exit 1 (got $rc)" test "$rc" -eq 1
  check "--plot $bad: one line naming --plot and the path" \
    test "$(wc -l <"$tmp/err")" -eq 1 -a "$(grep -cF -- "--plot $bad:" "$tmp/err")" -eq 1
  check "--plot $bad: fails before measuring anything" test ! -s "$tmp/out"
done
check "--plot into a missing folder: nothing created" test ! -e "$tmp/no-folder"

# A tiny run: the JSON has every field per case, values consistent with each other.
"$moe" gen --family qwen3_moe --layers 1 --hidden 256 --experts 8 --topk 2 --intermediate 128 \
  --out "$tmp/q" >/dev/null
"$moe" bench --model "$tmp/q" --tokens 1,3 --threads 1,2 --time-ms 1 --json --plot "$tmp/r.svg" \
  >"$tmp/r.json" 2>"$tmp/err"
check "json run: nothing on stderr" stderr_quiet "$tmp/err"
rc=0
"$moe" bench --model "$tmp/q" --layer 5 --tokens 1 --threads 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
check "--layer past the model: exit 1 (got $rc)" test "$rc" -eq 1
check "--layer past the model: says so" grep -qF "layer 5 is not a MoE layer" "$tmp/err"
check "--layer past the model: nothing on stdout" test ! -s "$tmp/out"
check "json and svg are consistent" python3 - "$tmp/r.json" "$tmp/r.svg" \
  "$(dirname "$0")/../../include/moe.h" <<'PY'
import json, os, re, sys, xml.etree.ElementTree as ET
doc = json.load(open(sys.argv[1]))
f = doc["floors"]
assert f["read_gbps_1_thread"] > 0 and f["threads"] == 2, f
cases = doc["cases"]
assert [(c["threads"], c["tokens"]) for c in cases] == [(1, 1), (1, 3), (2, 1), (2, 3)], cases
for c in cases:
    for k in ("preset", "format", "tokens", "threads", "ms_per_forward", "weight_bytes_read",
              "flops", "bandwidth_gbps", "floor_ms", "efficiency", "recipe"):
        assert k in c, k
    assert c["format"] == "bf16" and c["recipe"] == "f32", c
    # 8 experts of 3 x 256 x 128 bf16 weights; a forward hits 2..min(8, 2T) of them
    assert 2 <= c["experts_hit"] <= min(8, 2 * c["tokens"]), c
    # top-2: each hit expert has at least one of the 2T rows and at most one per token
    assert 1 <= c["tokens_per_expert_hit"] <= c["tokens"], c
    assert abs(c["tokens_per_expert_hit"] * c["experts_hit"] - 2 * c["tokens"]) < 1e-6, c
    assert c["flops"] == 2 * c["tokens"] * (8 * 256 + 2 * 3 * 256 * 128), c
    assert c["weight_bytes_read"] >= c["experts_hit"] * 3 * 256 * 128 * 2, c
    s = c["ms_per_forward"] / 1e3
    assert abs(c["bandwidth_gbps"] - c["weight_bytes_read"] / s / 1e9) < 1e-6 * c["bandwidth_gbps"] + 1e-9
    mem = c["weight_bytes_read"] / (f["read_gbps_1_thread" if c["threads"] == 1 else "read_gbps_all_threads"] * 1e9) * 1e3
    assert c["floor_ms"] >= mem * (1 - 1e-6), c
    assert abs(c["efficiency"] - c["floor_ms"] / c["ms_per_forward"]) < 1e-6 * c["efficiency"], c
    assert c["create_user_ms"] >= 0 and c["create_sys_ms"] >= 0, c
    # packed bytes per user-CPU second (0 when the clock saw no user time at all)
    cpu = c["packed_bytes"] / (c["create_user_ms"] * 1e6) if c["create_user_ms"] > 0 else 0
    assert abs(c["pack_gbps_per_thread_cpu"] - cpu) <= 1e-6 * cpu, c
    assert "trace" not in c and "trace_forward_ns" not in c, c  # only with --trace
m = doc["machine"]  # what the figures belong to, against the OS's view and the header
assert m["cores"] == os.cpu_count(), m
names = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
assert not names or m["cpu"] == names[0], (m, names[:1])
l2 = "/sys/devices/system/cpu/cpu0/cache/index2/size"
if m["l2_bytes"] is not None and os.path.exists(l2):
    text = open(l2).read().strip()
    unit = {"K": 1 << 10, "M": 1 << 20}[text[-1]]
    assert m["l2_bytes"] == int(text[:-1]) * unit, (m, text)
version = re.search(r'#define MOE_VERSION_STRING "([^"]+)"', open(sys.argv[3]).read()).group(1)
cap = os.environ.get("MOE_ISA") or None  # the suite also runs under MOE_ISA=scalar
assert m["libmoe_version"] == version and m["moe_isa"] == cap, m
level = ("avx512bf16" if "avx512_bf16" in m["features"] else "avx512" if "avx512" in m["features"]
         else "avx2" if "avx2" in m["features"] else "scalar")
assert m["isa_level"] == level, m
svg = ET.parse(sys.argv[2]).getroot()
circles = svg.findall("{http://www.w3.org/2000/svg}circle")
assert len(circles) == len(cases), len(circles)
PY
# The roofline: a title naming the layer, its format and recipe, and the machine; one ceiling
# per (instruction, thread count) the cases ran against; labels at least 11 px apart.
check_svg() { # check_svg JSON SVG
  python3 - "$1" "$2" <<'PY'
import json, sys, xml.etree.ElementTree as ET
doc = json.load(open(sys.argv[1]))
ns = "{http://www.w3.org/2000/svg}"
svg = ET.parse(sys.argv[2]).getroot()
texts = {t.get("class"): "".join(t.itertext()) for t in svg.iter(ns + "text") if t.get("class")}
for c in doc["cases"]:
    want = "%s %s (recipe %s)" % (c["preset"], c["format"], c["recipe"])
    assert want in texts["title"], (want, texts["title"])
assert doc["machine"]["cpu"] in texts["subtitle"], texts
threads = doc["floors"]["threads"]
want = set()
for c in doc["cases"]:
    t = 1 if c["threads"] == 1 else threads
    want.add((c["insn"] or "read only", t))
    if c["shared_insn"]:
        want.add((c["shared_insn"], t))
lines = [e for e in svg.iter(ns + "polyline") if e.get("class") == "ceiling"]
labels = [e for e in svg.iter(ns + "text") if e.get("class") == "ceiling-label"]
assert len(lines) == len(labels) == len(want), (len(lines), len(labels), want)
got = {("".join(l.itertext()).split(", ")[0], int("".join(l.itertext()).split(", ")[1].split()[0]))
       for l in labels}
assert got == want, (got, want)
ys = sorted(float(l.get("y")) for l in labels)
assert all(b - a >= 11 for a, b in zip(ys, ys[1:])), ys
assert all(0 < y < float(svg.get("height")) for y in ys), ys
PY
}
check "svg: title, one ceiling per instruction and thread count, labels apart" check_svg "$tmp/r.json" "$tmp/r.svg"

# --recipe bf16: the bf16 recipe's kernel set, and the peak it is held to (vdpbf16ps where
# the set runs on it, the FMA's for the AVX2 and AVX-512 emulations; the portable set has
# none).
"$moe" bench --model "$tmp/q" --tokens 2 --threads 1 --time-ms 1 --recipe bf16 --json \
  >"$tmp/b.json" 2>"$tmp/err"
check "--recipe bf16 run: nothing on stderr" stderr_quiet "$tmp/err"
check "--recipe bf16: the recipe, its kernel set and its instruction" python3 - "$tmp/b.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
(c,) = doc["cases"]
assert c["recipe"] == "bf16" and "_bf16_bf16_" in c["kernel"], c
want = {"avx512bf16": "vdpbf16ps zmm", "avx512": "vfmadd231ps zmm", "avx2": "vfmadd231ps ymm",
        "ref": ""}
assert c["insn"] == want[c["kernel"].rsplit("__", 1)[1]], c
PY
MOE_ISA=scalar "$moe" bench --model "$tmp/q" --tokens 2 --threads 1 --time-ms 1 --recipe bf16 \
  --json >"$tmp/b0.json" 2>"$tmp/err"
check "--recipe bf16, MOE_ISA=scalar: the portable set, no instruction's peak" python3 - "$tmp/b0.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
(c,) = doc["cases"]
assert c["kernel"] == "moe_expert_bf16_bf16_8x16__ref" and c["insn"] == "", c
m = doc["machine"]
assert (m["isa_level"], m["features"], m["moe_isa"]) == ("scalar", [], "scalar"), m
assert c["bound"] == "memory" and c["floor_ms"] > 0, c
PY
# --recipe tile: the tile recipe's kernel set and the peak it is held to (the FMA's for the AVX2
# and AVX-512 sets, two chains per 32-K chunk; the portable set has none).
"$moe" bench --model "$tmp/q" --tokens 2 --threads 1 --time-ms 1 --recipe tile --json \
  >"$tmp/tb.json" 2>"$tmp/err"
check "--recipe tile run: nothing on stderr" stderr_quiet "$tmp/err"
check "--recipe tile: the recipe, its kernel set and its instruction" python3 - "$tmp/tb.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
(c,) = doc["cases"]
assert c["recipe"] == "tile" and "_bf16_tile_" in c["kernel"], c
want = {"avx512": "vfmadd231ps zmm", "avx2": "vfmadd231ps ymm", "ref": ""}
isa = c["kernel"].rsplit("__", 1)[1]
assert isa not in want or c["insn"] == want[isa], c
PY

# --recipe f32,tile: every case with each recipe, in the order given, and a side-by-side table.
"$moe" bench --model "$tmp/q" --tokens 1,2 --threads 1 --time-ms 1 --recipe f32,tile --json \
  >"$tmp/two.json" 2>"$tmp/err"
check "--recipe f32,tile run: nothing on stderr" stderr_quiet "$tmp/err"
check "--recipe f32,tile: each case with each recipe" python3 - "$tmp/two.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
assert [(c["recipe"], c["tokens"]) for c in cases] == [
    ("f32", 1), ("f32", 2), ("tile", 1), ("tile", 2)], cases
assert all("_tile_" in c["kernel"] for c in cases[2:]) and not any(
    "_tile_" in c["kernel"] for c in cases[:2]), cases
PY
"$moe" bench --model "$tmp/q" --tokens 1,2 --threads 1 --time-ms 1 --recipe tile,f32 \
  >"$tmp/two.txt" 2>"$tmp/err"
check "--recipe tile,f32: the side-by-side table, against tile" python3 - "$tmp/two.txt" <<'PY'
import sys
text = open(sys.argv[1]).read()
_, _, table = text.partition("recipes side by side: median ms, and its ratio to tile's\n")
lines = table.splitlines()
assert lines and lines[0].split() == ["threads", "tokens", "tile", "ratio", "f32", "ratio"], text
for tokens, line in zip(("1", "2"), lines[1:3]):
    threads, tok, ms_tile, r_tile, ms_f32, r_f32 = line.split()
    assert threads == "1" and tok == tokens and r_tile == "1.00", line
    assert abs(float(ms_f32) / float(ms_tile) - float(r_f32)) < 0.01 + 0.01 * float(r_f32), line
PY

# --trace: each case's median forward, step by step, in the JSON and after the table.
"$moe" bench --model "$tmp/q" --tokens 1,3 --threads 1 --time-ms 1 --json --trace \
  >"$tmp/t.json" 2>"$tmp/err"
check "trace json run: nothing on stderr" stderr_quiet "$tmp/err"
check "trace json: the steps of every case" python3 - "$tmp/t.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
assert [c["tokens"] for c in cases] == [1, 3], cases
for c in cases:
    steps = {s["step"]: s for s in c["trace"]}
    for name in ("gate", "route", "experts.gate_up", "experts.down", "combine"):
        assert name in steps, (name, list(steps))
    # the gate reads its 8 x 256 bf16 weights; gate/up and down at least one expert's packed rows
    assert steps["gate"]["bytes_read"] >= 8 * 256 * 2, steps["gate"]
    assert steps["experts.gate_up"]["bytes_read"] >= 2 * 256 * 128 * 2, steps["experts.gate_up"]
    assert steps["experts.down"]["bytes_read"] >= 256 * 128 * 2, steps["experts.down"]
    assert steps["experts.down"]["bytes_written"] >= c["tokens"] * 256 * 4, steps["experts.down"]
    assert all(s["kernel"] for s in c["trace"]), c["trace"]
    # the steps lie inside the traced forward, whose wall time the table's median brackets loosely
    total = sum(s["ns"] for s in c["trace"])
    assert 0 < total <= c["trace_forward_ns"], (total, c["trace_forward_ns"])
PY
"$moe" bench --model "$tmp/q" --tokens 1,3 --threads 1 --time-ms 1 --trace >"$tmp/t.txt" 2>"$tmp/err"
check "trace table: one block per case, after the table" python3 - "$tmp/t.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
heads = re.findall(r"^trace: (\d+) tokens?, 1 thread \(the median of (\d+) forwards\)$", text, re.M)
assert [h[0] for h in heads] == ["1", "3"], heads
assert all(int(h[1]) >= 3 for h in heads), heads
assert text.index("trace: 1 token") > text.index("  tokens "), "traces follow the table"
for name in ("experts.gate_up", "experts.down", "steps", "forward (wall)"):
    assert len(re.findall(r"^  " + re.escape(name) + r" ", text, re.M)) == 2, name
PY

# Shared experts of another recipe (DeepSeek-V4: MXFP4 routed, FP8 shared) are bounded by
# their own instruction's peak: the compute term is the sum of both parts' times.
"$moe" gen --family deepseek_v4 --dtype mxfp4 --layers 1 --hidden 256 --experts 8 --topk 2 \
  --intermediate 128 --out "$tmp/v4" >/dev/null
"$moe" bench --model "$tmp/v4" --tokens 1,64 --threads 1 --time-ms 1 --json --plot "$tmp/v4.svg" \
  >"$tmp/v4.json" 2>"$tmp/err"
check "v4 json run: nothing on stderr" stderr_quiet "$tmp/err"
check "v4: the shared expert's flops at its own peak" python3 - "$tmp/v4.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
f = doc["floors"]
peak = lambda insn: f["peaks"][insn]["gflops_1_thread"] * 1e9 if insn else None
for c in doc["cases"]:
    assert c["flops_shared"] == 2 * c["tokens"] * 3 * 256 * 128, c
    mem = c["weight_bytes_read"] / (f["read_gbps_1_thread"] * 1e9) * 1e3
    if not c["insn"]:  # the scalar reference kernels: no compute floor
        assert c["shared_insn"] is None and abs(c["floor_ms"] - mem) <= 1e-6 * mem, c
        continue
    if c["shared_insn"] is None:
        comp = c["flops"] / peak(c["insn"]) * 1e3
    else:
        assert c["shared_insn"] != c["insn"] and c["shared_kernel"], c
        comp = ((c["flops"] - c["flops_shared"]) / peak(c["insn"]) +
                c["flops_shared"] / peak(c["shared_insn"])) * 1e3
    if c["tokens"] == 64 and c["shared_insn"]:  # 0.5 MB of weights: compute-bound here
        assert comp > mem, (c, mem, comp)
    want = max(mem, comp)
    assert abs(c["floor_ms"] - want) <= 1e-6 * want, (c, mem, comp)
    if c["recipe"] == "q8" and c["insn"].startswith("vp"):  # FP8 shared: an FMA, not q8
        assert c["shared_insn"] is not None and c["shared_insn"].startswith("vfmadd"), c
PY
check "v4 svg: the routed and the shared experts' ceilings, labels apart" check_svg "$tmp/v4.json" "$tmp/v4.svg"

# The table: each layer's read ceiling is at least the one measured at the start (eviction
# passes can only raise it), and its rows' floors are computed against it.
"$moe" bench --model "$tmp/q" --tokens 1,3 --threads 1 --time-ms 1 >"$tmp/table" 2>"$tmp/err"
check "table run: exit 0, nothing on stderr" stderr_quiet "$tmp/err"
check "table: the read ceiling is not below the start's, rows use it" python3 - "$tmp/table" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = float(re.search(r"read bandwidth +1 thread +([0-9.]+) GB/s", text).group(1))
ceil = float(re.search(r"read ceiling at 1 thread: ([0-9.]+) GB/s", text).group(1))
assert ceil >= start - 0.005, (start, ceil)
rows = re.findall(r"^ +([13]) +([0-9.]+) +[0-9.]+ +([0-9.]+) +([0-9.]+) +([0-9.]+) +[0-9.]+ +[0-9.]+ +([0-9.]+) +([0-9.]+) +(mem|flops)$", text, re.M)
assert [r[0] for r in rows] == ["1", "3"], rows
for tokens, ms, hit, per_hit, mb, floor, eff, bound in rows:
    # top-2; hit (the median forward's, or the mean of the two middle ones) and tok/hit are
    # printed to 0.1
    assert abs(float(per_hit) - 2 * int(tokens) / float(hit)) <= 0.1, (tokens, hit, per_hit)
    if bound == "mem":  # the table's rounding: MB to 0.1 (0.05 / ceil ms), floor to 0.001 ms,
        # ceiling to 0.01 GB/s (under 1 % of the floor)
        tol = 0.05 / ceil + 0.0005 + 0.01 * float(floor)
        assert abs(float(floor) - float(mb) / ceil) <= tol, (floor, mb, ceil)
PY

# --model with --memory-gb: 2 of the 8 experts resident (0.20 MB each), routed over all 8;
# too little memory for top-2 fails before anything is measured.
"$moe" bench --model "$tmp/q" --memory-gb 0.0006 --tokens 3 --threads 1 --time-ms 1 --json \
  >"$tmp/m.json" 2>"$tmp/err"
check "model with --memory-gb: nothing on stderr" stderr_quiet "$tmp/err"
check "model with --memory-gb: 2 of 8 resident, a quarter of the routed bytes" python3 - "$tmp/m.json" "$tmp/r.json" <<'PY'
import json, sys
part = json.load(open(sys.argv[1]))["cases"][0]
full = json.load(open(sys.argv[2]))["cases"][0]
assert part["resident_experts"] == 2 and full["resident_experts"] == 8, (part, full)
assert part["tokens"] == 3 and 2 <= part["experts_hit"] <= 6, part
# packed = gate + n experts: 6 experts fewer give one expert's bytes, and what 2 leave is
# the gate, smaller than an expert (all 8 packed would leave per = 0)
per = (full["packed_bytes"] - part["packed_bytes"]) / 6
assert 0 < part["packed_bytes"] - 2 * per < per, (part, per)
PY
rc=0
"$moe" bench --model "$tmp/q" --memory-gb 0.0001 --tokens 1 --threads 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
check "model with too little memory: exit 1 (got $rc)" test "$rc" -eq 1
check "model with too little memory: one line naming --memory-gb" \
  bash -c "test \"\$(wc -l <'$tmp/err')\" -eq 1 && grep -qF -- '--memory-gb' '$tmp/err'"
check "model with too little memory: fails before measuring (nothing on stdout)" test ! -s "$tmp/out"

# moe inspect --pack: the same layer created for real, its cost reported like moe bench's.
"$moe" inspect --pack "$tmp/q" >"$tmp/inspect"
check "inspect --pack: one line for layer 0" grep -qE "^  layer 0: [0-9.]+ MB packed in [0-9]+ ms, [0-9.]+ GB/s \(CPU: user [0-9]+ ms, [0-9.]+ GB/s per thread; system [0-9]+ ms\); peak resident growth [0-9.]+ MB \(limit 1.15 x packed \+ 64 MB = [0-9.]+ MB: (within|OVER)\)$" "$tmp/inspect"
packed=$(python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["cases"][0]["packed_bytes"] / 1e6))' "$tmp/r.json")
check "inspect --pack: the packed bytes moe bench reported ($packed MB)" grep -qF "layer 0: $packed MB packed" "$tmp/inspect"
"$moe" inspect --pack --threads 1 "$tmp/q" >"$tmp/inspect1"
check "inspect --pack --threads 1: says so" grep -qF "default options but threads = 1)" "$tmp/inspect1"
check "inspect --pack --threads 1: the same packed bytes" grep -qF "layer 0: $packed MB packed" "$tmp/inspect1"
"$moe" inspect --pack --threads 1 --recipe bf16 "$tmp/q" >"$tmp/inspect2"
check "inspect --recipe bf16: the plans say so" grep -qF "default options but experts_recipe = bf16:" "$tmp/inspect2"
check "inspect --recipe bf16: the bf16 recipe asked" grep -qF "recipe asked of the expert kernels: bf16 (options->experts_recipe)" "$tmp/inspect2"
check "inspect --recipe bf16: its kernel set" grep -qF "moe_expert_bf16_bf16_" "$tmp/inspect2"
check "inspect --recipe bf16 --pack --threads 1: says so" grep -qF "default options but experts_recipe = bf16 and threads = 1)" "$tmp/inspect2"
rc=0
"$moe" inspect --recipe f16 "$tmp/q" >"$tmp/out" 2>"$tmp/err" || rc=$?
check "inspect --recipe f16: exit 2 (got $rc)" test "$rc" -eq 2
check "inspect --recipe f16: stderr names it" grep -qF -- "--recipe 'f16' is not f32, bf16 or tile" "$tmp/err"
for bad in "--threads 1" "--pack --threads 0" "--pack --threads x"; do
  rc=0
  # shellcheck disable=SC2086 # the options are words
  "$moe" inspect $bad "$tmp/q" >"$tmp/out" 2>"$tmp/err" || rc=$?
  check "inspect $bad: exit 2 (got $rc)" test "$rc" -eq 2
  check "inspect $bad: stderr names --threads" grep -qF -- "--threads" "$tmp/err"
  check "inspect $bad: nothing on stdout" test ! -s "$tmp/out"
done

# A preset with fewer experts resident than the model has: routing stays over all 32 of
# gpt-oss-20b's experts (4 resident in 0.06 GB of 13 MB experts), so 4 tokens of top-4 hit
# more experts than are resident; the generated file keeps the 28 others as zeros.
usage "memory not a number" "--memory-gb" --preset gpt-oss-20b --memory-gb 0.1x
usage "memory zero" "--memory-gb" --preset gpt-oss-20b --memory-gb 0
"$moe" bench --preset gpt-oss-20b --memory-gb 0.06 --tokens 1,4 --threads 1 --time-ms 1 \
  --dir "$tmp/bd" --json >"$tmp/p.json" 2>"$tmp/err"
check "preset run: nothing on stderr" stderr_quiet "$tmp/err"
check "preset run: 4 of 32 resident, routed over all 32" python3 - "$tmp/p.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
assert [c["tokens"] for c in cases] == [1, 4], cases
for c in cases:
    assert c["resident_experts"] == 4, c
    assert c["experts_hit"] <= 4 * c["tokens"], c
one, four = cases
assert one["experts_hit"] == 4, one  # top-4 of one token: 4 distinct experts
assert four["experts_hit"] > 4, four  # more than the resident copies
# bytes read: the router plus one packed expert per hit (the copies' size, not the file's)
per = (four["weight_bytes_read"] - one["weight_bytes_read"]) / (four["experts_hit"] - 4)
assert abs(one["weight_bytes_read"] - 4 * per) < per, (one, per)
PY
check "preset run: the checkpoint names its resident count" test -d "$tmp/bd/gpt-oss-20b-mxfp4-4-of-32"
"$moe" bench --preset gpt-oss-20b --memory-gb 0.06 --tokens 1 --threads 1 --time-ms 1 \
  --dir "$tmp/bd" >"$tmp/p.txt" 2>"$tmp/err"
check "preset table: 4 of 32 resident" grep -qF "4 of 32 experts resident (routed over all" "$tmp/p.txt"
# The note is due where the copies take less than twice this machine's last-level cache.
noted=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("yes" if d["cases"][0]["packed_bytes"] < 2 * d["floors"]["llc_bytes"] else "no")' "$tmp/p.json")
if [ "$noted" = yes ]; then
  check "preset table: the copies within the cache are noted" grep -qF "note: the resident copies" "$tmp/p.txt"
else
  check "preset table: no note on copies beyond the cache" bash -c "! grep -qF 'note: the resident' '$tmp/p.txt'"
fi

finish
