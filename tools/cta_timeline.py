#!/usr/bin/env python3
"""Per-warpgroup phases of one launch from the timeline probe (tools/prepared/s64-cta-timeline.patch).

The probe's kernel records %globaltimer (ns) in thread 0 of each consumer warpgroup, for every
item (a row tile of one sequence, or of one segment of it) a CTA takes: at the item's start, after
the first Q barrier (the last item's o copies have read Q's region), after Q is stored (the second
Q barrier), after the first pair's QKs, after the pair loop, after the L barrier (row sums) and
after the o stores were issued. A one-thread kernel prints them after each launch: a line "TL2B",
then per item "TL2 row+1 smid" and warpgroup 0's seven stamps, then warpgroup 1's, where row = 32
cta + (the CTA's item count so far); since the thirty-ninth session also each warpgroup's stamp
once the item's plan is in hand (for_each_item's loads of q_start and seq_lens, before the item's
start), which splits the gap between items into the plan and the rest. The same format serves a probe of a peer kernel with the
same seven points (perf.md, thirty-fourth section). This reads a log holding those lines and
prints, for the last launch (or --launch N from the end), the medians of each phase per
warpgroup over the CTAs' 1st, 2nd, ... items, the gap from a CTA's last item's o stamp to its
next item's start, and the launch's span.

  git apply tools/prepared/s64-cta-timeline.patch && cmake --build build --target kestrel-bench
  build/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter mla_attention/decode-B128-ctx8192-H128-bf16-fastP > tl.txt
  tools/cta_timeline.py tl.txt
"""
import argparse
import statistics as st

PHASES = ["to the Q barrier", "Q load", "first QKs", "pairs", "L barrier", "o out"]


def launches(path):
    out = []
    for line in open(path):
        if line.startswith("TL2B"):
            out.append([])
        elif line.startswith("TL2 ") and out:
            out[-1].append(list(map(int, line.split()[1:])))
    return [lr for lr in out if lr]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log")
    ap.add_argument("--launch", type=int, default=1, help="which launch, counted from the last (1)")
    args = ap.parse_args()
    lr = launches(args.log)[-args.launch]
    t0 = min(r[2] for r in lr)
    ends = [max(r[8], r[15]) for r in lr]
    print(f"{len(lr)} items, span {(max(ends) - t0) / 1e3:.1f} us, items end at a median {(st.median(ends) - t0) / 1e3:.1f} us")
    by_row = {r[0]: r for r in lr}
    for k in sorted({(r[0] - 1) % 32 for r in lr}):
        ws = [r for r in lr if (r[0] - 1) % 32 == k]
        for c in (0, 1):
            o = 2 + 7 * c
            d = [st.median((r[o + i + 1] - r[o + i]) / 1e3 for r in ws) for i in range(6)]
            whole = st.median((r[o + 6] - r[o]) / 1e3 for r in ws)
            start = st.median((r[o] - t0) / 1e3 for r in ws)
            # (each later item beside its CTA's last item's o stamp)
            after = [(r, by_row[r[0] - 1][o + 6]) for r in ws if k > 0 and r[0] - 1 in by_row]
            gaps = [(r[o] - last) / 1e3 for r, last in after]
            gap = f", after the last item's o {st.median(gaps):.2f}" if gaps else ""
            plans = [(r[16 + c] - last) / 1e3 for r, last in after if len(r) > 17]
            if plans:
                gap += f" (its plan in hand after {st.median(plans):.2f})"
            print(f"item {k + 1} ({len(ws)}) wg{c}: starts {start:.2f}{gap}, " +
                  ", ".join(f"{n} {v:.2f}" for n, v in zip(PHASES, d)) + f"; item {whole:.2f} us")


if __name__ == "__main__":
    main()
