"""A corpus of synthetic 1 Hz GPU traces shaped like real ones, and the confusion table of the rules on it.

Each case is what nvidia-smi shows for a familiar situation (util, memory and power per GPU, with the noise
real samples have; memory bandwidth util and GPM SM activity where the case says, as NVML reports them on a
Hopper GPU); :func:`confusion` feeds every case through the real alert engine (all rules, default
parameters, ``stuck_power_ratio`` 0.2 as a site with A100/H100 sets it) on a fake clock and returns which
rules *fired* (pending is not firing) on which case. ``python tests/rules/rules_corpus.py`` prints the table.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.collector.alerts.engine import AlertEngine
from gpufleet.collector.model import sample
from gpufleet.collector.settings import Config, HostConfig, default_rules

from tests.builders import gpu, proc, snap

GIB = 1 << 30
TOTAL = 80 * GIB
LIMIT = 400.0
IDLE_W = 60.0
DURATION = 2000  # seconds: past wasted's 30 min `for` and underused's 30 min window

#: (util, memory used GiB) of one GPU at second t; power follows util unless the case says otherwise
Trace = Callable[[int, random.Random], tuple[int, float]]


@dataclass(slots=True)
class Gpu:
    trace: Trace
    proc_gib: float  # what the job's process holds of the memory used
    power: Callable[[int, int, random.Random], float] | None = None  # (t, util) -> watts
    pid_at: Callable[[int], int | None] | None = None  # the job's process at t (None: none on the GPU)
    mem_bw: Callable[[int, random.Random], int] | None = None  # memory bandwidth util % (None: not reported)
    sm_active: Callable[[int, random.Random], int] | None = None  # GPM SM activity % (None: not reported)


@dataclass(slots=True)
class Case:
    name: str
    gpus: list[Gpu]
    expect: frozenset[str]  # the rules that should fire
    job: str | None = None  # Slurm job id of the processes (one job on all GPUs)


def _noisy(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randint(lo, hi)


def steady(t: int, rng: random.Random) -> tuple[int, float]:
    return _noisy(rng, 90, 99), 70.0 + rng.uniform(-0.05, 0.05)


def sawtooth(t: int, rng: random.Random) -> tuple[int, float]:
    # 6 s computing a batch, 4 s waiting for the next (the starved 1 s samples read ~5-15 %)
    return (_noisy(rng, 85, 97) if t % 10 < 6 else _noisy(rng, 6, 15)), 30.0 + rng.uniform(-0.1, 0.1)


def sawtooth_zero(t: int, rng: random.Random) -> tuple[int, float]:
    # the same at a coarser NVML sample period: the waits read 0-3 %, under wasted's util_below
    return (_noisy(rng, 85, 97) if t % 10 < 6 else _noisy(rng, 0, 3)), 30.0 + rng.uniform(-0.1, 0.1)


def eval_bursts(t: int, rng: random.Random) -> tuple[int, float]:
    # 40 s of evaluation batches, 20 s writing metrics / loading the next shard; eval buffers come and go
    if t % 60 < 40:
        return _noisy(rng, 88, 98), 44.0 + rng.uniform(-0.1, 0.1)
    return _noisy(rng, 8, 15), 38.0 + rng.uniform(-0.1, 0.1)


def notebook(t: int, rng: random.Random) -> tuple[int, float]:
    return _noisy(rng, 0, 2), 12.0


def hung(t: int, rng: random.Random) -> tuple[int, float]:
    return 100, 60.0  # a NCCL kernel spins: util 100 %, power near idle (below)


def ddp_busy(t: int, rng: random.Random) -> tuple[int, float]:
    return _noisy(rng, 92, 99), 70.0


def ddp_idle(t: int, rng: random.Random) -> tuple[int, float]:
    return 0, 1.5  # the rank created its CUDA context here but computes elsewhere


def near_full(t: int, rng: random.Random) -> tuple[int, float]:
    return _noisy(rng, 88, 99), 78.2 + rng.uniform(-0.2, 0.2)


def low(t: int, rng: random.Random) -> tuple[int, float]:
    return _noisy(rng, 12, 30), 20.0 + rng.uniform(-0.05, 0.05)


def crash_loop(t: int, rng: random.Random) -> tuple[int, float]:
    # each run grows its memory from 20 GiB to the 80 GiB limit over 90 s, dies, and is restarted 5 s later
    phase = t % 100
    if phase >= 95:
        return 0, 0.4
    return _noisy(rng, 88, 98), min(20.0 + phase * 0.65, 79.5)


def crash_loop_pid(t: int) -> int | None:
    return None if t % 100 >= 95 else 2000 + t // 100


def _idle_power(t: int, util: int, rng: random.Random) -> float:
    return IDLE_W + rng.uniform(0, 8)


def spinning(t: int, rng: random.Random) -> tuple[int, float]:
    return 100, 50.0  # one block spins on a flag that never comes: util 100 %, nothing else moves


def memory_bound(t: int, rng: random.Random) -> tuple[int, float]:
    # streaming offloaded parameters or a gather/scatter phase: the copy engines and the memory controller
    # are busy, the sampled kernel-running share reads under wasted's util_below
    return _noisy(rng, 1, 4), 40.0 + rng.uniform(-0.1, 0.1)


def compute_bound(t: int, rng: random.Random) -> tuple[int, float]:
    return _noisy(rng, 96, 100), 24.0  # a register-resident kernel (Monte Carlo, n-body): little traffic


def _const_range(lo: int, hi: int) -> Callable[[int, random.Random], int]:
    return lambda t, rng: _noisy(rng, lo, hi)


def _watts(lo: float, hi: float) -> Callable[[int, int, random.Random], float]:
    return lambda t, util, rng: rng.uniform(lo, hi)


CASES: list[Case] = [
    Case("steady_training", [Gpu(steady, 69.5)], frozenset()),
    Case("input_bound_sawtooth", [Gpu(sawtooth, 29.5)], frozenset({"input_bound"})),
    Case("input_bound_zero_waits", [Gpu(sawtooth_zero, 29.5)], frozenset({"input_bound"})),
    Case("evaluation_bursts", [Gpu(eval_bursts, 37.5)], frozenset()),
    Case("idle_notebook", [Gpu(notebook, 11.5)], frozenset({"wasted"})),
    Case("hung_collective", [Gpu(hung, 59.5, _idle_power), Gpu(hung, 59.5, _idle_power)],
         frozenset({"wasted"}), job="31337"),
    # the idle ranks hold memory at 0 %: wasted is right about them too, idle_peers says why
    Case("ddp_one_busy", [Gpu(ddp_busy, 69.5)] + [Gpu(ddp_idle, 1.2) for _ in range(3)],
         frozenset({"idle_peers", "wasted"}), job="4242"),
    Case("near_oom", [Gpu(near_full, 78.0)], frozenset({"near_oom"})),
    Case("underused", [Gpu(low, 19.5)], frozenset({"underused"})),
    Case("oom_crash_loop", [Gpu(crash_loop, 0.0, pid_at=crash_loop_pid)], frozenset({"near_oom"})),
    # multi-signal (classify.activity): a second signal confirms or denies what util says
    Case("spinning_kernel", [Gpu(spinning, 49.5, _idle_power, mem_bw=_const_range(0, 0),
                                 sm_active=_const_range(0, 1))], frozenset({"wasted"})),
    Case("memory_bound_low_util", [Gpu(memory_bound, 39.5, _watts(180, 220), mem_bw=_const_range(55, 75))],
         frozenset()),
    Case("compute_bound_no_traffic", [Gpu(compute_bound, 23.5, _watts(330, 360), mem_bw=_const_range(0, 2),
                                          sm_active=_const_range(85, 95))], frozenset()),
]


def snapshot(case: Case, t: int, rng: random.Random) -> sample.Snapshot:
    gpus = []
    for i, spec in enumerate(case.gpus):
        util, used = spec.trace(t, rng)
        power = spec.power(t, util, rng) if spec.power else IDLE_W + (LIMIT - IDLE_W) * util / 100 * 0.9
        pid = spec.pid_at(t) if spec.pid_at else 1000 + i
        held = spec.proc_gib * GIB or used * GIB - 0.4 * GIB  # 0: all the memory but the context
        command = f"python train.py --rank {i}"
        procs = [] if pid is None else [proc(pid, "alice", mem=int(held), command=command, start=5000.0 + pid,
                                             ppid=999, state="S", job=case.job)]
        gpus.append(gpu(i, uuid=f"GPU-{case.name}-{i}", util=util, memory_total=TOTAL, mem=int(used * GIB),
                        power=power, power_limit=LIMIT, temp=60, procs=procs,
                        util_mem=spec.mem_bw(t, rng) if spec.mem_bw else None,
                        sm_active=spec.sm_active(t, rng) if spec.sm_active else None))
    return snap(*gpus, ts=float(t), seq=t)


def default_config() -> Config:
    rules = default_rules()
    rules["wasted"].params["stuck_power_ratio"] = 0.2
    return Config(hosts=[HostConfig(name="n1")], rules=rules)


async def fired_on(case: Case, seconds: int = DURATION, config: Config | None = None) -> set[str]:
    """The rules that fired at any time while the case ran for ``seconds``."""
    clock = [0.0]
    engine = AlertEngine(config or default_config(), None, clock=lambda: clock[0])
    await engine.start(run_tick=False)
    rng = random.Random(case.name)
    fired: set[str] = set()
    for t in range(seconds):
        clock[0] = float(t)
        engine.frame("n1", snapshot(case, t, rng), float(t))
        if t % 5 == 0:
            await engine.evaluate(float(t))
            fired |= {a.rule for a in engine.lifecycle.alerts.values() if a.state == "firing"}
    await engine.stop()
    return fired


def confusion(seconds: int = DURATION) -> dict[str, set[str]]:
    async def run() -> dict[str, set[str]]:
        return {case.name: await fired_on(case, seconds) for case in CASES}

    return asyncio.run(run())


COLUMNS = ("underused", "input_bound", "idle_peers", "near_oom", "wasted", "idle", "stale", "orphaned_memory")


def table(result: dict[str, set[str]]) -> str:
    """Markdown, one row per case: X where a rule fired as expected, X! where it fired but should not,
    -! where it should have fired but did not; blank: neither."""
    expected = {c.name: c.expect for c in CASES}
    head = "| case | " + " | ".join(COLUMNS) + " | other |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for name, got in result.items():
        cells = []
        for rule in COLUMNS:
            want = rule in expected[name]
            cells.append(("X" if want else "X!") if rule in got else ("-!" if want else ""))
        other = ", ".join(sorted(got - set(COLUMNS))) or ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {other} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(confusion()))
