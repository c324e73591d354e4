"""The page shows the numbers `gpufleet status` shows: against a real collector watching a simulated fleet,
the web server's /api/status equals the query API's status op built at the same instant (same builder,
same flags, same classify thresholds), and the page model (/api/state) carries the same readings. Runs
without a browser."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from gpufleet.collector.faces.api.ops import Args, LiveOps, encode

from tests.web.web_testkit import Site

pytestmark = pytest.mark.slow


def _stable(view: dict[str, Any]) -> dict[str, Any]:
    """The view without what differs by the microsecond it was built at."""
    view = dict(view, generated_at=None)
    view["hosts"] = [dict(h, age=None) for h in view["hosts"]]
    return view


def test_api_status_is_the_status_op(site: Site) -> None:
    c = site.collector
    assert c is not None
    web = c._web
    assert web is not None

    async def both() -> tuple[Any, bytes]:
        await web.broadcaster.inputs()  # the once-a-minute store read is done: no await before the copy
        ops = LiveOps(c)
        cli = json.loads(encode(await ops.status(Args({}))))
        return cli, await web._status()

    def wasted_seen() -> bool:
        return any(a.rule == "wasted" and a.state == "firing" for a in c.alerts.active())

    deadline = time.monotonic() + 30
    while not wasted_seen():
        assert time.monotonic() < deadline, "no wasted alert"
        time.sleep(0.2)
    cli, body = site.lt.run(both())
    page = json.loads(body)
    assert _stable(page) == _stable(cli)
    assert page["totals"]["wasted"] == 1 and page["totals"]["gpus"] == 8

    with urllib.request.urlopen(site.url + "api/state", timeout=10) as r:  # noqa: S310 - loopback
        state = json.loads(r.read())
    g = state["gpus"]["n1/0"]
    assert "wasted" in g[5] and g[6][0][0] == "alice" and g[2] == 81920
    assert [h[0] for h in state["hosts"]] == ["n1", "n2", "n3"]
    assert any(u[0] == "alice" and u[2] == 1 for u in state["users"])
