"""The JSON codec of the fleet model: views and records to JSON and back, in the object form and the compact
rows form of the status view.

What the query API writes and the CLI reads, in one module both import: the CLI decodes an answer (and the
read-only fallback shapes one with :func:`plain`) without loading the query server or the store. msgspec
is imported on the first encode only: the CLI decodes with json's C decoder and never encodes.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from gpufleet.collector.errors import QueryError
from gpufleet.collector.model.views import (
    AllocationView,
    FleetView,
    GpuView,
    HostInfo,
    HostView,
    MaintenanceRecord,
    ProcView,
    Totals,
    UserUsage,
)

if TYPE_CHECKING:
    import msgspec

_FIELDS: dict[type, tuple[str, ...]] = {}


def jsonable(obj: Any) -> Any:
    """``json.dumps(default=jsonable)``: dataclasses as dicts of their fields (like ``asdict``, without its
    deep copy, which is far too slow for a 1,000-host view), sets and tuples as lists."""
    if is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        names = _FIELDS.get(cls)
        if names is None:
            names = _FIELDS[cls] = tuple(f.name for f in fields(obj))
        return {n: getattr(obj, n) for n in names}
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


@functools.cache
def _encoder() -> msgspec.json.Encoder:
    """msgspec's encoder, in C: a 1,000-host status view in a fifth of json.dumps' time, most of a cold
    ``gpufleet status``'s wait on the collector. Imported on first use: the CLI imports this module for
    every ``status`` and never encodes."""
    import msgspec

    return msgspec.json.Encoder(enc_hook=jsonable)


def to_json(obj: Any) -> bytes:
    """``obj`` (views, records, plain values) as compact JSON: the query API's answers and the web page's
    fleet. The values of ``json.dumps(obj, default=jsonable, separators=(",", ":"))``, and its bytes but for
    three things: text outside ASCII is UTF-8 rather than ``\\u`` escapes; an exponent is written shortest
    (``1e-7``, not ``1e-07``); and NaN or infinity is null (strict JSON; json.dumps writes ``NaN``, which jq,
    JavaScript and Go refuse)."""
    try:
        return _encoder().encode(obj)
    except TypeError:  # a dict keyed by None or a bool, which msgspec refuses: json's key rules, via plain
        return _encoder().encode(plain(obj))


def plain(obj: Any) -> Any:
    """``obj`` as the JSON-shaped value ``json.loads(to_json(obj))`` would give, without the text in between
    (the read-only fallback answers in-process; the CLI's merge of several collectors): a number that is not
    finite is None there too. Here, beside :func:`jsonable`, so the CLI shapes an answer without importing
    the query server."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {_plain_key(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return plain(jsonable(obj))


def _plain_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


_PROC_FIELDS = tuple(f.name for f in fields(ProcView))
_TOTALS_FIELDS = tuple(f.name for f in fields(Totals))
_GPU_FIELDS = tuple(f.name for f in fields(GpuView))
_HOST_FIELDS = tuple(f.name for f in fields(HostView))
_USER_USAGE_FIELDS = tuple(f.name for f in fields(UserUsage))
_HOST_INFO_FIELDS = tuple(f.name for f in fields(HostInfo))
assert _GPU_FIELDS[-1] == "processes" and _HOST_FIELDS[-1] == "gpus"


def _known(d: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in names}


def _proc_from(d: Mapping[str, Any]) -> ProcView:
    # Positional when the keys are exactly ours, in order (what our encoder writes): twice as fast as **d,
    # which matters at 8,000 GPUs. Otherwise by name, ignoring fields a newer collector added.
    if tuple(d) == _PROC_FIELDS:
        return ProcView(*d.values())
    return ProcView(**_known(d, _PROC_FIELDS))


def _gpu_from(d: Mapping[str, Any]) -> GpuView:
    if tuple(d) == _GPU_FIELDS:
        v = list(d.values())
        v[-1] = [_proc_from(p) for p in v[-1]]
        return GpuView(*v)
    k = _known(d, _GPU_FIELDS)
    k["processes"] = [_proc_from(p) for p in d.get("processes", [])]
    return GpuView(**k)


def _host_from(d: Mapping[str, Any]) -> HostView:
    if tuple(d) == _HOST_FIELDS:
        v = list(d.values())
        v[-1] = [_gpu_from(g) for g in v[-1]]
        return _with_maintenance(HostView(*v))
    k = _known(d, _HOST_FIELDS)
    k["gpus"] = [_gpu_from(g) for g in d.get("gpus", [])]
    return _with_maintenance(HostView(**k))


_MAINTENANCE_FIELDS = tuple(f.name for f in fields(MaintenanceRecord))


def maintenance_from_dict(d: Mapping[str, Any]) -> MaintenanceRecord:
    """A maintenance window from its JSON form (fields a newer collector added are ignored)."""
    return MaintenanceRecord(**_known(d, _MAINTENANCE_FIELDS))


_ALLOCATION_FIELDS = tuple(f.name for f in fields(AllocationView))


def _with_maintenance(h: HostView) -> HostView:
    """A host rebuilt from JSON carries its window and its Slurm jobs as dicts: make them records again."""
    if isinstance(h.maintenance, Mapping):
        h.maintenance = maintenance_from_dict(h.maintenance)
    if h.allocations:
        h.allocations = [AllocationView(**_known(a, _ALLOCATION_FIELDS)) if isinstance(a, Mapping) else a
                         for a in h.allocations]
    return h


# The compact ("rows") wire form of the status view: each host, GPU and process is a JSON array in the
# order of a column list sent once, instead of an object repeating every key 8,000 times. It halves the
# bytes, and both ends skip a Python call per object (json's C encoder and decoder do all the work), which
# is most of `gpufleet status`'s time at 1,000 hosts. Only our CLI asks for it (``form: rows``); the public
# ``--json`` output stays the object form.
ROWS_FORM = "rows"
#: ``status --by user``'s form: the view's header (totals, time, source) and the per-user lines, no hosts; a
#: few KB where the rows form is 1.4 MB at 1,000 hosts, and by_user runs once on the collector.
USERS_FORM = "users"
_HOST_ROW = attrgetter(*_HOST_FIELDS[:-1])
_GPU_ROW = attrgetter(*_GPU_FIELDS[:-1])
_PROC_ROW = attrgetter(*_PROC_FIELDS)


def fleet_view_rows(view: FleetView) -> dict[str, Any]:
    """The view in the compact form :func:`fleet_view_from_dict` reads back (JSON-ready but for Totals)."""
    g_row, p_row = _GPU_ROW, _PROC_ROW
    return {
        "form": ROWS_FORM,
        "columns": {"host": _HOST_FIELDS, "gpu": _GPU_FIELDS, "proc": _PROC_FIELDS},
        "generated_at": view.generated_at,
        "source": view.source,
        "totals": view.totals,
        "filters": view.filters,
        "last_sample": view.last_sample,
        "hosts": [
            (*_HOST_ROW(h), [(*g_row(g), [p_row(p) for p in g.processes]) for g in h.gpus])
            for h in view.hosts
        ],
    }


def _hosts_from_rows(d: Mapping[str, Any]) -> list[HostView]:
    cols = d["columns"]
    hc, gc, pc = tuple(cols["host"]), tuple(cols["gpu"]), tuple(cols["proc"])
    if hc != _HOST_FIELDS or gc != _GPU_FIELDS or pc != _PROC_FIELDS:
        # another collector version: go by column name (extra columns ignored, missing ones defaulted)
        gi, pi = hc.index("gpus"), gc.index("processes")

        def gpu_dict(g: Sequence[Any]) -> dict[str, Any]:
            return {
                **dict(zip(gc, g, strict=True)),
                "processes": [dict(zip(pc, p, strict=True)) for p in g[pi]],
            }

        return [
            _host_from({**dict(zip(hc, h, strict=True)), "gpus": [gpu_dict(g) for g in h[gi]]})
            for h in d["hosts"]
        ]
    # the constructors as plain callables: a row's length is checked when it is called, not by mypy
    host: Callable[..., HostView] = HostView
    gpu_: Callable[..., GpuView] = GpuView
    proc: Callable[..., ProcView] = ProcView
    return [_with_maintenance(host(*h[:-1], [gpu_(*g[:-1], [proc(*p) for p in g[-1]]) for g in h[-1]]))
            for h in d["hosts"]]


def fleet_view_from_dict(d: Mapping[str, Any]) -> FleetView:
    """Rebuild the model from its JSON form (what the CLI receives over the socket), object or rows form."""
    try:
        if d.get("form") == ROWS_FORM:
            return FleetView(
                generated_at=d["generated_at"],
                source=d["source"],
                hosts=_hosts_from_rows(d),
                totals=Totals(**_known(d["totals"], _TOTALS_FIELDS)),
                filters=dict(d.get("filters", {})),
                last_sample=d.get("last_sample"),
            )
        return FleetView(
            generated_at=d["generated_at"],
            source=d["source"],
            hosts=[_host_from(h) for h in d["hosts"]],
            totals=Totals(**_known(d["totals"], _TOTALS_FIELDS)),
            filters=dict(d.get("filters", {})),
            last_sample=d.get("last_sample"),
        )
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        raise QueryError(f"malformed fleet view: {exc}") from None


def user_usage_from_dict(d: Mapping[str, Any]) -> UserUsage:
    return UserUsage(**_known(d, _USER_USAGE_FIELDS))


def host_info_from_dict(d: Mapping[str, Any]) -> HostInfo:
    """Fields a newer collector added are ignored, as in :func:`fleet_view_from_dict`."""
    info = HostInfo(**_known(d, _HOST_INFO_FIELDS))
    if isinstance(info.maintenance, Mapping):
        info.maintenance = maintenance_from_dict(info.maintenance)
    return info
