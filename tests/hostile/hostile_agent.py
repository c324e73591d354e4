"""A scripted hostile agent: prints the lines of a script file verbatim, then keeps the host alive.

Run by the collector's local transport (``agent_command``). Standard library only. The script's lines are
written as they are (raw bytes: anything a broken or malicious agent could print); ``@NOW@`` is replaced
by this process's clock (``@NOW-600@``: that clock stepped back 600 s). A hello is sent first unless the
script starts with one. After the script, a
plain snapshot (or, with ``--repeat``, the script's
last line again) every ``--interval``; ``--flood S`` first prints the last line as fast as it can for
S s (stamped ``--ts-offset`` seconds off), until stdin reaches EOF.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True)
    p.add_argument("--uuid", default="GPU-hostile-0")
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--ts-offset", type=float, default=0.0)
    p.add_argument("--repeat", action="store_true", help="keep printing the script's last line")
    p.add_argument("--flood", type=float, default=0.0, metavar="SECONDS",
                   help="print the script's last line as fast as the pipe takes it, this long")
    args = p.parse_args()
    out = sys.stdout.buffer
    with open(args.script, "rb") as f:
        lines = [ln.rstrip(b"\n") for ln in f if ln.strip()]

    def now() -> float:
        return time.time() + args.ts_offset

    if not lines or b'"type":"hello"' not in lines[0].replace(b" ", b""):
        hello = {"type": "hello", "proto": "1.0", "agent_version": "hostile", "hostname": "h", "ts": now(),
                 "backend": "fake", "gpus": [{"index": 0, "uuid": args.uuid, "name": "Scripted"}]}
        out.write(json.dumps(hello).encode() + b"\n")
    def stamped(line: bytes) -> bytes:
        line = line.replace(b"@NOW@", repr(now()).encode())
        return line.replace(b"@NOW-600@", repr(now() - 600).encode())

    for line in lines:
        out.write(stamped(line) + b"\n")
    out.flush()
    end = time.monotonic() + args.flood
    if lines and args.flood:
        per_chunk = max(1, 65536 // len(lines[-1]))
        while time.monotonic() < end:  # each line stamped on its own: no two are duplicates
            out.write(b"".join(stamped(lines[-1]) + b"\n" for _ in range(per_chunk)))
            out.flush()
    seq = 1000
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], args.interval)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            return
        seq += 1
        if args.repeat and lines:
            out.write(stamped(lines[-1]) + b"\n")
            out.flush()
            continue
        snap = {"type": "snapshot", "proto": "1.0", "ts": now(), "seq": seq,
                "gpus": [{"index": 0, "uuid": args.uuid, "util_gpu": 50, "memory_used": 1 << 30,
                          "memory_total": 80 << 30}]}
        out.write(json.dumps(snap).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
