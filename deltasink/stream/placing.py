"""The one rule that maps a micro-batch to a version (SPEC: "A stream is an identity,
not a counter"; "A lifecycle is a model"). Engine-free: it decides from what a writer
holds (:class:`Held`, read from the two Delta logs) and the batch's origin
(:mod:`deltasink.ops.origin`).

A writer (``app_id``) *holds* its committed versions and its pending (staged, not yet
published) ones; its **newest version** is the highest of them. A micro-batch ``b`` of
streaming query ``Q``:

1. **Nothing held**: version ``b`` (``base`` 0).
2. **The newest version was written by Q** (its recorded origin names Q): version
   ``base + b``, with Q's recorded ``base``.

   * Above the newest version: Q's next batch, written.
   * At or below it: a *replay*, silent (nothing written again; a pending version is
     published), but only if that version recorded this very batch, Q's batch ``b``
     with the same source positions (offsets and a file source's files). Anything else
     (a checkpoint restored from an older copy that re-planned the batch, changed
     offsets) is :class:`~deltasink.errors.ReplayMismatchError`, nothing written.
3. **The newest version was written by anything else**: another query (a deleted,
   reset or changed checkpoint), a batch job (``write()``, with or without a
   ``position``), a ``pre_commit`` without origin: :class:`~deltasink.errors.CheckpointResetError`,
   nothing written. Batch ids number Q's batches, not the writer's versions.
4. **Legacy**: no version held records any origin at all (a target written before
   origins existed): the batch id is the version, as before.

``resume=True`` is the way out of 2's mismatch (file sources only) and of 3: the batch
becomes the version right after the newest one held (pending versions are published
first, in the same call), that ``base`` is recorded with ``resumed``, and the rows of
files the writer already holds are left out (a file source re-planned from the start of
its input). Q's later batches and restarts map with the recorded ``base``, with or
without ``resume``; rows of held files stay left out for a query that resumed. For
sources without files (Kafka, Delta) ``resume`` cannot check where the query starts:
start it from the positions ``deltasink offsets`` prints.

Mixing batch jobs and streams on one ``app_id`` follows from 3: a stream's next batch
after a batch job's version is refused until it resumes. Give each its own ``app_id``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from deltasink.errors import CheckpointResetError, ReplayMismatchError
from deltasink.ops.origin import BatchOrigin, batch_files, same_positions

__all__ = ["Decision", "Held", "resolve"]


@dataclass(frozen=True)
class Held:
    """What one writer holds, as :func:`resolve` reads it.

    Attributes:
        committed: The committed version (``None``: none).
        pending: The pending versions, ascending.
        last_origin: The origin recorded for the newest version held (``None``: none
            recorded, or not readable).
        recorded: Whether any version held records an origin (else the legacy rule).
        origin_at: The origin recorded for a version held (for replays below the
            newest version).
    """

    committed: int | None
    pending: tuple[int, ...]
    last_origin: BatchOrigin | None
    recorded: bool
    origin_at: Callable[[int], BatchOrigin | None]

    @property
    def last(self) -> int | None:
        """The newest version held."""
        return self.pending[-1] if self.pending else self.committed


@dataclass(frozen=True)
class Decision:
    """Where a micro-batch goes.

    Attributes:
        version: Its version.
        origin: The origin to record with it (``base``, ``resumed`` set).
        replay: ``version`` already holds this very batch: nothing is written again
            (a pending one is published).
        leave_out_held: Leave out the rows of files the writer already holds.
    """

    version: int
    origin: BatchOrigin
    replay: bool = False
    leave_out_held: bool = False


def resolve(origin: BatchOrigin, held: Held, *, resume: bool, app_id: str, table: str) -> Decision:
    """The version of micro-batch ``origin`` (the module docstring's rule).

    Raises:
        CheckpointResetError: The newest version held was not written by this query.
        ReplayMismatchError: A batch of this query maps to a version held that does not
            record this batch with these positions.
    """
    batch = origin.batch_id
    assert batch is not None
    last = held.last
    if last is None:
        return Decision(batch, replace(origin, base=0))
    newest = held.last_origin
    if newest is not None and newest.query_id is not None and newest.query_id == origin.query_id:
        version = newest.base + batch
        carried = replace(origin, base=newest.base, resumed=newest.resumed)
        if version > last:
            return Decision(version, carried, leave_out_held=newest.resumed)
        recorded = newest if version == last else held.origin_at(version)
        if (
            recorded is not None
            and recorded.query_id == origin.query_id
            and recorded.batch_id == batch
            and same_positions(recorded.sources, origin.sources)
        ):
            return Decision(version, carried, replay=True)
        if resume and batch_files(origin):
            return _after(origin, last)
        raise _mismatch(origin, version, recorded, last=last, app_id=app_id, table=table)
    if resume:
        return _after(origin, last)
    if newest is None and not held.recorded:
        return Decision(batch, replace(origin, base=0))  # legacy: the batch id is the version
    raise _reset(origin, held, app_id=app_id, table=table)


def _after(origin: BatchOrigin, last: int) -> Decision:
    """Resume: right after the newest version held."""
    version = last + 1
    return Decision(
        version,
        replace(origin, base=version - (origin.batch_id or 0), resumed=True),
        leave_out_held=True,
    )


def _writer(origin: BatchOrigin | None) -> str:
    if origin is None:
        return (
            "a writer that recorded no stream identity (a batch job's write() or "
            "pre_commit(), or a stream on Spark Connect without checkpoint=)"
        )
    if origin.query_id is not None:
        return f"streaming query {origin.query_id}"
    return f"a batch job (position {origin.position!r})"


def _pending(held: Held) -> str:
    if not held.pending:
        return ""
    return (
        f" Versions {list(held.pending)} are staged and not yet published; a resumed "
        "query publishes them first."
    )


def _reset(origin: BatchOrigin, held: Held, *, app_id: str, table: str) -> CheckpointResetError:
    newest = held.last_origin
    by = newest.query_id if newest is not None else None
    return CheckpointResetError(
        f"micro-batch {origin.batch_id} of streaming query {origin.query_id} cannot be "
        f"written to {table}: for app {app_id!r}, the versions up to {held.last} were "
        f"committed by {_writer(newest)}.{_pending(held)} Its batch ids number this query's batches "
        "(a new, deleted, reset or changed checkpoint), not the writer's versions, so it is "
        "not a replay. Nothing was written. Ways out: resume right after version "
        f"{held.last} (foreach_batch_writer(..., resume=True), the templates' --resume: a "
        "file source's rows of files the target already holds are left out; start other "
        f"sources from the positions `deltasink offsets {table} --app {app_id}` prints); "
        "restore the old checkpoint; or give this query its own app_id.",
        committed_by=by,
        query_id=origin.query_id,
        table=table,
        app_id=app_id,
        version=origin.batch_id,
    )


def _mismatch(
    origin: BatchOrigin,
    version: int,
    recorded: BatchOrigin | None,
    *,
    last: int,
    app_id: str,
    table: str,
) -> ReplayMismatchError:
    if recorded is None:
        found = f"version {version} records no origin"
    elif recorded.query_id != origin.query_id or recorded.batch_id != origin.batch_id:
        found = f"version {version} was written by {_writer(recorded)} batch {recorded.batch_id}"
    else:
        found = (
            f"its source positions {list(origin.sources)} differ from the ones version "
            f"{version} recorded, {list(recorded.sources)}"
        )
    way = (
        "run it with resume=True (the templates' --resume): rows of files the target "
        f"already holds are left out and the rest becomes version {last + 1}"
        if batch_files(origin)
        else "start a new checkpoint from the positions "
        f"`deltasink offsets {table} --app {app_id}` prints, with resume=True"
    )
    return ReplayMismatchError(
        f"micro-batch {origin.batch_id} of streaming query {origin.query_id} maps to "
        f"version {version} of app {app_id!r} on {table}, but {found}. The checkpoint was "
        "restored from an older copy or its "
        "offsets were changed, so skipping the batch as a replay could drop rows. Nothing "
        f"was written. Ways out: restore the checkpoint that wrote version {last}; or {way}.",
        table=table,
        app_id=app_id,
        version=version,
    )
