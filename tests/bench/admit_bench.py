"""What the store's entry check costs the event loop per snapshot (run by hand).

    .venv/bin/python tests/bench/admit_bench.py [--hosts 300] [--samples 20]

Every frame the store writes is first looked at by ``admit.refusal`` (collector/store/admit.py: times
against the store's clock, every number against the sample model's ranges), on the loop, in
``Writer.put``. Frames are the simulator's (8 GPUs x 8 processes), decoded once beforehand; the baseline
printed beside it, in the same process, is the collector's own decode of the same lines (wirefast).

Target: the check costs at most 0.03 ms per host-sample (an eighth of sinks_bench.py's 0.25 ms budget for
the loop's sinks), and at most 75 % of the decode. Exits 1 when it misses either.
"""

from __future__ import annotations

import argparse
import sys
import time

from gpufleet.collector.model import sample
from gpufleet.collector.simfleet import FrameGenerator
from gpufleet.collector.store import admit
from gpufleet.collector.store.ingest import FrameItem
from gpufleet.collector.transport import wirefast

TARGET_MS = 0.03
TARGET_SHARE = 0.75


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=300)
    ap.add_argument("--samples", type=int, default=20)
    args = ap.parse_args()
    lines = [FrameGenerator(f"h{i}", 8, procs=8).snapshot(s) for i in range(args.hosts)
             for s in range(args.samples)]
    now = time.time()
    items = []
    for line in lines:
        frame = wirefast.decode(line)
        assert isinstance(frame, sample.Snapshot)
        frame.ts = now
        items.append(FrameItem("snapshot", "h", frame, now))
    n = len(items)

    t0 = time.process_time()
    for line in lines:
        wirefast.decode(line)
    decode_ms = (time.process_time() - t0) * 1000 / n
    t0 = time.process_time()
    refused = sum(admit.refusal(item, now) is not None for item in items)
    check_ms = (time.process_time() - t0) * 1000 / n
    assert refused == 0, f"{refused} of the simulator's frames refused"

    print(f"{n} snapshots of 8 GPUs x 8 processes")
    print(f"  baseline: wirefast.decode          {decode_ms:6.4f} ms per host-sample")
    print(f"  admit.refusal (the store's check)  {check_ms:6.4f} ms per host-sample "
          f"(target {TARGET_MS}, {check_ms / decode_ms:.0%} of decode, target {TARGET_SHARE:.0%})")
    return 0 if check_ms <= TARGET_MS and check_ms <= TARGET_SHARE * decode_ms else 1


if __name__ == "__main__":
    sys.exit(main())
