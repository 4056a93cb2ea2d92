"""Each predicate field, the engines it reaches, and the text each engine gets.

A field reaches Spark itself (the ``spark`` engine), Sail (the embedded engine's Spark,
which evaluates the batch's rows: ``delete_when``, ``checks.expect``, and the check that
every batch row satisfies ``replace_where``/``target_predicate``) and delta-rs (DataFusion:
the embedded engine's ``replace`` overwrite, MERGE condition and not-matched-by-source
clause, which read the target's rows). A spec may be staged by one engine and published
by the other (``deltasink recover`` runs the embedded engine), so a field's constructs
are those every engine it can reach evaluates with Spark's meaning:

=====================================  =================  ============================
field                                  evaluated by       columns
=====================================  =================  ============================
``delete_when``                        Spark, Sail        the batch's, plain names
``checks.expect``                      Spark, Sail        the batch's, plain names
``replace_where``                      Spark, Sail, delta-rs  plain names
``target_predicate``                   Spark, Sail, delta-rs  ``t.<column>``
``not_matched_by_source_condition``    Spark, delta-rs    ``t.<column>`` or plain
a target's ``CHECK`` constraint        Spark, delta-rs    the batch's, plain names
=====================================  =================  ============================

:func:`check` runs when the spec or check is built (the rules that need no column
types); :func:`translate` when the columns are known: at the first batch (so a refusal
comes before anything is staged) and for each engine's text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from deltasink.errors import ConfigurationError, InvalidInputError

from . import write
from .base import DELTA_RS, EVERY, SAIL, Evaluator, Scope
from .literals import Refusal
from .types import SqlType

__all__ = ["FIELDS", "Field", "FieldName", "check", "session_ansi", "session_zone", "translate"]

FieldName = Literal[
    "delete_when",
    "replace_where",
    "target_predicate",
    "not_matched_by_source_condition",
    "expect",
    "check_constraint",
]


@dataclass(frozen=True)
class Field:
    """A predicate field: its name in messages, the evaluators besides Spark it reaches,
    and how it names columns."""

    what: str
    evaluators: frozenset[Evaluator]
    scope: Scope


FIELDS: dict[FieldName, Field] = {
    "delete_when": Field("MergeSpec.delete_when", SAIL, Scope()),
    "expect": Field("checks.expect", SAIL, Scope()),
    "replace_where": Field("MergeSpec.replace_where", EVERY, Scope()),
    "target_predicate": Field("MergeSpec.target_predicate", EVERY, Scope("required", "t")),
    "not_matched_by_source_condition": Field(
        "MergeSpec.not_matched_by_source_condition", DELTA_RS, Scope("optional", "t")
    ),
    # the embedded engine judges a batch by the target's constraints (shapes/constraints.py)
    "check_constraint": Field("the target's CHECK constraint", DELTA_RS, Scope()),
}


def _refused(field: Field, text: str, refusal: Refusal) -> ConfigurationError:
    engines = " and ".join(
        {"sail": "the embedded engine's Spark (Sail)", "delta-rs": "delta-rs (DataFusion)"}[e]
        for e in sorted(field.evaluators)
    )
    return ConfigurationError(
        f"{field.what} {text!r} uses {refusal.construct}, which {engines} would not "
        f"evaluate as Spark does (a spec may be published by either engine): "
        f"{refusal.why}. Instead, {refusal.way_out}. The supported constructs are "
        "listed in docs/predicates.md."
    )


@functools.lru_cache(maxsize=512)
def check(text: str, name: FieldName, zone: str | None = None, ansi: bool = True) -> bool:
    """``text`` as field ``name`` when the spec or check is built: parsed as exactly one
    boolean expression, every construct allowed for the engines the field reaches.
    ``zone``: the recorded session time zone (:func:`session_zone`), or ``None`` (what
    reads it is refused); ``ansi``: the recorded ANSI mode (:func:`session_ansi`).
    Returns whether ``text`` reads the zone.

    Raises:
        ConfigurationError: It does not parse as one predicate, or uses a construct
            refused for the field (the message names the construct and what to write).
    """
    from deltasink.shapes.predicates import parse_predicate

    field = FIELDS[name]
    tree = parse_predicate(text, field.what)
    try:
        _, read = write(
            tree,
            columns=None,
            dialect="spark",
            evaluators=field.evaluators,
            scope=field.scope,
            zone=zone,
            ansi=ansi,
        )
    except Refusal as refusal:
        raise _refused(field, text, refusal) from None
    return read


def translate(
    text: str,
    name: FieldName,
    columns: Mapping[str, SqlType],
    dialect: Literal["spark", "delta-rs"],
    zone: str | None = None,
    ansi: bool = True,
) -> str:
    """``text`` as field ``name`` written out for ``dialect`` over ``columns`` (the
    batch's or the target's, with their Spark types), with Spark's meaning; ``zone``
    the recorded session time zone (``None``: what reads it is refused); ``ansi`` the
    recorded ANSI mode (Spark's meaning with ``spark.sql.ansi.enabled`` so set).

    Raises:
        ConfigurationError: A construct refused for these column types.
        InvalidInputError: It names a column that is not among ``columns``.
    """
    key = tuple(sorted((c, str(t)) for c, t in columns.items()))
    return _translate(text, name, key, dialect, zone, ansi)


@functools.lru_cache(maxsize=512)
def _translate(
    text: str,
    name: FieldName,
    key: tuple[tuple[str, str], ...],
    dialect: str,
    zone: str | None,
    ansi: bool,
) -> str:
    from deltasink.shapes.predicates import parse_predicate

    from .types import parse_type

    field = FIELDS[name]
    tree = parse_predicate(text, field.what)
    columns = {column: parse_type(kind) for column, kind in key}
    try:
        return write(
            tree,
            columns=columns,
            dialect="datafusion" if dialect == "delta-rs" else "spark",
            evaluators=field.evaluators,
            scope=field.scope,
            zone=zone,
            ansi=ansi,
        )[0]
    except Refusal as refusal:
        raise _refused(field, text, refusal) from None
    except KeyError as missing:
        raise InvalidInputError(
            f"{field.what} {text!r} is not a valid Spark SQL predicate over the columns "
            f"{[c for c, _ in key]}: it names {missing.args[0]!r}, which is not one of them."
        ) from None


def session_zone(given: str | None = None) -> str:
    """The session time zone a spec or check records (a zone-less timestamp literal and
    ``year``/``month``/``day``/``hour`` of a timestamp are read in it, as Spark reads
    them in ``spark.sql.session.timeZone``): ``given``, else the active Spark session's
    (classic or Spark Connect, when PySpark is loaded), else ``UTC``, the embedded
    engine's. A region (``Europe/Paris``), ``UTC`` or an offset (``+05:30``).

    Raises:
        ConfigurationError: A zone deltasink does not read (``PST``, ``GMT+1``).
    """
    import sys

    zone = given
    if zone is None and "pyspark.sql" in sys.modules:
        try:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            zone = None if active is None else active.conf.get("spark.sql.session.timeZone")
        except Exception:  # no usable session: the default
            zone = None
    zone = zone or "UTC"
    from .literals import zone_info

    try:
        zone_info(zone)
    except Refusal as refusal:
        raise ConfigurationError(
            f"The time zone {zone!r}: {refusal.why}. {refusal.way_out}."
        ) from None
    return zone


def session_ansi(given: bool | None = None, session: object = None) -> bool:
    """Spark's ANSI mode a spec or check records (its predicates mean what Spark computes
    with ``spark.sql.ansi.enabled`` so set): ``given``, else ``session``'s or the active
    Spark session's (classic or Spark Connect, when PySpark is loaded; unset there, the
    version's default: off before Spark 4), else on (Spark 4's default)."""
    import sys

    if given is not None:
        return bool(given)
    if session is None and "pyspark.sql" in sys.modules:
        try:
            from pyspark.sql import SparkSession

            session = SparkSession.getActiveSession()
        except Exception:  # no usable session: the default
            session = None
    if session is not None:
        try:
            value = session.conf.get("spark.sql.ansi.enabled")  # type: ignore[attr-defined]
            return value is None or str(value).strip().lower() != "false"
        except Exception:  # a session that does not answer: the default
            pass
    return True


def types_of(schema: object) -> dict[str, SqlType]:
    """The Spark types of an Arrow schema's or a Spark ``StructType``'s columns."""
    import pyarrow as pa

    from .types import of_arrow, of_spark

    if isinstance(schema, pa.Schema):
        return {f.name: of_arrow(f.type) for f in schema}
    return {f.name: of_spark(f.dataType) for f in schema.fields}  # type: ignore[attr-defined]
