"""`gpufleet top`'s pieces without a terminal: key decoding, filtering, sorting, the screens' sizes."""

from __future__ import annotations

import time

import pytest
from gpufleet.cli.keys import decode
from gpufleet.cli.top import TopState, detail_screen, list_screen
from gpufleet.collector.fleet import query
from gpufleet.collector.model import views

from tests.cli.cli_testkit import StandinAlerts, synthetic_live


def fleet() -> views.FleetView:
    live = synthetic_live({"n1": "busy", "n2": "wasting", "n3": "down", "n4": "idle"}, gpus=3)
    return query.build_fleet_view(live.hosts.values(), StandinAlerts(live).firing(), now=time.time())


def test_keys_decode_sequences_and_a_lone_esc() -> None:
    assert decode("\x1b[A\x1b[Bj\r") == ["up", "down", "j", "enter"]
    assert decode("\x1b") == ["esc"] and decode("\x1b[5~\x1b[6~") == ["pgup", "pgdn"]
    assert decode("/ab\x7f") == ["/", "a", "b", "backspace"] and decode("\x1b[99Zq") == ["q"]
    assert decode("\x1bOP\x1b[21~") == ["f1", "f10"]  # help and quit, as in htop


def rows_of(st: TopState, view: views.FleetView) -> list[tuple[str, int | None]]:
    return [r.key for r in st.visible_rows(view)]


def test_sort_filter_select_and_quit() -> None:
    view = fleet()
    st = TopState()
    assert rows_of(st, view)[:4] == [("n1", 0), ("n1", 1), ("n1", 2), ("n2", 0)]
    assert ("n3", None) in rows_of(st, view)  # a down host is one row
    st.selected = ("n1", 1)
    st.key("w", page=10)
    assert rows_of(st, view)[:2] == [("n2", 0), ("n2", 1)]  # dave's wasted GPUs first
    list_screen(view, st, 80, 24)
    assert st.selected == ("n2", 0)  # a new sort starts at its top
    st.key("o", page=10)
    users = [r.users()[:1] for r in st.visible_rows(view)]
    assert users[0] == ["alice"] and users[-1] == []
    for k in ["/", "u", "s", "e", "r", ":", "d", "a", "v", "e", "enter"]:
        assert st.key(k, page=10)
    assert st.filter == "user:dave" and rows_of(st, view) == [("n2", 0), ("n2", 1)]
    for k in ["/", " ", "f", "l", "a", "g", ":", "w", "a", "s"]:  # the filter applies as it is typed
        st.key(k, page=10)
    assert st.filter == "user:dave flag:was" and rows_of(st, view) == [("n2", 0), ("n2", 1)]
    st.key("esc", page=10)  # Esc undoes the edit
    assert st.filter == "user:dave" and st.prompt is None
    st.key("esc", page=10)  # and then clears the filter: Esc goes back, never out of top (issue 36)
    assert st.filter == "" and st.key("esc", page=10) is True
    for k in ("h", "?", "f1"):  # help as in nvitop and htop; any key returns; q quits
        assert st.key(k, page=10) and st.help
        assert st.key("esc", page=10) and not st.help
    st.key("n", page=10)
    assert st.sort == "host"
    st.key(">", page=10)
    assert st.sort == "util"
    st.key("<", page=10)
    st.key(",", page=10)
    assert st.sort == "user"
    assert st.key("q", page=10) is False and TopState().key("f10", page=10) is False


@pytest.mark.parametrize("width,height", [(80, 24), (200, 50)])
def test_screens_fit(width: int, height: int) -> None:
    view = fleet()
    st = TopState()
    lines = list_screen(view, st, width, height)
    assert len(lines) == height and all(line.cell_len() <= width for line in lines)
    assert lines[-1].plain.startswith("h help  q quit")
    assert lines[-3].plain.startswith("flags worst first")  # the legend, always there
    for _ in range(30):  # scroll past the end: the selection stays on screen
        st.key("down", page=5)
        lines = list_screen(view, st, width, 12)
        assert len(lines) == 12
    st.key("end", page=5)
    assert st.visible_rows(view)[st.index()].key == ("n4", 2)
    st.selected = ("n2", 0)
    st.key("enter", page=5)
    assert st.open == ("n2", 0)
    st.history = {"series": [], "since": time.time() - 900, "until": time.time()}
    text = "\n".join(line.plain for line in detail_screen(view, st, width, height))
    assert "dave" in text and "PID" in text and "1000" in text and "jupyter" in text
    assert st.key("esc", page=5) and st.open is None  # Esc from a GPU goes back, not out
