"""The notification log (issue 11.1/11.2): a failed notification is retried with capped backoff until the
destination accepts it or a newer state of its group replaces it, across a restart of the collector; one
destination that trickles its answer delays no other. Real HTTP servers on 127.0.0.1, a real store file."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from gpufleet.collector.notify.base import Notifier
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.settings import AlertingConfig, StorageConfig
from gpufleet.collector.store.store import Store

from tests.webhook import trickling, webhook

WAIT = 30.0  # a failure bound, not a timing assert


async def until(check, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        await asyncio.sleep(0.02)


def hooks(w, *urls: str, **kw) -> list[Notifier]:
    return build_notifiers([w.config(f"h{i}", urls=[u], **kw) for i, u in enumerate(urls)], AlertingConfig())


async def test_outage_longer_than_the_retries_is_delivered_when_the_receiver_is_back(w):
    with webhook() as server:
        server.statuses = [503] * 8  # more failures than retries (2) + 1: the old dispatcher gave up
        disp = NotificationDispatcher(hooks(w, server.url, retries=2), backoff=0.01, max_backoff=0.05)
        await disp.start()
        try:
            disp.submit(w.notification())
            await until(lambda: server.got, "delivered after the outage")
            # the receiver has it; the dispatcher records the 200 a moment after the receiver answers it
            await until(lambda: disp.queue_depth == 0 and disp.failing() == {}, "the delivery recorded")
            [entry] = disp.entries()
            assert entry.delivered is not None and entry.delivered["firing"] == ["fp-wasted-2"]
        finally:
            await disp.stop()
    assert server.attempts == 9


async def test_a_newer_state_supersedes_the_undelivered_one(w):
    with webhook() as server:
        server.down_until = time.time() + 3600
        disp = NotificationDispatcher(hooks(w, server.url, retries=0), backoff=0.01, max_backoff=0.05)
        await disp.start()
        try:
            disp.submit(w.notification(w.alert("wasted")))
            await until(lambda: server.attempts >= 2, "retried")
            assert set(disp.undelivered('{host="n3",rule="wasted"}')) == {"h0"}
            disp.submit(w.notification(w.alert("wasted", "resolved")))
            server.down_until = 0.0
            await until(lambda: server.got, "delivered")
            await asyncio.sleep(0.2)
        finally:
            await disp.stop()
    assert [json.loads(b)["status"] for _t, b in server.got] == ["resolved"], "only the newest, once"


async def test_a_restart_goes_on_retrying(w, tmp_path: Path):
    cfg = StorageConfig(path=str(tmp_path / "g.db"))
    with webhook() as server:
        server.down_until = time.time() + 3600
        store = await Store.open(cfg)
        disp = NotificationDispatcher(hooks(w, server.url, retries=0), backoff=0.01, store=store)
        await disp.start()
        disp.submit(w.notification())
        await until(lambda: server.attempts >= 1, "tried")
        await disp.stop(timeout=0.1)
        await store.close()
        assert server.got == []

        server.down_until = 0.0
        store = await Store.open(cfg)
        disp = NotificationDispatcher(hooks(w, server.url, retries=0), backoff=0.01, store=store)
        await disp.start()
        try:
            await until(lambda: server.got, "delivered after the restart")
        finally:
            await disp.stop()
            await store.close()
    assert json.loads(server.got[0][1])["groupKey"] == '{host="n3",rule="wasted"}'


async def test_a_trickling_receiver_does_not_hold_up_the_others(w):
    """Enough trickling destinations to fill the default executor (what urllib in threads used); each byte
    comes well within the timeout, so only an overall deadline per attempt ends them."""
    import os

    stuck = min(32, (os.cpu_count() or 1) + 4)
    with trickling(every=0.5) as slow_url, webhook() as good:
        notifiers = hooks(w, *[slow_url] * stuck, good.url, timeout=2.0, retries=0)
        disp = NotificationDispatcher(notifiers, backoff=0.01, max_backoff=1.0)
        await disp.start()
        try:
            for i in range(3):
                disp.submit(w.notification(group_key=f"g{i}"))
                await until(lambda i=i: len(good.got) > i, "the good receiver keeps getting its messages")
            await until(lambda: any("timed out" in e for e in disp.last_error.values()),
                        "the trickling attempts end at their deadline")
        finally:
            await disp.stop(timeout=0.1)


async def test_a_group_state_already_delivered_is_not_sent_again_before_its_repeat(w):
    """Alertmanager's dedup (issue 11.4): the same firing set goes again only after repeat_interval; a newly
    resolved alert, or all of them resolved, is news."""
    with webhook() as server:
        disp = NotificationDispatcher(hooks(w, server.url, retries=0), backoff=0.01)
        await disp.start()

        async def send(*alerts, at: float) -> int:
            n = w.notification(*alerts)
            n.created_at, n.repeat_interval = w.T0 + at, 600.0
            disp.submit(n)
            assert await disp.join(10)
            return len(server.got)

        hot, cool = w.alert("overheating", gpu="0"), w.alert("overheating", "resolved", gpu="0")
        try:
            assert [await send(w.alert(), hot, at=at) for at in (0, 30, 400)] == [1, 1, 1]
            assert await send(w.alert(), at=599) == 1, "one left the group, nothing newly resolved"
            assert await send(w.alert(), hot, at=640) == 2, "the repeat is due"
            assert await send(w.alert(), cool, at=650) == 3, "a resolved alert is news"
            assert await send(w.alert("wasted", "resolved"), cool, at=660) == 4, "all resolved is news"
            assert await send(w.alert("wasted", "resolved"), at=670) == 4
        finally:
            await disp.stop()
    assert [json.loads(b)["status"] for _t, b in server.got] == ["firing", "firing", "firing", "resolved"]
    assert disp.stats["unchanged"] == 4
