"""Helpers shared by the metrics tests: a stand-in running collector over hand-built snapshots, running
promtool, and a real Prometheus scraping a target."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from gpufleet.collector.faces.metrics.exporter import FleetCollector
from gpufleet.collector.fleet.live import HostState, LiveView
from gpufleet.collector.model import sample
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.settings import Config
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from tests.builders import alert, free_port, gpu, proc, snap

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

GIB = 1 << 30


def snapshot() -> sample.Snapshot:
    """Two GPUs: gpu0 fully read and busy, gpu1 with most readings missing and held idle by bob."""
    busy = gpu(0, uuid="GPU-aaaa", name="NVIDIA A100-SXM4-80GB", serial="1320", pci_bus_id="00000000:07:00.0",
               util=87, util_mem=40, sm_active=42, mem=30 * GIB, memory_reserved=512 << 20, temp=71,
               temp_slowdown=87, temp_shutdown=92, power=312.5, power_limit=400.0, clock_sm=1410,
               clock_mem=1593, throttle_reasons=["sw_power_cap"], fan_speed=None, ecc_corrected=3,
               ecc_uncorrected=0, mig_mode=False,
               procs=[proc(100, mem=20 * GIB, command="python train.py"),
                      proc(101, mem=8 * GIB, command=None),
                      proc(102, None, mem=2 * GIB, command=None, attributed=False)])
    held = gpu(1, uuid="GPU-bbbb", name="NVIDIA A100-SXM4-80GB", util=0, mem=10 * GIB,
               procs=[proc(200, "bob", mem_gib=None, command=None)])
    return snap(busy, held, ts=1_700_000_000.0, seq=7)


class StandIn:
    """What /metrics reads of a running collector (faces/source.py ``Running``), over a real LiveView."""

    def __init__(self) -> None:
        self.config = Config()
        self.live = LiveView()
        up = HostState(name="gpu01", status="up", since=1_699_999_000.0, last_seen=1_700_000_000.5,
                       tags=["a100", "lab"], agent_version="0.1.0", driver_version="550.54.15",
                       nvml_version="12.550.54.15", cuda_version=12040, backend="fake", connects=2,
                       reconnects=1, frames=120, bad_frames=1, lag=0.25, snapshot=snapshot())
        down = HostState(name="gpu02", status="down", reason="ssh lost", since=1_699_999_500.0,
                         last_seen=1_699_999_400.0, frames=30, lag=9.0, snapshot=snapshot())
        self.live.hosts = {"gpu01": up, "gpu02": down, "gpu03": HostState(name="gpu03")}
        self.flag_map: dict[tuple[str, int], set[str]] = {("gpu01", 1): {"wasted", "stale"},
                                                          ("gpu02", 0): {"overheating"}}
        self.counts = {("wasted", "warning", "firing"): 1, ("host_down", "critical", "firing"): 1,
                       ("overheating", "critical", "pending"): 2}
        self.fail_flags = False  # the alert engine's answer raises: the gpus section is dropped
        self.stat_values: dict[str, float] = {
            "uptime_seconds": 42.0, "hosts_total": 3.0, "hosts_up": 1.0, "frames_total": 150.0,
            "bad_frames_total": 1.0, "reconnects_total": 1.0, "lag_max_seconds": 0.25,
            "store_queue_depth": 4.0, "store_queue_bytes": 4096.0, "store_dropped_total": 0.0,
            "store_refused_total": 0.0, "store_healthy": 1.0, "store_shed_total": 0.0,
            "store_keep_one_in": 1.0,
            "notify_queue_depth": 0.0, "notifications_sent_total": 5.0, "notifications_failed_total": 1.0,
            "gc_collections_total": 3.0, "gc_seconds_total": 0.05,
        }

    def alert_counts(self) -> dict[tuple[str, str, str], int]:
        return dict(self.counts)

    def firing(self) -> Firing:
        if self.fail_flags:
            raise RuntimeError("rule engine exploded")
        return Firing([alert(rule, host, gpu) for (host, gpu), rules in self.flag_map.items()
                       for rule in rules])

    def identity(self) -> tuple[str, str]:
        return socket.gethostname(), ""

    def stats(self) -> dict[str, float]:
        return dict(self.stat_values)


def exposition(source: StandIn, *, openmetrics: bool = False, dcgm_names: bool = False) -> str:
    """What a scrape of ``source`` returns (text format 0.0.4, or OpenMetrics), as the server writes it."""
    coll = FleetCollector(source, dcgm_names=dcgm_names)
    return coll.build(coll.freeze()).render(openmetrics=openmetrics).decode()


def reference_exposition(source: StandIn, *, openmetrics: bool = False,
                         dcgm_names: bool = False) -> str:
    """The same scrape by prometheus_client's own encoders from a registry (the format's reference)."""
    registry = CollectorRegistry()
    registry.register(FleetCollector(source, dcgm_names=dcgm_names))
    return (generate_openmetrics if openmetrics else generate_latest)(registry).decode()


def run_promtool(promtool: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], input=stdin, capture_output=True, text=True, timeout=60,
                          cwd=REPO)


PROMETHEUS = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin")


@dataclass(frozen=True)
class PromProcess:
    base: str  # http://127.0.0.1:PORT
    proc: subprocess.Popen[bytes]
    log: Path


@asynccontextmanager
async def prometheus_scraping(tmp_path: Path, target: str) -> AsyncIterator[PromProcess]:
    """A real Prometheus (Debian package) on loopback scraping ``target`` every second with
    ``honor_labels: true``, as deploy/prometheus.yml does; its log in ``tmp_path``. Not waited for: the
    caller polls ``/-/ready``."""
    assert PROMETHEUS is not None, "prometheus not installed (Debian package)"
    web = free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                   "scrape_configs:\n  - job_name: gpufleet\n    honor_labels: true\n"
                   f"    static_configs: [{{targets: ['{target}']}}]\n")
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path}/data",
                                 f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        yield PromProcess(f"http://127.0.0.1:{web}", proc, log)
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
