"""The ``defaults:`` and ``hosts:`` sections: entries, ranges, shorthand, host-key settings, and the
cross-host checks (names, key files, known_hosts, jump loops, one machine listed twice).
"""

from __future__ import annotations

import os
import re
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

from gpufleet.collector.addresses import Endpoint, Resolver
from gpufleet.collector.config import bounds
from gpufleet.collector.config.hostlist import (
    BRACKET,
    DEFAULT_MAX_HOSTS,
    MAX_HOSTS_PER_PATTERN,
    expand_hostlist,
    hostlist_size,
)
from gpufleet.collector.config.nodes import (
    TAG,
    Bad,
    Conv,
    Parser,
    entry_key,
    join_key,
    opt_path,
)
from gpufleet.collector.settings import HostBudget, HostConfig
from yaml.nodes import MappingNode, Node, ScalarNode

_DISABLE_WORDS = {"none", "no", "off", "false", "0", "disable", "disabled", "ignore", "insecure", "skip",
                  "never", "accept-all", "accept_all", "any", "autoadd", "auto-add", "/dev/null", "nul"}
_POLICIES = ("strict", "accept-new")
_HOST_NAME = re.compile(r"[\w.:%-]+")
_SHORTHAND = re.compile(
    r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[(?P<v6>[0-9A-Fa-f:.%\w]*:[0-9A-Fa-f:.%\w]*)\]|[^:@\s]+)"
    r"(?::(?P<port>\d+))?"
)
_VERIFY_WHY = ("gpufleet always verifies SSH host keys: an impostor host could feed it false data and "
               "receive the agent command")


def known_hosts(p: Parser, node: Node, key: str) -> str:
    """A known_hosts file that really verifies: no null, no "off" words, and no device or directory
    however it is spelled (``/dev/./null``, ``/dev/null/``, a symlink to it): reading one yields no keys,
    so with accept-new every changed host key would be learned again, silently."""
    raw = p.raw(node)
    value, _ = p.env_scalar(node, key)
    if value is None or value is False or (isinstance(value, str) and (
            not value.strip() or value.strip().lower() in _DISABLE_WORDS)):
        shown = "null" if value is None else f"'{raw}'"
        p.fail(f"known_hosts: {shown} would disable host key verification; {_VERIFY_WHY}. "
               "Leave it out for ~/.ssh/known_hosts, or give a file (with host_key_policy: "
               "accept-new to learn keys on first connect)", node, key)
    path = p.path(node, key)
    what = _not_a_file(path)
    if what:
        p.fail(f"known_hosts: '{raw}' is {what}, not a file; it would disable host key verification; "
               f"{_VERIFY_WHY}. Give a regular file (it may not exist yet under host_key_policy: accept-new)",
               node, key)
    return path


def _not_a_file(path: str) -> str | None:
    """What ``path`` really is when that is not a regular file (following every symlink), else None."""
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return None  # not there yet: accept-new creates it; strict reports it missing
    except OSError as exc:
        return f"unusable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    kind = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else \
        "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file"
    return f"{kind} ({real})" if real != path else kind


def host_key_policy(p: Parser, node: Node, key: str) -> str:
    value, _ = p.env_scalar(node, key)
    raw = p.raw(node)
    if value is None or isinstance(value, bool) or (
            isinstance(value, str) and value.strip().lower() in _DISABLE_WORDS):
        p.fail(f"'{raw}' would disable host key verification; {_VERIFY_WHY}. Use 'strict' (keys "
               "must be in known_hosts) or 'accept-new' (learn a key on first connect, then pin it)",
               node, key)
    return p.choice(node, key, _POLICIES)


HOST_SPEC: dict[str, Conv] = {
    "user": Parser.opt_string,
    "port": bounds.HOST["port"],
    "key": opt_path,
    "jump": Parser.opt_string,
    "known_hosts": known_hosts,
    "host_key_policy": host_key_policy,
    "agent": lambda p, n, k: p.choice(n, k, ("installed", "upload")),
    "agent_command": Parser.string,
    "agent_args": Parser.argv,
    "interval": bounds.HOST["interval"],
    "connect_timeout": bounds.HOST["connect_timeout"],
    "keepalive_interval": bounds.HOST["keepalive_interval"],
    "keepalive_count_max": bounds.HOST["keepalive_count_max"],
    "read_timeout": bounds.HOST["read_timeout"],
    "tags": Parser.str_list,
    "python": Parser.string,
    "upload_dir": Parser.string,
    "max_line_bytes": bounds.HOST["max_line_bytes"],
    "transport": lambda p, n, k: p.choice(n, k, ("ssh", "local")),
    "max_clock_skew": bounds.HOST["max_clock_skew"],
    "budget": lambda p, n, k: _budget(p, n, k),
}
BUDGET_SPEC: dict[str, Conv] = dict(bounds.BUDGET)


