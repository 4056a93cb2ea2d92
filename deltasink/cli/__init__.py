"""The ``deltasink`` command: status, recover, abort, history and offsets for operators.

A thin layer over the public API. Every command takes ``--json`` for scripts.

Exit codes:
    0  success
    1  unexpected error
    2  usage error (bad arguments)
    3  configuration error (not a Delta table, staging of another app, no MergeSpec)
    4  commit failed (the job's versions stay staged; fix the cause, run recover again)
    5  refused (e.g. aborting a version that is already committed, or not staged)
    6  stopped at a quarantined version (a pre-commit check failed; abort or re-stage it)
    7  fenced (another live writer with the same app_id holds the staging table)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from deltasink.cli.output import pending_table, report_dict, report_table, status_table
from deltasink.core.protocol import CommitReport
from deltasink.errors import (
    AlreadyCommittedError,
    CommitError,
    ConfigurationError,
    DeltaSinkError,
    FencedError,
    InvalidInputError,
    QuarantinedError,
    UnverifiableChecksError,
)
from deltasink.locations import is_catalog_name
from deltasink.ops.origin import BatchOrigin
from deltasink.ops.status import require_writer, writers_of
from deltasink.sink import DeltaSink

__all__ = ["app", "main"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONFIG, EXIT_COMMIT, EXIT_REFUSED = 0, 1, 2, 3, 4, 5
EXIT_QUARANTINED, EXIT_FENCED = 6, 7

app = typer.Typer(
    name="deltasink",
    help="Inspect and operate deltasink writers: exactly-once writes into Delta tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: it wraps at any terminal width and never truncates an option
    # name (rich's help panels cut --skip-unverifiable-checks at 80 columns).
    rich_markup_mode=None,
)
out = Console()
err = Console(stderr=True)

Target = Annotated[
    str,
    typer.Argument(help="Target Delta table path or URI (a catalog name with --spark)."),
]
AppOpt = Annotated[str, typer.Option("--app", "-a", help="The writer's app_id.")]
StagingOpt = Annotated[
    str | None,
    typer.Option("--staging", help="Staging table location (default: next to the target)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
StorageOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        "-o",
        help="A delta-rs storage option KEY=VALUE for object stores (repeatable), e.g. "
        "-o AWS_REGION=eu-west-1. Credentials are better left in the environment.",
    ),
]


@contextmanager
def _errors(as_json: bool) -> Iterator[None]:
    """Map deltasink errors to messages and exit codes."""
    try:
        yield
    except DeltaSinkError as exc:
        if isinstance(exc, FencedError):
            code = EXIT_FENCED
        elif isinstance(exc, QuarantinedError):
            code = EXIT_QUARANTINED
        elif isinstance(exc, AlreadyCommittedError | InvalidInputError | UnverifiableChecksError):
            code = EXIT_REFUSED
        elif isinstance(exc, CommitError):
            code = EXIT_COMMIT
        elif isinstance(exc, ConfigurationError):
            code = EXIT_CONFIG
        else:
            code = EXIT_ERROR
        if as_json:
            payload = {"error": type(exc).__name__, "message": str(exc), "exit_code": code}
            out.print_json(json.dumps(payload))
        else:
            err.print(f"[bold red]{type(exc).__name__}[/]: {exc}", highlight=False)
        raise typer.Exit(code) from None


def _storage_options(pairs: list[str] | None) -> dict[str, str] | None:
    """``KEY=VALUE`` pairs as a dict (``None`` when none were given)."""
    if not pairs:
        return None
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(
                f"expected KEY=VALUE, got {pair!r}", param_hint="--storage-option"
            )
        options[key.strip()] = value
    return options


class _Options:
    """Options given before the command (``deltasink --spark status ...``)."""

    spark: bool = False


@app.callback()
def _global(
    spark: Annotated[
        bool,
        typer.Option(
            "--spark",
            help="Open the tables through a Spark session (SparkSession.builder."
            "getOrCreate(): the cluster's, or Databricks Connect's), as the spark engine "
            "does; needed for catalog table names such as main.sales.orders.",
        ),
    ] = False,
) -> None:
    _Options.spark = spark


def _sink(
    target: str,
    app_id: str,
    staging: str | None,
    storage: list[str] | None = None,
    *,
    skip_unverifiable: bool = False,
) -> DeltaSink:
    session = None
    if _Options.spark:
        from pyspark.sql import SparkSession

        session = SparkSession.builder.getOrCreate()
    elif is_catalog_name(target):
        raise ConfigurationError(
            f"{target} is a catalog table name: open it through a Spark session with "
            f"`deltasink --spark ...` (on the cluster, e.g. its web terminal, or with "
            "Databricks Connect), or pass the table's storage path.",
            table=target,
        )
    return DeltaSink(
        target=target,
        app_id=app_id,
        merge=None,
        staging=staging,
        unverifiable_checks="skip" if skip_unverifiable else "refuse",
        storage_options=_storage_options(storage),
        engine="spark" if session is not None else "auto",
        spark=session,
    )


def _interactive() -> bool:
    """Whether a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


