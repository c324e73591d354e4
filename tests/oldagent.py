"""An agent as an older release shipped it, from this repository's own history, for the mixed-fleet tests
(issue 33: agents before 1.3 keep working against the new collector during a rolling upgrade).

``git archive <commit> agent`` is unpacked as ``gpufleet/agent`` in a directory of its own and run by this
interpreter with ``-S`` (no site: the editable install's finder, which maps ``gpufleet.agent`` to this tree,
is not loaded) and that directory first on the path, then site-packages for its dependencies (nvidia-ml-py,
PyYAML for the fake backend's scenarios)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the commits whose agents the tests run, and the protocol each speaks
RELEASES = {"5726250": "1.1", "2501273": "1.2"}


def old_agent_argv(commit: str, where: Path) -> list[str] | None:
    """The argv that runs ``commit``'s agent (its own arguments follow); None when git or the commit is not
    available here (a source tarball, a shallow clone)."""
    view = where / f"agent-{commit}" / "gpufleet"
    if not (view / "agent").is_dir():
        view.mkdir(parents=True, exist_ok=True)
        try:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "agent"],
                                     capture_output=True, timeout=60, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(view)], input=archive, check=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
    paths = [str(view.parent), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    boot = f"import sys; sys.path[:0] = {paths!r}; from gpufleet.agent.main import main; sys.exit(main())"
    return [sys.executable, "-S", "-c", boot]
