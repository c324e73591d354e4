"""The fleet view model (pure functions) and the time parsing the CLI does."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from gpufleet.cli.timeparse import TimeParseError, parse_duration, parse_range, parse_time
from gpufleet.collector.errors import QueryError
from gpufleet.collector.fleet import query
from gpufleet.collector.model import codec, summary, views
from gpufleet.collector.model.firing import Firing
from gpufleet.collector.model.records import AlertRecord
from gpufleet.collector.units import fmt_duration

from tests.builders import alert
from tests.cli.cli_testkit import StandinAlerts, StandinStore, synthetic_live

NOW = 1_800_000_000.0


def live_view(**filters: list[str]) -> views.FleetView:
    live = synthetic_live(
        {"a2": "busy", "a10": "wasting", "b1": "lost", "c1": "down", "d1": "idle"},
        gpus=4,
        now=NOW,
        tags={"a2": ["x"], "a10": ["x", "y"]},
    )
    return query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=NOW, **filters)


def test_totals_and_states() -> None:
    v = live_view()
    assert [h.name for h in v.hosts] == ["a2", "a10", "b1", "c1", "d1"]  # natural order
    t = v.totals
    assert (t.hosts, t.hosts_up, t.hosts_down, t.gpus) == (5, 4, 1, 16)
    # each GPU counted once (issue 36): the two wasted GPUs are not also busy
    assert (t.busy, t.idle, t.lost, t.wasted, t.unknown) == (8, 5, 1, 2, 0)
    states = {(h.name, g.index): g.state for h in v.hosts for g in h.gpus}
    assert states[("a2", 3)] == "idle" and states[("a2", 0)] == "busy" and states[("a10", 0)] == "wasted"
    assert states[("b1", 1)] == "lost" and all(states[("d1", i)] == "idle" for i in range(4))
    assert t.busy + t.wasted + t.idle + t.lost + t.hung + t.unreadable + t.unknown + t.maintenance == t.gpus
    assert t.lost == 1 and t.wasted == 2 and t.idle == 5
    b1 = v.hosts[2].gpus[1]
    assert b1.flags == ["lost"] and b1.error and b1.processes == []
    assert v.hosts[3].flags == ["down"] and v.hosts[3].gpus == [] and v.hosts[3].age == 180
    assert v.last_sample == NOW


def test_process_view() -> None:
    p = live_view().hosts[0].gpus[1].processes[0]
    assert (
        p.user == "bob" and p.command == "python3 train.py" and p.running_for == 7200 and p.memory == 40 << 30
    )


def test_filters() -> None:
    assert [h.name for h in live_view(host=["a*"]).hosts] == ["a2", "a10"]
    assert [h.name for h in live_view(tag=["y"]).hosts] == ["a10"]
    v = live_view(user=["dave"])
    assert [h.name for h in v.hosts] == ["a10"] and [g.index for g in v.hosts[0].gpus] == [0, 1]
    assert v.totals.gpus == 2 and v.totals.wasted == 2 and v.filters == {"user": ["dave"]}
    assert live_view(host=["zz*"]).hosts == []  # a glob matching nothing is not an error
    with pytest.raises(QueryError, match=r"^unknown host 'a3' \(known: a2, a10, b1, c1, d1\)$"):
        live_view(host=["a3"])
    with pytest.raises(QueryError, match=r"^no host has tag 'z' \(tags: x, y\)$"):
        live_view(tag=["z"])


def test_by_user() -> None:
    rows = {r.user: r for r in summary.by_user(live_view())}
    assert rows["dave"].gpus == 2 and rows["dave"].wasted == 2 and rows["dave"].mean_util == 0
    assert rows["alice"].hosts == ["a2", "a10", "b1"]
    assert list(rows)[0] == "dave"  # most wasted GPUs first
    assert list(rows)[1] in ("alice", "bob", "carol")  # then most GPUs


def test_by_user_counts_a_stale_zombie_as_waste() -> None:
    """A zombie holding memory at 0 % is flagged stale, not wasted: it is still that user's waste."""
    from gpufleet.collector.model.views import FleetView, GpuView, HostView, ProcView

    zombie = ProcView(pid=7, user="erin", command="python3 leak.py", memory=18 << 30, running_for=60.0,
                      state="Z")
    gpu = GpuView(index=0, uuid="U0", name=None, state="busy", util=0, mem_used=18 << 30, mem_total=None,
                  temp=None, power=None, power_limit=None, flags=["stale"], processes=[zombie])
    view = FleetView(generated_at=NOW, source="live",
                     hosts=[HostView(name="h", status="up", reason=None, last_seen=NOW, age=0.0, gpus=[gpu])])
    (row,) = summary.by_user(view)
    assert row.user == "erin" and row.wasted == 1


