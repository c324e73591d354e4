"""Who may ask the collector what, with REAL Unix users: a real `gpufleet collector run` (as root, the
collector's own user here) with ``api.group`` and ``api.admins``, and the real `gpufleet` CLI run as
throwaway users made for the test (useradd/groupadd; deleted afterwards).

The users run the CLI through ``setpriv --init-groups`` (their real uid, gid and groups from /etc/group,
as a login would give them). When this interpreter lives under a folder they cannot enter (a pyenv under
/root), they also get the ambient CAP_DAC_READ_SEARCH capability, which lets them read and search
files only: connecting to a socket needs write permission, which it does not grant, and the collector
decides from the uid/gid the kernel reports, which it does not change.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gpufleet.collector.faces.api.server import QueryServer, listening

from tests.cli.cli_testkit import StandinCollector, cli_env, gpufleet_argv

TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "setpriv")
if os.geteuid() != 0:
    pytest.skip("needs root: the test creates throwaway Unix users and groups", allow_module_level=True)
if missing := [t for t in TOOLS if shutil.which(t) is None]:
    pytest.skip(f"needs {', '.join(missing)} to make and become throwaway users", allow_module_level=True)

pytestmark = pytest.mark.slow
DENIED = 4  # gpufleet.cli.client.EXIT_DENIED


@dataclass
class Users:
    bob: str  # in the reader group
    adm: str  # in the reader group and in the admin group (api.admins: ["@<admins>"])
    out: str  # in neither
    alice: str  # only a label value: another user's alerts
    readers: str
    admins: str


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def _reachable_by_others(path: str) -> bool:
    """Every folder above ``path`` lets others search it (so another user can exec the interpreter)."""
    p = Path(os.path.realpath(path)).parent
    while True:
        if not os.stat(p).st_mode & 0o001:
            return False
        if p == p.parent:
            return True
        p = p.parent


_OPEN = all(_reachable_by_others(p) for p in (gpufleet_argv()[0], sys.executable))
_CAPS = [] if _OPEN else ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def as_user(user: str) -> list[str]:
    """setpriv as ``user``: their uid, primary gid and groups (as a login gives them)."""
    gid = pwd.getpwnam(user).pw_gid
    return ["setpriv", f"--reuid={user}", f"--regid={gid}", "--init-groups", *_CAPS, "--"]


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    sfx = secrets.token_hex(3)
    u = Users(
        bob=f"gfbob{sfx}", adm=f"gfadm{sfx}", out=f"gfout{sfx}", alice=f"gfalice{sfx}",
        readers=f"gfread{sfx}", admins=f"gfadmins{sfx}",
    )
    made_users: list[str] = []
    made_groups: list[str] = []
    try:
        for g in (u.readers, u.admins):
            _run("groupadd", g)
            made_groups.append(g)
        for name, groups in ((u.bob, u.readers), (u.adm, f"{u.readers},{u.admins}"), (u.out, "")):
            _run("useradd", "-M", "-N", "-s", "/usr/sbin/nologin", *(["-G", groups] if groups else []), name)
            made_users.append(name)
        yield u
    finally:
        for name in made_users:
            subprocess.run(["userdel", name], capture_output=True, timeout=60)
        for g in made_groups:
            subprocess.run(["groupdel", g], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gfacc-", dir="/tmp"))
    d.chmod(0o755)  # the users must reach the socket's folder inside (which the collector makes 0750)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@dataclass
class Running:
    socket: Path
    home: Path


@pytest.fixture(scope="module")
def collector(users: Users, home: Path) -> Iterator[Running]:
    """`gpufleet collector run` with a host that is down (its host_down alert is there to be silenced)."""
    sock = home / "run" / "gpufleet.sock"
    cfg = home / "gpufleet.yaml"
    cfg.write_text(f"""hosts:
  - name: gfdown
    address: 127.0.0.1
    port: 1
    host_key_policy: accept-new
