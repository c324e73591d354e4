"""``agent: upload``: ship the agent as one zipapp, so a GPU host needs only python3 and the driver.

The zipapp is built from the collector's own installed ``gpufleet.agent`` package plus the ``pynvml``
module (nvidia-ml-py is a single file), named by version and content hash. The name is the cache key on
both sides: built once per content locally, uploaded by SFTP only when the host lacks that exact file, so
an upgrade uploads once and a restart uploads nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import os
import posixpath
import secrets
import zipfile
from dataclasses import dataclass
from pathlib import Path

import gpufleet.agent
from gpufleet.collector.errors import AgentError
from gpufleet.collector.transport.sshlib import asyncssh

log = logging.getLogger(__name__)

MAIN = b"""# gpufleet agent zipapp, built by the collector
from gpufleet.agent.main import main

raise SystemExit(main())
"""
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class AgentZipapp:
    path: Path
    version: str
    digest: str  # first 12 hex digits of the content hash
    size: int

    @property
    def name(self) -> str:
        return self.path.name


def default_cache_dir() -> Path:
    """$CACHE_DIRECTORY (systemd CacheDirectory=), else $XDG_CACHE_HOME/gpufleet or ~/.cache/gpufleet."""
    if os.environ.get("CACHE_DIRECTORY"):
        return Path(os.environ["CACHE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpufleet"


def _sources() -> list[tuple[str, bytes]]:
    """(archive name, content) of every file that goes in, sorted so the hash is stable."""
    files: list[tuple[str, bytes]] = []
    pkg_dir = Path(gpufleet.agent.__file__).resolve().parent
    for path in sorted(pkg_dir.rglob("*")):
        rel = path.relative_to(pkg_dir)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        files.append((f"gpufleet/agent/{rel.as_posix()}", path.read_bytes()))
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None:
        raise AgentError("localhost", "cannot build the agent zipapp: nvidia-ml-py (module pynvml) is not "
                                      "installed next to the collector")
    files.append(("pynvml.py", Path(spec.origin).read_bytes()))
    files.append(("__main__.py", MAIN))
    return sorted(files)


def build_agent_zipapp(cache_dir: Path | None = None) -> AgentZipapp:
    """Build (or reuse) the zipapp for the installed agent. Cheap when the cached file is current."""
    files = _sources()
    h = hashlib.sha256()
    for name, data in files:
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    digest = h.hexdigest()[:12]
    version = gpufleet.agent.__version__
    out_dir = cache_dir or default_cache_dir()
    path = out_dir / f"gpufleet-agent-{version}-{digest}.pyz"
    if path.is_file():
        return AgentZipapp(path, version, digest, path.stat().st_size)
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        # zipimport finds the ``gpufleet`` namespace package only through explicit directory entries
        dirs = {n.rsplit("/", i)[0] + "/" for n, _ in files for i in range(1, n.count("/") + 1)}
        for directory in sorted(dirs):
            info = zipfile.ZipInfo(directory, date_time=_EPOCH)
            info.external_attr = (0o40755 << 16) | 0x10
            zf.writestr(info, b"")
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    tmp.write_bytes(buf.getvalue())
    tmp.chmod(0o755)
    os.replace(tmp, path)
    log.info("built agent zipapp %s (%d bytes)", path, path.stat().st_size)
    return AgentZipapp(path, version, digest, path.stat().st_size)


def remote_path(upload_dir: str, app: AgentZipapp) -> str:
    """Where the zipapp lives on the host: relative paths are relative to the login directory."""
    directory = upload_dir[2:] if upload_dir.startswith("~/") else upload_dir
    return posixpath.join(directory, app.name) if directory else app.name


async def ensure_uploaded(conn: asyncssh.SSHClientConnection, host: str, app: AgentZipapp,
                          upload_dir: str) -> str:
    """Upload ``app`` unless the host already has it (same name and size); returns the remote path."""
    target = remote_path(upload_dir, app)
    try:
        async with conn.start_sftp_client() as sftp:
            try:
                attrs = await sftp.stat(target)
                if attrs.size == app.size:
                    return target
                log.warning("%s: %s has %s bytes, expected %d: uploading again", host, target, attrs.size,
                            app.size)
            except asyncssh.SFTPNoSuchFile:
                pass
            directory = posixpath.dirname(target)
            if directory:
                await sftp.makedirs(directory, exist_ok=True)
            tmp = f"{target}.tmp-{secrets.token_hex(4)}"
            await sftp.put(str(app.path), tmp)
            await sftp.chmod(tmp, 0o755)
            try:
                await sftp.posix_rename(tmp, target)
            except asyncssh.SFTPOpUnsupported:
                if await sftp.exists(target):
                    await sftp.remove(target)
                await sftp.rename(tmp, target)
            log.info("%s: uploaded agent zipapp to %s", host, target)
            return target
    except (asyncssh.Error, OSError) as exc:
        raise AgentError(host, f"uploading the agent zipapp to {target} failed: {exc}") from exc
