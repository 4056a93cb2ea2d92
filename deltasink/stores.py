"""What an object store must guarantee for deltasink, checked when a sink is built.

deltasink's exactly-once and its fencing rest on one property of the store: a Delta
commit file is created only if absent, atomically. Local disks, ADLS and GCS give it.
On S3 the embedded engine (delta-rs) gets it from conditional writes
(``PUT`` with ``If-None-Match: *``), which deltalake 1.6 uses by default on every
S3 set-up (measured against a moto S3 server: a writer with a stale snapshot gets a
conflict and retries on the next version, whatever the options below say).

Some options *declare* a store without that guarantee, or a mechanism deltalake 1.6
no longer has. On such a store two writers can both create one commit file (a lost
batch, a fenced writer that was not), or every commit fails. :func:`checked_options`
refuses them with :class:`~deltasink.errors.UnsafeStoreError` before anything is
written, unless the user opts in (``DeltaSink(..., allow_unsafe_commits=True)`` or the
storage option ``deltasink.allow_unsafe_commits=true``, also the CLI's ``-o``):

* ``AWS_S3_ALLOW_UNSAFE_RENAME=true``: "my store has no put-if-absent, commit anyway";
* ``AWS_S3_LOCKING_PROVIDER`` (``dynamodb``): deltalake 1.6 dropped the DynamoDB lock; it
  logs an error and commits by conditional put, so a store that needed the lock has none;
* ``AWS_CONDITIONAL_PUT=disabled`` without ``AWS_COPY_IF_NOT_EXISTS``: delta-rs has no
  way left to create a commit file only-if-absent (each commit fails).

delta-rs reads these from the environment too when they are not in the options; so does
this check. Keys are matched as delta-rs matches them: any case, with or without the
``aws_`` prefix.

The spark engine commits through Spark's Delta LogStore instead, chosen by the session's
``spark.delta.logStore.<scheme>.impl`` (or the legacy ``spark.delta.logStore.class``).
For S3 paths Delta's default is ``S3SingleDriverLogStore``, which creates a commit file
only-if-absent within one Spark driver: two drivers (two clusters, or a restarted job
beside its zombie) can both commit one table version. :func:`check_spark_log_store`
refuses that with :class:`~deltasink.errors.UnsafeStoreError` (the way out: Delta's
``S3DynamoDBLogStore``, or the same opt-in); Databricks coordinates S3 commits itself
and is not checked.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from deltasink.errors import ConfigurationError, UnsafeStoreError

__all__ = [
    "OPT_IN",
    "check_spark_log_store",
    "checked_options",
    "opted_in",
    "spark_log_store_reasons",
    "unsafe_reasons",
]

#: The storage option that opts in to commits without put-if-absent (deltasink's own;
#: removed before the options reach delta-rs).
OPT_IN = "deltasink.allow_unsafe_commits"

_S3_SCHEMES = frozenset({"s3", "s3a"})
#: The schemes Delta's Spark LogStore serves with ``S3SingleDriverLogStore`` by default.
_SPARK_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
#: Delta's multi-cluster LogStore for S3 (the ``delta-storage-s3-dynamodb`` jar).
MULTI_CLUSTER_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
_TRUE = frozenset({"true", "1", "yes", "on"})


def _key(name: str) -> str:
    key = name.strip().lower()
    return key[4:] if key.startswith("aws_") else key


def _lookup(options: Mapping[str, str], env: Mapping[str, str], key: str) -> str | None:
    """The value delta-rs would use for ``key`` (normalised): the options first, then
    the environment (``AWS_`` + the key, upper case)."""
    for name, value in options.items():
        if _key(name) == key:
            return str(value).strip()
    found = env.get(f"AWS_{key.upper()}")
    return found.strip() if found is not None else None


def unsafe_reasons(
    uri: str, options: Mapping[str, str], env: Mapping[str, str] | None = None
) -> list[str]:
    """Why commits to ``uri`` with ``options`` would not be created only-if-absent
    (empty: nothing known against them). Only S3 URIs (``s3://``, ``s3a://``) have
    such options; every other location gets ``[]``."""
    if urlparse(uri).scheme.lower() not in _S3_SCHEMES:
        return []
    env = os.environ if env is None else env
    reasons = []
    unsafe_rename = _lookup(options, env, "s3_allow_unsafe_rename")
    if unsafe_rename is not None and unsafe_rename.lower() in _TRUE:
        reasons.append(
            "AWS_S3_ALLOW_UNSAFE_RENAME=true declares a store without put-if-absent: "
            "two writers could both create one commit file"
        )
    locking = _lookup(options, env, "s3_locking_provider")
    if locking:
        reasons.append(
            f"AWS_S3_LOCKING_PROVIDER={locking}: deltalake 1.6 no longer has the DynamoDB "
            "lock (it ignores the option and commits by conditional put), so a store "
            "that needed the lock has none"
        )
    conditional = _lookup(options, env, "conditional_put")
    if (
        conditional is not None
        and conditional.lower() == "disabled"
        and not _lookup(options, env, "copy_if_not_exists")
    ):
        reasons.append(
            "AWS_CONDITIONAL_PUT=disabled without AWS_COPY_IF_NOT_EXISTS leaves delta-rs "
            "no way to create a commit file only-if-absent"
        )
    return reasons


def opted_in(options: Mapping[str, str] | None) -> bool:
    """Whether ``options`` opt in to unsafe commits (:data:`OPT_IN` set to true, in any
    case): the embedded engine's check and the spark engine's LogStore check
    (:func:`check_spark_log_store`) both honour it.

    Raises:
        ConfigurationError: :data:`OPT_IN` with a value that is not ``true``/``false``.
    """
    found = False
    for name, value in (options or {}).items():
        if str(name).lower() != OPT_IN:
            continue
        text = str(value).strip().lower()
        if text not in _TRUE | {"false", "0", "no", "off"}:
            raise ConfigurationError(f"{OPT_IN} must be true or false, got {value!r}.")
        found = found or text in _TRUE
    return found


def checked_options(
    uris: list[str],
    options: Mapping[str, str] | None,
    *,
    allow_unsafe_commits: bool = False,
    env: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """The storage options to hand to delta-rs for tables at ``uris``, once checked.

    Args:
        uris: The target and staging locations.
        options: The user's storage options (may hold :data:`OPT_IN`).
        allow_unsafe_commits: The user opts in to a store without put-if-absent.
        env: The environment delta-rs reads (default :data:`os.environ`).

    Returns:
        ``options`` without deltasink's own keys (``None`` when none were given).

    Raises:
        UnsafeStoreError: The options declare a store without put-if-absent commits
            and the user did not opt in. Nothing was written.
        ConfigurationError: A ``deltasink.`` option deltasink does not know, or
            :data:`OPT_IN` with a value that is not ``true``/``false``.
    """
    if options is None:
        given: dict[str, str] = {}
    else:
        given = {str(k): str(v) for k, v in options.items()}
    passed = {k: v for k, v in given.items() if not k.lower().startswith("deltasink.")}
    for name in given:
        if name not in passed and name.lower() != OPT_IN:
            raise ConfigurationError(
                f"unknown deltasink storage option {name!r}; the one deltasink reads is {OPT_IN!r}."
            )
    if not (allow_unsafe_commits or opted_in(given)):
        for uri in uris:
            reasons = unsafe_reasons(uri, passed, env)
            if reasons:
                raise UnsafeStoreError(
                    f"the storage options for {uri} allow unsafe commits: "
                    f"{'; '.join(reasons)}. deltasink's exactly-once and fencing need "
                    "each Delta commit file created only if absent. Remove these options "
                    "(AWS S3, MinIO and most S3-compatible stores support conditional "
                    "writes, which delta-rs uses by default), or accept the risk with "
                    f"allow_unsafe_commits=True (CLI: -o {OPT_IN}=true).",
                    table=uri,
                    reasons=tuple(reasons),
                )
    return passed if options is not None else None


def spark_log_store_reasons(uri: str, conf: Callable[[str], str | None]) -> list[str]:
    """Why Spark's Delta LogStore for ``uri`` would not create commit files only-if-absent
    across drivers (empty: nothing known against it). ``conf`` reads a Spark conf
    (``None`` when unset). Only S3 URIs (``s3://``, ``s3a://``, ``s3n://``) are checked:
    Delta's LogStores for HDFS, ADLS, GCS and local paths are safe for several
    drivers."""
    scheme = urlparse(uri).scheme.lower()
    if scheme not in _SPARK_S3_SCHEMES:
        return []
    key = f"spark.delta.logStore.{scheme}.impl"
    impl = (conf(key) or conf("spark.delta.logStore.class") or "").strip()
    if impl and not impl.endswith("S3SingleDriverLogStore"):
        return []  # S3DynamoDBLogStore, or a LogStore of the user's own
    found = f"{key}={impl}" if impl else f"{key} is unset (Delta's default: S3SingleDriverLogStore)"
    return [
        f"{found}: it creates a commit file only-if-absent within one Spark driver, so "
        "two drivers (two clusters, or a restarted job beside its zombie) can both "
        "commit one table version"
    ]


def check_spark_log_store(
    spark: Any,
    uris: Sequence[str],
    *,
    allow_unsafe_commits: bool = False,
    env: Mapping[str, str] | None = None,
) -> None:
    """Refuse the spark engine on S3 tables whose LogStore is Delta's single-driver one
    (:func:`spark_log_store_reasons`), before anything is written.

    Args:
        spark: The session whose confs choose the LogStore.
        uris: The target and staging locations (catalog names are not checked).
        allow_unsafe_commits: The user opts in (exactly one Spark driver ever writes
            these tables).
        env: The environment (default :data:`os.environ`): on Databricks nothing is
            checked (it coordinates S3 commits itself).

    Raises:
        UnsafeStoreError: An S3 location's LogStore is single-driver and the user did
            not opt in.
    """
    env = os.environ if env is None else env
    if allow_unsafe_commits or env.get("DATABRICKS_RUNTIME_VERSION"):
        return

    def conf(key: str) -> str | None:
        value = spark.conf.get(key, None)
        return None if value is None else str(value)

    for uri in uris:
        reasons = spark_log_store_reasons(uri, conf)
        if reasons:
            scheme = urlparse(uri).scheme.lower()
            raise UnsafeStoreError(
                f"the spark engine would commit to {uri} through a single-driver Delta "
                f"LogStore: {'; '.join(reasons)}. deltasink's exactly-once and fencing need "
                "each Delta commit file created only if absent. Configure Delta's "
                f"multi-cluster LogStore (spark.delta.logStore.{scheme}.impl="
                f"{MULTI_CLUSTER_LOG_STORE}, with spark.io.delta.storage.S3DynamoDBLogStore"
                ".ddb.tableName and .ddb.region, and the delta-storage-s3-dynamodb jar), or, "
                "if exactly one Spark driver ever writes these tables, accept the risk with "
                f"allow_unsafe_commits=True (CLI: -o {OPT_IN}=true).",
                table=uri,
                reasons=tuple(reasons),
            )
