"""Where a version came from: the streaming query, batch and source positions recorded
with each target commit (SPEC: "A stream is an identity, not a counter").

A ``foreachBatch`` ``batch_id`` numbers the batches of one streaming query, i.e. of one
checkpoint: a new checkpoint starts again at 0. So each target commit records its
*origin* next to its ``txn`` marker, in the same commit (machine-readable JSON in the
commit's metadata, :func:`encode`):

* ``query``: the query's stable id, the one Spark keeps in
  ``<checkpointLocation>/metadata`` (the same across restarts from that checkpoint; a
  new checkpoint gets a new one). Inside ``foreachBatch`` classic Spark exposes it as
  the local property ``sql.streaming.queryId`` (``spark.jobGroup.id`` is the *run*
  id, new on every restart, so it is no identity);
* ``batch``: the micro-batch id, and ``base``: the version of batch 0 (``version =
  base + batch``; 0 unless the query resumed after another one, see :func:`resolve`);
* ``sources``: the batch's end positions, one per source, exactly as Spark wrote them to
  ``<checkpointLocation>/offsets/<batch>`` before the batch ran (Kafka
  ``{"topic": {"partition": offset}}``, Delta ``reservoirVersion``/``index``, file
  source ``logOffset`` plus the files of the batch);
* ``position``: for batch jobs, whatever JSON value they pass (a date, a file list).

:func:`resolve` applies the rule to a micro-batch: a batch of the query that committed
the current version maps to ``base + batch`` (its replay is a no-op); a batch of any
other query is a :class:`~deltasink.errors.CheckpointResetError` unless the caller
resumes, which maps it right after the committed version and records that base, so a
restart of the resumed query maps its batches the same way (derived from the log).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from deltasink.errors import CheckpointResetError, ReplayMismatchError

__all__ = [
    "BatchOrigin",
    "batch_files",
    "check_resume_start",
    "decode",
    "encode",
    "resolve",
]

#: The commit-metadata key of the origin (delta-rs custom metadata); the spark engine
#: appends `` origin=<json>`` to ``userMetadata`` instead (the only field it can set).
ORIGIN_KEY = "deltasink.origin"


@dataclass(frozen=True, kw_only=True)
class BatchOrigin:
    """The origin of one version (see the module docstring).

    Attributes:
        query_id: The streaming query's stable id, or ``None`` (no stream).
        batch_id: The micro-batch id, or ``None``.
        base: The version of the query's batch 0 (``version = base + batch_id``).
        sources: The batch's end positions, one per source, in Spark's own JSON.
        position: A batch job's own position (any JSON value), or ``None``.
        checkpoint: The checkpoint location, when known (for operators).
    """

    query_id: str | None = None
    batch_id: int | None = None
    base: int = 0
    sources: tuple[Any, ...] = ()
    position: Any = None
    checkpoint: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form recorded in the commit (empty fields left out)."""
        out: dict[str, Any] = {}
        if self.query_id is not None:
            out["query"] = self.query_id
        if self.batch_id is not None:
            out["batch"] = self.batch_id
            out["base"] = self.base
        if self.sources:
            out["sources"] = list(self.sources)
        if self.position is not None:
            out["position"] = self.position
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchOrigin:
        """The inverse of :meth:`to_dict`."""
        batch = data.get("batch")
        return cls(
            query_id=data.get("query"),
            batch_id=None if batch is None else int(batch),
            base=int(data.get("base", 0)),
            sources=tuple(data.get("sources") or ()),
            position=data.get("position"),
            checkpoint=data.get("checkpoint"),
        )


def encode(origin: BatchOrigin) -> str:
    """The compact JSON text recorded in the commit."""
    return json.dumps(origin.to_dict(), separators=(",", ":"), sort_keys=True)


