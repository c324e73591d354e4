"""Fixtures for the tests against a real Slurm: the cluster (tests/slurm/realslurm.py), started once per
session, and the fake NVML library the real agent loads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.realagent import fake_nvml_lib  # noqa: F401 - the fixture, offered to this directory
from tests.slurm import realslurm


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[realslurm.SlurmCluster]:
    """A running single-node cluster (node ``slurm_cluster.node``, four GPUs, partition ``gpu``); skipped
    with the reason where it cannot run (not root, Slurm or munge not installed, no cgroup hierarchy)."""
    reason = realslurm.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with realslurm.running() as cluster:
        yield cluster
