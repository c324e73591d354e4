"""gpufleet as an older commit had it, importable beside this tree: for tests and benches that compare.

``view(commit)`` extracts ``agent/``, ``collector/`` and ``cli/`` of ``commit`` (``git archive``, so the
repository's history must hold it) under ``gpufleet/`` in a cache directory, and returns that directory: put
it first on ``PYTHONPATH`` of a child process and ``import gpufleet.collector...`` loads the old code (the
editable install's finder comes after the path on ``sys.meta_path``). The dependencies are this venv's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
#: main before raw history went into chunks (issue 34; main as it was merged in): the one-row-per-sample
#: store, schema v7.
BEFORE_CHUNKS: Final = "f2a8b86574"


class NoOldTree(RuntimeError):
    """The commit is not in this checkout's history (a shallow clone, a source tarball)."""


def view(commit: str = BEFORE_CHUNKS, cache: Path | None = None) -> Path:
    """A directory holding ``gpufleet/{agent,collector,cli}`` as of ``commit`` (extracted once, kept)."""
    try:
        full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                               f"{commit}^{{commit}}"],
                              capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise NoOldTree(f"commit {commit} is not in {ROOT}'s history: {exc}") from exc
    base = cache or Path(tempfile.gettempdir()) / f"gpufleet-old-{os.getuid()}"
    out = base / full
    if (out / "gpufleet" / "collector").is_dir():
        return out
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base))
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--prefix=gpufleet/", full, "agent",
                                  "collector", "cli"], capture_output=True, timeout=120, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, timeout=120, check=True)
        try:
            tmp.rename(out)
        except OSError:  # another process extracted it first
            if not (out / "gpufleet" / "collector").is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def view_or_skip(commit: str = BEFORE_CHUNKS) -> Path:
    """:func:`view` in a test: skipped (with the reason) where the history does not hold the commit."""
    import pytest

    try:
        return view(commit)
    except NoOldTree as exc:
        pytest.skip(str(exc))


def env(tree: Path | None) -> dict[str, str]:
    """A child's environment that imports gpufleet from ``tree`` (None: this checkout, as installed)."""
    out = dict(os.environ)
    if tree is not None:
        out["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT)])
    else:
        out["PYTHONPATH"] = str(ROOT)
    return out


def run(tree: Path | None, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with gpufleet from ``tree`` (None: this checkout), from the repository root."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env(tree), capture_output=True, text=True,
                          timeout=timeout)
