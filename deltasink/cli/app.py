"""The ``deltasink`` command's frame: the Typer app, its exit codes and shared options,
the errors mapped to exit codes, and opening an existing writer's sink."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console

from deltasink.cli.exits import (
    EXIT_COMMIT,
    EXIT_CONFIG,
    EXIT_ERROR,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_QUARANTINED,
    EXIT_REFUSED,
    EXIT_USAGE,
    exit_code,
)
from deltasink.cli.output import report_table
from deltasink.core.protocol import CommitReport
from deltasink.errors import ConfigurationError, DeltaSinkError
from deltasink.locations import is_catalog_name
from deltasink.sink import DeltaSink
from deltasink.status import require_writer

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
    "err",
    "exit_on_error",
    "known_sink",
    "open_sink",
    "out",
    "print_report",
]


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
def exit_on_error(as_json: bool) -> Iterator[None]:
    """Map deltasink errors to messages and exit codes."""
    try:
        yield
    except DeltaSinkError as exc:
        code = exit_code(exc)
        if as_json:
            payload = {"error": type(exc).__name__, "message": str(exc), "exit_code": code}
            out.print_json(json.dumps(payload))
        else:
            err.print(f"[bold red]{type(exc).__name__}[/]: {exc}", highlight=False)
        raise typer.Exit(code) from None


def parse_storage_options(pairs: list[str] | None) -> dict[str, str] | None:
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


class Options:
    """Options given before the command (``deltasink --spark status ...``)."""

    spark: bool = False


def _print_version(value: bool) -> None:
    if value:
        from deltasink import __version__

        out.print(f"deltasink {__version__}", highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def global_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the deltasink version and exit (the version command also "
            "prints the Python and library versions with --json).",
        ),
    ] = False,
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
    Options.spark = spark


def open_sink(
    target: str,
    app_id: str,
    staging: str | None,
    storage: list[str] | None = None,
    *,
    skip_unverifiable: bool = False,
) -> DeltaSink:
    session = None
    if Options.spark:
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
        storage_options=parse_storage_options(storage),
        engine="spark" if session is not None else "auto",
        spark=session,
    )


def known_sink(
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
    sink = open_sink(target, app_id, staging, storage, **options)
    require_writer(sink.status())
    return sink


def print_report(report: CommitReport, verb: str) -> None:
    if not report.results:
        out.print(f"nothing to {verb}; committed version is {report.committed_version}")
        return
    out.print(report_table(report, verb))
    out.print(f"committed version is now [bold green]{report.committed_version}[/]")
