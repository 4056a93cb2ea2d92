"""The ``deltasink`` command: status, recover, abort, history and offsets for operators.

A thin layer over the public API. Every command takes ``--json`` for scripts.

Exit codes:
    0  success
    1  storage error (the store refused the credentials, is unreachable, the bucket is
       missing) or another unexpected error
    2  usage error (bad arguments)
    3  configuration error (not a Delta table, staging of another app, no MergeSpec)
    4  commit failed (the job's versions stay staged; fix the cause, run recover again)
    5  refused, nothing done (e.g. aborting a version that is already committed, or not
       staged; answering no to recover's question)
    6  stopped at a quarantined version (a pre-commit check failed; abort or re-stage it)
    7  fenced (another live writer with the same app_id holds the staging table)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from deltasink.cli.app import (
    EXIT_COMMIT,
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_QUARANTINED,
    EXIT_REFUSED,
    EXIT_USAGE,
    AppOpt,
    JsonOpt,
    StagingOpt,
    StorageOpt,
    Target,
    app,
    err,
    exit_on_error,
    known_sink,
    out,
    print_report,
)
from deltasink.cli.history import history, offsets
from deltasink.cli.output import pending_table, report_dict, status_table
from deltasink.core.committables import CommitResult, StagedVersion
from deltasink.errors import ConfigurationError
from deltasink.status import writers_of

__all__ = [
    "EXIT_COMMIT",
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_FENCED",
    "EXIT_OK",
    "EXIT_QUARANTINED",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "app",
    "main",
]


def _interactive() -> bool:
    """Whether a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


def status(
    target: Target,
    app_id: Annotated[
        str | None,
        typer.Option("--app", "-a", help="The writer's app_id (default: every app found)."),
    ] = None,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the committed version and the pending versions of a writer.

    Exits 3 when the writer does not exist, 6 when a version is quarantined.
    """
    with exit_on_error(as_json):
        apps = [app_id] if app_id else writers_of(target)
        if not apps:
            raise ConfigurationError(
                f"no deltasink writer found for {target}; pass --app APP (and --staging if "
                "the job sets one).",
                table=target,
            )
        now = datetime.now(timezone.utc)
        statuses = [
            known_sink(target, a, staging, storage_option).status(with_origin=True) for a in apps
        ]
    if as_json:
        payload: Any = [s.to_dict(now=now) for s in statuses]
        out.print_json(json.dumps(payload if app_id is None else payload[0]))
    else:
        for st in statuses:
            out.print(status_table(st, now))
            if st.pending:
                out.print(pending_table(st, now))
            else:
                out.print("[dim]nothing pending[/]")
    if any(st.quarantined for st in statuses):
        raise typer.Exit(EXIT_QUARANTINED)


def recover(
    target: Target,
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    as_json: JsonOpt = False,
    skip_unverifiable_checks: Annotated[
        bool,
        typer.Option(
            "--skip-unverifiable-checks",
            help="Publish even though the job's checks include callables this command "
            "cannot run (the recorded built-in checks still run).",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Do not ask before taking the writer role (asked only on a terminal).",
        ),
    ] = False,
) -> None:
    """Commit every staged, uncommitted version of a writer, in order.

    Runs the job's recorded pre-commit checks first (a failing version is quarantined,
    exit 6); refuses (exit 5) when they include callables it cannot run. Claims the
    writer role: a job still running with the same app_id is fenced (its next write
    raises FencedError), so on a terminal it asks first unless --yes is given;
    answering no exits 5 with nothing done.
    """
    with exit_on_error(as_json):
        sink = known_sink(
            target, app_id, staging, storage_option, skip_unverifiable=skip_unverifiable_checks
        )
        if not yes and _interactive():
            err.print(
                f"recover takes the writer role of app [bold]{sink.app_id}[/] on "
                f"{sink.target}: a job still running with this app id is fenced (its "
                "next write raises FencedError and it must be restarted)."
            )
            if not typer.confirm("Continue?", default=False, err=True):
                err.print("declined: nothing done")
                raise typer.Exit(EXIT_REFUSED)
        pending = sink.status().pending_versions
        if as_json or not pending or not err.is_terminal:
            report = sink.recover()
        else:
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            ) as bar:
                report = sink.recover(progress=RecoverProgress(bar, len(pending)))
    if as_json:
        out.print_json(json.dumps(report_dict(report)))
    else:
        print_report(report, "recover")
    if report.quarantined_versions:
        raise typer.Exit(EXIT_QUARANTINED)


class RecoverProgress:
    """``recover``'s progress on a terminal: versions committed out of those pending,
    and, while a target commit runs (a long coalesced one too), which versions and how
    many staged rows it applies."""

    def __init__(self, bar: Progress, total: int) -> None:
        self.bar = bar
        self.task = bar.add_task("recovering", total=total)

    def starting(self, staged: Sequence[StagedVersion]) -> None:
        rows = sum(s.rows for s in staged)
        what = (
            f"version {staged[0].version}"
            if len(staged) == 1
            else f"versions {staged[0].version}..{staged[-1].version} in one commit"
        )
        self.bar.update(self.task, description=f"committing {what} ({rows:,} rows)")

    def __call__(self, result: CommitResult) -> None:
        self.bar.update(self.task, description="recovering")
        self.bar.advance(self.task, len(result.all_versions))


def abort(
    target: Target,
    versions: Annotated[list[int], typer.Argument(help="Staged versions to drop.")],
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop staged, uncommitted versions without committing them.

    Exits 5 when a version is not staged (never staged, or already aborted: a mistyped
    version must not read as done); the other versions given are still aborted.
    """
    with exit_on_error(as_json):
        sink = known_sink(target, app_id, staging, storage_option)
        dropped = {v: sink.abort(v) for v in versions}
        not_staged = [v for v, done in dropped.items() if not done]
        st = sink.status() if not_staged else None
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "aborted": [v for v, d in dropped.items() if d],
                    "not_staged": not_staged,
                }
            )
        )
    else:
        for version in (v for v, done in dropped.items() if done):
            out.print(f"version {version}: aborted")
        if st is not None:
            err.print(
                f"[bold red]not staged[/]: version(s) {not_staged} of app {sink.app_id!r}: "
                f"nothing to abort (pending versions {st.pending_versions}, committed "
                f"version {st.committed_version}).",
                highlight=False,
            )
    if not_staged:
        raise typer.Exit(EXIT_REFUSED)


