#!/usr/bin/env bash
# The GPU check of branch s64-obx (thirty-eighth session): o as boxes by tensor copy as its own
# kernel instantiation, taken only for splits of at most 2048 keys (mla_attention_seesaw64_o_boxes).
# The thirty-seventh session's patch took the boxes everywhere and lost 1.6-2% at decode B128 8k
# H 128, and so did its `rule` form there (boxes only for row tiles of at most 32 KV tiles) though
# it ran the row copies: the loss was the changed code, not the boxes. Here the row copies' kernel
# keeps main's code (the same PTX but for one loop's order; the same registers and spills), so
# 8k should be main's time and 1k the boxes' (1.02-1.04x). One device call (~4-5 min): the tests
# that bear on the change (each unit test in its own process), synccheck, the two o mutants, the
# A/B beside FlashMLA, two shapes under the power cap, memcheck.
# Built here (from the repository root, branch s64-obx checked out, build/ configured as usual):
#   ninja -C build kestrel-tests kestrel-bench && mkdir -p .gpu-var/obx .gpu-var/obxmut &&
#     cp build/kestrel-tests build/kestrel-bench .gpu-var/obx/ &&
#     for m in o_boxes o_rows; do git apply tests/mutations/cuda_mla_seesaw64_$m.patch && ninja -C build kestrel-tests &&
#       cp build/kestrel-tests .gpu-var/obxmut/tests-$m; git apply -R tests/mutations/cuda_mla_seesaw64_$m.patch; done &&
#     strip .gpu-var/obx/kestrel-* .gpu-var/obxmut/*
# then run `bash tools/prepared/s64-obx-gpu.sh` with carry
# [".gpu-var/main", ".gpu-var/obx", ".gpu-var/obxmut", ".peers/flashmla-bench"].
source "$(dirname "$0")/job-lib.sh"
T=.gpu-var/obx/kestrel-tests
each_test $T 'MlaAttentionCuda.Seesaw64*' 60
step layout 60 $T --gtest_filter='MlaAttentionSeesaw64Layout.*:MlaAttentionRule.*' --gtest_brief=1
KESTREL_SEED=3811 step s64-ci 150 $T --gtest_filter='cuda/*mla_attention*_s64*' --gtest_brief=1
step synccheck 120 compute-sanitizer --tool synccheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64OBoxes*:cuda/*mla_attention_decode_B140_H96*' --gtest_brief=1
for m in o_boxes o_rows; do
  KESTREL_SEED=3811 step "mutant-$m" 120 .gpu-var/obxmut/tests-$m \
    --gtest_filter='cuda/*mla_attention*_s64*:MlaAttentionCuda.Seesaw64*' --gtest_brief=1
done
echo "tests $(( $(date +%s) - t0 ))s"
S="decode-B128-ctx8192-H128 verify8-B128-ctx8192-H96 decode-B128-ctx4096-H128 decode-B128-ctx1024-H128 verify8-B128-ctx1024-H128 verify4-B128-ctx1024-H96 verify4-B8-ctx8192-H96 verify2-B128-ctx1024-H128"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-bf16-fastP"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/main .gpu-var/obx -- --reps 20 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main
g=(); for s in $S; do g+=(--filter "$s-bf16-fastP"); done
[ -x .peers/flashmla-bench ] && timeout 60 .peers/flashmla-bench --grid --reps 20 "${g[@]}" | grep fastP | awk '{print $1, $2}'
for v in main obx; do
  for c in decode-B128-ctx8192-H128:8000 verify8-B128-ctx1024-H128:6000; do
    sustained "$v-${c%%:*}" .gpu-var/$v/kestrel-bench "mla_attention/${c%%:*}-bf16-fastP" "${c##*:}"
  done
done
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.Seesaw64*:cuda/*mla_attention_decode_B140_H*' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
