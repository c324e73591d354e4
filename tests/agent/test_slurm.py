"""The Slurm resolver: real-format scontrol output, the cache's timing (an injected clock), and a hung
scontrol (the stand-in, a real process) that neither delays samples nor outlives its timeout."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from gpufleet.agent import fake
from gpufleet.agent.nvml import Gateway
from gpufleet.agent.sampler import Sampler
from gpufleet.agent.slurm import (
    FORGET_AFTER,
    FOUND_TTL,
    RETRY_AFTER,
    Scontrol,
    SlurmJob,
    SlurmLookupError,
    SlurmResolver,
    find_scontrol,
    parse_fields,
    parse_job,
)

from tests.builders import FakeClock
from tests.slurm.slurm_standin import install, record, write_state

JOBS = {"90210": {"name": "train-llm", "user": "carol", "uid": 1003, "account": "nlp", "partition": "h100",
                  "state": "RUNNING"}}


def test_parse_a_real_record() -> None:
    job = parse_job("90210", record("90210", JOBS["90210"]))
    assert job == SlurmJob("90210", "train-llm", "carol", "nlp", "h100", "RUNNING")


def test_a_job_name_with_spaces_and_equals_signs_stays_one_value() -> None:
    line = record("7", {"name": "sweep lr=3e-4 Batch=64", "account": "ml"})
    f = parse_fields(line)
    assert f["JobName"] == "sweep lr=3e-4 Batch=64"
    assert f["Account"] == "ml" and f["UserId"] == "alice(1001)"
    assert f["AllocNode:Sid"] == "login1:48211" and f["ReqTRES"].startswith("cpu=16,mem=128G")
    assert parse_job("7", line) == SlurmJob("7", "sweep lr=3e-4 Batch=64", "alice", "ml", "gpu", "RUNNING")


def test_null_values_and_array_records() -> None:
    lines = "\n".join([record("100_1", {"name": "a"}).replace("JobId=100_1", "JobId=101"),
                       record("102", {"name": "b", "account": "(null)"})])
    assert parse_job("102", lines) == SlurmJob("102", "b", "alice", None, "gpu", "RUNNING")
    assert parse_job("999", lines) is not None  # not listed by its id: the first record (array parent)
    assert parse_job("1", "slurm_load_jobs error: Invalid job id specified") is None


class Lookups:
    """A lookup that answers from a dict and counts calls (the cache tests need no process)."""

    def __init__(self) -> None:
        self.jobs: dict[str, SlurmJob | None] = {}
        self.calls: list[str] = []
        self.fail = False

    def __call__(self, job_id: str) -> SlurmJob | None:
        self.calls.append(job_id)
        if self.fail:
            raise SlurmLookupError("slurmctld down")
        return self.jobs.get(job_id)


def test_cache_found_retry_and_forget_timing() -> None:
    clock, lookups = FakeClock(1000.0), Lookups()
    r = SlurmResolver(lookups, clock=clock, start=False)
    job = SlurmJob("5", "train", "carol", "nlp", "h100", "RUNNING")
    lookups.jobs["5"] = job
    assert r.get("5") is None and r.get("5") is None  # not known yet; queued once
    assert r.work_once(0) and not r.work_once(0)
    assert lookups.calls == ["5"] and r.get("5") == job
    clock.advance(FOUND_TTL - 1)
    assert r.get("5") == job and not r.work_once(0)  # still fresh
    clock.advance(2)
    lookups.fail = True
    assert r.get("5") == job  # expired: the old answer while the refresh runs
    assert r.work_once(0) and r.get("5") == job  # a failed refresh keeps the last answer...
    clock.advance(RETRY_AFTER - 1)
    r.get("5")
    assert not r.work_once(0)  # ...and retries only after RETRY_AFTER
    clock.advance(2)
    r.get("5")
    assert r.work_once(0) and lookups.calls == ["5", "5", "5"]

    # "Invalid job id specified": unknown, asked again after RETRY_AFTER
    lookups.fail = False
    assert r.get("6") is None and r.work_once(0) and r.get("6") is None
    clock.advance(RETRY_AFTER + 1)
    r.get("6")
    assert r.work_once(0) and lookups.calls.count("6") == 2

    # an id nobody asks about for FORGET_AFTER is dropped; one still asked about stays
    clock.advance(FORGET_AFTER - 10)
    r.get("6")
    clock.advance(20)
    r.forget_unseen()
    assert set(r.cached()) == {"6"}


def test_standin_scontrol_found_and_invalid(tmp_path: Path) -> None:
    binary, state = install(tmp_path, {"jobs": JOBS})
    sc = Scontrol(str(binary))
    assert sc("90210") == SlurmJob("90210", "train-llm", "carol", "nlp", "h100", "RUNNING")
    assert sc("1") is None  # the stand-in prints Slurm's "Invalid job id specified" and exits 1
    write_state(state, {"mode": "invalid", "jobs": JOBS})  # e.g. the job ended and slurmctld forgot it
    assert sc("90210") is None


def _pids(state: Path, timeout: float = 10.0) -> list[int]:
    """The stand-in's pids (itself and its child), once the hung call wrote both."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pids = [int(x) for x in Path(f"{state}.pids").read_text().split()]
        except FileNotFoundError:
            pids = []
        if len(pids) == 2:
            return pids
        time.sleep(0.02)
    raise AssertionError("the stand-in scontrol was never called")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_hung_scontrol_is_killed_with_its_children(tmp_path: Path) -> None:
    binary, state = install(tmp_path, {"mode": "hang"})
    started = time.monotonic()
    with pytest.raises(SlurmLookupError, match="took over 1 s"):
        Scontrol(str(binary), timeout=1.0)("90210")
    assert time.monotonic() - started < 3.0
    pids = _pids(state)
    deadline = time.monotonic() + 2.0
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(_gone(p) for p in pids), f"left behind: {pids}"


