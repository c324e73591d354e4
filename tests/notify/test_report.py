"""The waste report: aggregation, text / markdown / JSON rendering, delivery through notifiers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpufleet.agent import wire
from gpufleet.collector.fleet.report import build_report, render_report
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord, CapacityRow, EventRow, SlurmUsageRow, UsageRow
from gpufleet.collector.notify.build import build_notifiers
from gpufleet.collector.notify.reports import send_report
from gpufleet.collector.settings import AlertingConfig, StorageConfig

from tests.builders import gpu, proc, snap

SINCE, UNTIL = 1_700_000_000.0 - 7 * 86400, 1_700_000_000.0


class Usage:
    def __init__(self, rows: list[UsageRow]) -> None:
        self.rows = rows
        self.calls: list[dict[str, object]] = []
        self.slurm: dict[str, list[SlurmUsageRow]] = {}

    async def usage_by_user(self, *, since: float, until: float, host: str | None = None,
                            by_host: bool = False) -> list[UsageRow]:
        self.calls.append({"since": since, "until": until, "host": host, "by_host": by_host})
        return [r for r in self.rows if host is None or r.host == host]

    async def capacity(self, *, since: float, until: float, host: str | None = None) -> list[CapacityRow]:
        return []

    async def load_alerts(self, *, active_only: bool = True,
                          since: float | None = None) -> list[AlertRecord]:
        return []

    async def events(self, *, host: str | None = None, since: float, until: float) -> list[EventRow]:
        return []

    async def slurm_usage(self, group: str, *, since: float, until: float,
                          host: str | None = None) -> list[SlurmUsageRow]:
        return self.slurm.get(group, [])


ROWS = [
    UsageRow("alice", "n3", 100.0, 20.0, 70.0),
    UsageRow("alice", "n4", 20.0, 15.0, 0.0),
    UsageRow("bob", "n3", 50.0, 45.0, 2.0),
    UsageRow("carol", "n4", 10.0, 9.0, 0.0),
]


async def test_aggregates_per_user_and_host():
    source = Usage(ROWS)
    report = await build_report(source, since=SINCE, until=UNTIL, now=UNTIL)
    assert source.calls == [{"since": SINCE, "until": UNTIL, "host": None, "by_host": True}]
    assert [(u.name, u.held, u.wasted) for u in report.by_user] == [
        ("alice", 120.0, 70.0), ("bob", 50.0, 2.0), ("carol", 10.0, 0.0)]
    assert [(h.name, h.held) for h in report.by_host] == [("n3", 150.0), ("n4", 30.0)]
    assert report.total.held == 180.0 and report.total.used == 89.0 and report.total.wasted == 72.0
    assert [u.name for u in report.top_wasters] == ["alice", "bob"], "nobody who wasted nothing"
    only_n4 = await build_report(source, since=SINCE, until=UNTIL, host="n4")
    assert only_n4.total.held == 30.0 and only_n4.top_wasters == []


async def test_renders_text_markdown_json():
    report = await build_report(Usage(ROWS), since=SINCE, until=UNTIL, now=UNTIL)
    text = render_report(report, "text")
    assert text.startswith(
        "gpufleet waste report, all hosts: 2023-11-07 22:13 UTC to 2023-11-14 22:13 UTC (7d00h)")
    assert "180.0 GPU-hours held, 89.0 used (49 %), 72.0 wasted (40 %)" in text
    assert "1. alice: 70.0 GPU-hours wasted of 120.0 held (58 %)" in text
    lines = text.splitlines()
    header = lines.index("By user (GPU-hours):") + 1
    assert lines[header].split() == ["USER", "HELD", "USED", "WASTED", "WASTED", "%"]
    assert lines[header + 1].split() == ["alice", "120.0", "35.0", "70.0", "58", "%"]
    md = render_report(report, "markdown")
    assert "| USER | HELD | USED | WASTED | WASTED % |" in md
    assert "| alice | 120.0 | 35.0 | 70.0 | 58 % |" in md and "1. **alice**" in md
    data = json.loads(render_report(report, "json"))
    assert data["total"]["gpu_hours_wasted"] == 72.0
    assert data["by_host"][0] == {"name": "n3", "gpu_hours_held": 150.0, "gpu_hours_used": 65.0,
                                  "gpu_hours_wasted": 72.0, "used_pct": 43.3, "wasted_pct": 48.0}
    assert len(data["rows"]) == 4
    with pytest.raises(ValueError):
        render_report(report, "html")  # type: ignore[arg-type]


async def test_slurm_accounts_and_partitions_get_their_sections():
    source = Usage(ROWS)
    source.slurm = {"account": [SlurmUsageRow("nlp", 100.0, 20.0, 70.0, 3),
                                SlurmUsageRow("vision", 50.0, 45.0, 2.0, 1)],
                    "partition": [SlurmUsageRow("h100", 150.0, 65.0, 72.0, 4)]}
    report = await build_report(source, since=SINCE, until=UNTIL, now=UNTIL)
    text = render_report(report, "text")
    lines = text.splitlines()
    at = lines.index("By Slurm account (GPU-hours):")
    assert lines[at + 1].split() == ["ACCOUNT", "HELD", "USED", "WASTED", "WASTED", "%"]
    assert lines[at + 2].split() == ["nlp", "100.0", "20.0", "70.0", "70", "%"]
    assert "By Slurm partition (GPU-hours):" in lines
    assert "### By Slurm partition" in render_report(report, "markdown")
    data = json.loads(render_report(report, "json"))
    assert [a["name"] for a in data["by_slurm_account"]] == ["nlp", "vision"]
    assert data["by_slurm_partition"][0]["gpu_hours_wasted"] == 72.0
    # no Slurm anywhere: no section at all
    assert "Slurm" not in render_report(await build_report(Usage(ROWS), since=SINCE, until=UNTIL))


async def test_empty_period():
    report = await build_report(Usage([]), since=SINCE, until=UNTIL)
    assert "No GPU memory was held in this period." in render_report(report)


async def test_sent_through_webhook_not_alertmanager(receiver, w):
    report = await build_report(Usage(ROWS), since=SINCE, until=UNTIL, now=UNTIL)
    notifiers = build_notifiers([w.config("hook", urls=[receiver.base + "/r"]),
                                 w.config("am", "alertmanager", urls=["http://127.0.0.1:9/"])],
                                AlertingConfig())
    result = await send_report(report, notifiers, fmt="markdown")
    assert result == {"hook": None}, "Alertmanager takes alerts only"
    [req] = receiver.requests
    assert req.body["kind"] == "report" and req.body["alerts"] == []
    assert "status" not in req.body, "a report is not an alert resolution (issue 11.6)"
    assert req.body["title"].startswith("gpufleet waste report, all hosts")
    assert "| alice | 120.0 |" in req.body["message"]
    assert req.body["report"]["total"]["gpu_hours_held"] == 180.0


async def test_report_through_a_command_has_no_alert_status(tmp_path: Path, w):
    out = tmp_path / "got.json"
    hook = f'import json,os,sys; d=json.load(sys.stdin); d["env"]=os.environ.get("GPUFLEET_STATUS"); ' \
           f'open({str(out)!r},"w").write(json.dumps(d))'
    import sys

    notifiers = build_notifiers([w.config("cmd", "command", command=[sys.executable, "-c", hook])],
                                AlertingConfig())
    report = await build_report(Usage(ROWS), since=SINCE, until=UNTIL, now=UNTIL)
    assert await send_report(report, notifiers) == {"cmd": None}
    got = json.loads(out.read_text())
    assert got["kind"] == "report" and "status" not in got and got["env"] is None


async def test_report_failure_is_reported(w, receiver):
    receiver.statuses = [400]
    report = await build_report(Usage(ROWS), since=SINCE, until=UNTIL)
    notifiers = build_notifiers([w.config("hook", urls=[receiver.base + "/r"])], AlertingConfig())
    result = await send_report(report, notifiers)
    assert result["hook"] is not None and "HTTP 400" in result["hook"]


async def test_report_from_the_real_store(tmp_path: Path):
    try:
        from gpufleet.collector.store.store import Store
    except ImportError as exc:
        pytest.skip(f"gpufleet.collector.store.Store is not importable yet: {exc}")
    store = await Store.open(StorageConfig(path=str(tmp_path / "g.db")))
    try:
        t0 = 1_700_000_000.0 - 3600  # within one hour bucket
        gib = 1 << 30
        for i in range(61):  # 60 intervals of 5 s = 300 s
            ts = t0 + 5 * i
            idle = gpu(0, util=0, mem=20 * gib, procs=[proc(1, mem=20 * gib)])
            busy = gpu(1, util=100, mem=20 * gib, procs=[proc(2, "bob", mem=20 * gib)])
            store.submit_snapshot("n3", snap(idle, busy, ts=ts, seq=i), ts)
        await store.flush()
        report = await build_report(store, since=t0 - 3600, until=t0 + 7200)
    finally:
        await store.close()
    users = {u.name: u for u in report.by_user}
    assert users["alice"].held == pytest.approx(300 / 3600)
    assert users["alice"].wasted == pytest.approx(300 / 3600)
    assert users["bob"].used == pytest.approx(300 / 3600) and users["bob"].wasted == 0
    assert [u.name for u in report.top_wasters] == ["alice"]


async def test_cli_report_since_7d_end_to_end(tmp_path: Path):
    """`gpufleet report --since 7d` against a real store whose usage is known, numbers worked out by hand.

    Two hours of samples every 10 s (721 samples: the first has no interval before it) on n3, one hour on n4:
      n3 GPU 0: alice 20 GiB at 0 %     -> alice held 2, used 0,    wasted 2
      n3 GPU 1: bob 10 GiB at 50 %      -> bob   held 2, used 1,    wasted 0
      n3 GPU 2: alice 1 GiB + carol 30 GiB at 2 % (both credited the whole GPU)
                                        -> alice held 2, used 0.04, wasted 2; carol the same
      n4 GPU 0: bob 5 GiB at 100 %, 1 h -> bob   held 1, used 1,    wasted 0
    Users: alice 4 / 0.04 / 4, bob 3 / 2 / 0, carol 2 / 0.04 / 2. Hosts: n3 8 / 1.08 / 6, n4 1 / 1 / 0.
    Total 9 held, 2.08 used (23 %), 6 wasted (67 %).
    """
    import asyncio
    import math
    import os
    import sys
    import time

    from gpufleet.collector.store.store import Store

    db = tmp_path / "g.db"
    gib = 1 << 30

    def p(pid: int, user: str, mem: float) -> sample.ProcessSample:
        return proc(pid, user, mem_gib=mem, command="python train.py")

    store = await Store.open(StorageConfig(path=str(db)))
    try:
        t0 = math.floor((time.time() - 3 * 86400) / 3600) * 3600  # three days ago, on an hour boundary
        for i in range(721):
            ts = t0 + 10 * i
            n3 = snap(gpu(0, util=0, mem=20 * gib, procs=[p(1, "alice", 20)], host="n3"),
                      gpu(1, util=50, mem=10 * gib, procs=[p(2, "bob", 10)], host="n3"),
                      gpu(2, util=2, mem=31 * gib, procs=[p(3, "alice", 1), p(4, "carol", 30)], host="n3"),
                      ts=ts, seq=i)
            store.submit_snapshot("n3", n3, ts)
            if i <= 360:
                n4 = snap(gpu(0, util=100, mem=5 * gib, procs=[p(9, "bob", 5)], host="n4"), ts=ts, seq=i)
                store.submit_snapshot("n4", n4, ts)
        await store.flush()
    finally:
        await store.close()

    script = Path(sys.executable).parent / "gpufleet"
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "gpufleet.cli.main"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "XDG_"))}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               COLUMNS="120", TERM="dumb")
    child = await asyncio.create_subprocess_exec(
        *argv, "--db", str(db), "report", "--since", "7d", env=env, cwd=str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out_b, err_b = await asyncio.wait_for(child.communicate(), 60)
    out, err = out_b.decode(), err_b.decode()
    assert child.returncode == 0, err
    assert f"showing stored data from {db}" in err, "says the collector is down and where numbers come from"
    lines = out.splitlines()
    assert lines[0].startswith("gpufleet waste report, all hosts: ") and lines[0].endswith(" (7d00h)")
    assert "9.00 GPU-hours held, 2.08 used (23 %), 6.00 wasted (67 %)" in lines
    assert lines[lines.index("Top wasters:") + 1:][:2] == [
        "1. alice: 4.00 GPU-hours wasted of 4.00 held (100 %)",
        "2. carol: 2.00 GPU-hours wasted of 2.00 held (100 %)"]
    assert "bob:" not in out, "bob wasted nothing"
    users = lines.index("By user (GPU-hours):")
    assert [r.split() for r in lines[users + 1:users + 5]] == [
        ["USER", "HELD", "USED", "WASTED", "WASTED", "%"],
        ["alice", "4.00", "0.04", "4.00", "100", "%"],  # one precision per table: all under 10, two
        ["carol", "2.00", "0.04", "2.00", "100", "%"],
        ["bob", "3.00", "2.00", "0.00", "0", "%"]]
    hosts = lines.index("By host (GPU-hours):")
    assert [r.split() for r in lines[hosts + 1:hosts + 4]] == [
        ["HOST", "HELD", "USED", "WASTED", "WASTED", "%"],
        ["n3", "8.00", "1.08", "6.00", "75", "%"],
        ["n4", "1.00", "1.00", "0.00", "0", "%"]]


async def test_report_has_idle_capacity_alerts_and_faults(tmp_path: Path):
    """From a real store: free GPU time is idle capacity, a fired alert and an Xid are summarised."""
    from gpufleet.collector.store.store import Store

    store = await Store.open(StorageConfig(path=str(tmp_path / "g.db")))
    t0 = 1_700_000_000.0 - 3600
    try:
        for i in range(61):
            ts = t0 + 5 * i
            held = gpu(1, util=0, mem=20 << 30, procs=[proc(2, "bob", mem=20 << 30)])
            store.submit_snapshot("n3", snap(gpu(0, util=0, mem=0), held, ts=ts, seq=i), ts)
        store.submit_event("n3", wire.Event(ts=t0 + 60, kind="xid", message="Xid 79", gpu_index=1, xid=79),
                           t0 + 60)
        await store.flush()
        await store.save_alerts([
            AlertRecord(fingerprint="a", rule="wasted", severity="warning", state="resolved",
                        labels={"host": "n3", "gpu": "1", "user": "bob", "rule": "wasted"},
                        annotations={}, started_at=t0, fired_at=t0 + 30, resolved_at=t0 + 200,
                        updated_at=t0 + 200),
            AlertRecord(fingerprint="b", rule="idle", severity="info", state="resolved",
                        labels={"host": "n3", "gpu": "0", "rule": "idle"}, annotations={},
                        started_at=t0 - 9000, fired_at=t0 - 9000, resolved_at=t0 - 8000,
                        updated_at=t0 - 8000),  # over before the range: not counted
        ])
        report = await build_report(store, since=t0 - 600, until=t0 + 7200)
    finally:
        await store.close()
    assert report.observed == pytest.approx(2 * 300 / 3600) and report.free == pytest.approx(300 / 3600)
    counted = [(a.rule, a.severity, a.count, a.hosts) for a in report.alerts]
    assert counted == [("wasted", "warning", 1, ["n3"])]
    assert report.faults == {"n3": {"xid": 1}}
    text = render_report(report, "text")
    assert "Idle capacity: 0.08 GPU-hours nobody held (50 % of 0.17 GPU-hours observed)" in text
    assert "- wasted (warning): 1 on n3" in text and "- n3: 1 xid" in text
    data = json.loads(render_report(report, "json"))
    assert data["capacity"]["free_pct"] == 50.0 and data["faults"] == {"n3": {"xid": 1}}
