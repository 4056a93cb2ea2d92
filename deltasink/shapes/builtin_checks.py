"""The pre-commit checks themselves: what a check receives (:class:`StagedBatch`), the
built-in checks, and running a list of them on one staged batch (:func:`run_checks`).
Public through :mod:`deltasink.checks`."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import ConfigurationError
from deltasink.shapes.predicates import parse_query, render, render_query
from deltasink.shapes.sparksql import fields as predicate_fields

__all__ = [
    "SAMPLE_ROWS",
    "Check",
    "StagedBatch",
    "check_name",
    "expect",
    "no_nulls",
    "row_count_between",
    "row_count_within",
    "run_checks",
    "sql",
    "unique",
]


Check = Callable[["StagedBatch"], "str | bool | None"]


@dataclass
class StagedBatch:
    """A staged version, as the checks see it.

    Attributes:
        app_id: The writer.
        version: The staged version.
        rows: Its row count.
        target: The target table.
        samples: Whether a failure message may quote rows of the batch (``DeltaSink(...,
            check_samples=True)``). Off by default: the message is kept in the staging
            table and logged, and rows may hold personal data. The built-in checks
            honour it; a custom check should too.
    """

    app_id: str
    version: int
    rows: int
    target: str
    _arrow: Callable[[], pa.Table] = field(repr=False)
    _dataframe: Callable[[], Any] = field(repr=False)
    _previous_rows: Callable[[], float | None] = field(repr=False)
    samples: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_arrow(self) -> pa.Table:
        """The staged rows as Arrow (deltasink's system columns removed)."""
        if "arrow" not in self._cache:
            self._cache["arrow"] = self._arrow()
        table: pa.Table = self._cache["arrow"]
        return table

    def dataframe(self) -> Any:
        """The staged rows as a Spark DataFrame (on the engine that runs SQL checks)."""
        if "df" not in self._cache:
            self._cache["df"] = self._dataframe()
        return self._cache["df"]

    def sql(self, query: str) -> Any:
        """Run Spark SQL where ``staged`` names this batch; returns a DataFrame.

        Raises:
            ConfigurationError: ``query`` is not exactly one query.
        """
        df = self.dataframe()
        view = f"deltasink_staged_{id(self)}_{self.version}"
        df.createOrReplaceTempView(view)
        return df.sparkSession.sql(render_query(query, view))

    @property
    def previous_rows(self) -> float | None:
        """Rows per version of the last committed batch, if known."""
        if "previous" not in self._cache:
            self._cache["previous"] = self._previous_rows()
        previous: float | None = self._cache["previous"]
        return previous


#: Rows a failing ``sql``/``expect`` check looks at (and quotes, with samples on).
SAMPLE_ROWS = 3


_NOT_SHOWN = " (rows not quoted; DeltaSink(..., check_samples=True) quotes them)"


def check_name(check: Check) -> str:
    return str(getattr(check, "name", None) or getattr(check, "__name__", type(check).__name__))


def run_checks(checks: Sequence[Check], batch: StagedBatch) -> str | None:
    """Run ``checks`` in order; the first failure's message, or ``None`` if all pass."""
    for check in checks:
        outcome = check(batch)
        if outcome is None or outcome is True:
            continue
        detail = "" if outcome is False else f": {outcome}"
        return f"check {check_name(check)} failed{detail}"
    return None


@dataclass(frozen=True)
class no_nulls:
    """Fail if any of ``columns`` holds a null."""

    columns: tuple[str, ...]

    def __init__(self, *columns: str) -> None:
        object.__setattr__(self, "columns", _column_names("no_nulls", columns))

    @property
    def name(self) -> str:
        return f"no_nulls({', '.join(self.columns)})"

    def __call__(self, batch: StagedBatch) -> str | None:
        table = batch.to_arrow()
        found = {c: table.column(c).null_count for c in self.columns if c in table.column_names}
        missing = [c for c in self.columns if c not in table.column_names]
        if missing:
            return f"column(s) {missing} are not in the batch"
        bad = {c: n for c, n in found.items() if n}
        return f"null values {bad}" if bad else None


@dataclass(frozen=True)
class unique:
    """Fail if the combination of ``columns`` repeats within the batch."""

    columns: tuple[str, ...]

    def __init__(self, *columns: str) -> None:
        object.__setattr__(self, "columns", _column_names("unique", columns))

    @property
    def name(self) -> str:
        return f"unique({', '.join(self.columns)})"

    def __call__(self, batch: StagedBatch) -> str | None:
        table = batch.to_arrow().select(list(self.columns))
        counts = table.group_by(list(self.columns)).aggregate([([], "count_all")])
        if counts.num_rows == table.num_rows:
            return None
        dup = counts.filter(pc.greater(counts.column("count_all"), pa.scalar(1, pa.int64())))
        if not batch.samples:
            return f"{dup.num_rows} value(s) repeat{_NOT_SHOWN}"
        return f"{dup.num_rows} value(s) repeat, e.g. {dup.slice(0, 1).to_pylist()[0]}"


@dataclass(frozen=True)
class row_count_between:
    """Fail unless ``minimum <= rows <= maximum`` (``None``: unbounded)."""

    minimum: int = 0
    maximum: int | None = None

    def __post_init__(self) -> None:
        bounds = (self.minimum,) if self.maximum is None else (self.minimum, self.maximum)
        if any(isinstance(b, bool) or not isinstance(b, numbers.Integral) for b in bounds):
            raise ConfigurationError(
                f"checks.row_count_between takes whole numbers, got ({self.minimum!r}, "
                f"{self.maximum!r})."
            )
        if self.minimum < 0 or (self.maximum is not None and self.maximum < self.minimum):
            raise ConfigurationError(
                f"checks.row_count_between({self.minimum}, {self.maximum}) passes no "
                "batch: it needs 0 <= minimum <= maximum."
            )

    @property
    def name(self) -> str:
        return f"row_count_between({self.minimum}, {self.maximum})"

    def __call__(self, batch: StagedBatch) -> str | None:
        if batch.rows < self.minimum or (self.maximum is not None and batch.rows > self.maximum):
            return f"{batch.rows} rows, expected between {self.minimum} and {self.maximum}"
        return None


@dataclass(frozen=True)
class row_count_within:
    """Fail if the row count differs from the previous batch's by more than
    ``percent`` % (passes when there is no previous batch)."""

    percent: float

    def __post_init__(self) -> None:
        percent: object = self.percent
        if isinstance(percent, bool) or not isinstance(percent, int | float) or not percent >= 0:
            raise ConfigurationError(
                f"checks.row_count_within takes a percentage >= 0, got {self.percent!r}."
            )

    @property
    def name(self) -> str:
        return f"row_count_within({self.percent:g}%)"

    def __call__(self, batch: StagedBatch) -> str | None:
        previous = batch.previous_rows
        if previous is None:
            return None
        if previous == 0:
            return None if batch.rows == 0 else f"{batch.rows} rows after an empty batch"
        change = 100 * abs(batch.rows - previous) / previous
        if change > self.percent:
            return (
                f"{batch.rows} rows vs {previous:g} in the previous batch "
                f"({change:.0f}% > {self.percent:g}%)"
            )
        return None


@dataclass(frozen=True)
class sql:
    """Fail if ``query`` (Spark SQL over ``staged``) returns any row.

    ``expect`` is the predicate of a :func:`expect` check: the query it runs is then the
    predicate translated for the staged batch's column types (Spark's meaning on Spark
    and on the embedded engine's Sail alike, :mod:`deltasink.shapes.sparksql`), and
    ``query`` the plain form recorded for releases that do not know ``expect``;
    ``time_zone`` the session time zone it reads (as :attr:`MergeSpec.time_zone`);
    ``ansi_mode`` the ANSI mode it means (as :attr:`MergeSpec.ansi_mode`)."""

    query: str
    label: str | None = None
    expect: str | None = None
    time_zone: str | None = None
    ansi_mode: bool | None = None

    def __post_init__(self) -> None:
        query: object = self.query
        if not isinstance(query, str):
            raise ConfigurationError(f"checks.sql takes a query string, got {query!r}.")
        parse_query(query, "checks.sql")  # exactly one query, or refused by name
        if self.label is not None and not isinstance(self.label, str):
            raise ConfigurationError(f"checks.sql label must be a string, got {self.label!r}.")
        if self.expect is not None:
            predicate_fields.check(
                self.expect, "expect", self.time_zone, self.ansi_mode is not False
            )

    def query_for(self, schema: Any) -> str:
        """The query run on a batch whose Spark schema is ``schema``.

        Raises:
            ConfigurationError: The ``expect`` predicate uses a construct refused for
                these column types.
            InvalidInputError: It names a column the batch does not have.
        """
        if self.expect is None:
            return self.query
        columns = predicate_fields.types_of(schema)
        predicate = predicate_fields.translate(
            self.expect, "expect", columns, "spark", self.time_zone, self.ansi_mode is not False
        )
        return f"SELECT * FROM staged WHERE NOT coalesce(({predicate}), false)"

    @property
    def name(self) -> str:
        return self.label or f"sql({self.query!r})"

    def __call__(self, batch: StagedBatch) -> str | None:
        query = self.query_for(batch.dataframe().schema) if self.expect else self.query
        found = batch.sql(query).limit(SAMPLE_ROWS)
        if not batch.samples:
            count = found.count()  # no row leaves the engine
            if not count:
                return None
            many = "or more " if count == SAMPLE_ROWS else ""
            return f"returned {count} {many}row(s){_NOT_SHOWN}"
        rows = found.collect()
        if not rows:
            return None
        return f"returned rows, e.g. {[r.asDict() for r in rows]}"


def expect(
    predicate: str,
    *,
    label: str | None = None,
    time_zone: str | None = None,
    ansi_mode: bool | None = None,
) -> sql:
    """Fail if any row violates ``predicate`` (a Spark SQL boolean expression; a null
    result counts as a violation). ``time_zone``: as :attr:`MergeSpec.time_zone` (unset,
    the active Spark session's, else ``UTC``, when the predicate reads it);
    ``ansi_mode``: as :attr:`MergeSpec.ansi_mode` (unset, the active session's, off
    recorded).

    Raises:
        ConfigurationError: ``predicate`` is not exactly one boolean expression
            (:mod:`deltasink.shapes.predicates`), or uses a construct the embedded
            engine's Spark (Sail) would not evaluate with Spark's meaning
            (:mod:`deltasink.shapes.sparksql.fields`). It is translated from its parse
            for each batch's column types, never spliced as written.
    """
    text: object = predicate
    if not isinstance(text, str):
        raise ConfigurationError(f"checks.expect takes a predicate string, got {text!r}.")
    zone = None if time_zone is None else predicate_fields.session_zone(time_zone)
    ansi = None if predicate_fields.session_ansi(ansi_mode) else False
    if predicate_fields.check(text, "expect", zone or "UTC", ansi is not False) and zone is None:
        zone = predicate_fields.session_zone()  # it reads the session's zone: recorded
    rendered = render(text, "spark", "checks.expect")
    return sql(
        f"SELECT * FROM staged WHERE NOT coalesce(({rendered}), false)",
        label=label or f"expect({predicate!r})",
        expect=text,
        time_zone=zone,
        ansi_mode=ansi,
    )


def _column_names(check: str, columns: tuple[object, ...]) -> tuple[str, ...]:
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise ConfigurationError(
            f"checks.{check} takes one or more column names, got {list(columns)!r}."
        )
    return tuple(str(c) for c in columns)
