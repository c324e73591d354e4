"""The test kit's one webhook receiver: a real HTTP endpoint on 127.0.0.1 (port 0, so any number run at once)
that keeps every POST it is sent and answers as the test scripts it; and a destination that trickles its
answer one byte at a time, for the delivery tests and tests/bench/notify_bench.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One POST: where, with which headers and body, when, and what it was answered."""

    path: str
    headers: dict[str, str]
    raw: bytes
    at: float
    status: int = 0  # 0 until answered (the receiver may be told to wait)

    @property
    def body(self) -> Any:
        return json.loads(self.raw)

    @property
    def accepted(self) -> bool:
        return 0 < self.status < 300


@dataclass
class Webhook:
    """What the receiver got, and how it answers: ``statuses`` in order (200 once they run out), 503 while
    ``time.time() < down_until``, each after ``delay`` seconds."""

    base: str = ""  # http://127.0.0.1:PORT
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    down_until: float = 0.0
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        """The usual endpoint (any path works: ``base + "/whatever"``)."""
        return self.base + "/hook"

    @property
    def attempts(self) -> int:
        return len(self.requests)

    @property
    def got(self) -> list[tuple[float, bytes]]:
        """(arrival, body) of every accepted POST."""
        return [(r.at, r.raw) for r in list(self.requests) if r.accepted]

    def alerts(self, rule: str | None = None, status: str | None = "firing",
               **labels: str) -> list[dict[str, Any]]:
        """The alerts of every accepted webhook body, those of ``rule`` and ``status`` with these labels."""
        out = []
        for r in list(self.requests):
            if not r.accepted:
                continue
            for a in r.body.get("alerts", []):
                lab = a.get("labels", {})
                want = {**labels, **({"rule": rule} if rule is not None else {})}
                same = all(lab.get(k) == v for k, v in want.items())
                if same and (status is None or a.get("status") == status):
                    out.append(a)
        return out

    def answer(self) -> int:
        with self.lock:
            if time.time() < self.down_until:
                return 503
            return self.statuses.pop(0) if self.statuses else 200


@contextmanager
def webhook() -> Iterator[Webhook]:
    """A receiver serving until the block ends."""
    state = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got = Received(self.path, dict(self.headers.items()), raw, time.time())
            state.requests.append(got)
            if state.delay:
                time.sleep(state.delay)
            got.status = status = state.answer()
            body = b'{"ok":true}' if status < 400 else b'{"error":"scripted"}'
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (its timeout)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serving(Handler) as base:
        state.base = base
        yield state


@contextmanager
def trickling(every: float = 2.0) -> Iterator[str]:
    """Accepts, answers a status line and headers, then one body byte every ``every`` s, never ending."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                self.send_response(200)
                self.send_header("Content-Length", "1000000")
                self.end_headers()
                self.wfile.flush()
                while not stop.wait(every):
                    self.wfile.write(b".")
                    self.wfile.flush()
            except OSError:
                pass  # the client gave up

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        with _serving(Handler) as base:
            yield base + "/hook"
    finally:
        stop.set()


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
