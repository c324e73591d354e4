"""Notification delivery, measured (issue 11), with the real dispatcher, webhook notifiers and HTTP receivers
on 127.0.0.1 (tests/webhook.py). Run by hand:

    .venv/bin/python -m tests.bench.notify_bench [--outage 25] [--scale 20]

1. Outage: the receiver answers 503 for ``--outage`` seconds, then 200. Delay from its recovery to the
   delivery, with the default backoff (1 s doubling to a 5 min cap). A long outage (10 min) is run with the
   backoff and the outage divided by ``--scale`` and the delay multiplied back, so it takes seconds.
   Target: at most the backoff cap plus 5 s.
2. One hanging receiver (a byte every 2 s, never done): the good receiver's delivery latency beside it,
   against a baseline run with the good receiver alone. Target: the medians within 1 s.

Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.settings import AlertingConfig, NotifierConfig

from tests.webhook import trickling, webhook

CAP = 300.0


def _notification(key: str) -> Notification:
    now = time.time()
    alert = AlertRecord(fingerprint=f"fp-{key}", rule="overheating", severity="critical", state="firing",
                        labels={"host": "n3", "gpu": "0", "rule": "overheating"}, started_at=now,
                        fired_at=now, updated_at=now, annotations={"summary": "n3 GPU 0 at 90 C"})
    return Notification(group_key=key, status="firing", alerts=[alert], group_labels={"host": "n3"},
                        kind="alert", created_at=now)


def _hooks(*urls: str, timeout: float = 10.0) -> list:  # type: ignore[type-arg]
    return build_notifiers([NotifierConfig(name=f"h{i}", kind="webhook", urls=[u], timeout=timeout, retries=0)
                            for i, u in enumerate(urls)], AlertingConfig())


async def outage(seconds: float, backoff: float, cap: float) -> float:
    """Seconds from the receiver's recovery to the delivery."""
    with webhook() as server:
        disp = NotificationDispatcher(_hooks(server.url), backoff=backoff, max_backoff=cap)
        await disp.start()
        try:
            server.down_until = time.time() + seconds
            disp.submit(_notification("outage"))
            while not server.got:
                await asyncio.sleep(0.01)
            return server.got[0][0] - server.down_until
        finally:
            await disp.stop(timeout=1.0)


async def latencies(n: int, hang: int) -> list[float]:
    """The good receiver's delivery latencies for ``n`` notifications, ``hang`` hanging receivers beside."""
    with trickling(every=2.0) as slow, webhook() as good:
        disp = NotificationDispatcher(_hooks(*[slow] * hang, good.url), backoff=1.0, max_backoff=CAP)
        await disp.start()
        sent: list[float] = []
        try:
            for i in range(n):
                sent.append(time.time())
                disp.submit(_notification(f"g{i}"))
                await asyncio.sleep(0.2)
            deadline = time.monotonic() + 30
            while len(good.got) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return [got - s for (got, _body), s in zip(good.got, sent, strict=False)]
        finally:
            await disp.stop(timeout=0.5)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--outage", type=float, default=25.0)
    ap.add_argument("--long", type=float, default=600.0, help="the long outage (run scaled)")
    ap.add_argument("--scale", type=float, default=20.0)
    args = ap.parse_args()
    missed: list[str] = []
    short = await outage(args.outage, 1.0, CAP)
    print(f"outage {args.outage:.0f} s, default backoff: delivered {short:.1f} s after the receiver "
          "recovered")
    long = await outage(args.long / args.scale, 1.0 / args.scale, CAP / args.scale) * args.scale
    print(f"outage {args.long:.0f} s (run at 1/{args.scale:g} time): delivered {long:.0f} s after recovery "
          f"(backoff cap {CAP:.0f} s)")
    for name, delay in ((f"{args.outage:.0f} s", short), (f"{args.long:.0f} s", long)):
        if delay > CAP + 5:
            missed.append(f"outage {name}: {delay:.0f} s after recovery (target <= {CAP + 5:.0f})")
    alone = await latencies(20, 0)
    beside = await latencies(20, 8)
    a, b = statistics.median(alone), statistics.median(beside) if beside else float("inf")
    print(f"good receiver latency: alone median {a * 1000:.0f} ms; beside 8 hanging receivers median "
          f"{b * 1000:.0f} ms, max {max(beside or [0]) * 1000:.0f} ms ({len(beside)}/20 delivered)")
    if len(beside) < 20 or b - a > 1.0:
        missed.append(f"beside a hanging receiver: median {b * 1000:.0f} ms vs {a * 1000:.0f} ms alone")
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
