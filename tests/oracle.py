"""An independent model of what a target must hold, written from docs/guarantees.md
("Coalescing is invisible") and SPEC.md, not from the implementation.

Two parts, both plain Python over lists of dicts:

* :class:`Fold` applies committed batches to a model target, one version at a time:

  - within a batch, one row per key: with ``sequence_by`` the highest sequence wins,
    a tie goes to the later row (delete rows included); without it keys are unique;
  - ``upsert``: the row replaces the key's row or inserts it; a delete row removes the
    key and is never inserted; with ``sequence_by`` a row takes effect only if the
    target's sequence is null or not higher (``>=``); no tombstones: a later version's
    older row of a deleted key inserts it again;
  - ``upsert`` with ``update_columns`` (``except_columns``): a row that updates an
    existing key sets only those columns (every non-key column but those); the
    others keep the target's values; an inserted row still brings every column;
  - ``upsert`` with ``when_not_matched_by_source="delete"``: after the batch, every
    target row whose key is not among the batch's keys (any row of the batch counts)
    and for which the condition is true is deleted; an empty batch deletes all of them;
  - ``replace``: the target rows whose ``replace_by`` values occur in the batch (and
    satisfy the ``replace_where`` predicate; with it alone, every row satisfying it)
    are deleted, then every batch row is appended;
  - with ``null_safe_keys`` a key column may be null, and null equals null: a key
    with nulls is one key like any other (Python's ``None == None``);
  - ``insert``: only absent keys are inserted; ``append``: every row is appended;
  - ``scd2``: every row is an event of its key at its sequence (a delete row a delete
    event); a later version's event at a key's existing sequence replaces it. The
    target is rebuilt from all events: sorted by sequence, an upsert event is a row
    valid from its sequence to the next event's (open, and current, when last); a
    delete event is a row only when the event before it is not an upsert (or there is
    none): keys and sequence only, valid from and to its own sequence, not current;
  - a batch without a column leaves it null on inserted rows and unchanged on updated
    ones (schema evolution);
  - float keys (every keyed mode): -0.0 is the key 0.0 and is stored as 0.0; a batch
    with a NaN key is refused (:meth:`Protocol.refuses_key`): nothing is staged or applied;
  - the target's column types: the first version applied defines each column's type;
    with schema evolution a later version adds its new columns with their types.

* :class:`Protocol` is the two-phase commit's bookkeeping (SPEC's vocabulary):
  ``pre_commit`` of a version ≤ committed or already staged stages nothing;
  ``commit(n)`` applies every staged version ≤ n in ascending order; ``recover``
  applies all of them; ``abort`` drops one; a crash loses nothing staged.
  Accepted means publishable (docs/guarantees.md): ``pre_commit`` refuses (stages
  nothing) a batch that committing one by one would refuse: against the schema the
  target will have once the versions pending before it are applied (on a new target
  the first pending version defines it; with evolution each may add columns), a
  column it does not have (without evolution) or of another type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


@dataclass
class Fold:
    """The model target of one table, fed by any number of writers in commit order."""

    mode: str
    keys: tuple[str, ...]
    sequence_by: str | None = None
    delete_column: str | None = None  # rows whose value here is "D" are deletes
    rows: dict[tuple[Any, ...], Row] = field(default_factory=dict)
    appended: list[Row] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    update_columns: tuple[str, ...] | None = None
    except_columns: tuple[str, ...] | None = None
    #: ``when_not_matched_by_source="delete"``: the condition as a Python predicate on
    #: a target row (``lambda row: True`` without one); ``None``: "ignore".
    delete_absent: Callable[[Row], bool] | None = None
    replace_by: tuple[str, ...] | None = None
    #: ``replace_where`` as a Python predicate on a target row.
    replace_where: Callable[[Row], bool] | None = None
    #: ``scd2``: the (valid from, valid to, is current) column names.
    history: tuple[str, str, str] | None = None
    #: ``scd2``: per key, its events: sequence -> the row (``None``: a delete).
    events: dict[tuple[Any, ...], dict[Any, Row | None]] = field(default_factory=dict)
    #: Column -> its type's name, once the target exists (``None``: not created yet).
    types: dict[str, str] | None = None
    evolve: bool = False

    @property
    def keyed(self) -> bool:
        """Whether rows are matched by :attr:`keys` (not ``append``/``replace``)."""
        return self.mode not in ("append", "replace")

    def refuses(self, batch: Sequence[Row]) -> bool:
        """Whether the batch has a NaN key (refused by name, nothing written)."""
        return self.keyed and any(
            isinstance(row[k], float) and row[k] != row[k] for row in batch for k in self.keys
        )

    def _normal(self, row: Row) -> Row:
        """``row`` with its float keys' -0.0 as 0.0 (``0.0 == -0.0`` in Python)."""
        row = dict(row)
        for k in self.keys:
            if isinstance(row[k], float) and row[k] == 0:
                row[k] = 0.0
        return row

    def _one_per_key(self, batch: Sequence[Row]) -> list[Row]:
        if self.sequence_by is None:
            return list(batch)
        chosen: dict[tuple[Any, ...], Row] = {}
        for row in batch:  # later rows win ties: >=
            key = tuple(row[k] for k in self.keys)
            if key not in chosen or row[self.sequence_by] >= chosen[key][self.sequence_by]:
                chosen[key] = row
        return list(chosen.values())

    def apply(
        self,
        batch: Sequence[Row],
        columns: Sequence[str] = (),
        types: Mapping[str, str] | None = None,
    ) -> None:
        """Apply one committed version whose schema has ``columns`` (schema evolution
        adds new ones to the target even when the batch has no rows) of ``types``."""
        self.types = after(self.types, types or {}, evolve=self.evolve)
        for name in [*columns, *(n for row in batch for n in row)]:
            if name not in self.columns:
                self.columns.append(name)
        assert not self.refuses(batch), "a NaN key is refused before it is staged"
        if self.keyed:
            batch = [self._normal(row) for row in batch]
        if self.mode == "append":
            self.appended.extend(dict(r) for r in batch)
            return
        if self.mode == "scd2":
            assert self.history is not None
            assert self.sequence_by is not None
            for name in self.history:
                if name not in self.columns:
                    self.columns.append(name)
            seen = set()
            for row in batch:
                key = tuple(row[k] for k in self.keys)
                assert (key, row[self.sequence_by]) not in seen, "duplicate event in a batch"
                seen.add((key, row[self.sequence_by]))
                is_delete = self.delete_column is not None and row[self.delete_column] == "D"
                self.events.setdefault(key, {})[row[self.sequence_by]] = (
                    None if is_delete else dict(row)
                )
            return
        if self.mode == "replace":
            by = self.replace_by
            slices = {tuple(r[c] for c in by) for r in batch} if by is not None else set()
            where = self.replace_where
            self.appended = [
                r
                for r in self.appended
                if not (
                    (by is None or tuple(r.get(c) for c in by) in slices)
                    and (where is None or where(r))
                )
            ]
            self.appended.extend(dict(r) for r in batch)
            return
        present = {tuple(row[k] for k in self.keys) for row in batch}
        absent = [
            key
            for key, row in self.rows.items()
            if self.delete_absent is not None and key not in present and self.delete_absent(row)
        ]
        for key in absent:
            del self.rows[key]
        for row in self._one_per_key(batch):
            key = tuple(row[k] for k in self.keys)
            is_delete = self.delete_column is not None and row[self.delete_column] == "D"
            current = self.rows.get(key)
            if current is None:
                if not is_delete:
                    self.rows[key] = dict(row)
                continue
            if self.mode == "insert":
                continue
            seq = self.sequence_by
            if seq is not None and current.get(seq) is not None and row[seq] < current[seq]:
                continue  # an older row: ignored
            if is_delete:
                del self.rows[key]
            else:  # a column the batch does not have keeps its value (schema evolution)
                self.rows[key] = {**current, **self._updates(row)}

    def _updates(self, row: Row) -> Row:
        """The part of ``row`` an update writes."""
        if self.update_columns is not None:
            return {c: v for c, v in row.items() if c in self.update_columns}
        if self.except_columns is not None:
            return {c: v for c, v in row.items() if c not in self.except_columns}
        return row

    def _history(self) -> list[Row]:
        assert self.history is not None
        assert self.sequence_by is not None
        start, end, current = self.history
        rows = []
        for key, events in self.events.items():
            order = sorted(events)
            for i, seq in enumerate(order):
                following = order[i + 1] if i + 1 < len(order) else None
                row = events[seq]
                if row is not None:
                    rows.append({**row, start: seq, end: following, current: following is None})
                elif i == 0 or events[order[i - 1]] is None:
                    rows.append(
                        {
                            **dict(zip(self.keys, key, strict=True)),
                            self.sequence_by: seq,
                            start: seq,
                            end: seq,
                            current: False,
                        }
                    )
        return rows

    def expected(self) -> list[Row]:
        """The model target's rows, every column present (null where never written)."""
        if self.mode == "scd2":
            rows = self._history()
        elif self.mode in ("append", "replace"):
            rows = self.appended
        else:
            rows = list(self.rows.values())
        return [{c: r.get(c) for c in self.columns} for r in rows]


