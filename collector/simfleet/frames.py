"""The simulator's agent frames: pre-encoded, so serving thousands of hosts measures the collector, not this.

A simulated host runs two Slurm jobs, each on half its GPUs (as a DDP job does: one rank a GPU), and plays a
cycle of :data:`CYCLE` one-second states, the same shape on every host: each GPU's util, power, temperature
and memory move a little every second; on each GPU the job's rank changes its SM util every second and the
job's other processes (its data loader workers, each holding a CUDA context) every ten; once a cycle a
worker leaves GPU 0 and another arrives later, and GPU 1's rank grows its memory and shrinks it back. The
processes carry what the agent reads from /proc and Slurm (user, command, start time, parent, job and its
name, user, account, partition, state): a full frame of 8 GPUs x 8 processes is about 30 KB, like a real
host's. So a 1.3 delta carries what a real host's would, and the collector's work per change is exercised.

What is encoded once per shape (GPUs x processes), for every host: the delta of each step of the cycle
(agent/delta.py's own encoder made them: deltas name no host), and each state's full snapshot with the
host's name left as a placeholder. Per frame a host only patches in ts, seq (and base), or its name into a
full snapshot (a keyframe, or every frame of a pre-1.3 host).
"""

from __future__ import annotations

import socket
import time
import zlib
from dataclasses import dataclass
from typing import ClassVar, Final

from gpufleet.agent import delta, wire

#: One-second states in a host's cycle (a divisor of delta.KEYFRAME_EVERY keeps keyframes cheap to reason
#: about; any length works).
CYCLE: Final = 60
_HOST: Final = "@HOST@"  # stands for the host's name in the shared encodings
GIB: Final = 1 << 30


#: The host's two Slurm jobs: (id, user, uid, name, account), each on half of its GPUs. The ids stand for
#: each host's own (:func:`job_ids`): a Slurm job id names one job in the cluster, and two jobs that every
#: host shared would be one job spanning the whole fleet, which no real fleet runs on every host.
JOBS: Final = (("@JOB0@", "alice", 1001, "llama-pretrain", "nlp"),
               ("@JOB1@", "bob", 1002, "vit-finetune", "vision"))


def job_ids(name: str) -> tuple[bytes, bytes]:
    """Host ``name``'s two job ids: from the number in its name (sim-0042), else a checksum of it."""
    digits = "".join(c for c in name if c.isdigit())
    n = int(digits[-7:]) if digits else zlib.crc32(name.encode()) % 10_000_000
    return b"%d" % (1_000_000 + 2 * n), b"%d" % (1_000_001 + 2 * n)


