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
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from deltasink.errors import CheckpointResetError, ConfigurationError, ReplayMismatchError

__all__ = [
    "BatchOrigin",
    "ResumePoint",
    "batch_files",
    "check_resume_start",
    "decode",
    "encode",
    "read_checkpoint",
    "resolve",
    "resume_point",
    "stream_origin",
]

#: The commit-metadata key of the origin (delta-rs custom metadata); the spark engine
#: appends `` origin=<json>`` to ``userMetadata`` instead (the only field it can set).
ORIGIN_KEY = "deltasink.origin"

#: Delta's source offset index meaning "every file of that version was read".
_DELTA_END_INDEX = 2**63 - 1


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


def _local(location: str) -> str | None:
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    return location if "://" not in location else None


def _read_text(location: str) -> str | None:
    """The text of a file of the checkpoint, or ``None`` if it does not exist."""
    path = _local(location)
    try:
        if path is not None:
            with open(path, encoding="utf-8") as f:
                return f.read()
        from pyarrow import fs

        filesystem, inner = fs.FileSystem.from_uri(location)
        with filesystem.open_input_stream(inner) as stream:
            return bytes(stream.read()).decode("utf-8")
    except FileNotFoundError:
        return None


def _log_entry(text: str) -> list[str]:
    """The lines after the ``v1`` header of a Spark metadata-log file."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError(f"not a Spark metadata-log file (header {lines[:1]!r})")
    return lines[1:]


def _files_of(checkpoint: str, source: int, log_offset: int) -> list[str] | None:
    """The files a file source read in its batch ``log_offset`` (its own metadata log
    ``sources/<i>/<n>``, or the compacted ``<n>.compact`` that holds it too)."""
    base = f"{checkpoint.rstrip('/')}/sources/{source}/{log_offset}"
    text = _read_text(base)
    if text is None:
        text = _read_text(base + ".compact")
    if text is None:
        return None
    files = []
    for line in _log_entry(text):
        entry = json.loads(line)
        if int(entry.get("batchId", log_offset)) == log_offset:
            files.append(str(entry["path"]))
    return files


def read_checkpoint(checkpoint: str, batch_id: int) -> tuple[str | None, tuple[Any, ...]]:
    """The query id of ``checkpoint`` (its ``metadata`` file) and the end positions of
    micro-batch ``batch_id`` (its ``offsets/<batch_id>`` file, written by Spark before
    the batch ran), one per source; a file source's entry gains the batch's ``files``.

    Raises:
        ConfigurationError: The checkpoint has no metadata or no offsets for the batch
            (not a checkpoint, or not this query's).
    """
    root = checkpoint.rstrip("/")
    meta = _read_text(f"{root}/metadata")
    offsets = _read_text(f"{root}/offsets/{batch_id}")
    if meta is None or offsets is None:
        raise ConfigurationError(
            f"{checkpoint} holds no streaming checkpoint for micro-batch {batch_id} "
            "(no metadata or offsets file): pass the query's checkpointLocation."
        )
    query_id = json.loads(meta.strip().splitlines()[0]).get("id")
    lines = _log_entry(offsets)[1:]  # the first line is the batch's metadata
    sources: list[Any] = []
    for index, line in enumerate(lines):
        if line.strip() in ("", "-"):
            sources.append(None)
            continue
        offset = json.loads(line)
        if isinstance(offset, dict) and set(offset) == {"logOffset"}:
            files = _files_of(root, index, int(offset["logOffset"]))
            sources.append({**offset, "files": files} if files is not None else offset)
        else:
            sources.append(offset)
    return (None if query_id is None else str(query_id)), tuple(sources)


def _checkpoint_of(session: Any, query_id: str) -> str | None:
    """A classic driver's checkpoint root for the running query ``query_id``: the
    micro-batch's session is a clone without the query, the driver's own has it."""
    try:
        from pyspark.sql import SparkSession

        driver = SparkSession._instantiatedSession or session
        query = driver.streams.get(query_id)
        if query is None:
            return None
        return str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception:  # not classic, or an API that moved: positions stay unknown
        return None


_warned: set[int] = set()


def _warn_no_identity() -> None:
    """Say once per process that a Spark Connect micro-batch without ``checkpoint``
    carries no query identity (a Connect session has no SparkContext, so no
    ``sql.streaming.queryId`` local property): batch ids are then versions, and a new
    checkpoint's batch 0 would be skipped as already committed instead of refused."""
    if os.getpid() in _warned:
        return
    _warned.add(os.getpid())
    import logging

    logging.getLogger("deltasink").warning(
        "foreachBatch on Spark Connect without checkpoint=: the streaming query's id "
        "(the local property sql.streaming.queryId) is not readable without a "
        "SparkContext, so no origin is recorded and a reset checkpoint cannot be told "
        "apart from a replay. Pass foreach_batch_writer(..., checkpoint=<the query's "
        "checkpointLocation>)."
    )


def stream_origin(df: Any, batch_id: int, *, checkpoint: str | None = None) -> BatchOrigin | None:
    """The origin of micro-batch ``batch_id`` of ``df``'s streaming query, or ``None``
    when nothing identifies the query (a plain table passed to ``foreach_batch``, or a
    Spark Connect session without ``checkpoint``).

    ``checkpoint`` (the query's ``checkpointLocation``) is read for the query id and the
    batch's positions; without it, a classic session gives the id
    (``sql.streaming.queryId``) and, through the driver's running query, the checkpoint.

    Raises:
        ConfigurationError: ``checkpoint`` given but not a checkpoint of this batch.
    """
    query_id: str | None = None
    session = getattr(df, "sparkSession", None)
    if checkpoint is None and session is not None:
        try:
            context = session.sparkContext
            query_id = context.getLocalProperty("sql.streaming.queryId")
        except Exception:  # Spark Connect: no SparkContext, no local properties
            _warn_no_identity()
            query_id = None
        if query_id is None:
            return None
        checkpoint = _checkpoint_of(session, query_id)
        if checkpoint is None:  # the identity alone: positions unknown
            return BatchOrigin(query_id=query_id, batch_id=batch_id)
    if checkpoint is None:
        return None
    found, sources = read_checkpoint(checkpoint, batch_id)
    return BatchOrigin(
        query_id=query_id or found,
        batch_id=batch_id,
        sources=sources,
        checkpoint=checkpoint,
    )


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
        f"{table}: app {app_id!r}'s versions up to {committed} were committed by {who}. "
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


def _positions(sources: Sequence[Any]) -> list[Any]:
    """Positions compared on a replay: Spark's offsets (the file lists follow them)."""
    return [
        {k: v for k, v in s.items() if k != "files"} if isinstance(s, dict) else s for s in sources
    ]


# -- resuming ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResumePoint:
    """Where the target stands for one writer, and where a new query starts.

    Attributes:
        version: The committed version (``None``: nothing committed).
        target_version: The target's Delta version holding it.
        origin: Its recorded origin (``None`` if none was recorded).
        starting: Per source, what a new query starts from: ``{"kind": "kafka",
            "startingOffsets": "<json>"}``, ``{"kind": "delta", "startingVersion": n}``,
            ``{"kind": "files", "files": [...]}`` (every file committed so far:
            keep them out of the new query's input), or ``{"kind": "unknown"}``.
        exact: Whether ``origin`` is the committed version's own (false when later
            versions were committed without one, e.g. by ``recover()``: the positions
            are then behind the committed version).
    """

    version: int | None
    target_version: int | None = None
    origin: BatchOrigin | None = None
    starting: tuple[dict[str, Any], ...] = ()
    exact: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "version": self.version,
            "target_version": self.target_version,
            "origin": None if self.origin is None else self.origin.to_dict(),
            "starting": list(self.starting),
            "exact": self.exact,
        }


