"""The embedded engine's compaction on partition values that need escaping, by both of
its commit paths (issue 43): the commit file it writes itself (local tables: an
``OPTIMIZE``) and delta-rs's commit (object stores, unknown writer features). Each path
in the log is URI-encoded exactly once (the file lies at the path decoded once) and the
rows read back are those before. tests/test_compaction_spark.py proves the same against
delta-spark."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

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


def sparks_paths(uri: str) -> str:
    """``uri``'s first commit with each add's path written as delta-spark writes it:
    non-ASCII characters left unencoded (``p=Z%C3%BCrich`` becomes ``p=Zürich``), the
    file moved to the directory that path names."""
    log = Path(uri, "_delta_log", f"{0:020d}.json")
    lines = []
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            logged = action["add"]["path"]
            real = unquote(unquote(logged))  # the value, not the directory's escaping
            spark = "".join(c if ord(c) > 127 else quote(c, safe="/=") for c in real)
            os.makedirs(os.path.dirname(os.path.join(uri, unquote(spark))), exist_ok=True)
            os.rename(os.path.join(uri, unquote(logged)), os.path.join(uri, unquote(spark)))
            action["add"]["path"] = spark
        lines.append(json.dumps(action))
    log.write_text("\n".join(lines) + "\n")
    return uri


def zurich(uri: str) -> str:
    rows = [{"id": 1, "n": 19, "p": "Zürich"}, {"id": 5, "n": 3, "p": "a b"}]
    schema = pa.schema([("id", pa.int64()), ("n", pa.int64()), ("p", pa.string())])
    write_deltalake(uri, pa.Table.from_pylist(rows, schema), partition_by=["p"])
    return sparks_paths(uri)


def test_delta_rs_removes_a_file_spark_logged_under_another_path() -> None:
    """Why :func:`~deltasink.backends.embedded.features.refuse_rewritten_paths` exists
    (found by the table zoo, seed 1537582489): delta-rs 1.6's MERGE removes the file
    logged as ``p=Zürich/...`` under ``p=Z%C3%BCrich/...``; Delta matches a remove to
    its add by the path's text, so the old row stays beside the updated one. When this
    test fails, delta-rs keeps the logged path and the refusal can go."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        uri = zurich(os.path.join(folder, "t"))
        batch = pa.table({"id": pa.array([1], pa.int64()), "n": [39], "p": ["Bern"]})
        merge = DeltaTable(uri).merge(batch, "t.id = s.id", source_alias="s", target_alias="t")
        merge.when_matched_update_all().when_not_matched_insert_all().execute()
        assert sorted(r["n"] for r in DeltaTable(uri).to_pyarrow_table().to_pylist()) == [
            3,
            19,  # the row updated to 39 is still there
            39,
        ]


@pytest.mark.parametrize("mode", ["upsert", "insert"])
def test_a_file_spark_logged_with_unencoded_characters_is_never_removed_by_delta_rs(
    tmp_path: Path, mode: str
) -> None:
    """An upsert, whose MERGE would remove such a file, is refused by name before
    anything is staged (the spark engine writes it); an insert removes no file and
    writes."""
    uri = zurich(str(tmp_path / "t"))
    before = support.rows(uri)
    staging = str(tmp_path / "s")
    spec = MergeSpec(keys=["id"], mode=mode)  # type: ignore[arg-type]
    sink = DeltaSink(uri, "app", spec, engine="embedded", staging=staging)
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "n": [39, 7], "p": ["Bern", "Bern"]})
    if mode == "upsert":
        with pytest.raises(UnsupportedTableFeatureError, match="engine='spark'") as caught:
            sink.write(batch, 0)
        assert caught.value.features == ["pathsDeltaRsRewrites"]
        assert support.rows(uri) == before
        assert support.table_version(uri) == 0
        assert not os.path.exists(os.path.join(staging, "_delta_log"))
        return
    sink.write(batch, 0)
    got = sorted((r["id"], r["n"], r["p"]) for r in DeltaTable(uri).to_pyarrow_table().to_pylist())
    assert got == [(1, 19, "Zürich"), (2, 7, "Bern"), (5, 3, "a b")]


@pytest.mark.parametrize("path", ["own", "delta-rs"])
def test_a_compaction_removes_a_file_spark_logged_by_its_logged_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The commit file deltasink writes removes each file by the path the log holds (the
    rows once each after); delta-rs's commit would not, and is refused by name."""
    uri = zurich(str(tmp_path / "t"))
    more = pa.table({"id": pa.array([2], pa.int64()), "n": [4], "p": ["Zürich"]})
    write_deltalake(uri, more, mode="append", partition_by=["p"])
    sink = DeltaSink(uri, "op", MergeSpec(keys=["id"]), engine="embedded")
    if path == "delta-rs":
        monkeypatch.setattr(swap, "_writes_here", lambda table: False)
        with pytest.raises(UnsupportedTableFeatureError, match="Spark's OPTIMIZE"):
            sink.optimize()
        assert support.table_version(uri) == 1
        return
    sink.optimize()
    got = sorted((r["id"], r["p"]) for r in DeltaTable(uri).to_pyarrow_table().to_pylist())
    assert got == [(1, "Zürich"), (2, "Zürich"), (5, "a b")]
    assert [a["path"].startswith("p=Z%25C3%25BCrich/") for a in live_adds(uri)].count(True) == 1