def _budget(p: Parser, node: Node, key: str) -> HostBudget:
    """``budget: {bytes_per_second: 4194304, events_per_second: 20, ...}``: unset keys keep their default."""
    return HostBudget(**{k: v for k, (v, _n) in p.fields(node, key, BUDGET_SPEC, "budget").items()})
HOST_ENTRY_SPEC: dict[str, Conv] = {
    "name": lambda p, n, k: _host_name(p, n, k),
    "address": Parser.string,
    **HOST_SPEC,
}

def _host_name(p: Parser, node: Node, key: str) -> str:
    name = p.string(node, key).strip()
    if not _HOST_NAME.fullmatch(BRACKET.sub("0", name)):
        p.fail(f"host name '{p.raw(node)}' may only contain letters, digits, '.', '-', '_', ':' "
               "(and a range like node[01-16])", node, key)
    return name


def parse_defaults(p: Parser, node: Node | None) -> dict[str, tuple[Any, Node, str]]:
    if node is None or p.is_null(node):
        return {}
    try:
        got = p.fields(node, "defaults", HOST_SPEC, "defaults")
    except Bad:
        return {}
    return {name: (value, vnode, f"defaults.{name}") for name, (value, vnode) in got.items()}


def _shorthand(p: Parser, node: ScalarNode, key: str) -> dict[str, tuple[Any, Node, str]]:
    """``n3`` or ``alice@n3.example:2222`` or ``[::1]:2222`` -> name/address/user/port."""
    text = p.string(node, key).strip()
    m = _SHORTHAND.fullmatch(text)
    if not m:
        p.fail(f"expected a host name or [user@]host[:port], got '{p.raw(node)}'", node, key)
    host = m.group("v6") or m.group("host")
    out: dict[str, tuple[Any, Node, str]] = {"name": (_host_name_text(p, host, node, key), node, key)}
    if m.group("user"):
        out["user"] = (m.group("user"), node, key)
    if m.group("port"):
        port = int(m.group("port"))
        if not 1 <= port <= 65535:
            p.fail(f"port must be between 1 and 65535, got {port}", node, key)
        out["port"] = (port, node, key)
    return out


def _host_name_text(p: Parser, name: str, node: Node, key: str) -> str:
    if not _HOST_NAME.fullmatch(BRACKET.sub("0", name)):
        p.fail(f"host name '{p.raw(node)}' may only contain letters, digits, '.', '-', '_', ':'", node, key)
    return name


Fields = dict[str, tuple[Any, Node, str]]


def parse_hosts(p: Parser, node: Node | None, defaults: Fields,
                max_hosts: int = DEFAULT_MAX_HOSTS) -> list[tuple[HostConfig, Fields]]:
    """The host list, expanded; refused (one error, nothing expanded) when it names more than
    ``max_hosts`` hosts: 100 patterns like ``r1-[0-9999]`` would otherwise build a million hosts."""
    if node is None:
        return []
    if p.is_null(node):
        p.error("is empty (every entry commented out?); list at least one host, e.g. '- gpu01', "
                "or write 'hosts: []' to watch none", node, "hosts")
        return []
    if isinstance(node, MappingNode):
        p.error("expected a list, got a mapping; write each host as a list item: '- name: gpu01' "
                "(or '- gpu01')", node, "hosts")
        return []
    try:
        items = p.sequence(node, "hosts")
    except Bad:
        return []
    if _over_cap(p, items, max_hosts):
        return []
    out: list[tuple[HostConfig, Fields]] = []
    for index, item in enumerate(items):
        try:
            out.extend(_parse_host_entry(p, item, index, defaults, max_hosts))
        except Bad:
            pass
    return out


def _over_cap(p: Parser, items: list[Node], max_hosts: int) -> bool:
    """Count the hosts every entry names, by arithmetic; past ``max_hosts``, report it where the list
    crosses the cap. Entries whose name is not a plain string are counted as one (their error comes later)."""
    sizes: list[int] = []
    for item in items:
        name = _name_text(item)
        try:
            sizes.append(hostlist_size(name) if name is not None else 1)
        except ValueError:
            sizes.append(1)
    total = sum(sizes)
    if total <= max_hosts:
        return False
    running = 0
    for index, (item, size) in enumerate(zip(items, sizes, strict=True)):
        running += size
        if running > max_hosts:
            p.error(f"the host list names {total} hosts, more than max_hosts ({max_hosts}); this entry "
                    f"brings it to {running}. Raise max_hosts (top level) if the fleet is really this "
                    "large", item, entry_key("hosts", item, index))
            break
    return True


