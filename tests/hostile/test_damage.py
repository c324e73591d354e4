"""Issue 38 items 1 and 4: a running collector whose database file is damaged or deleted keeps answering
what it holds in memory (status, hosts, alerts with the ``storage`` alert, the web page), names what it could
not read, and says so for history instead of "internal error"; a deleted or replaced file raises ``storage``
within seconds (the file guard runs with the writer's commits), not at the next maintenance a minute later.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from typing import Any

from gpufleet.cli.render_alerts import render_alerts
from gpufleet.collector.settings import WebConfig
from rich.console import Console

from tests.builders import overwrite_pages
from tests.cli.cli_testkit import cli_env, run_cli  # noqa: E402
from tests.hostile.hostile_testkit import Fleet, collector_over, http_get, snapshot

#: Every op of the query API with arguments it accepts (the live ones answer from memory).
LIVE_OPS: list[tuple[str, dict[str, Any]]] = [
    ("ping", {}), ("status", {}), ("status", {"form": "rows"}), ("status", {"form": "users"}), ("hosts", {}),
    ("alerts", {}), ("silence_list", {}),
]
HISTORY_OPS: list[tuple[str, dict[str, Any]]] = [
    ("history", {"host": "n1"}), ("history", {"host": "n1", "gpu": 0}), ("processes", {}), ("usage", {}),
    ("events", {}), ("jobs", {}), ("report", {}), ("silence_list", {"include_expired": True}),
    ("silence_add", {"matchers": {"rule": "storage"}, "duration": 600}),
]


async def ask(fleet: Fleet, op: str, **args: Any) -> dict[str, Any]:
    """One request through the collector's real query socket."""
    reader, writer = await asyncio.open_unix_connection(fleet.collector.api_socket)
    try:
        writer.write(json.dumps({"v": 1, "op": op, "args": args}).encode() + b"\n")
        await writer.drain()
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(reader.readline(), 30))
        return answer
    finally:
        writer.close()


def storage_firing(answer: dict[str, Any]) -> bool:
    return answer.get("ok") is True and any(a["rule"] == "storage" and a["state"] == "firing"
                                            for a in answer["result"]["active"])


async def until_storage_fires(fleet: Fleet, deadline: float = 30.0) -> dict[str, Any]:
    """Ask for the alerts until ``storage`` is firing (generous deadline; the assertion is the alert)."""
    end = time.monotonic() + deadline
    answer: dict[str, Any] = {}
    while time.monotonic() < end:
        answer = await ask(fleet, "alerts")
        if storage_firing(answer):
            return answer
        await asyncio.sleep(0.2)
    raise AssertionError(f"no firing storage alert in {deadline:.0f} s; the alerts op answered {answer}")


def clear_history_error(answer: dict[str, Any]) -> bool:
    """Answered, or refused with the reason: history unreadable / not writable, and what still answers."""
    if answer.get("ok") is True:
        return True
    error = str(answer.get("error"))
    return "internal error" not in error and ("history unreadable since" in error or
                                              "cannot be written" in error) and "answer from memory" in error


