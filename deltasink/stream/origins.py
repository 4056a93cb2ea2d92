"""What a writer's versions recorded of their stream (:class:`StreamOrigins`, read from
both Delta logs and remembered between batches): what the rule placing a micro-batch
(:mod:`deltasink.stream.placing`) reads, and where a new query resumes
(``DeltaSink.offsets``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from deltasink.core.committables import CommitReport, LogState, Placement
from deltasink.errors import CheckpointResetError
from deltasink.input.files import empty_like, file_rows, row_count
from deltasink.ops.history import HistoryEntry
from deltasink.ops.origin import (
    BatchOrigin,
    batch_files,
    decode,
    encode,
    held_files,
    normal_path,
    origin_for,
)
from deltasink.stream.checkpoint import row_files_needed
from deltasink.stream.placing import Decision, Held, resolve
from deltasink.stream.resume import ResumePoint, resume_point

__all__ = ["StreamOrigins"]

logger = logging.getLogger("deltasink")


class StreamOrigins:
    """The origins one writer's versions recorded: its target commits' (read through
    ``history``) and its pending versions' stage commits' (``staged_origin``).

    Committed versions never change, so what was read of them is remembered for the
    life of the sink; pending ones are read each time (an operator may abort them).

    Args:
        target: The target (for messages).
        app_id: The writer (for messages).
        history: The writer's target commits, newest first, at most ``limit`` of them
            (``None``: all), as :meth:`~deltasink.DeltaSink.history` returns them.
        staged_origin: The encoded origin a pending version's stage commit recorded.
    """

    def __init__(
        self,
        *,
        target: str,
        app_id: str,
        history: Callable[[int | None], list[HistoryEntry]],
        staged_origin: Callable[[int], str | None],
    ) -> None:
        self.target = target
        self.app_id = app_id
        self._history = history
        self._staged_origin = staged_origin
        # Committed version -> the origin recorded for it (None: none), as read or written.
        self._known: dict[int, BatchOrigin | None] = {}
        self._recorded = False  # some committed version recorded an origin
        self._unrecorded: int | None = None  # none recorded through this committed version
        # The files the committed versions delivered (normalized), through a version.
        self._files: tuple[int, set[str]] | None = None

    # -- what the writer holds -------------------------------------------------------

    def held(self, state: LogState) -> Held:
        """What the writer holds, for :func:`~deltasink.stream.placing.resolve`."""
        committed = state.committed_version
        pending = tuple(s.version for s in state.pending)
        last = pending[-1] if pending else committed
        last_origin = None if last is None else self.origin_at(last, committed)
        recorded = last_origin is not None or self._any_recorded(state)
        return Held(
            committed,
            pending,
            last_origin,
            recorded,
            lambda version: self.origin_at(version, committed),
        )

    def origin_at(self, version: int, committed: int | None) -> BatchOrigin | None:
        """The origin recorded for a version the writer holds (``None``: none)."""
        if committed is None or version > committed:
            return decode(self._staged_origin(version))
        if version in self._known:
            return self._known[version]
        for limit in (64, None):
            entries = self._history(limit)
            self._learn(entries)
            if version in self._known or (entries and entries[-1].version < version):
                break
        # Not on record (an expired log, a marker without a commit of ours): none.
        return self._known.setdefault(version, None)

    def _learn(self, entries: list[HistoryEntry]) -> None:
        for entry in entries:
            for version in entry.versions:
                self._known.setdefault(
                    version, origin_for(entry.origin, version, last=entry.version)
                )
            self._recorded = self._recorded or entry.origin is not None

    def _any_recorded(self, state: LogState) -> bool:
        """Whether any version held recorded an origin (else the legacy rule applies)."""
        committed = state.committed_version
        if not self._recorded and committed is not None and self._unrecorded != committed:
            self._learn(self._history(None))
            self._unrecorded = None if self._recorded else committed
        return self._recorded or any(
            self._staged_origin(s.version) is not None for s in state.pending
        )

    def files_held(self, state: LogState) -> set[str]:
        """Every file (normalized) a file source delivered to a version the writer
        holds: committed ones (remembered, read incrementally) and pending ones."""
        committed = state.committed_version
        files: set[str] = set()
        if committed is not None:
            if self._files is None or self._files[0] > committed:
                entries = self._history(None)
                self._learn(entries)
                files = held_files(e.origin for e in entries if e.origin is not None)
            else:
                through, files = self._files
                if through < committed:
                    for limit in (16, 256, None):
                        entries = self._history(limit)
                        if limit is None or (entries and entries[-1].version <= through):
                            break
                    self._learn(entries)
                    newer = [e.origin for e in entries if e.version > through and e.origin]
                    files = files | held_files(newer)
            self._files = (committed, files)
        pending = [decode(self._staged_origin(s.version)) for s in state.pending]
        return files | held_files(o for o in pending if o is not None)

    def written(self, decision: Decision | None, report: CommitReport) -> None:
        """After a write: remember the origin of the version just committed."""
        if decision is not None and report.committed_version == decision.version:
            self._known[decision.version] = decision.origin
            self._recorded = True

    # -- placing a micro-batch ---------------------------------------------------------

    def placer(
        self, df: Any, origin: BatchOrigin, *, resume: bool, decided: list[Decision]
    ) -> Callable[[LogState], Placement]:
        """For the core's ``write``: where micro-batch ``df`` of ``origin`` goes, given
        the state it read (appended to ``decided`` too)."""

        def place(state: LogState) -> Placement:
            decision = resolve(
                origin, self.held(state), resume=resume, app_id=self.app_id, table=self.target
            )
            decided.append(decision)
            batch = df
            if decision.leave_out_held and row_files_needed(decision.origin):
                raise self._files_unknown(decision.origin)
            if decision.leave_out_held and batch_files(decision.origin):
                batch = self._leave_out(df, decision.origin, self.files_held(state))
            return Placement(decision.version, encode(decision.origin), batch, decision.replay)

        return place

    def _files_unknown(self, origin: BatchOrigin) -> CheckpointResetError:
        """Resuming an Auto Loader stream whose micro-batch does not say its files."""
        return CheckpointResetError(
            f"micro-batch {origin.batch_id} of streaming query {origin.query_id} resumes "
            f"app {self.app_id!r} on {self.target} from Auto Loader, whose checkpoint does "
            "not list its files, and its rows do not say which file they came from (no "
            "_metadata.file_path; input_file_name() unavailable), so the rows of files the "
            "target already holds cannot be left out. Nothing was written. Select the "
            'file metadata in the stream (.select("*", "_metadata")) and run it again.',
            query_id=origin.query_id,
            table=self.target,
            app_id=self.app_id,
            version=origin.batch_id,
        )

    def _leave_out(self, df: Any, origin: BatchOrigin, held: set[str]) -> Any:
        """``df`` without the rows of the files the writer holds (counted and logged).

        Raises:
            CheckpointResetError: Some of the batch's files are held, others not, and its
                rows cannot be told apart by file.
        """
        files = {normal_path(f) for f in batch_files(origin)}
        again = files & held
        if not again:
            return df
        shown = ", ".join(sorted(again)[:3]) + (
            f" and {len(again) - 3} more" if len(again) > 3 else ""
        )
        if again == files:
            batch, rows = row_count(df)
            batch = empty_like(batch)
        else:
            split = file_rows(df)
            if split is None:
                raise CheckpointResetError(
                    f"micro-batch {origin.batch_id} of streaming query {origin.query_id} "
                    f"reads files app {self.app_id!r} already holds on {self.target} "
                    f"({shown}) beside new ones, and its rows do not say which file they "
                    "came from (no _metadata.file_path; input_file_name() unavailable or "
                    "empty), so the held rows cannot be left out. Nothing was written. "
                    'Select the file metadata in the stream (.select("*", "_metadata")), '
                    "or move the held files out of the input (`deltasink offsets "
                    f"{self.target} --app {self.app_id} --json` lists them).",
                    query_id=origin.query_id,
                    table=self.target,
                    app_id=self.app_id,
                    version=origin.batch_id,
                )
            drop = {raw for raw in split.counts if normal_path(raw) in held}
            rows = sum(split.counts[raw] for raw in drop)
            batch = split.without(drop)
        logger.info(
            "app %r: micro-batch %s of streaming query %s resumed after the target: left "
            "out %d row(s) of %d file(s) the target already holds (%s)",
            self.app_id,
            origin.batch_id,
            origin.query_id,
            rows,
            len(again),
            shown,
        )
        return batch

    # -- resuming ----------------------------------------------------------------------

    def resume_point(self, state: LogState) -> ResumePoint:
        """Where a new query continues right after the newest version held (see
        :meth:`~deltasink.DeltaSink.offsets`)."""
        committed = state.committed_version
        pending = tuple(s.version for s in state.pending)
        staged = [
            o for s in reversed(state.pending) if (o := decode(self._staged_origin(s.version)))
        ]
        entries = self._history(None) if committed is not None else []
        self._learn(entries)
        target_version = next((e.target_version for e in entries if e.version == committed), None)
        last = pending[-1] if pending else committed
        own = None if last is None else self.origin_at(last, committed)
        recorded = staged + [e.origin for e in entries if e.origin is not None]
        if own is not None:
            return resume_point(
                committed, target_version, own, recorded, pending=pending, exact=True
            )
        newest = next((o for o in recorded if o.query_id is not None or o.sources), None)
        return resume_point(
            committed, target_version, newest, recorded, pending=pending, exact=newest is None
        )
