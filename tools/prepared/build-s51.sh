#!/usr/bin/env bash
# Builds here (nvcc, no GPU) the binaries session51b-gpu.sh carries, from main and the two patches
# kept beside this script (a new checkout has neither the branches nor .gpu-var/), in one scratch
# worktree rebuilt incrementally (~12 minutes on 2 cores):
#   .gpu-var/s51.tar.xz   m (main's kestrel-bench), ws (main + ws-boxes.patch: kestrel-bench,
#                         kestrel-tests), mut-ws, mut-wsw (its two staged-partials mutants)
#   .gpu-var/s51b.tar.xz  lead (ws + km-lead2.patch), mut-lead, mut-leadh (its two mutants)
# and, with BRANCHES=1, the local branches ws-boxes and km-lead2 (commits of the patches, to merge
# once their tests pass). Then, from main:
#   run: bash tools/prepared/session51b-gpu.sh   (carry .gpu-var/s51.tar.xz and .gpu-var/s51b.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD T=${TMPDIR:-/tmp}/kestrel-s51 S=${TMPDIR:-/tmp}/kestrel-s51-bin
rm -rf "$S" && mkdir -p "$S" .gpu-var
git worktree remove --force "$T" 2>/dev/null || rm -rf "$T"
git worktree add --detach "$T" HEAD >/dev/null
cmake -S "$T" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
build() { ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null; }
put() {  # put NAME FILE...: copy and strip into the staging folder
  local d=$S/$1; shift
  mkdir -p "$d" && cp "$@" "$d/" && strip "$d"/*
}
mutant() {  # mutant NAME PATCH: kestrel-tests with the mutation, then the tree as it was
  git -C "$T" apply "tests/mutations/$2.patch"
  ninja -C "$T/build" kestrel-tests >/dev/null && put "$1" "$T/build/kestrel-tests"
  git -C "$T" apply -R "tests/mutations/$2.patch"
}
pack() {  # pack FILE NAME...
  local f=$1; shift
  (cd "$S" && tar cf - "$@" | xz -T2 -6 > "$R/.gpu-var/$f") && echo "built .gpu-var/$f"
}
build && put m "$T/build/kestrel-bench"
git -C "$T" apply --whitespace=nowarn "$R/tools/prepared/ws-boxes.patch"
build && put ws "$T/build/kestrel-bench" "$T/build/kestrel-tests"
mutant mut-ws cuda_mla_keys_m_ws_swizzle
mutant mut-wsw cuda_mla_keys_m_wide_ws_swizzle
pack s51.tar.xz m ws mut-ws mut-wsw
if [ -n "${BRANCHES:-}" ]; then
  git -C "$T" add -A && git -C "$T" commit -qm "ws-boxes (tools/prepared/ws-boxes.patch)" && git branch -f ws-boxes "$(git -C "$T" rev-parse HEAD)"
fi
git -C "$T" apply --whitespace=nowarn "$R/tools/prepared/km-lead2.patch"
build && put lead "$T/build/kestrel-bench" "$T/build/kestrel-tests"
mutant mut-lead cuda_mla_keys_m_lead_q_release
mutant mut-leadh cuda_mla_keys_m_lead_handover
pack s51b.tar.xz lead mut-lead mut-leadh
if [ -n "${BRANCHES:-}" ]; then
  git -C "$T" add -A && git -C "$T" commit -qm "km-lead2 (tools/prepared/km-lead2.patch)" && git branch -f km-lead2 "$(git -C "$T" rev-parse HEAD)"
fi
git worktree remove --force "$T" && git worktree prune
