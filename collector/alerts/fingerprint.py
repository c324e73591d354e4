"""Alert identity: a stable hash of the sorted labels (``rule`` included), the same across restarts."""

from __future__ import annotations

import hashlib
import json


def fingerprint(labels: dict[str, str]) -> str:
    """16 hex digits of SHA-256 over the canonical JSON of the labels (like Alertmanager's, but stable)."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def group_key(labels: dict[str, str], group_by: list[str]) -> str:
    """``{host="n3",rule="wasted"}``: the Alertmanager spelling, readable in logs and payloads."""
    return "{" + ",".join(f'{k}="{labels.get(k, "")}"' for k in group_by) + "}"
