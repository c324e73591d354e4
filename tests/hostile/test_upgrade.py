"""Issue 12 item 10: a newer agent of the same major version works with this collector (rolling upgrade)."""

from __future__ import annotations

import json

import pytest
from gpufleet.agent import wire

from tests.cli.cli_testkit import cli_env, run_cli
from tests.hostile.hostile_testkit import collector_over, line, snapshot

HELLO_1_9 = line({"type": "hello", "proto": "1.9", "agent_version": "9.0", "hostname": "new", "ts": 0.0,
                  "backend": "fake", "gpus": [{"index": 0, "uuid": "GPU-new-0", "nvlink": [1, 2]}],
                  "numa": {"nodes": 2}}).replace('"ts": 0.0', '"ts": @NOW@')
FUTURE = line({"type": "future_thing", "proto": "1.9", "ts": 0.0, "payload": {"deep": [1, {"x": 2}]}})


def _newer_snapshot() -> str:
    snap = json.loads(snapshot("GPU-new-0", ts=1.0, processes=[{"pid": 5, "user": "a", "numa_node": 1}],
                               nvlink_errors=0))
    snap["proto"], snap["power_profile"] = "1.9", "max-q"
    return json.dumps(snap).replace('"ts": 1.0', '"ts": @NOW@')


async def test_newer_minor_agent_streams_unknown_parts_ignored_and_counted() -> None:
    script = [HELLO_1_9, FUTURE, _newer_snapshot(), FUTURE, _newer_snapshot()]
    async with collector_over({"new": script, "old": []}, repeat={"new"}) as fleet:
        await fleet.wait(lambda: fleet.state("new").frames >= 10, "frames from the newer agent")
        st = fleet.state("new")
        assert (st.status, st.connects, st.bad_frames) == ("up", 1, 0), st.reason
        assert st.agent_version == "9.0" and st.snapshot is not None and st.snapshot.gpus[0].processes
        assert st.ignored_frames >= 2
        # hello: gpus[0].nvlink + numa; each snapshot: proto field power_profile, nvlink_errors, numa_node
        assert st.ignored_fields >= 2 + 3 * 8
        env = cli_env(fleet.home, GPUFLEET_SOCKET=fleet.collector.api_socket)
        hosts = {h["name"]: h for h in json.loads((await run_cli("hosts", "--json", env=env)).out)}
        code, text = await fleet.metrics()
    assert hosts["new"]["ignored_frames"] >= 2 and hosts["new"]["ignored_fields"] >= 26
    assert hosts["new"]["last_ignored"]
    assert hosts["old"]["ignored_frames"] == 0 and hosts["old"]["ignored_fields"] == 0
    assert code == 200
    assert 'gpufleet_host_wire_ignored_total{host="new",what="frame"}' in text


async def test_unknown_major_version_is_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    script = [line({"type": "hello", "proto": "2.0", "agent_version": "20.0", "hostname": "x", "ts": 1.0})]
    async with collector_over({"major": script}) as fleet:
        await fleet.wait(lambda: fleet.state("major").bad_frames >= 1, "the stream refused")
        assert fleet.state("major").status != "up"
    closed = [r.getMessage() for r in caplog.records if "closing the agent stream" in r.getMessage()]
    want = f"agent speaks protocol 2.0, this side speaks {wire.PROTO_VERSION} (major versions differ)"
    assert any(want in m for m in closed)
