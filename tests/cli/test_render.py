"""Renderers: width-safe at any console width, bars and sparklines right, the values shown."""

from __future__ import annotations

import io
import time

import pytest
from gpufleet.cli.render_alerts import render_alerts
from gpufleet.cli.render_history import bucket, history_csv, render_history, sparkline
from gpufleet.cli.render_status import bar, fmt_mem_pair, render_by_user, render_status
from gpufleet.collector.fleet import query
from gpufleet.collector.model import summary, views
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.records import SeriesPoint
from gpufleet.collector.units import fmt_size_short
from rich.console import Console, RenderableType

from tests.builders import alert
from tests.cli.cli_testkit import StandinAlerts, StandinStore, as_dict, cell_width, synthetic_live

GIB = 1 << 30


def show(r: RenderableType, width: int) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(
        r, no_wrap=True, overflow="crop"
    )
    return buf.getvalue().splitlines()


def view() -> views.FleetView:
    live = synthetic_live(
        {"a-very-long-host-name-01": "zombie", "n2": "wasting", "n3": "down", "n4": "lost"}, gpus=3
    )
    g = live.hosts["n2"].snapshot.gpus[2]  # type: ignore[union-attr]
    g.processes[0].command = "python3 训练模型.py --epochs 10"
    g.processes = g.processes * 5
    return query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time())


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 200])
def test_status_never_exceeds_width(width: int) -> None:
    lines = show(render_status(view(), width), width)
    assert max(cell_width(line) for line in lines) <= max(width, 40)
    text = "\n".join(lines)
    assert "4 hosts: 3 up, 1 down" in text
    if width < 60:
        return  # 40: the 24-cell host name alone leaves no room; the lines are cut, not wrapped
    # the host, the user and the flags are never cut (issue 36), at any width that holds them
    assert "a-very-long-host-name-01 " in text and "dave" in text and "wasted" in text and "stale" in text
    if width >= 80:
        assert "+2 more processes" in text  # five processes on one GPU: three shown


def test_by_user_and_alerts_render() -> None:
    v = view()
    text = "\n".join(show(render_by_user(v, summary.by_user(v), 80), 80))
    assert "dave" in text and "USER" in text
    live = synthetic_live({"n1": "hot", "n2": "down"}, gpus=2)
    result = as_dict({"active": StandinAlerts(live).active(), "recent": [], "silences": []})
    text = "\n".join(show(render_alerts(result, 100, time.time(), time.time() - 3600), 100))
    assert "Active alerts: 2 firing (1 critical, 1 warning), 0 pending" in text and " hot " in text


