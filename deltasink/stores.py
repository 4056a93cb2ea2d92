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
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

from deltasink.errors import ConfigurationError, UnsafeStoreError

__all__ = ["OPT_IN", "checked_options", "unsafe_reasons"]

#: The storage option that opts in to commits without put-if-absent (deltasink's own;
#: removed before the options reach delta-rs).
OPT_IN = "deltasink.allow_unsafe_commits"

_S3_SCHEMES = frozenset({"s3", "s3a"})
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
    for name, value in given.items():
        if name in passed:
            continue
        if name.lower() != OPT_IN:
            raise ConfigurationError(
                f"unknown deltasink storage option {name!r}; the one deltasink reads is {OPT_IN!r}."
            )
        if value.strip().lower() not in _TRUE | {"false", "0", "no", "off"}:
            raise ConfigurationError(f"{OPT_IN} must be true or false, got {value!r}.")
        allow_unsafe_commits = allow_unsafe_commits or value.strip().lower() in _TRUE
    if not allow_unsafe_commits:
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
