#!/usr/bin/env bash
# Builds here (nvcc, no GPU) the binaries session53b-gpu.sh carries beside build-s52.sh's:
# .gpu-var/s53.tar.xz with new = kestrel-bench and kestrel-tests of REV (default HEAD), in a scratch
# worktree (~40 minutes on 2 cores). Then:
#   run: bash tools/prepared/session53b-gpu.sh   (carry .gpu-var/s52.tar.xz, .gpu-var/s53.tar.xz, .peers/flashmla-bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD T=${TMPDIR:-/tmp}/kestrel-s53 S=${TMPDIR:-/tmp}/kestrel-s53-bin
REV=$(git rev-parse "${REV:-HEAD}")
rm -rf "$S" && mkdir -p "$S"/new .gpu-var
git worktree remove --force "$T" 2>/dev/null || rm -rf "$T"
git worktree add --detach "$T" "$REV" >/dev/null
cmake -S "$T" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
ninja -C "$T/build" kestrel-bench kestrel-tests >/dev/null && cp "$T/build/kestrel-bench" "$T/build/kestrel-tests" "$S/new/"
strip "$S"/new/*
(cd "$S" && tar cf - new | xz -T2 -6 > "$R/.gpu-var/s53.tar.xz") && echo "built .gpu-var/s53.tar.xz from $REV"
git worktree remove --force "$T" && git worktree prune
