"""One problem, one notification (issue 36): a 4-GPU torchrun whose ranks all compute on GPU 0 (the demo's
ddp_idle_peers scenario: real agent, fake NVML, real SSH, the real collector) fires idle_peers and wasted on
each of its three idle GPUs; the webhook gets them as one notification that names the job and the GPUs,
not six (or two, one per rule, as grouping by host and rule sent them)."""

from __future__ import annotations

import asyncio
from pathlib import Path

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

from tests.cli.cli_testkit import until
from tests.webhook import Webhook


async def test_a_jobs_idle_peers_and_wasted_gpus_are_one_notification(tmp_path: Path,
                                                                       receiver: Webhook) -> None:
    rules = default_rules()
    rules["wasted"].params["for"] = 2.0
    rules["idle_peers"].params.update({"for": 1.0, "window": 2.0})
    # group_wait well above the 1 s between the rules' "for"s: on a loaded 2-core machine the six alerts
    # fire over a few seconds, and a group sent before the last fired would be a second notification
    alerting = AlertingConfig(group_wait=8.0, group_interval=20.0, repeat_interval=3600.0)
    async with SimFleet({"gpu-node-15": "ddp_idle_peers"}, interval=0.2, workdir=tmp_path / "fleet") as fleet:
        cfg = Config(hosts=fleet.host_configs(), rules=rules, alerting=alerting,
                     storage=StorageConfig(path=str(tmp_path / "fleet.db"), batch_max_delay=0.05),
                     api=ApiConfig(socket=str(tmp_path / "api.sock")),
                     notifiers=[NotifierConfig(name="hook", kind="webhook", urls=[receiver.url], timeout=5.0,
                                               retries=1)])
        collector = Collector(cfg)
        await collector.start()
        try:
            def firing() -> set[tuple[str, str]]:
                return {(a.rule, a.labels["gpu"]) for a in collector.alerts.active() if a.state == "firing"}

            want = {(rule, gpu) for rule in ("idle_peers", "wasted") for gpu in ("1", "2", "3")}
            try:
                await until(lambda: asyncio.sleep(0, firing() >= want), timeout=40)  # idle_peers and wasted
                await until(lambda: asyncio.sleep(0, len(receiver.alerts()) >= 6), timeout=40)  # notified
            except AssertionError as exc:
                active = sorted((a.rule, a.labels.get("gpu"), a.state) for a in collector.alerts.active())
                raise AssertionError(f"{exc}; active {active}, {len(receiver.alerts())} notified") from None
            await asyncio.sleep(3.0)  # nothing more may come
        finally:
            await collector.stop()

    bodies = [r.body for r in receiver.requests if r.accepted and r.body.get("kind") == "alert"]
    assert len(bodies) == 1, [(b["title"], [(a["labels"]["rule"], a["labels"]["gpu"], a["status"])
                                           for a in b["alerts"]]) for b in bodies]
    [body] = bodies
    assert sorted((a["labels"]["rule"], a["labels"]["gpu"]) for a in body["alerts"]) == sorted(want)
    assert body["groupLabels"]["user"] == "frank" and body["groupLabels"]["host"] == "gpu-node-15"
    assert body["title"] == ("[FIRING:6] warning: idle_peers, wasted: frank's launcher pid 7100 on "
                             "gpu-node-15 GPU 1,2,3"), body["title"]
