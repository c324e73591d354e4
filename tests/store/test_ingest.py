"""Ingest -> reads: hosts, latest, raw history, process spans, GPU-hours, events, replays, moved GPUs."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
from gpufleet.agent import wire
from gpufleet.collector.fleet.accounting import GAP_FACTOR
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model import classify, sample, thresholds
from gpufleet.collector.model.facts import FleetFacts
from gpufleet.collector.model.thresholds import Thresholds
from gpufleet.collector.settings import StorageConfig
from gpufleet.collector.store import ingest
from gpufleet.collector.store.store import Store, Tuning

from tests.builders import GIB, MIB, hello, lost_gpu, snap, stored_samples
from tests.builders import store_gpu as gpu
from tests.builders import store_proc as proc


def _count(config: StorageConfig, sql: str) -> int:
    with sqlite3.connect(config.resolved_path()) as conn:
        return int(conn.execute(sql).fetchone()[0])


async def test_host_state_and_hello(store: Store) -> None:
    state = HostState(name="h1", status="up", since=990.0, last_seen=995.0, tags=["a100", "lab"])
    store.submit_host_state(state)
    state.status, state.tags = "down", ["changed-after-submit"]  # the store must have taken a copy
    store.submit_hello("h1", hello([wire.GpuInfo(index=0, uuid="GPU-A", name="NVIDIA A100",
                                                 memory_total=40 * GIB)]), 1000.0)
    store.submit_host_state(HostState(name="h2", status="down", reason="connection refused", since=5.0))
    await store.flush()
    rows = {h.name: h for h in await store.hosts()}
    assert rows["h1"].status == "up" and rows["h1"].tags == ["a100", "lab"]
    assert rows["h1"].agent_version == "0.1.0" and rows["h1"].driver_version == "550.54"
    assert rows["h1"].last_seen == 1000.0
    assert rows["h2"].status == "down" and rows["h2"].reason == "connection refused"
    assert rows["h2"].last_seen is None


async def test_a_host_record_goes_in_and_comes_back_whole(store: Store) -> None:
    """One host record both ways (collector/model/views.py): what the writer stores of a HostState is what the
    store's ``hosts`` answers, every field (the carry-over after a restart reads it)."""
    state = HostState(name="h9", status="down", reason="ssh: refused", since=900.0, last_seen=950.0,
                      tags=["h100"], agent_version="0.2.0", driver_version="550.54", nvml_version="12.550",
                      cuda_version=12040, reported_hostname="node-9.lab", backend="nvml")
    store.submit_host_state(state)
    await store.flush()
    (back,) = [h for h in await store.hosts() if h.name == "h9"]
    assert back == state.record()


async def test_latest_is_newest_sample_with_its_processes(store: Store) -> None:
    store.submit_snapshot("h1", snap(gpu(0, util=10, procs=[proc(1), proc(2, user="bob")]), gpu(1, util=20),
                                     ts=1000.0), 1000.1)
    store.submit_snapshot("h1", snap(gpu(0, util=30, procs=[proc(2, user="bob", mem=3 * GIB)]),
                                     gpu(1, util=40, temp=71), ts=1001.0), 1001.1)
    store.submit_snapshot("h2", snap(gpu(0, uuid="GPU-other", util=99), ts=1001.0), 1001.1)
    await store.flush()
    last = (await store.latest("h1"))["h1"]
    got = last.gpus
    assert last.ts == 1001.0 and [(g.index, g.util_gpu) for g in got] == [(0, 30), (1, 40)]
    assert got[1].temperature == 71 and got[1].memory_total == 80 * GIB and got[1].power_limit == 700.0
    assert [(p.pid, p.user, p.gpu_memory, p.start_time) for p in got[0].processes] == [(2, "bob", 3 * GIB,
                                                                                         1000.0)]
    assert got[1].processes == []
    assert {(host, g.uuid) for host, s in (await store.latest()).items() for g in s.gpus} == {
        ("h1", "GPU-0000"), ("h1", "GPU-0001"), ("h2", "GPU-other")}


