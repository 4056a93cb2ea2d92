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
  base + batch``; 0 unless the query resumed after another version, see
  :mod:`deltasink.stream.placing`), and ``resumed`` when it did;
* ``sources``: the batch's end positions, one per source, exactly as Spark wrote them to
  ``<checkpointLocation>/offsets/<batch>`` before the batch ran (Kafka
  ``{"topic": {"partition": offset}}``, Delta ``reservoirVersion``/``index``, file
  source ``logOffset``), a file source's entry with the ``files`` of the batch (from the
  checkpoint's file log; for Auto Loader, whose file log Spark keeps in RocksDB, from the
  micro-batch's ``_metadata.file_path``);
* ``position``: for batch jobs, whatever JSON value they pass (a date, a file list);
* ``earlier``: when several pending versions were published in one commit (coalesced),
  the origins of the versions before the last one, so their positions and files stay on
  record.

The rule that maps a micro-batch to a version with these records is
:mod:`deltasink.stream.placing`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

__all__ = [
    "ORIGIN_KEY",
    "BatchOrigin",
    "batch_files",
    "combine",
    "decode",
    "encode",
    "held_files",
    "normal_path",
    "origin_for",
    "same_positions",
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
        resumed: The query's ``base`` was set by a resume: its batches may read files
            the target already holds, whose rows are left out.
        earlier: The origins of the versions coalesced before this one into the same
            target commit, ascending (empty for a commit of one version).
    """

    query_id: str | None = None
    batch_id: int | None = None
    base: int = 0
    sources: tuple[Any, ...] = ()
    position: Any = None
    checkpoint: str | None = field(default=None, compare=False)
    resumed: bool = False
    earlier: tuple[BatchOrigin, ...] = ()

    @property
    def version(self) -> int | None:
        """The version a stream's origin belongs to (``base + batch_id``)."""
        return None if self.batch_id is None else self.base + self.batch_id

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form recorded in the commit (empty fields left out)."""
        out: dict[str, Any] = {}
        if self.query_id is not None:
            out["query"] = self.query_id
        if self.batch_id is not None:
            out["batch"] = self.batch_id
            out["base"] = self.base
        if self.resumed:
            out["resumed"] = True
        if self.sources:
            out["sources"] = list(self.sources)
        if self.position is not None:
            out["position"] = self.position
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint
        if self.earlier:
            out["earlier"] = [o.to_dict() for o in self.earlier]
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
            resumed=bool(data.get("resumed", False)),
            earlier=tuple(
                cls.from_dict(o) for o in data.get("earlier") or () if isinstance(o, Mapping)
            ),
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


def combine(origins: Sequence[str | None]) -> str | None:
    """The origin of one target commit publishing several versions (coalesced), from
    their encoded origins in ascending order: the last one's, with the others as
    ``earlier`` (so no version's positions and files leave the record); ``None`` when
    none recorded one."""
    decoded = [decode(o) if o is not None else None for o in origins]
    if not any(o is not None for o in decoded):
        return None
    last = decoded[-1] or BatchOrigin()
    earlier = [
        e for o in decoded[:-1] if o is not None for e in (*o.earlier, replace(o, earlier=()))
    ]
    return encode(replace(last, earlier=(*earlier, *last.earlier)))


def origin_for(origin: BatchOrigin | None, version: int, *, last: int) -> BatchOrigin | None:
    """The origin recorded for ``version`` by a commit whose own origin is ``origin`` and
    whose marker is ``last``: ``origin`` itself for ``last``, else the stream origin in
    its ``earlier`` that maps to ``version``."""
    if origin is None:
        return None
    if version == last:
        return replace(origin, earlier=())
    return next((o for o in origin.earlier if o.version == version), None)


def batch_files(origin: BatchOrigin) -> set[str]:
    """The files a file source read for ``origin``'s own batch (every file source)."""
    return {f for s in origin.sources if isinstance(s, dict) for f in (s.get("files") or ())}


def held_files(origins: Iterable[BatchOrigin]) -> set[str]:
    """The files the versions of ``origins`` (commit origins, ``earlier`` included)
    delivered, as :func:`normal_path` spells them."""
    out: set[str] = set()
    for origin in origins:
        for o in (origin, *origin.earlier):
            out.update(normal_path(f) for f in batch_files(o))
    return out


def normal_path(path: str) -> str:
    """One spelling of a file's location for comparisons: Spark writes
    ``file:///tmp/a b.json`` in a file source's log, ``file:/tmp/a%20b.json`` as
    ``_metadata.file_path`` and ``file:///tmp/a%20b.json`` from ``input_file_name()``;
    all three become ``/tmp/a b.json``. Other schemes keep theirs (``s3://b/k``)."""
    text = unquote(path)
    if text.startswith("file:"):
        text = "/" + text[len("file:") :].lstrip("/")
    return text


def same_positions(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two batches cover the same source positions: Spark's offsets, and a file
    source's files (as sets: the log's order is Spark's business)."""

    def key(sources: Sequence[Any]) -> list[Any]:
        return [
            {k: sorted(map(normal_path, v)) if k == "files" else v for k, v in s.items()}
            if isinstance(s, dict)
            else s
            for s in sources
        ]

    return key(a) == key(b)
