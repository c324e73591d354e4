"""Command notifier: run an argv with the webhook JSON on stdin. Non-zero exit or timeout = retryable failure.

No shell is involved (argv, not a string), so alert text can never be interpreted as shell syntax. The title,
status and kind are also in the environment (GPUFLEET_TITLE, GPUFLEET_STATUS, GPUFLEET_KIND) for one-liners.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal

from gpufleet.collector.notify.base import DeliveryError, Notification, Notifier
from gpufleet.collector.notify.message import title, webhook_payload
from gpufleet.collector.secrets import redact_text
from gpufleet.collector.settings import NotifierConfig

STDERR_TAIL = 300


class CommandNotifier(Notifier):
    def __init__(self, config: NotifierConfig, argv: list[str]) -> None:
        super().__init__(config)
        self.argv = list(argv)
        # every argument, not only those read from env:/file: here: the config loader may already have
        # expanded ${TOKEN} into a plain value, so nothing tells a token from a flag; the program is shown
        self._secrets = list(argv[1:])
        self.secret_values = [*self._secrets, *config.headers.values()]

    def describe(self) -> str:
        program = self.config.command[0] if self.config.command else "?"
        return f"{self.name} (command {program})"

    async def send(self, notification: Notification) -> None:
        data = json.dumps(webhook_payload(notification, self.name)).encode()
        env = {**os.environ, "GPUFLEET_TITLE": title(notification), "GPUFLEET_KIND": notification.kind}
        if notification.status is not None:  # a report has no alert status
            env["GPUFLEET_STATUS"] = notification.status
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            raise DeliveryError(self.name, f"cannot run {self.config.command[0]}: {exc.strerror}",
                                retryable=False) from None
        try:
            _, stderr = await asyncio.wait_for(proc.communicate(data), self.timeout)
        except asyncio.CancelledError:  # the dispatcher is stopping: leave nothing running
            _kill_session(proc)
            raise
        except asyncio.TimeoutError:
            _kill_session(proc)
            with contextlib.suppress(Exception):
                await proc.wait()
            raise DeliveryError(self.name, f"{self.config.command[0]} timed out after {self.timeout:g} s",
                                retryable=True) from None
        if proc.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-STDERR_TAIL:]
            tail = redact_text(tail, self._secrets)
            raise DeliveryError(self.name, f"{self.config.command[0]} exited {proc.returncode}"
                                + (f": {tail}" if tail else ""), retryable=True)


def _kill_session(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the program's whole session (start_new_session: its id is the pid): a child of a hook script
    that holds the stderr pipe would otherwise outlive it, and proc.wait() waits for that pipe to close."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
