"""Scenario loading (errors name the file and key), curves, and every bundled scenario's frames."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpufleet.agent import scenarios, wire
from gpufleet.agent.errors import ScenarioError
from gpufleet.agent.fake import Curve, FakeNvml, FakeProcs, load_scenario
from gpufleet.agent.nvml import Gateway
from gpufleet.agent.sampler import Sampler

from tests.builders import FakeClock

from .conftest import scenario_from

BUNDLED = ["busy", "ddp_idle_peers", "hot", "idle", "input_bound", "lost", "mig", "near_oom", "spinning",
           "underused", "wasting", "zombie"]


def test_bundled_names_and_paths() -> None:
    assert scenarios.names() == BUNDLED
    for name in BUNDLED:
        assert scenarios.read(name) == Path(str(scenarios.path(name))).read_text()
    with pytest.raises(KeyError):
        scenarios.path("nope")


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scenario_produces_valid_frames(name: str) -> None:
    clock = FakeClock(1000.0)
    sc = load_scenario(name)
    lib = FakeNvml(sc, clock=clock, sleep=lambda s: None)
    sampler = Sampler(Gateway(lib, backend="fake"), FakeProcs(lib), clock=clock)
    sampler.open()
    hello = sampler.hello(sc.hostname, "0")
    assert isinstance(wire.decode(wire.encode(hello)), wire.Hello)
    kinds: set[str] = set()
    for _ in range(40):  # 40 s of scenario time
        snap, events = sampler.sample()
        decoded = wire.decode(wire.encode(snap))
        assert isinstance(decoded, wire.Snapshot) and len(decoded.gpus) == len(sc.gpus)
        for ev in events:
            assert isinstance(wire.decode(wire.encode(ev)), wire.Event)
            kinds.add(ev.kind)
        clock.advance(1.0)
    assert sampler.pid_namespace_ok in (True, None)
    if name == "lost":
        assert kinds == {"gpu_lost"}
        assert snap.gpus[2].error and all(g.error is None for i, g in enumerate(snap.gpus) if i != 2)


def test_wasting_shows_the_waste() -> None:
    clock = FakeClock(1000.0)
    lib = FakeNvml(load_scenario("wasting"), clock=clock)
    sampler = Sampler(Gateway(lib), FakeProcs(lib), clock=clock)
    sampler.open()
    for _ in range(5):
        snap, _ = sampler.sample()
        clock.advance(4)
        g0 = snap.gpus[0]
        assert g0.util_gpu is not None and g0.util_gpu <= 3
        assert g0.memory_used is not None and g0.memory_used >= 40 << 30
        assert g0.processes[0].user == "alice"
        assert snap.gpus[1].util_gpu is not None and snap.gpus[1].util_gpu >= 85


def test_hot_gpu_reaches_90() -> None:
    clock = FakeClock(1000.0)
    lib = FakeNvml(load_scenario("hot"), clock=clock)
    sampler = Sampler(Gateway(lib), FakeProcs(lib), clock=clock)
    sampler.open()
    clock.advance(25)
    g1 = sampler.sample()[0].gpus[1]
    assert g1.temperature == 90 and "hw_thermal" in (g1.throttle_reasons or [])


def test_hostname_seeds_uuids() -> None:
    a = load_scenario("busy", hostname="node-a")
    b = load_scenario("busy", hostname="node-b")
    assert a.hostname == "node-a"
    assert {g.uuid for g in a.gpus}.isdisjoint(g.uuid for g in b.gpus)
    assert [g.uuid for g in load_scenario("busy", hostname="node-a").gpus] == [g.uuid for g in a.gpus]


def test_curves() -> None:
    c = Curve([(0, 90), (60, 2)])
    assert (c.at(-5), c.at(0), c.at(30), c.at(60), c.at(100)) == (90, 90, 46, 2, 2)
    s = Curve([(0, 1), (10, 5)], step=True)
    assert (s.at(9.9), s.at(10)) == (1, 5)
    loop = Curve([(0, 0), (10, 100)], loop=10)
    assert loop.at(15) == 50


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("hostname: x\n", "gpus", "required"),
        ("gpus: [{memory_total_mib: lots}]\n", "gpus[0].memory_total_mib", "must be int"),
        ("gpus: [{util: [[0, 1], [2]]}]\n", "gpus[0].util[1]", "pair"),
        ("gpus: [{util: [[5, 1], [2, 3]]}]\n", "gpus[0].util[1]", "must not decrease"),
        ("gpus: [{unsupported: [warp_drive]}]\n", "gpus[0].unsupported[0]", "unknown field"),
        ("gpus: [{errors: {fan: SOMETIMES}}]\n", "gpus[0].errors.fan", "unknown NVML error"),
        ("gpus: [{processes: [{user: x}]}]\n", "gpus[0].processes[0].pid", "required"),
        ("gpus: [{}]\ntimeline: [{gpu: 0, event: lost}]\n", "timeline[0].at", "required"),
        ("gpus: [{}]\ntimeline: [{at: 1, gpu: 3, event: lost}]\n", "timeline[0].gpu", "0..0"),
        ("gpus: [{}]\ntimeline: [{at: 1, pid: 7, event: stop}]\n", "timeline[0].pid", "no process"),
        ("gpus: [{}]\ntimeline: [{at: 1, event: explode}]\n", "timeline[0].event", "unknown event"),
        (
            "gpus: [{processes: [{pid: 1}]}, {processes: [{pid: 1}]}]\n",
            "gpus[].processes",
            "more than once",
        ),
    ],
)
def test_scenario_errors_name_file_and_key(text: str, key: str, problem: str) -> None:
    with pytest.raises(ScenarioError) as info:
        scenario_from(text, "demo/host1.yaml")
    assert info.value.key == key
    assert problem in info.value.problem
    assert str(info.value).startswith(f"scenario demo/host1.yaml: {key}: ")


def test_load_scenario_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [\n")
    with pytest.raises(ScenarioError, match=r"bad\.yaml.*invalid YAML"):
        load_scenario(str(bad))
    with pytest.raises(ScenarioError, match="not a bundled scenario"):
        load_scenario(str(tmp_path / "missing.yaml"))
    good = tmp_path / "good.yaml"
    good.write_text("gpus: [{name: X}]\n")
    assert load_scenario(str(good)).gpus[0].name == "X"
