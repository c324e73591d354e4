"""The SSH library loads without noise: a command that reaches a host or a remote collector writes nothing
on stderr of its own (cryptography 51 deprecated DSA, and asyncssh 2.24 loads it at import)."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the product modules that import asyncssh when they load (cli/remote.py does when it dials; the CLI's
#: run over SSH is checked whole in tests/cli/test_collectors_key.py)
SSH_MODULES = ["gpufleet.collector.transport.ssh", "gpufleet.collector.transport.hostkeys",
               "gpufleet.collector.transport.zipapp", "gpufleet.collector.simfleet"]


@pytest.mark.parametrize("module", SSH_MODULES)
def test_importing_the_ssh_modules_prints_nothing(module: str) -> None:
    """In a fresh interpreter with every warning shown, as a user's shell runs ``gpufleet``."""
    code = f"import {module}"
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_only_that_warning_is_silenced() -> None:
    """The filter names asyncssh's DSA warning alone: others from anywhere still show."""
    from gpufleet.collector.transport.sshlib import asyncssh

    assert asyncssh.__version__
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        warnings.warn("something else is deprecated", DeprecationWarning, stacklevel=1)
        warnings.warn_explicit("DSA is deprecated", UserWarning, "elsewhere.py", 1, module="elsewhere")
    assert [str(w.message) for w in seen] == ["something else is deprecated", "DSA is deprecated"]


def test_no_product_module_imports_asyncssh_itself() -> None:
    """One owner of the import, so the filter is always in place before asyncssh loads."""
    direct = re.compile(r"^\s*(import asyncssh|from asyncssh\b)", re.M)
    found = [str(p.relative_to(ROOT)) for d in ("agent", "collector", "cli") for p in (ROOT / d).rglob("*.py")
             if direct.search(p.read_text()) and p.name != "sshlib.py"]
    assert found == []
