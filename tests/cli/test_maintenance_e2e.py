"""Maintenance end to end: `gpufleet collector run` as a subprocess dialling a simulated fleet over real SSH
on loopback (the real agent as a subprocess per session), driven by the real `gpufleet` CLI, with a real
webhook receiver, the /metrics endpoint and the web page's API.

`maintenance start` ends the host's agent session (its agent process exits: the GPUs' device files are
free), the collector does not redial it, every face shows "maintenance" with who, why and until when, and
no host_down fires or reaches the webhook for it while a host without a window is paged; a host already
paged is muted for the window (listed as muted, not lost) and its resolution still arrives afterwards; a
restarted collector keeps the windows; `maintenance stop` and the end of a window both bring the host back
at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.simfleet import SimFleet

from tests.builders import free_port
from tests.cli.cli_testkit import cli_env, run_cli, start_collector, stop_collector, until, write_config
from tests.webhook import Webhook, webhook

pytestmark = pytest.mark.slow
ME = pwd.getpwuid(os.geteuid()).pw_name


def _alerts_about(hook: Webhook, host: str) -> list[tuple[str, str]]:
    """(notification status, rule) of every alert about ``host`` the webhook accepted so far, in order."""
    bodies = [json.loads(body) for _at, body in hook.got]
    return [(b.get("status", ""), a["labels"].get("rule", "")) for b in bodies for a in b.get("alerts", [])
            if a["labels"].get("host") == host]


def _write_config(path: Path, fleet: SimFleet, home: Path) -> None:
    """Each fake agent with its own GPU UUIDs; host_down at once and resolved at once, so what reaches the
    webhook is decided by this test alone."""
    write_config(path, fleet, home, own_hostnames=True)
    path.write_text(path.read_text() + "  host_down:\n    for: 0s\n    keep_firing_for: 0s\n")


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


async def _get(url: str) -> str:
    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
            return str(r.read().decode())

    return await asyncio.to_thread(fetch)


async def test_maintenance_lets_go_silences_survives_a_restart_and_ends(home: Path) -> None:
    env = cli_env(home)
    cfg = home / "gpufleet.yaml"
    metrics_port, web_port = free_port(), free_port()
    with webhook() as hook:
        async with SimFleet({"n1": "busy", "n2": "busy"}, interval=0.2, workdir=home / "fleet") as fleet:
            _write_config(cfg, fleet, home)
            cfg.write_text(cfg.read_text() + f"""alerting:
  group_wait: 0s
  group_interval: 1s
notifiers:
  - name: hook
    kind: webhook
    url: {hook.url}/hook
metrics:
  listen: 127.0.0.1:{metrics_port}
web:
  enabled: true
  listen: 127.0.0.1:{web_port}
