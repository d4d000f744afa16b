#!/usr/bin/env python3
"""Per-warpgroup phases of one v4 launch from the timeline probe (tools/prepared/s64-cta-timeline.patch).

The probe's kernel records %globaltimer (ns) in thread 0 of each consumer warpgroup, for every
(row tile, sequence) item a CTA walks: at the item's start, after the first Q barrier (the last
item's o copies have read Q's region), after Q is stored (the second Q barrier), after the first
pair's QKs, after the pair loop, after the L barrier (row sums) and after the o stores were
issued; a one-thread kernel prints them after each launch as "TL2 item smid" followed by
warpgroup 0's seven stamps and warpgroup 1's. This reads a kestrel-bench log holding those lines
and prints, for the last launch (or --launch N from the end), the medians of each phase per
warpgroup over a CTA's 1st, 2nd, ... item.

  git apply tools/prepared/s64-cta-timeline.patch && cmake --build build --target kestrel-bench
  build/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter mla_attention/decode-B128-ctx8192-H128-bf16-fastP > tl.txt
  tools/cta_timeline.py tl.txt
"""
import argparse
import collections
import statistics as st

PHASES = ["to the Q barrier", "Q load", "first QKs", "pairs", "L barrier", "o out"]


def launches(path):
    rows = [list(map(int, l.split()[1:])) for l in open(path) if l.startswith("TL2 ")]
    out, cur = [], []
    for r in rows:
        if r[0] == 0 and cur:  # item 0 opens the next launch's block of lines
            out.append(cur)
            cur = []
        cur.append(r)
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--launch", type=int, default=1, help="which launch, counted from the last (1)")
    args = ap.parse_args()
    lr = launches(args.log)[-args.launch]
    t0 = min(r[2] for r in lr)
    print(f"{len(lr)} items, span {(max(max(r[8], r[15]) for r in lr) - t0) / 1e3:.1f} us")
    by_sm = collections.defaultdict(list)
    for r in lr:
        by_sm[r[1]].append(r)
    nth = {}
    for rs in by_sm.values():
        rs.sort(key=lambda r: r[2])
        for i, r in enumerate(rs):
            nth[r[0]] = i
    for k in sorted(set(nth.values())):
        ws = [r for r in lr if nth[r[0]] == k]
        for c in (0, 1):
            o = 2 + 7 * c
            d = [st.median((r[o + i + 1] - r[o + i]) / 1e3 for r in ws) for i in range(6)]
            whole = st.median((r[o + 6] - r[o]) / 1e3 for r in ws)
            print(f"item {k + 1} ({len(ws)}) wg{c}: " + ", ".join(f"{n} {v:.2f}" for n, v in zip(PHASES, d)) + f"; item {whole:.2f} us")


if __name__ == "__main__":
    main()
