"""Who may ask the collector what, from the peer's Unix credentials (``SO_PEERCRED``, read per connection).

The socket's file mode is the outer fence (who can connect at all); these checks are the inner one, and the
only one that knows who is asking. Rules:

- **read** (status, history, hosts, alerts, report, silence list, ...): the collector's own user, root,
  admins, and members of the reader group: ``api.group`` when set, else the socket file's group when the
  mode lets the group in (``0660`` in deploy/, where the collector's group is ``gpufleet``); anyone, when no
  group is configured and the mode lets everyone in (the operator opened it on purpose);
- **silence add / expire**: admins (the own user, root, ``api.admins`` users and ``@groups``) for anything;
  any reader only for silences scoped to their own user (``user`` matcher equal to their name, no glob), so
  the "keep" command of a user note works for that user and never mutes someone else;
- **report --send**: admins.

A silence's ``created_by`` is the peer's real user name, never what the client sent.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.collector.errors import QueryError

log = logging.getLogger(__name__)

_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}
GROUPS_TTL = 30.0  # seconds a user's group list is reused (NSS can be LDAP: not once per request)
GLOB_CHARS = frozenset("*?[")


class AccessDenied(QueryError):
    """The peer may not do this; the message says what it would need."""

    code = "permission_denied"


@dataclass(frozen=True, slots=True)
class Peer:
    """The process at the other end of a connection, as the kernel saw it when it connected."""

    pid: int
    uid: int
    gid: int

    @property
    def name(self) -> str:
        """The real user name (``uid 1234`` when the uid has no passwd entry)."""
        return user_name(self.uid)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def peer_of(sock: socket.socket) -> Peer:
    """The connected Unix socket's peer credentials (Linux ``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return Peer(pid, uid, gid)


def this_process() -> Peer:
    """The in-process caller (the demo, tests): the collector's own user."""
    return Peer(os.getpid(), os.geteuid(), os.getegid())


def resolve_group(name: str) -> int:
    """A group name (or a numeric gid) to its gid; :class:`QueryError` naming it when it does not exist."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise QueryError(f"api.group: no such group {name!r}") from None


class Access:
    """The policy for one query server; ``check_*`` raise :class:`AccessDenied`, the rest answer booleans."""

    def __init__(
        self,
        *,
        reader_gid: int | None = None,
        reader_group: str = "",
        world: bool = False,
        admins: Iterable[str] = (),
        own_uid: int | None = None,
    ) -> None:
        self.reader_gid = reader_gid
        self.reader_group = reader_group or (str(reader_gid) if reader_gid is not None else "")
        self.world = world
        admins = list(admins)
        self.admin_users = {a for a in admins if not a.startswith("@")}
        self.admin_groups = [a[1:] for a in admins if a.startswith("@") and len(a) > 1]
        self.own_uid = os.geteuid() if own_uid is None else own_uid
        self._groups: dict[int, tuple[float, frozenset[int]]] = {}
        self._warned: set[str] = set()

    # -- facts about a peer
    def groups_of(self, peer: Peer) -> frozenset[int]:
        """The peer's gid and every group its user belongs to (NSS), cached for :data:`GROUPS_TTL`."""
        now = time.monotonic()
        hit = self._groups.get(peer.uid)
        if hit is not None and now - hit[0] < GROUPS_TTL:
            return hit[1] | {peer.gid}
        try:
            pw = pwd.getpwuid(peer.uid)
            found = frozenset(os.getgrouplist(pw.pw_name, pw.pw_gid))
        except (KeyError, OSError):
            found = frozenset()
        self._groups[peer.uid] = (now, found)
        return found | {peer.gid}

    def is_admin(self, peer: Peer) -> bool:
        if peer.uid in (0, self.own_uid) or peer.name in self.admin_users:
            return True
        if not self.admin_groups:
            return False
        mine = self.groups_of(peer)
        return any(gid in mine for gid in self._admin_gids())

    def can_read(self, peer: Peer) -> bool:
        if self.world or self.is_admin(peer):
            return True
        return self.reader_gid is not None and self.reader_gid in self.groups_of(peer)

    def _admin_gids(self) -> list[int]:
        out = []
        for name in self.admin_groups:
            try:
                out.append(grp.getgrnam(name).gr_gid)
            except KeyError:
                if name not in self._warned:
                    self._warned.add(name)
                    log.warning("api.admins: no such group %r (ignored)", name)
        return out

    # -- checks
    def check_read(self, peer: Peer) -> None:
        if not self.can_read(peer):
            who = f"members of group {self.reader_group}" if self.reader_group else "the collector's user"
            raise AccessDenied(
                f"permission denied: user {peer.name} may not query this collector "
                f"(allowed: {who} and the admins in api.admins)"
            )

    def check_admin(self, peer: Peer, what: str) -> None:
        if not self.is_admin(peer):
            raise AccessDenied(f"permission denied: {what} needs admin rights (api.admins)")

    def check_silence(self, peer: Peer, matchers: Mapping[str, str]) -> None:
        """A silence with these matchers may be added or expired by ``peer``."""
        if self.is_admin(peer):
            return
        user = matchers.get("user")
        if user is None:
            self.check_admin(peer, "silencing alerts of every user (no --user)")
        elif user != peer.name:
            what = "of several users" if GLOB_CHARS & set(user) else f"of user {user}"
            self.check_admin(peer, f"silencing alerts {what}")


def policy_for(mode: int, group: str | None, admins: Iterable[str], socket_gid: int | None) -> Access:
    """The policy a socket of ``mode`` serves: ``api.group`` readers, else the socket file's group when the
    mode lets the group in, else everyone when the mode lets everyone in."""
    if group:
        return Access(reader_gid=resolve_group(group), reader_group=group, admins=admins)
    gid = socket_gid if mode & 0o060 else None
    name = ""
    if gid is not None:
        try:
            name = grp.getgrgid(gid).gr_name
        except KeyError:
            name = str(gid)
    return Access(reader_gid=gid, reader_group=name, world=bool(mode & 0o006), admins=admins)
