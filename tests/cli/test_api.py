"""The query API over a real Unix socket, served from a stand-in collector."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.errors import QueryError
from gpufleet.collector.faces.api.server import QueryServer
from gpufleet.collector.model.views import GPU_STATES

from tests.cli.cli_testkit import StandinCollector


async def ask(path: Path, *requests: Any, raw: bytes | None = None) -> list[dict[str, Any]]:
    """Send requests on one connection; return the decoded responses."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 24)
    try:
        if raw is not None:
            writer.write(raw)
        for r in requests:
            writer.write(json.dumps(r).encode() + b"\n")
        await writer.drain()
        out = []
        for _ in range(len(requests) + (1 if raw is not None else 0)):
            line = await asyncio.wait_for(reader.readline(), 10)
            if not line:
                break
            out.append(json.loads(line))
        return out
    finally:
        writer.close()


async def test_socket_mode_and_ping(server: QueryServer) -> None:
    mode = stat.S_IMODE(os.stat(server.path).st_mode)
    assert stat.S_ISSOCK(os.stat(server.path).st_mode)
    assert mode == 0o600
    [r] = await ask(server.path, {"op": "ping", "v": 1})
    assert r["ok"] and r["result"]["pong"] and r["result"]["source"] == "live"
    assert r["result"]["hosts"] == 6


async def test_status_view(server: QueryServer) -> None:
    [r] = await ask(server.path, {"op": "status", "args": {}, "v": 1})
    assert r["ok"], r
    view = r["result"]
    names = [h["name"] for h in view["hosts"]]
    assert names == ["n1", "n2", "n3", "n4", "n5", "n6"]
    t = view["totals"]
    assert (t["hosts"], t["hosts_up"], t["hosts_down"]) == (6, 5, 1)
    # wasted counts GPUs a waste rule fires on (n2's two, n4's stale zombie), each GPU in one state
    assert t["gpus"] == 20 and t["wasted"] == 3 and t["hot"] == 1 and t["lost"] == 1 and t["stale"] == 1
    assert sum(t[s] for s in GPU_STATES) == t["gpus"]
    n2 = view["hosts"][1]
    assert n2["gpus"][0]["flags"] == ["wasted"]
    assert n2["gpus"][0]["processes"][0]["user"] == "dave"
    assert n2["gpus"][0]["processes"][0]["command"] == "jupyter-lab"
    n1 = view["hosts"][0]
    p = n1["gpus"][0]["processes"][0]
    assert p["command"] == "python3 train.py" and 3500 < p["running_for"] < 3700
    assert view["hosts"][5]["flags"] == ["down"] and view["hosts"][5]["reason"] == "ssh: connection refused"


async def test_users_form_is_by_user_of_the_whole_view(server: QueryServer) -> None:
    """``status --by user`` asks for the users form: the collector's per-user lines are the ones the CLI
    would make from the whole view, and the hosts stay home."""
    from gpufleet.collector.model.codec import fleet_view_from_dict, user_usage_from_dict
    from gpufleet.collector.model.summary import by_user

    [full, users, tagged] = await ask(server.path, {"op": "status", "args": {"form": "rows"}, "v": 1},
                                      {"op": "status", "args": {"form": "users"}, "v": 1},
                                      {"op": "status", "args": {"form": "users", "tag": ["h100"]}, "v": 1})
    assert full["ok"] and users["ok"] and tagged["ok"], (users, tagged)
    view = fleet_view_from_dict(full["result"])
    got = [user_usage_from_dict(u) for u in users["result"]["users"]]
    assert got == by_user(view) and {u.user for u in got} >= {"alice", "dave"}
    header = fleet_view_from_dict(users["result"]["view"])
    assert header.hosts == [] and header.totals == view.totals and header.source == "live"
    assert len(json.dumps(users)) < len(json.dumps(full)) / 3
    assert {h for u in tagged["result"]["users"] for h in u["hosts"]} <= {"n3", "n4"}


