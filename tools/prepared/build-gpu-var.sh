#!/usr/bin/env bash
# Builds, here (nvcc, no GPU), every binary the prepared device jobs carry, into .gpu-var/
# (git-ignored; a new checkout has none): each from a scratch worktree under $TMPDIR, stripped.
#   .gpu-var/main        kestrel-bench of BASE (default 9897f96: before v3's balanced split count)
#   .gpu-var/spl2        kestrel-bench + kestrel-tests of HEAD
#   .gpu-var/tl          kestrel-bench of HEAD with s64-cta-timeline.patch (the probe)
#   .gpu-var/NAME        for ONLY="branch:NAME": kestrel-bench + kestrel-tests of the local branch NAME (the
#                        variants the forty-fourth session measured: flat-merge, stage-partials, stg128,
#                        combine-regs, keep-partials)
# and, with BUNDLE=1, .gpu-var/bundle-HEAD.tar.xz: scripts/gpu-bundle of HEAD (19 mutants, ~6 min more
# on 2 cores), to copy to the repository root as .gpu-bin.tar.xz for `PREBUILT=.gpu-bin
# scripts/gpu-check`. About 10 minutes on 2 cores without the bundle. ONLY="main tl" builds some.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=$PWD BASE=${BASE:-9897f96} T=${TMPDIR:-/tmp}/kestrel-gpu-var
ONLY=${ONLY:-main spl2 tl}
mkdir -p .gpu-var "$T"
tree() {  # tree NAME REV [PATCH...]: a clean worktree at REV with the patches applied, configured
  local dir=$T/$1 rev=$2; shift 2
  git worktree remove --force "$dir" 2>/dev/null || rm -rf "$dir"
  git worktree add --detach "$dir" "$rev" >/dev/null
  for p in "$@"; do git -C "$dir" apply "$R/$p"; done
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKESTREL_CUDA=ON >/dev/null
}
put() {  # put DEST FILE...: copy and strip
  local dest=.gpu-var/$1; shift
  rm -rf "$dest" && mkdir -p "$dest" && cp "$@" "$dest/" && strip "$dest"/*
  echo "built $dest ($(du -sh "$dest" | cut -f1))"
}
for what in $ONLY; do
  case $what in
    main) tree main "$BASE" && ninja -C "$T/main/build" kestrel-bench >/dev/null && put main "$T/main/build/kestrel-bench" ;;
    spl2) tree spl2 HEAD && ninja -C "$T/spl2/build" kestrel-bench kestrel-tests >/dev/null &&
            put spl2 "$T/spl2/build/kestrel-bench" "$T/spl2/build/kestrel-tests" ;;
    tl) tree tl HEAD tools/prepared/s64-cta-timeline.patch && ninja -C "$T/tl/build" kestrel-bench >/dev/null &&
          put tl "$T/tl/build/kestrel-bench" ;;
    branch:*) b=${what#branch:}; tree "$b" "$b" && ninja -C "$T/$b/build" kestrel-bench kestrel-tests >/dev/null &&
                put "$b" "$T/$b/build/kestrel-bench" "$T/$b/build/kestrel-tests" ;;
    *) echo "build-gpu-var: ONLY names main, spl2, tl or branch:NAME, got '$what'" >&2; exit 2 ;;
  esac || { echo "build-gpu-var: $what failed (its worktree: $T/$what)" >&2; exit 1; }
done
if [ -n "${BUNDLE:-}" ]; then
  # (in spl2's worktree, whose build of HEAD it reuses)
  [ -d "$T/spl2/build" ] || tree spl2 HEAD
  (cd "$T/spl2" && BUILD=build scripts/gpu-bundle >/dev/null)
  rev=$(git -C "$T/spl2" rev-parse --short HEAD)
  (cd "$T/spl2" && tar cJf "$R/.gpu-var/bundle-$rev.tar.xz" .gpu-bin) && echo "built .gpu-var/bundle-$rev.tar.xz"
fi
git worktree prune
