"""OpenTelemetry metrics and spans for the sink's calls, through ``opentelemetry-api``
when it is installed (``pip install 'deltasink[otel]'``) and a no-op otherwise.

deltasink only *records*, on the global meter and tracer providers (or the ones given to
:func:`use`): the application chooses where they go (an OTLP exporter, a Prometheus
scrape endpoint, see ``docs/deploy.md``). Without ``opentelemetry-api``, or with
``DELTASINK_TELEMETRY=off``, nothing is imported and nothing is recorded.

Each public call (``write``, ``foreach_batch``, ``commit``, ``recover``,
``pre_commit``) is a span ``deltasink.<call>``. A call that made one target commit carries that commit's
attributes (versions, target version, attempts, rows, seconds by phase) and one
``deltasink.conflict`` event per conflict it lost; a call that made several has one
child span ``deltasink.publish`` per commit, placed where it ran, with the same. The
instruments (meter ``deltasink``), every one with the attribute ``deltasink.app_id``;
the counters and gauges are kept by deltasink and observed when the metrics are
collected (OpenTelemetry's observable instruments: the sums, the last value per app), so
a commit pays a few dictionary updates and its histograms (zero values are not
recorded), not the SDK's measurement path per counter:

==============================  =========  ==============================================
``deltasink.commits``           counter    target commits, by ``deltasink.outcome``
                                           (``committed``, ``already_committed``,
                                           ``abandoned``, ``quarantined``, ``failed``)
``deltasink.commit.attempts``   histogram  attempts per target commit
``deltasink.commit.conflicts``  counter    conflicts lost, by ``deltasink.winner_app``
``deltasink.commit.duration``   histogram  seconds, by ``deltasink.phase`` (``validate``,
                                           ``stage``, ``publish``, ``retry``)
``deltasink.rows``              counter    target rows, by ``deltasink.change``
                                           (``inserted``, ``updated``, ``deleted``)
``deltasink.files``             counter    data files, by ``deltasink.change`` (``added``,
                                           ``removed``)
``deltasink.bytes``             counter    bytes, by ``deltasink.change``
``deltasink.store.requests``    counter    object-store requests, by ``deltasink.verb``
``deltasink.target.version``    gauge      the target's Delta version of the last commit
``deltasink.committed.version`` gauge      the app's committed batch version
``deltasink.pending.versions``  gauge      versions staged and not committed
``deltasink.pending.age``       gauge      seconds: age of the oldest of them (the lag)
==============================  =========  ==============================================
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar, cast

from deltasink._version import __version__
from deltasink.core import telemetry
from deltasink.core.committables import CommitReport, CommitResult
from deltasink.errors import CommitError

__all__ = ["INSTRUMENTS", "observed", "record_pending", "use"]

F = TypeVar("F", bound=Callable[..., Any])

#: The instruments' names (see the module's docstring).
INSTRUMENTS = (
    "deltasink.commits",
    "deltasink.commit.attempts",
    "deltasink.commit.conflicts",
    "deltasink.commit.duration",
    "deltasink.rows",
    "deltasink.files",
    "deltasink.bytes",
    "deltasink.store.requests",
    "deltasink.target.version",
    "deltasink.committed.version",
    "deltasink.pending.versions",
    "deltasink.pending.age",
)

_APP = "deltasink.app_id"


class _Sum:
    """A counter's totals per attribute set, kept here and observed at collection (an
    OpenTelemetry observable counter: cumulative and monotonic, as a counter)."""

    def __init__(self) -> None:
        self.totals: dict[tuple[tuple[str, Any], ...], float] = {}
        self._lock = threading.Lock()

    def add(self, value: float, attributes: dict[str, Any]) -> None:
        key = tuple(attributes.items())
        with self._lock:
            self.totals[key] = self.totals.get(key, 0) + value

    def observe(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        with self._lock:
            found = list(self.totals.items())
        for key, value in found:
            yield Observation(value, dict(key))


class _Instruments(NamedTuple):
    tracer: Any
    commits: Any
    attempts: Any
    conflicts: Any
    duration: Any
    rows: Any
    files: Any
    bytes: Any
    requests: Any


#: The gauges: name, unit, description. Their last value per app is kept in
#: :data:`_last` and observed at collection.
_GAUGES = (
    ("deltasink.target.version", "{version}", "target Delta version of the last commit"),
    ("deltasink.committed.version", "{version}", "committed batch version"),
    ("deltasink.pending.versions", "{version}", "versions staged, not committed"),
    ("deltasink.pending.age", "s", "age of the oldest pending version"),
)
_last: dict[str, dict[str, float]] = {name: {} for name, _, _ in _GAUGES}
_given: tuple[Any, Any] | None = None  # (meter provider, tracer provider) from use()
_made: dict[tuple[int, int], _Instruments] = {}
_missing = False  # opentelemetry-api is not installed


def use(meter_provider: Any = None, tracer_provider: Any = None) -> None:
    """Record on these providers instead of the global ones (``None``, ``None``: the
    global ones again). For tests and for applications that keep their providers out of
    the global slots."""
    global _given
    _given = (
        None
        if meter_provider is None and tracer_provider is None
        else (
            meter_provider,
            tracer_provider,
        )
    )


def _instruments() -> _Instruments | None:
    """The instruments on the current providers, made once per pair; ``None`` when
    telemetry is off or OpenTelemetry is not installed."""
    global _missing
    if _missing or not telemetry.enabled():
        return None
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        _missing = True
        return None
    meter_provider, tracer_provider = _given or (None, None)
    meter_provider = meter_provider or metrics.get_meter_provider()
    tracer_provider = tracer_provider or trace.get_tracer_provider()
    key = (id(meter_provider), id(tracer_provider))
    made = _made.get(key)
    if made is None:
        meter = meter_provider.get_meter("deltasink", __version__)

        def counter(name: str, unit: str, description: str) -> _Sum:
            total = _Sum()
            meter.create_observable_counter(name, [total.observe], unit, description)
            return total

        made = _Instruments(
            tracer=tracer_provider.get_tracer("deltasink", __version__),
            commits=counter("deltasink.commits", "{commit}", "target commits"),
            attempts=meter.create_histogram(
                "deltasink.commit.attempts", "{attempt}", "attempts per target commit"
            ),
            conflicts=counter(
                "deltasink.commit.conflicts", "{conflict}", "conflicts lost to other writers"
            ),
            duration=meter.create_histogram(
                "deltasink.commit.duration", "s", "seconds per phase of a target commit"
            ),
            rows=counter("deltasink.rows", "{row}", "target rows changed"),
            files=counter("deltasink.files", "{file}", "data files"),
            bytes=counter("deltasink.bytes", "By", "bytes of data files"),
            requests=counter("deltasink.store.requests", "{request}", "object-store requests"),
        )
        for name, unit, description in _GAUGES:
            meter.create_observable_gauge(name, [_observer(name)], unit, description)
        _made.clear()  # providers replaced: the old instruments are not used again
        for values in _last.values():
            values.clear()
        _made[key] = made
    return made


def _observer(name: str) -> Callable[[Any], Iterator[Any]]:
    """The callback of gauge ``name``: the last value of each app."""

    def observe(options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for app_id, value in list(_last[name].items()):
            yield Observation(value, {_APP: app_id})

    return observe


def record_pending(app_id: str, pending: int, lag_s: float | None) -> None:
    """The app's pending versions and their lag (``status()`` and every report)."""
    if not telemetry.enabled():
        return
    _last["deltasink.pending.versions"][app_id] = pending
    _last["deltasink.pending.age"][app_id] = 0.0 if lag_s is None else lag_s


