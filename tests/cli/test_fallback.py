"""With the collector down, the CLI reads the real SQLite store read-only and says so."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.settings import StorageConfig

from tests.cli.cli_testkit import cli_env, run_cli, synthetic_live

pytest.importorskip("gpufleet.collector.store.store")


async def fill_store(db: Path, now: float) -> None:
    """Write a small fleet through the store's own ingest path, with one firing alert."""
    from gpufleet.collector.store.store import Store

    live = synthetic_live(
        {"n1": "busy", "n2": "wasting", "n3": "down"}, gpus=2, now=now - 180, tags={"n1": ["a100"]}
    )
    store = await Store.open(StorageConfig(path=str(db)))
    try:
        for st in live.hosts.values():
            store.submit_host_state(st)
            if st.snapshot is not None:
                hello = wire.Hello(
                    agent_version="0.1.0",
                    hostname=st.name,
                    ts=now - 200,
                    backend="fake",
                    gpus=[wire.GpuInfo(index=g.index, uuid=g.uuid, name=g.name) for g in st.snapshot.gpus],
                )
                store.submit_hello(st.name, hello, now - 200)
                for k in range(3):
                    snap = sample.Snapshot(proto=wire.PROTO_VERSION, ts=now - 180 - 10 * (2 - k), seq=k,
                                           gpus=st.snapshot.gpus)
                    store.submit_snapshot(st.name, snap, snap.ts)
        await store.flush()
        await store.save_alerts(
            [
                AlertRecord(
                    fingerprint="f1",
                    rule="wasted",
                    severity="warning",
                    state="firing",
                    labels={"host": "n2", "gpu": "0", "user": "dave", "rule": "wasted"},
                    annotations={"summary": "dave holds GPU 0 on n2 at 0% util"},
                    started_at=now - 2000,
                    fired_at=now - 200,
                    updated_at=now - 200,
                )
            ]
        )
    finally:
        await store.close()


async def test_status_from_store_says_so(home: Path) -> None:
    db = home / "data" / "gpufleet" / "gpufleet.db"
    now = time.time()
    await fill_store(db, now)
    env = cli_env(home)  # the default socket path does not exist: collector down

    r = await run_cli("status", env=env)
    assert r.rc == 0, r.err
    assert r.err.startswith(f"gpufleet: collector not running; showing stored data from {db} (last sample 3m")
    assert r.err.count("\n") == 1
    assert "stored data · last sample 3m" in r.out
    assert "dave" in r.out and "jupyter-lab" in r.out and "wasted" in r.out
    assert "alice" in r.out

    r = await run_cli("status", "--json", "--host", "n2", env=env)
    assert r.rc == 0, r.err
    view = json.loads(r.out)
    assert view["source"] == "store" and [h["name"] for h in view["hosts"]] == ["n2"]
    assert view["hosts"][0]["gpus"][0]["flags"] == ["wasted"]

    r = await run_cli("hosts", "--json", env=env)
    assert {h["name"]: h["status"] for h in json.loads(r.out)} == {"n1": "up", "n2": "up", "n3": "down"}

    r = await run_cli("history", "--host", "n1", "--since", "1h", "--json", env=env)
    assert r.rc == 0, r.err
    data = json.loads(r.out)
    assert [s["index"] for s in data["series"]] == [0, 1]
    assert any(p["user"] == "alice" for p in data["processes"])

    r = await run_cli("alerts", "--json", env=env)
    assert [a["rule"] for a in json.loads(r.out)["active"]] == ["wasted"]

    r = await run_cli("history", "--host", "n9", env=env)
    assert r.rc == 1 and r.err.splitlines()[-1].startswith("gpufleet: unknown host 'n9' (known: n1, n2, n3)")

    r = await run_cli("silence", "add", "--host", "n1", "--for", "1h", env=env)
    assert r.rc == 3 and "collector not running" in r.err  # silences need the collector, no fallback


async def test_store_is_not_written(home: Path) -> None:
    db = home / "gpufleet.db"
    await fill_store(db, time.time())
    before = hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns
    env = cli_env(home, GPUFLEET_SOCKET=str(home / "absent.sock"))
    for args in (("status", "--json"), ("hosts",), ("alerts",), ("history", "--host", "n1")):
        r = await run_cli(*args, "--db", str(db), env=env)
        assert r.rc == 0, r.err
    assert (hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns) == before


async def test_stale_socket_falls_back(home: Path) -> None:
    import socket

    db = home / "gpufleet.db"
    await fill_store(db, time.time())
    stale = home / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # what a collector killed with SIGKILL leaves behind
    r = await run_cli("status", "--socket", str(stale), "--db", str(db), env=cli_env(home))
    assert r.rc == 0, r.err
    assert r.err.startswith("gpufleet: collector not running; showing stored data from")


async def test_fallback_answers_are_the_encoded_shapes_without_the_text(home: Path) -> None:
    """The fallback turns results into JSON shapes in-process (``plain``): exactly what encoding and
    decoding them gave, for every op the fallback answers from a real store."""
    from gpufleet.collector.faces.api.ops import StoreOps, dispatch, encode
    from gpufleet.collector.model.codec import plain
    from gpufleet.collector.store.store import Store

    now = time.time()
    db = home / "h.db"
    await fill_store(db, now)
    store = await Store.open(StorageConfig(path=str(db)), readonly=True)
    try:
        table = StoreOps(store).table()
        asks = {
            "ping": {},
            "status": {},
            "hosts": {},
            "history": {"host": "n2"},
            "processes": {},
            "usage": {"by_host": True},
            "events": {},
            "jobs": {},
            "report": {},
            "alerts": {},
            "silence_list": {},
            "maintenance_list": {"include_ended": True},
        }
        assert set(asks) == set(table) - {"silence_add", "silence_expire", "maintenance_start",
                                          "maintenance_stop"}
        for form in ("objects", "rows"):
            asks["status"] = {"form": form}
            for op, args in asks.items():
                response = await dispatch(table, {"op": op, "args": args, "v": 1})
                assert response["ok"], (op, response)
                assert plain(response["result"]) == json.loads(encode(response["result"])), op
    finally:
        await store.close()
