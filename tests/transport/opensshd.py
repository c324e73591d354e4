"""OpenSSH's own sshd on loopback, for the tests and benches that need the real server (test_sshd.py,
tests/bench/freeze_bench.py): a fresh host key, a client key it authorizes, known_hosts for it."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncssh
from gpufleet.collector.settings import HostConfig

from tests.builders import free_port

SSHD = "/usr/sbin/sshd"


class SshdUnavailable(RuntimeError):
    """sshd cannot run here (not installed, no privilege separation directory, or it exited at start)."""


def user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


@dataclass
class Sshd:
    port: int
    dir: Path
    client_key: Path
    known_hosts: Path
    authorized_keys: Path
    client_pub: str
    pid: int

    def host(self, name: str = "real", **kw: object) -> HostConfig:
        return HostConfig(name=name, address="127.0.0.1", port=self.port, user=user(),
                          key=str(self.client_key), known_hosts=str(self.known_hosts), interval=0.2,
                          connect_timeout=10.0, **kw)  # type: ignore[arg-type]


@contextmanager
def running_sshd(work: Path) -> Iterator[Sshd]:
    """sshd -D with its keys and config under ``work``; terminated on exit."""
    if not os.path.exists(SSHD):
        raise SshdUnavailable(f"OpenSSH sshd not installed ({SSHD})")
    if os.geteuid() == 0:
        try:  # sshd running as root insists on its privilege separation directory
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        except OSError as exc:
            raise SshdUnavailable(f"cannot create /run/sshd: {exc}") from None
    hostkey = work / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
    client = asyncssh.generate_private_key("ssh-ed25519", comment="gpufleet-test")
    client_key = work / "client_key"
    client.write_private_key(str(client_key))
    client_key.chmod(0o600)
    client_pub = client.export_public_key().decode().strip()
    authorized = work / "authorized_keys"
    authorized.write_text(client_pub + "\n")
    port = free_port()
    config = work / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {hostkey}", f"AuthorizedKeysFile {authorized}",
        f"PidFile {work / 'sshd.pid'}", "StrictModes no", "UsePAM no", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
        "LogLevel ERROR", "MaxStartups 50", f"SetEnv PATH={os.path.dirname(sys.executable)}:/usr/bin:/bin",
    ]) + "\n")
    known = work / "known_hosts"
    pub = " ".join(Path(f"{hostkey}.pub").read_text().split()[:2])
    known.write_text(f"[127.0.0.1]:{port} {pub}\n")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if proc.poll() is not None:
                said = proc.stderr.read().decode() if proc.stderr else ""
                raise SshdUnavailable(f"sshd did not start: {said}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield Sshd(port, work, client_key, known, authorized, client_pub, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sshd_tree(sshd_pid: int) -> list[int]:
    """Our sshd and the sshd processes under it (its sessions), as ``pkill -STOP sshd`` would stop them."""
    parent: dict[int, int] = {}
    comm: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            comm[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == sshd_pid:
                return True
            pid = parent.get(pid, 0)
        return False

    return [p for p, name in comm.items() if name.startswith("sshd") and under(p)]
