"""Two replicas of one shard send to a real 2-node Alertmanager cluster (Debian's prometheus-alertmanager,
gossip on loopback): one notification per alert although both replicas and both peers see it; kill -9 of
one replica loses no alert and sends no duplicate (issue 17)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.simfleet import SimFleet

from tests.builders import free_port
from tests.notify.alertmanager import AM_BIN, ready
from tests.webhook import Webhook

pytestmark = pytest.mark.slow


def _am_alerts(base: str) -> list[dict[str, Any]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{base}/api/v2/alerts?active=true", timeout=5) as r:
        return list(json.load(r))


def _start_cluster(tmp: Path, hook: str) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    config = tmp / "am.yml"
    config.write_text(
        "route:\n  receiver: hook\n  group_by: [alertname, host]\n  group_wait: 1s\n"
        "  group_interval: 2s\n  repeat_interval: 1h\n"
        f"receivers:\n  - name: hook\n    webhook_configs:\n      - url: {hook}/am\n")
    gossip = [free_port(), free_port()]
    procs, bases = [], []
    for i in range(2):
        web = free_port()
        peer = f"--cluster.peer=127.0.0.1:{gossip[0]}" if i else f"--cluster.peer=127.0.0.1:{gossip[1]}"
        procs.append(subprocess.Popen(
            [AM_BIN, f"--config.file={config}", f"--storage.path={tmp / f'am{i}'}",
             f"--web.listen-address=127.0.0.1:{web}", f"--cluster.listen-address=127.0.0.1:{gossip[i]}",
             f"--cluster.advertise-address=127.0.0.1:{gossip[i]}", peer, "--cluster.peer-timeout=2s",
             "--cluster.gossip-interval=100ms", "--cluster.pushpull-interval=2s", "--log.level=warn"],
            stdout=(tmp / f"am{i}.log").open("wb"), stderr=subprocess.STDOUT))
        bases.append(f"http://127.0.0.1:{web}")
    deadline = time.monotonic() + 30
    while not all(ready(b) for b in bases):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise AssertionError("alertmanager cluster did not start: "
                                 + (tmp / "am0.log").read_text()[-1500:])
        time.sleep(0.2)
    return procs, bases


def _replica_yaml(fleet: SimFleet, d: Path, ams: list[str]) -> Path:
    [h] = fleet.host_configs()
    d.mkdir()
    path = d / "gpufleet.yaml"
    path.write_text(
        f"hosts:\n  - {{name: {h.name}, address: {h.address}, port: {h.port}, user: {h.user}, key: {h.key}, "
        f"known_hosts: {h.known_hosts}, interval: 0.3s, agent_args: [{', '.join(h.agent_args)}]}}\n"
        f"shard: 1/1\nstorage:\n  path: {d / 'g.db'}\napi:\n  socket: {d / 'api.sock'}\n"
        "alerting:\n  group_wait: 0s\n  group_interval: 1s\n"
        "rules:\n  wasted:\n    for: 1s\n"
        f"notifiers:\n  - name: am\n    kind: alertmanager\n    urls: [{', '.join(ams)}]\n")
    return path


async def test_replicas_page_once_through_an_alertmanager_cluster(tmp_path: Path, receiver: Webhook) -> None:
    if not Path(AM_BIN).exists():
        pytest.skip(f"{AM_BIN} is not installed (Debian package prometheus-alertmanager)")
    am_procs, bases = _start_cluster(tmp_path, receiver.base)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "XDG_"))}
    env["HOME"] = str(tmp_path)
    try:
        async with SimFleet({"n1": "wasting"}, interval=0.3, workdir=tmp_path / "fleet") as fleet:
            replicas = [await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpufleet.cli.main", "collector", "run", "-c",
                str(_replica_yaml(fleet, tmp_path / f"r{i}", bases)), env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL) for i in range(2)]
            try:
                def wasted_pages() -> list[dict[str, Any]]:
                    return [a for r in receiver.requests if r.path == "/am" for a in r.body["alerts"]
                            if a["labels"].get("alertname") == "wasted" and a["status"] == "firing"]

                deadline = time.monotonic() + 60
                while not wasted_pages() and time.monotonic() < deadline:
                    await asyncio.sleep(0.3)
                assert wasted_pages(), "no page from the cluster"
                await asyncio.sleep(8)  # both replicas kept posting, both peers gossiped: still one page
                first = len(wasted_pages())
                assert first == 1, receiver.requests
                for base in bases:  # each peer holds the alert (from either replica)
                    assert any(a["labels"].get("alertname") == "wasted" for a in _am_alerts(base))

                replicas[0].send_signal(signal.SIGKILL)  # one replica dies without a word
                await replicas[0].wait()
                await asyncio.sleep(8)
                assert len(wasted_pages()) == first, "no duplicate after the replica died"
                for base in bases:  # and no loss: the other replica keeps the alert alive in the cluster
                    assert any(a["labels"].get("alertname") == "wasted" for a in _am_alerts(base))
            finally:
                for p in replicas:
                    if p.returncode is None:
                        p.send_signal(signal.SIGTERM)
                for p in replicas:
                    await asyncio.wait_for(p.wait(), 30)
    finally:
        for p in am_procs:
            p.terminate()
        for p in am_procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:  # a peer still gossiping its way out: not under test here
                p.kill()
                p.wait(10)
