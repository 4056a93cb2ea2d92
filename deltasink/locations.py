"""Table locations: paths and URIs made comparable, catalog names told apart, and
where a writer's staging table goes by default.

One table can be spelled several ways: a local path through a symlink or with a
trailing slash, ``s3://`` or Hadoop's ``s3a://``, Azure's ``abfss://`` (the dfs
endpoint) or ``wasbs://`` (the blob endpoint). :func:`normalize_uri` gives the form
deltasink opens and records (symlinks resolved, so every spelling of a local target
finds the same default staging table); :func:`location_key` is what two locations are
compared by (ownership of a staging table, hand-over between writers, a group's
targets), and is never opened: Spark on OSS Hadoop needs ``s3a://`` where delta-rs and
Databricks take ``s3://``."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from deltasink.reserved import STAGING_SUFFIX

__all__ = [
    "STAGING_SUFFIX",
    "default_staging",
    "is_catalog_name",
    "is_local",
    "location_key",
    "normalize_uri",
    "same_location",
]


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a local filesystem path (no scheme, or ``file://``)."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


#: Schemes that name the same store as another one: Hadoop's S3 connectors, and Azure
#: Data Lake Storage Gen2 through its blob endpoint (``wasbs``) or without TLS.
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "wasbs": "abfss", "wasb": "abfss", "abfs": "abfss"}


def normalize_uri(path: str | os.PathLike[str]) -> str:
    """The form of a table location deltasink opens and records: local paths made
    absolute with symlinks resolved (``file:`` removed), trailing slashes dropped.
    A URI keeps its scheme (see :func:`location_key` for comparisons)."""
    text = os.fspath(path)
    if urlparse(text).scheme == "file":
        text = urlparse(text).path or "/"
    if is_local(text):
        return os.path.realpath(os.path.expanduser(text))
    return text.rstrip("/")


def location_key(path: str | os.PathLike[str]) -> str:
    """What two table locations are compared by: :func:`normalize_uri`'s form with the
    scheme lower-cased and its aliases folded (``s3a``/``s3n`` as ``s3``; ``wasbs``,
    ``wasb`` and ``abfs`` as ``abfss``, the blob endpoint host as the dfs one). Catalog
    names compare as written. Only for comparing: never open the key."""
    text = os.fspath(path)
    if is_catalog_name(text):
        return text
    text = normalize_uri(text)
    if is_local(text):
        return text
    parts = urlparse(text)
    scheme = parts.scheme.lower()
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    host = parts.netloc.lower()  # bucket, container and account names are lower case
    if scheme == "abfss":  # container@account.blob... and container@account.dfs...
        host = host.replace(".blob.core.windows.net", ".dfs.core.windows.net")
    return parts._replace(scheme=scheme, netloc=host).geturl().rstrip("/")


def same_location(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` spell the same table location."""
    return location_key(a) == location_key(b)


def is_catalog_name(target: str) -> bool:
    """``catalog.schema.table`` or ``schema.table`` (no slash, no scheme)."""
    return "/" not in target and "\\" not in target and ":" not in target and "." in target


def default_staging(target: str, app_id: str) -> str:
    """The default staging location: ``<target>_deltasink_staging/<app_id>``.

    A sibling of the target, so the target's directory holds only the target, and
    one staging table per writer.
    """
    return f"{normalize_uri(target)}{STAGING_SUFFIX}/{app_id}"