def test_short_command() -> None:
    sc = query.short_command
    assert sc("/usr/bin/python3 -u /home/a/train.py --lr 3e-4") == "python3 train.py"
    assert sc("/opt/conda/bin/python -m ipykernel_launcher -f x.json") == "python ipykernel_launcher"
    assert sc("./llama-server --model m.gguf") == "llama-server"
    assert sc("bash") == "bash" and sc(None) is None and sc("") == ""


async def test_store_view_matches_live_view() -> None:
    live = synthetic_live({"a2": "busy", "a10": "wasting"}, gpus=2, now=NOW)
    store = StandinStore(live)
    alerts = [
        AlertRecord(
            fingerprint="x",
            rule="wasted",
            severity="warning",
            state="firing",
            labels={"host": "a10", "gpu": "0"},
        ),
        AlertRecord(fingerprint="y", rule="xid", severity="critical", state="firing", labels={"host": "a2"}),
        AlertRecord(
            fingerprint="z",
            rule="overheating",
            severity="critical",
            state="pending",
            labels={"host": "a2", "gpu": "1"},
        ),
    ]
    v = query.build_fleet_view_from_store(await store.hosts(), await store.latest(), alerts, now=NOW + 60)
    assert v.source == "store" and [h.name for h in v.hosts] == ["a2", "a10"]
    assert v.hosts[1].gpus[0].flags == ["wasted"] and v.hosts[1].gpus[1].flags == []
    assert v.hosts[0].flags == ["xid"] and v.hosts[0].gpus[1].flags == []  # pending is no flag
    assert v.hosts[0].gpus[0].processes[0].running_for == 3600 + 60


def test_json_round_trip() -> None:
    v = live_view()
    text = json.dumps(v, default=codec.jsonable)
    back = codec.fleet_view_from_dict(json.loads(text))
    assert back == v
    with pytest.raises(QueryError, match="malformed fleet view"):
        codec.fleet_view_from_dict({"hosts": []})


def test_parse_time() -> None:
    assert parse_time("24h", now=NOW) == NOW - 86400
    assert parse_time("1h30m", now=NOW) == NOW - 5400
    assert parse_time("7d", now=NOW) == NOW - 7 * 86400
    assert parse_time("now", now=NOW) == NOW
    assert parse_time("2026-11-30") == datetime(2026, 11, 30).timestamp()
    assert parse_time("2026-11-30T08:00") == datetime(2026, 11, 30, 8, 0).timestamp()
    assert parse_time("2026-11-30T08:00:00+00:00") == 1796025600.0
    assert parse_duration("2x") is None and parse_duration("90m") == 5400
    with pytest.raises(TimeParseError) as exc:
        parse_time("yesterdayish")
    assert str(exc.value) == (
        "bad --since 'yesterdayish': expected a duration like 24h, 7d, -90m, +1h, '2h ago', a word (now, "
        "today, yesterday, tomorrow), a time like 08:00 or a date like 2026-11-30 or 2026-11-30T08:00"
    )
    with pytest.raises(TimeParseError, match="^bad --until '25:00'"):
        parse_range("1h", "25:00")
    with pytest.raises(ValueError, match="must be before --until"):
        parse_range("1h", "2h", now=time.time())


def test_times_read_like_journalctl() -> None:
    """Issue 36: ``--until 2026-12-01`` alone failed ("--since ... must be before --until"): the default
    span was counted back from now. Like journalctl: words, signed and "ago"/"left" offsets, a time of day
    today; --until alone ends the default span there."""
    now = datetime(2026, 11, 30, 15, 30).timestamp()
    midnight = datetime(2026, 11, 30).timestamp()
    assert parse_time("today", now=now) == midnight
    assert parse_time("yesterday", now=now) == midnight - 86400
    assert parse_time("tomorrow", now=now) == midnight + 86400
    assert parse_time("-2h", now=now) == parse_time("2h ago", now=now) == now - 7200
    assert parse_time("2h", now=now) == now - 7200
    assert parse_time("+1h", now=now) == parse_time("1h left", now=now) == now + 3600
    assert parse_time("10 min ago", now=now) == parse_time("2 hours", now=now) + 7200 - 600
    assert parse_time("08:00", now=now) == datetime(2026, 11, 30, 8, 0).timestamp()
    assert parse_time("08:00:30", now=now) == datetime(2026, 11, 30, 8, 0, 30).timestamp()
    with pytest.raises(TimeParseError):
        parse_time("+2026-11-30", now=now)
    start, end = parse_range(None, "2026-11-01", default_since="24h", now=now)
    assert end == datetime(2026, 11, 1).timestamp() and start == end - 86400
    assert parse_range("yesterday", "today", now=now) == (midnight - 86400, midnight)