def _known(
    target: str,
    app_id: str,
    staging: str | None,
    storage: list[str] | None = None,
    **options: bool,
) -> DeltaSink:
    """The sink of a writer that exists: its target holds its ``txn`` marker or its
    staging table exists.

    Raises:
        ConfigurationError: Neither does (a mistyped path or app id must not read as
            "nothing pending").
    """
    sink = _sink(target, app_id, staging, storage, **options)
    require_writer(sink.status())
    return sink


def _print_report(report: CommitReport, verb: str) -> None:
    if not report.results:
        out.print(f"nothing to {verb}; committed version is {report.committed_version}")
        return
    out.print(report_table(report, verb))
    out.print(f"committed version is now [bold green]{report.committed_version}[/]")


@app.command()
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
    with _errors(as_json):
        apps = [app_id] if app_id else writers_of(target)
        if not apps:
            raise ConfigurationError(
                f"no deltasink writer found for {target}; pass --app APP (and --staging if "
                "the job sets one).",
                table=target,
            )
        now = datetime.now(timezone.utc)
        statuses = [
            _known(target, a, staging, storage_option).status(with_origin=True) for a in apps
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


@app.command()
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
    raises FencedError), so on a terminal it asks first unless --yes is given.
    """
    with _errors(as_json):
        sink = _known(
            target, app_id, staging, storage_option, skip_unverifiable=skip_unverifiable_checks
        )
        if not yes and _interactive():
            err.print(
                f"recover takes the writer role of app [bold]{sink.app_id}[/] on "
                f"{sink.target}: a job still running with this app id is fenced (its "
                "next write raises FencedError and it must be restarted)."
            )
            if not typer.confirm("Continue?", default=False, err=True):
                err.print("nothing done")
                raise typer.Exit(EXIT_ERROR)
        pending = sink.status().pending_versions
        if as_json or not pending:
            report = sink.recover()
        else:
            with Progress(
                TextColumn("recovering"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            ) as bar:
                task = bar.add_task("versions", total=len(pending))
                report = sink.recover(progress=lambda r: bar.advance(task, len(r.all_versions)))
    if as_json:
        out.print_json(json.dumps(report_dict(report)))
    else:
        _print_report(report, "recover")
    if report.quarantined_versions:
        raise typer.Exit(EXIT_QUARANTINED)


@app.command()
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
    with _errors(as_json):
        sink = _known(target, app_id, staging, storage_option)
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


@app.command()
def history(
    target: Target,
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", help="Read at most N recent target commits.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List a writer's commits to the target (version → target Delta version)."""
    with _errors(as_json):
        entries = _known(target, app_id, staging, storage_option).history(limit)
    if as_json:
        out.print_json(json.dumps([e.to_dict() for e in entries]))
        return
    table = Table(title=f"commits of app {app_id} to {target}", title_justify="left")
    for name in (
        "version",
        "target ver",
        "committed at (UTC)",
        "operation",
        "ins",
        "upd",
        "del",
        "ms",
        "origin",
    ):
        table.add_column(
            name,
            justify="left" if name in ("operation", "committed at (UTC)", "origin") else "right",
        )
    for e in entries:
        table.add_row(
            ", ".join(map(str, e.versions)),
            str(e.target_version),
            e.timestamp.strftime("%Y-%m-%d %H:%M:%S"),
            e.operation,
            *(
                "" if n is None else f"{n:,}"
                for n in (e.rows_inserted, e.rows_updated, e.rows_deleted, e.execution_ms)
            ),
            _origin_text(e.origin, short=True),
        )
    out.print(table)


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


@app.command()
def offsets(
    target: Target,
    app_id: AppOpt,
    staging: StagingOpt = None,
    storage_option: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the last committed version's source positions and where a new streaming
    query starts to continue right after it (after a lost or changed checkpoint)."""
    with _errors(as_json):
        point = _known(target, app_id, staging, storage_option).offsets()
    if as_json:
        out.print_json(json.dumps(point.to_dict()))
        return
    if point.version is None:
        out.print(f"app {app_id} has committed nothing to {target}")
        return
    out.print(f"committed version {point.version} of app {app_id} on {target}")
    if point.origin is None:
        out.print("no source positions were recorded with it (written without a stream)")
        return
    origin = point.origin
    out.print(f"  origin: {_origin_text(origin)} (base {origin.base})")
    if not point.exact:
        out.print(
            "  [yellow]later versions were committed without an origin (recover()): these "
            "positions are behind the committed version[/]"
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
                "already committed; keep them out of the new query's input (--json "
                "lists them)"
            )
        else:
            plain(f"  source {source['source']}: offset {json.dumps(source.get('offset'))}")
    out.print(
        "  resume a new checkpoint from there with foreach_batch_writer(..., resume=True) "
        '(docs/runbook.md, "I lost or changed my checkpoint")'
    )


@app.command()
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
    with _errors(as_json):
        sink = _known(target, app_id, staging, storage_option)
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


@app.command("version")
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


def main() -> None:
    """Entry point of the ``deltasink`` command."""
    app(prog_name="deltasink")
