"""The agent's own exception hierarchy.

Three failure classes matter to the sampling loop, and each has its own recovery: a field that is missing
is just None (never an exception here), a lost GPU is reported and the rest of the snapshot still goes out,
and a driver/library failure means re-initialising NVML with backoff. Setup errors (no NVML at all, a bad
scenario file) end the process with exit code 2 and one clear line on stderr.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base of every agent error; ``str()`` is a complete one-line message."""


class NvmlUnavailable(AgentError):
    """NVML cannot be used at start-up (library missing, driver not loaded, no GPU)."""


class DriverError(AgentError):
    """The driver or library went away under us (UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH).

    Every GPU is affected, so the whole NVML session is re-initialised.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class GpuLostError(AgentError):
    """NVML says one GPU is gone (GPU_IS_LOST, GPU_NOT_FOUND, RESET_REQUIRED); the others are unaffected.

    A field answering UNKNOWN is not this: that field is null and counted (agent/nvml/codes.py)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class GpuUnreadable(AgentError):
    """The agent may not open this GPU (its handle answers NO_PERMISSION: a device cgroup, a restricted
    /dev/nvidiaN): reported as unreadable, never as lost, since the GPU itself is fine (issue 32, item 8).
    Any other code (``code``) counts as a sample in which every reading of the GPU failed."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class EventWaitError(AgentError):
    """Waiting on the NVML event set failed with something other than a timeout.

    ``missing`` is True for the field-missing codes (NOT_SUPPORTED, FUNCTION_NOT_FOUND, ...): Xid events
    cannot be watched on this host, so the watcher stops instead of retrying in a loop.
    """

    def __init__(self, message: str, code: int | None = None, missing: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.missing = missing


class ScenarioError(AgentError):
    """A fake-backend scenario file is invalid; the message names the file and the key."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"scenario {source}: {key}: {problem}" if key else f"scenario {source}: {problem}")
        self.source = source
        self.key = key
        self.problem = problem
