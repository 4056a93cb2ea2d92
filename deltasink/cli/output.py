"""What the ``deltasink`` command prints: rich tables for people, dicts for ``--json``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from rich.table import Table

from deltasink.core.committables import CommitReport, CommitResult
from deltasink.shapes.spec import MergeSpec
from deltasink.status import SinkStatus

__all__ = [
    "age",
    "merge_text",
    "pending_table",
    "report_dict",
    "report_table",
    "row_counts_text",
    "status_table",
    "versions_text",
]


def age(ts: datetime, now: datetime) -> str:
    """``ts``'s age at ``now``, e.g. ``4m 05s``."""
    seconds = int((now - ts).total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600:02d}h"


def versions_text(versions: Sequence[int]) -> str:
    """Versions as the API returns them (a list), ``none`` when empty."""
    return str(list(versions)) if versions else "none"


def merge_text(spec: MergeSpec) -> str:
    """A MergeSpec on one line: its mode and every field not at its default, in
    ``MergeSpec(...)`` keyword spelling (``upsert keys=['id'] sequence_by='ts'``)."""
    parts: list[str] = [spec.mode]
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name == "mode" or value == f.default or (value == () and f.default is None):
            continue
        shown = list(value) if isinstance(value, tuple) else value
        parts.append(f"{f.name}={shown!r}")
    return " ".join(parts)


def status_table(status: SinkStatus, now: datetime) -> Table:
    """The writer's state, one field per row."""
    table = Table(title=f"app [bold]{status.app_id}[/] → {status.target}", title_justify="left")
    table.add_column("field", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long path wraps, never cut to "o…"
    table.add_row("engine", f"{status.engine} [dim]({status.engine_reason})[/]")
    table.add_row("staging", status.staging)
    table.add_row(
        "target exists", "yes" if status.target_exists else "no (created on first commit)"
    )
    committed = "—" if status.committed_version is None else str(status.committed_version)
    table.add_row("committed version", f"[bold green]{committed}[/]")
    table.add_row("pending versions", versions_text(status.pending_versions))
    if status.quarantined:
        table.add_row("quarantined", f"[bold red]{sorted(status.quarantined)}[/]")
    if status.merge is not None:
        table.add_row("merge", merge_text(status.merge))
    if status.leftover_versions:
        table.add_row(
            "committed, staging not yet cleaned",
            f"{versions_text(status.leftover_versions)} (removed by the next recover)",
        )
    origin = status.origin
    if origin is not None and origin.query_id is not None:
        table.add_row(
            "stream", f"query {origin.query_id} batch {origin.batch_id} (base {origin.base})"
        )
    elif origin is not None:
        table.add_row("position", str(origin.position))
    return table


def pending_table(status: SinkStatus, now: datetime) -> Table:
    """The pending versions, with their age and quarantine."""
    table = Table(title="pending (staged, not committed)", title_justify="left")
    table.add_column("version", justify="right")
    table.add_column("rows", justify="right")
    table.add_column("staged at (UTC)")
    table.add_column("age", justify="right")
    table.add_column("state")
    for staged in status.pending:
        reason = status.quarantined.get(staged.version)
        table.add_row(
            str(staged.version),
            f"{staged.rows:,}",
            staged.staged_at.strftime("%Y-%m-%d %H:%M:%S"),
            age(staged.staged_at, now),
            f"[red]quarantined: {reason}[/]" if reason else "pending",
        )
    return table


def report_dict(report: CommitReport) -> dict[str, Any]:
    """A commit report as JSON-ready data."""
    return {
        "app_id": report.app_id,
        "committed_version": report.committed_version,
        "committed_versions": report.committed_versions,
        "abandoned_versions": report.abandoned_versions,
        "quarantined_versions": report.quarantined_versions,
        "cleaned_versions": list(report.cleaned_versions),
        "results": [
            {
                "version": r.version,
                "outcome": r.outcome,
                "rows": r.rows,
                "target_version": r.target_version,
                "rows_inserted": r.rows_inserted,
                "rows_updated": r.rows_updated,
                "rows_deleted": r.rows_deleted,
                "duration_s": round(r.duration_s, 4),
                "message": r.message,
            }
            for r in report.results
        ],
    }


def row_counts_text(result: CommitResult) -> str:
    """``+inserted ~updated -deleted rows`` of one commit, or ``""`` when the engine
    did not report all three (e.g. a MERGE whose metrics Spark did not return)."""
    counts = (result.rows_inserted, result.rows_updated, result.rows_deleted)
    if any(n is None for n in counts):
        return ""
    inserted, updated, deleted = counts
    return f"+{inserted} ~{updated} -{deleted} rows"


def report_table(report: CommitReport, verb: str) -> Table:
    """One row per version a ``recover``/``commit`` handled."""
    table = Table(title=f"{verb} app {report.app_id}", title_justify="left")
    for name in ("version", "outcome", "rows", "target ver", "ins", "upd", "del", "secs"):
        table.add_column(name, justify="right" if name != "outcome" else "left")
    for r in report.results:
        table.add_row(
            str(r.version),
            r.outcome,
            f"{r.rows:,}",
            "" if r.target_version is None else str(r.target_version),
            *(
                "" if n is None else f"{n:,}"
                for n in (r.rows_inserted, r.rows_updated, r.rows_deleted)
            ),
            f"{r.duration_s:.3f}",
        )
    return table
