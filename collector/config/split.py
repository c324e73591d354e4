"""The config one collector process runs: its shard's hosts (``shard: I/N``), and for ``workers: N`` each
worker's shard, database, query socket and metrics port, and the sockets the CLI asks and merges.

Here and only here a worker's paths and port are derived from the config (collector/service/workers.py
starts the workers; the CLI reads :func:`worker_addresses`, so it asks every worker).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpufleet.collector.addresses import CollectorAddress
from gpufleet.collector.settings import Config
from gpufleet.collector.shards import Shard


def select(config: Config, shard: Shard | None) -> Config:
    """The config this collector runs: only its shard's hosts (all of them without a shard)."""
    if shard is None:
        return config
    return dataclasses.replace(config, hosts=[h for h in config.hosts if shard.owns(h.name)], shard=shard)


def worker_path(path: Path, index: int) -> Path:
    """``gpufleet.db`` -> ``gpufleet.w2.db``: worker 2's file next to where the config puts the one."""
    return path.with_name(f"{path.stem}.w{index}{path.suffix}")


def _port_plus(listen: str | None, offset: int) -> str | None:
    """``127.0.0.1:9835`` -> ``127.0.0.1:9836`` for offset 1 (port 0 stays 0: the kernel picks)."""
    if listen is None or offset == 0:
        return listen
    host, _, port = listen.rpartition(":")
    number = int(port)
    return listen if number == 0 else f"{host}:{number + offset}"


def worker_config(config: Config, index: int) -> Config:
    """Worker ``index`` (1..N) of ``config.workers``: shard index/N of the hosts, its own database, query
    socket and metrics port (the config's port + index - 1)."""
    count = config.workers
    if not 1 <= index <= count:
        raise ValueError(f"worker {index}: the config runs workers 1 to {count}")
    mine = select(config, Shard(index, count))
    db = worker_path(config.storage.resolved_path(), index)
    return dataclasses.replace(
        mine,
        storage=dataclasses.replace(config.storage, path=str(db)),
        api=dataclasses.replace(config.api, socket=str(worker_path(config.api.resolved_socket(), index))),
        metrics=dataclasses.replace(config.metrics, listen=_port_plus(config.metrics.listen, index - 1)),
        workers=1, worker=index)


def worker_addresses(config: Config) -> list[CollectorAddress]:
    """The query sockets of the config's workers, for the CLI to ask and merge (empty: one collector)."""
    if config.workers <= 1:
        return []
    out = []
    for i in range(1, config.workers + 1):
        sock = str(worker_path(config.api.resolved_socket(), i))
        db = str(worker_path(config.storage.resolved_path(), i))
        out.append(CollectorAddress(text=sock, socket=sock, db=db))
    return out
