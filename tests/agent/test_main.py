"""The streaming loop and argument parsing in-process (test_cli.py runs the agent as a subprocess)."""

from __future__ import annotations

import argparse
import io
import threading
from collections.abc import Callable

import pytest
from gpufleet.agent.main import Agent, FrameWriter, build_parser

from .conftest import Env


class ClosedPipe(io.RawIOBase):
    """A stdout whose reader has gone: every write is a broken pipe."""

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise BrokenPipeError


def test_nvml_is_shut_down_when_stdout_is_gone_before_hello(make_env: Callable[..., Env]) -> None:
    env = make_env("gpus: [{name: A}]\n")
    stop = threading.Event()
    writer = FrameWriter(ClosedPipe(), on_broken=stop.set)
    agent = Agent(env.sampler, writer, stop, hostname="h", interval=0.05, heartbeat=0)
    assert agent.run() == 0
    assert writer.broken and writer.frames == 0
    assert env.lib._init == 0  # nvmlShutdown ran on this exit path too


def test_nvml_is_shut_down_on_a_stop_during_start_up(make_env: Callable[..., Env]) -> None:
    env = make_env("gpus: [{name: A}]\n")
    stop = threading.Event()
    stop.set()
    out = io.BytesIO()
    agent = Agent(env.sampler, FrameWriter(out, on_broken=stop.set), stop, hostname="h", heartbeat=0)
    assert agent.run() == 0 and out.getvalue() == b"" and env.lib._init == 0


@pytest.mark.parametrize("text", ["0", "0.0", "0.00", "0e0", "00"])
def test_heartbeat_zero_in_any_spelling_means_never(text: str) -> None:
    assert build_parser().parse_args(["--heartbeat", text]).heartbeat == 0.0


@pytest.mark.parametrize("text", ["-1", "-0.5", "nan", "inf", "soon"])
def test_heartbeat_below_zero_or_not_a_number_is_refused(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: argparse.ArgumentParser, message: str) -> None:
        raise ValueError(message)

    monkeypatch.setattr(argparse.ArgumentParser, "error", refuse)
    with pytest.raises(ValueError, match="--heartbeat"):
        build_parser().parse_args(["--heartbeat", text])