async def test_a_damaged_file_leaves_the_live_answers_and_names_what_it_could_not_read() -> None:
    """The host holds no process and little memory, so nothing rewrites the alerts' or the GPU-hours' pages
    after the damage: their reads fail for sure (pages a later commit rewrites are readable again)."""
    quiet = snapshot("GPU-n1-0", memory_used=100 << 20)
    async with collector_over({"n1": [quiet]}, repeat={"n1"},
                              web=WebConfig(enabled=True, listen="127.0.0.1:0")) as fleet:
        db = fleet.home / "db.sqlite"
        await fleet.wait(lambda: fleet.state("n1").frames >= 10, "frames")
        store = fleet.collector.store
        await store.flush()
        busy, wal, done = await store.checkpoint()  # every page in the file; the next commit restarts the WAL
        assert busy == 0 and wal == done, (busy, wal, done)
        assert overwrite_pages(db) > 10
        assert fleet.collector.web_url is not None
        url = fleet.collector.web_url.rstrip("/")

        first = await ask(fleet, "alerts")  # answers (5726250: internal error), naming what it could not read
        assert first["ok"] is True, first
        recent = first["result"]["unreadable"]["recent"]
        assert recent.startswith("recently resolved: history unreadable since ") and "malformed" in recent
        shown = render_alerts(first["result"], 200, time.time(), time.time() - 86400)
        console = Console(width=200, record=True)
        console.print(shown)
        assert "recently resolved: history unreadable since" in console.export_text()

        # the page: its waste-by-user read fails, the live part shows and the page says what is missing
        code, body = await http_get(url + "/api/state")
        assert code == 200, body
        state = json.loads(body)
        assert [h[0] for h in state["hosts"]] == ["n1"] and "n1/0" in state["gpus"]
        [note] = state["unreadable"]
        assert note.startswith("wasted GPU-hours (24 h): history unreadable since ") and "malformed" in note

        alerts = await until_storage_fires(fleet)  # the reads saw the damage: storage fires, alerts shows it
        assert store.healthy is False
        code, body = await http_get(url + "/api/state")
        assert code == 200 and any(a[0] == "storage" for a in json.loads(body)["alerts"].values()), body
        code, page = await http_get(url + "/")
        assert code == 200 and 'id="unreadable"' in page
        code, body = await http_get(url + "/api/status")
        assert code == 200 and json.loads(body)["hosts"][0]["name"] == "n1"
        code, body = await http_get(url + "/api/history?host=n1&gpu=0&range=1h")
        assert code == 503 and "this GPU's history: history unreadable since" in body, (code, body)
        code, text = await fleet.metrics()
        assert code == 200 and "gpufleet_collector_store_healthy 0.0" in text

        for op, args in LIVE_OPS:
            answer = await ask(fleet, op, **args)
            assert answer["ok"] is True, (op, args, answer)
        status = (await ask(fleet, "status"))["result"]
        assert [(h["name"], h["status"]) for h in status["hosts"]] == [("n1", "up")]
        hosts = (await ask(fleet, "hosts"))["result"]
        assert [(h["name"], h["status"]) for h in hosts] == [("n1", "up")]
        refused = []
        for op, args in HISTORY_OPS:
            answer = await ask(fleet, op, **args)
            assert clear_history_error(answer), (op, args, answer)
            refused += [op] if not answer["ok"] else []
        assert {"history", "report"} <= set(refused), refused  # the samples' pages are garbage

        env = cli_env(fleet.home, GPUFLEET_SOCKET=fleet.collector.api_socket)
        cli = await run_cli("alerts", env=env)
        assert cli.rc == 0 and "storage" in cli.out and "damaged" in cli.out, (cli.out, cli.err)
        cli = await run_cli("history", "--host", "n1", env=env)
        assert cli.rc != 0 and "history unreadable since" in cli.err, cli.err
        assert "internal error" not in cli.err
        assert storage_firing(alerts)


async def _deleted_or_replaced(replace: bool) -> None:
    async with collector_over({"n1": [snapshot("GPU-n1-0")]}, repeat={"n1"}) as fleet:
        db = fleet.home / "db.sqlite"
        await fleet.wait(lambda: fleet.state("n1").frames >= 10, "frames")
        await fleet.collector.store.flush()
        assert not storage_firing(await ask(fleet, "alerts"))
        if replace:  # a restored backup copied over it
            shutil.copyfile(db, fleet.home / "backup.sqlite")
            os.replace(fleet.home / "backup.sqlite", db)
        else:
            db.unlink()
        # maintenance (which alone looked before) runs once a minute: the deadline is well inside that
        alerts = await until_storage_fires(fleet, deadline=30.0)
        [storage] = [a for a in alerts["result"]["active"] if a["rule"] == "storage"]
        assert ("replaced" if replace else "deleted") in storage["annotations"]["summary"] + str(
            storage["annotations"]), storage
        for op, args in LIVE_OPS + HISTORY_OPS:  # the unlinked file is still open: everything answers
            answer = await ask(fleet, op, **args)
            assert clear_history_error(answer), (op, args, answer)


async def test_a_deleted_file_raises_storage_within_seconds() -> None:
    await _deleted_or_replaced(replace=False)


async def test_a_replaced_file_raises_storage_within_seconds() -> None:
    await _deleted_or_replaced(replace=True)
