"""Fixtures for the Kubernetes names: the fake NVML library the real agent loads, and a real process in a
real cgroup shaped like the kubelet's (tests/k8s/kubelet_tree.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.k8s.kubelet_tree import PodProcess, process_in_pod, skip_reason
from tests.realagent import fake_nvml_lib  # noqa: F401 - the fixture, offered to this directory


@pytest.fixture
def pod_process() -> Iterator[PodProcess]:
    """A real ``sleep`` in container ``pytorch`` of pod research/trainer-7f9c-0."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with process_in_pod() as proc:
        yield proc
