#!/usr/bin/env bash
# Prepared in the forty-fifth session, not run (no device time left): v3's wide form walking the
# batch past one wave (branch km-walk: one split and more 64-row tiles than SMs, one wave of CTAs
# that each take every floor(SMs / row tiles)-th sequence, their tile count running on), against
# main 2baed3b. Why: at B 128 1k the wide form runs ~16 waves of CTAs of 16 tiles, ~42 us a wave
# where the tiles alone take ~30 us (job 9 of the forty-fifth session: verify 8 B128 1k H 128 fp8
# 648 us, 56% of the GEMM rate); v4's walk gained 1.07-1.17x at such shapes. Predicted: B 32 /
# 128 at 1k 1.05-1.15x, at 8k / 32k 1.00-1.03x, the 32-row form's shapes 1.00x.
# Built here (scratch worktree, the branch's bench and tests as .gpu-var/kmwalk; its mutant's tests
# as .gpu-var/kmwalk-mut, tests/mutations/cuda_mla_keys_m_wide_walk_step.patch applied; main's
# bench as .gpu-var/main45). Carry [".gpu-var/main45", ".gpu-var/kmwalk", ".gpu-var/kmwalk-mut"].
source tools/prepared/job-lib.sh; N=.gpu-var/kmwalk
step unit 120 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*:MlaAttentionCuda.KeysM*:MlaAttentionRule.*' --gtest_brief=1
step matrix 150 env KESTREL_SEED=4601 $N/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
grep -E "FAILED|Failure" "$OUT/z/unit.log" "$OUT/z/matrix.log" | head -20
step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*' --gtest_brief=1
step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 $N/kestrel-tests --gtest_filter='MlaAttentionCuda.WideKeysM*' --gtest_brief=1
# The mutant must fail (every other sequence of a walking CTA skipped).
step mutant 120 .gpu-var/kmwalk-mut/kestrel-tests --gtest_filter='cuda/*mla_attention*kmw*:MlaAttentionCuda.WideKeysMWalksPastOneWave' --gtest_brief=1
grep -c "^\[  FAILED  \] .*(" "$OUT/z/mutant.log"
f=()
for s in verify8-B128-ctx1024-H128 verify8-B128-ctx1024-H96 verify4-B128-ctx1024-H128 verify2-B128-ctx1024-H128 decode-B128-ctx1024-H128 \
         verify8-B32-ctx1024-H128 verify4-B128-ctx1024-H32 verify8-B128-ctx8192-H128 decode-B128-ctx8192-H128 verify4-B128-ctx8192-H32 \
         verify2-B128-ctx32768-H96 decode-B128-ctx8192-H32 decode-B32-ctx8192-H96; do f+=(--filter "mla_attention/$s-fp8_e4m3-qfp8-fastP"); done
AB_TIMEOUT=120 scripts/gpu-ab "$OUT/z/ab" 3 .gpu-var/main45 $N -- --reps 10 --no-ceilings "${f[@]}" >/dev/null 2>&1
python3 scripts/bench-compare "$OUT/z/ab" --base main45 | tee "$OUT/z/ab.txt"
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
