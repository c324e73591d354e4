"""Fixtures for hostile-input tests: a real collector whose local hosts run a scripted hostile agent."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # importlib mode: make the helper module importable
    sys.path.insert(0, str(HERE))
