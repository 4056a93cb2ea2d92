"""Engine-free participants for testing the two-phase-commit core.

Two implementations of :class:`deltasink.core.protocol.Participant`:

* :class:`InMemoryParticipant` keeps its durable state in a :class:`MemoryStore`
  (target rows upserted by ``id``, the committed marker, the staged versions). Give a
  new participant the same store to "restart the process": dropping the participant
  object is a crash.
* :class:`FileRenameParticipant` is Flink's classic seed example (the ``ContentDump``
  file sink of ``TwoPhaseCommitSinkFunctionTest``): a batch of lines is staged as
  ``<root>/pending/<version>.txt`` (temp file + :func:`os.replace`), and publishing
  rewrites ``<root>/target.txt`` (data *and* marker, in its first line) to a temp file
  renamed over the old one, so data and marker change in one atomic step. Everything is
  read back from disk: a brand-new object over the same directory sees the same state.

Both pass the fault points of :mod:`deltasink._faults` that a real backend passes
(``stage.before_write``, ``stage.after_files``, ``stage.after_log_commit``,
``publish.after_target_commit``, ``discard.before_log_commit``), and both accept a
``fail_publish`` set of versions whose ``publish`` raises :class:`OSError` (a target
that refuses writes) without changing anything.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deltasink import _faults
from deltasink.core.protocol import CommitResult, LogState, Prepared, StagedVersion
from deltasink.errors import InvalidInputError, KeyColumnError

__all__ = [
    "DirectInMemoryParticipant",
    "FileRenameParticipant",
    "InMemoryParticipant",
    "MemoryStore",
    "Row",
]

Row = Mapping[str, Any]
Clock = Callable[[], float]


def _utc(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)


# -- in memory -----------------------------------------------------------------------


@dataclass
class MemoryStore:
    """The "durable storage" of :class:`InMemoryParticipant` (survives the object).

    Attributes:
        target: The target table: ``id -> row``; a publish upserts by ``id``.
        marker: The target's committed version for the app (Delta ``txn``), or ``None``.
        table_version: The target's table version: +1 per publish that changed it.
        staged: The staging table: ``version -> (rows, staged_at)``.
    """

    target: dict[Any, dict[str, Any]] = field(default_factory=dict)
    marker: int | None = None
    table_version: int | None = None
    staged: dict[int, tuple[list[dict[str, Any]], datetime]] = field(default_factory=dict)


class InMemoryParticipant:
    """A participant over a :class:`MemoryStore`; batches are lists of dicts with ``id``.

    Args:
        store: The storage; a new one when omitted. Share it to simulate a restart.
        clock: Seconds since the epoch, stamped on staged versions.
        fail_publish: Versions whose ``publish`` raises :class:`OSError`.
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        clock: Clock = time.time,
        fail_publish: set[int] | None = None,
    ) -> None:
        self.store = store if store is not None else MemoryStore()
        self.clock = clock
        self.fail_publish: set[int] = set(fail_publish or ())
        #: ``(versions, reason)`` of every successful ``discard`` call on this object.
        self.discards: list[tuple[tuple[int, ...], str]] = []
        #: Versions passed to ``stage`` / ``publish`` on this object, in call order.
        self.stage_calls: list[int] = []
        self.publish_calls: list[int] = []

    @property
    def target(self) -> dict[Any, dict[str, Any]]:
        return self.store.target

    @property
    def marker(self) -> int | None:
        return self.store.marker

    @property
    def staged(self) -> dict[int, tuple[list[dict[str, Any]], datetime]]:
        return self.store.staged

    def read_state(self) -> LogState:
        staged = tuple(
            StagedVersion(version, len(rows), staged_at)
            for version, (rows, staged_at) in sorted(self.store.staged.items())
        )
        return LogState(self.store.marker, staged)

    def stage(self, batch: Sequence[Row], version: int) -> StagedVersion:
        self.stage_calls.append(version)
        rows = [dict(row) for row in batch]
        for row in rows:
            if row.get("id") is None:
                raise KeyColumnError(
                    f"every row needs a non-null 'id', got {row!r}", version=version, column="id"
                )
        _faults.point("stage.before_write")
        staged_at = _utc(self.clock())
        _faults.point("stage.after_files")
        self.store.staged[version] = (rows, staged_at)
        _faults.point("stage.after_log_commit")
        return StagedVersion(version, len(rows), staged_at)

    def publish(self, staged: StagedVersion) -> CommitResult:
        self.publish_calls.append(staged.version)
        start = time.perf_counter()
        store = self.store
        if store.marker is not None and store.marker >= staged.version:
            return CommitResult(
                staged.version,
                "already_committed",
                rows=staged.rows,
                target_version=store.table_version,
            )
        if staged.version in self.fail_publish:
            raise OSError(f"target refuses writes (version {staged.version})")
        rows, _ = store.staged[staged.version]
        new_target = dict(store.target)
        inserted = updated = 0
        for row in rows:
            if row["id"] in new_target:
                updated += 1
            else:
                inserted += 1
            new_target[row["id"]] = dict(row)
        table_version = 0 if store.table_version is None else store.table_version + 1
        # One step: data, marker and table version change together.
        store.target, store.marker, store.table_version = new_target, staged.version, table_version
        _faults.point("publish.after_target_commit")
        return CommitResult(
            staged.version,
            "committed",
            rows=len(rows),
            target_version=table_version,
            rows_inserted=inserted,
            rows_updated=updated,
            rows_deleted=0,
            duration_s=time.perf_counter() - start,
        )

    def discard(self, versions: Sequence[int], *, reason: str) -> None:
        _faults.point("discard.before_log_commit")
        for version in versions:
            self.store.staged.pop(version, None)
        self.discards.append((tuple(versions), reason))


