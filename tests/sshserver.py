"""The test kit's one SSH server: asyncssh in process on 127.0.0.1 (port 0), a generated host key, and one
generated client key it lets in; it forwards to local Unix sockets the test allows (the CLI's collectors
over SSH). The client's key and a known_hosts line go where the test says, as a user's would be.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from gpufleet.collector.transport.sshlib import asyncssh


@dataclass
class SshServer:
    port: int
    host_key: asyncssh.SSHKey
    client_key: asyncssh.SSHKey

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key.export_public_key().decode().strip()}\n"

    def install_client(self, key: Path, known_hosts: Path) -> None:
        """The client's private key (mode 0600) and a known_hosts file that trusts this server."""
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(self.client_key.export_private_key())
        key.chmod(0o600)
        known_hosts.parent.mkdir(parents=True, exist_ok=True)
        known_hosts.write_text(self.known_hosts_line())


@asynccontextmanager
async def ssh_server(forwards: Callable[[str], bool] = lambda path: True) -> AsyncIterator[SshServer]:
    """A server whose one client key may open a forward to a Unix socket path when ``forwards(path)``."""
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")

    class Server(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return True

        def public_key_auth_supported(self) -> bool:
            return True

        def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
            return key.public_data == client_key.public_data

        def unix_connection_requested(self, dest_path: str) -> bool:
            return forwards(dest_path)

    acceptor = await asyncssh.create_server(Server, "127.0.0.1", 0, server_host_keys=[host_key])
    try:
        yield SshServer(acceptor.sockets[0].getsockname()[1], host_key, client_key)
    finally:
        acceptor.close()
        await acceptor.wait_closed()