def _record(made: _Instruments, report: CommitReport, span: Any) -> None:
    app_id = report.app_id
    for result in report.results:
        _record_result(made, app_id, result)
    if report.committed_version is not None:
        _last["deltasink.committed.version"][app_id] = report.committed_version
        span.set_attribute("deltasink.committed_version", report.committed_version)
    record_pending(app_id, len(report.pending_versions), report.lag_s)
    if report.pending_versions:
        span.set_attribute("deltasink.pending_versions", list(report.pending_versions))
    if len(report.results) == 1 and report.results[0].outcome == "committed":
        _describe(span, report.results[0])  # the call's own span: no child
    else:
        for result in report.results:
            if result.outcome == "committed":
                _publish_span(made, app_id, result)


def _record_result(made: _Instruments, app_id: str, result: CommitResult) -> None:
    made.commits.add(1, {_APP: app_id, "deltasink.outcome": result.outcome})
    if result.outcome != "committed":
        return
    cost = result.telemetry
    made.attempts.record(cost.attempts, {_APP: app_id})
    for conflict in cost.conflicts:
        winner = conflict.winner_app or "unknown"
        made.conflicts.add(1, {_APP: app_id, "deltasink.winner_app": winner})
    for phase, seconds in cost.phases.items():
        if seconds:
            made.duration.record(seconds, {_APP: app_id, "deltasink.phase": phase})
    for change, rows in (
        ("inserted", result.rows_inserted),
        ("updated", result.rows_updated),
        ("deleted", result.rows_deleted),
    ):
        if rows:
            made.rows.add(rows, {_APP: app_id, "deltasink.change": change})
    for instrument, added, removed in (
        (made.files, cost.files_added, cost.files_removed),
        (made.bytes, cost.bytes_added, cost.bytes_removed),
    ):
        if added:
            instrument.add(added, {_APP: app_id, "deltasink.change": "added"})
        if removed:
            instrument.add(removed, {_APP: app_id, "deltasink.change": "removed"})
    for verb, count in cost.requests.items():
        made.requests.add(count, {_APP: app_id, "deltasink.verb": verb})
    if result.target_version is not None:
        _last["deltasink.target.version"][app_id] = result.target_version


