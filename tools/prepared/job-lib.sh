# Sourced by the prepared device jobs (tools/prepared/*-gpu.sh): strict mode, $OUT/z for the logs,
# the clock t0, the card's name and limits, and step NAME LIMIT COMMAND... (runs COMMAND with a
# time limit, its output to $OUT/z/NAME.log, and prints its status, seconds and last line), and
# each_test, sustained and goal_rows_and_fp8_grid (below).
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/z"
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
step() {
  local name=$1 limit=$2
  shift 2
  local t1
  t1=$(date +%s)
  timeout "$limit" "$@" > "$OUT/z/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t1 ))s $(tail -n 1 "$OUT/z/$name.log")"
}
# sustained NAME BENCH FILTER REPS: BENCH (a kestrel-bench) on the cases FILTER for REPS launches
# under the power cap (scripts/gpu-sustained into $OUT/z/s), then its clock line and each case's
# median and min; the large nvidia-smi sample file is dropped.
sustained() {
  local name=$1 bench=$2 filter=$3 reps=$4
  scripts/gpu-sustained "$OUT/z/s" "$name" -- "$bench" --reps "$reps" --no-ceilings --filter "$filter" | tail -1
  grep -E "^mla_attention" "$OUT/z/s/$name.log" | awk '{print "   ", $1, "median", $5, "min", $6}'
  rm -f "$OUT/z/s/$name.smi"
}
# each_test BIN FILTER LIMIT: every gtest test of BIN that FILTER selects in a process of its own,
# each a step with LIMIT seconds, so that a hang names its test.
each_test() {
  local bin=$1 filter=$2 limit=$3 t
  for t in $("$bin" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/{s = $1} /^ /{print s $1}'); do
    step "unit-$t" "$limit" "$bin" --gtest_filter="$t" --gtest_brief=1
  done
}
# ab_fp8_fast BASE ROUNDS "SHAPES" DIR...: gpu-ab of the builds DIR... on the fp8 fast cases
# mla_attention/<shape>-fp8_e4m3-qfp8-fastP of each SHAPES word, --reps 20, then their ratios
# against the build named BASE (scripts/bench-compare) into $OUT/z/ab.txt.
ab_fp8_fast() {
  local base=$1 rounds=$2 shapes=$3 s g=()
  shift 3
  for s in $shapes; do g+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"); done
  AB_TIMEOUT=200 scripts/gpu-ab "$OUT/z/ab" "$rounds" "$@" -- --reps 20 --no-ceilings "${g[@]}" >/dev/null 2>&1
  python3 scripts/bench-compare "$OUT/z/ab" --base "$base" | tee "$OUT/z/ab.txt"
}
# ab_h32_splits BASE ROUNDS DIR...: ab_fp8_fast on the forty-ninth session's twelve H 32 shapes (v3's
# 32-row form with splits, and one-split controls).
ab_h32_splits() {
  local base=$1 rounds=$2
  shift 2
  ab_fp8_fast "$base" "$rounds" "decode-B1-ctx8192-H32 decode-B1-ctx32768-H32 decode-B8-ctx1024-H32 decode-B8-ctx8192-H32
    decode-B8-ctx32768-H32 decode-B32-ctx8192-H32 decode-B32-ctx32768-H32 verify2-B8-ctx8192-H32 verify2-B8-ctx32768-H32
    verify2-B32-ctx32768-H32 verify4-B8-ctx32768-H32 decode-B128-ctx8192-H32" "$@"
}
# goal_rows_and_fp8_grid DIR: issue 3's bf16 goal rows and whole bf16 grid beside FlashMLA
# (scripts/gpu-mla-goal-rows into $OUT/goal, log $OUT/z/goal.log; carry .peers/flashmla-bench),
# then DIR's whole fp8 fast grid with the ceilings measured in the same run ($OUT/z/fp8grid.json).
goal_rows_and_fp8_grid() {
  local dir=$1 n f=()
  OUT=$OUT/goal timeout 420 scripts/gpu-mla-goal-rows "$dir" > "$OUT/z/goal.log" 2>&1
  echo "goal rc=$? $(( $(date +%s) - t0 ))s"
  grep -vE "^(mla_attention|decode-|verify|  )" "$OUT/z/goal.log" | grep -vE "^$" | cut -c1-200 | tail -40
  for n in $("$dir/kestrel-bench" --list --filter mla_attention/ | awk '$1 ~ /^mla_attention\/.*-fp8_e4m3-qfp8-fastP$/ {print $1}'); do
    f+=(--filter "$n")
  done
  step fp8grid 300 "$dir/kestrel-bench" --reps 10 --json "$OUT/z/fp8grid.json" "${f[@]}"
  grep -E "copy|cuBLAS|ceiling" "$OUT/z/fp8grid.log" | head -3
}
