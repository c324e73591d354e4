"""A real Alertmanager (Debian's prometheus-alertmanager, cluster disabled) receives gpufleet's alerts."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import urllib.request
from typing import Any

import pytest
from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.dispatcher import NotificationDispatcher
from gpufleet.collector.settings import AlertingConfig, Config, HostConfig, default_rules

from tests.builders import FakeClock, gpu, snap


def am_alerts(base: str, **query: str) -> list[dict[str, Any]]:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{base}/api/v2/alerts{'?' + qs if qs else ''}", timeout=5) as r:
        return list(json.load(r))


async def test_alerts_reach_alertmanager_api(alertmanager, w):
    [notifier] = build_notifiers([w.config("am", "alertmanager", urls=[alertmanager])], AlertingConfig())
    disp = NotificationDispatcher([notifier], backoff=0.01)
    await disp.start()
    now = time.time()
    firing = w.alert("wasted", gpu="2")
    firing.fired_at = now - 60
    hot = w.alert("overheating", severity="critical", gpu="0", user="")
    hot.fired_at = now - 30
    n = w.notification(firing, hot)
    n.created_at = now
    assert disp.submit(n)
    assert await disp.join(10)
    assert disp.stats["sent"] == 1, disp.last_error
    got = {a["labels"]["alertname"]: a for a in am_alerts(alertmanager)}
    assert set(got) == {"wasted", "overheating"}
    wasted = got["wasted"]
    assert wasted["labels"] == {"alertname": "wasted", "severity": "warning", "host": "n3", "gpu": "2",
                                "uuid": "GPU-0002", "user": "alice", "rule": "wasted"}
    assert wasted["annotations"] == {"summary": "wasted summary", "description": "wasted description"}
    assert wasted["status"]["state"] == "active"
    assert "user" not in got["overheating"]["labels"], "empty labels are left out"
    # resolve one: Alertmanager stops listing it as active
    firing.state, firing.resolved_at = "resolved", time.time() - 1
    r = w.notification(firing)
    r.created_at = time.time()
    disp.submit(r)
    assert await disp.join(10)
    await disp.stop()
    active = [a["labels"]["alertname"] for a in am_alerts(alertmanager, active="true")
              if a["status"]["state"] == "active"]
    assert "wasted" not in active and "overheating" in active


async def test_bad_alert_is_a_final_4xx(alertmanager, w):
    [notifier] = build_notifiers([w.config("am", "alertmanager", urls=[alertmanager], retries=3)],
                                 AlertingConfig())
    disp = NotificationDispatcher([notifier], backoff=0.01)
    await disp.start()
    bad = w.alert("wasted")
    bad.labels = {"bad label name!": "x"}
    n = w.notification(bad)
    n.created_at = time.time()
    disp.submit(n)
    assert await disp.join(10)
    await disp.stop()
    assert disp.stats["failed"] == 1 and disp.stats["retries"] == 0
    assert "HTTP 400" in disp.last_error["am"]


async def overheating_engine(
    url: str, w: Any, **alerting: float
) -> tuple[FakeClock, AlertEngine, NotificationDispatcher]:
    """A started engine whose overheating rule fires at once, posting to the Alertmanager at ``url``."""
    clock = FakeClock(time.time())  # Alertmanager compares our timestamps with its own clock
    rules = default_rules()
    rules["overheating"].params["for"] = 0.0
    cfg = Config(hosts=[HostConfig(name="n3")], rules=rules,
                 alerting=AlertingConfig(group_wait=0.0, **alerting))
    [notifier] = build_notifiers([w.config("am", "alertmanager", urls=[url])], cfg.alerting)
    disp = NotificationDispatcher([notifier], clock=clock, backoff=0.01)
    engine = AlertEngine(cfg, None, clock=clock, dispatcher=disp)
    await engine.start(run_tick=False)
    return clock, engine, disp


async def test_engine_to_alertmanager_with_refresh(alertmanager, w):
    clock, engine, disp = await overheating_engine(alertmanager, w)
    try:
        engine.frame("n3", snap(gpu(0, temp=93, util=50), ts=clock.t, seq=1), clock.t)
        await engine.evaluate()
        assert await disp.join(10)
        [a] = am_alerts(alertmanager)
        assert a["labels"]["alertname"] == "overheating" and a["labels"]["host"] == "n3"
        assert a["annotations"]["summary"] == "n3 GPU 0 at 93°C (threshold 85°C) for 0s"
        first_end = a["endsAt"]
        clock.t += 61  # a refresh re-posts firing alerts with a later endsAt
        engine.frame("n3", snap(gpu(0, temp=93, util=50), ts=clock.t, seq=2), clock.t)
        await engine.evaluate()
        assert await disp.join(10)
        [a] = am_alerts(alertmanager)
        assert a["endsAt"] > first_end
        assert a["annotations"]["summary"] == "n3 GPU 0 at 93°C (threshold 85°C) for 1m"
        assert disp.stats["sent"] == 2 and disp.stats["failed"] == 0
    finally:
        await engine.stop()


async def _am_webhooks(receiver, status: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Webhook bodies Alertmanager sent to the receiver with this status (waits for the first)."""
    deadline = time.monotonic() + timeout
    while True:
        got = [r.body for r in receiver.requests if r.path == "/am" and r.body.get("status") == status]
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


def _parse(stamp: str) -> float:
    # Alertmanager writes RFC 3339 with up to nanoseconds; keep microseconds for fromisoformat
    head, _, frac = stamp.rstrip("Z").partition(".")
    return dt.datetime.fromisoformat(f"{head}.{(frac or '0')[:6]:0<6}+00:00").timestamp()


async def test_resolved_alert_reaches_alertmanager_with_ends_at(alertmanager_to_receiver, receiver, w):
    """Engine -> Alertmanager API -> Alertmanager's own webhook: the resolution arrives with our endsAt."""
    clock, engine, disp = await overheating_engine(alertmanager_to_receiver, w, group_interval=0.0)
    try:
        engine.frame("n3", snap(gpu(0, temp=93, util=50), ts=clock.t, seq=1), clock.t)
        await engine.evaluate()
        assert await disp.join(10)
        [fired] = await _am_webhooks(receiver, "firing")
        assert fired["alerts"][0]["labels"]["alertname"] == "overheating"
        assert fired["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z", "no end shown while firing"
        clock.t = time.time()
        engine.frame("n3", snap(gpu(0, temp=60, util=50), ts=clock.t, seq=2), clock.t)
        await engine.evaluate()
        assert await disp.join(10)
        resolved_at = clock.t
        done = await _am_webhooks(receiver, "resolved")
        assert done, f"Alertmanager never sent the resolution: {[r.body for r in receiver.requests]}"
        [a] = done[0]["alerts"]
        assert a["status"] == "resolved" and a["labels"]["host"] == "n3"
        assert _parse(a["endsAt"]) == pytest.approx(resolved_at, abs=0.002), "endsAt is our resolution time"
        assert a["annotations"]["resolved"] == "n3 GPU 0 back to 60°C"
        assert disp.stats["failed"] == 0
    finally:
        await engine.stop()
