#!/usr/bin/env bash
# The GPU check of tools/prepared/s64-ostage.patch in one device call (~5 min), prepared in the
# thirty-fourth session (perf.md, thirty-fourth section): v4 stages o in the last KV tile's stage
# and the producers issue the next row tile's Q by tensor copy under the epilogue. Its form before
# the last fix (a parity wait on a `free` mbarrier) hung in MlaAttentionCuda.* and synccheck
# reported "Missing wait" on that barrier; the fix (a freed count, ld.acquire / st.release) has
# not run (the thirty-fifth session was lent no machine). Built here first, from the repository
# root (R):
#   R=$PWD; git clone -q . /tmp/os && cd /tmp/os && git apply $R/tools/prepared/s64-ostage.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON &&
#     cmake --build build --target kestrel-tests kestrel-bench &&
#     mkdir -p $R/.gpu-var/new $R/.gpu-var/mut && cp build/kestrel-tests build/kestrel-bench $R/.gpu-var/new/ &&
#     git apply tests/mutations/cuda_mla_seesaw64_o_rotation.patch && cmake --build build --target kestrel-tests &&
#     cp build/kestrel-tests $R/.gpu-var/mut/rot-tests && cd $R
#   mkdir -p .gpu-var/main && cp build/kestrel-bench build/kestrel-tests .gpu-var/main/   (main's, built as usual)
# then run it with carry [".gpu-var", ".peers/flashmla-bench"]: bash tools/prepared/s64-ostage-gpu.sh
# The steps run most telling first (a hang, synccheck, the matrix, the mutant, then the A/B), each
# log written to $OUT/z as it ends, so that a call cut short still returns what ran.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/z"
t0=$(date +%s)
step() { local name=$1 limit=$2; shift 2; local t1=$(date +%s); timeout "$limit" "$@" > "$OUT/z/$name.log" 2>&1; echo "$name rc=$? $(( $(date +%s) - t1 ))s $(tail -n 1 "$OUT/z/$name.log")"; }
T=.gpu-var/new/kestrel-tests
# One test a process, each with its own limit, so that a hang names its test.
for t in $($T --gtest_list_tests --gtest_filter='MlaAttentionCuda.*' | awk '/^ /{print "MlaAttentionCuda." $1}'); do
  step "unit-$t" 60 $T --gtest_filter="$t" --gtest_brief=1
done
step layout 60 $T --gtest_filter='MlaAttentionSeesaw64Layout.*:MlaAttentionRule.*' --gtest_brief=1
step synccheck 100 compute-sanitizer --tool synccheck --error-exitcode 3 $T --gtest_filter='MlaAttentionCuda.Seesaw64FlatScheduleMatchesV2:MlaAttentionCuda.Seesaw64Walks*:cuda/*mla_attention_decode_B140_H16*' --gtest_brief=1
KESTREL_SEED=3501 step s64-ci 150 $T --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
KESTREL_SEED=3501 step mutant-rot 120 .gpu-var/mut/rot-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
echo "tests $(( $(date +%s) - t0 ))s"
S="decode-B128-ctx1024-H128 verify8-B128-ctx1024-H128 verify4-B128-ctx1024-H96 verify2-B128-ctx1024-H128 decode-B128-ctx4096-H128 decode-B128-ctx8192-H128 verify4-B128-ctx8192-H32 verify8-B128-ctx8192-H96 verify4-B8-ctx8192-H96"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/main .gpu-var/new -- --reps 10 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main
g=(); for s in $S; do g+=(--filter "$s-bf16-fastP"); done
[ -x .peers/flashmla-bench ] && timeout 60 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print $1, $2}'
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $T --gtest_filter='MlaAttentionCuda.Seesaw64*:cuda/*mla_attention_decode_B140_H16*' --gtest_brief=1
for i in 0 1 2 3 4 5 6 7; do GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i KESTREL_SEED=3502 KESTREL_MATRIX=full timeout 200 $T --gtest_filter='cuda/*mla_attention*_s64*' > $OUT/z/s64-full-$i.log 2>&1 & done; wait
echo "s64-full: $(cat $OUT/z/s64-full-*.log | grep -c '^\[       OK \]') ok, $(cat $OUT/z/s64-full-*.log | grep -c '^\[  FAILED  \] .*(') failed"
# main's kernel against the staged-epilogue case with 16 rows a tile (88404a9), not yet run on a GPU
[ -x .gpu-var/main/kestrel-tests ] && KESTREL_SEED=3511 step s64-ci-main 150 .gpu-var/main/kestrel-tests --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