async def test_raw_history_values_and_gpu_filter(store: Store) -> None:
    utils = [5, 50, 95, 0, 100]
    for i, u in enumerate(utils):
        first = gpu(0, util=u, mem=i * GIB, temp=40 + i, power=100.0 + i)
        store.submit_snapshot("h1", snap(first, gpu(1, util=1), ts=2000.0 + i), 2000.0 + i)
    await store.flush()
    series = await store.gpu_history("h1", since=2000.0, until=2004.0)
    assert [s.index for s in series] == [0, 1] and {s.resolution for s in series} == {"raw"}
    pts = series[0].points
    assert [p.ts for p in pts] == [2000.0 + i for i in range(5)]
    assert [p.util_mean for p in pts] == utils and [p.util_max for p in pts] == utils
    assert [p.mem_used_max for p in pts] == [i * GIB for i in range(5)]
    assert [p.temp_max for p in pts] == [40, 41, 42, 43, 44]
    assert [p.power_mean for p in pts] == [100.0, 101.0, 102.0, 103.0, 104.0]
    one = await store.gpu_history("h1", gpu=1, since=2001.0, until=2002.0)
    assert [(s.index, len(s.points)) for s in one] == [(1, 2)]
    assert await store.gpu_history("nope", since=0, until=1e10) == []


async def test_process_spans(store: Store) -> None:
    sm = [10, 20, 30, 40]
    for i, u in enumerate(sm):
        procs = [proc(7, mem=(i + 1) * GIB, sm=u, start=500.0, container="c1", job="42"),
                 proc(8, user=None, attributed=False, start=None, sm=None)]
        if i < 2:
            procs.append(proc(9, user="bob", start=None))
        store.submit_snapshot("h1", snap(gpu(0, procs=procs), ts=3000.0 + i), 3000.0 + i)
    # pid 9 returns after a long absence: a new span (no start time to tell it is the same process)
    store.submit_snapshot("h1", snap(gpu(0, procs=[proc(9, user="bob", start=None)]), ts=3200.0), 3200.0)
    await store.flush()
    spans = await store.process_history(since=0, until=1e10)
    by_pid: dict[int, list[tuple[float, float]]] = {}
    for s in spans:
        by_pid.setdefault(s.pid, []).append((s.first_seen, s.last_seen))
    assert by_pid == {7: [(3000.0, 3003.0)], 8: [(3000.0, 3003.0)], 9: [(3000.0, 3001.0), (3200.0, 3200.0)]}
    seven = next(s for s in spans if s.pid == 7)
    assert seven.max_gpu_memory == 4 * GIB and seven.mean_sm_util == pytest.approx(sum(sm) / len(sm))
    assert (seven.container, seven.job, seven.user, seven.host, seven.gpu_index) == ("c1", "42", "alice",
                                                                                      "h1", 0)
    assert next(s for s in spans if s.pid == 8).mean_sm_util is None
    assert [s.pid for s in await store.process_history(user="?", since=0, until=1e10)] == [8]
    assert {s.pid for s in await store.process_history(user="bob", since=3100, until=1e10)} == {9}
    assert await store.process_history("h1", gpu=1, since=0, until=1e10) == []
    assert len(await store.process_history(since=3002.0, until=3002.5)) == 2  # overlap: 7 and 8


async def test_span_without_start_time_continues_after_reopen(config: StorageConfig) -> None:
    s = await Store.open(config)
    s.submit_snapshot("h1", snap(gpu(0, procs=[proc(5, start=None)]), ts=4000.0), 4000.0)
    await s.close()
    s = await Store.open(config)
    s.submit_snapshot("h1", snap(gpu(0, procs=[proc(5, start=None)]), ts=4001.0), 4001.0)
    await s.flush()
    spans = await s.process_history(since=0, until=1e10)
    await s.close()
    assert [(p.pid, p.first_seen, p.last_seen) for p in spans] == [(5, 4000.0, 4001.0)]


def _expected_usage(ts: list[float], utils: list[int], mem: int, typical: float = 1.0) -> tuple[float, ...]:
    held = used = wasted = 0.0
    for i in range(1, len(ts)):
        dt = min(ts[i] - ts[i - 1], GAP_FACTOR * typical)
        held += dt
        used += dt * utils[i] / 100
        if utils[i] < 5 and mem >= 256 * MIB:
            wasted += dt
    return held / 3600, used / 3600, wasted / 3600


