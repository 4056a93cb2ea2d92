"""A ``DeltaSink``'s arguments checked up front, in the order the constructor met them,
and its two tables located (the staging default derived from the target)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import get_args

from deltasink.backends import ENGINES, Engine, EngineName
from deltasink.checks import Check
from deltasink.checks import validate as validate_checks
from deltasink.errors import ConfigurationError
from deltasink.locations import default_staging, is_catalog_name, normalize_uri, same_location
from deltasink.reserved import STAGING_SUFFIX
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec

__all__ = ["check_arguments", "check_engine_fit", "locate"]

_APP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def check_arguments(
    target: object,
    app_id: object,
    *,
    merge: object,
    table: object,
    checks: Sequence[Check] | None,
    on_quarantine: object,
    on_stale: object,
    engine: object,
) -> tuple[Check, ...] | None:
    """The arguments that need no engine, checked; the validated checks.

    Raises:
        ConfigurationError: The first argument that is not valid.
    """
    if not isinstance(target, str | os.PathLike):
        raise ConfigurationError(f"target must be a path or URI string, got {target!r}.")
    if not isinstance(app_id, str) or not _APP_ID.match(app_id):
        raise ConfigurationError(
            f"app_id must be 1-200 characters of letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit; got {app_id!r}.",
            app_id=app_id if isinstance(app_id, str) else None,
        )
    if merge is not None and not isinstance(merge, MergeSpec):
        raise ConfigurationError(f"merge must be a MergeSpec or None, got {merge!r}.")
    if table is not None and not isinstance(table, TableSpec):
        raise ConfigurationError(f"table must be a TableSpec or None, got {table!r}.")
    validated = validate_checks(checks)
    if on_quarantine not in ("continue", "raise"):
        raise ConfigurationError(
            f"on_quarantine must be 'continue' or 'raise', got {on_quarantine!r}."
        )
    if on_stale not in ("skip", "raise"):
        raise ConfigurationError(f"on_stale must be 'skip' or 'raise', got {on_stale!r}.")
    if engine not in get_args(Engine):
        raise ConfigurationError(f"engine must be one of {list(get_args(Engine))}, got {engine!r}.")
    return validated


def locate(
    target: str | os.PathLike[str], staging: str | None, app_id: str
) -> tuple[str, str, bool]:
    """The target and staging locations as the sink names them, and whether the target
    is a catalog name (a catalog target's default staging table sits beside it).

    Raises:
        ConfigurationError: Staging and target are the same location.
    """
    catalog = is_catalog_name(os.fspath(target))
    located = os.fspath(target) if catalog else normalize_uri(target)
    if staging:
        staged_at = staging if is_catalog_name(staging) else normalize_uri(staging)
    elif catalog:
        staged_at = f"{located}_{STAGING_SUFFIX}_{app_id.replace('-', '_').replace('.', '_')}"
    else:
        staged_at = default_staging(located, app_id)
    if same_location(staged_at, located):
        raise ConfigurationError("staging must be a different location than target.", table=located)
    return located, staged_at, catalog


def check_engine_fit(
    chosen: EngineName, *, max_commit_attempts: object, catalog: bool, target: str
) -> None:
    """``max_commit_attempts`` is valid and the chosen engine can write ``target``.

    Raises:
        ConfigurationError: Either is not so.
    """
    if not isinstance(max_commit_attempts, int) or max_commit_attempts < 1:
        raise ConfigurationError(
            f"max_commit_attempts must be an int ≥ 1, got {max_commit_attempts!r}."
        )
    if catalog and not ENGINES[chosen].writes_catalog_tables:
        raise ConfigurationError(
            f"target {target!r} is a catalog table name; the {chosen} engine "
            "writes Delta tables by path. Pass a path, or use engine='spark' with a "
            "Delta-enabled session.",
            table=target,
        )