def test_bars_and_formats() -> None:
    assert bar(0.5, 4) == "██  " and bar(1.0, 3) == "███" and bar(None, 2) == "  " and bar(0.0, 2) == "  "
    assert bar(0.0625, 2) == "▏ "
    assert (
        fmt_size_short(512 << 20) == "512M"
        and fmt_size_short(int(1.5 * (1 << 30))) == "1.5G"
        and fmt_size_short(None) == "-"
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


def _words(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


@pytest.mark.parametrize("width", [80, 120])
def test_list_views_stay_readable_when_narrow(width: int) -> None:
    """rich's Table folded the long column (summary, reason, command) into a few cells a line at 80
    columns and dropped others; every long text must survive whole (word order intact) and no line may
    exceed the width, with the short columns all present."""
    from gpufleet.cli.render_history import process_table
    from gpufleet.cli.render_status import render_hosts
    from gpufleet.collector.model.records import ProcessSpan

    live = synthetic_live({"gpu-node-07": "hot", "gpu-node-12": "down"}, gpus=2)
    alerts = StandinAlerts(live).active()
    for a in alerts:
        a.annotations["summary"] = f"{a.labels['host']} has a long summary that needs many words to say what"
    now = time.time()
    lines = show(
        render_alerts(as_dict({"active": alerts, "recent": [], "silences": []}), width, now, now), width
    )
    assert max(cell_width(x) for x in lines) <= width
    assert lines[1].split()[:6] == ["STATE", "FLAGS", "HOST", "GPU", "USER", "ACTIVE"]
    text = _words(lines)
    for a in alerts:  # whole, less the place the HOST and GPU columns say
        assert a.annotations["summary"].removeprefix(a.labels["host"] + " ") in text
    assert any("has a long summary that needs" in x for x in lines)  # not folded into a sliver

    reason = "ssh: connection refused by 127.0.0.1 port 2222 (is sshd running? check the firewall)"
    hosts = [
        views.HostInfo(
            name="gpu-node-12",
            status="down",
            reason=reason,
            since=now - 60,
            last_seen=now - 90,
            tags=["a100", "prod"],
            gpus=8,
            agent_version="0.1.0",
            driver_version="550.54.15",
        ),
    ]
    lines = show(render_hosts(hosts, width, now), width)
    assert max(cell_width(x) for x in lines) <= width
    assert lines[1].split()[:8] == ["HOST", "STATUS", "SINCE", "SEEN", "GPUS", "AGENT", "DRIVER", "TAGS"]
    assert reason in _words(lines) and " 8 " in lines[2]
    assert any("connection refused by 127.0.0.1" in x for x in lines)

    cmd = "python -m torch.distributed.run --nproc-per-node 8 train.py --config configs/llama-70b.yaml"
    span = ProcessSpan(
        host="n1",
        gpu_index=3,
        uuid="GPU-x",
        pid=424242,
        user="alice",
        command=cmd,
        first_seen=now - 7200,
        last_seen=now - 60,
        max_gpu_memory=70 << 30,
        mean_sm_util=88.0,
    )
    lines = show(process_table([span], width), width)
    assert max(cell_width(x) for x in lines) <= width
    assert lines[0].split()[:5] == ["USER", "PID", "GPU", "HELD", "SINCE"]
    assert lines[1].split()[:3] == ["alice", "424242", "3"] and "1h59m" in lines[1] and " 70G " in lines[1]
    assert cmd in _words(lines)


def test_status_fitted_to_a_short_screen_summarises_hosts_problem_hosts_first() -> None:
    """Six hosts of four GPUs at 80x24: one line per host, and the room left opens the flagged hosts."""
    from gpufleet.cli.render_status import fitted_lines, head_height

    live = synthetic_live({f"n{i}": s for i, s in enumerate(
        ["busy", "busy", "wasting", "busy", "idle", "busy"], 1)}, gpus=4)
    v = query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time())
    rows = 14
    lines = [line.plain for line in fitted_lines(v, 80, rows)]
    assert len(lines) <= rows and all(cell_width(line) <= 80 for line in lines)
    starts = [line.split()[0] for line in lines[head_height(v, 80):] if line[:1] != " "]
    assert starts == ["n1", "n2", "n3", "n4", "n5", "n6", "*"]  # every host on screen, in order
    assert lines[-1].startswith("* all of a host's GPUs on one line")  # the legend says what * is
    n3 = [line for line in lines if line.startswith("n3 ")]
    assert " 0 " in n3[0] and "wasted" in n3[0]  # the wasted host is opened to a line per GPU
    n1 = [line for line in lines if line.startswith("n1 ")][0]
    assert "4 GPUs" in n1 and " * " in n1  # the rest are summarised
    everything = [line.plain for line in fitted_lines(v, 80, 100)]
    assert not any(" * " in line for line in everything)  # room for all: no summaries


def test_event_line_says_each_thing_once() -> None:
    """The agent's xid message repeats the Xid and the GPU: the line says each once."""
    from gpufleet.cli.render_history import event_text
    from gpufleet.collector.model.records import EventRow

    def ev(message: str, gpu: int | None = 2, xid: int | None = 79, kind: str = "xid") -> EventRow:
        return EventRow(host="n1", ts=0.0, kind=kind, message=message, gpu_index=gpu, uuid=None, xid=xid)

    assert event_text(ev("Xid 79 (critical) on GPU 2")) == "GPU 2 Xid 79 (critical)"
    assert event_text(ev("Xid 79 (critical) on GPU 2 (GPU-abc-123)")) == "GPU 2 Xid 79 (critical)"
    said = event_text(ev("Xid 79: GPU has fallen off the bus", gpu=1))
    assert said == "GPU 1 Xid 79: GPU has fallen off the bus"
    assert event_text(ev("Xid 13 (info) on unknown GPU", gpu=None, xid=13)) == "Xid 13 (info) on unknown GPU"
    assert event_text(ev("GPU is lost", xid=None, kind="gpu_lost")) == "GPU 2 gpu_lost: GPU is lost"


def test_counts_agree_with_their_nouns() -> None:
    from gpufleet.cli.render_status import plural

    assert [plural(1, "host"), plural(2, "host"), plural(0, "GPU"), plural(3, "process")] == [
        "1 host", "2 hosts", "0 GPUs", "3 processes"
    ]


def test_status_shows_what_it_has_where_there_is_room() -> None:
    """PID from 130 columns, the GPU model from 170, the fan from 180, job / container after the command
    where the command has room for them, power and bars where the command has 24 cells; one name per
    column at every width (TIME: how long the process has run)."""
    from gpufleet.cli.render_status import status_lines

    live = synthetic_live({"n1": "busy"}, gpus=3)  # the last GPU of a busy host is idle
    snap = live.hosts["n1"].snapshot
    assert snap is not None
    snap.gpus[0].processes[0].job = "slurm-4242"
    snap.gpus[1].processes[0].container = "c0ffee12"
    snap.gpus[0].fan_speed = 45
    v = query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time())

    def screen(width: int) -> str:
        return "\n".join(line.plain for line in status_lines(v, width))

    wide = screen(200)
    assert all(w in wide for w in ("MODEL", "A100-SXM4-80GB", "PID", " 1000 ", "[job slurm-4242]",
                                   "[c0ffee12]", "TIME", "POWER", "310/400W"))
    assert "FAN" in wide and " 45% " in wide and "FAN" not in screen(170)
    assert "PID" in screen(130) and "MODEL" not in screen(160)
    assert "POWER" in screen(100) and "POWER" not in screen(80) and "PID" not in screen(100)
    for width in (60, 80, 120, 200):
        head = screen(width).splitlines()[3].split()
        assert head[:3] == ["HOST", "GPU", "MODEL" if width >= 170 else "UTIL"] and "TEMP" in head, head


