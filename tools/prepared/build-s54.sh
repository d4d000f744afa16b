#!/usr/bin/env bash
# Builds here (nvcc, no GPU) the binaries session54-gpu.sh carries, as .gpu-var/s54.tar.xz, in one
# scratch worktree of REV (default HEAD; ~25 minutes on 2 cores):
#   new        REV's own kestrel-bench and kestrel-tests
#   merge1     kestrel-bench with tools/prepared/km-merge-v1.patch (the 32-row form only, any count)
#   merge2     kestrel-bench and kestrel-tests with tools/prepared/km-merge.patch (both forms, at
#              most kMlaAttentionKeysMMergeMaxSplits = 16 splits)
#   merge2-mut its tests with the patch's mutant cuda_mla_keys_m_merge_rows
#   flat       kestrel-bench and kestrel-tests with tools/prepared/km-flat.patch (v3's flattened
#              schedule; independent of the merge)
#   flat-mut   its tests with the patch's mutant cuda_mla_keys_m_flat_slot
#   fm         kestrel-bench and kestrel-tests with tools/prepared/km-flat-merge.patch (both above
#              and the flattened runs merged in the kernel; skipped with FM=0)
#   fm-mut     its tests with the patch's mutant cuda_mla_keys_m_flat_merge_rows
# Then (from a checkout of REV): run: bash tools/prepared/session54-gpu.sh   (carry .gpu-var/s54.tar.xz;
# on an H200 also .peers/flashmla-bench, from scripts/build-peer-flashmla)
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD T=${TMPDIR:-/tmp}/kestrel-s54 S=${TMPDIR:-/tmp}/kestrel-s54-bin
REV=$(git rev-parse "${REV:-HEAD}")
rm -rf "$S" && mkdir -p "$S" .gpu-var
git worktree remove --force "$T" 2>/dev/null || rm -rf "$T"
git worktree add --detach "$T" "$REV" >/dev/null
cmake -S "$T" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
# build DIR TARGET...: the worktree as it stands, TARGETs copied into $S/DIR.
build() {
  local dir=$1
  shift
  mkdir -p "$S/$dir"
  ninja -C "$T/build" "$@" >/dev/null
  for t in "$@"; do cp "$T/build/$t" "$S/$dir/"; done
}
# variant DIR PATCH MUTANT: REV with tools/prepared/PATCH (bench and tests into DIR), then with the
# patch's mutation tests/mutations/MUTANT too (tests into DIR-mut); the tree is REV's again first.
variant() {
  git -C "$T" checkout -q -- . && git -C "$T" clean -fdq -e build
  git -C "$T" apply "$R/tools/prepared/$2"
  build "$1" kestrel-bench kestrel-tests
  git -C "$T" apply "tests/mutations/$3"
  build "$1-mut" kestrel-tests
}
build new kestrel-bench kestrel-tests
git -C "$T" apply "$R/tools/prepared/km-merge-v1.patch"
build merge1 kestrel-bench
variant merge2 km-merge.patch cuda_mla_keys_m_merge_rows.patch
variant flat km-flat.patch cuda_mla_keys_m_flat_slot.patch
if [ "${FM:-1}" = 1 ]; then variant fm km-flat-merge.patch cuda_mla_keys_m_flat_merge_rows.patch; fi
strip "$S"/*/*
(cd "$S" && tar cf - $(ls) | xz -T2 -6 > "$R/.gpu-var/s54.tar.xz") && echo "built .gpu-var/s54.tar.xz from $REV"
git worktree remove --force "$T" && git worktree prune
