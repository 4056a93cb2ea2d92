"""The steps of one attempt of a target commit on delta-rs: the target read beside the
fencing check, or beside a :class:`Gate`'s checks (:func:`read_fenced`), whose errors
come first (:func:`settled`); then, after the target was read
(:meth:`.publish.TargetWriter._apply_once`), whether the markers already cover it
(:func:`covered`), the batch shaped for its mode (:func:`mode_batch`), and the write
(:func:`write`: the mode's, then the marker alone when delta-rs made no commit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable
from deltalake.schema import Schema as DeltaSchema

from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.tables import arrow_schema, begin, together, txn_version
from deltasink.errors import CommitError
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.shapes.partitions import string_partitions
from deltasink.shapes.schema import align_to_target
from deltasink.shapes.spec import MergeSpec

from .grouping import StaleGroup
from .modes import WRITE_MODE, ModeBatch

__all__ = ["Gate", "GateError", "covered", "mode_batch", "read_fenced", "settled", "write"]

_T = TypeVar("_T")


class GateError(Exception):
    """A :class:`Gate`'s checks failed (``error``: how); raised through the attempt
    (not a commit conflict: never retried) and unwrapped by whoever made the gate."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Gate:
    """Checks that must pass before a target commit, started on a pool thread when the
    gate is made (a direct write's publish intent, then its fencing check), so their
    round trips overlap the first attempt's: that attempt reads the target meanwhile
    and waits for them right before its commit (:meth:`wait`; a MERGE through its
    source, which delta-rs reads after the target's files and before it commits). A
    later attempt calls the gate as its fencing check: :meth:`wait`, then ``fence``.

    Args:
        checks: The checks, run once, on a pool thread.
        fence: The fencing check of the later attempts.
    """

    def __init__(self, checks: Callable[[], object], fence: Callable[[], object]) -> None:
        self._pending = begin(checks)
        self._fence = fence
        #: No attempt has taken the gate yet (:func:`read_fenced`).
        self.first = True

    def wait(self) -> None:
        """Wait for the checks. Raises :class:`GateError` if they failed."""
        error = self._pending.exception()
        if error is not None:
            raise GateError(error) from error

    def settle(self) -> None:
        """Wait for the checks, whatever their outcome."""
        self._pending.exception()

    def __call__(self) -> None:
        self.wait()
        self._fence()


def read_fenced(
    before_attempt: Callable[[], object] | None, read: Callable[[], _T], *, apart: bool
) -> tuple[_T, Callable[[], None] | None]:
    """The target ``read`` for an attempt, beside its fencing check ``before_attempt``
    (:func:`~deltasink.backends.deltalog.tables.together`), and the gate the attempt
    must pass before its commit: a :class:`Gate`'s :meth:`~Gate.wait` on its first
    attempt (its checks still running), else ``None`` (the check done)."""
    if not isinstance(before_attempt, Gate) or not before_attempt.first:
        return together(before_attempt, read, apart=apart), None
    before_attempt.first = False
    try:
        return read(), before_attempt.wait
    except BaseException:
        before_attempt.wait()  # never leave its checks running unobserved
        raise


def settled(gate: Callable[[], None] | None, call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)``, then ``gate`` waited for: its error first, whether or not
    ``call`` failed (a failed gate is why a MERGE reading its source failed)."""
    if gate is None:
        return call(*args)
    try:
        result = call(*args)
    except BaseException:
        gate()
        raise
    gate()
    return result


def covered(
    table: DeltaTable,
    uri: str,
    app_id: str,
    version: int,
    versions: Sequence[int],
    markers: Mapping[str, int] | None,
) -> bool:
    """Whether the marker of ``app_id`` in ``table`` covers ``version`` (already
    committed: nothing to write).

    Raises:
        StaleGroup: One of a group commit's carried ``markers`` (app id -> version) is in
            the target already (the group then leaves it out).
        CommitError: The marker moved inside the coalesced ``versions``: another writer
            committed part of the run, which applied whole would apply that part twice
            (the caller goes one by one).
    """
    marker = txn_version(table, app_id)
    if marker is not None and marker >= version:
        return True
    carried = {a: m for a in markers or {} if (m := txn_version(table, a)) is not None}
    if any(carried[a] >= v for a, v in (markers or {}).items() if a in carried):
        raise StaleGroup(f"a carried version is in {uri} already: {carried}")
    if marker is not None and versions and marker >= versions[0]:
        raise CommitError(
            f"the target's marker moved to {marker}, inside the coalesced versions "
            f"{list(versions)}",
            table=uri,
            app_id=app_id,
            version=version,
        )
    return False


def mode_batch(
    table: DeltaTable,
    data: pa.Table,
    spec: MergeSpec,
    props: CommitProperties,
    uri: str,
    before_rewrite: Callable[[DeltaTable], None],
    gate: Callable[[], None] | None = None,
) -> ModeBatch:
    """``data`` as its mode writes it into ``table``: the ``delete_when`` flag and the
    sequence guard split off, the values aligned to the target's schema (evolving it
    when the spec says so), the string partition columns whose ``''`` is null,
    ``before_rewrite`` (the INT96 refusal, :class:`~.timestamps.Int96Guard`) and the
    ``gate`` to pass before its commit.

    Raises:
        SchemaMismatchError: The values do not fit the target
            (:func:`~deltasink.shapes.schema.align_to_target`).
    """
    flag = data.column(DELETE_COLUMN) if DELETE_COLUMN in data.column_names else None
    guard = data.column(GUARD_COLUMN) if GUARD_COLUMN in data.column_names else None
    values = data.drop_columns([c for c in (DELETE_COLUMN, GUARD_COLUMN) if c in data.column_names])
    values = align_to_target(
        values,
        arrow_schema(table),
        evolve=spec.schema_evolution,
        table=uri,
        non_null_mask=None if flag is None else pc.invert(flag),
    )
    blank = string_partitions(arrow_schema(table), table.metadata().partition_columns)
    return ModeBatch(table, values, flag, guard, spec, props, uri, blank, before_rewrite, gate)


def write(batch: ModeBatch, before: int) -> dict[str, Any]:
    """``batch`` written by its mode (:data:`~.modes.WRITE_MODE`) into its table, read
    at version ``before``; when delta-rs made no commit (an empty batch, or only older
    ``sequence_by`` rows), the marker committed alone so the version counts. Returns
    delta-rs's metrics. Its gate is passed before any commit: a MERGE waits for it as it
    reads its source (:func:`~.modes.gated`), every other write before it starts."""
    table = batch.table
    if batch.gate is not None and batch.spec.mode not in ("upsert", "insert"):
        batch.gate()
    metrics = WRITE_MODE[batch.spec.mode](batch)
    if table.version() == before:
        if batch.gate is not None:
            batch.gate()  # passed already, unless the write read no source
        # delta-rs makes no commit when nothing changed (an empty batch, or only
        # older sequence_by rows): commit the marker alone so the version counts.
        table.create_write_transaction(
            [],
            mode="append",
            schema=DeltaSchema.from_arrow(arrow_schema(table)),
            commit_properties=batch.props,
            post_commithook_properties=post_commit_hooks(table),
        )
        table.update_incremental()
    return metrics
