"""Table locations: paths and URIs made comparable, catalog names told apart, and
where a writer's staging table goes by default."""

from __future__ import annotations

import os
from urllib.parse import urlparse

__all__ = ["STAGING_SUFFIX", "default_staging", "is_catalog_name", "is_local", "normalize_uri"]

#: The default staging tables of a target live in ``<target>_deltasink_staging/``.
STAGING_SUFFIX = "_deltasink_staging"


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a local filesystem path (no scheme, or ``file://``)."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def normalize_uri(path: str | os.PathLike[str]) -> str:
    """An absolute, comparable form of a table location (local paths made absolute,
    ``file://`` removed, trailing slashes dropped)."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if is_local(text):
        return os.path.abspath(os.path.expanduser(text))
    return text.rstrip("/")


def is_catalog_name(target: str) -> bool:
    """``catalog.schema.table`` or ``schema.table`` (no slash, no scheme)."""
    return "/" not in target and "\\" not in target and ":" not in target and "." in target


def default_staging(target: str, app_id: str) -> str:
    """The default staging location: ``<target>_deltasink_staging/<app_id>``.

    A sibling of the target, so the target's directory holds only the target, and
    one staging table per writer.
    """
    return f"{normalize_uri(target)}{STAGING_SUFFIX}/{app_id}"
