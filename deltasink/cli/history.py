"""The ``deltasink history`` and ``deltasink offsets`` commands: which target commit applied
which versions, and where a stream resumes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from deltasink.cli.app import (
    AppOpt,
    JsonOpt,
    StagingOpt,
    StorageOpt,
    Target,
    exit_on_error,
    known_sink,
    out,
)
from deltasink.ops.history import HistoryEntry
from deltasink.ops.origin import BatchOrigin

__all__ = ["HISTORY_COLUMNS", "WIDE_COLUMNS", "history", "history_table", "offsets"]


def history(
    target: Target,
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", help="Read at most N recent target commits.")
    ] = None,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            "-w",
            help="Also show files added/removed, milliseconds, the attempt that landed "
            "(and who won the lost ones) and the stream batch (a wide terminal).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List a writer's commits to the target (version → target Delta version), with
    what each did: rows inserted, updated and deleted; --wide adds what each cost
    (files added and removed, the attempt that landed and the apps whose commits won
    the attempts it lost) and the stream batch it came from."""
    with exit_on_error(as_json):
        entries = known_sink(target, app_id, staging, storage_option).history(limit)
    if as_json:
        out.print_json(json.dumps([e.to_dict() for e in entries]))
        return
    out.print(history_table(entries, f"commits of app {app_id} to {target}", wide=wide))


#: The columns of ``deltasink history`` (fit 80 columns), and those --wide adds.
HISTORY_COLUMNS = ("version", "Delta ver", "committed (UTC)", "operation", "rows +ins ~upd -del")
WIDE_COLUMNS = ("files +/-", "ms", "attempt", "origin")


def history_table(entries: Sequence[HistoryEntry], title: str, *, wide: bool = False) -> Table:
    """The history as a table. The default columns fit 80 columns with every header
    whole (a long list of coalesced versions wraps in its cell); ``wide`` adds four
    columns, for a wide terminal (on a narrow one, headers and cells wrap)."""
    table = Table(title=title, title_justify="left")
    for name in HISTORY_COLUMNS + (WIDE_COLUMNS if wide else ()):
        left = name in ("version", "committed (UTC)", "operation", "origin")
        table.add_column(
            name,
            justify="left" if left else "right",
            no_wrap=not wide and name != "version",
            min_width=None if wide else len(name),
            overflow="fold",
        )
    for e in entries:
        cells = [
            ", ".join(map(str, e.versions)),
            str(e.target_version),
            e.timestamp.strftime("%Y-%m-%d %H:%M:%S"),
            e.operation,
            _rows_text(e.rows_inserted, e.rows_updated, e.rows_deleted),
        ]
        if wide:
            cells += [
                _files_text(e.files_added, e.files_removed),
                "" if e.execution_ms is None else f"{e.execution_ms:,}",
                _attempt_text(e.attempt, e.telemetry),
                _origin_text(e.origin, short=True),
            ]
        table.add_row(*cells)
    return table


def _rows_text(inserted: int | None, updated: int | None, deleted: int | None) -> str:
    """``+ins ~upd -del`` with the counts the commit recorded (a missing one left out)."""
    parts = [
        f"{sign}{n:,}"
        for sign, n in (("+", inserted), ("~", updated), ("-", deleted))
        if n is not None
    ]
    return " ".join(parts)


def _files_text(added: int | None, removed: int | None) -> str:
    """``+added/-removed`` files, when recorded."""
    return "" if added is None and removed is None else f"+{added or 0}/-{removed or 0}"


def _attempt_text(attempt: int | None, telemetry: Mapping[str, Any] | None) -> str:
    """The attempt that landed, and the apps whose commits won the lost ones."""
    if attempt is None:
        return ""
    winners = sorted(
        {str(c.get("winner_app") or "?") for c in (telemetry or {}).get("conflicts", [])}
    )
    return str(attempt) + (f" (lost to {', '.join(winners)})" if winners else "")


def _origin_text(origin: BatchOrigin | None, *, short: bool = False) -> str:
    """An origin in one line: ``query <id> batch <n>`` (``short``: ``<id[:8]> #<n>``)
    or the position."""
    if origin is None:
        return ""
    if origin.query_id is not None and short:
        return f"{origin.query_id[:8]} #{origin.batch_id}"
    if origin.query_id is not None:
        return f"query {origin.query_id} batch {origin.batch_id}"
    return f"position {json.dumps(origin.position)}"


def offsets(
    target: Target,
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the committed and pending versions, the newest one's source positions, and
    where a new streaming query starts to continue right after it (after a lost or
    changed checkpoint)."""
    with exit_on_error(as_json):
        point = known_sink(target, app_id, staging, storage_option).offsets()
    if as_json:
        out.print_json(json.dumps(point.to_dict()))
        return
    if point.version is None and not point.pending:
        out.print(f"app {app_id} has committed nothing to {target}")
        return
    if point.version is None:
        out.print(f"app {app_id} has committed nothing to {target} yet")
    else:
        out.print(f"committed version {point.version} of app {app_id} on {target}")
    if point.pending:
        out.print(
            f"pending versions {list(point.pending)}: staged, not yet in the target; "
            "`deltasink recover` publishes them, and so does a query resumed with "
            "resume=True before its first batch (abort one to drop it)"
        )
    if point.origin is None:
        out.print(
            f"no source positions were recorded with version {point.through} "
            "(written without a stream)"
        )
        return
    origin = point.origin
    out.print(f"  origin: {_origin_text(origin)} (base {origin.base})")
    if not point.exact:
        out.print(
            f"  [yellow]version {point.through} recorded no origin (a batch job's write, or "
            "pre_commit): these positions are behind it[/]"
        )

    def plain(text: str) -> None:  # copy-pasteable: no wrapping, no markup
        out.print(text, soft_wrap=True, markup=False, highlight=False)

    for source in point.starting:
        kind = source["kind"]
        if kind == "kafka":
            plain(
                f'  source {source["source"]} (Kafka): .option("startingOffsets", '
                f"'{source['startingOffsets']}')"
            )
        elif kind == "delta":
            plain(
                f'  source {source["source"]} (Delta): .option("startingVersion", '
                f"{source['startingVersion']})"
            )
            if "note" in source:
                plain(f"    note: {source['note']}")
        elif kind == "files":
            plain(
                f"  source {source['source']} (files): {len(source['files'])} file(s) "
                "already held; a query resumed with resume=True leaves their rows out by "
                "itself (--json lists them)"
            )
        else:
            plain(f"  source {source['source']}: offset {json.dumps(source.get('offset'))}")
    out.print(
        f"  resume a new checkpoint right after version {point.through} with "
        "foreach_batch_writer(..., resume=True) or the templates' --resume "
        '(docs/runbook.md, "I lost or changed my checkpoint")'
    )
