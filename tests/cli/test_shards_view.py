"""More than one collector (issue 17): 2 shards x 2 replicas of real `gpufleet collector run` over one
simulated SSH fleet; every host in exactly one shard; `gpufleet status`/`hosts`/`alerts` over all four
sockets merge the shards and deduplicate the replicas; `report` sums the shards' GPU-hours with one replica
per shard and `history` comes from the host's shard; a whole shard stopped is named in one line and the
rest is still shown; the same view through SSH (asyncssh's direct stream to the remote socket)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.shards import shard_of
from gpufleet.collector.simfleet import SimFleet

from tests.cli.cli_testkit import cli_env, run_cli, start_collector, stop_collector, until
from tests.sshserver import ssh_server

pytestmark = pytest.mark.slow
HOSTS = 8  # x 4 collectors: 32 SSH sessions, each with a real agent process
BIG = 200  # x 4 collectors: 800 SSH sessions, frames written in-process by the simulated fleet


def _yaml(fleet: SimFleet, home: Path, shard: int, replica: int, interval: str = "0.3s") -> Path:
    hosts = "\n".join(
        f"  - {{name: {h.name}, address: {h.address}, port: {h.port}, user: {h.user}, key: {h.key}, "
        f"known_hosts: {h.known_hosts}, interval: {interval}, agent_args: [{', '.join(h.agent_args)}]}}"
        for h in fleet.host_configs())
    d = home / f"s{shard}r{replica}"
    d.mkdir()
    path = d / "gpufleet.yaml"
    path.write_text(f"hosts:\n{hosts}\nshard: {shard}/2\nstorage:\n  path: {d / 'g.db'}\n"
                    f"api:\n  socket: {d / 'api.sock'}\nrules:\n  wasted:\n    for: 1s\n")
    return path


async def test_two_shards_two_replicas_one_view(home: Path, tmp_path: Path) -> None:
    env = cli_env(home)
    names = [f"n{i:02d}" for i in range(HOSTS)]
    async with SimFleet({n: "wasting" if i % 4 == 0 else "busy" for i, n in enumerate(names)},
                        interval=0.3, workdir=home / "fleet") as fleet:
        configs = {(s, r): _yaml(fleet, home, s, r) for s in (1, 2) for r in (1, 2)}
        procs = {k: await start_collector(c, env) for k, c in configs.items()}
        sockets = {k: str(c.parent / "api.sock") for k, c in configs.items()}
        every = [a for k in sorted(sockets) for a in ("--collector", sockets[k])]
        try:
            async def all_up() -> Any:
                r = await run_cli("status", "--json", *every, env=env)
                view = json.loads(r.out) if r.rc == 0 else None
                ok = (view and view["totals"]["hosts_up"] == HOSTS and r.err == ""
                      and all(h["gpus"] for h in view["hosts"]))  # every host sampled, not just greeted
                return view if ok else None

            view = await until(all_up, timeout=120)
            assert sorted(h["name"] for h in view["hosts"]) == names  # each host once, replicas merged
            assert view["totals"]["hosts"] == HOSTS

            gpus = 0
            for (s, r_), sock in sockets.items():  # each collector watches exactly its shard
                r = await run_cli("hosts", "--json", "--socket", sock, env=env)
                mine = sorted(h["name"] for h in json.loads(r.out))
                assert mine == [n for n in names if shard_of(n, 2) == s]
                if r_ == 1:
                    gpus += sum(h["gpus"] for h in json.loads(r.out))
            assert view["totals"]["gpus"] == gpus  # counted again over the merged hosts

            async def wasted() -> Any:
                r = await run_cli("alerts", "--json", *every, env=env)
                got = [a for a in json.loads(r.out)["active"] if a["rule"] == "wasted"] if r.rc == 0 else []
                return got if len(got) == HOSTS // 4 else None

            found = await until(wasted, timeout=120)  # one per wasting host, though two replicas see each
            assert len({a["fingerprint"] for a in found}) == HOSTS // 4

            # through SSH: an sshd that forwards to the collectors' sockets
            async with ssh_server() as ssh:  # the CLI finds its key and known_hosts in ~/.ssh, as a user's
                ssh.install_client(home / ".ssh" / "id_ed25519", home / ".ssh" / "known_hosts")
                over_ssh = [a for k in sorted(sockets) for a in ("--collector",
                                                                 f"me@127.0.0.1:{ssh.port}{sockets[k]}")]
                r = await run_cli("status", "--json", *over_ssh, env=env)
                assert r.rc == 0, r.err
                assert sorted(h["name"] for h in json.loads(r.out)["hosts"]) == names

            await _report_and_history(fleet, sockets, every, names, env)

            for k in ((2, 1), (2, 2)):  # shard 2 goes away entirely
                await stop_collector(procs[k])
            r = await run_cli("status", "--json", *every, env=env)
            assert r.rc == 0, r.err
            assert sorted(h["name"] for h in json.loads(r.out)["hosts"]) == \
                [n for n in names if shard_of(n, 2) == 1]
            unreachable = [ln for ln in r.err.splitlines() if "did not answer" in ln]
            assert len(unreachable) == 2 and all("s2r" in ln for ln in unreachable), r.err
        finally:
            await asyncio.gather(*(stop_collector(p) for p in procs.values()))


async def test_two_hundred_hosts_over_ssh(home: Path) -> None:
    """The issue's size: 200 simulated hosts (frames written in-process by one shared SSH server, so no
    agent process per session) x 2 shards x 2 replicas, 800 real SSH sessions: every host in exactly one
    shard, the merged status shows all 200 up and sampled, report and history merge as above, a stopped
    shard is named and the rest shown."""
    names = [f"g{i:03d}" for i in range(BIG)]
    env = cli_env(home)
    async with SimFleet(names, mode="inproc", shared_server=True, interval=1.0, gpus=2,
                        workdir=home / "fleet") as fleet:
        configs = {(s, r): _yaml(fleet, home, s, r, interval="1s") for s in (1, 2) for r in (1, 2)}
        procs = {k: await start_collector(c, env) for k, c in configs.items()}
        sockets = {k: str(c.parent / "api.sock") for k, c in configs.items()}
        every = [a for k in sorted(sockets) for a in ("--collector", sockets[k])]
        try:
            async def all_up() -> Any:
                r = await run_cli("status", "--json", *every, env=env)
                view = json.loads(r.out) if r.rc == 0 else None
                ok = view and view["totals"]["hosts_up"] == BIG and all(h["gpus"] for h in view["hosts"])
                return view if ok and r.err == "" else None

            view = await until(all_up, timeout=150)
            assert [h["name"] for h in view["hosts"]] == names and view["totals"]["gpus"] == 2 * BIG
            mine: dict[int, set[str]] = {1: set(), 2: set()}
            for (s, _r), sock in sockets.items():
                r = await run_cli("hosts", "--json", "--socket", sock, env=env)
                got = {h["name"] for h in json.loads(r.out)}
                assert got == {n for n in names if shard_of(n, 2) == s}
                mine[s] |= got
            assert not mine[1] & mine[2] and mine[1] | mine[2] == set(names)  # each host in exactly one
            assert 0.4 < len(mine[1]) / BIG < 0.6
            await _report_and_history(fleet, sockets, every, names, env)

            for k in ((2, 1), (2, 2)):
                procs[k].send_signal(signal.SIGTERM)
                await asyncio.wait_for(procs[k].wait(), 30)
            r = await run_cli("status", *every, env=env)  # the screen this time
            assert r.rc == 0
            assert [ln for ln in r.err.splitlines() if "did not answer" in ln and "s2r" in ln] and \
                len(r.err.splitlines()) == 2, r.err
            shown = {n for n in names if n in r.out.split()}
            assert shown == mine[1], sorted(shown ^ mine[1])[:5]
        finally:
            await asyncio.gather(*(stop_collector(p) for p in procs.values()))


async def _report_and_history(fleet: SimFleet, sockets: dict[tuple[int, int], str], every: list[str],
                              names: list[str], env: dict[str, str]) -> None:
    """`report` sums the shards' GPU-hours, one replica per shard (never both); `history` is answered by
    the shard that watches the host. Once every replica has credited GPU time to each of its hosts (a
    host that came up last on a loaded runner may have had one sample only: nothing held yet), the fleet
    stops, so the GPU-hours hold still meanwhile."""

    async def reports() -> dict[tuple[int, int], Any]:
        out = {}
        for k, sock in sockets.items():
            r = await run_cli("report", "--since", "1h", "--format", "json", "--socket", sock, env=env)
            assert r.rc == 0, r.err
            out[k] = json.loads(r.out)
        return out

    async def every_host_held() -> bool:
        return all({h["name"] for h in rep["by_host"] if h["gpu_hours_held"] > 0}
                   >= {n for n in names if shard_of(n, 2) == s} for (s, _r), rep in (await reports()).items())

    await until(every_host_held, timeout=120)
    await fleet.stop()

    async def still() -> Any:  # the last frames credited and written: two reads in a row agree
        first = await reports()
        await asyncio.sleep(1.0)
        second = await reports()
        same = all(first[k]["total"] == second[k]["total"] for k in first)
        return second if same else None

    each = await until(still, timeout=60)
    r = await run_cli("report", "--since", "1h", "--format", "json", *every, env=env)
    assert r.rc == 0 and r.err == "", r.err
    merged = json.loads(r.out)
    chosen = [max((each[(s, 1)], each[(s, 2)]), key=lambda d: d["capacity"]["gpu_hours_observed"])
              for s in (1, 2)]
    want = {h["name"]: h["gpu_hours_held"] for d in chosen for h in d["by_host"]}
    assert sorted(want) == names  # every host held GPU time, in one shard
    assert {h["name"]: h["gpu_hours_held"] for h in merged["by_host"]} == pytest.approx(want, abs=2e-3)
    assert merged["total"]["gpu_hours_held"] == pytest.approx(  # (each figure is rounded to 3 decimals)
        sum(d["total"]["gpu_hours_held"] for d in chosen), abs=2e-3)
    everything = sum(d["total"]["gpu_hours_held"] for d in each.values())
    assert merged["total"]["gpu_hours_held"] < 0.75 * everything  # replicas not counted twice
    assert merged["capacity"]["gpu_hours_observed"] == pytest.approx(
        sum(d["capacity"]["gpu_hours_observed"] for d in chosen), abs=5e-3)
    text = await run_cli("report", "--since", "1h", *every, env=env)
    assert text.rc == 0 and "By host (GPU-hours):" in text.out, text.err

    for name in (names[0], names[-1]):  # one host of each shard (or both of one; either way its shard)
        r = await run_cli("history", "--host", name, "--since", "1h", "--json", *every, env=env)
        assert r.rc == 0 and r.err == "", r.err
        hist = json.loads(r.out)
        assert hist["host"] == name and hist["series"] and hist["usage"]
        r = await run_cli("report", "--since", "1h", "--format", "json", "--host", name, *every, env=env)
        assert r.rc == 0 and r.err == "", r.err  # the shards that do not watch it refuse it quietly
        assert [h["name"] for h in json.loads(r.out)["by_host"]] == [name]
    r = await run_cli("history", "--host", "nowhere", *every, env=env)
    assert r.rc == 1 and "unknown host" in r.err and r.err.count("\n") == 1, r.err


