"""The wire protocol both sides share: round trips, bounds, version rules, hostile input."""

from __future__ import annotations

import json

import pytest
from gpufleet.agent import wire


def _snapshot() -> wire.Snapshot:
    proc = wire.ProcessSample(pid=42, gpu_memory=1 << 30, sm_util=3, user="alice", command="jupyter-lab",
                              start_time=1700000000.0, state="S", job="81234")
    gpu = wire.GpuSample(index=0, uuid="GPU-1", name="A100", util_gpu=2, memory_total=80 << 30,
                         memory_used=40 << 30, temperature=55, power_draw=61.5, throttle_reasons=[],
                         processes=[proc])
    lost = wire.GpuSample(index=1, uuid="GPU-2", error="GPU is lost")
    return wire.Snapshot(ts=1700000100.5, seq=7, gpus=[gpu, lost])


def test_round_trip_keeps_every_field() -> None:
    snap = _snapshot()
    assert wire.decode(wire.encode(snap)) == snap


def test_empty_throttle_list_means_none_not_unsupported() -> None:
    decoded = wire.decode(wire.encode(_snapshot()))
    assert isinstance(decoded, wire.Snapshot)
    assert decoded.gpus[0].throttle_reasons == []  # "not throttling"
    assert decoded.gpus[1].throttle_reasons is None  # "not reported"


def test_unknown_fields_are_ignored_and_newer_minor_accepted() -> None:
    obj = json.loads(wire.encode(_snapshot()))
    obj["proto"] = "1.9"
    obj["future_field"] = {"x": 1}
    obj["gpus"][0]["future_gpu_field"] = 3
    assert isinstance(wire.from_object(obj), wire.Snapshot)


def test_unknown_major_version_is_a_clear_error() -> None:
    obj = json.loads(wire.encode(wire.Heartbeat(ts=1.0)))
    obj["proto"] = "2.0"
    with pytest.raises(wire.ProtocolVersionError, match="protocol 2.0"):
        wire.from_object(obj)


def test_oversized_line_rejected_before_parsing() -> None:
    line = b'{"pad":"' + b"x" * 2000 + b'"}'
    with pytest.raises(wire.FrameTooLarge, match="exceeds the 1000-byte bound"):
        wire.decode(line, max_bytes=1000)


@pytest.mark.parametrize(("line", "message"), [
    (b"not json", "not valid JSON"),
    (b"[1, 2]", "must be an object"),
    (b'{"type": "snapshot", "ts": 1}', "proto"),
    (b'{"type": 5, "proto": "1.0"}', "bad frame type"),
    (b'{"type": "snapshot", "proto": "1.0", "ts": "soon"}', "'ts' must be"),
    (b'{"type": "snapshot", "proto": "1.0", "ts": 1, "gpus": [{"index": true, "uuid": "u"}]}', "got bool"),
    (b'{"type": "snapshot", "proto": "1.0", "ts": 1, "gpus": [{"index": 0}]}', "'uuid'"),
    (b'{"type": "snapshot", "proto": "1.0", "ts": NaN}', "not finite"),
    (b'{"type": "snapshot", "proto": "1.0", "ts": 1, "gpus": [{"index": 0, "uuid": "u",'
     b' "processes": [{"pid": "42"}]}]}', "processes[0]"),
])
def test_malformed_frames_name_the_problem(line: bytes, message: str) -> None:
    with pytest.raises(wire.MalformedFrame, match=message.replace("[", r"\[").replace("]", r"\]")):
        wire.decode(line)


def test_unknown_frame_type_of_this_major_is_ignored_not_malformed() -> None:
    with pytest.raises(wire.IgnoredFrame, match="unknown frame type 'bogus' .protocol 1.9. ignored"):
        wire.decode(b'{"type": "bogus", "proto": "1.9", "x": {"y": 1}}')
    with pytest.raises(wire.ProtocolVersionError):
        wire.decode(b'{"type": "bogus", "proto": "2.0"}')


def test_unknown_fields_are_counted() -> None:
    obj = json.loads(wire.encode(_snapshot()))
    obj["future"] = 1
    obj["gpus"][0]["processes"][0]["cgroup_v3"] = "x"
    notes = wire.DecodeNotes()
    assert wire.from_object(obj, notes) == _snapshot()
    assert notes.unknown_fields == 2 and notes.last_unknown == "snapshot.gpus[0].processes[0].cgroup_v3"