def after(
    current: Mapping[str, str] | None, types: Mapping[str, str], *, evolve: bool
) -> dict[str, str]:
    """The target's column types after a version of ``types`` is applied."""
    if current is None:
        return dict(types)
    new = {c: t for c, t in types.items() if evolve and c not in current}
    return {**current, **new}


def refused(
    current: Mapping[str, str] | None, types: Mapping[str, str], *, evolve: bool
) -> str | None:
    """The column a version of ``types`` is refused for, applied to a target of
    ``current`` types (``None``: it creates the target), or ``None``."""
    if current is None:
        return None
    for column, kind in types.items():
        if column not in current:
            if not evolve:
                return column
        elif current[column] != kind:
            return column
    return None


@dataclass
class Protocol:
    """One writer's staged and committed versions, feeding a shared :class:`Fold`."""

    fold: Fold
    committed: int | None = None
    staged: dict[int, tuple[list[Row], tuple[str, ...], dict[str, str]]] = field(
        default_factory=dict
    )

    def refuses_key(self, version: int, batch: Sequence[Row]) -> bool:
        """Whether ``pre_commit(version, batch)`` is refused (a NaN key): only a version
        that would be staged is validated (a replay or duplicate is dropped first)."""
        fresh = (self.committed is None or version > self.committed) and version not in self.staged
        return fresh and self.fold.refuses(batch)

    def refuses(self, version: int, types: Mapping[str, str]) -> str | None:
        """The column ``pre_commit`` of ``version`` with ``types`` is refused for (a
        duplicate never is: it stages nothing), or ``None``."""
        if (self.committed is not None and version <= self.committed) or version in self.staged:
            return None
        current = self.fold.types
        for pending in sorted(self.staged):
            current = after(current, self.staged[pending][2], evolve=self.fold.evolve)
        return refused(current, types, evolve=self.fold.evolve)

    def pre_commit(
        self,
        version: int,
        batch: Sequence[Row],
        columns: Sequence[str] = (),
        types: Mapping[str, str] | None = None,
    ) -> bool:
        """Whether the version was staged (False: a duplicate, dropped)."""
        if self.committed is not None and version <= self.committed:
            return False
        if version in self.staged:
            return False
        assert self.refuses(version, types or {}) is None, "check refuses() first"
        self.staged[version] = (list(batch), tuple(columns), dict(types or {}))
        return True

    def commit(self, upto: int) -> list[int]:
        done = []
        for version in sorted(v for v in self.staged if v <= upto):
            rows, columns, types = self.staged.pop(version)
            assert refused(self.fold.types, types, evolve=self.fold.evolve) is None, (
                "accepted means publishable"
            )
            self.fold.apply(rows, columns, types)
            self.committed = version
            done.append(version)
        return done

    def recover(self) -> list[int]:
        return self.commit(max(self.staged, default=-1))

    def write(
        self,
        version: int,
        batch: Sequence[Row],
        columns: Sequence[str] = (),
        types: Mapping[str, str] | None = None,
    ) -> list[int]:
        self.pre_commit(version, batch, columns, types)
        return self.commit(version)

    def abort(self, version: int) -> bool:
        return self.staged.pop(version, None) is not None

    @property
    def pending(self) -> list[int]:
        return sorted(self.staged)
