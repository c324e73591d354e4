"""Renderers: width-safe at any console width, bars and sparklines right, the values shown."""

from __future__ import annotations

import io
import time

import pytest
from cli_testkit import StandinAlerts, StandinStore, as_dict, cell_width, synthetic_live
from gpufleet.cli.render_alerts import render_alerts
from gpufleet.cli.render_history import bucket, history_csv, render_history, sparkline
from gpufleet.cli.render_status import bar, fmt_bytes, fmt_mem_pair, render_by_user, render_status
from gpufleet.collector import query
from gpufleet.collector.store.records import SeriesPoint
from rich.console import Console, RenderableType


def show(r: RenderableType, width: int) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(
        r, no_wrap=True, overflow="crop"
    )
    return buf.getvalue().splitlines()


def view() -> query.FleetView:
    live = synthetic_live(
        {"a-very-long-host-name-01": "zombie", "n2": "wasting", "n3": "down", "n4": "lost"}, gpus=3
    )
    g = live.hosts["n2"].snapshot.gpus[2]  # type: ignore[union-attr]
    g.processes[0].command = "python3 训练模型.py --epochs 10"
    g.processes = g.processes * 5
    return query.build_fleet_view(live.hosts.values(), StandinAlerts(live).flags, now=time.time())


@pytest.mark.parametrize("width", [40, 80, 100, 120, 200])
def test_status_never_exceeds_width(width: int) -> None:
    lines = show(render_status(view(), width), width)
    assert max(cell_width(line) for line in lines) <= max(width, 40)
    text = "\n".join(lines)
    assert "4 hosts: 3 up, 1 down" in text
    if width >= 80:
        assert "+2 more processes" in text  # five processes on one GPU: three shown
        assert "a-very-long-hos…" in text and "dave" in text and "wasted" in text and "stale" in text


def test_by_user_and_alerts_render() -> None:
    v = view()
    text = "\n".join(show(render_by_user(v, query.by_user(v), 80), 80))
    assert "dave" in text and "USER" in text
    live = synthetic_live({"n1": "hot", "n2": "down"}, gpus=2)
    result = as_dict({"active": StandinAlerts(live).active(), "recent": [], "silences": []})
    text = "\n".join(show(render_alerts(result, 100, time.time(), time.time() - 3600), 100))
    assert "Active alerts: 2 firing, 0 pending" in text and "overheating (hot)" in text


def test_bars_and_formats() -> None:
    assert bar(0.5, 4) == "██  " and bar(1.0, 3) == "███" and bar(None, 2) == "  " and bar(0.0, 2) == "  "
    assert bar(0.0625, 2) == "▏ "
    assert (
        fmt_bytes(512 << 20) == "512M"
        and fmt_bytes(int(1.5 * (1 << 30))) == "1.5G"
        and fmt_bytes(None) == "-"
    )
    assert fmt_mem_pair(40 << 30, 80 << 30) == "40/80G" and fmt_mem_pair(1 << 30, 8 << 30) == "1.0/8G"


def test_sparkline_and_buckets() -> None:
    assert sparkline([0, 50, 100, None], 0, 100) == "▁▅█ "
    pts = [
        SeriesPoint(
            ts=t,
            util_mean=float(t),
            util_max=None,
            mem_used_mean=None,
            mem_used_max=None,
            temp_max=None,
            power_mean=None,
        )
        for t in (0, 1, 2, 3, 8, 9)
    ]
    assert bucket(pts, 0, 10, 5, lambda p: p.util_mean) == [0.5, 2.5, None, None, 8.5]  # a gap stays a gap
    assert bucket(pts, 0, 10, 5, lambda p: p.util_mean, "max") == [1.0, 3.0, None, None, 9.0]


async def test_history_render_and_csv() -> None:
    live = synthetic_live({"n1": "busy"}, gpus=2)
    store = StandinStore(live)
    now = time.time()
    result = as_dict(
        {
            "host": "n1",
            "gpu": None,
            "user": None,
            "since": now - 3600,
            "until": now,
            "series": await store.gpu_history("n1", since=now - 3600, until=now, max_points=60),
            "processes": await store.process_history("n1", since=now - 3600, until=now),
            "usage": await store.usage_by_user(since=now - 3600, until=now),
            "events": [],
        }
    )
    for width in (80, 140):
        lines = show(render_history(result, width), width)
        assert max(cell_width(line) for line in lines) <= width
    text = "\n".join(lines)
    assert "GPU 0" in text and "GPU 1" in text and "peak memory 31G (GPU 1)" in text
    csv_text = history_csv(result)
    assert csv_text.splitlines()[0].startswith("host,gpu,uuid,resolution,ts,time,util_mean")
    assert len(csv_text.splitlines()) == 1 + 2 * 60
