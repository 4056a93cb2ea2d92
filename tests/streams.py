"""Spark's file-source streaming, the parts that decide what a ``foreachBatch`` call
receives, for in-process lifecycle tests (``tests/test_stream_lifecycle.py``) and the
issue's paths (``tests/test_stream_paths.py``); the real thing beside it is
``tests/test_stream_reset_jvm.py``, which also checks that this writes the checkpoint
classic PySpark 4.2 writes.

* :class:`Landing`: input files (JSON lines, real files), each carrying known ids: the
  oracle.
* :class:`FileStream`: one query over a checkpoint directory in Spark's own layout,
  written in Spark's order: ``metadata`` (``{"id"}``); for a new batch, the file
  source's log ``sources/0/<logOffset>`` (``v1`` + one ``{"path", "timestamp",
  "batchId"}`` line per file, paths as ``file:///...``), then ``offsets/<batch>``
  (``v1``, the batch metadata line, ``{"logOffset": n}``); ``commits/<batch>`` only
  after the ``foreachBatch`` function returned. Every tenth log entry is compacted
  into ``<n>.compact`` (``(n + 1) % 10 == 0``) and the plain entries it covers deleted,
  as Spark does once its clean-up delay has passed. On a restart, the last planned batch
  without a commit runs again over the same files; new files are planned oldest first,
  ``max_files`` at a time.
* The micro-batch is an Arrow table with Spark's ``_metadata`` struct
  (``file_path`` spelled ``file:/...``, as Spark's ``_metadata.file_path`` does), the
  shape ``df.select("*", "_metadata").toArrow()`` has.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

__all__ = ["FileStream", "Landing", "micro_batch"]

#: Spark's batch metadata line (its ``conf`` shortened: deltasink reads none of it).
BATCH_META = {"batchWatermarkMs": 0, "batchTimestampMs": 1795708648148, "conf": {}}
COMPACT_INTERVAL = 10


@dataclass
class Landing:
    """An input directory: files land, each with its own ids (the oracle's rows)."""

    root: Path
    rows_per_file: dict[str, list[int]] = field(default_factory=dict)  # uri -> ids
    order: list[str] = field(default_factory=list)  # arrival order (oldest first)

    def add(self, rows: int) -> str:
        """A new file of ``rows`` rows (ids unique over the landing); its URI."""
        n = len(self.order)
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"part-{n:05d}.json"
        ids = [n * 100 + r for r in range(rows)]
        path.write_text("".join(json.dumps({"id": i, "value": f"f{n}"}) + "\n" for i in ids))
        uri = path.resolve().as_uri()  # file:///..., as Spark's file source logs it
        self.rows_per_file[uri] = ids
        self.order.append(uri)
        return uri

    def ids(self) -> list[int]:
        return sorted(i for ids in self.rows_per_file.values() for i in ids)


def micro_batch(landing: Landing, files: list[str]) -> pa.Table:
    """The micro-batch of ``files``: ``id``, ``value`` and Spark's ``_metadata``."""
    ids, values, paths = [], [], []
    for uri in files:
        for i in landing.rows_per_file[uri]:
            ids.append(i)
            values.append(f"f{i // 100}")
            paths.append("file:" + uri.removeprefix("file://"))  # _metadata.file_path
    metadata = pa.StructArray.from_arrays([pa.array(paths, pa.string())], names=["file_path"])
    return pa.table({"id": pa.array(ids, pa.int64()), "value": values, "_metadata": metadata})


class FileStream:
    """One streaming query (a checkpoint directory) over a :class:`Landing`."""

    def __init__(self, checkpoint: Path, landing: Landing, *, max_files: int | None) -> None:
        self.root = checkpoint
        self.landing = landing
        self.max_files = max_files
        meta = checkpoint / "metadata"
        if not meta.exists():
            checkpoint.mkdir(parents=True, exist_ok=True)
            meta.write_text(json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":")) + "\n")
        self.query_id = str(json.loads(meta.read_text())["id"])

    # -- reading the checkpoint, as Spark does on a (re)start ------------------------

    def _numbers(self, folder: str) -> list[int]:
        path = self.root / folder
        if not path.is_dir():
            return []
        return sorted(int(p.name) for p in path.iterdir() if p.name.isdigit())

    def _log(self) -> dict[int, list[str]]:
        """The file source's log: entry -> files (compacted files included)."""
        folder = self.root / "sources" / "0"
        entries: dict[int, list[str]] = {}
        if not folder.is_dir():
            return entries
        for p in sorted(folder.iterdir(), key=lambda p: p.name):
            if not p.name.split(".")[0].isdigit():
                continue
            for line in p.read_text().splitlines()[1:]:
                entry = json.loads(line)
                files = entries.setdefault(int(entry["batchId"]), [])
                if entry["path"] not in files:
                    files.append(entry["path"])
        return entries

    def _log_offset(self, batch: int) -> int:
        lines = (self.root / "offsets" / str(batch)).read_text().splitlines()
        return int(json.loads(lines[2])["logOffset"])

    def next_batch(self) -> tuple[int, list[str]] | None:
        """The batch Spark runs next (planning it first if it is new): the last planned
        batch again when it has no commit, else new files; ``None`` when none."""
        offsets, commits = self._numbers("offsets"), self._numbers("commits")
        last = offsets[-1] if offsets else -1
        log = self._log()
        if last >= 0 and last not in commits:
            return last, self.files_of(last, log)
        seen = {f for files in log.values() for f in files}
        new = [f for f in self.landing.order if f not in seen]
        latest = max(log, default=-1)
        end = self._log_offset(last) if last >= 0 else -1
        if not new and latest <= end:
            return None
        if new:
            latest += 1
            take = new if self.max_files is None else new[: self.max_files]
            self._write_log(latest, take, log)
        batch = last + 1
        lines = ["v1", json.dumps(BATCH_META, separators=(",", ":"))]
        lines.append(json.dumps({"logOffset": latest}, separators=(",", ":")))
        (self.root / "offsets").mkdir(exist_ok=True)
        (self.root / "offsets" / str(batch)).write_text("\n".join(lines))
        return batch, self.files_of(batch, self._log())

    def plan_log_only(self) -> None:
        """Spark dies while planning: the file log's entry for the new files is
        written, the offsets file is not (on restart that entry joins the next batch)."""
        offsets, commits = self._numbers("offsets"), self._numbers("commits")
        if offsets and offsets[-1] not in commits:
            return  # a planned batch runs again first: nothing new is planned
        log = self._log()
        seen = {f for files in log.values() for f in files}
        new = [f for f in self.landing.order if f not in seen]
        if new:
            take = new if self.max_files is None else new[: self.max_files]
            self._write_log(max(log, default=-1) + 1, take, log)

    def files_of(self, batch: int, log: dict[int, list[str]]) -> list[str]:
        end = self._log_offset(batch)
        start = self._log_offset(batch - 1) if batch > 0 else -1
        return [f for n in range(start + 1, end + 1) for f in log.get(n, [])]

    def _write_log(self, n: int, files: list[str], log: dict[int, list[str]]) -> None:
        folder = self.root / "sources" / "0"
        folder.mkdir(parents=True, exist_ok=True)
        stamp = 1_700_000_000_000 + n

        def line(path: str, batch: int) -> str:
            entry = {"path": path, "timestamp": stamp, "batchId": batch}
            return json.dumps(entry, separators=(",", ":"))

        if (n + 1) % COMPACT_INTERVAL == 0:
            every = [line(f, b) for b in sorted(log) for f in log[b]] + [line(f, n) for f in files]
            (folder / f"{n}.compact").write_text("\n".join(["v1", *every]))
            for p in folder.iterdir():  # Spark deletes them after its clean-up delay
                if p.name.isdigit() and int(p.name) < n:
                    p.unlink()
        else:
            (folder / str(n)).write_text("\n".join(["v1", *(line(f, n) for f in files)]))

    def commit(self, batch: int) -> None:
        """``commits/<batch>``: Spark records the batch done, after ``foreachBatch``."""
        (self.root / "commits").mkdir(exist_ok=True)
        (self.root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')

    # -- operators -------------------------------------------------------------------

    def copy_to(self, where: Path) -> None:
        """A backup of the checkpoint, as it is now."""
        shutil.rmtree(where, ignore_errors=True)
        shutil.copytree(self.root, where)
