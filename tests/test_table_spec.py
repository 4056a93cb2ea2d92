"""``TableSpec``: its validation, and what the embedded engine refuses up front (liquid
clustering, and targets with table features delta-rs cannot write).
(Creating and checking targets with it is part of the contract suite, both engines.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import (
    CommitError,
    ConfigurationError,
    DeltaSink,
    MergeSpec,
    TableDefinitionError,
    TableSpec,
    UnsupportedTableFeatureError,
)
from deltasink.shapes.table import TableDefinition, check_definition
from tests import support


def test_columns_become_tuples_and_properties_read_only() -> None:
    spec = TableSpec(partition_by="day", properties={"delta.appendOnly": "false"})
    assert spec.partition_by == ("day",)
    assert spec.columns == ("day",)
    with pytest.raises(TypeError):
        spec.properties["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_by": ["day"], "cluster_by": ["id"]}, "exclude each other"),
        ({"partition_by": ["day", "DAY"]}, "names a column twice"),
        ({"partition_by": [""]}, "must be column names"),
        ({"cluster_by": [1]}, "must be column names"),
        ({"properties": {"delta.appendOnly": True}}, "string values"),
        ({"comment": 3}, "must be a string"),
    ],
)
def test_an_invalid_spec_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TableSpec(**kwargs)  # type: ignore[arg-type]


def test_every_contradiction_is_listed_and_unnamed_properties_are_ignored() -> None:
    spec = TableSpec(partition_by=["Day"], properties={"a": "TRUE"}, comment="c")
    same = TableDefinition(("day",), None, {"a": "true", "other": "x"}, "c")
    check_definition(spec, same, table="t")  # case-insensitive names and values
    found = TableDefinition((), ("id",), {}, None)
    with pytest.raises(TableDefinitionError) as raised:
        check_definition(spec, found, table="t")
    message = str(raised.value)
    for part in (
        "partitioned by [], the spec says ['Day']",
        "clustered by ['id'], the spec says []",
        "property a=None, the spec says 'TRUE'",
        "comment None, the spec says 'c'",
    ):
        assert part in message
    assert raised.value.table == "t"


def test_the_embedded_engine_refuses_liquid_clustering_before_anything_is_written(
    target: str,
) -> None:
    with pytest.raises(ConfigurationError, match="needs the spark engine"):
        DeltaSink(target, "orders", MergeSpec(keys=["id"]), table=TableSpec(cluster_by=["id"]))
    assert not support.exists(target)


def test_a_partitioned_target_with_upserts_and_deletes(target: str) -> None:
    def batch(ids: list[int], days: list[str], ops: list[str]) -> pa.Table:
        return pa.table({"id": ids, "day": days, "op": ops})

    merge = MergeSpec(keys=["id"], delete_when="op = 'D'")
    sink = DeltaSink(target, "orders", merge, table=TableSpec(partition_by=["day"]))
    sink.write(batch([1, 2, 3], ["d1", "d1", "d2"], ["U", "U", "U"]), 0)
    sink.write(batch([2, 3, 4], ["d1", "d2", "d3"], ["D", "U", "U"]), 1)
    table = DeltaTable(target)
    assert list(table.metadata().partition_columns) == ["day"]
    assert table.transaction_version("orders") == 1
    assert [(r["id"], r["day"]) for r in support.rows(target)] == [(1, "d1"), (3, "d2"), (4, "d3")]
    assert sorted({p["day"] for p in table.partitions()}) == ["d1", "d2", "d3"]


# -- table features the embedded engine cannot write -----------------------------------


def add_writer_features(uri: str, features: list[str]) -> None:
    """Commit a protocol upgrade to ``features``, as another engine would."""
    log = Path(uri, "_delta_log")
    version = max(int(p.stem) for p in log.glob("*.json")) + 1
    protocol = {
        "minReaderVersion": 1,
        "minWriterVersion": 7,
        "writerFeatures": ["appendOnly", "invariants", *features],
    }
    (log / f"{version:020d}.json").write_text(json.dumps({"protocol": protocol}) + "\n")


@pytest.mark.parametrize(
    "features", [["identityColumns"], ["domainMetadata", "rowTracking"], ["clustering"]]
)
def test_a_target_with_a_feature_delta_rs_cannot_write_is_refused_before_anything_is_written(
    target: str, features: list[str]
) -> None:
    write_deltalake(target, pa.table({"id": [1], "value": ["a"]}))
    add_writer_features(target, features)
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    for call in (sink.write, sink.pre_commit):
        with pytest.raises(UnsupportedTableFeatureError, match="engine='spark'") as raised:
            call(pa.table({"id": [1, 2], "value": ["A", "b"]}), 0)
        assert raised.value.features == sorted(features)
    assert support.table_version(target) == 1
    assert not support.exists(sink.staging)
    assert support.ids(target) == [1]


def test_a_feature_added_after_staging_fails_the_publish_at_once_and_keeps_the_version(
    target: str,
) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "value": ["a"]}), 0)
    sink.pre_commit(pa.table({"id": [2], "value": ["b"]}), 1)
    add_writer_features(target, ["identityColumns"])
    with pytest.raises(CommitError, match=r"\['identityColumns'\]") as raised:
        sink.commit(1)  # at once, not retried as a conflict: delta-rs refuses every attempt
    assert isinstance(raised.value.__cause__, UnsupportedTableFeatureError)
    assert "written.. " not in str(raised.value)
    assert sink.status().pending_versions == [1]
    assert (support.ids(target), support.marker(target, "orders")) == ([1], 0)
