"""The little HTTP/1.1 the web page needs: read one bounded GET request, write one response.

Like the /metrics server (collector/metrics.py): one request per connection, the head bounded in size and
time, so a slow or hostile client holds one connection slot for ``read_timeout`` at most.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

REASONS = {200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}

#: Every asset ships in the wheel: nothing is fetched from elsewhere, and nothing inline runs.
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            k, sep, v = part.strip().partition("=")
            if sep and k == name:
                return v
        return None


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_request(reader: asyncio.StreamReader, timeout: float) -> Request | None:
    """The next request head, or None when the client left first; :class:`HttpError` when it is bad."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    except asyncio.LimitOverrunError:
        raise HttpError(431, "request head too large") from None
    except asyncio.TimeoutError:
        raise HttpError(408, "request timeout") from None
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "bad request line")
    method, target, _version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpError(400, "bad header line")
            headers[name.strip().lower()] = value.strip()
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    return Request(method, unquote(url.path), query, headers)


def response_head(status: int, content_type: str, length: int | None,
                  extra: Sequence[tuple[str, str]] = ()) -> bytes:
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", f"Content-Type: {content_type}",
            "Connection: close", "Cache-Control: no-store"]
    if length is not None:
        head.append(f"Content-Length: {length}")
    head += [f"{k}: {v}" for k, v in (*SECURITY_HEADERS, *extra)]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


async def respond(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str, *,
                  timeout: float, extra: Sequence[tuple[str, str]] = (), head_only: bool = False) -> None:
    writer.write(response_head(status, content_type, len(body), extra))
    if not head_only:
        writer.write(body)
    await asyncio.wait_for(writer.drain(), timeout)
