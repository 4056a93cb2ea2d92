"""The rules a :class:`~deltasink.shapes.spec.MergeSpec` is checked against when it is made,
beyond its field types: the history columns of ``scd2``, ``target_predicate``, partial
updates, ``when_not_matched_by_source`` and the ``replace`` mode's slice.

Each raises :class:`~deltasink.errors.ConfigurationError` naming the field and the fix.
The rules read the spec through :class:`SpecFields` (the fields they check), so this
module does not import :mod:`deltasink.shapes.spec`, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, get_args

from deltasink.errors import ConfigurationError, InvalidInputError
from deltasink.shapes.target_sql import RendersPredicates, TargetSql

__all__ = [
    "DEFAULT_HISTORY_COLUMNS",
    "NotMatchedBySource",
    "SpecFields",
    "check_flags",
    "check_history",
    "check_not_matched_by_source",
    "check_partial_update",
    "check_replace",
    "check_source_condition",
    "check_target_predicate",
    "key_names",
    "record_session",
    "with_session_mode",
]

#: What an ``upsert`` does to target rows whose key is not in the batch.
NotMatchedBySource = Literal["ignore", "delete"]

#: ``scd2`` history columns when ``MergeSpec.history_columns`` is not given.
DEFAULT_HISTORY_COLUMNS = ("valid_from", "valid_to", "is_current")


def key_names(keys: str | Sequence[str]) -> tuple[str, ...]:
    """``MergeSpec.keys`` as a tuple: a single string is one key column.

    Raises:
        ConfigurationError: A single string holding a comma (``"a, b"``: two keys
            meant, or one column of that name? A list says which).
    """
    if not isinstance(keys, str):
        return tuple(keys)
    if "," in keys:
        names = [k.strip() for k in keys.split(",")]
        raise ConfigurationError(
            f"MergeSpec(keys={keys!r}) is one string, so one key column named {keys!r}. "
            f"For several keys pass a list: keys={names!r} (for one column whose name "
            f"holds a comma: keys=[{keys!r}]).",
            column=keys,
        )
    return (keys,)


class SpecFields(Protocol):
    """The fields of a :class:`~deltasink.shapes.spec.MergeSpec` the rules read."""

    @property
    def mode(self) -> str: ...
    @property
    def sequence_by(self) -> str | None: ...
    @property
    def null_safe_keys(self) -> bool: ...
    @property
    def history_columns(self) -> Sequence[str] | None: ...
    @property
    def target_predicate(self) -> str | None: ...
    @property
    def when_not_matched_by_source(self) -> str: ...
    @property
    def not_matched_by_source_condition(self) -> str | None: ...
    @property
    def replace_by(self) -> Sequence[str] | None: ...
    @property
    def replace_where(self) -> str | None: ...
    @property
    def update_columns(self) -> Sequence[str] | None: ...
    @property
    def except_columns(self) -> Sequence[str] | None: ...


def check_target_predicate(spec: SpecFields) -> None:
    """Validate ``target_predicate``."""
    predicate = spec.target_predicate
    if predicate is None:
        return
    if not isinstance(predicate, str) or not predicate.strip():
        raise ConfigurationError(
            "MergeSpec.target_predicate must be a non-empty SQL predicate over target "
            "columns qualified with t, e.g. \"t.day >= '2026-01-01'\"."
        )
    if spec.mode not in ("upsert", "insert"):
        raise ConfigurationError(
            "MergeSpec.target_predicate is only valid with mode='upsert' or 'insert' "
            f"(a MERGE by keys), not mode={spec.mode!r}."
        )
    if spec.when_not_matched_by_source == "delete":
        raise ConfigurationError(
            "MergeSpec.target_predicate cannot be combined with "
            "when_not_matched_by_source='delete': every target row outside it would "
            "look absent from the batch and be deleted; use "
            "not_matched_by_source_condition to limit the deletes."
        )


def check_history(spec: SpecFields, keys: tuple[str, ...]) -> None:
    """Validate ``scd2`` and ``history_columns`` (defaulted for ``scd2``)."""
    if spec.mode != "scd2":
        if spec.history_columns is not None:
            raise ConfigurationError("MergeSpec.history_columns is only valid with mode='scd2'.")
        return
    if spec.sequence_by is None:
        raise ConfigurationError(
            "MergeSpec(mode='scd2') needs sequence_by: the column (an event time or "
            "sequence number) whose values start and end each version of a key."
        )
    if spec.null_safe_keys:
        raise ConfigurationError(
            "MergeSpec(mode='scd2') takes no null_safe_keys: its keys must be non-null."
        )
    if spec.history_columns is None:
        object.__setattr__(spec, "history_columns", DEFAULT_HISTORY_COLUMNS)
    names = tuple(spec.history_columns or ())
    if len(names) != 3 or len(set(names)) != 3:
        raise ConfigurationError(
            "MergeSpec.history_columns needs three distinct names (valid from, valid "
            f"to, is current), got {list(names)}."
        )
    clash = [n for n in names if n in keys or n == spec.sequence_by]
    if clash:
        raise ConfigurationError(
            f"MergeSpec.history_columns {clash} name a key or sequence_by column; "
            "deltasink writes the history columns itself.",
            column=clash[0],
        )


def check_replace(spec: SpecFields) -> None:
    """Validate ``replace_by`` / ``replace_where``."""
    replacing = spec.replace_by is not None or spec.replace_where is not None
    if spec.mode != "replace":
        if replacing:
            raise ConfigurationError(
                "MergeSpec.replace_by and replace_where are only valid with mode='replace'."
            )
        return
    if not replacing:
        raise ConfigurationError(
            "MergeSpec(mode='replace') needs replace_by (columns whose values in the "
            "batch select the rows replaced), replace_where (a predicate), or both."
        )
    if spec.replace_by is not None:
        if not spec.replace_by:
            raise ConfigurationError("MergeSpec.replace_by is empty.")
        if len(set(spec.replace_by)) != len(spec.replace_by):
            raise ConfigurationError(
                f"MergeSpec.replace_by has duplicates: {list(spec.replace_by)}."
            )
    if spec.replace_where is not None and (
        not isinstance(spec.replace_where, str) or not spec.replace_where.strip()
    ):
        raise ConfigurationError(
            "MergeSpec.replace_where must be a non-empty SQL predicate over target "
            "columns, e.g. \"region = 'EU'\"."
        )


def check_not_matched_by_source(spec: SpecFields) -> None:
    """Validate ``when_not_matched_by_source`` and its condition."""
    choice, condition = spec.when_not_matched_by_source, spec.not_matched_by_source_condition
    if choice not in get_args(NotMatchedBySource):
        raise ConfigurationError(
            "MergeSpec.when_not_matched_by_source must be one of "
            f"{list(get_args(NotMatchedBySource))}, got {choice!r}."
        )
    if choice == "delete" and spec.mode != "upsert":
        raise ConfigurationError(
            "MergeSpec(when_not_matched_by_source='delete') is only valid with "
            f"mode='upsert', not mode={spec.mode!r}."
        )
    if condition is not None:
        if choice != "delete":
            raise ConfigurationError(
                "MergeSpec.not_matched_by_source_condition needs "
                "when_not_matched_by_source='delete'."
            )
        if not isinstance(condition, str) or not condition.strip():
            raise ConfigurationError(
                "MergeSpec.not_matched_by_source_condition must be a non-empty SQL "
                "predicate over target columns qualified with t, e.g. \"t.region = 'EU'\"."
            )


class HasSourceCondition(RendersPredicates, Protocol):
    """A spec's ``not_matched_by_source_condition`` and how it renders a predicate
    (:meth:`~deltasink.shapes.spec.MergeSpec.predicate`)."""

    @property
    def not_matched_by_source_condition(self) -> str | None: ...


def check_source_condition(
    spec: HasSourceCondition,
    columns: Mapping[str, Any],
    *,
    sql: TargetSql,
    table: str,
    resolves: Callable[[str], object],
) -> None:
    """``not_matched_by_source_condition`` resolves on the existing target, before
    anything is written: the one check of it, which each engine makes with its own way
    of resolving a predicate over its target (qualified with ``t``).

    The condition is first translated for delta-rs over the target's ``columns`` (Spark
    types), on either engine: a spark engine's staged versions may be published by the
    embedded engine (``deltasink recover``), so both refuse the same constructs. Then
    ``resolves`` is given the condition as the engine's MERGE will carry it (``sql``,
    the engine's :class:`~deltasink.shapes.target_sql.TargetSql`) and raises if it does
    not resolve. Nothing when the spec has no condition.

    Raises:
        ConfigurationError: A construct refused for these column types.
        InvalidInputError: The condition names a column the target lacks, or does not
            resolve there.
    """
    condition = spec.not_matched_by_source_condition
    if condition is None:
        return
    field = "not_matched_by_source_condition"
    spec.predicate(field, "delta-rs", columns)  # refused here if refused anywhere
    rendered = sql.predicate(spec, field)
    assert rendered is not None
    try:
        resolves(rendered)
    except Exception as exc:
        raise InvalidInputError(
            f"MergeSpec.not_matched_by_source_condition {condition!r} is not a valid "
            f"predicate over the columns of target {table} (qualified with t): {exc}",
            table=table,
        ) from exc


def check_partial_update(spec: SpecFields, keys: tuple[str, ...]) -> None:
    """Validate ``update_columns`` / ``except_columns``."""
    if spec.update_columns is not None and spec.except_columns is not None:
        raise ConfigurationError(
            "MergeSpec takes update_columns or except_columns, not both: list the "
            "columns to update, or the ones to leave alone."
        )
    for attr in ("update_columns", "except_columns"):
        listed: tuple[str, ...] | None = getattr(spec, attr)
        if listed is None:
            continue
        if spec.mode != "upsert":
            raise ConfigurationError(
                f"MergeSpec.{attr} is only valid with mode='upsert' (mode={spec.mode!r} "
                "never updates a row)."
            )
        if not listed:
            raise ConfigurationError(
                f"MergeSpec.{attr} is empty; leave it None to update every column."
            )
        if len(set(listed)) != len(listed):
            raise ConfigurationError(f"MergeSpec.{attr} has duplicates: {list(listed)}.")
        named_keys = [c for c in listed if c in keys]
        if named_keys:
            raise ConfigurationError(
                f"MergeSpec.{attr} names the key column(s) {named_keys}; a key is "
                "never updated (it identifies the row).",
                column=named_keys[0],
            )
    seq = spec.sequence_by
    if seq is not None and spec.update_columns is not None and seq not in spec.update_columns:
        raise ConfigurationError(
            f"MergeSpec.update_columns must include sequence_by={seq!r}: an updated "
            "row's sequence must follow it, or older updates would apply after it.",
            column=seq,
        )
    if seq is not None and spec.except_columns is not None and seq in spec.except_columns:
        raise ConfigurationError(
            f"MergeSpec.except_columns must not include sequence_by={seq!r}: an "
            "updated row's sequence must follow it.",
            column=seq,
        )


def check_flags(spec: SpecFields, keys: tuple[str, ...]) -> None:
    """``null_safe_keys`` and ``allow_missing_columns`` are booleans; null-safe keys
    need keys."""
    for flag in ("null_safe_keys", "allow_missing_columns"):
        value = getattr(spec, flag)
        if not isinstance(value, bool):
            raise ConfigurationError(f"MergeSpec.{flag} must be True or False, got {value!r}.")
    if spec.null_safe_keys and not keys:
        raise ConfigurationError("MergeSpec.null_safe_keys needs keys (mode='upsert' or 'insert').")


def record_session(spec: Any, names: Sequence[str]) -> None:
    """Check ``spec``'s predicates ``names`` (each one boolean expression of allowed
    constructs) and record what of the Spark session they read: the time zone when one
    reads it and ``time_zone`` is unset, ANSI mode off when ``ansi_mode`` is unset and
    the active session has it off (:func:`~.sparksql.fields.session_ansi`)."""
    from deltasink.shapes.sparksql.fields import check, session_ansi, session_zone

    if spec.time_zone is not None:
        session_zone(spec.time_zone)  # one deltasink reads, or refused by name
    if spec.ansi_mode is not None and not isinstance(spec.ansi_mode, bool):
        raise ConfigurationError(
            f"MergeSpec.ansi_mode must be True, False or None, got {spec.ansi_mode!r}."
        )
    texts = {name: getattr(spec, name) for name in names}
    if spec.ansi_mode is None and any(texts.values()) and not session_ansi():
        object.__setattr__(spec, "ansi_mode", False)  # the session's mode, recorded
    for name, text in texts.items():
        reads_zone = text is not None and check(text, name, spec.time_zone or "UTC", spec.ansi)
        if reads_zone and spec.time_zone is None:  # the session's zone, recorded
            object.__setattr__(spec, "time_zone", session_zone())


def with_session_mode(spec: Any, session: object, names: Sequence[str]) -> Any:
    """``spec`` with the ANSI mode of ``session`` (the Spark session a sink is given or
    finds active) recorded, when it has a predicate and was built with ``ansi_mode``
    unset where no session said otherwise: a spec built at module level, before the job
    made its session, means the predicates as that job's session computes them (on the
    Databricks 14.3-16.4 line, ANSI mode off). ``names``: the spec's predicate fields.
    A spec that records a mode is kept."""
    from dataclasses import replace

    from deltasink.shapes.sparksql.fields import session_ansi

    if spec is None or spec.ansi_mode is not None or session is None:
        return spec
    if not any(getattr(spec, name) for name in names):
        return spec
    if session_ansi(session=session):
        return spec
    return replace(spec, ansi_mode=False)  # checked again in that mode
