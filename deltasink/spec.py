"""``MergeSpec``: how a staged batch is applied to the target table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from deltasink.errors import ConfigurationError

__all__ = ["MergeMode", "MergeSpec"]

MergeMode = Literal["upsert", "insert", "append"]

#: Column-name prefix reserved for deltasink's own columns in the staging table.
RESERVED_PREFIX = "_deltasink_"


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

    Args:
        keys: Columns identifying a row. Required for ``upsert`` and ``insert``; they
            must be present and non-null in every batch.
        mode: One of ``"upsert"``, ``"insert"``, ``"append"``.
        sequence_by: A column ordering the versions of a key (an event time or a
            sequence number). Within a batch the row with the highest value per key
            wins; against the target, a row older than the target's is ignored (the
            "latest wins" rule for out-of-order updates). Without it, a key appearing
            twice in one batch is a :class:`~deltasink.errors.DuplicateKeyError`.
        delete_when: A Spark SQL boolean expression over the batch's columns, e.g.
            ``"op = 'D'"``. It is evaluated once, when the batch is staged, so the
            staged batch records which rows are deletes. Only for ``upsert``.
        schema_evolution: Add batch columns that the target does not have yet
            (otherwise such a batch is rejected with a
            :class:`~deltasink.errors.SchemaMismatchError`).

    Raises:
        ConfigurationError: The combination is invalid (e.g. ``upsert`` without keys).
    """

    keys: Sequence[str] = ()
    mode: MergeMode = "upsert"
    sequence_by: str | None = None
    delete_when: str | None = None
    schema_evolution: bool = False

    def __post_init__(self) -> None:
        keys = (self.keys,) if isinstance(self.keys, str) else tuple(self.keys)
        object.__setattr__(self, "keys", keys)
        if self.mode not in get_args(MergeMode):
            raise ConfigurationError(
                f"MergeSpec.mode must be one of {list(get_args(MergeMode))}, got {self.mode!r}."
            )
        for name in (*keys, self.sequence_by):
            if name is not None and (not isinstance(name, str) or not name):
                raise ConfigurationError(
                    f"MergeSpec column names must be non-empty strings, got {name!r}."
                )
            if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
                raise ConfigurationError(
                    f"Column {name!r} uses the reserved prefix {RESERVED_PREFIX!r}; "
                    "rename it in the batch.",
                    column=name,
                )
        if len(set(keys)) != len(keys):
            raise ConfigurationError(f"MergeSpec.keys has duplicates: {list(keys)}.")
        if self.mode == "append":
            if keys or self.sequence_by or self.delete_when:
                raise ConfigurationError(
                    "MergeSpec(mode='append') takes no keys, sequence_by or delete_when: "
                    "appended rows are never matched against the target."
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
            if self.mode != "upsert":
                raise ConfigurationError("delete_when is only valid with mode='upsert'.")
            if not isinstance(self.delete_when, str) or not self.delete_when.strip():
                raise ConfigurationError(
                    "delete_when must be a non-empty Spark SQL predicate, e.g. \"op = 'D'\"."
                )

    @property
    def required_columns(self) -> tuple[str, ...]:
        """Columns every batch must contain (keys, then ``sequence_by``)."""
        return (*self.keys, *((self.sequence_by,) if self.sequence_by else ()))

    def to_json(self) -> str:
        """Serialise to the JSON recorded in the staging table."""
        data = asdict(self)
        data["keys"] = list(self.keys)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MergeSpec:
        """Inverse of :meth:`to_json`."""
        data: dict[str, Any] = json.loads(text)
        return cls(**data)
