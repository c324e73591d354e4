"""Secrets out of command lines, on the host, before anything is sent.

Any user's full command line reaches the collector's history, ``gpufleet status``, alerts and notifications,
so the agent masks what looks like a secret in each argument:

- the value of an option or assignment whose name holds a secret word: ``--api-token=***``,
  ``--password ***`` (the next argument), ``PGPASSWORD=***``, ``db.password=***``, ``Authorization: ***``;
- URL userinfo: ``https://user:***@host``, ``https://***@host`` (a bare token).

The words (default :data:`DEFAULT_WORDS`) match anywhere in the name, case-insensitively, so the mask errs
on the side of hiding (``--author`` is masked too); ``--redact-words`` / ``GPUFLEET_REDACT_WORDS`` replace
them. Standard library only (the agent ships as a zipapp).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

MASK: Final = "***"
DEFAULT_WORDS: Final = ("token", "secret", "password", "passwd", "key", "auth", "credential")
ENV_WORDS: Final = "GPUFLEET_REDACT_WORDS"

#: scheme://userinfo@ -- the userinfo (up to the last '@' before the host part) is what gets masked
_URL: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/@\s:]*)(?P<pw>:[^/\s]*)?@")
#: NAME=value and --name=value (the name: dashes, then anything up to '=' that is not a space or quote)
_ASSIGN: Final = re.compile(r"(?P<name>-{0,2}[^\s=\"']+)=")
#: --name (an option that may take the next argument as its value)
_OPTION: Final = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")
#: "Name: value" (a header passed as one argument: curl -H "Authorization: Bearer ...")
_HEADER: Final = re.compile(r"(?P<name>[A-Za-z0-9_\-]+):\s*\S")


class Redactor:
    """Masks secrets in argv lists; built once from the secret words."""

    def __init__(self, words: Iterable[str] = DEFAULT_WORDS) -> None:
        cleaned = sorted({w.strip().lower() for w in words if w.strip()})
        self.words = tuple(cleaned)
        self._word = re.compile("|".join(re.escape(w) for w in cleaned), re.I) if cleaned else None

    def secret_name(self, name: str) -> bool:
        return self._word is not None and self._word.search(name) is not None

    def args(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with every secret value replaced by ``***`` (same number of arguments)."""
        out: list[str] = []
        mask_next = False
        for arg in argv:
            if mask_next and not arg.startswith("-"):
                out.append(MASK)
                mask_next = False
                continue
            mask_next = False
            if "://" in arg:
                arg = _URL.sub(_mask_userinfo, arg)
            if self._word is None:
                out.append(arg)
                continue
            m = _ASSIGN.match(arg)
            if m is not None:
                if self.secret_name(m.group("name")):
                    arg = arg[:m.end()] + MASK
            elif _OPTION.match(arg):
                mask_next = self.secret_name(arg)
            else:
                h = _HEADER.match(arg)
                if h is not None and self.secret_name(h.group("name")):
                    arg = f"{h.group('name')}: {MASK}"
            out.append(arg)
        return out

    def command(self, command: str) -> str:
        """A command line already joined with spaces (arguments split on whitespace)."""
        return " ".join(self.args(command.split(" ")))


def _mask_userinfo(m: re.Match[str]) -> str:
    if m.group("pw") is not None:
        return f"{m.group('scheme')}{m.group('user')}:{MASK}@"
    return f"{m.group('scheme')}{MASK}@" if m.group("user") else m.group(0)


def words_from(text: str | None) -> tuple[str, ...]:
    """``"token,secret"`` -> the words; None or "" -> the defaults; ``"-"`` -> none (redact URLs only)."""
    if text is None or not text.strip():
        return DEFAULT_WORDS
    if text.strip() == "-":
        return ()
    return tuple(w for w in text.split(",") if w.strip())
