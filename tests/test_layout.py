"""The staging layout's quarantine codec (both engines read and write it)."""

from __future__ import annotations

import json

from deltasink.ops.layout import PROP_QUARANTINE, Quarantine


def test_quarantine_records_round_trip_through_the_table_property() -> None:
    records = Quarantine().with_version(7, "expect('amount >= 0') failed")
    records = records.with_version(9, "row count dropped")
    props = records.to_props()
    assert list(props) == [PROP_QUARANTINE]
    stored = json.loads(props[PROP_QUARANTINE])
    assert sorted(stored) == ["7", "9"]
    assert stored["7"]["reason"] == "expect('amount >= 0') failed"
    assert stored["7"]["at"].endswith("+00:00")
    read = Quarantine.from_props(props)
    assert read.reasons() == {7: "expect('amount >= 0') failed", 9: "row count dropped"}
    assert 7 in read
    assert 8 not in read


def test_lifting_a_quarantine_keeps_the_others_and_changes_nothing_in_place() -> None:
    records = Quarantine.from_props(
        {
            PROP_QUARANTINE: json.dumps(
                {"3": {"reason": "a", "at": "x"}, "4": {"reason": "b", "at": "y"}}
            )
        }
    )
    lifted = records.without([3, 5])
    assert lifted.reasons() == {4: "b"}
    assert records.reasons() == {3: "a", 4: "b"}
    assert Quarantine.from_props({}).reasons() == {}
    assert Quarantine.from_props(lifted.without([4]).to_props()).reasons() == {}