def decode(value: Any) -> BatchOrigin | None:
    """An origin from commit metadata (JSON text or an already parsed object);
    ``None`` for anything else."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    try:
        return BatchOrigin.from_dict(value)
    except (TypeError, ValueError):
        return None


# -- reading a checkpoint (Spark's own files) ---------------------------------------------


# -- the rule -------------------------------------------------------------------------------


def resolve(
    origin: BatchOrigin,
    *,
    committed: int | None,
    committed_origin: BatchOrigin | None,
    resume: bool,
    app_id: str,
    table: str,
) -> tuple[int, BatchOrigin]:
    """The version of micro-batch ``origin`` and the origin to record with it.

    * Nothing committed: ``base`` 0 (the batch id is the version).
    * The current version was committed by the same query: its recorded ``base``; a
      replay of it must cover the same source positions.
    * By another query (or by no query: a batch job): refused, unless ``resume``,
      which puts the batch right after the committed version (``base = committed + 1 -
      batch``) and records that base for the new query's later batches and restarts.
      A version committed before origins were recorded (none) keeps the old rule
      (batch id = version).

    Raises:
        CheckpointResetError: Another query committed the current version.
        ReplayMismatchError: A replay of the committed version with other positions.
    """
    batch = origin.batch_id
    assert batch is not None
    if committed is None:
        return batch, replace(origin, base=0)
    known = committed_origin is not None and committed_origin.query_id is not None
    if known and committed_origin is not None and committed_origin.query_id == origin.query_id:
        version = committed_origin.base + batch
        if (
            version == committed
            and committed_origin.batch_id == batch
            and committed_origin.sources
            and origin.sources
            and _positions(committed_origin.sources) != _positions(origin.sources)
        ):
            raise ReplayMismatchError(
                f"micro-batch {batch} of query {origin.query_id} replays version {version} "
                f"of app {app_id!r}, but its source positions {list(origin.sources)} differ "
                f"from the committed ones {list(committed_origin.sources)}: the checkpoint's "
                "offsets were changed. Nothing was written. Restore the checkpoint, or "
                "resume a new query after the committed version (resume=True).",
                table=table,
                app_id=app_id,
                version=version,
            )
        return version, replace(origin, base=committed_origin.base)
    if resume:
        base = committed + 1 - batch
        return committed + 1, replace(origin, base=base)
    if not known:
        # Committed before origins were recorded, or by a writer that is no stream (a
        # batch job): no identity to compare, the batch id is the version.
        return batch, replace(origin, base=0)
    by = committed_origin.query_id if committed_origin is not None else None
    who = f"streaming query {by}"
    raise CheckpointResetError(
        f"micro-batch {batch} of streaming query {origin.query_id} cannot be written to "
        f"{table}: for app {app_id!r}, the versions up to {committed} were committed by {who}. "
        "Its batch ids number another checkpoint's batches (a deleted, reset or changed "
        "checkpoint), so it is not a replay. Nothing was written. Ways out: resume right "
        "after version "
        f"{committed} (foreach_batch_writer(..., resume=True), with the new query started "
        f"from the positions `deltasink offsets {table} --app {app_id}` prints); restore "
        "the old checkpoint; or give the new query its own app_id.",
        committed_by=by,
        query_id=origin.query_id,
        table=table,
        app_id=app_id,
        version=batch,
    )


def batch_files(origin: BatchOrigin) -> set[str]:
    """The files a file source read for ``origin``'s batch (every file source)."""
    return {f for s in origin.sources if isinstance(s, dict) for f in (s.get("files") or ())}


def check_resume_start(
    origin: BatchOrigin, committed_files: set[str], *, committed: int, app_id: str, table: str
) -> None:
    """Refuse a resuming batch that re-reads files the target already holds (a new
    query started from the beginning of its input, not where the target stands).

    Raises:
        CheckpointResetError: Some of the batch's files were committed already.
    """
    again = sorted(batch_files(origin) & committed_files)
    if again:
        shown = ", ".join(again[:3]) + (f" and {len(again) - 3} more" if len(again) > 3 else "")
        raise CheckpointResetError(
            f"micro-batch {origin.batch_id} of streaming query {origin.query_id} resumes "
            f"after version {committed} of app {app_id!r} on {table}, but it reads files "
            f"the target already holds ({shown}): the new query starts at the beginning "
            "of its input, not where the target stands. Nothing was written. Move the "
            f"files `deltasink offsets {table} --app {app_id}` lists out of the input "
            "path, delete this new checkpoint (its first batch was planned from the old "
            "input) and start again with resume=True.",
            query_id=origin.query_id,
            table=table,
            app_id=app_id,
            version=origin.batch_id,
        )


# -- resuming ----------------------------------------------------------------------------------


def _positions(sources: Sequence[Any]) -> list[Any]:
    """Positions compared on a replay: Spark's offsets (the file lists follow them)."""
    return [
        {k: v for k, v in s.items() if k != "files"} if isinstance(s, dict) else s for s in sources
    ]
