"""Config mistakes an operator actually makes, and the collector refusing to start on any of them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.config import ConfigErrors, load_config


def only(errs: ConfigErrors) -> Any:
    assert len(errs.errors) == 1, str(errs)
    return errs.errors[0]


def test_default_known_hosts_missing_under_strict(fail: Any, load: Any, home: Path) -> None:
    (home / ".ssh" / "known_hosts").unlink()
    e = only(fail("hosts:\n  - name: n[1-3]\n  - m1\n"))
    assert (e.line, e.key) == (2, "hosts[n[1-3]].known_hosts")
    assert str(home / ".ssh" / "known_hosts") in e.reason and "n1 (and 3 more hosts)" in e.reason
    assert "accept-new" in e.reason and "ssh-keyscan" in e.reason
    # accept-new learns keys, a local host has none, an explicit file is checked on its own
    load("defaults: {host_key_policy: accept-new}\nhosts: [n1]\n")
    load("hosts:\n  - {name: me, transport: local}\n")
    kh = home / "kh"
    kh.write_text("")
    load(f"hosts:\n  - {{name: n1, known_hosts: {kh}}}\n")


def test_explicit_known_hosts_and_key_missing_are_both_reported(fail: Any, tmp_path: Path) -> None:
    errs = fail(f"""
        hosts:
          - name: n1
            known_hosts: {tmp_path}/absent_known_hosts
            key: {tmp_path}/absent_key
        """)
    got = {(e.line, e.key) for e in errs.errors}
    assert got == {(3, "hosts[n1].known_hosts"), (4, "hosts[n1].key")}
    assert "known_hosts file not found" in str(errs) and "private key file not found" in str(errs)


def test_quoted_port_says_how_to_fix(fail: Any) -> None:
    e = only(fail('hosts:\n  - name: n1\n    port: "22"\n'))
    assert (e.line, e.key) == (3, "hosts[n1].port") and "without quotes: 22" in e.reason


def test_tab_indentation(fail: Any) -> None:
    e = only(fail("hosts:\n\t- n1\n"))
    assert e.line == 2 and "tabs" in e.reason


def test_hosts_as_a_mapping(fail: Any) -> None:
    e = only(fail("hosts:\n  n1:\n    port: 22\n"))
    assert (e.line, e.key) == (2, "hosts") and "list item" in e.reason


def test_empty_hosts_is_an_error_but_an_empty_list_is_not(fail: Any, load: Any) -> None:
    e = only(fail("hosts:\n# - n1\nmetrics: {listen: '127.0.0.1:9835'}\n"))
    assert (e.line, e.key) == (1, "hosts") and "empty" in e.reason
    assert load("hosts: []\n").hosts == []


def test_duplicate_keys_name_both_lines(fail: Any) -> None:
    errs = fail("""
        hosts: [a]
        defaults:
          port: 22
          port: 2222
        hosts: [b]
        rules: {wasted: {for: 1m, for: 2m}}
        """)
    got = [(e.line, e.key) for e in errs.errors]
    assert got == [(4, "defaults.port"), (5, "hosts"), (6, "rules.wasted.for")]
    assert [e.reason for e in errs.errors] == ["duplicate key 'port' (first at line 3)",
                                               "duplicate key 'hosts' (first at line 1)",
                                               "duplicate key 'for' (first at line 6)"]


@pytest.mark.parametrize("text, key", [
    ("defaults: {port: twenty}\n", "defaults.port"),
    ("defaults: {interval: [1]}\n", "defaults.interval"),
    ("defaults: {tags: gpu}\n", "defaults.tags"),
    ("defaults: {keepalive_count_max: 1.5}\n", "defaults.keepalive_count_max"),
    ("defaults: [port, 22]\n", "defaults"),
])
def test_wrong_type_inside_defaults(fail: Any, text: str, key: str) -> None:
    e = only(fail(text + "hosts: [n1]\n"))
    assert (e.line, e.key) == (1, key)


# ------------------------------------------------------------------------------ as a subprocess

BROKEN = """\
defaults:
  port: "22"
  interval: fast
hosts:
  - name: n1
    address: 127.0.0.1
    port: {port}
    key: {tmp}/no_such_key
    known_hosts: {tmp}/no_such_known_hosts
    colour: blue
storage:
  path: {tmp}/state/gpufleet.db
  raw_retention: 3x
api:
  socket: {tmp}/state/gpufleet.sock
metrics:
  listen: 127.0.0.1:{metrics}
"""
EXPECTED = [(2, "defaults.port"), (3, "defaults.interval"), (8, "hosts[n1].key"),
            (9, "hosts[n1].known_hosts"), (10, "hosts[n1].colour"), (13, "storage.raw_retention")]


def _gpufleet(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    env.pop("GPUFLEET_CONFIG", None)
    return subprocess.run([sys.executable, "-c", "from gpufleet.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("command", [("collector", "run"), ("config", "check")])
def test_broken_config_stops_before_anything_starts(command: tuple[str, ...], tmp_path: Path,
                                                    home: Path) -> None:
    ssh = socket.create_server(("127.0.0.1", 0))  # where the host would be dialled
    ssh.settimeout(0.2)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    cfg = tmp_path / "broken.yaml"
    cfg.write_text(BROKEN.format(tmp=tmp_path, port=ssh.getsockname()[1], metrics=metrics_port))
    with ssh:
        r = _gpufleet(*command, "-c", str(cfg), home=home)
        with pytest.raises(TimeoutError):
            ssh.accept()  # no SSH connection was attempted
    assert r.returncode != 0, r
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith(f"{cfg}:")]
    got = []
    for ln in lines:
        _path, line, key, _rest = ln.split(":", 3)
        got.append((int(line), key.strip()))
    assert got == EXPECTED, r.stderr
    assert r.stderr.splitlines()[-1].startswith("gpufleet: ") and str(cfg) in r.stderr.splitlines()[-1]
    # nothing was created: no state directory, socket or database; the metrics port is still free
    assert not (tmp_path / "state").exists()
    with socket.create_server(("127.0.0.1", metrics_port)):
        pass


def test_same_errors_from_load_config_and_config_check(tmp_path: Path, home: Path) -> None:
    cfg = tmp_path / "broken.yaml"
    cfg.write_text(BROKEN.format(tmp=tmp_path, port=2222, metrics=9835))
    with pytest.raises(ConfigErrors) as info:
        load_config(cfg)
    r = _gpufleet("config", "check", "-c", str(cfg), home=home)
    assert r.stderr.splitlines()[:-1] == str(info.value).splitlines()
    assert r.stdout == ""
