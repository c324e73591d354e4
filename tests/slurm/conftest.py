"""Fixtures for the tests against a real Slurm: the cluster (tests/slurm/realslurm.py), started once per
session, and the fake NVML library the real agent loads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import realagent
from slurm import realslurm


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[realslurm.SlurmCluster]:
    """A running single-node cluster (node ``slurm_cluster.node``, four GPUs, partition ``gpu``); skipped
    with the reason where it cannot run (not root, Slurm or munge not installed, no cgroup hierarchy)."""
    reason = realslurm.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with realslurm.running() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return realagent.build_lib(tmp_path_factory)
