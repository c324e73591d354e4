"""One definition of waste, read everywhere (issue 10): on a real fleet (fake NVML behind real SSH) through
the real daemon, `status`, the alerts and the GPU-hours report agree on who wastes which GPU, and the wasted
GPU-hours the report credits equal the wasted alert's active time within one sample interval."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from gpufleet.collector.fleet import query
from gpufleet.collector.fleet.report import build_report
from gpufleet.collector.model import summary
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import AlertingConfig, ApiConfig, Config, StorageConfig, default_rules
from gpufleet.collector.simfleet import SimFleet

INTERVAL = 0.2


async def _until(predicate: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_status_alerts_and_report_agree_on_waste(tmp_path: Path) -> None:
    rules = default_rules()
    rules["wasted"].params["for"] = 1.0
    hosts = {"w1": "wasting", "b1": "busy"}
    async with SimFleet(hosts, interval=INTERVAL, workdir=tmp_path / "fleet") as fleet:
        config = Config(hosts=fleet.host_configs(), rules=rules, alerting=AlertingConfig(group_wait=0.0),
                        storage=StorageConfig(path=str(tmp_path / "fleet.db"), batch_max_delay=0.05),
                        api=ApiConfig(socket=str(tmp_path / "api.sock")))
        collector = Collector(config)
        await collector.start()
        try:
            def wasted_alerts() -> list[Any]:
                return [a for a in collector.alerts.active() if a.rule == "wasted" and a.state == "firing"]

            await _until(wasted_alerts, "the wasted alert firing")
            await asyncio.sleep(3.0)  # let waste accrue past the alert's `for`
            [alert] = wasted_alerts()
            now = time.time()
            active = now - alert.started_at
            await collector.store.flush()
            report = await build_report(collector.store, since=now - 3600, until=now + 60)
            view = query.build_fleet_view(collector.live.hosts.values(),
                                          Firing(collector.alerts.active()), now=now)
        finally:
            await collector.stop()

    # who wastes what: the alert, the status view and the report name the same user, host and GPU
    assert (alert.labels["host"], alert.labels["gpu"], alert.labels.get("user")) == ("w1", "0", "alice")
    flagged = {(h.name, g.index) for h in view.hosts for g in h.gpus if "wasted" in g.flags}
    assert flagged == {("w1", 0)}
    users = {u.user: u for u in summary.by_user(view)}
    assert users["alice"].wasted == 1 and users["bob"].wasted == 0
    wasters = {u.name: u.wasted for u in report.by_user if u.wasted > 0}
    assert set(wasters) == {"alice"}, wasters
    # how much: the GPU-hours credited as wasted cover the time the condition has held
    wasted_s = wasters["alice"] * 3600
    print(f"wasted GPU-seconds in the report {wasted_s:.2f}, the alert active for {active:.2f} s")
    assert abs(wasted_s - active) <= INTERVAL + 0.3, (wasted_s, active)  # one interval, plus the flush