storage:
  path: {home / "gpufleet.db"}
api:
  socket: {sock}
  group: {users.readers}
  admins: ["@{users.admins}"]
""")
    log = open(home / "collector.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*gpufleet_argv(), "collector", "run", "-c", str(cfg)], env=cli_env(home), stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        while not listening(sock):
            assert proc.poll() is None, (home / "collector.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "collector did not open its socket within 60 s"
            time.sleep(0.1)
        yield Running(sock, home)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def cli(c: Running, user: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI as ``user`` (None: root, the collector's own user) against the collector's socket."""
    prefix = as_user(user) if user else []
    env = cli_env(c.home, GPUFLEET_SOCKET=str(c.socket))
    return subprocess.run(
        [*prefix, *gpufleet_argv(), *args], env=env, capture_output=True, text=True, timeout=60
    )


def silences(c: Running) -> list[dict[str, object]]:
    r = cli(c, None, "silence", "list", "--json")
    assert r.returncode == 0, r.stderr
    out: list[dict[str, object]] = json.loads(r.stdout)
    return out


def test_socket_belongs_to_the_group(collector: Running, users: Users) -> None:
    import grp

    gid = grp.getgrnam(users.readers).gr_gid
    st, folder = collector.socket.stat(), collector.socket.parent.stat()
    assert (st.st_mode & 0o777, st.st_gid) == (0o660, gid)
    assert (folder.st_mode & 0o777, folder.st_gid) == (0o750, gid)  # the group can reach it, others not


def test_group_member_reads(collector: Running, users: Users) -> None:
    for args in (("status",), ("hosts",), ("alerts",), ("silence", "list")):
        r = cli(collector, users.bob, *args)
        assert r.returncode == 0, (args, r.stderr)
    assert "gfdown" in cli(collector, users.bob, "hosts").stdout


def test_outsider_is_refused(collector: Running, users: Users) -> None:
    r = cli(collector, users.out, "status")
    assert r.returncode == DENIED and r.stdout == ""
    assert r.stderr.startswith("gpufleet: permission denied on the collector socket ")
    assert len(r.stderr.splitlines()) == 1 and "api.group" in r.stderr


def test_user_silences_only_their_own_alerts(collector: Running, users: Users) -> None:
    r = cli(collector, users.bob, "silence", "add", "--user", users.bob, "--rule", "wasted", "--for", "1h",
            "--comment", "keep", "--by", users.alice)
    assert r.returncode == 0, r.stderr
    [mine] = [s for s in silences(collector) if s["matchers"] == {"user": users.bob, "rule": "wasted"}]
    assert mine["created_by"] == users.bob  # the peer's real name, not --by

    r = cli(collector, users.bob, "silence", "add", "--user", users.alice, "--for", "1h")
    assert r.returncode == DENIED and r.stdout == ""
    assert r.stderr == (
        f"gpufleet: permission denied: silencing alerts of user {users.alice} needs admin rights"
        " (api.admins)\n"
    )
    for args in (("--host", "gfdown"), ("--user", "gf*")):
        r = cli(collector, users.bob, "silence", "add", *args, "--for", "1h")
        assert r.returncode == DENIED and "needs admin rights" in r.stderr, (args, r.stderr)

    r = cli(collector, users.adm, "silence", "add", "--user", users.alice, "--for", "1h")
    assert r.returncode == 0, r.stderr
    [alices] = [s for s in silences(collector) if s["matchers"] == {"user": users.alice}]
    r = cli(collector, users.bob, "silence", "expire", str(alices["id"]))
    assert r.returncode == DENIED and f"of user {users.alice} needs admin rights" in r.stderr
    r = cli(collector, users.bob, "silence", "expire", str(mine["id"]))
    assert r.returncode == 0, r.stderr


