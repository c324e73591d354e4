"""The server's short-lived cache of unfiltered status answers, and the compact rows form of the view."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.errors import QueryError
from gpufleet.collector.faces.api.server import QueryServer
from gpufleet.collector.model import codec

from tests.builders import FakeClock
from tests.cli.cli_testkit import StandinCollector, cli_env, run_cli
from tests.cli.test_api import ask

TTL = 0.5


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
async def cached(standin: StandinCollector, home: Path, clock: FakeClock) -> AsyncIterator[QueryServer]:
    srv = QueryServer(standin, home / "cached.sock", 0o600, clock=clock, status_cache_ttl=TTL)
    await srv.start()
    yield srv
    await srv.stop()


def names(result: dict[str, Any]) -> list[str]:
    return [h.name for h in codec.fleet_view_from_dict(result).hosts]


async def status(srv: QueryServer, **args: Any) -> dict[str, Any]:
    [r] = await ask(srv.path, {"op": "status", "args": args, "v": 1})
    assert r["ok"], r
    result: dict[str, Any] = r["result"]
    return result


async def test_unfiltered_answer_is_reused_for_at_most_the_ttl(
    cached: QueryServer, standin: StandinCollector, clock: FakeClock
) -> None:
    first = await status(cached)
    assert first["generated_at"] == clock.now and "n6" in names(first)
    built = clock.now
    del standin.live.hosts["n6"]
    clock.now += TTL * 0.8
    again = await status(cached)
    assert again == first  # served from the cache: the removed host still shows
    assert clock.now - again["generated_at"] < TTL  # ... but never older than the TTL
    clock.now = built + TTL
    fresh = await status(cached)
    assert fresh["generated_at"] == clock.now and "n6" not in names(fresh)


async def test_filtered_requests_are_never_served_from_the_cache(
    cached: QueryServer, standin: StandinCollector, clock: FakeClock
) -> None:
    await status(cached)  # primes the unfiltered cache
    await status(cached, host=["n*"])
    standin.live.hosts.pop("n5")
    clock.now += 0.1
    assert "n5" not in names(await status(cached, host=["n*"]))
    assert names(await status(cached, tag=["a100"])) == ["n1", "n2"]
    by_user = await status(cached, user=["dave"])
    assert names(by_user) == ["n2"] and by_user["filters"] == {"user": ["dave"]}
    assert "n5" in names(await status(cached))  # the unfiltered answer is still the cached one
    [bad] = await ask(cached.path, {"op": "status", "args": {"host": ""}, "v": 1})
    assert not bad["ok"] and "unknown host ''" in bad["error"]


async def test_each_form_has_its_own_entry(cached: QueryServer, clock: FakeClock) -> None:
    objects = await status(cached)
    rows = await status(cached, form="rows")
    assert "form" not in objects and rows["form"] == "rows"
    assert codec.fleet_view_from_dict(rows) == codec.fleet_view_from_dict(objects)
    assert await status(cached) == objects and await status(cached, form="rows") == rows


async def test_ttl_zero_turns_the_cache_off(standin: StandinCollector, home: Path, clock: FakeClock) -> None:
    srv = QueryServer(standin, home / "nocache.sock", 0o600, clock=clock, status_cache_ttl=0)
    await srv.start()
    try:
        assert "n6" in names(await status(srv))
        del standin.live.hosts["n6"]
        assert "n6" not in names(await status(srv))
    finally:
        await srv.stop()


async def test_bad_form_is_an_argument_error(cached: QueryServer) -> None:
    [r] = await ask(cached.path, {"op": "status", "args": {"form": "xml"}, "v": 1})
    assert not r["ok"] and r["error"].startswith("bad argument 'form'")


async def test_rows_form_matches_objects_for_every_filter(cached: QueryServer) -> None:
    for args in ({}, {"host": ["n3"]}, {"tag": ["h100"]}, {"user": ["dave"]}):
        objects = await status(cached, **args)
        rows = await status(cached, **args, form="rows")
        assert rows["columns"]["gpu"][-1] == "processes"
        assert codec.fleet_view_from_dict(rows) == codec.fleet_view_from_dict(objects)


async def test_rows_from_another_collector_version_are_read_by_column_name(cached: QueryServer) -> None:
    objects = codec.fleet_view_from_dict(await status(cached))
    rows = await status(cached, form="rows")
    # a newer collector: an extra column in front of each kind of row; the reader goes by name
    for kind in ("host", "gpu", "proc"):
        rows["columns"][kind].insert(0, "future")
    for h in rows["hosts"]:
        for g in h[-1]:
            for p in g[-1]:
                p.insert(0, "x")
            g.insert(0, "x")
        h.insert(0, "x")
    assert codec.fleet_view_from_dict(json.loads(json.dumps(rows))) == objects
    rows["hosts"][0].pop()  # a row shorter than its columns
    with pytest.raises(QueryError, match="malformed fleet view"):
        codec.fleet_view_from_dict(rows)


async def test_piped_status_json_is_what_the_decoded_answer_encodes_to(
    cached: QueryServer, home: Path
) -> None:
    """--json into a pipe passes the collector's bytes through: compact JSON of the answer, as the collector's
    encoder writes it (codec.to_json), with the values the decoded answer has."""
    objects = await status(cached)
    env = cli_env(home, GPUFLEET_SOCKET=str(cached.path))
    for extra in ((), ("--host", "n2,n3")):
        r = await run_cli("status", "--json", *extra, env=env)
        assert r.rc == 0, r.err
        expect = objects if not extra else await status(cached, host=["n2", "n3"])
        assert json.loads(r.out) == expect and r.out == codec.to_json(expect).decode() + "\n"