def _processes(i: int, k: int, gpus: int, procs: int) -> list[wire.ProcessSample]:
    """GPU ``i``'s processes in state ``k`` of the cycle."""
    job, user, uid, name, account = JOBS[0 if i < max(1, gpus // 2) else 1]
    rank = i if i < max(1, gpus // 2) else i - gpus // 2
    out = []
    for j in range(max(1, procs)):
        pid = 10_000 + 100 * i + j
        if i == 0 and j == procs - 1 and j > 0:  # GPU 0's last worker: leaves at 20, another comes at 40
            if 20 <= k < 40:
                continue
            if k >= 40:
                pid += 50
        main = j == 0  # the rank; the others are its data loader workers
        memory = ((20 + i) << 30) if main else 512 << 20
        if main and i == 1 and k >= 30:
            memory += GIB  # the rank's cache grows for half the cycle
        sm = 80 + (3 * k + i) % 20 if main else 5 + (k // 10 + j) % 3
        command = (f"/opt/conda/bin/python -u train.py --config configs/{name}.yaml --local-rank {rank}"
                   + ("" if main else f" --dataloader-worker {j}"))
        out.append(wire.ProcessSample(
            pid=pid, gpu_memory=memory, sm_util=sm, mem_util=sm // 3, user=user, uid=uid, command=command,
            start_time=1.7e9 + i, state="R" if main else "S", ppid=9_000 + i if main else pid - j,
            job=job, job_name=name, job_user=user, job_account=account, job_partition="gpu",
            job_state="RUNNING"))
    return out


def _gpu(host: str, i: int, k: int, gpus: int, procs: int) -> wire.GpuSample:
    plist = _processes(i, k, gpus, procs)
    return wire.GpuSample(
        index=i, uuid=f"GPU-sim-{host}-{i}", name="Simulated H100", util_gpu=90 + (7 * k + 3 * i) % 10,
        util_mem=35 + (5 * k + i) % 10, memory_total=80 << 30,
        memory_used=sum(p.gpu_memory or 0 for p in plist) + GIB // 2, temperature=60 + i + (k // 10) % 3,
        power_draw=400.5 + (13 * k + 7 * i) % 60, power_limit=700.0, clock_sm=1980, clock_mem=2619,
        temp_slowdown=87, temp_shutdown=92, throttle_reasons=[], ecc_corrected=0, ecc_uncorrected=0,
        processes=plist)


def _state(host: str, k: int, gpus: int, procs: int) -> wire.Snapshot:
    half = max(1, gpus // 2)
    alloc = [wire.SlurmAllocation(job=job, gpu_indexes=[i for i in range(gpus) if (i < half) == (n == 0)],
                                  name=name, user=user, account=account, partition="gpu", state="RUNNING")
             for n, (job, user, _, name, account) in enumerate(JOBS)]
    return wire.Snapshot(ts=0.0, seq=0, gpus=[_gpu(host, i, k, gpus, procs) for i in range(gpus)],
                         allocations=[a for a in alloc if a.gpu_indexes])


def _split(line: bytes, head: int) -> bytes:
    """``line`` without its first ``head`` fields (``{"ts":..,"seq":..`` [``,"base":..``]): the body that
    follows them, which the frame's own values are put in front of."""
    cut = 0
    for _ in range(head):
        cut = line.index(b",", cut + 1)
    return line[cut:]


@dataclass(slots=True)
class _Shape:
    """What every host of one shape shares (module docstring)."""

    fulls: list[bytes]  # state k's full snapshot body (after ts and seq), the host's name a placeholder
    deltas: list[bytes]  # the delta from state k - 1 to state k (body after ts, seq and base)


def _shape(gpus: int, procs: int) -> _Shape:
    states = [_state(_HOST, k, gpus, procs) for k in range(CYCLE)]
    fulls = [_split(wire.encode(s), 2) for s in states]
    encoder = delta.DeltaEncoder(keyframe_every=float("inf"))
    encoder.accept()
    encoder.encode(states[-1])  # the keyframe: the state before state 0
    deltas = []
    for k, s in enumerate(states):
        s.seq = k + 1
        line = encoder.encode(s)
        assert b'"type":"delta"' in line and _HOST.encode() not in line, "a delta names no host"
        deltas.append(_split(line, 3))
    return _Shape(fulls, deltas)


class FrameGenerator:
    """Cheap wire frames for the in-process mode of one simulated host (module docstring).

    ``hello()`` first; then ``snapshot(seq)`` every second for a pre-1.3 host, or after the collector's
    accept ``keyframe(seq)`` once and ``delta(seq)`` from then on (``delta`` needs the previous frame to
    have been ``seq - 1``'s). A host's state follows its seq, so whichever frames it sends, they agree."""

    _shapes: ClassVar[dict[tuple[int, int], _Shape]] = {}

    def __init__(self, name: str, gpus: int, claimed_hostname: str | None = None, procs: int = 1,
                 deltas: bool = True) -> None:
        self.name = name
        self.claimed = claimed_hostname or f"{socket.gethostname()}-{name}"
        self.deltas = deltas  # offer 1.3 deltas in hello (False: a pre-1.3 agent)
        key = (gpus, max(1, procs))
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _shape(gpus, max(1, procs))
        self._shape = shape
        self._host = name.encode()
        self._jobs = job_ids(name)
        first = _gpu(name, 0, 0, gpus, 1)
        self.gpu_info = [wire.GpuInfo(index=i, uuid=f"GPU-sim-{name}-{i}", name=first.name,
                                      memory_total=first.memory_total, power_limit=first.power_limit,
                                      temp_slowdown=first.temp_slowdown, temp_shutdown=first.temp_shutdown)
                         for i in range(gpus)]

    def hello(self) -> bytes:
        line: bytes = wire.encode(wire.Hello(agent_version="sim", hostname=self.claimed, ts=time.time(),
                                             driver_version="550.54.15", nvml_version="12.550.54.15",
                                             cuda_version=12040, backend="fake", gpus=self.gpu_info,
                                             delta=True if self.deltas else None))
        return line

    def snapshot(self, seq: int) -> bytes:
        """The full snapshot of state ``seq`` (a keyframe, or any frame of a pre-1.3 host)."""
        body = self._own(self._shape.fulls[seq % CYCLE].replace(_HOST.encode(), self._host))
        return b'{"ts":%.6f,"seq":%d' % (time.time(), seq) + body

    keyframe = snapshot

    def delta(self, seq: int) -> bytes:
        """The delta from state ``seq - 1`` to state ``seq``."""
        head = b'{"ts":%.6f,"seq":%d,"base":%d' % (time.time(), seq, seq - 1)
        return head + self._own(self._shape.deltas[seq % CYCLE])

    def _own(self, body: bytes) -> bytes:
        """``body`` with this host's job ids for the placeholders (a delta names them as a process comes)."""
        return body.replace(b"@JOB0@", self._jobs[0]).replace(b"@JOB1@", self._jobs[1])
