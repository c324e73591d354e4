"""How the CLI names a collector it asks (``--collector``, the config's ``collectors:``): its query socket,
a local path or ``[user@]host[:port][/path/to/gpufleet.sock]`` reached over SSH; and what looks an address
up (a Resolver: ``config check`` warns of one machine listed twice).

One parser for both, here rather than in the CLI, so the config's ``file:line`` errors and the command
line's say the same thing about the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_REMOTE_SOCKET = "/run/gpufleet/gpufleet.sock"  # the systemd unit's RuntimeDirectory
ADDRESS_HELP = "a socket path or [user@]host[:port][/socket/path]"


#: an (address, port) as written, or as looked up (IP, port)
Endpoint = tuple[str, int]
#: looks addresses up: (address, port) -> the (IP, port) pairs it resolves to (left out: it does not resolve);
#: the system's is collector/config/hosts.py's system_resolver, ``config check`` takes one
Resolver = Callable[[set[Endpoint]], dict[Endpoint, set[Endpoint]]]

@dataclass(frozen=True, slots=True)
class CollectorAddress:
    text: str  # as the user wrote it
    socket: str
    host: str | None = None  # None: a local socket
    port: int = 22
    user: str | None = None
    key: str | None = None  # the SSH private key; None: the user's usual keys (~/.ssh, the agent)
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    #: a local collector's database, read (read-only) when its socket does not answer: a worker of this
    #: machine's config (workers: N), as the one collector's database is
    db: str | None = None


def parse_address(text: str) -> CollectorAddress:
    """``/run/gpufleet/gpufleet.sock``, ``c1``, ``gpufleet@c1:2222``, ``c1/run/gpufleet/gpufleet.sock``;
    ValueError saying what is expected otherwise."""
    spec = text.strip()
    if not spec:
        raise ValueError(f"empty; expected {ADDRESS_HELP}")
    if spec.startswith(("/", "./", "../", "~")):
        return CollectorAddress(spec, socket=spec)
    where, slash, path = spec.partition("/")
    user, at, hostport = where.rpartition("@")
    host, colon, port = hostport.partition(":")
    if not host or (at and not user) or any(c.isspace() for c in where) or (colon and not port.isdigit()):
        raise ValueError(f"expected {ADDRESS_HELP}, got {text!r}")
    number = int(port) if colon else 22
    if not 1 <= number <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {number}")
    return CollectorAddress(spec, socket="/" + path if slash else DEFAULT_REMOTE_SOCKET, host=host,
                            port=number, user=user if at else None)
