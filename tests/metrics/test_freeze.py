"""The scrape copies the live view on the loop and builds families from the copy (in a thread)."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

from gpufleet.agent import wire
from gpufleet.collector.faces.metrics.exporter import FleetCollector, MetricsServer
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import sample
from gpufleet.collector.model.firing import Firing
from prometheus_client.parser import text_string_to_metric_families

from tests.metrics.metrics_testkit import StandIn


def _values(fams: object, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for fam in fams:  # type: ignore[attr-defined]
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_build_reads_the_frozen_copy_not_the_live_view(source: StandIn) -> None:
    coll = FleetCollector(source)
    view = coll.freeze()
    # the transport keeps mutating the live HostState objects after the copy was taken
    up = source.live.hosts["gpu01"]
    up.status, up.frames, up.tags = "down", 999, ["changed"]
    up.snapshot = sample.Snapshot(proto=wire.PROTO_VERSION, ts=2.0, seq=8, gpus=[])
    source.live.hosts["gpu04"] = HostState(name="gpu04", status="up")
    source.flag_map.clear()
    fams = coll.build(view, samples=True).metrics()
    assert _values(fams, "gpufleet_host_up") == {(("host", "gpu01"),): 1, (("host", "gpu02"),): 0,
                                                 (("host", "gpu03"),): 0}
    assert _values(fams, "gpufleet_host_frames_total")[(("host", "gpu01"),)] == 120
    assert {k[1][1] for k in _values(fams, "gpufleet_host_tag")} == {"a100", "lab"}
    assert len(_values(fams, "gpufleet_gpu_utilization_percent")) == 2
    wasted = _values(fams, "gpufleet_gpu_wasted")
    assert [dict(k)["gpu"] for k, v in wasted.items() if v == 1] == ["1"]  # flags as they were at freeze


class CountingSource(StandIn):
    """Counts how often a scrape asks which rules fire."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def firing(self) -> Firing:
        self.asked += 1
        return super().firing()


def test_a_scrape_asks_which_rules_fire_once_for_every_gpu() -> None:
    src = CountingSource()
    src.flag_map = {("gpu01", 0): {"overheating"}}
    fams = FleetCollector(src).collect()
    assert src.asked == 1
    flags = _values(fams, "gpufleet_gpu_flag")
    assert [(dict(k)["gpu"], dict(k)["flag"]) for k in flags] == [("0", "overheating")]
    wasted = _values(fams, "gpufleet_gpu_wasted")
    assert sorted(wasted.values()) == [0, 0]


def test_a_failing_source_call_at_freeze_drops_only_its_section(source: StandIn) -> None:
    def boom() -> dict[tuple[str, str, str], int]:
        raise RuntimeError("alerts unavailable")
    source.alert_counts = boom  # type: ignore[method-assign]
    coll = FleetCollector(source)
    fams = coll.collect()
    assert _values(fams, "gpufleet_alerts") == {}
    assert len(_values(fams, "gpufleet_gpu_utilization_percent")) == 2
    assert _values(fams, "gpufleet_collector_metrics_errors_total") == {(("section", "alerts"),): 1}


async def test_families_are_built_off_the_event_loop(source: StandIn) -> None:
    """The scrape builds the families in a worker thread; only freeze() runs on the loop."""
    built_on: list[str] = []

    class Spy(FleetCollector):
        def build(self, view):  # type: ignore[no-untyped-def]
            built_on.append(threading.current_thread().name)
            return super().build(view)

    async with MetricsServer(source, "127.0.0.1:0") as srv:
        srv.registry.unregister(srv.collector)
        srv.collector = Spy(source)
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(srv.url, timeout=5).read())  # noqa: S310
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert "gpufleet_gpu_utilization_percent" in names
    assert built_on and built_on[0].startswith("gpufleet-metrics")  # its own threads, not the default pool
