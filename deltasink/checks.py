"""Pre-commit checks: write-audit-publish.

A check runs against a staged version after it is durably staged and before it is
published. If any check fails, the version is *quarantined*: it stays staged, is never
committed, and every later version waits behind it (ordering is kept) until it is
aborted (``sink.abort(v)``) or re-staged (``sink.pre_commit(fixed_df, v)``).

A check is any callable taking a :class:`StagedBatch` and returning ``None`` or
``True`` (pass), or ``False`` or a message (fail). The built-ins::

    from deltasink import checks

    sink = DeltaSink(..., checks=[
        checks.no_nulls("order_id", "amount"),
        checks.unique("order_id"),
        checks.row_count_between(1, 5_000_000),
        checks.row_count_within(50),                  # ±50% of the previous batch
        checks.expect("amount >= 0"),                 # every row (Spark SQL)
        checks.sql("SELECT * FROM staged s LEFT ANTI JOIN customers c USING (customer_id)"),
        my_check,                                     # def my_check(batch) -> str | None
    ])

SQL checks run on Spark SQL with the staged rows as the relation ``staged``: on the
job's session for the Spark engine, on the embedded engine otherwise.

A check that cannot work is a configuration error, never a quarantine
(:class:`~deltasink.errors.ConfigurationError`, nothing staged):

* when it is made or the sink is built (:func:`validate`): a check that is not a
  callable of one argument (``checks=[1]``, ``checks=[checks.expect]``), a built-in
  with invalid arguments, a ``sql``/``expect`` text that does not parse as exactly
  one query / one boolean expression (:mod:`deltasink.shapes.predicates`);
* on the first batch, and again whenever the batch's schema changes
  (:func:`validate_on`): a built-in naming a column the batch does not have, a SQL
  check that does not analyse over the batch's columns (an unknown column, table or
  function).

Quarantine is for data that fails a valid check.

The job's checks are recorded in the staging table beside the MergeSpec
(:func:`encode`), so an operator's ``recover`` (the CLI, the maintenance job: a sink
created without ``checks``) runs the same built-in checks (:func:`decode`). A plain
callable cannot be recorded, only its name: such a sink refuses to publish
(:class:`~deltasink.errors.UnverifiableChecksError`) unless told to skip it.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import numbers
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import ConfigurationError
from deltasink.shapes.predicates import parse_query, render, render_query

__all__ = [
    "Check",
    "StagedBatch",
    "decode",
    "encode",
    "expect",
    "needs_validation",
    "no_nulls",
    "row_count_between",
    "row_count_within",
    "run_checks",
    "sql",
    "unique",
    "validate",
    "validate_on",
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


def _name(check: Check) -> str:
    return str(getattr(check, "name", None) or getattr(check, "__name__", type(check).__name__))


def run_checks(checks: Sequence[Check], batch: StagedBatch) -> str | None:
    """Run ``checks`` in order; the first failure's message, or ``None`` if all pass."""
    for check in checks:
        outcome = check(batch)
        if outcome is None or outcome is True:
            continue
        detail = "" if outcome is False else f": {outcome}"
        return f"check {_name(check)} failed{detail}"
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
    """Fail if ``query`` (Spark SQL over ``staged``) returns any row."""

    query: str
    label: str | None = None

    def __post_init__(self) -> None:
        query: object = self.query
        if not isinstance(query, str):
            raise ConfigurationError(f"checks.sql takes a query string, got {query!r}.")
        parse_query(query, "checks.sql")  # exactly one query, or refused by name
        if self.label is not None and not isinstance(self.label, str):
            raise ConfigurationError(f"checks.sql label must be a string, got {self.label!r}.")

    @property
    def name(self) -> str:
        return self.label or f"sql({self.query!r})"

    def __call__(self, batch: StagedBatch) -> str | None:
        found = batch.sql(self.query).limit(SAMPLE_ROWS)
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


def expect(predicate: str, *, label: str | None = None) -> sql:
    """Fail if any row violates ``predicate`` (a Spark SQL boolean expression; a null
    result counts as a violation).

    Raises:
        ConfigurationError: ``predicate`` is not exactly one boolean expression
            (:mod:`deltasink.shapes.predicates`); it is re-emitted from its parse, never
            spliced as written.
    """
    text: object = predicate
    if not isinstance(text, str):
        raise ConfigurationError(f"checks.expect takes a predicate string, got {text!r}.")
    rendered = render(text, "spark", "checks.expect")
    return sql(
        f"SELECT * FROM staged WHERE NOT coalesce(({rendered}), false)",
        label=label or f"expect({predicate!r})",
    )


def _column_names(check: str, columns: tuple[object, ...]) -> tuple[str, ...]:
    if not columns or not all(isinstance(c, str) and c for c in columns):
        raise ConfigurationError(
            f"checks.{check} takes one or more column names, got {list(columns)!r}."
        )
    return tuple(str(c) for c in columns)


#: What a check may not be: the factories and classes of this module themselves.
_NOT_CHECKS: tuple[object, ...] = (expect,)


