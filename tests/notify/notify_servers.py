"""Real HTTP receivers on 127.0.0.1 for delivery tests and tests/bench/notify_bench.py: one that answers
scripted statuses and timestamps what it got, one that trickles its answer one byte every ``every`` s."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

AM_BIN = "/usr/bin/prometheus-alertmanager"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answered in order; 200 once exhausted
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_status(self) -> int:
        with self.lock:
            return self.statuses.pop(0) if self.statuses else 200


class Server:
    def __init__(self) -> None:
        self.url = ""
        self.statuses: list[int] = []  # answered in order; 200 once exhausted
        self.down_until = 0.0  # answer 503 until this time.time()
        self.got: list[tuple[float, bytes]] = []  # (arrival, body) of each accepted POST
        self.attempts = 0
        self.lock = threading.Lock()

    def status(self) -> int:
        with self.lock:
            self.attempts += 1
            if time.time() < self.down_until:
                return 503
            return self.statuses.pop(0) if self.statuses else 200


@contextmanager
def answering() -> Iterator[Server]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            code = state.status()
            if code < 300:
                state.got.append((time.time(), body))
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serving(Handler) as url:
        state.url = url
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
        with _serving(Handler) as url:
            yield url
    finally:
        stop.set()


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()