class DirectInMemoryParticipant(InMemoryParticipant):
    """:class:`InMemoryParticipant` that can also publish a batch unstaged
    (:class:`~deltasink.core.participant.SupportsDirectPublish`).

    Args:
        fail_stage: Versions whose ``stage_prepared`` raises :class:`OSError`.
        fail_after_commit: Versions whose publish raises after the target changed.
    """

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        fail_publish: set[int] | None = None,
        fail_stage: set[int] | None = None,
        fail_after_commit: set[int] | None = None,
    ) -> None:
        super().__init__(store, fail_publish=fail_publish)
        self.fail_stage = set(fail_stage or ())
        self.fail_after_commit = set(fail_after_commit or ())
        #: Versions published without being staged, in call order.
        self.direct_calls: list[int] = []

    def prepare(self, batch: Sequence[Row], version: int) -> Prepared:
        rows = [dict(row) for row in batch]
        if any(row.get("id") is None for row in rows):
            raise KeyColumnError("every row needs a non-null 'id'", version=version, column="id")
        return Prepared(version, len(rows), rows)

    def audit_prepared(self, prepared: Prepared) -> str | None:
        return None

    def stage_prepared(self, prepared: Prepared) -> StagedVersion:
        if prepared.version in self.fail_stage:
            raise OSError(f"staging refuses writes (version {prepared.version})")
        return self.stage(prepared.payload, prepared.version)

    def publish_prepared(self, prepared: Prepared) -> CommitResult:
        self.direct_calls.append(prepared.version)
        version = prepared.version
        if version in self.fail_publish:
            raise OSError(f"target refuses writes (version {version})")
        store = self.store
        for row in prepared.payload:
            store.target[row["id"]] = dict(row)
        store.marker = version
        store.table_version = 0 if store.table_version is None else store.table_version + 1
        if version in self.fail_after_commit:
            raise OSError(f"connection lost after the commit of version {version}")
        return CommitResult(
            version, "committed", rows=prepared.rows, target_version=store.table_version
        )


