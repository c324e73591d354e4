"""The web page's HTTP: the shared little HTTP/1.1 (collector/faces/aioserver.py) plus the security headers
every page response carries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gpufleet.collector.faces import aioserver
from gpufleet.collector.faces.aioserver import HttpError, Request, read_request

__all__ = ["SECURITY_HEADERS", "HttpError", "Request", "read_request", "respond", "response_head"]

#: Every asset ships in the wheel: nothing is fetched from elsewhere, and nothing inline runs.
SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
)


def response_head(status: int, content_type: str, length: int | None,
                  extra: Sequence[tuple[str, str]] = ()) -> bytes:
    return aioserver.response_head(status, content_type, length, (*SECURITY_HEADERS, *extra))


async def respond(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str, *,
                  timeout: float, extra: Sequence[tuple[str, str]] = (), head_only: bool = False) -> None:
    await aioserver.respond(writer, status, body, content_type, timeout=timeout,
                            extra=(*SECURITY_HEADERS, *extra), head_only=head_only)
