"""JSON answers back into the store's record dataclasses, tolerating fields a newer collector adds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from gpufleet.collector.model.records import GpuSeries, SeriesPoint

T = TypeVar("T")

_NAMES: dict[type, frozenset[str]] = {}


def from_dict(cls: type[T], d: Mapping[str, Any]) -> T:
    """``cls(**d)`` keeping only the fields ``cls`` has (additive protocol changes must not break us)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls(**{k: v for k, v in d.items() if k in names})


def many(cls: type[T], rows: Iterable[Mapping[str, Any]] | None) -> list[T]:
    return [from_dict(cls, r) for r in rows or ()]


def series(d: Mapping[str, Any]) -> GpuSeries:
    s = from_dict(GpuSeries, d)
    s.points = many(SeriesPoint, d.get("points"))
    return s
