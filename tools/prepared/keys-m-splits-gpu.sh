#!/usr/bin/env bash
# The GPU check of v3's balanced split count (mla_attention_keys_m_splits, thirty-ninth session):
# one device call (~3 min). v3 (the fp8 cache with an fp8 q) took the plan's one wave, which
# leaves a third of the SMs idle at 96 row tiles (B 32 H 96 decode and verify 2, B 8 H 96 verify 8)
# and half a wave empty at 192 (B 32 H 96 verify 4); the rule takes v4's balance (waves x (keys a
# split + 512)) with splits of at least 1024 keys. Predicted from the cost model: 1.13x at 8k and
# 1.27x at 32k on the 96-tile shapes, 1.26x / 1.31x at B 32 verify 4, 1.07x / 1.22x at B 8 verify
# 4; the combine's partials (2 KB a row and split, written and read back) are the model's
# unknown, and the sweep of forced counts below measures them. The other shapes: unchanged.
# Ran in the forty-first session on an H100 (perf.md's section: 1.15-1.29x at 32k, 0.976x at decode
# B32 8k, which the fitted CTA cost of 1200 keys now leaves on one split); the rule landed with it.
# To reproduce the A/B, .gpu-var/main is a build of 9897f96 (before the rule) and SPL a build of
# main since. The original instructions, for a tree without the rule:
# Built here first, from the repository root (R), main checked out: the patch on a scratch tree,
#   R=$PWD; git worktree add --detach /tmp/ks HEAD && cd /tmp/ks && git apply $R/tools/prepared/keys-m-splits.patch &&
#     cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON && ninja -C build kestrel-tests kestrel-bench &&
#     mkdir -p $R/.gpu-var/spl && cp build/kestrel-tests build/kestrel-bench $R/.gpu-var/spl/ && strip $R/.gpu-var/spl/* && cd $R
# (or the branch keys-m-splits checked out there), and main's kestrel-bench in .gpu-var/main; run
# `bash tools/prepared/keys-m-splits-gpu.sh` with carry [".gpu-var/main", ".gpu-var/spl", ".peers/flashmla-bench"]
# (FlashMLA beside v4 on four bf16 shapes when carried).
# SPL=DIR takes the new binaries from DIR instead: a scripts/gpu-bundle of the patched tree,
# carried as .gpu-bin.tar.xz in the repository root and unpacked first (SPL=.gpu-bin); the same
# bundle serves the whole suite, `PREBUILT=.gpu-bin scripts/gpu-check test mutate` (a second call).
# SP_FILTER narrows step 1's matrix cases (default: the forced counts and v3's CI cases).
source "$(dirname "$0")/job-lib.sh"
SPL=${SPL:-.gpu-var/spl}
T=$SPL/kestrel-tests
# 1. The rule's test, the forced counts in the matrix, v3's CI matrix (its kernels unchanged);
# memcheck at the end.
step unit 60 $T --gtest_filter='MlaAttentionCuda.KeysMBalancedSplitsAreTaken:MlaAttentionRule.*:MlaAttentionCpu.CudaSplits*' --gtest_brief=1
KESTREL_SEED=3901 step sp-matrix 120 $T --gtest_filter="${SP_FILTER:-cuda/*mla_attention*_sp*:cuda/*mla_attention*_km*}" --gtest_brief=1
# 2. The automatic names, main against the rule, AB_ROUNDS rounds (2): the ten shapes it changes and five it
# must leave alone.
S="decode-B32-ctx8192-H96 decode-B32-ctx32768-H96 verify2-B32-ctx8192-H96 verify2-B32-ctx32768-H96
   verify4-B32-ctx8192-H96 verify4-B32-ctx32768-H96 verify4-B8-ctx8192-H96 verify4-B8-ctx32768-H96
   verify8-B8-ctx8192-H96 verify8-B8-ctx32768-H96
   decode-B128-ctx8192-H96 verify2-B32-ctx8192-H128 decode-B32-ctx8192-H32 verify4-B128-ctx8192-H32 decode-B128-ctx8192-H128"
f=(); for s in $S; do f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"); done
AB_TIMEOUT=150 scripts/gpu-ab "$OUT/z/ab" ${AB_ROUNDS:-2} .gpu-var/main "$SPL" -- --reps 10 --no-ceilings "${f[@]}" > /dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main
# 3. The forced counts (1, 2, 4, 5, 8) on the ten shapes, with the ceilings measured in the same run,
# and v4's (1, 2, 3, 4, 5, 8) on four bf16 H 96 shapes at 8k.
timeout 150 "$SPL/kestrel-bench" --reps 10 --filter mla_attention_splits/ --json "$OUT/z/splits.json" > "$OUT/z/splits.log" 2>&1
echo "splits rc=$?"
grep -E "^mla_attention_splits" "$OUT/z/splits.log" | awk '{print $1, $4, $5, $13}' | sed 's/-fp8_e4m3-qfp8-fastP//'
# FlashMLA on the bf16 shapes of step 3 (when carried: .peers/flashmla-bench), and v4's automatic choice.
B="decode-B32-ctx8192-H96 verify2-B32-ctx8192-H96 verify4-B8-ctx8192-H96 verify8-B8-ctx8192-H96"
g=(); h=(); for s in $B; do g+=(--filter "$s-bf16-fastP"); h+=(--filter "mla_attention/$s-bf16-fastP"); done
[ -x .peers/flashmla-bench ] && timeout 60 .peers/flashmla-bench --grid --reps 10 "${g[@]}" | grep fastP | awk '{print "flashmla", $1, $2}'
timeout 60 "$SPL/kestrel-bench" --reps 10 --no-ceilings "${h[@]}" | grep -E "^mla_attention/" | awk '{print $1, $4, $5}'
# 4. Memcheck over the rule's test and the forced counts (last: the slowest step).
step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 3 $T \
  --gtest_filter='MlaAttentionCuda.KeysMBalancedSplitsAreTaken:cuda/*mla_attention*_sp*' --gtest_brief=1
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
