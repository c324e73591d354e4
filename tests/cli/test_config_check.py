"""`gpufleet config check`, the real command: one machine listed twice is a warning naming both entries;
a known_hosts that is /dev/null in disguise and a host list past max_hosts are errors with file:line."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cli.cli_testkit import cli_env, run_cli


def _write(home: Path, text: str) -> Path:
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "known_hosts").write_text("")
    cfg = home / "gpufleet.yaml"
    cfg.write_text(text + f"storage: {{path: {home / 'db.sqlite'}}}\napi: {{socket: {home / 'g.sock'}}}\n")
    return cfg


async def test_two_entries_for_one_machine_warn_and_pass(home: Path) -> None:
    cfg = _write(home, """hosts:
  - {name: gpu-a, address: 127.0.0.1, port: 2222}
  - {name: gpu-a-alias, address: localhost, port: 2222}
  - {name: gpu-b, address: 127.0.0.1, port: 2223}
""")
    r = await run_cli("config", "check", "-c", str(cfg), env=cli_env(home))
    assert r.rc == 0, r.err
    assert r.out.startswith(f"{cfg}: ok: 3 hosts")
    [warning] = r.err.splitlines()
    assert warning.startswith(f"{cfg}:3: hosts[gpu-a-alias].address: warning: 'gpu-a-alias' (localhost port "
                              f"2222) and 'gpu-a' (127.0.0.1 port 2222, {cfg}:2) are the same machine")


async def test_known_hosts_in_disguise_is_refused(home: Path) -> None:
    (home / "kh").symlink_to("/dev/null")
    for spelling in ("/dev/./null", "/dev/null/", str(home / "kh")):
        cfg = _write(home, f"""hosts:
  - name: n1
    host_key_policy: accept-new
    known_hosts: {spelling}
""")
        r = await run_cli("config", "check", "-c", str(cfg), env=cli_env(home))
        assert r.rc == 1 and r.out == "", r.out
        first, last = r.err.splitlines()
        assert first.startswith(f"{cfg}:4: hosts[n1].known_hosts: known_hosts: '{spelling}' is a character "
                                "device")
        assert last == f"gpufleet: {cfg}: 1 error"


async def test_a_million_hosts_is_one_error_and_quick(home: Path) -> None:
    cfg = _write(home, "hosts:\n" + "".join(f"  - r{i}-[0-9999]\n" for i in range(100)))
    t0 = time.monotonic()
    r = await run_cli("config", "check", "-c", str(cfg), env=cli_env(home))
    took = time.monotonic() - t0
    assert r.rc == 1
    first, last = r.err.splitlines()
    assert first.startswith(f"{cfg}:3: hosts[r1-[0-9999]]: the host list names 1000000 hosts, more than "
                            "max_hosts (10000)")
    assert last == f"gpufleet: {cfg}: 1 error" and took < 5, took