async def test_usage_by_user(store: Store) -> None:
    t0 = 7200.0 * 10  # an hour boundary
    ts = [t0 + i for i in range(100)] + [t0 + 160 + i for i in range(100)]  # a 60 s outage in the middle
    utils = [(0 if i % 3 == 0 else 60) for i in range(len(ts))]
    for t, u in zip(ts, utils, strict=True):
        store.submit_snapshot("h1", snap(gpu(0, util=u, procs=[proc(1, mem=GIB), proc(2, mem=GIB)]),
                                         gpu(1, util=2, procs=[proc(3, user="bob", mem=100 * MIB),
                                                               proc(4, user=None, attributed=False)]),
                                         ts=t), t)
        store.submit_snapshot("h2", snap(gpu(0, uuid="GPU-h2", util=u, procs=[proc(5)]), ts=t), t)
    await store.flush()
    alice = _expected_usage(ts, utils, GIB)
    bob = _expected_usage(ts, [2] * len(ts), 100 * MIB)  # idle but under min_memory_mib: not wasted
    anon = _expected_usage(ts, [2] * len(ts), GIB)
    rows = {r.user: r for r in await store.usage_by_user(since=t0, until=t0 + 3600)}
    assert set(rows) == {"alice", "bob", "?"}
    for user, (held, used, wasted) in (("alice", alice), ("bob", bob), ("?", anon)):
        factor = 2 if user == "alice" else 1  # alice also on h2
        assert rows[user].gpu_hours_held == pytest.approx(factor * held)
        assert rows[user].gpu_hours_used == pytest.approx(factor * used)
        assert rows[user].gpu_hours_wasted == pytest.approx(factor * wasted)
        assert rows[user].host is None
    assert rows["?"].gpu_hours_wasted > 0 and rows["bob"].gpu_hours_wasted == 0
    per_host = await store.usage_by_user(since=t0, until=t0 + 3600, by_host=True)
    assert {(r.user, r.host) for r in per_host} == {("alice", "h1"), ("alice", "h2"), ("bob", "h1"),
                                                    ("?", "h1")}
    only_h2 = await store.usage_by_user(since=t0, until=t0 + 3600, host="h2")
    assert [(r.user, r.host) for r in only_h2] == [("alice", "h2")]
    assert only_h2[0].gpu_hours_held == pytest.approx(alice[0])
    assert await store.usage_by_user(since=t0 + 3600, until=t0 + 7200) == []


async def test_every_waste_condition_counts_and_capacity(store: Store) -> None:
    """GPU-hours wasted counts a zombie holding memory (stale) at any util, and memory left behind with no
    process visible (orphaned) is charged to nobody, as every view names no user for it (issue 36);
    capacity counts free GPU time."""
    t0 = 3600.0 * 30
    for i in range(21):
        t = t0 + i
        zombie = gpu(0, util=90, procs=[proc(7, user="carol", mem=18 * GIB, state="Z")])
        # dave's process holds GPU 1 for 10 s, then vanishes from the list while its memory stays in use
        held = [proc(8, user="dave", mem=4 * GIB)] if i <= 10 else []
        left = gpu(1, util=0, mem=4 * GIB, procs=held)
        free = gpu(2, util=0, mem=0)
        store.submit_snapshot("h1", snap(zombie, left, free, ts=t), t)
    await store.flush()
    rows = {r.user: r for r in await store.usage_by_user(since=t0, until=t0 + 3600)}
    assert rows["carol"].gpu_hours_wasted == pytest.approx(20 / 3600)  # 90 % util, but a zombie
    # idle while he held it for 10 s; the 10 s of orphaned memory after are charged to nobody
    assert rows["dave"].gpu_hours_held == pytest.approx(10 / 3600)
    assert rows["dave"].gpu_hours_wasted == pytest.approx(10 / 3600)
    (cap,) = await store.capacity(since=t0, until=t0 + 3600)
    assert cap.host == "h1"
    assert cap.gpu_hours_observed == pytest.approx(3 * 20 / 3600)
    assert cap.gpu_hours_free == pytest.approx(20 / 3600)  # only GPU 2: nothing allocated


async def test_usage_params_from_the_wasted_rule(config: StorageConfig) -> None:
    s = await Store.open(config, thresholds=Thresholds.from_rules({"wasted": {"util_below": 50,
                                                                            "min_memory_mib": 1}}))
    for i in range(11):
        s.submit_snapshot("h1", snap(gpu(0, util=30, procs=[proc(1, mem=10 * MIB)]), ts=100.0 + i), 0.0)
    await s.flush()
    rows = await s.usage_by_user(since=0, until=3600)
    await s.close()
    assert rows[0].gpu_hours_wasted == pytest.approx(10 / 3600)


