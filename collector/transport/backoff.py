"""Reconnect delays: exponential with full jitter, so a fleet that returns at once does not stampede.

With full jitter every retry waits ``uniform(0, min(cap, base * 2**attempt))``: 200 hosts that drop together
spread their handshakes over the whole window instead of arriving in synchronized waves. A connection
that stayed up for ``stable_after`` seconds resets the attempt count, so a host that flaps once a day
reconnects quickly while one that fails every time settles at the cap.
"""

from __future__ import annotations

import random


class Backoff:
    """Delay calculator for one host. Not thread-safe; one per host task."""

    def __init__(self, base: float = 1.0, cap: float = 60.0, *, stable_after: float = 30.0,
                 rng: random.Random | None = None) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self.stable_after = stable_after
        self.attempt = 0
        self._rng = rng or random.Random()

    def ceiling(self) -> float:
        """The upper bound of the next delay (before jitter)."""
        # cap the exponent so 2**attempt never overflows on a host that has been down for months
        return min(self.cap, self.base * 2.0 ** min(self.attempt, 62))

    def next(self) -> float:
        """Delay before the next attempt; each call makes the following one (up to) twice as long."""
        delay = self._rng.uniform(0.0, self.ceiling())
        self.attempt += 1
        return delay

    def slow(self) -> float:
        """Delay after an error that retrying fast cannot fix (host key): near the cap, still jittered."""
        self.attempt += 1
        return self._rng.uniform(self.cap / 2.0, self.cap)

    def reset(self) -> None:
        self.attempt = 0

    def connection_ended(self, up_for: float | None) -> None:
        """Record how long the last connection was up (None: it never came up); resets when stable."""
        if up_for is not None and up_for >= self.stable_after:
            self.reset()
