"""What a newcomer meets first (issue 44), on the embedded engine fed with Arrow: a batch
lacking a target column refused by name unless the spec says the batches carry a
subset (``MergeSpec.allow_missing_columns``); a write of a committed version that
warns (:class:`~deltasink.ReplayWarning`) where logging is not configured; what
``keys="order_id"`` means; a Ctrl-C that says what it interrupted. The spark engine's
twin of the missing-column refusal is in tests/test_any_writer.py."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from deltasink import (
    ConfigurationError,
    DeltaSink,
    MergeSpec,
)
from tests import support


def rows(**columns: Any) -> pa.Table:
    return pa.table(columns)


def table_rows(target: str) -> list[dict[str, Any]]:
    return support.rows(target)


# -- keys as one string -------------------------------------------------------------------


def test_keys_given_as_one_string_is_that_one_key(target: str) -> None:
    spec = MergeSpec(keys="order_id")
    assert spec == MergeSpec(keys=["order_id"])
    assert spec.keys == ("order_id",)
    sink = DeltaSink(target, "a", spec)
    sink.write(rows(order_id=[1, 2], v=["a", "b"]), 0)
    sink.write(rows(order_id=[2], v=["B"]), 1)
    assert support.rows(target, sort_by="order_id") == [
        {"order_id": 1, "v": "a"},
        {"order_id": 2, "v": "B"},
    ]


def test_keys_given_as_one_string_with_a_comma_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError) as raised:
        MergeSpec(keys="order_id, line")
    assert str(raised.value) == (
        "MergeSpec(keys='order_id, line') is one string, so one key column named "
        "'order_id, line'. For several keys pass a list: keys=['order_id', 'line'] (for "
        "one column whose name holds a comma: keys=['order_id, line'])."
    )
    assert MergeSpec(keys=["order_id, line"]).keys == ("order_id, line",)
