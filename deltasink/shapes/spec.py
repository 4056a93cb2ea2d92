"""``MergeSpec``: how a staged batch is applied to the target table."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from deltasink.errors import ConfigurationError
from deltasink.reserved import PREFIX, is_reserved
from deltasink.shapes.predicates import Dialect, render
from deltasink.shapes.sparksql.fields import translate
from deltasink.shapes.sparksql.types import SqlType

from . import spec_rules as rules
from .spec_rules import DEFAULT_HISTORY_COLUMNS, NotMatchedBySource

__all__ = [
    "DEFAULT_HISTORY_COLUMNS",
    "PREDICATES",
    "MergeMode",
    "MergeSpec",
    "NotMatchedBySource",
    "PredicateField",
]

MergeMode = Literal["upsert", "insert", "append", "replace", "scd2"]
#: The fields holding SQL predicates the user writes (each parsed as exactly one
#: boolean expression when the spec is built: :mod:`deltasink.shapes.predicates`).
PredicateField = Literal[
    "delete_when", "replace_where", "target_predicate", "not_matched_by_source_condition"
]
PREDICATES: tuple[PredicateField, ...] = get_args(PredicateField)


@dataclass(frozen=True, kw_only=True)
class MergeSpec:
    """How the rows of a batch are applied to the target, in one Delta commit.

    Modes:

    * ``"upsert"`` (default): rows whose ``keys`` match a target row update it; the
      others are inserted. With ``delete_when``, source rows for which the predicate is
      true delete the matching target row (and are never inserted).
    * ``"insert"``: insert-if-absent by ``keys``; existing target rows are never
      changed.
    * ``"append"``: every row is appended; no keys. Exactly-once still holds per batch.
    * ``"replace"``: each version atomically replaces a slice of the target with its
      rows, in one commit: the target rows whose ``replace_by`` values occur in the
      batch (and, with ``replace_where``, satisfy it), or with ``replace_where`` alone
      the target rows satisfying it. Rows that vanished from the source vanish from
      the target ("reload day D", exactly once). No keys; duplicates are kept. An
      empty batch with ``replace_by`` replaces nothing; with ``replace_where`` alone it
      deletes the rows satisfying it.
    * ``"scd2"``: slowly changing dimension type 2: every row is an *event* of its key
      (an upsert, or a delete with ``delete_when``) at its ``sequence_by`` value, and
      the target keeps one row per upsert event with its validity interval in
      :attr:`history_columns`. The history of a key depends only on the set of its
      events (docs/guarantees.md, "History"), so late, out-of-order, replayed,
      coalesced and recovered versions all leave the same rows. Needs ``keys`` and
      ``sequence_by``; the same key and sequence twice in one batch is a
      :class:`~deltasink.errors.DuplicateKeyError`, in a later version a correction
      that replaces the earlier event.

    Args:
        keys: Columns identifying a row. Required for ``upsert``, ``insert`` and
            ``scd2``; they must be present and non-null in every batch. A single
            string is one column: ``keys="order_id"`` means ``keys=("order_id",)``
            (stored as a tuple either way); a string with a comma is refused, since
            ``"a, b"`` could mean two keys (pass ``keys=["a", "b"]``).
        mode: One of ``"upsert"``, ``"insert"``, ``"append"``, ``"replace"``.
        sequence_by: A column ordering the versions of a key (an event time or a
            sequence number). Within a batch the row with the highest value per key
            wins; against the target, a row older than the target's is ignored (the
            "latest wins" rule for out-of-order updates). Without it, a key appearing
            twice in one batch is a :class:`~deltasink.errors.DuplicateKeyError`.
        delete_when: A Spark SQL boolean expression over the batch's columns, e.g.
            ``"op = 'D'"``. It is evaluated once, when the batch is staged, so the
            staged batch records which rows are deletes. Only for ``upsert`` and
            ``scd2``.
        schema_evolution: Add batch columns that the target does not have yet
            (otherwise such a batch is rejected with a
            :class:`~deltasink.errors.SchemaMismatchError`).
        allow_missing_columns: The batches carry a subset of the target's columns on
            purpose (the name Spark's ``unionByName`` uses). Without it (default), an
            ``upsert``, ``insert`` or ``scd2`` batch that lacks a column the target has
            (other than a generated, default or identity column, or the ``scd2``
            history columns) is refused by name before anything is staged, as Delta's
            MERGE refuses it without schema evolution. With it (or with
            ``schema_evolution``, as Delta's MERGE with schema evolution), inserted
            rows get null there and matched rows keep their values. ``append`` and
            ``replace`` always take a subset (null in the columns it lacks), as
            Delta's DataFrame writes do. Versions staged before it was set (or by a
            release without it) are published as they were staged.
        update_columns: Only for ``upsert``: a matched target row has only these
            columns set from the batch row; its other columns keep their values.
            Inserted rows still get every column of the batch. Must not name a key
            column; must name ``sequence_by`` when that is set (the target's sequence
            must follow the row that updated it). Every batch must contain them.
        except_columns: Only for ``upsert``, exclusive with ``update_columns``: a
            matched target row has every non-key batch column set except these. Must
            not name a key column nor ``sequence_by``. Every batch must contain them.

        replace_by: Only for ``replace``: the columns whose values select the target
            rows a version replaces. Integer, string or date columns, present and
            non-null in every batch (:class:`~deltasink.errors.KeyColumnError`).
        replace_where: Only for ``replace``: a static SQL predicate over the target's
            columns (unqualified, e.g. ``"region = 'EU'"``) limiting the rows
            replaced; every row of a batch must satisfy it (else an
            :class:`~deltasink.errors.InvalidInputError` before anything is written).
        null_safe_keys: Only with keys (``upsert``/``insert``): key columns may be
            null, and a null key value matches a null one (``IS NOT DISTINCT FROM``,
            Spark's ``<=>``), so a key with nulls is still one row. Key-range file
            pruning is off for it (a range says nothing about nulls).
        when_not_matched_by_source: Only for ``upsert``. ``"ignore"`` (default): target
            rows whose key is not in the batch stay. ``"delete"``: each version deletes
            every target row whose key is not among the batch's keys (delete rows and
            rows ignored as older by ``sequence_by`` count as present), in the same
            commit; an empty batch deletes every such row. Key-range file pruning is
            off for this shape (every target row outside the batch's key range would
            count as absent and be deleted), so its MERGE reads the whole target.
        not_matched_by_source_condition: With ``"delete"`` only: a SQL predicate over
            the target's columns, qualified with the target alias ``t`` (e.g.
            ``"t.region = 'EU'"``); only target rows for which it is true are deleted
            when absent from the batch (a null result keeps the row). It must resolve
            on the existing target (:class:`~deltasink.errors.InvalidInputError`
            before anything is written).
        target_predicate: Only for ``upsert``/``insert``: a SQL predicate over the
            target's columns, qualified with ``t`` (e.g. ``"t.day >= '2026-01-01'"``),
            added to the MERGE's join condition so the engine reads only the target
            files that can hold it (partition or file pruning, as in Delta's docs).
            The MERGE sees only target rows satisfying it, so every batch row must
            satisfy it too (evaluated on the batch as ``t``; else an
            :class:`~deltasink.errors.InvalidInputError` before anything is written):
            a key's rows must stay on the same side of it (e.g. a partition column
            that never changes for a key). Not with
            ``when_not_matched_by_source="delete"``.
        history_columns: Only for ``scd2``: the names of the three columns it adds to
            the target: where a row's validity starts and ends (the ``sequence_by``
            type; the end null while current) and whether it is current. Default
            ``("valid_from", "valid_to", "is_current")``; a batch must not have them.
        time_zone: The session time zone (``spark.sql.session.timeZone``) a zone-less
            timestamp literal and ``year``/``month``/``day``/``hour`` of a timestamp
            are read in: ``UTC``, an offset (``+05:30``) or a region (``Europe/Paris``).
            Unset, a spec whose predicates read it records the active Spark session's
            zone, else ``UTC``; every engine and later recovery reads the recorded one.
        ansi_mode: The ANSI mode (``spark.sql.ansi.enabled``) the predicates mean: on
            (unset or ``True``) an overflow or zero divisor fails; off, they wrap or are
            null. Unset, a spec with a predicate built in (or given to a sink in) a
            session with it off records ``False``; the spark engine refuses the other.

    A spec with ``update_columns``, ``except_columns``,
    ``when_not_matched_by_source="delete"`` or ``mode="replace"`` is not coalesced: its pending versions are
    committed one target commit each (see :attr:`coalescable`).

    Every predicate (``delete_when``, ``replace_where``, ``target_predicate``,
    ``not_matched_by_source_condition``) is Spark SQL, parsed when the spec is built as
    exactly one row-level boolean expression (:mod:`deltasink.shapes.predicates`): no second
    expression or statement, no unbalanced parenthesis, no subquery, aggregate or
    window. The engines are given the parsed expression re-emitted, never the text.

    Raises:
        ConfigurationError: The combination is invalid (e.g. ``upsert`` without keys),
            or a predicate is not exactly one boolean expression.
    """

    keys: Sequence[str] = ()
    mode: MergeMode = "upsert"
    sequence_by: str | None = None
    delete_when: str | None = None
    schema_evolution: bool = False
    allow_missing_columns: bool = False
    update_columns: Sequence[str] | None = None
    except_columns: Sequence[str] | None = None
    when_not_matched_by_source: NotMatchedBySource = "ignore"
    not_matched_by_source_condition: str | None = None
    replace_by: Sequence[str] | None = None
    replace_where: str | None = None
    null_safe_keys: bool = False
    history_columns: Sequence[str] | None = None
    target_predicate: str | None = None
    time_zone: str | None = None
    ansi_mode: bool | None = None

    def __post_init__(self) -> None:
        keys = rules.key_names(self.keys)
        object.__setattr__(self, "keys", keys)
        for attr in ("update_columns", "except_columns", "replace_by", "history_columns"):
            value = getattr(self, attr)
            if value is not None:
                object.__setattr__(self, attr, (value,) if isinstance(value, str) else tuple(value))
        if self.mode not in get_args(MergeMode):
            raise ConfigurationError(
                f"MergeSpec.mode must be one of {list(get_args(MergeMode))}, got {self.mode!r}."
            )
        for name in (
            *keys,
            self.sequence_by,
            *(self.update_columns or ()),
            *(self.except_columns or ()),
            *(self.replace_by or ()),
            *(self.history_columns or ()),
        ):
            if name is not None and (not isinstance(name, str) or not name):
                raise ConfigurationError(
                    f"MergeSpec column names must be non-empty strings, got {name!r}."
                )
            if isinstance(name, str) and is_reserved(name):
                raise ConfigurationError(
                    f"Column {name!r} uses the reserved prefix {PREFIX!r}; rename it in the batch.",
                    column=name,
                )
        if len(set(keys)) != len(keys):
            raise ConfigurationError(f"MergeSpec.keys has duplicates: {list(keys)}.")
        if self.mode in ("append", "replace"):
            if keys or self.sequence_by or self.delete_when:
                raise ConfigurationError(
                    f"MergeSpec(mode={self.mode!r}) takes no keys, sequence_by or "
                    "delete_when: its rows are never matched against the target by key."
                )
        elif not keys:
            raise ConfigurationError(
                f"MergeSpec(mode={self.mode!r}) needs keys, e.g. MergeSpec(keys=['id']); "
                "use mode='append' to append without keys."
            )
        if self.sequence_by is not None and self.sequence_by in keys:
            raise ConfigurationError(
                f"sequence_by={self.sequence_by!r} is a key column; pick a column that "
                "orders the versions of one key (an event time or sequence number).",
                column=self.sequence_by,
            )
        if self.delete_when is not None:
            if self.mode not in ("upsert", "scd2"):
                raise ConfigurationError(
                    "delete_when is only valid with mode='upsert' or mode='scd2'."
                )
            if not isinstance(self.delete_when, str) or not self.delete_when.strip():
                raise ConfigurationError(
                    "MergeSpec.delete_when must be a non-empty Spark SQL predicate, e.g. \"op = 'D'\"."
                )
        rules.check_history(self, keys)
        rules.check_target_predicate(self)
        rules.check_partial_update(self, keys)
        rules.check_not_matched_by_source(self)
        rules.check_replace(self)
        rules.check_flags(self, keys)
        rules.record_session(self, PREDICATES)  # time_zone, ansi_mode; each predicate checked

    def predicate(
        self,
        name: PredicateField,
        dialect: Dialect,
        columns: Mapping[str, SqlType] | None = None,
    ) -> str | None:
        """The predicate field ``name`` as the SQL given to ``dialect``'s parser, never
        the text as written; ``None`` when unset.

        With ``columns`` (the columns it reads, with their Spark types) it is translated
        with Spark's meaning (:mod:`deltasink.shapes.sparksql`): every conversion
        explicit, for Spark and Sail (``"spark"``) or DataFusion (``"delta-rs"``, which
        needs them). Without, Spark gets the parse re-emitted
        (:func:`deltasink.shapes.predicates.render`): what Spark itself evaluates.

        Raises:
            ConfigurationError: A construct refused for these column types.
            InvalidInputError: It names a column not among ``columns``.
        """
        text: str | None = getattr(self, name)
        if text is None:
            return None
        if columns is not None:
            return translate(text, name, columns, dialect, self.time_zone, self.ansi)
        if dialect != "spark":
            raise ValueError("a predicate for delta-rs is translated for the columns it reads")
        return render(text, dialect, f"MergeSpec.{name}")

    @property
    def ansi(self) -> bool:
        """Whether the predicates mean Spark's ANSI mode (:attr:`ansi_mode`; unset: on)."""
        return self.ansi_mode is not False

    @property
    def history(self) -> tuple[str, str, str]:
        """``scd2``: the (valid from, valid to, is current) column names."""
        if self.mode != "scd2" or self.history_columns is None:
            raise ValueError(f"MergeSpec(mode={self.mode!r}) keeps no history")
        start, end, current = self.history_columns
        return start, end, current

    def updated(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The columns of a batch with ``columns`` that ``UPDATE SET`` writes on a
        matched row: the non-key ones, narrowed by ``update_columns`` or
        ``except_columns``."""
        data = [c for c in columns if c not in self.keys]
        if self.update_columns is not None:
            return tuple(c for c in data if c in self.update_columns)
        if self.except_columns is not None:
            return tuple(c for c in data if c not in self.except_columns)
        return tuple(data)

    @property
    def coalescable(self) -> bool:
        """Whether pending versions may be folded into one target commit. Not with
        ``update_columns``/``except_columns`` (a key inserted by one version and
        updated by a later one keeps the first version's non-updated columns, which
        one coalesced row per key cannot express) nor with
        ``when_not_matched_by_source="delete"`` (each version alone defines which rows
        survive it, not the union of the versions): those commit one by one."""
        return (
            self.update_columns is None
            and self.except_columns is None
            and self.when_not_matched_by_source == "ignore"
            and self.mode != "replace"
        )

    @property
    def prunable(self) -> bool:
        """Whether the MERGE may restrict the target to the batch's key range (file
        pruning). Not when it deletes target rows absent from the batch: every row
        outside the range would be "not matched by source"; nor with null-safe keys:
        a null key lies in no range, so its target row would not match."""
        return self.when_not_matched_by_source == "ignore" and not self.null_safe_keys

    def nullable(self, column: str) -> bool:
        """Whether a :attr:`required_columns` column may hold nulls (a key, with
        ``null_safe_keys``)."""
        return self.null_safe_keys and column in self.keys

    @property
    def required_columns(self) -> tuple[str, ...]:
        """Columns every batch must contain, non-null: keys, then ``sequence_by``, then
        ``replace_by``."""
        return (
            *self.keys,
            *((self.sequence_by,) if self.sequence_by else ()),
            *(self.replace_by or ()),
        )

    @property
    def event_columns(self) -> tuple[str, ...]:
        """What identifies one row of a batch: the keys, and for ``scd2`` the
        ``sequence_by`` column too (one event per key and sequence value)."""
        if self.mode == "scd2" and self.sequence_by:
            return (*self.keys, self.sequence_by)
        return tuple(self.keys)

    def role(self, column: str) -> str:
        """What a :attr:`required_columns` column is, for messages."""
        if column == self.sequence_by:
            return "sequence_by"
        return "replace_by" if column in (self.replace_by or ()) else "key"

    @property
    def listed_columns(self) -> tuple[str, ...]:
        """``update_columns`` or ``except_columns``: columns every batch must contain
        besides :attr:`required_columns` (a missing one is a
        :class:`~deltasink.errors.SchemaMismatchError`)."""
        return tuple(self.update_columns or self.except_columns or ())

    def to_json(self) -> str:
        """Serialise to the JSON recorded in the staging table. Fields left at their
        default since a release added them are omitted, so older releases (and
        records) read the same JSON."""
        data = asdict(self)
        data["keys"] = list(self.keys)
        for attr, default in _OPTIONAL_FIELDS.items():
            if data[attr] == default:
                del data[attr]
            elif isinstance(data[attr], tuple):
                data[attr] = list(data[attr])
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MergeSpec:
        """Inverse of :meth:`to_json`; a record written before a field existed loads
        with that field's default."""
        data: dict[str, Any] = json.loads(text)
        spec = cls(**data)
        # the record's zone and ANSI mode, not those of the session reading it
        for field_name in ("time_zone", "ansi_mode"):
            object.__setattr__(spec, field_name, data.get(field_name))
        return spec


#: Fields added after the first release: omitted from :meth:`MergeSpec.to_json` when unset.
_OPTIONAL_FIELDS: dict[str, object] = {
    "update_columns": None,
    "except_columns": None,
    "when_not_matched_by_source": "ignore",
    "not_matched_by_source_condition": None,
    "replace_by": None,
    "replace_where": None,
    "null_safe_keys": False,
    "history_columns": None,
    "target_predicate": None,
    "allow_missing_columns": False,
    "time_zone": None,
    "ansi_mode": None,
}
