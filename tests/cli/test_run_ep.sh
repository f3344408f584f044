#!/usr/bin/env bash
# test_run_ep.sh — `mpirun -np N moe run --ep`: the same files as `moe run` on 1-4 ranks; faults on one rank end every rank.
set -euo pipefail

# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh" "$@"
py() { python3 "$here/run_ref.py" "$@"; }

T=13
v3=$tmp/v3
"$moe" gen --family deepseek_v3 --dtype bf16 --layers 2 --hidden 256 --experts 8 --topk 2 \
  --intermediate 64 --seed 5 --out "$v3" >/dev/null
py batch hidden "$tmp/x.npy" $T 256 3 \; hidden "$tmp/x264.npy" $T 264 3 \; \
  ids "$tmp/t.npy" i64 $T 1000 2

# moe inspect --ranks N: the layers as rank 0 of N creates them, every rank's share listed.
"$moe" inspect --ranks 3 "$v3" >"$tmp/inspect.txt"
check "inspect --ranks 3: the placement" grep -q "placement: rank 0 of 3; routed experts in contiguous ranges" "$tmp/inspect.txt"
for r in "rank 0: experts 0-2 (3)" "rank 1: experts 3-5 (3)" "rank 2: experts 6-7 (2)"; do
  check "inspect --ranks 3: $r" grep -q "$r, [0-9]* packed bytes" "$tmp/inspect.txt"
done
# Rank 2 packs one expert fewer than rank 0: the bytes of one expert less.
b0=$(sed -n 's/.*rank 0: experts 0-2 (3), \([0-9]*\) packed bytes.*/\1/p' "$tmp/inspect.txt")
b2=$(sed -n 's/.*rank 2: experts 6-7 (2), \([0-9]*\) packed bytes.*/\1/p' "$tmp/inspect.txt")
per=$(sed -n '/routed experts:/,/packed:/s/.*packed: \([0-9]*\) bytes per expert.*/\1/p' "$tmp/inspect.txt" | head -1)
check "inspect --ranks 3: rank 0's bytes - rank 2's = one expert ($b0 - $b2 = $per)" \
  test "$((b0 - b2))" -eq "${per:-0}"

# Without MPI, --ep is a clear error and nothing else is tested here.
if ! "$moe" run --ep --model "$v3" --hidden "$tmp/x.npy" --out "$tmp/y.npy" \
  >"$tmp/stdout" 2>"$tmp/stderr"; then
  if grep -q "built without MPI" "$tmp/stderr"; then
    check "--ep without MPI: no output" test ! -e "$tmp/y.npy"
    finish
    exit $?
  fi
fi

mpi=(timeout 120 mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)

# ep_ok WHAT NP ARGS...: mpirun -np NP moe run --ep ARGS exits 0, nothing on stderr.
ep_ok() {
  local what=$1 np=$2 rc=0
  shift 2
  OMP_NUM_THREADS=1 "${mpi[@]}" -np "$np" "$moe" run --ep --threads 1 "$@" \
    >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  first_line "$tmp/stderr"
  check "$what: exit 0 (got $rc: ${line:0:300})" test "$rc" -eq 0
  check "$what: nothing on stderr" test "$nlines" -eq 0
  check "$what: one summary line over $np ranks" grep -q "^over $np rank" "$tmp/stdout"
}

# ep_fails WHAT NEEDLE... -- MPIRUN-ARGS...: every rank exits non-zero with a message (one
# 'moe run:' line per rank, one naming the cause), within the time limit, no output written.
ep_fails() {
  local what=$1 rc=0 needles=() np
  shift
  while [ "$1" != -- ]; do
    needles+=("$1")
    shift
  done
  shift
  np=$1
  shift
  rm -f "$tmp/err_y.npy"
  OMP_NUM_THREADS=1 "${mpi[@]}" "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  check "$what: no hang (timeout gives 124)" test "$rc" -ne 124
  check "$what: a failure exit (got $rc)" test "$rc" -ne 0
  local lines
  # Counted where they stand, not by lines: mpirun forwards the ranks' output as it comes.
  lines=$(grep -o "moe run: " "$tmp/stderr" | wc -l)
  check "$what: a message from each of the $np ranks (got $lines: $(head -c 600 "$tmp/stderr"))" \
    test "$lines" -eq "$np"
  for n in "${needles[@]}"; do
    check "$what: a message names '$n' ($(grep "^moe run: " "$tmp/stderr" | head -c 600))" \
      grep -qF -- "$n" "$tmp/stderr"
  done
  check "$what: no --out file" test ! -e "$tmp/err_y.npy"
  check "$what: nothing on stdout" test ! -s "$tmp/stdout"
}

# ---- The same files on 1, 2, 3 and 4 ranks ---------------------------------------------------

v4=$tmp/v4
gpt=$tmp/gpt
qwen=$tmp/qwen
l4=$tmp/l4
"$moe" gen --family deepseek_v4 --dtype mxfp4 --layers 2 --hash-layers 1 --hidden 256 \
  --experts 8 --topk 2 --intermediate 64 --vocab 1000 --seed 9 --out "$v4" >/dev/null
"$moe" gen --family gpt_oss --dtype mxfp4 --layers 1 --hidden 256 --experts 8 --topk 4 \
  --intermediate 64 --seed 4 --out "$gpt" >/dev/null
"$moe" gen --family qwen3_moe --dtype fp8 --layers 1 --hidden 256 --experts 16 --topk 4 \
  --intermediate 64 --seed 6 --out "$qwen" >/dev/null
# Llama-4: the routing weight scales the expert's input, so each row travels with its weight.
"$moe" gen --family llama4 --dtype bf16 --layers 1 --hidden 256 --experts 8 --intermediate 64 \
  --seed 8 --out "$l4" >/dev/null
