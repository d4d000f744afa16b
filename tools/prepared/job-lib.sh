# Sourced by the prepared device jobs (tools/prepared/*-gpu.sh): strict mode, $OUT/z for the logs,
# the clock t0, the card's name and limits, and step NAME LIMIT COMMAND... (runs COMMAND with a
# time limit, its output to $OUT/z/NAME.log, and prints its status, seconds and last line).
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
