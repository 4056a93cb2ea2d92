"""Flink's transaction-timeout rules, on the age of a staged version. Engine-free."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from deltasink.core.committables import StagedVersion
from deltasink.errors import ConfigurationError

__all__ = ["Timeouts"]

logger = logging.getLogger("deltasink")


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """Flink's transaction-timeout settings, applied to the age of a staged version.

    Args:
        transaction_timeout: Age after which a pending version counts as timed out.
        ignore_failures_after_timeout: During ``recover()``, a version that fails to
            commit and is older than the timeout is abandoned (a warning is logged, its
            staged rows are dropped and never reach the target) instead of failing
            the call. This trades the version's data for progress: opt in knowingly.
        warning_ratio: Log a warning for a pending version older than
            ``transaction_timeout * warning_ratio`` (0 < ratio ≤ 1).
    """

    transaction_timeout: timedelta | float | None = None
    ignore_failures_after_timeout: bool = False
    warning_ratio: float | None = None

    def __post_init__(self) -> None:
        timeout = self.transaction_timeout
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, timedelta | int | float):
                raise ConfigurationError(
                    f"transaction_timeout must be a timedelta or seconds, got {timeout!r}."
                )
            seconds = self.timeout_s
            if seconds is None or not math.isfinite(seconds) or seconds <= 0:
                raise ConfigurationError(
                    f"transaction_timeout must be positive and finite, got {timeout!r}."
                )
        if not isinstance(self.ignore_failures_after_timeout, bool):
            raise ConfigurationError(
                "ignore_failures_after_timeout must be True or False, got "
                f"{self.ignore_failures_after_timeout!r}."
            )
        if self.ignore_failures_after_timeout and timeout is None:
            raise ConfigurationError(
                "ignore_failures_after_timeout=True needs transaction_timeout to be set."
            )
        ratio = self.warning_ratio
        if ratio is not None:
            if timeout is None:
                raise ConfigurationError("warning_ratio needs transaction_timeout to be set.")
            if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
                raise ConfigurationError(f"warning_ratio must be in (0, 1], got {ratio!r}.")

    @property
    def timeout_s(self) -> float | None:
        """The transaction timeout in seconds, or ``None``."""
        timeout = self.transaction_timeout
        if timeout is None:
            return None
        return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)

    def age(self, staged: StagedVersion, now: float) -> float:
        """Seconds since ``staged`` was staged, at ``now`` (seconds since the epoch)."""
        return now - staged.staged_at.timestamp()

    def timed_out(self, staged: StagedVersion, now: float) -> bool:
        """Whether ``staged`` is older than the transaction timeout."""
        timeout = self.timeout_s
        return timeout is not None and self.age(staged, now) > timeout

    def warn_if_old(self, app_id: str, pending: Sequence[StagedVersion], now: float) -> None:
        """Log a warning for each of ``pending`` older than the warning threshold."""
        timeout, ratio = self.timeout_s, self.warning_ratio
        if timeout is None or ratio is None:
            return
        threshold = timeout * ratio
        for staged in pending:
            age = self.age(staged, now)
            if age > threshold:
                logger.warning(
                    "app %r: version %s has been pending for %.1f s, %.0f%% of the "
                    "transaction timeout (%.1f s); commit or recover it soon",
                    app_id,
                    staged.version,
                    age,
                    100 * age / timeout,
                    timeout,
                )
