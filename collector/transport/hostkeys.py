"""Host key verification against known_hosts, with errors that say what to do.

asyncssh alone reports every failure as "Host key is not trusted". The collector needs to tell a *changed*
key (possible attack: refuse, alert, name the known_hosts line) from an *unknown* one (refuse under
``strict``, record under ``accept-new``). Each known_hosts file is parsed once and shared by every host that
uses it (1,000 hosts must not parse the file 1,000 times); it is re-read only when its mtime or size
changes, so an operator who fixes a line does not have to restart the collector.
"""

from __future__ import annotations

import base64
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpufleet.collector.errors import ConfigError, HostKeyError
from gpufleet.collector.transport.sshlib import asyncssh

log = logging.getLogger(__name__)

HostKeyPolicy = Literal["strict", "accept-new"]
POLICIES: tuple[str, ...] = ("strict", "accept-new")


class HostKeyRefused(HostKeyError):  # type: ignore[misc, unused-ignore]  # Any if gpufleet is unresolved
    """A host key was refused. ``reason`` is the machine-readable host state reason.

    ``kind`` is "changed", "unknown" or "revoked"; ``reason`` starts with ``host key <kind>:``.
    """

    def __init__(self, host: str, kind: str, detail: str) -> None:
        self.kind = kind
        self.reason = f"host key {kind}: {detail}"
        headline = "HOST KEY CHANGED" if kind == "changed" else f"host key {kind}"
        super().__init__(host, f"{headline}: {detail}")


def default_known_hosts() -> Path:
    return Path("~/.ssh/known_hosts").expanduser()


def host_pattern(addr: str, port: int) -> str:
    """The known_hosts spelling OpenSSH uses: ``host`` on port 22, ``[host]:port`` otherwise."""
    return addr if port == 22 else f"[{addr}]:{port}"


def fingerprint(key: asyncssh.SSHKey) -> str:
    return f"{key.get_algorithm()} {key.get_fingerprint('sha256')}"


@dataclass(slots=True)
class _Line:
    number: int
    text: str
    blob: bytes | None  # the decoded key blob, to find which line holds a key