def test_percentages_are_clamped() -> None:
    obj = json.loads(wire.encode(_snapshot()))
    obj["gpus"][0]["util_gpu"] = 140
    obj["gpus"][0]["processes"][0]["sm_util"] = 250
    snap = wire.from_object(obj)
    assert isinstance(snap, wire.Snapshot)
    assert snap.gpus[0].util_gpu == 100 and snap.gpus[0].processes[0].sm_util == 100


def test_slurm_fields_of_proto_1_1_round_trip_and_are_made_safe() -> None:
    """1.1 adds what Slurm says of a process's job; text like any other: sanitised at decode."""
    snap = _snapshot()
    p = snap.gpus[0].processes[0]
    p.job_name, p.job_user, p.job_account, p.job_partition, p.job_state = (
        "train llm=7b", "alice", "nlp", "h100", "RUNNING")
    assert wire.PROTO_MINOR >= 1 and wire.decode(wire.encode(snap)) == snap
    obj = json.loads(wire.encode(snap))
    obj["gpus"][0]["processes"][0]["job_name"] = "evil\x1b[2Jname"
    decoded = wire.from_object(obj)
    assert isinstance(decoded, wire.Snapshot)
    assert decoded.gpus[0].processes[0].job_name == "evil\ufffd[2Jname"
    obj["gpus"][0]["processes"][0]["job_account"] = 5
    with pytest.raises(wire.MalformedFrame, match="'job_account' must be str"):
        wire.from_object(obj)


def test_a_1_0_frame_has_no_slurm_fields() -> None:
    obj = json.loads(wire.encode(_snapshot()))
    obj["proto"] = "1.0"
    decoded = wire.from_object(obj)
    assert isinstance(decoded, wire.Snapshot) and decoded.gpus[0].processes[0].job_name is None


def _with_allocations() -> wire.Snapshot:
    snap = _snapshot()
    snap.allocations = [wire.SlurmAllocation(job="81234", gpu_indexes=[0, 1], name="llama-pretrain",
                                             user="alice", account="nlp", partition="gpu", state="RUNNING"),
                        wire.SlurmAllocation(job="81240", gpu_indexes=[2])]
    p = snap.gpus[0].processes[0]
    p.pod, p.pod_namespace, p.pod_name, p.container_name = (
        "0b7e5c1d-3c4f-4b8a-9d2e-6f1a2b3c4d5e", "research", "trainer-7f9c", "pytorch")
    return snap


def test_allocations_and_kubernetes_names_round_trip_and_are_made_safe() -> None:
    """Issue 37: the Slurm jobs holding GPUs here (used or not), a pod's names; text sanitised at decode."""
    snap = _with_allocations()
    assert wire.decode(wire.encode(snap)) == snap
    assert wire.encode(snap) == wire.encode_reference(snap)
    obj = json.loads(wire.encode(snap))
    assert "allocations" not in json.loads(wire.encode(_snapshot()))  # none: left out, decoded as []
    obj["allocations"][0]["name"] = "evil\x1b[2Jname"
    obj["gpus"][0]["processes"][0]["pod_name"] = "pod\x00x"
    decoded = wire.from_object(obj)
    assert isinstance(decoded, wire.Snapshot)
    assert decoded.allocations[0].name == "evil\ufffd[2Jname"
    assert decoded.gpus[0].processes[0].pod_name == "pod\ufffdx"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("gpu_indexes", [0, -1], "'gpu_indexes' must be a list of GPU indexes"),
    ("gpu_indexes", [True], "'gpu_indexes' must be a list of GPU indexes"),
    ("gpu_indexes", "0-1", "'gpu_indexes' must be a list of GPU indexes"),
    ("gpu_indexes", [70000], "'gpu_indexes' must be a list of GPU indexes"),
    ("job", None, "snapshot.allocations\\[0\\]: missing required field 'job'"),
    ("job", 81234, "'job' must be str"),
])
def test_a_bad_allocation_is_a_malformed_frame(key: str, value: object, message: str) -> None:
    obj = json.loads(wire.encode(_with_allocations()))
    obj["allocations"][0][key] = value
    with pytest.raises(wire.MalformedFrame, match=message):
        wire.from_object(obj)