# -- file rename (Flink's ContentDump) ------------------------------------------------


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temp file next to ``path`` and rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class FileRenameParticipant:
    """Flink's file sink seed example: pending files renamed into place.

    Layout under ``root``:

    * ``pending/<version>.txt``: first line the ``staged_at`` epoch seconds, then one
      line per batch item. Temp files (``.<name>.<hex>.tmp``) are never read.
    * ``target.txt``: first line a JSON header ``{"marker": v, "table_version": n}``,
      then the published lines in publish order. Rewritten whole and renamed, so the
      lines and the marker always change together. Absent until the first publish.

    Args:
        root: The directory holding everything (created if absent).
        clock: Seconds since the epoch, stamped on staged versions.
        fail_publish: Versions whose ``publish`` raises :class:`OSError`.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        clock: Clock = time.time,
        fail_publish: set[int] | None = None,
    ) -> None:
        self.root = Path(root)
        self.pending_dir = self.root / "pending"
        self.target_path = self.root / "target.txt"
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.fail_publish: set[int] = set(fail_publish or ())
        self.discards: list[tuple[tuple[int, ...], str]] = []
        self.stage_calls: list[int] = []
        self.publish_calls: list[int] = []

    # reading back ----------------------------------------------------------------

    def pending_path(self, version: int) -> Path:
        return self.pending_dir / f"{version}.txt"

    def read_target(self) -> tuple[int | None, int | None, list[str]]:
        """``(marker, table_version, lines)`` of the target file."""
        try:
            text = self.target_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, None, []
        header, *lines = text.splitlines()
        meta = json.loads(header)
        return meta["marker"], meta["table_version"], lines

    def read_pending(self, version: int) -> tuple[float, list[str]]:
        """``(staged_at epoch seconds, lines)`` of one pending file."""
        first, *lines = self.pending_path(version).read_text(encoding="utf-8").splitlines()
        return float(first), lines

    def pending_versions_on_disk(self) -> list[int]:
        return sorted(int(p.stem) for p in self.pending_dir.glob("*.txt"))

    def read_state(self) -> LogState:
        marker, _, _ = self.read_target()
        staged = []
        for version in self.pending_versions_on_disk():
            staged_at, lines = self.read_pending(version)
            staged.append(StagedVersion(version, len(lines), _utc(staged_at)))
        return LogState(marker, tuple(staged))

    # the port --------------------------------------------------------------------

    def stage(self, batch: Sequence[str], version: int) -> StagedVersion:
        self.stage_calls.append(version)
        lines = list(batch)
        for line in lines:
            if not isinstance(line, str) or "\n" in line or "\r" in line:
                raise InvalidInputError(
                    f"batch items must be single-line strings, got {line!r}", version=version
                )
        _faults.point("stage.before_write")
        now = float(self.clock())
        final = self.pending_path(version)
        tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(f"{now!r}\n" + "".join(f"{line}\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        _faults.point("stage.after_files")
        os.replace(tmp, final)
        _faults.point("stage.after_log_commit")
        return StagedVersion(version, len(lines), _utc(now))

    def publish(self, staged: StagedVersion) -> CommitResult:
        self.publish_calls.append(staged.version)
        start = time.perf_counter()
        marker, table_version, lines = self.read_target()
        if marker is not None and marker >= staged.version:
            return CommitResult(
                staged.version, "already_committed", rows=staged.rows, target_version=table_version
            )
        if staged.version in self.fail_publish:
            raise OSError(f"target refuses writes (version {staged.version})")
        _, batch = self.read_pending(staged.version)
        new_version = 0 if table_version is None else table_version + 1
        header = json.dumps({"marker": staged.version, "table_version": new_version})
        _write_atomically(
            self.target_path, "".join(f"{line}\n" for line in [header, *lines, *batch])
        )
        _faults.point("publish.after_target_commit")
        return CommitResult(
            staged.version,
            "committed",
            rows=len(batch),
            target_version=new_version,
            rows_inserted=len(batch),
            rows_updated=0,
            rows_deleted=0,
            duration_s=time.perf_counter() - start,
        )

    def discard(self, versions: Sequence[int], *, reason: str) -> None:
        _faults.point("discard.before_log_commit")
        for version in versions:
            self.pending_path(version).unlink(missing_ok=True)
        self.discards.append((tuple(versions), reason))