def test_history_of_a_few_minutes_fills_the_line_and_the_summary_breaks_between_phrases() -> None:
    from gpufleet.cli.render_history import render_history
    from gpufleet.collector.model.records import GpuSeries, UsageRow

    now = time.time()
    pts = [SeriesPoint(ts=now - 300 + 10 * i, util_mean=50.0 + i, util_max=60.0, mem_used_mean=GIB * 4.0,
                       mem_used_max=GIB * 5.0, temp_max=60.0, power_mean=200.0) for i in range(30)]
    series = GpuSeries(host="n1", index=0, uuid="GPU-0", name="NVIDIA A100-SXM4-80GB", resolution="raw",
                       memory_total=80 * GIB, points=pts)
    usage = [UsageRow(user="alice", host="n1", gpu_hours_held=0.08, gpu_hours_used=0.08,
                      gpu_hours_wasted=0.0)]
    result = as_dict({"host": "n1", "gpu": None, "user": None, "since": now - 86400, "until": now,
                      "series": [series], "processes": [], "usage": usage, "events": []})
    lines = show(render_history(result, 80), 80)
    util = next(line for line in lines if line.startswith("  util "))
    spark = util[len("  util "):].split("  ")[0]
    assert spark.strip() == spark and len(spark) >= 40, util  # the 5 minutes span the line, no blank 24 h
    assert any("samples only since" in line for line in lines)
    i = next(i for i, line in enumerate(lines) if line.startswith("Summary: "))
    summary = lines[i : i + 3]
    assert all(cell_width(line) <= 80 for line in summary)
    joined = " ".join(line.strip() for line in summary)
    assert "GPU-hours 0.08 held, 0.08 used, 0.00 wasted" in joined  # one phrase, never split
    assert any(line.strip().startswith("GPU-hours") for line in summary[1:]) or len(lines[i]) <= 80


