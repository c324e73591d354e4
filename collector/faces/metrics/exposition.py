"""One /metrics scrape's samples and their text, in Prometheus' text format 0.0.4 or OpenMetrics 1.0.0.

prometheus_client is the reference for the format and still builds the families for a registry (tests,
``describe``), but the scrape's text is written here: its encoders re-check and re-escape every label of
every sample (about 12 us a line, 3-4 s for the 230,000 lines of 1,000 hosts x 8 GPUs), and building its
Sample objects costs as much again. A :class:`Scrape` keeps each sample as (label string, value); a label
set is escaped once (a GPU's host/gpu/uuid/name labels stand on some 25 series) and a value formatted once
per distinct value. Names are written as they are: the collector's metric and label names are all legal
(metrics.py spells them, and checks the only ones it does not). The text is byte for byte what
prometheus_client writes for the same families (tests/metrics/test_exposition.py compares the two over a
fleet with hostile label values), dcgm names included; the process collector's few series go
through prometheus_client's own encoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Kind = Literal["gauge", "counter"]


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # full sample name (counters end in _total)
    kind: Kind
    doc: str
    labels: tuple[str, ...] = ()

    def family(self) -> Metric:
        """An empty prometheus_client family of this spec."""
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.doc, labels=self.labels)
        return GaugeMetricFamily(self.name, self.doc, labels=self.labels)


def _sorted_order(names: tuple[str, ...]) -> list[int]:
    """Positions of ``names`` in sorted order (the format lists a sample's labels sorted by name)."""
    return sorted(range(len(names)), key=names.__getitem__)


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


LabelStrings = dict[tuple[tuple[str, ...], tuple[str, ...]], str]


class Scrape:
    """The samples of one scrape, filled by family name; None values are skipped (no sample, not 0).

    Each sample is written as its line when it is added (the label string made once, the value formatted
    once per distinct value), so :meth:`render` only joins. ``samples``: also keep the label values and
    numbers, for :meth:`metrics` (a registry's collect; the server's scrapes do without).

    ``previous``: the label strings of the scrape before (:attr:`label_strings`): a fleet's label sets
    hardly change between scrapes, so most are reused rather than escaped again; what the previous scrape
    had and this one does not is forgotten with it (memory stays at two scrapes' label sets at most)."""

    def __init__(self, specs: Iterable[Spec], previous: LabelStrings | None = None, *,
                 samples: bool = False) -> None:
        self.specs: dict[str, Spec] = {s.name: s for s in specs}
        self.lines: dict[str, list[str]] = {n: [] for n in self.specs}  # family name -> its sample lines
        #: family name -> (label names, label values, value) of each line, when ``samples``
        self.samples: dict[str, list[tuple[tuple[str, ...], tuple[str, ...], float]]] | None = (
            {n: [] for n in self.specs} if samples else None)
        self.label_strings: LabelStrings = {}
        self._previous: LabelStrings = previous or {}
        self._escaped: dict[str, str] = {}
        self._floats: dict[float, str] = {}
        self._order = {s.labels: _sorted_order(s.labels) for s in self.specs.values()}

    def add(self, name: str, labels: Sequence[str], value: float | None) -> None:
        if value is None:
            return
        names = self.specs[name].labels
        if len(labels) != len(names):  # a missing label value would silently shift the others
            raise ValueError(f"{name}: {len(labels)} label values for {len(names)} labels")
        values = tuple(labels)
        self.put(name, names, values, self.label_string(names, values), value)

    def label_string(self, names: tuple[str, ...], values: tuple[str, ...]) -> str:
        """``{gpu="0",host="n1"}`` for these label names and values, escaped once per distinct set."""
        key = (names, values)
        ls = self.label_strings.get(key)
        if ls is not None:
            return ls
        ls = self._previous.get(key)
        if ls is None:
            esc = self._escaped
            parts = []
            for i in self._order.get(names) or _sorted_order(names):
                v = values[i]
                e = esc.get(v)
                if e is None:
                    e = esc[v] = _escape(v)
                parts.append(f'{names[i]}="{e}"')
            ls = "{" + ",".join(parts) + "}" if names else ""
        self.label_strings[key] = ls
        return ls

    def put(self, name: str, names: tuple[str, ...], values: tuple[str, ...], label_string: str,
            value: float | None) -> None:
        """:meth:`add` with the label string already made by :meth:`label_string` (one GPU's labels serve
        its ~25 series). ``names`` may extend the family's labels (a MIG instance's series in dcgm names)."""
        if value is None:
            return
        v = float(value)
        fs = self._floats.get(v) if v else None  # (0.0 and -0.0 are equal keys but print apart)
        if fs is None:
            fs = floatToGoString(v)  # type: ignore[no-untyped-call]
            if v:
                self._floats[v] = fs
        self.lines[name].append(f"{name}{label_string} {fs}\n")
        if self.samples is not None:
            self.samples[name].append((names, values, v))

    def add_spec(self, spec: Spec) -> None:
        """A family known only at scrape time (a collector statistic); kept if already there."""
        if spec.name not in self.specs:
            self.specs[spec.name] = spec
            self.lines[spec.name] = []
            if self.samples is not None:
                self.samples[spec.name] = []
            self._order.setdefault(spec.labels, _sorted_order(spec.labels))

    def mark(self) -> dict[str, int]:
        return {n: len(r) for n, r in self.lines.items()}

    def rollback(self, marks: dict[str, int]) -> None:
        """Drop what was added since :meth:`mark` (a section that failed half-way)."""
        for n, r in self.lines.items():
            del r[marks.get(n, 0):]
        for n, kept in (self.samples or {}).items():
            del kept[marks.get(n, 0):]

    def metrics(self) -> list[Metric]:
        """The non-empty families as prometheus_client objects (for a registry); needs ``samples``."""
        if self.samples is None:
            raise ValueError("this scrape keeps lines only (Scrape(samples=True) keeps the values)")
        out: list[Metric] = []
        for name, rows in self.samples.items():
            if rows:
                fam = self.specs[name].family()
                fam.samples.extend(Sample(name, dict(zip(names, values, strict=True)), value)
                                   for names, values, value in rows)
                out.append(fam)
        return out

    def render(self, *, openmetrics: bool = False, extra: Iterable[Metric] = ()) -> bytes:
        """The exposition, as prometheus_client's ``generate_latest`` (or its OpenMetrics one) writes
        :meth:`metrics` followed by ``extra``."""
        out: list[str] = []
        for name, lines in self.lines.items():
            if not lines:
                continue
            spec = self.specs[name]
            shown = name[: -len("_total")] if openmetrics and spec.kind == "counter" else name
            doc = spec.doc.replace("\\", r"\\").replace("\n", r"\n")
            if openmetrics:
                doc = doc.replace('"', r"\"")
            out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {spec.kind}\n")
            out.append("".join(lines))
        for metric in extra:  # families from elsewhere (the process collector): prometheus_client writes them
            one = _One(metric)
            encode = generate_openmetrics if openmetrics else generate_latest
            text = encode(one).decode()
            out.append(text[: -len("# EOF\n")] if openmetrics else text)
        if openmetrics:
            out.append("# EOF\n")
        return "".join(out).encode("utf-8")


class _One:
    """A registry stand-in holding one family, for prometheus_client's own encoder."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> list[Metric]:
        return [self.metric]
