"""The real agent names a Kubernetes process's namespace, pod and container, without cluster credentials.

A real process is put in a real cgroup shaped like the kubelet's, the fake libnvidia-ml.so.1 lists it on GPU
0, and the kubelet's log directories are built in a temporary directory that ``--kubelet-logs`` points at
(both tests/k8s/kubelet_tree.py).
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.agent.k8s import RESCAN_AFTER, KubeletLogs
from gpufleet.agent.procinfo import ProcReader

from tests import realagent
from tests.builders import FakeClock
from tests.fakenvml import fakelib
from tests.k8s.kubelet_tree import PodProcess, add_pod


def test_the_process_cgroup_gives_the_ids(pod_process: PodProcess) -> None:
    info = ProcReader().lookup(pod_process.pid)
    assert (info.pod, info.container) == (pod_process.pod.uid, pod_process.pod.containers["pytorch"])


def test_frames_carry_namespace_pod_and_container_names(pod_process: PodProcess, fake_nvml_lib: Path,
                                                        tmp_path: Path) -> None:
    logs = tmp_path / "var-log"
    add_pod(logs, pod_process.pod)
    state = fakelib.default_state(2)
    state["gpus"][0].update(mem_used=8 << 30, processes=[{"pid": pod_process.pid, "mem": 8 << 30}])
    fakelib.write_state(tmp_path / "nvml.state", state)
    with realagent.streaming(fake_nvml_lib, tmp_path / "nvml.state", "--interval", "0.2", "--scontrol", "",
                             "--kubelet-logs", str(logs)) as agent:
        snap = agent.snapshot_where(lambda s: bool(s.gpus[0].processes))
    p = snap.gpus[0].processes[0]
    assert (p.pid, p.pod, p.container) == (pod_process.pid, pod_process.pod.uid,
                                           pod_process.pod.containers["pytorch"])
    assert (p.pod_namespace, p.pod_name, p.container_name) == ("research", "trainer-7f9c-0", "pytorch")


def test_a_pod_the_kubelet_names_later_is_named_then(pod_process: PodProcess, tmp_path: Path) -> None:
    """A process first seen before its pod's directories were readable keeps being asked about (bounded)."""
    clock = FakeClock()
    reader = ProcReader(pods=KubeletLogs(tmp_path, clock=clock))
    first = reader.lookup(pod_process.pid)
    assert first.pod == pod_process.pod.uid and first.pod_name is None
    add_pod(tmp_path, pod_process.pod)
    assert reader.lookup(pod_process.pid).pod_name is None  # not before RESCAN_AFTER
    clock.advance(RESCAN_AFTER)
    again = reader.lookup(pod_process.pid)
    assert (again.pod_namespace, again.pod_name, again.container_name) == (
        "research", "trainer-7f9c-0", "pytorch")
