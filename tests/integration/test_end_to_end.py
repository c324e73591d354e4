"""The whole pipeline at once: real agents (fake NVML scenarios) behind real SSH on loopback -> collector
daemon -> SQLite history -> rules -> a JSON webhook on a real HTTP server; then a restart of the collector
on the same database must neither forget the firing alert nor send it again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import (
    AlertingConfig,
    ApiConfig,
    Config,
    NotifierConfig,
    StorageConfig,
    default_rules,
)
from gpufleet.collector.simfleet import SimFleet

from tests.webhook import Webhook


def _config(fleet: SimFleet, tmp_path: Path, url: str) -> Config:
    rules = default_rules()
    rules["wasted"].params["for"] = 1.0
    rules["stale"].params["for"] = 0.0
    alerting = AlertingConfig(group_wait=0.0, group_interval=0.5, repeat_interval=3600.0)
    return Config(hosts=fleet.host_configs(), rules=rules, alerting=alerting,
                  storage=StorageConfig(path=str(tmp_path / "fleet.db"), batch_max_delay=0.05),
                  api=ApiConfig(socket=str(tmp_path / "api.sock")),
                  notifiers=[NotifierConfig(name="hook", kind="webhook", urls=[url], timeout=5.0, retries=1)])


async def _until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def test_fleet_to_history_to_webhook_and_restart(tmp_path: Path, receiver: Webhook) -> None:
    hosts = {"n1": "wasting", "n2": "zombie", "n3": "busy"}
    async with SimFleet(hosts, interval=0.2) as fleet:
        cfg = _config(fleet, tmp_path, receiver.url)
        collector = Collector(cfg)
        await collector.start()
        try:
            await _until(lambda: all(h.status == "up" and h.snapshot is not None
                                     for h in collector.live.hosts.values()), "all hosts up")
            # The dialled name is the identity, whatever the scenario's hostname claims.
            assert set(collector.live.hosts) == set(hosts)
            await _until(lambda: receiver.alerts("wasted"), "a wasted-GPU notification")
            await _until(lambda: receiver.alerts("stale"), "a stale (zombie) notification")
            wasted = receiver.alerts("wasted")[0]
            assert wasted["labels"]["host"] == "n1" and wasted["labels"]["user"] == "alice"
            assert "alice" in json.dumps(wasted["annotations"])
            assert not receiver.alerts(status=None, host="n3")

            await collector.store.flush()
            latest = (await collector.store.latest("n1"))["n1"].gpus
            assert {g.index for g in latest} == {0, 1}
            users = {p.user for g in latest for p in g.processes}
            assert {"alice", "bob"} <= users
            sent_before_restart = len(receiver.alerts("wasted"))
        finally:
            await collector.stop()

        # Restart on the same database: the firing alert is remembered, and not re-sent.
        collector = Collector(_config(fleet, tmp_path, receiver.url))
        await collector.start()
        try:
            assert any(a.rule == "wasted" and a.state == "firing" for a in collector.alerts.active())
            await _until(lambda: all(h.status == "up" for h in collector.live.hosts.values()),
                         "hosts up again")
            await asyncio.sleep(2.0)  # several evaluation ticks and group intervals
            assert len(receiver.alerts("wasted")) == sent_before_restart
        finally:
            await collector.stop()
