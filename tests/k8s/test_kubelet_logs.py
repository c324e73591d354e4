"""Pod uid / container id -> namespace, pod and container names, from a kubelet's log directories
(tests/k8s/kubelet_tree.py builds them as the kubelet lays them out). Time is an injected clock."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpufleet.agent.k8s import RESCAN_AFTER, KubeletLogs, PodNames, kubelet_logs_for

from tests.builders import FakeClock
from tests.k8s.kubelet_tree import Pod, add_pod, container_id

TRAINER = Pod("research", "trainer-7f9c-0", {"pytorch": container_id("pytorch"),
                                             "metrics-sidecar": container_id("sidecar")}, restarts=1)
NOTEBOOK = Pod("team-vision", "jupyter-alice", {"notebook": container_id("notebook")})


def test_names_of_a_multi_container_pod_and_a_single_container_one(tmp_path: Path) -> None:
    add_pod(tmp_path, TRAINER)
    add_pod(tmp_path, NOTEBOOK, symlinks=False)  # no /var/log/containers entry: the only container
    (tmp_path / "pods" / "0b7e5c1d-3c4f-4b8a-9d2e-6f1a2b3c4d5e").mkdir()  # the pre-1.14 layout: no names
    logs = KubeletLogs(tmp_path)
    assert logs.names(TRAINER.uid, TRAINER.containers["pytorch"]) == PodNames(
        "research", "trainer-7f9c-0", "pytorch")
    assert logs.names(TRAINER.uid, TRAINER.containers["metrics-sidecar"]) == PodNames(
        "research", "trainer-7f9c-0", "metrics-sidecar")
    assert logs.names(TRAINER.uid, container_id("another")) == PodNames("research", "trainer-7f9c-0", None)
    assert logs.names(TRAINER.uid) == PodNames("research", "trainer-7f9c-0", None)
    assert logs.names(NOTEBOOK.uid, NOTEBOOK.containers["notebook"]) == PodNames(
        "team-vision", "jupyter-alice", "notebook")
    assert logs.names("0b7e5c1d-3c4f-4b8a-9d2e-6f1a2b3c4d5e") is None
    assert logs.names(None) is None


def test_a_symlink_name_cut_at_255_characters_still_names_a_single_container_pod(tmp_path: Path) -> None:
    long_pod = Pod("ml-platform-experiments", "x" * 190, {"trainer": container_id("long")})
    add_pod(tmp_path, long_pod)
    assert len(next((tmp_path / "containers").iterdir()).name) == 255  # the kubelet's cut: no id left
    assert KubeletLogs(tmp_path).names(long_pod.uid, long_pod.containers["trainer"]) == PodNames(
        "ml-platform-experiments", "x" * 190, "trainer")


def test_the_directories_are_read_again_only_for_the_unknown_and_at_most_every_rescan_after(
        tmp_path: Path) -> None:
    add_pod(tmp_path, TRAINER)
    clock = FakeClock()
    logs = KubeletLogs(tmp_path, clock=clock)
    for _ in range(5):
        assert logs.names(TRAINER.uid, TRAINER.containers["pytorch"]) is not None
    assert logs.scans == 1  # known: read from the cache
    assert logs.names(NOTEBOOK.uid) is None and logs.scans == 1  # unknown, but scanned a moment ago
    add_pod(tmp_path, NOTEBOOK)  # the pod starts
    assert logs.names(NOTEBOOK.uid) is None and logs.scans == 1
    clock.advance(RESCAN_AFTER)
    assert logs.names(NOTEBOOK.uid, NOTEBOOK.containers["notebook"]) == PodNames(
        "team-vision", "jupyter-alice", "notebook")
    assert logs.scans == 2
    shutil.rmtree(tmp_path / "pods" / f"{TRAINER.namespace}_{TRAINER.name}_{TRAINER.uid}")  # the pod ends
    for link in (tmp_path / "containers").iterdir():
        if link.name.startswith(TRAINER.name):
            link.unlink()
    clock.advance(RESCAN_AFTER)
    assert logs.names("11111111-2222-3333-4444-555555555555") is None and logs.scans == 3
    assert logs.names(TRAINER.uid) is None  # dropped with the rebuild: the cache does not grow


def test_no_kubelet_here_and_turned_off(tmp_path: Path) -> None:
    assert KubeletLogs(tmp_path / "missing").names(TRAINER.uid, TRAINER.containers["pytorch"]) is None
    assert kubelet_logs_for("") is None
    logs = kubelet_logs_for(str(tmp_path))
    assert logs is not None and logs.root == tmp_path