def test_longer_flags_widen_the_flags_column_instead_of_being_cut() -> None:
    from gpufleet.cli.render_status import status_lines

    live = synthetic_live({"n1": "busy", "n2": "busy"}, gpus=2)
    v = query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time())
    v.hosts[0].gpus[0].flags = ["input_bound"]
    v.hosts[1].gpus[1].flags = ["idle_peers", "wasted"]
    for width in (80, 100, 200):
        lines = [line.plain for line in status_lines(v, width)]
        assert all(cell_width(line) <= width for line in lines)
        text = "\n".join(lines)
        assert "input_bound" in text and "idle_peers" in text, text


def test_at_80_columns_the_script_is_shown_not_the_interpreter_and_a_lost_gpu_keeps_its_flags_apart() -> None:
    live = synthetic_live({"n1": "busy", "n4": "lost"}, gpus=3)
    for g in live.hosts["n1"].snapshot.gpus:  # type: ignore[union-attr]
        for p in g.processes:
            p.command = "/usr/bin/python3 -u /home/alice/llama_finetune_from_checkpoint.py --lr 3e-4"
    lost_gpu = live.hosts["n4"].snapshot.gpus[1]  # type: ignore[union-attr]
    lost_gpu.error = "GPU lost: NVML_ERROR_GPU_IS_LOST (GPU is lost) and then some more words"
    v = query.build_fleet_view(live.hosts.values(), Firing([alert("gpu_lost", "n4", 1)]), now=time.time())
    lines = show(render_status(v, 80), 80)
    held = [line for line in lines if "llama" in line]  # n1's GPUs 0 and 1
    assert len(held) == 2 and all("llama_fine" in line and "python" not in line for line in held), \
        "\n".join(lines)
    wide = "\n".join(show(render_status(v, 200), 200))
    assert "python3 llama_finetune_from" in wide  # with room the interpreter is named too
    [lost] = [line for line in lines if "lost:" in line]
    assert lost.endswith("… lost"), lost  # the cut error, a space, then its flag


def test_a_named_slurm_job_is_shown_after_the_command_where_it_fits() -> None:
    """Wide: ``[90210 train-llm]`` after the command (the command is cut for it); narrower only where the
    command leaves room (from about 90 columns for a short command; at 80 the command column is too
    narrow), never at the command's cost; ``gpufleet top``'s process table names it too."""
    from gpufleet.cli.render_status import status_lines
    from gpufleet.cli.top import _process_lines as process_lines

    live = synthetic_live({"n1": "busy"}, gpus=3)
    snap = live.hosts["n1"].snapshot
    assert snap is not None
    p0, p1 = snap.gpus[0].processes[0], snap.gpus[1].processes[0]
    p0.command, p0.job, p0.job_name, p0.job_account = "jupyter", "90210", "train-llm", "nlp"
    p1.command, p1.job, p1.job_name = "python3 llama_finetune_from_checkpoint.py", "90211", "finetune"
    v = query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time())

    def screen(width: int) -> str:
        return "\n".join(line.plain for line in status_lines(v, width))

    assert "[90210 train-llm]" in screen(200) and "[90211 finetune]" in screen(200)
    narrow = screen(90)
    assert "jupyter [90210 train-llm]" in narrow and "90211" not in narrow  # no room beside a long script
    assert "llama_fine" in narrow and "llama_fine" in screen(80)
    assert "[90210" not in screen(60)  # no command column at all there
    top = "\n".join(line.plain for line in process_lines(v.hosts[0].gpus[0], 120))
    assert "90210 train-llm" in top


def test_a_user_holding_nothing_is_said_so() -> None:
    """Issue 36: `status --user dave` (whose process had exited) said "no hosts match"."""
    from gpufleet.cli.render_status import status_lines

    live = synthetic_live({"n1": "busy"}, gpus=2)
    v = query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time(),
                               user=["dave"])
    assert [line.plain for line in status_lines(v, 80)][-1] == "no GPU held by dave now"
