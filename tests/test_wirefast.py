"""The collector's msgspec decoder (collector/transport/wirefast.py) gives what the reference decoder gives.

Over a corpus -- every bundled scenario's real frames, the simulator's frames, the malformed and hostile
lines of tests/test_wire.py and tests/hostile, and every numeric field at and beyond its range -- the fast
decoder's frame and notes equal the reference's, or it raises the same error with the same message.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from gpufleet.agent import wire
from gpufleet.collector.model import sample
from gpufleet.collector.simfleet import FrameGenerator
from gpufleet.collector.transport import wirefast

from tests.builders import scenario_frames

HUGE = 10 ** 30


def decode_outcome(decode: Any, line: bytes | str) -> tuple[Any, ...]:
    """What ``decode`` makes of ``line``: the frame and its notes, or the error (compared across decoders)."""
    notes = wire.DecodeNotes()
    try:
        frame = decode(line, wire.MAX_LINE_BYTES, notes)
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return ("error", type(exc), str(exc))
    return ("frame", frame, notes)


def _reference(line: bytes | str, max_bytes: int, notes: wire.DecodeNotes) -> sample.Frame:
    """The reference decoder's frame in the collector's classes: what the fast path must equal."""
    return sample.from_wire(wire.decode(line, max_bytes, notes))


def _scenario_lines() -> Iterator[bytes]:
    last = 1000.0
    for frame in scenario_frames():
        if isinstance(frame, wire.Hello) and last > 1000.0:
            yield wire.encode(wire.Heartbeat(ts=last, seq=3))  # one after each scenario, as before
        last = frame.ts
        yield wire.encode(frame)
    yield wire.encode(wire.Heartbeat(ts=last, seq=3))


def _base() -> dict[str, Any]:
    proc = {"pid": 42, "kind": "compute", "gpu_memory": 1 << 30, "sm_util": 3, "mem_util": 1, "user": "alice",
            "uid": 1000, "command": "python train.py", "start_time": 1700000000.0, "state": "S", "ppid": 1,
            "container": "c1", "pod": "p1", "job": "81234", "attributed": True}
    mig = {"gi_id": 1, "ci_id": 0, "uuid": "MIG-1", "profile": "1g.10gb", "memory_total": 10 << 30,
           "memory_used": 1 << 30}
    gpu = {"index": 0, "uuid": "GPU-1", "name": "A100", "serial": "123", "pci_bus_id": "0000:01:00.0",
           "util_gpu": 2, "util_mem": 1, "memory_total": 80 << 30, "memory_used": 40 << 30,
           "memory_reserved": 1 << 20, "temperature": 55, "temp_slowdown": 87, "temp_shutdown": 92,
           "power_draw": 61.5, "power_limit": 400, "clock_sm": 1400, "clock_mem": 1593,
           "throttle_reasons": ["sw_power_cap"], "fan_speed": 30, "ecc_corrected": 0, "ecc_uncorrected": 0,
           "mig_mode": True, "mig_instances": [mig], "processes": [proc], "error": None, "sm_active": 40}
    proc.update(pod_namespace="research", pod_name="trainer-0", container_name="pytorch")
    alloc = {"job": "81234", "gpu_indexes": [0, 1], "name": "llama-pretrain", "user": "alice",
             "account": "nlp", "partition": "gpu", "state": "RUNNING"}
    return {"type": "snapshot", "proto": "1.0", "ts": 1700000100.5, "seq": 7, "gpus": [gpu],
            "allocations": [alloc]}


_PATHS = {sample.Snapshot: (), sample.Heartbeat: (), sample.GpuSample: ("gpus", 0),
          sample.ProcessSample: ("gpus", 0, "processes", 0),
          sample.MigInstance: ("gpus", 0, "mig_instances", 0), sample.SlurmAllocation: ("allocations", 0)}
#: each collector sample class beside the wire dataclass it mirrors
_MIRRORS = {sample.Snapshot: wire.Snapshot, sample.Heartbeat: wire.Heartbeat,
            sample.GpuSample: wire.GpuSample, sample.ProcessSample: wire.ProcessSample,
            sample.MigInstance: wire.MigInstance, sample.SlurmAllocation: wire.SlurmAllocation}


def _with(path: tuple[Any, ...], key: str, value: Any, frame: dict[str, Any] | None = None) -> bytes:
    obj = copy.deepcopy(frame or _base())
    target = obj
    for step in path:
        target = target[step]
    if value is _DROP:
        target.pop(key, None)
    else:
        target[key] = value
    return json.dumps(obj).encode()


_DROP = object()
_HEARTBEAT = {"type": "heartbeat", "proto": "1.0", "ts": 5.0, "seq": 1}


def _boundary_lines() -> Iterator[bytes]:
    """Every numeric field of every sample class at, inside and beyond its bounds, and as the wrong type."""
    for cls, path in _PATHS.items():
        frame = _HEARTBEAT if cls is sample.Heartbeat else None
        for key, bounds in wirefast.ranges(cls).items():
            assert bounds is not None, (cls, key)
            lo, hi = bounds
            for value in (lo, hi, lo - 1, hi + 1, lo - 0.5, hi + 0.5, (lo + hi) / 2, int(lo + hi) // 2, HUGE,
                          -HUGE, True, "1", None, 10 ** 400, _DROP):
                yield _with(path, key, value, frame)


def _text_lines() -> Iterator[bytes | str]:
    for value in ("\ud800", "bo\x00b", "a\x1b[31m\x07", "jörg", "a\tb 😀", "\x7f", "", "ok", 5, None, True,
                  ["x"]):
        for path, key in ((("gpus", 0, "processes", 0), "user"), (("gpus", 0, "processes", 0), "kind"),
                          (("gpus", 0), "uuid"), (("gpus", 0), "name")):
            yield _with(path, key, value)
            yield _with(path, key, value).decode()
    for reasons in ([], ["a", 1], "x", None, ["\ud800"]):
        yield _with(("gpus", 0), "throttle_reasons", reasons)
    yield json.dumps(_base(), ensure_ascii=False).encode()
    yield b'{"type":"snapshot","proto":"1.0","ts":1,"gpus":[{"index":0,"uuid":"a\tb"}]}'  # raw tab: not JSON
    yield b'{"type":"snapshot","proto":"1.0","ts":1,"gpus":[{"index":0,"uuid":"a\x00b"}]}'
    yield b'{"type":"snapshot","proto":"1.0","ts":1,"gpus":[{"index":0,"uuid":"\xff"}]}'  # not UTF-8


def _shape_lines() -> Iterator[bytes | str]:
    deep = '{"type":"snapshot","proto":"1.0","ts":1,"gpus":' + "[" * 100_000 + "]" * 100_000 + "}"
    yield deep
    yield deep.encode()
    for key, value in (("proto", "1.9"), ("proto", "1"), ("proto", "1.0.0"), ("proto", " 1.0"),
                       ("proto", "2.0"), ("proto", 1.0), ("proto", _DROP), ("type", "bogus"), ("type", 5),
                       ("type", _DROP), ("type", "hello"), ("type", "event"), ("future", {"x": 1}),
                       ("gpus", None), ("gpus", {}), ("gpus", []), ("gpus", [1]), ("seq", None),
                       ("ts", "soon"), ("ts", _DROP), ("ts", 10 ** 399), ("ts", -(10 ** 399)),
                       ("ts", -5.0), ("ts", 1e300)):
        yield _with((), key, value)
        yield _with((), key, value, _HEARTBEAT)
    proc = ("gpus", 0, "processes", 0)
    for path, key, value in ((("gpus", 0), "future_gpu_field", 3), (proc, "cgroup_v3", "x"),
                             (("gpus", 0), "processes", None), (("gpus", 0), "mig_instances", None),
                             (("gpus", 0, "processes", 0), "attributed", None),
                             (("gpus", 0, "processes", 0), "attributed", False),
                             (("gpus", 0, "processes", 0), "attributed", 1),
                             (("gpus", 0), "mig_mode", 1), (("gpus", 0), "index", _DROP),
                             (("gpus", 0), "uuid", _DROP), (("gpus", 0, "processes", 0), "pid", _DROP),
                             (("gpus", 0, "mig_instances", 0), "gi_id", _DROP),
                             (("gpus", 0), "error", "lost")):
        yield _with(path, key, value)
    alloc = ("allocations", 0)
    for key, value in (("gpu_indexes", []), ("gpu_indexes", [0, 65535]), ("gpu_indexes", [65536]),
                       ("gpu_indexes", [-1]), ("gpu_indexes", [True]), ("gpu_indexes", [1.0]),
                       ("gpu_indexes", "0-1"), ("gpu_indexes", None), ("gpu_indexes", _DROP), ("job", _DROP),
                       ("job", 5), ("job", ""), ("name", None), ("state", "\x1b[2J"), ("future", 1)):
        yield _with(alloc, key, value)
    for value in (None, [], {}, [1], [{}]):
        yield _with((), "allocations", value)
    big = "9" * 400
    yield from (b"not json", b"[1, 2]", b"", b"null", b'"x"', b'{"type": "snapshot", "ts": 1}',
                b'{"type": "snapshot", "proto": "1.0", "ts": NaN}',
                b'{"type": "snapshot", "proto": "1.0", "ts": Infinity}',
                b'{"type": "snapshot", "proto": "1.0", "ts": 1e400}',
                b'{"type":"snapshot","proto":"1.0","ts":' + big.encode() + b'}',
                b'{"type":"heartbeat","proto":"1.0","ts":' + big.encode() + b'.5}',
                b'{"type":"heartbeat","proto":"1.0","ts":1,"seq":' + big.encode() + b'}',
                b'{"type":"heartbeat","proto":"1.0","ts":1,"ts":2}',
                b'{"type":"heartbeat","proto":"1.0","ts":1,"seq":1}  \n',
                b'{"type":"heartbeat","proto":"1.0","ts":1}{}',
                b'{"type": "bogus", "proto": "1.9", "x": {"y": 1}}', b'{"type": "bogus", "proto": "2.0"}',
                b'{"type":"heartbeat","proto":"1.0","ts":1,"gpus":[]}')


def _corpus() -> Iterator[bytes | str]:
    yield from _scenario_lines()
    gen = FrameGenerator("h1", 8, procs=8)
    yield gen.hello()
    yield gen.snapshot(5)
    yield json.dumps(_base()).encode()
    yield from _boundary_lines()
    yield from _text_lines()
    yield from _shape_lines()


def test_fast_decoder_matches_the_reference_over_the_corpus() -> None:
    lines = list(_corpus())
    fast_taken = 0
    for line in lines:
        ref = decode_outcome(_reference, line)
        got = decode_outcome(wirefast.decode, line)
        assert got == ref, line[:300]
        fast_taken += isinstance(line, bytes) and wirefast.fast_decode(line) is not None
    assert len(lines) > 700 and fast_taken > 200  # both paths are exercised


def test_the_common_frames_take_the_fast_path() -> None:
    line = FrameGenerator("h1", 8, procs=8).snapshot(5)
    snap = wirefast.fast_decode(line)
    assert isinstance(snap, sample.Snapshot) and snap == sample.from_wire(wire.decode(line))
    assert sum(len(g.processes) for g in snap.gpus) == 64
    assert isinstance(wirefast.fast_decode(wire.encode(wire.Heartbeat(ts=1.0, seq=2))), sample.Heartbeat)
    base = json.dumps(_base())
    assert wirefast.fast_decode(base.encode()) == sample.from_wire(wire.decode(base))


@pytest.mark.parametrize("cls", list(_PATHS))
def test_every_numeric_field_has_a_range(cls: type[sample.Snapshot]) -> None:
    missing = [name for name, bounds in wirefast.ranges(cls).items() if bounds is None]
    assert not missing, f"{cls.__name__}: no range for {missing} (a Meta(ge=..., le=...) in sample.py)"


@pytest.mark.parametrize("cls", list(_MIRRORS))
def test_each_sample_class_has_the_wire_fields_and_defaults(cls: type[sample.Snapshot]) -> None:
    """The Structs mirror the protocol's dataclasses: a field added to the wire and not here would make
    every frame carrying it take the slow path (or, missing from the wire, never be sent)."""
    ours = {f.name: f for f in msgspec.structs.fields(cls)}
    theirs = {f.name: f for f in dataclasses.fields(_MIRRORS[cls]) if f.name != "type"}
    assert set(ours) == set(theirs)
    for name, field in theirs.items():
        if name == "proto":
            continue  # the agent stamps its own version; a frame must carry one (required here)
        want = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        got = ours[name].default_factory() if ours[name].default_factory is not msgspec.NODEFAULT \
            else ours[name].default
        assert (got is msgspec.NODEFAULT) == (want is dataclasses.MISSING) and (
            want is dataclasses.MISSING or got == want), (cls.__name__, name, got, want)


def test_an_absurd_timestamp_is_a_malformed_frame_on_both_paths() -> None:
    for kind in ("heartbeat", "snapshot", "event"):
        line = f'{{"type":"{kind}","proto":"1.0","kind":"xid","ts":{"9" * 400}}}'
        for decode in (wire.decode, wirefast.decode):
            with pytest.raises(wire.MalformedFrame, match="'ts'"):
                decode(line.encode())


def test_the_agent_never_imports_msgspec() -> None:
    code = ("import pkgutil, importlib, sys, gpufleet.agent as a\n"
            "for m in pkgutil.walk_packages(a.__path__, 'gpufleet.agent.'):\n"
            "    m.name.endswith('__main__') or importlib.import_module(m.name)\n"
            "print('msgspec' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