def _attributes(result: CommitResult) -> dict[str, Any]:
    cost = result.telemetry
    attributes: dict[str, Any] = {
        "deltasink.versions": list(result.all_versions),
        "deltasink.attempts": cost.attempts,
        "deltasink.rows": result.rows,
        **{f"deltasink.phase.{k}": v for k, v in cost.phases.items()},
    }
    if result.target_version is not None:
        attributes["deltasink.target_version"] = result.target_version
    return attributes


def _describe(span: Any, result: CommitResult) -> None:
    """The call's span, which made this one commit: its attributes and conflicts."""
    span.set_attributes(_attributes(result))
    _conflicts(span, result, int(result.telemetry.started_at * 1e9))


def _publish_span(made: _Instruments, app_id: str, result: CommitResult) -> None:
    """A commit's span, placed where it ran (a child of the call's span)."""
    cost = result.telemetry
    if not cost.started_at:
        return
    start = int(cost.started_at * 1e9)
    length = cost.phases.get("publish", 0.0) + cost.phases.get("retry", 0.0)
    attributes = {_APP: app_id, **_attributes(result)}
    span = made.tracer.start_span("deltasink.publish", start_time=start, attributes=attributes)
    _conflicts(span, result, start)
    span.end(end_time=start + int(length * 1e9))


def _conflicts(span: Any, result: CommitResult, start: int) -> None:
    """One event per conflict the commit lost, in order, at its start."""
    for at, conflict in enumerate(result.telemetry.conflicts, start):
        event: dict[str, Any] = {
            "deltasink.attempt": conflict.attempt,
            "deltasink.wait_s": conflict.wait_s,
        }
        if conflict.winner_version is not None:
            event["deltasink.winner_version"] = conflict.winner_version
        if conflict.winner_app is not None:
            event["deltasink.winner_app"] = conflict.winner_app
        span.add_event("deltasink.conflict", event, timestamp=at)


@contextmanager
def _span(made: _Instruments, name: str, sink: Any) -> Iterator[Any]:
    attributes = {
        _APP: str(getattr(sink, "app_id", "")),
        "deltasink.target": str(getattr(sink, "target", "")),
        "deltasink.engine": str(getattr(getattr(sink, "_backend", None), "name", "")),
    }
    with made.tracer.start_as_current_span(
        name, attributes=attributes, record_exception=True, set_status_on_exception=True
    ) as span:
        yield span


def observed(call: str) -> Callable[[F], F]:
    """Decorate a sink method: a span ``deltasink.<call>`` around it, and the metrics
    of the :class:`~deltasink.core.committables.CommitReport` it returns (or that the
    :class:`~deltasink.errors.CommitError` it raises carries). A no-op without
    OpenTelemetry. Recording never raises into the call."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            made = _instruments()
            if made is None:
                return method(self, *args, **kwargs)
            with _span(made, f"deltasink.{call}", self) as span:
                try:
                    value = method(self, *args, **kwargs)
                except CommitError as exc:  # what it did commit, and the failure
                    _safely(made, exc.report, span, failed=getattr(self, "app_id", ""))
                    raise
                if isinstance(value, CommitReport):
                    _safely(made, value, span)
                return value

        return cast(F, wrapper)

    return decorate


def _safely(made: _Instruments, report: Any, span: Any, failed: str | None = None) -> None:
    try:
        if isinstance(report, CommitReport):
            _record(made, report, span)
        if failed is not None:
            made.commits.add(1, {_APP: failed, "deltasink.outcome": "failed"})
    except Exception as exc:  # telemetry must not fail a write that succeeded
        span.add_event("deltasink.telemetry_failed", {"error": repr(exc)}, time.time_ns())
