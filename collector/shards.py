"""Which collector watches which host when there are several: rendezvous (highest random weight) hashing.

Every collector reads the same fleet config; ``shard: I/N`` (or ``--shard I/N``) takes the hosts whose
weight is highest for shard I. Rendezvous hashing needs no ring or table: a host's shard depends only on
its name and N, so replicas of one shard (two collectors with the same ``I/N``) watch exactly the same
hosts, and going from N to N+1 shards moves only the hosts the new shard wins, about 1/(N+1) of them.
Shards are numbered from 1, as operators count them.

Workers (``workers: N``, collector/service/workers.py) are shards on one machine; the config each collector
process runs (its shard's hosts, a worker's own database, socket and port) is derived in
collector/config/split.py.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

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