""")

            async def cli(*args: str) -> Any:
                r = await run_cli(*args, "-c", str(cfg), env=env)
                assert r.rc == 0 and r.err == "", (args, r.rc, r.err)
                return json.loads(r.out) if "--json" in args else r.out

            async def hosts_now() -> dict[str, dict[str, Any]]:
                r = await run_cli("status", "--json", "-c", str(cfg), env=env)
                if r.rc != 0 or r.err:  # not answering yet (or the stored fallback while it starts)
                    return {}
                return {h["name"]: h for h in json.loads(r.out)["hosts"]}

            async def status_of(host: str, want: str) -> Any:
                return (await hosts_now()).get(host, {}).get("status") == want

            proc = await start_collector(cfg, env)
            try:
                await until(lambda: _all_up(hosts_now, ("n1", "n2")))
                [agent] = fleet.agent_pids("n1")
                assert _running(agent)
                # one collector for the whole fleet: a name it does not watch is a typo, and nothing starts
                r = await run_cli("maintenance", "start", "--host", "n1,nX", "--comment", "x", "-c", str(cfg),
                                  env=env)
                assert (r.rc, r.out, r.err) == (1, "", "gpufleet: unknown host 'nX' (known: n1, n2)\n")
                assert fleet.agent_pids("n1") == [agent] and await cli("maintenance", "list", "--json") == []

                # ---- start: the session ends, the agent exits, nothing redials
                began = time.time()
                out = await cli("maintenance", "start", "--host", "n1", "--for", "1h", "--comment",
                                "driver upgrade")
                assert out.startswith("n1: in maintenance until ") and "agent session ended" in out, out
                await until(lambda: _async(not _running(agent)), timeout=15)
                assert fleet.sessions("n1") == []
                dialled = fleet.hosts["n1"].sessions_started

                n1 = (await hosts_now())["n1"]
                assert n1["status"] == "maintenance"
                window = n1["maintenance"]
                assert (window["comment"], window["created_by"]) == ("driver upgrade", ME)
                assert abs(window["ends_at"] - (began + 3600)) < 30
                view = await cli("status", "--json")
                assert view["totals"]["hosts_maintenance"] == 1 and view["totals"]["hosts_down"] == 0
                screen = await cli("status")
                line = r"n1\s+maintenance\s+driver upgrade \(by \w+\) · until \d\d:\d\d \(in \d"
                assert re.search(line, screen), screen
                assert "1 in maintenance" in screen
                [info] = [h for h in await cli("hosts", "--json") if h["name"] == "n1"]
                assert info["status"] == "maintenance" and info["maintenance"]["comment"] == "driver upgrade"
                assert "maintenance" in await cli("hosts")
                [listed] = await cli("maintenance", "list", "--json")
                assert (listed["host"], listed["created_by"]) == ("n1", ME)
                assert "driver upgrade" in await cli("maintenance", "list")

                metrics = await _get(f"http://127.0.0.1:{metrics_port}/metrics")
                assert 'gpufleet_host_maintenance{host="n1"} 1.0' in metrics
                assert 'gpufleet_host_maintenance{host="n2"} 0.0' in metrics
                assert 'gpufleet_collector_hosts{status="maintenance"} 1.0' in metrics
                page = json.loads(await _get(f"http://127.0.0.1:{web_port}/api/state"))
                [row] = [h for h in page["hosts"] if h[0] == "n1"]
                assert row[1] == "maintenance" and row[7][:2] == [ME, "driver upgrade"]
                assert page["totals"]["hosts_maintenance"] == 1

                # ---- the control: a host that goes away without a window is paged
                await fleet.cut("n2")
                await until(lambda: _async(("firing", "host_down") in _alerts_about(hook, "n2")), timeout=30)
                await asyncio.sleep(max(0.0, began + 4 - time.time()))  # 4 s of windows at 0.05-60 s backoff
                assert fleet.hosts["n1"].sessions_started == dialled, "the collector redialled n1"
                assert (await hosts_now())["n1"]["status"] == "maintenance"

                # ---- a host already paged: muted for the window, not lost
                await cli("maintenance", "start", "--host", "n2", "--for", "1h", "--comment", "reboot")
                alerts = await cli("alerts", "--json")
                [down] = [a for a in alerts["active"] if a["labels"] == {"host": "n2", "rule": "host_down"}]
                assert down["state"] == "firing" and down["fingerprint"] in alerts["muted"]
                assert any(s["matchers"] == {"host": "n2"} and "reboot" in s["comment"]
                           for s in alerts["silences"])

                # ---- a restart keeps both windows: n1 is not dialled
                err = await stop_collector(proc)
                assert proc.returncode == 0, err[-2000:]
                audit = (rf"maintenance: n1 started by {ME} for 1h00m\S*, until .* UTC \(silence \d+\): "
                         "driver upgrade")
                assert re.search(audit, err), err[-3000:]
                proc = await start_collector(cfg, env)
                await until(lambda: status_of("n2", "maintenance"))
                assert (await hosts_now())["n1"]["status"] == "maintenance"
                await asyncio.sleep(1.5)
                assert fleet.hosts["n1"].sessions_started == dialled, "the restarted collector dialled n1"

                # ---- stop: back at once
                stopped = time.time()
                out = await cli("maintenance", "stop", "--host", "n1")
                assert out.startswith("n1: maintenance ended after "), out
                await until(lambda: status_of("n1", "up"), timeout=20)
                assert time.time() - stopped < 15
                assert fleet.hosts["n1"].sessions_started == dialled + 1

                # ---- the end of a window: n2 (reachable again) comes back by itself, its page resolves
                await fleet.restore("n2")
                await cli("maintenance", "start", "--host", "n2", "--for", "2s", "--comment", "short one")
                await until(lambda: status_of("n2", "up"), timeout=30)
                await until(lambda: _async(("resolved", "host_down") in _alerts_about(hook, "n2")),
                            timeout=30)
                assert _alerts_about(hook, "n2") == [("firing", "host_down"), ("resolved", "host_down")]
                assert _alerts_about(hook, "n1") == [], "a host in maintenance was paged"

                windows = await cli("maintenance", "list", "--all", "--json")
                assert [(w["host"], w["comment"]) for w in windows] == [
                    ("n1", "driver upgrade"), ("n2", "reboot"), ("n2", "short one")]
                assert all(w["ends_at"] <= time.time() for w in windows)
                assert await cli("maintenance", "list", "--json") == []
            finally:
                err = await stop_collector(proc)
            assert proc.returncode == 0, err[-2000:]


async def _async(value: Any) -> Any:
    return value


async def _all_up(hosts_now: Any, names: tuple[str, ...]) -> bool:
    hosts = await hosts_now()
    return all(hosts.get(n, {}).get("status") == "up" for n in names)


async def test_usage_errors_send_nothing(home: Path) -> None:
    """Bad --for (absurd, over the bound, zero) and a missing comment are usage errors before any request:
    no collector is running here, so anything sent would fail differently."""
    env = cli_env(home)
    for args, err in (
        (("--for", "99999999999d"), "gpufleet: bad --for '99999999999d': duration '99999999999d' is too long "
                                    "(at most 100 years)\n"),
        (("--for", "8d"), "gpufleet: bad --for '8d': maintenance lasts at most 7 days; take a host that is "
                          "away longer out of the config\n"),
        (("--for", "0s"), "gpufleet: bad --for '0s': expected a duration like 30m, 2h, 1d\n"),
        (("--comment", "  "), "gpufleet: maintenance needs a comment saying why (--comment \"driver "
                              "upgrade\")\n"),
    ):
        full = ("--comment", "x", *args) if "--comment" not in args else args
        r = await run_cli("maintenance", "start", "--host", "n1", *full, env=env)
        assert (r.rc, r.out, r.err) == (2, "", err), args


async def test_maintenance_over_shards(home: Path) -> None:
    """``workers: 2`` (two shards on one box, merged by the CLI as for remote collectors): a glob reaches the
    hosts of both shards, a name reaches the one shard that watches it (the other refuses it quietly), the
    list is merged, and a host no collector watches is one clear error."""
    from gpufleet.collector.shards import shard_of

    names = ["n1", "n2", "n5", "n6"]  # shards 2, 2, 1, 1
    env = cli_env(home)
    cfg = home / "gpufleet.yaml"
    async with SimFleet({n: "busy" for n in names}, interval=0.2, workdir=home / "fleet") as fleet:
        _write_config(cfg, fleet, home)
        cfg.write_text(cfg.read_text() + "workers: 2\n")
        assert {shard_of(n, 2) for n in names} == {1, 2}, "the test needs hosts on both shards"

        async def statuses() -> dict[str, str]:
            r = await run_cli("status", "--json", "-c", str(cfg), env=env)
            if r.rc != 0 or r.err:
                return {}
            return {h["name"]: h["status"] for h in json.loads(r.out)["hosts"]}

        proc = await start_collector(cfg, env)
        try:
            await until(lambda: _all_up(lambda: _hosts_of(statuses), tuple(names)), timeout=60)
            r = await run_cli("maintenance", "start", "--host", "n*", "--for", "10m", "--comment", "all",
                              "-c", str(cfg), env=env)
            assert r.rc == 0 and r.err == "", r.err
            assert sorted(line.split(":")[0] for line in r.out.splitlines()) == names
            await until(lambda: _async_statuses(statuses, dict.fromkeys(names, "maintenance")))
            await until(lambda: _async(all(fleet.sessions(n) == [] for n in names)), timeout=15)

            r = await run_cli("maintenance", "list", "--json", "-c", str(cfg), env=env)
            assert [w["host"] for w in json.loads(r.out)] == names

            r = await run_cli("maintenance", "stop", "--host", "n5", "-c", str(cfg), env=env)
            assert r.rc == 0 and r.err == "" and r.out.startswith("n5: maintenance ended after "), r.err
            await until(lambda: _async_statuses(statuses, {**dict.fromkeys(names, "maintenance"),
                                                           "n5": "up"}))

            r = await run_cli("maintenance", "stop", "--host", "n9", "-c", str(cfg), env=env)
            assert (r.rc, r.out) == (1, "") and r.err.startswith("gpufleet: unknown host 'n9'"), r.err
            # names on both shards and one on none: each shard changes its own, the stray one is named
            r = await run_cli("maintenance", "stop", "--host", "n1,n6,n9", "-c", str(cfg), env=env)
            assert sorted(line.split(":")[0] for line in r.out.splitlines()) == ["n1", "n6"], r.out
            assert (r.rc, r.err) == (1, "gpufleet: not changed: n9 (not in maintenance, or no collector "
                                        "watches it)\n")
            r = await run_cli("maintenance", "start", "--host", "n1,n6", "--comment", "again", "-c", str(cfg),
                              env=env)
            assert r.rc == 0 and sorted(line.split(":")[0] for line in r.out.splitlines()) == ["n1", "n6"]
            r = await run_cli("maintenance", "stop", "--host", "n5", "-c", str(cfg), env=env)
            assert (r.rc, r.err) == (1, "gpufleet: n5 is not in maintenance\n")
        finally:
            err = await stop_collector(proc)
        assert proc.returncode == 0, err[-2000:]


async def _hosts_of(statuses: Any) -> dict[str, dict[str, str]]:
    return {n: {"status": s} for n, s in (await statuses()).items()}


async def _async_statuses(statuses: Any, want: dict[str, str]) -> bool:
    return bool(await statuses() == want)
