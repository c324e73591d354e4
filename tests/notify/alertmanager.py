"""The real Alertmanager (Debian's prometheus-alertmanager) for the notify tests: where it is, and whether it
answers."""

from __future__ import annotations

import urllib.request

AM_BIN = "/usr/bin/prometheus-alertmanager"


def ready(base: str) -> bool:
    """Alertmanager at ``base`` says it is ready (no proxy: loopback only)."""
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{base}/-/ready", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False