def validate(checks: object) -> tuple[Check, ...] | None:
    """The ``checks`` a sink was given, validated when it is built.

    Args:
        checks: ``None`` (run the recorded checks) or a sequence of checks.

    Returns:
        The checks as a tuple (``None`` for ``None``).

    Raises:
        ConfigurationError: ``checks`` is not a list or tuple, or one of them is not a
            callable taking one argument (a :class:`StagedBatch`): e.g. ``1``,
            ``checks.expect`` itself instead of ``checks.expect("...")``, a class.
    """
    if checks is None:
        return None
    if isinstance(checks, str | bytes) or not isinstance(checks, Sequence):
        raise ConfigurationError(
            f"checks must be a list of checks (e.g. [checks.no_nulls('id')]), got {checks!r}."
        )
    for position, check in enumerate(checks):
        problem = _problem(check)
        if problem:
            raise ConfigurationError(
                f"checks[{position}] = {check!r} {problem}. A check is a built-in of "
                'deltasink.checks (e.g. checks.expect("amount >= 0")) or a function '
                "taking the StagedBatch and returning None/True (pass), or False/a message "
                "(fail)."
            )
    return tuple(checks)


def _problem(check: object) -> str | None:
    """Why ``check`` cannot be a check, or ``None``."""
    if isinstance(check, type):
        return "is a class, not a check (call it to make one)"
    if any(check is factory for factory in _NOT_CHECKS):
        return "is the factory, not a check (call it to make one)"
    if not callable(check):
        return "is not callable"
    try:
        signature = inspect.signature(check)
    except (TypeError, ValueError):  # a builtin without a signature: let it run
        return None
    try:
        signature.bind(None)
    except TypeError:
        return f"cannot be called with one argument (its signature is {signature})"
    return None


def needs_validation(checks: Sequence[Check]) -> bool:
    """Whether :func:`validate_on` has anything to look at in ``checks``."""
    return any(isinstance(c, no_nulls | unique | sql) for c in checks)


def validate_on(checks: Sequence[Check], columns: Sequence[str], frame: Callable[[], Any]) -> None:
    """Validate ``checks`` against a batch with ``columns`` (deltasink's system columns
    removed), before it is staged: the built-ins' columns exist, and each SQL check
    analyses over ``frame()``, a zero-row DataFrame of the batch's schema on the engine
    that runs SQL checks (called only when there is a SQL check; when it cannot be
    built, the SQL checks are left to run on the staged rows as before).

    Raises:
        ConfigurationError: A check that could never pass or fail on its merits.
    """
    names = set(columns)
    for check in checks:
        if isinstance(check, no_nulls | unique):
            missing = [c for c in check.columns if c not in names]
            if missing:
                raise ConfigurationError(
                    f"check {check.name} names column(s) {missing} that the batch does not "
                    f"have (it has {list(columns)}); nothing was staged. Fix the check.",
                    column=missing[0],
                )
    queries = [c for c in checks if isinstance(c, sql)]
    if not queries:
        return
    try:
        df = frame()
    except Exception:  # a schema the engine cannot build empty: the checks run as before
        return
    view = f"deltasink_check_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(view)
    try:
        for check in queries:
            try:
                df.sparkSession.sql(render_query(check.query, view)).schema  # noqa: B018
            except ConfigurationError:
                raise
            except Exception as exc:  # zero rows: only the query can be at fault
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise ConfigurationError(
                    f"check {check.name} does not analyse over the batch's columns "
                    f"{list(columns)}: {first}. Nothing was staged; fix the check."
                ) from exc
    finally:
        with contextlib.suppress(Exception):  # clean-up only
            df.sparkSession.catalog.dropTempView(view)


def _describe(check: Check) -> dict[str, Any]:
    if isinstance(check, no_nulls | unique):
        return {"check": type(check).__name__, "columns": list(check.columns)}
    if isinstance(check, row_count_between):
        return {"check": "row_count_between", "minimum": check.minimum, "maximum": check.maximum}
    if isinstance(check, row_count_within):
        return {"check": "row_count_within", "percent": check.percent}
    if isinstance(check, sql):
        return {"check": "sql", "query": check.query, "label": check.label}
    return {"check": "callable", "name": _name(check)}


def encode(checks: Sequence[Check]) -> str:
    """The checks as the JSON recorded in the staging table (callables by name only)."""
    return json.dumps([_describe(c) for c in checks], sort_keys=True)


def decode(text: str) -> tuple[tuple[Check, ...], tuple[str, ...]]:
    """Inverse of :func:`encode`: the built-in checks, and the names of the callables
    that cannot be rebuilt."""
    built: list[Check] = []
    opaque: list[str] = []
    for item in json.loads(text):
        kind = item.get("check")
        if kind == "no_nulls":
            built.append(no_nulls(*item["columns"]))
        elif kind == "unique":
            built.append(unique(*item["columns"]))
        elif kind == "row_count_between":
            built.append(row_count_between(item["minimum"], item["maximum"]))
        elif kind == "row_count_within":
            built.append(row_count_within(item["percent"]))
        elif kind == "sql":
            built.append(sql(item["query"], label=item["label"]))
        else:
            opaque.append(str(item.get("name", kind)))
    return tuple(built), tuple(opaque)