@dataclass(slots=True)
class KnownHostsFile:
    """One parsed known_hosts file, shared by every host that names it."""

    path: Path
    known: asyncssh.SSHKnownHosts = field(default_factory=asyncssh.SSHKnownHosts)
    lines: list[_Line] = field(default_factory=list)
    stamp: tuple[float, int] | None = None

    def load(self) -> None:
        """(Re)parse the file if it changed since the last look; a missing file is empty."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if self.stamp is not None or self.lines:
                self.known, self.lines = asyncssh.SSHKnownHosts(), []
            self.stamp = None
            return
        stamp = (st.st_mtime, st.st_size)
        if stamp == self.stamp:
            return
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read known_hosts: {exc}", path=str(self.path)) from None
        known = asyncssh.SSHKnownHosts()
        lines: list[_Line] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            stripped = raw.strip()
            if not stripped or stripped.startswith("#"):
                continue
            try:
                known.load(stripped)
            except ValueError as exc:
                # one bad line must not disable verification for everyone else: skip it loudly
                log.warning("%s:%d: ignoring known_hosts line: %s", self.path, number, exc)
                continue
            lines.append(_Line(number, stripped, _blob(stripped)))
        self.known, self.lines, self.stamp = known, lines, stamp

    def match(self, host: str, addr: str, port: int) -> list[asyncssh.SSHKey]:
        """Plain host keys recorded for ``host`` (as dialled) or its address ``addr`` on ``port``."""
        keys = self.known.match(host, addr, port if port != 22 else None)[0]
        unique: dict[bytes, asyncssh.SSHKey] = {}
        for key in keys:  # host and address may both match the same line
            unique.setdefault(key.public_data, key)
        return list(unique.values())

    def lines_for(self, host: str, addr: str, port: int, keys: list[asyncssh.SSHKey]) -> list[int]:
        """Line numbers holding one of ``keys`` for this host (for the "remove line N" advice)."""
        wanted = {k.public_data for k in keys}
        found = []
        for line in self.lines:
            if line.blob not in wanted:
                continue
            one = asyncssh.SSHKnownHosts(line.text)
            if one.match(host, addr, port if port != 22 else None)[0]:
                found.append(line.number)
        return found

    def append(self, addr: str, port: int, key: asyncssh.SSHKey) -> int:
        """Record a newly accepted key (accept-new); returns its line number."""
        entry = f"{host_pattern(addr, port)} {key.export_public_key('openssh').decode().strip()}"
        # drop any comment the key carries: known_hosts lines are "pattern alg blob"
        entry = " ".join(entry.split()[:3])
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        needs_newline = self.path.exists() and self.path.stat().st_size > 0 and \
            not self.path.read_bytes().endswith(b"\n")
        with self.path.open("a") as fh:
            fh.write(("\n" if needs_newline else "") + entry + "\n")
        number = len(self.path.read_text().splitlines())
        self.known.load(entry)
        self.lines.append(_Line(number, entry, key.public_data))
        st = self.path.stat()
        self.stamp = (st.st_mtime, st.st_size)
        return number


def _blob(line: str) -> bytes | None:
    parts = line.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    if len(parts) < 3:
        return None
    try:
        return base64.b64decode(parts[2], validate=True)
    except ValueError:
        return None


class KnownHostsStore:
    """Every known_hosts file the fleet uses, parsed once each."""

    def __init__(self) -> None:
        self._files: dict[Path, KnownHostsFile] = {}

    def get(self, path: str | None) -> KnownHostsFile:
        resolved = Path(path).expanduser() if path else default_known_hosts()
        resolved = Path(os.path.abspath(resolved))
        kh = self._files.get(resolved)
        if kh is None:
            kh = self._files[resolved] = KnownHostsFile(resolved)
        kh.load()
        return kh


class HostKeyVerifier:
    """Decides about one connection attempt's untrusted key; remembers why it refused.

    asyncssh calls :meth:`check` only for a key that no known_hosts line trusts. The refusal it then
    raises is generic, so the transport asks :attr:`refusal` for the real story.
    """

    def __init__(self, name: str, kh: KnownHostsFile, policy: str) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"host_key_policy must be one of {', '.join(POLICIES)} (verification cannot "
                              f"be disabled), got {policy!r}", key=f"hosts.{name}.host_key_policy")
        self.name = name
        self.kh = kh
        self.policy = policy
        self.refusal: HostKeyRefused | None = None

    def check(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        """``host`` as dialled, ``addr`` the peer address; True accepts the key."""
        where = f"{host}:{port}"
        recorded = self.kh.match(host, addr, port)
        if any(k.public_data == key.public_data for k in recorded):
            return True  # recorded meanwhile by a concurrent accept-new connection to the same address
        if recorded:
            numbers = self.kh.lines_for(host, addr, port, recorded)
            at = f"{self.kh.path}:{numbers[0]}" if numbers else str(self.kh.path)
            # most useful first: alerts keep about 200 (summary) / 300 (reason) characters of this
            self.refusal = HostKeyRefused(
                self.name, "changed",
                f"{where} offers {fingerprint(key)}; {at} has another key (intercepted, or reinstalled?). "
                f"If expected: ssh-keygen -R '{host_pattern(host, port)}' -f {self.kh.path} "
                f"(old: {', '.join(fingerprint(k) for k in recorded)})")
            log.error("%s", self.refusal)
            return False
        if self.policy == "accept-new":
            line = self.kh.append(host, port, key)
            log.warning("%s: accepted new host key %s for %s, recorded at %s:%d", self.name, fingerprint(key),
                        where, self.kh.path, line)
            return True
        self.refusal = HostKeyRefused(
            self.name, "unknown",
            f"{where} offers {fingerprint(key)}, not in {self.kh.path}. Verify it, then add it "
            f"(ssh-keyscan -p {port} {host} >> {self.kh.path}) or set host_key_policy: accept-new")
        log.error("%s", self.refusal)
        return False
