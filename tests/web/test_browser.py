"""The web page in a real headless Chromium against a real collector watching a simulated fleet over SSH:
it loads, shows the wasted GPU and its user with the same numbers as the status view, follows a host going
down live (one stream, no reload) within 3 s, draws history charts, and honours the token and
``show_commands: false``. Screenshots are saved under each test's tmp dir (the path is printed)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpufleet.collector.faces.web.server import WebServer
from gpufleet.collector.fleet.live import HostState
from gpufleet.collector.model.sample import SlurmAllocation
from gpufleet.collector.settings import StorageConfig, WebConfig
from gpufleet.collector.store.store import Store

from tests.builders import GIB, gpu, overwrite_pages, proc, snap
from tests.web.web_testkit import TOKEN, LoopThread, Site, Source

pytestmark = pytest.mark.slow

MARKER = "ipykernel_launcher"  # alice's command (the wasting scenario), as the status view names it


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - the DOM is changing under us: try again
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def js(driver: Any, script: str) -> Any:
    return driver.execute_script(script)


def cell_class(driver: Any, key: str) -> str:
    script = f"const e = document.querySelector('.g[data-k=\"{key}\"]'); return e ? e.className : ''"
    return str(js(driver, script))


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback only
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def open_page(driver: Any, url: str) -> None:
    driver.get(url)
    wait_for("the first full state to render",
             lambda: js(driver, "return document.body.dataset.ready === '1'"))


def test_page_shows_the_wasted_gpu_and_its_user(browser: Any, site: Site, shots: Any) -> None:
    open_page(browser, site.url)
    wait_for("n1 GPU 0 flagged wasted", lambda: "wasted" in cell_class(browser, "n1/0"))
    users = wait_for("alice in waste by user", lambda: js(
        browser, "return [...document.querySelectorAll('#users tbody tr')].map(r => r.innerText)"))
    alice = next(r for r in users if r.startswith("alice"))
    assert alice.split("\t")[2] == "1", alice  # one GPU wasted now
    alerts = js(browser, "return document.querySelector('#alerts tbody').innerText")
    assert "wasted" in alerts and "alice" in alerts and "n1" in alerts
    assert MARKER in browser.page_source  # commands shown by default (in the GPU's tooltip)

    # the same numbers as the status view (the CLI's --json): totals and the wasted GPU's readings
    status = json.loads(get(site.url + "api/status")[1])
    totals = js(browser, "return document.getElementById('totals').innerText")
    assert f"wasted{status['totals']['wasted']}" in totals.replace(" ", ""), totals
    assert f"GPUs{status['totals']['gpus']}" in totals.replace(" ", ""), totals
    gpu0 = status["hosts"][0]["gpus"][0]
    title = js(browser, "return document.querySelector('.g[data-k=\"n1/0\"]').title")
    assert f"{gpu0['mem_total'] / (1 << 30):.1f} GiB" in title and "alice" in title
    shots(browser, "fleet")

    # the filter box: a user's hosts only, then problems only
    browser.find_element("id", "filter").send_keys("alice")
    visible = "return [...document.querySelectorAll('.host')].filter(h => !h.hidden).map(h => h.dataset.h)"
    assert wait_for("only alice's host", lambda: js(browser, visible) == ["n1"])
    browser.find_element("id", "filter").clear()
    browser.find_element("id", "filter").send_keys(" ")  # an input event with an empty query
    browser.find_element("id", "problems").click()
    assert wait_for("only flagged hosts", lambda: js(browser, visible) == ["n1", "n3"])  # wasted; idle
    browser.find_element("id", "problems").click()


def test_a_host_going_down_shows_within_3_s_without_reload(browser: Any, site: Site, shots: Any) -> None:
    open_page(browser, site.url)
    js(browser, "window.notReloaded = true")
    wait_for("n2 up", lambda: "busy" in cell_class(browser, "n2/0") or "idle" in cell_class(browser, "n2/0"))
    assert site.collector is not None
    live = site.collector.live.hosts["n2"]
    site.lt.run(site.fleet.cut("n2"))
    wait_for("the collector to see n2 go", lambda: live.status != "up", timeout=20, every=0.02)
    seen = time.monotonic()
    wait_for("the page to show n2 not up",
             lambda: js(browser, "const h = document.querySelector('.host[data-h=\"n2\"]');"
                                 "return h && !h.classList.contains('up')"), timeout=10, every=0.05)
    took = time.monotonic() - seen
    print(f"host change reached the page {took:.2f} s after the collector saw it")
    assert took < 3.0
    assert js(browser, "return window.notReloaded === true && window.gpufleetDeltas > 0")
    assert "unknown" in cell_class(browser, "n2/0")
    shots(browser, "host-down")
    site.lt.run(site.fleet.restore("n2"))


def test_a_host_in_maintenance_shows_who_why_and_until(browser: Any, site: Site, shots: Any) -> None:
    """`gpufleet maintenance start` on a host: the page marks it (live, no reload) with the comment, who
    started it and until when, counts it in the header, and shows it up again once the window ends."""
    open_page(browser, site.url)
    assert site.collector is not None
    windows = site.collector.maintenance
    wait_for("n3 up", lambda: js(browser, "const h = document.querySelector('.host[data-h=\"n3\"]');"
                                          "return h && h.classList.contains('up')"))
    site.lt.run(windows.begin(["n3"], 1800, "MIG re-layout", "root"))
    row = "document.querySelector('.host[data-h=\"n3\"]')"
    wait_for("n3 in maintenance on the page",
             lambda: js(browser, f"const h = {row}; return h && h.classList.contains('maintenance')"),
             timeout=10)
    text = js(browser, f"return {row}.querySelector('.hname').innerText")
    assert "maintenance" in text and "MIG re-layout · by root · until " in text, text
    totals = js(browser, "return document.getElementById('totals').innerText")
    assert "maintenance1" in totals.replace(" ", ""), totals
    shots(browser, "maintenance")
    site.lt.run(windows.end(["n3"], "root"))
    wait_for("n3 back up", lambda: js(browser, f"const h = {row}; return h && h.classList.contains('up')"),
             timeout=20)


def test_history_chart_draws_points(browser: Any, site: Site, shots: Any) -> None:
    open_page(browser, site.url)
    browser.find_element("css selector", '.g[data-k="n1/1"]').click()
    n = wait_for("the utilization chart to draw", lambda: int(js(
        browser, "const p = document.querySelector('#chart-util path.u'); return p ? p.dataset.points : 0")))
    assert n > 0
    d = js(browser, "return document.querySelector('#chart-mem path.m').getAttribute('d')")
    assert d.count("L") + d.count("M") > 1
    for rng in ("24h", "30d"):
        browser.find_element("css selector", f'.ranges button[data-range="{rng}"]').click()
        wait_for(f"the {rng} chart", lambda rng=rng: js(
            browser, "return document.querySelector('.ranges button.on').dataset.range") == rng
            and int(js(browser, "return document.querySelector('#chart-util path.u').dataset.points")) > 0)
    shots(browser, "history")


def test_token_is_required_and_commands_can_be_hidden(browser: Any, private_site: Site, shots: Any) -> None:
    url = private_site.url
    for path in ("", "api/state", "api/status", "api/stream", "static/app.js", "?token=wrong"):
        status, _ = get(url + path)
        assert status == 401, path
    status, body = get(url + "api/state", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and b'"gpus"' in body and MARKER.encode() not in body

    open_page(browser, url + f"?token={TOKEN}")
    assert "token" not in browser.current_url  # the redirect dropped it from the address bar
    wait_for("n1 GPU 0 flagged wasted", lambda: "wasted" in cell_class(browser, "n1/0"))
    wait_for("alice's alert",
             lambda: "alice" in js(browser, "return document.getElementById('alerts').innerText"))
    assert MARKER not in browser.page_source
    _, status_body = get(url + "api/status", {"Authorization": f"Bearer {TOKEN}"})
    assert MARKER not in status_body.decode()
    shots(browser, "private")


def test_host_supplied_text_is_shown_as_text_never_run(browser: Any, shots: Any) -> None:
    """User names and command lines come from the GPU hosts: markup in them is escaped (and the page's
    CSP would refuse an inline handler anyway)."""
    src = Source(hosts=2)
    evil = '<img src=x onerror="window.pwned=1">'
    src.set_util("h1", 3, user=evil, command="python <b>bold.py --run")
    lt = LoopThread()
    server = WebServer(src, WebConfig(enabled=True, listen="127.0.0.1:0"))
    lt.run(server.start())
    try:
        open_page(browser, server.url)
        title = js(browser, "return document.querySelector('.g[data-k=\"h1/0\"]').title")
        assert evil in title and "python <b>bold.py" in title
        assert evil in js(browser, "return document.querySelector('#users tbody').innerText")
        assert evil in js(browser, "return document.querySelector('.g[data-k=\"h1/0\"]').innerText")
        assert js(browser, "return document.querySelectorAll('img, .g b, #users td b').length") == 0
        assert js(browser, "return window.pwned === undefined")
        shots(browser, "escaped")
    finally:
        lt.run(server.stop())
        lt.close()


def test_a_damaged_history_file_is_named_on_the_page(browser: Any, shots: Any, tmp_path: Path) -> None:
    """Issue 38: with the history file damaged, the live part renders, a banner names what could not be read
    (the waste by user over 24 h) and since when, and a GPU's history pane says why it has no chart."""
    src = Source(hosts=2)
    lt = LoopThread()
    store = lt.run(Store.open(StorageConfig(path=str(tmp_path / "g.db"), batch_max_delay=0.02)))
    server = WebServer(src, WebConfig(enabled=True, listen="127.0.0.1:0"))
    try:
        lt.run(store.checkpoint())  # every page in the file; the next commit restarts the WAL ...
        store.submit_host_state(HostState(name="h0", status="up"))
        lt.run(store.flush())
        assert overwrite_pages(tmp_path / "g.db") > 5  # ... and the pages it did not rewrite are garbage
        src.store = store
        lt.run(server.start())
        open_page(browser, server.url)
        banner = wait_for("the unreadable banner", lambda: js(
            browser, "const e = document.getElementById('unreadable'); return e.hidden ? '' : e.innerText"))
        assert banner.startswith("wasted GPU-hours (24 h): history unreadable since "), banner
        assert "malformed" in banner
        assert js(browser, "return document.querySelectorAll('.g').length") == 4  # the live part is all there
        js(browser, "document.querySelector('.g[data-k=\"h1/0\"]').click()")
        note = wait_for("the history pane's note", lambda: js(
            browser, "return document.getElementById('history-note').innerText"))
        assert note.startswith("history unavailable: this GPU's history: history unreadable since"), note
        shots(browser, "damaged")
    finally:
        lt.run(server.stop())
        lt.run(store.close())
        lt.close()


