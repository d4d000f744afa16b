#!/usr/bin/env bash
# The fifty-first session's combined job (not run there: no machine; ran in the fifty-second, job
# 1). Its binaries come from build-s51.sh (`git show 741bd06:tools/prepared/build-s51.sh`, from a
# checkout of 741bd06: main and the patches ws-boxes.patch, km-lead2.patch), carried
# packed: s51.tar.xz with m = main's kestrel-bench, ws = ws-boxes, mut-ws / mut-wsw; s51b.tar.xz
# with lead = km-lead2 (on ws-boxes), mut-lead = cuda_mla_keys_m_lead_q_release, mut-leadh =
# cuda_mla_keys_m_lead_handover. Runs from a checkout of main (the tests are in the binaries).
#   ws    both fast v3 forms' split partials staged as swizzled boxes, sent by tensor copy.
#         Predicted 1.07x at decode B8 8k H 32, 1.01-1.03x on the other H 32 split shapes, 1.00x
#         on the one-split controls, 1.01-1.04x on the wide split shapes.
#   lead  ws + v3 wide walking the batch past one wave with the producers' lead (one split, o
#         boxes, Q by tensor copy): predicted 1.05-1.10x at B 32 / 128 with 1k keys, 1.00-1.02x
#         at 8k; the split shapes as ws.
# lead's unit tests and the whole mla matrix (ws's where lead's fail), the A/B of m, ws and lead,
# then the four mutants and memcheck while the call's time lasts. Knobs: SEED (5101), AB_ROUNDS
# (1; 2 where the tests took under 150 s).
source tools/prepared/job-lib.sh
for f in s51 s51b; do tar xJf .gpu-var/$f.tar.xz -C .gpu-var; done
S=${SEED:-5101}
P=.gpu-var/lead/kestrel-tests
UNIT='MlaAttentionCuda.*KeysM*:MlaAttentionCuda.Combine*:MlaAttentionCuda.PageOutside*:MlaAttentionRule.*:MlaAttentionKeysM*'
step unit-lead 200 $P --gtest_filter="$UNIT" --gtest_brief=1
step "matrix-lead-$S" 200 env KESTREL_SEED=$S $P --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
if grep -q "FAILED" "$OUT"/z/unit-lead.log "$OUT"/z/matrix-lead-*.log 2>/dev/null; then
  step unit-ws 200 .gpu-var/ws/kestrel-tests --gtest_filter="$UNIT" --gtest_brief=1
  step "matrix-ws-$S" 200 env KESTREL_SEED=$S .gpu-var/ws/kestrel-tests --gtest_filter='cuda/*mla_attention*' --gtest_brief=1
fi
R=${AB_ROUNDS:-1}
[ -z "${AB_ROUNDS:-}" ] && [ $(( $(date +%s) - t0 )) -lt 150 ] && R=2
echo "A/B rounds: $R"
ab_fp8_fast m $R "decode-B1-ctx32768-H32 decode-B8-ctx8192-H32 decode-B8-ctx32768-H32 decode-B32-ctx8192-H32
    decode-B32-ctx32768-H32 verify2-B8-ctx8192-H32 verify2-B8-ctx32768-H32 verify2-B32-ctx32768-H32 verify4-B8-ctx32768-H32
    decode-B128-ctx8192-H32 decode-B8-ctx8192-H128 decode-B8-ctx32768-H128 decode-B32-ctx32768-H96 verify2-B8-ctx32768-H96
    verify4-B128-ctx1024-H32 decode-B128-ctx1024-H128 verify2-B128-ctx1024-H128 verify4-B128-ctx1024-H128
    verify8-B128-ctx1024-H128 verify8-B32-ctx1024-H128 verify8-B128-ctx1024-H96 verify4-B128-ctx8192-H32
    decode-B128-ctx8192-H128" .gpu-var/m .gpu-var/ws .gpu-var/lead
# (after the A/B, so that a call cut short by its limit still has the numbers)
# (each while the call's time lasts: its logs under $OUT come back even when it is cut short)
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { echo "skipped $2: out of time"; return 1; }; }
LEADT='MlaAttentionCuda.WideKeysMWalksPastOneWaveWithItsLead:MlaAttentionCuda.WideKeysMOBoxes*:cuda/*mla_attention*kmw*'
before 480 mut-lead && step mut-lead 100 .gpu-var/mut-lead/kestrel-tests --gtest_filter="$LEADT" --gtest_brief=1
before 500 mut-ws && step mut-ws 100 .gpu-var/mut-ws/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits:cuda/*mla_attention*-km*' --gtest_brief=1
before 480 memcheck-lead && step memcheck-lead 120 compute-sanitizer --tool memcheck --error-exitcode 3 $P \
  --gtest_filter='MlaAttentionCuda.WideKeysMWalksPastOneWaveWithItsLead:MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits' --gtest_brief=1
before 520 mut-leadh && step mut-leadh 80 .gpu-var/mut-leadh/kestrel-tests --gtest_filter="$LEADT" --gtest_brief=1
before 540 mut-wsw && step mut-wsw 60 .gpu-var/mut-wsw/kestrel-tests --gtest_filter='MlaAttentionCuda.KeysMPartialsByTensorCopyForSplits:cuda/*mla_attention*-kmw*' --gtest_brief=1
grep -E "^\[  FAILED  \] .*\(" "$OUT"/z/unit*.log "$OUT"/z/matrix-*.log "$OUT"/z/memcheck*.log 2>/dev/null | cut -c1-160 | head -10
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
