"""The one data path: transport -> live view (records each frame once) -> store and alert engine.

Heartbeats reach the store too (the old StoreSink dropped them, so a host whose NVML calls stalled looked
silent in the database while it was alive), and the live view is the only creator of host state.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from pathlib import Path

from gpufleet.collector.service.daemon import Collector
from gpufleet.collector.settings import ApiConfig, Config, HostConfig, StorageConfig

# An agent whose sampler is stuck: one hello, then only heartbeats (what gpufleet-agent sends then).
HEARTBEATS_ONLY = """
import sys, time
from gpufleet.agent import wire
out = sys.stdout.buffer
out.write(wire.encode(wire.Hello(agent_version="9.9", hostname="stuck", ts=time.time())) + b"\\n")
out.flush()
seq = 0
while True:
    time.sleep(0.2)
    seq += 1
    out.write(wire.encode(wire.Heartbeat(ts=time.time(), seq=seq)) + b"\\n")
    out.flush()
"""


async def test_heartbeats_reach_the_store(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(HEARTBEATS_ONLY)
    host = HostConfig(name="stuck", transport="local", agent_command=f"{sys.executable} {script}",
                      interval=0.2)
    cfg = Config(hosts=[host], storage=StorageConfig(path=str(tmp_path / "f.db"), batch_max_delay=0.05),
                 api=ApiConfig(socket=str(tmp_path / "api.sock")))
    collector = Collector(cfg)
    made = collector.live.hosts["stuck"]
    await collector.start()
    try:
        state = collector.live.hosts["stuck"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while state.frames < 8 and loop.time() < deadline:
            await asyncio.sleep(0.1)
        assert state.frames >= 8 and state.agent_version == "9.9"
        await collector.store.flush()
        hello_at = state.hello.ts if state.hello else 0.0
        last_seen_live = state.last_seen
        owners = (made, state, collector.transport.states()["stuck"])
    finally:
        await collector.stop()
    db = sqlite3.connect(tmp_path / "f.db")
    try:
        (stored,) = db.execute("SELECT last_seen FROM hosts WHERE name = 'stuck'").fetchone()
    finally:
        db.close()
    assert last_seen_live is not None and stored is not None
    assert stored > hello_at + 1.0, "heartbeats after the hello moved the stored last_seen"
    assert stored <= time.time()
    assert owners[0] is owners[1] is owners[2]  # one creator of host state: the live view