def test_a_gpu_a_slurm_job_holds_and_never_uses_is_shown_so(browser: Any, shots: Any) -> None:
    """Issue 37: the GPU a running Slurm job holds with nothing on it is not an idle GPU: its cell says
    whose it is, takes the ``unused`` flag's colour from the rule catalog the server sends, the totals count
    it, and the filter finds it by the job's name."""
    src = Source(hosts=2)
    state = src.live.hosts["h1"]
    assert state.snapshot is not None
    rank = proc(7000, "alice", mem_gib=40, command="python pretrain.py", job="812", job_name="llama-pretrain")
    state.snapshot = snap(gpu(0, host="h1", util=90, mem=40 * GIB, procs=[rank]),
                          gpu(1, host="h1", util=0, mem=0), ts=time.time(), seq=2)
    state.snapshot.allocations = [SlurmAllocation(job="812", gpu_indexes=[0, 1], name="llama-pretrain",
                                                  user="alice", account="nlp", partition="gpu",
                                                  state="RUNNING")]
    lt = LoopThread()
    server = WebServer(src, WebConfig(enabled=True, listen="127.0.0.1:0"))
    lt.run(server.start())
    try:
        open_page(browser, server.url)
        assert "unused" in cell_class(browser, "h1/1") and "busy" in cell_class(browser, "h1/0")
        cell = "document.querySelector('.g[data-k=\"h1/1\"]')"
        colour = js(browser, f"return getComputedStyle({cell}).borderLeftColor")
        assert colour == "rgb(201, 162, 39)", colour  # the catalog's colour of the flag (#c9a227)
        assert "812 llama-pretrain (alice, nlp)" in js(browser, f"return {cell}.innerText")
        assert "held by Slurm 812 llama-pretrain (alice, nlp), unused" in js(browser, f"return {cell}.title")
        totals = js(browser, "return document.getElementById('totals').innerText").replace(" ", "")
        assert "unused1" in totals, totals
        browser.find_element("id", "filter").send_keys("llama")
        visible = ("return [...document.querySelectorAll('.host')].filter(h => !h.hidden)"
                   ".map(h => h.dataset.h)")
        assert wait_for("only the job's host", lambda: js(browser, visible) == ["h1"])
        shots(browser, "slurm-unused")
    finally:
        lt.run(server.stop())
        lt.close()
