"""Reading a Spark streaming checkpoint: a micro-batch's source offsets and files, the
query's stable id, the origin of a ``foreachBatch`` batch (:func:`stream_origin`), and the
point a query resumes from after a version (:func:`resume_point`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deltasink.errors import ConfigurationError

from .origin import BatchOrigin

__all__ = ["ResumePoint", "checkpoint_location", "read_checkpoint", "resume_point", "stream_origin"]


#: Delta's source offset index meaning "every file of that version was read".
_DELTA_END_INDEX = 2**63 - 1


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
