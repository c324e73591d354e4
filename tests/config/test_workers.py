"""``workers: N`` (collector/service/workers.py): worker I is shard I/N of one config, with its own database,
socket and metrics port; the config key's errors; what `config check` prints (issue 13: capacity grows with
cores)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpufleet.collector.config import load_config
from gpufleet.collector.config.split import worker_addresses, worker_config
from gpufleet.collector.errors import ConfigError
from gpufleet.collector.settings import ApiConfig, Config, HostConfig, MetricsConfig, StorageConfig
from gpufleet.collector.shards import Shard, shard_of

from tests.cli.cli_testkit import run_cli_here

NAMES = [f"gpu{i:04d}" for i in range(60)]


def _config(workers: int) -> Config:
    return Config(hosts=[HostConfig(name=n) for n in NAMES], workers=workers,
                  storage=StorageConfig(path="/var/lib/gpufleet/gpufleet.db"),
                  api=ApiConfig(socket="/run/gpufleet/gpufleet.sock"),
                  metrics=MetricsConfig(listen="127.0.0.1:9835"))


def test_each_worker_is_a_shard_with_its_own_files_and_port() -> None:
    cfg = _config(3)
    parts = [worker_config(cfg, i) for i in (1, 2, 3)]
    assert sorted(h.name for w in parts for h in w.hosts) == NAMES, "every host in exactly one worker"
    for i, w in enumerate(parts, 1):
        assert w.shard == Shard(i, 3) and w.worker == i and w.workers == 1
        assert [h.name for h in w.hosts] == [n for n in NAMES if shard_of(n, 3) == i]
        assert w.storage.resolved_path() == Path(f"/var/lib/gpufleet/gpufleet.w{i}.db")
        assert w.api.resolved_socket() == Path(f"/run/gpufleet/gpufleet.w{i}.sock")
        assert w.metrics.listen == f"127.0.0.1:{9834 + i}"
    assert [a.socket for a in worker_addresses(cfg)] == [str(w.api.resolved_socket()) for w in parts]
    assert worker_addresses(_config(1)) == [], "one process: the CLI asks the config's own socket"
    with pytest.raises(ValueError, match="workers 1 to 3"):
        worker_config(cfg, 4)


@pytest.mark.parametrize(("extra", "message"), [
    ("workers: 0\n", "workers: "),
    ("workers: 65\n", "workers: "),
    ("workers: 2\nshard: 1/2\n", "workers and shard"),
    ("workers: 2\nweb:\n  enabled: true\n", "the web page shows one collector"),
    ("workers: 2\ncollectors: [/run/a.sock]\n", "finds the workers of this config by itself"),
])
def test_config_errors_name_the_line_and_say_why(tmp_path: Path, extra: str, message: str) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("hosts: [a, b]\n" + extra)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    line = extra.splitlines().index(next(ln for ln in extra.splitlines() if ln.startswith("workers"))) + 2
    assert f"{f}:{line}: workers:" in str(err.value) and message in str(err.value), str(err.value)


def test_config_check_prints_each_worker(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("hosts: [" + ", ".join(NAMES[:20]) + f"]\nworkers: 2\nstorage:\n  path: {tmp_path}/f.db\n"
                 f"api:\n  socket: {tmp_path}/q.sock\n")
    r = run_cli_here("config", "check", "-c", str(f))  # no DNS: the host names are made up
    assert r.rc == 0, r.err
    for i in (1, 2):
        mine = sum(1 for n in NAMES[:20] if shard_of(n, 2) == i)
        assert (f"worker {i}/2: {mine} hosts, socket {tmp_path}/q.w{i}.sock, database {tmp_path}/f.w{i}.db"
                in r.out), r.out
    assert "2 workers (sockets and databases above)" in r.out


def test_worker_flag_needs_a_config_with_workers(tmp_path: Path) -> None:
    f = tmp_path / "g.yaml"
    f.write_text(f"hosts: [a]\nstorage:\n  path: {tmp_path}/f.db\napi:\n  socket: {tmp_path}/q.sock\n")
    r = subprocess.run([sys.executable, "-m", "gpufleet.cli.main", "collector", "run", "-c", str(f),
                        "--worker", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--worker: this config runs no workers" in r.stderr, r.stderr
    f.write_text(f.read_text() + "workers: 2\n")
    r = subprocess.run([sys.executable, "-m", "gpufleet.cli.main", "collector", "run", "-c", str(f),
                        "--worker", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--worker: worker 3: the config runs workers 1 to 2" in r.stderr, r.stderr
    assert not list(tmp_path.glob("f*.db")), "nothing was created"
