"""The root of the test kit's fixtures. tests/ is a package imported from the repository's root (pytest's
``pythonpath``), so every directory and bench imports the kit's modules by name: :mod:`tests.builders` (GPU,
process, snapshot, hello and alert records, the hand-moved clock), :mod:`tests.webhook` (the one webhook
receiver), :mod:`tests.sshserver` (the one SSH server helper)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.builders import FakeClock
from tests.webhook import Webhook, webhook


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand (directories that need another start time override this fixture)."""
    return FakeClock()


@pytest.fixture
def receiver() -> Iterator[Webhook]:
    """A webhook receiver on 127.0.0.1 (tests/webhook.py)."""
    with webhook() as hook:
        yield hook
