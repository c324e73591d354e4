"""``agent: upload``: the collector builds a zipapp of its own agent and ships it by SFTP, once."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import gpufleet.agent
import pytest
from gpufleet.collector.simfleet import SimFleet
from gpufleet.collector.transport.zipapp import build_agent_zipapp, remote_path

from tests.transport.sshtestlib import CollectingSink, MakeTransport, real_agent_works

needs_agent = pytest.mark.skipif(not real_agent_works(), reason="the real agent is not runnable yet")


def test_zipapp_contents_and_cache(tmp_path: Path) -> None:
    app = build_agent_zipapp(tmp_path)
    assert app.name == f"gpufleet-agent-{gpufleet.agent.__version__}-{app.digest}.pyz"
    names = zipfile.ZipFile(app.path).namelist()
    assert "__main__.py" in names and "pynvml.py" in names
    assert "gpufleet/agent/wire.py" in names and "gpufleet/agent/main.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    mtime = app.path.stat().st_mtime_ns
    again = build_agent_zipapp(tmp_path)
    assert again == app and app.path.stat().st_mtime_ns == mtime  # same content: reused, not rebuilt
    assert remote_path("~/.cache/gpufleet", app) == f".cache/gpufleet/{app.name}"
    assert remote_path("/opt/gpufleet", app) == f"/opt/gpufleet/{app.name}"


@needs_agent
def test_zipapp_runs_outside_the_venv(tmp_path: Path) -> None:
    # isolated mode, no site-packages: only what is inside the zipapp (PyYAML is still needed for --fake)
    app = build_agent_zipapp(tmp_path)
    out = subprocess.run([sys.executable, str(app.path), "--version"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and gpufleet.agent.__version__ in out.stdout + out.stderr
    iso = subprocess.run([sys.executable, "-I", "-S", str(app.path), "--version"], capture_output=True,
                         text=True, timeout=30)
    assert iso.returncode == 0, iso.stderr


@needs_agent
async def test_upload_over_sftp_then_run(sink: CollectingSink, transport_for: MakeTransport,
                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    async with SimFleet(["up1", "up2"], interval=0.1, exec_commands=True) as fleet:
        hosts = fleet.host_configs(agent="upload", python=sys.executable)
        t = transport_for(hosts, sink)
        await t.start()
        await sink.wait_for(lambda: all(sink.count(n, "snapshot") >= 2 for n in fleet.hosts),
                            what="snapshots from the uploaded agent")
        for name, host in fleet.hosts.items():
            [pyz] = (host.home / ".cache" / "gpufleet").glob("gpufleet-agent-*.pyz")
            assert pyz.stat().st_mode & 0o111  # executable
            assert not list((host.home / ".cache" / "gpufleet").glob("*.tmp-*"))
            assert t.states()[name].agent_version == gpufleet.agent.__version__
        pyz = next((fleet.hosts["up1"].home / ".cache" / "gpufleet").glob("*.pyz"))
        before = pyz.stat().st_mtime_ns
        await t.restart_host("up1")
        await sink.wait_for(lambda: t.states()["up1"].connects == 2, what="reconnect")
        assert pyz.stat().st_mtime_ns == before  # present with the right size: not uploaded again
        assert all(s.status == "up" for s in t.states().values())
        await t.stop()
