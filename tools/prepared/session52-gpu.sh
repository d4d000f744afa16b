#!/usr/bin/env bash
# The fifty-second session's second job: the A/B of main (m), ws-boxes (ws) and km-lead2 (lead) on
# every fp8 fast dispatch case of kestrel-bench (mla_attention/<shape>-fp8_e4m3-qfp8-fastP: H 32 /
# 96 / 128, decode and verify 2 / 4 / 8, B 1 / 8 / 32 / 128, 1k / 8k / 32k keys), to find where
# ws's staged partials lose (decode B1 32k H 32 lost 8% in the first job) and fit their rule.
# Binaries: build-s51.sh as at 741bd06 (see session51b-gpu.sh); carry .gpu-var/s51.tar.xz and .gpu-var/s51b.tar.xz.
# Knob: AB_ROUNDS (2).
source tools/prepared/job-lib.sh
for f in s51 s51b; do tar xJf .gpu-var/$f.tar.xz -C .gpu-var; done
shapes=$(.gpu-var/m/kestrel-bench --list | awk '$1 ~ /^mla_attention\/.*-fp8_e4m3-qfp8-fastP$/ {
  sub(/^mla_attention\//, "", $1); sub(/-fp8_e4m3-qfp8-fastP$/, "", $1); print $1}')
echo "$(echo $shapes | wc -w) shapes"
ab_fp8_fast m "${AB_ROUNDS:-2}" "$shapes" .gpu-var/m .gpu-var/ws .gpu-var/lead > /dev/null
(cd "$OUT" && tar cJf z.tar.xz z && rm -rf z)
echo "all $(( $(date +%s) - t0 ))s"
