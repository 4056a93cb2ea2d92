"""The embedded engine's compaction on partition values that need escaping, by both of
its commit paths (issue 43): the commit file it writes itself (local tables: an
``OPTIMIZE``) and delta-rs's commit (object stores, unknown writer features). Each path
in the log is URI-encoded exactly once (the file lies at the path decoded once) and the
rows read back are those before. tests/test_compaction_spark.py proves the same against
delta-spark."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import DeltaSink, MergeSpec, UnsupportedTableFeatureError
from deltasink.backends.embedded import swap
from tests import support

STRINGS = ["US East", "a:b", "100%", "k=v", "x/y", "ü", "", None]
STAMP = dt.datetime(2024, 1, 1, 18, tzinfo=dt.UTC)


def awkward(offset: int) -> pa.Table:
    n = len(STRINGS)
    return pa.table(
        {
            "id": pa.array(range(offset, offset + n), pa.int64()),
            "p": pa.array(STRINGS, pa.string()),
            "d": pa.array([dt.date(2024, 2, 29)] * n),
            "ts": pa.array([STAMP] * n, pa.timestamp("us", "UTC")),
        }
    )


def live_adds(uri: str) -> list[dict[str, Any]]:
    live: dict[str, dict[str, Any]] = {}
    for actions in support.log_commits(uri).values():
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return list(live.values())


@pytest.mark.parametrize("path", ["own", "delta-rs"])
def test_escaped_partition_values_survive_a_compaction_by_either_commit_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """By the commit file deltasink writes, a ``TIMESTAMP`` partition column too (its
    value recorded in the UTC form); by delta-rs's commit, which would record it
    without a zone, such a table is refused by name and the others compacted."""
    uri = str(tmp_path / "t")
    partition_by = ["p", "d", "ts"] if path == "own" else ["p", "d"]
    for offset in (0, 100):
        write_deltalake(uri, awkward(offset), mode="append", partition_by=partition_by)
    before = support.rows(uri)
    if path == "delta-rs":
        monkeypatch.setattr(swap, "_writes_here", lambda table: False)
        zoned = str(tmp_path / "zoned")
        write_deltalake(zoned, awkward(0), partition_by=["ts"])
        write_deltalake(zoned, awkward(100), mode="append", partition_by=["ts"])
        with pytest.raises(UnsupportedTableFeatureError, match="TIMESTAMP column"):
            DeltaSink(zoned, "op", MergeSpec(keys=["id"])).optimize()
        assert support.table_version(zoned) == 1
    DeltaSink(uri, "op", MergeSpec(keys=["id"])).optimize()
    adds = live_adds(uri)
    assert len(adds) == len(STRINGS) - 1  # '' is the null partition
    assert all(not a["dataChange"] for a in adds)
    for add in adds:
        assert os.path.isfile(os.path.join(uri, unquote(add["path"]))), add["path"]
        if path == "own":
            assert add["partitionValues"]["ts"] == "2024-01-01T18:00:00.000000Z"
    assert support.rows(uri) == before
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 2 * len(STRINGS)
    info = support.commit_info(uri, 2)
    assert info["operation"] == ("OPTIMIZE" if path == "own" else "WRITE")
    assert info["operationParameters"]["predicate"] == "[]"
    assert info["operationMetrics"]["numRemovedFiles"] == str(2 * len(STRINGS))
