"""The access policy's rules, on the system's own users (root, nobody) with no socket: who reads, who
silences what, and which group the socket's file mode lets in when ``api.group`` is not set."""

from __future__ import annotations

import grp
import pwd

import pytest
from gpufleet.collector.errors import QueryError
from gpufleet.collector.faces.api.access import Access, AccessDenied, Peer, policy_for

try:
    NOBODY = pwd.getpwnam("nobody")
except KeyError:  # pragma: no cover - every Linux has it
    pytest.skip("no user 'nobody' on this system", allow_module_level=True)
ME = Peer(1, NOBODY.pw_uid, NOBODY.pw_gid)
OWN = 4242  # the collector's uid in these policies: not nobody, not root


def test_reader_group_from_socket_mode_when_no_group_is_configured() -> None:
    """deploy/: mode 0660 and no api.group: the socket file's group reads (as the file mode always let it)."""
    p = policy_for(0o660, None, [], socket_gid=NOBODY.pw_gid)
    assert p.reader_gid == NOBODY.pw_gid and not p.world
    p = policy_for(0o600, None, [], socket_gid=NOBODY.pw_gid)
    assert p.reader_gid is None and not p.world
    assert policy_for(0o666, None, [], socket_gid=0).world


def test_configured_group_must_exist() -> None:
    with pytest.raises(QueryError, match="api.group: no such group 'gf-no-such-group'"):
        policy_for(0o660, "gf-no-such-group", [], socket_gid=None)


def test_read_rights() -> None:
    root = Peer(1, 0, 0)
    outside = Access(reader_gid=None, own_uid=OWN)
    assert outside.can_read(root) and outside.can_read(Peer(1, OWN, OWN))
    assert not outside.can_read(ME)
    with pytest.raises(AccessDenied, match="user nobody may not query this collector"):
        outside.check_read(ME)
    assert Access(reader_gid=NOBODY.pw_gid, own_uid=OWN).can_read(ME)  # primary group counts
    assert Access(admins=["nobody"], own_uid=OWN).can_read(ME)  # admins read too


def test_silence_rights() -> None:
    plain = Access(reader_gid=NOBODY.pw_gid, own_uid=OWN)
    plain.check_silence(ME, {"user": "nobody", "rule": "wasted", "host": "n1", "gpu": "0"})
    for matchers, what in (
        ({"user": "alice"}, "silencing alerts of user alice needs admin rights"),
        ({"user": "nob*"}, "silencing alerts of several users needs admin rights"),
        ({"host": "n1"}, r"silencing alerts of every user \(no --user\) needs admin rights"),
    ):
        with pytest.raises(AccessDenied, match=f"^permission denied: {what}"):
            plain.check_silence(ME, matchers)
    group = grp.getgrgid(NOBODY.pw_gid).gr_name
    for admins in (["nobody"], [f"@{group}"]):
        Access(admins=admins, own_uid=OWN).check_silence(ME, {"host": "*"})
    Access(admins=["@gf-no-such-group"], own_uid=OWN).check_silence(Peer(1, OWN, OWN), {"host": "*"})
