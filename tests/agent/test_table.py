"""The `--once` table people read: columns named, nothing misleading about processes we cannot attribute."""

from __future__ import annotations

from gpufleet.agent import wire
from gpufleet.agent.table import render

GIB = 1 << 30


def snapshot(*procs: wire.ProcessSample, name: str = "NVIDIA RTX 6000 Ada Generation") -> wire.Snapshot:
    gpu = wire.GpuSample(
        index=0,
        uuid="GPU-x",
        name=name,
        util_gpu=3,
        memory_used=40 * GIB,
        memory_total=48 * GIB,
        temperature=41,
        power_draw=61.0,
        power_limit=300.0,
        fan_speed=30,
        throttle_reasons=["gpu_idle", "sw_thermal"],
        processes=list(procs),
    )
    lost = wire.GpuSample(index=1, uuid="GPU-y", name=name, error="GPU lost: NVML_ERROR_GPU_IS_LOST")
    return wire.Snapshot(ts=1000.0, seq=1, gpus=[gpu, lost])


def hello(pid_namespace_ok: bool | None) -> wire.Hello:
    return wire.Hello(agent_version="0", hostname="node-1", ts=1.0, pid_namespace_ok=pid_namespace_ok)


def test_gpu_and_process_columns() -> None:
    alice = wire.ProcessSample(pid=4242, gpu_memory=40 * GIB, sm_util=2, user="alice", command="python a.py",
                               start_time=1000.0 - 3 * 3600, state="S", job="812")
    text = render(snapshot(alice), hello(True), now=1000.0)
    lines = text.splitlines()
    assert lines[0].startswith("node-1  driver -")
    header, gpu0, proc_header, proc, lost = lines[1:]
    assert header.split()[:3] == ["GPU", "NAME", "UTIL"] and "FAN" in header and "FLAGS" in header
    assert "NVIDIA RTX 6000 Ada Generation" in gpu0  # the whole name, not cut at 28 characters
    assert gpu0.split()[-2:] == ["30%", "sw_thermal"]  # fan, then flags without the idle reason
    assert proc_header.split() == ["PID", "USER", "GMEM", "SM", "TIME", "S", "COMMAND"]
    assert proc.split() == ["4242", "alice", "40G", "2%", "3h00m", "S", "python", "a.py", "job=812"]
    # the collector's units (issue 36): memory used/total in GiB, °C, watts
    assert "40/48G" in gpu0 and "41°C" in gpu0 and "61/300W" in gpu0
    assert lost.split()[0] == "1" and "GPU lost: NVML_ERROR_GPU_IS_LOST" in lost


def test_unattributed_process_is_not_called_dead_or_unreadable_by_guess() -> None:
    ghost = wire.ProcessSample(pid=77, gpu_memory=GIB, attributed=False)
    text = render(snapshot(ghost), hello(True), now=1000.0)
    assert "unattributed" in text and "host PID namespace" not in text
    assert "defunct" not in text and "dead" not in text


def test_other_pid_namespace_is_said_plainly() -> None:
    ghost = wire.ProcessSample(pid=77, gpu_memory=GIB, attributed=False)
    text = render(snapshot(ghost), hello(False), now=1000.0)
    note = [line for line in text.splitlines() if line.startswith("note:")]
    assert len(note) == 1 and "--pid=host" in note[0]
    assert "run the agent in the host PID namespace" in text.splitlines()[-2]


def test_zombie_is_marked() -> None:
    z = wire.ProcessSample(pid=5, gpu_memory=GIB, user="bob", command="python z.py", state="Z")
    assert "python z.py <defunct>" in render(snapshot(z), None, now=1000.0)


def test_lines_fit_the_terminal_and_a_pipe_gets_them_whole() -> None:
    """Issue 36: --once ignored the terminal's width and wrapped mid-word; now a command is cut at the edge
    and a note wraps between words, and without a width (a pipe) nothing is cut."""
    cmd = "python -m torch.distributed.run --nproc-per-node 8 train.py --config configs/llama-70b.yaml"
    alice = wire.ProcessSample(pid=4242, gpu_memory=40 * GIB, sm_util=2, user="alice", command=cmd,
                               start_time=1000.0 - 60, state="S")
    narrow = render(snapshot(alice), hello(False), now=1000.0, width=60).splitlines()
    assert all(len(line) <= 60 for line in narrow), narrow
    note = " ".join(line.strip() for line in narrow if "namespace" in line or "--pid=host" in line)
    assert "(container without --pid=host / hostPID: true)" in note  # words kept whole
    assert any(line.endswith("…") and "4242" in line for line in narrow)
    whole = render(snapshot(alice), hello(False), now=1000.0)
    assert cmd in whole