def _name_text(item: Node) -> str | None:
    """An entry's name pattern as written (shorthand or ``name:``), without converting anything."""
    if isinstance(item, ScalarNode) and item.tag == TAG + "str":
        m = _SHORTHAND.fullmatch(item.value.strip())
        return (m.group("v6") or m.group("host")) if m else None
    if isinstance(item, MappingNode):
        for knode, vnode in item.value:
            if isinstance(knode, ScalarNode) and knode.value == "name" and isinstance(vnode, ScalarNode):
                return str(vnode.value)
    return None


def _parse_host_entry(p: Parser, item: Node, index: int, defaults: Fields,
                      max_hosts: int) -> list[tuple[HostConfig, Fields]]:
    key = entry_key("hosts", item, index)
    if isinstance(item, ScalarNode) and not p.is_null(item):
        own = _shorthand(p, item, key)
    elif isinstance(item, MappingNode):
        own = {name: (value, vnode, join_key(key, name))
               for name, (value, vnode) in p.fields(item, key, HOST_ENTRY_SPEC, "a host").items()}
        if "name" not in own:
            if not any(isinstance(k, ScalarNode) and k.value == "name" for k, _ in item.value):
                p.error("a host needs a name", item, key)
            raise Bad
    else:
        p.fail(f"expected a host name or a mapping, got {p.kind(item)}", item, key)

    name_pattern, name_node, name_key = own["name"]
    try:
        names = expand_hostlist(name_pattern, limit=max(max_hosts, MAX_HOSTS_PER_PATTERN))
    except ValueError as exc:
        p.fail(str(exc), name_node, name_key)
    addresses = names
    if "address" in own:
        addr_pattern, addr_node, addr_key = own["address"]
        try:
            addresses = expand_hostlist(addr_pattern.strip(), limit=max(max_hosts, MAX_HOSTS_PER_PATTERN))
        except ValueError as exc:
            p.fail(str(exc), addr_node, addr_key)
        if len(addresses) != len(names):
            p.fail(f"address expands to {len(addresses)} host(s) but name to {len(names)}; give the address "
                   "the same range as the name (or leave it out)", addr_node, addr_key)

    merged: Fields = {**defaults, **own}
    if "tags" in defaults and "tags" in own:
        merged["tags"] = (list(dict.fromkeys(defaults["tags"][0] + own["tags"][0])), own["tags"][1],
                          own["tags"][2])
    values = {name: value for name, (value, _n, _k) in merged.items() if name not in ("name", "address")}
    hosts = []
    for name, address in zip(names, addresses, strict=True):
        hosts.append((HostConfig(name=name, address=address, **values), merged))
    return hosts


def check_hosts(p: Parser, hosts: list[tuple[HostConfig, Fields]]) -> None:
    """Cross-host checks: duplicate names, key and known_hosts files, jump chains."""
    first_line: dict[str, int | None] = {}
    for host, fields in hosts:
        _n, name_node, name_key = fields["name"]
        if host.name in first_line:
            p.error(f"duplicate host name '{host.name}' (lines {first_line[host.name]} and "
                    f"{p.line_of(name_node)})", name_node, name_key)
        else:
            first_line[host.name] = p.line_of(name_node)
        if host.transport != "ssh" or not p.resolve_secrets:
            continue
        if host.key is not None and not os.path.isfile(host.key):
            _v, node, key = fields["key"]
            p.error(f"private key file not found: {host.key}", node, key)
        if (host.known_hosts is not None and host.host_key_policy != "accept-new"
                and not os.path.isfile(host.known_hosts)):
            _v, node, key = fields["known_hosts"]
            p.error(f"known_hosts file not found: {host.known_hosts} (fill it with ssh-keyscan, or set "
                    "host_key_policy: accept-new to learn keys on first connect)", node, key)
    _check_default_known_hosts(p, hosts)
    by_name = {h.name: (h, f) for h, f in hosts}
    for host, fields in hosts:
        seen = [host.name]
        hop = host.jump
        while hop is not None and hop in by_name:
            if hop in seen:
                _v, node, key = fields["jump"]
                p.error(f"jump hosts form a loop: {' -> '.join(seen + [hop])}"
                        + ("; set jump: null on the jump host" if key.startswith("defaults.") else ""),
                        node, key)
                break
            seen.append(hop)
            hop = by_name[hop][0].jump



