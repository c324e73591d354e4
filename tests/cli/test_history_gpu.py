"""``history --gpu N`` sums only that GPU's hours (issue 10: it showed the whole host's figures)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store.store import Store

from tests.builders import gpu, proc, snap
from tests.cli.cli_testkit import cli_env, run_cli

GIB = 1 << 30


async def _fill(db: Path, now: float) -> None:
    """Host n1: GPU 0 held by alice at 0 % util for 60 s, GPU 1 never held by anyone."""
    store = await Store.open(StorageConfig(path=str(db)))
    try:
        for k in range(61):
            ts = now - 120 + k
            held = gpu(0, uuid="GPU-held", util=0, mem=8 * GIB,
                       procs=[proc(4242, mem=8 * GIB, start=now - 3600, command="python nb.py")])
            free = gpu(1, uuid="GPU-free", util=0, mem=0)
            store.submit_snapshot("n1", snap(held, free, ts=ts, seq=k), ts)
        await store.flush()
    finally:
        await store.close()


def _hours(result: dict[str, object]) -> tuple[float, float]:
    usage = result["usage"]
    assert isinstance(usage, list)
    return (sum(u["gpu_hours_held"] for u in usage), sum(u["gpu_hours_wasted"] for u in usage))


async def test_unheld_gpu_shows_zero_held(home: Path) -> None:
    db = home / "data" / "gpufleet" / "gpufleet.db"
    now = time.time()
    await _fill(db, now)
    env = cli_env(home)  # no collector: the CLI reads the real file read-only

    r = await run_cli("history", "--host", "n1", "--gpu", "1", "--since", "1h", "--json", env=env)
    assert r.rc == 0, r.err
    assert _hours(json.loads(r.out)) == (0.0, 0.0)

    r = await run_cli("history", "--host", "n1", "--gpu", "0", "--since", "1h", "--json", env=env)
    assert r.rc == 0, r.err
    held, wasted = _hours(json.loads(r.out))
    assert abs(held - 60 / 3600) < 1e-6 and abs(wasted - 60 / 3600) < 1e-6

    r = await run_cli("history", "--host", "n1", "--gpu", "1", "--since", "1h", env=env)
    assert r.rc == 0, r.err
    assert "GPU-hours 0.0 held, 0.0 used, 0.0 wasted" in r.out


async def test_stored_status_classifies_with_the_configured_thresholds(home: Path) -> None:
    """The fallback's status reads the config's rules, as the collector does: a GPU with 512 MiB in use and
    nothing running is free capacity when ``idle.max_memory_mib`` is 1024, busy under the default 256."""
    db = home / "gpufleet.db"
    now = time.time()
    store = await Store.open(StorageConfig(path=str(db)))
    try:
        g = gpu(0, uuid="GPU-x", util=0, mem=512 << 20)
        store.submit_snapshot("n1", snap(g, ts=now - 5, seq=1), now - 5)
        await store.flush()
    finally:
        await store.close()
    env = cli_env(home)
    states = {}
    for limit in (256, 1024):
        cfg = home / f"gpufleet-{limit}.yaml"
        cfg.write_text(f"storage:\n  path: {db}\napi:\n  socket: {home / 'none.sock'}\n"
                       f"rules:\n  idle:\n    max_memory_mib: {limit}\n")
        r = await run_cli("status", "-c", str(cfg), "--json", env=env)
        assert r.rc == 0, r.err
        states[limit] = json.loads(r.out)["hosts"][0]["gpus"][0]["state"]
    assert states == {256: "busy", 1024: "idle"}
