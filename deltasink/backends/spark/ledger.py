"""The staging ledger: what the staging table's commit history adds to its partitions.

Spark writes no file for an empty batch, and its commits cannot carry deltasink's own
commit metadata, so the staging commits' ``userMetadata`` (``deltasink <op> app=<app>
version=<v>[ versions=...][ columns=[...]]``) records what the partitions cannot: the
empty versions, the data columns of each version, and the highest version a clean-up
recorded as committed. :func:`new_commits` reads that history incrementally.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from deltasink.ops.history import _timestamp as commit_time

__all__ = ["LEDGER_SUFFIX", "StagingLedger", "new_commits"]

#: ``txnAppId`` suffix of staging commits that must not be skipped by Delta's ``txn``
#: check (re-staging an aborted version, recording the discard of an empty one); their
#: ``txnVersion`` is the staging table's next version, so it always increases.
LEDGER_SUFFIX = "#ledger"
#: How many recent commits one history read looks at, growing until it finds what it
#: needs: a staged version still pending must have been staged within the last
#: ``_PAGES[-1]`` staging commits to be found by its history alone (empty versions).
_PAGES = (16, 256, 2048)
_EVENT = re.compile(
    r"^deltasink (?P<op>[a-z-]+) app=(?P<app>\S+)(?: version=(?P<version>\d+))?"
    r"(?: versions=(?P<versions>[\d,]+))?(?: columns=(?P<columns>\[.*?\]))?"
    r"(?: origin=(?P<origin>\{.*\}))?$",
    re.DOTALL,
)


@dataclass
class StagingLedger:
    """What the staging table's commit history adds to its partitions.

    Fed with the staging commits oldest first (delta-rs ``DeltaTable.history()`` dicts
    or ``DESCRIBE HISTORY`` rows as dicts), it tracks from their ``userMetadata``:

    Attributes:
        app_id: The writer.
        empty: Empty versions staged by Spark (a commit without files) and not
            discarded since, with their staging time.
        columns: The data columns each version was staged with.
        origins: The encoded origin each version was staged with, when it had one
            (:mod:`deltasink.ops.origin`), for its publish by ``recover()``.
        mark: The highest version a ``discard-committed`` (or, after a direct publish,
            ``committed``) commit recorded as committed.
        through: The newest staging table version applied.
    """

    app_id: str
    empty: dict[int, datetime] = field(default_factory=dict)
    columns: dict[int, tuple[str, ...]] = field(default_factory=dict)
    origins: dict[int, str] = field(default_factory=dict)
    mark: int | None = None
    through: int | None = None

    @staticmethod
    def event(commit: Mapping[str, Any], app_id: str) -> dict[str, Any] | None:
        """``{op, version, versions, columns}`` of a deltasink staging commit of
        ``app_id``, or ``None``."""
        match = _EVENT.match(str(commit.get("userMetadata") or ""))
        if match is None or match["app"] != app_id:
            return None
        version = None if match["version"] is None else int(match["version"])
        if match["versions"]:
            versions = tuple(int(v) for v in match["versions"].split(","))
        else:
            versions = () if version is None else (version,)
        columns = tuple(json.loads(match["columns"])) if match["columns"] else None
        return {
            "op": match["op"],
            "version": version,
            "versions": versions,
            "columns": columns,
            "origin": match["origin"],
        }

    def apply(self, commits: Iterable[Mapping[str, Any]]) -> None:
        """Apply ``commits`` (oldest first) to the ledger."""
        for commit in commits:
            self.through = int(commit["version"])
            event = self.event(commit, self.app_id)
            if event is None:
                continue
            op, version = event["op"], event["version"]
            if op in ("stage", "stage-empty", "restage") and version is not None:
                self.empty.pop(version, None)
                if op == "stage-empty":
                    self.empty[version] = commit_time(commit["timestamp"])
                if event["columns"] is not None:
                    self.columns[version] = event["columns"]
                if event["origin"] is not None:
                    self.origins[version] = event["origin"]
            elif op == "committed" and version is not None:  # after a direct publish
                self.mark = version if self.mark is None else max(self.mark, version)
            elif op.startswith("discard-"):
                for v in event["versions"]:
                    self.empty.pop(v, None)
                if op == "discard-committed" and version is not None:
                    self.mark = version if self.mark is None else max(self.mark, version)

    @classmethod
    def stops_scan(cls, commit: Mapping[str, Any], app_id: str, committed: int | None) -> bool:
        """Reading history backwards may stop at a staging commit of a version ≤ the
        committed one: a version still pending was staged after it (versions are staged
        in increasing order while one is pending), and after a direct publish's
        ``committed`` record (made only when nothing was staged)."""
        event = cls.event(commit, app_id)
        return (
            committed is not None
            and event is not None
            and event["op"] in ("stage", "stage-empty", "restage", "committed")
            and event["version"] is not None
            and event["version"] <= committed
        )


def new_commits(
    fetch: Callable[[int], list[dict[str, Any]]],
    through: int | None,
    stop: Callable[[Mapping[str, Any]], bool],
) -> list[dict[str, Any]]:
    """The commits newer than ``through`` (all of them, back to ``stop``, when
    ``through`` is ``None``), oldest first, reading growing pages of ``fetch(limit)``
    (newest first) so a caught-up reader touches only the latest commits."""
    fresh: list[dict[str, Any]] = []
    for limit in _PAGES:
        page = fetch(limit)
        fresh = []
        done = len(page) < limit
        for commit in page:
            version = int(commit["version"])
            if through is not None and version <= through:
                done = True
                break
            fresh.append(commit)
            if through is None and stop(commit):
                done = True
                break
        if done:
            break
    return list(reversed(fresh))
