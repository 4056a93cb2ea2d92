"""The settings of a :class:`~deltasink.DeltaSink` that travel together, each one frozen,
keyword-only object validated when it is made:

* :class:`Timeouts`: Flink's transaction timeout (``timeouts=``);
* :class:`AuditChecks`: write-audit-publish, the checks a version passes before it is
  published and what a failing one does (``audit=``);
* :class:`StoreOptions`: how the tables' store is reached and whether an unsafe one is
  accepted (``store=``).

The flat keywords they replace (``transaction_timeout=``, ``checks=``,
``storage_options=``, ...) are still accepted in this release and removed in the next
(docs/usage.md); a sink is given a group or its flat keywords, not both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from deltasink.checks import Check
from deltasink.checks import validate as validate_checks
from deltasink.core.timeouts import Timeouts
from deltasink.errors import ConfigurationError

__all__ = ["AuditChecks", "StoreOptions", "Timeouts"]


@dataclass(frozen=True, kw_only=True)
class AuditChecks:
    """Write-audit-publish: the checks each staged version passes before it is
    published, and what a version that fails one does.

    Args:
        checks: Pre-commit checks (:mod:`deltasink.checks`); a failing version is
            quarantined. They are recorded in the staging table, and a sink created
            without checks (``None``: an operator's sink, the CLI) runs the recorded
            built-in ones, so it never publishes what the job would not. ``()`` for a
            job without checks.
        unverifiable_checks: For a sink without ``checks``: when the recorded checks
            include plain callables (which only the job can run), ``"refuse"``
            (:class:`~deltasink.errors.UnverifiableChecksError`, nothing published) or
            ``"skip"`` them (run the recorded built-ins only).
        on_quarantine: When a call quarantines a version or stops at one:
            ``"continue"`` (the report says so; a stream goes on staging later batches
            behind it) or ``"raise"`` :class:`~deltasink.errors.QuarantinedError` after
            the call.
        check_samples: Let a failing check quote rows of the batch in its message (kept
            in the staging table, logged, shown by ``status``); off: counts only.

    Raises:
        ConfigurationError: A check that is not a check (not a callable of one
            argument), or an ``on_quarantine`` that is not one of the two.
    """

    checks: Sequence[Check] | None = None
    unverifiable_checks: Literal["refuse", "skip"] = "refuse"
    on_quarantine: Literal["continue", "raise"] = "continue"
    check_samples: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "checks", validate_checks(self.checks))
        if self.on_quarantine not in ("continue", "raise"):
            raise ConfigurationError(
                f"on_quarantine must be 'continue' or 'raise', got {self.on_quarantine!r}."
            )
        object.__setattr__(self, "check_samples", bool(self.check_samples))


@dataclass(frozen=True, kw_only=True)
class StoreOptions:
    """How the target and staging tables' store is reached.

    Args:
        storage_options: delta-rs storage options for object stores. Options that
            declare an S3 store without put-if-absent commits
            (``AWS_S3_ALLOW_UNSAFE_RENAME=true``, ``AWS_S3_LOCKING_PROVIDER``,
            ``AWS_CONDITIONAL_PUT=disabled``; :mod:`deltasink.stores`) are refused with
            :class:`~deltasink.errors.UnsafeStoreError` unless ``allow_unsafe_commits``.
        allow_unsafe_commits: Opt in to such a store (also the storage option
            ``deltasink.allow_unsafe_commits=true``): two writers may then both win one
            table version, which loses a batch or lets a fenced writer go on.
    """

    storage_options: Mapping[str, str] | None = None
    allow_unsafe_commits: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_unsafe_commits", bool(self.allow_unsafe_commits))


def grouped(
    name: str,
    group: object | None,
    flat: Mapping[str, object],
    defaults: Mapping[str, object],
) -> None:
    """Refuse a group given beside flat keywords of the same group.

    Raises:
        ConfigurationError: ``group`` is given and a flat keyword is not its default.
    """
    if group is None:
        return
    given = sorted(k for k, v in flat.items() if v is not defaults[k] and v != defaults[k])
    if given:
        raise ConfigurationError(
            f"{name}= and {', '.join(f'{k}=' for k in given)} were both given: pass the "
            f"settings of that group once, in {name}=."
        )