async def test_status_filters(server: QueryServer) -> None:
    [by_host, by_glob, by_tag, by_user] = await ask(
        server.path,
        {"op": "status", "args": {"host": ["n3"]}},
        {"op": "status", "args": {"host": "n[12]"}},
        {"op": "status", "args": {"tag": ["h100"]}},
        {"op": "status", "args": {"user": ["dave"]}},
    )
    assert [h["name"] for h in by_host["result"]["hosts"]] == ["n3"]
    assert [h["name"] for h in by_glob["result"]["hosts"]] == ["n1", "n2"]
    assert [h["name"] for h in by_tag["result"]["hosts"]] == ["n3", "n4"]
    hosts = by_user["result"]["hosts"]
    assert [h["name"] for h in hosts] == ["n2"] and len(hosts[0]["gpus"]) == 2
    assert by_user["result"]["filters"] == {"user": ["dave"]}


async def test_user_errors_are_one_line(server: QueryServer) -> None:
    rs = await ask(
        server.path,
        {"op": "status", "args": {"host": ["n9"]}},
        {"op": "status", "args": {"tag": ["nope"]}},
        {"op": "frobnicate"},
        {"op": "status", "args": {"host": 7}},
        {"op": "history", "args": {}},
        {"op": "status", "v": 2},
        {"op": "history", "args": {"host": "n1", "since": 100.0, "until": 50.0}},
        [1, 2],
    )
    errors = [r["error"] for r in rs]
    assert all(not r["ok"] for r in rs)
    assert errors[0] == "unknown host 'n9' (known: n1, n2, n3, n4, n5, n6)"
    assert errors[1].startswith("no host has tag 'nope' (tags: a100, h100, old, prod)")
    assert errors[2].startswith("unknown op 'frobnicate' (known: alerts, events, history, hosts, jobs, "
                                "maintenance_list, maintenance_start, maintenance_stop, ping")
    assert errors[3] == "bad argument 'host': expected a string or a list of strings"
    assert errors[4] == "missing argument 'host'"
    assert errors[5].startswith("unsupported API version 2")
    assert errors[6] == "'since' must be before 'until'"
    assert errors[7] == "request must be a JSON object"
    assert all("\n" not in e for e in errors)


async def test_bad_json_then_connection_still_usable(server: QueryServer) -> None:
    rs = await ask(server.path, {"op": "ping"}, raw=b"{not json\n")
    assert not rs[0]["ok"] and rs[0]["error"].startswith("request is not valid JSON")
    assert rs[1]["ok"]


async def test_oversized_request_is_refused(standin: StandinCollector, home: Path) -> None:
    srv = QueryServer(standin, home / "small.sock", 0o600, max_request_bytes=1024)
    await srv.start()
    try:
        huge = {"op": "status", "args": {"host": ["x" * 5000]}}
        reader, writer = await asyncio.open_unix_connection(str(srv.path))
        writer.write(json.dumps(huge).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
        assert json.loads(line) == {"ok": False, "error": "request too large (limit 1024 bytes)"}
        assert await asyncio.wait_for(reader.read(), 10) == b""  # and the connection is closed
        writer.close()
        [ok] = await ask(srv.path, {"op": "ping"})  # the server itself is fine
        assert ok["ok"]
    finally:
        await srv.stop()


async def test_idle_connection_is_closed(standin: StandinCollector, home: Path) -> None:
    srv = QueryServer(standin, home / "idle.sock", 0o600, idle_timeout=0.2)
    await srv.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(srv.path))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await srv.stop()


async def test_history_and_processes(server: QueryServer) -> None:
    import time

    now = time.time()
    [h, p, bad] = await ask(
        server.path,
        {
            "op": "history",
            "args": {"host": "n1", "gpu": 1, "since": now - 3600, "until": now, "max_points": 30},
        },
        {"op": "processes", "args": {"host": "n1", "user": "bob", "since": now - 3600}},
        {"op": "history", "args": {"host": "n1", "max_points": 0}},
    )
    assert h["ok"], h
    assert [s["index"] for s in h["result"]["series"]] == [1]
    assert 1 <= len(h["result"]["series"][0]["points"]) <= 60
    assert {u["user"] for u in h["result"]["usage"]} == {"alice", "bob"}
    assert [x["user"] for x in p["result"]] == ["bob"]
    assert bad["error"] == "bad argument 'max_points': must be 1..10000"


