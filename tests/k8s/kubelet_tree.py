"""A kubelet's log directories as a node has them, built in a temporary directory.

Layout (kubernetes/kubernetes, pkg/kubelet/kuberuntime): ``helpers.go`` ``BuildPodLogsDirectory`` joins
``<namespace>_<pod name>_<pod uid>`` under /var/log/pods, ``BuildContainerLogsDirectory`` adds
``<container name>``, ``buildContainerLogsPath`` names the file ``<restart count>.log``; ``legacy.go``
``logSymlink`` links ``/var/log/containers/<pod name>_<namespace>_<container name>-<container id>.log`` to
it, the name cut to 251 characters (+ ``.log``) when longer.

And a real process in a real cgroup shaped like the kubelet's (systemd driver, containerd:
``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def container_id(seed: str) -> str:
    """A 64-hex container id, as containerd and CRI-O print them."""
    return hashlib.sha256(seed.encode()).hexdigest()


@dataclass
class Pod:
    namespace: str
    name: str
    containers: dict[str, str]  # container name -> container id
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    restarts: int = 0


def add_pod(root: Path, pod: Pod, *, symlinks: bool = True) -> Path:
    """The pod's directories under ``root``/pods, its containers' symlinks under ``root``/containers."""
    pod_dir = root / "pods" / f"{pod.namespace}_{pod.name}_{pod.uid}"
    (root / "containers").mkdir(parents=True, exist_ok=True)
    for name, cid in pod.containers.items():
        (pod_dir / name).mkdir(parents=True)
        for n in range(pod.restarts + 1):
            (pod_dir / name / f"{n}.log").write_text('2026-12-06T02:45:43.000000000Z stdout F started\n')
        if symlinks:
            link = f"{pod.name}_{pod.namespace}_{name}-{cid}"[:251] + ".log"
            (root / "containers" / link).symlink_to(pod_dir / name / f"{pod.restarts}.log")
    return pod_dir


@dataclass(frozen=True)
class PodProcess:
    pid: int
    pod: Pod
    container: str  # its container's name


def _hierarchy() -> Path | None:
    """A cgroup hierarchy we may create groups in: v1's pids controller, or the v2 root."""
    for root in (CGROUP / "pids", CGROUP):
        if (root / "cgroup.procs").exists() and os.access(root, os.W_OK):
            return root
    return None


def skip_reason() -> str | None:
    if os.geteuid() != 0 or _hierarchy() is None:
        return "needs root and a writable cgroup hierarchy to place a process in a pod's cgroup"
    return None


@contextmanager
def process_in_pod() -> Iterator[PodProcess]:
    """A real ``sleep`` in container ``pytorch`` of pod research/trainer-7f9c-0 (see :func:`skip_reason`)."""
    root = _hierarchy()
    assert root is not None, skip_reason()
    pod = Pod("research", "trainer-7f9c-0", {"pytorch": container_id(f"pytorch-{os.getpid()}"),
                                              "metrics-sidecar": container_id(f"sidecar-{os.getpid()}")})
    pod_slice = f"kubepods-burstable-pod{pod.uid.replace('-', '_')}.slice"
    slices = ["kubepods.slice", "kubepods-burstable.slice", pod_slice,
              f"cri-containerd-{pod.containers['pytorch']}.scope"]
    dirs = [root.joinpath(*slices[:i + 1]) for i in range(len(slices))]
    for d in dirs:
        d.mkdir(exist_ok=True)
    proc = subprocess.Popen(["sleep", "600"])
    try:
        (dirs[-1] / "cgroup.procs").write_text(str(proc.pid))
        yield PodProcess(proc.pid, pod, "pytorch")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for d in reversed(dirs):
            try:
                d.rmdir()
            except OSError:
                pass  # kubepods.slice still used by a concurrent run: it removes it
