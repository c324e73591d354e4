"""A kubelet's log directories as a node has them, built in a temporary directory.

Layout (kubernetes/kubernetes, pkg/kubelet/kuberuntime): ``helpers.go`` ``BuildPodLogsDirectory`` joins
``<namespace>_<pod name>_<pod uid>`` under /var/log/pods, ``BuildContainerLogsDirectory`` adds
``<container name>``, ``buildContainerLogsPath`` names the file ``<restart count>.log``; ``legacy.go``
``logSymlink`` links ``/var/log/containers/<pod name>_<namespace>_<container name>-<container id>.log`` to
it, the name cut to 251 characters (+ ``.log``) when longer.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path


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