async def test_silences(server: QueryServer, standin: StandinCollector) -> None:
    [add, hot, bad_rule, bad_host, listed, exp, again] = await ask(
        server.path,
        {
            "op": "silence_add",
            "args": {
                "matchers": {"host": "n3", "rule": "wasted"},
                "duration": 7200,
                "comment": "ok",
                "created_by": "t",
            },
        },
        {"op": "silence_add", "args": {"matchers": {"rule": "hot"}, "duration": 60}},
        {"op": "silence_add", "args": {"matchers": {"rule": "wastd"}, "duration": 60}},
        {"op": "silence_add", "args": {"matchers": {"host": "n77"}, "duration": 60}},
        {"op": "silence_list"},
        {"op": "silence_expire", "args": {"id": 1}},
        {"op": "silence_expire", "args": {"id": 1}},
    )
    assert (
        add["ok"]
        and add["result"]["id"] == 1
        and add["result"]["matchers"] == {"host": "n3", "rule": "wasted"}
    )
    assert hot["result"]["matchers"] == {"rule": "overheating"}  # the flag name maps to the rule
    assert bad_rule["error"].startswith("unknown rule 'wastd' (rules: wasted, idle")
    assert bad_host["error"].startswith("unknown host 'n77'")
    assert [s["id"] for s in listed["result"]] == [1, 2]
    assert exp["ok"] and not again["ok"] and again["error"] == "no active silence with id 1"


async def test_alerts(server: QueryServer) -> None:
    [r] = await ask(server.path, {"op": "alerts", "args": {"since": 0}})
    rules = sorted(a["rule"] for a in r["result"]["active"])
    assert rules.count("wasted") == 2 and "overheating" in rules and "host_down" in rules
    assert [a["rule"] for a in r["result"]["recent"]] == ["overheating"]


async def test_internal_error_is_reported_not_fatal(server: QueryServer, standin: StandinCollector) -> None:
    async def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("disk on fire")

    standin.store.gpu_history = broken  # type: ignore[method-assign]
    [r, ok] = await ask(server.path, {"op": "history", "args": {"host": "n1"}}, {"op": "ping"})
    assert r == {"ok": False, "error": "internal error in 'history': RuntimeError: disk on fire"}
    assert ok["ok"]


async def test_stale_socket_is_replaced_and_live_one_is_not(standin: StandinCollector, home: Path) -> None:
    path = home / "stale.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()  # a socket file nobody listens on: what a crashed collector leaves behind
    srv = QueryServer(standin, path, 0o660)
    await srv.start()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        second = QueryServer(standin, path, 0o600)
        with pytest.raises(QueryError, match="another collector is already serving"):
            await second.start()
        assert path.exists()  # the second one did not take it away
    finally:
        await srv.stop()
    assert not path.exists()

    path.write_text("not a socket")
    with pytest.raises(QueryError, match="exists and is not a socket"):
        await QueryServer(standin, path).start()


async def test_stop_closes_open_connections(server: QueryServer) -> None:
    reader, writer = await asyncio.open_unix_connection(str(server.path))
    await server.stop()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert not server.path.exists()


async def test_answers_are_strict_json_and_utf8(server: QueryServer, standin: StandinCollector) -> None:
    """A reading that is not a finite number answers null, not ``NaN`` (which no strict JSON parser reads:
    jq, JavaScript, Go); a user name outside ASCII travels as UTF-8 and reads back as itself."""
    snap = standin.live.hosts["n1"].snapshot
    assert snap is not None
    snap.gpus[0].power_draw = float("nan")
    snap.gpus[0].processes[0].user = "josé"
    reader, writer = await asyncio.open_unix_connection(str(server.path), limit=1 << 24)
    try:
        writer.write(b'{"op":"status","args":{},"v":1}\n')
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()

    def refuse(token: str) -> None:
        raise AssertionError(f"the answer holds {token}: not JSON")

    view = json.loads(line, parse_constant=refuse)["result"]
    gpu = view["hosts"][0]["gpus"][0]
    assert gpu["power"] is None and gpu["processes"][0]["user"] == "josé"
    assert "josé".encode() in line
