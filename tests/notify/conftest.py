"""Sample alerts and notifications, and a real Alertmanager process when the Debian binary is installed (the
webhook receiver is the kit's one, tests/webhook.py, as the root conftest's ``receiver``)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.notify.base import Notification
from gpufleet.collector.settings import NotifierConfig

from tests.builders import free_port
from tests.notify.alertmanager import AM_BIN, ready
from tests.webhook import Webhook

T0 = 1_700_000_000.0


def alert(rule: str = "wasted", state: str = "firing", *, severity: str = "warning",
          **labels: str) -> AlertRecord:
    lab = {"host": "n3", "gpu": "2", "uuid": "GPU-0002", "user": "alice", **labels, "rule": rule}
    a = AlertRecord(fingerprint=f"fp-{rule}-{lab.get('gpu')}", rule=rule, severity=severity,
                    state=state,  # type: ignore[arg-type]
                    labels=lab, started_at=T0, fired_at=T0 + 1800, updated_at=T0 + 1800,
                    annotations={"summary": f"{rule} summary", "description": f"{rule} description"})
    if state == "resolved":
        a.resolved_at = T0 + 3600
        a.annotations["resolved"] = "alice released GPU 2 on n3 after 1h"
    return a


def notification(*alerts: AlertRecord, kind: str = "alert",
                 group_key: str = '{host="n3",rule="wasted"}') -> Notification:
    """Notifications of one ``group_key`` are states of one group.

    A newer one supersedes an undelivered one."""
    alerts_l = list(alerts) or [alert()]
    status = "firing" if any(a.state == "firing" for a in alerts_l) else "resolved"
    return Notification(group_key=group_key, status=status,  # type: ignore[arg-type]
                        alerts=alerts_l, group_labels={"host": "n3", "rule": "wasted"},
                        kind=kind, created_at=T0 + 1830)  # type: ignore[arg-type]


def nconfig(name: str = "hook", kind: str = "webhook", **kw: Any) -> NotifierConfig:
    return NotifierConfig(name=name, kind=kind, **kw)  # type: ignore[arg-type]


class Builders:
    alert = staticmethod(alert)
    notification = staticmethod(notification)
    config = staticmethod(nconfig)
    T0 = T0


@pytest.fixture
def w() -> type[Builders]:
    return Builders


# ---------------------------------------------------------------------------------------- alertmanager



@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager on loopback (cluster disabled); yields its base URL."""
    yield from _run_alertmanager(tmp_path, (
        "route:\n  receiver: blackhole\n  group_wait: 1h\n  group_interval: 1h\n  repeat_interval: 4h\n"
        "receivers:\n  - name: blackhole\n"))


@pytest.fixture
def alertmanager_to_receiver(tmp_path: Path, receiver: Webhook) -> Iterator[str]:
    """A real Alertmanager that routes everything at once to ``receiver`` (path /am) with send_resolved, so a
    test sees what Alertmanager itself made of our alerts, resolved ones included."""
    yield from _run_alertmanager(tmp_path, (
        "route:\n  receiver: hook\n  group_by: [alertname, host]\n  group_wait: 0s\n"
        "  group_interval: 1s\n  repeat_interval: 1h\n"
        "receivers:\n  - name: hook\n    webhook_configs:\n"
        f"      - url: {receiver.base}/am\n        send_resolved: true\n"))


def _run_alertmanager(tmp_path: Path, config_text: str) -> Iterator[str]:
    if not Path(AM_BIN).exists():
        pytest.skip(f"{AM_BIN} is not installed (Debian package prometheus-alertmanager)")
    config = tmp_path / "am.yml"
    config.write_text(config_text)
    amtool = shutil.which("amtool")
    if amtool:
        subprocess.run([amtool, "check-config", str(config)], check=True, capture_output=True, timeout=30)
    port = free_port()
    log = (tmp_path / "am.log").open("wb")
    proc = subprocess.Popen(
        [AM_BIN, f"--config.file={config}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not ready(base):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail(f"alertmanager did not become ready: {(tmp_path / 'am.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
