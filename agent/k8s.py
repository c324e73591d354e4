"""Kubernetes names (namespace, pod, container) for the pod uid and container id a process's cgroup gives.

The cgroup gives only ids (:mod:`procinfo`); people and dcgm-exporter's labels speak names. The agent has no
cluster credentials, and needs none: the kubelet leaves the names on the node, world-readable, in its log
directories (kubernetes/kubernetes ``pkg/kubelet/kuberuntime/helpers.go``, ``BuildPodLogsDirectory`` and
``BuildContainerLogsDirectory``; ``legacy.go``, ``logSymlink``)::

    /var/log/pods/<namespace>_<pod name>_<pod uid>/<container name>/<restart count>.log
    /var/log/containers/<pod name>_<namespace>_<container name>-<container id>.log   (symlink)

Namespaces, pod names and container names are DNS labels/subdomains, which never hold ``_``, so the split
is unambiguous. The second form maps a container id to its name; a symlink name longer than 251 characters
is cut by the kubelet (the id is lost), and then a pod with a single container still names it.

Not used: the kubelet's pod-resources socket (``/var/lib/kubelet/pod-resources/kubelet.sock``). It is gRPC
(the agent is standard library only) and only root may connect to it; the log directories give the names
without either.

Cost: a cache of both directories, rebuilt only when asked about a pod or container it does not know, and
then at most every :data:`RESCAN_AFTER` seconds (a few ``readdir`` calls); a pod that is gone drops out at
the next rebuild.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEFAULT_ROOT: Final = "/var/log"
#: Seconds between two rebuilds of the cache when asked about something it does not know.
RESCAN_AFTER: Final = 10.0

_UID: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_POD_DIR: Final = re.compile(rf"^([^_]+)_([^_]+)_({_UID})$")
_CONTAINER_LINK: Final = re.compile(r"^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$")


@dataclass(frozen=True, slots=True)
class PodNames:
    """What the kubelet's directories say about one process's pod and container."""

    namespace: str
    pod: str
    container: str | None = None


class KubeletLogs:
    """Resolves pod uid / container id to names from the kubelet's log directories under ``root``."""

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_ROOT, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self._clock = clock
        self._pods: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self._containers_of: dict[str, tuple[str, ...]] = {}  # uid -> container directory names
        self._by_id: dict[str, tuple[str, str, str]] = {}  # container id -> (namespace, pod, container)
        self._scanned_at: float | None = None
        self.scans = 0  # rebuilds so far (tests: the cache is used)

    def names(self, pod_uid: str | None, container_id: str | None = None) -> PodNames | None:
        """The names of ``pod_uid`` (and of its container ``container_id``), or None when the kubelet left
        nothing for that pod here."""
        if pod_uid is None:
            return None
        if not self._known(pod_uid, container_id):
            now = self._clock()
            if self._scanned_at is None or now - self._scanned_at >= RESCAN_AFTER:
                self._scanned_at = now
                self._scan()
        pod = self._pods.get(pod_uid)
        if pod is None:
            return None
        return PodNames(pod[0], pod[1], self._container(pod_uid, pod, container_id))

    def _known(self, pod_uid: str, container_id: str | None) -> bool:
        if pod_uid not in self._pods:
            return False
        return container_id is None or container_id in self._by_id or len(self._containers_of[pod_uid]) == 1

    def _container(self, pod_uid: str, pod: tuple[str, str], container_id: str | None) -> str | None:
        if container_id is not None:
            found = self._by_id.get(container_id)
            if found is not None and found[:2] == pod:
                return found[2]
        only = self._containers_of.get(pod_uid, ())
        return only[0] if len(only) == 1 else None

    def _scan(self) -> None:
        self.scans += 1
        pods: dict[str, tuple[str, str]] = {}
        containers_of: dict[str, tuple[str, ...]] = {}
        for name in _names(self.root / "pods"):
            m = _POD_DIR.match(name)
            if m is None:
                continue  # the pre-1.14 layout (/var/log/pods/<uid>) or something else: no names there
            namespace, pod, uid = m.groups()
            pods[uid] = (namespace, pod)
            containers_of[uid] = tuple(sorted(_names(self.root / "pods" / name, dirs_only=True)))
        by_id: dict[str, tuple[str, str, str]] = {}
        for name in _names(self.root / "containers"):
            c = _CONTAINER_LINK.match(name)
            if c is not None:
                pod, namespace, container, cid = c.groups()
                by_id[cid] = (namespace, pod, container)
        self._pods, self._containers_of, self._by_id = pods, containers_of, by_id


def _names(directory: Path, dirs_only: bool = False) -> list[str]:
    """Entry names of ``directory`` ([] when it is missing or unreadable: no Kubernetes here)."""
    try:
        with os.scandir(directory) as it:
            return [e.name for e in it if not dirs_only or e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def kubelet_logs_for(root: str | None) -> KubeletLogs | None:
    """The resolver for ``root`` (the agent's ``--kubelet-logs``), or None when turned off (``''``)."""
    return KubeletLogs(root) if root else None
