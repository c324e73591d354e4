"""Shards: rendezvous hashing of host names; every host in exactly one shard, N -> N+1 moves about 1/(N+1),
the config key and --shard, and `config check --shard` printing the assignment (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpufleet.collector.config import load_config
from gpufleet.collector.config.split import select
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import Config, HostConfig
from gpufleet.collector.shards import Shard, parse_shard, shard_of

from tests.cli.cli_testkit import run_cli_here

NAMES = [f"gpu{i:04d}" for i in range(3000)]


def test_parse() -> None:
    assert parse_shard("2/3") == Shard(2, 3) and str(Shard(2, 3)) == "2/3"
    for bad in ("0/3", "4/3", "x", "1/0", "1/2/3"):
        with pytest.raises(ValueError, match="shard"):
            parse_shard(bad)


def test_every_host_in_exactly_one_shard_and_balanced() -> None:
    for n in (1, 2, 3, 5):
        owners = [[i for i in range(1, n + 1) if Shard(i, n).owns(h)] for h in NAMES]
        assert all(len(o) == 1 for o in owners)
        sizes = [sum(1 for o in owners if o == [i]) for i in range(1, n + 1)]
        assert min(sizes) > 0.8 * len(NAMES) / n, sizes


def test_adding_a_shard_moves_about_one_in_n_plus_one() -> None:
    moved = sum(1 for h in NAMES if shard_of(h, 2) != shard_of(h, 3))
    assert 0.28 < moved / len(NAMES) < 0.39  # 1/3 expected
    assert all(shard_of(h, 3) == 3 for h in NAMES if shard_of(h, 2) != shard_of(h, 3))  # only to the new one


def test_select_keeps_the_shards_hosts() -> None:
    cfg = Config(hosts=[HostConfig(name=n) for n in NAMES[:100]])
    parts = [select(cfg, Shard(i, 2)) for i in (1, 2)]
    assert sorted(h.name for p in parts for h in p.hosts) == NAMES[:100]
    assert parts[0].shard == Shard(1, 2) and select(cfg, None) is cfg


def test_config_key_and_its_errors(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("hosts: [a, b]\nshard: 2/2\n")
    assert load_config(f).shard == Shard(2, 2)
    f.write_text("hosts: [a, b]\nshard: 3/2\n")
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert f"{f}:2: shard:" in str(err.value) and "1 <= I <= N" in str(err.value)


def test_config_check_prints_the_assignment(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("hosts: [" + ", ".join(NAMES[:40]) + "]\nnotifiers:\n"
                 "  - {name: hook, kind: webhook, url: 'http://127.0.0.1:9/x'}\n")
    seen: list[str] = []
    for i in (1, 2):
        r = run_cli_here("config", "check", "-c", str(f), "--shard", f"{i}/2")  # no DNS for the made-up names
        assert r.rc == 0, r.err
        line = next(ln for ln in r.out.splitlines() if ln.startswith(f"shard {i}/2: "))
        names = line.split(" hosts: ", 1)[1].split(", ")
        assert names == [n for n in NAMES[:40] if shard_of(n, 2) == i]
        assert "Alertmanager cluster" in r.err  # a direct notifier would page twice from replicas
        seen += names
    assert sorted(seen) == NAMES[:40]
    r = run_cli_here("config", "check", "-c", str(f), "--shard", "9/2")
    assert r.rc == 2 and "--shard" in r.err
