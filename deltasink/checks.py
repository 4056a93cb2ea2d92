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
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from deltasink.errors import ConfigurationError
from deltasink.shapes.builtin_checks import (
    Check,
    StagedBatch,
    check_name,
    expect,
    no_nulls,
    row_count_between,
    row_count_within,
    run_checks,
    sql,
    unique,
)
from deltasink.shapes.predicates import render_query

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
                query = check.query_for(df.schema)  # refusals for these types: named
                df.sparkSession.sql(render_query(query, view)).schema  # noqa: B018
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
        described: dict[str, Any] = {"check": "sql", "query": check.query, "label": check.label}
        if check.expect is not None:  # releases without it run the plain query
            described["expect"] = check.expect
        if check.time_zone is not None:  # the zone its predicate reads
            described["time_zone"] = check.time_zone
        if check.ansi_mode is not None:  # the ANSI mode its predicate means (off)
            described["ansi_mode"] = check.ansi_mode
        return described
    return {"check": "callable", "name": check_name(check)}


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
            built.append(
                sql(
                    item["query"],
                    label=item["label"],
                    expect=item.get("expect"),
                    time_zone=item.get("time_zone"),
                    ansi_mode=item.get("ansi_mode"),
                )
            )
        else:
            opaque.append(str(item.get("name", kind)))
    return tuple(built), tuple(opaque)