def gc(
    target: Target,
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    retention_hours: Annotated[
        float,
        typer.Option("--retention-hours", min=0, help="Keep unreferenced files this long."),
    ] = 168.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would go.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Expire staging files nothing needs any more; compact the staging log."""
    with exit_on_error(as_json):
        sink = known_sink(target, app_id, staging, storage_option)
        if as_json:
            result = sink.gc(retention_hours * 3600, dry_run=dry_run)
        else:
            with err.status("vacuuming and checkpointing the staging table ..."):
                result = sink.gc(retention_hours * 3600, dry_run=dry_run)
    if as_json:
        out.print_json(json.dumps({"dry_run": result.dry_run, "files": list(result.files)}))
        return
    verb = "would remove" if result.dry_run else "removed"
    out.print(f"{verb} {len(result.files)} file(s) older than {retention_hours:g} h")
    for path in result.files[:20]:  # whole, never wrapped: they are copied and pasted
        out.print(f"  {path}", style="dim", markup=False, highlight=False, soft_wrap=True)


def show_version(as_json: JsonOpt = False) -> None:
    """Print the deltasink version (with ``--json``: and the Python and library
    versions it runs with)."""
    from deltasink import __version__

    if not as_json:
        out.print(__version__)
        return
    import platform
    from importlib import metadata

    libraries: dict[str, str | None] = {}
    for name in ("deltalake", "pyarrow", "pyspark", "pysail"):
        try:
            libraries[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            libraries[name] = None
    payload = {"deltasink": __version__, "python": platform.python_version(), **libraries}
    out.print_json(json.dumps(payload))


# The commands, in the order ``deltasink --help`` lists them.
for _command in (status, recover, abort, history, offsets, gc):
    app.command()(_command)
app.command("version")(show_version)


def main() -> None:
    """Entry point of the ``deltasink`` command. The library's warnings (the
    ``deltasink`` logger) go to stderr, unless logging was configured already."""
    import logging

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app(prog_name="deltasink")