def _starting(source: Any, index: int, files: Sequence[str]) -> dict[str, Any]:
    if isinstance(source, dict) and "reservoirVersion" in source:
        version, at = int(source["reservoirVersion"]), int(source.get("index", -1))
        out: dict[str, Any] = {"kind": "delta", "source": index}
        if at == -1:
            out["startingVersion"] = version
        else:
            out["startingVersion"] = version + 1
            if at != _DELTA_END_INDEX:
                out["note"] = (
                    f"the last batch ended inside version {version} (file index {at}); "
                    f"startingVersion {version + 1} skips that version's later files"
                )
        return out
    if isinstance(source, dict) and "logOffset" in source:
        return {"kind": "files", "source": index, "files": list(files)}
    if (
        isinstance(source, dict)
        and source
        and all(
            isinstance(p, dict) and all(isinstance(o, int) for o in p.values())
            for p in source.values()
        )
    ):
        return {
            "kind": "kafka",
            "source": index,
            "startingOffsets": json.dumps(source, separators=(",", ":"), sort_keys=True),
        }
    return {"kind": "unknown", "source": index, "offset": source}


def resume_point(
    version: int | None,
    target_version: int | None,
    origin: BatchOrigin | None,
    earlier: Sequence[BatchOrigin] = (),
) -> ResumePoint:
    """The :class:`ResumePoint` of a committed version with ``origin``; ``earlier``:
    the origins of the versions committed before it (newest first), for the files a
    file source already delivered (by any query: a new one must skip them all)."""
    if origin is None:
        return ResumePoint(version, target_version)
    starting = []
    for index, source in enumerate(origin.sources):
        files: list[str] = []
        for o in [origin, *earlier]:
            if index < len(o.sources):
                entry = o.sources[index]
                if isinstance(entry, dict):
                    files.extend(entry.get("files") or ())
        starting.append(_starting(source, index, sorted(set(files))))
    return ResumePoint(version, target_version, origin, tuple(starting))


def checkpoint_location(value: str | os.PathLike[str] | None) -> str | None:
    """A checkpoint location as text (``None`` stays)."""
    return None if value is None else os.fspath(value)
