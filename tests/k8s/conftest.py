"""Fixtures for the Kubernetes names: the fake NVML library the real agent loads."""

from tests.realagent import fake_nvml_lib  # noqa: F401 - the fixture, offered to this directory
