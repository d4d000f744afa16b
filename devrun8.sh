#!/bin/bash
# mla_attention split rule (rule, 42cc4e6) against the commit before (base).
set -u
O=$OUT; V=.gpu-var
timeout 120 $V/rule/kestrel-tests --gtest_filter='cuda/*mla_attention*:*MlaAttention*' --gtest_brief=1 > $O/tests.log 2>&1; echo "tests rc=$?"; tail -3 $O/tests.log
for r in 1 2; do for v in base rule rule base; do
  timeout 100 $V/$v/kestrel-bench --filter -B1-ctx --filter -B8-ctx1024 --reps 20 --no-ceilings --json $O/b-$v-$r$RANDOM.json > /dev/null 2>&1 || echo "bench $v failed"
done; done
cd $O && tar czf benches.tgz b-*.json && rm b-*.json
