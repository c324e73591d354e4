"""How many hosts move when a shard is added (issue 17: 2 -> 3 shards should move about 1/3).

Run by hand: ``.venv/bin/python -m tests.bench.shards_bench [--hosts 10000]``. Over host names like
``gpu00042``, for N -> N+1 shards: the share of hosts whose shard changed (target 1/(N+1), within 3
points), that every moved host went to the new shard (rendezvous hashing moves nothing else), and the
largest shard's share. Exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from gpufleet.collector.shards import shard_of


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    args = ap.parse_args()
    names = [f"gpu{i:05d}" for i in range(args.hosts)]
    missed = 0
    print(f"shard moves over {args.hosts:,} host names")
    for n in (1, 2, 3, 4, 7):
        before = [shard_of(h, n) for h in names]
        after = [shard_of(h, n + 1) for h in names]
        moved = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
        share, goal = len(moved) / len(names), 1 / (n + 1)
        only_new = all(a == n + 1 for _b, a in moved)
        biggest = max(Counter(after).values()) / len(names)
        ok = abs(share - goal) < 0.03 and only_new
        missed += not ok
        print(f"  {n} -> {n + 1} shards: {len(moved):6,} hosts moved ({100 * share:4.1f} %, goal "
              f"{100 * goal:4.1f} %), all to the new shard: {only_new}, largest shard {100 * biggest:4.1f} % "
              f"({'ok' if ok else 'MISSED'})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
