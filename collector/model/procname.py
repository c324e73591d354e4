"""How a process is named to people: the program and, for interpreters, the script.

Shared by alert summaries and the status view, so a notification and the screen name a process alike.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

_INTERPRETERS = re.compile(
    r"^(python[\d.]*|bash|sh|zsh|node|java|ruby|perl|Rscript|julia|torchrun|deepspeed)$"
)


@lru_cache(maxsize=8192)  # processes live across many samples and requests: the same strings recur
def short_command(command: str | None, limit: int = 40) -> str | None:
    """``/usr/bin/python3 -u /home/a/train.py --lr 3e-4`` -> ``python3 train.py``."""
    if not command:
        return command
    parts = command.split()
    prog = os.path.basename(parts[0]) or parts[0]
    if _INTERPRETERS.match(prog):
        script = next((p for p in parts[1:] if not p.startswith("-")), None)
        if script:
            prog = f"{prog} {os.path.basename(script) or script}"
    return prog[:limit]
