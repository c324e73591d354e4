"""Which collector watches which host when there are several: rendezvous (highest random weight) hashing.

Every collector reads the same fleet config; ``shard: I/N`` (or ``--shard I/N``) takes the hosts whose
weight is highest for shard I. Rendezvous hashing needs no ring or table: a host's shard depends only on
its name and N, so replicas of one shard (two collectors with the same ``I/N``) watch exactly the same
hosts, and going from N to N+1 shards moves only the hosts the new shard wins, about 1/(N+1) of them.
Shards are numbered from 1, as operators count them.

Workers (``workers: N``, collector/service/workers.py) are shards on one machine: :func:`worker_config`
derives worker I's config (shard I/N, its own database, socket and metrics port) and :func:`worker_addresses`
the sockets the CLI merges.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.collector.addresses import CollectorAddress

if TYPE_CHECKING:
    from gpufleet.collector.settings import Config

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*\Z")
MAX_SHARDS = 1024


@dataclass(frozen=True, slots=True)
class Shard:
    index: int  # 1..count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, host: str) -> bool:
        return shard_of(host, self.count) == self.index


def parse_shard(text: str) -> Shard:
    """``"2/3"`` -> Shard(2, 3); ValueError with the rule otherwise."""
    m = _SHARD.match(str(text))
    if m is None:
        raise ValueError(f"shard must be I/N (this collector's shard I of N, e.g. 2/3), got {text!r}")
    index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= count <= MAX_SHARDS or not 1 <= index <= count:
        raise ValueError(f"shard {text!r}: need 1 <= I <= N <= {MAX_SHARDS}")
    return Shard(index, count)


def _weight(host: str, index: int) -> int:
    digest = hashlib.blake2b(f"{index}\0{host}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def shard_of(host: str, count: int) -> int:
    """The shard (1..count) that watches ``host``."""
    return max(range(1, count + 1), key=lambda i: _weight(host, i))


def select(config: Config, shard: Shard | None) -> Config:
    """The config this collector runs: only its shard's hosts (all of them without a shard)."""
    if shard is None:
        return config
    return dataclasses.replace(config, hosts=[h for h in config.hosts if shard.owns(h.name)], shard=shard)


# ------------------------------------------------------------------- workers: shards on one machine


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
