#!/usr/bin/env python3
"""Per-CTA phases of one v4 launch from the timeline probe (tools/prepared/s64-cta-timeline.patch).

The probe's kernel records %globaltimer (ns) per CTA at its entry (T0), after the row tile's Q
barrier (T1), after Q and the first pair's QKs (T2), after the pair loop (T3) and after the
epilogue (T4); a one-thread kernel prints them after each launch as
"TL cta smid T0 T1 T2 T3 T4". This reads a kestrel-bench log holding those lines and prints, for
the last launch (or --launch N from the end), the medians of each phase per wave, when each wave
starts and ends, and the gap between a CTA's end and the next one's start on the same SM.

  git apply tools/prepared/s64-cta-timeline.patch && cmake --build build --target kestrel-bench
  build/kestrel-bench --reps 3 --warmup 1 --no-ceilings --filter mla_attention/decode-B128-ctx8192-H128-bf16-fastP > tl.txt
  tools/cta_timeline.py tl.txt
"""
import argparse
import collections
import statistics as st


def launches(path):
    rows = [list(map(int, l.split()[1:])) for l in open(path) if l.startswith("TL ")]
    out, cur = [], []
    for r in rows:
        if r[0] == 0 and cur:  # CTA 0 opens the next launch's block of lines
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
    print(f"{len(lr)} CTAs, span {(max(r[6] for r in lr) - t0) / 1e3:.1f} us")
    # A CTA that starts after the first one on its SM ended belongs to a later wave.
    by_sm = collections.defaultdict(list)
    for r in lr:
        by_sm[r[1]].append(r)
    wave = {}
    gaps = []
    for rs in by_sm.values():
        rs.sort(key=lambda r: r[2])
        for i, r in enumerate(rs):
            wave[r[0]] = i
        gaps += [(b[2] - a[6]) / 1e3 for a, b in zip(rs, rs[1:])]
    for w in sorted(set(wave.values())):
        ws = [r for r in lr if wave[r[0]] == w]
        med = lambda a, b: st.median((r[b] - r[a]) / 1e3 for r in ws)
        print(f"wave {w + 1}: {len(ws)} CTAs, start {min(r[2] - t0 for r in ws) / 1e3:.1f}-{max(r[2] - t0 for r in ws) / 1e3:.1f} us,"
              f" end {min(r[6] - t0 for r in ws) / 1e3:.1f}-{max(r[6] - t0 for r in ws) / 1e3:.1f} us; medians (us):"
              f" entry->Q barrier {med(2, 3):.2f}, Q + first QKs {med(3, 4):.2f}, pairs {med(4, 5):.2f},"
              f" epilogue {med(5, 6):.2f}, CTA {med(2, 6):.2f}")
    if gaps:
        print(f"end -> next start on an SM: median {st.median(gaps):.2f} us, max {max(gaps):.2f} us")


if __name__ == "__main__":
    main()