def test_fmt_duration() -> None:
    assert [fmt_duration(s) for s in (5, 125, 3 * 3600 + 300, 2 * 86400 + 4 * 3600)] == [
        "5s",
        "2m",
        "3h05m",
        "2d04h",
    ]
    assert fmt_duration(None) == "-"


def test_from_dict_tolerates_new_and_reordered_fields() -> None:
    v = live_view(host=["a2"])
    d = json.loads(json.dumps(v, default=codec.jsonable))
    g = d["hosts"][0]["gpus"][0]
    g["added_in_a_newer_collector"] = 1
    g["processes"][0] = dict(reversed(list(g["processes"][0].items())))
    d["hosts"][0]["gpus"][0] = dict(reversed(list(g.items())))
    d["totals"]["new_total"] = 3
    back = codec.fleet_view_from_dict(d)
    assert back.hosts[0].gpus[0] == v.hosts[0].gpus[0] and back.totals == v.totals


def test_hosts_and_by_user_rows_tolerate_new_fields() -> None:
    """``gpufleet hosts`` against a newer collector: an added field used to be a TypeError traceback."""
    live = synthetic_live({"a1": "busy"}, gpus=2, now=NOW)
    info = query.host_infos(live.hosts.values())[0]
    d = {**json.loads(json.dumps(info, default=codec.jsonable)), "added_in_a_newer_collector": 1}
    assert codec.host_info_from_dict(d) == info
    view = query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=NOW)
    row = summary.by_user(view)[0]
    d = {**json.loads(json.dumps(row, default=codec.jsonable)), "new": [1]}
    assert codec.user_usage_from_dict(d) == row


def test_orphaned_memory_is_not_idle() -> None:
    """12 GiB held with no process visible: nobody can use that GPU, so it must not count as idle."""
    live = synthetic_live({"n1": "idle"}, gpus=2, now=NOW)
    snap = live.hosts["n1"].snapshot
    assert snap is not None
    snap.gpus[0].memory_used = 12 << 30

    host = next(iter(live.hosts))
    v = query.build_fleet_view(live.hosts.values(), Firing([alert("orphaned_memory", host, 0)]), now=NOW)
    states = [g.state for g in v.hosts[0].gpus]
    assert states == ["wasted", "idle"]  # held by nobody, usable by nobody: counted with the waste
    assert (v.totals.busy, v.totals.wasted, v.totals.idle, v.totals.orphaned) == (0, 1, 1, 1)
    assert v.hosts[0].gpus[0].flags == ["orphaned"]
    assert codec.fleet_view_from_dict(json.loads(json.dumps(v, default=codec.jsonable))).totals.orphaned == 1


def test_plain_is_what_the_encoded_answer_decodes_to() -> None:
    """The read-only fallback and the CLI's merge shape answers with ``plain``; the live collector sends
    ``to_json``. Both give the same values, a non-finite number and non-ASCII text included."""
    view = query.build_fleet_view(synthetic_live({"n1": "busy", "n2": "idle"}, 2).hosts.values(),
                                  Firing([]), now=time.time())
    view.hosts[0].gpus[0].power = float("nan")
    view.hosts[0].gpus[1].power = float("inf")
    view.hosts[1].name = "nœud-2"
    shaped = codec.plain(view)
    assert shaped == json.loads(codec.to_json(view))
    assert shaped["hosts"][0]["gpus"][0]["power"] is None and shaped["hosts"][0]["gpus"][1]["power"] is None
    assert shaped["hosts"][1]["name"] == "nœud-2"


def test_keys_msgspec_refuses_still_encode_as_strict_json() -> None:
    """A dict keyed by None or a bool takes json's key rules ("null", "true"), and a non-finite value in it
    is still null: the answer stays strict JSON on either path."""
    data = {"by": {None: float("nan"), True: 1, 2: [1.5]}}
    assert codec.to_json(data) == b'{"by":{"null":null,"true":1,"2":[1.5]}}'
    assert json.loads(codec.to_json(data)) == codec.plain(data)
