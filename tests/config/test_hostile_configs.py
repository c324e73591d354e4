"""Configs that would switch host-key checks off or build a million hosts are refused with file:line;
two entries for one machine are warned about (issues 10 and 12, items 5 and 7)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.config import expand_hostlist, hosts, load_config
from gpufleet.collector.config.hostlist import hostlist_size


def only(errs: Any) -> Any:
    assert len(errs.errors) == 1, str(errs)
    return errs.errors[0]


@pytest.mark.parametrize("spelling", ["/dev/./null", "/dev/null/", "/dev//null", "/dev/../dev/null", "link",
                                      "dir"])
@pytest.mark.parametrize("policy", ["accept-new", "strict"])
def test_known_hosts_that_is_no_file_is_refused(fail: Any, tmp_path: Path, spelling: str,
                                                policy: str) -> None:
    (tmp_path / "link").symlink_to("/dev/null")
    (tmp_path / "dir").mkdir()
    e = only(fail(f"hosts:\n  - name: n1\n    host_key_policy: {policy}\n    known_hosts: {spelling}\n"))
    assert (e.line, e.key) == (4, "hosts[n1].known_hosts")
    assert "not a file" in e.reason and "disable host key verification" in e.reason
    assert ("a directory" if spelling == "dir" else "character device") in e.reason


def test_known_hosts_in_defaults_and_the_default_file(fail: Any, home: Path) -> None:
    e = only(fail("defaults:\n  known_hosts: /dev/./null\n  host_key_policy: accept-new\nhosts: [n1]\n"))
    assert (e.line, e.key) == (2, "defaults.known_hosts") and "character device" in e.reason
    kh = home / ".ssh" / "known_hosts"
    kh.unlink()
    kh.symlink_to("/dev/null")
    e = only(fail("defaults: {host_key_policy: accept-new}\nhosts:\n  - n1\n"))
    assert (e.line, e.key) == (3, "hosts[n1].known_hosts") and "character device (/dev/null)" in e.reason


def test_known_hosts_regular_or_not_yet_there_is_fine(load: Any, tmp_path: Path) -> None:
    (tmp_path / "kh").write_text("")
    (tmp_path / "to_kh").symlink_to(tmp_path / "kh")
    for path in (tmp_path / "kh", tmp_path / "to_kh", tmp_path / "later"):
        cfg = load(f"hosts:\n  - {{name: n1, host_key_policy: accept-new, known_hosts: {path}}}\n")
        assert cfg.hosts[0].known_hosts == str(path)


def test_host_ranges_are_sized_without_expanding() -> None:
    t0 = time.perf_counter()
    assert hostlist_size("r[0-9999]n[0-9999]x[1-9,20-29]") == 10**8 * 19
    assert hostlist_size("plain") == 1 and hostlist_size("n[01-16]") == 16
    assert time.perf_counter() - t0 < 0.01
    with pytest.raises(ValueError, match="more than 10000"):
        expand_hostlist("n[0-9999,0-9999]")
    assert len(expand_hostlist("n[0-9999,0-9999]", limit=20000)) == 20000


def test_a_million_hosts_is_refused_fast_at_the_crossing_entry(write: Any) -> None:
    text = "hosts:\n" + "".join(f"  - r{i}-[0-9999]\n" for i in range(100))
    path = write(text)
    t0 = time.perf_counter()
    with pytest.raises(Exception) as info:
        load_config(path, env={})
    took = time.perf_counter() - t0
    e = only(info.value)
    assert (e.path, e.line, e.key) == (str(path), 3, "hosts[r1-[0-9999]]")
    assert "names 1000000 hosts, more than max_hosts (10000)" in e.reason and "20000" in e.reason
    assert took < 0.5, took


def test_max_hosts_is_configurable(load: Any, fail: Any) -> None:
    e = only(fail("max_hosts: 5\nhosts: [a, b, 'n[1-4]']\n"))
    assert (e.line, e.key) == (2, "hosts[n[1-4]]") and "names 6 hosts, more than max_hosts (5)" in e.reason
    cfg = load("max_hosts: 20000\nhosts: ['r1-[0-9999]', 'r2-[0-9999]']\n")
    assert len(cfg.hosts) == 20000 and cfg.max_hosts == 20000
    assert len(load("hosts: ['n[0-9999]']\n").hosts) == 10000  # the default cap is inclusive
    e = only(fail("max_hosts: 0\nhosts: [a]\n"))
    assert (e.line, e.key) == (1, "max_hosts")


def test_same_address_and_port_is_a_warning(load: Any, tmp_path: Path) -> None:
    """Literal duplicates are found without a lookup; names only with a resolver (the system's, loopback)."""
    text = """
        defaults: {host_key_policy: accept-new}
        hosts:
          - {name: gpu-a, address: 127.0.0.1, port: 2222}
          - {name: gpu-a-alias, address: localhost, port: 2222}
          - {name: gpu-a-copy, address: 127.0.0.1, port: 2222}
          - {name: gpu-b, address: 127.0.0.1, port: 2223}
          - {name: far, address: 127.0.0.1, port: 2222, jump: gpu-b}
    """
    cfg = load(text)
    assert len(cfg.warnings) == 1 and "gpu-a-copy" in cfg.warnings[0] and "gpu-a-alias" not in cfg.warnings[0]
    path = tmp_path / "gpufleet.yaml"
    cfg = load_config(path, env={}, resolver=hosts.system_resolver)
    assert [w.split(":")[1] for w in cfg.warnings] == ["4", "5"]
    alias, copy = cfg.warnings
    assert alias.startswith(f"{path}:4: hosts[gpu-a-alias].address: warning: 'gpu-a-alias' (localhost port "
                            f"2222) and 'gpu-a' (127.0.0.1 port 2222, {path}:3) are the same machine")
    assert "127.0.0.1 port 2222" in alias and "remove one entry" in alias
    assert copy.startswith(f"{path}:5: hosts[gpu-a-copy].address: warning: 'gpu-a-copy'")
    assert not any("gpu-b" in w or "'far'" in w for w in cfg.warnings)


def test_a_hung_name_lookup_does_not_hold_up_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver that never answers (a dead DNS server) costs the check its timeout, not forever."""
    import socket

    real = socket.getaddrinfo

    def lookup(host: str, *args: Any, **kw: Any) -> Any:
        if host == "hangs.invalid":
            time.sleep(30)
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    t0 = time.monotonic()
    got = hosts.system_resolver({("hangs.invalid", 22), ("127.0.0.1", 22)}, timeout=0.3)
    assert time.monotonic() - t0 < 2
    assert got == {("127.0.0.1", 22): {("127.0.0.1", 22)}}