def test_a_hung_scontrol_does_not_delay_samples(tmp_path: Path) -> None:
    """A sampling loop at 20 Hz keeps its period while every scontrol call hangs; then the resolver's
    timeout kills it (the stand-in wrote its pids), and closing the sampler leaves no process behind."""
    binary, state = install(tmp_path, {"mode": "hang"})
    resolver = SlurmResolver(Scontrol(str(binary), timeout=1.5))
    lib = fake.FakeNvml(fake.load_scenario("busy"))
    sampler = Sampler(Gateway(lib, backend="fake"), fake.FakeProcs(lib), slurm=resolver)
    sampler.open()
    try:
        durations: list[float] = []
        period = 0.05
        next_at = time.monotonic()
        for _ in range(30):  # 1.5 s: the whole first call hangs meanwhile
            t0 = time.monotonic()
            snap, _ = sampler.sample()
            durations.append(time.monotonic() - t0)
            assert all(p.job == "90210" and p.job_name is None for g in snap.gpus for p in g.processes)
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
        pids = _pids(state)
        assert max(durations) < period / 2, f"a sample took {max(durations) * 1000:.1f} ms"
        deadline = time.monotonic() + 3.0
        while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(p) for p in pids), "the hung scontrol outlived its timeout"
    finally:
        write_state(state, {"mode": "hang"})
        sampler.close()
    assert not any(t.name == "gpufleet-slurm" for t in threading.enumerate())


def test_resolved_fields_reach_the_sample(tmp_path: Path) -> None:
    binary, _ = install(tmp_path, {"jobs": JOBS})
    resolver = SlurmResolver(Scontrol(str(binary)))
    lib = fake.FakeNvml(fake.load_scenario("busy"))
    sampler = Sampler(Gateway(lib, backend="fake"), fake.FakeProcs(lib), slurm=resolver)
    sampler.open()
    try:
        deadline = time.monotonic() + 10
        while True:
            p = sampler.sample()[0].gpus[0].processes[0]
            if p.job_name is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert (p.job_name, p.job_user, p.job_account, p.job_partition, p.job_state) == (
            "train-llm", "carol", "nlp", "h100", "RUNNING")
    finally:
        sampler.close()


def test_find_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary, _ = install(tmp_path, {"jobs": {}})
    monkeypatch.delenv("GPUFLEET_SCONTROL", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    assert find_scontrol(None) == str(binary)
    assert find_scontrol(None, explicit_only=True) is None  # the fake backend: only when asked
    assert find_scontrol("") is None
    assert find_scontrol(str(tmp_path / "nope")) is None  # absent: off, silently
    monkeypatch.setenv("GPUFLEET_SCONTROL", str(binary))
    assert find_scontrol(None, explicit_only=True) == str(binary)


def test_closing_the_resolver_kills_a_call_in_flight(tmp_path: Path) -> None:
    """The agent's exit is not held up by a hung scontrol, nor does it leave one behind."""
    binary, state = install(tmp_path, {"mode": "hang"})
    resolver = SlurmResolver(Scontrol(str(binary), timeout=60.0))
    resolver.get("90210")
    pids = _pids(state)
    started = time.monotonic()
    resolver.close()
    assert time.monotonic() - started < 3.0
    deadline = time.monotonic() + 2.0
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(_gone(p) for p in pids), f"left behind: {pids}"
