"""The exit codes of the ``deltasink`` command and of the job templates (jobs/), and the
one line each prints for a deltasink error: one mapping, used by both."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

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

__all__ = [
    "EXIT_COMMIT",
    "EXIT_CONFIG",
    "EXIT_ERROR",
    "EXIT_FENCED",
    "EXIT_OK",
    "EXIT_QUARANTINED",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "error_line",
    "exit_code",
    "run_job",
]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CONFIG, EXIT_COMMIT, EXIT_REFUSED = 0, 1, 2, 3, 4, 5
EXIT_QUARANTINED, EXIT_FENCED = 6, 7


def exit_code(exc: DeltaSinkError) -> int:
    """The exit code of a deltasink error (docs/usage.md, "Operate it"): 7 fenced, 6
    quarantined, 5 refused with nothing done, 4 commit failed, 3 configuration, 1 the
    rest (storage errors included)."""
    if isinstance(exc, FencedError):
        return EXIT_FENCED
    if isinstance(exc, QuarantinedError):
        return EXIT_QUARANTINED
    if isinstance(exc, AlreadyCommittedError | InvalidInputError | UnverifiableChecksError):
        return EXIT_REFUSED
    if isinstance(exc, CommitError):
        return EXIT_COMMIT
    if isinstance(exc, ConfigurationError):
        return EXIT_CONFIG
    return EXIT_ERROR


def error_line(exc: DeltaSinkError) -> str:
    """What the ``deltasink`` command prints for ``exc`` (without colour):
    ``<ErrorName>: <message>``."""
    return f"{type(exc).__name__}: {exc}"


def run_job(
    main: Callable[[], int],
    *,
    hint: Callable[[DeltaSinkError], str | None] = lambda exc: None,
    stream: TextIO | None = None,
) -> int:
    """Run a job's ``main`` and return its exit code, as the ``deltasink`` command
    exits: a deltasink error becomes its one line on stderr (after whatever the job
    printed), followed by ``hint(exc)`` when that gives one, and :func:`exit_code`
    instead of a traceback and exit 1. Other exceptions propagate unchanged."""
    try:
        return main()
    except DeltaSinkError as exc:
        out = stream or sys.stderr
        sys.stdout.flush()  # what the job printed comes first, the error's line last
        print(error_line(exc), file=out)
        extra = hint(exc)
        if extra:
            print(extra, file=out)
        return exit_code(exc)
