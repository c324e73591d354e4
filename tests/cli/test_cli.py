"""The real `gpufleet` CLI as a subprocess against a query server with a stand-in collector."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import pwd
from pathlib import Path

from gpufleet.collector.faces.api.server import QueryServer

from tests.cli.cli_testkit import StandinCollector, cell_width, cli_env, run_cli


async def test_status_screen(env: dict[str, str]) -> None:
    r = await run_cli("status", env=env)
    assert r.rc == 0, r.err
    assert r.err == ""
    lines = r.out.splitlines()
    assert lines[0].startswith("gpufleet status  live")
    assert "6 hosts: 5 up, 1 down" in r.out
    # each GPU once (issue 36): n2's two idle-held GPUs and n4's zombie are wasted, not also busy
    assert "20 GPUs = 15 busy + 3 wasted + 1 idle + 1 lost · 1 hot" in r.out
    for name in ("n1", "n2", "n3", "n4", "n5", "n6"):
        assert any(line.startswith(name + " ") for line in lines), name
    n2 = [line for line in lines if "dave" in line]
    assert len(n2) == 2 and all("jupyter-lab" in line and line.endswith("wasted") for line in n2)
    assert any("91°C" in line and line.endswith("hot") for line in lines)
    assert any("lost: GPU is lost (fell off the bus)" in line for line in lines)
    assert any(
        line.startswith("n6") and "down" in line and "ssh: connection refused" in line for line in lines
    )
    # into a pipe every line whole (issue 36): the commands and their job tags uncut, whatever $COLUMNS says
    assert max(cell_width(line) for line in lines) > 120 and "…" not in r.out


async def test_status_fits_80_columns(env: dict[str, str]) -> None:
    r = await run_cli("status", "--width", "80", env=env)  # into a pipe only --width sets one
    assert r.rc == 0, r.err
    assert max(cell_width(line) for line in r.out.splitlines()) <= 80
    assert "alice" in r.out and "wasted" in r.out


async def test_status_json_and_filters(env: dict[str, str]) -> None:
    r = await run_cli("status", "--json", env=env)
    assert r.rc == 0, r.err
    view = json.loads(r.out)
    assert view["source"] == "live" and view["totals"]["wasted"] == 3
    r = await run_cli("status", "--json", "--host", "n1,n2", "--host", "n3", env=env)
    assert [h["name"] for h in json.loads(r.out)["hosts"]] == ["n1", "n2", "n3"]
    r = await run_cli("--socket", env["GPUFLEET_SOCKET"], "status", "--json", "--tag", "h100", env=env)
    assert [h["name"] for h in json.loads(r.out)["hosts"]] == ["n3", "n4"]
    r = await run_cli("status", "--user", "erin", env=env)
    assert r.rc == 0 and "erin" in r.out and "alice" not in r.out and "<zombie>" in r.out


async def test_status_by_user(env: dict[str, str]) -> None:
    r = await run_cli("status", "--by", "user", env=env)
    assert r.rc == 0, r.err
    rows = {line.split()[0]: line.split() for line in r.out.splitlines()[3:] if line.strip()}
    assert rows["USER"][:3] == ["USER", "GPUS", "WASTED"]
    assert rows["dave"][1:3] == ["2", "2"]  # two GPUs, both wasted
    assert rows["alice"][1] == "7"


async def test_unknown_host_is_one_line(env: dict[str, str]) -> None:
    r = await run_cli("status", "--host", "n9", env=env)
    assert r.rc == 1
    assert r.out == ""
    assert r.err == "gpufleet: unknown host 'n9' (known: n1, n2, n3, n4, n5, n6)\n"
    r = await run_cli("history", "--host", "n9", env=env)
    assert r.rc == 1 and r.err.startswith("gpufleet: unknown host 'n9'") and r.err.count("\n") == 1


async def test_bad_since_is_one_line(env: dict[str, str]) -> None:
    r = await run_cli("history", "--host", "n1", "--since", "yesterdayish", env=env)
    assert r.rc == 2
    assert r.err == (
        "gpufleet: bad --since 'yesterdayish': expected a duration like 24h, 7d, -90m, +1h, '2h ago', a word "
        "(now, today, yesterday, tomorrow), a time like 08:00 or a date like 2026-11-30 or 2026-11-30T08:00\n"
    )
    r = await run_cli("history", "--host", "n1", "--since", "1h", "--until", "2h", env=env)
    assert r.rc == 2 and r.err.startswith("gpufleet: --since (") and "must be before --until" in r.err


async def test_hosts(env: dict[str, str]) -> None:
    r = await run_cli("hosts", env=env)
    assert r.rc == 0, r.err
    assert "6 hosts, 5 up" in r.out
    line = next(x for x in r.out.splitlines() if x.startswith("n6"))
    assert "down" in line and "ssh: connection refused" in line
    r = await run_cli("hosts", "--json", env=env)
    rows = json.loads(r.out)
    assert (
        [h["name"] for h in rows][:2] == ["n1", "n2"]
        and rows[0]["gpus"] == 4
        and rows[0]["backend"] == "fake"
    )


async def test_alerts(env: dict[str, str]) -> None:
    r = await run_cli("alerts", env=env)
    assert r.rc == 0, r.err
    assert "Active alerts: 5 firing" in r.out
    assert "wasted" in r.out and " hot " in r.out and " down " in r.out  # the flags status shows
    assert "Resolved since" in r.out and "cooled down to 70 C" in r.out
    r = await run_cli("alerts", "--json", "--since", "30d", env=env)
    data = json.loads(r.out)
    assert len(data["active"]) == 5 and data["recent"][0]["rule"] == "overheating"


async def test_history_text_csv_json(env: dict[str, str]) -> None:
    r = await run_cli("history", "--host", "n1", "--since", "6h", env=env)
    assert r.rc == 0, r.err
    assert r.out.startswith("gpufleet history n1")
    for i in range(4):
        assert f"GPU {i}" in r.out
    assert "util " in r.out and "mem " in r.out and any(c in r.out for c in "▁▂▃▄▅▆▇█")
    assert "GPU-hours 14.0 held, 9.5 used, 2.5 wasted" in r.out
    assert "train_alice.py" in r.out and "Xid 79" in r.out

    r = await run_cli(
        "history",
        "--host",
        "n1",
        "--gpu",
        "2",
        "--since",
        "2026-01-01",
        "--until",
        "2026-01-01T06:00",
        "--csv",
        env=env,
    )
    assert r.rc == 0, r.err
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert rows and {row["gpu"] for row in rows} == {"2"} and rows[0]["host"] == "n1"
    assert float(rows[0]["util_mean"]) >= 0 and rows[0]["memory_total"] == str(80 << 30)

    r = await run_cli("history", "--host", "n1", "--user", "bob", "--json", env=env)
    data = json.loads(r.out)
    assert [s["index"] for s in data["series"]] == [1]  # only the GPU bob used
    assert [p["user"] for p in data["processes"]] == ["bob"]


async def test_silence_add_list_expire(env: dict[str, str], standin: StandinCollector) -> None:
    r = await run_cli(
        "silence",
        "add",
        "--host",
        "n3",
        "--rule",
        "wasted",
        "--for",
        "2h",
        "--comment",
        "reserved for the demo",
        "--by",
        "tester",
        env=env,
    )
    assert r.rc == 0, r.err
    assert r.out.startswith("silence 1: host=n3 rule=wasted for 2h00m (until ")
    me = pwd.getpwuid(os.geteuid()).pw_name  # the peer's real name, never what --by claims
    assert r.err == f"gpufleet: --by is ignored: the collector records who asked ({me})\n"
    assert standin.alerts.silences[0].comment == "reserved for the demo"
    assert standin.alerts.silences[0].created_by == me
    r = await run_cli("silence", "list", env=env)
    assert r.rc == 0 and "host=n3 rule=wasted" in r.out and f" {me} " in r.out
    r = await run_cli("silence", "list", "--json", env=env)
    assert [s["id"] for s in json.loads(r.out)] == [1]
    r = await run_cli("silence", "expire", "1", env=env)
    assert r.rc == 0 and r.out == "silence 1 expired\n"
    r = await run_cli("silence", "expire", "1", env=env)
    assert r.rc == 1 and r.err == "gpufleet: no active silence with id 1\n"
    r = await run_cli("silence", "add", "--for", "2h", env=env)
    assert r.rc == 2 and "needs at least one of --host" in r.err
    r = await run_cli("silence", "add", "--host", "n1", "--for", "soon", env=env)
    assert r.rc == 2 and r.err == "gpufleet: bad --for 'soon': expected a duration like 2h, 30m, 1d\n"


async def test_collector_absent_is_exit_3(home: Path) -> None:
    env = cli_env(home)
    r = await run_cli("status", env=env)
    assert r.rc == 3
    assert r.out == ""
    assert r.err.startswith(
        f"gpufleet: collector not running (no socket at {home}/run/gpufleet/gpufleet.sock) and no "
        f"history at {home}/data/gpufleet/gpufleet.db — "
    ) and r.err.count("\n") == 1
    # what to run next works on this machine (issue 36): with no NVIDIA driver here, a bare
    # `collector run` would only show this machine down; the hint says to list the GPU hosts
    assert "/proc/driver/nvidia" not in r.err and ("start one with `gpufleet collector run`" in r.err) == (
        Path("/proc/driver/nvidia/version").exists())
    if not Path("/proc/driver/nvidia/version").exists():
        assert "no NVIDIA driver" in r.err and "`gpufleet collector run -c gpufleet.yaml`" in r.err
        assert "gpufleet config check -c gpufleet.yaml" in r.err and "deploy/gpufleet.yaml" in r.err
    r = await run_cli("silence", "list", "--socket", str(home / "nope.sock"), env=env)
    assert r.rc == 3 and "no socket at" in r.err


async def test_config_socket_is_used(home: Path, standin: StandinCollector) -> None:
    sock = home / "cfg.sock"
    cfg = home / "gpufleet.yaml"
    cfg.write_text(f"api:\n  socket: {sock}\nhosts:\n  - name: n1\n")
    srv = QueryServer(standin, sock, 0o600)
    await srv.start()
    try:
        r = await run_cli("status", "-c", str(cfg), "--json", env=cli_env(home))
        assert r.rc == 0, r.err
        assert json.loads(r.out)["totals"]["hosts"] == 6
        r = await run_cli("status", "--json", env=cli_env(home, GPUFLEET_CONFIG=str(cfg)))
        assert r.rc == 0, r.err
    finally:
        await srv.stop()


async def test_malformed_answer_from_a_broken_collector_is_one_line(home: Path) -> None:
    """Something listening on the socket that answers nonsense: one line and exit 1, no traceback."""
    sock = home / "broken.sock"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b'{"ok": true, "result": {"hosts": "not a list"}}\n')
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, path=str(sock))
    try:
        r = await run_cli("status", "--socket", str(sock), env=cli_env(home))
    finally:
        server.close()
        await server.wait_closed()
    assert r.rc == 1, (r.out, r.err)
    assert r.err.startswith("gpufleet: malformed fleet view") and r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err


async def test_usage_errors(env: dict[str, str]) -> None:
    r = await run_cli("history", env=env)
    assert r.rc == 2 and "Missing option '--host'" in r.err
    r = await run_cli("status", "--by", "gpu", env=env)
    assert r.rc == 2
    r = await run_cli("nonsense", env=env)
    assert r.rc == 2 and "No such command" in r.err


async def test_report(env: dict[str, str]) -> None:
    r = await run_cli("report", "--since", "7d", env=env)
    assert r.rc == 0, r.err
    assert "alice" in r.out and "2.5" in r.out  # alice wasted 2.5 GPU-hours in the stand-in store
    r = await run_cli("report", "--since", "7d", "--format", "json", env=env)
    data = json.loads(r.out)
    assert data["top_wasters"][0]["name"] == "alice"
    r = await run_cli("report", "--since", "7d", "--send", env=env)
    assert r.rc == 1 and r.err.startswith("gpufleet: no notifiers configured")
    r = await run_cli("report", "--host", "n42", env=env)
    assert r.rc == 1 and r.err.startswith("gpufleet: unknown host 'n42'")


async def test_history_unknown_gpu_is_one_line(env: dict[str, str]) -> None:
    """--gpu 7 on a 4-GPU host is a typo; an empty "no samples" screen would hide it."""
    r = await run_cli("history", "--host", "n1", "--gpu", "7", env=env)
    assert (r.rc, r.out) == (1, "")
    assert r.err == "gpufleet: n1 has no GPU 7 (GPUs: 0, 1, 2, 3)\n"
    r = await run_cli("history", "--host", "n1", "--gpu", "2", "--since", "1h", env=env)
    assert r.rc == 0 and r.out.startswith("gpufleet history n1 GPU 2"), r.err


async def test_one_host_one_gpu_reads_right(env: dict[str, str]) -> None:
    r = await run_cli("status", "--host", "n3", "--user", "bob", env=env)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[1].startswith("1 host: 1 up   1 GPU = 1 busy"), r.out


async def test_silence_by_names_the_real_user_when_user_is_unset(env: dict[str, str]) -> None:
    """$USER and $LOGNAME unset (cron, some containers): BY still says who, from the socket's peer."""
    env = {k: v for k, v in env.items() if k not in ("USER", "LOGNAME")}
    r = await run_cli("silence", "add", "--host", "n1", "--rule", "wasted", "--for", "1h", env=env)
    assert r.rc == 0, r.err
    r = await run_cli("silence", "list", env=env)
    me = pwd.getpwuid(os.geteuid()).pw_name
    row = r.out.splitlines()[1]
    assert r.rc == 0 and f" {me}" in row and " - " not in row, r.out
