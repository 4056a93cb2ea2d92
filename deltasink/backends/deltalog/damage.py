"""What is wrong with a Delta log delta-rs cannot read, for the messages of
:mod:`.tables`: a missing or torn commit file after the last checkpoint, named by path
(a local table only; an object store's log is described by the store's own words)."""

from __future__ import annotations

import json
import os

from deltalake import DeltaTable

from deltasink.errors import StorageError
from deltasink.failures import plain
from deltasink.locations import is_local

__all__ = ["checked", "unreadable_log"]


def unreadable_log(uri: str, exc: BaseException) -> str:
    """The message for a Delta log that delta-rs cannot read: the store's words on one
    line, the damaged commit file when a local log shows it, and advice that keeps
    what the table holds (a new location would leave its pending versions behind)."""
    damage = _log_damage(uri) if is_local(uri) else None
    found = f" {damage}." if damage else ""
    what = "that file" if damage else "the damaged _delta_log files"
    return (
        f"the Delta log of {uri} cannot be read: {plain(exc)}.{found} Restore {what} from "
        "a backup (or the store's object versions) and run again; until then nothing is "
        "published. Keep the table: deleting it or pointing the sink at a new location "
        "would leave the versions it holds behind."
    )


def _log_damage(uri: str) -> str | None:
    """For a local table: the first commit file after the last checkpoint that is
    missing (a gap in the numbering) or not valid JSON (truncated, overwritten), as a
    phrase naming its path; ``None`` when none is found."""
    log = os.path.join(uri, "_delta_log")
    start = _last_checkpoint(log) + 1
    try:
        names = os.listdir(log)
    except OSError:
        return None
    versions = sorted(
        int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
    )
    versions = [v for v in versions if v >= start]
    expected = start if start > 0 else (versions[0] if versions else 0)
    for v in versions:
        if v != expected:
            return (
                f"The commit file {_commit_file(uri, expected)} is missing (the log goes "
                f"from commit {expected - 1} to {v})"
            )
        expected = v + 1
    for v in versions:
        path = _commit_file(uri, v)
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        json.loads(line)
        except (OSError, ValueError):
            return f"The commit file {path} is not valid JSON (truncated or overwritten)"
    return None


def checked(table: DeltaTable, uri: str) -> DeltaTable:
    """``table``, unless its local log has torn (empty) commit files among the ones the
    snapshot was read from."""
    if is_local(uri):
        empty = _torn_commits(uri, table.version())
        if empty:
            raise StorageError(
                f"the Delta log of {uri} has empty commit files {empty} (a torn write): "
                "reading it would silently lose those commits. Restore them from a "
                "backup, or remove them if nothing was acknowledged after them.",
                table=uri,
            )
    return table


def _torn_commits(uri: str, version: int) -> list[str]:
    """Zero-length commit files among those a snapshot at ``version`` is read from: the
    commits after the last checkpoint (and the one after ``version``). Probed by name,
    so the cost follows the commits since the checkpoint, not the table's history."""
    log = os.path.join(uri, "_delta_log")
    empty = []
    for v in range(_last_checkpoint(log) + 1, version + 2):
        name = f"{v:020d}.json"
        try:
            if os.stat(os.path.join(log, name)).st_size == 0:
                empty.append(name)
        except FileNotFoundError:
            continue
    return empty


def _last_checkpoint(log: str) -> int:
    """The version in ``_last_checkpoint``, or -1 (none, or unreadable: check all)."""
    try:
        with open(os.path.join(log, "_last_checkpoint"), encoding="utf-8") as f:
            return int(json.load(f)["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1


def _commit_file(uri: str, version: int) -> str:
    return os.path.join(uri, "_delta_log", f"{version:020d}.json")
