"""GPM SM activity (Hopper+): sampled as the difference of two GPM samples per GPU, absent where the GPU or
the driver has no GPM, through the real gateway over the fake library (pynvml's own GPM structs)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpufleet.agent import nvml, wire

from .conftest import Env

HOPPER = """
gpus:
  - name: NVIDIA H100 80GB HBM3
    power_limit_w: 700
    sm_active: [[0, 80], [10, 2]]
    errors: {errors}
    processes:
      - {{pid: 4242, user: alice, command: python train.py, memory_mib: 1024, sm_util: 90}}
  - name: NVIDIA A100-SXM4-80GB
    processes:
      - {{pid: 4243, user: bob, command: python train.py, memory_mib: 1024, sm_util: 90}}
"""


def test_sm_activity_is_a_difference_of_two_samples_and_travels_on_the_wire(
        make_env: Callable[..., Env]) -> None:
    env = make_env(HOPPER.format(errors="{}"))
    first, _ = env.sampler.sample()
    assert first.gpus[0].sm_active is None, "one GPM sample: nothing to compare yet"
    env.clock.advance(1)
    snap, _ = env.sampler.sample()
    assert snap.gpus[0].sm_active == 72  # the curve at the newer sample (t = 1)
    assert snap.gpus[1].sm_active is None, "an A100 has no GPM"
    env.clock.advance(9)
    snap, _ = env.sampler.sample()
    assert snap.gpus[0].sm_active == 2
    back = wire.decode(wire.encode(snap))
    assert isinstance(back, wire.Snapshot)
    assert [g.sm_active for g in back.gpus] == [2, None]
    assert "sm_active" not in wire.encode(snap).decode().split('"index":1', 1)[1], "absent, not null"
    env.sampler.close()
    assert env.lib._gpm == {}, "both buffers freed on close"


@pytest.mark.parametrize("code", ["NOT_SUPPORTED", "NO_PERMISSION", "FUNCTION_NOT_FOUND"])
def test_gpm_missing_is_null_and_the_rest_intact(make_env: Callable[..., Env], code: str) -> None:
    env = make_env(HOPPER.format(errors=f"{{gpm: {code}}}"))
    for _ in range(3):
        snap, events = env.sampler.sample()
        env.clock.advance(1)
        assert events == [] and snap.gpus[0].error is None
        assert snap.gpus[0].sm_active is None
        assert snap.gpus[0].util_gpu == 90 and snap.gpus[0].util_mem == 54
    assert env.sampler.gpus[0].gpm is None


def test_gpm_sampling_failing_later_stops_asking(make_env: Callable[..., Env]) -> None:
    env = make_env(HOPPER.format(errors="{}"))
    env.sampler.sample()
    env.clock.advance(1)
    assert env.sampler.sample()[0].gpus[0].sm_active == 72
    env.lib.scenario.gpus[0].errors["gpm"] = nvml.ERROR_CODES["NOT_SUPPORTED"]  # from now on
    snap, events = env.sampler.sample()
    assert snap.gpus[0].sm_active is None and events == [] and snap.gpus[0].util_gpu == 90
    assert env.sampler.gpus[0].gpm is None and env.lib._gpm == {}, "buffers freed, GPM not asked again"


def test_the_spinning_scenario_reads_the_opposite_of_util_alone(clock) -> None:  # type: ignore[no-untyped-def]
    """agent/scenarios/spinning.yaml through the real sampler and the one classification: the second signals
    turn util's verdicts around (the spinning rank is stuck, the memory-bound job busy)."""
    from gpufleet.agent.fake import FakeNvml, FakeProcs, load_scenario
    from gpufleet.agent.nvml import Gateway
    from gpufleet.agent.sampler import Sampler
    from gpufleet.collector.model import sample
    from gpufleet.collector.model.classify import activity
    from gpufleet.collector.model.thresholds import Thresholds

    lib = FakeNvml(load_scenario("spinning"), clock=clock, sleep=lambda s: None)
    sampler = Sampler(Gateway(lib, backend="fake"), FakeProcs(lib), clock=clock)
    sampler.open()
    sampler.sample()
    clock.advance(1)
    snap, _ = sampler.sample()
    spin, stream = snap.gpus
    assert (spin.util_gpu, spin.util_mem, spin.sm_active) == (100, 0, 1)
    assert stream.util_gpu is not None and stream.util_gpu < 5 and (stream.util_mem or 0) >= 60
    seen = sample.from_wire(snap)  # what the collector classifies: the frame converted at its edge
    assert isinstance(seen, sample.Snapshot)
    assert [activity(g) for g in seen.gpus] == ["stuck", "busy"]
    util_only = Thresholds(mem_busy_at_least=0, sm_active_at_least=0)
    assert [activity(g, util_only) for g in seen.gpus] == ["busy", "idle"]