def test_admin_silences_anything(collector: Running, users: Users) -> None:
    r = cli(collector, users.adm, "silence", "add", "--host", "gfdown", "--rule", "host_down", "--for", "1h")
    assert r.returncode == 0, r.stderr
    [rec] = [s for s in silences(collector) if s["matchers"] == {"host": "gfdown", "rule": "host_down"}]
    assert rec["created_by"] == users.adm
    r = cli(collector, users.adm, "silence", "expire", str(rec["id"]))
    assert r.returncode == 0, r.stderr


def test_only_admins_start_or_stop_maintenance(collector: Running, users: Users) -> None:
    """Letting go of a host (no agent, alerts muted) is an admin's act; readers see who did it and why."""
    r = cli(collector, users.bob, "maintenance", "start", "--host", "gfdown", "--comment", "mine now")
    assert (r.returncode, r.stdout) == (DENIED, "")
    assert r.stderr == "gpufleet: permission denied: starting maintenance needs admin rights (api.admins)\n"
    r = cli(collector, users.bob, "maintenance", "list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], "the refused window was not started"

    r = cli(collector, users.adm, "maintenance", "start", "--host", "gfdown", "--for", "1h",
            "--comment", "rack move")
    assert r.returncode == 0 and r.stdout.startswith("gfdown: in maintenance until "), r.stderr
    r = cli(collector, users.bob, "maintenance", "list", "--json")
    [window] = json.loads(r.stdout)
    assert (window["host"], window["created_by"], window["comment"]) == ("gfdown", users.adm, "rack move")
    r = cli(collector, users.bob, "status", "--json")
    assert json.loads(r.stdout)["hosts"][0]["status"] == "maintenance"

    r = cli(collector, users.bob, "maintenance", "stop", "--host", "gfdown")
    assert (r.returncode, r.stdout) == (DENIED, "")
    assert r.stderr == "gpufleet: permission denied: ending maintenance needs admin rights (api.admins)\n"
    r = cli(collector, users.out, "maintenance", "list")
    assert r.returncode == DENIED
    assert r.stderr.startswith("gpufleet: permission denied on the collector socket ")
    r = cli(collector, users.adm, "maintenance", "stop", "--host", "gfdown")
    assert r.returncode == 0 and r.stdout.startswith("gfdown: maintenance ended after "), r.stderr
    r = cli(collector, users.bob, "maintenance", "list", "--json")
    assert json.loads(r.stdout) == []


async def test_peer_check_refuses_who_the_file_mode_lets_in(users: Users) -> None:
    """A socket the operator opened wider (0666) with api.group: connecting works, asking does not."""
    d = Path(tempfile.mkdtemp(prefix="gfacc-", dir="/tmp"))
    srv: QueryServer | None = None
    try:
        d.chmod(0o755)
        standin = StandinCollector({"n1": "busy"}, gpus=1)
        standin.config.api.group = users.readers
        srv = QueryServer(standin, d / "run" / "gpufleet.sock", 0o666)
        await srv.start()
        env = cli_env(d, GPUFLEET_SOCKET=str(srv.path))

        async def run(user: str, *args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                *as_user(user), *gpufleet_argv(), *args, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode is not None
            return proc.returncode, out.decode(), err.decode()

        (d / "run").chmod(0o755)  # as wide as the socket: only the peer check stands in the way
        rc, out, err = await run(users.bob, "status", "--json")
        assert rc == 0, err
        assert [h["name"] for h in json.loads(out)["hosts"]] == ["n1"]
        for args in (("status", "--json"), ("alerts",)):  # the first one's answer is in the status cache
            rc, out, err = await run(users.out, *args)
            assert (rc, out) == (DENIED, ""), args
            assert err == (
                f"gpufleet: permission denied: user {users.out} may not query this collector "
                f"(allowed: members of group {users.readers} and the admins in api.admins)\n"
            )
    finally:
        if srv is not None:
            await srv.stop()
        shutil.rmtree(d, ignore_errors=True)
