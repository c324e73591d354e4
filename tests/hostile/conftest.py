"""Fixtures for hostile-input tests: a real collector whose local hosts run a scripted hostile agent."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
