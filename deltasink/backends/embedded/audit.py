"""Write-audit-publish on the embedded engine: which checks a staged version must
pass, and running them on its staged rows."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pyarrow as pa

from deltasink.backends.deltalog.staging import StagingLog
from deltasink.checks import (
    Check,
    StagedBatch,
    decode,
    encode,
    needs_validation,
    run_checks,
    validate_on,
)
from deltasink.core.protocol import StagedVersion
from deltasink.errors import UnverifiableChecksError
from deltasink.input.arrow import spark_input
from deltasink.input.sql import DELETE_COLUMN
from deltasink.ops.history import HistoryEntry, previous_rows

__all__ = ["Auditor"]

logger = logging.getLogger("deltasink")


class Auditor:
    """Runs the pre-commit checks of one writer on its staged versions.

    Args:
        log: The staging table (where the job's checks are recorded).
        target: The target's location, for the checks' context.
        checks: The job's own checks, or ``None``: run the ones recorded (an
            operator's sink, which must never publish what the job would not).
        unverifiable: With ``checks=None``, what to do when the recorded checks include
            plain callables: ``"refuse"`` to publish, or ``"skip"`` them.
        samples: Whether failure messages may quote rows of the batch.
        data: The staged rows of a version.
        history: This writer's recent target commits (for the row-count checks).
    """

    def __init__(
        self,
        log: StagingLog,
        *,
        target: str,
        checks: Sequence[Check] | None,
        unverifiable: Literal["refuse", "skip"],
        samples: bool = False,
        data: Callable[[int], pa.Table],
        history: Callable[[int], list[HistoryEntry]],
    ) -> None:
        self.log = log
        self.target = target
        self.own_checks = checks is not None
        self.checks = tuple(checks or ())
        self.unverifiable = unverifiable
        self.samples = samples
        self._data = data
        self._history = history
        self._validated: pa.Schema | None = None  # the schema the checks were validated on

    def validate(self, data: pa.Table) -> None:
        """Validate the job's checks against a prepared batch before it is staged
        (:func:`~deltasink.checks.validate_on`), on the first batch and whenever the
        schema changes; SQL checks are analysed on the embedded engine.

        Raises:
            ConfigurationError: A check that cannot work on this batch.
        """
        if not self.own_checks or not needs_validation(self.checks):
            return
        schema = data.schema
        if DELETE_COLUMN in schema.names:
            schema = schema.remove(schema.get_field_index(DELETE_COLUMN))
        if self._validated is not None and self._validated.equals(schema):
            return

        def frame() -> Any:
            from pyspark.sql.pandas.types import from_arrow_schema

            from .sail import embedded_spark

            return embedded_spark().createDataFrame([], schema=from_arrow_schema(schema))

        validate_on(self.checks, schema.names, frame)
        self._validated = schema

    def encoded(self) -> str:
        """The job's checks as recorded in the staging table."""
        return encode(self.checks)

    def checks_for(self, version: int) -> tuple[Check, ...]:
        """The checks ``version`` must pass.

        Raises:
            UnverifiableChecksError: The recorded checks include callables and
                ``unverifiable`` is ``"refuse"``.
        """
        if self.own_checks:
            return self.checks
        recorded = self.log.recorded_checks(fresh=False)
        if recorded is None:
            return ()  # staged before checks were recorded, or by a job without checks
        built, opaque = decode(recorded)
        app_id = self.log.app_id
        if opaque and self.unverifiable == "refuse":
            raise UnverifiableChecksError(
                f"version {version} of app {app_id!r} was staged by a job whose checks "
                f"include {list(opaque)}, plain callables this sink cannot run; nothing is "
                "published. Recover from the job itself (its recover() runs them), or skip "
                "them explicitly: `deltasink recover --skip-unverifiable-checks` "
                "(DeltaSink(..., unverifiable_checks='skip')), which still runs the "
                f"recorded built-in checks {[getattr(c, 'name', c) for c in built]}.",
                checks=opaque,
                table=self.target,
                app_id=app_id,
                version=version,
            )
        if opaque:
            logger.warning(
                "app %r: skipping the job's checks %s (callables, not recorded) for version %s",
                app_id,
                list(opaque),
                version,
            )
        return built

    def audit(self, staged: StagedVersion) -> str | None:
        """``None`` if ``staged`` may be published, else the failed check."""
        version = staged.version
        checks = self.checks_for(version)
        if not checks:
            return None

        def arrow() -> pa.Table:
            data = self._data(version)
            return (
                data.drop_columns([DELETE_COLUMN]) if DELETE_COLUMN in data.column_names else data
            )

        def dataframe() -> Any:
            from .sail import embedded_spark

            return embedded_spark().createDataFrame(spark_input(arrow()))

        batch = StagedBatch(
            app_id=self.log.app_id,
            version=version,
            rows=staged.rows,
            target=self.target,
            _arrow=arrow,
            _dataframe=dataframe,
            _previous_rows=lambda: previous_rows(self._history(20)),
            samples=self.samples,
        )
        return run_checks(checks, batch)
