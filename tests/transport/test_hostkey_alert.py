"""A changed host key is an alert, end to end: transport refusal -> host state reason -> host_down rule
(host-key summary) -> a notification on a real webhook. Through the real collector daemon."""

from __future__ import annotations

from pathlib import Path

from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import AlertingConfig, ApiConfig, Config, NotifierConfig, StorageConfig
from gpufleet.collector.simfleet import SimFleet

from tests.transport.sshtestlib import CollectingSink
from tests.webhook import Webhook


def _collector(fleet: SimFleet, tmp_path: Path, url: str, group_wait: float) -> Collector:
    alerting = AlertingConfig(group_wait=group_wait, group_interval=0.5)
    cfg = Config(hosts=fleet.host_configs(), alerting=alerting,
                 storage=StorageConfig(path=str(tmp_path / "fleet.db"), batch_max_delay=0.05),
                 api=ApiConfig(socket=str(tmp_path / "api.sock")),
                 notifiers=[NotifierConfig(name="hook", kind="webhook", urls=[url], timeout=5.0, retries=1)])
    return Collector(cfg)


def _host_key_alert(c: Collector, host: str) -> AlertRecord | None:
    return next((a for a in c.alerts.active() if a.rule == "host_down" and a.labels.get("host") == host
                 and a.state == "firing" and a.annotations.get("kind") == "host_key"), None)


async def test_changed_key_at_start_fires_a_host_key_alert(tmp_path: Path, receiver: Webhook) -> None:
    async with SimFleet(3, mode="inproc", interval=0.2) as fleet:
        await fleet.rekey("sim-002")  # reinstalled while the collector was off
        c = _collector(fleet, tmp_path, receiver.url, group_wait=0.0)
        await c.start()
        try:
            wait = CollectingSink().wait_for
            await wait(lambda: _host_key_alert(c, "sim-002") is not None, what="host-key alert")
            alert = _host_key_alert(c, "sim-002")
            assert alert is not None
            summary = alert.annotations["summary"]
            port, key = fleet.hosts["sim-002"].port, fleet.hosts["sim-002"].host_key
            assert key is not None
            # the summary alone says which host, which new key, and where the old one is
            assert summary.startswith(f"sim-002: host key changed: 127.0.0.1:{port} offers ssh-ed25519 "
                                      f"{key.get_fingerprint('sha256')}; {fleet.known_hosts_path}:2 has "
                                      f"another key"), summary
            assert summary.endswith("(collector refuses to connect)"), summary
            assert alert.severity == "critical"
            await wait(lambda: bool(receiver.alerts("host_down", host="sim-002")), what="the notification")
            sent = receiver.alerts("host_down", host="sim-002")[0]
            assert sent["annotations"]["summary"] == summary
            assert sent["annotations"]["kind"] == "host_key"
            # and the reason still carries the fix, whole
            assert f"ssh-keygen -R '[127.0.0.1]:{port}' -f {fleet.known_hosts_path} " in \
                sent["annotations"]["reason"]
            # the others are up and quiet; the refused host never got a session
            await wait(lambda: all(c.live.hosts[n].status == "up" for n in ("sim-001", "sim-003")))
            assert {a.labels.get("host") for a in c.alerts.active()} == {"sim-002"}
            assert fleet.hosts["sim-002"].sessions_started == 0
        finally:
            await c.stop()


async def test_key_change_while_running_becomes_the_alert(tmp_path: Path, receiver: Webhook) -> None:
    async with SimFleet(3, mode="inproc", interval=0.2) as fleet:
        # the default group_wait (30 s) batches the drop and the refused reconnect into one first message;
        # a few seconds do the same here, since the reconnect follows the drop within the first backoff (1 s)
        c = _collector(fleet, tmp_path, receiver.url, group_wait=4.0)
        await c.start()
        try:
            wait = CollectingSink().wait_for
            await wait(lambda: all(h.status == "up" for h in c.live.hosts.values()), what="all up")
            await fleet.rekey("sim-003")  # the host reboots into a new key (or someone is in the middle)
            await wait(lambda: _host_key_alert(c, "sim-003") is not None, what="host-key alert")
            state = c.live.hosts["sim-003"]
            assert state.status == "down" and state.reason is not None
            port = fleet.hosts["sim-003"].port
            assert state.reason.startswith(f"host key changed: 127.0.0.1:{port} offers ")
            await wait(lambda: bool(receiver.alerts("host_down", host="sim-003")), what="the notification")
            first = receiver.alerts("host_down", host="sim-003")[0]
            assert first["annotations"]["kind"] == "host_key", first["annotations"]
            assert first["annotations"]["summary"].startswith("sim-003: host key changed:")
            assert not [a for a in receiver.alerts("host_down") if a["labels"]["host"] != "sim-003"]
        finally:
            await c.stop()


async def test_stopping_the_collector_is_not_a_host_down(tmp_path: Path, receiver: Webhook) -> None:
    async with SimFleet(2, mode="inproc", interval=0.2) as fleet:
        c = _collector(fleet, tmp_path, receiver.url, group_wait=0.0)
        await c.start()
        try:
            await CollectingSink().wait_for(lambda: all(h.status == "up" for h in c.live.hosts.values()))
        finally:
            await c.stop()
        # the store and live view may say why the host is no longer watched; the alerts must not
        assert c.live.hosts["sim-001"].reason == "collector stopping"
        assert [a.annotations.get("summary") for a in c.alerts.active()] == []


async def test_a_second_stop_does_nothing(tmp_path: Path, receiver: Webhook) -> None:
    """serve_forever stops again after a start that failed (and stopped): nothing is saved twice."""
    async with SimFleet(1, mode="inproc", interval=0.2) as fleet:
        await fleet.rekey("sim-001")
        c = _collector(fleet, tmp_path, receiver.url, group_wait=0.0)
        await c.start()
        try:
            await CollectingSink().wait_for(lambda: _host_key_alert(c, "sim-001") is not None)
        finally:
            await c.stop()
        await c.stop()  # the store is closed now: a second save of the active alerts would fail
        assert c.alerts.stats["save_errors"] == 0