async def test_usage_reads_the_loops_classification_when_it_is_the_stores(
        config: StorageConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the daemon's shared facts the writer credits waste from them (no second classification) and the
    figures are the same; facts under other thresholds are not read (the store judges by its own). Per
    change (store/accrual.py) the writer's own classification of a sample is its activity (whose holding is
    waste is worked out once per process list)."""
    calls: list[int] = []
    real = ingest.activity

    def counting(g: sample.GpuSample,
                 t: Thresholds = thresholds.DEFAULT_THRESHOLDS) -> classify.Activity | None:
        calls.append(g.index)
        return real(g, t)

    monkeypatch.setattr(ingest, "activity", counting)
    frames = [snap(gpu(0, util=1, procs=[proc(1, mem=2 * GIB)]), gpu(1, util=90, procs=[proc(2, user="bob")]),
                   ts=100.0 + i) for i in range(11)]
    strict = Thresholds(min_memory_bytes=4 * GIB)  # alice's 2 GiB is not holding under these
    results = []
    for shared in (None, FleetFacts(thresholds.DEFAULT_THRESHOLDS), FleetFacts(strict)):
        fresh = dataclasses.replace(config, path=config.path.replace("gpufleet.db", f"run{len(results)}.db"))
        s = await Store.open(fresh)  # the default thresholds
        s.facts = shared
        calls.clear()
        for f in frames:
            s.submit_snapshot("h1", f, 0.0)
        await s.flush()
        results.append(({r.user: (r.gpu_hours_held, r.gpu_hours_wasted)
                         for r in await s.usage_by_user(since=0, until=3600)}, len(calls)))
        await s.close()
    (alone, classified), (shared_rows, shared_calls), (other_rows, other_calls) = results
    assert alone["alice"][1] == pytest.approx(10 / 3600) and alone["bob"][1] == 0.0
    assert classified == 20, "without shared facts: each GPU sample after the first"
    assert shared_rows == alone and shared_calls == 0, "the same figures, from the loop's classification"
    assert other_rows == alone and other_calls == 20, "facts under other thresholds: the store's own"


async def test_events_stored_filtered_and_deduplicated(store: Store) -> None:
    xid = wire.Event(ts=5000.0, kind="xid", message="Xid 79: fallen off the bus", gpu_index=1,
                     uuid="GPU-0001", xid=79)
    lost = wire.Event(ts=5001.0, kind="gpu_lost", message="GPU lost")
    for _ in range(2):  # a replay adds nothing
        store.submit_event("h1", xid, 5000.5)
        store.submit_event("h1", lost, 5001.5)
    store.submit_event("h2", wire.Event(ts=5002.0, kind="driver_error", message="mismatch"), 5002.0)
    await store.flush()
    got = await store.events(since=0, until=1e10)
    assert [(e.host, e.kind, e.xid, e.gpu_index) for e in got] == [("h1", "xid", 79, 1),
                                                                    ("h1", "gpu_lost", None, None),
                                                                    ("h2", "driver_error", None, None)]
    assert [e.kind for e in await store.events(host="h2", since=0, until=1e10)] == ["driver_error"]
    assert [e.kind for e in await store.events(since=5000.5, until=5001.0)] == ["gpu_lost"]


async def test_replay_adds_no_duplicates(config: StorageConfig) -> None:
    frames = [snap(gpu(0, util=40, procs=[proc(1, sm=40)]), ts=6000.0 + i, seq=i) for i in range(20)]
    s = await Store.open(config)
    for f in frames:
        s.submit_snapshot("h1", f, 0.0)
    await s.flush()
    before = await s.usage_by_user(since=0, until=1e10)
    for f in frames[5:]:  # the agent reconnects and sends some again, in the same session...
        s.submit_snapshot("h1", f, 0.0)
    await s.close()
    s = await Store.open(config)  # ...and after a collector restart
    for f in frames:
        s.submit_snapshot("h1", f, 0.0)
    await s.flush()
    after = await s.usage_by_user(since=0, until=1e10)
    spans = await s.process_history(since=0, until=1e10)
    await s.close()
    assert len(stored_samples(config.resolved_path())) == 20
    assert _count(config, "SELECT sm_count FROM processes") == 20
    assert after == before and before[0].gpu_hours_held == pytest.approx(19 / 3600)
    assert len(spans) == 1 and spans[0].mean_sm_util == 40


async def test_gpu_moved_to_another_slot_keeps_its_history(store: Store) -> None:
    for i in range(10):
        store.submit_snapshot("h1", snap(gpu(0, uuid="GPU-X", util=10), gpu(1, util=1), ts=7000.0 + i), 0.0)
    for i in range(10, 20):  # re-seated in slot 2 of the same host; a new GPU took slot 0
        store.submit_snapshot("h1", snap(gpu(0, uuid="GPU-NEW", util=30), gpu(1, util=1),
                                         gpu(2, uuid="GPU-X", util=20), ts=7000.0 + i), 0.0)
    await store.flush()
    now_in_2 = await store.gpu_history("h1", gpu=2, since=7000.0, until=7019.0)
    assert [(s.host, s.index, s.uuid) for s in now_in_2] == [("h1", 2, "GPU-X")]
    assert [p.util_mean for p in now_in_2[0].points] == [10] * 10 + [20] * 10
    early_0 = await store.gpu_history("h1", gpu=0, since=7000.0, until=7005.0)
    assert [s.uuid for s in early_0] == ["GPU-X"]  # it sat in slot 0 then; reported where it is now
    late_0 = await store.gpu_history("h1", gpu=0, since=7012.0, until=7019.0)
    assert [s.uuid for s in late_0] == ["GPU-NEW"]


async def test_same_uuid_on_two_hosts_is_two_gpus(store: Store, config: StorageConfig) -> None:
    """Identity is (host, uuid): a cloned VM image or one machine listed twice never mixes histories."""
    for i in range(20):
        procs = [proc(100, user="alice", mem=4 << 30)]
        store.submit_snapshot("a", snap(gpu(0, uuid="GPU-SAME", util=0, procs=procs), ts=7000.0 + i), 0.0)
        store.submit_snapshot("b", snap(gpu(0, uuid="GPU-SAME", util=0, procs=procs), ts=7000.0 + i), 0.0)
    await store.flush()
    assert _count(config, "SELECT count(*) FROM gpus WHERE uuid = 'GPU-SAME'") == 2
    assert _count(config, "SELECT count(*) FROM gpu_placements") == 2  # no move recorded per frame
    for host in ("a", "b"):
        series = await store.gpu_history(host, gpu=0, since=7000.0, until=7019.0)
        assert [len(s.points) for s in series] == [20], host
    usage = {u.host: u for u in await store.usage_by_user(since=7000.0, until=7019.0, by_host=True)}
    assert usage["a"].gpu_hours_held == pytest.approx(19 / 3600)
    assert usage["b"].gpu_hours_held == pytest.approx(19 / 3600)


async def test_unreadable_gpu_still_gets_a_sample(store: Store) -> None:
    bad = lost_gpu(1)
    store.submit_snapshot("h1", snap(gpu(0), bad, ts=8000.0), 0.0)
    await store.flush()
    latest = {g.index: g for g in (await store.latest("h1"))["h1"].gpus}
    assert latest[1].error == "GPU is lost" and latest[1].util_gpu is None and latest[0].error is None
    pts = (await store.gpu_history("h1", gpu=1, since=8000.0, until=8000.0))[0].points
    assert len(pts) == 1 and pts[0].util_mean is None


async def test_absurd_values_do_not_sink_a_batch(store: Store, config: StorageConfig) -> None:
    huge = gpu(0, mem=1 << 70, procs=[proc(1, mem=1 << 80)])
    store.submit_snapshot("h1", snap(huge, ts=9000.0), 0.0)
    store.submit_snapshot("h1", snap(gpu(0), ts=9001.0), 0.0)
    await store.flush()
    # issue 38: an impossible value is refused at the writer's entry (counted, logged), never stored as NULL
    rows = stored_samples(config.resolved_path())
    assert len(rows) == 1 and rows[0][4] is not None  # mem_used
    assert store.healthy and store.rejected == 0 and store.refused == 1


async def test_fleet_sink_interface(store: Store) -> None:
    store.host_state(HostState(name="h1", status="up"))
    store.frame("h1", hello(), 10.0)
    store.frame("h1", snap(gpu(0), ts=11.0), 11.0)
    store.frame("h1", wire.Event(ts=12.0, kind="xid", xid=94), 12.0)
    store.frame("h1", sample.Heartbeat(proto=wire.PROTO_VERSION, ts=13.0), 13.5)
    await store.flush()
    (h1,) = await store.hosts()
    assert h1.last_seen == 13.5 and h1.agent_version == "0.1.0"
    assert len(await store.latest()) == 1 and len(await store.events(since=0, until=100)) == 1


async def test_full_queue_sheds_and_drops_snapshots_only(config: StorageConfig) -> None:
    s = await Store.open(config, tuning=Tuning(queue_max=3))
    for i in range(10):  # no await in between: the writer cannot run, the queue fills
        s.submit_snapshot("h1", snap(gpu(0), ts=100.0 + i), 0.0)
        s.submit_event("h1", wire.Event(ts=100.0 + i, kind="xid", xid=i), 0.0)
    assert s.shed > 0 and s.dropped > 0, "shed evenly first; the bound still holds as the last resort"
    assert s.shed + s.dropped == 7 and s.queue_depth == 13
    await s.flush()
    pts = (await s.gpu_history("h1", since=0, until=1000))[0].points
    events = await s.events(since=0, until=1000)
    await s.close()
    assert len(pts) == 3 and pts[-1].ts == 109.0  # the newest is kept
    assert len(events) == 10


def test_queue_bound_grows_with_the_fleet() -> None:
    """Issue 13: a fixed 5,000 snapshots is one second of a 5,000-host fleet."""
    assert Tuning.for_fleet(10).queue_max == 5000 == Tuning().queue_max
    assert Tuning.for_fleet(5000).queue_max == 20_000
    assert Tuning.for_fleet(5000).queue_max_bytes == Tuning().queue_max_bytes


async def test_queue_is_bounded_in_bytes_not_only_in_snapshots(config: StorageConfig) -> None:
    """Issue 12: the queue counted snapshots, so 5,000 snapshots of 10,000 GPUs each were all held."""
    s = await Store.open(config, tuning=Tuning(queue_max=5000, queue_max_bytes=8 << 20))
    wide = [gpu(i, uuid=f"GPU-{i}") for i in range(1000)]
    for i in range(50):  # no await in between: the writer cannot run, the queue fills
        s.submit_snapshot("h1", snap(*wide, ts=100.0 + i), 0.0)
        s.submit_event("h1", wire.Event(ts=100.0 + i, kind="xid", xid=i), 0.0)
    held, dropped, shed = s.queue_bytes, s.dropped, s.shed
    await s.flush()
    events = await s.events(since=0, until=1000)
    await s.close()
    assert held <= 8 << 20 and dropped + shed >= 40  # ~1 MB a snapshot: at most 8 held (shed evenly first)
    assert len([e for e in events if e.kind == "xid"]) == 50  # events are never dropped


async def test_usage_by_hand_shared_gpu_and_a_gap(store: Store) -> None:
    """Worked by hand. GPU 0 is shared by alice (1 GiB) and bob (2 GiB), sampled every second, then the
    collector hears nothing for 60 s. Each sample credits the time since the previous one, capped at
    3 x the typical interval (3 s) after a gap; each user holding memory is credited the whole GPU.

        ts    util  dt credited  held  used        wasted (util < 5 %, >= 256 MiB held)
        +0     80   (first: nothing)
        +1     80   1            1     0.8         0
        +2      0   1            1     0           1
        +3      0   1            1     0           1
        +63     0   3 (gap 60)   3     0           3
        +64   100   1            1     1.0         0
        total                    7 s   1.8 s       5 s   (each of alice and bob)
    GPU 1: carol holds 100 MiB at util 0 the whole time: idle, but under min_memory_mib, so not wasted.
    """
    h = 3600.0 * 100
    for dt, util in ((0, 80), (1, 80), (2, 0), (3, 0), (63, 0), (64, 100)):
        store.submit_snapshot("h1", snap(gpu(0, util=util, procs=[proc(1, user="alice", mem=GIB),
                                                                proc(2, user="bob", mem=2 * GIB)]),
                                         gpu(1, util=0, procs=[proc(3, user="carol", mem=100 * MIB)]),
                                         ts=h + dt), h + dt)
    await store.flush()
    rows = {r.user: r for r in await store.usage_by_user(since=h, until=h + 3600)}
    assert set(rows) == {"alice", "bob", "carol"}
    for user in ("alice", "bob"):
        got = rows[user]
        assert (got.gpu_hours_held * 3600, got.gpu_hours_used * 3600, got.gpu_hours_wasted * 3600) == \
            pytest.approx((7.0, 1.8, 5.0))
    carol = rows["carol"]
    assert (carol.gpu_hours_held * 3600, carol.gpu_hours_used, carol.gpu_hours_wasted) == pytest.approx(
        (7.0, 0.0, 0.0))
    assert await store.usage_by_user(since=h - 3600, until=h - 1) == []  # hour granularity, nothing before