"$moe" inspect --ranks 2 "$l4" >"$tmp/inspect_l4.txt"
check "inspect --ranks 2: llama4's rows travel with their weights" \
  grep -q "rows travel with their routing weights" "$tmp/inspect_l4.txt"
# NAME MODEL LAYER ROUTER-OUTPUTS INPUT-IDS
cases=(
  "v3 $v3 1 yes no"
  "v3-dense $v3 0 no no"
  "v4-hash $v4 0 yes yes"
  "v4-score $v4 1 yes yes"
  "gpt-mxfp4 $gpt 0 yes no"
  "qwen-fp8 $qwen 0 yes no"
  "llama4 $l4 0 yes no"
)
for c in "${cases[@]}"; do
  read -r name model layer routed ids <<<"$c"
  args=(--model "$model" --layer "$layer" --hidden "$tmp/x.npy")
  [ "$ids" = yes ] && args+=(--input-ids "$tmp/t.npy")
  outs() { # PREFIX: the output options
    echo --out "$tmp/$1_y.npy"
    [ "$routed" = yes ] && echo --ids-out "$tmp/$1_i.npy" --weights-out "$tmp/$1_w.npy"
    true
  }
  # shellcheck disable=SC2046 # outs prints a list of options
  "$moe" run --threads 1 "${args[@]}" $(outs "${name}_one") >/dev/null
  for np in 1 2 3 4; do
    # shellcheck disable=SC2046
    ep_ok "$name on $np ranks" "$np" "${args[@]}" $(outs "${name}_ep$np")
    for o in y i w; do
      [ "$o" != y ] && [ "$routed" != yes ] && continue
      check "$name on $np ranks: --$o file = moe run's" \
        cmp -s "$tmp/${name}_one_$o.npy" "$tmp/${name}_ep${np}_$o.npy"
    done
  done
done
ep_ok "--explain lists the placement" 2 --model "$v3" --hidden "$tmp/x.npy" --out "$tmp/e.npy" \
  --explain
check "--explain: rank 0 of 2 and both ranks' bytes" \
  bash -c "grep -q 'placement: rank 0 of 2' '$tmp/stdout' && grep -q 'rank 1: experts 4-7 (4)' '$tmp/stdout'"

# ---- moe bench --ep: the table (no figure is checked but what must hold exactly) ------------

for np in 1 3; do
  rc=0
  OMP_NUM_THREADS=1 "${mpi[@]}" -np $np "$moe" bench --ep --model "$v3" --threads 1 --tokens 1,5 \
    --repeat 2 >"$tmp/bench.txt" 2>"$tmp/stderr" || rc=$?
  check "bench --ep on $np ranks: exit 0 (got $rc: $(head -c 300 "$tmp/stderr"))" test "$rc" -eq 0
  check "bench --ep on $np ranks: a line per rank" \
    test "$(grep -cE '^[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+$' "$tmp/bench.txt")" -eq "$np"
  check "bench --ep on $np ranks: a line per batch size" \
    test "$(grep -cE '^ +(1|5) +[0-9.]+ ' "$tmp/bench.txt")" -eq 2
done
# One rank sends nothing.
check "bench --ep on 1 rank: 0 bytes sent per token" \
  bash -c "OMP_NUM_THREADS=1 ${mpi[*]} -np 1 '$moe' bench --ep --model '$v3' --threads 1 --tokens 4 --repeat 1 | grep -qE '^ +4 .* 0$'"

# ---- Faults on one rank: every rank fails, names the rank and the cause ---------------------

cp -r "$v3" "$tmp/v3_noshard"
rm "$tmp/v3_noshard/model.safetensors"
cp -r "$v3" "$tmp/v3_other"
sed -i 's/"routed_scaling_factor": [0-9.e+-]*/"routed_scaling_factor": 7.25/' "$tmp/v3_other/config.json"
check "the other config differs" bash -c "! cmp -s '$v3/config.json' '$tmp/v3_other/config.json'"
common=(--threads 1 --hidden "$tmp/x.npy" --out "$tmp/err_y.npy")
ep_fails "a missing shard on rank 1" "rank 1: " "model.safetensors" -- 3 \
  -np 1 "$moe" run --ep --model "$v3" "${common[@]}" : \
  -np 1 "$moe" run --ep --model "$tmp/v3_noshard" "${common[@]}" : \
  -np 1 "$moe" run --ep --model "$v3" "${common[@]}"
ep_fails "another config on rank 2" "rank 2: " "differs from rank 0's" -- 3 \
  -np 2 "$moe" run --ep --model "$v3" "${common[@]}" : \
  -np 1 "$moe" run --ep --model "$tmp/v3_other" "${common[@]}"
ep_fails "a wrong hidden width" "rank 0: " "hidden size 264" -- 2 \
  -np 2 "$moe" run --ep --threads 1 --model "$v3" --hidden "$tmp/x264.npy" --out "$tmp/err_y.npy"
python3 - "$tmp/t.npy" "$tmp/t_vocab.npy" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-8:] = (1000).to_bytes(8, "little")  # the last token id is vocab_size itself
open(sys.argv[2], "wb").write(bytes(b))
PY
# The last row goes to the last rank.
ep_fails "an out-of-vocabulary token id" "rank 1 (rows 6..12 of the batch): " "token_ids[6] = 1000 is outside [0, 1000)" -- 2 \
  -np 2 "$moe" run --ep --threads 1 --model "$v4" --layer 0 --hidden "$tmp/x.npy" \
  --input-ids "$tmp/t_vocab.npy" --out "$tmp/err_y.npy"

finish
