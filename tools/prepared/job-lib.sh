# Sourced by the prepared device jobs (tools/prepared/*-gpu.sh): strict mode, $OUT/z for the logs,
# the clock t0, the card's name and limits, and step NAME LIMIT COMMAND... (runs COMMAND with a
# time limit, its output to $OUT/z/NAME.log, and prints its status, seconds and last line), and
# each_test and sustained (below).
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
