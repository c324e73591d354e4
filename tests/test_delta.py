"""Protocol 1.3 (agent/delta.py, collector/transport/delta.py): deltas say what changed, the collector's edge
makes whole snapshots of them again, equal to the full frames field for field, and keeps a GPU's process list
one object while its processes stay the same; both decoders agree on every delta."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from gpufleet.agent import delta, wire
from gpufleet.collector.model import sample
from gpufleet.collector.simfleet import FrameGenerator
from gpufleet.collector.transport import wirefast
from gpufleet.collector.transport.delta import DeltaBase, DeltaMismatch

from tests.builders import GIB, gpu, proc, snap
from tests.test_wirefast import decode_outcome

W = wire


def _state(k: int) -> wire.Snapshot:
    """Sample ``k`` of a host whose every kind of change happens once (see the comments)."""
    procs = [proc(101, "alice", mem_gib=20, sm=90 + k % 5, start=1.7e9, model=W, command="python train.py",
                  job="77", job_name="pretrain", ppid=50),
             proc(102, "bob", mem_gib=1, sm=5, start=1.7e9 + 1, model=W, command="python eval.py")]
    if k >= 4:  # bob's process changes its state (attributes, not utilization)
        procs[1].state = "S"
    if 6 <= k < 9:  # a third process comes and goes
        procs.append(proc(103, "carol", mem_gib=2, start=1.7e9 + 2, model=W))
    if k >= 10:  # alice's job grows its memory
        procs[0].gpu_memory = 30 * GIB
    if k >= 12:  # the processes are listed in another order
        procs.reverse()
    g0 = gpu(0, util=90 + k % 7, procs=procs, temp=60 + k % 3, power=400.5, model=W, power_limit=700.0,
             throttle_reasons=[] if k % 4 else ["sw_power_cap"])
    g1 = gpu(1, util=0, procs=[], model=W, power_limit=700.0, temp=40)  # idle: often nothing changes
    if k == 14:
        g1.read_errors = {"fan_speed": "NVML_ERROR_UNKNOWN"}
    s = snap(g0, g1, ts=1_700_000_000.0 + k, seq=k, model=W)
    s.proto = wire.FRAME_PROTO
    if k >= 8:  # Slurm allocates GPU 1 to a job that runs nothing on it
        s.allocations = [wire.SlurmAllocation(job="88", gpu_indexes=[1], user="dave")]
    return s


def _fields(g: sample.GpuSample) -> dict[str, Any]:
    return {name: getattr(g, name) for name in sample.GpuSample.__struct_fields__}


def _same(got: sample.Snapshot, want: sample.Snapshot) -> None:
    assert (got.ts, got.seq, got.allocations) == (want.ts, want.seq, want.allocations)
    assert [_fields(g) for g in got.gpus] == [_fields(g) for g in want.gpus]


def _lines(states: list[wire.Snapshot], encoder: delta.DeltaEncoder) -> Iterator[bytes]:
    for s in states:
        yield encoder.encode(copy.deepcopy(s))


def test_deltas_make_the_full_snapshots_again_and_share_unchanged_process_lists() -> None:
    states = [_state(k) for k in range(16)]
    encoder = delta.DeltaEncoder(keyframe_every=float("inf"))
    encoder.accept()
    base = DeltaBase()
    kinds = []
    previous: sample.Snapshot | None = None
    shared = 0
    for state, line in zip(states, _lines(states, encoder), strict=True):
        frame = wirefast.decode(line)
        kinds.append(frame.type)
        got = base.apply(frame, float("inf")) if isinstance(frame, sample.Delta) else \
            base.full(frame, float("inf"))  # type: ignore[arg-type]
        _same(got, sample.from_wire(wire.decode(wire.encode(state))))  # type: ignore[arg-type]
        if previous is not None:
            shared += sum(a.processes is b.processes for a, b in zip(got.gpus, previous.gpus, strict=True))
        previous = got
    assert kinds == ["snapshot"] + ["delta"] * 15
    assert encoder.keyframes == 1 and encoder.deltas == 15
    # GPU 1 (no processes) always; GPU 0 in the samples where only its processes' SM util changed
    assert shared >= 15 + 9, shared


def test_a_delta_carries_only_what_changed() -> None:
    encoder = delta.DeltaEncoder(keyframe_every=float("inf"))
    encoder.accept()
    encoder.encode(_state(0))
    obj = json.loads(encoder.encode(_state(1)))
    assert obj["type"] == "delta" and obj["proto"] == "1.3" and obj["base"] == 0 and obj["seq"] == 1
    [g0] = obj["gpus"]  # GPU 1 did not change: not listed
    assert g0["util"] == [[101, 91, None]] and "changed" not in g0 and "pids" not in g0
    assert not set(g0) & set(delta.GPU_CONSTANTS), "constants travel in hello and keyframes only"
    obj = json.loads(encoder.encode(_state(6)))  # carol arrives; bob's state changed (at 4)
    [g0] = obj["gpus"]
    assert g0["pids"] == [101, 102, 103] and [p["pid"] for p in g0["changed"]] == [102, 103]
    full = len(wire.encode(_state(7)))
    assert len(encoder.encode(_state(7))) < full / 4


@pytest.mark.parametrize("change", ["gpu_lost", "constant", "twice", "every"])
def test_keyframes_where_a_delta_cannot_say_it(change: str) -> None:
    encoder = delta.DeltaEncoder(keyframe_every=60.0, clock=lambda: now[0])
    now = [0.0]
    encoder.accept()
    encoder.encode(_state(0))
    s = _state(1)
    if change == "gpu_lost":  # the GPUs themselves changed
        s.gpus = s.gpus[:1]
    elif change == "constant":  # the power limit was changed: an inventory frame
        s.gpus[0].power_limit = 500.0
    elif change == "twice":  # two MIG instances of one GPU list one pid twice
        s.gpus[0].processes.append(copy.deepcopy(s.gpus[0].processes[0]))
    else:
        now[0] = 60.0
    assert json.loads(encoder.encode(s))["type"] == "snapshot"
    encoder.resync()
    assert json.loads(encoder.encode(_state(2)))["type"] == "snapshot", "a resync asks for a keyframe"


def test_without_the_collectors_accept_the_agent_sends_1_2_snapshots() -> None:
    """A 1.3 agent and a collector before 1.3: full snapshots of the 1.2 format, which an older collector
    takes on its fast path (its versions are 1.0-1.2: a decoder that knows only those takes them)."""
    encoder = delta.DeltaEncoder()
    lines = [encoder.encode(_state(k)) for k in range(3)]
    assert lines == [wire.encode(_state(k)) for k in range(3)]
    older = sample.KNOWN_VERSIONS[:-1]
    assert older == ("1.0", "1.1", "1.2")
    for line in lines:
        obj = json.loads(line)
        assert obj["type"] == "snapshot" and obj["proto"] in older
        assert wirefast.fast_decode(line) is not None


def test_the_edge_refuses_a_delta_that_does_not_apply() -> None:
    encoder = delta.DeltaEncoder(keyframe_every=float("inf"))
    encoder.accept()
    base = DeltaBase()
    lines = list(_lines([_state(k) for k in range(4)], encoder))
    with pytest.raises(DeltaMismatch, match="before any snapshot"):
        base.apply(wirefast.decode(lines[1]), float("inf"))  # type: ignore[arg-type]
    base.full(wirefast.decode(lines[0]), float("inf"))  # type: ignore[arg-type]
    with pytest.raises(DeltaMismatch, match="applies to frame 1, the last one here is 0"):
        base.apply(wirefast.decode(lines[2]), float("inf"))  # type: ignore[arg-type]
    obj = json.loads(lines[1])
    obj["gpus"][0]["util"] = [[999, 1, 1]]
    with pytest.raises(DeltaMismatch, match="no pid 999"):
        base.apply(wirefast.decode(json.dumps(obj).encode()), float("inf"))  # type: ignore[arg-type]
    obj = json.loads(lines[1])
    obj["gpus"][0]["index"] = 7
    with pytest.raises(DeltaMismatch, match="names GPU 7"):
        base.apply(wirefast.decode(json.dumps(obj).encode()), float("inf"))  # type: ignore[arg-type]


def _delta_lines() -> Iterator[bytes]:
    encoder = delta.DeltaEncoder(keyframe_every=float("inf"))
    encoder.accept()
    yield from _lines([_state(k) for k in range(16)], encoder)
    gen = FrameGenerator("h1", 8, procs=8)
    yield from (gen.delta(k) for k in range(1, 61))
    base = json.loads(gen.delta(21))
    # what the fast path must refuse, for the reference to decide (count, null, clamp or raise)
    for key, value in (("uuid", "GPU-x"), ("name", None), ("processes", []), ("future", 1)):
        yield json.dumps({**base, "gpus": [{**base["gpus"][0], key: value}]}).encode()
    yield json.dumps({**base, "gpus": [{**base["gpus"][0], "util": [[1, 101, 0]]}]}).encode()  # clamped
    yield json.dumps({**base, "gpus": [{**base["gpus"][0], "util": [[1, 2]]}]}).encode()  # malformed
    yield json.dumps({**base, "gpus": [{**base["gpus"][0], "pids": [-1]}]}).encode()
    yield json.dumps({**base, "gpus": [{**base["gpus"][0], "temperature": 999}]}).encode()  # nulled
    yield json.dumps({k: v for k, v in base.items() if k != "base"}).encode()  # base is required
    yield json.dumps({**base, "allocations": []}).encode()




def test_both_decoders_agree_on_every_delta() -> None:
    def reference(line: bytes, max_bytes: int, notes: wire.DecodeNotes) -> Any:
        return sample.from_wire(wire.decode(line, max_bytes, notes))

    lines = list(_delta_lines())
    fast = sum(1 for line in lines if wirefast.fast_decode(line) is not None)
    assert fast >= 16 + 60, "the agent's deltas take the fast path"
    for line in lines:
        assert decode_outcome(wirefast.decode, line) == decode_outcome(reference, line), line[:200]
    notes = wire.DecodeNotes()
    wirefast.decode(json.dumps({**json.loads(FrameGenerator("h1", 8, procs=8).delta(21)), "gpus": [
        {"index": 0, "uuid": "GPU-x"}]}).encode(), notes=notes)
    assert notes.unknown_fields == 1 and notes.last_unknown == "delta.gpus[0].uuid"


def test_control_lines() -> None:
    assert delta.parse_control(delta.ACCEPT.rstrip()) == "accept"
    assert delta.parse_control(delta.RESYNC) == "resync"
    for junk in (b"", b"{", b"[1]", b'{"type":"accept"}', b'{"type":"accept","delta":1}',
                 b"x" * (delta.CONTROL_MAX + 1)):
        assert delta.parse_control(junk) is None