def check_addresses(p: Parser, hosts: list[tuple[HostConfig, Fields]], *, resolver: Resolver | None) -> None:
    """Warn when two SSH entries reach the same machine (same address and port): it would be watched
    twice and its GPU history mixed. Literal duplicates always; with a ``resolver``, names are looked up
    (``gpu-a`` at 127.0.0.1 and ``gpu-a-alias`` at localhost; :func:`system_resolver` in parallel and within
    a few seconds). Hosts behind a jump host are compared by their written address only (they resolve over
    there)."""
    ssh = [(h, f) for h, f in hosts if h.transport == "ssh"]
    endpoints: dict[str, set[tuple[str, ...]]] = {}
    for h, _f in ssh:
        literal = h.address.strip().strip("[]").lower()
        endpoints[h.name] = {(h.jump or "", literal, str(h.port))}
    if resolver is not None:
        looked_up = resolver({(h.address, h.port) for h, _f in ssh if h.jump is None})
        for h, _f in ssh:
            if h.jump is None:
                found = looked_up.get((h.address, h.port), set())
                endpoints[h.name] |= {("", ip, str(port)) for ip, port in found}
    first: dict[tuple[str, ...], tuple[HostConfig, Fields]] = {}
    for h, f in ssh:
        others: dict[str, tuple[HostConfig, Fields, tuple[str, ...]]] = {}
        for ep in sorted(endpoints[h.name]):
            seen = first.setdefault(ep, (h, f))
            if seen[0].name != h.name:
                others.setdefault(seen[0].name, (*seen, ep))
        for other, of, ep in others.values():
            _v, node, key = f.get("address", f["name"])
            line = p.line_of(of.get("address", of["name"])[1])
            p.warn(f"'{h.name}' ({h.address} port {h.port}) and '{other.name}' ({other.address} port "
                   f"{other.port}, {p.source}:{line}) are the same machine ({ep[1]} port {ep[2]}): it would "
                   "be watched twice and its GPU history mixed; remove one entry", node, key)


def system_resolver(targets: set[tuple[str, int]], timeout: float = 5.0) -> dict[Endpoint, set[Endpoint]]:
    """``getaddrinfo`` for each (address, port), on up to 32 daemon threads; what does not answer within
    ``timeout`` (or does not resolve) is left out, and a hung lookup cannot hold up the process's exit."""
    todo = sorted(targets)
    found: dict[tuple[str, int], set[tuple[str, int]]] = {}
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                target = todo.pop()
            try:
                infos = socket.getaddrinfo(target[0], target[1], type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                continue
            with lock:
                found[target] = {(str(info[4][0]), int(info[4][1])) for info in infos}

    threads = [threading.Thread(target=work, name="gpufleet-resolve", daemon=True)
               for _ in range(min(32, len(todo)))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return dict(found)


def default_known_hosts() -> Path:
    """Where asyncssh (and gpufleet's transport) look when a host sets no known_hosts."""
    return Path("~/.ssh/known_hosts").expanduser()


def _check_default_known_hosts(p: Parser, hosts: list[tuple[HostConfig, Fields]]) -> None:
    """SSH hosts without known_hosts use ~/.ssh/known_hosts; under ``strict`` a missing one refuses them all.

    Reported once, at the first such host, with the count: the fix is the same file for every host.
    """
    if not p.resolve_secrets:
        return
    default = default_known_hosts()
    users = [(h, f) for h, f in hosts if h.transport == "ssh" and h.known_hosts is None]
    what = _not_a_file(str(default)) if users else None
    if what:
        _n, node, name_key = users[0][1]["name"]
        p.error(f"no known_hosts set, and the default {default} is {what}, not a file: host key "
                f"verification would be off for {users[0][0].name} and every host without known_hosts; "
                "give known_hosts: a file", node, f"{name_key.removesuffix('.name')}.known_hosts")
        return
    strict = [(h, f) for h, f in hosts
              if h.transport == "ssh" and h.known_hosts is None and h.host_key_policy != "accept-new"]
    if not strict or default.is_file():
        return
    _n, node, name_key = strict[0][1]["name"]
    entry = name_key.removesuffix(".name")
    others = f" (and {len(strict) - 1} more host{'s' if len(strict) > 2 else ''})" if len(strict) > 1 else ""
    p.error(f"no known_hosts set, and the default {default} does not exist; under host_key_policy strict "
            f"every connection to {strict[0][0].name}{others} would be refused. Fill it with ssh-keyscan, "
            "set known_hosts: to a file, or set host_key_policy: accept-new to learn keys on first connect",
            node, f"{entry}.known_hosts")


