"""wire.encode (direct, per type) writes the same bytes as wire.encode_reference (asdict + prune)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from gpufleet.agent import wire

from tests.builders import gpu, proc, scenario_frames, snap


def _frames() -> Iterator[wire.Frame]:
    yield from scenario_frames()
    full = wire.ProcessSample(pid=1, kind="graphics", gpu_memory=5, sm_util=1, mem_util=2, user="jörg",
                              uid=3, command="a\tb \ud800 😀 \"q\"", start_time=1.5, state="S", ppid=0,
                              container="c", pod="p", job="7", attributed=False)
    mig = wire.MigInstance(gi_id=1, ci_id=None, uuid="MIG-1", memory_total=0, memory_used=0)
    yield snap(gpu(0, procs=[full, proc(model=wire)], throttle_reasons=[], mig_mode=True, mig_instances=[mig],
                   power=0.0, ecc_corrected=0, sm_active=0, model=wire),
               gpu(1, procs=[], throttle_reasons=None, error="lost", util=None, model=wire),
               ts=1.25, model=wire)
    yield wire.Snapshot(ts=2.0, seq=0)
    yield wire.Heartbeat(ts=3.0, seq=9)
    yield wire.Event(ts=4.0, kind="xid", message="", gpu_index=0, xid=79)
    yield wire.Hello(agent_version="1", hostname="", ts=5.0, gpus=[])


def test_encode_is_byte_identical_to_the_reference() -> None:
    frames = list(_frames())
    assert len(frames) > 150
    for frame in frames:
        assert wire.encode(frame) == wire.encode_reference(frame), frame


def test_encode_refuses_what_the_reference_refuses() -> None:
    bad = snap(gpu(0, power=math.nan, model=wire), ts=1.0, model=wire)
    for encode in (wire.encode, wire.encode_reference):
        with pytest.raises(ValueError, match="JSON compliant"):
            encode(bad)


def test_objects_of_other_types_fall_back_to_the_reference() -> None:
    class Odd(wire.ProcessSample):
        pass

    frame = snap(gpu(0, procs=[Odd(pid=5, user="x")], model=wire), ts=1.0, model=wire)
    assert wire.encode(frame) == wire.encode_reference(frame)
