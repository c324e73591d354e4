"""The CLI config's ``collectors:`` (issue 17): with no --collector, `gpufleet -c FILE status` asks every
collector the file lists and merges them; --collector and --socket still win; a wrong entry is one
``file:line: collectors[i]: ...`` line and exit 2 (real CLI subprocesses, real query sockets)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gpufleet.collector.config import ConfigErrors, parse_config
from gpufleet.collector.faces.api.server import QueryServer

from tests.cli.cli_testkit import StandinCollector, cli_env, run_cli
from tests.sshserver import ssh_server


@pytest.fixture
async def two(home: Path) -> AsyncIterator[list[Path]]:
    servers = [QueryServer(StandinCollector(fleet, gpus=2), home / f"s{i}.sock", 0o600)
               for i, fleet in enumerate(({"a1": "busy", "a2": "wasting"}, {"b1": "busy", "b2": "hot"}))]
    for s in servers:
        await s.start()
    yield [s.path for s in servers]
    for s in servers:
        await s.stop()


async def test_status_merges_the_collectors_the_config_lists(home: Path, two: list[Path]) -> None:
    cfg = home / "cli.yaml"
    cfg.write_text(f"collectors:\n  - {two[0]}\n  - {{address: ./{two[1].name}}}\n")  # relative: to the file
    env = cli_env(home)
    r = await run_cli("-c", str(cfg), "status", "--json", env=env)
    assert r.rc == 0, r.err
    view = json.loads(r.out)
    assert [h["name"] for h in view["hosts"]] == ["a1", "a2", "b1", "b2"]
    assert view["totals"]["hosts"] == 4 and view["totals"]["gpus"] == 8

    r = await run_cli("-c", str(cfg), "hosts", "--json", "--collector", str(two[1]), env=env)
    assert r.rc == 0, r.err
    assert [h["name"] for h in json.loads(r.out)] == ["b1", "b2"]  # --collector wins over the file
    r = await run_cli("-c", str(cfg), "hosts", "--json", "--socket", str(two[0]), env=env)
    assert [h["name"] for h in json.loads(r.out)] == ["a1", "a2"]  # so does a socket named

    r = await run_cli("-c", str(cfg), "config", "check", env=env)
    assert r.rc == 0, r.err
    assert f"the CLI asks 2 collectors and merges them: {two[0]}, ./{two[1].name}" in r.out


async def test_a_wrong_entry_names_file_line_and_key(home: Path) -> None:
    cfg = home / "cli.yaml"
    cfg.write_text("api: {}\ncollectors:\n  - gpufleet@c1\n  - {address: 'c2:70000'}\n")
    r = await run_cli("-c", str(cfg), "status", env=cli_env(home))
    assert r.rc == 2
    assert r.err.strip() == (f"gpufleet: {cfg}:4: collectors[1].address: port must be between 1 and 65535, "
                             "got 70000")


def test_entries_and_their_errors(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("k")
    (tmp_path / "kh").write_text("")
    cfg = parse_config("collectors:\n  - /run/s1.sock\n  - gpufleet@c1:2222/run/g.sock\n"
                       "  - {address: c2, key: id, known_hosts: kh}\n", str(tmp_path / "g.yaml"))
    one, two, three = cfg.collectors
    assert (one.host, one.socket) == (None, "/run/s1.sock")
    assert (two.user, two.host, two.port, two.socket) == ("gpufleet", "c1", 2222, "/run/g.sock")
    assert (three.host, three.socket, three.key, three.known_hosts) == (
        "c2", "/run/gpufleet/gpufleet.sock", str(key), str(tmp_path / "kh"))
    with pytest.raises(ConfigErrors) as err:
        parse_config("collectors:\n  - 'a b'\n  - {address: /s.sock, key: id}\n  - {key: id}\n  - 3\n"
                     "  - {address: c3, known_hosts: 'off'}\n  - {address: c4, key: nokey}\n"
                     "  - {address: c5, prot: 2}\n", str(tmp_path / "g.yaml"))
    lines = str(err.value).splitlines()
    where = [ln.split(": ", 2)[:2] for ln in lines]
    assert where == [[f"{tmp_path}/g.yaml:2", "collectors[0]"], [f"{tmp_path}/g.yaml:3", "collectors[1]"],
                     [f"{tmp_path}/g.yaml:4", "collectors[2]"], [f"{tmp_path}/g.yaml:5", "collectors[3]"],
                     [f"{tmp_path}/g.yaml:6", "collectors[4].known_hosts"],
                     [f"{tmp_path}/g.yaml:7", "collectors[5].key"],
                     [f"{tmp_path}/g.yaml:8", "collectors[6].prot"]], lines


def test_the_operator_guide_example_parses() -> None:
    guide = (Path(__file__).parents[2] / "deploy" / "OPERATOR.md").read_text()
    block = guide.split("    collectors:\n", 1)[1].split("\n\n", 1)[0]
    text = "collectors:\n" + "\n".join(line[4:] for line in block.splitlines())
    cfg = parse_config(text, "/etc/gpufleet/cli.yaml", resolve_secrets=False)
    assert [(c.user, c.host, c.port) for c in cfg.collectors] == [
        (None, None, 22), ("gpufleet", "c1b", 22), ("ops", "c2a", 2222), ("ops", "c2b", 22)]
    assert cfg.collectors[2].key == str(Path("~/.ssh/id_gpufleet").expanduser())


async def test_an_ssh_entry_uses_its_own_key_and_known_hosts(home: Path, two: list[Path]) -> None:
    """Key and known_hosts from the entry, not ~/.ssh (which has neither here): without them the same
    collector is named as not answering and the local one is still shown."""
    keys = home / "keys"
    async with ssh_server(forwards=lambda path: path == str(two[1])) as ssh:
        ssh.install_client(keys / "id", keys / "kh")
        remote = f"me@127.0.0.1:{ssh.port}{two[1]}"
        cfg = home / "cli.yaml"
        cfg.write_text(f"collectors:\n  - {two[0]}\n"
                       f"  - {{address: '{remote}', key: keys/id, known_hosts: keys/kh}}\n")
        env = cli_env(home)
        r = await run_cli("-c", str(cfg), "status", "--json", env=env)
        assert r.rc == 0 and r.err == "", r.err
        assert [h["name"] for h in json.loads(r.out)["hosts"]] == ["a1", "a2", "b1", "b2"]

        cfg.write_text(f"collectors:\n  - {two[0]}\n  - '{remote}'\n")
        r = await run_cli("-c", str(cfg), "status", "--json", env=env)
        assert r.rc == 0
        assert [h["name"] for h in json.loads(r.out)["hosts"]] == ["a1", "a2"]
        assert f"collector {remote} did not answer" in r.err, r.err
