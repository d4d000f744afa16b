#!/usr/bin/env bash
# The fifty-second session's third job: the landed code (ws-boxes' 32-row part bound to 2048-key
# splits, the wide form's rows, main's row loop; km-lead2) proven and measured against main at
# 6dd8cd7, and the H 32 decode's two forms (~2 minutes). Binaries: tools/prepared/build-s52.sh;
# carry .gpu-var/s52.tar.xz (land: kestrel-bench and kestrel-tests of main as landed, m: main
# 6dd8cd7's kestrel-bench, mut-ws: kestrel-tests with cuda_mla_keys_m_ws_swizzle).
source tools/prepared/job-lib.sh
tar xJf .gpu-var/s52.tar.xz -C .gpu-var
P=.gpu-var/land/kestrel-tests
step unit 100 $P --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits:MlaAttentionCuda.WideKeysM*:MlaAttentionRule.*' --gtest_brief=1
ab_fp8_fast m 2 "decode-B32-ctx1024-H96 verify4-B8-ctx1024-H96 decode-B32-ctx8192-H96 decode-B32-ctx1024-H128
    verify4-B8-ctx1024-H128 verify4-B32-ctx1024-H32 decode-B128-ctx1024-H32 decode-B1-ctx1024-H32 decode-B1-ctx32768-H32
    decode-B8-ctx1024-H32 decode-B8-ctx8192-H32 verify2-B8-ctx1024-H32 decode-B1-ctx8192-H96 decode-B8-ctx32768-H32
    decode-B8-ctx32768-H96 decode-B32-ctx32768-H96 decode-B32-ctx8192-H32 verify2-B128-ctx1024-H96 decode-B128-ctx1024-H128" \
  .gpu-var/m .gpu-var/land
step matrix 150 $P --gtest_filter='cuda/*mla_attention*_km_*:cuda/*mla_attention*_kmw_*' --gtest_brief=1
# The H 32 decode shapes the wide form takes with half-empty tiles (rule: a sequence of at most 32
# rows with little work), against the 32-row form forced (now with its partial boxes), one process.
f=(); for sh in decode-B1-ctx1024-H32 decode-B1-ctx8192-H32 decode-B1-ctx32768-H32 decode-B8-ctx1024-H32 decode-B32-ctx1024-H32; do
  f+=(--filter "mla_attention/$sh-fp8_e4m3-qfp8-fastP" --filter "mla_attention_km/$sh-fp8_e4m3-qfp8-fastP"); done
step h32-forms 60 .gpu-var/land/kestrel-bench --reps 20 --no-ceilings "${f[@]}"
grep -E "^mla_attention" "$OUT/z/h32-forms.log" | cut -c1-160
step mut-ws 60 .gpu-var/mut-ws/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit.log "$OUT"/z/matrix.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
