"""Issue 37, Kubernetes names all the way: a real process in a pod's real cgroup, the kubelet's log
directories, the real agent (fake libnvidia-ml.so.1 listing the process on GPU 0), the real collector
(``gpufleet collector run``, ``dcgm_names: true``); the pod's namespace, name and container as people read
them: ``status``, ``top``, the web page's API, ``gpufleet jobs`` once the pod is gone, and /metrics' ``pod``,
``namespace`` and ``container`` labels as dcgm-exporter has them."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.cli_testkit import cli_env, collector_running, run_cli, until
from tests.fakenvml import fakelib
from tests.k8s.kubelet_tree import PodProcess, add_pod
from tests.realcollector import Ports, cli_json, http_get, local_config, series, top_screen

pytestmark = pytest.mark.slow

GIB = 1 << 30
POD = "research/trainer-7f9c-0 (pytorch)"


@pytest.fixture
def home() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gfk8s-", dir="/tmp"))  # short: a Unix socket lives here
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _nvml_state(path: Path, pid: int | None) -> Path:
    state: dict[str, Any] = fakelib.default_state(2)
    if pid is not None:
        state["gpus"][0].update(util=50, mem_used=8 * GIB, processes=[{"pid": pid, "mem": 8 * GIB, "sm": 40}])
    return fakelib.write_state(path, state)


async def test_a_pods_names_on_every_face(pod_process: PodProcess, fake_nvml_lib: Path, home: Path) -> None:
    logs = home / "var-log"
    add_pod(logs, pod_process.pod)
    state = _nvml_state(home / "nvml.state", pod_process.pid)
    ports = Ports()
    cfg = local_config(home, "n5", ["--scontrol=", "--kubelet-logs", str(logs)], ports,
                       metrics="  dcgm_names: true\n")
    env = fakelib.env_for(fake_nvml_lib, state, cli_env(home, COLUMNS="200"))
    c = str(cfg)
    async with collector_running(cfg, env):
        async def named() -> Any:
            view = await cli_json("status", "-c", c, env=env)
            procs = [p for h in (view or {}).get("hosts", []) for g in h["gpus"] for p in g["processes"]]
            return procs[0] if procs and procs[0].get("pod_name") else None

        p = await until(named)
        assert (p["pod_namespace"], p["pod_name"], p["container_name"]) == ("research", "trainer-7f9c-0",
                                                                            "pytorch")
        text = (await run_cli("status", "-c", c, env=env)).out
        assert f"[{POD}]" in text, text
        await top_screen(cfg, home, POD)

        page = json.loads(await asyncio.to_thread(http_get, f"http://127.0.0.1:{ports.web}/api/state"))
        assert page["gpus"]["n5/0"][6][0][3] == POD

        got = series(await asyncio.to_thread(http_get, f"http://127.0.0.1:{ports.metrics}/metrics"))
        pod = {"namespace": "research", "pod": "trainer-7f9c-0", "container": "pytorch"}
        mine = tuple(sorted({"host": "n5", "gpu": "0", **pod}.items()))
        assert got[("gpufleet_pod_gpu_memory_bytes", mine)] == 8 * GIB
        assert got[("gpufleet_pod_gpu_processes", mine)] == 1
        fb = {dict(k[1])["gpu"]: dict(k[1]) for k in got if k[0] == "DCGM_FI_DEV_FB_USED"}
        assert {k: fb["0"][k] for k in (*pod, "instance", "Hostname")} == {**pod, "instance": "n5",
                                                                           "Hostname": "n5"}
        assert not {"pod", "namespace", "container"} & set(fb["1"])  # no pod on GPU 1: no labels (as DCGM)

        _nvml_state(state, None)  # the pod's process leaves the GPU: its job ends

        async def recorded() -> Any:
            rows = await cli_json("jobs", "-c", c, "--since", "1h", env=env)
            return next((r for r in rows or [] if r.get("pod_name")), None)

        record = await until(recorded)
        assert (record["pod_namespace"], record["pod_name"], record["container_name"]) == (
            "research", "trainer-7f9c-0", "pytorch")
        text = (await run_cli("jobs", "-c", c, "--since", "1h", env=env)).out
        assert POD in text, text
