"""Reading a Spark streaming checkpoint: a micro-batch's source offsets and files, the
query's stable id, the origin of a ``foreachBatch`` batch (:func:`stream_origin`), and the
point a query resumes from is :mod:`deltasink.stream.resume`'s.

The files are Spark 4's own layout (checked against a checkpoint classic PySpark 4.2
writes, ``tests/test_stream_reset_jvm.py``): ``metadata`` (``{"id": <query id>}``),
``offsets/<batch>`` (``v1``, the batch's metadata line, then one line per source:
its end offset as JSON, or ``-``), ``commits/<batch>`` (written after the batch), and a
file source's own log ``sources/<i>/<logOffset>`` (``v1`` then one
``{"path", "timestamp", "batchId"}`` line per file; every tenth batch compacted into
``<n>.compact`` holding the earlier entries too). Auto Loader (``cloudFiles``) keeps its
files in RocksDB under ``sources/<i>``; its offset (``{"seqNum", "sourceVersion",
"lastBackfillStartTimeMs", ...}``) carries no file list, so :func:`row_files_needed`
tells the caller to take the batch's files from its rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from deltasink.errors import ConfigurationError
from deltasink.ops.origin import BatchOrigin

__all__ = [
    "checkpoint_location",
    "is_auto_loader",
    "read_checkpoint",
    "row_files_needed",
    "stream_origin",
    "with_row_files",
]


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


def _compacted(checkpoint: str, source: int) -> list[int]:
    """The compacted files of a file source's log (``<n>.compact``), ascending."""
    folder = f"{checkpoint}/sources/{source}"
    path = _local(folder)
    try:
        if path is not None:
            names = os.listdir(path)
        else:
            from pyarrow import fs

            filesystem, inner = fs.FileSystem.from_uri(folder)
            infos = filesystem.get_file_info(fs.FileSelector(inner, allow_not_found=True))
            names = [info.base_name for info in infos]
    except FileNotFoundError:
        return []
    return sorted(int(n.split(".")[0]) for n in names if n.endswith(".compact") and n[0].isdigit())


def _log_batch(
    checkpoint: str, source: int, n: int, compacted: Callable[[], list[int]]
) -> list[str] | None:
    """The files of entry ``n`` of a file source's log: its own file ``<n>``, or the
    first compacted file at or after it (Spark compacts every tenth entry into
    ``<n>.compact`` and deletes the earlier files later)."""
    base = f"{checkpoint}/sources/{source}"
    text = _read_text(f"{base}/{n}")
    if text is None:
        holder = next((c for c in compacted() if c >= n), None)
        text = None if holder is None else _read_text(f"{base}/{holder}.compact")
    if text is None:
        return None
    return [
        str(entry["path"])
        for entry in map(json.loads, _log_entry(text))
        if int(entry.get("batchId", n)) == n
    ]


def _files_of(checkpoint: str, source: int, start: int, end: int) -> list[str] | None:
    """The files a file source read in a micro-batch covering its log entries ``start``
    (excluded) to ``end`` (included): usually one entry, more after a crash between
    the source's log and the offsets file."""
    listed: list[list[int]] = []

    def compacted() -> list[int]:  # listed once, and only when a plain entry is gone
        if not listed:
            listed.append(_compacted(checkpoint, source))
        return listed[0]

    files: list[str] = []
    for n in range(start + 1, end + 1):
        found = _log_batch(checkpoint, source, n, compacted)
        if found is None:
            return None
        files.extend(found)
    return files


def _log_offsets(root: str, batch_id: int) -> list[Any] | None:
    """The source offsets of ``offsets/<batch_id>`` (``None`` per ``-``), or ``None``
    when the file does not exist."""
    text = _read_text(f"{root}/offsets/{batch_id}")
    if text is None:
        return None
    lines = _log_entry(text)[1:]  # the first line is the batch's metadata
    return [None if line.strip() in ("", "-") else json.loads(line) for line in lines]


def read_checkpoint(checkpoint: str, batch_id: int) -> tuple[str | None, tuple[Any, ...]]:
    """The query id of ``checkpoint`` (its ``metadata`` file) and the end positions of
    micro-batch ``batch_id`` (its ``offsets/<batch_id>`` file, written by Spark before
    the batch ran), one per source; a file source's entry gains the batch's ``files``
    (its log's entries after the previous batch's ``logOffset``, up to its own).

    Raises:
        ConfigurationError: The checkpoint has no metadata or no offsets for the batch
            (not a checkpoint, or not this query's).
    """
    root = checkpoint.rstrip("/")
    meta = _read_text(f"{root}/metadata")
    offsets = _log_offsets(root, batch_id)
    if meta is None or offsets is None:
        raise ConfigurationError(
            f"{checkpoint} holds no streaming checkpoint for micro-batch {batch_id} "
            "(no metadata or offsets file): pass the query's checkpointLocation."
        )
    query_id = json.loads(meta.strip().splitlines()[0]).get("id")
    previous: list[Any] | None = []
    if batch_id > 0 and any(isinstance(o, dict) and set(o) == {"logOffset"} for o in offsets):
        previous = _log_offsets(root, batch_id - 1)  # a file source's batch starts there
    sources: list[Any] = []
    for index, offset in enumerate(offsets):
        if isinstance(offset, dict) and set(offset) == {"logOffset"}:
            end = int(offset["logOffset"])
            start = end - 1  # the previous batch's offsets purged: this entry alone
            if previous is not None:
                before = previous[index] if index < len(previous) else None
                start = int(before["logOffset"]) if isinstance(before, dict) else -1
            files = _files_of(root, index, start, end)
            sources.append({**offset, "files": files} if files is not None else offset)
        else:
            sources.append(offset)
    return (None if query_id is None else str(query_id)), tuple(sources)


def is_auto_loader(offset: Any) -> bool:
    """Whether a source offset is Auto Loader's (``cloudFiles``)."""
    return isinstance(offset, dict) and "seqNum" in offset and "lastBackfillStartTimeMs" in offset


def row_files_needed(origin: BatchOrigin) -> bool:
    """Whether ``origin`` has a file source whose files the checkpoint does not list
    (Auto Loader): they must come from the micro-batch's rows (:func:`with_row_files`)."""
    return any(is_auto_loader(s) and "files" not in s for s in origin.sources)


def with_row_files(origin: BatchOrigin, files: Sequence[str]) -> BatchOrigin:
    """``origin`` with ``files`` (read from the micro-batch's rows) as the files of its
    Auto Loader sources."""
    listed = sorted(set(files))
    return replace(
        origin,
        sources=tuple(
            {**s, "files": listed} if is_auto_loader(s) and "files" not in s else s
            for s in origin.sources
        ),
    )


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


def checkpoint_location(value: str | os.PathLike[str] | None) -> str | None:
    """A checkpoint location as text (``None`` stays)."""
    return None if value is None else os.fspath(value)
